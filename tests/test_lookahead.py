"""The model's batch plan over a file's chunks (mixer.prediction.predict_job.Window): the new
inputs of a window of chunks go to the model in one call (one batch plan, made in groups of
its batches), sorted by length and batched together, so a file's batches do not depend on
which chunk an input first came in (docs/performance.md, "The rows beyond the model")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mixer.cli.entrypoints import predict_main
from conftest import zipf_census


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture(scope="module")
def census(tmp_path_factory, small_csv) -> str:
    """600 rows drawn from 121 descriptions by a Zipf law, some without a description."""
    return zipf_census(tmp_path_factory, small_csv, 600, 5, 53)


def keys(run, census) -> list:
    """Each row's key as the job's store has it: (model input, blank description)."""
    import mixer

    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    inputs = mixer.load(run, device="cpu").model_inputs(frame["occ1"].tolist())
    return list(zip(inputs, frame["occ1"].str.strip().eq("")))


def new_per_chunk(run, census, chunk_size: int) -> list:
    """Per chunk, how many of its keys no earlier chunk holds."""
    seen, counts = set(), []
    every = keys(run, census)
    for start in range(0, len(every), chunk_size):
        chunk = dict.fromkeys(every[start : start + chunk_size])
        counts.append(len([k for k in chunk if k not in seen]))
        seen.update(chunk)
    return counts


def predict(run, census, out, chunk_size: int, *extra) -> None:
    args = ["--checkpoint", run, "--input", census, "--output", str(out)]
    args += ["--chunk-size", str(chunk_size), "--batch-size", "16", *extra]
    assert predict_main(args) == 0


def in_groups(inputs: int) -> list:
    """A window's call of `inputs` new inputs as the model makes it: in groups of
    GROUP_BATCHES batches of --batch-size 16 (mixer.prediction.predict_job.Window.call)."""
    from mixer.prediction.predict_job import GROUP_BATCHES

    most = GROUP_BATCHES * 16
    return [most] * (inputs // most) + ([inputs % most] if inputs % most else [])


def test_the_new_inputs_of_a_window_of_chunks_go_to_the_model_in_one_batch_plan(
    run, census, tmp_path, model_rows
):
    # 12 chunks of 50 rows, fewer than a window holds: one batch plan for the file's distinct
    # inputs, made in groups of consecutive batches
    predict(run, census, tmp_path / "out.csv", 50, "--head", "flat")
    assert model_rows == in_groups(len(set(keys(run, census))))
    assert len(new_per_chunk(run, census, 50)) == 12


@pytest.mark.parametrize(
    "most_chunks, most_batches, most_rows", [(4, 64, 10**6), (16, 1, 10**6), (16, 64, 150)]
)
def test_a_window_closes_at_its_chunks_its_batches_of_new_inputs_or_its_rows(
    run, census, tmp_path, model_rows, monkeypatch, most_chunks, most_batches, most_rows
):
    from mixer.prediction import predict_job

    monkeypatch.setattr(predict_job, "LOOKAHEAD_CHUNKS", most_chunks)
    monkeypatch.setattr(predict_job, "LOOKAHEAD_BATCHES", most_batches)
    monkeypatch.setattr(predict_job, "LOOKAHEAD_ROWS", most_rows)
    predict(run, census, tmp_path / "out.csv", 50, "--head", "flat")
    windows, held, pending = [], 0, 0  # the rule, over the chunks' new inputs
    for new in new_per_chunk(run, census, 50):
        if not held and not new:
            continue  # written at once
        held, pending = held + 1, pending + new
        if held >= most_chunks or pending >= most_batches * 16 or held * 50 >= most_rows:
            windows.append(pending)
            held = pending = 0
    windows += [pending] if held else []
    assert model_rows == [n for window in windows for n in in_groups(window)] and len(windows) > 1


@pytest.mark.floats
def test_a_file_is_written_the_same_whatever_its_chunks_within_a_window(run, census, tmp_path):
    # the same batches, so the same bits: codes, probabilities, confidences and embeddings
    outputs = {}
    for size in (50, 1000):
        out = tmp_path / f"out{size}.csv"
        predict(run, census, out, size, "--head", "flat", "seq2seq", "--embeddings", f"{out}.npy")
        outputs[size] = out.read_bytes(), np.load(f"{out}.npy")
    assert outputs[50][0] == outputs[1000][0]
    assert np.array_equal(outputs[50][1], outputs[1000][1])


def test_a_signal_while_chunks_are_held_leaves_them_and_the_same_command_ends_the_same(
    run, census, tmp_path, monkeypatch, capsys
):
    from mixer.prediction import predict_job

    monkeypatch.setattr(predict_job, "LOOKAHEAD_CHUNKS", 4)
    whole, cut = tmp_path / "whole.csv", tmp_path / "cut.csv"
    predict(run, census, whole, 50, "--head", "flat")
    asked = []

    def signal_at_the_fifth(self, world):  # chunks 0-2 held, 3 closes the window, 4 held, 5 held
        asked.append(True)
        return len(asked) == 5

    with monkeypatch.context() as patched:
        patched.setattr(predict_job.StopRequest, "asked", signal_at_the_fifth)
        predict(run, census, cut, 50, "--head", "flat")
    assert "stopped after 4 chunk(s) (200 rows) on a signal" in capsys.readouterr().err
    assert not cut.exists()
    predict(run, census, cut, 50, "--head", "flat")
    assert "continuing an unfinished run after its 4 chunk(s) (200 rows" in capsys.readouterr().out
    assert cut.read_bytes() == whole.read_bytes()


def test_the_batch_plan_benchmark_counts_a_file_within_a_window_as_one_call(run, census):
    """benchmarks/batch_plan.py: the encoder's calls, batches and padded tokens of a file,
    counted without running the encoder, beside one call's over the same inputs."""
    from conftest import run_program

    printed = run_program(
        "benchmarks/batch_plan.py",
        *["--checkpoint", run, "--input", census, "--chunk-size", 50, "--batch-size", 16],
    ).stdout
    inputs = len(set(keys(run, census)))
    calls = len(in_groups(inputs))  # one call's batches, made in groups of them
    assert f"encoder calls: {calls}; batches: {-(-inputs // 16)}; inputs: {inputs}" in printed
    assert "this plan: 1.000x" in printed

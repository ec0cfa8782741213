"""New heads on OccCANINE's encoder (--initial-checkpoint an OccCANINE model, --only-encoder):
by default their decoder masks the input's padding, so batches are padded as far as their
rows need (mixer.data.inputs.padding), in training, evaluation and prediction; `--new-heads
occcanine` keeps OccCANINE's form (all 128 positions read), the only one the export writes.

The OccCANINE model is the one tests/test_occcanine.py builds (a small CANINE in its
layout, generated weights). Exactness is shown as for mixer's own heads: length groups,
2 processes under torchrun and a killed and resumed run learn the same weights."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

import pandas as pd
import pytest
import yaml

from conftest import (
    ROOT,
    TRAINED_WEIGHTS_ATOL,
    assert_floats_close,
    assert_same_metrics,
    max_difference,
    run,
    run_program,
    start,
    torchrun_cmd,
    wait_for_line,
    weights,
)
from occcanine_reference import TEXTS

# dropout on (the recipe's 0.1 in the encoder, and 0.1 in the new heads too, which the recipe
# leaves at 0: keyed by the row, mixer.models.keyed_dropout) and a fixed seed; training noise
# on (the recipe's), so rows differ in length
FAST = [
    "--only-encoder",
    "--head-dropout",
    "0.1",
    "--seed",
    "5",
    "--max-steps",
    "6",
    "--eval-interval",
    "3",
    "--share-val",
    "0.09",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    "--language",
    "en",
    "--log-interval",
    "1",
    "--save-interval",
    "1",
]


def fast_cmd(small_csv, hisco_model, run_dir, *extra) -> list:
    return [
        "--dataset",
        small_csv,
        "--initial-checkpoint",
        hisco_model["bin"],
        *FAST,
        "--save-path",
        run_dir,
        *map(str, extra),
    ]


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory, small_csv, hisco_model):
    """One process, batch 8, each micro-batch padded whole: the reference."""
    out = tmp_path_factory.mktemp("fast") / "run"
    proc = run_program(
        "finetune.py",
        *fast_cmd(small_csv, hisco_model, out, "--batch-size", 8, "--length-groups", 1),
    )
    return out, proc


def test_new_heads_read_only_the_characters_by_default(fast_run):
    out, proc = fast_run
    assert "new heads (--new-heads fast): their decoder reads only the characters" in proc.stdout
    assert "recipe: OccCANINE fine-tuning" in proc.stdout  # the recipe and input are OccCANINE's
    assert "padded to what the longest row of each batch needs (characters read" in proc.stdout
    assert "padded to 128" not in proc.stdout
    config = json.load(open(out / "config.json"))
    assert (
        config["heads"]["family"] == "occcanine"
        and config["heads"]["decoder_reads_padding"] is False
    )
    assert yaml.safe_load(open(out / "args.yaml"))["model"]["new_heads"] == "fast"


@pytest.mark.floats
def test_length_groups_processes_and_a_kill_change_only_rounding(
    fast_run, small_csv, hisco_model, tmp_path
):
    reference = weights(fast_run[0])
    grouped = run_program(
        "finetune.py",
        *fast_cmd(
            small_csv, hisco_model, tmp_path / "grouped", "--batch-size", 8, "--length-groups", 3
        ),
    )
    assert "cut into at most 3 groups of similar length" in grouped.stdout
    two = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            *map(
                str,
                fast_cmd(
                    small_csv,
                    hisco_model,
                    tmp_path / "two",
                    "--batch-size",
                    4,
                    "--length-groups",
                    3,
                ),
            ),
        ]
    )
    assert "cut into at most 3 groups of similar length" in two.stdout + two.stderr
    killed = tmp_path / "killed"
    args = fast_cmd(small_csv, hisco_model, killed, "--batch-size", 8)
    proc = start([sys.executable, os.path.join(ROOT, "finetune.py"), *map(str, args)])
    wait_for_line(proc, "step 3")  # steps 1 and 2 are saved (--save-interval 1)
    proc.kill()
    proc.communicate()
    assert (killed / "last.pt").exists() and not (killed / "model.safetensors").exists()
    resumed = run_program("finetune.py", *args)
    assert "resuming from" in resumed.stdout
    for run_dir in (tmp_path / "grouped", tmp_path / "two", killed):
        assert max_difference(reference, weights(run_dir)) < TRAINED_WEIGHTS_ATOL, run_dir
    for run_dir in (tmp_path / "grouped", tmp_path / "two"):  # and evaluate alike, every row once
        assert_same_metrics(str(fast_run[0]), str(run_dir))


@pytest.mark.floats
def test_predictions_at_the_rule_are_those_at_128_characters(fast_run, toy_frame, monkeypatch):
    """Flat, greedy and full: the same codes as with every input padded to 128, the
    probabilities within float rounding; greedy batches are padded as their rows need."""
    import mixer
    from mixer.data.inputs.padding import EVERY_POSITION
    from mixer.prediction.predict import Predictor

    texts = list(toy_frame["occ1"].iloc[:60]) + TEXTS
    model = mixer.load(str(fast_run[0]), device="cpu")
    assert model._predictor.padding(states=True).length(20) < 128
    ours = {
        head: model.predict(texts, lang="en", head=head) for head in ("flat", "seq2seq", "full")
    }
    original = Predictor.padding
    monkeypatch.setattr(
        Predictor,
        "padding",
        lambda self, states: dataclasses.replace(original(self, states), reads=EVERY_POSITION),
    )
    assert model._predictor.padding(states=True).length(20) == 128
    for head, got in ours.items():
        full = model.predict(texts, lang="en", head=head)
        codes = [c for c in got.columns if c.startswith("code_")]
        pd.testing.assert_frame_equal(got[codes], full[codes])
        probs = [c for c in got.columns if c.startswith("prob_")]
        assert_floats_close(got[probs].to_numpy(float), full[probs].to_numpy(float))


def test_the_export_refuses_fast_heads_naming_the_option(fast_run, tmp_path):
    out = tmp_path / "hub"
    proc = run_program(os.path.join("mixer", "export_occcanine.py"), fast_run[0], out, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--new-heads fast" in lines[0] and "train the run with --new-heads occcanine" in lines[0]
    assert not out.exists()  # nothing written


def test_a_run_from_before_the_choice_keeps_reading_every_position(
    fast_run, small_csv, hisco_model, tmp_path
):
    """A config.json without decoder_reads_padding and an args.yaml without new_heads are
    of a run whose new heads were OccCANINE's form: predicted, exported and resumed so."""
    import mixer
    from mixer.cli.export_occcanine import export

    old = tmp_path / "old"
    shutil.copytree(fast_run[0], old)
    for name in ("config.json", os.path.join("best", "config.json")):
        if (old / name).exists():
            config = json.load(open(old / name))
            del config["heads"]["decoder_reads_padding"]
            (old / name).write_text(json.dumps(config))
    args = yaml.safe_load(open(old / "args.yaml"))
    del args["model"]["new_heads"]
    (old / "args.yaml").write_text(yaml.safe_dump(args, sort_keys=False))
    assert mixer.load(str(old), device="cpu")._predictor.padding(states=True).fixed
    assert "model.safetensors" in export(str(old), str(tmp_path / "hub"))
    proc = run_program("finetune.py", *fast_cmd(small_csv, hisco_model, old, "--batch-size", 8))
    assert "resuming from" in proc.stdout and "new heads (--new-heads occcanine)" in proc.stdout
    assert "micro-batches padded whole: inputs padded to 128 characters" in proc.stdout
    refused = run_program(
        "finetune.py",
        *fast_cmd(small_csv, hisco_model, old, "--batch-size", 8, "--new-heads", "fast"),
        check=False,
    )
    assert refused.returncode == 2 and "trains heads of the form occcanine" in refused.stderr


def test_the_choice_is_refused_where_there_are_no_new_heads_on_occcanine_s_encoder(
    small_csv, hisco_model, tmp_path
):
    from conftest import TINY

    cases = {
        "finetune.py": [
            "--dataset",
            small_csv,
            "--target-cols",
            "hisco_1",
            *TINY,
            "--new-heads",
            "occcanine",
        ],
        "train_mixer.py": [
            "--train-data",
            small_csv,
            "--val-data",
            small_csv,
            "--formatter",
            "hisco",
            "--allow-codes-shorter-than-block-size",
            "--initial-checkpoint",
            hisco_model["hub"],
            "--new-heads",
            "fast",
        ],
    }
    for program, args in cases.items():
        out = tmp_path / program
        flag = "--save-dir" if program == "train_mixer.py" else "--save-path"
        proc = run_program(program, *args, flag, out, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert (
            "only new heads on OccCANINE's encoder" in lines[0] and "leave the flag out" in lines[0]
        )
        assert not out.exists()

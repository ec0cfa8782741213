"""The best model and early stopping (docs/training.md, "When to stop and what to keep";
the ETA and the model card have their own files, test_eta.py and test_card.py).

One reference run, 2 processes under torchrun, keeps its best by val_loss and stops
early on every rank. One process chooses the same best step, is killed between the
training state's commit of that best and the best model's write, resumes in another
layout and reaches the reference's best model and stop. The rules themselves (the
verdict, the model directory's swap) are tested as plain functions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import (
    ROOT,
    TINY,
    TRAINED_METRICS_ATOL,
    TRAINED_WEIGHTS_ATOL,
    env_for_subprocess,
    fails,
    max_difference,
    run,
    torchrun_cmd,
)
from mixer.core.errors import UserError

# Every evaluation reads a sample of 8 of the 11 validation rows, on which val_loss falls to
# its lowest at step 18 and rises after. It falls by 0.02 at step 16, by 0.01 at step 18:
# with --early-stopping-min-delta 0.015 step 18 is the best but not an improvement, so the
# patience count is already 1 there; with an evaluation every 2 steps and patience 3 the
# run stops at step 22 of 60. At the end the last step's weights and the best are scored
# on every row, each with the thresholds tuned on its own outputs.
KEEP = [
    "--dataset",
    None,
    "--dropout",
    "0",
    "--seed",
    "9",
    "--share-val",
    "0.09",
    "--language",
    "en",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    *TINY,
    "--max-steps",
    "60",
    "--eval-interval",
    "2",
    "--keep-best",
    "val_loss",
    "--early-stopping-patience",
    "3",
    "--early-stopping-min-delta",
    "0.015",
    "--val-max-rows",
    "8",
    "--full-val-at-end",
    "--tune-threshold",
]
BEST_STEP, BEST_EPOCH, STOP_STEP = 18, 1, 22


def keep_args(csv, run_dir, *extra) -> list:
    args = list(KEEP)
    args[1] = str(csv)
    return args + ["--save-path", str(run_dir), *map(str, extra)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_csv):
    """torchrun, 2 processes of batch 4 (global batch 8): rank 0 judges the all-reduced
    metrics and every rank gets its verdict. Its output is a pipe, as in a Slurm job whose
    end is a day away."""
    out = tmp_path_factory.mktemp("reference") / "run"
    env = dict(
        env_for_subprocess(), SLURM_JOB_ID="4242", SLURM_JOB_END_TIME=str(int(time.time()) + 86_400)
    )
    proc = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            *keep_args(small_csv, out, "--batch-size", 4),
        ],
        env=env,
    )  # every rank exits 0
    return out, proc.stdout


def best_record(run_dir) -> dict:
    with open(os.path.join(run_dir, "best", "config.json")) as handle:
        return json.load(handle)["weights"]


def progress_of(run_dir) -> dict:
    """last.pt's progress, with the KeepBest hook's own state (the best's record and the
    patience count) beside it."""
    state = torch.load(os.path.join(run_dir, "last.pt"), weights_only=True)
    return dict(state["progress"], **state["hooks"]["keep the best model"])


def assert_reaches_the_reference(reference_dir, run_dir, tolerance=TRAINED_WEIGHTS_ATOL):
    record, expected = best_record(run_dir), best_record(reference_dir)
    assert (
        (record["step"], record["epoch"])
        == (expected["step"], expected["epoch"])
        == (BEST_STEP, BEST_EPOCH)
    )
    assert record["value"] == pytest.approx(expected["value"], abs=TRAINED_METRICS_ATOL)
    assert (
        max_difference(
            load_file(os.path.join(reference_dir, "best", "model.safetensors")),
            load_file(os.path.join(run_dir, "best", "model.safetensors")),
        )
        <= tolerance
    )
    progress = progress_of(run_dir)
    assert progress["step"] == STOP_STEP and progress["evals_since_best"] == 3
    assert progress["stop_reason"].startswith("early stopping: val_loss did not improve")
    logs, want = (
        pd.read_csv(os.path.join(run_dir, "logs.csv")),
        pd.read_csv(os.path.join(reference_dir, "logs.csv")),
    )
    assert (
        logs["step"].tolist()
        == want["step"].tolist()
        == list(range(2, STOP_STEP + 1, 2)) + [STOP_STEP]
    )
    np.testing.assert_allclose(logs["val_loss"], want["val_loss"], atol=TRAINED_METRICS_ATOL)


# ------------------------------------------------------------------ one process
def test_the_best_evaluation_is_kept_and_every_rank_stops_when_it_no_longer_improves(reference):
    out, stdout = reference
    logs = pd.read_csv(out / "logs.csv")
    chosen_on = logs[logs["val_rows"] == 8]  # the sample; the final evaluation reads all 11 rows
    assert len(chosen_on) == len(logs) - 1 and logs["val_rows"].iloc[-1] == 11
    assert (
        chosen_on["step"][chosen_on["val_loss"].idxmin()] == BEST_STEP
    )  # the lowest, not the last
    assert_reaches_the_reference(out, out, tolerance=0)
    assert (
        stdout.count("stopping at step 22: early stopping: val_loss did not improve on") == 1
    )  # rank 0
    assert "by at least 0.015 in 3 evaluation(s)" in stdout
    eval_lines = {
        line.split(":")[0]: line for line in stdout.splitlines() if line.startswith("eval step ")
    }
    # every line names the epoch of the step from 1, as the progress lines do (13.75 steps an epoch)
    best_line = eval_lines[
        "eval step 18 (epoch 2)"
    ]  # the new best's value, as the evaluation shows it
    assert re.search(r"; new best val_loss (\d+\.\d{4})$", best_line).group(1) == re.search(
        r": loss (\d+\.\d{4})", best_line
    ).group(1)
    assert eval_lines["eval step 20 (epoch 2)"].endswith(
        "; 2 of 3 evaluation(s) without improvement"
    )
    assert "step 20: 20/60 steps, epoch 2/5, " in stdout
    assert "(step 18, epoch 2) by at least 0.015" in stdout
    last, best = load_file(out / "model.safetensors"), load_file(out / "best" / "model.safetensors")
    assert max_difference(last, best) > 1e-4  # two models: the last step's and the best
    with open(out / "config.json") as handle:
        assert json.load(handle)["weights"] == {
            "kind": "last",
            "step": STOP_STEP,
            "epoch": 1,
            "place": [1, 64],
        }
    with open(out / "best" / "config.json") as handle:
        stored = json.load(handle)
    assert stored["weights"]["metrics"]["val_rows"] == 11  # scored on every row at the end ...
    assert (
        stored["thresholds_from"] == "tuned for these weights on the validation rows"
    )  # ... tuned for it
    assert (
        f"tuned flat thresholds (best F1 on the validation rows; stored in {out}/best/config.json)"
        in stdout
    )
    for name in (
        "model.safetensors",
        "config.json",
        "key.csv",
        "encoder",
        "tokenizer",
        "evaluation.csv",
        "README.md",
    ):
        assert os.path.exists(out / "best" / name), name
    assert not [f for f in os.listdir(out) if f.startswith(".")]
    assert pd.read_csv(out / "best" / "evaluation.csv")["n"].max() == 11
    assert "validation of the best model (step 18, epoch 2" in stdout
    assert "validation of the last step's weights (step 22" in stdout


def test_plain_progress_lines_say_where_the_run_is_and_how_long_it_has_left(reference):
    _, stdout = reference
    lines = [line for line in stdout.splitlines() if line.startswith("step 15: ")]
    assert len(lines) == 1, stdout
    line = lines[0]
    assert line.startswith("step 15: 15/60 steps, epoch 2/5, loss ")
    assert ", elapsed 0:00:" in line and ", remaining 0:" in line
    assert line.endswith("(early stopping may end it sooner)")
    slurm = [line for line in stdout.splitlines() if line.startswith("Slurm job 4242: ")]
    assert len(slurm) == 1 and slurm[0].endswith("more: it should end in this job"), stdout


def test_predict_and_the_api_use_the_best_and_say_so(reference, small_csv, tmp_path, capsys):
    import mixer
    from mixer.core.config import RunConfig
    from mixer.models.sources import resolve_start

    out, _ = reference
    texts = ["farmer", "fisherman", "wine merchant"]
    kept = mixer.load(str(out), device="cpu").predict(texts)
    said = capsys.readouterr().err
    assert f"model: {out}/best: the best evaluation of its run by val_loss" in said
    assert (
        f"at step {BEST_STEP}, epoch 2); the weights of its last step: --checkpoint {out}/model.safetensors"
        in said
    )
    pd.testing.assert_frame_equal(kept, mixer.load(str(out / "best"), device="cpu").predict(texts))
    assert (
        f"the weights of its last step: --checkpoint {out}/model.safetensors"
        in capsys.readouterr().err
    )
    last = mixer.load(str(out / "model.safetensors"), device="cpu").predict(texts)
    assert (
        f"model: {out}/model.safetensors: the weights of its run's last step (step 22"
        in capsys.readouterr().err
    )
    assert not np.allclose(kept["prob_1"].astype(float), last["prob_1"].astype(float))
    from mixer.cli.entrypoints import predict_main

    predict_main(
        ["--checkpoint", str(out), "--input", str(small_csv), "--output", str(tmp_path / "p.csv")]
    )
    first = capsys.readouterr().out.splitlines()[0]  # stdout, beside how the input was read
    assert first.startswith(f"model: {out}/best: the best evaluation of its run by val_loss")
    config = RunConfig()
    config.model.initial_checkpoint = str(out)  # a new run starts from the best too
    assert resolve_start(config).run_dir == os.path.join(str(out), "best")


@pytest.mark.parametrize("named", ["", "best", "best/model.safetensors"])
def test_a_load_names_the_weights_it_read_while_a_run_replaces_its_best(
    reference, tmp_path, capsys, monkeypatch, named
):
    """best/ replaced by a newer best between the read of its config.json and of its
    weights: the load reads again and names what it loaded. A best/ a kill left aside
    (between the two renames of a swap) is read there. Alike whether the run directory
    or its best itself is named (as the best's model card names it)."""
    import safetensors.torch

    import mixer

    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    newer = tmp_path / "newer"
    shutil.copytree(run_dir / "best", newer)
    config = json.loads((newer / "config.json").read_text())
    config["weights"].update(step=20, value=0.5)
    (newer / "config.json").write_text(json.dumps(config))
    weights = load_file(newer / "model.safetensors")
    weights = {
        name: tensor + 1 if name == "flat_head.bias" else tensor for name, tensor in weights.items()
    }
    safetensors.torch.save_file(weights, newer / "model.safetensors")
    real_load, loads = safetensors.torch.load_file, []

    def swapped_first(path, *args, **kwargs):  # the run swaps in its new best/ just now
        if not loads:
            os.rename(run_dir / "best", run_dir / ".best.old")
            os.rename(newer, run_dir / "best")
            shutil.rmtree(run_dir / ".best.old")
        loads.append(path)
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "load_file", swapped_first)
    source = str(run_dir / named) if named else str(run_dir)
    model = mixer.load(source, device="cpu")
    monkeypatch.undo()
    assert len(loads) == 2 and "(0.5000 at step 20, epoch 2)" in capsys.readouterr().err
    loaded = model._predictor.model.state_dict()
    assert torch.equal(loaded["flat_head.bias"], weights["flat_head.bias"])
    os.rename(
        run_dir / "best", run_dir / ".best.old"
    )  # killed between the renames of the next swap
    mixer.load(source, device="cpu")
    assert (
        f"model: {run_dir}/.best.old: the best evaluation of its run by val_loss (0.5000 at step 20, epoch 2) "
        f"(the best model an interrupted write left aside; the run puts it back as {run_dir}/best when it "
        "continues)"
    ) in capsys.readouterr().err
    if named:  # a run without a best: its best named is not read as its last step's weights
        shutil.rmtree(run_dir / ".best.old")
        with pytest.raises(UserError, match="no such run directory or model file"):
            mixer.load(source, device="cpu")


def test_the_model_card_says_what_the_run_measured(reference, small_csv):
    from mixer.reporting.metrics import Thresholds

    out, _ = reference
    text = (out / "README.md").read_text()
    header, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    meta = yaml.safe_load(header)
    assert meta["library_name"] == "mixer" and meta["language"] == ["en"]
    metrics = {m["name"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    record = best_record(out)["metrics"]
    assert metrics["flat head accuracy"] == round(record["val_flat_accuracy"], 4)
    assert metrics["seq2seq head f1 (noised)"] == round(record["val_noisy_seq2seq_f1"], 4)
    assert (
        "python finetune.py --distributed --dataset" in body
        and "--early-stopping-min-delta 0.015" in body
    )
    assert (
        "Launched by torchrun as 2 processes (1 node(s) x 2): each process ran this command."
        in body
    )
    assert (
        f"{best_record(out)['value']:.4f} at step 18 (epoch 2) (on the 8 validation rows every evaluation "
        "read; the figures below were measured again at the end, on 11 rows)"
    ) in body
    assert "| batch | 8 (2 process(es) x 4 rows x 1 accumulation step(s))" in body
    assert f"Measured at step {BEST_STEP} on 11 validation rows" in body
    assert "110 training, 11 validation" in body and "en 110 (training rows)" in body
    with open(out / "prepared.json") as handle:
        assert json.load(handle)["digest"] in body
    assert f"| loss | {record['val_loss']:.4f} |" in body
    assert "Training ended at step 22 of 60 planned" in body and "early stopping" in body
    assert "score it optimistically" in body
    with open(out / "best" / "config.json") as handle:
        stored = json.load(handle)
    assert Thresholds.of(stored["threshold"], stored["thresholds"]).describe() in body
    assert f"python predict.py --checkpoint {out} --input" in body
    # the two cards differ in where they are: paths, and the links to the best's files (issue 37's scores)
    assert "](best/production_curve_flat.png)" in text and "(`best/scores.parquet`)" in text
    assert (out / "best" / "README.md").read_text().replace(f"{out}/best", str(out)) == (
        text.replace("](best/", "](")
        .replace("`best/scores", "`scores")
        .replace("`best/calibration", "`calibration")
    )


def test_a_resume_with_another_metric_is_refused_before_anything_changes(
    reference, small_csv, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    args = keep_args(small_csv, run_dir, "--batch-size", 8)
    args[args.index("val_loss")] = "val_flat_accuracy"
    fails(
        capsys,
        "finetune",
        args,
        "keeps its best model by val_loss",
        "--keep-best val_loss",
        watch=run_dir,
    )
    without = keep_args(small_csv, run_dir, "--batch-size", 8)
    cut = without.index("--keep-best")
    fails(
        capsys,
        "finetune",
        without[:cut] + without[cut + 6 :],
        "resume with --keep-best val_loss",
        watch=run_dir,
    )


def without(args: list, flag: str, values: int = 1) -> list:
    cut = args.index(flag)
    return args[:cut] + args[cut + 1 + values :]


def test_a_resume_that_would_measure_the_best_otherwise_is_refused_before_anything_changes(
    reference, small_csv, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    fails(
        capsys,
        "finetune",
        keep_args(small_csv, run_dir, "--batch-size", 8, "--val-max-rows", 9),
        f"keeps its best model by val_loss as measured on 8 validation rows ({run_dir}/best, step 18); "
        "this run would measure it on 9, which does not compare with it: resume with --val-max-rows 8, "
        f"or move {run_dir}/best away",
        watch=run_dir,
    )
    fails(
        capsys,
        "finetune",
        keep_args(small_csv, run_dir, "--batch-size", 8, "--seq2seq-weight", 0.9),
        "as measured with --seq2seq-weight 0.1",
        "resume with --seq2seq-weight 0.1",
        watch=run_dir,
    )


def test_which_settings_a_kept_metric_depends_on():
    from mixer.core.config import TrainConfig
    from mixer.reporting.metrics import Thresholds
    from mixer.training.best.keeper import changed_condition, conditions

    base = TrainConfig(val_max_rows=200, seq2seq_weight=0.1, eval_noise=2)
    was = conditions(base, np.arange(200), Thresholds.of(0.5))

    def changed(metric, cfg=base, sample=np.arange(200), thresholds=Thresholds.of(0.5)):
        return changed_condition(metric, was, conditions(cfg, sample, thresholds))

    for metric in ("val_loss", "val_flat_f1", "val_token_accuracy", "val_noisy_seq2seq_accuracy"):
        assert changed(metric) is None
        assert (
            changed(metric, sample=np.arange(1, 201))[1] == "on another sample of them"
        )  # every metric
    assert (
        changed("val_loss", TrainConfig(val_max_rows=200, seq2seq_weight=0.9, eval_noise=2))
        is not None
    )
    assert (
        changed("val_flat_loss", TrainConfig(val_max_rows=200, seq2seq_weight=0.9, eval_noise=2))
        is None
    )
    assert changed("val_flat_f1", thresholds=Thresholds.of(0.4))[0] == "with flat thresholds 0.5"
    assert (
        changed("val_noisy_flat_accuracy", thresholds=Thresholds.of(0.5, {"en": 0.3})) is not None
    )
    assert changed("val_seq2seq_accuracy", thresholds=Thresholds.of(0.4)) is None
    assert (
        changed("val_noisy_seq2seq_f1", TrainConfig(val_max_rows=200, eval_noise=3))[2]
        == "--eval-noise 2"
    )
    assert changed("val_seq2seq_f1", TrainConfig(val_max_rows=200, eval_noise=3)) is None
    assert (
        changed_condition("val_loss", None, was) is None
    )  # recorded before conditions were: not checked


def test_moving_the_best_model_away_lets_the_run_continue_without_it(
    reference, small_csv, tmp_path, capsys
):
    """RUN/best moved away, the finished reference run again: without --keep-best it ends
    without a best (its cards and final lines name none), with another metric it keeps
    its best afresh; neither is refused, and the state forgets the best it recorded."""
    from mixer.cli.entrypoints import finetune_main

    args = keep_args(small_csv, None, "--batch-size", 8)
    no_best = without(
        without(without(args, "--keep-best"), "--early-stopping-patience"),
        "--early-stopping-min-delta",
    )
    other = list(args)
    other[other.index("val_loss")] = "val_flat_accuracy"
    for name, argv in (("none", no_best), ("other", other)):
        run_dir = tmp_path / name
        shutil.copytree(reference[0], run_dir)
        shutil.move(run_dir / "best", tmp_path / f"{name}-best")
        argv[argv.index("--save-path") + 1] = str(run_dir)
        assert finetune_main(argv) == 0
        out = capsys.readouterr().out
        assert (
            f"{run_dir}/best was moved away: the best the training state records (val_loss "
            f"{best_record(reference[0])['value']:.4f} at step 18) is dropped; "
        ) in out
        assert (
            progress_of(run_dir)["best"] is None and progress_of(run_dir)["evals_since_best"] == 0
        )
        assert not (run_dir / "best").exists() and "validation of the best model" not in out
        assert "The weights of the run's last step, step 22" in (run_dir / "README.md").read_text()
    assert "is dropped; this run keeps its best by val_flat_accuracy afresh" in out


def test_a_full_disk_is_one_line_and_leaves_the_files_as_they_were(
    reference, small_csv, tmp_path, capsys, monkeypatch
):
    import safetensors.torch

    from mixer.core.io import disk_full

    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    before = {name: (run_dir / name).read_bytes() for name in ("model.safetensors", "config.json")}
    best_before = (run_dir / "best" / "model.safetensors").read_bytes()

    def full(*_args, **_kwargs):  # as safetensors says it
        raise safetensors.SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    fails(
        capsys,
        "finetune",
        keep_args(small_csv, run_dir, "--batch-size", 8),
        f"{run_dir}: the disk is full (no space left on the device) while writing the run",
        "run the same command again to continue",
    )
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    assert (run_dir / "best" / "model.safetensors").read_bytes() == best_before
    assert not [f for f in os.listdir(run_dir) if f.startswith(".")]
    # torch.save into a file says only "unexpected pos"; the file's own write says ENOSPC
    try:
        try:
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
            )
        finally:
            raise OSError(28, "No space left on device")
    except OSError as exc:
        assert disk_full(RuntimeError("while saving")) is None
        assert disk_full(exc) == "no space left on the device"
        assert disk_full(OSError(122, "Disk quota exceeded")) == "disk quota exceeded"


def test_a_second_run_in_a_directory_is_refused_and_a_dead_runs_lock_taken_over(
    reference, small_csv, tmp_path, capsys
):
    import socket

    from mixer.distributed import runlock

    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    lock = run_dir / ".lock"
    host = socket.gethostname()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = dict(
            runlock.holder(),
            pid=sleeper.pid,
            start=runlock.process_start(sleeper.pid),
            since="then",
        )
        lock.write_text(json.dumps(live))
        fails(
            capsys,
            "finetune",
            keep_args(small_csv, run_dir, "--batch-size", 8),
            f"{run_dir} is in use by another run (process {sleeper.pid} on host {host}, since then)",
            f"remove {lock} and run again",
            watch=run_dir,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    said = []
    taken = runlock.acquire(str(run_dir), said.append)  # its process has ended: a kill -9 left it
    assert said == [
        f"took over {lock} from process {sleeper.pid} on host {host}: its process {sleeper.pid} on "
        "this host has ended"
    ]
    taken.release()
    assert os.listdir(run_dir) == os.listdir(reference[0])  # nothing left behind
    runlock.acquire(
        str(tmp_path / "new" / "run"), said.append
    ).release()  # a run refused for its input
    assert not (tmp_path / "new").exists()  # leaves no directory

    def squeue(state, code=0):
        return lambda *_a, **_k: subprocess.CompletedProcess(
            [], code, state, "Invalid job id specified" if code else ""
        )

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\n")
    (bin_dir / "squeue").chmod(0o755)
    env = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "PATH": str(bin_dir)}
    elsewhere = {
        "host": "node-b",
        "pid": 1,
        "start": None,
        "job": None,
        "restart": "0",
        "since": "then",
    }
    cases = [
        (
            elsewhere,
            None,
            "process 1 on host node-b, since then",
        ),  # another host, no Slurm job: cannot tell
        (
            dict(elsewhere, job="7"),
            None,
            "an earlier run of this Slurm job (7, before its requeue)",
        ),
        (dict(elsewhere, job="5"), squeue("RUNNING\n"), "process 1 on host node-b, Slurm job 5"),
        (dict(elsewhere, job="5"), squeue("", 1), "its Slurm job 5 is no longer listed"),
        (dict(elsewhere, job="5"), squeue("CANCELLED\n"), "its Slurm job 5 is CANCELLED"),
    ]
    for other, squeue_run, expected in cases:
        lock.write_text(json.dumps(other))
        if expected.startswith("process"):  # it may still run
            with pytest.raises(UserError, match=expected):
                runlock.acquire(str(run_dir), said.append, env=env, run=squeue_run)
            continue
        runlock.acquire(str(run_dir), said.append, env=env, run=squeue_run).release()
        assert said[-1].endswith(expected) and not lock.exists()


# ------------------------------------------------------------------ processes, layouts, kills
KILL_AT_THE_BEST = """
import os, signal, sys
sys.path.insert(0, {root!r})
import mixer.training.best.keeper as best

def killed(self, model, record):  # the training state has committed the new best; best/ has not
    if record["step"] == {step}:
        os.kill(os.getpid(), signal.SIGKILL)
    return write(self, model, record)

write, best.BestKeeper.write = best.BestKeeper.write, killed
from mixer.cli.entrypoints import finetune_cli
finetune_cli()
"""


@pytest.mark.floats
def test_one_process_chooses_the_same_best_and_a_kill_before_its_write_then_another_layout_keeps_it(
    reference, small_csv, tmp_path, capsys
):
    """One process of batch 4 with 2 accumulation steps chooses step 18 as 2 processes did
    and is killed after last.pt records it (and a patience count of 1; a new best writes
    last.pt whatever --save-interval says) and before best/ holds it: best/ is still the
    whole model of step 16. A resume with batch 8 writes the
    best from the weights it loaded (and the run's card, which named step 16), continues
    the count, and, after one more job, stops where the reference stopped, with its best
    model; the card names the three jobs and their layouts."""
    script = tmp_path / "kill.py"
    script.write_text(KILL_AT_THE_BEST.format(root=ROOT, step=BEST_STEP))
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            *keep_args(  # last.pt: at each new best only
                small_csv, out, "--batch-size", 4, "--grad-accum-steps", 2, "--save-interval", 1000
            ),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env_for_subprocess(),
        timeout=300,
    )
    assert proc.returncode == -9, proc.stdout + proc.stderr
    progress = progress_of(out)
    assert (progress["step"], progress["best"]["step"], progress["evals_since_best"]) == (
        BEST_STEP,
        BEST_STEP,
        1,
    )
    assert best_record(out)["step"] == 16  # the best model of the evaluation before, whole
    assert (
        max_difference(
            load_file(out / "best" / "model.safetensors"),
            load_file(reference[0] / "best" / "model.safetensors"),
        )
        > 1e-6
    )
    assert "at step 16 (epoch 2)" in (out / "README.md").read_text()
    from mixer.cli.entrypoints import finetune_main

    capsys.readouterr()
    assert (
        finetune_main(keep_args(small_csv, out, "--batch-size", 8, "--stop-at-step", 20)) == 0
    )  # in-process: faster
    stdout = capsys.readouterr().out
    assert "global batch" not in stdout.split("resuming from")[1].splitlines()[0]  # 4 x 2 = 8 x 1
    assert f"wrote {out}/best: the best model (step 18) the training state records" in stdout
    text = (out / "README.md").read_text()
    assert "at step 18 (epoch 2)" in text and "Training is in progress, at step 18 of 60" in text
    assert finetune_main(keep_args(small_csv, out, "--batch-size", 8)) == 0
    assert_reaches_the_reference(reference[0], out)  # another layout: equal up to float rounding
    assert not [f for f in os.listdir(out) if f.startswith(".")]
    text = (out / "README.md").read_text()
    assert "Made by 3 jobs" in text and "Steps 0 to 18:\n\n```bash\npython " in text
    assert "Steps 18 to 20:" in text and "--stop-at-step 20\n```\n\nSteps 20 to 22:" in text
    assert (
        "| batch | 8 (1 process(es) x 4 rows x 2 accumulation step(s)); precision fp32, weight decay 0.01 "
        "(steps 0 to 18); 8 (1 process(es) x 8 rows x 1 accumulation step(s)); precision fp32, weight decay "
        "0.01 (steps 18 to 22) |"
    ) in text


# ------------------------------------------------------------------ the rules
def test_the_verdict_direction_ties_nan_min_delta_and_replayed_evaluations():
    from mixer.training.best.keeper import judge

    def verdict(best, value, place, waited=0, metric="val_loss", patience=2, min_delta=0.0):
        return judge(best, waited, metric, value, place, patience, min_delta)

    best = {"value": 1.0, "place": [1, 0]}
    assert verdict(None, 5.0, (0, 8)).new_best
    assert not verdict(None, float("nan"), (0, 8)).new_best
    assert verdict(best, 0.9, (2, 0)).new_best and not verdict(best, 1.1, (2, 0)).new_best
    assert verdict(best, 1.1, (2, 0), metric="val_flat_accuracy").new_best  # accuracies rise
    assert not verdict(best, float("nan"), (2, 0)).new_best
    assert not verdict(best, 1.0, (2, 0)).new_best  # a tie keeps the earlier step ...
    assert verdict(best, 1.0, (0, 8)).new_best  # ... also when the later one was kept first
    late = verdict(best, 1.2, (2, 0), waited=1)
    assert (late.waited, late.stop) == (2, True)
    assert verdict(best, 1.2, (1, 0), waited=1).waited == 0  # the best's own evaluation, replayed
    assert verdict(best, 1.2, (0, 8), waited=1).waited == 0  # before the best: nothing to wait for
    small = verdict(best, 0.99, (2, 0), waited=1, min_delta=0.05)
    assert small.new_best and (small.waited, small.stop) == (
        2,
        True,
    )  # kept, but not an improvement
    assert verdict(best, 0.95, (2, 0), waited=1, min_delta=0.05).waited == 0
    assert not verdict(best, 1.2, (2, 0), waited=5, patience=None).stop


def test_patience_that_runs_out_at_the_planned_end_is_no_early_stop():
    from mixer.core.config import TrainConfig
    from mixer.distributed.world import World
    from mixer.training.best.keeper import BestKeeper
    from mixer.training.best.keeper import Standing as Progress

    keeper = BestKeeper(
        TrainConfig(keep_best="val_loss", early_stopping_patience=1),
        World(),
        "run",
        {},
        dict,
        print,
    )
    progress = Progress(
        step=20, epoch=2, best={"value": 1.0, "place": [1, 0], "step": 10, "epoch": 1}
    )
    assert keeper.judge(progress, {"val_loss": 2.0}, planned_end=True).stop is False
    assert progress.stop_reason is None and progress.evals_since_best == 1
    assert (
        keeper.judge(progress, {"val_loss": 2.0}).stop
        and "did not improve on 1.0000 (step 10" in progress.stop_reason
    )


def test_a_nan_evaluation_before_any_best_leaves_no_best_yet():
    from mixer.core.config import TrainConfig
    from mixer.distributed.world import World
    from mixer.training.best.keeper import BestKeeper
    from mixer.training.best.keeper import Standing as Progress

    keeper = BestKeeper(
        TrainConfig(keep_best="val_loss", early_stopping_patience=1),
        World(),
        "run",
        {},
        dict,
        print,
    )
    progress = Progress(step=1)
    for _ in range(3):  # NaN is never the best, and nothing to wait for
        verdict = keeper.judge(progress, {"val_loss": float("nan")})
        assert not verdict.new_best and not verdict.stop and progress.best is None
        assert (
            keeper.note(progress, verdict)
            == "no best val_loss yet: it was NaN, which is never the best"
        )


def test_the_metrics_one_can_keep_by_are_the_columns_a_run_logs(reference):
    from mixer.core.config import BEST_METRICS

    columns = {c for c in pd.read_csv(reference[0] / "logs.csv").columns if c.startswith("val_")}
    assert set(BEST_METRICS) == columns - {"val_rows"}
    assert {m for m, way in BEST_METRICS.items() if way == "min"} == {
        c for c in columns if c.endswith("loss")
    }


class Tiny(torch.nn.Module):
    def __init__(self, value: float):
        super().__init__()
        from mixer.models.model import HeadsConfig

        self.cfg = HeadsConfig(num_labels=2, vocab_size=3, target_len=2)
        self.weight = torch.nn.Parameter(torch.full((2,), value))


def test_a_model_directory_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from mixer.core.io import current_umask
    from mixer.models import model_dir

    run_dir = tmp_path / "run"
    for name in ("encoder", "tokenizer"):
        (run_dir / name).mkdir(parents=True)
        (run_dir / name / "config.json").write_text("{}")
    (run_dir / "key.csv").write_text("code,index,description\n")
    model_dir.write_model_dir(
        str(run_dir), "best", Tiny(1.0), {"weights": {"step": 1}}, {"README.md": "one"}
    )
    assert (
        os.stat(run_dir / "best").st_mode & 0o777 == 0o777 & ~current_umask()
    )  # readable by colleagues

    def weight():
        return float(load_file(run_dir / "best" / "model.safetensors")["weight"][0])

    real_rename, renames = os.rename, []

    def killed_after_one_rename(src, dst):  # the old directory aside, the new one not yet in place
        renames.append(dst)
        if len(renames) == 2:
            raise KeyboardInterrupt("killed")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", killed_after_one_rename)
    with pytest.raises(KeyboardInterrupt):
        model_dir.write_model_dir(str(run_dir), "best", Tiny(2.0), {}, {"README.md": "two"})
    monkeypatch.undo()
    assert (
        not (run_dir / "best").exists() and (run_dir / ".best.old" / "model.safetensors").exists()
    )
    model_dir.recover(str(run_dir), "best")
    assert weight() == 1.0 and (run_dir / "best" / "README.md").read_text() == "one"

    def failing_save(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_dir, "save_model", failing_save)
    with pytest.raises(OSError):
        model_dir.write_model_dir(str(run_dir), "best", Tiny(3.0), {}, {})
    monkeypatch.undo()
    assert weight() == 1.0 and sorted(os.listdir(run_dir)) == [
        "best",
        "encoder",
        "key.csv",
        "tokenizer",
    ]
    model_dir.write_model_dir(str(run_dir), "best", Tiny(4.0), {}, {"README.md": "four"})
    assert weight() == 4.0 and sorted(os.listdir(run_dir / "best")) == [
        "README.md",
        "config.json",
        "encoder",
        "key.csv",
        "model.safetensors",
        "tokenizer",
    ]
    assert sorted(os.listdir(run_dir)) == ["best", "encoder", "key.csv", "tokenizer"]


def test_a_run_that_starts_over_removes_a_best_model_left_in_its_directory(tmp_path):
    from mixer.training.best.keeper import discard_leftover

    said = []
    for leftover in ("best", ".best.old"):  # a whole one, or one a kill left aside
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "model.safetensors").write_text("old")
        discard_leftover(str(tmp_path), said.append)
        assert os.listdir(tmp_path) == [] and "removed" in said[-1]

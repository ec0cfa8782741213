"""Fitting in: W&B, Hugging Face encoders, config files, Parquet, plots, packaging."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from safetensors.torch import load_file

from conftest import ROOT, TINY, env_for_subprocess, max_difference, run, run_program, torchrun_cmd

SHORT = [
    "--max-steps",
    "4",
    "--batch-size",
    "8",
    "--share-val",
    "0.09",
    "--dropout",
    "0",
    "--seed",
    "2",
    *TINY,
]


def finetune(csv, run_dir, *extra, **kwargs):
    return run_program(
        "finetune.py",
        "--dataset",
        csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        run_dir,
        *SHORT,
        *map(str, extra),
        **kwargs,
    )


def test_wandb_offline_under_torchrun_is_one_run_resumed_with_its_id(small_csv, tmp_path):
    out = tmp_path / "run"
    args = [
        os.path.join(ROOT, "finetune.py"),
        "--distributed",
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        str(out),
        *SHORT,
        "--batch-size",
        "4",
        "--log-wandb",
        "--wandb-mode",
        "offline",
        "--wandb-project-name",
        "mixer-tests",
        "--eval-interval",
        "2",
    ]
    run(torchrun_cmd(2, "--standalone") + args + ["--stop-at-step", "2"])
    runs = glob.glob(str(out / "wandb" / "offline-run-*"))
    assert len(runs) == 1  # rank 0 alone
    run_id = (out / "wandb_id.txt").read_text().strip()
    assert runs[0].endswith(run_id)
    run(torchrun_cmd(2, "--standalone") + args)
    runs = sorted(glob.glob(str(out / "wandb" / "offline-run-*")))
    assert len(runs) == 2 and all(r.endswith(run_id) for r in runs)  # the same W&B run, resumed
    # the offline record log holds the configuration and every logged metric
    records = open(glob.glob(os.path.join(runs[-1], "run-*.wandb"))[0], "rb").read()
    for name in (
        b"learning_rate",
        b"seq2seq_weight",
        b"val_flat_accuracy",
        b"val_seq2seq_f1",
        b"train/loss",
        b"train/samples_per_sec",
        b"train/remaining_s",
        b"mixer-tests",
    ):
        assert name in records, name


@pytest.fixture(scope="module")
def tiny_bert(tiny_bert_dir):
    return tiny_bert_dir


def test_local_hugging_face_encoder_trains_and_predicts(small_csv, tiny_bert, tmp_path):
    out = tmp_path / "run"
    proc = finetune(small_csv, out, "--encoder", tiny_bert)
    assert f"encoder: {tiny_bert} (pretrained weights" in proc.stdout
    pred = tmp_path / "pred.parquet"
    run_program("predict.py", "--checkpoint", out, "--input", small_csv, "--output", pred)
    frame = pd.read_parquet(pred)
    assert len(frame) == 121 and (frame["code_1"] != "").all()


@pytest.fixture(scope="module")
def short_run(small_csv, tmp_path_factory):
    """One SHORT run on small_csv, which the tests below read and never change."""
    out = tmp_path_factory.mktemp("short") / "run"
    finetune(small_csv, out)
    return out


def test_fine_tune_a_hisco_run_on_another_code_system(small_csv, short_run, tmp_path):
    hisco_run = short_run
    occ = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    occ["occ1950"] = occ["hisco_1"].str[:3]  # 3-digit codes: another code system
    occ_csv = tmp_path / "occ.csv"
    occ.to_csv(occ_csv, index=False)
    out = tmp_path / "occ"
    proc = run_program(
        "finetune.py",
        "--dataset",
        occ_csv,
        "--target-cols",
        "occ1950",
        "--block-size",
        "3",
        "--save-path",
        out,
        *SHORT,
        "--initial-checkpoint",
        hisco_run,
        "--only-encoder",
    )
    assert (
        "loaded encoder weights" in proc.stdout and "flat head and decoder start new" in proc.stdout
    )
    weights = load_file(out / "model.safetensors")
    keys = pd.read_csv(out / "key.csv", dtype=str)
    assert weights["flat_head.weight"].shape[0] == len(keys) == occ["occ1950"].nunique()
    assert max(len(c) for c in keys["code"]) == 3


def test_args_yaml_repeats_the_run_and_flags_win(small_csv, short_run, tmp_path):
    first = short_run
    second = tmp_path / "second"
    run_program("finetune.py", "--config", first / "args.yaml", "--save-path", second)
    assert (
        max_difference(
            load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
        )
        == 0
    )
    a = yaml.safe_load(open(first / "args.yaml"))
    b = yaml.safe_load(open(second / "args.yaml"))
    assert b.pop("save_dir") == str(second) and a.pop("save_dir") == str(first)
    assert a == b
    third = tmp_path / "third"
    run_program(
        "finetune.py",
        "--config",
        first / "args.yaml",
        "--save-path",
        third,
        "--max-steps",
        "2",
        "--prepare-only",
    )
    assert yaml.safe_load(open(third / "args.yaml"))["train"]["max_steps"] == 2
    # --prepare-only is an action, not configuration: the run's own args.yaml then trains
    run_program("finetune.py", "--config", third / "args.yaml")
    assert (third / "model.safetensors").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rat: 0.1\n")
    proc = run_program(
        "finetune.py",
        "--config",
        bad,
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        tmp_path / "x",
        check=False,
    )
    assert proc.returncode == 2 and "unknown setting(s) learning_rat" in proc.stderr


def test_parquet_input_gives_the_same_run_as_csv(small_csv, short_run, tmp_path):
    parquet = tmp_path / "small.parquet"
    pd.read_csv(small_csv, dtype=str, keep_default_na=False).to_parquet(parquet)
    finetune(parquet, tmp_path / "pq")
    pd.testing.assert_frame_equal(
        pd.read_parquet(short_run / "data_val.parquet"),
        pd.read_parquet(tmp_path / "pq" / "data_val.parquet"),
    )
    assert (
        max_difference(
            load_file(short_run / "model.safetensors"),
            load_file(tmp_path / "pq" / "model.safetensors"),
        )
        == 0
    )


def test_pictures_of_training_and_of_predictions(small_csv, tmp_path):
    out = tmp_path / "run"
    finetune(small_csv, out, "--eval-interval", 2)
    assert (out / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    os.unlink(out / "training_curves.png")
    proc = subprocess.run(
        [sys.executable, "-m", "mixer.plot", str(out)],
        cwd=ROOT,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and (out / "training_curves.png").exists()
    summary = tmp_path / "summary.png"
    run_program(
        "predict.py",
        "--checkpoint",
        out,
        "--input",
        small_csv,
        "--output",
        tmp_path / "p.csv",
        "--summary-plot",
        summary,
    )
    assert summary.read_bytes()[:4] == b"\x89PNG"


def test_logs_are_plain_lines_when_output_is_not_a_terminal(small_csv, tmp_path):
    proc = finetune(small_csv, tmp_path / "run", "--log-interval", 1)
    assert "\r" not in proc.stdout + proc.stderr  # no progress bar redraws
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("step 1: 1/") and ", epoch 1/" in line and ", remaining " in line
        for line in lines
    )  # where the run is and how long it has left
    assert any(
        line.startswith("eval step 4 (epoch 1)") for line in lines
    )  # the progress lines' epoch
    quiet = finetune(small_csv, tmp_path / "quiet", "--log-level", "WARNING")
    assert "step 1:" not in quiet.stdout and "eval step" not in quiet.stdout


def test_installable_commands_are_the_same_programs(tmp_path):
    """The wheel holds exactly the package's tracked modules. It is built from a copy of
    the tracked files: setuptools never empties a checkout's build/, so a wheel built in
    place after the modules moved would also carry the old ones (and leave build/ here)."""
    import shutil
    import zipfile

    tracked = subprocess.run(
        ["git", "ls-files", "-z"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split("\0")
    source = tmp_path / "source"
    for name in filter(None, tracked):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(source / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), source / name)
    wheel_dir = tmp_path / "wheel"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheel_dir),
            str(source),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = glob.glob(str(wheel_dir / "mixer-*.whl"))[0]

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(
            next(n for n in names if n.endswith("entry_points.txt"))
        ).decode()
    assert "mixer/resources/hisco_key.csv" in names
    for name in ("hisco_ses.csv", "hisclass.csv", "hisclass_5.csv", "socpo.csv", "LICENSE"):
        assert f"mixer/resources/hisco-ses/{name}" in names  # the crosswalks and their licence
    licence = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert (
        len(licence) == 1
    )  # the licence's text travels with the code (and the HISCO key it ships)
    with zipfile.ZipFile(wheel) as archive, open(os.path.join(ROOT, "LICENSE"), "rb") as handle:
        text = archive.read(licence[0])
        assert (
            text == handle.read()
            and b"Apache License\n                           Version 2.0" in text
        )
    modules = {n for n in tracked if n.startswith("mixer/") and n.endswith(".py")}
    assert {n for n in names if n.startswith("mixer/") and n.endswith(".py")} == modules
    for command, target in (
        ("mixer-finetune", "finetune_cli"),
        ("mixer-train", "train_mixer_cli"),
        ("mixer-predict", "predict_cli"),
    ):
        assert f"{command} = mixer.cli.entrypoints:{target}" in entry_points
    from mixer import __version__

    for script in ("finetune.py", "train_mixer.py", "predict.py"):
        assert run_program(script, "--version").stdout.strip() == f"mixer {__version__}"


def test_args_yaml_holds_no_actions_or_launcher_facts_and_every_switch_turns_off(
    small_csv, tmp_path
):
    from mixer.cli import parsing as cli
    from mixer.core.config import RunConfig, config_for_file
    from mixer.cli.entrypoints import finetune_parser

    config = RunConfig(save_dir=str(tmp_path / "run"))
    config.dist.distributed, config.data.prepare_only, config.train.stop_at_step = True, True, 3
    config.model.freeze_encoder = True
    written = config_for_file(config)
    assert "distributed" not in written["dist"] and "local_rank" not in written["dist"]
    assert "prepare_only" not in written["data"] and "stop_at_step" not in written["train"]
    # an args.yaml of mixer 0.1 held them: they are ignored, so one process can resume a DDP run
    legacy = dict(written)
    legacy["dist"] = dict(written["dist"], distributed=True)
    legacy["data"] = dict(
        written["data"], prepare_only=True, dataset=small_csv, target_cols=["hisco_1"]
    )
    path = tmp_path / "args.yaml"
    path.write_text(yaml.safe_dump(legacy))
    parsed = cli.parse_args(finetune_parser(), ["--config", str(path)])
    assert (parsed.distributed, parsed.prepare_only, parsed.freeze_encoder) == (False, False, True)
    parsed = cli.parse_args(finetune_parser(), ["--config", str(path), "--no-freeze-encoder"])
    assert parsed.freeze_encoder is False
    switches = [
        a
        for a in finetune_parser()._actions
        if a.nargs == 0 and a.dest not in ("help", "version", "precision")
    ]
    assert switches and all(any(o.startswith("--no-") for o in a.option_strings) for a in switches)


def test_run_directory_files_follow_the_umask(small_csv, tmp_path):
    """Group members read (umask 022) or share (umask 002) a run directory."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "finetune.py"),
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        str(out),
        *SHORT,
        "--max-steps",
        "2",
    ]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(0o002),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    modes = {}
    for directory, _, files in os.walk(out):
        for name in files:
            path = os.path.join(directory, name)
            modes[os.path.relpath(path, out)] = oct(os.stat(path).st_mode & 0o777)
    assert {"last.pt", "model.safetensors", "args.yaml", "key.csv", "data_train.parquet"} <= set(
        modes
    )
    assert any(name.startswith("cache") for name in modes)
    assert set(modes.values()) == {"0o664"}, modes


def test_throughput_after_an_evaluation_leaves_the_evaluation_out(small_csv, tmp_path, monkeypatch):
    """An evaluation that took 1000 s must not show in the next training throughput."""
    import time as clock

    from mixer.cli.entrypoints import finetune_main
    from mixer.training.trainer import Trainer

    real, offset = clock.perf_counter, [0.0]
    monkeypatch.setattr(clock, "perf_counter", lambda: real() + offset[0])
    evaluate = Trainer.evaluate

    def slow_evaluate(self, *args, **kwargs):
        result = evaluate(self, *args, **kwargs)
        offset[0] += 1000.0
        return result

    monkeypatch.setattr(Trainer, "evaluate", slow_evaluate)
    out = tmp_path / "run"
    finetune_main(
        [
            "--dataset",
            small_csv,
            "--target-cols",
            "hisco_1",
            "--save-path",
            str(out),
            *SHORT,
            "--max-steps",
            "6",
            "--eval-interval",
            "2",
            "--log-interval",
            "2",
        ]
    )
    logs = pd.read_csv(out / "logs.csv")
    assert len(logs) == 3 and (logs["samples_per_sec"] > 1).all(), logs["samples_per_sec"]


def test_wandb_dir_set_by_the_user_is_honoured(small_csv, tmp_path):
    env = env_for_subprocess()
    env["WANDB_DIR"] = str(tmp_path / "wandb-home")
    out = tmp_path / "run"
    finetune(small_csv, out, "--max-steps", "1", "--log-wandb", "--wandb-mode", "offline", env=env)
    assert len(glob.glob(str(tmp_path / "wandb-home" / "wandb" / "offline-run-*"))) == 1
    assert not (out / "wandb").exists()


def test_tensorboard_event_files_hold_the_scalars_wandb_gets(small_csv, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    finetune(small_csv, out, "--log-tensorboard", "--eval-interval", "2", "--log-interval", "2")
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "train/loss",
        "train/lr",
        "train/samples_per_sec",
        "val_loss",
        "val_flat_accuracy",
        "val_seq2seq_f1",
        "epoch",
        "train/epoch",
        "train/elapsed_s",
        "train/remaining_s",
    } <= tags
    steps = [e.step for e in events.Scalars("val_flat_accuracy")]
    logs = pd.read_csv(out / "logs.csv")
    assert steps == logs["step"].tolist() == [2, 4]
    assert [e.value for e in events.Scalars("val_flat_accuracy")] == pytest.approx(
        logs["val_flat_accuracy"].tolist()
    )

"""Faults with real processes: kill -9, pre-emption signals, torchrun restarts,
non-finite losses, failing disks, and checkpoints that must not run code."""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from conftest import (
    ROOT,
    TINY,
    TOY as TOY_DATA,
    children,
    env_for_subprocess,
    max_difference,
    run_program,
    start,
    torchrun_cmd,
    wait_for_line,
)

EXACT = [
    "--dropout",
    "0",
    "--seed",
    "9",
    "--batch-size",
    "8",
    "--share-val",
    "0.09",
    "--language",
    "en",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    *TINY,
]


def finetune_cmd(csv, run_dir, *extra) -> list:
    return [
        sys.executable,
        os.path.join(ROOT, "finetune.py"),
        "--dataset",
        csv,
        "--save-path",
        str(run_dir),
        *EXACT,
        *map(str, extra),
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_csv):
    """An uninterrupted run of 40 steps."""
    run = tmp_path_factory.mktemp("reference") / "run"
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        run,
        *EXACT,
        "--max-steps",
        40,
        "--save-interval",
        1,
    )
    return load_file(os.path.join(run, "model.safetensors"))


def test_kill_9_at_random_moments_then_resume_gives_the_same_weights(
    reference, small_csv, tmp_path
):
    """Checkpoints every step, so many kills land inside a checkpoint write."""
    run = tmp_path / "run"
    rng = random.Random(1234)
    kills = 0
    while kills < 5:
        proc = start(
            finetune_cmd(
                small_csv, run, "--max-steps", 40, "--save-interval", 1, "--log-interval", 1
            )
        )
        if not any(line.startswith("step ") for line in proc.stdout):
            # a kill after the last step's checkpoint but before the model was written: this
            # start resumed at the last step and finished without a step to log
            assert proc.wait() == 0 and os.path.exists(run / "model.safetensors")
            break
        time.sleep(rng.uniform(0.0, 0.6))  # fault injection timing, not synchronisation
        proc.kill()
        proc.communicate()
        kills += 1
        if os.path.exists(run / "model.safetensors"):
            break  # it finished before the kill: the run is complete
    proc = start(finetune_cmd(small_csv, run, "--max-steps", 40, "--save-interval", 1))
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert max_difference(reference, load_file(run / "model.safetensors")) < 1e-6
    assert not [
        f for f in os.listdir(run) if f.startswith(".tmp")
    ]  # killed writers' leftovers removed
    torch.load(run / "last.pt", weights_only=True)


def test_a_corrupt_last_checkpoint_falls_back_to_the_previous_one(reference, small_csv, tmp_path):
    run = tmp_path / "run"
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        run,
        *EXACT,
        "--max-steps",
        40,
        "--save-interval",
        1,
        "--stop-at-step",
        7,
    )
    previous = torch.load(run / "last.prev.pt", weights_only=True)
    assert previous["progress"]["step"] == 6
    with open(run / "last.pt", "r+b") as handle:  # a torn write
        handle.truncate(100)
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        run,
        *EXACT,
        "--max-steps",
        40,
        "--save-interval",
        1,
    )
    text = proc.stdout + proc.stderr
    assert "last.pt: not a complete checkpoint" in text and "trying the previous" in text
    assert "resuming from" in text and "at step 6" in text
    assert max_difference(reference, load_file(run / "model.safetensors")) < 1e-6


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_preemption_signal_saves_exits_0_and_the_job_continues(reference, small_csv, tmp_path, sig):
    run = tmp_path / "run"
    proc = start(
        finetune_cmd(
            small_csv, run, "--max-steps", 40, "--save-interval", 1000, "--log-interval", 1
        )
    )
    wait_for_line(proc, "step 3:")
    proc.send_signal(sig)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out
    assert "saving and stopping" in out
    step = torch.load(run / "last.pt", weights_only=True)["progress"]["step"]
    assert 3 <= step < 40
    proc = start(finetune_cmd(small_csv, run, "--max-steps", 40, "--save-interval", 1000))
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert f"at step {step}" in out
    assert max_difference(reference, load_file(run / "model.safetensors")) < 1e-6


def test_preemption_under_torchrun_every_rank_agrees(small_csv, tmp_path):
    """Slurm signals every task: each rank gets SIGUSR1; they agree, rank 0 saves."""
    run = tmp_path / "run"
    proc = start(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            "--dataset",
            small_csv,
            "--save-path",
            str(run),
            *EXACT[: -len(TINY)],
            *TINY[:-2],
            "--log-interval",
            "1",
            "--batch-size",
            "4",
            "--max-steps",
            "1000",
            "--save-interval",
            "1000",
        ]
    )
    wait_for_line(proc, "step 3:")
    workers = children(proc.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGUSR1)  # one rank hears it first; all must stop together
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    state = torch.load(run / "last.pt", weights_only=True)
    assert 3 <= state["progress"]["step"] < 1000


def test_torchrun_restart_after_a_killed_worker_resumes_and_finishes(small_csv, tmp_path):
    run = tmp_path / "run"
    proc = start(
        torchrun_cmd(2, "--standalone", "--max-restarts=1")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            "--dataset",
            small_csv,
            "--save-path",
            str(run),
            *EXACT[: -len(TINY)],
            *TINY[:-2],
            "--log-interval",
            "1",
            "--batch-size",
            "4",
            "--max-steps",
            "30",
            "--save-interval",
            "1",
        ]
    )
    wait_for_line(proc, "step 5:")
    os.kill(max(children(proc.pid)), signal.SIGKILL)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "resuming from" in out
    assert torch.load(run / "last.pt", weights_only=True)["progress"]["step"] == 30
    assert os.path.exists(run / "model.safetensors")


def test_diverging_training_stops_naming_the_step_and_writes_no_nan(small_csv, tmp_path):
    run = tmp_path / "run"
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        run,
        *EXACT,
        "--max-steps",
        40,
        "--learning-rate",
        "1e30",
        "--eval-interval",
        1000,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "training diverged" in proc.stderr and "up to step" in proc.stderr
    assert "non-finite" in proc.stdout
    assert not os.path.exists(run / "model.safetensors")
    if os.path.exists(run / "last.pt"):
        state = torch.load(run / "last.pt", weights_only=True)
        assert all(
            torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point()
        )


def test_disk_error_while_saving_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    from mixer.models.checkpoint import Checkpointer

    saver = Checkpointer(str(tmp_path))
    saver.save({"model": {"w": torch.ones(2)}, "progress": {"step": 1}})

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError):
        saver.save({"model": {"w": torch.zeros(2)}, "progress": {"step": 2}})
    monkeypatch.undo()
    assert saver.load_latest()["progress"]["step"] == 1
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_a_checkpoint_whose_pickle_would_run_code_is_refused(small_csv, tmp_path):
    evil = tmp_path / "evil"
    evil.mkdir()
    with open(evil / "last.pt", "wb") as handle:
        pickle.dump({"model": RunsCode()}, handle)
    torch.save({"model": {}, "payload": RunsCode()}, evil / "zip.pt")
    for name in ("last.pt", "zip.pt"):
        proc = run_program(
            "finetune.py",
            "--dataset",
            small_csv,
            "--save-path",
            tmp_path / "run",
            *EXACT,
            "--initial-checkpoint",
            evil / name,
            check=False,
        )
        assert proc.returncode == 2
        assert "refused to load" in proc.stderr or "not a complete checkpoint" in proc.stderr
        assert not os.path.exists(os.path.join(ROOT, "PWNED"))
        assert not os.path.exists(evil / "PWNED")
    # resuming from a planted last.pt in the run directory is refused too
    run = tmp_path / "planted"
    run.mkdir()
    os.replace(evil / "zip.pt", run / "last.pt")
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        run,
        *EXACT,
        "--max-steps",
        2,
        check=False,
    )
    assert "refused to load" in proc.stdout + proc.stderr
    assert not os.path.exists(os.path.join(ROOT, "PWNED"))


def test_no_secrets_in_outputs(small_csv, tmp_path):
    env = env_for_subprocess()
    env["WANDB_API_KEY"] = "wandb-secret-0123456789"
    env["MY_TOKEN"] = "token-secret-9876543210"
    run = tmp_path / "run"
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        run,
        *EXACT,
        "--max-steps",
        2,
        "--log-wandb",
        "--wandb-mode",
        "offline",
        env=env,
    )
    for root, _, files in os.walk(run):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                data = handle.read()
            assert b"wandb-secret" not in data and b"token-secret" not in data, name


def test_a_stop_signal_during_an_evaluation_is_honoured_at_once(tmp_path):
    """Pre-emption grace periods are short: a signal that arrives while 4,000
    validation rows are evaluated (1,000 batches) stops the job within a batch; the
    evaluation runs first when the job continues."""
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "finetune.py"),
        "--dataset",
        TOY_DATA,
        "--target-cols",
        "hisco_1",
        "--allow-codes-shorter-than-block-size",
        "--save-path",
        str(run),
        "--share-val",
        "0.5",
        "--val-max-rows",
        "0",
        "--eval-batch-size",
        "4",
        "--max-steps",
        "4",
        "--eval-interval",
        "2",
        *TINY,
    ]
    proc = start(cmd)
    wait_for_line(proc, "evaluating at step 2")
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    assert "interrupted by the stop signal" in out
    state = torch.load(run / "last.pt", weights_only=True)["progress"]
    assert state["step"] == 2 and state["eval_pending"] is True
    assert not (run / "logs.csv").exists()  # the interrupted evaluation logged nothing
    proc = start(cmd + ["--eval-batch-size", "256"])
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert pd.read_csv(run / "logs.csv")["step"].tolist() == [2, 4]


def test_a_stop_signal_during_the_final_evaluation_leaves_nothing_final_half_written(tmp_path):
    """The final evaluation is interrupted: no model.safetensors, no partial
    evaluation.csv; the job continues with the final evaluation itself (the
    whole table, the tuned threshold), not a mid-training one."""
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "finetune.py"),
        "--dataset",
        TOY_DATA,
        "--target-cols",
        "hisco_1",
        "--allow-codes-shorter-than-block-size",
        "--save-path",
        str(run),
        "--share-val",
        "0.5",
        "--val-max-rows",
        "0",
        "--eval-batch-size",
        "4",
        "--max-steps",
        "2",
        "--save-interval",
        "1",
        "--tune-threshold",
        *TINY,
    ]
    proc = start(cmd)
    wait_for_line(proc, "evaluating at step 2")
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    assert "interrupted by the stop signal" in out and "stopped at step 2" in out
    state = torch.load(run / "last.pt", weights_only=True)["progress"]
    assert state["step"] == 2 and state["eval_pending"] is True
    for name in ("model.safetensors", "evaluation.csv", "logs.csv", "training_curves.png"):
        assert not (run / name).exists(), name
    proc = start(cmd + ["--eval-batch-size", "256"])
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "tuned flat threshold" in out
    assert pd.read_csv(run / "logs.csv")["step"].tolist() == [2]
    table = pd.read_csv(run / "evaluation.csv")
    val_rows = int(pd.read_csv(run / "logs.csv")["val_rows"].iloc[0])
    assert val_rows > 1000 and (run / "model.safetensors").exists()
    assert table["n"].max() == val_rows, table


def test_a_stop_signal_to_the_whole_process_group_with_loader_workers(small_csv, tmp_path):
    """Schedulers signal every process of the job, DataLoader workers included: the
    workers must not die before the trainer saves (a dead worker is an error)."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        finetune_cmd(
            small_csv,
            run,
            "--max-steps",
            1000,
            "--save-interval",
            1000,
            "--log-interval",
            1,
            "--num-workers",
            2,
        ),
        cwd=ROOT,
        env=env_for_subprocess(),
        text=True,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    wait_for_line(proc, "step 3:")

    def command(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return handle.read()
        except OSError:
            return b""

    # the loader's workers, forks of the trainer (not the n-gram head's fit beside it, a
    # child of its own in the same group, running or ended)
    workers = [pid for pid in children(proc.pid) if command(pid) == command(proc.pid)]
    assert len(workers) == 2
    os.killpg(proc.pid, signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    assert 3 <= torch.load(run / "last.pt", weights_only=True)["progress"]["step"] < 1000


@pytest.mark.parametrize("signalled", [True, False])
def test_slurm_template_requeues_a_run_the_time_limit_stopped(small_csv, tmp_path, signalled):
    """The single-node template with Slurm's commands stubbed: the time-limit notice
    (USR1 to the batch script) stops the run cleanly and puts the job back in the
    queue, since a clean exit alone ends the job as COMPLETED; a run that ends by
    itself is not requeued."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = env_for_subprocess()
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}",
        SLURM_JOB_ID="4242",
        SLURM_SUBMIT_DIR=ROOT,
        GPUS_PER_NODE="1",
    )
    run = tmp_path / "run"
    steps = 1000 if signalled else 3
    proc = start(
        [
            "bash",
            os.path.join(ROOT, "scripts", "slurm_single_node.sbatch"),
            "--dataset",
            small_csv,
            "--save-path",
            str(run),
            *EXACT,
            "--max-steps",
            str(steps),
            "--log-interval",
            "1",
            "--save-interval",
            "1000",
        ],
        env=env,
    )
    if signalled:
        wait_for_line(proc, "step 3:")
        proc.send_signal(signal.SIGUSR1)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    state = torch.load(run / "last.pt", weights_only=True)["progress"]
    if signalled:
        assert 3 <= state["step"] < 1000
        assert calls.read_text().split() == ["requeue", "4242"]
    else:
        assert state["step"] == 3 and (run / "model.safetensors").exists()
        assert not calls.exists()


def test_first_line_of_an_error_keeps_no_terminal_control_sequences():
    from mixer.core.errors import first_line

    message = (
        "\x1b[1mbold\x1b[0m \x1b[?25lcursor \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ "
        "\x9bc1 bell\x07\nsecond line"
    )
    assert first_line(ValueError(message)) == "bold cursor link c1 bell"
    assert first_line(ValueError("a\rb")) == "a"
    assert first_line(ValueError("")) == "ValueError"


@pytest.mark.parametrize("program", ["predict", "finetune"])
def test_a_job_gives_the_stop_signals_their_handlers_back(program, small_csv, tmp_path):
    """A job takes SIGTERM / SIGUSR1 to stop at a chunk or a step; once it ends, a notebook or
    script that ran it gets its own handlers back (else SIGTERM is ignored from then on)."""
    from mixer.cli.entrypoints import finetune_main, predict_main

    def mine(*_):
        pass

    before = {sig: signal.signal(sig, mine) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        run = tmp_path / "run"
        train = ["--dataset", small_csv, "--target-cols", "hisco_1", "--save-path", str(run)]
        assert finetune_main([*train, *TINY, "--max-steps", "2", "--batch-size", "8"]) == 0
        if program == "predict":
            out = tmp_path / "out.csv"
            assert (
                predict_main(["--checkpoint", str(run), "--input", small_csv, "--output", str(out)])
                == 0
            )
        after = {sig: signal.getsignal(sig) for sig in before}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert after == {signal.SIGTERM: mine, signal.SIGUSR1: mine}

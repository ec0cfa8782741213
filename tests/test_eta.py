"""The run's estimate of the time it has left (mixer.reporting.eta), and under Slurm the
comparison with the job's end (docs/training.md, "When to stop and what to keep"): plain
functions, a fake clock and a fake squeue."""

from __future__ import annotations

import pytest


def test_the_eta_counts_measured_steps_and_evaluations_and_every_job():
    from mixer.reporting.eta import Eta

    now = [100.0]
    eta = Eta(step=10, elapsed_before=50.0, early_stopping=False, clock=lambda: now[0])
    now[0] += 20  # 10 steps in 20 s
    reading = eta.reading(20, 110, 1.5, 4, evaluations_left=3)
    assert reading.remaining == pytest.approx(90 * 2.0) and not reading.evaluations_timed
    assert reading.where() == "20/110 steps, epoch 2/4"
    assert reading.when() == "elapsed 0:01:10, remaining 0:03:00 (evaluations not timed yet)"
    eta.evaluated(30.0)  # an evaluation of 30 s, then 10 more steps in 20 s
    now[0] += 50
    reading = eta.reading(30, 110, 2.0, 4, evaluations_left=2)
    assert reading.remaining == pytest.approx(80 * 2.0 + 2 * 30.0)
    assert (
        reading.elapsed == pytest.approx(120.0) and reading.epoch == 2
    )  # the step that ended epoch 2
    assert reading.scalars() == {
        "epoch": 2.0,
        "elapsed_s": 120.0,
        "remaining_s": pytest.approx(220.0),
    }
    assert (
        Eta(0, early_stopping=True, clock=lambda: now[0]).reading(0, 5, 0, 1, 1).when()
        == "elapsed 0:00:00"
    )
    eta = Eta(0, early_stopping=True, clock=lambda: now[0])
    now[0] += 1
    assert (
        eta.reading(1, 2, 0.5, 1, 1)
        .when()
        .endswith("(evaluations not timed yet; early stopping may end it sooner)")
    )
    assert eta.reading(2, 2, 1.0, 1, 0).epoch == 1  # the end: the last epoch, not one more


def test_under_slurm_the_estimate_is_compared_with_the_jobs_end(tmp_path):
    from mixer.distributed.launch import slurm_job_end
    from mixer.reporting.eta import slurm_line

    assert slurm_job_end({"PATH": ""}) is None  # not in a job
    assert slurm_job_end(
        {"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "1700000000"}, now=1600000000
    ) == ("7", 1700000000.0)
    for stale in ("0", "1600000000", "N/A"):  # not in the future: ask squeue, here none
        assert (
            slurm_job_end(
                {"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": stale, "PATH": ""}, now=1600000000
            )
            is None
        )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(
        '#!/bin/sh\n[ "$*" = "-h -j 7 -o %e" ] && echo 2030-01-02T03:04:05\n'
    )
    (bin_dir / "squeue").chmod(0o755)
    from datetime import datetime

    expected = datetime(2030, 1, 2, 3, 4, 5).timestamp()
    assert slurm_job_end({"SLURM_JOB_ID": "7", "PATH": str(bin_dir)}) == ("7", expected)
    assert slurm_job_end(
        {"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "0", "PATH": str(bin_dir)}
    ) == ("7", expected)
    assert (
        slurm_job_end({"SLURM_JOB_ID": "7", "PATH": str(bin_dir)}, now=expected + 1) is None
    )  # past: none
    assert (
        slurm_job_end({"SLURM_JOB_ID": "8", "PATH": str(bin_dir)}) is None
    )  # squeue printed nothing
    fits = slurm_line(3600, 10_000, 0, "7", False)
    assert fits == (
        "Slurm job 7: 2:46:40 left until its time limit, 2:44:40 until the time-limit signal of "
        "scripts/slurm_*.sbatch (--signal=B:USR1@120); this run needs about 1:00:00 more: it "
        "should end in this job"
    )
    assert slurm_line(3600, 10_000, 0, "7", False, False).endswith(
        "this run needs about 1:00:00 more and its evaluations: it should end in this job"
    )
    assert "the signal comes first" in slurm_line(
        9_950, 10_000, 0, "7", False
    )  # before the limit, after the signal
    late = slurm_line(19_760, 10_000, 0, "7", True)
    assert (
        "the signal comes first, after about 50% of it (unless early stopping ends the run sooner)"
        in late
    )
    assert "continues only when the job is requeued" in late and "--requeue" in late

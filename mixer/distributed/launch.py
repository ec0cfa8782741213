"""Which launcher started this process, and its rank: read from the environment.

torchrun and torch.distributed.launch set RANK, WORLD_SIZE, LOCAL_RANK (the
legacy launcher passes --local-rank too); a task started by srun has
SLURM_PROCID and SLURM_STEP_ID. No torch here, so `--prepare-only` can ask
whether it is one of several processes without importing it;
mixer.distributed.world builds the process group from what this returns.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Mapping, Optional


@dataclass(frozen=True)
class Launch:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    launcher: str


def detect_launch(env: Mapping[str, str], local_rank_arg: Optional[int] = None) -> Optional[Launch]:
    """Ranks from torchrun / torch.distributed.launch, else Slurm; None without a launcher."""
    if "RANK" in env and "WORLD_SIZE" in env:
        world_size = int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", local_rank_arg if local_rank_arg is not None else 0))
        if local_rank_arg is not None:  # only the legacy launcher passes --local-rank
            launcher = "torch.distributed.launch"
        else:
            launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "environment"
        local_world = int(env.get("LOCAL_WORLD_SIZE", world_size))
        return Launch(int(env["RANK"]), local_rank, world_size, local_world, launcher)
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        # Only a task that srun started is a rank: an sbatch script's own shell (the batch
        # step) also sees SLURM_PROCID=0 and SLURM_NTASKS=N, but no SLURM_STEP_ID. The
        # step's own task count wins over the allocation's (srun --ntasks=1 inside N).
        world_size = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)
        nodes = int(
            env.get("SLURM_STEP_NUM_NODES")
            or env.get("SLURM_JOB_NUM_NODES")
            or env.get("SLURM_NNODES")
            or 1
        )
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE") or "0"
        local_world = int(per_node.split("(")[0].split(",")[0] or 0) or max(1, world_size // nodes)
        return Launch(
            int(env["SLURM_PROCID"]),
            int(env.get("SLURM_LOCALID", "0")),
            world_size,
            local_world,
            "slurm",
        )
    return None


def launched_as_one_of_several(env: Optional[Mapping[str, str]] = None) -> bool:
    """True in a process that a launcher started as one rank of a group."""
    launch = detect_launch(os.environ if env is None else env)
    return launch is not None and launch.world_size > 1


def slurm_job_end(
    env: Optional[Mapping[str, str]] = None, run=None, now: Optional[float] = None
) -> Optional[tuple]:
    """(job id, the Unix time of the job's time limit) under Slurm, else None: from
    SLURM_JOB_END_TIME, else `squeue -j JOB -o %e` when squeue is there; None when
    neither tells (an interactive shell outside a job, no limit, squeue failing). A time
    that is not in the future (0, a stale value) tells nothing: the next source is asked."""
    import time
    from datetime import datetime

    env = os.environ if env is None else env
    now = time.time() if now is None else now
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    value = env.get("SLURM_JOB_END_TIME", "")
    if value.isdigit() and float(value) > now:
        return job, float(value)
    done = squeue(job, "%e", env, run)
    if done is None:
        return None
    try:
        end = datetime.strptime(done.stdout.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None
    return (job, end) if end > now else None


def squeue(job: str, field: str, env: Mapping[str, str], run=None):
    """`squeue -h -j JOB -o FIELD` as run (stdout, stderr, returncode), or None when there
    is no squeue on the PATH or it could not be run within 10 s."""
    import shutil
    import subprocess

    program = shutil.which("squeue", path=env.get("PATH"))
    if program is None:
        return None
    try:
        return (run or subprocess.run)(
            [program, "-h", "-j", job, "-o", field], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None


def stop_on_signals(request_stop):
    """SIGTERM / SIGUSR1 (Slurm pre-emption) call request_stop: training finishes the step,
    the ranks agree, it saves and exits 0; prediction keeps its chunk and exits 0. Returns a
    function that gives the signals back their handlers of before, for the job's end: a
    notebook or script that ran a job still ends at SIGTERM."""
    before = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGUSR1", None)):
        if sig is not None:
            try:
                before[sig] = signal.signal(sig, request_stop)
            except ValueError:  # not the main thread
                pass

    def restore() -> None:
        for sig, handler in before.items():
            try:
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
            except ValueError:  # not the main thread
                pass
        before.clear()

    return restore

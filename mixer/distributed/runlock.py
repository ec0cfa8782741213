"""One run at a time in a run directory: RUN/.lock.

Two runs writing one directory would interleave logs.csv and replace each other's
last.pt and best/ without a word. So rank 0 of a training run (torchrun, srun: only
rank 0) takes the lock before it writes anything, and gives it back when the run
ends, fails or stops on a signal. The lock is a file that names its holder (host,
process id and its start time, Slurm job and restart count, since when). It is
created whole (written aside, then hard-linked into place, which fails when the file
exists, on NFS too), so a reader never sees half of one.

A lock left by a killed job must not block the job's requeue or resume. It is taken
over when its holder has certainly ended: on this host, its process no longer runs
(or the process id now belongs to another process). Under Slurm, it belongs to an
earlier run of this very job (a requeue: the same job id, another restart count), or
`squeue` no longer lists its job as running. Otherwise (a process on another host
outside Slurm, which this host cannot see) the run is refused with one line naming
the holder and the file to remove if that run has ended.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from mixer.core.errors import UserError

LOCK = ".lock"
LIVE_SLURM_STATES = {
    "RUNNING",
    "PENDING",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "STOPPED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
}


def process_start(pid: int) -> Optional[str]:
    """When process `pid` started (clock ticks since boot, /proc), or None where the
    system does not tell: a process id reused by another process starts later."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def holder(env: Optional[Mapping[str, str]] = None) -> dict:
    """This process as a lock names it."""
    env = os.environ if env is None else env
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": process_start(pid),
        "job": env.get("SLURM_JOB_ID"),
        "restart": env.get("SLURM_RESTART_COUNT", "0"),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def ended(other: dict, me: dict, env: Mapping[str, str], run=None) -> Optional[str]:
    """Why the holder `other` has certainly ended, or None when it may still run."""
    if other.get("host") == me["host"]:
        pid = other.get("pid")
        if pid == me["pid"] and other.get("start") == me["start"]:
            return "this process's own, left by a run that did not end"
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return f"its process {pid} on this host has ended"
        except (PermissionError, TypeError, ValueError):
            pass
        else:
            start = process_start(int(pid))
            if other.get("start") and start and start != other["start"]:
                return (
                    f"its process {pid} on this host has ended (the id now names another process)"
                )
        if pid is not None:
            return None  # a live process on this host
    job = other.get("job")
    if job and job == me["job"] and other.get("restart") != me["restart"]:
        return f"an earlier run of this Slurm job ({job}, before its requeue)"
    if job and job != me["job"]:
        state = slurm_job_state(job, env, run)
        if state == "":
            return f"its Slurm job {job} is no longer listed"
        if state is not None and state not in LIVE_SLURM_STATES:
            return f"its Slurm job {job} is {state}"
    return None


def slurm_job_state(job: str, env: Mapping[str, str], run=None) -> Optional[str]:
    """The job's state as `squeue` tells it ("" when squeue no longer knows the job),
    or None when there is no squeue to ask or it fails."""
    from mixer.distributed.launch import squeue

    done = squeue(job, "%T", env, run)
    if done is None:
        return None
    if done.returncode != 0:
        return "" if "invalid job id" in (done.stderr or "").lower() else None
    return done.stdout.strip().split("\n")[0].strip().upper()


@dataclass
class Lock:
    path: str
    me: dict
    made: tuple = ()  # the directories the lock made (the run directory and parents), deepest first

    def release(self) -> None:
        """Remove the lock if it is still this process's, and the run directory it made
        when the run wrote nothing else (a run refused for its input leaves no trace)."""
        if _read(self.path) == self.me:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        for directory in self.made:
            try:
                os.rmdir(directory)
            except OSError:  # not empty: the run's files
                break


def acquire(
    run_dir: str,
    log: Callable[[str], None] = print,
    env: Optional[Mapping[str, str]] = None,
    run=None,
) -> Lock:
    """Take RUN/.lock (rank 0, before anything is written), or UserError naming its
    holder; a lock whose holder has ended is taken over, with a line saying why."""
    env = os.environ if env is None else env
    me = holder(env)
    made, missing = [], os.path.abspath(run_dir)
    while not os.path.exists(missing):
        made.append(missing)
        missing = os.path.dirname(missing)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LOCK)
    for _ in range(3):
        if _create(path, me):
            return Lock(path, me, tuple(made))
        other = _read(path)
        if other is None:  # gone meanwhile, or not a lock of this tool: look again
            if os.path.exists(path) and time.time() - _mtime(path) > 60:
                raise UserError(
                    f"{path}: not a lock of this tool; remove it if no run uses {run_dir}"
                )
            time.sleep(0.2)
            continue
        why = ended(other, me, env, run)
        if why is None:
            raise busy(run_dir, path, other)
        if _read(path) == other:  # still the one judged: take it over
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            log(
                f"took over {path} from process {other.get('pid')} on host {other.get('host')}: {why}"
            )
    raise UserError(
        f"{run_dir}: another run is taking its lock ({path}) at this moment; run one at a time"
    )


def busy(run_dir: str, path: str, other: dict) -> UserError:
    job = f", Slurm job {other['job']}" if other.get("job") else ""
    return UserError(
        f"{run_dir} is in use by another run (process {other.get('pid')} on host "
        f"{other.get('host')}{job}, since {other.get('since')}): two runs in one directory "
        f"would overwrite each other's files; wait for it, or use another --save-path. If that "
        f"run has ended (killed where this host cannot see), remove {path} and run again"
    )


def _create(path: str, me: dict) -> bool:
    """The lock, whole, if no lock exists (written aside, then linked into place)."""
    # a temp file's name: a kill right here leaves what the run removes as it removes other temp files
    aside = os.path.join(os.path.dirname(path), f".tmp-lock.{me['host']}.{me['pid']}")
    with open(aside, "w", encoding="utf-8") as handle:
        json.dump(me, handle)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(aside, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: create it exclusively instead
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(me, handle)
        return True
    finally:
        try:
            os.unlink(aside)
        except FileNotFoundError:
            pass


def _read(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()

"""The one place that knows about launchers and the process group.

`setup()` reads torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, ...), the
legacy launcher's --local-rank, or, in a task started by srun, Slurm's
(SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID) and returns a frozen `World`. With no launcher it is one
process and every helper below does nothing, so the rest of the code calls
them unconditionally. Collectives must be called by ALL ranks.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping, Optional

import torch
import torch.distributed as dist

from mixer.core.config import DistConfig
from mixer.core.errors import PeerFailed, UserError, report
from mixer.distributed.launch import Launch, detect_launch  # noqa: F401 - re-exported

LAUNCH_HINT = (
    "launch with: torchrun --nproc_per_node=N {program} --distributed ... "
    "(or srun under Slurm; see docs/distributed.md)"
)


@dataclass(frozen=True)
class World:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    device: str = "cpu"
    backend: Optional[str] = None
    launcher: str = "none"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.backend is not None

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def setup(
    cfg: DistConfig,
    log: Callable[[str], None] = print,
    env: Optional[Mapping[str, str]] = None,
    program: str = "finetune.py",
) -> World:
    """Choose the device and start the process group when launched for it. `program`: the
    script the messages name (finetune.py trains, predict.py predicts)."""
    env = os.environ if env is None else env
    launch = detect_launch(env, cfg.local_rank)
    cuda = torch.cuda.is_available()
    if launch is None or (launch.world_size == 1 and not cfg.distributed):
        if cfg.distributed:
            raise UserError(
                "--distributed was given but no launcher set RANK/WORLD_SIZE; "
                + LAUNCH_HINT.format(program=program)
            )
        device = "cuda:0" if cuda else "cpu"
        if cuda:
            torch.cuda.set_device(0)
        return World(device=device)
    if not cfg.distributed and launch.rank == 0:
        log(
            f"note: WORLD_SIZE={launch.world_size} set by {launch.launcher}; "
            f"{'predicting' if program == 'predict.py' else 'training'} with --distributed"
        )
    if launch.launcher == "slurm":
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in env:
                raise UserError(
                    f"Slurm launch without {name}; export it in the sbatch script "
                    "(see scripts/slurm_multi_node.sbatch)"
                )
    backend = cfg.backend or ("nccl" if cuda else "gloo")
    if backend == "nccl" and not cuda:
        raise UserError("--backend nccl needs CUDA GPUs; use --backend gloo on CPU")
    if cuda:
        visible = torch.cuda.device_count()
        if launch.local_rank < visible:
            index = launch.local_rank
        elif visible == 1:  # srun --gpus-per-task=1: each task sees only its own GPU
            index = 0
        else:
            raise UserError(
                f"local rank {launch.local_rank} but only {visible} GPU(s) visible "
                "on this node; lower --nproc_per_node"
            )
        torch.cuda.set_device(index)  # before the process group: NCCL binds to it
        device = f"cuda:{index}"
    else:
        device = "cpu"
    timeout = timedelta(seconds=cfg.dist_timeout)
    global _STARTED
    _STARTED = True
    dist.init_process_group(
        backend=backend,
        store=_store(env, launch, timeout),
        rank=launch.rank,
        world_size=launch.world_size,
        timeout=timeout,
    )
    return World(
        rank=launch.rank,
        local_rank=launch.local_rank,
        world_size=launch.world_size,
        local_world_size=launch.local_world_size,
        device=device,
        backend=backend,
        launcher=launch.launcher,
    )


def _store(env: Mapping[str, str], launch: Launch, timeout: timedelta):
    """The rendezvous store, with a fresh key space for each torchrun restart:
    after `--max-restarts` the new workers must not read the addresses that
    the dead workers published."""
    agent_hosts = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(
        env["MASTER_ADDR"],
        int(env["MASTER_PORT"]),
        launch.world_size,
        is_master=launch.rank == 0 and not agent_hosts,
        timeout=timeout,
        wait_for_workers=False,
    )
    prefixed = dist.PrefixStore(
        f"mixer/attempt_{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", store
    )
    _STORE[0] = prefixed
    return prefixed


_STORE: list = [None]  # the rendezvous store: ranks wait on it without collective timeouts


def teardown(world: World) -> None:
    if world.is_distributed and dist.is_initialized():
        dist.destroy_process_group()


_STARTED = False  # set once this process has joined a process group


def exit_process(code: int) -> None:
    """Leave the process with `code`.

    After a gloo process group, the interpreter's own shutdown is not safe.
    Gloo's worker threads can still be releasing the last collective's
    tensors, and a thread that asks for the GIL while Python finalises is
    killed mid-destructor. That aborts the whole process (SIGABRT, "terminate
    called without an active exception") after the job has succeeded. So a
    process that started a group flushes its output and ends at once; every
    file the run writes is already complete (atomic writes) by then.
    """
    if not _STARTED:
        sys.exit(code)
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# ------------------------------------------------------------------ helpers (all ranks)
def all_reduce_sum(tensor: torch.Tensor, world: World) -> torch.Tensor:
    if world.is_distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def any_rank(flag: bool, world: World) -> bool:
    """True on every rank when it is True on any rank."""
    if not world.is_distributed:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=world.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


def barrier(world: World) -> None:
    if world.is_distributed:
        dist.barrier()


def broadcast_object(value: Any, world: World, src: int = 0) -> Any:
    if not world.is_distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def main_first(
    fn: Callable[[], Any], world: World, others: Optional[Callable[[], Any]] = None
) -> Any:
    """Rank 0 runs fn while the others wait; then the others run `others` (by
    default fn too), reading what rank 0 wrote. The others wait on the
    rendezvous store with no time limit, not in a collective bounded by
    --dist-timeout: preparing or tokenising 15M rows is not a failure. A failure
    on any rank reaches every rank as an error instead of leaving them waiting."""
    result = _agree_on_failure(fn if world.is_main else None, world)
    if world.is_distributed:
        follow = others or fn
        outcome = _agree_on_failure(None if world.is_main else follow, world)
        if not world.is_main:
            result = outcome
    return result


def main_only(fn: Callable[[], Any], world: World) -> Any:
    """Rank 0 alone runs fn; its failure stops every rank cleanly."""
    return _agree_on_failure(fn if world.is_main else None, world)


def all_ranks(fn: Callable[[], Any], world: World) -> Any:
    """Every rank runs fn (its share of a long job), then waits for all the others
    without a time limit; any rank's failure stops every rank."""
    return _agree_on_failure(fn, world)


_AGREEMENTS = [0]  # how many agreements this process has joined: the same on every rank
POLL_SECONDS = 0.2


def _agree_on_failure(fn, world: World):
    """Run fn where given; then all ranks learn whether any rank failed (all ranks).

    Each rank posts its outcome to the rendezvous store and polls for the others':
    no collective, so no --dist-timeout, however long fn takes on some rank."""
    failure, result = None, None
    if fn is not None:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it
            failure = exc
    if not world.is_distributed:
        if failure is not None:
            raise failure
        return result
    _AGREEMENTS[0] += 1
    name = f"agree/{_AGREEMENTS[0]}"
    store = _STORE[0]
    if (
        failure is not None
    ):  # its message first: a peer told of it may exit, and torchrun then stops this rank
        report(failure, world.rank)
    store.set(f"{name}/{world.rank}", "failed" if failure is not None else "ok")
    keys = [f"{name}/{rank}" for rank in range(world.world_size)]
    while not store.check(keys):  # every rank has posted (polling: no deadline)
        time.sleep(POLL_SECONDS)
    if failure is not None:
        raise failure  # this rank prints its own error
    failed = [rank for rank, key in enumerate(keys) if store.get(key) == b"failed"]
    if failed:
        raise PeerFailed(f"stopping: rank {failed[0]} failed (its error is above)")
    return result


def gather_objects(value: Any, world: World) -> list:
    """[value of rank 0, value of rank 1, ...] on every rank."""
    if not world.is_distributed:
        return [value]
    out = [None] * world.world_size
    dist.all_gather_object(out, value)
    return out


def gather_to_main(value: Any, world: World) -> Optional[list]:
    """[value of rank 0, value of rank 1, ...] on rank 0, None on the others (all ranks). It
    is for results only rank 0 uses (prediction chunks, evaluation rows,
    setup reports), so the other ranks neither receive nor hold every rank's data."""
    if not world.is_distributed:
        return [value]
    out = [None] * world.world_size if world.is_main else None
    dist.gather_object(value, out, dst=0)
    return out

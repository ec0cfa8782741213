"""DDP scaling on CPU: samples/s of torchrun with 1 process against 2 processes,
one thread each, the same per-process batch, measured in one run.

    python benchmarks/ddp_scaling.py [--encoder minilm-l6] [--batch-size 32] [--steps 30]

Prints both rates and their ratio (2.0 would be perfect scaling), and the
ceiling this machine puts on any two processes: two ordinary single-process
runs at the same time, with no communication at all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EXAMPLE_FLAGS, timed_rate  # noqa: E402

FLAGS = [*EXAMPLE_FLAGS, "--eval-interval", "100000", "--save-interval", "100000"]


def fresh_run_dir(run_dir: str, args) -> str:
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(args.prepared, run_dir)  # same prepared data and token cache
    return run_dir


def train_cmd(run_dir: str, args) -> list:
    return [
        "finetune.py",
        *FLAGS,
        "--save-path",
        run_dir,
        "--encoder",
        args.encoder,
        "--batch-size",
        str(args.batch_size),
        "--max-steps",
        str(args.warmup + args.steps),
        "--log-interval",
        str(args.warmup),
        "--grad-accum-steps",
        "1",
        *args.extra.split(),
    ]


def finish(proc: subprocess.Popen) -> float:
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(out[-3000:] + err[-3000:])
    return timed_rate(out)


def start(cmd: list) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, *cmd],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def ddp_rate(nproc: int, args) -> float:
    """Global samples/s of torchrun with nproc processes over the timed windows."""
    run_dir = fresh_run_dir(os.path.join(args.workdir, f"ddp{nproc}"), args)
    return finish(
        start(
            [
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={nproc}",
                *train_cmd(run_dir, args),
                "--distributed",
            ]
        )
    )


def independent_rate(args) -> float:
    """Two ordinary single-process runs at the same time, no process group:
    the most that any two processes get out of this machine."""
    runs = [
        start(train_cmd(fresh_run_dir(os.path.join(args.workdir, f"solo{i}"), args), args))
        for i in range(2)
    ]
    return sum(finish(proc) for proc in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/mixer-bench-ddp")
    parser.add_argument(
        "--extra", default="", help='more flags for both runs, e.g. "--grad-accum-steps 2"'
    )
    args = parser.parse_args()
    args.prepared = os.path.join(args.workdir, "prepared", args.encoder)
    if not os.path.exists(os.path.join(args.prepared, "cache")):
        shutil.rmtree(args.prepared, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                "finetune.py",
                *FLAGS,
                "--save-path",
                args.prepared,
                "--encoder",
                args.encoder,
                "--max-steps",
                "1",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        for name in os.listdir(args.prepared):
            if name.startswith("last") or name in ("logs.csv", "model.safetensors"):
                os.unlink(os.path.join(args.prepared, name))
    one, two, apart = [], [], []
    for _ in range(args.rounds):  # interleaved
        one.append(ddp_rate(1, args))
        two.append(ddp_rate(2, args))
        apart.append(independent_rate(args))
    speedup = statistics.median(two) / statistics.median(one)
    ceiling = statistics.median(apart) / statistics.median(one)
    print(
        f"encoder {args.encoder}, batch {args.batch_size} per process, 1 thread per process, "
        f"{args.steps} timed steps, gloo on CPU {args.extra}"
    )
    print(f"1 process:                   {', '.join(f'{r:.1f}' for r in one)} samples/s")
    print(f"2 processes (DDP):           {', '.join(f'{r:.1f}' for r in two)} samples/s")
    print(f"2 independent runs, summed:  {', '.join(f'{r:.1f}' for r in apart)} samples/s")
    print(f"speed-up 2 vs 1 (medians): {speedup:.2f}x")
    print(
        f"machine ceiling, 2 independent runs vs 1: {ceiling:.2f}x; "
        f"DDP reaches {100 * speedup / ceiling:.0f}% of it"
    )


if __name__ == "__main__":
    main()

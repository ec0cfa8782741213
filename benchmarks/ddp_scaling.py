"""DDP scaling on CPU: samples/s of torchrun with 1 process against 2 processes,
one thread each, the same per-process batch, measured in one run.

    python benchmarks/ddp_scaling.py [--encoder minilm-l6] [--batch-size 32] [--steps 30]

Prints both rates and their ratio (2.0 would be perfect scaling).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EXAMPLE_FLAGS, timed_rate  # noqa: E402

FLAGS = [*EXAMPLE_FLAGS, "--eval-interval", "100000", "--save-interval", "100000"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rate(nproc: int, run_dir: str, args) -> float:
    """Global samples/s over the timed windows (after the warm-up window)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    if os.path.exists(args.prepared):
        shutil.copytree(args.prepared, run_dir)  # same prepared data and token cache
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "finetune.py",
           "--distributed", *FLAGS, "--save-path", run_dir, "--encoder", args.encoder,
           "--batch-size", str(args.batch_size), "--max-steps", str(args.warmup + args.steps),
           "--log-interval", str(args.warmup), "--grad-accum-steps", "1", *args.extra.split()]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
    return timed_rate(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/mixer-bench-ddp")
    parser.add_argument("--extra", default="", help="more flags for both runs, e.g. \"--grad-accum-steps 2\"")
    args = parser.parse_args()
    args.prepared = os.path.join(args.workdir, "prepared", args.encoder)
    if not os.path.exists(os.path.join(args.prepared, "cache")):
        shutil.rmtree(args.prepared, ignore_errors=True)
        subprocess.run([sys.executable, "finetune.py", *FLAGS, "--save-path", args.prepared,
                        "--encoder", args.encoder, "--max-steps", "1"], cwd=ROOT, check=True,
                       capture_output=True)
        for name in os.listdir(args.prepared):
            if name.startswith("last") or name in ("logs.csv", "model.safetensors"):
                os.unlink(os.path.join(args.prepared, name))
    one, two = [], []
    for _ in range(args.rounds):  # interleaved
        one.append(rate(1, os.path.join(args.workdir, "one"), args))
        two.append(rate(2, os.path.join(args.workdir, "two"), args))
    print(f"encoder {args.encoder}, batch {args.batch_size} per process, 1 thread per process, "
          f"{args.steps} timed steps, gloo on CPU {args.extra}")
    print(f"1 process:   {', '.join(f'{r:.1f}' for r in one)} samples/s")
    print(f"2 processes: {', '.join(f'{r:.1f}' for r in two)} samples/s")
    print(f"speed-up 2 vs 1 (medians): {statistics.median(two) / statistics.median(one):.2f}x")


if __name__ == "__main__":
    main()

"""Data preparation at scale: `finetune.py --prepare-only` on 1,000,000 rows with
two target columns, timed as a whole process (start-up and imports included),
against a straightforward per-row label step measured in the same run.

    python benchmarks/prepare_speed.py [--rows 1000000] [--workdir /tmp/mixer-bench]

Prints seconds, peak memory and the ratio per-row / vectorised.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # common.py

from common import PEAK  # noqa: E402
from mixer.data.labels.formatter import CodeFormatter  # noqa: E402


def make_rows(rows: int, path: str, seed: int = 0) -> None:
    """Real descriptions and codes of the example data, resampled to `rows`."""
    toy = pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False)
    toy = toy[toy["hisco_1"].str.len() == 5]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(toy), rows)
    second = np.where(
        rng.random(rows) < 0.1, toy["hisco_1"].to_numpy()[rng.integers(0, len(toy), rows)], ""
    )
    frame = pd.DataFrame(
        {
            "occ1": toy["occ1"].to_numpy()[picks],
            "hisco_1": toy["hisco_1"].to_numpy()[picks],
            "hisco_2": second,
        }
    )
    frame.to_csv(path, index=False)


def per_row_labels(path: str) -> float:
    """The obvious implementation: a loop over rows calling the formatter per code."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    start = time.perf_counter()
    formatter = CodeFormatter(kind="general", block_size=5, max_num_codes=2)
    codes, bad = [], []
    for row_number, row in enumerate(frame[["hisco_1", "hisco_2"]].itertuples(index=False)):
        row_codes = []
        for value in row:
            value = value.strip()
            if value:
                code, reason = formatter.check(value)
                if reason:
                    bad.append(row_number)
                row_codes.append(code)
        codes.append(row_codes)
    key = sorted({c for row in codes for c in row})
    index = {c: i for i, c in enumerate(key)}
    labels = [[index[c] for c in row] + [-1] * (2 - len(row)) for row in codes]
    assert len(labels) == len(frame)
    return time.perf_counter() - start


def timed_process(cmd: list) -> tuple[float, float]:
    """(seconds, peak resident memory in MiB) of a child process (common.PEAK: its own peak,
    not this script's)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, *cmd], cwd=ROOT, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    return seconds, int(re.findall(r"^PEAK_RSS_KB (\d+)", proc.stdout, re.M)[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", default="/tmp/mixer-bench-prepare")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(args.workdir, f"rows_{args.rows}.csv")
    if not os.path.exists(data):
        make_rows(args.rows, data)
    vectorised = []
    for repeat in range(args.repeats):
        run_dir = os.path.join(args.workdir, f"run{repeat}")
        shutil.rmtree(run_dir, ignore_errors=True)
        vectorised.append(
            timed_process(
                [
                    sys.executable,
                    "finetune.py",
                    "--dataset",
                    data,
                    "--target-cols",
                    "hisco_1",
                    "hisco_2",
                    "--prepare-only",
                    "--save-path",
                    run_dir,
                ]
            )
        )
    per_row = per_row_labels(data)
    best = min(v[0] for v in vectorised)
    peak = max(v[1] for v in vectorised)
    print(
        f"rows: {args.rows:,} with 2 target columns ({os.path.getsize(data) / 2**20:.0f} MiB CSV)"
    )
    print(
        f"finetune.py --prepare-only, whole process: best {best:.2f} s of {args.repeats} "
        f"(all: {', '.join(f'{v[0]:.2f}' for v in vectorised)}), peak memory {peak:.0f} MiB"
    )
    print(f"per-row label step alone (loop over rows, formatter per code): {per_row:.2f} s")
    print(f"ratio per-row label step / whole vectorised preparation: {per_row / best:.1f}x")


if __name__ == "__main__":
    main()

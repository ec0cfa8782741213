"""Rows per second of each table format, read whole (training), streamed (prediction)
and written in chunks (prediction output), and the cost of checking a CSV file's
encoding before a prediction starts.

    python benchmarks/formats_speed.py [--rows 200000]

The rows are the example data (occ1, hisco_1) repeated, with a probability column
as prediction output has. Each figure is one timed pass on a machine that may be
shared, so read them as orders of magnitude between formats.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.data.tables.reading import first_undecodable, iter_chunks, read_table  # noqa: E402
from mixer.data.tables.writing import OutputWriter  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=100_000)
    args = parser.parse_args()
    toy = pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False)
    frame = pd.concat([toy] * (args.rows // len(toy) + 1), ignore_index=True).head(args.rows)
    frame["prob_1"] = np.random.default_rng(0).random(len(frame))
    print(f"{args.rows:,} rows (occ1, hisco_1, prob_1); rows per second")
    print(f"{'format':8} {'write (chunks)':>15} {'read whole':>12} {'stream':>10} {'size MB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("csv", "parquet", "xlsx", "dta"):
            path = os.path.join(tmp, f"t.{suffix}")

            def write():
                writer = OutputWriter(path)
                for start in range(0, len(frame), args.chunk_size):
                    writer.write(frame.iloc[start : start + args.chunk_size])
                writer.commit()

            wrote = timed(write)
            whole = timed(lambda: read_table(path))
            stream = timed(lambda: sum(len(c) for c in iter_chunks(path, args.chunk_size)))
            print(
                f"{suffix:8} {args.rows / wrote:>15,.0f} {args.rows / whole:>12,.0f} "
                f"{args.rows / stream:>10,.0f} {os.path.getsize(path) / 1e6:>8.1f}"
            )
        path = os.path.join(tmp, "t.csv")
        size = os.path.getsize(path)
        for encoding in ("utf-8", "cp1252"):
            took = timed(lambda: first_undecodable(path, encoding))
            print(f"encoding check ({encoding}): {size / took / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()

"""Prediction throughput of a trained run on this machine: records/s of
Predictor.predict (length-sorted batches, no autograd) on the example data,
fp32 and bf16, with the example data as it is (descriptions repeat) and with
distinct descriptions only (every row through the model), for each head:
flat, seq2seq (greedy decoding) and full (every code of the key scored by the
decoder; measured on the first 500 distinct descriptions, it is much slower).

    python benchmarks/predict_speed.py runs/quickstart [--modes fp32 bf16 int8] [--no-full] [--rows N]

int8 is --quantize int8 (its encoder runs one row at a time; docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.core.precision import cpu_model  # noqa: E402
from mixer.prediction.predict import Predictor  # noqa: E402


FULL_ROWS = 500


def records_per_second(predictor, texts, batch_size, head="flat", repeats=2) -> float:
    langs = np.full(len(texts), "unk", dtype=object)
    predictor.predict(texts[:64], langs[:64], head=head, batch_size=batch_size)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        predictor.predict(texts, langs, head=head, batch_size=batch_size)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--modes", nargs="+", choices=("fp32", "bf16", "int8"), default=["fp32", "bf16"]
    )
    parser.add_argument(
        "--no-full", action="store_true", help="leave out the full head (the slowest)"
    )
    parser.add_argument(
        "--rows", type=int, default=None, help="the first N rows of the example data only"
    )
    args = parser.parse_args()
    texts = pd.read_csv(
        os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False
    )["occ1"].to_numpy(dtype=object)[: args.rows]
    distinct = pd.unique(texts)
    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"{len(texts)} rows, {len(distinct)} distinct descriptions"
    )
    for precision in args.modes:
        quantize = "int8" if precision == "int8" else None
        predictor = Predictor.load(
            args.run_dir,
            device="cpu",
            precision="fp32" if quantize else precision,
            force_precision=True,
            quantize=quantize,
        )
        for head in ("flat", "seq2seq"):
            as_is = records_per_second(predictor, texts, args.batch_size, head)
            unique = records_per_second(predictor, distinct, args.batch_size, head)
            print(
                f"{precision} {head}: {as_is:,.0f} records/s on the example data, "
                f"{unique:,.0f} records/s on distinct descriptions only",
                flush=True,
            )
        if args.no_full:
            continue
        full = records_per_second(
            predictor, distinct[:FULL_ROWS], args.batch_size, "full", repeats=1
        )
        print(
            f"{precision} full: {full:,.1f} records/s on {FULL_ROWS} distinct descriptions "
            f"({len(predictor.codes)} codes scored each)",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Prediction throughput of a trained run on this machine: records/s of
Predictor.predict (length-sorted batches, no autograd) on the example data,
fp32 and bf16, with the example data as it is (descriptions repeat) and with
distinct descriptions only (every row through the model).

    python benchmarks/predict_speed.py runs/quickstart
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

from mixer.predict import Predictor  # noqa: E402


def records_per_second(predictor, texts, batch_size, repeats=2) -> float:
    langs = np.full(len(texts), "unk", dtype=object)
    predictor.predict(texts[:256], langs[:256], batch_size=batch_size)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        predictor.predict(texts, langs, batch_size=batch_size)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    texts = pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str,
                        keep_default_na=False)["occ1"].to_numpy(dtype=object)
    distinct = pd.unique(texts)
    print(f"{torch.get_num_threads()} threads; {len(texts)} rows, {len(distinct)} distinct descriptions")
    for precision in ("fp32", "bf16"):
        predictor = Predictor.load(args.run_dir, device="cpu", precision=precision, force_precision=True)
        as_is = records_per_second(predictor, texts, args.batch_size)
        unique = records_per_second(predictor, distinct, args.batch_size)
        print(f"{precision}: {as_is:,.0f} records/s on the example data, "
              f"{unique:,.0f} records/s on distinct descriptions only")


if __name__ == "__main__":
    main()

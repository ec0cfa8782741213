"""How well one temperature calibrates a run's row confidence, against a temperature and a
bias, on rows neither was fit on.

    python benchmarks/calibration_family.py RUN_DIR [RUN_DIR ...]

Reads the run's scores.parquet (a run trained with --share-calibration), fits on its
calibration rows and measures on its validation rows, per head: the expected calibration
error (15 bins) of the raw confidence, of sigmoid(logit / T) (mixer.coding.calibration,
what a run stores) and of sigmoid(a logit + b) (the same with a bias, Platt's scaling, fit
by Newton's method on the log loss); with the mean confidence and the accuracy.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def logit(confidence: np.ndarray) -> np.ndarray:
    p = np.clip(confidence, 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def fit_scale_and_bias(z: np.ndarray, correct: np.ndarray) -> tuple:
    """(a, b) minimising the log loss of sigmoid(a z + b): Newton's method on two parameters."""
    a, b = 1.0, 0.0
    y = correct.astype(np.float64)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(a * z + b)))
        grad = np.array([np.sum((p - y) * z), np.sum(p - y)])
        w = p * (1 - p) + 1e-12
        hess = np.array([[np.sum(w * z * z), np.sum(w * z)], [np.sum(w * z), np.sum(w)]])
        step = np.linalg.solve(hess + 1e-9 * np.eye(2), grad)
        a, b = a - step[0], b - step[1]
        if np.abs(step).max() < 1e-10:
            break
    return float(a), float(b)


def main(argv=None) -> int:
    from mixer.coding.calibration import calibrate, expected_calibration_error, fit_temperature

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args(argv)
    for run in args.runs:
        scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
        fit, held = (scores["split"] == "cal").to_numpy(), (scores["split"] == "val").to_numpy()
        if not fit.any():
            print(f"{run}: no calibration rows (train with --share-calibration)")
            continue
        print(
            f"{run}: fit on {fit.sum()} calibration rows, measured on {held.sum()} validation rows"
        )
        for head in ("flat", "seq2seq"):
            confidence = scores[f"{head}_confidence"].to_numpy(np.float64)
            correct = scores[f"{head}_correct"].to_numpy(bool)
            temperature = fit_temperature(confidence[fit], correct[fit])
            a, b = fit_scale_and_bias(logit(confidence[fit]), correct[fit])
            scaled = 1 / (1 + np.exp(-(a * logit(confidence[held]) + b)))
            print(
                f"  {head}: mean confidence {confidence[held].mean():.3f}, accuracy {correct[held].mean():.3f}; "
                f"ECE raw {expected_calibration_error(confidence[held], correct[held]):.3f}, "
                f"temperature {temperature:.3f} "
                f"{expected_calibration_error(calibrate(confidence[held], temperature), correct[held]):.3f}, "
                f"scale {a:.3f} and bias {b:.3f} {expected_calibration_error(scaled, correct[held]):.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The split of a run's rows: training, validation and calibration rows, seeded."""

from __future__ import annotations

import numpy as np

from mixer.core.errors import UserError


def split_rows(
    n_rows: int, share_val: float, seed: int, share_calibration: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded random split: (train, validation, calibration indices), each sorted. The
    validation rows are the same with or without a calibration share: its rows come out
    of the training rows."""
    n_val = int(round(n_rows * share_val))
    n_cal = int(round(n_rows * share_calibration))
    if not share_calibration and (n_val < 1 or n_val >= n_rows):
        raise UserError(
            f"--share-val {share_val} of {n_rows} rows leaves "
            f"{n_val} validation and {n_rows - n_val} training rows; "
            "both need at least one: change --share-val or add rows"
        )
    if share_calibration and (n_val < 1 or n_val + n_cal >= n_rows):
        raise UserError(
            f"--share-val {share_val} and --share-calibration {share_calibration} of {n_rows} rows "
            f"leave {n_val} validation and {max(n_rows - n_val - n_cal, 0)} training rows; both need "
            "at least one: lower the shares or add rows"
        )
    if share_calibration and n_cal < 1:
        raise UserError(
            f"--share-calibration {share_calibration} of {n_rows} rows sets no row aside: "
            "raise it, or leave it out"
        )
    order = np.random.default_rng(seed).permutation(n_rows)
    return (
        np.sort(order[n_val + n_cal :]),
        np.sort(order[:n_val]),
        np.sort(order[n_val : n_val + n_cal]),
    )


def calibration_rows(n_rows: int, share_calibration: float, seed: int) -> np.ndarray:
    """The rows of the validation files set aside for calibration (train_mixer.py):
    a seeded share of them, sorted; the rest stay validation rows."""
    n_cal = int(round(n_rows * share_calibration))
    if n_cal < 1:
        raise UserError(
            f"--share-calibration {share_calibration} of the {n_rows} rows of --val-data sets no "
            "row aside: raise it, or leave it out"
        )
    if n_cal >= n_rows:
        raise UserError(
            f"--share-calibration {share_calibration} of the {n_rows} rows of --val-data "
            "leaves no validation row: lower it or add validation rows"
        )
    return np.sort(np.random.default_rng([seed, 11]).permutation(n_rows)[:n_cal])

"""Calibration: per head, a temperature and a bias on the logit of the row confidence,
calibrated = sigmoid(logit(conf) / T + bias) (bias 0: temperature scaling alone). Monotone,
so it changes no code and no ranking; only the numbers a user reads
(docs/coding.md#calibrated-confidence)."""

from __future__ import annotations

import json
import math
import os
from typing import Optional

import numpy as np

FILE = "calibration.json"
VERSION = 1
CLIP = 1e-12
LOG_T_RANGE = (math.log(0.05), math.log(20.0))


def _logit(confidence) -> np.ndarray:
    p = np.clip(np.asarray(confidence, dtype=np.float64), CLIP, 1.0 - CLIP)
    return np.log(p) - np.log1p(-p)


def calibrate(confidence, temperature: float, bias: float = 0.0) -> np.ndarray:
    """sigmoid(logit(conf) / T + bias), conf clipped to [1e-12, 1 - 1e-12]; T 1.0 and bias 0
    leave it (clipped)."""
    z = _logit(confidence) / float(temperature) + float(bias)
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # sigmoid without overflow


def fit_scaling(confidence, correct) -> tuple:
    """(T, bias) minimising the binary log loss of `correct` under calibrate(conf, T, bias):
    a logistic regression on logit(conf) (Newton's method), 1/T kept in [1/20, 1/0.05].
    The flat head's confidence, a product over every code of the key, sits below the
    accuracy by a shift that a temperature alone cannot remove: the bias does."""
    z = _logit(confidence)
    correct = np.asarray(correct, dtype=bool)
    if len(z) == 0 or correct.all() or not correct.any():
        return 1.0, 0.0  # one class only: the loss falls without bound
    order = np.lexsort((correct, z))  # one order, whatever order the rows came in
    z, y = z[order], correct[order].astype(np.float64)
    lo, hi = 1.0 / math.exp(LOG_T_RANGE[1]), 1.0 / math.exp(LOG_T_RANGE[0])

    def loss(a, b):
        s = a * z + b
        return float(np.mean(np.logaddexp(0.0, np.where(y > 0, -s, s))))

    a, b = 1.0, 0.0
    current = loss(a, b)
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh(0.5 * (a * z + b)))
        w = p * (1.0 - p)
        gradient = np.array([np.dot(p - y, z), np.sum(p - y)]) / len(z)
        hessian = np.array([[np.dot(w, z * z), np.dot(w, z)], [np.dot(w, z), np.sum(w)]]) / len(z)
        step = np.linalg.solve(hessian + 1e-12 * np.eye(2), gradient)
        for _ in range(30):  # halve the step until the loss falls (and 1/T stays in range)
            na, nb = float(np.clip(a - step[0], lo, hi)), float(b - step[1])
            new = loss(na, nb)
            if new <= current:
                break
            step = step / 2.0
        else:
            break
        converged = abs(current - new) < 1e-15
        a, b, current = na, nb, new
        if converged:
            break
    return 1.0 / a, b


def _nll(z: np.ndarray, correct: np.ndarray, temperature: float) -> float:
    s = z / temperature
    # -[y log sigmoid(s) + (1-y) log sigmoid(-s)]
    return float(np.mean(np.logaddexp(0.0, np.where(correct, -s, s))))


def fit_temperature(confidence, correct) -> float:
    """The T minimising the binary log loss of `correct` under calibrate(conf, T):
    golden-section search on log T in [log 0.05, log 20]. 1.0 when there is nothing to fit."""
    z = _logit(confidence)
    correct = np.asarray(correct, dtype=bool)
    if len(z) == 0 or correct.all() or not correct.any():
        return 1.0  # one class only: the loss falls without bound, no temperature is right
    # the rows in one order, whatever order they came in (N processes gather them in another):
    # float sums depend on the order, and the search must give the same T to the last bit
    order = np.lexsort((correct, z))
    z, correct = z[order], correct[order]
    lo, hi = LOG_T_RANGE
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa, fb = _nll(z, correct, math.exp(a)), _nll(z, correct, math.exp(b))
    for _ in range(80):  # the bracket shrinks by 0.618 a step: 80 steps reach float precision
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = _nll(z, correct, math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = _nll(z, correct, math.exp(b))
    return float(math.exp((lo + hi) / 2.0))


def expected_calibration_error(confidence, correct, bins: int = 15) -> float:
    """Sum over equal-width confidence bins of (rows in bin / rows) * |accuracy - mean confidence|."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if len(confidence) == 0:
        return float("nan")
    which = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    rows = np.bincount(which, minlength=bins)
    gap = np.abs(np.bincount(which, correct, bins) - np.bincount(which, confidence, bins))
    return float(gap.sum() / rows.sum())


def reliability_table(confidence, correct, bins: int = 15):
    """Per equal-width bin: rows, mean confidence, accuracy (NaN where a bin is empty)."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    which = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    rows = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(which, confidence, bins) / rows
        accuracy = np.bincount(which, correct, bins) / rows
    return rows, mean, accuracy


def reliability_diagram(path: str, before, after, correct, title: str, bins: int = 15) -> str:
    """A PNG: accuracy against mean confidence per bin, before and after calibration, with
    each curve's expected calibration error in its legend."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works with no display (clusters, CI)
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5.5, 5.5), constrained_layout=True)
    axis.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect calibration")
    for values, label, marker in ((before, "raw", "o"), (after, "calibrated", "s")):
        if values is None:
            continue
        rows, mean, accuracy = reliability_table(values, correct, bins)
        shown = rows > 0
        ece = expected_calibration_error(values, correct, bins)
        axis.plot(mean[shown], accuracy[shown], marker=marker, label=f"{label} (ECE {ece:.4f})")
    axis.set_xlim(0, 1)
    axis.set_ylim(0, 1)
    axis.set_xlabel("confidence (mean in bin)")
    axis.set_ylabel("accuracy (exact code set)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


# A fit of its own (predict.py --calibrate) needs this many labelled rows, and this many of the
# rarer outcome (right or wrong): a logistic regression of two parameters wants about 10 rows
# of the rarer outcome a parameter, and the error measured on rows the fit did not see wants
# rows in the bins (docs/coding.md, "Calibrating an existing model"). The run's own fit at the
# end of training uses its held-out rows alone from the same 100 on.
MIN_ROWS = 100
MIN_OUTCOME = 20
FOLDS = 5  # the error on rows the fit did not see: 5-fold cross-validation


def unfit_reason(
    confidence, correct, min_rows: int = MIN_ROWS, min_outcome: int = MIN_OUTCOME
) -> str:
    """Why a scaling cannot be fit on these rows ('' when it can): too few rows, too few of
    one outcome (all right: the fit would run without bound), right and wrong rows that the
    confidence separates exactly (the same), or a fit that ran to the clamp of its
    temperature (1/T at 1/20 or 1/0.05: the rows do not pin it down).
    Training's own fit at its end (mixer.coding.scores) asks the degenerate cases alone
    (min_rows 0, min_outcome 1): it fits on the run's held-out rows whatever their number."""
    correct = np.asarray(correct, dtype=bool)
    n, right = len(correct), int(correct.sum())
    if n < min_rows:
        return f"{n:,} labelled rows are too few (at least {min_rows} are needed)"
    rarer, which = min((right, "right"), (n - right, "wrong"))
    if rarer < min_outcome:
        return (
            f"{rarer:,} of its {n:,} labelled rows are {which} (at least {min_outcome} right and "
            f"{min_outcome} wrong are needed: with one outcome alone the fit runs without bound)"
        )
    temperature, _ = fit_scaling(confidence, correct)
    if at_clamp(temperature):
        return (
            f"the fit ran to the limit of its temperature (T = {temperature:g}, kept in [0.05, 20]): "
            "these rows do not pin the scaling down"
        )
    z = _logit(confidence)
    if z[correct].min() > z[~correct].max():  # short of the limit only where the fit stopped early
        return (
            "the confidence separates its right rows from its wrong ones exactly (a fit on them runs "
            "without bound)"
        )
    return ""


def at_clamp(temperature: float) -> bool:
    """Whether a fit temperature lies at the bound fit_scaling keeps 1/T in."""
    log_t = math.log(float(temperature))
    return min(abs(log_t - LOG_T_RANGE[0]), abs(log_t - LOG_T_RANGE[1])) < 1e-6


def cross_validated(confidence, correct, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """Each row's confidence calibrated by the scaling fit on the other folds (rows put in
    `folds` folds by a seeded draw): the calibration as rows it did not see get it."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    fold = np.random.default_rng(seed).permutation(len(confidence)) % folds
    out = np.empty(len(confidence), dtype=np.float64)
    for k in range(folds):
        test = fold == k
        out[test] = calibrate(confidence[test], *fit_scaling(confidence[~test], correct[~test]))
    return out


def head_entry(confidence, correct, held_out: bool = False) -> dict:
    """What calibration.json stores for one head, fit on these rows (fit_scaling); with
    held_out, also the error on rows the fit did not see (cross_validated)."""
    temperature, bias = fit_scaling(confidence, correct)
    entry = {
        "temperature": temperature,
        "bias": bias,
        "rows": int(len(confidence)),
        "ece_before": expected_calibration_error(confidence, correct),
        "ece_after": expected_calibration_error(calibrate(confidence, temperature, bias), correct),
    }
    if held_out:  # the error on rows the fit did not see (cross_validated)
        entry["cross_validated"] = {
            "folds": FOLDS,
            "ece_before": entry["ece_before"],
            "ece_after": expected_calibration_error(cross_validated(confidence, correct), correct),
        }
    return entry


def identity_entry(confidence, correct, why: str) -> dict:
    """head_entry's for rows no scaling can be fit on (`why`, unfit_reason's): the identity
    (T 1, bias 0) kept, and why."""
    ece = expected_calibration_error(confidence, correct)
    return {
        "temperature": 1.0,
        "bias": 0.0,
        "rows": int(len(confidence)),
        "ece_before": ece,
        "ece_after": ece,
        "not_fit": why,
    }


def calibrate_entry(confidence, entry: Optional[dict]) -> np.ndarray:
    """Confidences calibrated by one head's entry of calibration.json (head_entry's): its
    temperature and its bias (0 where an entry has none); unchanged for None."""
    return calibrate(confidence, *scaling_of(entry))


def scaling_of(entry: Optional[dict]) -> tuple:
    """(temperature, bias) of one head's entry of calibration.json: (1.0, 0.0) for none,
    bias 0 for an entry without one."""
    entry = entry or {}
    return float(entry.get("temperature", 1.0)), float(entry.get("bias", 0.0))


def write_calibration(model_dir: str, heads: dict, rows: str) -> str:
    """Write MODEL_DIR/calibration.json: heads maps a head name to head_entry(...); rows says
    in words which rows it was fit on."""
    from mixer.core.io import write_text

    path = os.path.join(model_dir, FILE)
    write_text(
        path, json.dumps({"version": VERSION, "heads": heads, "rows": rows}, indent=2) + "\n"
    )
    return path


def read_calibration(model_dir: str) -> Optional[dict]:
    """MODEL_DIR/calibration.json, or None when the model has none (temperature 1.0)."""
    path = os.path.join(model_dir, FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def temperature(model_dir: str, head: str) -> float:
    """The stored temperature of a head, 1.0 when none is stored."""
    return scaling(model_dir, head)[0]


def scaling(model_dir: str, head: str) -> tuple:
    """(temperature, bias) stored for a head: (1.0, 0.0) when none is stored."""
    return scaling_of((read_calibration(model_dir) or {}).get("heads", {}).get(head))


def calibrated(model_dir: str, head: str, confidence) -> np.ndarray:
    """A head's row confidences calibrated as the model directory says (unchanged without
    calibration.json): what predict.py, the API, --to-check and audits show."""
    stored = (read_calibration(model_dir) or {}).get("heads", {}).get(head)
    return calibrate_entry(confidence, stored)

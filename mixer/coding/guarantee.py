"""A confidence threshold whose coded rows reach a target accuracy with stated confidence
on new rows like the ones it is chosen on: Learn-then-Test with exact binomial tests in a
fixed sequence over a grid fixed in advance (docs/coding.md#the-guarantee)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

# Thresholds on the RAW confidence scale (temperature 1), fixed before any data is seen, from
# the most confident end: 40 a decade of 1 - confidence, 1 - 1e-6 down to 0.
GRID = 1.0 - np.logspace(-6.0, 0.0, 241)
# With a number of rows to code, this share of delta covers their own sampling error and
# the rest the test on the labelled rows (a union bound).
REST_SHARE = 0.5


@dataclass(frozen=True)
class Choice:
    """What choose_threshold found: threshold None when no grid point passes."""

    threshold: Optional[float]
    coded_share: float          # share of the labelled rows at or above the threshold
    bound: Optional[float]      # lower confidence bound of the coded rows' accuracy (at 1 - delta_test)
    rows_used: int              # labelled rows the choice was made on
    procedure: str              # the procedure in words, with its parameters
    needed: Optional[int] = None  # about how many labelled rows would reach the target, when unreached
    note: str = ""              # why nothing was chosen, in words
    target: float = 0.95
    delta: float = 0.05


# ---------------------------------------------------------------------- binomial tails
def _continued_fraction(a, b, x, steps: int = 10000):
    """The continued fraction of the regularised incomplete beta (modified Lentz), vectorised;
    converges fast where x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    c = np.ones_like(x)
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    done = np.zeros(x.shape, dtype=bool)
    for m in range(1, steps + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1.0) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1.0))):
            d = 1.0 + numerator * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + numerator / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            step = c * d
            h = np.where(done, h, h * step)
        done |= np.abs(step - 1.0) < 1e-15
        if done.all():
            break
    return h


def _betainc(a, b, x) -> np.ndarray:
    """The regularised incomplete beta I_x(a, b), elementwise, a and b > 0."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, x)))
    out = np.where(x >= 1.0, 1.0, 0.0)
    inside = (x > 0.0) & (x < 1.0)
    if not inside.any():
        return out
    a, b, x = a[inside], b[inside], x[inside]
    lgamma = np.vectorize(math.lgamma)
    front = np.exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * np.log(x) + b * np.log1p(-x))
    direct = x < (a + 1.0) / (a + b + 2.0)
    value = np.empty_like(x)
    if direct.any():
        value[direct] = front[direct] * _continued_fraction(a[direct], b[direct], x[direct]) / a[direct]
    flip = ~direct
    if flip.any():  # I_x(a, b) = 1 - I_{1-x}(b, a)
        value[flip] = 1.0 - front[flip] * _continued_fraction(b[flip], a[flip], 1.0 - x[flip]) / b[flip]
    out[inside] = np.clip(value, 0.0, 1.0)
    return out


def binomial_upper_tail(k, n, p) -> np.ndarray:
    """P(Bin(n, p) >= k), elementwise: the exact binomial p-value of k successes in n against p."""
    k, n, p = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (k, n, p)))
    out = np.where(k <= 0, 1.0, 0.0)
    middle = (k > 0) & (k <= n)
    if middle.any():
        out[middle] = _betainc(k[middle], n[middle] - k[middle] + 1.0, p[middle])
    return out


def lower_bound(k: int, n: int, delta: float) -> float:
    """The one-sided Clopper-Pearson lower bound: the p at which P(Bin(n, p) >= k) = delta."""
    if n <= 0 or k <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if binomial_upper_tail(k, n, mid) > delta:
            hi = mid
        else:
            lo = mid
    return lo


def rest_target(rows: int, target: float, delta_rest: float) -> float:
    """The smallest accuracy q at which `rows` new coded rows, each right with probability q,
    reach `target` with probability at least 1 - delta_rest: P(Bin(rows, q) >= ceil(target rows))."""
    if rows <= 0:
        return target
    needed = math.ceil(target * rows - 1e-9)
    lo, hi = target, 1.0
    if binomial_upper_tail(needed, rows, hi - 1e-15) < 1.0 - delta_rest:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if binomial_upper_tail(needed, rows, mid) >= 1.0 - delta_rest:
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------------- the choice
def _rows_to_code_at(rows_to_code, coded: np.ndarray, n: int) -> Optional[np.ndarray]:
    if rows_to_code is None:
        return None
    if np.ndim(rows_to_code) == 0:  # a number of rows: coded in the same shares as here
        return np.ceil(float(rows_to_code) * coded / max(n, 1)).astype(np.int64)
    new = np.sort(np.asarray(rows_to_code, dtype=np.float64))
    return (len(new) - np.searchsorted(new, GRID, side="left")).astype(np.int64)


def _needed(coded, right, targets, delta_test, n) -> Optional[int]:
    """About how many labelled rows, coded and right in the shares seen here, would let the
    best grid point pass its test; None when no point's accuracy is above its target."""
    best = None
    for n_j, k_j, t_j in zip(coded, right, targets):
        if n_j == 0 or k_j / n_j <= t_j or t_j >= 1.0:
            continue
        accuracy, share = k_j / n_j, n_j / n
        size = 1
        while binomial_upper_tail(math.ceil(accuracy * size - 1e-9), size, t_j) > delta_test:
            size *= 2
            if size > 10 ** 9:
                break
        lo, hi = size // 2, size
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if binomial_upper_tail(math.ceil(accuracy * mid - 1e-9), mid, t_j) <= delta_test:
                hi = mid
            else:
                lo = mid
        total = math.ceil(hi / share)
        best = total if best is None else min(best, total)
    return best


def choose_threshold(confidence, correct, target: float, delta: float = 0.05,
                     rows_to_code=None) -> Choice:
    """The lowest grid threshold whose coded rows pass, with every more confident grid point,
    an exact binomial test of "accuracy < target" at level delta on these labelled rows.
    rows_to_code (a count, or the new rows' confidences) adds the new rows' own sampling
    error: their realised accuracy then reaches the target with probability 1 - delta."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if not 0.0 < target < 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"target {target} and delta {delta} must lie between 0 and 1")
    n = len(confidence)
    order = np.argsort(-confidence, kind="stable")
    right_so_far = np.r_[0, np.cumsum(correct[order])]  # right among the i most confident rows
    coded = (n - np.searchsorted(np.sort(confidence), GRID, side="left")).astype(np.int64)
    right = right_so_far[coded].astype(np.int64)  # rows at or above each threshold
    new_rows = _rows_to_code_at(rows_to_code, coded, n)
    if new_rows is None:
        delta_test, targets = delta, np.full(len(GRID), target)
        procedure = (f"Learn-then-Test: fixed-sequence exact binomial tests of accuracy < {target:g} "
                     f"at delta {delta:g} over mixer.coding.guarantee.GRID from the most confident end")
    else:
        delta_test = delta * (1.0 - REST_SHARE)
        rest = delta * REST_SHARE
        targets = np.array([rest_target(int(m), target, rest) for m in new_rows])
        procedure = (f"Learn-then-Test: fixed-sequence exact binomial tests at delta {delta_test:g} over "
                     f"mixer.coding.guarantee.GRID from the most confident end, each of accuracy < the "
                     f"level at which the rows to code reach {target:g} with probability 1 - {rest:g}")
    # a point with too few rows to pass even when all are right is not tested (it depends on
    # the confidences alone, not on which rows are right, so skipping it keeps the guarantee)
    testable = (coded > 0) & (targets < 1.0) & (coded * np.log(np.maximum(targets, 1e-300)) <= math.log(delta_test))
    p_values = np.ones(len(GRID))
    if testable.any():
        p_values[testable] = binomial_upper_tail(right[testable], coded[testable], targets[testable])
    chosen = None
    for j in np.flatnonzero(testable):
        if p_values[j] > delta_test:
            break
        chosen = j
    if chosen is None:
        needed = _needed(coded, right, targets, delta_test, n) if n else None
        if needed is None:
            note = (f"no confidence threshold reaches accuracy {target:g} on these {n} labelled rows; "
                    "more rows like them would not change that")
        else:
            note = (f"{n} labelled rows cannot show accuracy {target:g} at {1 - delta:g} confidence; "
                    f"about {needed} like them would")
        return Choice(None, 0.0, None, n, procedure, needed, note, target, delta)
    bound = lower_bound(int(right[chosen]), int(coded[chosen]), delta_test)
    return Choice(float(GRID[chosen]), float(coded[chosen] / n), bound, n, procedure, None, "",
                  target, delta)

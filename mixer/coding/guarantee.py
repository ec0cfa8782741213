"""A confidence threshold whose coded rows reach a target accuracy with stated confidence
on new rows like the ones it is chosen on: Learn-then-Test with exact binomial tests in a
fixed sequence over a grid fixed in advance (docs/coding.md#the-guarantee)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from scipy import special

# Thresholds on the RAW confidence scale (temperature 1), fixed before any data is seen, from
# the most confident end: 40 a decade of 1 - confidence, 1 - 1e-6 down to 0.
GRID = 1.0 - np.logspace(-6.0, 0.0, 241)
# With a number of rows to code, this share of delta covers their own sampling error and
# the rest the test on the labelled rows (a union bound).
REST_SHARE = 0.5
# A grid point counts towards "about how many labelled rows it would take" only with at least
# this many rows: an accuracy read off fewer is too rough to extrapolate from.
MIN_HOPEFUL = 20
MOST_NEEDED = 10**8  # beyond this "how many rows it would take" is not worth an answer
# The first point tested has enough rows to pass at an accuracy this far from the target to 1
# (docs/coding.md#the-guarantee).
START = 0.5


@dataclass(frozen=True)
class Choice:
    """What choose_threshold found: threshold None when no grid point passes."""

    threshold: Optional[float]
    coded_share: float  # share of the labelled rows at or above the threshold
    bound: Optional[float]  # lower confidence bound of the coded rows' accuracy (at 1 - delta_test)
    rows_used: int  # labelled rows the choice was made on
    procedure: str  # the procedure in words, with its parameters
    needed: Optional[int] = (
        None  # about how many labelled rows would reach the target, when unreached
    )
    note: str = ""  # why nothing was chosen, in words
    target: float = 0.95
    delta: float = 0.05
    cause: str = ""  # why, in one word: "none" (no threshold reaches the target on these rows),
    #                             "few" (too few labelled rows) or "file" (too few rows to code), or ""


# ---------------------------------------------------------------------- binomial tails
def binomial_upper_tail(k, n, p) -> np.ndarray:
    """P(Bin(n, p) >= k), elementwise: the exact binomial p-value of k successes in n against p."""
    k, n, p = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (k, n, p)))
    out = np.where(k <= 0, 1.0, 0.0)
    middle = (k > 0) & (k <= n)
    if middle.any():
        out[middle] = special.betainc(
            k[middle], n[middle] - k[middle] + 1.0, np.clip(p[middle], 0.0, 1.0)
        )
    return out


def lower_bound(k: int, n: int, delta: float) -> float:
    """The one-sided Clopper-Pearson lower bound: the p at which P(Bin(n, p) >= k) = delta
    (I_p(k, n - k + 1) = delta: scipy.special.betaincinv)."""
    if n <= 0 or k <= 0:
        return 0.0
    return float(special.betaincinv(k, n - k + 1, delta))


_REST_TARGETS: dict = {}  # (target, delta_rest) -> {rows: level}: a pure function, kept


def rest_targets(rows, target: float, delta_rest: float) -> np.ndarray:
    """Per count m of new coded rows: the smallest accuracy q at which m rows, each right with
    probability q, reach `target` with probability at least 1 - delta_rest
    (P(Bin(m, q) >= ceil(target m)) >= 1 - delta_rest). Target itself where m is 0."""
    rows = np.asarray(rows, dtype=np.int64)
    distinct, back = np.unique(rows, return_inverse=True)
    known = _REST_TARGETS.setdefault((float(target), float(delta_rest)), {})
    todo = np.array([m for m in distinct if int(m) not in known], dtype=np.int64)
    if len(todo):
        needed = np.maximum(np.ceil(target * todo - 1e-9), 1.0)
        # P(Bin(m, q) >= c) = I_q(c, m - c + 1) grows with q: its inverse at 1 - delta_rest
        level = special.betaincinv(needed, np.maximum(todo - needed + 1.0, 1.0), 1.0 - delta_rest)
        known.update(
            zip(
                todo.tolist(),
                np.where(todo > 0, np.maximum(level, float(target)), float(target)).tolist(),
            )
        )
    return np.array([known[int(m)] for m in distinct])[back]


def rest_target(rows: int, target: float, delta_rest: float) -> float:
    """rest_targets for one count."""
    return float(rest_targets([rows], target, delta_rest)[0])


# ---------------------------------------------------------------------- the choice
def _rows_to_code_at(rows_to_code, coded: np.ndarray, n: int) -> Optional[np.ndarray]:
    if rows_to_code is None:
        return None
    if np.ndim(rows_to_code) == 0:  # a number of rows: coded in the same shares as here
        return np.ceil(float(rows_to_code) * coded / max(n, 1)).astype(np.int64)
    new = np.sort(np.asarray(rows_to_code, dtype=np.float64))
    return (len(new) - np.searchsorted(new, GRID, side="left")).astype(np.int64)


def _fixed_sequence(
    coded, right, targets, delta_test, start: Optional[float] = None
) -> Optional[int]:
    """The last grid index of the run of passed tests from the most confident end, or None.
    The sequence starts at the first point with enough rows to pass at an accuracy of
    START of the way from the target to 1. A test on fewer rows passes only when (nearly)
    every row is right, so one slip among the most confident rows would end the sequence
    before it reached the rows that matter. Which points are tested depends on the
    confidences alone, not on which rows are right, so skipping some keeps the guarantee."""
    passing = targets + (1.0 if start is None else start) * (1.0 - targets)  # None: all right
    testable = (coded > 0) & (targets < 1.0)
    testable[testable] = (
        binomial_upper_tail(
            np.ceil(passing[testable] * coded[testable] - 1e-9), coded[testable], targets[testable]
        )
        <= delta_test
    )
    p_values = np.ones(len(coded))
    if testable.any():
        p_values[testable] = binomial_upper_tail(
            right[testable], coded[testable], targets[testable]
        )
    chosen = None
    for j in np.flatnonzero(testable):
        if p_values[j] > delta_test:
            break
        chosen = int(j)
    return chosen


def _needed(coded, right, targets, delta_test, n, start, least: int = MIN_HOPEFUL) -> Optional[int]:
    """About how many labelled rows, coded and right in the shares seen here, would let the
    fixed sequence pass a point; None when no point of `least` rows or more has an accuracy
    above its target."""
    with np.errstate(invalid="ignore", divide="ignore"):
        hopeful = (coded >= least) & (right / np.maximum(coded, 1) > targets) & (targets < 1.0)
    if not hopeful.any() or n == 0:
        return None

    def passes(scale: float) -> bool:
        return _fixed_sequence(coded * scale, right * scale, targets, delta_test, start) is not None

    lo, hi = 1.0, 2.0
    while not passes(hi):  # double, then bisect on the number of rows
        lo, hi = hi, hi * 2.0
        if hi * n > MOST_NEEDED:
            return None
    while (hi - lo) * n > 1.0:
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return int(math.ceil(hi * n))


def grid_counts(confidence, correct) -> tuple:
    """(rows at or above each GRID threshold, how many of them are right, rows)."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    n = len(confidence)
    order = np.argsort(-confidence, kind="stable")
    right_so_far = np.r_[0, np.cumsum(correct[order])]  # right among the i most confident rows
    coded = (n - np.searchsorted(np.sort(confidence), GRID, side="left")).astype(np.int64)
    return coded, right_so_far[coded].astype(np.int64), n


def choose_threshold(
    confidence,
    correct,
    target: float,
    delta: float = 0.05,
    rows_to_code=None,
    start: Optional[float] = START,
) -> Choice:
    """The lowest grid threshold whose coded rows pass, with every more confident grid point,
    an exact binomial test of "accuracy < target" at level delta on these labelled rows.
    rows_to_code (a count, or the new rows' confidences) adds the new rows' own sampling
    error: their realised accuracy then reaches the target with probability 1 - delta.
    start None: the plain fixed sequence, from the first point that could pass at all."""
    coded, right, n = grid_counts(confidence, correct)
    return choose_from_counts(coded, right, n, target, delta, rows_to_code, start)


def choose_from_counts(
    coded,
    right,
    n: int,
    target: float,
    delta: float = 0.05,
    rows_to_code=None,
    start: Optional[float] = START,
) -> Choice:
    """choose_threshold from the counts of grid_counts (or level_counts)."""
    if not 0.0 < target < 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"target {target} and delta {delta} must lie between 0 and 1")
    coded, right = np.asarray(coded, dtype=np.int64), np.asarray(right, dtype=np.int64)
    new_rows = _rows_to_code_at(rows_to_code, coded, n)
    if new_rows is None:
        delta_test, targets = delta, np.full(len(GRID), target)
        procedure = (
            f"Learn-then-Test: fixed-sequence exact binomial tests of accuracy < {target:g} "
            f"at delta {delta:g} over mixer.coding.guarantee.GRID from the most confident end"
        )
    else:
        delta_test = delta * (1.0 - REST_SHARE)
        rest = delta * REST_SHARE
        targets = rest_targets(new_rows, target, rest)
        procedure = (
            f"Learn-then-Test: fixed-sequence exact binomial tests at delta {delta_test:g} over "
            f"mixer.coding.guarantee.GRID from the most confident end, each of accuracy < the "
            f"level at which the rows to code reach {target:g} with probability 1 - {rest:g}"
        )
    if start is not None:
        procedure += f", the first point tested one with rows to pass {start:g} of the way from its level to 1"
    chosen = _fixed_sequence(coded, right, targets, delta_test, start)
    if chosen is None:
        needed = _needed(coded, right, targets, delta_test, n, start)
        rough = (
            0 < n < MIN_HOPEFUL
        )  # too few rows to say "never": an estimate read off them all the same
        if needed is None and rough:
            needed = _needed(coded, right, targets, delta_test, n, start, least=1)
        file_bound = (
            new_rows is not None
            and n > 0
            and _fixed_sequence(coded, right, np.full(len(GRID), target), delta, start) is not None
        )
        if n == 0:
            note, cause = "no labelled rows to choose a threshold on", "few"
        elif file_bound:
            rows = len(rows_to_code) if np.ndim(rows_to_code) else int(rows_to_code)
            note = (
                f"these {n} labelled rows show accuracy {target:g} for new rows like them, but {rows:,} rows "
                f"to code are too few for their own accuracy to reach it at {1 - delta:g} confidence (a small "
                f"file's accuracy scatters around the model's: it would need a model right "
                f"{rest_target(max(rows, 1), target, delta * REST_SHARE):.3f} of the time above the threshold"
                + (f"; about {needed:,} labelled rows like these would show that" if needed else "")
                + ")"
            )
            cause = "file"
        elif needed is None and rough:
            note = (
                f"{n} labelled rows are too few to show accuracy {target:g} at {1 - delta:g} confidence, "
                f"and too few to tell how many would (at least {MIN_HOPEFUL} rows are needed to estimate it)"
            )
            cause = "few"
        elif needed is None:
            note = (
                f"no confidence threshold reaches accuracy {target:g} on these {n} labelled rows; "
                "more rows like them would not change that"
            )
            cause = "none"
        else:
            note = (
                f"{n} labelled rows are too few to show accuracy {target:g} at {1 - delta:g} confidence; "
                f"about {needed:,} like them would"
                + (f" (a rough estimate, read off fewer than {MIN_HOPEFUL} rows)" if rough else "")
            )
            cause = "few"
        return Choice(None, 0.0, None, n, procedure, needed, note, target, delta, cause)
    bound = lower_bound(int(right[chosen]), int(coded[chosen]), delta_test)
    return Choice(
        float(GRID[chosen]), float(coded[chosen] / n), bound, n, procedure, None, "", target, delta
    )


# ---------------------------------------------------------------------- shorter codes
def given_levels(confidences, threshold: float) -> np.ndarray:
    """Per row, the index in `confidences` (the whole code first, then coarser levels) of
    the first whose confidence reaches the threshold: the code a row is given; -1 for none."""
    passed = np.stack([np.asarray(c, dtype=np.float64) >= threshold for c in confidences])
    return np.where(passed.any(axis=0), passed.argmax(axis=0), -1)


def level_counts(confidences, corrects) -> tuple:
    """grid_counts for codes that fall back to shorter ones. At each GRID threshold a row is
    coded at the first of its levels (the whole code first) whose confidence reaches it, and
    counts as right when its code is right at that level."""
    corrects = [np.asarray(c, dtype=bool) for c in corrects]
    n = len(corrects[0])
    coded, right = np.zeros(len(GRID), dtype=np.int64), np.zeros(len(GRID), dtype=np.int64)
    best = np.max(np.stack([np.asarray(c, dtype=np.float64) for c in confidences]), axis=0)
    for j, threshold in enumerate(GRID):
        if not (best >= threshold).any():
            continue
        given = given_levels(confidences, threshold)
        coded[j] = (given >= 0).sum()
        right[j] = sum(int(corrects[level][given == level].sum()) for level in range(len(corrects)))
    return coded, right, n


def choose_with_levels(
    confidences,
    corrects,
    target: float,
    delta: float = 0.05,
    rows_to_code=None,
    start: Optional[float] = START,
) -> tuple:
    """(Choice, share of the labelled rows given each level at its threshold): one threshold
    for codes that fall back to shorter ones, accuracy counted at the level given. As
    rows_to_code, pass a count or the new rows' best confidence over their levels."""
    coded, right, n = level_counts(confidences, corrects)
    choice = choose_from_counts(coded, right, n, target, delta, rows_to_code, start)
    if choice.threshold is None:
        return choice, [0.0] * len(confidences)
    given = given_levels(confidences, choice.threshold)
    return choice, [float((given == level).mean()) for level in range(len(confidences))]

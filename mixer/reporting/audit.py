"""The statistics of an audit: a random sample of predictions that a person checks by
hand, turned into an accuracy with a 95% interval (docs/evaluation.md, "Audits").

- Drawing: every row of the predicted file gets a key, a 64-bit hash of (seed, row
  number) (SplitMix64's mixing function, a bijection: no two rows share a key). The n
  rows of smallest key are a simple random sample of n rows without replacement, whatever
  the order or the chunks the rows arrive in (mixer.prediction.audit keeps them); within a
  stratum, its n_h rows of smallest key. The first m rows of a sample in key order are a
  simple random sample of m rows too, so a person who stops early has still checked a
  random sample.
- Allocation (stratified): proportional to the strata's rows by largest remainders, with
  every stratum at least 2 rows (or all of its rows when it has fewer), so that each
  stratum's variance can be estimated.
- Intervals: Wilson's score interval for a simple sample (Brown, Cai & DasGupta 2001:
  close to 95% even for small n, where the textbook p +- 1.96 se is not). For a
  stratified sample the estimate is the strata's accuracies weighted by their shares of
  rows, with the stratified variance estimator (Cochran 1977, 5.3) and the Wilson interval
  at the design's effective sample size n_eff = p(1 - p) / v (Kish), kept at most the
  rows checked; this is the "modified Wilson" interval that Korn & Graubard (1998) and
  Franco, Little, Louis & Slud (2019) find to hold its level at small samples.
- Size: the smallest n whose Wilson interval has the half-width asked for, at the
  accuracy the model expects.

Pure numpy and the standard library: no torch, no pandas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Optional, Sequence

import numpy as np

LEVEL = 0.95
Z = NormalDist().inv_cdf(0.5 + LEVEL / 2)  # 1.95996...
STRATUM_FLOOR = 2  # rows every stratum gets (or all it has): its variance needs two

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of 64-bit integers that scatters neighbours."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64, copy=True)
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
    return z


def row_keys(seed: int, rows: np.ndarray) -> np.ndarray:
    """The sampling key of each row number (uint64): the same for a row whatever chunk,
    process or order it comes in; distinct rows, distinct keys."""
    start = _mix(np.asarray([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    with np.errstate(over="ignore"):
        return _mix(start + _GOLDEN * (np.asarray(rows, dtype=np.uint64) + np.uint64(1)))


def allocate(sizes: Sequence[int], n: int, floor: int = STRATUM_FLOOR) -> np.ndarray:
    """Rows to draw from each stratum: proportional to its rows (largest remainders,
    ties to the earlier stratum), at least `floor` (or all of a smaller stratum), never
    more than it has. n at least the rows of all strata takes them all."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    if n >= total:
        return sizes.copy()
    least = np.minimum(sizes, floor)
    if n < least.sum():
        raise ValueError(f"{n} rows cannot give each of {len(sizes)} strata {floor}")
    fixed = np.zeros(len(sizes), dtype=bool)
    while True:  # strata whose share falls under the floor get the floor; the rest share the rest
        free = ~fixed
        rest = n - int(least[fixed].sum())
        quota = np.zeros(len(sizes))
        quota[free] = rest * sizes[free] / sizes[free].sum()
        below = free & (quota < least)
        if not below.any():
            break
        fixed |= below
    counts = np.where(fixed, least, np.floor(quota).astype(np.int64))
    remainders = np.where(fixed, -1.0, quota - np.floor(quota))
    order = np.lexsort((np.arange(len(sizes)), -remainders))
    counts[order[: n - int(counts.sum())]] += 1
    return np.minimum(counts, sizes)


def wilson(successes, n, z: float = Z) -> tuple:
    """Wilson's score interval for `successes` of `n` (both may be non-integer: a
    weighted share times an effective n). (nan, nan) when n is 0."""
    if n <= 0:
        return math.nan, math.nan
    p = min(max(successes / n, 0.0), 1.0)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_half_width(p: float, n: int, z: float = Z) -> float:
    low, high = wilson(p * n, n, z)
    return (high - low) / 2


def sample_size(expected: float, margin: float, z: float = Z, most: int = 10 ** 9) -> int:
    """The fewest rows whose Wilson interval is at most +-margin when the share right is
    `expected` (the half-width falls as n grows)."""
    if not 0 < margin < 0.5:
        raise ValueError(f"margin {margin}: must be between 0 and 0.5")
    expected = min(max(float(expected), 0.0), 1.0)
    low, high = 1, most
    while low < high:
        middle = (low + high) // 2
        if wilson_half_width(expected, middle, z) <= margin:
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True)
class Estimate:
    """An accuracy and its 95% interval from `n` checked draws (n_eff: the sample size
    the interval behaves as; n for a simple sample)."""

    value: float
    low: float
    high: float
    n: float
    n_eff: float


def simple(correct: float, checked: float, z: float = Z) -> Estimate:
    """A simple random sample: the share right and Wilson's interval."""
    if checked <= 0:
        return Estimate(math.nan, math.nan, math.nan, 0, 0)
    low, high = wilson(correct, checked, z)
    return Estimate(correct / checked, low, high, checked, checked)


def stratified(rows: Sequence[int], correct: Sequence[float], checked: Sequence[float],
               z: float = Z) -> Estimate:
    """A stratified sample: rows[h] rows in stratum h, of which checked[h] were checked
    (a simple random sample of the stratum) and correct[h] found right.

    p = sum W_h p_h with W_h = rows_h / rows;
    v = sum W_h^2 (1 - f_h) p_h (1 - p_h) / (n_h - 1), f_h = n_h / rows_h; a stratum
    with one row checked of several counts the largest variance a share can have, 1/4;
    n_eff = p (1 - p) / v, at most the rows checked (and the rows checked when v or
    p (1 - p) is 0); the interval is Wilson's at (p, n_eff). nan when a stratum has no
    row checked: the strata checked say nothing of it."""
    rows = np.asarray(rows, dtype=float)
    correct = np.asarray(correct, dtype=float)
    checked = np.asarray(checked, dtype=float)
    if (checked <= 0).any() or rows.sum() <= 0:
        return Estimate(math.nan, math.nan, math.nan, float(checked.sum()), math.nan)
    weights = rows / rows.sum()
    shares = correct / checked
    p = float(np.dot(weights, shares))
    fraction = np.minimum(checked / rows, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_stratum = np.where(checked >= 2, shares * (1 - shares) / (checked - 1), 0.25)
    per_stratum = np.where(fraction >= 1, 0.0, per_stratum)  # a stratum checked whole is known
    variance = float(np.sum(weights ** 2 * (1 - fraction) * per_stratum))
    n = float(checked.sum())
    n_eff = n if variance <= 0 or p * (1 - p) <= 0 else min(n, p * (1 - p) / variance)
    low, high = wilson(p * n_eff, n_eff, z)
    return Estimate(p, low, high, n, n_eff)


def estimate(rows: Sequence[int], correct: Sequence[float], checked: Sequence[float],
             stratified_design: bool, z: float = Z) -> Estimate:
    """The audit's estimate: Wilson's for a simple sample, the stratified one otherwise."""
    if not stratified_design:
        return simple(float(np.sum(correct)), float(np.sum(checked)), z)
    return stratified(rows, correct, checked, z)


"""The statistics of an audit: a random sample of predictions that a person checks by
hand, turned into an accuracy with a 95% interval (docs/evaluation.md, "Audits").

- Drawing: every row of the predicted file gets a key, a 64-bit hash of (seed, row
  number) (SplitMix64's mixing function, a bijection: no two rows share a key). The n
  rows of smallest key are a simple random sample of n rows without replacement, whatever
  the order or the chunks the rows arrive in (mixer.audit.draw keeps them); within a
  stratum, its n_h rows of smallest key. The first m rows of a sample in key order are a
  simple random sample of m rows too, so a person who stops early has still checked a
  random sample of rows. An audit of descriptions counts the rows drawn before its first
  line left blank (mixer.audit.scores).
- Allocation (stratified): proportional to the strata's rows by largest remainders, with
  every stratum at least 2 rows (or all of its rows when it has fewer), so that each
  stratum's variance can be estimated.
- Intervals: Clopper & Pearson's exact interval for a simple sample (1934): each end
  misses the truth in at most 2.5% of samples, whatever n and the accuracy. Wilson's
  interval, which this replaced, covered 84% to 92% near an accuracy of 0.99, every miss
  an interval below the truth. For a stratified sample the estimate is the strata's accuracies
  weighted by their shares of rows, with the stratified variance estimator (Cochran 1977,
  5.3) and Clopper & Pearson's interval at the design's effective sample size (Korn &
  Graubard 1998). n_eff = p (1 - p) / v times their degrees-of-freedom factor
  (t_{n-1} / t_{n-H})^2 (n rows checked, H strata; R's survey::svyciprop(method = "beta")
  applies it too). It is kept at most the rows checked. It is also at most Kish's effective
  n of the weights, 1 / sum(W_h^2 (1 - f_h) / n_h) (Kish 1992), so that a stratum whose few
  rows all agree cannot make the interval narrower than its weight allows.
- Size: the fewest rows whose interval, at the accuracy the model expects, reaches at most
  the margin from the estimate on either side (the larger side: the lower one, above an
  accuracy of 0.5). Stratified, at each stratum's expected accuracy, with the allocation
  (floors included) and the weights the scoring uses.

numpy, the standard library and scipy.special (the beta function, its inverse and Student's t):
no torch, no pandas.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np
from scipy import special

LEVEL = 0.95
ALPHA = 1 - LEVEL
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


# ------------------------------------------------------------------ the beta distribution
def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), a and b > 0 (scipy.special.betainc)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    return float(special.betainc(a, b, x))


def beta_quantile(q: float, a: float, b: float) -> float:
    """x with I_x(a, b) = q (scipy.special.betaincinv)."""
    if q <= 0:
        return 0.0
    if q >= 1:
        return 1.0
    return float(special.betaincinv(a, b, q))


def t_quantile(degrees: float, level: float = LEVEL) -> float:
    """Student's t with `degrees` degrees of freedom: the t that |T| exceeds with chance
    1 - level (1.96 as degrees grow; scipy.special.stdtrit)."""
    return float(special.stdtrit(degrees, 0.5 + level / 2))


@functools.lru_cache(maxsize=1024)
def degrees_factor(checked: float, strata: int) -> float:
    """Korn & Graubard's factor on a stratified sample's n_eff, (t_{n-1} / t_{n-H})^2: its
    variance is estimated with n - H degrees of freedom, not a simple sample's n - 1. 1
    where n - H < 1: every stratum then has one row checked, whose variance is the bound
    1/4, not an estimate."""
    if checked - strata < 1:
        return 1.0
    return (t_quantile(checked - 1) / t_quantile(checked - strata)) ** 2


# ------------------------------------------------------------------ intervals
def clopper_pearson(successes, n, level: float = LEVEL) -> tuple:
    """Clopper & Pearson's exact interval for `successes` of `n`: the accuracies at which
    a count this high (this low) has a chance of (1 - level) / 2. Both may be non-integer
    (a weighted share times an effective n: Korn & Graubard 1998). Exactly 0 when nothing
    is right and exactly 1 when everything is; (nan, nan) when n is 0."""
    if not n > 0:
        return math.nan, math.nan
    x = min(max(float(successes), 0.0), float(n))
    tail = (1 - level) / 2
    low = 0.0 if x <= 0 else beta_quantile(tail, x, n - x + 1)
    high = 1.0 if x >= n else beta_quantile(1 - tail, x + 1, n - x)
    return low, high


def wilson(successes, n, z: float = Z) -> tuple:
    """Wilson's score interval for `successes` of `n` (both may be non-integer), exactly 0
    and 1 at the edges; (nan, nan) when n is 0. Kept for comparison: audits are scored with
    clopper_pearson (docs/evaluation.md, "The interval")."""
    if n <= 0:
        return math.nan, math.nan
    p = min(max(successes / n, 0.0), 1.0)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if p <= 0 else max(0.0, centre - half)
    high = 1.0 if p >= 1 else min(1.0, centre + half)
    return low, high


def interval(successes, n) -> tuple:
    """The audit's 95% interval for `successes` of `n`: Clopper & Pearson's."""
    return clopper_pearson(successes, n)


def reach(p: float, n: float) -> float:
    """How far the interval of a share p of n reaches from p on its longer side."""
    low, high = interval(p * n, n)
    return max(p - low, high - p)


def _fewest(meets, least: int, most: int) -> int:
    """The fewest n in [least, most] for which meets(n) (true from some n on), else most."""
    low, high = least, most
    while low < high:
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle + 1
    return low


def sample_size(expected: float, margin: float, most: int = 10**7) -> int:
    """The fewest rows of a simple sample whose interval reaches at most `margin` from the
    estimate on either side when the share right is `expected`."""
    if not 0 < margin < 0.5:
        raise ValueError(f"margin {margin}: must be between 0 and 0.5")
    expected = min(max(float(expected), 0.0), 1.0)
    return _fewest(lambda n: reach(expected, n) <= margin, 1, most)


def design_n_eff(
    sizes: Sequence[int], expected: Sequence[float], checked: Sequence[float]
) -> tuple:
    """(p, n_eff) of a stratified sample of `checked` rows per stratum whose strata have
    the accuracies `expected`: what stratified() would find if each stratum came out at
    its expected accuracy."""
    sizes = np.asarray(sizes, dtype=float)
    expected = np.clip(np.asarray(expected, dtype=float), 0, 1)
    checked = np.asarray(checked, dtype=float)
    return _effective(sizes, expected, checked)


def design_size(
    sizes: Sequence[int], expected: Sequence[float], margin: float, floor: int = STRATUM_FLOOR
) -> int:
    """The fewest rows of a stratified audit (allocated by allocate(), floors included)
    whose interval reaches at most `margin` from the estimate on either side when each
    stratum's accuracy is its `expected`; all rows when no fewer do."""
    if not 0 < margin < 0.5:
        raise ValueError(f"margin {margin}: must be between 0 and 0.5")
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    least = int(np.minimum(sizes, floor).sum())

    def meets(n: int) -> bool:
        p, n_eff = design_n_eff(sizes, expected, allocate(sizes, n, floor))
        return reach(p, n_eff) <= margin

    return _fewest(meets, max(least, 1), total)


def counted_ranks(ranks: list, checked: np.ndarray, drawn: int) -> np.ndarray:
    """An audit of descriptions, one stratum: how many rows drawn each line counts. Line i
    stands for the rows drawn at places ranks[i] (1 = drawn first) of the stratum's
    `drawn`. The rows counted are those before the first place whose line is not checked
    (or is missing): the first rows of the sample in key order, a simple random sample,
    however the lines were ordered or left blank. Counting every row of the lines checked
    instead would favour frequent descriptions, which come first."""
    covered = np.zeros(int(drawn) + 2, dtype=bool)
    for line in np.flatnonzero(checked):
        covered[ranks[line]] = True
    stop = int(np.argmin(covered[1:])) + 1  # the first place not covered by a line checked
    return np.asarray(
        [int((ranks[i] < stop).sum()) if checked[i] else 0 for i in range(len(ranks))],
        dtype=np.int64,
    )


@dataclass(frozen=True)
class Estimate:
    """An accuracy and its 95% interval from `n` checked draws (n_eff: the sample size
    the interval behaves as; n for a simple sample)."""

    value: float
    low: float
    high: float
    n: float
    n_eff: float


def simple(correct: float, checked: float) -> Estimate:
    """A simple random sample: the share right and Clopper & Pearson's interval."""
    if checked <= 0:
        return Estimate(math.nan, math.nan, math.nan, 0, 0)
    low, high = interval(correct, checked)
    return Estimate(correct / checked, low, high, checked, checked)


def _effective(rows: np.ndarray, shares: np.ndarray, checked: np.ndarray) -> tuple:
    """(p, n_eff) of a stratified sample: see stratified()."""
    weights = rows / rows.sum()
    p = float(np.dot(weights, shares))
    fraction = np.minimum(checked / rows, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_stratum = np.where(checked >= 2, shares * (1 - shares) / (checked - 1), 0.25)
        kish = np.where(fraction >= 1, 0.0, weights**2 * (1 - fraction) / checked)
    per_stratum = np.where(fraction >= 1, 0.0, per_stratum)  # a stratum checked whole is known
    variance = float(np.sum(weights**2 * (1 - fraction) * per_stratum))
    n_eff = float(checked.sum())
    if kish.sum() > 0:
        n_eff = min(n_eff, 1 / float(kish.sum()))
    if variance > 0 and p * (1 - p) > 0:  # the estimated part alone takes the degrees' factor
        n_eff = min(
            n_eff, p * (1 - p) / variance * degrees_factor(float(checked.sum()), len(checked))
        )
    return p, n_eff


def stratified(rows: Sequence[int], correct: Sequence[float], checked: Sequence[float]) -> Estimate:
    """A stratified sample: rows[h] rows in stratum h, of which checked[h] were checked
    (a simple random sample of the stratum) and correct[h] found right.

    p = sum W_h p_h with W_h = rows_h / rows.
    v = sum W_h^2 (1 - f_h) p_h (1 - p_h) / (n_h - 1), f_h = n_h / rows_h. A stratum
    with one row checked of several counts the largest variance a share can have, 1/4.
    n_eff = p (1 - p) / v x degrees_factor(n, H), at most the rows checked. It is also at
    most Kish's n of the weights, 1 / sum W_h^2 (1 - f_h) / n_h (either cap alone when v or
    p (1 - p) is 0). The interval is Clopper & Pearson's at (p n_eff, n_eff). nan when a
    stratum has no row checked: the strata checked say nothing of it."""
    rows = np.asarray(rows, dtype=float)
    correct = np.asarray(correct, dtype=float)
    checked = np.asarray(checked, dtype=float)
    if (checked <= 0).any() or rows.sum() <= 0:
        return Estimate(math.nan, math.nan, math.nan, float(checked.sum()), math.nan)
    p, n_eff = _effective(rows, correct / checked, checked)
    low, high = interval(p * n_eff, n_eff)
    return Estimate(p, low, high, float(checked.sum()), n_eff)


def estimate(
    rows: Sequence[int], correct: Sequence[float], checked: Sequence[float], stratified_design: bool
) -> Estimate:
    """The audit's estimate: Clopper & Pearson's for a simple sample, the stratified one
    otherwise."""
    if not stratified_design:
        return simple(float(np.sum(correct)), float(np.sum(checked)))
    return stratified(rows, correct, checked)

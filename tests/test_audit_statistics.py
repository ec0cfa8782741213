"""The statistics of audits (mixer.reporting.audit), pure numpy: the sampling keys, the
allocation, the sample size, Wilson's interval, and the coverage claim: over many seeded
audits of rows whose truth is known, the 95% intervals cover the true accuracy in about
95% of draws (simple samples of 200 and of 20 rows, and a stratified sample)."""

import math

import numpy as np
import pytest

from mixer.reporting import audit as stats

DRAWS = 2000  # coverage within [0.93, 0.97]: 4 standard errors (0.0049) either side of 0.95


def bottom_k(keys: np.ndarray, k: int) -> np.ndarray:
    """The positions of the k smallest keys, smallest first: what an audit of k rows draws."""
    if k >= len(keys):
        return np.argsort(keys)
    smallest = np.argpartition(keys, k)[:k]
    return smallest[np.argsort(keys[smallest])]


def test_wilson_has_its_closed_forms_at_the_edges_and_is_symmetric():
    z2 = stats.Z ** 2
    assert stats.Z == pytest.approx(1.959964, abs=1e-6)
    assert stats.wilson(0, 10) == pytest.approx((0.0, z2 / (10 + z2)))  # nothing right: [0, z²/(n+z²)]
    assert stats.wilson(10, 10) == pytest.approx((10 / (10 + z2), 1.0))
    low, high = stats.wilson(7, 20)
    assert (1 - high, 1 - low) == pytest.approx(stats.wilson(13, 20))
    # the score interval: p solves |p̂ - p| = z sqrt(p (1 - p) / n) at both ends
    for end in (low, high):
        assert abs(7 / 20 - end) == pytest.approx(stats.Z * math.sqrt(end * (1 - end) / 20))
    assert all(math.isnan(v) for v in stats.wilson(0, 0))


def test_sample_size_is_the_fewest_rows_that_give_the_margin():
    for expected, margin in [(0.85, 0.03), (0.5, 0.03), (0.95, 0.02), (0.7, 0.1)]:
        n = stats.sample_size(expected, margin)
        assert stats.wilson_half_width(expected, n) <= margin < stats.wilson_half_width(expected, n - 1)
    # near the textbook z² p (1 - p) / m² when n is large: 1067 at 0.5 and +-0.03
    assert stats.sample_size(0.5, 0.03) == pytest.approx(stats.Z ** 2 * 0.25 / 0.03 ** 2, rel=0.01)
    assert stats.sample_size(0.9, 0.03) < stats.sample_size(0.5, 0.03)


def test_allocation_is_proportional_with_two_rows_a_stratum_and_takes_all_of_a_small_one():
    sizes = [6000, 3000, 950, 40, 1]
    counts = stats.allocate(sizes, 100)
    assert counts.sum() == 100 and counts[3] == 2 and counts[4] == 1  # the floor, or all of a stratum
    quota = (100 - 3) * np.asarray(sizes[:3]) / sum(sizes[:3])
    assert (np.abs(counts[:3] - quota) < 1).all()  # the rest by largest remainders
    assert list(stats.allocate([10, 20], 500)) == [10, 20]  # more asked than there are: all
    assert list(stats.allocate([5, 5, 5], 6)) == [2, 2, 2]
    with pytest.raises(ValueError):
        stats.allocate([5, 5, 5, 5], 7)  # 4 strata cannot each get 2 of 7


def test_sampling_keys_do_not_depend_on_how_the_rows_come():
    rows = np.arange(10_000)
    whole = stats.row_keys(3, rows)
    chunks = np.concatenate([stats.row_keys(3, part) for part in np.array_split(rows, 7)])
    assert np.array_equal(whole, chunks)
    assert len(np.unique(whole)) == len(rows)  # a bijection: no ties
    assert not np.array_equal(whole, stats.row_keys(4, rows))
    # the smallest keys of each chunk, merged, are the smallest keys of all rows
    kept = np.concatenate([part[bottom_k(whole[part], 50)] for part in np.array_split(rows, 9)])
    assert np.array_equal(np.sort(kept[bottom_k(whole[kept], 50)]), np.sort(bottom_k(whole, 50)))
    # and every row is as likely to be drawn: each decile of the file holds a tenth of draws
    drawn = np.concatenate([bottom_k(stats.row_keys(seed, rows), 100) for seed in range(200)])
    share = np.bincount(drawn // 1000, minlength=10) / len(drawn)
    assert np.abs(share - 0.1).max() < 0.01


def coverage(truth: np.ndarray, strata: np.ndarray, n: int, stratified: bool) -> float:
    """The share of DRAWS seeded audits of n rows whose 95% interval covers the rows' accuracy."""
    sizes = np.bincount(strata)
    allocation = stats.allocate(sizes, n) if stratified else np.asarray([n])
    members = [np.flatnonzero(strata == h) for h in range(len(sizes))] if stratified else [np.arange(len(truth))]
    rows = np.arange(len(truth))
    covered = 0
    for seed in range(DRAWS):
        keys = stats.row_keys(seed, rows)
        correct, checked = [], []
        for rows_h, n_h in zip(members, allocation):
            drawn = rows_h[bottom_k(keys[rows_h], int(n_h))]
            correct.append(truth[drawn].sum())
            checked.append(len(drawn))
        estimate = stats.estimate(sizes if stratified else [len(truth)], correct, checked, stratified)
        covered += estimate.low <= truth.mean() <= estimate.high
    return covered / DRAWS


def test_wilson_intervals_of_simple_samples_cover_the_accuracy_95_times_in_100():
    rng = np.random.default_rng(1)
    truth = rng.random(20_000) < 0.85
    assert 0.93 <= coverage(truth, np.zeros(len(truth), dtype=int), 200, False) <= 0.97
    small = rng.random(5_000) < 0.9  # 20 rows: p +- 1.96 se would cover about 87% here
    assert 0.93 <= coverage(small, np.zeros(len(small), dtype=int), 20, False) <= 0.97


def test_stratified_intervals_cover_the_accuracy_95_times_in_100():
    """Strata of very different accuracy and size, two of them tiny (the floor of 2 rows,
    and all 5 rows of one): the weighted estimate and its effective-n Wilson interval."""
    rng = np.random.default_rng(2)
    sizes, accuracy = [12_000, 6_000, 2_000, 30, 5], [0.95, 0.8, 0.6, 0.5, 0.4]
    strata = np.repeat(np.arange(len(sizes)), sizes)
    truth = rng.random(len(strata)) < np.asarray(accuracy)[strata]
    assert 0.93 <= coverage(truth, strata, 150, True) <= 0.97


def test_a_stratified_estimate_weighs_strata_by_their_rows_not_their_draws():
    # 2 rows drawn from each of two strata of 900 and 100 rows: 0.9 x 1 + 0.1 x 0
    estimate = stats.stratified([900, 100], [2, 0], [2, 2])
    assert estimate.value == pytest.approx(0.9)
    assert estimate.n == 4 and estimate.low < 0.9 < estimate.high
    assert math.isnan(stats.stratified([900, 100], [2, 0], [2, 0]).value)  # a stratum with no row checked

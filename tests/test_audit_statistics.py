"""The statistics of audits (mixer.audit.statistics), pure numpy: the sampling keys, the
allocation, the sample size, Clopper & Pearson's interval, and the coverage claim: the
95% intervals cover the true accuracy in at least 95% of audits, exactly for simple
samples (computed over a grid of n and accuracies) and, over many seeded audits of rows
whose truth is known, for simple and stratified samples, with each end missing on its
side at most about 2.5% of the time."""

import math

import numpy as np
import pytest

from conftest import bottom_k
from mixer.audit import statistics as stats

DRAWS = 2000  # a coverage of at least 0.95 shows as at least 0.935 here but for 3 standard errors (0.0049)


def binomial_pmf(n: int, p: np.ndarray) -> np.ndarray:
    """P(X = x) for x = 0..n (rows) at each accuracy p (columns): log-gamma, pure numpy."""
    x = np.arange(n + 1)[:, None]
    log_choose = np.asarray(
        [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1)]
    )
    with np.errstate(divide="ignore"):
        return np.exp(log_choose[:, None] + x * np.log(p) + (n - x) * np.log1p(-p))


def exact_coverage(interval, n: int, p: np.ndarray) -> tuple:
    """(coverage, chance the interval lies wholly above p, chance wholly below) of
    `interval` for a simple sample of n rows at each accuracy p, summed over every count."""
    bounds = np.asarray([interval(x, n) for x in range(n + 1)])
    pmf = binomial_pmf(n, p)
    above = bounds[:, 0][:, None] > p
    below = bounds[:, 1][:, None] < p
    return (pmf * ~(above | below)).sum(0), (pmf * above).sum(0), (pmf * below).sum(0)


def test_intervals_are_exactly_0_and_1_at_the_edges_and_have_their_closed_forms():
    """Nothing right: the interval starts at 0 exactly; everything right: it ends at 1
    exactly (Wilson's 0.9999999999999999 made the error bars of the score plot negative)."""
    for n in range(1, 301):
        for interval in (stats.clopper_pearson, stats.wilson):
            assert interval(n, n)[1] == 1.0 and interval(0, n)[0] == 0.0
        assert stats.clopper_pearson(0, n)[1] == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9)
        assert stats.clopper_pearson(n, n)[0] == pytest.approx(0.025 ** (1 / n), rel=1e-9)
    z2 = stats.Z**2
    assert stats.Z == pytest.approx(1.959964, abs=1e-6)
    assert stats.wilson(0, 10) == pytest.approx((0.0, z2 / (10 + z2)))
    # each end of Clopper-Pearson's is where the count seen is a 2.5% tail: P(X >= 7 | low) = 0.025
    low, high = stats.clopper_pearson(7, 20)
    tail = binomial_pmf(20, np.asarray([low, high]))
    assert tail[7:, 0].sum() == pytest.approx(0.025, abs=1e-10)
    assert tail[:8, 1].sum() == pytest.approx(0.025, abs=1e-10)
    assert (1 - high, 1 - low) == pytest.approx(stats.clopper_pearson(13, 20))
    for q, a, b in [(0.3, 2.5, 0.7), (0.975, 0.2, 40.0), (0.025, 399.5, 1.5), (0.5, 3000.0, 2.0)]:
        assert stats.beta_cdf(stats.beta_quantile(q, a, b), a, b) == pytest.approx(q, abs=1e-12)
    assert all(math.isnan(v) for v in stats.clopper_pearson(0, 0))


def test_the_interval_covers_at_least_95_in_100_at_every_n_and_accuracy_exactly():
    """Computed, not simulated: for simple samples of 5 to 1,000 rows and accuracies from
    0.001 to 0.9995 (dense near 1, where models are), the interval covers the accuracy with
    a chance of at least 95%, and lies wholly above it (or below) at most 2.5% of the time.
    Wilson's interval, used before, covers 84% at n = 20 and p = 0.9915, 86% at n = 100
    and p = 0.9985."""
    p = np.unique(np.concatenate([np.linspace(0.001, 0.999, 999), np.linspace(0.99, 0.9995, 200)]))
    for n in (5, 10, 20, 50, 100, 200, 500, 1000):
        covered, above, below = exact_coverage(stats.interval, n, p)
        assert covered.min() >= 0.95 - 1e-9, (n, p[np.argmin(covered)])
        assert above.max() <= 0.025 + 1e-9 and below.max() <= 0.025 + 1e-9
    for n, p_low in ((20, 0.9915), (100, 0.9985)):
        assert exact_coverage(stats.wilson, n, np.asarray([p_low]))[0][0] < 0.87


def test_sample_size_is_the_fewest_rows_whose_interval_reaches_the_margin_on_its_longer_side():
    """The margin is what a reader gets: at the expected accuracy both ends lie within it
    (Wilson's half-width, used before, gave 215 rows for +-0.03 at 0.95: 0.912 to 0.972,
    0.038 below)."""
    for expected, margin in [
        (0.85, 0.03),
        (0.5, 0.03),
        (0.95, 0.03),
        (0.98, 0.02),
        (0.7, 0.1),
        (0.99, 0.01),
    ]:
        n = stats.sample_size(expected, margin)
        assert stats.reach(expected, n) <= margin < stats.reach(expected, n - 1)
        low, high = stats.interval(expected * n, n)
        assert expected - low <= margin and high - expected <= margin
    # a little above the textbook z² p (1 - p) / m² when n is large (1067 at 0.5 and +-0.03)
    assert 1067 < stats.sample_size(0.5, 0.03) < 1067 * 1.04
    assert stats.sample_size(0.9, 0.03) < stats.sample_size(0.5, 0.03)


def test_allocation_is_proportional_with_two_rows_a_stratum_and_takes_all_of_a_small_one():
    sizes = [6000, 3000, 950, 40, 1]
    counts = stats.allocate(sizes, 100)
    assert (
        counts.sum() == 100 and counts[3] == 2 and counts[4] == 1
    )  # the floor, or all of a stratum
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
    members = (
        [np.flatnonzero(strata == h) for h in range(len(sizes))]
        if stratified
        else [np.arange(len(truth))]
    )
    rows = np.arange(len(truth))
    covered = 0
    for seed in range(DRAWS):
        keys = stats.row_keys(seed, rows)
        correct, checked = [], []
        for rows_h, n_h in zip(members, allocation):
            drawn = rows_h[bottom_k(keys[rows_h], int(n_h))]
            correct.append(truth[drawn].sum())
            checked.append(len(drawn))
        estimate = stats.estimate(
            sizes if stratified else [len(truth)], correct, checked, stratified
        )
        covered += estimate.low <= truth.mean() <= estimate.high
    return covered / DRAWS


def test_intervals_of_simple_samples_cover_the_accuracy_at_least_95_times_in_100():
    rng = np.random.default_rng(1)
    truth = rng.random(20_000) < 0.85
    assert 0.935 <= coverage(truth, np.zeros(len(truth), dtype=int), 200, False) <= 0.99
    small = rng.random(5_000) < 0.9  # 20 rows: p +- 1.96 se would cover about 87% here
    assert 0.935 <= coverage(small, np.zeros(len(small), dtype=int), 20, False) <= 0.995


def test_stratified_intervals_cover_the_accuracy_at_least_95_times_in_100():
    """Strata of very different accuracy and size, two of them tiny (the floor of 2 rows,
    and all 5 rows of one): the weighted estimate and its effective-n interval."""
    rng = np.random.default_rng(2)
    sizes, accuracy = [12_000, 6_000, 2_000, 30, 5], [0.95, 0.8, 0.6, 0.5, 0.4]
    strata = np.repeat(np.arange(len(sizes)), sizes)
    truth = rng.random(len(strata)) < np.asarray(accuracy)[strata]
    assert 0.935 <= coverage(truth, strata, 150, True) <= 0.99


def test_a_stratified_estimate_weighs_strata_by_their_rows_not_their_draws():
    # 2 rows drawn from each of two strata of 900 and 100 rows: 0.9 x 1 + 0.1 x 0
    estimate = stats.stratified([900, 100], [2, 0], [2, 2])
    assert estimate.value == pytest.approx(0.9)
    assert estimate.n == 4 and estimate.low < 0.9 < estimate.high
    assert math.isnan(
        stats.stratified([900, 100], [2, 0], [2, 0]).value
    )  # a stratum with no row checked


def svyciprop_beta(rows, correct, checked, level=0.95) -> tuple:
    """R's survey::svyciprop(method = "beta") of a stratified design with its fpc, computed
    apart from mixer with scipy: (p, n_eff, low, high). svymean's variance (the 0/1 values'
    variance with n_h - 1, times W_h^2 (1 - f_h) / n_h), n_eff = p (1 - p) / v scaled by
    (qt(alpha/2, n - 1) / qt(alpha/2, degf))^2, degf = rows checked - strata; no caps."""
    from scipy import stats as sp

    rows, correct, checked = (np.asarray(x, dtype=float) for x in (rows, correct, checked))
    weights, shares, fraction = rows / rows.sum(), correct / checked, checked / rows
    variance = np.sum(weights**2 * (1 - fraction) * shares * (1 - shares) / (checked - 1))
    p, n, alpha = float(weights @ shares), checked.sum(), 1 - level
    n_eff = (
        p
        * (1 - p)
        / variance
        * (sp.t.ppf(alpha / 2, n - 1) / sp.t.ppf(alpha / 2, n - len(rows))) ** 2
    )
    return (
        p,
        n_eff,
        sp.beta.ppf(alpha / 2, n_eff * p, n_eff * (1 - p) + 1),
        sp.beta.ppf(1 - alpha / 2, n_eff * p + 1, n_eff * (1 - p)),
    )


def test_a_stratified_interval_takes_korn_and_graubard_s_degrees_of_freedom_as_r_does():
    """Review of issue 34: the effective n is scaled by (t_{n-1} / t_{n-H})^2, as R's
    svyciprop(method = "beta") does; where no cap binds the interval is R's. Without the
    factor the first design's lower end was 0.5329 (R: 0.5288), the second's 0.3630 (0.3534).
    The docs' design (--audit-by words: 200 rows over 4 strata) is capped at the rows
    checked, and its interval is as before."""
    for rows, correct, checked in [
        ([400, 300, 200, 100], [7, 5, 3, 1], [8, 6, 4, 2]),
        ([900, 100], [5, 3], [6, 4]),
        ([2_000, 1_000, 1_000], [18, 5, 4], [20, 8, 8]),
    ]:
        ours = stats.stratified(rows, correct, checked)
        p, n_eff, low, high = svyciprop_beta(rows, correct, checked)
        assert ours.n_eff < sum(checked)  # no cap binds: R's interval
        np.testing.assert_allclose(
            [ours.value, ours.n_eff, ours.low, ours.high], [p, n_eff, low, high], rtol=1e-9
        )
    docs = stats.stratified([2, 432, 248, 118], [2, 94, 55, 25], [2, 107, 62, 29])
    assert docs.n_eff == 200 and (round(docs.low, 4), round(docs.high, 4)) == (0.8256, 0.9208)
    for degrees in (1, 2, 5, 19, 196, 10_000):
        from scipy import stats as sp

        assert stats.t_quantile(degrees) == pytest.approx(-sp.t.ppf(0.025, degrees), rel=1e-9)


def stratified_draws(sizes, accuracy, allocation, draws: int, seed: int) -> tuple:
    """(the file's accuracy, each of `draws` stratified audits' correct counts per stratum):
    the rows right in a simple random sample of n_h of a stratum's N_h rows, K_h of them
    right, are hypergeometric, which numpy draws for all audits at once."""
    sizes = np.asarray(sizes)
    right = np.rint(sizes * np.asarray(accuracy)).astype(np.int64)
    shape = (draws, len(sizes))
    counts = np.random.default_rng(seed).hypergeometric(
        np.broadcast_to(right, shape),
        np.broadcast_to(sizes - right, shape),
        np.broadcast_to(np.asarray(allocation), shape),
    )
    return right.sum() / sizes.sum(), counts


def test_a_big_stratum_beside_many_small_ones_keeps_its_weight_in_the_interval():
    """One big stratum beside many small ones held at the floor of 2 rows: the interval
    cannot be narrower than the big stratum's weight allows (n_eff at most Kish's n of the
    weights). Capped at the rows checked alone, the first design covered 0.87 to 0.90, with
    9% of intervals wholly above the truth; the second had 4.4% above."""
    for sizes, accuracy, n in [
        ([10_000] + [20] * 30, [0.95] + [0.8] * 30, 100),
        ([50_000] + [100] * 40, [0.96] + [0.85] * 40, 150),
        ([20_000] + [30] * 40, [0.97] + [0.8] * 40, 200),
    ]:
        allocation = stats.allocate(sizes, n)
        truth, counts = stratified_draws(sizes, accuracy, allocation, 4000, seed=n)
        estimates = [stats.stratified(sizes, c, allocation) for c in counts]
        above = np.mean([e.low > truth for e in estimates])
        below = np.mean([e.high < truth for e in estimates])
        # 4,000 audits: a side that misses 2.5% shows at most 0.035 but for 4 standard errors
        assert above <= 0.035 and below <= 0.035 and 1 - above - below <= 0.995, (
            sizes[:2],
            above,
            below,
        )
    # the reviewer's audit: 40 of 40 right in the big stratum, 54 of 60 in the small ones
    sizes = [10_000] + [20] * 30
    whole = stats.stratified(sizes, [40] + [2] * 27 + [0] * 3, [40] + [2] * 30)
    big = stats.simple(40, 40)
    assert whole.low < big.low + 0.01 and whole.n_eff < 46


def test_a_stratified_audit_sized_by_its_margin_reaches_the_margin_at_the_expected_accuracy():
    """--audit-margin with --audit-by: the size is the design's (allocation, floors,
    weights), so that audits at the accuracy expected reach the margin: the median over
    2,000 audits of how far the interval reaches from the estimate (its longer side) is
    within 1% of the margin, neither wasted nor broken. Sized as a simple sample, the first
    design reached 0.055 for +-0.05."""
    for sizes, accuracy, margin in [
        ([10_000] + [20] * 30, [0.9] * 31, 0.05),
        ([10_000] + [20] * 30, [0.95] + [0.8] * 30, 0.03),
        ([5_000] * 10, [0.9] * 10, 0.03),
    ]:
        n = stats.design_size(sizes, accuracy, margin)
        allocation = stats.allocate(sizes, n)
        _, counts = stratified_draws(sizes, accuracy, allocation, 2000, seed=7)
        reached = []
        for c in counts:
            e = stats.stratified(sizes, c, allocation)
            reached.append(max(e.value - e.low, e.high - e.value))
        assert 0.9 * margin <= np.median(reached) <= 1.01 * margin, (
            sizes[:2],
            n,
            np.median(reached),
        )
    # where the design costs nothing (equal strata, proportional), the simple sample's size
    assert stats.design_size([10_000, 10_000], [0.9, 0.9], 0.05) == stats.sample_size(0.9, 0.05)


def test_an_audit_of_descriptions_stopped_early_counts_a_random_sample_of_rows():
    """Unit descriptions: the lines are the distinct descriptions of the rows drawn, each
    at its first row drawn, so the first lines are the frequent descriptions. A person who
    checks the first L lines is scored on the rows drawn before the first line left blank
    (counted_ranks), a prefix of the sample in key order: unbiased and covered. Counting
    every row of the lines checked (as before) gave, on this file, 0.94 for a true 0.74
    after 10 lines, covering 0.5% of the time."""
    rng = np.random.default_rng(0)
    # one description on 4,000 rows (always right), 20 on 100 rows each, 4,000 on one row each
    description = np.concatenate(
        [np.zeros(4000, int), np.repeat(np.arange(1, 21), 100), np.arange(21, 4021)]
    )
    right_of = np.concatenate([[1.0], rng.random(20) < 0.8, rng.random(4000) < 0.5]).astype(float)
    rng.shuffle(description)
    truth = right_of[description].mean()
    rows = np.arange(len(description))
    for lines_checked in (5, 10, 30):
        estimates, covered, naive_covered = [], 0, 0
        for seed in range(1000):
            drawn = description[bottom_k(stats.row_keys(seed, rows), 200)]  # in key order
            lines, first = np.unique(drawn, return_index=True)
            order = np.argsort(first)  # the lines as the audit lists them
            ranks = [np.flatnonzero(drawn == lines[i]) + 1 for i in order]
            checked = np.arange(len(ranks)) < lines_checked
            counted = stats.counted_ranks(ranks, checked, 200)
            right = right_of[lines[order]]
            estimate = stats.simple(float((counted * right).sum()), float(counted.sum()))
            estimates.append(estimate.value)
            covered += estimate.low <= truth <= estimate.high
            everything = np.asarray([len(r) for r in ranks]) * checked
            naive = stats.simple(float((everything * right).sum()), float(everything.sum()))
            naive_covered += naive.low <= truth <= naive.high
        # 1,000 audits: a coverage of 0.95 shows above 0.93 but for 3 standard errors (0.0069)
        assert covered / 1000 >= 0.93 and abs(np.mean(estimates) - truth) < 0.02, (
            lines_checked,
            covered,
        )
        assert naive_covered / 1000 < 0.5
    # the rule itself: places 1..6 over three lines; the second line blank stops the count at place 3
    ranks = [np.asarray([1, 2, 5]), np.asarray([3]), np.asarray([4, 6])]
    assert stats.counted_ranks(ranks, np.asarray([True, False, True]), 6).tolist() == [2, 0, 0]
    assert stats.counted_ranks(ranks, np.asarray([True, True, True]), 6).tolist() == [3, 1, 2]
    assert stats.counted_ranks(ranks, np.asarray([True, True, True]), 7).tolist() == [
        3,
        1,
        2,
    ]  # 7 missing

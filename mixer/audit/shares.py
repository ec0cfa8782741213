"""Class shares corrected by an audit (`evaluate.py --shares LEVEL --audit AUDIT
--predictions PREDICTED`): per class, the share counted from the predictions of the whole
file, that share corrected by the rows a person checked, and a 95% interval for the true
share that held at every audit size benchmarked; the audit's own estimate beside it. docs/classes.md,
"Class shares corrected by an audit".

The corrected share is prediction-powered inference's (Angelopoulos et al., Science 2023):
the counted share c_k (known: every row of the file is counted) plus the share of rows whose
true class is k that were predicted otherwise (a_k, missed) minus the share of rows
predicted k whose true class is not (b_k, false), a_k and b_k estimated by the audit, a
random sample. Its published interval is a normal approximation, which misses often in
small audits, where a_k and b_k are counts of a few rows. The interval here post-stratifies
by the prediction: the true share is c_k pi_k + (1 - c_k) lambda_k, pi_k the share of the
rows predicted k whose class is k (precision) and lambda_k that of the other rows (leak);
the audit's rows predicted k are a random sample of the file's, whatever their number, and
so are its other rows. Each share's Clopper & Pearson beta (Beta(x, n - x + 1) for the low
end, Beta(x + 1, n - x) for the high) weighted by its part of the file, summed, and the sum's
quantiles taken from the beta of the same mean and variance (one part alone: Clopper &
Pearson's interval exactly); a part with no row checked is unknown, anywhere in [0, 1].
Stratified, the parts are each stratum's, weighted by their rows in the file. That is not a
theorem's interval: its coverage at every audit size is benchmarks/class_shares.py's, where
it held and was the narrowest of the intervals compared that held (METHODS;
docs/classes.md).
`simultaneous` divides alpha by the number of classes, so that all intervals hold at once.

A row's class is its first code's that has one (mixer.data.labels.crosswalk's row-level
rule: the first code written is the main occupation); rows whose codes have no class at
the level, and rows without a code, are the class '(none)', so that the shares add up to 1.

No torch here.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import numpy as np
import pandas as pd

from mixer.audit import file as audit_file
from mixer.audit import statistics as stats
from mixer.core.errors import UserError

LEVEL = 0.95
CODE = "code"
PREFIX = "prefix:"
NONE = "(none)"  # the class of a row without a code, or of a code without a class at the level
CLASS = "class"
METHODS = {  # the intervals share_estimates computes, compared in benchmarks/class_shares.py
    "post-stratified": "counted x precision + rest x leak (the sum of their Clopper-Pearson betas)",
    "precision+leak": "counted x precision + rest x leak (Clopper-Pearson, Bonferroni)",
    "precision+leak+audit": "counted x precision + rest x leak (Clopper-Pearson, Bonferroni), "
    "with the audit alone, intersected",
    "errors+audit": "counted + audit's errors (Clopper-Pearson, Bonferroni), with the audit "
    "alone, intersected",
    "errors": "counted + audit's errors (Clopper-Pearson, Bonferroni)",
}
METHOD = "post-stratified"  # the one evaluate.py --shares prints
STRATIFIED = ", at the effective n (Korn-Graubard)"
BY_STRATUM = ", by stratum (weights N_h / N)"  # post-stratified: a cell per stratum and part
# the reasons an audit leaves rows out that the predictions file tells (a column of it)
LOOKUP_REASON = "coded by the lookup"
CHECK_REASON = "needing a check (--target-accuracy)"  # mixer.coding.job.AUDIT_CHECK_REASON
CHUNK_ROWS = 1_000_000
PLOTTED_CLASSES = 30  # the most classes the picture shows (the largest; the table has every one)


# ------------------------------------------------------------------ levels
def classifier(level: str, formatter=None) -> Callable[[list], np.ndarray]:
    """The function from a row's codes (one array per code column, in order, as the model
    spells them) to the row's class at `level`: `code` (the code itself), `prefix:N` (its
    first N characters, HISCO's major group at prefix:1) or a crosswalk's name or table
    (mixer.data.labels.crosswalk; `formatter`, the model's, spells a table's codes). A row's
    class is its first code's that has one (Crosswalk.first); none: NONE."""
    level = str(level).strip()
    if level == CODE:
        one = lambda codes: np.asarray(codes, dtype=object)  # noqa: E731
    elif level.startswith(PREFIX):
        length = level[len(PREFIX) :]
        if not length.isdigit() or int(length) < 1:
            raise UserError(
                f"--shares {level}: a prefix level is prefix:N with N a whole number of leading "
                "characters, e.g. prefix:1 (HISCO's major groups)"
            )
        one = lambda codes: np.asarray(  # noqa: E731
            [_prefix(str(c), int(length)) for c in codes], dtype=object
        )
    else:
        from mixer.data.labels.crosswalk import CROSSWALKS, load_crosswalk

        if level.lower() not in CROSSWALKS and not os.path.isfile(level):
            raise unknown_level(level)
        crosswalk = load_crosswalk(level, formatter)
        if crosswalk.numeric:
            raise UserError(
                f"--shares {level}: a score, not a class, has no shares; name a crosswalk of "
                "classes (hisclass, hisclass_5, socpo) or a table of classes"
            )
        one = lambda codes: crosswalk.classify(  # noqa: E731
            pd.Series(codes, dtype=object)
        ).to_numpy(dtype=object)

    def row_classes(per_code: list) -> np.ndarray:
        found = None
        for codes in per_code:
            codes = pd.Series(codes, dtype=object).fillna("").astype(str).str.strip()
            classes = np.where(codes.ne("").to_numpy(), one(codes.to_numpy(dtype=object)), "")
            classes = pd.Series(classes, dtype=object).fillna("").astype(str).to_numpy(object)
            found = classes if found is None else np.where(found != "", found, classes)
        return _named(found if found is not None else np.zeros(0, dtype=object))

    return row_classes


def unknown_level(level: str) -> UserError:
    return UserError(
        f"--shares {level}: not a level; pass code (the codes themselves), prefix:N (the codes' "
        "first N characters, e.g. prefix:1) or a crosswalk (hisclass, hisclass_5, socpo, hiscam, "
        "or a CSV file of codes and classes)"
    )


def _named(classes: np.ndarray) -> np.ndarray:
    text = pd.Series(classes, dtype=object).fillna("").astype(str).str.strip()
    return text.where(text.ne(""), NONE).to_numpy(dtype=object)


def _prefix(code: str, length: int) -> str:
    """A code's first `length` characters; a special code (HISCO's -1, -2, -3) stays whole,
    as mixer.coding.levels keeps it."""
    return code if code.startswith("-") else code[:length]


# ------------------------------------------------------------------ the statistics
def clopper_pearson(x: np.ndarray, n: np.ndarray, level: float) -> tuple:
    """Clopper & Pearson's interval for each of the counts x of n (arrays; non-integer
    allowed, as mixer.audit.statistics.clopper_pearson, which this is for many at once):
    exactly 0 where x is 0, 1 where x is n, nan where n is 0."""
    from scipy import special

    x, n = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(n, dtype=float))
    x = np.clip(x, 0.0, np.maximum(n, 0.0))
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x <= 0, 0.0, special.betaincinv(np.maximum(x, 1e-300), n - x + 1, tail))
        high = np.where(x >= n, 1.0, special.betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - tail))
    bad = ~(n > 0)
    return np.where(bad, np.nan, low), np.where(bad, np.nan, high)


def _shares(x: np.ndarray, n: np.ndarray, sizes: np.ndarray, stratified: bool, level: float):
    """(estimate, low, high), one per class, of shares from counts x[h, k] of n[h] rows
    checked in stratum h: Clopper & Pearson's interval at `level` (two-sided); stratified,
    the strata weighted by their rows and the interval at the effective n (Korn & Graubard,
    as mixer.audit.statistics.stratified scores an audit). nan where a stratum has no row
    checked."""
    if not stratified:
        total, checked = x.sum(axis=0), float(n.sum())
        low, high = clopper_pearson(total, checked, level)
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / checked, low, high
    classes = x.shape[1]
    if (n <= 0).any() or sizes.sum() <= 0:
        empty = np.full(classes, np.nan)
        return empty, empty, empty
    p, n_eff = np.zeros(classes), np.zeros(classes)
    for k in range(classes):
        p[k], n_eff[k] = stats._effective(sizes, x[:, k] / n, n.astype(float))
    low, high = clopper_pearson(p * n_eff, n_eff, level)
    return p, low, high


def _weighted(rows, x, n, stratified: bool, level: float) -> tuple:
    """(low, high), one per class, of sum_h rows[h, k] p[h, k], p[h, k] the share x[h, k]
    of n[h, k] rows checked: Clopper & Pearson's interval of p at `level` (stratified, of the
    cells' mean weighted by their rows, at its effective n, as _shares), times the rows. A
    cell of rows with no row checked is unknown: anywhere from none of its rows to all."""
    unknown = np.where((rows > 0) & ~(n > 0), rows, 0.0).sum(axis=0)
    known = np.where((rows > 0) & (n > 0), rows, 0.0)
    if not stratified:
        low, high = clopper_pearson(x.sum(axis=0), n.sum(axis=0), level)
    else:
        low, high = np.zeros(x.shape[1]), np.zeros(x.shape[1])
        for k in range(x.shape[1]):
            cells = known[:, k] > 0
            if cells.any():
                p, n_eff = stats._effective(known[cells, k], x[cells, k] / n[cells, k], n[cells, k])
                low[k], high[k] = clopper_pearson(p * n_eff, n_eff, level)
    total = known.sum(axis=0)
    low, high = np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)
    return total * low, total * high + unknown


def _precision_leak(counted, sizes, right, predicted, missed, checked, stratified, level):
    """(low, high) of each class's true share as counted x precision + rest x leak: the
    file's rows predicted k (counted, known) times the share of them whose class is k, plus
    its other rows times the share of those whose class is k; the audit, a random sample of
    the file, checks a random sample of either part, whatever their numbers (right[h, k]
    and missed[h, k] of predicted[h, k] and checked[h] - predicted[h, k] rows). Each share's
    interval at `level`."""
    rest = sizes[:, None] - counted
    p_low, p_high = _weighted(counted, right, predicted, stratified, level)
    l_low, l_high = _weighted(rest, missed, checked[:, None] - predicted, stratified, level)
    return (p_low + l_low) / sizes.sum(), (p_high + l_high) / sizes.sum()


def _beta_sum(weights, a, b, point, tail) -> np.ndarray:
    """The `tail` quantile of sum_i weights[i] B_i, B_i ~ Beta(a[i], b[i]) (or the point
    `point[i]` where it is finite), by the beta of the same mean and variance (one term
    alone: its own beta exactly)."""
    from scipy import special

    fixed = np.isfinite(point)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(fixed, point, a / (a + b))
        var = np.where(fixed, 0.0, a * b / ((a + b) ** 2 * (a + b + 1)))
    mean, var = np.nan_to_num(mean), np.nan_to_num(var)
    mu = (weights * mean).sum(axis=0)
    v = (weights**2 * var).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.maximum(mu * (1 - mu) / v - 1, 1e-12)
        q = special.betaincinv(
            np.maximum(mu * scale, 1e-300), np.maximum((1 - mu) * scale, 1e-300), tail
        )
    return np.clip(np.where((v > 0) & (mu > 0) & (mu < 1), q, mu), 0.0, 1.0)


def _post_stratified(counted, sizes, right, predicted, missed, checked, level):
    """(low, high) of each class's true share as a sum over the cells of the file's rows by
    stratum and by whether they were predicted k (their rows known, weights rows / N), each
    cell's share of class k measured by its rows checked: the quantiles of the sum of the
    cells' Clopper-Pearson betas (Beta(x, n - x + 1) for the low end, Beta(x + 1, n - x) for
    the high), matched by a beta. A cell with no row checked is unknown: anywhere from none
    of its rows to all."""
    rows = np.vstack([counted, sizes[:, None] - counted])
    x = np.vstack([right, missed])
    n = np.vstack([predicted, checked[:, None] - predicted])
    weights = np.where(rows > 0, rows, 0.0) / sizes.sum()
    known = n > 0
    x = np.clip(x, 0.0, np.maximum(n, 0.0))
    tail = (1 - level) / 2
    low_point = np.where(~known | (x <= 0), 0.0, np.nan)
    high_point = np.where(~known | (x >= n), 1.0, np.nan)
    low = _beta_sum(weights, x, n - x + 1, low_point, tail)
    high = _beta_sum(weights, x + 1, n - x, high_point, 1 - tail)
    return low, high


def share_estimates(
    classes: list,
    counted: np.ndarray,
    sizes: np.ndarray,
    predicted: np.ndarray,
    true: np.ndarray,
    stratum: np.ndarray,
    weight: np.ndarray,
    stratified: bool,
    simultaneous: bool = False,
    level: float = LEVEL,
    method: str = METHOD,
) -> dict:
    """Per class (arrays in class order): its share counted over the file, corrected by the audit, and the
    interval of the true share (`low`, `high`); the audit's own estimate and interval.

    counted[h, k]: the file's rows of stratum h predicted class k (sizes[h] = their sum);
    predicted, true, stratum, weight: per audit line checked, the class indices of its
    prediction and of its truth, its stratum and the rows drawn it counts for (1 for an
    audit of rows). method (METHODS; compared in benchmarks/class_shares.py):
    "post-stratified" (_post_stratified); "precision+leak": Clopper & Pearson's interval of
    precision and of leak, each at 1 - alpha/2, their ends weighted and added; "errors": that
    of a_k and of b_k, each at 1 - alpha/2, added; "+audit": half of alpha over these, half
    over the audit's own interval, the two intersected."""
    sizes = np.asarray(sizes, dtype=float)
    counted = np.asarray(counted, dtype=float)
    strata, k = len(sizes), len(classes)
    predicted, true = np.asarray(predicted, dtype=np.int64), np.asarray(true, dtype=np.int64)
    stratum, weight = np.asarray(stratum, dtype=np.int64), np.asarray(weight, dtype=float)
    checked = np.bincount(stratum, weights=weight, minlength=strata)

    def tally(cls, mask):  # [h, k]: the rows checked of stratum h, of class k, where mask
        cell = stratum * k + cls
        return np.bincount(cell[mask], weights=weight[mask], minlength=strata * k).reshape(
            strata, k
        )

    differ = predicted != true
    missed, false = tally(true, differ), tally(predicted, differ)
    truth = tally(true, np.ones(len(true), dtype=bool))
    count = (counted / np.maximum(sizes, 1)[:, None] * (sizes / sizes.sum())[:, None]).sum(axis=0)
    per_class = level if not simultaneous else 1 - (1 - level) / max(k, 1)
    spent = (1 - per_class) / (2 if method.endswith("+audit") else 1)
    half = 1 - spent / 2  # each of the two terms
    a, a_low, a_high = _shares(missed, checked, sizes, stratified, half)
    b, b_low, b_high = _shares(false, checked, sizes, stratified, half)
    t, t_low, t_high = _shares(truth, checked, sizes, stratified, per_class)
    low, high = count + a_low - b_high, count + a_high - b_low
    if method == "post-stratified":
        right = tally(true, ~differ)
        low, high = _post_stratified(
            counted, sizes, right, right + false, missed, checked, per_class
        )
    if method.startswith("precision+leak"):
        right = tally(true, ~differ)
        low, high = _precision_leak(
            counted, sizes, right, right + false, missed, checked, stratified, half
        )
    if method.endswith("+audit"):
        _, u_low, u_high = _shares(truth, checked, sizes, stratified, 1 - spent)
        low, high = np.maximum(low, u_low), np.minimum(high, u_high)
        middle = (low + high) / 2  # disjoint: one of them missed; the point between them
        low, high = np.where(low > high, middle, low), np.where(low > high, middle, high)
    return {
        CLASS: list(classes),
        "counted": count,
        "corrected": count + a - b,
        "low": np.clip(low, 0.0, 1.0),
        "high": np.clip(high, 0.0, 1.0),
        "audit_only": t,
        "audit_low": t_low,
        "audit_high": t_high,
        "rows_predicted": counted.sum(axis=0).astype(np.int64),
        "checked_true": np.rint(truth.sum(axis=0)).astype(np.int64),
        "checked_missed": np.rint(missed.sum(axis=0)).astype(np.int64),
        "checked_false": np.rint(false.sum(axis=0)).astype(np.int64),
        "checked": int(round(checked.sum())),
        "level": per_class,
        "simultaneous": bool(simultaneous),
        "interval": METHODS[method]
        + ((BY_STRATUM if method == "post-stratified" else STRATIFIED) if stratified else ""),
    }


def share_table(*args, **kwargs) -> pd.DataFrame:
    """share_estimates as a table: a row per class, the class in the first column."""
    return pd.DataFrame(share_estimates(*args, **kwargs))


# ------------------------------------------------------------------ the audit and the file
def audit_classes(audit, classify, code_length=None) -> tuple:
    """(predicted class, true class, rows drawn counted) of each audit line; lines not
    checked count none. A line marked right has its predicted class as its true one; a
    line marked wrong needs its true codes."""
    from mixer.audit.scores import WHOLE, counted_draws, outcomes

    right = outcomes(audit, [], code_length)[0][WHOLE]
    checked = np.isfinite(right)
    where = f"--audit {audit.path}"
    if not checked.any():
        raise UserError(
            f"{where}: no row is checked yet: write yes or no in 'correct', or the right codes "
            "in true_code_1.., for the rows you checked"
        )
    unknown = checked & (right == 0) & ~audit.has_codes
    if unknown.any():
        raise UserError(
            f"{where}: {audit.row_names(unknown)}: marked wrong without the right codes, so their "
            "class is not known; write the right codes in true_code_1.. of every row marked no"
        )
    frame = audit.frame
    predicted = [frame[c].to_numpy(dtype=object) for c in audit.design.audit_code_columns]
    true = [frame[c].to_numpy(dtype=object) for c in audit.true_columns] or [
        np.full(len(frame), "", dtype=object)
    ]
    predicted_class, true_class = classify(predicted), classify(true)
    true_class = np.where(right == 1, predicted_class, true_class)
    weight = counted_draws(audit, checked).astype(float)
    return predicted_class, true_class, weight


def _header(path: str, options) -> Optional[list]:
    from mixer.data.tables.reading import column_names, csv_layout, table_kind

    if table_kind(path, options.what) == "csv":
        return list(csv_layout(path, options).names)
    return column_names(path)


def counted_classes(path: str, options, audit, classify, log=None) -> tuple:
    """({(stratum, class): rows predicted it} over the rows the audit was drawn from, the
    predictions' fingerprint): the file streamed in chunks, only the columns needed (the
    description, the head's codes, the stratum column, and where the audit left rows out
    for them, `source` and `coded`)."""
    from mixer.data.tables.reading import as_text, iter_chunks, missing_column
    from mixer.reporting.evaluation import group_label

    design = audit.design
    reasons = set(design.left_out) - {"no description"}
    # a file of several heads names each head's columns with its prefix (flat_code_1, flat_coded)
    check_col = design.code_columns[0][: -len("code_1")] + "coded"
    needs = {LOOKUP_REASON: "source", CHECK_REASON: check_col}
    other = sorted(reasons - set(needs))
    if other:
        raise UserError(
            f"--audit {audit.path}: its rows were drawn from part of the predictions "
            f"({'; '.join(other)} left out), which --predictions cannot tell; the shares need an "
            "audit drawn from every row with a description"
        )
    columns = [design.text_col, *design.code_columns]
    columns += [design.by] if design.stratified else []
    columns += [needs[r] for r in sorted(reasons)]
    columns = list(dict.fromkeys(columns))
    names = _header(path, options)
    for column in columns if names is not None else []:
        if column not in names:
            raise missing_column(column, names, path, "--predictions")
    labels = {s.label: h for h, s in enumerate(design.strata)}
    digest = audit_file.PredictionsDigest(design.formatter)
    counts: dict = {}
    for chunk in iter_chunks(path, CHUNK_ROWS, options, log=log, columns=columns):
        for column in columns:
            if column not in chunk.columns:
                raise missing_column(column, chunk.columns, path, "--predictions")
        digest.update(chunk[design.text_col], chunk, list(design.code_columns))
        eligible = audit_file.descriptions(chunk[design.text_col]).ne("").to_numpy().copy()
        if LOOKUP_REASON in reasons:
            eligible &= as_text(chunk["source"]).to_numpy() != "lookup"
        if CHECK_REASON in reasons:
            eligible &= as_text(chunk[check_col]).to_numpy() != "check"
        if design.stratified:
            stratum = np.asarray([labels.get(group_label(v), -1) for v in chunk[design.by]])
        else:
            stratum = np.zeros(len(chunk), dtype=np.int64)
        classes = classify(
            [
                audit_file.spelled(chunk, c, design.formatter).to_numpy(dtype=object)
                for c in design.code_columns
            ]
        )
        tallies = pd.Series(1, index=pd.MultiIndex.from_arrays([stratum, classes]))[eligible]
        for key, n in tallies.groupby(level=[0, 1]).sum().items():
            counts[key] = counts.get(key, 0) + int(n)
    return counts, digest


def class_order(names) -> list:
    """Numbers in numeric order (HISCLASS 2 before 10), other names in text order, '(none)' last."""
    from mixer.reporting.evaluation import group_order

    return group_order([n for n in set(names) if n != NONE], NONE) + (
        [NONE] if NONE in set(names) else []
    )


def shares(
    audit,
    predictions: str,
    predictions_options,
    level: str,
    simultaneous: bool = False,
    code_length=None,
    log=None,
    method: str = METHOD,
) -> pd.DataFrame:
    """The table of `evaluate.py --shares` for an audit read back (mixer.audit.verdicts)."""
    classify = classifier(level, audit.design.formatter)
    predicted, true, weight = audit_classes(audit, classify, code_length)
    counts, digest = counted_classes(predictions, predictions_options, audit, classify, log)
    design = audit.design
    if digest.hexdigest() != design.predictions:
        raise UserError(
            f"--audit {audit.path}: drawn from other predictions ({design.predicted_rows:,} rows "
            f"fingerprinted {design.predictions}, by {design.source}) than --predictions "
            f"{predictions} ({digest.rows:,} rows fingerprint {digest.hexdigest()}); pass the "
            "predictions it was drawn from"
        )
    sizes = np.asarray([s.rows for s in design.strata], dtype=float)
    found = np.zeros(len(sizes))
    for (h, _), n in counts.items():
        if h >= 0:
            found[h] += n
    if not np.array_equal(found, sizes):
        raise UserError(
            f"--audit {audit.path}: its strata hold {int(sizes.sum()):,} rows but --predictions "
            f"{predictions} has {int(found.sum()):,} of them; pass the predictions it was drawn from"
        )
    classes = class_order([c for (_, c) in counts] + list(predicted) + list(true))
    index = {name: k for k, name in enumerate(classes)}
    counted = np.zeros((len(sizes), len(classes)))
    for (h, name), n in counts.items():
        counted[h, index[name]] += n
    used = weight > 0
    table = share_table(
        classes,
        counted,
        sizes,
        np.asarray([index[c] for c in predicted[used]], dtype=np.int64),
        np.asarray([index[c] for c in true[used]], dtype=np.int64),
        audit.stratum[used],
        weight[used],
        design.stratified,
        simultaneous,
        method=method,
    )
    table.insert(1, "shares", level)
    table["audit"] = design.id
    table["population"] = f"{design.rows:,} of {design.predicted_rows:,} predicted rows"
    return table


def format_table(table: pd.DataFrame) -> str:
    shown = table[
        [CLASS, "counted", "corrected", "low", "high", "audit_only", "audit_low", "audit_high"]
    ].copy()
    for column in shown.columns[1:]:
        shown[column] = shown[column].map(lambda v: "nan" if pd.isna(v) else f"{v:.4f}")
    return shown.to_string(index=False)


def render_shares(table: pd.DataFrame) -> bytes:
    """Bars of the corrected shares with their intervals, the counted share and the audit's
    own estimate with its interval beside each, as a PNG; with more than PLOTTED_CLASSES
    classes, the largest of them by counted share (the table has them all)."""

    from mixer.reporting.plot import _pyplot, png_bytes

    plt = _pyplot()
    title = (
        f"{table['shares'].iloc[0]} shares, audit {table['audit'].iloc[0]} "
        f"({int(table['checked'].iloc[0])} checked)"
    )
    if len(table) > PLOTTED_CLASSES:
        title += f": the {PLOTTED_CLASSES} largest of {len(table):,} classes"
        largest = table["counted"].sort_values(ascending=False, kind="stable").index
        table = table.loc[sorted(largest[:PLOTTED_CLASSES])]
    names = table[CLASS].astype(str).tolist()
    x = np.arange(len(names))
    fig, axis = plt.subplots(figsize=(max(4.5, 0.55 * len(names) + 2.5), 3.8))

    def errors(value, low, high):
        bars = np.vstack([value - low, high - value])
        return np.nan_to_num(np.clip(bars, 0.0, None), nan=0.0)

    corrected = table["corrected"].to_numpy(dtype=float)
    axis.bar(
        x - 0.2,
        np.clip(corrected, 0.0, None),
        width=0.4,
        yerr=errors(corrected, table["low"].to_numpy(float), table["high"].to_numpy(float)),
        capsize=3,
        label="corrected (interval)",
    )
    audit = table["audit_only"].to_numpy(dtype=float)
    axis.errorbar(
        x + 0.2,
        audit,
        yerr=errors(audit, table["audit_low"].to_numpy(float), table["audit_high"].to_numpy(float)),
        fmt="s",
        color="grey",
        capsize=3,
        label="audit alone (interval)",
    )
    axis.scatter(x - 0.2, table["counted"], marker="_", s=200, color="black", label="counted")
    axis.set_xticks(
        x, names, rotation=45 if len(names) > 8 else 0, ha="right" if len(names) > 8 else "center"
    )
    simultaneous = " (simultaneous)" if bool(table["simultaneous"].iloc[0]) else ""
    axis.set(
        ylabel=f"share of rows ({LEVEL:.0%} interval{simultaneous})",
        title=title,
    )
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_bytes(fig)


def evaluate_shares(
    path: str,
    predictions: Optional[str],
    options,
    predictions_options,
    level: str,
    simultaneous: bool,
    method: str,
    code_length,
    output,
    plot,
) -> None:
    """evaluate.py --shares LEVEL --audit AUDIT --predictions PREDICTED: everything read and
    checked, then the table printed and written (CSV) with its picture, both or neither."""
    import os

    from mixer.audit.verdicts import read_audit
    from mixer.core.io import atomic_write, write_text
    from mixer.audit.guards import GUARDS
    from mixer.data.tables.writing import check_output_path

    classifier(level)  # an unknown level, before anything is read
    if not predictions:
        raise UserError(
            "--shares needs --predictions FILE: the predictions the audit was drawn from, whose "
            "rows are counted"
        )
    stem = os.path.splitext(path)[0]
    output = output or f"{stem}_shares.csv"
    plot = plot or f"{os.path.splitext(output)[0]}.png"
    inputs = {"--audit": path, "--predictions": predictions}
    output = check_output_path(output, "--output", inputs, GUARDS)
    check_output_path(plot, "--plot", {**inputs, "--output": output}, GUARDS)
    audit = read_audit(path, options, log=print)
    table = shares(
        audit, predictions, predictions_options, level, simultaneous, code_length, print, method
    )
    picture = render_shares(table)  # drawn before anything is written

    def write_picture(tmp):
        with open(tmp, "wb") as handle:
            handle.write(picture)

    write_text(output, table.to_csv(index=False))
    atomic_write(plot, write_picture)
    first = table.iloc[0]
    together = ", all at once (Bonferroni)" if simultaneous else ", each class"
    print(
        f"audit {audit.design.id}: {int(first['checked']):,} rows checked of "
        f"{first['population']}; shares at level {level}, {LEVEL:.0%} intervals{together}"
    )
    print(format_table(table))
    print(f"wrote {output} and {plot}")

"""The production curve: the accuracy of the rows coded against the share coded, as the
confidence threshold falls (docs/coding.md#the-production-curve)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

COLUMNS = ["group", "threshold", "coded_rows", "coded_share", "coded_distinct_share", "accuracy"]
ALL = "all"
MAX_POINTS = 2000


def _one_curve(name, confidence, correct, distinct, max_points) -> pd.DataFrame:
    order = np.argsort(-confidence, kind="stable")
    conf, hit = confidence[order], correct[order]
    n = len(conf)
    if n == 0:
        return pd.DataFrame(columns=COLUMNS)
    # a threshold codes every row at or above it: one point per distinct confidence, at the
    # last row that has it
    ends = np.flatnonzero(np.r_[conf[1:] != conf[:-1], True])
    if len(ends) > max_points:  # thin a long curve to evenly spaced shares, keeping the end
        keep = np.unique(np.searchsorted(ends, np.linspace(0, n - 1, max_points)))
        ends = ends[np.minimum(keep, len(ends) - 1)]
    coded = ends + 1
    accuracy = np.cumsum(hit, dtype=np.float64)[ends] / coded
    if distinct is None:
        distinct_share = coded / n
    else:
        keys = pd.Series(np.asarray(distinct)[order]).astype(str)
        first = (~keys.duplicated()).to_numpy()
        distinct_share = np.cumsum(first)[ends] / max(int(first.sum()), 1)
    return pd.DataFrame({"group": name, "threshold": conf[ends], "coded_rows": coded.astype(np.int64),
                         "coded_share": coded / n, "coded_distinct_share": distinct_share,
                         "accuracy": accuracy})


def production_curve(confidence, correct, groups=None, distinct=None,
                     max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Columns group, threshold, coded_rows, coded_share, coded_distinct_share, accuracy:
    group "all", then one curve per value of `groups`; the threshold falls down each curve.
    `distinct`: a key per row (the input string) for the share of distinct strings coded."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    curves = [_one_curve(ALL, confidence, correct, distinct, max_points)]
    if groups is not None:
        groups = pd.Series(np.asarray(groups, dtype=object)).fillna("").astype(str).to_numpy()
        for value in sorted(set(groups)):
            rows = groups == value
            curves.append(_one_curve(value, confidence[rows], correct[rows],
                                     None if distinct is None else np.asarray(distinct)[rows], max_points))
    return pd.concat(curves, ignore_index=True)[COLUMNS]


def coded_at(curve: pd.DataFrame, target: float, group: str = ALL) -> Optional[pd.Series]:
    """The curve's point that codes the most rows at an accuracy of at least `target`
    (a point estimate on these rows, not a promise for new ones), or None."""
    points = curve[(curve["group"] == group) & (curve["accuracy"] >= target)]
    if points.empty:
        return None
    return points.loc[points["coded_rows"].idxmax()]


def headline(curve: pd.DataFrame, target: float, rows: str = "validation rows",
             group: str = ALL) -> str:
    """'at 95% accuracy: 71% of validation rows coded automatically' (read off the curve)."""
    point = coded_at(curve, target, group)
    if point is None:
        best = curve.loc[curve["group"] == group, "accuracy"]
        most = f" (the most confident rows reach {best.max():.1%})" if len(best) else ""
        return f"at {target:.0%} accuracy: no {rows} coded automatically{most}"
    return f"at {target:.0%} accuracy: {point['coded_share']:.0%} of {rows} coded automatically"


def plot_curve(curve: pd.DataFrame, path: str, target: Optional[float] = None,
               title: str = "production curve") -> str:
    """A PNG: accuracy of the coded rows against the share coded, one line per group."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works with no display (clusters, CI)
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 5), constrained_layout=True)
    for name, points in curve.groupby("group", sort=False):
        axis.plot(points["coded_share"], points["accuracy"], label=str(name),
                  linewidth=2.0 if name == ALL else 1.0)
    if target is not None:
        axis.axhline(target, color="grey", linestyle=":", label=f"target {target:.0%}")
    axis.set_xlim(0, 1)
    axis.set_xlabel("share of rows coded automatically")
    axis.set_ylabel("accuracy of the coded rows (exact code set)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(loc="lower left", fontsize="small")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path

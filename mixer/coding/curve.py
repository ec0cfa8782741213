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
        distinct_share = np.full(len(coded), np.nan)
    else:
        keys = pd.Series(np.asarray(distinct)[order]).astype(str)
        first = (~keys.duplicated()).to_numpy()
        distinct_share = np.cumsum(first)[ends] / max(int(first.sum()), 1)
    return pd.DataFrame(
        {
            "group": name,
            "threshold": conf[ends],
            "coded_rows": coded.astype(np.int64),
            "coded_share": coded / n,
            "coded_distinct_share": distinct_share,
            "accuracy": accuracy,
        }
    )


def production_curve(
    confidence, correct, groups=None, distinct=None, max_points: int = MAX_POINTS
) -> pd.DataFrame:
    """Columns group, threshold, coded_rows, coded_share, coded_distinct_share, accuracy:
    group "all", then one curve per value of `groups`; the threshold falls down each curve.
    `distinct`: a key per row (the input string) for the share of distinct strings coded
    (NaN without). A group called "all" leaves the overall curve "(all)"."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    overall = ALL
    if groups is not None:
        groups = pd.Series(np.asarray(groups, dtype=object)).fillna("").astype(str).to_numpy()
        while overall in set(groups):  # a group called "all" is not the overall curve
            overall = f"({overall})"
    curves = [_one_curve(overall, confidence, correct, distinct, max_points)]
    if groups is not None:
        distinct = None if distinct is None else np.asarray(distinct)
        values, codes = np.unique(
            groups, return_inverse=True
        )  # sorted; one pass, not one per group
        order = np.argsort(codes, kind="stable")
        for value, rows in zip(values, np.split(order, np.cumsum(np.bincount(codes))[:-1])):
            curves.append(
                _one_curve(
                    value,
                    confidence[rows],
                    correct[rows],
                    None if distinct is None else distinct[rows],
                    max_points,
                )
            )
    return pd.concat(curves, ignore_index=True)[COLUMNS]


def coded_at(
    curve: pd.DataFrame, target: float, group: Optional[str] = None
) -> Optional[pd.Series]:
    """The curve's point that codes the most rows at an accuracy of at least `target`
    (a point estimate on these rows, not a promise for new ones), or None. group None: the
    overall curve."""
    group = curve["group"].iloc[0] if group is None and len(curve) else group
    points = curve[(curve["group"] == group) & (curve["accuracy"] >= target)]
    if points.empty:
        return None
    return points.loc[points["coded_rows"].idxmax()]


def headline(
    curve: pd.DataFrame, target: float, rows: str = "validation rows", group: Optional[str] = None
) -> str:
    """'at 95% accuracy: 71% of validation rows coded automatically' (read off the curve;
    group None: the overall curve)."""
    group = curve["group"].iloc[0] if group is None and len(curve) else group
    point = coded_at(curve, target, group)
    if point is None:
        best = curve.loc[curve["group"] == group, "accuracy"]
        most = f" (the most confident rows reach {best.max():.1%})" if len(best) else ""
        return f"at {target:.0%} accuracy: no {rows} coded automatically{most}"
    return f"at {target:.0%} accuracy: {point['coded_share']:.0%} of {rows} coded automatically"


PLOTTED_GROUPS = 12  # a picture with more lines is unreadable: the largest groups are drawn


def _largest_groups(curve: pd.DataFrame, overall) -> tuple:
    """(the groups a plot draws: the overall curve and the PLOTTED_GROUPS with most rows,
    the number of groups left out)."""
    sizes = curve[curve["group"] != overall].groupby("group", sort=False)["coded_rows"].max()
    kept = sizes.sort_values(ascending=False, kind="stable").index[:PLOTTED_GROUPS]
    return {overall, *kept}, len(sizes) - len(kept)


def plot_curve(
    curve: pd.DataFrame, path: str, target: Optional[float] = None, title: str = "production curve"
) -> str:
    """A PNG: accuracy of the coded rows against the share coded, one line per group (and
    per head where the curve has a head column)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works with no display (clusters, CI)
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 5), constrained_layout=True)
    keys = [c for c in ("head", "group") if c in curve.columns]
    overall = curve["group"].iloc[0] if len(curve) else None
    drawn, left = _largest_groups(curve, overall)
    if left:
        title += f" ({left} smaller groups in the CSV only)"
    for name, points in curve[curve["group"].isin(drawn)].groupby(keys, sort=False):
        name = name if isinstance(name, tuple) else (name,)
        axis.plot(
            points["coded_share"],
            points["accuracy"],
            label=" ".join(str(v) for v in name),
            linewidth=2.0 if name[-1] == overall else 1.0,
        )
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

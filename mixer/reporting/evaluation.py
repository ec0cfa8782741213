"""The paper's evaluation table: accuracy, precision, recall and F1 at 1 to 5
leading digits, overall and per group, with n.

For each row, the true codes T and the predicted codes P are sets (empty cells
left out) of codes cut to their first d characters. Then:

    accuracy  = |P & T| / max(|P|, |T|)
    precision = |P & T| / |P|     (0 when nothing is predicted)
    recall    = |P & T| / |T|
    f1        = 2 precision recall / (precision + recall)   (0 when both are 0).

Each statistic is the mean over the rows that have at least one true code.
These are the definitions of OccCANINE's evaluation code
(histocc/eval_metrics.py: per observation, averaged over observations; its
accuracy is (|P in T| + |T in P|) / (2 max(|P|, |T|)), the same number for
sets). Where mixer differs: rows without a true code are left out (OccCANINE
divides by zero on a row with neither); the special codes -1, -2, -3 are
compared whole at every number of digits (OccCANINE writes them -0001 ..
-0003, so at 1 to 4 digits they count as equal to each other). Codes written
as numbers are read as whole numbers ('64100.0' is 64100) and, with
--code-length, numeric codes that lost leading zeros get them back, where
OccCANINE restores exactly one. The training metrics in logs.csv are micro
averages over codes instead (docs/evaluation.md).

No torch here: evaluating a predictions file needs pandas only.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import HEADS
from mixer.data.labels.normalise import code_text, key_digit_width, restore_digits
from mixer.data.tables.writing import PREDICTION_COLUMN

STATISTICS = ("accuracy", "precision", "recall", "f1")
SPECIAL = {"-1", "-2", "-3"}


def codes_in_columns(frame: pd.DataFrame, columns: list, code_length: Optional[int] = None) -> list:
    """Per row, the set of codes in `columns` (empty and missing cells left out), spelled
    as training spells them (mixer.data.labels.normalise): with --code-length, digit codes shorter
    than it get their leading zeros back."""
    cells = []
    for column in columns:
        text, _, _ = code_text(frame, column)
        text = text.replace({"nan": "", "NaN": "", "None": ""})
        text, _ = restore_digits(text, code_length)
        cells.append(text.to_numpy(dtype=object))
    return (
        [{c for c in row if c} for row in zip(*cells)]
        if cells
        else [set() for _ in range(len(frame))]
    )


def class_sets(
    frame: pd.DataFrame, columns: list, walk, code_length: Optional[int] = None, context=None
) -> list:
    """Per row, the set of the classes a crosswalk (mixer.data.labels.crosswalk) gives the
    codes in `columns` (codes without a class left out); context: {status, relation,
    product: each row's values} that pick the crosswalk's rows."""
    context = context or {}
    cells = []
    for column in columns:
        text, _, _ = code_text(frame, column)
        text, _ = restore_digits(text.replace({"nan": "", "NaN": "", "None": ""}), code_length)
        found = walk.classify(text, *(context.get(k) for k in ("status", "relation", "product")))
        cells.append(found.to_numpy(dtype=object))
    if not cells:
        return [set() for _ in range(len(frame))]
    return [{c for c in row if c} for row in zip(*cells)]


def class_table(truth: list, predictions: dict, walk, groups=None, group_name="group"):
    """evaluation_table's rows at a crosswalk's level: `truth` and `predictions` are class
    sets (class_sets), the rows whose true codes have a class scored; `digits` names the
    crosswalk."""
    table = evaluation_table(truth, predictions, groups, [None], group_name)
    return table.assign(digits=walk.name)


def lost_zeros_note(truth: list, predicted: dict) -> Optional[str]:
    """Without --code-length: a note when true codes are digits shorter than the predictions'
    digit codes, all of one width (the model writes '01110', the truth says '1110'). Scored
    as written they count as wrong, so the note names the flag that restores them."""
    written = {c for sets in predicted.values() for row in sets for c in row if c.isdigit()}
    width = key_digit_width(written)
    if width is None:
        return None
    short = sorted({c for row in truth for c in row if c.isdigit() and len(c) < width})
    if not short:
        return None
    example = next((c for c in short if c.zfill(width) in written), short[0])
    return (
        f"note: {len(short)} distinct true code(s) are digits shorter than the predictions' "
        f"{width}-digit codes (e.g. {example!r} beside {example.zfill(width)!r}), scored as written; "
        f"if they lost leading zeros, pass --code-length {width}"
    )


def cut(codes: set, digits: Optional[int]) -> set:  # digits None: the whole code
    if not digits:
        return codes
    return {c if c in SPECIAL else c[:digits] for c in codes}


def row_statistics(true: set, pred: set) -> tuple:
    hits = len(true & pred)
    precision = hits / len(pred) if pred else 0.0
    recall = hits / len(true)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return hits / max(len(pred), len(true)), precision, recall, f1


def overall_label(groups, label: str = "all") -> str:
    """'all' names the rows of every group, or '(all)' ('((all))', ...) when a group is called that."""
    while label in groups:
        label = f"({label})"
    return label


WHOLE_NUMBER_TEXT = re.compile(
    r"^[+-]?\d+\.0+$"
)  # 1850.0, as a number column with blanks is written


def group_label(value) -> Optional[str]:
    """A --by cell as a group's name: whole numbers lose a '.0' (a year column with blanks
    reads as 1850.0, as a float or as text); None for a missing, blank or NaN cell."""
    if value is None or (
        pd.api.types.is_scalar(value) and not isinstance(value, str) and pd.isna(value)
    ):
        return None
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    text = str(value).strip()
    if not text or text.lower() in ("nan", "none", "<na>", "null"):
        return None
    return text.split(".")[0] if WHOLE_NUMBER_TEXT.match(text) else text


def group_labels(values) -> tuple:
    """(each row's --by group as text (group_label), the label of the rows without one:
    '(blank)', or '((blank))' ... when a group is called that)."""
    labels = [group_label(v) for v in values]
    blank = overall_label({x for x in labels if x is not None}, "(blank)")
    return np.asarray([blank if x is None else x for x in labels], dtype=object), blank


def group_order(names, blank: str) -> list:
    """Numbers in numeric order (900 before 1850), other names in text order; the blank label last."""

    def number(name):
        try:
            return float(name)
        except ValueError:
            return None

    named = sorted(n for n in set(names) if n != blank)
    if all(number(n) is not None for n in named):
        named.sort(key=number)  # stable: equal numbers ('1', '01') keep text order
    return named + ([blank] if blank in names else [])


def evaluation_table(
    truth: list,
    predictions: dict,
    groups: Optional[np.ndarray] = None,
    digits=(1, 2, 3, 4, 5),
    group_name: str = "group",
) -> pd.DataFrame:
    """One row per (group, head, digits): n and the four statistics. `predictions`
    maps a head's name to its per-row code sets."""
    evaluated = np.asarray([bool(t) for t in truth])
    names = []
    if groups is not None:
        groups, blank = group_labels(groups)
        names = group_order(set(groups[evaluated]), blank)
    overall = overall_label(names)
    parts = [(overall, evaluated)] + [(name, evaluated & (groups == name)) for name in names]
    out = []
    for head, predicted in predictions.items():
        for d in digits:
            values = np.zeros((len(truth), 4))
            for row in np.flatnonzero(evaluated):
                values[row] = row_statistics(cut(truth[row], d), cut(predicted[row], d))
            for name, rows in parts:
                n = int(rows.sum())
                means = values[rows].mean(axis=0) if n else np.full(4, np.nan)
                out.append(
                    {
                        group_name: name,
                        "head": head,
                        "digits": d,
                        "n": n,
                        **dict(zip(STATISTICS, means)),
                    }
                )
    return pd.DataFrame(out)


def prediction_groups(columns, exclude=()) -> dict:
    """{head: [its code_k columns in order]}: predict.py writes code_k (one head) or
    <head>_code_k (several heads), never both, so where its heads' prefixed columns are
    all there is besides, a plain code_k is an input column (a validation file's own
    codes). Input columns renamed to *_input are not predictions either."""
    found: dict = {}
    for column in columns:
        match = PREDICTION_COLUMN.match(str(column))
        if match and column not in exclude:
            found.setdefault(match.group("head") or "", []).append((int(match.group("k")), column))
    prefixed = set(found) - {""}
    if prefixed and prefixed <= set(HEADS):
        found.pop("", None)
    return {head or "prediction": [c for _, c in sorted(cols)] for head, cols in found.items()}


def plot_table(table: pd.DataFrame, path: str, group_name: str = "group") -> str:
    from mixer.reporting.plot import _pyplot

    plt = _pyplot()
    table = table[table["digits"].map(lambda d: isinstance(d, (int, np.integer)))]  # not classes
    heads = list(dict.fromkeys(table["head"]))
    overall = table[group_name].iloc[0]  # evaluation_table puts the overall rows first
    fig, axes = plt.subplots(1, len(STATISTICS), figsize=(4 * len(STATISTICS), 3.6), sharey=True)
    for axis, statistic in zip(axes, STATISTICS):
        for head in heads:
            for name, part in table[table["head"] == head].groupby(group_name, sort=False):
                style = "-" if name == overall else ":"
                axis.plot(
                    part["digits"],
                    part[statistic],
                    style,
                    marker="o",
                    label=f"{head}" + ("" if name == overall else f" ({name})"),
                )
        axis.set(title=statistic, xlabel="leading digits", xticks=sorted(table["digits"].unique()))
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("mean over rows")
    axes[-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_table(table: pd.DataFrame) -> str:
    shown = table.copy()
    for statistic in STATISTICS:
        shown[statistic] = shown[statistic].map(lambda v: f"{v:.4f}")
    return shown.to_string(index=False)

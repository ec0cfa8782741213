"""The production curve of a scored predictions file (evaluate.py): per head, the accuracy
of the rows coded against the share coded as the confidence threshold falls, overall and
per --by group (mixer.coding.curve; docs/coding.md#the-production-curve); with a
crosswalk, the same at its class level (class_level)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from mixer.coding.curve import headline, production_curve

CONFIDENCE = "confidence"  # predict.py's column: confidence (one head) or <head>_confidence


def confidence_column(head: str, columns, given: Optional[str] = None) -> Optional[str]:
    """The column of a head's row confidence: --confidence-col, else the one predict.py
    writes for that head, when the file has it."""
    if given:
        return given
    name = CONFIDENCE if head == "prediction" else f"{head}_{CONFIDENCE}"
    return name if name in columns else None


def class_column(head: str, columns, name: str) -> Optional[str]:
    """The column of a head's class confidence at crosswalk `name` (predict.py writes
    level_confidence_<name> with --target-level <name>), when the file has it."""
    from mixer.coding.confidence import LEVEL_CONFIDENCE

    column = LEVEL_CONFIDENCE.format(name)
    column = column if head == "prediction" else f"{head}_{column}"
    return column if column in columns else None


def class_level(frame, truth, predicted, columns: dict, walk, groups, group_name, distinct):
    """production_table at a crosswalk's class level for every head with a confidence column
    (`columns`: {head: column}): the curve's head is '<head>:<crosswalk>', the rows ordered by
    the class confidence where the file has it, else by the codes' (a lower bound of it), a row
    right when its classes are its true codes' (Crosswalk.group_set). Returns production_table's
    three parts and {curve head: confidence column}."""
    named = {
        f"{head}:{walk.name}": class_column(head, frame.columns, walk.name) or column
        for head, column in columns.items()
    }
    table, missing, scored = production_table(
        frame,
        [walk.group_set(t) if t else frozenset() for t in truth],
        {f"{head}:{walk.name}": [walk.group_set(p) for p in predicted[head]] for head in columns},
        named,
        groups,
        group_name,
        distinct,
    )
    return table, missing, scored, named


def production_table(
    frame: pd.DataFrame,
    truth: list,
    predicted: dict,
    confidence_cols: dict,
    groups=None,
    group_name: str = "group",
    distinct=None,
) -> tuple:
    """(the curves of every head with a confidence column, as one frame with a head column;
    per head the rows left out for a missing confidence; per head (confidence, right) of the
    rows on its curve). Rows without a true code are left out, as in the evaluation table; a
    row is right when its code set is exactly the truth's."""
    evaluated = np.asarray([bool(t) for t in truth])
    curves, missing, scored = [], {}, {}
    for head, column in confidence_cols.items():
        confidence = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
        rows = evaluated & ~np.isnan(confidence)
        missing[head] = int((evaluated & np.isnan(confidence)).sum())
        correct = np.asarray(
            [truth[r] == predicted[head][r] for r in np.flatnonzero(rows)], dtype=bool
        )
        scored[head] = (confidence[rows], correct)
        curve = production_curve(
            confidence[rows],
            correct,
            None if groups is None else np.asarray(groups, dtype=object)[rows],
            None if distinct is None else np.asarray(distinct, dtype=object)[rows],
        )
        curve.insert(0, "head", head)
        curves.append(curve.rename(columns={"group": group_name}))
    return pd.concat(curves, ignore_index=True), missing, scored


def headlines(
    table: pd.DataFrame,
    target: float,
    group_name: str = "group",
    columns=None,
    scored: Optional[dict] = None,
    confidence: float = 0.95,
) -> list:
    """One line per head, named by its confidence column (`columns`: {head: column}) or head:
    'flat_confidence: at 95% accuracy: 71% of rows coded automatically', read off the curve
    of these rows; with `scored` ({head: (confidence, right)}, production_table's), first what
    the guarantee codes with these rows as predict.py's --calibration-data (at `confidence`)."""
    from mixer.coding.guarantee import choose_threshold

    lines = []
    for head, curve in table.groupby("head", sort=False):
        name = (columns or {}).get(head, head)
        if scored is not None and head in scored:
            choice = choose_threshold(*scored[head], target, 1.0 - confidence)
            share = choice.coded_share if choice.threshold is not None else 0.0
            lines.append(
                f"{name}: on new rows like these, predict.py --target-accuracy {target:g} with them as "
                f"--calibration-data codes {share:.0%} automatically (its guarantee, at confidence "
                f"{confidence:g})" + (f"; {choice.note}" if choice.threshold is None else "")
            )
        line = headline(curve.rename(columns={group_name: "group"}), target, rows="rows")
        lines.append(f"{name}, read off the curve of these rows (a point estimate): {line}")
    return lines

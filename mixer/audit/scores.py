"""Scoring an audit a person filled (`evaluate.py --audit AUDIT.csv`): the accuracy of
the predictions it was drawn from, with 95% intervals (mixer.audit.statistics), overall
and by stratum, for the whole code and at the digit levels asked for, and at the class level of
each crosswalk named (evaluate.py --audit --crosswalk hisclass).

A row is checked when its `correct` cell says yes or no, or a true code is written.
Where true codes are written, they decide (the predicted code set equals the true one;
at d digits, the codes cut to d characters, as evaluate.py --digits cuts them), and a
`correct` cell beside them must agree. Rows left blank (or removed from the file) are
counted as neither right nor wrong. They are reported, and the estimate is for the rows
checked, as if the blanks were a random part of the sample (they are when a person
checks from the top: the rows are in random order).

An audit of descriptions lists each description once, at its first row drawn, so its
first lines favour frequent descriptions. A line counts the rows drawn it stands for
that come, in their stratum's draw order, before the first row whose line is blank (or
missing). Those rows are the first rows of the sample in key order, a random sample;
counting all the rows of the lines checked would weigh frequent descriptions more than
the sample does.

No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.audit.verdicts import Audit
from mixer.data.labels.normalise import key_digit_width
from mixer.audit import statistics as stats
from mixer.reporting.evaluation import codes_in_columns, cut, overall_label

WHOLE = "all"  # the level of the whole code set
PLOTTED_STRATA = 30  # the most strata the picture shows (the largest; the table has every one)


def outcomes(audit: Audit, digits: list, code_length=None, walks=()) -> tuple:
    """({level: each row's 1.0 (right), 0.0 (wrong) or nan (not checked)}, notes). A digit
    level needs the true codes of every row marked wrong: without them it is left out. walks:
    crosswalks (mixer.data.labels.crosswalk), each a level named by the crosswalk: a row
    right when its predicted codes' classes are its true codes' (Crosswalk.group_set: a
    code without a class right only as itself), as the guarantee at that level counts it."""
    frame, design = audit.frame, audit.design
    predicted = codes_in_columns(frame, list(design.audit_code_columns), code_length)
    truth = (
        codes_in_columns(frame, audit.true_columns, code_length)
        if audit.true_columns
        else [set()] * len(frame)
    )
    verdict = np.asarray([np.nan if c is None else float(c) for c in audit.correct])
    notes = []
    levels = {}
    for level in [None] + list(digits) + list(walks):
        if isinstance(level, (int, np.integer)) or level is None:
            by_codes = np.asarray(
                [float(cut(t, level) == cut(p, level)) for t, p in zip(truth, predicted)]
            )
        else:  # a crosswalk's classes
            by_codes = np.asarray(
                [float(level.group_set(t) == level.group_set(p)) for t, p in zip(truth, predicted)]
            )
        if level is None:
            disagree = audit.has_codes & np.isfinite(verdict) & (by_codes != verdict)
            if disagree.any():
                raise UserError(
                    f"--audit {audit.path}: {audit.row_names(disagree)}: 'correct' says "
                    "otherwise than the true codes beside it; fix one of them"
                )
        unknown = ~audit.has_codes & (verdict == 0)
        named = level if level is None or isinstance(level, (int, np.integer)) else level.name
        if level is not None and unknown.any():
            what = "digits" if named == level else "classes"
            notes.append(
                f"{named}{' digit(s)' if named == level else ''}: left out: {int(unknown.sum())} "
                f"row(s) marked wrong have no true codes, so whether their {what} are right is "
                "not known"
            )
            continue
        levels[WHOLE if level is None else named] = np.where(audit.has_codes, by_codes, verdict)
    shorter = _shorter_codes(truth, predicted, code_length)
    if shorter:
        notes.append(
            f"{shorter} true code(s) are numbers shorter than the predicted codes (e.g. 6510 "
            "against 06510): Excel drops leading zeros when it opens a CSV file; if that "
            "happened, score with --code-length (5 for HISCO)"
        )
    return levels, notes


def _shorter_codes(truth: list, predicted: list, code_length) -> int:
    if code_length:
        return 0
    width = key_digit_width(c for row in predicted for c in row)
    if width is None:
        return 0
    return sum(1 for row in truth for c in row if c.isdigit() and len(c) < width)


def stratum_names(audit: Audit) -> list:
    labels = [s.label for s in audit.design.strata]
    blank = overall_label({x for x in labels if x is not None}, "(blank)")
    return [blank if x is None else x for x in labels]


def counted_draws(audit: Audit, checked: np.ndarray) -> np.ndarray:
    """The rows drawn each line counts: unit rows, 1 for a line checked; unit descriptions,
    those of its draws that come before the first draw of its stratum whose line is blank
    or missing (module doc)."""
    if audit.design.unit == "rows":
        return audit.draws * checked
    counted = np.zeros(len(checked), dtype=np.int64)
    for h, stratum in enumerate(audit.design.strata):
        lines = np.flatnonzero(audit.stratum == h)
        counted[lines] = stats.counted_ranks(
            [audit.ranks[r] for r in lines], checked[lines], stratum.drawn
        )
    return counted


def population(design) -> str:
    """What the estimate is of, in words: the rows drawn from, and those left out."""
    left = "".join(f"; {n:,} {reason} left out" for reason, n in design.left_out.items())
    return f"{design.rows:,} of {design.predicted_rows:,} predicted rows{left}"


def score_table(audit: Audit, levels: dict) -> pd.DataFrame:
    """One row per (level, stratum), the whole audit first: the stratum's rows in the
    file, rows drawn, checked (counted) and left blank, the share right and its 95%
    interval; an audit of descriptions also its lines and lines checked."""
    design = audit.design
    group = design.by or "stratum"
    names = stratum_names(audit)
    overall = overall_label(set(names) if design.stratified else set())
    sizes = np.asarray([s.rows for s in design.strata])
    drawn = np.asarray([s.drawn for s in design.strata])
    interval = (
        "Clopper-Pearson at the effective n (Korn-Graubard)"
        if design.stratified
        else "Clopper-Pearson"
    )
    lines_checked = np.isfinite(levels[WHOLE])
    counted = counted_draws(audit, lines_checked)
    lines = np.bincount(audit.stratum, minlength=len(sizes))
    lines_done = np.bincount(audit.stratum, weights=lines_checked, minlength=len(sizes))
    out = []
    for level, right in levels.items():
        checked = np.bincount(
            audit.stratum, weights=counted * np.isfinite(right), minlength=len(sizes)
        )
        correct = np.bincount(
            audit.stratum, weights=counted * np.nan_to_num(right), minlength=len(sizes)
        )
        whole = stats.estimate(sizes, correct, checked, design.stratified)
        parts = [
            (
                overall,
                sizes.sum(),
                drawn.sum(),
                checked.sum(),
                correct.sum(),
                whole,
                interval,
                lines.sum(),
                lines_done.sum(),
            )
        ]
        if design.stratified:
            parts += [
                (
                    names[h],
                    sizes[h],
                    drawn[h],
                    checked[h],
                    correct[h],
                    stats.simple(correct[h], checked[h]),
                    "Clopper-Pearson",
                    lines[h],
                    lines_done[h],
                )
                for h in range(len(sizes))
            ]
        for name, rows, n_drawn, n_checked, n_correct, estimate, method, n_lines, n_done in parts:
            row = {
                group: name,
                "digits": level,
                "rows": int(rows),
                "drawn": int(n_drawn),
                "checked": int(n_checked),
                "blank": int(n_drawn - n_checked),
            }
            if design.unit != "rows":
                row.update({"lines": int(n_lines), "lines_checked": int(n_done)})
            row.update(
                {
                    "correct": int(round(n_correct)),
                    "accuracy": estimate.value,
                    "low": estimate.low,
                    "high": estimate.high,
                    "n_eff": estimate.n_eff,
                    "interval": method,
                }
            )
            out.append(row)
    table = pd.DataFrame(out)
    table["population"] = population(design)
    for key, value in (
        ("model", design.source),
        ("model_fingerprint", design.model),
        ("head", design.head),
        ("threshold", design.threshold),
        ("audit", design.id),
    ):
        table[key] = value
    return table


def header(audit: Audit, table: pd.DataFrame) -> list:
    design = audit.design
    first = table.iloc[0]
    by = f", stratified by {design.by}" if design.stratified else ""
    left = "".join(f"; {n:,} {reason} were not drawn from" for reason, n in design.left_out.items())
    lines = [
        f"audit {design.id}: {design.drawn:,} rows drawn at random (seed {design.seed}{by}) from "
        f"{design.rows:,} of the {design.predicted_rows:,} predicted rows{left}",
        f"model {design.source} ({design.model}), {design.head} head, threshold {design.threshold}",
    ]
    present = int(audit.draws.sum())
    missing = (
        f", {design.drawn - present:,} of them missing from the file"
        if present < design.drawn
        else ""
    )
    if design.unit == "rows":
        lines.append(
            f"checked {first['checked']:,}, left blank {first['blank']:,}{missing} (blanks are "
            "counted as neither right nor wrong: the estimate is for the rows checked)"
        )
    else:
        lines.append(
            f"checked {first['lines_checked']:,} of {first['lines']:,} lines (distinct descriptions); "
            f"counted {first['checked']:,} of the {design.drawn:,} rows drawn, those before the first "
            f"line left blank (a random sample; the rest, {first['blank']:,}, as blanks){missing}"
        )
    if design.left_out:
        lines.append(
            f"the estimate is for the {design.rows:,} rows drawn from, not all {design.predicted_rows:,}: "
            + "; ".join(f"{n:,} {reason} were left out" for reason, n in design.left_out.items())
        )
    return lines


def format_table(table: pd.DataFrame) -> str:
    shown = table.drop(
        columns=["model", "model_fingerprint", "head", "threshold", "audit", "population"]
    ).copy()
    for column in ("accuracy", "low", "high"):
        shown[column] = shown[column].map(lambda v: "nan" if pd.isna(v) else f"{v:.4f}")
    shown["n_eff"] = shown["n_eff"].map(lambda v: "nan" if pd.isna(v) else f"{v:.1f}")
    return shown.to_string(index=False)


def render_scores(table: pd.DataFrame) -> bytes:
    """The estimates with their 95% intervals as a PNG: a point per stratum (the whole
    audit first), a colour per level; with more than PLOTTED_STRATA strata, the largest of
    them (the table has them all). Error bars are clipped at 0 (an interval reaches its
    estimate where all or none are right) and a stratum without an estimate has none."""

    from mixer.reporting.plot import _pyplot, png_bytes

    plt = _pyplot()
    group = table.columns[0]
    names = list(dict.fromkeys(table[group]))
    title = f"audit {table['audit'].iloc[0]}"
    if len(names) > PLOTTED_STRATA + 1:
        rows = table.drop_duplicates(group).set_index(group)["rows"]
        largest = set(
            rows.iloc[1:].sort_values(ascending=False, kind="stable").index[:PLOTTED_STRATA]
        )
        title += f": the {PLOTTED_STRATA} largest of {len(names) - 1:,} strata"
        names = names[:1] + [n for n in names[1:] if n in largest]
        table = table[table[group].isin(names)]
    levels = list(dict.fromkeys(table["digits"]))
    fig, axis = plt.subplots(figsize=(max(4.0, 1.1 * len(names) + 2), 3.6))
    step = 0.6 / max(len(levels), 1)
    for i, level in enumerate(levels):
        part = table[table["digits"] == level].set_index(group).reindex(names)
        x = np.arange(len(names)) + (i - (len(levels) - 1) / 2) * step
        value = part["accuracy"].to_numpy(dtype=float)
        errors = np.vstack(
            [value - part["low"].to_numpy(dtype=float), part["high"].to_numpy(dtype=float) - value]
        )
        errors = np.nan_to_num(np.clip(errors, 0.0, None), nan=0.0)
        label = (
            "whole code"
            if level == WHOLE
            else (f"{level} digit(s)" if isinstance(level, (int, np.integer)) else str(level))
        )
        axis.errorbar(x, value, yerr=errors, fmt="o", capsize=3, label=label)
    axis.set_xticks(
        np.arange(len(names)),
        [
            f"{n}\n(n={int(c)})"
            for n, c in zip(
                names, table.drop_duplicates(group).set_index(group).reindex(names)["checked"]
            )
        ],
    )
    axis.set(ylim=(0, 1.02), ylabel="share right (95% interval)", title=title)
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_bytes(fig)


def evaluate_audit(
    path: str,
    predictions,
    options,
    predictions_options,
    digits: list,
    code_length,
    output,
    plot,
    walks=(),
) -> None:
    """evaluate.py --audit: read and check the audit (with its role's options,
    --audit-encoding ...) and the predictions it must come from (with --encoding ...),
    refuse what does not fit before writing anything. Then print the table and write it
    (CSV) and its picture."""
    import os

    from mixer.core.io import atomic_write, write_text
    from mixer.audit.verdicts import check_drawn_from, read_audit
    from mixer.data.tables.reading import read_table
    from mixer.audit.guards import GUARDS
    from mixer.data.tables.writing import check_output_path

    from mixer.data.tables.compression import inner_name

    stem = os.path.splitext(inner_name(path))[0]  # audit.csv.gz: audit
    output = output or f"{stem}_scores.csv"
    plot = plot or f"{os.path.splitext(output)[0]}.png"
    inputs = {"--audit": path, "--predictions": predictions}
    output = check_output_path(output, "--output", inputs, GUARDS)
    check_output_path(plot, "--plot", {**inputs, "--output": output}, GUARDS)
    audit = read_audit(path, options, log=print)
    if predictions:
        check_drawn_from(
            audit, read_table(predictions, predictions_options, log=print), predictions
        )
    levels, notes = outcomes(audit, digits, code_length, walks)
    table = score_table(audit, levels)
    if not table["checked"].iloc[0]:
        raise UserError(
            f"--audit {path}: no row is checked yet: write yes or no in 'correct', or the "
            "right codes in true_code_1.., for the rows you checked"
        )
    picture = render_scores(table)  # drawn before anything is written: all the outputs, or none

    def write_picture(tmp):
        with open(tmp, "wb") as handle:
            handle.write(picture)

    write_text(output, table.to_csv(index=False))
    atomic_write(plot, write_picture)
    for line in header(audit, table):
        print(line)
    print(format_table(table))
    for note in notes:
        print(f"note: {note}")
    if not predictions:
        print(
            "note: pass --predictions FILE to check that the audit was drawn from FILE's predictions"
        )
    print(f"wrote {output} and {plot}")

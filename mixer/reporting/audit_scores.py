"""Scoring an audit a person filled (`evaluate.py --audit AUDIT.csv`): the accuracy of
the predictions it was drawn from, with 95% intervals (mixer.reporting.audit), overall
and by stratum, for the whole code and at the digit levels asked for.

A row is checked when its `correct` cell says yes or no, or a true code is written.
Where true codes are written, they decide (the predicted code set equals the true one;
at d digits, the codes cut to d characters, as evaluate.py --digits cuts them), and a
`correct` cell beside them must agree. Rows left blank (or removed from the file) are
counted as neither right nor wrong: they are reported, and the estimate is for the rows
checked, as if the blanks were a random part of the sample (they are when a person
checks from the top: the rows are in random order).

No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.data.audits import Audit
from mixer.reporting import audit as stats
from mixer.reporting.evaluation import code_sets, cut, overall_label

WHOLE = "all"  # the level of the whole code set


def outcomes(audit: Audit, digits: list, code_length=None) -> tuple:
    """({level: each row's 1.0 (right), 0.0 (wrong) or nan (not checked)}, notes). A digit
    level needs the true codes of every row marked wrong: without them it is left out."""
    frame, design = audit.frame, audit.design
    predicted = code_sets(frame, list(design.audit_code_columns), code_length)
    truth = code_sets(frame, audit.true_columns, code_length) if audit.true_columns else [set()] * len(frame)
    verdict = np.asarray([np.nan if c is None else float(c) for c in audit.correct])
    notes = []
    levels = {}
    for level in [None] + list(digits):
        by_codes = np.asarray([float(cut(t, level) == cut(p, level)) for t, p in zip(truth, predicted)])
        if level is None:
            disagree = audit.has_codes & np.isfinite(verdict) & (by_codes != verdict)
            if disagree.any():
                raise UserError(f"--audit {audit.path}: {audit.row_names(disagree)}: 'correct' says "
                                "otherwise than the true codes beside it; fix one of them")
        unknown = ~audit.has_codes & (verdict == 0)
        if level is not None and unknown.any():
            notes.append(f"{level} digit(s): left out: {int(unknown.sum())} row(s) marked wrong have no "
                         "true codes, so how many of their digits are right is not known")
            continue
        levels[WHOLE if level is None else level] = np.where(audit.has_codes, by_codes, verdict)
    shorter = _shorter_codes(truth, predicted, code_length)
    if shorter:
        notes.append(f"{shorter} true code(s) are numbers shorter than the predicted codes (e.g. 6510 "
                     "against 06510): Excel drops leading zeros when it opens a CSV file; if that "
                     "happened, score with --code-length (5 for HISCO)")
    return levels, notes


def _shorter_codes(truth: list, predicted: list, code_length) -> int:
    if code_length:
        return 0
    lengths = {len(c) for row in predicted for c in row if c.isdigit()}
    if len(lengths) != 1:
        return 0
    width = lengths.pop()
    return sum(1 for row in truth for c in row if c.isdigit() and len(c) < width)


def stratum_names(audit: Audit) -> list:
    labels = [s.label for s in audit.design.strata]
    blank = overall_label({x for x in labels if x is not None}, "(blank)")
    return [blank if x is None else x for x in labels]


def score_table(audit: Audit, levels: dict) -> pd.DataFrame:
    """One row per (level, stratum), the whole audit first: the stratum's rows in the
    file, rows drawn, checked and left blank, the share right and its 95% interval."""
    design = audit.design
    group = design.by or "stratum"
    names = stratum_names(audit)
    overall = overall_label(set(names) if design.stratified else set())
    sizes = np.asarray([s.rows for s in design.strata])
    drawn = np.asarray([s.drawn for s in design.strata])
    interval = "Wilson, effective n (stratified)" if design.stratified else "Wilson"
    out = []
    for level, right in levels.items():
        checked_rows = np.isfinite(right)
        checked = np.bincount(audit.stratum, weights=audit.draws * checked_rows, minlength=len(sizes))
        correct = np.bincount(audit.stratum, weights=audit.draws * np.nan_to_num(right), minlength=len(sizes))
        whole = stats.estimate(sizes, correct, checked, design.stratified)
        parts = [(overall, sizes.sum(), drawn.sum(), checked.sum(), correct.sum(), whole, interval)]
        if design.stratified:
            parts += [(names[h], sizes[h], drawn[h], checked[h], correct[h], stats.simple(correct[h], checked[h]),
                       "Wilson") for h in range(len(sizes))]
        for name, rows, n_drawn, n_checked, n_correct, estimate, method in parts:
            out.append({group: name, "digits": level, "rows": int(rows), "drawn": int(n_drawn),
                        "checked": int(n_checked), "blank": int(n_drawn - n_checked),
                        "correct": int(round(n_correct)), "accuracy": estimate.value, "low": estimate.low,
                        "high": estimate.high, "n_eff": estimate.n_eff, "interval": method})
    table = pd.DataFrame(out)
    for key, value in (("model", design.source), ("model_fingerprint", design.model), ("head", design.head),
                       ("threshold", design.threshold), ("audit", design.id)):
        table[key] = value
    return table


def header(audit: Audit, table: pd.DataFrame) -> list:
    design = audit.design
    first = table.iloc[0]
    by = f", stratified by {design.by}" if design.stratified else ""
    left = "".join(f"; {n:,} {reason} were not drawn from" for reason, n in design.left_out.items())
    lines = [f"audit {design.id}: {design.drawn:,} rows drawn at random (seed {design.seed}{by}) from "
             f"{design.rows:,} of the {design.predicted_rows:,} predicted rows{left}",
             f"model {design.source} ({design.model}), {design.head} head, threshold {design.threshold}"]
    present = int(audit.draws.sum())
    missing = f", {design.drawn - present:,} of them missing from the file" if present < design.drawn else ""
    lines.append(f"checked {first['checked']:,}, left blank {first['blank']:,}{missing} (blanks are "
                 "counted as neither right nor wrong: the estimate is for the rows checked)")
    return lines


def format_table(table: pd.DataFrame) -> str:
    shown = table.drop(columns=["model", "model_fingerprint", "head", "threshold", "audit"]).copy()
    for column in ("accuracy", "low", "high"):
        shown[column] = shown[column].map(lambda v: "nan" if pd.isna(v) else f"{v:.4f}")
    shown["n_eff"] = shown["n_eff"].map(lambda v: "nan" if pd.isna(v) else f"{v:.1f}")
    return shown.to_string(index=False)


def plot_scores(table: pd.DataFrame, path: str) -> str:
    """The estimates with their 95% intervals: a point per stratum (the whole audit first),
    a colour per level."""
    from mixer.reporting.plot import _pyplot

    plt = _pyplot()
    group = table.columns[0]
    names = list(dict.fromkeys(table[group]))
    levels = list(dict.fromkeys(table["digits"]))
    fig, axis = plt.subplots(figsize=(max(4.0, 1.1 * len(names) + 2), 3.6))
    step = 0.6 / max(len(levels), 1)
    for i, level in enumerate(levels):
        part = table[table["digits"] == level].set_index(group).reindex(names)
        x = np.arange(len(names)) + (i - (len(levels) - 1) / 2) * step
        value = part["accuracy"].to_numpy(dtype=float)
        errors = np.vstack([value - part["low"].to_numpy(dtype=float), part["high"].to_numpy(dtype=float) - value])
        label = "whole code" if level == WHOLE else f"{level} digit(s)"
        axis.errorbar(x, value, yerr=errors, fmt="o", capsize=3, label=label)
    axis.set_xticks(np.arange(len(names)), [f"{n}\n(n={int(c)})" for n, c in zip(
        names, table.drop_duplicates(group).set_index(group).reindex(names)["checked"])])
    axis.set(ylim=(0, 1.02), ylabel="share right (95% interval)", title=f"audit {table['audit'].iloc[0]}")
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def evaluate_audit(path: str, predictions, options, predictions_options, digits: list, code_length, output,
                   plot) -> None:
    """evaluate.py --audit: read and check the audit (with its role's options,
    --audit-encoding ...) and the predictions it must come from (with --encoding ...),
    refuse what does not fit before writing anything, then print the table and write it
    (CSV) and its picture."""
    import os

    from mixer.core.io import write_text
    from mixer.data.audits import check_drawn_from, read_audit
    from mixer.data.reading import read_table
    from mixer.data.writing import check_output_path

    stem = os.path.splitext(path)[0]
    output = output or f"{stem}_scores.csv"
    plot = plot or f"{os.path.splitext(output)[0]}.png"
    inputs = {"--audit": path, "--predictions": predictions}
    output = check_output_path(output, "--output", inputs)
    check_output_path(plot, "--plot", {**inputs, "--output": output})
    audit = read_audit(path, options, log=print)
    if predictions:
        check_drawn_from(audit, read_table(predictions, predictions_options, log=print), predictions)
    levels, notes = outcomes(audit, digits, code_length)
    table = score_table(audit, levels)
    if not table["checked"].iloc[0]:
        raise UserError(f"--audit {path}: no row is checked yet: write yes or no in 'correct', or the "
                        "right codes in true_code_1.., for the rows you checked")
    write_text(output, table.to_csv(index=False))
    plot_scores(table, plot)
    for line in header(audit, table):
        print(line)
    print(format_table(table))
    for note in notes:
        print(f"note: {note}")
    if not predictions:
        print(f"note: pass --predictions FILE to check that the audit was drawn from FILE's predictions")
    print(f"wrote {output} and {plot}")

"""Training on an audit (`--train-on-audit`): its rows measure the model, so a training
table that holds them is refused unless asked for. With it, an audit given as --extra-train
trains on its checked rows, and the run records their descriptions so that the next audit
leaves them out (trained_descriptions). The refusals are among
mixer.audit.guards.GUARDS, which the layers above pass to mixer.data.prepared.prepare.

No torch here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mixer.audit.file import AUDIT, CHECK, audit_rows, description_keys, is_audit
from mixer.audit.verdicts import Audit, parse_audit
from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.data.tables.reading import read_table, row_names


_TRAIN_REFUSAL = (
    "its rows measure the model, and a model trained or validated on them is measured on rows "
    "it has seen; pass --train-on-audit to use them anyway (the next audit of the new model's "
    "predictions is then drawn from the other rows)"
)


def refuse_audit_rows(table: pd.DataFrame, path: str, file_flag: str, allowed: bool) -> None:
    """--dataset, --train-data, --val-data (a DataFrame given to finetune() is a --dataset):
    rows that carry an audit's bookkeeping (audit_rows) are audit rows, refused unless
    --train-on-audit; with it they are used as they are, and recorded (trained_descriptions).
    Rows copied without those columns cannot be told from any other row."""
    rows = audit_rows(table)
    if rows.any() and not allowed:
        raise UserError(
            f"{file_flag} {path}: {int(rows.sum()):,} row(s) of an audit (predict.py --audit; e.g. row "
            f"{row_names(table, [np.argmax(rows)])[0]}, by its '{AUDIT}' or '{CHECK}' cell): "
            f"{_TRAIN_REFUSAL}, or remove those rows"
        )


def training_table(table: pd.DataFrame, path: str, allowed: bool) -> pd.DataFrame:
    """--extra-train: a file that is not an audit as it is; an audit refused unless
    --train-on-audit, else its checked rows as checked_1.. (the true codes, or the
    predicted codes where `correct` says yes)."""
    if not is_audit(table) and not audit_rows(table).any():
        return table
    if not allowed:
        raise UserError(f"--extra-train {path}: an audit (predict.py --audit): {_TRAIN_REFUSAL}")
    if not is_audit(table):  # one of its two columns kept: the rows are used as the table has them
        return table
    audit = parse_audit(table, path, "--extra-train")
    out = audit.frame.copy()
    truth = truth_cells(audit)
    for k, column in enumerate(truth):
        out[f"checked_{k + 1}"] = column
    return out


def truth_cells(audit: Audit) -> list:
    """Per code slot, the right code of each row that can train: its true codes, or its
    predicted codes when `correct` says yes and none are written; '' otherwise."""
    predicted = list(audit.design.audit_code_columns)
    slots = max(len(predicted), len(audit.true_columns))
    yes = np.asarray([c is True for c in audit.correct])
    blank = np.full(len(audit.frame), "", dtype=object)
    cells = []
    for k in range(slots):  # the codes are spelled (parse_audit)
        given = (
            audit.frame[audit.true_columns[k]].to_numpy(dtype=object)
            if k < len(audit.true_columns)
            else blank
        )
        own = audit.frame[predicted[k]].to_numpy(dtype=object) if k < len(predicted) else blank
        cells.append(np.where(audit.has_codes, given, np.where(yes, own, "")))
    return cells


def trained_descriptions(
    paths: list, options: TableOptions = TableOptions(role="extra_train"), previous=(), tables=()
) -> list:
    """The description keys of the audit rows a run trains on, with those its starting run
    trained on: the rows the next audit leaves out. `paths`: the --extra-train files (read
    with `options`, the role's), whose audits' checked rows train; `tables`: (path,
    options, text column) of the --dataset, --train-data and --val-data files, whose rows
    that carry an audit's bookkeeping (audit_rows) all count, validation rows included."""
    keys = set(previous or ())
    for path, table_options, text_col in tables:
        table = read_table(path, table_options)
        rows = audit_rows(table)
        if rows.any() and text_col in table.columns:
            keys.update(description_keys(table.loc[rows, text_col]))
    for path in paths:
        table = read_table(path, options)
        if is_audit(table):
            audit = parse_audit(table, path, options.what)
            trained = np.asarray([bool(c) for c in truth_cells(audit)[0]])
            keys.update(description_keys(audit.frame.loc[trained, audit.design.audit_text_col]))
    return sorted(keys)

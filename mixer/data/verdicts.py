"""An audit a person has filled in: recognised wherever a file is written, and never
overwritten. The audit itself (its columns, design and scoring) is mixer.data.audits; this
is the part mixer.data.writing needs, below both of them."""

from __future__ import annotations

import os
import re

import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.data.reading import as_text, column_names, read_table

AUDIT = "audit"
CHECK = "audit_check"
CORRECT = "correct"
TRUE_CODE_COLUMN = re.compile(r"^true_code_(\d+)$")


def is_audit(frame: pd.DataFrame) -> bool:
    return AUDIT in frame.columns and CHECK in frame.columns


def holds_verdicts(path: str) -> bool:
    """Whether an existing file is an audit with a verdict in it (a `correct` cell or a true
    code filled): what an output must not overwrite. Files that cannot be an audit (a
    CSV file whose first line does not name audit_check, a workbook or other table over
    16 MiB) or cannot be read are not read through."""
    if not os.path.isfile(path):
        return False
    kind = path.lower().rsplit(".", 1)[-1]
    if kind in ("csv", "tsv", "txt"):
        with open(path, "rb") as handle:
            if CHECK.encode() not in handle.read(1 << 16).split(b"\n", 1)[0]:
                return False
    elif os.path.getsize(path) > 16 << 20 or CHECK not in (column_names(path) or [CHECK]):
        return False
    table = None
    for encoding in ("utf-8", "cp1252"):  # as predict.py wrote it, or as Excel re-saved it
        try:
            table = read_table(path, TableOptions(role="audit", encoding=encoding))
            break
        except UserError:
            continue
    if table is None or not is_audit(table):
        return False
    columns = [c for c in table.columns if c == CORRECT or TRUE_CODE_COLUMN.match(str(c))]
    return any(as_text(table[c]).str.strip().ne("").any() for c in columns)


def refuse_filled_audit(path: str, what: str) -> None:
    """An output that would replace an audit a person has filled in: refused."""
    if holds_verdicts(path):
        raise UserError(f"{what} {path}: an audit with verdicts in it, which this would replace; write to "
                        "another file, or delete it first if its verdicts are not wanted")


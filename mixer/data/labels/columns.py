"""The columns of a table's rows once their labels are checked (mixer.data.labels.checks),
as a run's prepared files keep them (mixer.data.prepared.files): `text` (the model's input
text), `lang`, `desc_chars` (with --context-cols: how many characters of `text` are the
description), `code_1`..`code_K` (normalised, '' = none), `report:COLUMN` (--report-cols)
and `row` (the row's number in its file)."""

from __future__ import annotations

TEXT, LANG = "text", "lang"  # column names of prepared data
DESC_CHARS = "desc_chars"  # prepared column: characters of `text` that are the description
REPORT_PREFIX = (
    "report:"  # prepared columns of --report-cols: "report:source" holds the column source
)


def code_columns(max_num_codes: int) -> list[str]:
    return [f"code_{i + 1}" for i in range(max_num_codes)]

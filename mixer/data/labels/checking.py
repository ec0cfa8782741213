"""The checking loop: predictions a person checks by hand, fed back as training rows.

`predict.py --to-check N CHECK.csv` lists the N distinct inputs of the model (the
description with its language and context, as the model reads it) where a person's check
fixes the most rows. Each scores rows x (1 - confidence), its row count times the chance
that the model's best code is wrong. The file (.csv, .parquet, .xlsx or .dta, written by
mixer.data.tables.writing) holds the description's columns as the input had them, `n_rows`,
`confidence`, the model's codes (code_k, prob_k, desc_k) and empty columns
`checked_1..checked_K` to fill with the right codes.

`--extra-train CHECK.csv` (finetune.py, train_mixer.py) reads such files back through the
one reader, with their own options (--extra-train-encoding, ...): the rows whose checked_k
a person filled become training rows (mixer.data.prepared.prepare.read_extra_train).
"""

from __future__ import annotations

import os
import re
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.data.tables.job_columns import blank_descriptions

CHECKED = "checked_{}"
ROW_CONFIDENCE = "confidence"  # a prediction's column: the row's confidence in its code set
INPUT = "model input"  # the index of the collected rows: the string the model reads
SOURCE_ROW = "\x00input row"  # a collected row's row in the input (its first, for a repeated one)
CHECKED_COLUMN = re.compile(r"^checked_(\d+)$")
# the columns the tool writes into a check list (the others are the input's)
TOOL_COLUMN = re.compile(r"^(?:n_rows|confidence|(?:code|prob|desc|checked)_\d+)$")


def parse_to_check(values) -> tuple:
    """--to-check N CHECK.csv -> (N, path)."""
    from mixer.data.tables.writing import output_kind

    count, path = values
    try:
        number = int(count)
    except ValueError:
        raise UserError(
            f"--to-check {count} {path}: N must be a whole number, e.g. --to-check 200 check.csv"
        )
    if number < 1:
        raise UserError(f"--to-check {count}: N must be 1 or more")
    output_kind(path, "--to-check")  # any table the tool writes: .csv, .parquet, .xlsx, .dta
    return number, path


class CheckList:
    """Collects distinct inputs of the model over the chunks of a prediction (rank 0),
    then writes the N most worth checking. Rows are one input when the model reads them
    as one ('farmer', 'farmer ' and ' farmer' for a model that strips its text; 'Farmer'
    and 'fármer' too for one whose tokenizer lower-cases and strips accents): the caller
    gives each row's key of what the model reads (mixer.prediction.api.Model.model_inputs),
    and n_rows counts the rows of a key. The description's columns are written as the
    first such row has them."""

    def __init__(
        self,
        count: int,
        path: str,
        key_columns: list,
        prefix: str,
        slots: int,
        log=None,
        stamp: Optional[float] = None,
        extra: tuple = (),
        guards=None,
    ):
        from mixer.data.tables.guards import NONE
        from mixer.data.tables.writing import OutputWriter

        self.count, self.path = count, path
        # log: columns written under other names; stamp: the time an Excel or Stata file states
        self.writer = OutputWriter(path, "--to-check", log=log, stamp=stamp, guards=guards or NONE)
        self.key_columns, self.prefix, self.slots = list(dict.fromkeys(key_columns)), prefix, slots
        self.extra = list(extra)  # the prediction's columns listed after the codes (classes)
        self.parts = []
        self.rows = 0  # input rows seen, so that a row is named by its row in the input
        self.described = (
            0  # input rows with a description (before the lookup's and the target's are taken)
        )
        self.empty = ""  # after commit: why the list has no row ('' when it has some)

    def add(self, chunk: pd.DataFrame, predicted: pd.DataFrame, inputs, keep=None) -> None:
        """inputs: per row of the chunk, the string the model reads for it; keep: the rows
        the list may take (a lookup's rows and, at a target accuracy, the rows coded
        automatically are not to check)."""
        keys = pd.DataFrame({c: _text(chunk[c]) for c in self.key_columns}).reset_index(drop=True)
        names = [
            f"{self.prefix}{kind}_{k + 1}"
            for kind in ("code", "prob", "desc")
            for k in range(self.slots)
        ]
        names += [f"{self.prefix}{ROW_CONFIDENCE}"] + self.extra
        table = pd.concat(
            [keys, predicted[[n for n in names if n in predicted.columns]].reset_index(drop=True)],
            axis=1,
        )
        table.columns = self.key_columns + [
            n[len(self.prefix) :] for n in names if n in predicted.columns
        ]
        table.index = pd.Index(np.asarray(inputs, dtype=object), name=INPUT)
        table[SOURCE_ROW] = np.arange(self.rows + 1, self.rows + len(table) + 1)
        self.rows += len(table)
        # nothing to check without a description: blank as the prediction has it (is_blank:
        # spaces, a zero-width space, ... alone), a row that got no code
        described = ~blank_descriptions(table[self.key_columns[0]])
        self.described += int(described.sum())
        if keep is not None:
            described &= np.asarray(keep, dtype=bool)
        table = table[described]
        counts = table.groupby(level=0, sort=False).size().rename("n_rows")
        distinct = table[~table.index.duplicated()]
        self.parts.append(distinct.join(counts))

    def commit(self) -> int:
        """Writes the list; the number of its rows. A list with nothing to check (the lookup
        or the target accuracy took every row, or no row has a description) is written with
        its header alone, and `empty` says why in one line: the job itself has finished."""
        if not self.parts:
            self.writer.abort()
            raise UserError(f"--to-check {self.path}: the input has no rows")
        if not sum(len(p) for p in self.parts):
            self.empty = (
                f"--to-check {self.path}: nothing to check, written with its header alone: "
                + (
                    "the input has no rows with a description"
                    if not self.described
                    else f"the lookup or the target accuracy took all {self.described:,} rows with a description"
                )
            )
        table = pd.concat(self.parts)
        counts = table.groupby(level=0, sort=False)["n_rows"].sum()
        table = table[~table.index.duplicated()].copy()
        table["n_rows"] = counts.reindex(table.index).to_numpy()
        # the row's confidence in its code set (calibrated where the model is), else its top code's
        given = table[ROW_CONFIDENCE] if ROW_CONFIDENCE in table.columns else table["prob_1"]
        confidence = pd.to_numeric(given, errors="coerce").fillna(0.0).clip(0, 1)
        table = table.drop(columns=[ROW_CONFIDENCE], errors="ignore")
        table["confidence"] = confidence.to_numpy()
        table["score"] = table["n_rows"] * (1.0 - table["confidence"])
        table = table.reset_index(drop=True)
        order = np.lexsort(
            (table[self.key_columns[0]].to_numpy(dtype=str), -table["score"].to_numpy())
        )
        chosen = table.iloc[order[: self.count]].reset_index(drop=True)
        codes = [
            f"{kind}_{k + 1}"
            for k in range(self.slots)
            for kind in ("code", "prob", "desc")
            if f"{kind}_{k + 1}" in chosen.columns
        ]
        extra = [n[len(self.prefix) :] for n in self.extra]
        out = chosen[["n_rows", "confidence"] + codes + [n for n in extra if n in chosen.columns]]
        for k in range(self.slots):
            out[CHECKED.format(k + 1)] = ""
        try:  # a row the format cannot hold is named by its row in the input too
            self.writer.write(
                out, inputs=chosen[self.key_columns], source_rows=chosen[SOURCE_ROW].to_numpy()
            )
            self.writer.commit()
        except BaseException:
            self.writer.abort()
            raise
        return len(out)

    def abort(self) -> None:
        """Leave nothing behind (a prediction that failed)."""
        self.writer.abort()


def with_run_names(frame: pd.DataFrame, columns: list, path: str, log=None) -> pd.DataFrame:
    """A check list's columns under the run's names: a format that cannot hold a name
    (Stata's 'occ title' is written occ_title, Excel's 'occ1 ' occ1; mixer.data.tables.writing's
    output_names) wrote it under another, which is read back as the run's own name. A .dta
    file's variable labels (the names before the renaming) are used first, then the naming
    rule of each format; `columns`: the run's input columns in the order the check list
    writes them (description, language, context)."""
    from mixer.data.tables.reading import LABELS, NUMERIC_COLUMNS
    from mixer.data.tables.writing import output_names

    wanted = [c for c in dict.fromkeys(columns) if c and c not in frame.columns]
    if not wanted:
        return frame
    names = list(dict.fromkeys(c for c in columns if c))
    tools = [c for c in frame.columns if TOOL_COLUMN.match(str(c))]
    labelled = {}
    for name, label in frame.attrs.get(LABELS, {}).items():
        labelled.setdefault(label, name)
    renamed = {}
    for column in wanted:
        candidates = [labelled.get(column)] + [
            output_names(kind, names, tools)[names.index(column)] for kind in ("stata", "excel")
        ]
        found = next(
            (
                c
                for c in candidates
                if c is not None and c in frame.columns and c not in names and c not in renamed
            ),
            None,
        )
        if found is not None:
            renamed[found] = column
    if not renamed:
        return frame
    if log is not None:
        log(
            f"--extra-train {path}: columns read under the run's names: "
            + ", ".join(f"{old} -> {new!r}" for old, new in renamed.items())
        )
    attrs = dict(frame.attrs)
    frame = frame.rename(columns=renamed)
    frame.attrs = attrs
    frame.attrs[NUMERIC_COLUMNS] = [renamed.get(c, c) for c in attrs.get(NUMERIC_COLUMNS, [])]
    return frame


def checked_columns(frame: pd.DataFrame, path: str) -> list:
    columns = sorted(
        (c for c in frame.columns if CHECKED_COLUMN.match(str(c))),
        key=lambda c: int(CHECKED_COLUMN.match(c).group(1)),
    )
    if not columns:
        raise UserError(
            f"--extra-train {path}: no checked_1, checked_2, ... columns; pass a file "
            "that predict.py --to-check wrote, with the right codes filled in"
        )
    return columns


def filled_rows(frame: pd.DataFrame, columns: list) -> np.ndarray:
    """Rows where a person wrote at least one code."""
    filled = np.zeros(len(frame), dtype=bool)
    for column in columns:
        filled |= _text(frame[column]).str.strip().ne("").to_numpy()
    return filled


def _text(series: pd.Series) -> pd.Series:
    return series.astype(object).where(series.notna(), "").astype(str)


def describe(path: str, rows: int, count: int) -> str:
    return (
        f"wrote the {rows} distinct descriptions most worth checking (of {count} asked) to "
        f"{path}: fill checked_1.. with the right codes, then train with --extra-train "
        f"{os.path.basename(path)}"
    )

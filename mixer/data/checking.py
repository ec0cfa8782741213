"""The checking loop: predictions a person checks by hand, fed back as training rows.

`predict.py --to-check N CHECK.csv` lists the N distinct descriptions (with their
language and context) where a person's check fixes the most rows: each distinct
description scores rows x (1 - confidence), its row count times the chance that the
model's best code is wrong. The file holds the description's columns as the input had
them, `n_rows`, `confidence`, the model's codes (code_k, prob_k, desc_k) and empty
columns `checked_1..checked_K` to fill with the right codes.

`--extra-train CHECK.csv` (finetune.py, train_mixer.py) reads such files back: the rows
whose checked_k a person filled become training rows (mixer.data.prepare.read_extra_train).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from mixer.core.errors import UserError

CHECKED = "checked_{}"
CHECKED_COLUMN = re.compile(r"^checked_(\d+)$")


def parse_to_check(values) -> tuple:
    """--to-check N CHECK.csv -> (N, path)."""
    count, path = values
    try:
        number = int(count)
    except ValueError:
        raise UserError(f"--to-check {count} {path}: N must be a whole number, e.g. --to-check 200 check.csv")
    if number < 1:
        raise UserError(f"--to-check {count}: N must be 1 or more")
    if not path.lower().endswith((".csv", ".parquet")):
        raise UserError(f"--to-check {count} {path}: name the file .csv or .parquet")
    return number, path


class CheckList:
    """Collects distinct descriptions over the chunks of a prediction (rank 0), then
    writes the N most worth checking."""

    def __init__(self, count: int, path: str, key_columns: list, prefix: str, slots: int):
        from mixer.data.tables import check_output_path

        self.count, self.path = count, check_output_path(path, "--to-check", {})
        self.key_columns, self.prefix, self.slots = list(dict.fromkeys(key_columns)), prefix, slots
        self.parts = []

    def add(self, chunk: pd.DataFrame, predicted: pd.DataFrame) -> None:
        keys = pd.DataFrame({c: _text(chunk[c]) for c in self.key_columns})
        names = [f"{self.prefix}{kind}_{k + 1}" for kind in ("code", "prob", "desc") for k in range(self.slots)]
        table = pd.concat([keys, predicted[[n for n in names if n in predicted.columns]]
                           .set_axis(keys.index)], axis=1)
        table.columns = self.key_columns + [n[len(self.prefix):] for n in names if n in predicted.columns]
        table = table[table[self.key_columns[0]].str.strip() != ""]  # nothing to check without text
        counts = table.groupby(self.key_columns, sort=False, dropna=False).size().rename("n_rows")
        distinct = table.drop_duplicates(self.key_columns).set_index(self.key_columns)
        self.parts.append(distinct.join(counts))

    def commit(self) -> int:
        from mixer.core.io import atomic_write

        if not self.parts or not sum(len(p) for p in self.parts):
            raise UserError(f"--to-check {self.path}: the input has no rows with a description")
        table = pd.concat(self.parts)
        counts = table.groupby(level=list(range(len(self.key_columns))), sort=False)["n_rows"].sum()
        table = table[~table.index.duplicated()].copy()
        table["n_rows"] = counts.reindex(table.index).to_numpy()
        confidence = pd.to_numeric(table["prob_1"], errors="coerce").fillna(0.0).clip(0, 1)
        table["confidence"] = confidence.to_numpy()
        table["score"] = table["n_rows"] * (1.0 - table["confidence"])
        table = table.reset_index()
        order = np.lexsort((table[self.key_columns[0]].to_numpy(dtype=str), -table["score"].to_numpy()))
        chosen = table.iloc[order[: self.count]]
        codes = [f"{kind}_{k + 1}" for k in range(self.slots) for kind in ("code", "prob", "desc")
                 if f"{kind}_{k + 1}" in chosen.columns]
        out = chosen[self.key_columns + ["n_rows", "confidence"] + codes].reset_index(drop=True)
        for k in range(self.slots):
            out[CHECKED.format(k + 1)] = ""
        if self.path.lower().endswith(".parquet"):
            atomic_write(self.path, lambda p: out.to_parquet(p, index=False))
        else:
            atomic_write(self.path, lambda p: out.to_csv(p, index=False))
        return len(out)


def checked_columns(frame: pd.DataFrame, path: str) -> list:
    columns = sorted((c for c in frame.columns if CHECKED_COLUMN.match(str(c))),
                     key=lambda c: int(CHECKED_COLUMN.match(c).group(1)))
    if not columns:
        raise UserError(f"--extra-train {path}: no checked_1, checked_2, ... columns; pass a file "
                        "that predict.py --to-check wrote, with the right codes filled in")
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
    return (f"wrote the {rows} distinct descriptions most worth checking (of {count} asked) to "
            f"{path}: fill checked_1.. with the right codes, then train with --extra-train "
            f"{os.path.basename(path)}")

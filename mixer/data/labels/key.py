"""The key and its descriptions: the label key a run's codes are numbered by (its own
codes, --key, or a starting model's codes and the new ones), the rows' key indices,
and code descriptions (--code-descriptions, --key's own). No torch import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.data.labels.columns import code_columns
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.labels.normalise import (
    code_column,
    describe_restored,
    hisco_key,
    key_digit_width,
    restore_digits,
    width_reason,
)
from mixer.data.tables.reading import as_text, read_table


def build_key(
    formatter: CodeFormatter,
    codes,
    descriptions: Optional["Descriptions"] = None,
    order: Optional[list] = None,
) -> pd.DataFrame:
    """The label key: code, index, description ('' when unknown). `order`: the codes of
    --key, as listed; else built-in HISCO has its full list, other systems the sorted
    distinct codes seen."""
    if order is not None:
        known = (
            dict(zip(hisco_key()["code"], hisco_key()["description"]))
            if formatter.kind == "hisco"
            else {}
        )
        key = pd.DataFrame({"code": order, "description": [known.get(c, "") for c in order]})
    elif formatter.kind == "hisco":
        key = hisco_key()
    else:
        key = pd.DataFrame({"code": sorted(c for c in codes if c != ""), "description": ""})
    if descriptions is not None:
        given = pd.Series(descriptions.lookup(key["code"]), index=key.index, dtype=object)
        key["description"] = given.fillna(key["description"])
    key.insert(1, "index", np.arange(len(key)))
    return key.reset_index(drop=True)


def labels_of(frame: pd.DataFrame, key_codes, max_num_codes: int) -> np.ndarray:
    """Key indices (rows, max_num_codes), -1 where a slot is empty (also the slots a
    model has beyond the data's code columns). Column by column, through each
    column's categories where it has them (a prepared split's code columns), so
    that no row-sized array of Python strings is made (10M rows on every rank)."""
    key = pd.Index(list(key_codes))
    labels = np.full((len(frame), max_num_codes), -1, dtype=np.int64)
    for slot, column in enumerate(c for c in code_columns(max_num_codes) if c in frame.columns):
        values = frame[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            # the key index of each category, then -1 for the missing category code -1
            lookup = np.append(key.get_indexer(values.cat.categories.astype(str)), -1)
            labels[:, slot] = lookup[values.cat.codes.to_numpy()]
        else:  # "" and codes outside the key -> -1
            labels[:, slot] = key.get_indexer(values.to_numpy(dtype=object))
    return labels


HISCO_LAYOUT = ("hisco", "en_hisco_text")  # data/hisco_key.csv: its codes are HISCO's, zeros lost


def _code_layout(table: pd.DataFrame) -> tuple:
    """(code column, description column or None, whether the file is in the HISCO key layout)."""
    if set(HISCO_LAYOUT) <= set(table.columns):
        return "hisco", "en_hisco_text", True
    if "code" in table.columns:
        return "code", "description" if "description" in table.columns else None, False
    return None, None, False


def _codes_of(table: pd.DataFrame, column: str, formatter: CodeFormatter, hisco_layout: bool):
    """A file's codes as the run spells them; the HISCO layout's as HISCO spells them."""
    return code_column(table, column, CodeFormatter(kind="hisco") if hisco_layout else formatter)


def read_key_file(
    path: str,
    formatter: CodeFormatter,
    known: Optional[set],
    options: TableOptions = TableOptions(role="key"),
    log=None,
) -> pd.DataFrame:
    """--key: code and description, in the file's order (a run's key.csv works, in its
    index order). Every code is normalised and checked as the data's codes are, once; a
    bad, empty or repeated code is an error naming it. In a general code system whose
    --key digit codes all have one width, digit codes are that many digits: the
    formatter's digit_width is set (frame.attrs['width'] says so)."""
    table = read_table(path, options, log=log)
    code_col, text_col, hisco_layout = _code_layout(table)
    if code_col is None:
        raise UserError(
            f"--key {path}: needs a column 'code' (and optionally 'description'); "
            f"it has: {', '.join(map(str, table.columns[:12]))}"
        )
    if "index" in table.columns and not hisco_layout:
        order = pd.to_numeric(table["index"], errors="coerce")
        if order.isna().any():
            raise UserError(f"--key {path}: column 'index' holds a value that is not a number")
        table = table.iloc[np.argsort(order.to_numpy(), kind="stable")]
    spelled = _codes_of(table, code_col, formatter, hisco_layout)
    spelling = CodeFormatter(kind="hisco") if hisco_layout else formatter
    if log is not None and (
        line := describe_restored(
            f"--key {path}", code_col, spelled, spelling, width_reason(spelling)
        )
    ):
        log(line)
    descriptions = (
        as_text(table[text_col]).to_numpy(dtype=object)
        if text_col
        else np.full(len(table), "", dtype=object)
    )
    out, seen = [], set()
    for row, (raw, text) in enumerate(zip(spelled.text, descriptions)):
        if raw == "":
            if hisco_layout:  # the HISCO key layout starts with an empty row
                continue
            raise UserError(f"--key {path}: row {row + 1} has no code; every row names one code")
        code, reason = formatter.check(raw, known)
        if reason:
            raise UserError(f"--key {path}: row {row + 1} code {raw!r}: {reason}")
        if code in seen:
            raise UserError(f"--key {path}: code {code!r} appears twice; list each code once")
        seen.add(code)
        out.append((code, "" if text is None else str(text)))
    if not out:
        raise UserError(f"--key {path}: no codes; list one code per row in a column 'code'")
    key = pd.DataFrame(out, columns=["code", "description"])
    if (
        formatter.kind == "general"
        and formatter.zero_pad is None
        and not formatter.use_within_block_sep
    ):
        formatter.digit_width = key_digit_width(key["code"])
        key.attrs["width"] = formatter.digit_width
    return key


@dataclass
class Descriptions:
    """code -> description, from a file; `width`: the width the file's digit codes were
    restored to (the HISCO key layout: 5), so that a code written without its zeros
    finds its description too."""

    texts: dict
    width: Optional[int] = None

    def lookup(self, codes) -> list:
        """Each code's description, or None."""
        codes = pd.Series(list(codes), dtype=object).astype(str)
        restored, _ = restore_digits(codes, self.width)
        return [self.texts.get(c, self.texts.get(r)) for c, r in zip(codes, restored)]

    def over(self, other: "Descriptions") -> "Descriptions":
        """These descriptions, and the other's for codes these lack."""
        return Descriptions({**other.texts, **self.texts}, self.width)


def read_descriptions(
    path: str,
    formatter: CodeFormatter,
    options: TableOptions = TableOptions(role="code_descriptions"),
) -> Descriptions:
    """--code-descriptions: a table with columns code and description, or the HISCO key
    layout (data/hisco_key.csv), in any format the reader reads; codes spelled as the
    run spells them."""
    table = read_table(path, options)
    code_col, text_col, hisco_layout = _code_layout(table)
    if code_col is None or text_col is None:
        raise UserError(
            f"--code-descriptions {path}: needs columns 'code' and 'description' (or the "
            f"HISCO key's 'hisco' and 'en_hisco_text'); it has: "
            f"{', '.join(map(str, table.columns[:12]))}"
        )
    spelled = _codes_of(table, code_col, formatter, hisco_layout)
    texts = as_text(table[text_col])
    listed = (spelled.text != "").to_numpy()
    return Descriptions(
        dict(zip(spelled.text[listed], texts[listed])), 5 if hisco_layout else formatter.zero_pad
    )


def extend_key(
    base, formatter: CodeFormatter, seen: set, descriptions: Optional[Descriptions]
) -> pd.DataFrame:
    """The starting model's codes (its flat head's order), then the data's new codes."""
    symbols = set(formatter.alphabet) | set(formatter.special_codes)
    strange = sorted(c for c in seen if not set(formatter.parts(c)) <= symbols)
    if strange:
        raise UserError(
            f"code {strange[0]!r} ({len(strange)} code(s) in all) has characters the "
            "starting model's decoder cannot write; pass --only-encoder to start new "
            "heads for this code system"
        )
    known = set(base.codes)
    codes = list(base.codes) + sorted(c for c in seen if c not in known)
    given = descriptions.lookup(codes) if descriptions is not None else [None] * len(codes)
    key = pd.DataFrame(
        {
            "code": codes,
            "description": [
                text if text is not None else base.descriptions.get(c, "")
                for c, text in zip(codes, given)
            ],
        }
    )
    key.insert(1, "index", np.arange(len(key)))
    return key

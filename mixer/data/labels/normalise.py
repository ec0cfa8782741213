"""Normalising: the codes and the text of a table as the model learns them, one rule for
every path (finetune.py, train_mixer.py, --key, --extra-train, --code-descriptions,
predict.py's descriptions, evaluate.py). Between reading (mixer.data.tables.reading: a file to
text columns) and preparing (mixer.data.labels.checks, mixer.data.labels.key, mixer.data.prepared).

Codes. A code is text: "01110" is not "1110". But a code of digits of a known width that
comes shorter lost its leading zeros on the way (a spreadsheet, a number column), and
read as written it would be a second class of the same code. The width is known

- from the code system: HISCO 5 digits, OCC1950 3.
- from --key, when its digit codes all have one width (non-digit codes such as -1 aside).
- from --zero-padded-codes: digit codes are --block-size digits.
- for a column the file stores as numbers (a Stata numeric variable, a Parquet integer
  column, Excel number cells, a CSV column of spreadsheet decimals such as 1110.0), which
  cannot hold a leading zero, from --block-size, whatever
  --allow-codes-shorter-than-block-size says. That flag is for codes written shorter
  (-1 in a general system), and a number's digits have one spelling only when restored
  (a code system whose codes really have several lengths keeps them as text).

Where it is known, the zeros are restored ("1110" -> "01110") and the run says how many
cells changed. Where it is not (a text column of a general code system) a short code is a
bad label whose message names --zero-padded-codes. With short codes allowed, one number
written two ways ("1110" and "01110") is refused, never split into two classes.

Text. model_text builds the text the model reads for a row (the description and its
context columns), for training, predict.py and the Python API alike.

Numpy and pandas only, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.data.labels.formatter import HISCO_KEY_PATH, CodeFormatter
from mixer.data.tables.reading import NUMERIC_COLUMNS, as_text, read_table

SPREADSHEET_WHOLE = re.compile(r"^[+-]?\d+\.0+$")
ZERO_PADDED_FLAG = "--zero-padded-codes"


# ------------------------------------------------------------------ codes
@dataclass
class CodeColumn:
    """One column of codes, normalised: the text (stripped, numbers as whole numbers,
    zeros restored), the cells that are fractions in a column of numbers (bad codes),
    the cells whose zeros were restored, and the width they were restored to."""

    text: pd.Series
    not_whole: np.ndarray
    restored: np.ndarray
    width: Optional[int]


def code_text(frame: pd.DataFrame, column: str) -> tuple[pd.Series, np.ndarray, bool]:
    """(stripped code text, mask of cells that are not whole numbers in a number column,
    whether the column holds numbers).

    A column read from numbers (Parquet, Stata, Excel number cells) or a CSV column in
    which every non-empty cell is a whole number written as a spreadsheet writes it
    ('64100.0') gives the whole numbers' text. Other columns are taken as written,
    because some code systems write codes with decimals."""
    text = as_text(frame[column]).str.strip()
    numbers = column in frame.attrs.get(NUMERIC_COLUMNS, ())
    fractional = np.zeros(len(text), dtype=bool)
    if numbers:
        fractional = text.str.contains(".", regex=False).to_numpy()
    else:
        filled = text[text != ""]
        if len(filled) and filled.str.match(SPREADSHEET_WHOLE).all():
            text = text.str.replace(r"\.0+$", "", regex=True).str.lstrip("+")
            numbers = True
    return text, fractional, numbers


def restore_digits(text: pd.Series, width: Optional[int]) -> tuple[pd.Series, np.ndarray]:
    """(codes, mask of the cells changed): digit codes shorter than `width` get their
    leading zeros back; everything else as it is."""
    if not width:
        return text, np.zeros(len(text), dtype=bool)
    short = (text.str.fullmatch(r"\d+") & (text.str.len() < width)).to_numpy(dtype=bool)
    if not short.any():
        return text, short
    return text.where(~short, text.str.zfill(width)), short


def width_of(formatter: CodeFormatter, numbers: bool) -> Optional[int]:
    """The width a column's digit codes are restored to, or None (taken as written)."""
    if formatter.use_within_block_sep:
        return None  # --block-size counts parts, not digits
    if formatter.zero_pad:
        return formatter.zero_pad
    if (
        numbers
    ):  # a number holds no leading zero, whatever --allow-codes-shorter-than-block-size says
        return formatter.block_size
    return None


def code_column(frame: pd.DataFrame, column: str, formatter: CodeFormatter) -> CodeColumn:
    """One column of codes, read as the code system spells its codes."""
    text, not_whole, numbers = code_text(frame, column)
    width = width_of(formatter, numbers)
    text, restored = restore_digits(text, width)
    return CodeColumn(text=text, not_whole=not_whole, restored=restored & ~not_whole, width=width)


def describe_restored(
    where: str, column: str, spelled: CodeColumn, formatter: CodeFormatter, why: str
) -> Optional[str]:
    """One line for the log when zeros were restored in a column, else None."""
    count = int(spelled.restored.sum())
    if not count:
        return None
    example = spelled.text[spelled.restored].iloc[0]
    if not formatter.zero_pad:
        why = (
            "the file stores the column as numbers, which keep no leading zeros; store the codes "
            "as text to keep them as written"
        )
    return (
        f"{where}: {column}: {count} code(s) without their leading zeros read as "
        f"{spelled.width}-digit codes (e.g. {example.lstrip('0') or '0'!r} -> {example!r}; {why})"
    )


def width_reason(formatter: CodeFormatter, key: Optional[str] = None) -> str:
    """Why the codes have a fixed width, for describe_restored."""
    if formatter.kind in ("hisco", "occ1950"):
        return f"{formatter.kind.upper()} codes are {formatter.zero_pad} digits"
    if key:
        return f"the digit codes of --key {key} are {formatter.zero_pad} digits"
    return f"{ZERO_PADDED_FLAG}"


def key_digit_width(codes) -> Optional[int]:
    """The one width of a key's digit codes (codes such as -1 aside), or None."""
    widths = {len(c) for c in codes if c.isdigit()}
    return widths.pop() if len(widths) == 1 else None


def check_one_spelling(sources) -> None:
    """Refuse one number written two ways ('1110' and '01110'): read as written they would
    be two classes of one code. `sources`: (where, codes) per file read, so that the message
    names the file of each spelling."""
    seen: dict = {}
    for where, codes in sources:
        for code in sorted(codes):
            if not code.isdigit():
                continue
            other, there = seen.setdefault(code.lstrip("0"), (code, where))
            if other == code:
                continue
            found = (
                f"{where}: codes {other!r} and {code!r}"
                if there == where
                else f"codes {other!r} ({there}) and {code!r} ({where})"
            )
            raise UserError(
                f"{found} are one number written with and without leading zeros, which would be two "
                f"classes; pass {ZERO_PADDED_FLAG} to read digit codes as --block-size digits (both are "
                "then one code), or correct the data"
            )


# ------------------------------------------------------------------ text
CONTEXT_SEP = " [SEP] "


def model_text(descriptions: pd.Series, frame: Optional[pd.DataFrame], context_cols) -> pd.Series:
    """The text a model reads for each row, built here for training, predict.py and the
    Python API alike: the description, then each context column that has a value, as
    'name: value', e.g. 'servant [SEP] relation: wife [SEP] industry: coal'. With
    context the description is stripped first (training always strips it), so
    'farmer ' and 'farmer' read the same. An empty or missing value is left out
    (never written as 'nan'). The column names and their order come from the run.
    Without context the description is passed on as it is (the input recipe decides
    about surrounding spaces: OccCANINE's models keep them)."""
    return model_input(descriptions, frame, context_cols)[0]


def model_input(descriptions: pd.Series, frame: Optional[pd.DataFrame], context_cols) -> tuple:
    """(model_text's text, per row the characters of it that are the description, or None
    without context columns). What follows the description is its context, which the
    tokeniser cuts from its end where the input is too long (mixer.data.inputs.tokens: the
    description is kept whole)."""
    if not context_cols:
        return descriptions, None
    text = descriptions.reset_index(drop=True).astype(str).str.strip()
    context = pd.Series("", index=text.index, dtype=object)
    for column in context_cols:
        values = as_text(frame[column]).str.strip().reset_index(drop=True)
        context = context + (CONTEXT_SEP + column + ": " + values).where(values != "", "")
    return text + context, text.str.len().to_numpy(dtype=np.int32)


def description_chars(texts, desc_chars=None) -> np.ndarray:
    """Per model text, the characters that are its description: `desc_chars` when known,
    else up to the first ' [SEP] ', where the context template begins (data prepared
    before the prepared data recorded where descriptions end)."""
    if desc_chars is not None:
        return np.asarray(desc_chars)
    return np.asarray(
        [t.find(CONTEXT_SEP) if CONTEXT_SEP in t else len(t) for t in texts], dtype=np.int64
    )


# ------------------------------------------------------------------ the HISCO list
def hisco_key() -> pd.DataFrame:
    """The full HISCO list (mixer/resources/hisco_key.csv): code (5 characters, leading zeros
    restored), description; read and spelled as every other table (the file lost them)."""
    return _hisco_key().copy()


@lru_cache(maxsize=1)
def _hisco_key() -> pd.DataFrame:
    from mixer.core.config import TableOptions

    table = read_table(HISCO_KEY_PATH, TableOptions(role="key"))
    codes = code_column(table, "hisco", CodeFormatter(kind="hisco")).text
    listed = (codes != "").to_numpy()
    return pd.DataFrame(
        {"code": codes[listed].to_numpy(), "description": table["en_hisco_text"][listed].to_numpy()}
    )

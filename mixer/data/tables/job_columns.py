"""Which columns a prediction job reads: written once, for predict.py, --calibrate, the
lookup and the Python API (issue 43, "decided in one place"); and its input's columns read
as text (`text_column`, `blank_descriptions`, `no_rows`), for the job and the coding that
counts its rows (mixer.coding.job) alike. `is_blank` and `blank_descriptions` are the one rule
of a blank description, which training data, lookups and audits follow too.

The input column is the one asked for, else the run's. The language is one value for every
row (asked for, else the run's, else 'unk') unless a language column is read: the one asked
for, else the run's own when no language was asked for. The context columns are the run's:
a model reads the context it was trained with, no other.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional


class JobColumns(NamedTuple):
    input_col: str
    language_col: Optional[str]
    language: str  # every row's language where language_col is None
    context_cols: list


def job_columns(
    config: dict, input_col: Optional[str] = None, language=None, language_col: Optional[str] = None
) -> JobColumns:
    """(input column, language column or None, one language for every row, context columns)
    for a model's `config` (Predictor.config) and what the job asked for. `language` may be a
    value per row (the API's); it is returned as given then, and no language column is read."""
    if isinstance(language, str) and not language:
        language = None  # --language "" is unset, as predict.py has always read it
    language_col = language_col or (None if language is not None else config.get("language_col"))
    if language is None:
        language = config.get("language") or "unk"
    return JobColumns(
        input_col or config["input_col"],
        language_col,
        language,
        list(config.get("context_cols") or []),
    )


def text_column(chunk, column: str):
    """A column as strings (missing -> ''); the model's input recipe strips, or not."""
    import numpy as np
    import pandas as pd

    values = chunk[column]
    if values.dtype == pd.StringDtype("pyarrow", na_value=np.nan):  # already as below: no copy
        return values.fillna("").reset_index(drop=True)  # into Python's strings and back
    return (
        chunk[column]
        .astype(object)
        .where(chunk[column].notna(), "")
        .astype(str)
        .reset_index(drop=True)
    )


# Characters that show nothing: Unicode's White_Space and Default_Ignorable_Code_Point
# (DerivedCoreProperties.txt: the zero-width space U+200B, the byte-order mark U+FEFF, the word
# joiner U+2060, the soft hyphen, bidirectional marks, variation selectors, the Hangul fillers,
# ...), with what Python's str.isspace() also counts (U+001C..U+001F). A description of these
# alone is blank, as "" and " " are: a person sees nothing to code.
BLANK_CHARACTERS = (
    "\t-\r\x1c-\x20\x85\xa0\xad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f"
    "\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0"
    "\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_BLANK = re.compile(f"[{BLANK_CHARACTERS}]*")


def is_blank(text) -> bool:
    """Whether a description is blank: missing, empty or only characters that show nothing
    (BLANK_CHARACTERS). The one rule for prediction, training data, lookups and audits."""
    return (
        text is None
        or (isinstance(text, float) and text != text)
        or bool(_BLANK.fullmatch(str(text)))
    )


def blank_descriptions(texts):
    """Per row, whether its description is blank (is_blank): empty, missing or only
    characters that show nothing (spaces, a zero-width space, a byte-order mark, ...)."""
    import pandas as pd

    texts = texts if isinstance(texts, pd.Series) else pd.Series(list(texts), dtype=object)
    text = texts.where(texts.notna(), "").astype(str)
    return text.str.fullmatch(_BLANK.pattern).fillna(True).to_numpy(dtype=bool)


def no_rows(path: str) -> str:
    return f"--input {path}: no rows below its header; nothing to predict"

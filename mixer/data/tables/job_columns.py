"""Which columns a prediction job reads: written once, for predict.py, --calibrate, the
lookup and the Python API (issue 43, "decided in one place"); and its input's columns read
as text (`text_column`, `blank_descriptions`, `no_rows`), for the job and the coding that
counts its rows (mixer.coding.job) alike.

The input column is the one asked for, else the run's. The language is one value for every
row (asked for, else the run's, else 'unk') unless a language column is read: the one asked
for, else the run's own when no language was asked for. The context columns are the run's:
a model reads the context it was trained with, no other.
"""

from __future__ import annotations

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
    return (
        chunk[column]
        .astype(object)
        .where(chunk[column].notna(), "")
        .astype(str)
        .reset_index(drop=True)
    )


def blank_descriptions(texts):
    """Per row, whether its description is empty, spaces or missing."""
    return texts.where(texts.notna(), "").astype(str).str.strip().eq("").to_numpy()


def no_rows(path: str) -> str:
    return f"--input {path}: no rows below its header; nothing to predict"

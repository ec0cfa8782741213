"""A chunk keyed once per distinct (text, language) (mixer.prediction.predict_job.RowReader)
gives every row the model input its own text and language give, whatever kind of column
holds them (a workbook's mixed cells, floats, a Parquet file's dictionary column)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from mixer.data.tables.job_columns import text_column
from mixer.data.tables.reading import _parquet_frame
from mixer.prediction.predict_job import RowReader


class Spelling:
    """The model's recipe reduced to what it reads: a row's text and language as given."""

    def model_inputs(self, texts, langs, context):
        langs = langs if isinstance(langs, pd.Series) else pd.Series([langs] * len(texts))
        return [f"{lang}|{text}" for text, lang in zip(texts, langs)]


def by_row(chunk: pd.DataFrame, language_col=None) -> list:
    texts = text_column(chunk, "occ1")
    langs = text_column(chunk, language_col).str.strip() if language_col else "en"
    return Spelling().model_inputs(texts, langs, None)


def keyed(chunk: pd.DataFrame, language_col=None) -> list:
    reader = RowReader("occ1", language_col, "en", [])
    inputs, blank, distinct = reader.keyed(Spelling(), chunk)
    marked = [("\x01" if b else "") + i for i, b in zip(inputs, blank)]
    assert list(distinct.keys[distinct.row_key]) == marked
    return list(inputs)


def from_parquet(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as predict.py reads it back from a Parquet file."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    buffer.seek(0)
    return _parquet_frame(pq.read_table(buffer))


@pytest.mark.parametrize(
    "cells",
    [
        [1, True, 1.0, "1", None],  # a workbook's cells: equal to Python, not one text
        [0.0, -0.0, np.nan, 2.5, 0.0],  # equal as numbers, not as text
    ],
    ids=["mixed-objects", "signed-zero"],
)
def test_each_row_gets_its_own_texts_input(cells):
    chunk = pd.DataFrame({"occ1": pd.Series(cells, dtype=object if None in cells else None)})
    assert keyed(chunk) == by_row(chunk)
    chunk = pd.DataFrame({"occ1": ["farmer"] * len(cells), "lang": pd.Series(cells)})
    assert keyed(chunk, "lang") == by_row(chunk, "lang")


def test_a_parquet_dictionary_column_is_keyed_as_its_values():
    """pandas writes a categorical column to Parquet as a dictionary, read back as one."""
    frame = pd.DataFrame(
        {
            "occ1": pd.Categorical(["smith", "farmer", "smith", None, "baker"]),
            "lang": pd.Categorical(["nl", "en", "nl", "en", "en"], categories=["nl", "en", "x"]),
        }
    )
    chunk = from_parquet(frame)
    assert keyed(chunk) == by_row(chunk)
    assert keyed(chunk, "lang") == by_row(chunk, "lang")
    reader = RowReader("occ1", None, "en", [])
    assert reader.blank(chunk).tolist() == [False, False, False, True, False]

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


def test_a_column_arrow_cannot_number_is_keyed_by_its_text():
    """A Parquet file's list column (Arrow has no dictionary encoding of lists)."""
    import pyarrow as pa

    cells = [["smith"], None, ["smith"], ["farmer", "smith"], []]
    chunk = pd.DataFrame({"occ1": pd.Series(cells, dtype=pd.ArrowDtype(pa.list_(pa.string())))})
    assert keyed(chunk) == by_row(chunk)


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


def test_predict_reads_a_parquet_files_categorical_description_column(
    tiny_two_code_run, small_csv, tmp_path
):
    """The output is the same rows' as plain text, byte for byte, at a chunk size."""
    from mixer.cli.entrypoints import predict_main

    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)[["occ1"]].head(40)
    frame = pd.concat([frame, frame.iloc[::3]], ignore_index=True)
    plain, categorical = tmp_path / "plain.parquet", tmp_path / "categorical.parquet"
    frame.to_parquet(plain)
    frame.astype({"occ1": "category"}).to_parquet(categorical)
    for chunk_size in (7, 1000):
        written = []
        for path in (plain, categorical):
            out = tmp_path / f"{path.stem}-{chunk_size}.csv"
            args = ["--checkpoint", tiny_two_code_run, "--input", str(path), "--output", str(out)]
            assert predict_main(args + ["--chunk-size", str(chunk_size)]) == 0
            written.append(out.read_bytes())
        assert written[1] == written[0]


@pytest.mark.parametrize("column", ["occ1", "note"])
def test_a_parquet_files_string_view_column_is_read_as_its_text(
    tiny_two_code_run, tmp_path, column
):
    """Polars and DuckDB write text as Arrow's string_view; the description or another column
    of that layout gives the output of the same rows as plain text, byte for byte."""
    import pyarrow as pa

    from mixer.cli.entrypoints import predict_main

    texts = ["farmer", "smith", "farmer", "labourer", "smith"]
    table = pa.table({"occ1": pa.array(texts), "note": pa.array(list("abcde"))})  # as Polars
    plain, views = tmp_path / "plain.parquet", tmp_path / "views.parquet"
    pq.write_table(table, plain)
    at = table.schema.get_field_index(column)
    pq.write_table(table.set_column(at, column, table[column].cast(pa.string_view())), views)
    written = []
    for path in (plain, views):
        out = tmp_path / f"{path.stem}.csv"
        args = ["--checkpoint", tiny_two_code_run, "--input", str(path), "--output", str(out)]
        assert predict_main(args) == 0
        written.append(out.read_bytes())
    assert written[1] == written[0]

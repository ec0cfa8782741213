"""A chunk's CSV text built column by column in Arrow (mixer.data.tables.csv_text) is the
bytes pandas' to_csv writes, for every kind of cell an output holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mixer.data.tables import csv_text

TEXTS = [
    "farmer",
    "a,b",
    'say "no"',
    '"',
    "two\nlines",
    "carriage\rreturn",
    "\r\n",
    " leading",
    "trailing ",
    "\ttab",
    "",
    None,
    "é ø ß 农民",
    "semi;colon",
    "it's",
    "back\\slash",
    "#",
    "NA",
    "nan",
    "\x00nul",
    "\x0bvt",
    "\u2028",
    "\x85",
    "\ufeffbom",
]


def pandas_csv(table: pd.DataFrame, header: bool = True) -> bytes:
    """The bytes pandas' to_csv(index=False) writes, a cell holding a carriage return quoted
    as Python's csv quotes it from 3.13 on (pandas of Python 3.11 and 3.12 leaves it bare): the
    table written with rows ending in '\\r\\n', whose csv quotes such a cell, and each row's
    end, found outside quotes character by character, made '\\n' again."""
    written = table.to_csv(index=False, header=header, lineterminator="\r\n")
    out, quoted, at = [], False, 0
    while at < len(written):
        character = written[at]
        if character == '"':
            quoted = not quoted  # a doubled quote turns twice
        if not quoted and written.startswith("\r\n", at):
            out.append("\n")
            at += 2
            continue
        out.append(character)
        at += 1
    return "".join(out).encode("utf-8")


def floats(rng: np.random.Generator, n: int) -> np.ndarray:
    """Probabilities and the odd float: tiny, huge, whole, NaN, infinities, subnormal."""
    special = [0.1, 1e-7, 2.0, np.nan, np.inf, -np.inf, 0.0, 1e16, 123456.789, 5e-324, 1e-5, 1e-4]
    values = np.concatenate(
        [rng.random(n) ** 8, 10.0 ** rng.uniform(-320, 300, n), np.asarray(special)]
    )
    return rng.choice(values, n)


def frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    texts = rng.choice(np.asarray(TEXTS, dtype=object), n)
    numbers = floats(rng, n)
    return pd.DataFrame(
        {
            "text": pd.Series(texts, dtype="str"),
            "object": pd.Series(rng.choice(np.asarray(TEXTS, dtype=object), n), dtype=object),
            "code, the first": pd.Series(rng.choice(["61110", "-1", "", None], n), dtype=object),
            "prob": numbers,
            "float32": np.clip(numbers, -3e38, 3e38).astype(np.float32),
            "int": rng.integers(-(2**62), 2**62, n),
            "uint8": rng.integers(0, 255, n).astype(np.uint8),
            "bool": rng.random(n) < 0.5,
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_rows_are_the_bytes_pandas_writes(seed):
    rng = np.random.default_rng(seed)
    table = frame(rng, 500)
    built = csv_text.rows(table)
    assert built is not None  # every column here is built in Arrow, none left to pandas
    assert built == pandas_csv(table, header=False)
    assert csv_text.text(table) == pandas_csv(table)
    assert csv_text.text(table, header=False) == built


def test_a_negative_zero_and_missing_cells_are_spelled_as_pandas_spells_them():
    table = pd.DataFrame(
        {
            "prob": [-0.0, 0.0, np.nan, 1.0, -0.0],
            "text": pd.Series([None, "", "x", None, "y"], dtype=object),
            "all missing": pd.Series([None] * 5, dtype=object),
        }
    )
    assert csv_text.rows(table) == pandas_csv(table, header=False)


@pytest.mark.parametrize(
    "column",
    [
        pd.Series(["a", "b", None], dtype="category"),
        pd.Series([1, None, 3], dtype="Int64"),
        pd.Series(pd.to_datetime(["2020-01-01", None, "1850-06-30"])).astype("date32[pyarrow]"),
        pd.Series(pd.to_datetime(["2020-01-01", "2021-06-30", None])),
        pd.Series(["a", 1, 2.5], dtype=object),
        pd.Series([[1], [2, 3], []], dtype=object),
    ],
    ids=["category", "nullable", "arrow-date", "dates", "mixed", "lists"],
)
def test_another_kind_of_column_is_written_by_pandas_the_same_bytes(column):
    table = pd.DataFrame({"text": ["a,b", "c", ""], "other": column})
    assert csv_text.rows(table) is None
    assert csv_text.text(table) == pandas_csv(table)


def test_a_single_column_is_written_by_pandas():
    """Python's csv writes a row of one empty cell as '""': left to pandas."""
    table = pd.DataFrame({"text": ["", "a"]})
    assert csv_text.rows(table) is None
    assert csv_text.text(table) == b'text\n""\na\n'


@pytest.mark.parametrize("most", [5, 1_000_000])
def test_floats_remembered_over_chunks_are_spelled_as_in_each_chunk_alone(monkeypatch, most):
    """A file's writer remembers the floats it spelled (csv_text.Spelled) up to SPELLED_MOST:
    each chunk's bytes are still those pandas writes for it alone, 0.0 never lent to -0.0."""
    monkeypatch.setattr(csv_text, "SPELLED_MOST", most)
    spelled = csv_text.Spelled()
    rng = np.random.default_rng(11)
    for chunk in range(4):
        table = frame(rng, 300)
        if chunk == 2:
            table.loc[::3, "prob"] = -0.0
        built = csv_text.rows(table, spelled)
        assert built == pandas_csv(table, header=False)
        assert len(spelled) <= max(most, len(table))  # bounded: at most one chunk past it
    assert spelled


@pytest.mark.parametrize(
    "character", [",", '"', "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
)
def test_a_cell_is_quoted_as_python_3_13_s_csv_quotes_it(character):
    """A ',', a '"', a line feed or a carriage return quotes a cell, whatever the Python: 3.11
    and 3.12's csv leave a carriage return bare, and a lone one ends the row for a reader.
    Python's csv with rows ending in '\\r\\n' quotes the same characters."""
    import csv
    import io

    cells = [f"a{character}b", "c"]
    line = io.StringIO()
    csv.writer(line, lineterminator="\r\n").writerow(cells)
    table = pd.DataFrame({"x": [cells[0]], "y": [cells[1]]})
    assert csv_text.rows(table) == line.getvalue()[:-2].encode("utf-8") + b"\n"


@pytest.mark.parametrize("kind", ["built here", "by pandas"])
def test_a_cell_with_a_lone_carriage_return_reads_back_as_one_row(kind):
    """pandas' reader (and Python's csv) end a row at a bare carriage return: such a cell is
    quoted, by this writer and where pandas writes the frame (a column of another kind)."""
    import io

    table = pd.DataFrame({"id": ["1", "2", "3"], "occ1": ["farmer", "farm\rlabourer", "smith"]})
    if kind == "by pandas":
        table["n"] = pd.Series([1, None, 3], dtype="Int64")  # left to pandas (csv_text.rows)
        assert csv_text.rows(table) is None
    back = pd.read_csv(io.BytesIO(csv_text.text(table)), dtype=str, keep_default_na=False)
    assert back["occ1"].tolist() == table["occ1"].tolist()


def arrow_frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """A chunk of a Parquet file, a Stata file or an IPUMS extract (Arrow-backed columns: text,
    integers, booleans and floats, some missing) beside a code and a probability."""
    import pyarrow as pa

    def missing(values, dtype):
        values = pd.Series(values, dtype=object)
        values[rng.random(n) < 0.2] = None
        return pd.Series(values, dtype=dtype)

    return pd.DataFrame(
        {
            "OCCSTR": missing(rng.choice(np.asarray(TEXTS, dtype=object), n), "string[pyarrow]"),
            "large": missing(
                rng.choice(np.asarray(TEXTS, dtype=object), n), pd.ArrowDtype(pa.large_string())
            ),
            "YEAR": missing(rng.integers(-(2**62), 2**62, n), "int64[pyarrow]"),
            "SEX": missing(rng.integers(0, 255, n), "uint8[pyarrow]"),
            "flag": missing(rng.random(n) < 0.5, "bool[pyarrow]"),
            "PERWT": missing(floats(rng, n), "float64[pyarrow]"),
            "single": missing(np.clip(floats(rng, n), -3e38, 3e38), "float32[pyarrow]"),
            "code": pd.Series(rng.choice(["61110", "-1", ""], n), dtype="str"),
            "prob": floats(rng, n),
        }
    )


@pytest.mark.parametrize("seed", range(3))
def test_arrow_backed_columns_are_built_in_arrow_the_bytes_pandas_writes(seed):
    """An IPUMS extract's or a Parquet file's chunk: built here, not left to pandas' cell by
    cell writer, the same bytes; a chunk whose column is all missing too."""
    table = arrow_frame(np.random.default_rng(seed), 400)
    for frame in (table, table.head(7), table.iloc[:0], table.assign(YEAR=table["YEAR"] * None)):
        expected = pandas_csv(frame, header=False)
        if len(frame):
            assert csv_text.rows(frame) == expected
        assert csv_text.text(frame) == pandas_csv(frame)


@pytest.mark.parametrize("seed", range(4))
def test_the_outputs_spelled_once_per_key_are_the_bytes_pandas_writes_for_the_rows(seed):
    """A job's code table holds a row per distinct input, taken to the rows (csv_text
    keyed_rows): the tool's columns are spelled once per key, the input's row by row, and the
    bytes are those pandas writes for the input's columns beside the rows' outputs."""
    rng = np.random.default_rng(seed)
    inputs = frame(rng, 40)[["text", "int"]]
    by_key = frame(rng, 12).drop(columns=["int"])
    row_key = rng.integers(0, len(by_key), len(inputs))
    if seed == 1:
        by_key.loc[::4, "prob"] = -0.0  # spelled cell by cell, as pandas does
    rows = pd.concat([inputs, by_key.iloc[row_key].reset_index(drop=True)], axis=1)
    expected = pandas_csv(rows, header=False)
    spelled = csv_text.Spelled()
    assert csv_text.keyed_rows(inputs, by_key, row_key, spelled) == expected
    keyed = (inputs, by_key, row_key)
    assert csv_text.text(rows, spelled=spelled, keyed=keyed) == pandas_csv(rows)
    # one output column, and a column left to pandas: the same bytes, by pandas
    assert csv_text.keyed_rows(inputs, by_key[["prob"]], row_key) == pandas_csv(
        pd.concat([inputs, by_key[["prob"]].iloc[row_key].reset_index(drop=True)], axis=1),
        header=False,
    )
    other = by_key.assign(other=pd.Series(range(12), dtype="Int64"))
    assert csv_text.keyed_rows(inputs, other, row_key) is None
    whole = pd.concat([inputs, other.iloc[row_key].reset_index(drop=True)], axis=1)
    assert csv_text.text(whole, keyed=(inputs, other, row_key)) == pandas_csv(whole)

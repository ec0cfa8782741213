"""A chunk's rows as CSV text, built column by column in Arrow: the bytes pandas' `to_csv`
writes (its header, index=False, ',' and '\\n', minimal quoting, missing values empty; a
carriage return quoted on every Python, see QUOTED), at
the speed of the disk rather than some microseconds a row.

A full count writes tens of millions of rows, most of them the input's text columns beside a
few codes and probabilities. pandas formats each cell in Python's csv module; here each column
becomes its cells' text at once: text as it is, quoted where it holds a ',', a '"', a line feed
or a carriage return (QUOTED: Python's csv from 3.13 on; the quote doubled), numbers
as numpy spells them (pandas' own way: '0.25', '1e-07', '2.0'), each distinct number
formatted once, booleans as 'True'/'False'; Arrow-backed text, integers, booleans and floats
(a Parquet, Stata or IPUMS file's columns) alike, a float32 one as its float64 value. The
cells of a row are joined with ',' and the rows end in '\\n', in Arrow's kernels. A chunk
with a column of another kind (dates, lists, nullable integers, Arrow-backed dates, objects of
mixed types) or a single column is written by pandas, the same bytes: `rows` returns None for
it. The tests compare both writers' bytes on every kind of cell (tests/test_csv_text.py).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd


# The characters for which a cell is quoted: a ',', a '"', a line feed and a carriage return.
# Python's csv (which pandas' to_csv writes with) quotes a carriage return from 3.13 on only
# (CPython gh-67044); a lone one left bare ends the row for every reader, pandas' among them,
# so a description holding one came back as two rows. mixer quotes it on every Python, so the
# bytes are the same on each and read back as written.
QUOTED = ',"\n\r'
NEEDS_QUOTES = f"[{QUOTED}]"  # none of them is special in a character class


SPELLED_MOST = 1_000_000  # floats a Spelled remembers, then it starts anew


class Spelled:
    """The floats a file's writer has spelled and their text, remembered over its chunks: a
    census's chunks repeat most of their probabilities (one per distinct description), so
    each is spelled once (Python's repr) and found again by a binary search of the values
    sorted, not in Python."""

    def __init__(self):
        import pyarrow as pa

        self.values = np.empty(0, dtype=np.float64)  # in the order spelled
        self.texts = pa.array([], type=pa.large_string())
        self.sorted = np.empty(0, dtype=np.float64)  # the values sorted
        self.at = np.empty(0, dtype=np.int64)  # and where each is in `values`

    def __len__(self) -> int:
        return len(self.values)

    def _where(self, distinct: np.ndarray) -> np.ndarray:
        """Each value's place in `values`, -1 for one not spelled yet."""
        where = np.full(len(distinct), -1, dtype=np.int64)
        if len(self.sorted):
            place = np.minimum(np.searchsorted(self.sorted, distinct), len(self.sorted) - 1)
            found = self.sorted[place] == distinct
            where[found] = self.at[place[found]]
        return where

    def of(self, distinct: np.ndarray):
        """The texts of distinct float64 values (none NaN, none -0.0), an Arrow array."""
        import pyarrow as pa

        where = self._where(distinct)
        new = distinct[where < 0]
        if len(new):
            if len(self.values) + len(new) > SPELLED_MOST:
                self.__init__()
                new = distinct
            texts = pa.array([repr(value) for value in new.tolist()], type=pa.large_string())
            order = np.argsort(new, kind="stable")
            place = np.searchsorted(self.sorted, new[order])
            self.sorted = np.insert(self.sorted, place, new[order])
            self.at = np.insert(self.at, place, len(self.values) + order)
            self.values = np.concatenate([self.values, new])
            self.texts = pa.concat_arrays([self.texts, texts])
            where = self._where(distinct)
        return self.texts.take(pa.array(where))


def text(
    frame: pd.DataFrame,
    header: bool = True,
    spelled: Optional[Spelled] = None,
    keyed: Optional[tuple] = None,
) -> bytes:
    """The frame as pandas' to_csv(index=False) writes it, in UTF-8, with or without its
    header line; built here where `rows` can, else by pandas. `keyed`: (the input's columns,
    a row per key, each row's key) of which `frame` is the rows (`keyed_rows`)."""
    body = keyed_rows(*keyed, spelled) if keyed is not None else None
    body = rows(frame, spelled) if body is None else body
    if body is None:
        return pandas_text(frame, header).encode("utf-8")
    return (pandas_text(frame.iloc[:0]).encode("utf-8") if header else b"") + body


def pandas_text(frame: pd.DataFrame, header: bool = True) -> str:
    """pandas' to_csv(index=False) of the frame, a cell with a carriage return quoted (QUOTED)
    on every Python: where one is bare, pandas writes the frame again with rows ending in
    '\\r\\n' (so its csv quotes the cell) and each row's end, outside quotes, is put back to
    '\\n'."""
    import re

    written = frame.to_csv(None, header=header, index=False)
    if "\r" not in written:
        return written
    written = frame.to_csv(None, header=header, index=False, lineterminator="\r\n")
    return re.sub(r'("[^"]*(?:""[^"]*)*")|\r\n', lambda found: found.group(1) or "\n", written)


def rows(frame: pd.DataFrame, spelled: Optional[Spelled] = None) -> Optional[bytes]:
    """The frame's rows (no header) as pandas' to_csv(index=False) writes them, in UTF-8; None
    for a frame this writer leaves to pandas."""
    if frame.shape[1] < 2 or not len(frame):  # one column: Python's csv quotes an empty row
        return None
    cells = _columns(frame, Spelled() if spelled is None else spelled)
    return None if cells is None else _data(_lines(cells))


def keyed_rows(
    inputs: pd.DataFrame, by_key: pd.DataFrame, row_key: np.ndarray, spelled=None
) -> Optional[bytes]:
    """`rows` of the input's columns beside `by_key.iloc[row_key]` (the same bytes), where
    `by_key` holds a row per distinct key of the rows and `row_key` each row's: the tool's
    columns spelled once per key (a census's chunk of 100,000 rows holds some thousands), the
    rows taking their text by index. None for a frame `rows` leaves to pandas."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if inputs.shape[1] + by_key.shape[1] < 2 or not len(inputs):
        return None
    spelled = Spelled() if spelled is None else spelled
    left, right = _columns(inputs, spelled), _columns(by_key, spelled)
    if left is None or right is None or not right:
        return None
    comma = pa.scalar(",", pa.large_string())
    tail = _lines(right).take(pa.array(np.asarray(row_key, dtype=np.int64)))  # each ends in '\n'
    return _data(pc.binary_join_element_wise(*left, tail, comma) if left else tail)


def _columns(frame: pd.DataFrame, spelled: Spelled) -> Optional[list]:
    """Each column's cells as CSV text (`_cells`), or None where one is pandas' to write."""
    cells = []
    for i in range(frame.shape[1]):
        column = _cells(frame.iloc[:, i], spelled)
        if column is None:
            return None
        cells.append(column)
    return cells


def _lines(cells: list):
    """The cells of each row joined by ',', each row ended by '\n'."""
    import pyarrow as pa
    import pyarrow.compute as pc

    comma, end = pa.scalar(",", pa.large_string()), pa.scalar("\n", pa.large_string())
    line = pc.binary_join_element_wise(*cells, comma)
    return pc.binary_join_element_wise(line, pa.scalar("", pa.large_string()), end)


def _cells(series: pd.Series, spelled: Spelled):
    """A column's cells as CSV text (a large_string array, none missing), or None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dtype = series.dtype
    arrow = dtype.pyarrow_dtype if isinstance(dtype, pd.ArrowDtype) else None
    if arrow is not None and (pa.types.is_integer(arrow) or pa.types.is_boolean(arrow)):
        return _arrow_cells(series)  # a Parquet, Stata or IPUMS file's numbers, flags
    if arrow is not None and pa.types.is_floating(arrow):  # pandas writes each as a Python float
        return _numbers(series.to_numpy(dtype=np.float64, na_value=np.nan), spelled)
    if (
        isinstance(dtype, pd.StringDtype)
        or (dtype == object and _all_text(series))
        or (arrow is not None and (pa.types.is_string(arrow) or pa.types.is_large_string(arrow)))
    ):
        text = pa.array(series.array, type=pa.large_string(), from_pandas=True)
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        if text.null_count:
            text = pc.fill_null(text, "")
        if not _any_quoted(text):
            return text
        # each distinct text looked at once (a census's column repeats its descriptions)
        encoded = text.dictionary_encode()
        return _quoted(encoded.dictionary).take(encoded.indices)
    if not isinstance(dtype, np.dtype):
        return None  # an extension type (nullable numbers, categories, Arrow types): pandas
    values = series.to_numpy()
    if dtype.kind == "b":
        return pc.if_else(pa.array(values), "True", "False").cast(pa.large_string())
    if dtype.kind in "iu":
        return pa.array(values).cast(pa.large_string())
    if dtype.kind == "f":
        return _numbers(values, spelled)
    return None


def _quoted(text):
    """Texts as cells: quoted where Python's csv quotes them, their quotes doubled."""
    import pyarrow as pa
    import pyarrow.compute as pc

    needs = pc.match_substring_regex(text, NEEDS_QUOTES)
    mark = pa.scalar('"', pa.large_string())
    empty = pa.scalar("", pa.large_string())
    quoted = pc.binary_join_element_wise(  # '"' + text + '"', its quotes doubled
        mark, pc.replace_substring(text.filter(needs), '"', '""'), mark, empty
    )
    return pc.replace_with_mask(text, needs, quoted)


def _arrow_cells(series: pd.Series):
    """An Arrow-backed column of integers or booleans as pandas writes it (the cells as Python
    objects): '12', 'True'/'False', a missing cell empty."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pa.array(series.array)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_boolean(values.type):
        values = pc.if_else(values, "True", "False")
    return pc.fill_null(values.cast(pa.large_string()), "")


def _numbers(values: np.ndarray, spelled: Spelled):
    """Floats as numpy spells them (pandas' to_csv: astype(str)), NaN empty: each distinct
    value formatted once. -0.0 and 0.0 are one value to a hash table, so a column holding
    -0.0 is formatted cell by cell."""
    import pyarrow as pa

    missing = np.isnan(values)
    if np.any(np.signbit(values) & (values == 0)):
        text = values.astype(str).astype(object)
        text[missing] = ""
        return pa.array(text, type=pa.large_string())
    codes, distinct = pd.factorize(values, use_na_sentinel=True)
    if values.dtype == np.float64:  # numpy spells a float64 as Python's repr
        texts = spelled.of(distinct)
    else:
        texts = pa.array(distinct.astype(str).tolist(), type=pa.large_string())
    texts = pa.concat_arrays([texts, pa.array([""], type=pa.large_string())])  # -1 (NaN): last
    codes = np.where(codes < 0, len(distinct), codes)
    return texts.take(pa.array(codes.astype(np.int64)))


def _any_quoted(text) -> bool:
    """Whether a cell of a string array holds a character Python's csv quotes for: one look
    at the bytes of all its cells (a census's descriptions hardly ever do)."""
    data = text.buffers()[2]
    if data is None:
        return False
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int64)
    cells = data[offsets[text.offset] : offsets[text.offset + len(text)]].to_pybytes()
    return any(character.encode() in cells for character in QUOTED)


def _all_text(series: pd.Series) -> bool:
    """An object column of strings, with None or NaN for missing cells (written empty)."""
    return pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty")


def _data(lines) -> bytes:
    """The bytes of a string array's values back to back (its data buffer between its first
    and last offsets: no copy but the one into bytes)."""
    import pyarrow as pa

    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    start, end = offsets[lines.offset], offsets[lines.offset + len(lines)]
    return lines.buffers()[2][start:end].to_pybytes() if end > start else b""

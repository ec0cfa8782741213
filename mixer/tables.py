"""CSV and Parquet in and out: whole tables for training, streams for prediction.

Everything is read as text, so codes keep their leading zeros ("01110" is not
"1110"). CSV goes through pyarrow with newlines allowed inside quoted cells
("labourer\\nand fisher"), in the whole-file and the streaming reader alike.
Numbers are turned into text the way a person reads them: a Parquet column of
floats (how pandas stores an integer column with blanks) gives "64100", not
"64100.0"; its fractional values are kept as written and reported as bad
codes by `code_cells`. No torch here.
"""

from __future__ import annotations

import csv
import os
import re
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from mixer.errors import UserError, first_line
from mixer.io import write_target

PARQUET_SUFFIXES = (".parquet", ".pq")
NUMERIC_COLUMNS = "numeric_columns"  # frame.attrs: columns that held numbers in the file
READ_BLOCK = 1 << 20  # 1 MiB blocks (pyarrow's default) for the CSV readers


def is_parquet(path: str) -> bool:
    return path.lower().endswith(PARQUET_SUFFIXES)


def check_input_path(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise UserError(f"{what} {path}: no such file; check the path")
    if os.path.isdir(path):
        raise UserError(f"{what} {path}: is a directory; pass a .csv or .parquet file")


# ------------------------------------------------------------------ numbers as text
def as_text(series: pd.Series) -> pd.Series:
    """A column as strings: missing -> '', whole floats -> '64100', others as written."""
    if pd.api.types.is_float_dtype(series.dtype):
        values = series.to_numpy(dtype=float, na_value=np.nan)
        out = np.full(len(values), "", dtype=object)
        finite = np.isfinite(values)
        whole = finite & (values == np.floor(values))
        out[whole] = values[whole].astype(np.int64).astype(str)
        fractional = finite & ~whole
        out[fractional] = [np.format_float_positional(v, trim="-") for v in values[fractional]]
        return pd.Series(out, index=series.index, dtype=object)
    return series.astype(object).where(series.notna(), "").astype(str)


SPREADSHEET_WHOLE = re.compile(r"^[+-]?\d+\.0+$")


def code_cells(frame: pd.DataFrame, column: str) -> tuple[pd.Series, np.ndarray]:
    """(stripped code text, mask of cells that are not whole numbers in a number column).

    A column read from numbers (Parquet float/int) or a CSV column in which every
    non-empty cell is a whole number written as a spreadsheet writes it ('64100.0')
    gives the whole numbers' text; other columns are taken as written, because some
    code systems write codes with decimals."""
    text = frame[column].astype(str).str.strip()
    numeric = column in frame.attrs.get(NUMERIC_COLUMNS, ())
    fractional = np.zeros(len(text), dtype=bool)
    if numeric:
        fractional = text.str.contains(".", regex=False).to_numpy()
    else:
        filled = text[text != ""]
        if len(filled) and filled.str.match(SPREADSHEET_WHOLE).all():
            text = text.str.replace(r"\.0+$", "", regex=True).str.lstrip("+")
    return text, fractional


# ------------------------------------------------------------------ reading
def csv_header(path: str) -> list[str]:
    """The column names of a CSV file (quoted names with commas or newlines included)."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        try:
            header = next(csv.reader(handle))
        except StopIteration:
            raise pd.errors.EmptyDataError("empty")
    if not any(name.strip() for name in header):
        raise pd.errors.EmptyDataError("empty")
    return header


def _csv_options(header: list[str], stream: bool = False):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    # a stream is read without threads: the threaded reader reads ahead of its consumer
    # without bound (1.3 GB at the start of a 10M-row prediction, 0.9 GB at its end)
    return dict(
        read_options=pcsv.ReadOptions(block_size=READ_BLOCK, use_threads=not stream),
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(column_types={name: pa.string() for name in header},
                                            strings_can_be_null=False))


def _duplicates(names) -> list:
    names = [str(n) for n in names]
    return sorted({n for n in names if names.count(n) > 1})


def read_table(path: str, what: str = "--dataset", columns: Optional[list] = None) -> pd.DataFrame:
    """A whole CSV or Parquet file, every column as text. Columns that held numbers
    are listed in frame.attrs['numeric_columns']."""
    check_input_path(path, what)
    kind = "Parquet" if is_parquet(path) else "CSV"
    try:
        if is_parquet(path):
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=columns)
            try:
                frame = table.to_pandas()
            except (TypeError, NotImplementedError):  # pandas metadata naming a dtype pandas
                frame = table.to_pandas(ignore_metadata=True)  # cannot build ('list<...>[pyarrow]')
            numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c].dtype)]
            if _duplicates(frame.columns):
                raise UserError(f"{what} {path}: duplicate column name(s) "
                                f"{', '.join(_duplicates(frame.columns))}; rename them")
            frame = pd.DataFrame({c: as_text(frame[c]) for c in frame.columns})
            frame.attrs[NUMERIC_COLUMNS] = numeric
        else:
            import pyarrow.csv as pcsv

            header = csv_header(path)
            if _duplicates(header):  # pyarrow would keep both under one name
                raise UserError(f"{what} {path}: duplicate column name(s) "
                                f"{', '.join(_duplicates(header))}; rename them")
            frame = pcsv.read_csv(path, **_csv_options(header)).to_pandas()
    except UserError:
        raise
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 CSV")
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} {path}: the file is empty; it needs a header and rows")
    except (ValueError, OSError) as exc:  # pyarrow's errors are ValueError / OSError
        raise UserError(f"{what} {path}: cannot read it as {kind} ({_first_line(exc)})")
    if len(frame) == 0:
        raise UserError(f"{what} {path}: has a header but no rows")
    return frame


def iter_chunks(path: str, chunk_size: int, what: str = "--input") -> Iterator[pd.DataFrame]:
    """The file in chunks of chunk_size rows (the last may be smaller); CSV columns as
    text, Parquet columns with the file's types (Arrow-backed). At most about one chunk in memory."""
    check_input_path(path, what)
    try:
        if is_parquet(path):
            import pyarrow.parquet as pq

            # Arrow-backed columns: a chunk's pandas types do not depend on its values
            # (numpy would make an integer column with blanks float, an all-blank one
            # object), so every chunk has the file's schema and the output keeps it
            for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_size):
                chunk = batch.to_pandas(types_mapper=pd.ArrowDtype)
                if any(name is not None for name in chunk.index.names):  # a named index
                    chunk = chunk.reset_index()  # (pandas' to_parquet) is a column of the file
                yield chunk
            return
        import pyarrow as pa
        import pyarrow.csv as pcsv

        header = csv_header(path)
        if _duplicates(header):
            raise UserError(f"{what} {path}: duplicate column name(s) "
                            f"{', '.join(_duplicates(header))}; rename them")
        reader = pcsv.open_csv(path, **_csv_options(header, stream=True))
        pending, rows = [], 0
        for batch in reader:
            pending.append(batch)
            rows += batch.num_rows
            while rows >= chunk_size:
                table = pa.Table.from_batches(pending)
                yield table.slice(0, chunk_size).to_pandas()
                rest = table.slice(chunk_size)
                pending, rows = rest.to_batches(), rest.num_rows
        if rows:
            yield pa.Table.from_batches(pending).to_pandas()
    except UserError:
        raise
    except UnicodeDecodeError:
        raise UserError(f"{what} {path}: not UTF-8 text; save it as UTF-8 CSV")
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} {path}: the file is empty")
    except (ValueError, OSError) as exc:
        raise UserError(f"{what} {path}: cannot read it ({_first_line(exc)})")


def _first_line(exc: Exception) -> str:
    first = first_line(exc, 300)
    if "utf8" in first.lower().replace("-", ""):
        return "not UTF-8 text; save it as UTF-8"
    return first


def require_columns(frame: pd.DataFrame, columns: list, path: str, flag_for: dict) -> None:
    for column in columns:
        if column not in frame.columns:
            have = ", ".join(map(str, list(frame.columns)[:12]))
            raise UserError(f"{path}: no column {column!r} ({flag_for.get(column, 'column')}); "
                            f"the file has: {have}")


# ------------------------------------------------------------------ writing
def check_output_path(path: str, what: str, inputs: dict) -> str:
    """Refuse, before any work, an output whose directory is missing or that is one of
    the inputs ({flag: path}): the rename at the end would replace it. Returns the file
    to write: the path, or a symbolic link's target (the link stays)."""
    if os.path.islink(path):
        target = write_target(path)
        if os.path.splitext(target)[1].lower() != os.path.splitext(path)[1].lower():
            raise UserError(f"{what} {path}: a link to {target}, whose suffix differs; "
                            "name the file itself")
        path = target
    if not os.path.basename(path) or os.path.isdir(path):
        raise UserError(f"{what} {path}: names a directory; name a file")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"{what} {path}: directory {directory} does not exist; create it first")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"{what} {path}: directory {directory} is not writable; write elsewhere")
    for flag, other in inputs.items():
        if other and (os.path.realpath(path) == os.path.realpath(other) or (
                os.path.exists(path) and os.path.exists(other) and os.path.samefile(path, other))):
            raise UserError(f"{what} {path}: is the {flag} file and would replace it; "
                            "write to another file")
    return path


class OutputWriter:
    """Writes chunks to a temp file beside the output, renamed over it at the end."""

    def __init__(self, path: str, what: str = "--output"):
        self.path = check_output_path(path, what, {})
        self.tmp = os.path.join(os.path.dirname(os.path.abspath(self.path)),
                                f".tmp-{os.path.basename(path)}.{os.getpid()}")
        self.parquet = is_parquet(path)
        self.writer = None
        self.rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = self.writer.schema if self.writer is not None else None
            try:  # later chunks take the first one's schema (a column may be all blank in one)
                table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise UserError(f"{self.path}: rows {self.rows + 1}-{self.rows + len(frame)} do not "
                                f"fit the column types of the rows before them ({_first_line(exc)})")
            if self.writer is None:
                # Arrow types only: pandas would record dtypes such as
                # 'list<element: int64>[pyarrow]' that it cannot read back itself
                self.writer = pq.ParquetWriter(self.tmp, table.schema.remove_metadata())
            self.writer.write_table(table)
        else:
            frame.to_csv(self.tmp, mode="a" if self.rows else "w", header=not self.rows, index=False)
        self.rows += len(frame)

    def commit(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if not os.path.exists(self.tmp):
            raise UserError(f"{self.path}: the input has no rows; nothing to predict")
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)

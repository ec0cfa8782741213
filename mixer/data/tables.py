"""Tables in and out: whole tables for training, streams for prediction, in CSV,
Parquet, Excel (.xlsx) and Stata (.dta), chosen by extension (mixer.data.formats reads
and writes the last two).

Everything is read as text, so codes keep their leading zeros ("01110" is not
"1110"). CSV goes through pyarrow with newlines allowed inside quoted cells
("labourer\\nand fisher"), in the whole-file and the streaming reader alike, in
the encoding of --encoding (never guessed: a wrong guess changes the text the
model reads) and with the separator of --sep or the one the header line uses.
Numbers are turned into text the way a person reads them: a Parquet, Stata or
Excel column of numbers (pandas stores an integer column with blanks as floats)
gives "64100", not "64100.0"; its fractional values are kept as written and
reported as bad codes by `code_cells`. No torch here.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import re
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError, first_line
from mixer.core.io import write_target
from mixer.data import formats

PARQUET_SUFFIXES = (".parquet", ".pq")
NUMERIC_COLUMNS = "numeric_columns"  # frame.attrs: columns that held numbers in the file
READ_BLOCK = 1 << 20  # 1 MiB blocks (pyarrow's default) for the CSV readers
SEPARATORS = (",", ";", "\t", "|")  # what a header line is searched for
FORMAT_NAMES = {"csv": "CSV", "parquet": "Parquet", "excel": "Excel (.xlsx)", "stata": "Stata (.dta)"}


@dataclass(frozen=True)
class TableOptions:
    """How to read a table: CSV's encoding and separator (None: the header line's),
    and an Excel workbook's sheet (None: the first)."""

    encoding: str = "utf-8"
    sep: Optional[str] = None
    sheet: Optional[str] = None


DEFAULT_OPTIONS = TableOptions()


def table_kind(path: str, what: str = "--input") -> str:
    """csv, parquet, excel or stata, by the file's extension (anything else is CSV)."""
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lower.endswith(formats.EXCEL_SUFFIXES):
        return "excel"
    if lower.endswith(formats.STATA_SUFFIXES):
        return "stata"
    if lower.endswith(formats.OLD_EXCEL_SUFFIXES):
        raise UserError(f"{what} {path}: {os.path.splitext(path)[1]} is not read; save the sheet as "
                        ".xlsx (Excel Workbook) or CSV")
    return "csv"


def check_input_path(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise UserError(f"{what} {path}: no such file; check the path")
    if os.path.isdir(path):
        raise UserError(f"{what} {path}: is a directory; pass a .csv, .parquet, .xlsx or .dta file")


def check_input_table(path: str, what: str) -> str:
    """Refuse, before any work, an input that is missing, of a kind not read, or an
    Excel file without openpyxl; returns its kind."""
    check_input_path(path, what)
    kind = table_kind(path, what)
    if kind == "excel":
        formats.openpyxl_module(what, path)
    return kind


def canonical_encoding(name: str) -> str:
    """Python's name of an encoding ('UTF8', 'windows-1252' -> 'utf-8', 'cp1252');
    ValueError for one Python does not know."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown encoding {name!r} (e.g. utf-8, cp1252, latin-1, utf-16)")


# ------------------------------------------------------------------ numbers as text
def as_text(series: pd.Series) -> pd.Series:
    """A column as strings: missing -> '', whole floats -> '64100', others as written."""
    if pd.api.types.is_float_dtype(series.dtype):
        values = series.to_numpy(dtype=float, na_value=np.nan)
        out = np.full(len(values), "", dtype=object)
        finite = np.isfinite(values)
        with np.errstate(invalid="ignore"):
            whole = finite & (values == np.floor(values)) & (np.abs(values) < 2.0 ** 63)
        out[whole] = values[whole].astype(np.int64).astype(str)
        fractional = finite & ~whole  # and whole numbers past int64, written out in full
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


# ------------------------------------------------------------------ CSV text
@dataclass(frozen=True)
class CsvLayout:
    header: list
    sep: str
    detected: bool  # the separator came from the file, not --sep
    encoding: str
    skip_rows: int = 0  # 1: a first line 'sep=;' (Excel's way to name the separator)

    def describe(self, what: str, path: str) -> str:
        how = "found in the header line; --sep sets it" if self.detected else "--sep"
        if self.detected and self.skip_rows:
            how = "the file's 'sep=' line; --sep sets it"
        shown = "tab" if self.sep == "\t" else repr(self.sep)
        return f"{what} {path}: CSV, separator {shown} ({how}), encoding {self.encoding}"


SEP_LINE = re.compile(r"sep=(.)")  # Excel reads (and some programs write) 'sep=;' above the header


def _python_encoding(encoding: str) -> str:
    # a UTF-8 byte-order mark (as Excel writes one) is accepted, not read as part of a name
    return "utf-8-sig" if canonical_encoding(encoding) == "utf-8" else encoding


def _arrow_encoding(encoding: str) -> str:
    return "utf8" if canonical_encoding(encoding) == "utf-8" else encoding


def _outside_quotes(line: str) -> str:
    return re.sub(r'"[^"]*"?', "", line)


def detect_separator(line: str) -> Optional[str]:
    """The separator a header line uses: the one of , ; tab | found most often outside
    quotes; None when two are found equally often (the user must say which)."""
    bare = _outside_quotes(line)
    counts = sorted(((bare.count(sep), sep) for sep in SEPARATORS), reverse=True)
    if counts[0][0] == 0:
        return ","  # one column
    if counts[0][0] == counts[1][0]:
        return None
    return counts[0][1]


def csv_layout(path: str, options: TableOptions = DEFAULT_OPTIONS, what: str = "--input") -> CsvLayout:
    """A CSV file's column names and separator (quoted names with separators or
    newlines included). A header that reads as one column holding another separator
    is refused: it is the wrong --sep, never one column."""
    encoding = canonical_encoding(options.encoding)
    # rows below the header are checked by the readers, so a bad byte there does not hide
    # a wrong separator; one in the header is reported here
    with open(path, encoding=_python_encoding(encoding), errors="replace", newline="") as handle:
        first = handle.readline()
        named = SEP_LINE.fullmatch(first.rstrip("\r\n"))
        skip_rows = 1 if named else 0
        start = handle.tell() if named else 0
        if named:
            first = handle.readline()
        if "\ufffd" in first and first_undecodable(path, encoding) is not None:
            raise decoding_error(path, encoding, what)
        if options.sep is None and named:
            sep = named.group(1)
        elif options.sep is None:
            sep = detect_separator(first.rstrip("\r\n"))
            if sep is None:
                found = " and ".join(repr(s) for s in SEPARATORS if _outside_quotes(first).count(s))
                raise UserError(f"{what} {path}: the header line holds {found} equally often; "
                                "name the separator with --sep")
        else:
            sep = options.sep
        handle.seek(start)
        try:
            header = next(csv.reader(handle, delimiter=sep))
        except StopIteration:
            raise pd.errors.EmptyDataError("empty")
    if not any(name.strip() for name in header):
        raise pd.errors.EmptyDataError("empty")
    if len(header) == 1:
        others = [s for s in SEPARATORS if s != sep and s in _outside_quotes(first)]
        if others:
            shown = "tab" if others[0] == "\t" else repr(others[0])
            raise UserError(f"{what} {path}: with --sep {sep!r} the header is one column "
                            f"{header[0][:80]!r}, which holds {shown}; pass --sep {shown} "
                            "(or leave --sep out to take the header's)")
    return CsvLayout(header=header, sep=sep, detected=options.sep is None, encoding=encoding,
                     skip_rows=skip_rows)


LINE_SHOWN = 160  # bytes of a badly encoded line shown in the error
ROWS_COUNTED_UP_TO = 64 << 20  # bytes before a bad one parsed to give its row, not only its line


def utf8_lookalike(path: str, encoding: str) -> Optional[str]:
    """For a file read in another single-byte encoding: when it is also valid UTF-8 with
    characters past ASCII, a note showing its first such line both ways (the encoding
    given turns UTF-8's 'ä' into 'Ã¤'); None otherwise. It says so, it does not choose."""
    if canonical_encoding(encoding).startswith(("utf-", "utf_")):
        return None
    first_line_bytes, position = None, 0
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            if not block.isascii():
                at = next(i for i, byte in enumerate(block) if byte >= 0x80)
                handle.seek(position + block.rfind(b"\n", 0, at) + 1)
                first_line_bytes = handle.readline().rstrip(b"\r\n")[:LINE_SHOWN * 2]
                break
            position += len(block)
    if first_line_bytes is None or first_undecodable(path, "utf-8") is not None:
        return None
    return (f"note: the file is also valid UTF-8; its first line past ASCII reads as {encoding} "
            f"{first_line_bytes.decode(encoding, errors='replace')[:LINE_SHOWN]!r} and as UTF-8 "
            f"{first_line_bytes.decode('utf-8', errors='replace')[:LINE_SHOWN]!r}: if the second is "
            "right, leave --encoding out")


def first_undecodable(path: str, encoding: str) -> Optional[int]:
    """The offset of the first byte that does not decode in `encoding`, or None."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    fed = 0
    with open(path, "rb") as handle:
        while True:
            block = handle.read(1 << 22)
            pending = len(decoder.getstate()[0]) if hasattr(decoder, "getstate") else 0
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                return max(fed - pending + exc.start, 0)
            if not block:
                return None
            fed += len(block)


def decoding_error(path: str, encoding: str, what: str) -> UserError:
    """One line naming the first row and byte that do not decode, and that row read
    as cp1252 and latin-1, so the user can name the encoding in one step."""
    encoding = canonical_encoding(encoding)
    offset = first_undecodable(path, encoding)
    if offset is None:  # the reader failed for another reason
        return UserError(f"{what} {path}: cannot read it as {encoding} text; pass --encoding")
    with open(path, "rb") as handle:
        head = handle.read(4)
        line_start, newlines, position = 0, 0, 0
        handle.seek(0)
        while position < offset:
            block = handle.read(min(1 << 22, offset - position))
            newlines += block.count(b"\n")
            last = block.rfind(b"\n")
            if last >= 0:
                line_start = position + last + 1
            position += len(block)
        handle.seek(line_start)
        raw = handle.read(LINE_SHOWN * 4).split(b"\n")[0].rstrip(b"\r")
        row = None
        if line_start <= ROWS_COUNTED_UP_TO:  # rows differ from lines when cells hold line breaks
            handle.seek(0)
            before = handle.read(line_start)
            prefix = io.TextIOWrapper(io.BytesIO(before), "latin-1", newline="")
            row = sum(1 for _ in csv.reader(prefix))  # the header is record 1: data rows count from 1
            first_bytes, newline, _ = before.partition(b"\n")
            if newline and SEP_LINE.fullmatch(first_bytes.rstrip(b"\r").decode("latin-1")):
                row -= 1  # the 'sep=' line is no record
            if before.count(b'"') % 2:  # the line continues a quoted cell: its record was counted
                row -= 1
    line = newlines + 1
    where = f"row {row} (line {line})" if row is not None and row >= 1 else f"line {line}"
    if row == 0 or line == 1:
        where = "the header line"
    bad = offset - line_start

    def shown(codec: str) -> str:
        text = raw.decode(codec, errors="replace")
        return repr(text[:LINE_SHOWN] + ("..." if len(text) > LINE_SHOWN else ""))

    hint = ""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        hint = " The file starts with a UTF-16 byte-order mark: --encoding utf-16."
    name = "UTF-8" if encoding == "utf-8" else encoding
    return UserError(
        f"{what} {path}: not {name} text: {where}, byte {bad + 1} of that line "
        f"(0x{_byte_at(path, offset):02X} at offset {offset}). That line as cp1252: {shown('cp1252')}; "
        f"as latin-1: {shown('latin-1')}. Pass the encoding that reads it right "
        f"(e.g. --encoding cp1252) or save the file as UTF-8.{hint}")


def _byte_at(path: str, offset: int) -> int:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(1)[0]


def _csv_options(layout: CsvLayout, stream: bool = False):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    # a stream is read without threads: the threaded reader reads ahead of its consumer
    # without bound (1.3 GB at the start of a 10M-row prediction, 0.9 GB at its end)
    return dict(
        read_options=pcsv.ReadOptions(block_size=READ_BLOCK, use_threads=not stream,
                                      encoding=_arrow_encoding(layout.encoding),
                                      skip_rows=layout.skip_rows),
        parse_options=pcsv.ParseOptions(delimiter=layout.sep, newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(column_types={name: pa.string() for name in layout.header},
                                            strings_can_be_null=False))


def _duplicates(names) -> list:
    names = [str(n) for n in names]
    return sorted({n for n in names if names.count(n) > 1})


def _check_names(names, path: str, what: str) -> None:
    if _duplicates(names):  # pyarrow would keep both under one name
        raise UserError(f"{what} {path}: duplicate column name(s) "
                        f"{', '.join(_duplicates(names))}; rename them")


def _decode_failure(exc: Exception) -> bool:
    return isinstance(exc, UnicodeDecodeError) or "utf8" in str(exc).lower().replace("-", "")


# ------------------------------------------------------------------ reading
def read_table(path: str, what: str = "--dataset", columns: Optional[list] = None,
               options: TableOptions = DEFAULT_OPTIONS, log=None) -> pd.DataFrame:
    """A whole table, every column as text. Columns that held numbers are listed in
    frame.attrs['numeric_columns']. `log` hears how a CSV file was read (separator,
    encoding) and which sheet of a workbook."""
    check_input_path(path, what)
    kind = table_kind(path, what)
    layout = None
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=columns)
            try:
                frame = table.to_pandas()
            except (TypeError, NotImplementedError):  # pandas metadata naming a dtype pandas
                frame = table.to_pandas(ignore_metadata=True)  # cannot build ('list<...>[pyarrow]')
            frame = _numbers_as_text(frame, path, what)
        elif kind == "stata":
            chunks = list(formats.stata_chunks(path, 1_000_000, what))
            frame = pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame()
            frame = _numbers_as_text(frame[columns] if columns else frame, path, what)
        elif kind == "excel":
            sheet = formats.ExcelSheet(path, options.sheet, what)
            try:
                _check_names(sheet.header, path, what)
                frame = pd.DataFrame([row for row in sheet.rows()], columns=sheet.header, dtype=object)
                frame.attrs[NUMERIC_COLUMNS] = sheet.numeric
            finally:
                sheet.close()
            if log is not None:
                log(_sheet_line(what, path, sheet))
        else:
            import pyarrow.csv as pcsv

            layout = csv_layout(path, options, what)
            _check_names(layout.header, path, what)
            if log is not None:
                log(layout.describe(what, path))
                if (note := utf8_lookalike(path, layout.encoding)) is not None:
                    log(f"{what} {path}: {note}")
            frame = pcsv.read_csv(path, **_csv_options(layout)).to_pandas()
    except UserError:
        raise
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} {path}: the file is empty; it needs a header and rows")
    except (ValueError, OSError) as exc:  # pyarrow's errors are ValueError / OSError
        if layout is not None and _decode_failure(exc):
            raise decoding_error(path, layout.encoding, what)
        raise UserError(f"{what} {path}: cannot read it as {FORMAT_NAMES[kind]} ({first_line(exc, 300)})")
    if len(frame) == 0:
        raise UserError(f"{what} {path}: has a header but no rows")
    return frame


def _sheet_line(what: str, path: str, sheet) -> str:
    others = f" of {len(sheet.sheets)} (--sheet chooses another)" if len(sheet.sheets) > 1 else ""
    return f"{what} {path}: Excel, sheet {sheet.sheet!r}{others}"


def _numbers_as_text(frame: pd.DataFrame, path: str, what: str) -> pd.DataFrame:
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c].dtype)
               and not pd.api.types.is_bool_dtype(frame[c].dtype)]
    _check_names(frame.columns, path, what)
    frame = pd.DataFrame({c: as_text(frame[c]) for c in frame.columns})
    frame.attrs[NUMERIC_COLUMNS] = numeric
    return frame


def iter_chunks(path: str, chunk_size: int, what: str = "--input",
                options: TableOptions = DEFAULT_OPTIONS, log=None) -> Iterator[pd.DataFrame]:
    """The file in chunks of chunk_size rows (the last may be smaller); CSV and Excel
    columns as text, Parquet and Stata columns with the file's types (Arrow-backed).
    At most about one chunk in memory. A CSV file's encoding is checked before the
    first chunk, so a bad byte near the end stops the job before any work."""
    check_input_path(path, what)
    kind = table_kind(path, what)
    layout = None
    try:
        if kind == "parquet":
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
        if kind == "stata":
            yield from formats.stata_chunks(path, chunk_size, what)
            return
        if kind == "excel":
            sheet = formats.ExcelSheet(path, options.sheet, what)
            try:
                _check_names(sheet.header, path, what)
                if log is not None:
                    log(_sheet_line(what, path, sheet))
                yield from sheet.chunks(chunk_size)
            finally:
                sheet.close()
            return
        import pyarrow as pa
        import pyarrow.csv as pcsv

        layout = csv_layout(path, options, what)
        _check_names(layout.header, path, what)
        if first_undecodable(path, layout.encoding) is not None:
            raise decoding_error(path, layout.encoding, what)
        if log is not None:
            log(layout.describe(what, path))
            if (note := utf8_lookalike(path, layout.encoding)) is not None:
                log(f"{what} {path}: {note}")
        reader = pcsv.open_csv(path, **_csv_options(layout, stream=True))
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
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} {path}: the file is empty")
    except (ValueError, OSError) as exc:
        if layout is not None and _decode_failure(exc):
            raise decoding_error(path, layout.encoding, what)
        raise UserError(f"{what} {path}: cannot read it as {FORMAT_NAMES[kind]} ({first_line(exc, 300)})")


def count_rows(path: str, options: TableOptions = DEFAULT_OPTIONS, what: str = "--input",
               at_least: Optional[int] = None) -> int:
    """The table's rows under the header. With `at_least`, a CSV file is counted
    exactly only when its lines are more than that (counting lines is cheap)."""
    kind = table_kind(path, what)
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if kind == "stata":
        return formats.stata_row_count(path, what)
    if kind == "excel":
        return formats.excel_row_count(path, options.sheet, what)
    lines = 0
    with open(path, "rb") as handle:
        while block := handle.read(1 << 24):
            lines += block.count(b"\n")
    if at_least is not None and lines <= at_least:
        return lines  # an upper bound of the rows, enough to know they fit
    return sum(len(chunk) for chunk in iter_chunks(path, 1_000_000, what, options))


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


def output_kind(path: str, what: str = "--output") -> str:
    """csv, parquet, excel or stata for a table to write, by extension; refuses a
    kind that is read but not written, and an Excel output without openpyxl."""
    if path.lower().endswith((".xlsm",) + formats.OLD_EXCEL_SUFFIXES):
        raise UserError(f"{what} {path}: Excel output is written as .xlsx; name it so")
    kind = table_kind(path, what)
    if kind == "excel":
        formats.openpyxl_module(what, path)
    return kind


def check_fits_excel(output: str, source: str, options: TableOptions, what: str = "--output",
                     source_flag: str = "--input") -> None:
    """An .xlsx output of one row per input row: refused before any work when the
    input has more rows than a sheet holds."""
    if output_kind(output, what) != "excel" or table_kind(source, source_flag) == "excel":
        return  # a sheet's rows fit a sheet: not counted (openpyxl reads some 5,000 rows/s)
    limit = formats.EXCEL_MAX_ROWS - 1
    rows = count_rows(source, options, source_flag, at_least=limit)
    if rows > limit:
        raise UserError(f"{what} {output}: {source_flag} {source} has {rows:,} rows, more than an Excel "
                        f"sheet holds ({limit:,} under the header); write .parquet or .dta instead")


EXACT_WHOLE = 10 ** 15  # whole numbers below this are exact in Excel (15 digits) and Stata doubles


def _too_long_for_numbers(series: pd.Series) -> bool:
    if not pd.api.types.is_integer_dtype(series.dtype):
        return False
    values = series.dropna()
    return bool(len(values)) and bool((values.abs() >= EXACT_WHOLE).any())


def sheet_columns(frame: pd.DataFrame, kinds: Optional[list] = None) -> list:
    """[(name, 'number' | 'text', numpy values)] for Excel and Stata: numbers (and
    booleans as 0/1) stay numbers with NaN for blanks, everything else is text as
    `as_text` writes it; so are whole numbers of 16 digits or more (record ids), which
    neither format's numbers hold exactly. `kinds` (the first chunk's) keeps later
    chunks alike."""
    columns = []
    for i, name in enumerate(frame.columns):
        series = frame.iloc[:, i]
        numeric = (pd.api.types.is_numeric_dtype(series.dtype)
                   or pd.api.types.is_bool_dtype(series.dtype)) and not _too_long_for_numbers(series)
        kind = kinds[i] if kinds is not None else ("number" if numeric else "text")
        if kind == "number":
            if _too_long_for_numbers(series):
                raise UserError(f"column {name!r} holds whole numbers of 16 digits or more, which "
                                "the format's numbers do not hold exactly; write .csv or .parquet")
            try:
                values = pd.to_numeric(series.astype(object).where(series.notna(), None),
                                       errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
            except (ValueError, TypeError):
                raise UserError(f"column {name!r} holds numbers in the first rows and text later; "
                                "write .csv or .parquet")
        else:
            values = as_text(series).to_numpy(dtype=object)
        columns.append((name, kind, values))
    return columns


class OutputWriter:
    """Writes chunks to a temp file beside the output, renamed over it at the end:
    CSV (UTF-8), Parquet, Excel (.xlsx) or Stata (.dta), by extension."""

    def __init__(self, path: str, what: str = "--output", log=None):
        self.kind = output_kind(path, what)
        self.path = check_output_path(path, what, {})
        self.what = what
        self.tmp = os.path.join(os.path.dirname(os.path.abspath(self.path)),
                                f".tmp-{os.path.basename(path)}.{os.getpid()}")
        self.parquet = self.kind == "parquet"
        self.writer = None
        self.sheet = None  # Excel or Stata: formats.ExcelWriter / StataWriter
        self.kinds = None
        self.rows = 0
        self.log = log

    def write(self, frame: pd.DataFrame) -> None:
        if self.kind in ("excel", "stata"):
            if self.sheet is None:
                make = formats.ExcelWriter if self.kind == "excel" else formats.StataWriter
                self.sheet = make(self.tmp, self.path, self.what)
            try:
                columns = sheet_columns(frame, self.kinds)
            except UserError as exc:
                raise UserError(f"{self.what} {self.path}: rows {self.rows + 1}-{self.rows + len(frame)}: {exc}")
            self.kinds = [kind for _, kind, _ in columns]
            self.sheet.write(columns)
        elif self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = self.writer.schema if self.writer is not None else None
            try:  # later chunks take the first one's schema (a column may be all blank in one)
                table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise UserError(f"{self.path}: rows {self.rows + 1}-{self.rows + len(frame)} do not "
                                f"fit the column types of the rows before them ({first_line(exc, 300)})")
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
        if self.sheet is not None:
            self.sheet.close()
            if self.kind == "stata" and self.sheet.renamed() and self.log is not None:
                self.log(f"{self.what} {self.path}: Stata names: " + ", ".join(
                    f"{old!r} -> {new}" for old, new in self.sheet.renamed())
                    + " (the old names are the variable labels)")
        if not os.path.exists(self.tmp):
            raise UserError(f"{self.path}: the input has no rows; nothing to predict")
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.sheet is not None:
            self.sheet.abort()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)

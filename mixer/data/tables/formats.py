"""Excel (.xlsx) and Stata (.dta) tables: read whole or in chunks, written in chunks.

mixer.data.tables.reading chooses the format by extension and turns what these readers give into
text, mixer.data.tables.writing names the columns and hands rows to these writers; this module
knows the two formats only. Excel goes through openpyxl (the
optional extra mixer[excel]). Stata is read by pandas and written here, in the
dta 118 layout (Stata 14 and later), so that an output of any size is written in
chunks. The rows go to a temporary Parquet file first (a .dta file states its row
count and string widths before its rows), then into the .dta file batch by batch.
No torch here.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import shutil
import struct
import time
import zipfile
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError, first_line
from mixer.data.tables import compression

EXCEL_SUFFIXES = (".xlsx", ".xlsm")
OLD_EXCEL_SUFFIXES = (".xls", ".xlsb", ".ods")
STATA_SUFFIXES = (".dta",)
EXCEL_MAX_ROWS = 1_048_576  # rows of a worksheet, the header row included
EXCEL_MAX_COLUMNS = 16_384
EXCEL_MAX_CELL = 32_767  # characters in one cell


# ------------------------------------------------------------------ Excel
def openpyxl_module(file_flag: str, path: str):
    """openpyxl, or one line naming the extra that brings it."""
    from mixer.core.extras import install_hint

    try:
        import openpyxl
    except ImportError:
        raise UserError(
            f"{file_flag} {path}: Excel files need the package openpyxl; "
            f"install it with: {install_hint('excel')}"
        )
    return openpyxl


ZERO_PADDED = re.compile(r"^0+$")  # a number format such as 00000 shows 1110 as 01110
TRUE, FALSE = "TRUE", "FALSE"  # a boolean's one spelling, in every format (as Excel and R write it)


def value_text(value) -> str:
    """One value as text, the one form per type every reader gives (mixer.data.tables.reading.as_text
    is its vectorised twin), so that the same table read from any format gives the model the
    same text: missing -> ''. Booleans TRUE/FALSE. Whole numbers without '.0'. Other numbers
    by their shortest repr at their own precision (a float32 1.1 is '1.1', not
    '1.100000023841858'). A date or a midnight time stamp as 1850-03-01, other time stamps
    as 1850-03-01 12:30:00. Text as it is."""
    if (
        value is None
        or value is pd.NA
        or value is pd.NaT
        or (isinstance(value, np.datetime64) and np.isnat(value))
    ):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return TRUE if value else FALSE
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            return ""
        if float(value).is_integer() and abs(value) < 2.0**63:
            return str(int(value))
        return np.format_float_positional(value, trim="-")
    if isinstance(value, np.datetime64):
        value = pd.Timestamp(value)
    if isinstance(value, dt.datetime):
        if (
            value.time() == dt.time()
            and value.tzinfo is None
            and not getattr(value, "nanosecond", 0)
        ):
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def excel_cell_text(value, number_format: str = "General") -> tuple[str, bool]:
    """(the cell as text, whether it holds a number), as value_text writes it; a number
    whose cell format pads it with zeros (00000) keeps them, as Excel shows it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return "", False
        text = value_text(value)
        if float(value).is_integer() and value >= 0 and ZERO_PADDED.match(number_format or ""):
            text = text.zfill(len(number_format))
        return text, True
    return value_text(value), False


class ExcelSheet:
    """One worksheet of a workbook, read row by row (openpyxl's read-only mode): the
    header row's names, then rows of text cells. The header row is the options' (a row
    number as Excel shows it) or the first row that is not empty; `header_row` says
    which. Entirely empty rows are skipped, as empty lines of a CSV file are. `numeric`
    names the columns in which every filled cell held a number, once the rows have been
    read. `options`: mixer.core.config.TableOptions (sheet, header row, the flags that
    set them)."""

    def __init__(self, path: str, options):
        file_flag = options.what
        openpyxl = openpyxl_module(file_flag, path)
        self.path, self.file_flag, self.options = path, file_flag, options
        try:
            self.book = openpyxl.load_workbook(path, read_only=True, data_only=True)
        except Exception as exc:  # zipfile.BadZipFile, KeyError, InvalidFileException, ...
            raise UserError(
                f"{file_flag} {path}: cannot read it as an Excel workbook (.xlsx) "
                f"({first_line(exc)})"
            )
        try:
            names = [ws.title for ws in self.book.worksheets]
            sheet = options.sheet
            if sheet is None:
                if not names:
                    raise UserError(f"{file_flag} {path}: the workbook has no worksheet")
                self.sheet = names[0]
            elif sheet in names:
                self.sheet = sheet
            else:
                raise UserError(
                    f"{file_flag} {path}: no sheet {sheet!r} ({options.flag('sheet')}); the "
                    f"workbook has: {', '.join(map(repr, names))}"
                )
            self.sheets = names
            worksheet = self.book[self.sheet]
            # the size a workbook states can be wrong (some programs write A1): read what is there
            worksheet.reset_dimensions()
            first = options.header_row or 1
            # read-only rows come one per row number, an empty row as an empty tuple
            self.rows_iter = enumerate(worksheet.iter_rows(min_row=first), start=first)
            self.header_row, self.header = self._header()
        except BaseException:
            self.close()
            raise
        self._has_text = [False] * len(self.header)
        self._has_number = [False] * len(self.header)
        self.numbers = []  # the sheet's row number of each row read (empty rows are none)

    def _header(self) -> tuple:
        for number, cells in self.rows_iter:
            names = [
                excel_cell_text(c.value)[0].strip() if c.value is not None else "" for c in cells
            ]
            while names and names[-1] == "":
                names.pop()
            if not names:
                if self.options.header_row:
                    raise UserError(
                        f"{self.file_flag} {self.path}: sheet {self.sheet!r}: row {number} "
                        f"({self.options.flag('header_row')}) is empty; name the row "
                        "that holds the column names"
                    )
                continue  # empty rows above the header
            if "" in names:
                raise UserError(
                    f"{self.file_flag} {self.path}: sheet {self.sheet!r}: the header row {number} "
                    f"has an empty cell in column {column_letter(names.index('') + 1)}; name "
                    f"every column, or pass {self.options.flag('header_row')} N if the "
                    "column names are in another row"
                )
            return number, names
        if self.options.header_row:  # past the sheet's rows: say so, not that the sheet is empty
            last = max(
                (
                    number
                    for number, cells in enumerate(self.book[self.sheet].iter_rows(), start=1)
                    if any(c.value is not None for c in cells)
                ),
                default=0,
            )
            if last:
                raise UserError(
                    f"{self.file_flag} {self.path}: sheet {self.sheet!r}: row {self.options.header_row} "
                    f"({self.options.flag('header_row')}) is past its last row ({last}); name the "
                    "row that holds the column names"
                )
        others = [name for name in self.sheets if name != self.sheet]
        hint = (
            f" ({self.options.flag('sheet')} chooses another: {', '.join(map(repr, others))})"
            if others
            else ""
        )
        raise UserError(
            f"{self.file_flag} {self.path}: sheet {self.sheet!r} is empty; it needs a header "
            f"row and rows{hint}"
        )

    @property
    def numeric(self) -> list:
        return [
            name
            for name, text, number in zip(self.header, self._has_text, self._has_number)
            if number and not text
        ]

    def rows(self) -> Iterator[list]:
        width = len(self.header)
        for number, cells in self.rows_iter:
            texts = [""] * width
            filled = False
            for i, cell in enumerate(cells):
                value = cell.value
                if value is None:
                    continue
                text, is_number = excel_cell_text(value, getattr(cell, "number_format", "General"))
                if i >= width:
                    if text.strip():
                        raise self._unnamed(number, i)
                    continue
                texts[i] = text
                filled = filled or text != ""
                if is_number:
                    self._has_number[i] = True
                elif text.strip():
                    self._has_text[i] = True
            if filled:
                self.numbers.append(number)
                yield texts

    def _unnamed(self, number: int, column: int) -> UserError:
        """A value right of the header's last name: the header row taken is probably a
        title above the real one; the message says which row was taken and how to name
        another."""
        shown = ", ".join(repr(n) for n in self.header[:4]) + (
            ", ..." if len(self.header) > 4 else ""
        )
        return UserError(
            f"{self.file_flag} {self.path}: sheet {self.sheet!r}: row {number} has a value in "
            f"column {column_letter(column + 1)}, which has no name in the header row "
            f"(row {self.header_row}: {shown}); if the column names are in another row "
            f"(a title above them), pass {self.options.flag('header_row')} with its number"
        )

    def chunks(self, chunk_size: int) -> Iterator[pd.DataFrame]:
        pending = []
        for row in self.rows():
            pending.append(row)
            if len(pending) == chunk_size:
                yield self._frame(pending)
                pending = []
        if pending:
            yield self._frame(pending)

    def _frame(self, rows: list) -> pd.DataFrame:
        columns = list(zip(*rows))
        return pd.DataFrame(
            {name: pd.Series(values, dtype=object) for name, values in zip(self.header, columns)}
        )

    def close(self) -> None:
        book = getattr(self, "book", None)
        if book is not None:
            book.close()
            self.book = None


def column_letter(number: int) -> str:
    """A spreadsheet's name of a column: 1 -> A, 27 -> AA."""
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def excel_row_count(path: str, options) -> int:
    """Rows under the header (a worksheet never holds more than Excel's limit)."""
    reader = ExcelSheet(path, options)
    try:
        return sum(1 for _ in reader.rows())
    finally:
        reader.close()


ILLEGAL_IN_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


class ExcelWriter:
    """Rows appended to one worksheet (openpyxl's write-only mode keeps them on disk),
    saved as a workbook by close(). Text stays text (a cell starting with '=' too: it
    is never made a formula); numbers are numbers; an empty value is an empty cell.
    `stamp` (seconds since the epoch; default now): the time the workbook states, as its
    creation and modification and as each of its zip entries' time, so that its bytes
    depend on its rows and that time alone."""

    def __init__(self, tmp: str, path: str, file_flag: str, stamp: Optional[float] = None):
        openpyxl = openpyxl_module(file_flag, path)
        self.tmp, self.path, self.file_flag = tmp, path, file_flag
        self.stamp = time.time() if stamp is None else stamp
        self.book = openpyxl.Workbook(write_only=True)
        self.sheet = self.book.create_sheet("predictions")
        self.rows = 0

    def write(self, columns: list, source_rows=None) -> None:
        """columns: [(name, 'number' | 'text', numpy values)], the same names each time;
        source_rows: each row's row in the input it comes from, for messages, where the rows
        are not the input's own (a check list)."""
        from openpyxl.cell import WriteOnlyCell

        n_rows = len(columns[0][2]) if columns else 0
        if self.rows == 0:
            if len(columns) > EXCEL_MAX_COLUMNS:
                raise UserError(
                    f"{self.file_flag} {self.path}: {len(columns)} columns, more than an "
                    f"Excel sheet holds ({EXCEL_MAX_COLUMNS:,}); write .parquet or .dta"
                )
            self.sheet.append(
                [self._text_cell(WriteOnlyCell, str(name), 0, name) for name, _, _ in columns]
            )
        if self.rows + n_rows + 1 > EXCEL_MAX_ROWS:
            raise UserError(
                f"{self.file_flag} {self.path}: more than {EXCEL_MAX_ROWS - 1:,} rows, the "
                "most an Excel sheet holds; write .parquet or .dta instead"
            )
        values = []
        for name, kind, array in columns:
            if kind == "number":  # blank for NaN; an infinity, which a cell cannot hold, as text
                values.append(
                    [None if v != v else v if math.isfinite(v) else str(v) for v in array.tolist()]
                )
            else:
                values.append(array.tolist())
        kinds = [kind for _, kind, _ in columns]
        names = [name for name, _, _ in columns]
        for offset, row in enumerate(zip(*values)):
            cells = []
            for value, kind, name in zip(row, kinds, names):
                if kind == "number" or value == "":
                    cells.append(None if value == "" else value)
                else:
                    cells.append(
                        self._text_cell(
                            WriteOnlyCell,
                            value,
                            self.rows + offset + 1,
                            name,
                            None if source_rows is None else source_rows[offset],
                        )
                    )
            self.sheet.append(cells)
        self.rows += n_rows

    def _text_cell(self, cell_class, value: str, row: int, name, source=None):
        if source is not None:
            row = f"{row} (input row {source})"
        if len(value) > EXCEL_MAX_CELL:
            raise UserError(
                f"{self.file_flag} {self.path}: row {row} column {name!r} holds "
                f"{len(value):,} characters, more than an Excel cell holds "
                f"({EXCEL_MAX_CELL:,}); write .csv, .parquet or .dta"
            )
        if ILLEGAL_IN_XML.search(value):
            raise UserError(
                f"{self.file_flag} {self.path}: row {row} column {name!r} holds a control "
                "character an Excel file cannot store; write .csv, .parquet or .dta"
            )
        if value.startswith("="):  # text, not a formula
            cell = cell_class(self.sheet, value=value)
            cell.data_type = "s"
            return cell
        return value

    def close(self) -> None:
        if self.book is not None:
            from openpyxl.writer.excel import ExcelWriter as BookWriter

            # as openpyxl's save, with the one time (which it takes as now)
            when = dt.datetime.fromtimestamp(self.stamp, dt.timezone.utc).replace(
                tzinfo=None, microsecond=0
            )
            self.book.properties.created = self.book.properties.modified = when
            archive = StampedZip(self.tmp, time.localtime(self.stamp)[:6])
            try:
                BookWriter(self.book, archive).save()
            finally:
                archive.close()
            self.book = None

    def abort(self) -> None:
        """Drop the rows written so far (openpyxl keeps them in a temporary file)."""
        if self.book is None:
            return
        self.book = None
        try:
            self.sheet.close()
            writer = getattr(self.sheet, "_writer", None)
            if writer is not None:
                writer.cleanup()
        except (OSError, ValueError, KeyError):  # already closed or removed: nothing left
            pass


class StampedZip(zipfile.ZipFile):
    """A zip file written whole, each entry stamped with one time (`date_time`, a
    zipfile date tuple) where zipfile would take the clock's or a file's."""

    def __init__(self, path: str, date_time: tuple):
        super().__init__(path, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
        self.date_time = (
            tuple(date_time) if date_time[0] >= 1980 else (1980, 1, 1, 0, 0, 0)
        )  # zip's first

    def writestr(self, zinfo_or_arcname, data, compress_type=None, compresslevel=None):
        if not isinstance(
            zinfo_or_arcname, zipfile.ZipInfo
        ):  # as zipfile names an entry, at our time
            info = zipfile.ZipInfo(zinfo_or_arcname, self.date_time)
            info.compress_type = self.compression
            info.external_attr = 0o600 << 16
            zinfo_or_arcname = info
        super().writestr(zinfo_or_arcname, data, compress_type, compresslevel)

    def write(self, filename, arcname=None, compress_type=None, compresslevel=None):
        info = zipfile.ZipInfo.from_file(filename, arcname)  # as zipfile.write, at our time
        info.date_time = self.date_time
        info.compress_type = self.compression if compress_type is None else compress_type
        with open(filename, "rb") as source, self.open(info, "w") as target:
            shutil.copyfileobj(source, target, 1 << 20)


# ------------------------------------------------------------------ Stata: reading
def _stata_reader(path: str, file_flag: str, chunk_size: Optional[int] = None):
    try:
        return pd.read_stata(
            path,
            compression=compression.PANDAS.get(compression.by_content(path)),  # by its bytes
            iterator=True,
            chunksize=chunk_size,
            convert_categoricals=False,
            convert_missing=False,
            preserve_dtypes=True,
        )
    except (ValueError, struct.error) + compression.ERRORS as exc:
        raise UserError(
            f"{file_flag} {path}: cannot read it as a Stata file (.dta) ({first_line(exc)})"
        )


def stata_chunks(path: str, chunk_size: int, file_flag: str) -> Iterator[pd.DataFrame]:
    """The rows in chunks with the file's declared types, Arrow-backed: an integer
    variable stays an integer in every chunk (pandas makes a chunk with a missing value
    float), so every chunk has one schema. Value labels are not applied: a labelled
    variable gives its stored values. Stata's missing values (., .a-.z) are blanks."""
    import pyarrow as pa

    reader = _stata_reader(path, file_flag, chunk_size)
    try:
        with reader:
            declared = _declared_types(reader)
            for number, chunk in enumerate(reader):
                if number == 0 and hasattr(reader, "_value_labels_read"):
                    # pandas reads a file's strLs (at its end) again before every chunk while
                    # the value labels are unread, as they stay with convert_categoricals off: a
                    # seek to the end and back each chunk, which a compressed file pays by
                    # decompressing from its start. The strLs are read; the labels not needed
                    reader._value_labels_read = True
                fields = []
                for name in chunk.columns:
                    kind = declared.get(name)
                    if kind is not None and pd.api.types.is_numeric_dtype(chunk[name].dtype):
                        fields.append(pa.field(name, kind))
                    else:
                        fields.append(
                            pa.field(
                                name,
                                pa.Table.from_pandas(chunk[[name]], preserve_index=False)
                                .schema[0]
                                .type,
                            )
                        )
                table = pa.Table.from_pandas(chunk, schema=pa.schema(fields), preserve_index=False)
                yield table.to_pandas(types_mapper=pd.ArrowDtype)
    except UserError:
        raise
    except (ValueError, struct.error, UnicodeDecodeError) + compression.ERRORS as exc:
        raise UserError(
            f"{file_flag} {path}: cannot read it as a Stata file (.dta) ({first_line(exc)})"
        )


def _declared_types(reader) -> dict:
    """{variable: Arrow type} for the numeric variables, from the file's header."""
    import pyarrow as pa

    reader.data_label  # reads the header
    names = getattr(reader, "_varlist", None)
    dtypes = getattr(reader, "_dtyplist", None)
    if names is None or dtypes is None:
        return {}
    declared = {}
    for name, dtype in zip(names, dtypes):
        kind = np.dtype(dtype) if not isinstance(dtype, (int, str)) else None
        if kind is not None and kind.kind in "iu":
            declared[name] = pa.int64()
        elif kind is not None and kind.kind == "f":  # a float variable keeps its precision
            declared[name] = pa.float32() if kind.itemsize == 4 else pa.float64()
    return declared


def stata_labels(path: str, file_flag: str) -> dict:
    """{variable: label} for the variables that have a label (mixer's writer labels a
    variable with the name it had before Stata's renaming)."""
    reader = _stata_reader(path, file_flag)
    try:
        with reader:
            return {name: label for name, label in reader.variable_labels().items() if label}
    except (ValueError, struct.error, UnicodeDecodeError) + compression.ERRORS as exc:
        raise UserError(
            f"{file_flag} {path}: cannot read it as a Stata file (.dta) ({first_line(exc)})"
        )


def stata_row_count(path: str, file_flag: str) -> int:
    reader = _stata_reader(path, file_flag)
    with reader:
        reader.data_label
        count = getattr(reader, "_nobs", None)
        if count is None:
            count = sum(len(chunk) for chunk in stata_chunks(path, 100_000, file_flag))
        return int(count)


# ------------------------------------------------------------------ Stata: writing
STATA_STR_MAX = 2045  # bytes of a fixed-width str#; longer text is a strL
STATA_STRL, STATA_DOUBLE = 32768, 65526
STATA_MISSING = struct.unpack("<d", struct.pack("<Q", 0x7FE0000000000000))[0]  # "."
STATA_MAX_VARIABLES = 32_767
STATA_DATA_LABEL = 80  # characters of a file's data label
STATA_RESERVED = {
    "_all",
    "_b",
    "byte",
    "_coef",
    "_cons",
    "double",
    "float",
    "if",
    "in",
    "int",
    "long",
    "_n",
    "_N",
    "_pi",
    "_pred",
    "_rc",
    "_skip",
    "strL",
    "using",
    "with",
}


STATA_NAME_LENGTH = 32


def stata_name(name, suffix: str = "") -> str:
    """A valid Stata variable name: letters, digits and _, not starting with a digit, not a
    reserved word, at most 32 characters, `suffix` kept whole at its end. Distinct names
    are mixer.data.tables.writing's concern (output_names)."""
    new = re.sub(r"\W", "_", str(name)) or "_"
    if new[0].isdigit() or new in STATA_RESERVED or re.fullmatch(r"str\d+", new):
        new = "_" + new
    return new[: STATA_NAME_LENGTH - len(suffix)] + suffix


def excel_name(name, suffix: str = "") -> str:
    """A column name as a worksheet's header cell gives it back: without surrounding
    spaces (mixer's reader strips them), never empty."""
    return (str(name).strip() or "_") + suffix


class StataWriter:
    """A .dta file (format 118) written from chunks: write() keeps the chunks in a
    temporary Parquet file and measures each text column's widest value. close()
    writes the file: text up to 2,045 bytes as str#, longer text as strL, numbers
    as doubles, blanks as Stata's missing value (.)."""

    def __init__(
        self,
        tmp: str,
        path: str,
        file_flag: str,
        labels: Optional[list] = None,
        data_label: str = "",
        stamp: Optional[float] = None,
    ):
        """labels: a variable label per column ('' for none): the names the columns had
        before mixer.data.tables.writing made them valid Stata names. data_label: the file's own
        label (at most STATA_DATA_LABEL characters). stamp: the time the file states
        (seconds since the epoch, shown in local time; default now)."""
        self.tmp, self.path, self.file_flag = tmp, path, file_flag
        self.stamp = time.time() if stamp is None else stamp
        self.data_label = data_label[:STATA_DATA_LABEL]
        self.parts_path = tmp + ".parts"
        self.parts = None
        self.kinds, self.widths, self.names = [], [], []
        self.labels = [label[:80] for label in labels or []]
        self.rows = 0

    def write(self, columns: list) -> None:
        """columns: [(name, 'number' | 'text', numpy values)], valid distinct Stata names
        and the same kinds each time."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        if self.parts is None:
            if len(columns) > STATA_MAX_VARIABLES:
                raise UserError(
                    f"{self.file_flag} {self.path}: {len(columns)} columns, more than a "
                    f"Stata file holds ({STATA_MAX_VARIABLES:,}); write .parquet"
                )
            self.names = [str(name) for name, _, _ in columns]
            self.labels = self.labels or [""] * len(columns)
            self.kinds = [kind for _, kind, _ in columns]
            self.widths = [0] * len(columns)
        arrays = []
        for i, (_, kind, values) in enumerate(columns):
            if kind == "number":
                arrays.append(pa.array(values, type=pa.float64(), from_pandas=True))
            else:
                array = pa.array(values, type=pa.string())
                nul = pc.match_substring(array, "\x00")  # a Stata text ends at a NUL
                if len(array) and pc.any(nul).as_py():
                    row = self.rows + nul.to_pylist().index(True) + 1
                    raise UserError(
                        f"{self.file_flag} {self.path}: row {row} column {self.names[i]!r} holds "
                        "a NUL character a Stata file cannot store; write .csv or .parquet"
                    )
                widest = pc.max(pc.binary_length(array)).as_py() if len(array) else 0
                self.widths[i] = max(self.widths[i], widest or 0)
                arrays.append(array)
        table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        if self.parts is None:
            self.parts = pq.ParquetWriter(self.parts_path, table.schema)
        self.parts.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        import pyarrow.parquet as pq

        if self.parts is None:
            return
        self.parts.close()
        self.parts = None
        types, formats, dtypes = [], [], []
        for kind, width in zip(self.kinds, self.widths):
            if kind == "number":
                types.append(STATA_DOUBLE)
                formats.append("%10.0g")
                dtypes.append("<f8")
            elif width <= STATA_STR_MAX:
                width = max(width, 1)
                types.append(width)
                formats.append(f"%{min(width, 2045)}s")
                dtypes.append(f"S{width}")
            else:
                types.append(STATA_STRL)
                formats.append("%9s")
                dtypes.append("<u8")
        record = np.dtype([(f"c{i}", d) for i, d in enumerate(dtypes)])
        strls_path = self.tmp + ".strls"
        try:
            with open(self.tmp, "wb") as out, open(strls_path, "w+b") as strls:
                offsets = self._write_head(out, types, formats)
                offsets["data"] = out.tell()
                out.write(b"<data>")
                row = 0
                for batch in pq.ParquetFile(self.parts_path).iter_batches(batch_size=65_536):
                    records = np.zeros(batch.num_rows, dtype=record)
                    for i, kind in enumerate(types):
                        column = batch.column(i)
                        if kind == STATA_DOUBLE:
                            values = column.to_numpy(zero_copy_only=False).astype(np.float64)
                            records[f"c{i}"] = np.where(np.isnan(values), STATA_MISSING, values)
                        elif kind == STATA_STRL:
                            records[f"c{i}"] = self._strls(column.to_pylist(), i + 1, row, strls)
                        else:
                            records[f"c{i}"] = [v.encode("utf-8") for v in column.to_pylist()]
                    out.write(records.tobytes())
                    row += batch.num_rows
                out.write(b"</data>")
                offsets["strls"] = out.tell()
                out.write(b"<strls>")
                strls.seek(0)
                while block := strls.read(1 << 24):
                    out.write(block)
                out.write(b"</strls>")
                offsets["value_labels"] = out.tell()
                out.write(b"<value_labels></value_labels>")
                offsets["stata_data_close"] = out.tell()
                out.write(b"</stata_dta>")
                offsets["end-of-file"] = out.tell()
                out.seek(offsets["map"] + len(b"<map>"))
                out.write(b"".join(struct.pack("<Q", offsets[name]) for name in MAP_ORDER))
        finally:
            for leftover in (strls_path, self.parts_path):
                if os.path.exists(leftover):
                    os.unlink(leftover)

    @staticmethod
    def _strls(values: list, variable: int, first_row: int, out) -> np.ndarray:
        """The (v, o) keys of one strL column's cells (0 for an empty one); each
        non-empty cell's text goes to `out` as one GSO entry."""
        keys = np.zeros(len(values), dtype=np.uint64)
        for i, value in enumerate(values):
            if not value:
                continue
            observation = first_row + i + 1
            encoded = value.encode("utf-8")
            out.write(
                b"GSO"
                + struct.pack("<IQBI", variable, observation, 130, len(encoded) + 1)
                + encoded
                + b"\x00"
            )
            keys[i] = variable + (observation << 16)  # dta 118: v in 2 bytes, o in 6
        return keys

    def _write_head(self, out, types: list, formats: list) -> dict:
        def tag(name: str, content: bytes) -> bytes:
            return b"<" + name.encode() + b">" + content + b"</" + name.encode() + b">"

        def padded(text: str, size: int) -> bytes:
            return text.encode("utf-8")[: size - 1].ljust(size, b"\x00")

        now = dt.datetime.fromtimestamp(self.stamp)
        stamp = f"{now:%d} {MONTHS[now.month - 1]} {now:%Y %H:%M}".encode()
        n_vars = len(types)
        label = self.data_label.encode("utf-8")
        out.write(b"<stata_dta>")
        out.write(
            tag(
                "header",
                tag("release", b"118")
                + tag("byteorder", b"LSF")
                + tag("K", struct.pack("<H", n_vars))
                + tag("N", struct.pack("<Q", self.rows))
                + tag("label", struct.pack("<H", len(label)) + label)
                + tag("timestamp", bytes([len(stamp)]) + stamp),
            )
        )
        offsets = {"stata_data": 0, "map": out.tell()}
        out.write(tag("map", b"\x00" * 8 * len(MAP_ORDER)))
        sections = [
            ("variable_types", b"".join(struct.pack("<H", t) for t in types)),
            ("varnames", b"".join(padded(name, 129) for name in self.names)),
            ("sortlist", b"\x00" * 2 * (n_vars + 1)),
            ("formats", b"".join(padded(f, 57) for f in formats)),
            ("value_label_names", b"\x00" * 129 * n_vars),
            ("variable_labels", b"".join(padded(label, 321) for label in self.labels)),
            ("characteristics", b""),
        ]
        for name, content in sections:
            offsets[name] = out.tell()
            out.write(tag(name, content))
        return offsets

    def abort(self) -> None:
        if self.parts is not None:
            self.parts.close()
            self.parts = None
        if os.path.exists(self.parts_path):
            os.unlink(self.parts_path)


MAP_ORDER = (
    "stata_data",
    "map",
    "variable_types",
    "varnames",
    "sortlist",
    "formats",
    "value_label_names",
    "variable_labels",
    "characteristics",
    "data",
    "strls",
    "value_labels",
    "stata_data_close",
    "end-of-file",
)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

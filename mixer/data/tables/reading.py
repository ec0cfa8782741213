"""Reading: a file into a frame, the one way every table a run reads comes in (--dataset,
--train-data, --val-data, --extra-train, --key, --code-descriptions, predict.py's --input,
evaluate.py's --predictions and --audit). CSV, Parquet, Excel (.xlsx) and Stata (.dta) are
read, chosen by extension (mixer.data.tables.formats knows the last two); CSV and Stata also
compressed by gzip, bzip2 or xz, decompressed as they are read (mixer.data.tables.compression
opens every file the CSV path reads). Each file has its own options
(mixer.core.config.TableOptions: encoding, separator, sheet, header row), and every
message names the flags of that file's role (--key-encoding for --key).

Everything is read as text, so codes keep their leading zeros ("01110" is not
"1110"). CSV goes through pyarrow with newlines allowed inside quoted cells
("labourer\\nand fisher"), in the whole-file and the streaming reader alike, in the encoding
given. It is never guessed: a wrong guess changes the text the model reads. The separator is
given or the one the file names or its header line uses.
Numbers are turned into text the way a person reads them: a Parquet, Stata or
Excel column of numbers (pandas stores an integer column with blanks as floats)
gives "64100", not "64100.0". The columns that held numbers are listed in
frame.attrs['numeric_columns'] (mixer.data.labels.normalise restores the zeros numbers cannot
keep). Next in line: mixer.data.labels.normalise, then mixer.data.prepared.prepare. No torch here.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import os
import re
from dataclasses import dataclass, replace
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError, first_line
from mixer.core.flags import canonical_encoding
from mixer.data.tables import compression, formats, ipums

PARQUET_SUFFIXES = (".parquet", ".pq")
NUMERIC_COLUMNS = "numeric_columns"  # frame.attrs: columns that held numbers in the file
LABELS = "labels"  # frame.attrs: a .dta file's variable labels, {name: label}
SHEET_ROWS = "sheet_rows"  # frame.attrs: a workbook's row number of each row (as Excel shows it)
READ_BLOCK = 1 << 20  # 1 MiB blocks (pyarrow's default) for the CSV readers
SEPARATORS = (",", ";", "\t", "|")  # what a header line is searched for
FORMAT_NAMES = {
    "csv": "CSV",
    "parquet": "Parquet",
    "excel": "Excel (.xlsx)",
    "stata": "Stata (.dta)",
    "ipums": ipums.NAME,
}


def table_kind(path: str, file_flag: str = "--input") -> str:
    """csv, parquet, excel, stata or ipums (a fixed-width extract: .dat, .dat.gz), by the file's
    extension; a compressed file's by its name without the compression's (census.csv.gz is
    CSV, usa.dta.gz Stata). Anything else is CSV;
    a compression that is not read (zstd, zip), or a compressed Parquet or Excel file, is
    refused in one line."""
    suffix = compression.by_name(path)
    lower = compression.inner_name(path).lower()
    if suffix is not None and suffix not in compression.READ:
        raise unread_compression(path, suffix, file_flag)
    if lower.endswith(ipums.SUFFIX):
        if suffix not in (None, ".gz"):  # ipumspy decompresses gzip alone
            raise UserError(
                f"{file_flag} {path}: an IPUMS fixed-width extract is read plain or gzip'd (as "
                "IPUMS delivers it): decompress it first, or compress it with gzip"
            )
        return "ipums"
    if lower.endswith(PARQUET_SUFFIXES):
        kind = "parquet"
    elif lower.endswith(formats.EXCEL_SUFFIXES):
        kind = "excel"
    elif lower.endswith(formats.STATA_SUFFIXES):
        kind = "stata"
    elif lower.endswith(formats.OLD_EXCEL_SUFFIXES):
        raise UserError(
            f"{file_flag} {path}: {os.path.splitext(lower)[1]} is not read; save the sheet as "
            ".xlsx (Excel Workbook) or CSV"
        )
    else:
        kind = "csv"
    if suffix is not None and kind in ("parquet", "excel"):
        raise packed_container(path, suffix, kind, file_flag)
    return kind


def unread_compression(path: str, suffix: str, file_flag: str, content: bool = False) -> UserError:
    """One line for an input compressed in a way that is not read (zstd, zip)."""
    how = {".zst": f"zstd -d {path}", ".zip": f"unzip {path}"}.get(suffix, "")
    said = f"is compressed ({suffix} by its first bytes)" if content else f"is a {suffix} file"
    return UserError(
        f"{file_flag} {path}: the file {said}, and inputs are read plain or compressed by "
        f"gzip, bzip2 or xz: decompress it first{f' ({how})' if how else ''}, or compress it "
        "with gzip"
    )


def packed_container(path: str, suffix: str, kind: str, file_flag: str) -> UserError:
    """One line for a compressed Parquet or Excel file: both compress themselves."""
    return UserError(
        f"{file_flag} {path}: a {FORMAT_NAMES[kind]} file compressed by "
        f"{compression.NAMES[suffix]} is not read ({FORMAT_NAMES[kind]} compresses itself): "
        "decompress it first"
    )


def check_input_path(path: str, file_flag: str) -> None:
    if not os.path.exists(path):
        raise UserError(f"{file_flag} {path}: no such file; check the path")
    if os.path.isdir(path):
        raise UserError(
            f"{file_flag} {path}: is a directory; pass a .csv, .parquet, .xlsx or .dta file"
        )


def check_input_table(path: str, file_flag: str) -> str:
    """Refuse, before any work, an input that is missing, of a kind not read, or an
    Excel file without openpyxl; returns its kind."""
    kind = _kind_of(path, TableOptions(role="input"), file_flag)
    if kind == "excel":
        formats.openpyxl_module(file_flag, path)
    if kind == "ipums":
        ipums.require_ipumspy(path, TableOptions(role=_role_of(file_flag)))
    return kind


def _role_of(file_flag: str) -> str:
    """The role whose file a flag names (--input -> input), for a message naming its options."""
    from mixer.core.config import TABLE_ROLES

    return next((role for role, (flag, _) in TABLE_ROLES.items() if flag == file_flag), "input")


def row_names(frame: pd.DataFrame, positions, numbers=None) -> list:
    """Rows of a frame as messages name them (docs/formats.md). Each one's number under the
    header, from 1 (`numbers`: each row's, where the frame holds some of a file's rows only),
    and in a workbook also the row Excel shows: '7 (sheet row 10)'."""
    positions = np.asarray(positions, dtype=np.int64)
    shown = positions + 1 if numbers is None else np.asarray(numbers)[positions]
    sheet = frame.attrs.get(SHEET_ROWS)
    if sheet is None:
        return [str(int(n)) for n in shown]
    return [f"{int(n)} (sheet row {int(sheet[p])})" for n, p in zip(shown, positions)]


# ------------------------------------------------------------------ numbers as text
def as_text(series: pd.Series) -> pd.Series:
    """A column as strings, one form per value type whatever the format it came from
    (mixer.data.tables.formats.value_text, cell by cell). Missing -> '', booleans TRUE/FALSE, whole
    numbers '64100', other numbers by their shortest repr at the column's precision, dates
    ISO (1850-03-01, a time only where it is not midnight), text as it is."""
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        flags = series.astype(object)
        out = np.where(
            flags.isna().to_numpy(),
            "",
            np.where(flags.fillna(False).astype(bool).to_numpy(), formats.TRUE, formats.FALSE),
        )
        return pd.Series(out, index=series.index, dtype=object)
    if pd.api.types.is_float_dtype(dtype):
        precision = getattr(dtype, "numpy_dtype", dtype)
        precision = precision if getattr(precision, "itemsize", 8) < 8 else np.dtype(float)
        values = series.to_numpy(dtype=precision, na_value=np.nan)
        out = np.full(len(values), "", dtype=object)
        finite = np.isfinite(values)
        with np.errstate(invalid="ignore"):
            whole = finite & (values == np.floor(values)) & (np.abs(values) < 2.0**63)
        out[whole] = values[whole].astype(np.int64).astype(str)
        fractional = finite & ~whole  # and whole numbers past int64, written out in full
        out[fractional] = [np.format_float_positional(v, trim="-") for v in values[fractional]]
        return pd.Series(out, index=series.index, dtype=object)
    if (
        pd.api.types.is_integer_dtype(dtype)
        or pd.api.types.is_string_dtype(dtype)
        and not _mixed(series)
    ):
        return series.astype(object).where(series.notna(), "").astype(str)
    if dtype == object:  # cell by cell: 1, 1.0 and True are equal to Python, but not one text
        return pd.Series([formats.value_text(v) for v in series], index=series.index, dtype=object)
    try:
        codes, uniques = pd.factorize(series)  # dates, categories, ...: each distinct value once
    except (
        TypeError,
        NotImplementedError,
    ):  # lists, structs: no distinct values to take (Arrow has no kernel)
        return pd.Series(
            [formats.value_text(v) for v in series.astype(object)], index=series.index, dtype=object
        )
    texts = np.array(
        [formats.value_text(v) for v in pd.Series(uniques).astype(object)] + [""], dtype=object
    )
    return pd.Series(texts[codes], index=series.index, dtype=object)


def _mixed(series: pd.Series) -> bool:
    """An object column that holds more than text (numbers, dates, booleans, as
    pd.read_excel or a notebook gives one)."""
    return series.dtype == object and pd.api.types.infer_dtype(series, skipna=True) not in (
        "string",
        "empty",
    )


# ------------------------------------------------------------------ CSV text
@dataclass(frozen=True)
class CsvLayout:
    header: list
    sep: str
    detected: bool  # the separator came from the file, not from the options
    encoding: str
    skip_rows: int = 0  # rows above the header: a first line 'sep=;' (Excel's way to name the
    #                     separator) or the title rows a header row option skips
    named: bool = False  # the separator came from a 'sep=' line

    @property
    def names(self) -> list:
        """The header's names without its trailing empty ones (a spreadsheet's export of a
        used range: 'occ1,hisco_1,,'), whose columns are dropped when they hold nothing."""
        names = list(self.header)
        while len(names) > 1 and not names[-1].strip():
            names.pop()
        return names

    def describe(self, options: TableOptions, path: str) -> str:
        how = options.flag("sep")
        if self.detected:
            found = "the file's 'sep=' line" if self.named else "found in the header line"
            how = f"{found}; {options.flag('sep')} sets it"
        shown = "tab" if self.sep == "\t" else repr(self.sep)
        header = f", header row {self.skip_rows + 1}" if options.header_row else ""
        packed = compression.by_content(path)
        kind = f"CSV ({compression.NAMES[packed]})" if packed else "CSV"
        return f"{options.what} {path}: {kind}, separator {shown} ({how}), encoding {self.encoding}{header}"


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


def blank_line(line: str) -> bool:
    """A line that holds nothing: empty, spaces, or separators alone (an empty row of a
    spreadsheet's export). Such lines above the header are skipped."""
    return not line.strip().strip("".join(SEPARATORS)).strip()


def csv_layout(path: str, options: TableOptions = TableOptions()) -> CsvLayout:
    """A CSV file's column names and separator (quoted names with separators or
    newlines included). The header is the first line that is not blank (after a 'sep='
    line), or the options' header row. A header that reads as one column holding another
    separator is refused: it is the wrong separator, never one column."""
    encoding, file_flag = canonical_encoding(options.encoding), options.what
    # rows below the header are checked by the readers, so a bad byte there does not hide
    # a wrong separator; one in the header is reported here
    with io.TextIOWrapper(
        compression.open_bytes(path),
        encoding=_python_encoding(encoding),
        errors="replace",
        newline="",
    ) as handle:
        first = handle.readline()
        named = SEP_LINE.fullmatch(first.rstrip("\r\n"))
        handle.seek(0)
        if options.header_row:
            skip_rows = options.header_row - 1
            for _ in range(skip_rows):
                handle.readline()
        else:  # a 'sep=' line, then blank lines, are no header
            skip_rows = 1 if named else 0
            if named:
                handle.readline()
            while True:
                at = handle.tell()
                line = handle.readline()
                if not line or not blank_line(line):
                    handle.seek(at)
                    break
                skip_rows += 1
        start = handle.tell()
        header_line = handle.readline()
        if options.header_row and not header_line:  # past the end: say so, not 'is empty'
            handle.seek(0)
            lines = sum(1 for _ in handle)
            if not lines:
                raise pd.errors.EmptyDataError("empty")
            raise UserError(
                f"{file_flag} {path}: row {options.header_row} ({options.flag('header_row')}) is past "
                f"the file's last line ({lines}); name the row that holds the column names"
            )
        if "\ufffd" in header_line and first_undecodable(path, encoding) is not None:
            raise decoding_error(path, options)
        if options.sep is None and named and skip_rows:
            sep = named.group(1)
        elif options.sep is None:
            sep = detect_separator(header_line.rstrip("\r\n"))
            if not options.header_row:
                _refuse_title_above(handle, header_line, skip_rows + 1, path, options)
            if sep is None:
                found = " and ".join(
                    repr(s) for s in SEPARATORS if _outside_quotes(header_line).count(s)
                )
                raise UserError(
                    f"{file_flag} {path}: the header line holds {found} equally often; "
                    f"name the separator with {options.flag('sep')}"
                )
        else:
            sep = options.sep
        handle.seek(start)
        try:
            header = next(csv.reader(handle, delimiter=sep))
        except StopIteration:
            header = []
    if not any(name.strip() for name in header):
        if options.header_row:
            raise UserError(
                f"{file_flag} {path}: row {options.header_row} ({options.flag('header_row')}) is "
                "empty; name the row that holds the column names"
            )
        raise pd.errors.EmptyDataError("empty")
    if len(header) == 1:
        others = [s for s in SEPARATORS if s != sep and s in _outside_quotes(header_line)]
        if others:
            shown = "tab" if others[0] == "\t" else repr(others[0])
            flag = options.flag("sep")
            raise UserError(
                f"{file_flag} {path}: with {flag} {sep!r} the header is one column "
                f"{header[0][:80]!r}, which holds {shown}; pass {flag} {shown} "
                f"(or leave {flag} out to take the header's)"
            )
    return CsvLayout(
        header=header,
        sep=sep,
        detected=options.sep is None,
        encoding=encoding,
        skip_rows=skip_rows,
        named=bool(named and options.sep is None and skip_rows),
    )


TITLE_CHECK_LINES = 5  # lines below a header without separators that must agree to call it a title


def _refuse_title_above(
    handle, header_line: str, line: int, path: str, options: TableOptions
) -> None:
    """Refuse a header line without any separator above lines that all use the same ';', tab or
    '|' as often: a title above the column names, which would otherwise read as the file's one
    column. (Below a title, rows that use ',' fail as rows with more cells than the header.)"""
    if any(sep in _outside_quotes(header_line) for sep in SEPARATORS):
        return
    below, number = [], line
    while len(below) < TITLE_CHECK_LINES:
        text = handle.readline()
        if not text:
            break
        number += 1
        if not blank_line(text):
            below.append((number, _outside_quotes(text.rstrip("\r\n"))))
    if not below:
        return
    sep = detect_separator(below[0][1])
    if (
        sep in (None, ",")
        or len({text.count(sep) for _, text in below}) > 1
        or not below[0][1].count(sep)
    ):
        return
    header_row = below[0][0]
    raise UserError(
        f"{options.what} {path}: line {line} ({header_line.strip()[:LINE_SHOWN]!r}) holds no "
        f"separator, but the lines below it use {_shown(sep)}: if the column names are in line "
        f"{header_row} (a title above them), pass {options.flag('header_row')} {header_row}; "
        f"if the file is one column, pass {options.flag('sep')} ','"
    )


LINE_SHOWN = 160  # bytes of a badly encoded line shown in the error
ROWS_COUNTED_UP_TO = 64 << 20  # bytes before a bad one parsed to give its row, not only its line


def utf8_lookalike(path: str, encoding: str, flag: str = "--encoding") -> Optional[str]:
    """For a file read in another single-byte encoding: when it is also valid UTF-8 with
    characters past ASCII, a note showing its first such line both ways (the encoding
    given turns UTF-8's 'ä' into 'Ã¤'); None otherwise. It says so, it does not choose."""
    if canonical_encoding(encoding).startswith(("utf-", "utf_")):
        return None
    first_line_bytes, position = None, 0
    with compression.open_bytes(path) as handle:
        while block := handle.read(1 << 22):
            if not block.isascii():
                at = next(i for i, byte in enumerate(block) if byte >= 0x80)
                handle.seek(position + block.rfind(b"\n", 0, at) + 1)
                first_line_bytes = handle.readline().rstrip(b"\r\n")[: LINE_SHOWN * 2]
                break
            position += len(block)
    if first_line_bytes is None or first_undecodable(path, "utf-8") is not None:
        return None
    return (
        f"note: the file is also valid UTF-8; its first line past ASCII reads as {encoding} "
        f"{first_line_bytes.decode(encoding, errors='replace')[:LINE_SHOWN]!r} and as UTF-8 "
        f"{first_line_bytes.decode('utf-8', errors='replace')[:LINE_SHOWN]!r}: if the second is "
        f"right, leave {flag} out"
    )


def first_undecodable(path: str, encoding: str) -> Optional[int]:
    """The offset of the first byte that does not decode in `encoding`, or None."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    fed = 0
    with compression.open_bytes(path) as handle:
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


def decoding_error(path: str, options: TableOptions) -> UserError:
    """One line naming the first row and byte that do not decode, and that row read
    as cp1252 and latin-1, so the user can name the encoding in one step, with the
    flag that sets it for this file."""
    encoding, file_flag, flag = (
        canonical_encoding(options.encoding),
        options.what,
        options.flag("encoding"),
    )
    offset = first_undecodable(path, encoding)
    if offset is None:  # the reader failed for another reason
        return UserError(f"{file_flag} {path}: cannot read it as {encoding} text; pass {flag}")
    with compression.open_bytes(path) as handle:
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
            lines = before.split(b"\n")[:-1]  # the whole lines above the bad one
            above = _lines_above_header(lines, options)
            if len(lines) < above:
                row = -1  # a title line above the header
            else:
                rest = b"".join(line + b"\n" for line in lines[above:])
                prefix = io.TextIOWrapper(io.BytesIO(rest), "latin-1", newline="")
                # the header is record 1, so data rows count from 1; empty lines are no rows
                row = sum(1 for record in csv.reader(prefix) if record)
                if rest.count(b'"') % 2:  # the line continues a quoted cell: its record was counted
                    row -= 1
    line = newlines + 1
    where = f"row {row} (line {line})" if row is not None and row >= 1 else f"line {line}"
    if row is not None and row <= 0 or line == 1:
        where = "the header line" if row in (0, None) else f"line {line}, above the header"
    bad = offset - line_start

    def shown(codec: str) -> str:
        text = raw.decode(codec, errors="replace")
        return repr(text[:LINE_SHOWN] + ("..." if len(text) > LINE_SHOWN else ""))

    hint = ""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        hint = f" The file starts with a UTF-16 byte-order mark: {flag} utf-16."
    name = "UTF-8" if encoding == "utf-8" else encoding
    return UserError(
        f"{file_flag} {path}: not {name} text: {where}, byte {bad + 1} of that line "
        f"(0x{_byte_at(path, offset):02X} at offset {offset}). That line as cp1252: {shown('cp1252')}; "
        f"as latin-1: {shown('latin-1')}. Pass the encoding that reads it right "
        f"(e.g. {flag} cp1252) or save the file as UTF-8.{hint}"
    )


def _lines_above_header(lines: list, options: TableOptions) -> int:
    """How many of a file's first lines (bytes) are above its header, as csv_layout
    takes them: the header row's, or a 'sep=' line and the blank lines."""
    if options.header_row:
        return options.header_row - 1
    above = 1 if lines and SEP_LINE.fullmatch(lines[0].rstrip(b"\r").decode("latin-1")) else 0
    while above < len(lines) and blank_line(lines[above].decode("latin-1")):
        above += 1
    return above


def _byte_at(path: str, offset: int) -> int:
    with compression.open_bytes(path) as handle:
        handle.seek(offset)
        return handle.read(1)[0]


@contextlib.contextmanager
def csv_source(path: str):
    """What pyarrow's CSV readers read: the path of a plain file (read natively), or a
    compressed file's decompressed stream (compression.open_bytes), closed after."""
    if compression.by_content(path) is None and compression.by_name(path) is None:
        yield path  # (pyarrow would take a plain file named .gz for gzip by its name)
        return
    with compression.open_bytes(path) as stream:
        yield stream


def _csv_options(layout: CsvLayout, stream: bool = False):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    # a stream is read without threads: the threaded reader reads ahead of its consumer
    # without bound (1.3 GB at the start of a 10M-row prediction, 0.9 GB at its end)
    names, own = list(layout.header), {}
    if len(layout.names) < len(names):  # trailing columns without a name: named here, dropped later
        names = layout.names + [f"{UNNAMED}{i}" for i in range(len(layout.names), len(names))]
        own = dict(column_names=names, skip_rows_after_names=1)
    return dict(
        read_options=pcsv.ReadOptions(
            block_size=READ_BLOCK,
            use_threads=not stream,
            encoding=_arrow_encoding(layout.encoding),
            skip_rows=layout.skip_rows,
            **own,
        ),
        parse_options=pcsv.ParseOptions(delimiter=layout.sep, newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(
            column_types={name: pa.string() for name in names}, strings_can_be_null=False
        ),
    )


UNNAMED = "\x00unnamed "  # a trailing column without a name, while it is read


def _without_unnamed(
    frame: pd.DataFrame, layout: CsvLayout, options: TableOptions, path: str, rows_before: int = 0
) -> pd.DataFrame:
    """The frame without the trailing columns that have no name, which must hold nothing;
    a value in one is an error naming its row and column (a title row taken as the header,
    or a name missing)."""
    unnamed = [c for c in frame.columns if str(c).startswith(UNNAMED)]
    for column in unnamed:
        filled = np.flatnonzero(frame[column].str.strip().ne("").to_numpy())
        if len(filled):
            position = int(column[len(UNNAMED) :]) + 1
            raise UserError(
                f"{options.what} {path}: row {rows_before + filled[0] + 1} has a value in column {position} "
                f"({frame[column].iloc[filled[0]][:40]!r}), which has no name in the header (line "
                f"{layout.skip_rows + 1}: {layout.sep.join(layout.header)[:LINE_SHOWN]!r}); name the column, "
                f"or pass {options.flag('header_row')} with the number of the row that holds the column names"
            )
    frame = frame.drop(columns=unnamed) if unnamed else frame
    _refuse_joined_rows(frame, layout, options, path, rows_before)
    return frame


def _refuse_joined_rows(
    frame: pd.DataFrame, layout: CsvLayout, options: TableOptions, path: str, rows_before: int
) -> None:
    """A quoted cell that holds rows of the file: a quote opened at a cell's start (a ditto
    mark, '"', as transcriptions write one) and closed at the next one joins the lines
    between into that cell, and the rows read are fewer than the file's, without an error.
    Such a cell (of a file of two or more columns) holds a line break, and its text begins
    with the separator, or a line of it past the first is a whole row (as many cells as the
    header names). Refused in one line naming the row; a cell with line breaks of its own
    (docs/data.md) is read."""
    columns = len(frame.columns)
    if columns < 2 or len(frame) == 0:
        return
    for column in frame.columns:
        values = frame[column]
        if not pd.api.types.is_string_dtype(values):
            continue
        broken = values.str.contains("\n", regex=False).fillna(False).to_numpy(dtype=bool)
        for index in np.flatnonzero(broken):
            text = values.iloc[index]
            lines = text.split("\n")
            if not (
                text.startswith(layout.sep)
                or any(len(line.split(layout.sep)) == columns for line in lines[1:])
            ):
                continue
            shown = repr(text[:JOINED_SHOWN] + ("..." if len(text) > JOINED_SHOWN else ""))
            raise UserError(
                f"{options.what} {path}: row {rows_before + index + 1}'s {column!r} cell runs over "
                f'{len(lines)} lines of the file ({shown}): a quote (") at its start (a ditto '
                "mark?) closes only at a later one, which joins the lines between into one cell "
                "and leaves fewer rows than the file has; write a ditto mark as text (do), double "
                'a quote inside a quoted cell (""), or remove the stray one (rows count from 1 '
                "under the header)"
            )


JOINED_SHOWN = 60  # characters of a cell that joined rows shown in the error


def _duplicates(names) -> list:
    names = [str(n) for n in names]
    return sorted({n for n in names if names.count(n) > 1})


def check_names(names, path: str, file_flag: str) -> None:
    names = [str(n) for n in names]
    if names.count("") > 1:
        positions = [str(i + 1) for i, n in enumerate(names) if n == ""]
        raise UserError(
            f"{file_flag} {path}: columns {', '.join(positions)} have no name in the header; name "
            "them"
        )
    if _duplicates(names):  # pyarrow would keep both under one name
        raise UserError(
            f"{file_flag} {path}: duplicate column name(s) "
            f"{', '.join(map(repr, _duplicates(names)))}; rename them"
        )


def check_header(path: str, options: TableOptions) -> None:
    """A CSV or Parquet file's column names checked from its header alone (check_names), as
    iter_chunks checks them at its first chunk: before a job's slow start (a model loading on
    a node the scheduler gave it), not after. What the header cannot tell is left to the reader."""
    kind = table_kind(path, options.what)
    if kind == "csv":
        try:
            names = csv_layout(path, options).names
        except (pd.errors.EmptyDataError, ValueError) + compression.ERRORS:
            return
    elif kind == "parquet":
        names = column_names(path)
    elif kind == "ipums":  # its codebook found and read, the extract rectangular
        names = ipums.names(path, options)
    else:  # a sheet's header and a .dta file's names are read with their rows
        return
    if names is not None:
        check_names(names, path, options.what)


def _decode_failure(exc: Exception) -> bool:
    return isinstance(exc, UnicodeDecodeError) or "utf8" in str(exc).lower().replace("-", "")


# ------------------------------------------------------------------ reading
def read_table(
    path: str, options: TableOptions = TableOptions(), columns: Optional[list] = None, log=None
) -> pd.DataFrame:
    """A whole table, every column as text. Columns that held numbers are listed in
    frame.attrs['numeric_columns']. `log` hears how a CSV file was read (separator,
    encoding) and which sheet and header row of a workbook."""
    file_flag, kind, layout = options.what, _kind_of(path, options), None
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            frame = _parquet_frame(pq.read_table(path, columns=columns))
            frame = _numbers_as_text(frame, path, file_flag)
        elif kind == "stata":
            chunks = list(formats.stata_chunks(path, 1_000_000, file_flag))
            frame = pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame()
            frame = _numbers_as_text(frame[columns] if columns else frame, path, file_flag)
            frame.attrs[LABELS] = formats.stata_labels(path, file_flag)
        elif kind == "ipums":
            if log is not None:
                log(_extract_line(options, path))
            chunks = list(ipums.chunks(path, 1_000_000, options))
            frame = pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame()
            frame = _numbers_as_text(frame[columns] if columns else frame, path, file_flag)
        elif kind == "excel":
            sheet = formats.ExcelSheet(path, options)
            try:
                check_names(sheet.header, path, file_flag)
                frame = pd.DataFrame(
                    [row for row in sheet.rows()], columns=sheet.header, dtype=object
                )
                frame.attrs[NUMERIC_COLUMNS] = sheet.numeric
                frame.attrs[SHEET_ROWS] = list(sheet.numbers)
            finally:
                sheet.close()
            if log is not None:
                log(_sheet_line(options, path, sheet))
        else:
            import pyarrow.csv as pcsv

            layout = csv_layout(path, options)
            check_names(layout.names, path, file_flag)
            _say_layout(layout, options, path, log)
            with csv_source(path) as source:
                table = pcsv.read_csv(source, **_csv_options(layout))
            frame = _without_unnamed(table.to_pandas(), layout, options, path)
    except UserError:
        raise
    except pd.errors.EmptyDataError:
        raise UserError(f"{file_flag} {path}: the file is empty; it needs a header and rows")
    except (ValueError,) + compression.ERRORS as exc:  # pyarrow's: ValueError / OSError
        raise _read_failure(exc, path, kind, layout, options)
    if len(frame) == 0:
        raise UserError(f"{file_flag} {path}: has a header but no rows")
    return frame


def _parquet_frame(table) -> pd.DataFrame:
    """A Parquet table or batch as pandas, read alike by the whole-file and the streaming
    reader. Its columns are Arrow-backed, so a chunk's types do not depend on its values and an
    integer column with nulls stays integers (numpy would make it float64, and
    12345678901234567 would come back as ...568). A named index (pandas' to_parquet of
    a frame indexed by 'parish') is a column of the file. A string_view or binary_view column
    (Arrow's newer layouts, which Polars and DuckDB write) is read as large_string or
    large_binary: the same values, in the layout Arrow's kernels (take, the keying) handle."""
    table = _without_views(table)
    try:
        frame = table.to_pandas(types_mapper=pd.ArrowDtype)
    except (TypeError, NotImplementedError, ValueError):  # pandas metadata naming a dtype pandas
        frame = table.to_pandas(types_mapper=pd.ArrowDtype, ignore_metadata=True)  # cannot build
    if any(name is not None for name in frame.index.names):
        frame = frame.reset_index()
    return frame.reset_index(drop=True)


def _without_views(table):
    """The table or batch with its string_view / binary_view columns cast to large_string /
    large_binary (the same values); itself where it has none."""
    import pyarrow as pa

    views = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}
    schema = table.schema
    if not any(field.type in views for field in schema):
        return table
    fields = [field.with_type(views.get(field.type, field.type)) for field in schema]
    return table.cast(pa.schema(fields, metadata=schema.metadata))


def _kind_of(path: str, options: TableOptions, file_flag: Optional[str] = None) -> str:
    """The kind of an input file that exists (csv, parquet, excel, stata, ipums), its compression
    checked by its first bytes: gzip, bzip2 and xz are read (compression.open_bytes), others
    refused in one line, as a compressed Parquet or Excel file is."""
    file_flag = file_flag or options.what
    check_input_path(path, file_flag)
    kind = table_kind(path, file_flag)
    suffix = compression.by_content(path)
    if suffix is not None and suffix not in compression.READ:
        raise unread_compression(path, suffix, file_flag, content=True)
    if suffix is not None and kind in ("parquet", "excel"):
        raise packed_container(path, suffix, kind, file_flag)
    if kind == "ipums" and suffix != compression.by_name(path):  # ipumspy goes by the name
        said = f"{compression.NAMES[suffix]}'d by its first bytes" if suffix else "not gzip'd"
        name = compression.inner_name(path) + (suffix or "")
        raise UserError(
            f"{file_flag} {path}: an IPUMS extract {said}, and it is read as its name says: "
            f"name it {os.path.basename(name)}"
        )
    return kind


def _say_layout(layout: CsvLayout, options: TableOptions, path: str, log) -> None:
    if log is not None:
        log(layout.describe(options, path))
        if (note := utf8_lookalike(path, layout.encoding, options.flag("encoding"))) is not None:
            log(f"{options.what} {path}: {note}")


RAGGED = re.compile(r"(?:Row #(\d+): )?Expected (\d+) columns, got (\d+): (.*)", re.S)


def _read_failure(exc: Exception, path: str, kind: str, layout, options: TableOptions) -> UserError:
    if layout is not None and _decode_failure(exc):
        return decoding_error(path, options)
    if layout is not None and RAGGED.search(str(exc)):
        return ragged_row(str(exc), path, layout, options)
    if layout is not None and "straddl" in str(exc):  # pyarrow: a row longer than a block
        return long_row(path, layout, options)
    packed = compression.by_content(path)
    hint = (  # a compressed file cut short (a copy stopped), damaged, or with bytes after its
        # end (Python's readers refuse what `gzip -t` calls "trailing garbage ignored")
        f"; if the {compression.NAMES[packed]} file is cut short, damaged or has bytes after its "
        f"end (test it: {compression.NAMES[packed]} -t {path}), copy it again"
        if packed
        and isinstance(exc, compression.ERRORS)
        and not type(exc).__module__.startswith("pyarrow")
        else ""
    )
    return UserError(
        f"{options.what} {path}: cannot read it as {FORMAT_NAMES[kind]} ({first_line(exc, 300)}){hint}"
    )


def long_row(path: str, layout: CsvLayout, options: TableOptions) -> UserError:
    """A row longer than the reader's block (pyarrow: "straddling object straddles two block
    boundaries"), as one line naming its line: most often a quote (a ditto mark, an inch
    sign) opened in a cell and closed only far below, which joins the lines between into one
    cell; else a line of that length. Found by reading the file's lines again."""
    found, opened, span = None, None, 0  # opened: (number, line) of a quote not yet closed
    with compression.open_bytes(path) as handle:
        for number, line in enumerate(handle, start=1):
            odd = line.count(b'"') % 2
            if opened is None:
                if not (odd or len(line) > READ_BLOCK):
                    continue
                opened, span = (number, line), 0
            span += len(line)
            if span > READ_BLOCK:
                found = opened
                break
            if odd and span > len(line):
                opened = None  # closed on a line below the one that opened it
    found = found or opened
    size = f"{READ_BLOCK // (1 << 20)} MiB"
    quote = found is not None and found[1].count(b'"') % 2
    if quote:
        number, line = found
        text = line.decode(layout.encoding, errors="replace").rstrip("\r\n")
        shown = repr(text[:LINE_SHOWN] + ("..." if len(text) > LINE_SHOWN else ""))
        where = (
            f'line {number} ({shown}) opens a quote (") that no line near it closes, so the '
            f"lines below it read as one cell of more than {size}"
        )
        fix = 'double a quote inside a quoted cell ("5 ft 8"" tall") or remove the stray one'
    else:
        where = (
            f"line {found[0]} is {len(found[1]):,} bytes long, more than {size}"
            if found is not None
            else f"a row runs over more than {size} of the file"
        )
        fix = "shorten that line"
    return UserError(f"{options.what} {path}: {where}, and a cell that long is not read: {fix}")


def ragged_row(message: str, path: str, layout: CsvLayout, options: TableOptions) -> UserError:
    """A row with more or fewer cells than the header names, as one line. It says which row, which
    row was taken as the header, and the flag that names another header row (a title above
    the column names reads as a header of one column). The row's number comes from
    pyarrow's reader without threads (the threaded one does not give it), read again here."""
    import pyarrow.csv as pcsv

    match = RAGGED.search(message)
    if match.group(1) is None:
        try:
            with csv_source(path) as source:
                for _ in pcsv.open_csv(source, **_csv_options(layout, stream=True)):
                    pass
        except (ValueError, OSError) as exc:
            match = RAGGED.search(str(exc)) or match
    record, named, got, text = match.groups()
    # pyarrow counts the lines skipped above the header, then records (empty lines not)
    row = int(record) - layout.skip_rows - 1 if record else None
    where = f"row {row}" if row else "a row"
    header = layout.sep.join(layout.header)
    shown = text.strip()[:LINE_SHOWN]
    said = (
        f"{options.what} {path}: {where} has {got} cell(s), but the header (line {layout.skip_rows + 1}: "
        f"{header[:LINE_SHOWN]!r}) names {named} column(s): {shown!r}"
    )
    quote = f'quote a cell that holds {_shown(layout.sep)} ("smith, master")'
    if int(named) < int(got) and (row == 1 or int(named) == 1):  # a title taken as the header?
        hint = (
            f"if the column names are in another row (a title above them), pass "
            f"{options.flag('header_row')} with its number; else {quote}"
        )
    elif int(named) < int(got):
        hint = quote
    else:
        hint = "give the row its missing cells (empty ones between separators)"
    return UserError(f"{said}; {hint} (rows count from 1 under the header)")


def _shown(sep: str) -> str:
    return "tab" if sep == "\t" else repr(sep)


def _sheet_line(options: TableOptions, path: str, sheet) -> str:
    others = (
        f" of {len(sheet.sheets)} ({options.flag('sheet')} chooses another)"
        if len(sheet.sheets) > 1
        else ""
    )
    header = (
        f", header row {sheet.header_row} ({options.flag('header_row')} chooses another)"
        if sheet.header_row != 1 or options.header_row
        else ""
    )
    return f"{options.what} {path}: Excel, sheet {sheet.sheet!r}{others}{header}"


def _extract_line(options: TableOptions, path: str) -> str:
    return (
        f"{options.what} {path}: IPUMS fixed-width extract, codebook "
        f"{ipums.ddi_path(path, options)} ({options.flag('ddi')} names another)"
    )


def _numbers_as_text(frame: pd.DataFrame, path: str, file_flag: str) -> pd.DataFrame:
    numeric = [
        c
        for c in frame.columns
        if pd.api.types.is_numeric_dtype(frame[c].dtype)
        and not pd.api.types.is_bool_dtype(frame[c].dtype)
    ]
    check_names(frame.columns, path, file_flag)
    frame = pd.DataFrame({c: as_text(frame[c]) for c in frame.columns})
    frame.attrs[NUMERIC_COLUMNS] = numeric
    return frame


def frame_as_text(frame: pd.DataFrame, file_flag: str) -> pd.DataFrame:
    """A DataFrame given in Python read as a file is read: every column as text, the
    columns of numbers listed in frame.attrs['numeric_columns']."""
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    check_names(frame.columns, "(a DataFrame)", file_flag)
    numeric = [
        c
        for c in frame.columns
        if pd.api.types.is_numeric_dtype(frame[c].dtype)
        and not pd.api.types.is_bool_dtype(frame[c].dtype)
    ]
    out = pd.DataFrame({c: as_text(text_cells(frame[c])) for c in frame.columns}).reset_index(
        drop=True
    )
    out.attrs[NUMERIC_COLUMNS] = numeric
    return out


def text_cells(series: pd.Series) -> pd.Series:
    """A column of Python objects (numbers and text mixed, as pd.read_excel gives one)
    as text, cell by cell, as as_text writes each value; other columns as they are."""
    if series.dtype != object:
        return series
    return pd.Series([formats.value_text(v) for v in series], index=series.index, dtype=object)


def iter_chunks(
    path: str,
    chunk_size: int,
    options: TableOptions = TableOptions(role="input"),
    log=None,
    columns: Optional[list] = None,
) -> Iterator[pd.DataFrame]:
    """The file in chunks of chunk_size rows (the last may be smaller); CSV and Excel
    columns as text, Parquet and Stata columns with the file's types (Arrow-backed).
    At most about one chunk in memory. A CSV file's encoding is checked before the
    first chunk, so a bad byte near the end stops the job before any work. `columns`:
    only these (the caller checked that the file has them); CSV and Parquet files parse
    no other column."""
    file_flag, kind, layout = options.what, _kind_of(path, options), None
    stack = contextlib.ExitStack()  # a compressed CSV's stream, closed when the chunks end
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            # Arrow-backed columns: a chunk's pandas types do not depend on its values
            # (numpy would make an integer column with blanks float, an all-blank one
            # object), so every chunk has the file's schema and the output keeps it
            for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_size, columns=columns):
                yield _parquet_frame(batch)
            return
        if kind == "stata":
            for chunk in formats.stata_chunks(path, chunk_size, file_flag):
                yield chunk[columns] if columns else chunk
            return
        if kind == "ipums":
            if log is not None:
                log(_extract_line(options, path))
            for chunk in ipums.chunks(path, chunk_size, options):
                yield chunk[columns] if columns else chunk
            return
        if kind == "excel":
            sheet = formats.ExcelSheet(path, options)
            try:
                check_names(sheet.header, path, file_flag)
                if log is not None:
                    log(_sheet_line(options, path, sheet))
                for chunk in sheet.chunks(chunk_size):
                    yield chunk[columns] if columns else chunk
            finally:
                sheet.close()
            return
        import pyarrow as pa
        import pyarrow.csv as pcsv

        layout = csv_layout(path, options)
        check_names(layout.names, path, file_flag)
        if first_undecodable(path, layout.encoding) is not None:
            raise decoding_error(path, options)
        _say_layout(layout, options, path, log)
        source = stack.enter_context(csv_source(path))
        csv_options = _csv_options(layout, stream=True)
        if columns:
            csv_options["convert_options"].include_columns = list(columns)
        reader = pcsv.open_csv(source, **csv_options)
        pending, rows, done = [], 0, 0
        for batch in reader:
            pending.append(batch)
            rows += batch.num_rows
            while rows >= chunk_size:
                table = pa.Table.from_batches(pending)
                yield _without_unnamed(
                    table.slice(0, chunk_size).to_pandas(), layout, options, path, done
                )
                done += chunk_size
                rest = table.slice(chunk_size)
                pending, rows = rest.to_batches(), rest.num_rows
        if rows:
            yield _without_unnamed(
                pa.Table.from_batches(pending).to_pandas(), layout, options, path, done
            )
    except UserError:
        raise
    except pd.errors.EmptyDataError:
        raise UserError(f"{file_flag} {path}: the file is empty")
    except (ValueError,) + compression.ERRORS as exc:  # and a compressed file cut short
        raise _read_failure(exc, path, kind, layout, options)
    finally:
        stack.close()


def check_csv_rows(path: str, options: TableOptions = TableOptions(role="input")) -> None:
    """A CSV file's rows parsed once for their cells alone (each as many as the header names),
    before a job reads them in chunks, so that a ragged row near the end stops the job before
    any work, as a bad byte does (iter_chunks). One column is converted, so the pass costs the
    parse. Other kinds hold their columns by themselves: nothing to check."""
    if _kind_of(path, options) != "csv":
        return
    import pyarrow as pa
    import pyarrow.csv as pcsv

    layout = None
    try:
        layout = csv_layout(path, options)
        settings = _csv_options(layout, stream=True)
        first = next(iter(settings["convert_options"].column_types))
        settings["convert_options"] = pcsv.ConvertOptions(
            include_columns=[first], column_types={first: pa.string()}, strings_can_be_null=False
        )
        with csv_source(path) as source:  # a compressed file as the chunks read it
            for _ in pcsv.open_csv(source, **settings):
                pass
    except (ValueError, *compression.ERRORS) as exc:
        raise _read_failure(exc, path, "csv", layout, options)


def count_rows(
    path: str, options: TableOptions = TableOptions(role="input"), at_least: Optional[int] = None
) -> int:
    """The table's rows under the header. With `at_least`, a CSV file is counted
    exactly only when its lines are more than that (counting lines is cheap)."""
    kind = table_kind(path, options.what)
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if kind == "stata":
        return formats.stata_row_count(path, options.what)
    if kind == "ipums":
        return ipums.row_count(path, options)
    if kind == "excel":
        return formats.excel_row_count(path, options)
    lines = 0
    try:
        with compression.open_bytes(path) as handle:
            while block := handle.read(1 << 24):
                lines += block.count(b"\n")
    except compression.ERRORS as exc:
        raise _read_failure(exc, path, kind, None, options)
    if at_least is not None and lines <= at_least:
        return lines  # an upper bound of the rows, enough to know they fit
    return sum(len(chunk) for chunk in iter_chunks(path, 1_000_000, options))


def canonical_options(path: str, options: TableOptions) -> TableOptions:
    """The options as they identify a reading. A value that only says what the file says
    by itself is left out. Such are --sep ',' on a file whose header line uses ',', --sheet
    naming the first sheet, --header-row naming the row that would be taken anyway, and an
    encoding given to a workbook. So a run resumed with it typed is the same run."""
    kind = table_kind(path, options.what)
    found = TableOptions(role=options.role)
    if kind == "csv":
        try:
            utf8 = reads_as_utf8(path, options.encoding)
        except compression.ERRORS as exc:
            raise _read_failure(exc, path, kind, None, options)
        if not utf8:
            found = replace(found, encoding=options.encoding)
        if options.sep is not None and options.sep != _own(
            lambda: csv_layout(path, replace(options, sep=None)).sep
        ):
            found = replace(found, sep=options.sep)
        if options.header_row is not None and options.header_row - 1 != _own(
            lambda: csv_layout(path, replace(options, header_row=None)).skip_rows
        ):
            found = replace(found, header_row=options.header_row)
    elif kind == "excel":
        if options.sheet is not None and options.sheet != _own(
            lambda: _sheet_of(path, replace(options, sheet=None, header_row=None)).sheet
        ):
            found = replace(found, sheet=options.sheet)
        if options.header_row is not None and options.header_row != _own(
            lambda: _sheet_of(path, replace(options, header_row=None)).header_row
        ):
            found = replace(found, header_row=options.header_row)
    elif kind == "ipums":
        found = replace(found, ddi=ipums.canonical(path, options))
    return found  # Parquet and Stata: nothing to choose


def reads_as_utf8(path: str, encoding: str) -> bool:
    """Whether a CSV file reads in `encoding` as it reads in UTF-8, the default: UTF-8 with
    or without a byte-order mark, or a file of ASCII bytes in an encoding that keeps ASCII
    (cp1252, latin-1, ...; not utf-16)."""
    name = canonical_encoding(encoding)
    if name in ("utf-8", "utf-8-sig"):
        return True
    sample = 'occ1,;|\t\r\n"azAZ09 '
    try:
        if sample.encode(name) != sample.encode("ascii"):
            return False
    except (UnicodeError, LookupError):
        return False
    with compression.open_bytes(path) as handle:
        while block := handle.read(1 << 24):
            if not block.isascii():
                return False
    return True


def _own(what_the_file_says):
    """What a file gives by itself, or None where it gives nothing (a tie of separators)."""
    try:
        return what_the_file_says()
    except (UserError, pd.errors.EmptyDataError):
        return None


def _sheet_of(path: str, options: TableOptions):
    sheet = formats.ExcelSheet(path, options)
    sheet.close()
    return sheet


def require_columns(frame: pd.DataFrame, columns: list, path: str, flag_for: dict) -> None:
    for column in columns:
        if column not in frame.columns:
            raise missing_column(column, frame.columns, path, flag_for.get(column, "column"))


def missing_column(column: str, have, path: str, flag: str) -> UserError:
    """One line for a column a file lacks: the names it has (a name with surrounding spaces
    quoted, so the space shows), and the one that differs by those spaces only, if any.
    Column names are kept as the file writes them (a worksheet's header cells come
    stripped)."""
    names = [str(c) for c in have]
    shown = ", ".join(repr(n) if n != n.strip() or not n else n for n in names[:12])
    near = [n for n in names if n.strip() == str(column).strip()]
    hint = (
        f"; the file's {near[0]!r} differs by spaces: pass {flag} {near[0]!r}"
        if near and flag.startswith("--")
        else ""
    )
    return UserError(f"{path}: no column {column!r} ({flag}); the file has: {shown}{hint}")


def column_names(path: str) -> Optional[list]:
    """The column names of a Parquet, Excel, Stata or IPUMS file, read without its rows; None where
    they cannot be read that way (a caller then reads the whole file)."""
    try:
        kind = table_kind(path)
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(path).names
        if kind == "excel":
            sheet = formats.ExcelSheet(path, TableOptions())
            try:
                return sheet.header
            finally:
                sheet.close()
        if kind == "stata":
            with pd.read_stata(path, iterator=True) as reader:
                return list(reader.variable_labels())
        if kind == "ipums":
            return ipums.names(path, TableOptions())
    except Exception:  # unreadable as such: a whole read decides
        return None
    return None


FILE_LABEL_KEY = (
    "mixer_provenance"  # a Parquet output's key-value metadata (mixer.data.tables.writing)
)


def file_label(path: str) -> Optional[str]:
    """The label a file carries in its own metadata, as mixer.data.tables.writing.OutputWriter
    writes it (a Parquet key, Stata's data label); None where the format has no room
    (CSV, Excel) or the file has none."""
    kind = table_kind(path)
    if kind == "parquet":
        import pyarrow.parquet as pq

        metadata = pq.read_schema(path).metadata or {}
        value = metadata.get(FILE_LABEL_KEY.encode())
        return value.decode("utf-8") if value else None
    if kind == "stata":
        with formats._stata_reader(path, "--output") as reader:
            return reader.data_label or None
    return None

"""Writing: frames into files (CSV, Parquet, Excel .xlsx, Stata .dta, by extension). Each is
written to a temporary file beside the output and renamed over it at the end. Here too is
the one step that names an output's columns (output_names), used by every table the tool writes
for a user (predict.py --output, --to-check, --audit). It runs after each format's own renaming
(Stata's letters, digits and _ in 32 characters; a worksheet's header without surrounding
spaces). So the rule that keeps an input column out of a prediction's place (code_1_input)
holds in the file itself, whatever the format. No torch here.
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError, WriteFailed, first_line
from mixer.core.io import write_target
from mixer.data.tables import compression, csv_text, formats
from mixer.data.tables.guards import NONE, Guards
from mixer.data.tables.reading import (
    FILE_LABEL_KEY,
    PARQUET_SUFFIXES,
    as_text,
    count_rows,
    table_kind,
)

# what evaluate.py reads as a prediction: code_k, or <head>_code_k with several heads
PREDICTION_COLUMN = re.compile(r"^(?:(?P<head>[A-Za-z0-9]+)_)?code_(?P<k>\d+)$")
# each format's own renaming of a column name, a suffix kept whole (CSV and Parquet: none)
FORMAT_RENAMING = {"stata": formats.stata_name, "excel": formats.excel_name}


def _as_written(name, suffix: str = "") -> str:
    return str(name) + suffix


def output_names(kind: str, inputs, outputs, read_back: Optional[re.Pattern] = None) -> list:
    """The column names of a file of `kind` holding the input's columns, then the tool's:
    each name as the format writes it, then one rule on clashes. The tool's columns keep
    their names. An input column is renamed <name>_input (again while that is taken) when
    its name would be one of them, or evaluate.py would read it as a prediction, or it
    matches `read_back`. evaluate.py reads a code_k or <head>_code_k as a prediction; with
    several heads, whose columns are all prefixed, a plain code_k stays (a validation
    file's own codes). `read_back` holds names the file's own reader takes as the tool's,
    such as an audit's true_code_k. Two input
    columns that the format gives one name: the second gets _2 (_3, ...)."""
    rename = FORMAT_RENAMING.get(kind, _as_written)
    renamed, used = [], set()
    for name in outputs:  # distinct as given; a format may name two alike (a matrix's codes)
        base, number = rename(name), 2
        name = base
        while name in used:
            name, number = rename(base, f"_{number}"), number + 1
        used.add(name)
        renamed.append(name)
    outputs = renamed
    prefixed = not any(
        (m := PREDICTION_COLUMN.match(n)) and m.group("head") is None for n in outputs
    )

    def read_as_tool(name: str) -> bool:
        if read_back is not None and read_back.match(name):
            return True
        match = PREDICTION_COLUMN.match(name)
        return bool(match) and not (prefixed and match.group("head") is None)

    formatted = [rename(name) for name in inputs]
    reserved = used | set(formatted)  # a new name takes none of the input's own names either
    names = []
    for name in formatted:
        if name in outputs or read_as_tool(name):
            suffixes = ("_input" * k for k in range(1, 1000))
        elif name in used:  # an earlier input column has this name in this format
            suffixes = (f"_{k}" for k in range(2, 1_000_000))
        else:
            suffixes = None
        if suffixes is not None:
            base = name
            while name in reserved or read_as_tool(name):
                name = rename(base, next(suffixes))
        used.add(name)
        reserved.add(name)
        names.append(name)
    return names + outputs


def check_output_path(path: str, file_flag: str, inputs: dict, guards: Guards = NONE) -> str:
    """Refuse, before any work, an output whose directory is missing or that is one of
    the inputs ({flag: path}): the rename at the end would replace it; or one that `guards`
    keep (a filled audit: mixer.audit.guards.GUARDS, passed by the caller). Returns the file
    to write: the path, or a symbolic link's target (the link stays)."""
    if os.path.islink(path):
        target = write_target(path)
        if os.path.splitext(target)[1].lower() != os.path.splitext(path)[1].lower():
            raise UserError(
                f"{file_flag} {path}: a link to {target}, whose suffix differs; "
                "name the file itself"
            )
        path = target
    if not os.path.basename(path) or os.path.isdir(path):
        raise UserError(f"{file_flag} {path}: names a directory; name a file")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(
            f"{file_flag} {path}: directory {directory} does not exist; create it first"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(
            f"{file_flag} {path}: directory {directory} is not writable; write elsewhere"
        )
    for flag, other in inputs.items():
        if other and (
            os.path.realpath(path) == os.path.realpath(other)
            or (os.path.exists(path) and os.path.exists(other) and os.path.samefile(path, other))
        ):
            raise UserError(
                f"{file_flag} {path}: is the {flag} file and would replace it; "
                "write to another file"
            )
    guards.output(path, file_flag)  # what a feature keeps (a filled audit)
    return path


def output_kind(path: str, file_flag: str = "--output") -> str:
    """csv, parquet, excel or stata for a table to write, by extension; refuses a
    kind that is read but not written, and an Excel output without openpyxl."""
    if path.lower().endswith((".xlsm",) + formats.OLD_EXCEL_SUFFIXES):
        raise UserError(f"{file_flag} {path}: Excel output is written as .xlsx; name it so")
    suffix = compression.by_name(path)
    if suffix is not None:  # named by its name alone: the file may not exist yet
        inner = compression.inner_name(path).lower()
        if suffix not in compression.WRITTEN or inner.endswith(
            PARQUET_SUFFIXES + formats.EXCEL_SUFFIXES + formats.STATA_SUFFIXES
        ):
            raise UserError(
                f"{file_flag} {path}: a compressed output is written as gzip'd CSV only "
                f"(.csv.gz); name it so, or write .parquet, which compresses itself"
            )
        return "csv"
    kind = table_kind(path, file_flag)
    if kind == "excel":
        formats.openpyxl_module(file_flag, path)
    if kind == "ipums":
        raise UserError(
            f"{file_flag} {path}: IPUMS fixed-width extracts are read, not written; name an "
            "output .csv, .parquet, .xlsx or .dta"
        )
    return kind


def check_fits_excel(
    output: str,
    source: str,
    options: TableOptions,
    file_flag: str = "--output",
    per_row: int = 1,
    why: str = "",
) -> None:
    """An .xlsx output of `per_row` rows per input row (--alternatives K: K, `why` naming it):
    refused before any work when the input (read with `options`) gives more rows than a
    sheet holds."""
    source_flag = options.what
    if output_kind(output, file_flag) != "excel":
        return
    if per_row <= 1 and table_kind(source, source_flag) == "excel":
        return  # a sheet's rows fit a sheet: not counted (openpyxl reads some 5,000 rows/s)
    limit = formats.EXCEL_MAX_ROWS - 1
    rows = count_rows(source, options, at_least=limit // per_row)
    if rows * per_row > limit:
        has = f"{rows:,} rows" + (f", {rows * per_row:,} {why}" if per_row > 1 else "")
        raise UserError(
            f"{file_flag} {output}: {source_flag} {source} has {has}, more than an Excel "
            f"sheet holds ({limit:,} under the header); write .parquet or .dta instead"
        )


EXACT_WHOLE = 10**15  # whole numbers below this are exact in Excel (15 digits) and Stata doubles


def _too_long_for_numbers(series: pd.Series) -> bool:
    if not pd.api.types.is_integer_dtype(series.dtype):
        return False
    values = series.dropna()
    return bool(len(values)) and bool((values.abs() >= EXACT_WHOLE).any())


def sheet_columns(frame: pd.DataFrame, kinds: Optional[list] = None) -> list:
    """[(name, 'number' | 'text', numpy values)] for Excel and Stata: numbers (and
    booleans as 0/1) stay numbers with NaN for blanks, everything else is text as
    `as_text` writes it. So are whole numbers of 16 digits or more (record ids), which
    neither format's numbers hold exactly. `kinds` (the first chunk's) keeps later
    chunks alike."""
    columns = []
    for i, name in enumerate(frame.columns):
        series = frame.iloc[:, i]
        numeric = (
            pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)
        ) and not _too_long_for_numbers(series)
        kind = kinds[i] if kinds is not None else ("number" if numeric else "text")
        if kind == "number":
            if _too_long_for_numbers(series):
                raise UserError(
                    f"column {name!r} holds whole numbers of 16 digits or more, which "
                    "the format's numbers do not hold exactly; write .csv or .parquet"
                )
            try:
                values = pd.to_numeric(
                    series.astype(object).where(series.notna(), None), errors="raise"
                ).to_numpy(dtype=np.float64, na_value=np.nan)
            except (ValueError, TypeError):
                raise UserError(
                    f"column {name!r} holds numbers in the first rows and text later; "
                    "write .csv or .parquet"
                )
        else:
            values = as_text(series).to_numpy(dtype=object)
        columns.append((name, kind, values))
    return columns


class OutputWriter:
    """Writes chunks to a temp file beside the output, renamed over it at the end:
    CSV (UTF-8), Parquet, Excel (.xlsx) or Stata (.dta), by extension. Each chunk is the
    input's columns (if any) and the tool's, named once by output_names. `label`: a short
    text the file carries in its own metadata where the format has room (Parquet's key
    FILE_LABEL_KEY, Stata's 80-character data label; CSV and Excel have none). `stamp`: the
    time an Excel or Stata file states (file_time).

    `parts`: the directory of a job that resumes after a kill (mixer.prediction.resume).
    It keeps the columns' names (columns.json) and, but for a CSV (whose temp file grows a
    chunk at a time and is cut back to the chunks completed), each chunk's rows as the
    format takes them, in a part file (part-<k>.arrow, Arrow's own format, exact) written
    whole before the chunk counts as done. The file is written from the parts read back,
    the same way for a job run through and one resumed (resume()), so both give the same
    bytes; the rows themselves stream on to the format's writer, never held whole."""

    def __init__(
        self,
        path: str,
        file_flag: str = "--output",
        log=None,
        label: Optional[str] = None,
        tmp: Optional[str] = None,
        parts: Optional[str] = None,
        stamp: Optional[float] = None,
        guards: Guards = NONE,
    ):
        self.kind = output_kind(path, file_flag)
        self.path = check_output_path(path, file_flag, {}, guards)
        self.file_flag = file_flag
        self.tmp = tmp or os.path.join(  # named after the file written (a link's target)
            os.path.dirname(os.path.abspath(self.path)),
            f".tmp-{os.path.basename(self.path)}.{os.getpid()}",
        )
        self.parquet = self.kind == "parquet"
        self.gzip = compression.by_name(path) is not None  # a .csv.gz (output_kind)
        self.writer = None
        self.sheet = None  # Excel or Stata: formats.ExcelWriter / StataWriter
        self.kinds = None
        self.names = None  # the columns as written, from the first chunk
        self.labels = []  # per column, the name given where the one written differs, else ''
        self.renamed = []  # (name given, name written)
        self.rows = 0
        self.log = log
        self.label = label
        self.parts, self.chunks = parts, 0
        self.stamp = stamp
        self.spelled = csv_text.Spelled()  # a CSV's floats, each spelled once (csv_text)

    def resume(self, chunks: int, rows: int) -> None:
        """Go on after the `chunks` chunks (`rows` rows) that an earlier job on the same
        parts completed: a CSV's temp file holds them already; another kind's file is
        written anew from their part files, as they were written."""
        columns = os.path.join(self.parts, COLUMNS)
        if chunks and os.path.exists(columns):
            with open(columns, encoding="utf-8") as handle:
                saved = json.load(handle)
            self.names, self.labels = saved["names"], saved["labels"]
            self.renamed = [(old, new) for old, new in zip(self.labels, self.names) if old]
        if self.kind == "csv":
            self.chunks, self.rows = chunks, rows
            return
        for number in range(chunks):
            path = self._part(number)
            if not os.path.exists(path):
                raise UserError(
                    f"{self.file_flag} {self.path}: the unfinished run's parts ({self.parts}) lack "
                    f"{os.path.basename(path)}; pass --restart to start over"
                )
            self._add(_read_part(path))
            self.chunks += 1

    def write(
        self,
        outputs: pd.DataFrame,
        inputs: Optional[pd.DataFrame] = None,
        source_rows=None,
        keyed: Optional[tuple] = None,
    ) -> None:
        """One chunk: `inputs` (the input's columns, row for row) beside `outputs`;
        `source_rows`: each row's row in the input, for messages, where the rows are not the
        input's own in order (a check list). `keyed`: (a row per distinct key, each row's key),
        of which `outputs` is the rows: a CSV spells the outputs once per key (csv_text)."""
        frame = (
            outputs
            if inputs is None
            else pd.concat([inputs.reset_index(drop=True), outputs.reset_index(drop=True)], axis=1)
        )
        if self.names is None:
            given = [str(c) for c in frame.columns]
            self.names = output_names(
                self.kind, [] if inputs is None else inputs.columns, outputs.columns
            )
            self.labels = [old if old != new else "" for old, new in zip(given, self.names)]
            self.renamed = [(old, new) for old, new in zip(self.labels, self.names) if old]
            if self.parts is not None:
                _write_whole(
                    os.path.join(self.parts, COLUMNS),
                    lambda handle: handle.write(
                        json.dumps({"names": self.names, "labels": self.labels}).encode("utf-8")
                    ),
                )
        frame = frame.set_axis(self.names, axis=1)
        if self.kind == "csv":  # a gzip'd one: a gzip member a chunk, cut back as a CSV is
            by_key = None if keyed is None or inputs is None else (inputs, *keyed)
            text = csv_text.text(frame, header=not self.rows, spelled=self.spelled, keyed=by_key)
            with open(self.tmp, "ab" if self.rows else "wb") as handle:
                handle.write(compression.gzip_member(text) if self.gzip else text)
            self.rows += len(frame)
        else:
            table = self._table(frame)
            if self.parts is not None:  # kept, and written as a resumed job reads it back
                path = self._part(self.chunks)
                _write_whole(path, lambda handle: _write_part(table, handle))
                table = _read_part(path)
            self._add(table, source_rows)
        self.chunks += 1

    def _table(self, frame: pd.DataFrame):
        """A chunk as the format takes it, an Arrow table: Parquet's columns in the first
        chunk's types; Excel's and Stata's numbers (float64) and texts (sheet_columns)."""
        import pyarrow as pa

        if self.kind in ("excel", "stata"):
            try:
                columns = sheet_columns(frame, self.kinds)
            except UserError as exc:
                raise UserError(
                    f"{self.file_flag} {self.path}: rows {self.rows + 1}-{self.rows + len(frame)}: {exc}"
                )
            return pa.Table.from_arrays(
                [
                    pa.array(values, type=pa.float64() if kind == "number" else pa.string())
                    for _, kind, values in columns
                ],
                names=[name for name, _, _ in columns],
            )
        schema = self.writer.schema if self.writer is not None else None
        try:  # later chunks take the first one's schema (a column may be all blank in one)
            table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserError(
                f"{self.path}: rows {self.rows + 1}-{self.rows + len(frame)} do not "
                f"fit the column types of the rows before them ({first_line(exc, 300)})"
            )
        if schema is None:
            # Arrow types only: pandas would record dtypes such as
            # 'list<element: int64>[pyarrow]' that it cannot read back itself
            schema = table.schema.remove_metadata()
            if self.label:
                schema = schema.with_metadata({FILE_LABEL_KEY: self.label})
        return table.replace_schema_metadata(schema.metadata)

    def _add(self, table, source_rows=None) -> None:
        """A chunk's table (_table) to the format's writer."""
        import pyarrow as pa

        if self.kind in ("excel", "stata"):
            columns = [
                (
                    name,
                    "number" if table.schema.field(i).type == pa.float64() else "text",
                    table.column(i).to_numpy(zero_copy_only=False),
                )
                for i, name in enumerate(table.column_names)
            ]
            self.kinds = [kind for _, kind, _ in columns]
            if self.sheet is None:
                if self.kind == "excel":
                    self.sheet = formats.ExcelWriter(
                        self.tmp, self.path, self.file_flag, file_time(self.stamp)
                    )
                else:
                    self.sheet = formats.StataWriter(
                        self.tmp,
                        self.path,
                        self.file_flag,
                        self.labels,
                        data_label=self.label or "",
                        stamp=file_time(self.stamp),
                    )
            if self.kind == "excel" and source_rows is not None:  # its messages name rows
                self.sheet.write(columns, source_rows)
            else:
                self.sheet.write(columns)
        else:
            import pyarrow.parquet as pq

            if self.writer is None:
                self.writer = pq.ParquetWriter(self.tmp, table.schema)
            self.writer.write_table(table)
        self.rows += table.num_rows

    def _part(self, number: int) -> str:
        return os.path.join(self.parts, PART.format(number))

    def commit(self, beside: Optional[dict] = None) -> None:
        """The file renamed into place, with `beside` ({path: text}: files that describe it,
        its provenance sidecar) as one step after it (commit_files)."""
        try:
            if self.writer is not None:
                self.writer.close()
            if self.sheet is not None:
                self.sheet.close()
        except OSError as exc:  # Excel and Stata write the whole file here
            raise write_failed(self.file_flag, self.path, beside, exc) from exc
        if not os.path.exists(self.tmp):
            raise UserError(f"{self.path}: the input has no rows; nothing to predict")
        commit_files(self._kept(self.tmp), self.path, self.file_flag, beside)
        if self.renamed and self.log is not None:
            labels = " (the old names are the variable labels)" if self.kind == "stata" else ""
            self.log(
                f"{self.file_flag} {self.path}: columns written under other names: "
                + ", ".join(f"{old!r} -> {new}" for old, new in self.renamed)
                + labels
            )

    def _kept(self, tmp: str) -> str:
        """The file to rename into place. A resumable job's CSV is its parts' own file: a link
        to it is renamed instead, so that the parts stay whole until the job's journal is
        removed after every output is in place, and a kill while the outputs are committed
        costs no chunk (the same command commits them again)."""
        if self.parts is None or self.kind != "csv":
            return tmp
        final = tmp + ".final"
        if os.path.exists(final):  # a killed commit's
            os.unlink(final)
        try:
            os.link(tmp, final)
        except OSError:  # a file system without hard links: the parts' file moves, as before
            return tmp
        return final

    def close(self) -> None:
        """Stop writing, the parts kept (a job that will be continued): a CSV's temp file;
        another kind's file, which the next job writes anew from the parts, is dropped."""
        if self.parts is not None and self.kind != "csv":
            self.abort()
        elif self.writer is not None:
            self.writer.close()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.sheet is not None:
            self.sheet.abort()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


COLUMNS = "columns.json"  # the columns' names as written, and as given (OutputWriter's parts)
PART = "part-{}.arrow"  # a chunk's rows as the format takes them (OutputWriter's parts)


def file_time(stamp: Optional[float] = None) -> float:
    """The time a written file states (an Excel workbook's creation, a Stata file's time
    stamp), in seconds since the epoch: `stamp` where given (a resumed job: its first run's
    start), else SOURCE_DATE_EPOCH where set (the reproducible-builds convention: two runs
    then give the same bytes), else now."""
    if stamp is not None:
        return float(stamp)
    fixed = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if fixed:
        try:
            return float(int(fixed))
        except ValueError:
            raise UserError(
                f"SOURCE_DATE_EPOCH={fixed}: not a whole number of seconds since 1970; "
                "set it to one (e.g. $(date +%s)) or unset it"
            )
    import time

    return time.time()


def _write_whole(path: str, write) -> None:
    """A file that is there whole or not at all: written under another name, then renamed."""
    with open(path + ".new", "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())  # on the disk before a resume journal names it
    os.replace(path + ".new", path)


def _write_part(table, handle) -> None:
    import pyarrow as pa

    compression = "lz4" if pa.Codec.is_available("lz4") else None
    with pa.ipc.new_file(
        handle, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)
    ) as out:
        out.write_table(table)


def _read_part(path: str):
    import pyarrow as pa

    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()


def commit_files(tmp: str, path: str, file_flag: str, beside: Optional[dict] = None) -> None:
    """Rename a written temp file over `path` and write the files that describe it (`beside`,
    {path: text}, e.g. its provenance sidecar) under temporary names renamed after it, as one
    step (mixer.core.io.replace_together): a failure leaves the old file and the old sidecar
    together, and is one line (UserError)."""
    import tempfile

    from mixer.core.io import current_umask, replace_together

    pairs, temps = [(tmp, path)], []
    try:
        for other, text in (beside or {}).items():
            fd, other_tmp = tempfile.mkstemp(
                prefix=f".tmp-{os.path.basename(other)}.",
                dir=os.path.dirname(os.path.abspath(other)),
            )
            temps.append(other_tmp)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(other_tmp, 0o666 & ~current_umask())
            pairs.append((other_tmp, other))
        replace_together(pairs)
    except OSError as exc:
        raise write_failed(file_flag, path, beside, exc) from exc
    finally:
        for other_tmp in temps:
            if os.path.exists(other_tmp):
                os.unlink(other_tmp)


def write_failed(file_flag: str, path: str, beside: Optional[dict], exc: OSError) -> UserError:
    """A file written whole at the end that could not be written or renamed into place
    (WriteFailed, as mixer.core.io.writing raises it): it and the files beside it are as before."""
    from mixer.core.io import disk_full

    reason = disk_full(exc) or first_line(exc)
    kept = (
        f"{path} and {', '.join(os.path.basename(p) for p in beside)} are"
        if beside
        else f"{path} is"
    )
    return WriteFailed(file_flag, path, reason, kept)


def write_table(
    frame: pd.DataFrame,
    path: str,
    file_flag: str = "--output",
    log=None,
    stamp: Optional[float] = None,
    guards: Guards = NONE,
) -> None:
    """A whole frame written at once, its columns named already (output_names gives each
    the format's spelling only): the file, or on any failure nothing (an audit, a
    simulated hand check). `stamp`: the time an Excel or Stata file states (file_time);
    `guards`: the files it may not replace (check_output_path)."""
    writer = OutputWriter(path, file_flag, log, stamp=stamp, guards=guards)
    try:
        writer.write(frame)
        writer.commit()
    except BaseException:
        writer.abort()
        raise

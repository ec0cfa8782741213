"""IPUMS fixed-width extracts: a .dat or .dat.gz data file with its DDI codebook (the .xml
IPUMS delivers beside it, or the one a role's --ddi option names), read through ipumspy,
the optional extra mixer[ipums] (docs/formats.md, "IPUMS extracts").

The codebook gives each variable's name, columns and type; ipumspy's chunked reader
(readers.read_microdata_chunked) reads the rows, decompressing a .dat.gz itself. Each chunk
comes with the codebook's types, Arrow-backed as a Stata file's chunks are: an integer
variable is integers in every chunk (so its leading zeros are gone, as in any column of
numbers, and mixer.data.labels.normalise restores them where the code system's width is
known), a variable with implied decimals is floats, a character variable text without the
spaces that pad it. Value labels are not applied: a variable gives its stored values (the
code, not its label), as a Stata file's do. A hierarchical extract is refused in one line.
mixer.data.tables.reading reads extracts through this module; a prepared run's fingerprint
and predict.py's resume journal ask it for the codebook's path (ddi_path), which they hash.
"""

from __future__ import annotations

import gzip
import os
import warnings
from dataclasses import replace
from typing import Iterator, Optional

import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError, first_line
from mixer.data.tables import compression

SUFFIX = ".dat"  # what IPUMS names a fixed-width extract: usa_00001.dat, gzip'd .dat.gz
NAME = "IPUMS fixed-width (.dat with its DDI codebook)"


def require_ipumspy(path: str, options: TableOptions) -> None:
    """Refuse, before any work, an extract to read without ipumspy: one line naming the extra."""
    from mixer.core.extras import require

    require("ipums", f"{options.what} {path} (an IPUMS fixed-width extract)")


def ddi_path(path: str, options: TableOptions) -> str:
    """The codebook of an extract: the role's --ddi option, else the .xml of the data file's
    name beside it (usa_00001.dat.gz -> usa_00001.xml), as IPUMS delivers both."""
    if options.ddi:
        if not os.path.isfile(options.ddi):
            raise UserError(
                f"{options.flag('ddi')} {options.ddi}: no such file; name the extract's DDI "
                "codebook (the .xml IPUMS delivers with the data)"
            )
        return options.ddi
    stem = path[: -len(".gz")] if path.lower().endswith(".gz") else path
    stem = stem[: -len(".dat")]
    for candidate in (stem + ".xml", stem + ".xml.gz"):
        if os.path.isfile(candidate):
            return candidate
    raise UserError(
        f"{options.what} {path}: an IPUMS fixed-width extract is read with its DDI codebook, and "
        f"{stem}.xml is not beside it; download the extract's codebook (DDI, .xml) into that "
        f"folder or name it with {options.flag('ddi')}"
    )


def codebook(path: str, options: TableOptions):
    """The extract's codebook (ipumspy.ddi.Codebook), checked: readable as a DDI, rectangular."""
    require_ipumspy(path, options)
    if not path.endswith((SUFFIX, SUFFIX + ".gz")):  # ipumspy goes by the name, lower case
        raise UserError(
            f"{options.what} {path}: an IPUMS extract is read by its name, .dat or .dat.gz in "
            "lower case: rename it so"
        )
    where = ddi_path(path, options)
    stat = os.stat(where)
    book = _read_ddi(os.path.abspath(where), stat.st_size, stat.st_mtime_ns)
    if isinstance(book, Exception):
        flag = options.flag("ddi") if options.ddi else f"{options.what} {path}: its codebook"
        raise UserError(
            f"{flag} {where}: cannot read it as an IPUMS DDI codebook ({first_line(book, 200)}); "
            f"name the .xml IPUMS delivered with the extract ({options.flag('ddi')})"
        )
    structure = book.file_description.structure
    if structure != "rectangular":
        kinds = ", ".join(book.file_description.rectypes) or "several"
        raise UserError(
            f"{options.what} {path}: a {structure} IPUMS extract (record types {kinds}), and "
            "fixed-width extracts are read rectangular only; request the extract again with "
            "the rectangular structure (a row per person), or as CSV"
        )
    if not book.data_description:
        raise UserError(f"{where}: the codebook describes no variables; name the extract's own")
    return book


_BOOKS: dict = {}


def _read_ddi(path: str, size: int, mtime: int):
    """A codebook parsed once per file version (a job asks for it at its checks and reads)."""
    key = (path, size, mtime)
    if key not in _BOOKS:
        from xml.etree.ElementTree import ParseError

        from ipumspy import readers

        try:
            with warnings.catch_warnings():  # the citation note, said once in docs/formats.md
                warnings.simplefilter("ignore")
                _BOOKS[key] = readers.read_ipums_ddi(path)
        except (ParseError, AttributeError, KeyError, ValueError, TypeError, OSError) as exc:
            _BOOKS[key] = exc
    return _BOOKS[key]


def names(path: str, options: TableOptions) -> list:
    """The extract's column names, from its codebook, in the file's order."""
    return [variable.name for variable in codebook(path, options).data_description]


def _arrow_type(variable):
    import pyarrow as pa

    kind = variable.python_type
    if kind is int:
        return pa.int64()
    if kind is float:
        return pa.float64()
    return pa.string()


def chunks(path: str, chunk_size: int, options: TableOptions) -> Iterator[pd.DataFrame]:
    """The rows in chunks of chunk_size (the last may be smaller), each column with the
    codebook's type, Arrow-backed, in the codebook's character set."""
    import pyarrow as pa

    book = codebook(path, options)
    from ipumspy import readers

    schema = pa.schema([pa.field(v.name, _arrow_type(v)) for v in book.data_description])
    shifts = {v.name: 10**v.shift for v in book.data_description if v.shift}
    # every variable read as its text, typed here by the codebook: ipumspy types each chunk by
    # its values (a chunk of an integer variable with a blank cell would come back float) and
    # pandas' reader would take a cell "NA" or "NULL" (an occupation as written) for a blank
    as_text = {v.name: pd.StringDtype() for v in book.data_description}
    raw = replace(book, data_description=[replace(v, shift=None) for v in book.data_description])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = readers.read_microdata_chunked(
                raw, filename=path, chunksize=chunk_size, dtype=as_text, na_filter=False
            )
            for chunk in reader:
                yield _typed(chunk.reset_index(drop=True), schema, shifts)
    except UserError:
        raise
    except (ValueError, TypeError, OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        raise UserError(
            f"{options.what} {path}: cannot read it as {NAME} ({first_line(exc, 300)}); check that "
            f"the codebook is the extract's own ({options.flag('ddi')})"
        )


def _typed(chunk: pd.DataFrame, schema, shifts: dict) -> pd.DataFrame:
    """A chunk of text columns as the codebook types them: blank cells missing, integers,
    implied decimals applied (IPUMS writes 12.5 with one implied decimal as 125)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for field in schema:
        text = pa.array(chunk[field.name].astype(object), type=pa.string(), from_pandas=True)
        if pa.types.is_string(field.type):
            columns.append(text)
            continue
        stripped = pc.utf8_trim_whitespace(text)
        blank = pc.equal(stripped, "")
        stripped = pc.if_else(blank, pa.scalar(None, pa.string()), stripped)
        if field.name in shifts:
            values = pc.divide(pc.cast(stripped, pa.float64()), float(shifts[field.name]))
        else:
            values = pc.cast(stripped, field.type)
        columns.append(values)
    table = pa.Table.from_arrays(columns, schema=schema)
    return table.to_pandas(types_mapper=pd.ArrowDtype)


def row_count(path: str, options: TableOptions) -> int:
    """The extract's records: its lines, decompressed where it is gzip'd."""
    codebook(path, options)  # an extract without its codebook is refused here too
    lines, last = 0, b"\n"
    with compression.open_bytes(path) as handle:
        while block := handle.read(1 << 24):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def canonical(path: str, options: TableOptions) -> Optional[str]:
    """The --ddi option as it identifies a reading: None where it names the codebook found
    beside the extract anyway."""
    if not options.ddi:
        return None
    try:
        beside = ddi_path(path, TableOptions(role=options.role))
    except UserError:
        return options.ddi
    same = os.path.exists(options.ddi) and os.path.samefile(beside, options.ddi)
    return None if same else options.ddi

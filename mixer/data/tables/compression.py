"""Compressed tables: which compression a file has, and its content as one byte stream.

A table may come compressed (IPUMS delivers every extract gzip'd: `usa_00001.csv.gz`,
`.dta.gz`, `.dat.gz`). gzip, bzip2 and xz are read as they arrive, decompressed while the
reader reads (gzip by `isal` where it is installed, about 3.6 times the standard library's
`gzip` module, else by `gzip`; bzip2 and xz by the standard library). The compression is
known by the file's first bytes (a census.csv that is gzip'd), or by its name where the file
does not exist yet (an output); the table's own kind by its name without the compression's
suffix (`census.csv.gz` is CSV, `usa.dta.gz` Stata). zstd and zip are not read: one line says
what to do. An output named `.csv.gz` is written as gzip members, one per chunk
(`gzip_member`): members one after another are one gzip file, so a resumed job's file is
cut back to its chunks completed and goes on, as a plain CSV's. No torch here.
"""

from __future__ import annotations

import lzma
import os
import zlib
from typing import BinaryIO, Optional

# a compressed file's suffixes and its first bytes
MAGIC = {
    ".gz": b"\x1f\x8b",
    ".bz2": b"BZh",
    ".xz": b"\xfd7zXZ\x00",
    ".zst": b"\x28\xb5\x2f\xfd",
    ".zip": b"PK\x03\x04",
}
NAMES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".zip": "zip"}
READ = (".gz", ".bz2", ".xz")  # decompressed while read; .zst and .zip are refused
PANDAS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz"}  # pandas' names (read_stata's compression)
WRITTEN = (".gz",)  # an output named .csv.gz is written gzip'd

# what follows bzip2's "BZh1".."BZh9": a block (pi's digits) or an empty stream's end
BZIP2_BLOCKS = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")
# what reading a damaged or cut-short compressed file raises (a plain file's read: OSError)
ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)
try:
    from isal.isal_zlib import error as _isal_error

    ERRORS += (_isal_error,)
except ImportError:  # gzip's own, then
    pass
GZIP_LEVEL = 1  # an output's: isal's level 1 and zlib's level 1 are the fast ones


def by_name(path: str) -> Optional[str]:
    """The compression suffix a path ends with (.gz, .bz2, .xz, .zst, .zip), or None."""
    lower = str(path).lower()
    for suffix in MAGIC:
        if lower.endswith(suffix):
            return suffix
    return None


def by_content(path: str) -> Optional[str]:
    """The compression of a file by its first bytes (a census.csv that is gzip'd), or None
    for a file that is not compressed or does not exist. A zip file is not taken by its
    bytes alone: a workbook (.xlsx) is one."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        head = handle.read(10)
    for suffix, magic in MAGIC.items():
        if suffix == ".zip" or not head.startswith(magic):
            continue
        # bzip2: BZh1..BZh9, then a block's magic (the digits of pi) or the end of an empty
        # stream's (sqrt(pi)), not a text whose header begins "BZh9" (a column of that name)
        if suffix != ".bz2" or head[3:4].isdigit() and head[4:10] in BZIP2_BLOCKS:
            return suffix
    return None


def compression(path: str) -> Optional[str]:
    """A file's compression: by its first bytes where it exists, else by its name. A file
    named .zip is a zip whatever its bytes (an archive, not a stream)."""
    named = by_name(path)
    if named == ".zip":
        return named
    if os.path.isfile(path):
        return by_content(path)
    return named


def inner_name(path: str) -> str:
    """The path without its compression suffix: what names the table's own kind
    (census.csv.gz -> census.csv)."""
    suffix = by_name(path)
    return str(path)[: -len(suffix)] if suffix else str(path)


def gzip_module():
    """isal's igzip where it is installed (the same interface as gzip, faster), else gzip."""
    try:
        from isal import igzip

        return igzip
    except ImportError:
        import gzip

        return gzip


def open_bytes(path: str) -> BinaryIO:
    """The file's content as a binary stream, decompressed where its first bytes say it is
    gzip, bzip2 or xz; the file itself otherwise. The stream can seek (a compressed one by
    decompressing again from the start when it goes back), as the readers' look at a
    header and at a bad byte need."""
    suffix = by_content(path)
    if suffix == ".gz":
        return gzip_module().open(path, "rb")
    if suffix == ".bz2":
        import bz2

        return bz2.open(path, "rb")
    if suffix == ".xz":
        import lzma

        return lzma.open(path, "rb")
    return open(path, "rb")


def gzip_member(data: bytes) -> bytes:
    """`data` as one gzip member without a time or a name, so the same rows give the same
    bytes; members appended one after another are one gzip file."""
    return gzip_module().compress(data, GZIP_LEVEL, mtime=0)

"""--embeddings FILE as a sink (mixer.prediction.sink.Sink): each row's vector in input order,
and the writer of vectors (.npy, .parquet) that --output's matrices share. Its state
(Sink.state_dict) is its raw file beside the resume journal.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from mixer.audit.guards import GUARDS  # a filled audit: no output replaces it
from mixer.core.errors import UserError
from mixer.prediction.sink import Sink


class EmbeddingSink(Sink):
    """--embeddings FILE: each row's vector, in input order (EmbeddingWriter)."""

    flag, field, usage, reads, rank = (
        "--embeddings",
        "embeddings",
        "--embeddings FILE",
        frozenset({"vectors"}),
        2,
    )

    def __init__(self, job):
        # a job that resumes: the vectors go to a raw file beside the journal, kept over a kill
        raw = job.journal.path("embeddings.raw") if job.journal is not None else None
        self.writer = EmbeddingWriter(job.config.outputs.embeddings, raw=raw)
        self.path = job.config.outputs.embeddings

    def file(self) -> tuple:
        return "--embeddings", self.path

    def add(self, job, part) -> None:
        self.writer.write(part.vectors)

    def state_dict(self) -> dict:
        return self.writer.state()

    def load_state_dict(self, state: dict) -> None:
        self.writer.restore(state)

    def suspend(self) -> None:
        self.writer.suspend()

    def commit(self, job) -> None:
        self.writer.commit()
        print(
            f"wrote {self.writer.rows} embeddings to {job.config.outputs.embeddings}",
            file=sys.stderr,
        )

    def abort(self) -> None:
        self.writer.abort()


class EmbeddingWriter:
    """Embeddings in input order: .npy (float32, rows x hidden) or .parquet (one
    list column 'embedding'), written to a temp file and renamed at the end. raw: in a job
    that resumes, a file beside the resume journal that holds the vectors written so far
    (float32, row after row, for either format: a Parquet file is written from it at the end,
    a row group per chunk as written directly), so that a killed job continues it (state,
    restore). A .npy's rows always go to a raw file, its header before them at the end;
    `rows` > 0 goes on after the rows that file holds (a resumed --output matrix's, cut back
    to them by the journal)."""

    def __init__(
        self,
        path: str,
        flag: str = "--embeddings",
        raw: Optional[str] = None,
        tmp: Optional[str] = None,
        rows: int = 0,
    ):
        from mixer.data.tables.writing import check_output_path

        self.path = check_output_path(path, flag, {}, GUARDS)
        self.flag = flag
        if not path.lower().endswith((".npy", ".parquet", ".pq")):
            raise UserError(f"{flag} {path}: name it .npy or .parquet")
        self.tmp = tmp or os.path.join(  # named after the file written (a link's target)
            os.path.dirname(os.path.abspath(self.path)),
            f".tmp-{os.path.basename(self.path)}.{os.getpid()}",
        )
        self.npy = path.lower().endswith(".npy")
        self.rows, self.width, self.writer = 0, None, None
        self.raw_path = raw or self.tmp + ".raw"
        self.lengths = []  # with `raw`: each chunk's rows (a Parquet file's row groups)
        self.resumes = raw is not None
        # beside a journal: kept as it is, to continue (restore(), or `rows` already there)
        self.raw = (
            open(self.raw_path, "ab" if self.resumes or rows else "wb")
            if self.npy or self.resumes
            else None
        )
        if rows and self.npy:
            self.rows, self.width = rows, os.path.getsize(self.raw_path) // (4 * rows)

    def write(self, vectors) -> None:
        import numpy as np

        self.width = vectors.shape[1]
        if self.npy or self.resumes:  # a write that says why it failed (ndarray.tofile does not)
            self.raw.write(memoryview(np.ascontiguousarray(vectors, dtype=np.float32)).cast("B"))
            self.lengths.append(len(vectors))
            self.raw.flush()  # on disk before the chunk counts as done (a resumed job's journal)
        else:
            self._write_parquet(vectors)
        self.rows += len(vectors)

    def _write_parquet(self, vectors) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        column = pa.FixedSizeListArray.from_arrays(
            pa.array(vectors.astype(np.float32).ravel()), self.width
        )
        table = pa.table({"embedding": column})
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.tmp, table.schema)
        self.writer.write_table(table)

    def state(self) -> dict:
        """The rows written so far (a job that resumes: `raw`), on the disk."""
        self.raw.flush()
        os.fsync(self.raw.fileno())
        return {
            "rows": self.rows,
            "width": self.width,
            "lengths": list(self.lengths),
            "bytes": self.raw.tell(),
        }

    def restore(self, state: dict) -> None:
        """Continue the raw file after the rows `state` counted (what came after them goes)."""
        self.raw.close()
        self.raw = open(self.raw_path, "r+b")
        self.raw.truncate(state["bytes"])
        self.raw.seek(state["bytes"])
        self.rows, self.width, self.lengths = state["rows"], state["width"], list(state["lengths"])

    def suspend(self) -> None:
        if self.raw is not None:
            self.raw.close()

    def commit(self, beside: Optional[dict] = None) -> None:
        if self.npy:
            import shutil

            import numpy as np

            self.raw.close()
            with open(self.tmp, "wb") as out, open(self.raw_path, "rb") as raw:
                np.lib.format.write_array_header_1_0(
                    out,
                    {"descr": "<f4", "fortran_order": False, "shape": (self.rows, self.width or 0)},
                )
                shutil.copyfileobj(raw, out, 1 << 24)
            if not self.resumes:  # beside a journal it stays with the parts until they go (a
                os.unlink(self.raw_path)  # kill while the outputs are committed costs no chunk)
        elif (
            self.resumes
        ):  # the Parquet file from the raw vectors, a row group per chunk as written
            import numpy as np

            self.raw.close()
            if self.rows:
                vectors = np.memmap(
                    self.raw_path, dtype=np.float32, mode="r", shape=(self.rows, self.width)
                )
                start = 0
                for length in self.lengths:
                    self._write_parquet(np.asarray(vectors[start : start + length]))
                    start += length
                del vectors  # the raw file stays with the parts, removed with them
            if self.writer is not None:
                self.writer.close()
        elif self.writer is not None:
            self.writer.close()
        from mixer.data.tables.writing import commit_files

        commit_files(self.tmp, self.path, self.flag, beside)

    def close(self) -> None:
        """Stop writing, the rows kept (a job that will be continued)."""
        if self.raw is not None and not self.raw.closed:
            self.raw.close()

    def abort(self) -> None:
        if self.raw is not None and not self.raw.closed:
            self.raw.close()
        if self.writer is not None:
            self.writer.close()
        for leftover in (self.tmp, self.raw_path):
            if os.path.exists(leftover):
                os.unlink(leftover)

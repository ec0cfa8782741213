"""predict.py's own outputs as sinks (mixer.data.tables.sinks): the output file with its
provenance beside it, the embeddings, the check list and the summary plot, each with the
state a killed job resumes from (Sink.state_dict: the output's is the length of its temp file
or its part files in the journal's folder, the embeddings' their raw file there, the check
list's and the plot's their pieces there). `default_sinks` lists them with the audit's draw (mixer.audit.draw), in their turn;
nothing is registered. Light: the writers are imported when a job opens them, not here.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from mixer.audit.guards import GUARDS  # a filled audit: no output replaces it
from mixer.core.errors import UserError
from mixer.data.tables.sinks import SIDECAR_SUFFIX, is_matrix, is_shaped
from mixer.prediction.sink import Sink


class OutputSink(Sink):
    """--output: the code table beside the input's columns, or one of OccCANINE's shapes, written
    to a temp file (or the resume journal's parts) and renamed at the end with its provenance."""

    flag, field, usage, reads, rank = (
        "--output",
        "output",
        "--output FILE for predictions",
        frozenset({"codes"}),
        1,
    )

    @classmethod
    def cells(cls, config, columns) -> Optional[list]:
        if is_matrix(config):
            return []  # the matrix alone
        return (
            [columns.input_col] if config.outputs.columns == "occcanine" else None
        )  # beside the codes

    @classmethod
    def beside(cls, config) -> dict:
        """Its provenance (mixer.coding.provenance), renamed into place with it."""
        output = config.outputs.output
        return {"--output's provenance": output + SIDECAR_SUFFIX} if output else {}

    @classmethod
    def check(cls, config) -> None:
        from mixer.data.tables.writing import check_fits_excel

        if config.outputs.output:  # before the model loads (its path: the job's check_job)
            check_fits_excel(
                config.outputs.output,
                config.data.input,
                config.table_options("input"),
                per_row=config.coding.alternatives or 1,
                why=f"rows with --alternatives {config.coding.alternatives}",
            )
        check_shape_args(config)  # the output's shape, before the sinks that read the code table

    def __init__(self, job):
        label = None
        if job.coding.provenance is not None:
            from mixer.coding.provenance import label as provenance_label

            label = provenance_label(job.coding.provenance)
        self.journal, self.config, self.chunks = job.journal, job.config, 0
        # beside a journal: the output so far in its parts, by its kind (output.csv, output.npy's
        # rows, part files), cut back to the chunks completed when a killed run is continued
        self.tmp = self.growing = None
        if job.journal is not None:
            kind = output_suffix(job.config.outputs.output)
            self.tmp = job.journal.path("output." + kind)
            self.growing = {"csv": self.tmp, "npy": self.tmp + ".raw"}.get(kind)
        self.writer = output_writer(job.config, job.say, label, job.journal, job.started, self)

    def file(self) -> tuple:
        return "--output", self.config.outputs.output

    def add(self, job, part) -> None:
        if is_shaped(self.config):
            outputs, shaped_inputs = shaped_output(part.chunk, part.predicted, self.config)
            self.writer.write(outputs) if shaped_inputs is None else self.writer.write(
                outputs, inputs=shaped_inputs
            )
        else:
            self.writer.write(part.predicted, inputs=part.chunk)
        self.chunks += 1

    def state_dict(self) -> dict:
        """The chunks and rows written, and the length of the file that grows a chunk at a
        time (a CSV's temp file, a .npy's rows), on the disk before the journal names it."""
        if isinstance(self.writer, EmbeddingWriter):  # a .npy matrix: its rows' raw file
            return {"chunks": self.chunks, **self.writer.state()}
        size = 0
        if self.growing is not None and os.path.exists(self.growing):
            with open(self.growing, "ab") as handle:
                os.fsync(handle.fileno())
                size = os.fstat(handle.fileno()).st_size
        return {"chunks": self.chunks, "rows": self.writer.rows, "size": size}

    def load_state_dict(self, state: dict) -> None:
        """Go on after the chunks a killed run completed: a chunk written after its last
        journal entry goes (the growing file cut back), the part files read back."""
        self.chunks = state["chunks"]
        if isinstance(self.writer, EmbeddingWriter):
            self.writer.restore(state)
            return
        if self.growing is not None:
            if not os.path.exists(self.growing) or os.path.getsize(self.growing) < state["size"]:
                raise UserError(
                    f"--output {self.config.outputs.output}: the unfinished run's parts "
                    f"({self.journal.dir}) lack the output written so far; pass --restart to "
                    "start over"
                )
            with open(self.growing, "ab") as handle:
                handle.truncate(state["size"])
        self.writer.resume(state["chunks"], state["rows"])

    def commit(self, job) -> None:
        coding, beside = job.coding, {}
        if coding.provenance is not None:  # renamed with the file, after it: never beside another
            from mixer.coding.provenance import sidecar_path, sidecar_text

            sidecar = sidecar_path(self.writer.path)
            beside[sidecar] = sidecar_text(
                coding.provenance, {**coding.result(), "rows": self.writer.rows}
            )
        self.writer.commit(beside=beside)
        print(
            f"wrote {self.writer.rows} rows to {self.config.outputs.output}"
            + (f" (what made it: {sidecar})" if coding.provenance is not None else ""),
            file=sys.stderr,
        )

    def abort(self) -> None:
        self.writer.abort()

    def suspend(self) -> None:
        self.writer.close()


SUFFIXES = {"csv": "csv", "npy": "npy", "parquet": "parquet", "excel": "xlsx", "stata": "dta"}


def output_suffix(output: str) -> str:
    """The suffix of --output's temp file in the parts: its kind's (a .npy matrix: npy)."""
    from mixer.data.tables.writing import output_kind

    return SUFFIXES["npy" if output.lower().endswith(".npy") else output_kind(output)]


def output_writer(config, log=None, label=None, journal=None, stamp=None, sink=None):
    """--output's writer: alone, or in the parts beside a journal (`sink`'s tmp and growing
    files), where OutputSink.load_state_dict continues it after a kill."""
    from mixer.data.tables.writing import OutputWriter

    if is_matrix(config) and config.outputs.output.lower().endswith(
        ".npy"
    ):  # its rows: in the parts, cut back to the journal's
        if journal is None:
            return EmbeddingWriter(config.outputs.output, flag="--output")
        return EmbeddingWriter(
            config.outputs.output, flag="--output", tmp=sink.tmp, raw=sink.growing
        )
    if journal is None:
        return OutputWriter(config.outputs.output, log=log, label=label, stamp=stamp, guards=GUARDS)
    return OutputWriter(
        config.outputs.output,
        log=log,
        label=label,
        tmp=sink.tmp,
        parts=journal.dir,
        stamp=journal.started,
        guards=GUARDS,
    )


def check_shape_args(config) -> None:
    """Combinations that have no one meaning, refused before the model loads."""
    if (
        config.outputs.output
        and config.outputs.output.lower().endswith(".npy")
        and not is_matrix(config)
    ):
        raise UserError(
            f"--output {config.outputs.output}: .npy holds a matrix (--what probs, bin or logits); "
            "name it .csv or .parquet"
        )
    if not is_shaped(config):
        return
    flag = (
        "--alternatives"
        if config.coding.alternatives
        else ("--what " + config.outputs.what if is_matrix(config) else "--columns occcanine")
    )
    if not config.outputs.output:
        raise UserError(f"{flag} writes --output FILE; pass one")
    if config.coding.alternatives and is_matrix(config):
        raise UserError("--alternatives writes code sets, --what a matrix: pass one of them")
    if len(config.coding.head) > 1:
        raise UserError(f"{flag} takes one --head, got {' '.join(config.coding.head)}")
    if (
        config.coding.alternatives
        and config.coding.head != ["seq2seq"]
        and config.coding.head != ["flat"]
    ):
        raise UserError(
            "--alternatives are written by the decoder: leave out --head or pass seq2seq"
        )
    if config.outputs.summary_plot:
        raise UserError(f"--summary-plot draws the code table; leave it out with {flag}")
    if is_matrix(config):
        from mixer.prediction.outputs import check_what

        check_what(config.outputs.what, config.coding.head[0])


def shaped_output(chunk, predicted, config) -> tuple:
    """What is written for a chunk, as (outputs, the input's columns beside them or None):
    a matrix (an array for .npy) or OccCANINE's table alone, in input order; mixer's
    alternatives beside each input row, repeated k times."""
    import numpy as np

    if is_matrix(config):
        return (
            predicted.to_numpy()
            if config.outputs.output.lower().endswith(".npy")
            else predicted.reset_index(drop=True)
        ), None
    if config.outputs.columns == "occcanine":
        return predicted.reset_index(drop=True), None
    repeated = chunk.iloc[np.repeat(np.arange(len(chunk)), config.coding.alternatives)]
    return predicted.reset_index(drop=True), repeated.reset_index(drop=True)


class CheckListSink(Sink):
    """--to-check N FILE: the rows a person should check (mixer.data.labels.checking.CheckList)."""

    flag, field, usage, reads, rank = (
        "--to-check",
        "to_check",
        "--to-check N FILE",
        frozenset({"codes"}),
        3,
    )

    @classmethod
    def cells(cls, config, columns) -> Optional[list]:
        return [columns.input_col, columns.language_col, *columns.context_cols]

    @classmethod
    def check(cls, config) -> None:
        from mixer.data.labels.checking import parse_to_check
        from mixer.data.tables.sinks import refuse_shaped

        if not config.outputs.to_check:
            return
        parse_to_check(config.outputs.to_check)
        refuse_shaped(config, "--to-check", "lists codes of the code table")

    def __init__(self, job):
        from mixer.data.labels.checking import CheckList, parse_to_check

        config, columns = job.config, job.columns
        self.count, self.path = parse_to_check(config.outputs.to_check)
        keys = (
            [columns.input_col]
            + ([columns.language_col] if columns.language_col else [])
            + columns.context_cols
        )
        prefix, slots = (
            "" if len(config.coding.head) == 1 else f"{config.coding.head[0]}_",
            config.coding.top_k or job.predictor.default_top_k(),
        )
        self.checklist = CheckList(
            self.count,
            self.path,
            keys,
            prefix,
            slots,
            log=job.say,
            stamp=job.started,
            extra=class_names(job, prefix),
            guards=GUARDS,
        )
        self.journal, self.saved = job.journal, (0, 0)  # its pieces beside a resume journal (state)

    def file(self) -> tuple:
        return "--to-check", self.path

    def add(self, job, part) -> None:
        keep = job.coding.check_rows(part.predicted, job.config.coding.head)
        self.checklist.add(part.chunk, part.predicted, part.inputs, keep=keep)

    def state_dict(self) -> dict:
        from mixer.data.tables.sinks import save_pieces

        self.saved = save_pieces(self.journal, "to-check", self.checklist.parts, self.saved)
        return {
            "pieces": self.saved,
            "rows": self.checklist.rows,
            "described": self.checklist.described,
        }

    def load_state_dict(self, state: dict) -> None:
        from mixer.data.tables.sinks import load_pieces

        self.saved = state["pieces"]
        self.checklist.parts = load_pieces(self.journal, "to-check", self.saved)
        self.checklist.rows, self.checklist.described = state["rows"], state["described"]

    def commit(self, job) -> None:
        from mixer.data.labels.checking import describe

        listed = self.checklist.commit()
        print(self.checklist.empty or describe(self.path, listed, self.count), file=sys.stderr)

    def abort(self) -> None:
        self.checklist.abort()


def class_names(job, prefix: str) -> list:
    """The class columns of the job's crosswalks (mixer.prediction.classes) for one head's
    codes, as the code table names them."""
    if job.classes is None:
        return []
    from mixer.data.labels.crosswalk import class_columns

    slots = job.config.coding.top_k or job.predictor.default_top_k()
    return [name for walk in job.classes.walks for name in class_columns(walk, slots, prefix)]


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


class SummaryPlotSink(Sink):
    """--summary-plot FILE: the first code's probabilities drawn over the whole file."""

    flag, field, reads = "--summary-plot", "summary_plot", frozenset({"codes"})

    @classmethod
    def check(cls, config) -> None:
        if not config.outputs.summary_plot:
            return
        if not config.outputs.summary_plot.lower().endswith((".png", ".pdf", ".svg", ".jpg")):
            raise UserError(
                f"--summary-plot {config.outputs.summary_plot}: name it .png, .pdf, .svg or .jpg"
            )

    def __init__(self, job):
        self.pieces, self.journal, self.saved = [], job.journal, (0, 0)
        self.path = job.config.outputs.summary_plot

    def file(self) -> tuple:
        return "--summary-plot", self.path

    def add(self, job, part) -> None:
        first = "" if len(job.config.coding.head) == 1 else f"{job.config.coding.head[0]}_"
        self.pieces.append(
            part.predicted[[f"{first}code_1", f"{first}prob_1"]].set_axis(
                ["code_1", "prob_1"], axis=1
            )
        )

    def state_dict(self) -> tuple:
        from mixer.data.tables.sinks import save_pieces

        self.saved = save_pieces(self.journal, "summary-plot", self.pieces, self.saved)
        return self.saved

    def load_state_dict(self, state: tuple) -> None:
        from mixer.data.tables.sinks import load_pieces

        self.saved = state
        self.pieces = load_pieces(self.journal, "summary-plot", state)

    def commit(self, job) -> None:
        if self.pieces:
            import pandas as pd

            from mixer.reporting.plot import plot_prediction_summary

            from mixer.core.io import atomic_write, write_target

            frame = pd.concat(self.pieces, ignore_index=True)
            kind = os.path.splitext(self.path)[1].lower().lstrip(".")
            # whole or not at all: a full disk leaves the file as it was (a temp file's name
            # has no suffix to tell the format by)
            atomic_write(
                write_target(self.path),
                lambda tmp: plot_prediction_summary(frame, tmp, fmt=kind, stamp=job.started),
            )


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


def default_sinks() -> list:
    """predict.py's outputs, in their turn (checks, chunks and commits go in this order): the
    output first (its shape is checked with it; the audit names its columns as the output
    does), the check list, the audit's draw (mixer.audit.draw), the embeddings, the plot. Each
    says from the configuration whether the job writes it (`wanted`). predict_file builds the
    job's outputs from this list unless its caller passes its own."""
    from mixer.audit.draw import AuditSink

    return [OutputSink, CheckListSink, AuditSink, EmbeddingSink, SummaryPlotSink]


# ------------------------------------------------------------------ the lists, from the sinks
def wanted(config, sinks) -> list:
    """The sinks of `sinks` this job writes."""
    return [sink for sink in sinks if sink.wanted(config)]


def job_outputs(config, sinks) -> dict:
    """{flag: path} of every file the wanted sinks write, in their turn."""
    return {
        flag: path for sink in wanted(config, sinks) for flag, path in sink.files(config).items()
    }


def written(config, sinks) -> dict:
    """{flag: path} of every file the wanted sinks write, their own and those beside them (the
    output's provenance): the files no output of the job may replace (job_files)."""
    return {
        flag: path
        for sink in wanted(config, sinks)
        for flag, path in {**sink.files(config), **beside(sink, config)}.items()
    }


def beside(sink, config) -> dict:
    """A sink's `beside` (one that does not subclass Sink may lack it: nothing beside)."""
    return sink.beside(config) if hasattr(sink, "beside") else {}


def check_paths(config, sink, outputs: dict) -> None:
    """The files `sink` writes where wanted, before its own check: a directory that exists and
    can be written, none of the job's other files (`outputs`, written(); the files it reads:
    mixer.data.tables.sinks.job_files), none a feature keeps (a filled audit: GUARDS)."""
    from mixer.data.tables.sinks import job_files
    from mixer.data.tables.writing import check_output_path

    for flag, path in sink.files(config).items() if sink.wanted(config) else ():
        check_output_path(path, flag, job_files(config, flag, outputs), GUARDS)


def unrecorded(sinks) -> dict:
    """{field: why} of the configuration's fields that make another file than the output (each
    other sink's flag and its own options): the output's provenance records none of them
    (mixer.coding.provenance.options_part). predict.py's own outputs are always among them."""
    fields = {}
    for sink in {*default_sinks(), *sinks}:
        if sink.field == OutputSink.field:  # the file the provenance describes
            continue
        if sink.field:
            fields[sink.field] = f"another file: {sink.flag}'s"
        options = getattr(sink, "options", ())  # one that does not subclass Sink may lack it
        fields.update((name, f"{sink.flag}'s file alone") for name in options)
    return dict(sorted(fields.items()))


def reads(config, sinks, what: str) -> bool:
    """Whether a wanted sink reads `what` of a chunk: "codes" (the code table) or "vectors"."""
    return any(what in sink.reads for sink in wanted(config, sinks))


def anchor(config, sinks) -> tuple:
    """(flag, path) of the file a job's parts lie beside: that of the wanted sink of the first
    `rank` (--output, else its first other output), or (None, None)."""
    for sink in sorted((s for s in wanted(config, sinks) if s.rank), key=lambda s: s.rank):
        for flag, path in sink.files(config).items():
            return flag, path
    return None, None


def refuse_no_output(config, sinks) -> None:
    """A job that writes no file on its own: one line naming the outputs that do."""
    if anchor(config, sinks)[1] is None:
        usages = [s.usage for s in sorted(sinks, key=lambda s: s.rank) if s.rank and s.usage]
        raise UserError(f"pass {', '.join(usages)}, or several")

"""--output as a sink (mixer.prediction.sink.Sink): the code table beside the input's columns,
or one of OccCANINE's shapes, with its provenance beside it. Its state (Sink.state_dict) is the
length of its temp file, or its part files, in the resume journal's folder. Light: the writers
are imported when a job opens them.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from mixer.audit.guards import GUARDS  # a filled audit: no output replaces it
from mixer.core.errors import UserError
from mixer.data.tables.sinks import SIDECAR_SUFFIX, is_matrix, is_shaped
from mixer.prediction.sink import Sink
from mixer.prediction.sink_embeddings import EmbeddingWriter


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
            self.writer.write(part.predicted, inputs=part.chunk, keyed=part.keyed)
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

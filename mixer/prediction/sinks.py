"""predict.py's own outputs as sinks (mixer.data.sinks): the output file with its
provenance beside it and its resume journal, the embeddings, the check list and the summary
plot. mixer/__init__.py calls register(); the audit's draw is the audit's own
(mixer.audit.guards). Light: the writers are imported when a job opens them, not here.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from mixer.core.errors import UserError
from mixer.data import sinks
from mixer.data.sinks import Sink, is_matrix, is_shaped, job_files


class OutputSink(Sink):
    """--output: the code table beside the input's columns, or one of OccCANINE's shapes, written
    to a temp file (or the resume journal's parts) and renamed at the end with its provenance."""

    @classmethod
    def check(cls, args) -> None:
        from mixer.data.writing import check_fits_excel, check_output_path

        if args.output:  # before the model loads: a wrong path fails at once
            check_output_path(args.output, "--output", job_files(args, "--output"))
            check_fits_excel(args.output, args.input, args.table_options("input"))
        check_shape_args(args)  # the output's shape, before the sinks that read the code table

    @classmethod
    def wanted(cls, args) -> bool:
        return bool(args.output)

    def __init__(self, job):
        label = None
        if job.coding.provenance is not None:
            from mixer.prediction.provenance import label as provenance_label

            label = provenance_label(job.coding.provenance)
        self.journal, self.args = job.journal, job.args
        self.writer = output_writer(job.args, job.say, label, job.journal)
        job.output_kind = getattr(self.writer, "kind", None)

    def add(self, job, part) -> None:
        if is_shaped(self.args):
            outputs, shaped_inputs = shaped_output(part.chunk, part.predicted, self.args)
            self.writer.write(outputs) if shaped_inputs is None else self.writer.write(outputs, inputs=shaped_inputs)
        else:
            self.writer.write(part.predicted, inputs=part.chunk)
        if self.journal is not None:
            self.journal.done(part.number, len(part.chunk), *part.new)

    def commit(self, job) -> None:
        coding, beside = job.coding, {}
        if coding.provenance is not None:  # renamed with the file, after it: never beside another
            from mixer.prediction.provenance import sidecar_path, sidecar_text

            sidecar = sidecar_path(self.writer.path)
            beside[sidecar] = sidecar_text(coding.provenance, {**coding.result(), "rows": self.writer.rows})
        self.writer.commit(beside=beside)
        if self.journal is not None:
            self.journal.remove()
        print(f"wrote {self.writer.rows} rows to {self.args.output}"
              + (f" (what made it: {sidecar})" if coding.provenance is not None else ""), file=sys.stderr)

    def abort(self) -> None:
        self.writer.abort()

    def suspend(self) -> None:
        self.writer.close()


def output_writer(args, log=None, label=None, journal=None):
    from mixer.data.writing import OutputWriter

    if is_matrix(args) and args.output.lower().endswith(".npy"):  # its rows: in the parts, cut back to the journal's
        return EmbeddingWriter(args.output, flag="--output", tmp=journal.tmp if journal is not None else None,
                               rows=journal.rows if journal is not None else 0)
    if journal is None:
        return OutputWriter(args.output, log=log, label=label)
    writer = OutputWriter(args.output, log=log, label=label, tmp=journal.tmp, parts=journal.dir,
                          stamp=journal.started)
    writer.resume(journal.chunks, journal.rows)  # the chunks the parts hold (a CSV goes on without its header)
    return writer


def check_shape_args(args) -> None:
    """Combinations that have no one meaning, refused before the model loads."""
    if args.output and args.output.lower().endswith(".npy") and not is_matrix(args):
        raise UserError(f"--output {args.output}: .npy holds a matrix (--what probs, bin or logits); "
                        "name it .csv or .parquet")
    if not is_shaped(args):
        return
    flag = "--alternatives" if args.alternatives else ("--what " + args.what if is_matrix(args)
                                                       else "--columns occcanine")
    if not args.output:
        raise UserError(f"{flag} writes --output FILE; pass one")
    if args.alternatives and is_matrix(args):
        raise UserError("--alternatives writes code sets, --what a matrix: pass one of them")
    if len(args.head) > 1:
        raise UserError(f"{flag} takes one --head, got {' '.join(args.head)}")
    if args.alternatives and args.head != ["seq2seq"] and args.head != ["flat"]:
        raise UserError("--alternatives are written by the decoder: leave out --head or pass seq2seq")
    if args.summary_plot:
        raise UserError(f"--summary-plot draws the code table; leave it out with {flag}")
    if is_matrix(args):
        from mixer.prediction.outputs import check_what

        check_what(args.what, args.head[0])


def shaped_output(chunk, predicted, args) -> tuple:
    """What is written for a chunk, as (outputs, the input's columns beside them or None):
    a matrix (an array for .npy) or OccCANINE's table alone, in input order; mixer's
    alternatives beside each input row, repeated k times."""
    import numpy as np

    if is_matrix(args):
        return (predicted.to_numpy() if args.output.lower().endswith(".npy")
                else predicted.reset_index(drop=True)), None
    if args.columns == "occcanine":
        return predicted.reset_index(drop=True), None
    repeated = chunk.iloc[np.repeat(np.arange(len(chunk)), args.alternatives)]
    return predicted.reset_index(drop=True), repeated.reset_index(drop=True)


class CheckListSink(Sink):
    """--to-check N FILE: the rows a person should check (mixer.data.checking.CheckList)."""

    @classmethod
    def check(cls, args) -> None:
        from mixer.data.checking import parse_to_check
        from mixer.data.sinks import refuse_shaped
        from mixer.data.writing import check_output_path

        if not args.to_check:
            return
        path = parse_to_check(args.to_check)[1]
        refuse_shaped(args, "--to-check", "lists codes of the code table")
        check_output_path(path, "--to-check", job_files(args, "--to-check"))

    @classmethod
    def wanted(cls, args) -> bool:
        return bool(args.to_check)

    def __init__(self, job):
        from mixer.data.checking import CheckList, parse_to_check

        args, columns = job.args, job.columns
        self.count, self.path = parse_to_check(args.to_check)
        keys = [columns.input_col] + ([columns.language_col] if columns.language_col else []) + columns.context_cols
        self.checklist = CheckList(self.count, self.path, keys, "" if len(args.head) == 1 else f"{args.head[0]}_",
                                   args.top_k or job.predictor.default_top_k(), log=job.say)

    def add(self, job, part) -> None:
        keep = job.coding.check_rows(part.predicted, job.args.head)
        self.checklist.add(part.chunk, part.predicted, part.inputs, keep=keep)

    def commit(self, job) -> None:
        from mixer.data.checking import describe

        listed = self.checklist.commit()
        print(self.checklist.empty or describe(self.path, listed, self.count), file=sys.stderr)

    def abort(self) -> None:
        self.checklist.abort()


class EmbeddingSink(Sink):
    """--embeddings FILE: each row's vector, in input order (EmbeddingWriter)."""

    @classmethod
    def check(cls, args) -> None:
        from mixer.data.writing import check_output_path

        if args.embeddings:
            check_output_path(args.embeddings, "--embeddings", job_files(args, "--embeddings"))

    @classmethod
    def wanted(cls, args) -> bool:
        return bool(args.embeddings)

    def __init__(self, job):
        self.writer = EmbeddingWriter(job.args.embeddings)

    def add(self, job, part) -> None:
        self.writer.write(part.vectors)

    def commit(self, job) -> None:
        self.writer.commit()
        print(f"wrote {self.writer.rows} embeddings to {job.args.embeddings}", file=sys.stderr)

    def abort(self) -> None:
        self.writer.abort()


class SummaryPlotSink(Sink):
    """--summary-plot FILE: the first code's probabilities drawn over the whole file."""

    @classmethod
    def check(cls, args) -> None:
        from mixer.data.writing import check_output_path

        if not args.summary_plot:
            return
        check_output_path(args.summary_plot, "--summary-plot", job_files(args, "--summary-plot"))
        if not args.summary_plot.lower().endswith((".png", ".pdf", ".svg", ".jpg")):
            raise UserError(f"--summary-plot {args.summary_plot}: name it .png, .pdf, .svg or .jpg")

    @classmethod
    def wanted(cls, args) -> bool:
        return bool(args.summary_plot)

    def __init__(self, job):
        self.pieces = []

    def add(self, job, part) -> None:
        first = "" if len(job.args.head) == 1 else f"{job.args.head[0]}_"
        self.pieces.append(part.predicted[[f"{first}code_1", f"{first}prob_1"]].set_axis(
            ["code_1", "prob_1"], axis=1))

    def commit(self, job) -> None:
        if self.pieces:
            import pandas as pd

            from mixer.reporting.plot import plot_prediction_summary

            plot_prediction_summary(pd.concat(self.pieces, ignore_index=True), job.args.summary_plot)


class EmbeddingWriter:
    """Embeddings in input order: .npy (float32, rows x hidden) or .parquet (one
    list column 'embedding'), written to a temp file and renamed at the end. A .npy's rows
    go to `tmp`.raw, its header before them at the end: `rows` > 0 goes on after the rows
    that file holds (a resumed job's, cut back to them)."""

    def __init__(self, path: str, flag: str = "--embeddings", tmp: Optional[str] = None, rows: int = 0):
        from mixer.data.writing import check_output_path

        self.path = check_output_path(path, flag, {})
        self.flag = flag
        if not path.lower().endswith((".npy", ".parquet", ".pq")):
            raise UserError(f"{flag} {path}: name it .npy or .parquet")
        self.tmp = tmp or os.path.join(os.path.dirname(os.path.abspath(self.path)),
                                       f".tmp-{os.path.basename(path)}.{os.getpid()}")
        self.npy = path.lower().endswith(".npy")
        self.rows, self.width, self.writer = 0, None, None
        self.raw = open(self.tmp + ".raw", "ab" if rows else "wb") if self.npy else None
        if rows and self.npy:
            self.rows, self.width = rows, os.path.getsize(self.tmp + ".raw") // (4 * rows)

    def write(self, vectors) -> None:
        import numpy as np

        self.width = vectors.shape[1]
        if self.npy:
            vectors.astype(np.float32).tofile(self.raw)
            self.raw.flush()  # on disk before the chunk counts as done (a resumed job's journal)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).ravel()),
                                                       self.width)
            table = pa.table({"embedding": column})
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.tmp, table.schema)
            self.writer.write_table(table)
        self.rows += len(vectors)

    def commit(self, beside: Optional[dict] = None) -> None:
        if self.npy:
            import shutil

            import numpy as np

            self.raw.close()
            with open(self.tmp, "wb") as out, open(self.tmp + ".raw", "rb") as raw:
                np.lib.format.write_array_header_1_0(
                    out, {"descr": "<f4", "fortran_order": False, "shape": (self.rows, self.width or 0)})
                shutil.copyfileobj(raw, out, 1 << 24)
            os.unlink(self.tmp + ".raw")
        elif self.writer is not None:
            self.writer.close()
        from mixer.data.writing import commit_files

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
        for leftover in (self.tmp, self.tmp + ".raw"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _sink(cls):
    return lambda: cls


# places: the output first (its shape is checked with it; the audit names its columns as the
# output does), the check list, the audit (mixer.audit.guards: 30), the embeddings, the plot
_OUTPUT, _CHECK_LIST, _EMBEDDINGS, _SUMMARY_PLOT = (_sink(OutputSink), _sink(CheckListSink), _sink(EmbeddingSink),
                                                   _sink(SummaryPlotSink))


def register() -> None:
    sinks.register(10, _OUTPUT)
    sinks.register(20, _CHECK_LIST)
    sinks.register(40, _EMBEDDINGS)
    sinks.register(50, _SUMMARY_PLOT)

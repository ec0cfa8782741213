"""predict.py's job: a CSV or Parquet file in, the same rows with codes (and/or
embeddings) out, streamed in --chunk-size chunks through the Python API
(mixer.prediction.api.Model), so the program and a notebook give the same values. Under
torchrun each rank predicts a contiguous share of every chunk and rank 0
writes one output in input order; outputs go to temp files renamed at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import DistConfig
from mixer.core.programs import PredictConfig
from mixer.core.errors import UserError
from mixer.data.dataset import shard_indices
from mixer.data.reading import check_input_path, check_input_table, iter_chunks, missing_column
from mixer.data.writing import OutputWriter, check_fits_excel, check_output_path
from mixer.distributed import world as mdist
from mixer.prediction.api import Model, blank_descriptions
from mixer.prediction.columns import job_columns
from mixer.prediction.outputs import text_column
from mixer.prediction.predict import Predictor

MEGABYTE = 2 ** 20  # --store-memory's unit


def predict_file(args: PredictConfig) -> None:
    options = args.table_options("input")
    check_input_table(args.input, "--input")  # before the model loads, as the outputs below
    if args.output:  # before the model loads: a wrong path fails at once
        check_output_path(args.output, "--output", {"--input": args.input})
        check_fits_excel(args.output, args.input, options)
    if args.embeddings:
        check_output_path(args.embeddings, "--embeddings", {"--input": args.input, "--output": args.output})
    if args.summary_plot:
        check_output_path(args.summary_plot, "--summary-plot", {"--input": args.input, "--output": args.output,
                                                                "--embeddings": args.embeddings})
        if not args.summary_plot.lower().endswith((".png", ".pdf", ".svg", ".jpg")):
            raise UserError(f"--summary-plot {args.summary_plot}: name it .png, .pdf, .svg or .jpg")
    check_shape_args(args)
    to_check = None
    if args.to_check:
        from mixer.data.checking import parse_to_check

        to_check = parse_to_check(args.to_check)
        if is_shaped(args):
            raise UserError("--to-check lists codes of the code table; leave out --what, --alternatives "
                            "and --columns occcanine")
        check_output_path(to_check[1], "--to-check", {"--input": args.input, "--output": args.output,
                                                      "--embeddings": args.embeddings})
    audit = None
    if args.audit:
        from mixer.audit.draw import parse_audit_args

        audit = parse_audit_args(args.audit, args.audit_margin, args.audit_by, args.audit_unit, args.audit_seed)
        if is_shaped(args):
            raise UserError("--audit draws from the code table; leave out --what, --alternatives and "
                            "--columns occcanine")
        audit.check_path({"--input": args.input, "--output": args.output, "--embeddings": args.embeddings,
                          "--to-check": to_check[1] if to_check else None})
    if args.code_descriptions:
        check_input_path(args.code_descriptions, "--code-descriptions")
    check_coding_args(args)
    world = mdist.setup(DistConfig(distributed=args.distributed), program="predict.py")
    writer = embedding_writer = checklist = draw = stores = journal = None

    def say(message: str) -> None:  # how the input was read: stdout, so stderr holds errors alone
        if world.is_main:
            print(message, flush=True)

    try:
        predictor = Predictor.load(args.checkpoint, world.device, args.precision, args.force_precision,
                                   log=lambda m: print(m, file=sys.stderr) if world.is_main else None,
                                   tf32=args.tf32, quantize=args.quantize,
                                   announce=say)  # which weights: stdout, as how it reads
        if args.code_descriptions:
            from mixer.prediction.outputs import set_descriptions

            set_descriptions(predictor, args.code_descriptions, args.table_options("code_descriptions"))
        model = Model(predictor, args.checkpoint, note_blank=False)  # blank rows counted here, over the file
        model._says_context_fit = False  # counted over the chunks and every rank, said once below
        model._says_languages, languages = False, {}  # counted over the chunks on rank 0, said once below
        context_fit = np.zeros(3, dtype=np.int64)  # rows that fit, context cut, description too long
        input_col, language_col, language, context_cols = job_columns(
            predictor.config, args.input_col, args.language, args.language_col)
        from mixer.prediction.coding_job import prepare

        coding = prepare(args, model, predictor, input_col, language_col, language, context_cols, world, say)
        if args.output:
            label = None
            if coding.provenance is not None:
                from mixer.prediction.provenance import label as provenance_label

                label = provenance_label(coding.provenance)
            journal = mdist.main_only(lambda: open_journal(args, predictor, world, say), world)
            writer = mdist.main_only(lambda: output_writer(args, say, label, journal), world)
        if args.embeddings:
            embedding_writer = mdist.main_only(lambda: EmbeddingWriter(args.embeddings), world)
        if to_check:
            from mixer.data.checking import CheckList

            keys = [input_col] + ([language_col] if language_col else []) + list(context_cols)
            checklist = mdist.main_only(lambda: CheckList(
                to_check[0], to_check[1], keys, "" if len(args.head) == 1 else f"{args.head[0]}_",
                args.top_k or predictor.default_top_k(), log=say), world)
        bar, summary, blank_rows, rows_read = None, [], 0, 0
        if world.is_main and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(unit="row", desc="predict")
        stores = DistinctStores(args, world)
        stop = StopRequest(journal)
        if journal is not None:  # the store as it grew over the completed chunks
            for keys, rows_of_keys in journal.stored():
                stores.table.add(keys, rows_of_keys)
        for number, chunk in enumerate(iter_chunks(args.input, args.chunk_size, options=options, log=say)):
            rows_read += len(chunk)
            needed = [(input_col, "--input-col"), (language_col, "--language-col")]
            needed += [(c, "a context column the model was trained with") for c in context_cols]
            for column, flag in needed:
                if column and column not in chunk.columns:
                    raise missing_column(column, chunk.columns, f"--input {args.input}", flag)
            if world.is_main:  # the languages of the whole chunk, as the rows are read
                count_languages(languages, text_column(chunk, language_col).str.strip() if language_col else None,
                                language, len(chunk))
            rows = RowReader(input_col, language_col, language, context_cols)
            blank = blank_descriptions(text_column(chunk, input_col))
            if journal is not None and number < journal.chunks:  # written by the run this one continues
                blank_rows += int(blank.sum())
                coding.rows += len(chunk)
                if context_cols:
                    context_fit += np.bincount(model._context_fit(*rows.read(chunk)), minlength=3)
                continue
            inputs = model.model_inputs(*rows.read(chunk))  # the key a row is read by
            distinct = Distinct(inputs, blank)
            if context_cols:  # every row once, over the ranks
                part = chunk.iloc[shard_indices(len(chunk), world.world_size, world.rank)]
                context_fit += np.bincount(model._context_fit(*rows.read(part)), minlength=3)
            if args.output or to_check or audit:  # rows without a description get no code (Model.predict)
                blank_rows += int(blank.sum())
            if args.output and is_shaped(args):  # OccCANINE's output shapes (mixer.prediction.outputs)
                if stores.table is not None:  # a matrix: a row per key
                    predicted = distinct.through(stores.table, chunk, world, lambda part: predict_shaped(
                        model, args, *rows.read(part)))
                else:  # OccCANINE's table (it holds each row's text) and alternatives: by row
                    pieces = mdist.gather_to_main(predict_shaped(model, args, *rows.read(
                        chunk.iloc[shard_indices(len(chunk), world.world_size, world.rank)])), world)
                    predicted = pd.concat(pieces) if world.is_main else None
                if world.is_main:
                    outputs, shaped_inputs = shaped_output(chunk, predicted, args)
                    writer.write(outputs) if shaped_inputs is None else writer.write(outputs, inputs=shaped_inputs)
                    if journal is not None:
                        journal.done(number, len(chunk), *distinct.new)
            elif args.output or to_check or audit:  # the model for new keys, shared by the ranks; rank 0 writes

                def code_table(part):
                    texts, langs, context = rows.read(part)
                    results = []
                    for head in args.head:
                        result = model.predict(texts, langs, args.top_k, head, head_threshold(args, head), context,
                                               args.batch_size, lookup=coding.lookup, target=coding.targets.get(head))
                        results.append(result.add_prefix(f"{head}_") if len(args.head) > 1 else result)
                    return coding.split_source(results)

                predicted = distinct.through(stores.table, chunk, world, code_table)  # all ranks
                if world.is_main:
                    predicted.index = chunk.index
                    if writer is not None:
                        writer.write(predicted, inputs=chunk)
                    if journal is not None:
                        journal.done(number, len(chunk), *distinct.new)
                    coding.tally(predicted, inputs if coding.active else None, args.head, blank)
                    if checklist is not None:
                        keep = coding.check_rows(predicted, args.head)
                        checklist.add(chunk, predicted, inputs, keep=keep)
                    if audit is not None:
                        from mixer.audit.draw import AuditDraw

                        draw = draw or AuditDraw.for_output(
                            audit, writer.kind if writer is not None else "csv", chunk.columns, predicted.columns,
                            [input_col, language_col, *context_cols], args.head[0], len(args.head) > 1, predictor)
                        draw.add_output(chunk, predicted, coding.audit_skips(predicted, args.head))
                    if args.summary_plot:
                        first = "" if len(args.head) == 1 else f"{args.head[0]}_"
                        summary.append(predicted[[f"{first}code_1", f"{first}prob_1"]].set_axis(
                            ["code_1", "prob_1"], axis=1))
            if args.embeddings:
                vectors = distinct.through(stores.embeddings, chunk, world, lambda part: model.embeddings(
                    *rows.read(part), args.batch_size))  # all ranks
                if world.is_main:
                    embedding_writer.write(vectors)
            if bar is not None:
                bar.update(len(chunk))
            if stop.requested:  # a scheduler's SIGTERM / SIGUSR1: this chunk is kept, the rest waits
                print(f"stopped after {journal.chunks:,} chunk(s) ({journal.rows:,} rows) on a signal: run the "
                      "same command to continue", file=sys.stderr)
                writer.close()
                stores.close()
                return
        if not rows_read:  # all ranks: each reads every chunk
            raise UserError(no_rows(args.input))
        if context_cols:  # all ranks
            say_context_fit(mdist.gather_to_main(context_fit, world), predictor)
        if audit is not None:  # all ranks: rank 0 draws it, a failure there ends every rank
            from mixer.audit.draw import finish_audit

            mdist.main_only(lambda: finish_audit(draw, audit, predictor, args.checkpoint, args.head[0],
                                                 args.threshold), world)
        if world.is_main:
            from mixer.prediction.target import language_note

            note = language_note(model, languages, f"--input {args.input}")  # one never trained with: one line
            if note:
                print(note, file=sys.stderr)
            if blank_rows:
                print(f"--input {args.input}: {blank_rows:,} row(s) without a description (empty or spaces): "
                      "no code, prob empty", file=sys.stderr)
            for line in coding.report():
                print(line, file=sys.stderr)
            if writer is not None:
                beside = {}
                if coding.provenance is not None:  # renamed with the file, after it: never beside another
                    from mixer.prediction.provenance import sidecar_path, sidecar_text

                    sidecar = sidecar_path(writer.path)
                    beside[sidecar] = sidecar_text(coding.provenance, {**coding.result(), "rows": writer.rows})
                writer.commit(beside=beside)
                if journal is not None:
                    journal.remove()
                print(f"wrote {writer.rows} rows to {args.output}"
                      + (f" (what made it: {sidecar})" if coding.provenance is not None else ""), file=sys.stderr)
            if checklist is not None:
                from mixer.data.checking import describe

                listed = checklist.commit()
                print(checklist.empty or describe(to_check[1], listed, to_check[0]), file=sys.stderr)
            if embedding_writer is not None:
                embedding_writer.commit()
                print(f"wrote {embedding_writer.rows} embeddings to {args.embeddings}", file=sys.stderr)
            if args.summary_plot and summary:
                from mixer.reporting.plot import plot_prediction_summary

                plot_prediction_summary(pd.concat(summary, ignore_index=True), args.summary_plot)
            if bar is not None:
                bar.close()
        stores.close()
    except BaseException as exc:
        if stores is not None:
            stores.close()
        if journal is not None and isinstance(exc, KeyboardInterrupt):  # Ctrl-C: the parts stay, to continue
            if writer is not None:
                writer.close()
            raise
        for open_writer in (writer, embedding_writer, checklist):
            if open_writer is not None:
                open_writer.abort()
        if journal is not None:
            journal.remove()
        raise
    finally:
        mdist.teardown(world)


def no_rows(path: str) -> str:
    return f"--input {path}: no rows below its header; nothing to predict"


def count_languages(counts: dict, column, language: str, rows: int) -> None:
    """Add a chunk's rows to {language value: rows}: its column's values, or one language."""
    if column is None:
        counts[language] = counts.get(language, 0) + rows
        return
    for value, n in column.value_counts(sort=False).items():
        counts[str(value)] = counts.get(str(value), 0) + int(n)


class RowReader:
    """What the model reads of a chunk's rows: (texts, languages, context), the one place the
    job turns its columns into Model's arguments."""

    def __init__(self, input_col: str, language_col: Optional[str], language: str, context_cols: list):
        self.input_col, self.language_col, self.language = input_col, language_col, language
        self.context_cols = list(context_cols)

    def read(self, part: pd.DataFrame) -> tuple:
        texts = text_column(part, self.input_col)
        langs = text_column(part, self.language_col).str.strip() if self.language_col else self.language
        # the rows' own order, as texts and langs (whose index this chunk's position resets)
        context = part[self.context_cols].reset_index(drop=True) if self.context_cols else None
        return texts, langs, context


class DistinctStores:
    """The job's distinct-input stores (mixer.prediction.store): one for the code table or a
    matrix, one for embeddings; None where the output is written by row."""

    def __init__(self, args: PredictConfig, world):
        from mixer.prediction.store import DistinctStore

        budget = args.store_memory * MEGABYTE
        beside = args.output or args.embeddings or (args.to_check[1] if args.to_check else None) or args.input
        spill_dir = os.path.dirname(os.path.abspath(beside))
        by_row = args.output and is_shaped(args) and not is_matrix(args)  # OccCANINE's table, alternatives
        has_table = bool(args.output or args.to_check or args.audit) and not by_row
        self.table = DistinctStore(budget, spill_dir, os.path.basename(beside)) if has_table else None
        self.embeddings = (DistinctStore(budget, os.path.dirname(os.path.abspath(args.embeddings)),
                                         os.path.basename(args.embeddings)) if args.embeddings else None)

    def close(self) -> None:
        for store in (self.table, self.embeddings):
            if store is not None:
                store.close()


class Distinct:
    """A chunk's rows grouped by key: the model input, and whether the row has a
    description (a row without one gets no code whatever it reads)."""

    def __init__(self, inputs: np.ndarray, blank: np.ndarray):
        keys = np.where(blank, "\x01", "") + np.asarray(inputs, dtype=object)
        self.row_key, self.keys = pd.factorize(pd.Series(keys, dtype=object), sort=False)
        self.keys = np.asarray(self.keys, dtype=object)
        self.first = np.full(len(self.keys), len(keys), dtype=np.int64)  # each key's first row
        self.new = (self.keys[:0], None)  # the last `through`'s new keys and their rows (rank 0)
        np.minimum.at(self.first, self.row_key, np.arange(len(keys)))

    def through(self, store, chunk: pd.DataFrame, world, predict):
        """All ranks: the chunk's rows (rank 0; None elsewhere), the model asked only for the
        keys `store` lacks, their first rows shared out over the ranks and gathered to
        rank 0. predict(rows of the chunk) gives a DataFrame or an array, a row each."""
        new = np.flatnonzero(~store.known(self.keys))
        rows = self.first[new]
        share = rows[shard_indices(len(rows), world.world_size, world.rank)]
        mine = predict(chunk.iloc[share]) if len(share) else None
        pieces = mdist.gather_to_main(mine, world)  # all ranks
        if pieces is not None:
            pieces = [piece for piece in pieces if piece is not None]
            if pieces:
                pieces = (pd.concat(pieces, ignore_index=True) if isinstance(pieces[0], pd.DataFrame)
                          else np.concatenate(pieces))
            store.add(self.keys[new], pieces if len(new) else None)
            self.new = (self.keys[new], pieces if len(new) else None)
        else:
            store.add(self.keys[new])
        if not world.is_main:
            return None
        distinct = store.take(self.keys)
        if isinstance(distinct, pd.DataFrame):
            return distinct.iloc[self.row_key].reset_index(drop=True)
        return distinct[self.row_key]


def say_context_fit(counts: list | None, predictor) -> None:
    """Rank 0: one line for the whole input on the rows whose context was cut to fit."""
    from mixer.data.tokens import context_note

    if counts is None:
        return
    total = np.sum(counts, axis=0)
    note = context_note((int(total[1] + total[2]), int(total[2])), predictor.token_ids, training=False)
    if note:
        print(f"note: {note}", file=sys.stderr)


# ------------------------------------------------------------------ output shapes
def is_shaped(args) -> bool:
    """An output other than the code table beside the input's columns."""
    return (args.what != "codes" or args.columns != "mixer"
            or bool(args.alternatives))


def is_matrix(args) -> bool:
    return args.what != "codes"


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


def output_writer(args, log=None, label=None, journal=None):
    if is_matrix(args) and args.output.lower().endswith(".npy"):
        return EmbeddingWriter(args.output, flag="--output")
    writer = OutputWriter(args.output, log=log, label=label, tmp=journal.tmp if journal is not None else None)
    if journal is not None:
        writer.rows = journal.rows  # the rows the parts hold: a CSV goes on without its header
    return writer


def open_journal(args, predictor, world, say):
    """Rank 0: the journal of a job that can resume after a kill (mixer.prediction.resume), or
    None, said in one line where parts of an earlier run are there and cannot be continued."""
    from mixer.prediction import resume

    why = resume.why_not(args, world, bool(args.output) and is_shaped(args) and not is_matrix(args))
    for flag, path in (("--output", args.output), ("--embeddings", args.embeddings)):
        if path:
            resume.remove_stale(path, flag, why, say)
    if why is not None:
        if args.output and os.path.isdir(resume.parts_dir(args.output)):
            say(f"--output {args.output}: starts over ({why}, so it does not resume)")
            shutil.rmtree(resume.parts_dir(args.output))
        return None
    journal = resume.Journal(args, predictor)
    journal.open(args.restart, say)
    return journal


class StopRequest:
    """SIGTERM / SIGUSR1 (a scheduler's pre-emption), as training takes them: the job finishes
    its chunk, keeps it in the journal and exits 0; the same command continues. Without a
    journal the signals keep their default (the job ends, its temp files go at the next run)."""

    def __init__(self, journal):
        self.requested = False
        if journal is not None:
            from mixer.distributed.launch import stop_on_signals

            stop_on_signals(self.request)

    def request(self, *_):
        self.requested = True


def check_coding_args(args) -> None:
    """--target-accuracy, --lookup and their companions: what they cannot be asked with."""
    coding = [flag for flag, value in (("--target-accuracy", args.target_accuracy),
                                       ("--lookup", args.lookup)) if value is not None]
    if coding and is_shaped(args):
        raise UserError(f"{coding[0]} marks rows of the code table; leave out --what, --alternatives and "
                        "--columns occcanine")
    if coding and not (args.output or args.to_check or args.audit):  # e.g. --embeddings alone
        raise UserError(f"{coding[0]} marks rows of the code table, which --output (or --to-check, --audit) "
                        "writes; pass --output FILE")
    if args.threshold is not None and set(args.head) <= {"seq2seq"}:
        raise UserError(f"--threshold {args.threshold:g} is the flat and full heads' (the probability a code "
                        "must reach); the seq2seq head decodes its codes and takes none: leave it out, or "
                        "--target-accuracy for a threshold on the row confidence")
    if args.lookup:
        check_input_path(args.lookup, "--lookup")
    if args.calibration_data:
        check_input_path(args.calibration_data, "--calibration-data")
    if args.target_accuracy is not None and "full" in args.head:
        raise UserError("--target-accuracy: the full head has no row confidence (not covered); use --head flat "
                        "or seq2seq")


def head_threshold(args, head: str) -> Optional[float]:
    """--threshold for a head that takes one (flat, full); the seq2seq head takes none."""
    return None if head == "seq2seq" else args.threshold


def predict_shaped(model: Model, args, texts, langs, context) -> pd.DataFrame:
    if args.alternatives:
        return model.alternatives(texts, langs, args.alternatives, context, args.batch_size,
                                  args.columns, args.system)
    return model.predict(texts, langs, args.top_k, args.head[0], args.threshold, context,
                         args.batch_size, what=args.what, columns=args.columns, system=args.system)


def shaped_output(chunk: pd.DataFrame, predicted: pd.DataFrame, args) -> tuple:
    """What is written for a chunk, as (outputs, the input's columns beside them or None):
    a matrix (an array for .npy) or OccCANINE's table alone, in input order; mixer's
    alternatives beside each input row, repeated k times."""
    if is_matrix(args):
        return (predicted.to_numpy() if args.output.lower().endswith(".npy")
                else predicted.reset_index(drop=True)), None
    if args.columns == "occcanine":
        return predicted.reset_index(drop=True), None
    repeated = chunk.iloc[np.repeat(np.arange(len(chunk)), args.alternatives)]
    return predicted.reset_index(drop=True), repeated.reset_index(drop=True)


class EmbeddingWriter:
    """Embeddings in input order: .npy (float32, rows x hidden) or .parquet (one
    list column 'embedding'), written to a temp file and renamed at the end."""

    def __init__(self, path: str, flag: str = "--embeddings"):
        self.path = check_output_path(path, flag, {})
        self.flag = flag
        if not path.lower().endswith((".npy", ".parquet", ".pq")):
            raise UserError(f"{flag} {path}: name it .npy or .parquet")
        self.tmp = os.path.join(os.path.dirname(os.path.abspath(self.path)),
                                f".tmp-{os.path.basename(path)}.{os.getpid()}")
        self.npy = path.lower().endswith(".npy")
        self.rows, self.width, self.writer = 0, None, None
        self.raw = open(self.tmp + ".raw", "wb") if self.npy else None

    def write(self, vectors: np.ndarray) -> None:
        self.width = vectors.shape[1]
        if self.npy:
            vectors.astype(np.float32).tofile(self.raw)
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

    def abort(self) -> None:
        if self.raw is not None and not self.raw.closed:
            self.raw.close()
        if self.writer is not None:
            self.writer.close()
        for leftover in (self.tmp, self.tmp + ".raw"):
            if os.path.exists(leftover):
                os.unlink(leftover)

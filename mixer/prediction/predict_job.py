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
from itertools import repeat
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import DistConfig
from mixer.core.programs import PredictConfig
from mixer.core.errors import UserError, WriteFailed
from mixer.core.io import writing
from mixer.data.inputs.dataset import shard_indices
from mixer.data.tables.job_columns import blank_descriptions, job_columns, no_rows, text_column
from mixer.data.tables.reading import (
    check_header,
    check_input_path,
    check_input_table,
    iter_chunks,
    missing_column,
)
from mixer.data.tables.sinks import is_matrix, is_shaped
from mixer.distributed import world as mdist
from mixer.prediction.api import Model
from mixer.prediction.predict import Predictor
from mixer.prediction.sink import JobContext

MEGABYTE = 2**20  # --store-memory's unit


def predict_file(config: PredictConfig, sinks: Optional[list] = None) -> None:
    """The job as its stages: each chunk read, its model inputs built, the distinct-input
    store asked, the model asked for the inputs the store lacks (and the row steps: the
    lookup, calibration, target marks, shorter codes), the rows handed to each sink.
    `sinks`: the Sink classes the job may write, in their turn (None: predict.py's own,
    mixer.prediction.sinks.default_sinks); each says from `config` whether it is wanted."""
    sinks = check_job(config, sinks)  # before the model loads: a wrong path or option fails at once
    world = mdist.setup(DistConfig(distributed=config.run.distributed), program="predict.py")
    job, ahead = Job(config, world, sinks), None
    try:
        load_model(job)
        open_sinks(job)  # a changed input or option refused first, by the journal
        ahead = Window(job)
        mdist.main_only(lambda: check_rows(job), world)  # before any chunk: nothing to lose
        for number, chunk in enumerate(
            iter_chunks(config.data.input, config.run.chunk_size, options=job.options, log=job.say)
        ):
            part = read_chunk(job, number, chunk)
            if part is None:  # written by the run this one continues
                replay(job, number, chunk)
                continue
            model_inputs(job, part)
            ahead.add(part)  # held until its window's new inputs go through the model at once
            if job.bar is not None:
                job.bar.update(len(chunk))
            if ahead.stopped:
                break
        else:
            ahead.flush()  # the file's last window
        if ahead.stopped:  # a scheduler's SIGTERM / SIGUSR1 to any rank: the rest waits
            stop(job)
            return
        finish(job)
    except BaseException as exc:
        fail(job, exc)
        groups = ahead.groups_kept if ahead is not None and job.journal is not None else 0
        if world.is_main and job.journal is not None and (job.journal.chunks or groups):
            line = kept_line(job, exc, groups)
            if line is not None:
                raise UserError(line) from exc
        raise
    finally:
        from mixer.prediction.resume import release_held

        release_held()  # a job that does not resume: its lock, held while it ran
        if job.stop is not None:  # SIGTERM / SIGUSR1 as before the job
            job.stop.release()
        mdist.teardown(world)


# ------------------------------------------------------------------ the stages
class Job:
    """What the stages share: the options, the processes, the model and the columns it reads,
    the coding (mixer.coding.job), the resume journal, the stores, rank 0's open sinks, the
    counts over the whole file (`progress`). The sinks get none of it but the job's frozen
    `context` (mixer.prediction.sink.JobContext), built when they are opened."""

    def __init__(self, config: PredictConfig, world, sink_classes: list):
        self.config, self.world, self.sink_classes = config, world, sink_classes
        self.options = config.table_options("input")
        self.predictor = self.model = self.columns = self.rows = self.coding = None
        self.journal = self.stores = self.stop = self.bar = None
        self.started = None  # rank 0: the time every file of the job states (open_sinks)
        self.classes = None  # the crosswalks' class columns (mixer.prediction.classes)
        self.sinks = []  # rank 0: the sinks opened so far (aborted on a failure)
        self.context = None  # rank 0: what the sinks read (open_sinks), frozen
        self.progress = Progress()  # the counts over the whole file
        from mixer.prediction.sinks import reads

        self.codes = reads(config, sink_classes, "codes")  # the code table is predicted
        self.vectors = reads(config, sink_classes, "vectors")  # and the embeddings

    def say(
        self, message: str
    ) -> None:  # how the input was read: stdout, so stderr holds errors alone
        if self.world.is_main:
            print(message, flush=True)


class Progress:
    """The counts over the whole file, said once at the end: the languages (rank 0), the rows
    without a description, the rows whose context was cut to fit (each rank its share) and the
    rows read. A stateful part of a job that resumes (state_dict): rank 0's languages and blank
    rows come back with the chunks a killed run completed; the context's fit is counted again
    over them (the ranks count shares of it, rank 0 alone the chunks it skips) and so are the
    rows read (every rank reads every chunk)."""

    def __init__(self):
        self.languages, self.blank_rows, self.rows_read = {}, 0, 0
        self.context_fit = np.zeros(3, dtype=np.int64)  # rows that fit, context cut, too long

    def state_dict(self) -> dict:
        return {"languages": dict(self.languages), "blank_rows": self.blank_rows}

    def load_state_dict(self, state: dict) -> None:
        self.languages, self.blank_rows = dict(state["languages"]), state["blank_rows"]


class Part:
    """A chunk on its way through the stages: its rows, their model inputs and keys, the code
    table and embeddings predicted for them (rank 0; None where not asked for)."""

    def __init__(self, number: int, chunk: pd.DataFrame):
        self.number, self.chunk = number, chunk
        self.inputs = self.blank = self.distinct = self.predicted = self.vectors = None
        self.new = (None, None)  # the chunk's new distinct inputs and their rows, for the journal
        self.new_vectors = None  # the same for the embeddings' store
        # rank 0: (the code table's row per distinct key, each row's key) of which `predicted`
        # is the rows, where it is (a CSV output spells it once per key); None elsewhere
        self.keyed = None
        # its counts for the job's Progress, added when it is written (a window holds chunks
        # read ahead, which a journal written before them must not count)
        self.languages, self.blank_rows = {}, 0

    def read_only(self) -> "Part":
        """The part as a sink gets it: its tables copies that share the data (pandas' copy on
        write), its arrays views that refuse a write, so no sink changes what another writes
        (a CSV output spells its rows from `keyed`, a Parquet one from `predicted`: an edit
        would reach one and not the other)."""
        import copy

        view = copy.copy(self)
        for name, value in vars(self).items():
            setattr(view, name, _read_only(value))
        return view


def _read_only(value):
    """A table as a copy sharing its data, an array as a view refusing a write, a tuple of them
    alike; anything else as it is."""
    if isinstance(value, pd.DataFrame):
        return value.copy(deep=False)
    if isinstance(value, np.ndarray):
        view = value.view()
        view.flags.writeable = False
        return view
    if isinstance(value, tuple):
        return tuple(_read_only(item) for item in value)
    return value


def check_job(config: PredictConfig, sinks: Optional[list] = None) -> list:
    """Every refusal before the model loads; the sinks this job writes, of `sinks` (None:
    predict.py's own)."""
    from mixer.prediction.sinks import check_paths, default_sinks, reads, refuse_no_output, written

    registered = default_sinks() if sinks is None else list(sinks)
    one_language(config)  # predict_file's caller may build the config in code, not by flags
    config.coding.head = list(  # greedy is seq2seq's decoding, the flag's and keyword's name
        dict.fromkeys("seq2seq" if head == "greedy" else head for head in config.coding.head)
    )
    refuse_no_output(config, registered)
    check_input_table(config.data.input, "--input")
    check_header(config.data.input, config.table_options("input"))  # two columns of one name
    outputs = written(config, registered)  # every file the job writes, as its sinks declare
    for sink in registered:
        check_paths(config, sink, outputs)  # its files' paths, then its options
        sink.check(config)
    if config.outputs.code_descriptions:
        check_input_path(config.outputs.code_descriptions, "--code-descriptions")
    codes = reads(config, registered, "codes")  # a wanted sink reads the code table
    check_coding_args(config, codes)
    from mixer.prediction.classes import load, refuse_without_codes

    refuse_without_codes(config, codes)
    load(
        config.outputs.crosswalk, None, config.table_options("crosswalk")
    )  # names and tables checked
    return [sink for sink in registered if sink.wanted(config)]


def one_language(config) -> None:
    """A file's language given twice, as one for every row and as a column: one line."""
    if config.data.language_col and config.data.language:
        raise UserError("--language and --language-col were both given; pass one")


ROWS_SCANNED = 100_000  # rows a chunk of check_rows' pass over the input


def check_rows(job: Job) -> None:
    """Rank 0, before the first chunk (after the journal, which refuses a changed input or
    option in a line of its own): what a cheap pass over the input finds, which would otherwise
    stop the job mid-way. A CSV file's rows, each with as many cells as its header names; the
    cells an Excel file would hold (each sink's `cells`: --output, --audit, --to-check), none with a control
    character or more characters than a cell holds; those of a Stata file (.dta), none with a
    NUL, at which a Stata text ends (what follows would be lost); the strata of --audit-by, no more than the
    audit has rows (counted over the rows with a description). One pass, where any is asked.
    An Excel input is not read twice (openpyxl reads some 5,000 rows a second): what its rows
    hold is found as they are predicted, and the chunks done are kept (kept_on_refusal)."""
    from mixer.data.tables.reading import check_csv_rows, table_kind
    from mixer.data.tables.writing import output_kind

    config, columns = job.config, job.columns
    if table_kind(config.data.input, "--input") == "excel":
        return
    excel = {}  # {(flag, path): (the input columns the file holds, None for all; its kind)}
    for sink in job.sink_classes:
        held = sink.cells(config, columns)  # as each sink declares
        for flag, path in sink.files(config).items() if held != [] else ():
            kind = output_kind(path, flag)
            if kind in ("excel", "stata"):
                excel[(flag, path)] = held, kind
    by = config.outputs.audit_by if config.outputs.audit else None
    if not excel and not by:
        check_csv_rows(config.data.input, job.options)  # the row structure alone
        return
    from mixer.data.tables.formats import EXCEL_MAX_CELL, ILLEGAL_IN_XML

    most = _audit_most(config) if by else 0
    strata, done = set(), 0
    for chunk in iter_chunks(config.data.input, ROWS_SCANNED, options=job.options):
        if columns.input_col not in chunk.columns:  # said by the job's own reading (read_chunk)
            return
        for (flag, path), (held, kind) in excel.items():
            for name in chunk.columns if held is None else [c for c in held if c]:
                if name not in chunk.columns or not _holds_text(chunk[name]):
                    continue
                cells = text_column(chunk, name).tolist()
                what, bad = "a control character an Excel file cannot store", None
                other = ".csv, .parquet or .dta"
                if kind == "stata":  # a NUL ends a Stata text: what follows it is lost
                    what, other = "a NUL character a Stata file cannot store", ".csv or .parquet"
                    if "\x00" in "\n".join(cells):
                        bad = ["\x00" in cell for cell in cells]
                elif ILLEGAL_IN_XML.search("\n".join(cells)):  # one search a column; the row after
                    bad = [bool(ILLEGAL_IN_XML.search(cell)) for cell in cells]
                elif max(map(len, cells), default=0) > EXCEL_MAX_CELL:
                    bad = [len(cell) > EXCEL_MAX_CELL for cell in cells]
                    what = f"more than {EXCEL_MAX_CELL:,} characters, more than an Excel cell holds"
                if bad is not None:
                    row = done + bad.index(True) + 1
                    raise UserError(
                        f"{flag} {path}: --input {config.data.input} row {row:,} column {name!r} "
                        f"holds {what}; remove it there, or write {other} "
                        "(rows count from 1 under the header)"
                    )
        if by and by in chunk.columns:
            from mixer.reporting.evaluation import group_label

            described = ~blank_descriptions(text_column(chunk, columns.input_col))
            values = chunk[by].reset_index(drop=True)[described].unique()
            strata.update(group_label(v) for v in values)
            if len(strata) > most:
                raise UserError(
                    f"--audit-by {by}: more than {most} values, more strata than the audit has "
                    "rows; stratify by a coarser column"
                )
        done += len(chunk)


def _audit_most(config) -> int:
    from mixer.audit.draw import AuditSink

    return AuditSink.request(config).most


def _holds_text(series: pd.Series) -> bool:
    return not (
        pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)
    )


def load_model(job: Job) -> None:
    """All ranks: the model, the columns it reads, what the coding needs (mixer.coding.job.prepare)."""
    config, world = job.config, job.world
    job.predictor = Predictor.load(
        config.model.checkpoint,
        world.device,
        config.model.precision,
        config.model.force_precision,
        log=lambda m: print(m, file=sys.stderr) if world.is_main else None,
        tf32=config.model.tf32,
        quantize=config.model.quantize,
        announce=job.say,
    )  # which weights: stdout, as how it reads
    if config.outputs.code_descriptions:
        from mixer.prediction.outputs import set_descriptions

        set_descriptions(
            job.predictor,
            config.outputs.code_descriptions,
            config.table_options("code_descriptions"),
        )
    # blank rows, the context's fit and the languages: counted over the chunks, said once below
    job.model = model = Model(
        job.predictor,
        config.model.checkpoint,
        note_blank=False,
        says_context_fit=False,
        says_languages=False,
    )
    job.columns = job_columns(
        job.predictor.config, config.data.input_col, config.data.language, config.data.language_col
    )
    job.rows = RowReader(*job.columns)
    from mixer.coding.job import prepare

    from mixer.prediction.sinks import unrecorded

    others = unrecorded(job.sink_classes)  # the fields of the job's other outputs
    job.coding = prepare(config, model, job.predictor, *job.columns, world, job.say, others)
    if config.outputs.crosswalk:  # a user's table's codes spelled as the model writes its own
        from mixer.prediction.classes import Classes, load

        options = config.table_options("crosswalk")
        job.classes = Classes(load(config.outputs.crosswalk, job.predictor.formatter, options))


def open_sinks(job: Job) -> None:
    """The resume journal and the sinks (rank 0), the stores (all ranks), the signals."""
    config, world = job.config, job.world
    from mixer.prediction.resume import device_numerics

    # each rank's device, on rank 0 (a job over nodes of two GPU models is said as such)
    devices = mdist.gather_to_main(device_numerics(job.predictor), world)
    job.journal = mdist.main_only(
        lambda: open_journal(config, job.predictor, world, job.say, job.sink_classes, devices),
        world,
    )
    from mixer.prediction.resume import shared

    job.journal = shared(job.journal, world)  # all ranks: the chunks to skip, the stores' keys

    def open_all():
        from mixer.data.tables.writing import file_time

        # one time for every file: the job's first start (a resumed job's, from its journal)
        job.started = job.journal.started if job.journal is not None else file_time()
        job.context = JobContext(
            config=config,
            world=world,
            predictor=job.predictor,
            model=job.model,
            columns=job.columns,
            coding=job.coding,
            classes=job.classes,
            journal=job.journal,
            started=job.started,
            say=job.say,
        )
        for sink in job.sink_classes:
            job.sinks.append(sink(job.context))

    mdist.main_only(open_all, world)
    job.stores = DistinctStores(config, world, job.sink_classes)
    if world.is_main and job.journal is not None:
        job.coding.keep_beside(job.journal)  # its pieces beside the journal
        job.stores.keep_beside(job.journal)
        if job.journal.chunks:  # every stateful part as the last chunk left it
            restore_states(job)
    if job.journal is not None and world.is_distributed:  # the other ranks' stores: keys only
        job.stores.share_keys(world)
    if world.is_main and sys.stderr.isatty():
        from tqdm import tqdm

        job.bar = tqdm(unit="row", desc="predict")
    job.stop = StopRequest(job.journal)


def read_chunk(job: Job, number: int, chunk: pd.DataFrame) -> Optional[Part]:
    """All ranks: a chunk's columns checked and its languages counted; None for a chunk the
    run this one continues completed (its counts restored with the job's Progress)."""
    columns, progress = job.columns, job.progress
    progress.rows_read += len(chunk)
    needed = [(columns.input_col, "--input-col"), (columns.language_col, "--language-col")]
    needed += [(c, "a context column the model was trained with") for c in columns.context_cols]
    if job.classes is not None:  # the columns that pick a crosswalk's rows (--status-col, ...)
        from mixer.prediction.classes import CONTEXT, CONTEXT_FLAGS

        needed += [(getattr(job.config.data, name), CONTEXT_FLAGS[name]) for name in CONTEXT]
    for column, flag in needed:
        if column and column not in chunk.columns:
            raise missing_column(column, chunk.columns, f"--input {job.config.data.input}", flag)
    if job.journal is not None and number < job.journal.chunks:
        if columns.context_cols and job.world.is_main:  # every row once, over the ranks
            progress.context_fit += np.bincount(
                job.model.context_fit(*job.rows.read(chunk)), minlength=3
            )
        return None
    part = Part(number, chunk)
    if job.world.is_main:  # the languages of the whole chunk, counted when it is written
        count_languages(
            part.languages,
            text_column(chunk, columns.language_col).str.strip() if columns.language_col else None,
            columns.language,
            len(chunk),
        )
    return part


def replay(job: Job, number: int, chunk: pd.DataFrame) -> None:
    """Rank 0: a chunk the run this one continues completed, given again to the sinks whose
    `restore` found their own files damaged (Sink.replaying: the audit's digest, which a node
    lost before it reached the disk), its code table read back from the store, not predicted."""
    replaying = [sink for sink in job.sinks if sink.replaying]
    if not replaying or not len(chunk):
        return
    part = Part(number, chunk)
    part.inputs, part.blank, part.distinct = job.rows.keyed(job.model, chunk)
    if job.stores.table is not None:  # every key of a chunk completed is in it
        table = job.stores.table.take(part.distinct.keys)
        part.predicted = table.iloc[part.distinct.row_key].reset_index(drop=True)
        part.predicted.index = chunk.index
    for sink in replaying:
        with writing(*sink.file()):
            sink.replay(job.context, part)


def model_inputs(job: Job, part: Part) -> None:
    """All ranks: each row's model input (the key a row is read by) and the chunk's distinct keys."""
    part.inputs, part.blank, part.distinct = job.rows.keyed(job.model, part.chunk)
    if job.columns.context_cols:  # every row once, over the ranks
        mine = part.chunk.iloc[shard_indices(len(part.chunk), job.world.world_size, job.world.rank)]
        job.progress.context_fit += np.bincount(
            job.model.context_fit(*job.rows.read(mine)), minlength=3
        )
    if job.codes:  # rows without a description get no code (Model.predict)
        part.blank_rows = int(part.blank.sum())


def write_part(job: Job, part: Part, news: Optional[dict] = None) -> None:
    """All ranks: a keyed chunk's code table and embeddings (the store asked, the model for
    the inputs it lacks), handed to each sink and kept in the journal (rank 0). `news`: the
    new store rows the journal keeps with it, where a window computed them (Window)."""
    code_rows(job, part)  # the store, the model for the inputs it lacks, the row steps
    embed_rows(job, part)
    for attribute, value in (news or {}).items():
        setattr(part, attribute, value)
    progress = job.progress  # the chunk's counts, kept with it in the journal's Progress
    progress.blank_rows += part.blank_rows
    for language, rows in part.languages.items():
        progress.languages[language] = progress.languages.get(language, 0) + rows
    if job.world.is_main:
        for sink in job.sinks:
            with writing(*sink.file()):  # a full disk: the file named, the chunks kept
                sink.add(job.context, part.read_only())
        if job.journal is not None:  # the chunk done: its store part, states, journal
            keep_chunk(job, part)


LOOKAHEAD_CHUNKS = 16  # chunks a window holds at most before its new inputs go to the model
LOOKAHEAD_BATCHES = 64  # batches of new inputs (--batch-size each) that close a window sooner
GROUP_BATCHES = 4  # batches of a window's call kept together: a kill redoes at most these
LOOKAHEAD_ROWS = 1_600_000  # rows a window holds at most: 16 chunks of the default size, so a
# larger --chunk-size holds fewer chunks rather than more rows


class Window:
    """The look-ahead over chunks: the model reads a window's new distinct inputs in one
    call (one batch plan, made in groups of its batches: `call`), so they are sorted by
    length and batched together (a census's later chunks hold a
    few dozen new inputs each, which batched by chunk would each be a short, padded batch).
    A chunk whose inputs the store already holds, with none held before it, is written at
    once; otherwise it is held (keyed, not yet predicted) until the window holds
    LOOKAHEAD_CHUNKS chunks, LOOKAHEAD_ROWS rows or LOOKAHEAD_BATCHES batches of new inputs,
    or the file ends.
    Then the window's new inputs go to the model once, each store takes their rows, and the
    held chunks are written in order; the first one's journal entry carries every new input
    of the window. A window starts at the first chunk with an input the store lacks and ends
    by the rule above, so it is the same in a run that resumes after a kill at any point (the
    store then holds the inputs of the chunks it skips, and those written again need none):
    the batches, and so the floats, are the same. A signal while
    chunks are held stops the job without them (they are read again, into the same window);
    one during the window's call stops it after the window's first chunk. Under torchrun
    every rank holds the same chunks and makes the same call."""

    def __init__(self, job: Job):
        self.job = job
        self.held: list = []
        self.stopped = False  # the job stops after the chunk written last (StopRequest)
        self.pending: dict = {}  # {store name: {new key: (held chunk, its first row)}}, in order
        self.stores = []  # (name, store, predict(rows of a chunk), the part's attribute for the journal)
        config = job.config
        if job.codes and job.stores.table is not None:
            self.stores.append(
                ("table", job.stores.table, lambda rows: table_rows(job, rows), "new")
            )
        if job.vectors and job.stores.embeddings is not None:
            self.stores.append(
                (
                    "vectors",
                    job.stores.embeddings,
                    lambda rows: vector_rows(job, rows),
                    "new_vectors",
                )
            )
        self.most = LOOKAHEAD_BATCHES * config.run.batch_size
        self.first = None  # rank 0: the number of the window's first chunk (its groups' name)
        self.kept = []  # rank 0: the groups of the window's call kept (resume.WindowGroups)
        self.groups_kept = 0  # over the job (mixer.prediction.faults.grouped)

    def add(self, part: Part) -> None:
        news = {}
        for name, store, _, _ in self.stores:
            pending = self.pending.setdefault(name, {})
            keys, first = part.distinct.keys, part.distinct.first
            news[name] = {
                keys[i]: (len(self.held), first[i])  # where the model reads it: its first row
                for i in np.flatnonzero(part.distinct.numbers(store) < 0)
                if keys[i] not in pending
            }
        if not self.held and not any(news.values()):
            self.write(part)  # every input known: nothing to wait for
            return
        self.held.append(part)
        for name, firsts in news.items():
            self.pending[name].update(firsts)
        if (
            len(self.held) >= LOOKAHEAD_CHUNKS
            or max(map(len, self.pending.values())) >= self.most
            or sum(len(held.chunk) for held in self.held) >= LOOKAHEAD_ROWS
        ):
            self.flush()
        elif self.job.stop.asked(self.job.world):  # a signal: the job stops without the chunks
            # held, which the run that continues reads again into the same window
            self.held, self.pending, self.stopped = [], {}, True

    def write(self, part: Part, news: Optional[dict] = None) -> None:
        """A chunk written, then whether any rank was asked to stop (the job stops after it)."""
        write_part(self.job, part, news)
        # a scheduler's SIGTERM / SIGUSR1 to any rank: this chunk is kept, the rest waits
        self.stopped = self.job.stop.agreed(self.job.world, part.number)

    def flush(self) -> None:
        """The held chunks' new inputs through the model in one call per store, then each
        held chunk written in order, each store given the inputs first seen in it just
        before (so a store past --store-memory spills chunk by chunk, as without a window)."""
        if not self.held:
            return
        world = self.job.world
        first, computed = {}, []
        self.first = self.held[0].number
        for name, store, predict, attribute in self.stores:
            firsts = self.pending.get(name, {})
            keys = np.empty(len(firsts), dtype=object)
            keys[:] = list(firsts)
            chunk_of = np.asarray([held for held, _ in firsts.values()], dtype=np.int64)
            values = None
            if len(keys):
                values = self.call(name, predict, keys, _first_rows(self.held, firsts))
            computed.append((store, keys, values if world.is_main else None, chunk_of))
            first[attribute] = (keys, values)
        held, self.held, self.pending = self.held, [], {}
        for number, part in enumerate(held):
            for store, keys, values, chunk_of in computed:  # the inputs first seen in this chunk
                mine = np.flatnonzero(chunk_of == number)
                if len(mine):
                    store.add(keys[mine], None if values is None else _rows(values, mine))
            self.write(part, first if number == 0 else None)  # the window's inputs: the first's
            if number == 0:  # kept with it: the groups of its call are no longer needed
                for kept in self.kept:
                    kept.remove()
                self.kept = []
            if self.stopped:  # the chunks after it are read again by the run that continues
                return

    def group_rows(self, name: str) -> int:
        """The inputs of a group of a window's call of store `name`: GROUP_BATCHES batches of
        the call, cut where every batching of the call cuts (each head batches the rows apart:
        --batch-size, the full head FULL_BATCH rows at most; the embeddings --batch-size). Where
        two sizes do not divide each other (the full head's 16 beside --batch-size 17), the
        least run of rows both cut at, if longer: then a group is more than 4 batches."""
        from math import ceil, lcm

        from mixer.prediction.predict import FULL_BATCH

        size = self.job.config.run.batch_size
        sizes = {size}
        if name == "table":
            heads = self.job.config.coding.head
            sizes = {min(size, FULL_BATCH) if head == "full" else size for head in heads}
        both = lcm(*sizes)
        return both * ceil(GROUP_BATCHES * max(sizes) / both)

    def call(self, name: str, predict, keys: np.ndarray, rows: pd.DataFrame):
        """All ranks: a store's rows for the window's new inputs (`keys`, read at `rows`),
        the model's call made in groups of GROUP_BATCHES consecutive batches of its batch plan
        (Predictor.plan), so that its batches, and so its floats, are one call's; each group's
        rows kept beside the journal as soon as it is done (rank 0, resume.WindowGroups), and
        those a killed run kept taken from there (rank 0 reads them; every rank skips their
        batches). A call of one group, or of a job that does not resume, is made as one, with
        no file. Rank 0 gets the rows, in the keys' order; the other ranks None."""
        job, world = self.job, self.job.world
        if job.journal is None or len(rows) <= self.group_rows(name):
            with job.predictor.shared(world):
                return predict(rows)
        groups = self.groups(rows, self.group_rows(name))
        if len(groups) == 1:
            with job.predictor.shared(world):
                return predict(rows)
        from mixer.prediction import faults
        from mixer.prediction.resume import WindowGroups

        kept = None
        if world.is_main:
            kept = WindowGroups(job.journal, self.first, name)
            self.kept.append(kept)
            with writing(job.journal.flag, job.journal.output):
                kept.sweep()  # an earlier window's groups (a kill before their removal)
        loaded = [
            kept.load(g, keys[where]) if kept is not None else None
            for g, where in enumerate(groups)
        ]
        done = mdist.broadcast_object([value is not None for value in loaded], world)
        pieces = []
        for g, where in enumerate(groups):
            if done[g]:
                pieces.append(loaded[g])
                loaded[g] = None  # held once, in `pieces`
                continue
            with job.predictor.shared(world):
                values = predict(rows.iloc[where].reset_index(drop=True))
            if world.is_main:
                with writing(job.journal.flag, job.journal.output):  # beside the journal
                    kept.save(g, keys[where], values)
                pieces.append(values)
                self.groups_kept += 1
                faults.grouped(self.groups_kept - 1)  # tests: a kill -9 here
        if not world.is_main:
            return None
        if not isinstance(pieces[0], pd.DataFrame):  # each group's vectors put in their rows
            values = np.empty((len(rows), *pieces[0].shape[1:]), dtype=pieces[0].dtype)
            for where in groups:
                values[where] = pieces.pop(0)
            return values
        back = np.empty(len(rows), dtype=np.int64)  # each key's row among the groups' rows
        back[np.concatenate(groups)] = np.arange(len(rows))
        values = pd.concat(pieces, ignore_index=True)
        pieces.clear()
        return values.iloc[back].reset_index(drop=True)

    def groups(self, rows: pd.DataFrame, most: int) -> list:
        """The rows of each group of the call on `rows` (positions, in the order the call
        batches them): the batch plan (Predictor.plan) cut every `most` (group_rows) distinct
        inputs; a row the model reads as an earlier one's (the same text and language) goes
        with that one's group."""
        job = self.job
        _, texts, langs, desc_chars = job.model.read_inputs(*job.rows.read(rows), say_fit=False)
        pair, order = job.predictor.plan(texts, langs, desc_chars)
        place = np.empty(len(order), dtype=np.int64)  # each pair's place in the plan
        place[order] = np.arange(len(order))
        place = place[pair]  # each row's
        by_plan = np.argsort(place, kind="stable")
        group = place[by_plan] // most
        cuts = np.flatnonzero(np.diff(group)) + 1
        return np.split(by_plan, cuts)


def _rows(values, where: np.ndarray):
    """Rows `where` of a DataFrame or an array."""
    return values.iloc[where] if isinstance(values, pd.DataFrame) else values[where]


def _first_rows(parts: list, firsts: dict) -> pd.DataFrame:
    """The rows of `firsts` ({key: (held chunk, its row)}, in the held chunks' order) as one
    frame, in the keys' order."""
    where = np.asarray(list(firsts.values()), dtype=np.int64).reshape(-1, 2)
    pieces = [parts[i].chunk.iloc[where[where[:, 0] == i, 1]] for i in np.unique(where[:, 0])]
    return (
        pd.concat(pieces, ignore_index=True)
        if len(pieces) > 1
        else pieces[0].reset_index(drop=True)
    )


def code_rows(job: Job, part: Part) -> None:
    """All ranks: the chunk's code table (rank 0), the model asked only for the keys the store
    lacks, shared out over the ranks; OccCANINE's table and alternatives by row."""
    config, world, chunk = job.config, job.world, part.chunk
    if not job.codes:
        return
    if is_shaped(config):  # OccCANINE's output shapes (mixer.prediction.outputs)
        if job.stores.table is not None:  # a matrix: a row per key
            part.predicted = part.distinct.through(
                job.stores.table, chunk, world, job.predictor, lambda rows: table_rows(job, rows)
            )
        else:  # OccCANINE's table (it holds each row's text) and alternatives: by row
            with job.predictor.shared(world):
                predicted = predict_shaped(job.model, config, *job.rows.read(chunk))
            part.predicted = predicted if world.is_main else None
            if world.is_main:
                add_classes(job, part)
    else:
        part.predicted = part.distinct.through(
            job.stores.table, chunk, world, job.predictor, lambda rows: table_rows(job, rows)
        )
        if world.is_main:
            part.predicted.index = chunk.index
            if job.classes is None:  # a class column reads the row's own status: by row
                part.keyed = (part.distinct.taken, part.distinct.row_key)
            # each distinct input hashed once: a key is its input, but for blank rows (not counted)
            keys = part.distinct.keys if job.coding.active else None
            job.coding.tally(
                part.predicted, keys, config.coding.head, part.blank, rows_of=part.distinct.row_key
            )
            add_classes(job, part)
    part.new = part.distinct.new


def add_classes(job: Job, part: Part) -> None:
    """Rank 0: the crosswalks' class columns beside the codes of the table every sink is
    handed (mixer.prediction.classes), the input's status, relation and product picking
    the rows; the codes without a class counted."""
    if job.classes is None:
        return
    from mixer.prediction.classes import code_columns, context_values
    from mixer.prediction.outputs import system_name

    config = job.config
    if is_shaped(config):  # OccCANINE's table or the alternatives: one head
        stem = (
            system_name(job.predictor, config.outputs.system)
            if config.outputs.columns == "occcanine"
            else "code"
        )
        prefixes = [""]
    else:
        stem, prefixes = (
            "code",
            [""] if len(config.coding.head) == 1 else [f"{h}_" for h in config.coding.head],
        )
    context = context_values(
        part.chunk, config.data, f"--input {config.data.input}", config.coding.alternatives or 1
    )
    part.predicted = job.classes.add(
        part.predicted, code_columns(part.predicted, stem, prefixes), context
    )


def table_rows(job: Job, rows: pd.DataFrame):
    """The store's rows for rows of the input: the code table, or OccCANINE's matrix."""
    if is_shaped(job.config):
        return predict_shaped(job.model, job.config, *job.rows.read(rows))
    return code_table(job, rows)


def vector_rows(job: Job, rows: pd.DataFrame) -> np.ndarray:
    """The embeddings' store's rows for rows of the input."""
    return job.model.embeddings(*job.rows.read(rows), job.config.run.batch_size)


def code_table(job: Job, rows: pd.DataFrame) -> pd.DataFrame:
    """The model and the row steps (the lookup, calibration, target marks, shorter codes: each
    head's mixer.coding.pipeline.CodingPipeline, built once) for rows of a chunk, each head's
    columns side by side."""
    config, coding = job.config, job.coding
    texts, langs, context = job.rows.read(rows)
    results = []
    for head, pipeline in coding.pipelines.items():
        result = job.model.code_table(texts, langs, context, pipeline, config.run.batch_size)
        results.append(result.add_prefix(f"{head}_") if len(config.coding.head) > 1 else result)
    return coding.split_source(results)


def embed_rows(job: Job, part: Part) -> None:
    """All ranks: the chunk's embeddings (rank 0), the model asked only for the keys the store
    lacks: where a wanted sink reads "vectors" (mixer.prediction.sinks.reads)."""
    if job.vectors:
        part.vectors = part.distinct.through(
            job.stores.embeddings,
            part.chunk,
            job.world,
            job.predictor,
            lambda rows: vector_rows(job, rows),
        )
        part.new_vectors = part.distinct.new


def stop(job: Job) -> None:
    """A scheduler's signal: the chunks done are kept for the same command to continue."""
    if job.world.is_main:
        print(
            f"stopped after {job.journal.chunks:,} chunk(s) ({job.journal.rows:,} rows) on a signal: run the "
            "same command to continue",
            file=sys.stderr,
        )
    for sink in job.sinks:
        sink.suspend()
    job.journal.unlock()
    job.stores.close()


def finish(job: Job) -> None:
    """The end: the counts over the file said, each sink committed (rank 0)."""
    config, world, progress = job.config, job.world, job.progress
    if not progress.rows_read:  # all ranks: each reads every chunk
        raise UserError(no_rows(config.data.input))
    if job.columns.context_cols:  # all ranks
        say_context_fit(mdist.gather_to_main(progress.context_fit, world), job.predictor)
    if any(
        sink.early for sink in job.sink_classes
    ):  # all ranks: rank 0 commits, a failure ends every rank
        mdist.main_only(lambda: [commit(job, sink) for sink in job.sinks if sink.early], world)
    if world.is_main:
        from mixer.coding.target import language_note

        note = language_note(
            job.model, progress.languages, f"--input {config.data.input}"
        )  # one never trained with
        if note:
            print(note, file=sys.stderr)
        if progress.blank_rows:
            print(
                f"--input {config.data.input}: {progress.blank_rows:,} row(s) without a description (empty or spaces): "
                "no code, prob empty",
                file=sys.stderr,
            )
        for line in job.coding.report():
            print(line, file=sys.stderr)
        if job.classes is not None and (line := job.classes.line()):
            print(line, file=sys.stderr)
        for sink in job.sinks:
            if not sink.early:
                commit(job, sink)
        if job.journal is not None:  # every sink committed: its parts are no longer needed
            job.journal.remove()
        if job.bar is not None:
            job.bar.close()
    job.stores.close()


def commit(job: Job, sink) -> None:
    """Rank 0, the end: a sink's file renamed into place. A failure to write it (a full disk)
    leaves it as it was (mixer.core.io.writing) and the chunks kept (kept_line)."""
    flag, path = sink.file()
    with writing(flag, path, kept=f"{path} is"):
        sink.commit(job.context)


def kept_line(job: Job, exc: BaseException, groups: int = 0) -> Optional[str]:
    """Rank 0, a job that resumes: the one line for a file that could not be written once
    chunks were completed, or `groups` groups of the first window's model call kept (Window.call)
    (WriteFailed from any writer of the job, mixer.core.io.writing; an OSError of no writer's is
    said of the parts, beside the job's first output) or for a row refused mid-job
    (kept_on_refusal), or None for another failure. The chunks stay (fail) for the same command
    to continue."""
    failed = exc if isinstance(exc, WriteFailed) else None
    if failed is None and isinstance(exc, OSError):
        from mixer.core.errors import first_line
        from mixer.core.io import disk_full

        reason = disk_full(exc) or first_line(exc)
        failed = WriteFailed(job.journal.flag, job.journal.output, reason)
    chunks = f"{job.journal.chunks:,} chunk(s)"
    if not job.journal.chunks and groups:
        chunks = f"{groups:,} group(s) of batches of the first model call"
    if failed is None:
        if kept_on_refusal(exc):  # a row found mid-job that cannot be written
            return (
                f"{exc}; the {chunks} predicted are kept: the same command continues them once "
                "that is mended (a fix that changes the input or an option is refused as any "
                "change is; --restart starts over)"
            )
        return None
    if failed.kept:  # a file written whole at the end: every chunk is done
        return (
            f"{failed.file_flag} {failed.path}: writing it failed ({failed.reason}); "
            f"{failed.kept} as before, and the {chunks} predicted are kept: free space and run "
            "the same command to write it without predicting again"
        )
    return (
        f"{failed.file_flag} {failed.path}: writing failed after {chunks} ({failed.reason}); "
        "they are kept: free space and run the same command to continue"
    )


def fail(job: Job, exc: BaseException) -> None:
    """A failure: every open sink aborted, the journal removed; on Ctrl-C, or a peer lost under
    torchrun (which then ends this rank), a job that can resume keeps what it wrote."""
    from mixer.prediction.resume import lost_peer

    if job.stores is not None:
        job.stores.close()
    if job.journal is not None and (
        isinstance(exc, (KeyboardInterrupt, OSError, WriteFailed))
        or lost_peer(exc, job.stop, job.world)
        or kept_on_refusal(exc)
        and job.journal.chunks
    ):  # Ctrl-C, a disk full or a quota reached (mid-job or at the end), a peer lost: the
        # chunks done stay
        for sink in job.sinks:
            sink.suspend()
        job.journal.unlock()  # as a killed job's: the same command, in this process too, goes on
        return
    for sink in job.sinks:
        sink.abort()
    if job.journal is not None:
        job.journal.remove()


def kept_on_refusal(exc: BaseException) -> bool:
    """A refusal met mid-job (a row the output cannot hold, found where check_rows' pass could
    not): the chunks done are kept, as on a full disk. Another rank's failure is that rank's."""
    from mixer.core.errors import PeerFailed

    return isinstance(exc, UserError) and not isinstance(exc, PeerFailed)


def count_languages(counts: dict, column, language: str, rows: int) -> None:
    """Add a chunk's rows to {language value: rows}: its column's values, or one language."""
    if column is None:
        counts[language] = counts.get(language, 0) + rows
        return
    for value, n in column.value_counts(sort=False).items():
        counts[str(value)] = counts.get(str(value), 0) + int(n)


SEEN_MOST = 500_000  # (text, language) pairs whose model input a job remembers (RowReader)


class RowReader:
    """What the model reads of a chunk's rows: (texts, languages, context), the one place the
    job turns its columns into Model's arguments."""

    def __init__(
        self, input_col: str, language_col: Optional[str], language: str, context_cols: list
    ):
        self.input_col, self.language_col, self.language = input_col, language_col, language
        self.context_cols = list(context_cols)
        # the (text, language) pairs seen over the chunks so far: {pair: its number}, or the
        # texts in their numbers' order (an Arrow array) where one language is the job's
        self.seen = self.read_as = self.read_blank = None
        self.forget()  # each pair's model input by its number, and whether it is blank

    def read(self, part: pd.DataFrame) -> tuple:
        texts = text_column(part, self.input_col)
        langs = (
            text_column(part, self.language_col).str.strip() if self.language_col else self.language
        )
        # the rows' own order, as texts and langs (whose index this chunk's position resets)
        context = part[self.context_cols].reset_index(drop=True) if self.context_cols else None
        return texts, langs, context

    def keyed(self, model: Model, chunk: pd.DataFrame) -> tuple:
        """(each row's model input, whether its description is blank, the chunk's Distinct),
        each distinct (text, language) of the chunk read once: a census's chunk of 100,000
        rows holds some thousands. With context columns (part of what the model reads) by row."""
        pair, first = self.pairs(chunk)
        if pair is None:
            texts, langs, context = self.read(chunk)
            inputs = np.asarray(model.model_inputs(texts, langs, context), dtype=object)
            blank = blank_descriptions(texts)
            return inputs, blank, Distinct(inputs, blank)
        read = list(dict.fromkeys(c for c in (self.input_col, self.language_col) if c))
        inputs, blank = self.inputs(model, chunk[read].iloc[first])
        return inputs[pair], blank[pair], Distinct(inputs, blank, first, pair)

    def inputs(self, model: Model, rows: pd.DataFrame) -> tuple:
        """(model inputs, blank) of rows without context, each (text, language) read by the
        model's recipe once over the file: a census's chunks repeat most of their
        descriptions. Up to SEEN_MOST of them are remembered, then the memory starts anew."""
        texts, langs, _ = self.read(rows)
        ids, keys = self.numbers(texts, langs)
        new = np.flatnonzero(ids < 0)
        if len(new):
            if len(self.read_as) + len(new) > SEEN_MOST:
                self.forget()
                new = np.arange(len(ids))
            fresh = texts.iloc[new]
            read = model.model_inputs(fresh, langs.iloc[new] if self.language_col else langs, None)
            numbers = np.arange(len(self.read_as), len(self.read_as) + len(new))
            self.remember(keys, new, numbers)
            ids[new] = numbers
            inputs = np.empty(len(read), dtype=object)
            inputs[:] = list(read)
            self.read_as = np.concatenate([self.read_as, inputs])
            blank = np.asarray(blank_descriptions(fresh), dtype=bool)
            self.read_blank = np.concatenate([self.read_blank, blank])
        return self.read_as[ids], self.read_blank[ids]

    def numbers(self, texts: pd.Series, langs) -> tuple:
        """(each row's number among the pairs remembered, -1 for one not; the rows' keys): the
        text and its language, looked up in a dict by C's map, or the text alone where one
        language is the job's, looked up by Arrow (no Python object per text)."""
        if self.language_col:
            keys = list(zip(texts, langs))
            found = map(self.seen.get, keys, repeat(-1))
            return np.fromiter(found, dtype=np.int64, count=len(keys)), keys
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = pa.array(texts, type=pa.large_string(), from_pandas=True)
        if isinstance(keys, pa.ChunkedArray):  # an Arrow-backed column read in blocks (gzip)
            keys = keys.combine_chunks()
        found = pc.index_in(keys, value_set=self.seen).fill_null(-1)
        return found.to_numpy(zero_copy_only=False).astype(np.int64), keys

    def remember(self, keys, new: np.ndarray, numbers: np.ndarray) -> None:
        """The keys of rows `new` remembered, under `numbers` (the next ones)."""
        if self.language_col:
            self.seen.update(zip([keys[i] for i in new], numbers.tolist()))
        else:  # the texts in their numbers' order
            import pyarrow as pa

            self.seen = pa.concat_arrays([self.seen, keys.take(pa.array(new))])

    def forget(self) -> None:
        """The pairs remembered forgotten (past SEEN_MOST)."""
        import pyarrow as pa

        self.seen = {} if self.language_col else pa.array([], type=pa.large_string())
        self.read_as, self.read_blank = np.empty(0, dtype=object), np.empty(0, dtype=bool)

    def blank(self, chunk: pd.DataFrame) -> np.ndarray:
        """Per row, whether its description is blank (each distinct text looked at once)."""
        codes, first = _first_seen(chunk[self.input_col])
        return blank_descriptions(text_column(chunk.iloc[first], self.input_col))[codes]

    def pairs(self, chunk: pd.DataFrame) -> tuple:
        """(per row, the number of its (text, language) in the order first seen; each's first
        row), or (None, None) with context columns: the rows are read one by one."""
        if self.context_cols:
            return None, None
        pair, first = _first_seen(chunk[self.input_col])
        if self.language_col:
            language, _ = _first_seen(chunk[self.language_col])
            pair, first = _first_seen(pd.Series(language * np.int64(len(first) + 1) + pair))
        return pair, first


def _first_seen(column: pd.Series) -> tuple:
    """(per cell, the number of its value in the order values are first seen, a missing value
    one of them; each value's first row), by Arrow's dictionary encoding where the column is
    Arrow's, else by pandas'. Values equal to pandas but not one text (a workbook's 1 and
    True, 0.0 and -0.0), and those Arrow cannot number (lists), are told apart by their text,
    as the model reads them (text_column)."""
    import pyarrow as pa

    codes = None
    if (
        isinstance(column.dtype, (pd.ArrowDtype, pd.StringDtype))
        and getattr(column.dtype, "storage", "pyarrow") == "pyarrow"
    ):
        array = pa.array(column.array)
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if pa.types.is_dictionary(array.type):  # a Parquet file's categorical column
            array = array.dictionary_decode()
        try:
            codes = array.dictionary_encode(null_encoding="encode").indices
            codes = codes.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        except pa.ArrowNotImplementedError:
            column = column.astype(object).where(column.notna(), "").astype(str)
    elif column.dtype.kind == "f" or (
        column.dtype == object
        and pd.api.types.infer_dtype(column, skipna=True) not in ("string", "empty")
    ):
        column = column.astype(object).where(column.notna(), "").astype(str)
    if codes is None:
        codes = pd.factorize(column, use_na_sentinel=False)[0].astype(np.int64, copy=False)
    # numbered as first seen: a value's first row is where the running maximum grows
    first = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    return codes, first


class DistinctStores:
    """The job's distinct-input stores (mixer.prediction.store): one for the code table or a
    matrix, one for embeddings; None where the output is written by row."""

    def __init__(self, config: PredictConfig, world, sinks: Optional[list] = None):
        from mixer.prediction.sinks import anchor, default_sinks, reads
        from mixer.prediction.store import DistinctStore

        sinks = default_sinks() if sinks is None else sinks  # the job's outputs
        budget = config.run.store_memory * MEGABYTE
        from mixer.prediction.resume import written

        beside = written(
            anchor(config, sinks)[1] or config.data.input
        )  # beside the job's first output (not a data directory; a link's target)
        spill_dir = os.path.dirname(beside)
        by_row = (
            config.outputs.output and is_shaped(config) and not is_matrix(config)
        )  # OccCANINE's table, alternatives
        has_table = reads(config, sinks, "codes") and not by_row
        self.table = (
            DistinctStore(budget, spill_dir, os.path.basename(beside)) if has_table else None
        )
        vectors = [
            path
            for sink in sinks
            if "vectors" in sink.reads
            for path in sink.files(config).values()
        ]  # beside the file the embeddings go to
        self.embeddings = (
            DistinctStore(
                budget, os.path.dirname(written(vectors[0])), os.path.basename(written(vectors[0]))
            )
            if vectors
            else None
        )

        self.logs = {}  # rank 0 of a job that resumes: each store as a stateful part

    def keep_beside(self, journal) -> None:
        """Rank 0 of a job that resumes: each store's new rows kept beside the journal."""
        from mixer.prediction.store import StoreLog

        for store, name in ((self.table, "store"), (self.embeddings, "vectors")):
            if store is not None:
                self.logs[name] = StoreLog(store, journal, name)

    def note(self, part) -> None:
        """Rank 0: a chunk's new inputs and their rows, for the journal."""
        for name, new in (("store", part.new), ("vectors", part.new_vectors)):
            if name in self.logs:
                self.logs[name].note(new)

    def share_keys(self, world) -> None:
        """All ranks: rank 0's restored stores' keys, chunk by chunk, to the other ranks'."""
        for name, store in (("store", self.table), ("vectors", self.embeddings)):
            if store is None:
                continue
            log = self.logs.get(name)
            keys = mdist.broadcast_object(
                mdist.main_only(lambda: log.keys() if log is not None else [], world), world
            )
            if not world.is_main:
                for chunk_keys in keys:
                    store.add(chunk_keys)

    def close(self) -> None:
        for store in (self.table, self.embeddings):
            if store is not None:
                store.close()


class Distinct:
    """A chunk's rows grouped by key: the model input, and whether the row has a
    description (a row without one gets no code whatever it reads). Built from the model
    inputs of the chunk's distinct (text, language) pairs, `first` their first rows and
    `pair` each row's pair (RowReader.pairs), or from every row's (`first`, `pair` None)."""

    def __init__(self, inputs: np.ndarray, blank: np.ndarray, first=None, pair=None):
        keys = np.array(inputs, dtype=object)  # a blank row's key: its input after "\x01"
        blank = np.asarray(blank, dtype=bool)
        if blank.any():
            keys[blank] = "\x01" + keys[blank]
        key_of, self.keys = pd.factorize(pd.Series(keys, dtype=object), sort=False)
        self.keys = np.asarray(self.keys, dtype=object)
        rows = len(keys) if pair is None else len(pair)
        first = np.arange(len(keys)) if first is None else first
        self.row_key = key_of if pair is None else key_of[pair]
        self.first = np.full(len(self.keys), rows, dtype=np.int64)  # each key's first row
        np.minimum.at(self.first, key_of, first)
        self.new = (self.keys[:0], None)  # the last `through`'s new keys and their rows (rank 0)
        self.taken = None  # the last `through`'s rows, one per key (rank 0)
        self.ids = {}  # {store: each key's number in it, -1 where it lacked it when asked}

    def numbers(self, store) -> np.ndarray:
        """Each key's number in `store`, -1 for a key it lacks: a key once found is not looked
        up again (the window asks before its model call, `through` after it)."""
        ids = self.ids.get(store)
        if ids is None:
            ids = self.ids[store] = store.numbers(self.keys)
        else:
            missing = np.flatnonzero(ids < 0)
            if len(missing):
                ids[missing] = store.numbers(self.keys[missing])
        return ids

    def through(self, store, chunk: pd.DataFrame, world, predictor, predict):
        """All ranks: the chunk's rows (rank 0; None elsewhere), the model asked only for the
        keys `store` lacks, at their first rows; under torchrun every rank makes the same call
        and computes its share of the batches (Predictor.shared). predict(rows of the chunk)
        gives a DataFrame or an array, a row each."""
        ids = self.numbers(store)
        new = np.flatnonzero(ids < 0)
        with predictor.shared(world):
            values = predict(chunk.iloc[self.first[new]]) if len(new) else None
        if world.is_main:
            store.add(self.keys[new], values)
            self.new = (self.keys[new], values)
        else:  # the keys alone: which inputs are known
            store.add(self.keys[new])
        if not world.is_main:
            return None
        ids[new] = store.numbers(self.keys[new])
        distinct = self.taken = store.take(self.keys, ids)
        if isinstance(distinct, pd.DataFrame):
            return distinct.iloc[self.row_key].reset_index(drop=True)
        return distinct[self.row_key]


def say_context_fit(counts: list | None, predictor) -> None:
    """Rank 0: one line for the whole input on the rows whose context was cut to fit."""
    from mixer.data.inputs.tokens import context_note

    if counts is None:
        return
    total = np.sum(counts, axis=0)
    note = context_note(
        (int(total[1] + total[2]), int(total[2])), predictor.token_ids, training=False
    )
    if note:
        print(f"note: {note}", file=sys.stderr)


def open_journal(config, predictor, world, say, sinks=(), devices=None):
    """Rank 0: the journal of a job that can resume after a kill (mixer.prediction.resume), or
    None, said in one line where parts of an earlier run are there and cannot be continued."""
    from mixer.prediction import resume
    from mixer.prediction.sinks import anchor, job_outputs

    why = resume.why_not(
        config,
        world,
        bool(config.outputs.output) and is_shaped(config) and not is_matrix(config),
        sinks,
    )
    flag, path = anchor(config, sinks)  # where the parts and the store's spill lie
    journal = None
    if why is None:
        journal = resume.Journal(config, predictor, sinks, devices)
        journal.open(config.run.restart, say)  # the lock first: nothing of a running job is touched
    elif path:  # a job that does not resume holds the lock too, for as long as it runs
        resume.HELD.append(resume.take_lock(resume.parts_dir(path), flag, path))
        if os.path.isdir(resume.parts_dir(path)):
            say(f"{flag} {path}: starts over ({why}, so it does not resume)")
            shutil.rmtree(resume.parts_dir(path))
    for flag, path in {(flag, path), *job_outputs(config, sinks).items()}:
        if path:
            resume.remove_stale(path, flag, why, say)
    return journal


def stateful(job: Job) -> dict:
    """Rank 0: {name: part} of the job's stateful parts besides its sinks, each with
    `state_dict` and `load_state_dict` (as the training hooks have): the coding's tallies,
    the crosswalks' counts, the counts over the file and the distinct-input stores."""
    parts = {"coding": job.coding, "progress": job.progress, **job.stores.logs}
    if job.classes is not None:
        parts["classes"] = job.classes
    return parts


def keep_chunk(job: Job, part: Part) -> None:
    """Rank 0, a job that resumes: the state_dict of every stateful part (each sink's,
    mixer.prediction.sink.Sink.state_dict, the coding's tallies, the stores' new rows...)
    saved, then the journal's entry."""
    from mixer.prediction.sink import sink_name

    job.stores.note(part)
    states = {}
    for sink in job.sinks:
        with writing(*sink.file()):  # a sink's pieces beside the journal
            states[sink_name(type(sink))] = sink.state_dict()
    with writing(job.journal.flag, job.journal.output):  # the parts beside the job's first file
        for name, stateful_part in stateful(job).items():
            states[name] = stateful_part.state_dict()
        job.journal.done(part.number, len(part.chunk), states)


def restore_states(job: Job) -> None:
    """Rank 0: the states saved with the last chunk a killed run completed, given back to
    each part by its name (the same sinks: the journal's made_by)."""
    from mixer.prediction.sink import sink_name

    saved = job.journal.states()
    for sink in job.sinks:
        sink.load_state_dict(saved[sink_name(type(sink))])
    for name, stateful_part in stateful(job).items():
        if saved.get(name) is not None:
            stateful_part.load_state_dict(saved[name])


class StopRequest:
    """SIGTERM / SIGUSR1 (a scheduler's pre-emption), as training takes them: the job finishes
    its chunk, keeps it in the journal and exits 0; the same command continues. Without a
    journal the signals keep their default (the job ends, its temp files go at the next run).
    Under torchrun every rank takes them and the ranks agree after each chunk."""

    def __init__(self, journal):
        self.requested, self.armed = (
            False,
            journal is not None,
        )  # the same on every rank (resume.shared)
        self.release = lambda: None  # the signals' handlers of before given back (job's end)
        if self.armed:
            from mixer.distributed.launch import stop_on_signals

            self.release = stop_on_signals(self.request)

    def request(self, *_):
        self.requested = True

    def asked(self, world) -> bool:
        """All ranks: whether any rank was asked to stop (Window, holding chunks, drops them)."""
        return self.armed and mdist.any_rank(self.requested, world)

    def agreed(self, world, number: int) -> bool:
        """All ranks, after chunk `number`: whether any rank was asked to stop (all stop after it)."""
        from mixer.prediction import faults

        faults.agreeing(world, number)  # tests: a node lost here (mixer.prediction.faults)
        return self.armed and mdist.any_rank(self.requested, world)


def check_coding_args(config, codes: bool = True) -> None:
    """--target-accuracy, --lookup and their companions: what they cannot be asked with.
    `codes`: whether an output of the job reads the code table (mixer.prediction.sinks.reads)."""
    coding = [
        flag
        for flag, value in (
            ("--target-accuracy", config.coding.target_accuracy),
            ("--lookup", config.coding.lookup),
        )
        if value is not None
    ]
    if coding and is_shaped(config):
        raise UserError(
            f"{coding[0]} marks rows of the code table; leave out --what, --alternatives and "
            "--columns occcanine"
        )
    if coding and not codes:  # e.g. --embeddings alone
        raise UserError(
            f"{coding[0]} marks rows of the code table, which --output (or --to-check, --audit) "
            "writes; pass --output FILE"
        )
    if config.coding.threshold is not None and set(config.coding.head) <= {"seq2seq"}:
        raise UserError(
            f"--threshold {config.coding.threshold:g} is the flat and full heads' (the probability a code "
            "must reach); the seq2seq head decodes its codes and takes none: leave it out, or "
            "--target-accuracy for a threshold on the row confidence"
        )
    if config.coding.lookup:
        check_input_path(config.coding.lookup, "--lookup")
    if config.coding.calibration_data:
        check_input_path(config.coding.calibration_data, "--calibration-data")
    if config.coding.target_accuracy is not None and "full" in config.coding.head:
        raise UserError(
            "--target-accuracy: the full head has no row confidence (not covered); use --head flat "
            "or seq2seq"
        )


def predict_shaped(model: Model, config, texts, langs, context) -> pd.DataFrame:
    if config.coding.alternatives:
        return model.alternatives(
            texts,
            langs,
            config.coding.alternatives,
            context,
            config.run.batch_size,
            config.outputs.columns,
            config.outputs.system,
        )
    return model.predict(
        texts,
        langs,
        config.coding.top_k,
        config.coding.head[0],
        config.coding.threshold,
        context,
        config.run.batch_size,
        what=config.outputs.what,
        columns=config.outputs.columns,
        system=config.outputs.system,
    )

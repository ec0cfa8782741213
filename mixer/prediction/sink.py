"""The protocol of a prediction job's outputs (docs/architecture.md, "A new output of
predict.py"; STYLE 17). The job (mixer.prediction.predict_job) reads a chunk, builds the model's
inputs, asks the distinct-input store and the model, applies the row steps and hands the
chunk's rows to each sink; it knows no output by name. The job is handed its sinks
(predict_file's `sinks`; predict.py's own: mixer.prediction.sinks.default_sinks), and every list
of a job's outputs is read from what each sink declares here, so that a new output is a new
sink, not edits to the job. Nothing is registered at import.

A sink need not subclass Sink: the audit's draw (mixer.audit.draw.AuditSink, a layer below)
has the same attributes and methods. No import of pandas here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class JobContext:
    """What a sink reads of its job, frozen (as a training hook reads RunState,
    mixer.training.contract): the options, the processes, the model (`predictor`, `model`),
    the columns it reads, the coding (mixer.coding.job.Coding), the crosswalks' classes (or
    None), the resume journal (or None), the time every file of the job states and how the
    job says a line. Built once the sinks are opened (rank 0); a sink sets nothing on it,
    so no sink tells another anything through the job (each reads the configuration, as the
    audit reads the output's format). The job's progress (the counts over the file) is its
    own object, not the sinks'."""

    config: Any
    world: Any
    predictor: Any
    model: Any
    columns: Any
    coding: Any
    classes: Any
    journal: Any
    started: Optional[float]
    say: Callable


class Sink:
    """One output of a prediction job. It declares, as class attributes:

    - `flag` and `field`: the flag that asks for it and its configuration field (`--to-check`,
      `to_check`; a field of two values, N FILE, names its file last), so that `files(config)`
      gives {flag: path} of the file it writes in this job, or {} where it is not wanted;
    - `reads`: what of a chunk it reads, "codes" (the code table, `part.predicted`) and/or
      "vectors" (the embeddings, `part.vectors`): the job predicts only what its sinks read;
    - `rank`: its turn among the files a job's journal lies beside and that a job may write
      alone (1 first; 0: a file that needs another output, as the summary plot does);
    - `options`: the configuration's fields that shape its file alone (the audit's design),
      and `beside(config)`: {name: path} of files it writes beside its own (the output's
      provenance), so that the output's provenance records none of them and no output
      replaces one;
    - `cells(config, columns)`: the input's columns its file holds as cells (None: all of
      them; []: none), which the job checks before any chunk where the file is an Excel or a
      Stata file (a character such a file cannot store).

    Every list of a job's outputs (the files it sweeps and locks, where its parts lie, whether
    it predicts the code table, the outputs it asks for when none is given) is read from
    these declarations (mixer.prediction.sinks). The job calls, in order:

    - `check(config)` (a class method, for every sink the job is handed, before the model loads):
      refuse a wrong option in one line (UserError); nothing is written yet. Its files' paths
      the job checks before it (a directory that is missing, one of the job's other files);
    - `wanted(config)` (a class method): whether this job writes the output (its `files`);
    - `Sink(job)` on rank 0, once the model is loaded: open the output (a temp file). `job`,
      here and below, is the job's JobContext: read-only;
    - `add(job, part)` on rank 0 for each chunk, in input order: `part` holds the chunk, its
      model inputs, its rows without a description, the code table (`predicted`, or None) and
      the embeddings (`vectors`, or None). Each sink gets its own copy (Part.read_only): what
      it changes there reaches no other sink, whatever their order;
    - `commit(job)` on rank 0 at the end: the output renamed into place, its line said. A sink
      with `early` commits before the job's closing lines, through rank 0's agreement with the
      other ranks (a failure there ends every rank): the audit;
    - `file()`: (flag, path) of the file the sink writes; the job calls `add`, `state_dict` and
      `commit` inside mixer.core.io.writing with it, so that a full disk is said of that file,
      the chunks done kept;
    - `abort()` on a failure: nothing half-written stays; `suspend()` on a stop that the
      resume journal continues (a scheduler's signal, Ctrl-C): what is written stays;
    - `state_dict()` on rank 0 after each chunk's `add`, in a job that resumes after a kill
      (mixer.prediction.resume): what the sink has gathered over the chunks so far, picklable
      (None where it keeps nothing). The journal saves every sink's state with the chunk, before
      the chunk counts as done; `load_state_dict(state)`, once after `Sink(job)` in a run that continues
      a killed one, gives the sink back the state saved with the last chunk completed, and the
      chunks after it come to `add` as in a run never killed. A sink whose own files there
      are found damaged (a node lost before they reached the disk) sets `replaying` in
      `load_state_dict`: the job then hands it each chunk completed before, in order, to
      `replay(job, part)`, its code table read back from the distinct-input store (no model),
      to gather that chunk's part again. A state that grows with the file
      (rows gathered for the end) belongs in the sink's own files in the journal's folder
      (`job.journal.path(name)`; mixer.data.tables.sinks.save_pieces), the state naming how far
      they go, so that a chunk's state costs that chunk's pieces, not the file's. As the training
      hooks keep their own state (Hook.state_dict; one name for one idea: every stateful part of
      a prediction job, the coding's tallies and the stores too). A sink that does not define
      `state_dict` cannot
      resume: a job with it starts over after a kill, and says so in one line (`resumes`).
    """

    flag = ""  # the flag that asks for this output ("--output")
    field = ""  # its configuration field ("output")
    usage = ""  # how the flag is given alone, for the line that asks for an output
    reads: frozenset = frozenset()  # "codes" (the code table) and/or "vectors" (the embeddings)
    rank = 0  # its turn among the files a job's parts lie beside (0: never alone)
    options: tuple = ()  # the configuration's fields that shape this file alone (--audit-by)
    early = False
    replaying = False  # set by `load_state_dict`: the chunks completed before come to `replay`

    @classmethod
    def cells(cls, config, columns) -> Optional[list]:
        """The input's columns this sink's file holds as cells (None: all; []: none)."""
        return []

    @classmethod
    def files(cls, config) -> dict:
        """{flag: path} of the file this sink writes in a job with `config` ({} if none)."""
        from mixer.core.options import flat_values

        value = flat_values(config).get(cls.field) if cls.field else None  # by its own name
        path = value[-1] if isinstance(value, (list, tuple)) and value else value
        return {cls.flag: path} if path and isinstance(path, str) else {}

    @classmethod
    def beside(cls, config) -> dict:
        """{name: path} of the files it writes beside its own (the output's provenance)."""
        return {}

    @classmethod
    def check(cls, config) -> None:
        pass

    @classmethod
    def wanted(cls, config) -> bool:
        """Whether this job writes the output: by default, whether its flag was given."""
        return bool(cls.files(config))

    def file(self) -> tuple:
        """(flag, path) of the file this sink writes, for the line a failure to write it says."""
        return sink_name(type(self)), "(an output passed in by the caller)"

    def add(self, job, part) -> None:
        pass

    def commit(self, job) -> None:
        pass

    def abort(self) -> None:
        pass

    def suspend(self) -> None:
        pass

    def state_dict(self):
        """What the sink has gathered so far (picklable). Not defined here: a sink that does
        not define it makes a killed job start over (`resumes`)."""
        raise NotImplementedError(f"{type(self).__qualname__} keeps no state")

    def load_state_dict(self, state) -> None:
        """The state `state_dict()` gave after the last chunk a killed run completed."""

    def replay(self, job, part) -> None:
        """A chunk the killed run completed, to a sink `load_state_dict` set `replaying` on."""


def resumes(sink_class) -> bool:
    """Whether a job with this sink can continue after a kill: its class defines `state_dict`."""
    return getattr(sink_class, "state_dict", Sink.state_dict) is not Sink.state_dict


def sink_name(sink_class) -> str:
    """The name the resume journal saves a sink's state_dict under."""
    return f"{sink_class.__module__}.{sink_class.__qualname__}"

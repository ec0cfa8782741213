"""A prediction job's outputs as sinks (docs/architecture.md, "How a new output is added";
STYLE 17). The job (mixer.prediction.predict_job) reads a chunk, builds the model's inputs,
asks the distinct-input store and the model, applies the row steps and hands the chunk's rows
to each sink; it knows no output by name. A feature registers its sink here, as it registers
its guards with mixer.data.tables.guards, so that a new output is a new sink, not edits to the job.

No import of pandas here: registration runs at `import mixer`, before `--help`; a sink's
module is imported when a job asks for the sinks.
"""

from __future__ import annotations

import os

from typing import Callable


class Sink:
    """One output of a prediction job. The job calls, in order:

    - `check(config)` (a class method, for every registered sink, before the model loads):
      refuse a wrong path or option in one line (UserError); nothing is written yet;
    - `wanted(config)` (a class method): whether this job writes the output;
    - `Sink(job)` on rank 0, once the model is loaded: open the output (a temp file);
    - `add(job, part)` on rank 0 for each chunk, in input order: `part` holds the chunk, its
      model inputs, its rows without a description, the code table (`predicted`, or None) and
      the embeddings (`vectors`, or None);
    - `commit(job)` on rank 0 at the end: the output renamed into place, its line said. A sink
      with `early` commits before the job's closing lines, through rank 0's agreement with the
      other ranks (a failure there ends every rank): the audit;
    - `file()`: (flag, path) of the file the sink writes; the job calls `add`, `state` and
      `commit` inside mixer.core.io.writing with it, so that a full disk is said of that file,
      the chunks done kept;
    - `abort()` on a failure: nothing half-written stays; `suspend()` on a stop that the
      resume journal continues (a scheduler's signal, Ctrl-C): what is written stays;
    - `state()` on rank 0 after each chunk's `add`, in a job that resumes after a kill
      (mixer.prediction.resume): what the sink has gathered over the chunks so far, picklable
      (None where it keeps nothing). The journal saves every sink's state with the chunk, before
      the chunk counts as done; `restore(state)`, once after `Sink(job)` in a run that continues
      a killed one, gives the sink back the state saved with the last chunk completed, and the
      chunks after it come to `add` as in a run never killed. A sink whose own files there
      are found damaged (a node lost before they reached the disk) sets `replaying` in
      `restore`: the job then hands it each chunk completed before, in order, to
      `replay(job, part)`, its code table read back from the distinct-input store (no model),
      to gather that chunk's part again. A state that grows with the file
      (rows gathered for the end) belongs in the sink's own files in the journal's folder
      (`job.journal.path(name)`; save_pieces below), the state naming how far
      they go, so that a chunk's state costs that chunk's pieces, not the file's. As the training
      hooks keep their own state (Hook.state_dict). A sink that does not define `state` cannot
      resume: a job with it starts over after a kill, and says so in one line (`resumes`).
    """

    early = False
    replaying = False  # set by `restore`: the chunks completed before come to `replay`

    @classmethod
    def check(cls, config) -> None:
        pass

    @classmethod
    def wanted(cls, config) -> bool:
        return False

    def file(self) -> tuple:
        """(flag, path) of the file this sink writes, for the line a failure to write it says."""
        return sink_name(type(self)), "(an output registered from outside)"

    def add(self, job, part) -> None:
        pass

    def commit(self, job) -> None:
        pass

    def abort(self) -> None:
        pass

    def suspend(self) -> None:
        pass

    def state(self):
        """What the sink has gathered so far (picklable). Not defined here: a sink that does
        not define it makes a killed job start over (`resumes`)."""
        raise NotImplementedError(f"{type(self).__qualname__} keeps no state")

    def restore(self, state) -> None:
        """The state `state()` gave after the last chunk a killed run completed."""

    def replay(self, job, part) -> None:
        """A chunk the killed run completed, to a sink `restore` set `replaying` on."""


def resumes(sink_class) -> bool:
    """Whether a job with this sink can continue after a kill: its class defines `state`."""
    return getattr(sink_class, "state", Sink.state) is not Sink.state


def sink_name(sink_class) -> str:
    """The name the resume journal saves a sink's state under."""
    return f"{sink_class.__module__}.{sink_class.__qualname__}"


# (place, load): load() -> a Sink class; the job checks, opens, adds and commits by place
_SINKS: list = []


def register(place: int, load: Callable) -> Callable:
    """Register load() -> a Sink class at `place` (its turn among the sinks: checks, chunks
    and commits go by place)."""
    if all(existing is not load for _, existing in _SINKS):
        _SINKS.append((place, load))
    return load


def registered() -> list:
    """The registered Sink classes, by place."""
    return [load() for _, load in sorted(_SINKS, key=lambda entry: entry[0])]


# ------------------------------------------------------------------ a sink's state on disk
def dump_atomically(path: str, value) -> None:
    """`value` pickled to `path`, whole or not at all, on the disk before it is renamed (a
    journal that names it then finds it whole after a node is lost, not only a process)."""
    import pickle

    with open(path + ".new", "wb") as handle:
        pickle.dump(value, handle, protocol=5)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".new", path)


def save_pieces(journal, name: str, pieces: list, saved: tuple = (0, 0)) -> tuple:
    """A sink's pieces gathered over the file (a list that only grows, e.g. each chunk's
    rows kept for the end), kept beside the journal: those added since `saved` (what the last
    call returned) are written to `<name>-<n>.pkl`; the new (files, pieces) to put in the
    sink's state. A chunk's state then costs its own pieces, not the file's."""
    files, count = saved
    if len(pieces) > count:
        dump_atomically(journal.path(f"{name}-{files}.pkl"), list(pieces[count:]))
        files, count = files + 1, len(pieces)
    return files, count


def load_pieces(journal, name: str, saved: tuple) -> list:
    """The pieces save_pieces had written when it returned `saved`."""
    import pickle

    pieces = []
    for n in range(saved[0]):
        with open(journal.path(f"{name}-{n}.pkl"), "rb") as handle:
            pieces.extend(pickle.load(handle))
    return pieces[: saved[1]]


# ------------------------------------------------------------------ the output's shape
def is_shaped(config) -> bool:
    """An output other than the code table beside the input's columns (OccCANINE's shapes,
    a matrix, alternatives): the sinks that read the code table refuse it."""
    return (
        config.outputs.what != "codes"
        or config.outputs.columns != "mixer"
        or bool(config.coding.alternatives)
    )


def is_matrix(config) -> bool:
    return config.outputs.what != "codes"


def refuse_shaped(config, flag: str, reads: str) -> None:
    """A sink that reads the code table, refused with another output shape, in one line."""
    if is_shaped(config):
        from mixer.core.errors import UserError

        raise UserError(f"{flag} {reads}; leave out --what, --alternatives and --columns occcanine")


SIDECAR_SUFFIX = ".provenance.json"  # the output's provenance, beside it (mixer.coding.provenance)


def job_files(config, own: str) -> dict:
    """{flag: path} of every file a prediction job reads or writes but `own` (the flag of the
    file being checked): an output that is one of them would replace it when renamed at the
    end (a filled check list passed back as --lookup and written again by --to-check; the
    labelled rows; the output's own provenance sidecar). A review found each replaced."""
    files = {
        "--input": config.data.input,
        "--lookup": config.coding.lookup,
        "--calibration-data": config.coding.calibration_data,
        "--code-descriptions": config.outputs.code_descriptions,
        "--output": config.outputs.output,
        "--embeddings": config.outputs.embeddings,
        "--summary-plot": config.outputs.summary_plot,
        "--to-check": config.outputs.to_check[-1] if config.outputs.to_check else None,
        "--audit": config.outputs.audit[-1] if config.outputs.audit else None,
        "--output's provenance": config.outputs.output + SIDECAR_SUFFIX
        if config.outputs.output
        else None,
    }
    for path in config.outputs.crosswalk or ():  # a user's table (not a name shipped)
        if os.path.isfile(path):
            files[f"--crosswalk {path}"] = path
    files = {flag: path for flag, path in files.items() if flag != own and path}
    model_dir = (
        config.model.checkpoint
        if config.model.checkpoint and os.path.isdir(config.model.checkpoint)
        else None
    )
    if (
        model_dir
    ):  # the run's own files (its key, weights, scores, prepared rows): prediction reads them
        for folder in (model_dir, os.path.join(model_dir, "best")):
            if os.path.isdir(folder):
                for name in sorted(os.listdir(folder)):
                    path = os.path.join(folder, name)
                    # not an earlier prediction written there (its sidecar beside it), nor a temp file
                    if (
                        os.path.isfile(path)
                        and not name.startswith(".")
                        and not name.endswith(SIDECAR_SUFFIX)
                        and not os.path.exists(path + SIDECAR_SUFFIX)
                    ):
                        files[f"--checkpoint {model_dir}'s {name}"] = path
    return files

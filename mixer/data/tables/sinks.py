"""What a prediction job's outputs (its sinks: the protocol is mixer.prediction.sink.Sink)
share below the layers that write them: a sink's pieces gathered over the file, kept on disk
beside the resume journal (the coding's tallies keep theirs the same way: mixer.coding.job);
the output shapes other than the code table (`is_shaped`) and the refusal of a sink that reads
the code table with one of them; the job's other files, which no output may replace (its
outputs as the sinks declare them, passed in: `job_files`).

No import of pandas here.
"""

from __future__ import annotations

import os


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


def job_files(config, own: str, outputs: dict) -> dict:
    """{flag: path} of every file a prediction job reads or writes but `own` (the flag of the
    file being checked): an output that is one of them would replace it when renamed at the
    end (a filled check list passed back as --lookup and written again by --to-check; the
    labelled rows; the output's own provenance sidecar). A review found each replaced.
    `outputs`: {flag: path} of the files the job writes, as its sinks declare them (passed by
    the job: mixer.prediction.sinks.written); the files it reads are its options'."""
    files = {
        "--input": config.data.input,
        "--lookup": config.coding.lookup,
        "--calibration-data": config.coding.calibration_data,
        "--code-descriptions": config.outputs.code_descriptions,
        **outputs,
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

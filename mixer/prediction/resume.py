"""A killed prediction resumes (issue 43; docs/predicting.md, "A killed prediction").

Beside the output (a job without --output: its first other output, `anchor`),
`.tmp-<output>.parts/` holds the parts of a job that resumes, and `journal.json`: the chunks
completed, their rows, the time the job first started (the time an Excel or Stata file
states) and what made them (the input file, the model, the options that change the output,
the sinks). The journal is a checkpoint of the job's stateful parts, as a training run's
last.pt is of its hooks: after each chunk it is handed {name: part}, each part with
`state_dict()` and `load_state_dict()` (each sink that resumes, mixer.prediction.sink.Sink;
the coding's tallies; the counts over the file; the distinct-input stores,
mixer.prediction.store.StoreLog), saves {name: state_dict} (`state-<k>.pkl`), then its entry.
It knows no output's format and no store's name: what grows with the file is each part's own
files there, written before its state names them (the output so far: a CSV's temp file or a
.npy matrix's rows, cut back to the length its state names, or a part file a chunk for
Parquet, Excel and Stata; each chunk's new distinct inputs and their rows, `store-<k>.pkl`
and `vectors-<k>.pkl`; a sink's pieces, `save_pieces`). A chunk's parts and states are
written before its journal entry, so a kill anywhere leaves the journal naming parts that
are whole. The same command run again gives each part its state back, skips the completed
chunks and goes on: every file written (the output and its provenance, the embeddings, the
check list, the audit, the summary plot) is byte-identical to an uninterrupted run's, and at
most one chunk's work is redone. A different input, model, option or set of sinks is refused
in one line naming it, and so is a journal of another mixer or of another layout (LAYOUT);
--restart starts over.

Under torchrun rank 0 keeps the journal and writes; the chunks completed go to every rank
(shared()) and so do the keys of rank 0's restored stores (the other ranks' stores hold keys
only), so that all ranks skip the same chunks and agree on which inputs are new. A node lost ends every rank
(torchrun); the same command continues, with any number of processes: they compute every
N-th batch of one batch plan (Predictor.shared), so the files do not depend on their number.

What does not resume starts over, said in one line (why_not): a job with a sink that keeps
no state (one a caller passed in that does not define Sink.state_dict), and OccCANINE's
table and --alternatives (written by row).
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
import shutil
from typing import Optional

from mixer.prediction import faults
from mixer.core.errors import UserError
from mixer.data.inputs.tokens import KEY_VERSION
from mixer.data.tables.sinks import dump_atomically as _dump

JOURNAL = "journal.json"
# how the parts are kept: 2, each part's state_dict by its name (1: the output's length and the
# stores' parts named by the journal itself); a journal of another layout is refused in one line
LAYOUT = 2
# options that do not change the output: a resume may change them (the input and the model by
# what they are, not the paths naming them; the number of processes: Predictor.shared)
FREE = {"debug", "store_memory", "restart", "input", "output", "checkpoint", "distributed"}
# options that name a file whose content makes the output: compared by what the file is too
FILES = ("code_descriptions", "lookup", "calibration_data")
# the model directory's own files that make the output beside its weights (which the model's
# fingerprint covers by content): its codes' descriptions (key.csv), its configuration (input
# recipe, code system, thresholds: config.json), its calibration (calibration.json) and its
# n-gram head, whose scores the flat logits add (ngram.npz, mixer.models.ngram); compared
# by their whole content (_own_identity), so that an edit between a kill and the rerun is
# refused and a copy of the directory (cp -r, new times) continues
OWN_FILES = ("key.csv", "config.json", "calibration.json", "ngram.npz")


def written(output: str) -> str:
    """The file an output's path writes: a symbolic link's target (mixer.core.io.write_target,
    as check_output_path takes it), whose directory takes the parts and the temp files, so
    that the output is renamed within its own file system (a link into project space from a
    directory elsewhere, perhaps read-only, is written through)."""
    from mixer.core.io import write_target

    return os.path.abspath(write_target(output))


def parts_dir(output: str) -> str:
    path = written(output)
    return os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}.parts")


def why_not(config, world, stores_by_row: bool, sinks=()) -> Optional[str]:
    """Why this job cannot resume after a kill, or None. Every output kind resumes, in one
    process or under torchrun (`world`: the same answer on every rank). sinks: the job's
    Sink classes."""
    from mixer.prediction.sink import resumes, sink_name
    from mixer.prediction.sinks import anchor

    if anchor(config, sinks)[1] is None:
        return "it writes no file"
    for (
        sink
    ) in sinks:  # each gathers its own state (mixer.prediction.sink.Sink.state), or cannot resume
        if not resumes(sink):
            return f"its output {sink_name(sink)} keeps no state to continue from (it defines no Sink.state_dict)"
    if stores_by_row:
        return "OccCANINE's table and --alternatives are written by row"
    return None


def remove_stale(output: str, flag: str, why: Optional[str], log) -> None:
    """The hidden temp files of an earlier job on this output killed before it could remove
    them (`.tmp-<output>.<pid>...` of a process that is gone), said in one line with why this
    job starts over (`why`) where it does not resume."""
    path = written(output)
    prefix = os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}.")
    removed = 0
    for leftover in glob.glob(glob.escape(prefix) + "*"):
        # a temp file of this output's, .tmp-<output>.<pid>[.raw, ...], not another output's
        # whose name goes on with a number (out.csv.1's .tmp-out.csv.1.<pid>, .tmp-out.csv.1.parts)
        rest = leftover[len(prefix) :]
        pid = TEMP_OF_PID.fullmatch(rest)
        if rest.endswith(".parts") and os.path.isdir(leftover):  # another output's resume parts
            continue
        if pid and not _alive(int(pid.group(1))):
            os.unlink(leftover) if not os.path.isdir(leftover) else shutil.rmtree(leftover)
            removed += 1
    if removed:
        log(
            f"{flag} {output}: removed {removed} temporary file(s) a killed run left"
            + (f"; this job starts over ({why}, so it does not resume)" if why else "")
        )


# what follows `.tmp-<output>.` in a job's own temp files: its process id, then nothing or one of
# the suffixes its writers add (EmbeddingWriter's .raw, the store's spill, Stata's pieces, a
# backup of replace_together's)
TEMP_OF_PID = re.compile(r"(\d+)(?:\.(?:raw|store\.sqlite|parts|strls|final|old))?")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Journal:
    """The parts of one output: `chunks` completed so far, and what made them."""

    def __init__(self, config, predictor, sinks=(), devices=None):
        from mixer.audit.draw import model_fingerprint
        from mixer.core.options import flat_values
        from mixer.prediction.sink import sink_name
        from mixer.prediction.sinks import anchor

        from mixer.data.tables.writing import file_time

        self.flag, self.output = anchor(
            config, sinks
        )  # the parts beside --output, or its first other output
        self.dir = parts_dir(self.output)
        # the time every Excel or Stata file of the job states (the output, a check list, an
        # audit): the first run's, kept
        self.started = file_time()
        options = json.loads(
            json.dumps({k: v for k, v in flat_values(config).items() if k not in FREE}, default=str)
        )
        for name in FILES:  # the file as it is now, not only its name
            if options.get(name):
                options[name] = {"path": options[name], **_file_identity(options[name])}
        if options.get("crosswalk"):  # a user's crosswalk table as it is now too
            from mixer.data.labels.crosswalk import CROSSWALKS

            options["crosswalk"] = [
                name if name.lower() in CROSSWALKS else {"path": name, **_file_identity(name)}
                for name in options["crosswalk"]
            ]
        # the calibration the confidences are read with (calibration.json, which --calibrate rewrites)
        options["calibration"] = {
            head: list(values) for head, values in sorted(predictor.calibration.items())
        }
        from mixer.version import __version__

        # the model's own flat thresholds (config.json, which a run's tuning writes) and the code
        options["model_thresholds"] = [
            predictor.config.get("threshold"),
            predictor.config.get("thresholds"),
        ]
        self.made_by = {
            "mixer": __version__,
            "journal": LAYOUT,
            "input": _file_identity(config.data.input),
            **_codebook_identity(config),
            "model": model_fingerprint(predictor),
            "device": ranks_device(devices or [device_numerics(predictor)]),
            "keys": KEY_VERSION,
            "options": options,
            "sinks": [sink_name(sink) for sink in sinks],
            "own_files": own_files(config, predictor),
        }
        self.chunks, self.rows = 0, 0
        self.lock = None  # open(): held while the job runs

    def open(self, restart: bool, log) -> None:
        """Start, or continue the parts an earlier run of the same command left."""
        self._lock()
        journal = os.path.join(self.dir, JOURNAL)
        if os.path.isdir(self.dir) and (restart or not os.path.exists(journal)):
            shutil.rmtree(self.dir)
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir)
            self._save()
            return
        try:
            with open(journal, encoding="utf-8") as handle:
                saved = json.load(handle)
            if (
                not isinstance(saved, dict)
                or not {"made_by", "chunks", "rows"} <= set(saved)
                or not isinstance(saved["made_by"], dict)
                or saved["made_by"].get("mixer") == self.made_by["mixer"]  # another's: refused
                and not {"input", "model", "options"} <= set(saved["made_by"])
            ):  # valid JSON, yet not a journal's shape (a file written over, edited by hand)
                raise ValueError("not a journal")
        except ValueError:  # a node lost before it reached the disk, a file written over
            log(
                f"{self.flag} {self.output}: starts over (an unfinished run's {journal} cannot be "
                "read as one: its node lost before the file reached the disk, or the file "
                "written over)"
            )
            shutil.rmtree(self.dir)
            os.makedirs(self.dir)
            self._save()
            return
        changed = _what_changed(saved["made_by"], self.made_by)
        if changed:
            self.unlock()  # refused: the parts stay as they were, for the run that made them
            raise UserError(
                f"{self.flag} {self.output}: an unfinished run's parts ({self.dir}) were made with "
                f"{changed}; run that command again to continue, or pass --restart to start over"
            )
        broken = saved["chunks"] and not os.path.exists(
            os.path.join(self.dir, _state(saved["chunks"] - 1))
        )
        if broken:  # parts that cannot be continued (a kill at the end)
            log(
                f"{self.flag} {self.output}: starts over (an unfinished run's parts, {self.dir}, lack the state "
                "of its last chunk)"
            )
            shutil.rmtree(self.dir)
            os.makedirs(self.dir)
            self._save()
            return
        if not saved["chunks"]:  # no chunk to continue: only the first window's groups, if any
            groups = 0
            for name in os.listdir(self.dir):  # (WindowGroups: files of this job's, checked)
                if not name.startswith(WindowGroups.PREFIX) or name.endswith(".new"):
                    path = os.path.join(self.dir, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
                else:
                    groups += 1
            kernels = other_kernels(saved["made_by"], self.made_by)
            if groups:
                log(
                    f"{self.flag} {self.output}: continuing an unfinished run's first model call "
                    f"after {groups:,} group(s) of its batches (--restart starts over)"
                )
            if groups and kernels:
                log(f"{self.flag} {self.output}: the unfinished run {kernels}")
            self.started = saved.get("started") or self.started
            self._save()
            return
        self.chunks, self.rows = saved["chunks"], saved["rows"]
        self.started = saved.get("started") or self.started
        log(
            f"{self.flag} {self.output}: continuing an unfinished run after its {self.chunks:,} chunk(s) "
            f"({self.rows:,} rows; --restart starts over)"
        )
        kernels = other_kernels(saved["made_by"], self.made_by)
        if kernels:
            log(f"{self.flag} {self.output}: the unfinished run {kernels}")

    def path(self, name: str) -> str:
        """A file of a part's own in the parts (removed with them)."""
        return os.path.join(self.dir, name)

    def states(self) -> dict:
        """What done() saved with the last completed chunk: {name: state_dict} of each part."""
        with open(os.path.join(self.dir, _state(self.chunks - 1)), "rb") as handle:
            return pickle.load(handle)

    def done(self, chunk: int, rows: int, states: dict) -> None:
        """Chunk `chunk` (from 0) of `rows` rows handed to every part: `states`, {name: the
        part's state_dict()} (each part's own files, which a state may name, are on the disk
        already), saved, then the journal's entry."""
        _dump(os.path.join(self.dir, _state(chunk)), states)
        faults.written(chunk)  # tests: a kill -9 here (mixer.prediction.faults)
        self.chunks, self.rows = chunk + 1, self.rows + rows
        self._save()
        if os.path.exists(
            os.path.join(self.dir, _state(chunk - 1))
        ):  # the journal names the newer one now
            os.unlink(os.path.join(self.dir, _state(chunk - 1)))
        faults.journaled(chunk)  # tests: a scheduler's signal here

    def _save(self) -> None:
        journal = os.path.join(self.dir, JOURNAL)
        with open(journal + ".new", "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "made_by": self.made_by,
                    "chunks": self.chunks,
                    "rows": self.rows,
                    "started": self.started,
                },
                handle,
            )
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(journal + ".new", journal)

    def remove(self) -> None:
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)
        release_lock(self.lock)  # the job is over: the lock goes with its parts
        self.lock = None

    def _lock(self) -> None:
        self.lock = take_lock(self.dir, self.flag, self.output)

    def unlock(self) -> None:
        """The job ends with its parts kept (a signal, Ctrl-C, a full disk): its lock is freed,
        as the kernel frees a killed job's, and its file stays for the next job to take."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def take_lock(parts: str, flag: str, output: str):
    """One job at a time on an output's parts: a second job on the same output (a requeue
    while the first still runs, a double launch, another command on that file) would continue
    or remove the parts under it. The lock (flock on `<parts>.lock`) is the kernel's: it goes
    with the process however the process ends, so a killed job never leaves it held. The open
    file, held while the job runs (None on a file system without locks)."""
    import errno
    import fcntl

    while True:
        handle = open(parts + ".lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return None  # a file system without locks: one job at a time is the user's
            raise UserError(
                f"{flag} {output}: another predict.py is writing it now (it holds "
                f"{parts}.lock); wait for it to end, or write to another file"
            ) from None
        try:  # the file locked is still the one at that path (a job ending unlinks it)
            if os.stat(handle.name).st_ino == os.fstat(handle.fileno()).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()


HELD = []  # the locks of a job that does not resume (open_journal), held while it runs


def release_held() -> None:
    while HELD:
        release_lock(HELD.pop())


def release_lock(handle) -> None:
    """The job is over: its lock file goes, then the lock (take_lock checks which file it holds)."""
    if handle is not None:
        os.unlink(handle.name)
        handle.close()


def device_numerics(predictor) -> dict:
    """The device a job computes on as far as it moves the bits of the rows: its kind (cpu,
    cuda), its name (a GPU's model, a CPU's vector instructions: the kernels PyTorch picks)
    and the precision run there (bf16 given on a CPU runs fp32: mixer.core.precision)."""
    import torch

    kind = str(predictor.device).split(":")[0]
    if kind == "cuda":
        name = torch.cuda.get_device_name(predictor.device)
    else:
        name = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")() or "cpu"
    return {"kind": kind, "name": name, "precision": predictor.precision}


def ranks_device(devices: list) -> dict:
    """The device of a job's ranks (device_numerics of each, rank 0 first): each of kind,
    name and precision as one value where every rank has it, else each rank's, so that a
    rank on another GPU model or CPU than rank 0's is part of what the journal compares."""
    return {
        key: devices[0][key]
        if all(device[key] == devices[0][key] for device in devices)
        else "; ".join(f"rank {rank} {device[key]}" for rank, device in enumerate(devices))
        for key in ("kind", "name", "precision")
    }


def _device(device: dict) -> str:  # a journal's may lack a key (written by hand)
    return f"{device.get('kind')} ({device.get('name')}), {device.get('precision')}"


def other_kernels(saved: dict, now: dict) -> Optional[str]:
    """A line for a job continued on a device of the same kind and precision but another
    name (a node of another CPU generation or GPU model: its kernels round otherwise in the
    last bits), else None. Another kind or precision is refused (_what_changed)."""
    before = saved.get("device")
    if not isinstance(before, dict) or before == now["device"]:
        return None
    return (
        f"began on {_device(before)} and continues on {_device(now['device'])}: the inputs first "
        "met from here on are computed by this device's kernels, which round otherwise in the "
        "last bits (an input met before keeps its values; a near tie may take the other code); "
        "--restart computes every row here"
    )


def _state(chunk: int) -> str:
    return f"state-{chunk}.pkl"


class WindowGroups:
    """The groups of a window's model call kept beside the journal (rank 0;
    mixer.prediction.predict_job.Window): the call is made in groups of consecutive batches of
    its batch plan, and each group's results (a store's rows and their keys) are kept here as
    soon as the group is done, so that a kill during the call redoes at most one group. A
    file a group, `window-<the window's first chunk>-<store>-<group>.pkl`: the pickled (first
    chunk, store, group, keys, rows) behind a header with its length and its checksum
    (xxh3-64), written and read as a stream (the group is held once) and on the disk (fsync)
    before its name is. A file that is torn, garbled, of another window (another first chunk)
    or of other keys is never trusted: the group is computed again. The files are the
    journal's: they go with its parts (the job's end, --restart, a start over), a run that
    continues a journal of no chunk keeps them (Journal.open), and they are removed once the
    window's first chunk, whose journal entry carries the window's new inputs, is kept; those
    of an earlier window (a kill between that entry and their removal) when the next window's
    call begins. The journal's fingerprint guards them as every part: another input, model or
    option is refused or starts over before a group is read."""

    PREFIX = "window-"
    MAGIC = b"mixer window group 1\n"

    def __init__(self, journal, first: int, store: str):
        self.journal, self.first, self.store = journal, first, store

    def path(self, group: int) -> str:
        return self.journal.path(f"{self.PREFIX}{self.first}-{self.store}-{group}.pkl")

    def sweep(self) -> None:
        """The files of another window's groups, and any this window's write left cut short."""
        mine = f"{self.PREFIX}{self.first}-"
        for name in os.listdir(self.journal.dir):
            if name.startswith(self.PREFIX) and (
                not name.startswith(mine) or name.endswith(".new")
            ):
                os.unlink(self.journal.path(name))

    def remove(self) -> None:
        """This window's files: its first chunk is kept, with every new input of the window."""
        mine = f"{self.PREFIX}{self.first}-"
        for name in os.listdir(self.journal.dir):
            if name.startswith(mine):
                os.unlink(self.journal.path(name))

    def save(self, group: int, keys, rows) -> None:
        """Group `group`'s keys and rows on the disk (fsync), whole or under no name."""
        import struct

        import xxhash

        path = self.path(group)
        try:
            with open(path + ".new", "wb") as handle:
                handle.write(self.MAGIC + bytes(16))  # the length and the checksum, once known
                digest, length = xxhash.xxh3_64(), [0]

                class Hashed:  # the pickle's bytes hashed as they are written, never held whole
                    def write(self, data) -> int:  # bytes, or a buffer of protocol 5 (an array's)
                        view = memoryview(data).cast("B")
                        digest.update(view)
                        length[0] += view.nbytes
                        return handle.write(view)

                pickle.dump((self.first, self.store, group, keys, rows), Hashed(), protocol=5)
                handle.seek(len(self.MAGIC))
                handle.write(struct.pack("<QQ", length[0], digest.intdigest()))
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:  # a full disk: no piece of it left on the disk (fail keeps the rest)
            if os.path.exists(path + ".new"):
                os.unlink(path + ".new")
            raise
        os.replace(path + ".new", path)

    def load(self, group: int, keys):
        """Group `group`'s rows where its file is whole and holds these `keys` (in this
        order) of this window's store; None otherwise (the group is computed again)."""
        import struct

        import numpy as np
        import xxhash

        path = self.path(group)
        try:
            with open(path, "rb") as handle:
                head = handle.read(len(self.MAGIC) + 16)
                if len(head) < len(self.MAGIC) + 16 or not head.startswith(self.MAGIC):
                    return None
                length, expected = struct.unpack("<QQ", head[len(self.MAGIC) :])
                if os.fstat(handle.fileno()).st_size != len(head) + length:
                    return None
                digest = xxhash.xxh3_64()  # checked before a byte is unpickled
                while block := handle.read(1 << 22):
                    digest.update(block)
                if digest.intdigest() != expected:
                    return None
                handle.seek(len(head))
                first, store, number, kept, rows = pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError):
            return None
        if (first, store, number) != (self.first, self.store, group):
            return None
        kept = np.asarray(kept, dtype=object)
        if len(kept) != len(keys) or not (kept == np.asarray(keys, dtype=object)).all():
            return None
        return rows


class Followed:
    """Another rank's view of rank 0's journal under torchrun (shared): the chunks
    completed; the parts, the output and the journal stay with rank 0."""

    def __init__(self, chunks: int, rows: int):
        self.chunks, self.rows = chunks, rows

    def remove(self) -> None:
        pass

    def unlock(self) -> None:
        pass


def shared(journal, world):
    """All ranks: rank 0's journal (or None) as each rank sees it: rank 0's own, a Followed
    on the others, so that every rank skips the chunks completed (the stores' keys follow
    from rank 0's restored stores: mixer.prediction.predict_job.open_sinks)."""
    from mixer.distributed import world as mdist

    if not world.is_distributed:
        return journal

    def view():
        return None if journal is None else (journal.chunks, journal.rows)

    state = mdist.broadcast_object(mdist.main_only(view, world), world)  # all ranks
    if world.is_main or state is None:
        return journal
    return Followed(*state)


def lost_peer(exc: BaseException, stop, world) -> bool:
    """Whether a failure under torchrun is another rank lost (killed, its node gone), not this
    job's own error: a collective that lost its peer, or torchrun's SIGTERM (`stop`, a
    StopRequest), which ends the other ranks once one has ended. The parts stay, for the
    same command."""
    import re

    import torch.distributed as dist

    if world is None or not world.is_distributed:
        return False
    if stop is not None and stop.requested:
        return True
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    return isinstance(exc, RuntimeError) and bool(
        re.search(
            r"closed by peer|reset by peer|broken pipe|connection refused|timed out|timeout",
            str(exc),
            re.I,
        )
    )


SAMPLE = 1 << 16  # bytes hashed at each end of a file (its identity: _file_identity)


def _file_identity(path: str) -> dict:
    """A file as a resume knows it: its size, its modification time and a hash of its first
    and last 64 KiB (not its path: a link to it, or a copy that keeps its time, as cp -p and
    rsync -a make on a node's scratch disk, is the same file). The path is kept to be shown."""
    import xxhash

    stat = os.stat(path)
    digest = xxhash.xxh3_64()
    with open(path, "rb") as handle:
        digest.update(handle.read(SAMPLE))
        if stat.st_size > SAMPLE:
            handle.seek(max(SAMPLE, stat.st_size - SAMPLE))
            digest.update(handle.read(SAMPLE))
    return {
        "path": os.path.abspath(path),
        "bytes": stat.st_size,
        "modified_ns": stat.st_mtime_ns,
        "sample": digest.hexdigest(),
    }


def own_files(config, predictor) -> dict:
    """{name: the file as a resume knows it (_own_identity), or None where it is absent} of
    the model directory's OWN_FILES: a run's directory, RUN/best, an OccCANINE model's own
    directory, or for an epoch's weights the run directory beside them, whose key.csv and
    config.json they are read with (not its calibration.json nor ngram.npz, which are of the
    run's own weights). {} for a model without a directory (a hub id)."""
    folder, names = predictor.config.get("model_dir"), OWN_FILES
    if not folder and str(config.model.checkpoint or "").endswith(".safetensors"):
        folder = os.path.dirname(os.path.abspath(config.model.checkpoint))
        names = tuple(name for name in OWN_FILES if name not in ("calibration.json", "ngram.npz"))
    if not folder or not os.path.isdir(folder):
        return {}
    paths = {name: os.path.join(folder, name) for name in names}
    return {
        name: _own_identity(path) if os.path.isfile(path) else None for name, path in paths.items()
    }


def _own_identity(path: str) -> dict:
    """A model directory's own file as a resume knows it: as a file an option names
    (_file_identity), and by a hash of its whole content. These files are small (read
    whole in a moment, unlike a census), and the weights beside them are known by their
    content: a model directory staged again with `cp -r` (new times) is the same model."""
    import xxhash

    digest = xxhash.xxh3_64()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return {**_file_identity(path), "content": digest.hexdigest()}


def _own_file_changed(saved: dict, now: dict) -> Optional[str]:
    """What differs in the model directory's own files (a journal from before they were
    recorded: nothing), for a refusal."""
    if "own_files" not in saved:
        return None
    for name in sorted(set(saved["own_files"]) | set(now["own_files"])):
        before, value = saved["own_files"].get(name), now["own_files"].get(name)
        if before is None and value is None:
            continue
        if before is None or value is None:
            if before is None:
                return f"no {name} in the model's directory ({value['path']} added since)"
            return f"the model's {name} {before['path']} (removed since)"
        if "content" in before and "content" in value:  # by what it holds, not its time
            if before["content"] == value["content"] and before["bytes"] == value["bytes"]:
                continue
            if before["path"] == value["path"]:
                return _file_changed(f"the model's {name}", before, value)
            return (
                f"the model's {name} with another content ({before['path']}; now {value['path']}: "
                "a copy of the model's directory holds the same files)"
            )
        if not _same_file(before, value):
            return _file_changed(f"the model's {name}", before, value)
    return None


def _codebook_identity(config) -> dict:
    """{"codebook": its identity} for an IPUMS fixed-width input, whose rows its codebook
    (the .xml beside it, or --ddi's) makes; {} for any other."""
    from mixer.data.tables import ipums
    from mixer.data.tables.reading import table_kind

    if table_kind(config.data.input) != "ipums":
        return {}
    return {
        "codebook": _file_identity(ipums.ddi_path(config.data.input, config.table_options("input")))
    }


def _same_file(before: dict, now: dict) -> bool:
    if "sample" not in before:  # a journal from before the sample: by its path too
        return all(before.get(k) == now.get(k) for k in ("path", "bytes", "modified_ns"))
    return all(before.get(k) == now.get(k) for k in ("bytes", "modified_ns", "sample"))


def _file_changed(flag: str, before: dict, now: dict) -> str:
    """What differs between the file a journal names and the one given now, for a refusal."""
    import time

    def shown(file: dict) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(file["modified_ns"] // 10**9))
        return f"{file['bytes']:,} bytes, modified {when}"

    if before["path"] == now["path"]:
        same = {
            k for k in ("bytes", "modified_ns", "sample") if k in before and before[k] == now[k]
        }
        what = "the file changed since"
        if same == {"bytes", "sample"}:  # `touch`, or a copy over it that kept no time
            what = "its time changed since, its size and its first and last 64 KiB did not"
        elif same == {"bytes", "modified_ns"}:  # an edit whose time was put back
            what = "its first or last 64 KiB changed since, its size and time did not"
        return f"{flag} {now['path']} as it was then ({shown(before)}; now {shown(now)}: {what})"
    other = f"another {flag}" if flag.startswith("--") else f"{flag} at another path"
    return (
        f"{other} ({before['path']}, {shown(before)}; now {now['path']}, {shown(now)}: "
        "a copy is the same file only where it keeps the time, as cp -p and rsync -a do)"
    )


def _path_of(value):
    """A crosswalk as a journal keeps it (a shipped name, or a file's identity), by its name."""
    return value.get("path") if isinstance(value, dict) else value


def _what_changed(saved: dict, now: dict) -> Optional[str]:
    if saved.get("mixer") != now["mixer"]:
        return f"mixer {saved.get('mixer', 'before 0.2')} (now {now['mixer']})"
    if saved.get("journal", 1) != now["journal"]:  # parts kept otherwise
        return (
            f"a journal of layout {saved.get('journal', 1)} (now {now['journal']}: an earlier "
            "mixer's, which kept its parts otherwise)"
        )
    if saved.get("keys", 1) != now["keys"]:  # stores of keys another version made
        return (
            f"input keys of version {saved.get('keys', 1)} (now {now['keys']}: an earlier mixer's, "
            "which tell model inputs apart otherwise)"
        )
    if not _same_file(saved["input"], now["input"]):
        return _file_changed("--input", saved["input"], now["input"])
    if "codebook" in now and not _same_file(saved.get("codebook") or {}, now["codebook"]):
        return _file_changed("--ddi", saved.get("codebook") or now["codebook"], now["codebook"])
    if saved["model"] != now["model"]:  # named by the file that changed where one did (ngram.npz)
        changed = _own_file_changed(saved, now)
        return changed or f"another model (weights {saved['model']}, now {now['model']})"
    before = saved.get("device", now["device"])
    if not isinstance(before, dict) or any(
        before.get(k) != now["device"][k] for k in ("kind", "precision")
    ):
        shown = _device(before) if isinstance(before, dict) else before
        return (
            f"another device ({shown}; now {_device(now['device'])}: another kind of device or "
            "precision, whose rows would differ from the first run's beyond rounding; run it on "
            "the kind the first run ran on, e.g. a Slurm --partition or --gres naming it)"
        )
    for name, value in now["options"].items():
        before = saved["options"].get(name)
        if json.loads(json.dumps(value)) == before:
            continue
        if name == "model_thresholds":
            return "other flat thresholds in the model's config.json (a run's tuning writes them)"
        if name == "calibration":
            return "another calibration of the model (its calibration.json changed since, e.g. by predict.py --calibrate)"
        if name == "tables":  # the reading options of every file, by their flags' names
            before = before or {}
            key = next(k for k in sorted(set(value) | set(before)) if value.get(k) != before.get(k))
            return f"--{key.replace('_', '-')} {_shown(before.get(key))} (now {_shown(value.get(key))})"
        if name in FILES and isinstance(value, dict) and isinstance(before, dict):
            if _same_file(before, value):  # the same file, by another path
                continue
            return _file_changed(f"--{name.replace('_', '-')}", before, value)
        if name == "crosswalk" and isinstance(before, list) and len(before) == len(value):
            pairs = list(zip(before, value))  # a user's table: a file as --input is
            files = all(b == v or isinstance(b, dict) and isinstance(v, dict) for b, v in pairs)
            if files:
                edited = [(b, v) for b, v in pairs if b != v and not _same_file(b, v)]
                if not edited:
                    continue  # the same tables, a file by another path
                return _file_changed("--crosswalk", *edited[0])
        if name == "crosswalk":  # the tables' names and paths, not their identities
            before, value = ([_path_of(w) for w in walks or []] for walks in (before, value))
        shown = [v.get("path") if isinstance(v, dict) else v for v in (before, value)]
        return f"--{name.replace('_', '-')} {_shown(shown[0])} (now {_shown(shown[1])})"
    if saved.get("sinks") != now.get("sinks"):  # outputs a caller passed in (predict_file's sinks)
        return f"other outputs ({_shown(saved.get('sinks'))}; now {_shown(now.get('sinks'))})"
    return _own_file_changed(saved, now)


def _shown(value) -> str:
    if value is None or value is False:
        return "unset"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)

"""A killed prediction resumes (issue 43; docs/predicting.md, "A killed prediction").

Beside the output, `.tmp-<output>.parts/` holds the output written so far, each chunk's
new distinct inputs and their rows (`store-<k>.pkl`: the store as it grew, so that a
resumed job fills later rows from the very values an uninterrupted one would) and
`journal.json`: the chunks completed, the output's length after them, the time the job
first started (the time an Excel or Stata file states) and what made them (the input file,
the model, the options that change the output). The output so far is, by kind: a CSV's
temp file (`output.csv`) or a .npy matrix's rows (`output.npy.raw`), each cut back to the
journal's length on a resume; for Parquet, Excel and Stata, which state their rows in a
footer or header, each chunk's rows as a part file (`part-<k>.arrow`, mixer.data.writing's
OutputWriter), from which the file is written the same way whether the job ran through or
was resumed. The same command run again reads the store back, skips the completed chunks
and goes on: the final file is byte-identical to an uninterrupted run's, and at most one
chunk's work is redone. A different input, model or option is refused in one line naming
it; --restart starts over.

Under torchrun rank 0 keeps the journal and writes; the chunks completed and the store's
keys go to every rank (shared(); the other ranks' stores hold keys only), so that all ranks
skip the same chunks and agree on which inputs are new. A node lost ends every rank
(torchrun); the same command continues, with the same number of processes (a chunk's new
inputs are shared out over them, so their number sets the batches, and floats differ from
one process's within rounding: docs/predicting.md).

What does not resume starts over, said in one line (why_not): jobs whose other outputs
gather over the whole file (embeddings, a check list, an audit, a summary plot, a lookup's
or target's tallies) and OccCANINE's table and --alternatives (written by row).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pickle
import shutil
import sys
from typing import Optional

from mixer.core.errors import UserError

JOURNAL = "journal.json"
# options that do not change the output: a resume may change them (the input and the model by
# what they are, not the paths naming them; the number of processes by itself, `processes`)
FREE = {"debug", "store_memory", "restart", "input", "output", "checkpoint", "distributed"}
# options that name a file whose content makes the output: compared by what the file is too
FILES = ("code_descriptions", "lookup", "calibration_data")
# tests: "k" ends the job (os._exit) after writing chunk k, before its journal entry (a kill
# -9 there); "k:TERM" sends the job SIGTERM after chunk k (a scheduler's pre-emption); under
# torchrun "k:LOST" ends the last rank (os._exit) once chunk k is done (a node lost)
FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"


def parts_dir(output: str) -> str:
    path = os.path.abspath(output)
    return os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}.parts")


def why_not(args, world, stores_by_row: bool) -> Optional[str]:
    """Why this job cannot resume after a kill, or None. Every output kind resumes, in one
    process or under torchrun (`world`: the same answer on every rank)."""
    if not args.output:
        return "it writes no --output"
    for flag, value in (("--embeddings", args.embeddings), ("--to-check", args.to_check), ("--audit", args.audit),
                        ("--summary-plot", args.summary_plot), ("--lookup", args.lookup),
                        ("--target-accuracy", args.target_accuracy)):
        if value:
            return f"{flag} gathers over the whole file"
    if stores_by_row:
        return "OccCANINE's table and --alternatives are written by row"
    return None


def remove_stale(output: str, flag: str, why: Optional[str], log) -> None:
    """The hidden temp files of an earlier job on this output killed before it could remove
    them (`.tmp-<output>.<pid>...` of a process that is gone), said in one line with why this
    job starts over (`why`) where it does not resume."""
    path = os.path.abspath(output)
    prefix = os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}.")
    removed = 0
    for leftover in glob.glob(glob.escape(prefix) + "*"):
        pid = leftover[len(prefix):].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            os.unlink(leftover) if not os.path.isdir(leftover) else shutil.rmtree(leftover)
            removed += 1
    if removed:
        log(f"{flag} {output}: removed {removed} temporary file(s) a killed run left"
            + (f"; this job starts over ({why}, so it does not resume)" if why else ""))


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

    def __init__(self, args, predictor, processes: int = 1):
        from mixer.audit.draw import model_fingerprint

        from mixer.data.writing import file_time, output_kind

        self.dir = parts_dir(args.output)
        self.output = args.output
        kind = "npy" if args.output.lower().endswith(".npy") else output_kind(args.output)
        self.tmp = os.path.join(self.dir, "output." + SUFFIXES[kind])  # the file, written, renamed at the end
        # the file that grows a chunk at a time, cut back to the journal's size on a resume (a CSV;
        # a .npy's rows); the other kinds keep each chunk's rows in a part file (OutputWriter)
        self.growing = {"csv": self.tmp, "npy": self.tmp + ".raw"}.get(kind)
        # the time an Excel or Stata file states: the first run's, kept
        self.started = file_time() if kind in ("excel", "stata") else None
        options = json.loads(json.dumps({k: v for k, v in dataclasses.asdict(args).items() if k not in FREE},
                                        default=str))
        for name in FILES:  # the file as it is now, not only its name
            if options.get(name):
                options[name] = {"path": options[name], **_file_identity(options[name])}
        # the calibration the confidences are read with (calibration.json, which --calibrate rewrites)
        options["calibration"] = {head: list(values) for head, values in sorted(predictor.calibration.items())}
        # the processes share each chunk's new inputs out, so their number sets the batches (floats within
        # rounding of one process's): a resume in another layout would match neither file
        options["processes"] = processes
        self.made_by = {"input": _file_identity(args.input), "model": model_fingerprint(predictor),
                        "options": options}
        self.chunks, self.rows, self.size = 0, 0, 0
        fault = os.environ.get(FAULT, "-1").split(":")
        self.fault, self.fault_signal = int(fault[0]), fault[1] if len(fault) > 1 else None
        if self.fault_signal == "LOST":  # the last rank's (lose_rank)
            self.fault = -1

    def open(self, restart: bool, log) -> None:
        """Start, or continue the parts an earlier run of the same command left."""
        journal = os.path.join(self.dir, JOURNAL)
        if os.path.isdir(self.dir) and (restart or not os.path.exists(journal)):
            shutil.rmtree(self.dir)
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir)
            self._save()
            return
        with open(journal, encoding="utf-8") as handle:
            saved = json.load(handle)
        changed = _what_changed(saved["made_by"], self.made_by)
        if changed:
            raise UserError(f"--output {self.output}: an unfinished run's parts ({self.dir}) were made with "
                            f"{changed}; run that command again to continue, or pass --restart to start over")
        self.chunks, self.rows, self.size = saved["chunks"], saved["rows"], saved["size"]
        self.started = saved.get("started", self.started)
        if self.growing is not None:
            with open(self.growing, "ab") as handle:  # a chunk written after the last journal entry goes
                handle.truncate(self.size)
        log(f"--output {self.output}: continuing an unfinished run after its {self.chunks:,} chunk(s) "
            f"({self.rows:,} rows; --restart starts over)")

    def stored(self):
        """(keys, rows) of each completed chunk's new inputs, in order."""
        for k in range(self.chunks):
            with open(os.path.join(self.dir, f"store-{k}.pkl"), "rb") as handle:
                yield pickle.load(handle)

    def done(self, chunk: int, rows: int, new_keys, new_rows) -> None:
        """Chunk `chunk` (from 0) written to the output: its store part, then the journal."""
        part = os.path.join(self.dir, f"store-{chunk}.pkl")
        with open(part + ".new", "wb") as handle:
            pickle.dump((new_keys, new_rows), handle, protocol=5)
        os.replace(part + ".new", part)
        if chunk == self.fault and self.fault_signal is None:
            sys.stderr.flush()
            os._exit(9)
        self.chunks, self.rows = chunk + 1, self.rows + rows
        self.size = os.path.getsize(self.growing) if self.growing is not None else 0
        self._save()
        if chunk == self.fault:
            import signal

            os.kill(os.getpid(), getattr(signal, "SIG" + self.fault_signal))

    def _save(self) -> None:
        journal = os.path.join(self.dir, JOURNAL)
        with open(journal + ".new", "w", encoding="utf-8") as handle:
            json.dump({"made_by": self.made_by, "chunks": self.chunks, "rows": self.rows, "size": self.size,
                       "started": self.started}, handle)
        os.replace(journal + ".new", journal)

    def remove(self) -> None:
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)


class Followed:
    """Another rank's view of rank 0's journal under torchrun (shared): the chunks
    completed and the keys their store parts hold; their rows, the output and the journal
    stay with rank 0."""

    def __init__(self, chunks: int, rows: int, keys: list):
        self.chunks, self.rows, self.keys = chunks, rows, keys

    def stored(self):
        for keys in self.keys:
            yield keys, None

    def remove(self) -> None:
        pass


def shared(journal, world):
    """All ranks: rank 0's journal (or None) as each rank sees it: rank 0's own, a Followed
    on the others, so that every rank skips the chunks completed and its store knows
    their keys."""
    from mixer.distributed import world as mdist

    if not world.is_distributed:
        return journal
    state = mdist.main_only(lambda: None if journal is None else (
        journal.chunks, journal.rows, [keys for keys, _ in journal.stored()]), world)
    state = mdist.broadcast_object(state, world)  # all ranks
    if world.is_main or state is None:
        return journal
    return Followed(*state)


def lose_rank(world, chunk: int) -> None:
    """Tests (FAULT "k:LOST"): the last rank of several ends at once after chunk k."""
    fault = os.environ.get(FAULT, "").split(":")
    last = world.world_size > 1 and world.rank == world.world_size - 1
    if fault[-1] == "LOST" and int(fault[0]) == chunk and last:
        sys.stderr.flush()
        os._exit(9)


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
    return isinstance(exc, RuntimeError) and bool(re.search(
        r"closed by peer|reset by peer|broken pipe|connection refused|timed out|timeout", str(exc), re.I))


SUFFIXES = {"csv": "csv", "npy": "npy", "parquet": "parquet", "excel": "xlsx", "stata": "dta"}


def _file_identity(path: str) -> dict:
    stat = os.stat(path)
    return {"path": os.path.abspath(path), "bytes": stat.st_size, "modified_ns": stat.st_mtime_ns}


def _what_changed(saved: dict, now: dict) -> Optional[str]:
    if saved["input"] != now["input"]:
        return f"another --input ({saved['input']['path']}, {saved['input']['bytes']:,} bytes, as it was then)"
    if saved["model"] != now["model"]:
        return f"another model (weights {saved['model']}, now {now['model']})"
    for name, value in now["options"].items():
        before = saved["options"].get(name)
        if name == "processes" and before is None:  # a journal written before they were recorded: one
            before = 1
        if json.loads(json.dumps(value)) == before:
            continue
        if name == "processes":
            return f"{before} process(es) (now {value}; torchrun --nproc_per_node and --nnodes set it)"
        if name == "calibration":
            return "another calibration of the model (its calibration.json changed since, e.g. by predict.py --calibrate)"
        if name == "tables":  # the reading options of every file, by their flags' names
            before = before or {}
            key = next(k for k in sorted(set(value) | set(before)) if value.get(k) != before.get(k))
            return f"--{key.replace('_', '-')} {_shown(before.get(key))} (now {_shown(value.get(key))})"
        if name in FILES and isinstance(value, dict) and isinstance(before, dict) \
                and value.get("path") == before.get("path"):
            return (f"--{name.replace('_', '-')} {value['path']} as it was then ({before['bytes']:,} bytes; the file "
                    "changed since)")
        shown = [v.get("path") if isinstance(v, dict) else v for v in (before, value)]
        return f"--{name.replace('_', '-')} {_shown(shown[0])} (now {_shown(shown[1])})"
    return None


def _shown(value) -> str:
    if value is None or value is False:
        return "unset"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)

"""A killed prediction resumes (issue 43; docs/predicting.md, "A killed prediction").

Beside the output, `.tmp-<output>.parts/` holds the output written so far (`output.csv`),
each chunk's new distinct inputs and their rows (`store-<k>.pkl`: the store as it grew,
so that a resumed job fills later rows from the very values an uninterrupted one would)
and `journal.json`: the chunks completed, the output's length after them, and what made
them (the input file, the model, the options that change the output). The same command
run again truncates the output to the journal's length, reads the store back, skips the
completed chunks and goes on: the final file is byte-identical to an uninterrupted run's,
and at most one chunk's work is redone. A different input, model or option is refused in
one line naming it; --restart starts over.

What does not resume starts over, said in one line: other output kinds (Parquet, Excel and
Stata write a whole file with a footer or header), and jobs whose other outputs gather over
the whole file (embeddings, a check list, an audit, a summary plot, a lookup's or target's
tallies) or run under torchrun.
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
# options that do not change the output: a resume may change them
# (the input and the model by what they are, not the paths naming them)
FREE = {"debug", "store_memory", "restart", "input", "output", "checkpoint"}
# options that name a file whose content makes the output: compared by what the file is too
FILES = ("code_descriptions", "lookup", "calibration_data")
# tests: "k" ends the job (os._exit) after writing chunk k, before its journal entry (a kill
# -9 there); "k:TERM" sends the job SIGTERM after chunk k (a scheduler's pre-emption)
FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"


def parts_dir(output: str) -> str:
    path = os.path.abspath(output)
    return os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}.parts")


def why_not(args, world, stores_by_row: bool) -> Optional[str]:
    """Why this job cannot resume after a kill, or None."""
    from mixer.data.tables.writing import output_kind

    if not args.output:
        return "it writes no --output"
    if args.output.lower().endswith(".npy"):
        return "a .npy matrix is written whole at the end"
    kind = output_kind(args.output)
    if kind != "csv":
        return f"a {kind} file is written whole at the end"
    if world.world_size > 1:
        return "it runs under torchrun"
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

    def __init__(self, args, predictor):
        from mixer.audit.draw import model_fingerprint

        self.dir = parts_dir(args.output)
        self.output = args.output
        self.tmp = os.path.join(self.dir, "output.csv")
        options = json.loads(json.dumps({k: v for k, v in dataclasses.asdict(args).items() if k not in FREE},
                                        default=str))
        for name in FILES:  # the file as it is now, not only its name
            if options.get(name):
                options[name] = {"path": options[name], **_file_identity(options[name])}
        # the calibration the confidences are read with (calibration.json, which --calibrate rewrites)
        options["calibration"] = {head: list(values) for head, values in sorted(predictor.calibration.items())}
        self.made_by = {"input": _file_identity(args.input), "model": model_fingerprint(predictor),
                        "options": options}
        self.chunks, self.rows, self.size = 0, 0, 0
        fault = os.environ.get(FAULT, "-1").split(":")
        self.fault, self.fault_signal = int(fault[0]), fault[1] if len(fault) > 1 else None

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
        with open(self.tmp, "ab") as handle:  # a chunk written after the last journal entry goes
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
        self.chunks, self.rows, self.size = chunk + 1, self.rows + rows, os.path.getsize(self.tmp)
        self._save()
        if chunk == self.fault:
            import signal

            os.kill(os.getpid(), getattr(signal, "SIG" + self.fault_signal))

    def _save(self) -> None:
        journal = os.path.join(self.dir, JOURNAL)
        with open(journal + ".new", "w", encoding="utf-8") as handle:
            json.dump({"made_by": self.made_by, "chunks": self.chunks, "rows": self.rows, "size": self.size},
                      handle)
        os.replace(journal + ".new", journal)

    def remove(self) -> None:
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)


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
        if json.loads(json.dumps(value)) == before:
            continue
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

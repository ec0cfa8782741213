"""The one seam through which tests inject faults into a prediction job, and nothing else:
the environment variable MIXER_PREDICT_FAULT_AFTER_CHUNK, unset in any real run, where each
call below returns at once.

- "k": the job ends (os._exit(9)) once chunk k is written and its parts and states are saved,
  before its journal entry: a kill -9 between the two;
- "k:TERM" (or another signal's name): the job sends itself that signal once chunk k's entry
  is saved: a scheduler's pre-emption;
- "k:LOST": under torchrun the last rank ends (os._exit(9)) after chunk k, as the ranks are
  about to agree whether to stop: a node lost;
- "gk": the job ends (os._exit(9)) once the k-th group (from 0, over the job) of a window's
  model call is kept beside the journal (mixer.prediction.resume.WindowGroups), before the
  next group is computed; "gk:KILL" (or another signal's name) sends itself that signal there
  instead (SIGKILL: a real kill -9).
"""

from __future__ import annotations

import os
import sys

FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"


def _planned(point: str = "") -> tuple:
    """(number, kind) of the fault asked for at `point` ("": a chunk's, "g": a group's), kind
    None for a kill; (None, None) for none there."""
    value = os.environ.get(FAULT) or ""
    if not value or value.startswith("g") != (point == "g"):
        return None, None
    number, _, kind = value[len(point) :].partition(":")
    return int(number), kind or None


def _end() -> None:
    sys.stderr.flush()
    os._exit(9)


def _signal(kind: str) -> None:
    import signal

    sys.stderr.flush()
    os.kill(os.getpid(), getattr(signal, "SIG" + kind))


def written(chunk: int) -> None:
    """Chunk `chunk`'s parts and states saved, its journal entry not yet: "k"."""
    planned, kind = _planned()
    if planned == chunk and kind is None:
        _end()


def journaled(chunk: int) -> None:
    """Chunk `chunk`'s journal entry saved: "k:TERM" and the like."""
    planned, kind = _planned()
    if planned == chunk and kind not in (None, "LOST"):
        _signal(kind)


def agreeing(world, chunk: int) -> None:
    """All ranks, after chunk `chunk`, before they agree whether to stop: "k:LOST"."""
    planned, kind = _planned()
    if planned == chunk and kind == "LOST" and world.rank == world.world_size - 1 > 0:
        _end()


def grouped(count: int) -> None:
    """The job's `count`-th group (from 0) of a window's model call kept: "gk", "gk:KILL"."""
    planned, kind = _planned("g")
    if planned == count:
        _end() if kind is None else _signal(kind)

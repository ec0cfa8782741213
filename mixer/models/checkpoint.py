"""last.pt: the training state, written atomically, read without unpickling code.

Layout: {"model", "optimizer", "scheduler", "scaler", "progress", "rng", "key", "hooks"}
(each hook's own state by its name; mixer.training.resume).
Writes go to a temp file, are fsynced and renamed; the previous checkpoint
is kept as last.prev.pt, so a crash at any moment leaves one complete file,
and a checkpoint that fails to load falls back to the previous one. Loading
uses torch.load(weights_only=True): a file whose pickle would run code is
refused.
"""

from __future__ import annotations

import os
import pickle
import shutil
import zipfile
from typing import Callable, Optional

import torch

from mixer.core.errors import UserError, first_line
from mixer.core.io import atomic_write

LAST, PREVIOUS = "last.pt", "last.prev.pt"


class CheckpointError(UserError):
    pass


def rng_state() -> dict:
    """This process's random state (CPU, and its current GPU)."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def load_file(path: str) -> dict:
    """A checkpoint of this tool, or CheckpointError saying why not."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and "
            f"plain values, so loading it could run code ({first_line(exc, 120)})"
        )
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a complete checkpoint ({first_line(exc, 120)})")
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path}: not a checkpoint of this tool (no model state)")
    return state


class Checkpointer:
    """Writes and finds last.pt in a run directory. Only rank 0 writes."""

    def __init__(self, run_dir: str, log: Callable[[str], None] = print):
        self.run_dir = run_dir
        self.log = log

    def save(self, state: dict) -> None:
        path = os.path.join(self.run_dir, LAST)
        previous = os.path.join(self.run_dir, PREVIOUS)

        def write(tmp: str) -> None:
            with open(
                tmp, "wb"
            ) as handle:  # a full disk then raises OSError (ENOSPC), not torch's riddle
                torch.save(state, handle)
            if os.path.exists(path):  # keep the last good one until the new one is in place
                os.replace(path, previous)

        atomic_write(path, write)

    def remove_stale_temp_files(self) -> None:
        """Temp files (and model directories, mixer.models.model_dir) of writers that were
        killed mid-write (rank 0, before training)."""
        for name in os.listdir(self.run_dir):
            path = os.path.join(self.run_dir, name)
            if name.startswith(".tmp-") and os.path.isdir(path):
                shutil.rmtree(path)
            elif name.startswith(".tmp-"):
                os.unlink(path)

    def latest_loadable(self) -> Optional[str]:
        """The newest checkpoint file that loads; None when there is none at all.
        Files that exist but none loads is an error, not a fresh start."""
        found = []
        for name in (LAST, PREVIOUS):
            path = os.path.join(self.run_dir, name)
            if not os.path.exists(path):
                continue
            found.append(path)
            try:
                load_file(path)
                return path
            except CheckpointError as exc:
                self.log(f"warning: {exc}; trying the previous checkpoint")
        if found:
            raise CheckpointError(
                f"{self.run_dir}: no checkpoint loads ({', '.join(found)}); "
                "move them away to start over, or use a new --save-path"
            )
        return None

    def load_latest(self) -> Optional[dict]:
        path = self.latest_loadable()
        return load_file(path) if path else None

"""A model directory inside a run, written whole or not at all (RUN/best/).

Such a directory is a complete model: model.safetensors and config.json, the run's
key.csv, encoder/ and tokenizer/, and the files the caller adds (evaluation.csv,
README.md; at the run's end scores.parquet, calibration.json and their plots).
predict.py, evaluate.py, mixer.load, --initial-checkpoint and the OccCANINE export
read it as they read a run directory.

It is built in a temp directory beside its place, then swapped in by two renames: the
old directory aside (`.best.old`), the new one in place; the old one is removed last.
A reader finds the old directory or the new one, never a mix of the two (for the
instant between the renames, neither: readers then take `.best.old`, and read again
when a swap replaced what they were reading: mixer.models.sources.read_model). A kill
between the two renames leaves no `best/` and a complete `.best.old`, which readers
use until `recover` puts it back (rank 0, before training).
A kill while building leaves a `.tmp-best.*` directory, which the run removes as it
removes other temp files.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from mixer.core.io import current_umask, fsync_directory, write_content
from mixer.models.model import save_model

SHARED = ("key.csv", "encoder", "tokenizer")  # the run's files a model directory carries


def write_model_dir(run_dir: str, name: str, model, extra: dict, files: dict) -> str:
    """RUN_DIR/name as a complete model of `model` (config.json gets `extra`), with the
    run's shared files and `files` ({file name: text or bytes}); returns its path."""
    target, aside = os.path.join(run_dir, name), os.path.join(run_dir, f".{name}.old")
    recover(run_dir, name)
    staging = tempfile.mkdtemp(prefix=f".tmp-{name}.", dir=run_dir)
    try:
        save_model(model, staging, extra)
        for shared in SHARED:
            _copy(os.path.join(run_dir, shared), os.path.join(staging, shared))
        for file_name, content in files.items():
            write_content(os.path.join(staging, file_name), content)
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp's 0700 would hide it from colleagues
        fsync_directory(staging)
        if os.path.exists(target):
            os.rename(target, aside)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_directory(run_dir)
    shutil.rmtree(aside, ignore_errors=True)
    return target


def recover(run_dir: str, name: str) -> None:
    """Finish a swap a kill interrupted: the old directory back when the new one never
    arrived, else the old one removed."""
    target, aside = os.path.join(run_dir, name), os.path.join(run_dir, f".{name}.old")
    if not os.path.exists(aside):
        return
    if os.path.exists(target):
        shutil.rmtree(aside)
    else:
        os.rename(aside, target)


def _copy(source: str, destination: str) -> None:
    """A file or a directory tree, each file fsynced (the directory is renamed into place
    next, and a rename may reach the disk before data that was not synced)."""
    if os.path.isdir(source):
        os.makedirs(destination)
        for entry in sorted(os.listdir(source)):
            _copy(os.path.join(source, entry), os.path.join(destination, entry))
        return
    shutil.copyfile(source, destination)
    os.chmod(destination, 0o666 & ~current_umask())
    with open(destination, "rb") as handle:
        os.fsync(handle.fileno())

"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from typing import Callable, Optional


def current_umask() -> int:
    """The process umask, read without changing it where the system tells it
    (os.umask can only be read by setting it, which races with other threads)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_target(path: str) -> str:
    """The file a write to a user-named output replaces: a symbolic link's target, so that
    the link itself stays (e.g. results/latest.csv pointing into project space). Run
    directory files are not resolved: a link there is replaced, never written through."""
    return os.path.realpath(path) if os.path.islink(path) else path


def atomic_write(path: str, write: Callable[[str], object]) -> None:
    """Call write(tmp_path), fsync it, then rename it over path. The file gets the
    mode a plain open() would give (0644 under the usual umask 022), not the temp
    file's 0600, so colleagues on a shared file system can read a run directory."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_directory(directory)  # make the rename itself durable


def replace_together(pairs: list) -> None:
    """Rename each (temp file, final path) of `pairs`, in order, as one step. Should a rename
    fail, those already made are undone (each replaced file is restored from a hard link
    taken before, a new one removed) and the error raised. So the final paths hold the old
    set or the new one, never a mix. The temp files are left to the caller. Put the file
    that says what the others are (calibration.json, a provenance sidecar) last."""
    done = []  # (final path, its old file's backup link, or None where there was none)
    try:
        for tmp, final in pairs:
            backup = None
            if os.path.lexists(final):
                backup = f"{tmp}.old"
                try:
                    os.link(final, backup)
                except OSError:  # no hard links here: the old file cannot come back (best effort)
                    backup = ""
            try:
                os.replace(tmp, final)
            except BaseException:
                if backup:
                    os.unlink(backup)
                raise
            done.append((final, backup))
    except BaseException:
        for final, backup in reversed(done):
            try:
                if backup:
                    os.replace(backup, final)
                elif backup is None:
                    os.unlink(final)
            except OSError:
                pass
        raise
    for _, backup in done:
        if backup:
            try:
                os.unlink(backup)
            except OSError:
                pass
    for directory in {os.path.dirname(os.path.abspath(final)) for _, final in pairs}:
        fsync_directory(directory)


def fsync_directory(directory: str) -> None:
    """Make a directory's entries (a rename into it) durable, where the system allows."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def write_text(path: str, text: str) -> None:
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)

    atomic_write(path, write)


def write_bytes(path: str, data: bytes) -> None:
    def write(tmp):
        with open(tmp, "wb") as handle:
            handle.write(data)

    atomic_write(path, write)


def write_content(path: str, content) -> None:
    """Text or bytes, atomically."""
    (write_bytes if isinstance(content, bytes) else write_text)(path, content)


FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded"}
FULL_TEXT = {
    "no space left on device": FULL[errno.ENOSPC],
    "os error 28": FULL[errno.ENOSPC],
    "disk quota exceeded": FULL[errno.EDQUOT],
    "os error 122": FULL[errno.EDQUOT],
    "database or disk is full": FULL[errno.ENOSPC],  # SQLite's SQLITE_FULL
}


def disk_full(exc: BaseException) -> Optional[str]:
    """Why a write failed when the disk (or the user's quota) is full, else None. It looks
    for an OSError's errno anywhere in the exception's chain, or the text of writers that do
    not raise OSError (safetensors: "I/O error: No space left on device (os error 28)")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in FULL:
            return FULL[exc.errno]
        text = str(exc).lower()
        for needle, reason in FULL_TEXT.items():
            if needle in text:
                return reason
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def writing(file_flag: str, path: str, kept: str = "", errors: tuple = ()):
    """The one way a file the tool writes fails: an OSError raised inside (a full disk, a
    quota, a file system that refuses), an error `disk_full` reads as one (SQLite's "database
    or disk is full", safetensors' text) or one of `errors` (a writer's own, e.g.
    sqlite3.Error) becomes WriteFailed naming the file (`file_flag` and `path`) and why, in
    one line; `kept`: the files left as they were ("out.csv is"), for a file written whole.
    A UserError raised inside (a WriteFailed of a writer nested in another) passes as it is."""
    from mixer.core.errors import UserError, WriteFailed, first_line

    try:
        yield
    except UserError:  # said already: a WriteFailed of a writer inside, or bad input
        raise
    except Exception as exc:
        reason = disk_full(exc)
        if reason is None and not isinstance(exc, (OSError,) + tuple(errors)):
            raise
        raise WriteFailed(file_flag, path, reason or first_line(exc), kept) from exc

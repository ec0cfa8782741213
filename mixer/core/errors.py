"""User-facing errors: one clear line, exit status 2, no traceback."""

import re

_TERMINAL_CODES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, links
    r"|\x1b[@-_]?"  # other escapes
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)  # controls but \n, \r


class UserError(Exception):
    """Bad input or a bad flag: the message names what is wrong and what to do."""

    exit_code = 2


class WriteFailed(UserError):
    """A file the tool writes could not be written (a full disk, a quota reached, a file
    system that refuses a write or the rename): one line naming the file (`file_flag`, the
    flag or what names it, and `path`) and why (`reason`). `kept`: the files left as they
    were, for a file written whole at the end ('' for one written as the job goes). Raised
    through mixer.core.io.writing, the one way every writer of a job fails; predict.py's job
    adds which chunks are kept (mixer.prediction.predict_job.kept_line)."""

    def __init__(self, file_flag: str, path: str, reason: str, kept: str = ""):
        as_before = f"{kept} as before: " if kept else ""
        super().__init__(
            f"{file_flag} {path}: writing it failed ({reason}); {as_before}free space, or write "
            "to another file or directory"
        )
        self.file_flag, self.path, self.reason, self.kept = file_flag, path, reason, kept


class PeerFailed(UserError):
    """Another rank failed and reported it; this rank stops without repeating the cause."""


def report(exc: BaseException, rank) -> None:
    """Print a failure as the programs do (a UserError as one line, anything else with its
    traceback) and mark it reported, so that it is printed once. A rank that failed reports
    before its peers may learn of it: torchrun stops the others when the first one exits."""
    import sys
    import traceback

    if getattr(exc, "reported", False):
        return
    if isinstance(exc, UserError):
        prefix = f"[rank {rank}] " if rank not in (None, 0, "0") else ""
        print(f"{prefix}{'' if isinstance(exc, PeerFailed) else 'error: '}{exc}", file=sys.stderr)
    else:
        traceback.print_exception(exc)
    sys.stderr.flush()
    try:
        exc.reported = True
    except AttributeError:  # an exception type that takes no attributes
        pass


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's first line for a one-line message: terminal colour codes and
    control characters removed (torch colours its pickle warning), cut to `limit`."""
    lines = _TERMINAL_CODES.sub("", str(exc)).strip().splitlines()
    return (lines[0].strip() if lines else type(exc).__name__)[:limit]

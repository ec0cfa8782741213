"""User-facing errors: one clear line, exit status 2, no traceback."""


class UserError(Exception):
    """Bad input or a bad flag: the message names what is wrong and what to do."""

    exit_code = 2


class PeerFailed(UserError):
    """Another rank failed and reported it; this rank stops without repeating the cause."""

"""mixer.errors, kept at the name the README gives users who catch UserError; the
module lives in mixer.core.errors."""

from mixer.core.errors import PeerFailed, UserError, first_line

__all__ = ["UserError", "PeerFailed", "first_line"]

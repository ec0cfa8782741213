"""How a message names an option: by predict.py's flag (`--top-k 0`) or by the Python API's
keyword (`top_k=0`). A check that both the program and the API reach is handed one `Names`
and builds its message with it, so that each caller reads the name it typed; nothing
rewrites a message afterwards.

    names("top_k")         --top-k         top_k=
    names("top_k", 0)      --top-k 0       top_k=0
    names("head", "flat")  --head flat     head='flat'
    names.before("top_k")  "--top-k "      "top_k="     (a value written right after)

A name is a field of predict.py's configuration (mixer.core.programs.PredictConfig), in any of
its sections (mixer.core.options.options_of walks them); its flag is the field's own
(mixer.core.options.flags_of). `own`: keywords a method of the API calls
otherwise (Model.lookup's input_col for the field lookup_input_col).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping

_NOTHING = object()


@functools.lru_cache(maxsize=1)
def _flags() -> dict:
    from mixer.core.options import flags_of, options_of
    from mixer.core.programs import PredictConfig

    return {f.name: flags_of(f)[0] for f in options_of(PredictConfig)}  # every section's fields


def flag_of(name: str) -> str:
    """predict.py's flag of a field (--name-with-dashes where the field has none)."""
    return _flags().get(name) or "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Names:
    """The names a message gives options: flags (keyword=False) or keywords."""

    keyword: bool = False
    own: Mapping = dataclasses.field(default_factory=dict)

    def __call__(self, name: str, value=_NOTHING) -> str:
        """The option, or the option given a value, as its caller would have written it."""
        if self.keyword:
            shown = f"{self.own.get(name, name)}="
            return shown if value is _NOTHING else f"{shown}{value!r}"
        return flag_of(name) if value is _NOTHING else f"{flag_of(name)} {value}"

    def before(self, name: str) -> str:
        """The text a value follows: '--top-k ' or 'top_k='."""
        return f"{self.own.get(name, name)}=" if self.keyword else f"{flag_of(name)} "

    def switch(self, name: str) -> str:
        """An option that is on: '--shorter-codes' or 'shorter_codes=True'."""
        return f"{self.own.get(name, name)}=True" if self.keyword else flag_of(name)

    def with_own(self, **own) -> "Names":
        """The same names, with a method's own keywords for some fields."""
        return dataclasses.replace(self, own={**self.own, **own})


FLAGS = Names()  # predict.py's messages
KEYWORDS = Names(keyword=True)  # the Python API's

"""The Python API's keywords: predict.py's options by their field names (top_k for --top-k),
each checked by its flag's own check, whose message names the keyword (`top_k=0: must be 1 or
more`). A method's signature is the one place its keywords are written: `given("predict",
locals())` reads them, so a keyword is never restated in a dict or unpacked by hand.

Where a check further down (a lookup file, labelled rows, an audit's design) names an option,
it is handed the API's `Names` (mixer.core.naming.KEYWORDS) and says the keyword itself.
"""

from __future__ import annotations

import functools
import types
from typing import Optional

import numpy as np

from mixer.core.errors import UserError

# the names of earlier versions, which still work
RENAMED = {
    "lang": "language",
    "accuracy": "target_accuracy",
    "confidence": "target_confidence",
    "labelled": "calibration_data",
    "truth_cols": "calibration_truth_cols",
    "levels": "code_levels",
    "margin": "audit_margin",
    "by": "audit_by",
    "unit": "audit_unit",
    "seed": "audit_seed",
}
# a method's arguments that are not options: the rows, the API's own objects
NOT_OPTIONS = {"self", "texts", "context", "lookup", "target", "rows_to_code", "options", "renamed"}
NOT_OPTIONS |= {"frame", "n", "path", "status", "relation", "product"}


@functools.lru_cache(maxsize=1)
def _field_specs() -> dict:
    """{field: its flag's Spec} of predict.py's configuration."""
    from mixer.core.flags import specs
    from mixer.core.programs import PredictConfig

    return {spec.name: spec for spec in specs([PredictConfig])}


def given(call: str, arguments: dict) -> types.SimpleNamespace:
    """A method's keywords (its `locals()` on entry) as predict.py's configuration reads them:
    each checked by its flag's check with a message that names the keyword, and where left
    unset (None) the field's default, the program's. Earlier names (in `renamed`) are read
    under their fields' names."""
    options = {k: v for k, v in arguments.items() if k not in NOT_OPTIONS}
    return types.SimpleNamespace(**settings(call, options, arguments.get("renamed")))


def settings(call: str, options: dict, renamed: Optional[dict] = None) -> dict:
    """{keyword: its value as predict.py reads it} (given's dict)."""
    from mixer.core.flags import checked
    from mixer.core.options import default_of, options_of
    from mixer.core.programs import PredictConfig

    options = dict(options)
    for old, value in (renamed or {}).items():
        new = RENAMED.get(old)
        if new is None or new not in options:
            raise UserError(
                f"{old}=: not a keyword of {call}(); its keywords are predict.py's options by their "
                f"names (help(mixer.api.Model.{call}))"
            )
        if options[new] is not None:
            raise UserError(
                f"{call}(): {old}= and {new}= both given; pass {new}= ({old}= is its earlier name)"
            )
        options[new] = value
    fields = {f.name: f for f in options_of(PredictConfig)}  # every section's
    specs = _field_specs()
    values = {}
    for name, value in options.items():
        spec = specs.get(name)
        if value is None:
            values[name] = default_of(fields[name]) if name in fields else None
        elif (
            spec is not None
            and (spec.type or spec.choices or spec.switch)
            and not _is_object(value)
        ):
            values[name] = checked(name, spec, value, keyword=True)
        else:
            values[name] = value
    return values


def _is_object(value) -> bool:
    """A value of the API's own (a Lookup, a DataFrame, per-row languages), which no flag reads."""
    return not isinstance(value, (str, int, float, bool, np.integer, np.floating, list, tuple))


def one_head(head) -> str:
    """The API's one head (predict.py's --head takes several): 'greedy' is seq2seq."""
    if isinstance(head, list):
        if len(head) != 1:
            raise UserError(f"head={head!r}: one head ('flat', 'seq2seq' or 'full')")
        head = head[0]
    return "seq2seq" if head == "greedy" else head


def require_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name}={value!r}: must be a whole number, 1 or more")


def require_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value!r}: choose one of {', '.join(choices)}")

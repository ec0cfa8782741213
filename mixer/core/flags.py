"""The flags' own checks, below every layer that reads an option: each field of a
configuration names its check (mixer.core.options.option(type=...), a name of CHECKS), and
`specs` gives each field's flag as a program shows it. The parsers (mixer.cli.options) and the
Python APIs' keywords (mixer.prediction.api, mixer.cli.finetune_api: `checked`) read a value
through the same check, so a keyword and its flag refuse the same values with the same words.
No pandas until a keyword is checked.
"""

from __future__ import annotations

import codecs
import dataclasses
import numbers
import os
from typing import Optional

from mixer.core.errors import UserError, first_line
from mixer.core.options import default_of, flags_of, options_of


class BadValue(ValueError):
    """A value a flag's check refuses, its message saying why as the user reads it (the
    parsers raise it as argparse's ArgumentTypeError: mixer.cli.options.flag_type)."""


# ----------------------------------------------------------------- checks
def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadValue(f"expected a whole number, got {text!r}")
    if value < least:
        raise BadValue(f"must be {least} or more, got {value}")
    return value


def positive_int(text: str) -> int:
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BadValue(f"expected a number, got {text!r}")


def _bounded(name: str, holds, says: str):
    def check(text: str) -> float:
        value = _float(text)
        if not holds(value):
            raise BadValue(f"must be {says}, got {text}")
        return value

    check.__name__ = name
    return check


positive_float = _bounded("positive_float", lambda v: v > 0, "greater than 0")
non_negative_float = _bounded("non_negative_float", lambda v: v >= 0, "0 or more")
unit_interval = _bounded("unit_interval", lambda v: 0.0 <= v <= 1.0, "between 0 and 1")
open_unit_interval = _bounded(
    "open_unit_interval", lambda v: 0.0 < v < 1.0, "strictly between 0 and 1"
)
share_below_one = _bounded("share_below_one", lambda v: 0.0 <= v < 1.0, "0 or more and below 1")


def canonical_encoding(name: str) -> str:
    """Python's name of an encoding ('UTF8', 'windows-1252' -> 'utf-8', 'cp1252');
    ValueError for one Python does not know."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown encoding {name!r} (e.g. utf-8, cp1252, latin-1, utf-16)")


def encoding_name(text: str) -> str:
    try:
        return canonical_encoding(text)
    except ValueError as exc:
        raise BadValue(str(exc))


def separator(text: str) -> str:
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
    value = named.get(text.lower(), text)
    if len(value) != 1 or value in '"\r\n':
        raise BadValue(f"expected one character such as , ; | or tab, got {text!r}")
    return value


def digit_levels(text: str) -> list:
    """'1-5' or '1,3,5' -> [1, 2, 3, 4, 5] / [1, 3, 5]."""
    try:
        if "-" in text:
            low, high = (int(v) for v in text.split("-", 1))
            levels = list(range(low, high + 1))
        else:
            levels = [int(v) for v in text.split(",")]
    except ValueError:
        raise BadValue(f"expected digits like 1-5 or 1,3,5, got {text!r}")
    if not levels or min(levels) < 1:
        raise BadValue(f"digits must be 1 or more, got {text!r}")
    return levels


# the checks a field names (option(type=...)), by name
CHECKS = {
    check.__name__: check
    for check in (
        positive_int,
        non_negative_int,
        _float,
        positive_float,
        non_negative_float,
        unit_interval,
        open_unit_interval,
        share_below_one,
        encoding_name,
        separator,
        digit_levels,
        int,
    )
}


# ----------------------------------------------------------------- generation
@dataclasses.dataclass
class Spec:
    """One field's flag in one program: the field's metadata with the program's differences."""

    name: str
    flags: tuple
    default: object
    help: str
    group: str = ""
    type: Optional[str] = None
    nargs: object = None
    choices: Optional[tuple] = None
    metavar: object = None
    switch: object = False
    required: bool = False
    hidden: bool = False
    aliases: tuple = ()
    table: Optional[str] = None
    works_with: tuple = ()
    repeat: bool = False  # given several times, its values add up (the parser's extend)

    @property
    def flag(self) -> str:
        return self.flags[0]


def specs(classes, program: str = "", differences: Optional[dict] = None) -> list:
    """The flags of a program with these configuration classes, in --help's order.
    A field in `differences` (config.PROGRAM_DIFFERENCES) has a flag only in the programs
    it names, with what differs there; None there: no flag (Spec with flags=())."""
    found = []
    for cls in classes:
        for f in options_of(cls):
            meta = dict(f.metadata)
            given = {"flags": flags_of(f), "default": default_of(f)}
            per = (differences or {}).get(f.name)
            if per is not None:
                if program not in per:
                    continue
                if per[program] is None:
                    given["flags"] = ()
                else:
                    given.update(per[program])
            fields = {
                k: meta[k]
                for k in (
                    "help",
                    "group",
                    "type",
                    "nargs",
                    "choices",
                    "metavar",
                    "switch",
                    "hidden",
                    "aliases",
                    "table",
                    "works_with",
                    "repeat",
                )
            }
            found.append(Spec(name=f.name, **{**fields, **given}))
    return found


# ----------------------------------------------------------------- a keyword read as its flag
def checked(name: str, spec, value, caller: str = "finetune()", keyword: bool = False):
    """One keyword argument as its flag would read it, or a one-line UserError that names
    the flag (finetune()'s, as the program's messages do) or, with `keyword`, the keyword
    (`top_k=0: ...`, the prediction API's)."""
    import pandas as pd

    where = (
        f"{name}={first_line(repr(value), 80)}"
        if keyword
        else f"{caller}: argument {'/'.join(spec.flags)}"
    )

    for one in value if isinstance(value, (list, tuple)) and spec.nargs in ("+", "*") else [value]:
        if not isinstance(
            one, (str, numbers.Number, os.PathLike, list, tuple, dict, set)
        ):  # numpy's numbers too
            table = (
                " (write it to a file, e.g. with .to_parquet, and pass the path)"
                if isinstance(one, (pd.DataFrame, pd.Series))
                else ""
            )
            raise UserError(
                f"{name}=: pass text, a number or a file's path, not a {type(one).__name__}{table}"
            )
    if spec.switch:
        if not isinstance(value, bool):
            raise UserError(f"{name}={value!r}: pass True or False")
        return value
    if spec.nargs in ("+", "*"):
        values = [value] if isinstance(value, (str, int, float, os.PathLike)) else list(value)
        if not values and spec.nargs == "+":  # as the parser refuses the flag with no value
            raise UserError(f"{where}: expected at least one argument")
    elif isinstance(value, (list, tuple, dict, set)):
        raise UserError(f"{name}={first_line(repr(value), 80)}: pass one value")
    else:
        values = [value]
    read = []
    for one in values:
        text = os.fspath(one) if isinstance(one, os.PathLike) else str(one)
        try:
            one = CHECKS[spec.type](text) if spec.type else text
        except ValueError as exc:
            raise UserError(f"{where}: {exc}")
        if spec.choices and one not in spec.choices:
            raise UserError(
                f"{where}: invalid choice: {one!r} (choose from {', '.join(map(repr, spec.choices))})"
            )
        read.append(one)
    return read if spec.nargs in ("+", "*") else read[0]

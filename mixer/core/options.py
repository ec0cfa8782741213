"""A configuration field with what its flag needs: the one place an option is defined.

`option(default, help=...)` is a dataclass field whose metadata names its flag(s), its
one-line help, its check (a name of mixer.core.flags.CHECKS, so that nothing here
imports argparse), its number of values, choices, and the programs that expose it.
mixer.cli.options generates every program's parser from these fields; the Python API
(mixer.finetune) checks keyword arguments with the same checks.
"""

from __future__ import annotations

import dataclasses
from typing import Optional


def option(
    default=None,
    *,
    help: str,
    flags: tuple = (),
    type: Optional[str] = None,
    nargs=None,
    choices=None,
    metavar=None,
    switch=False,
    group: str = "",
    aliases: tuple = (),
    table: Optional[str] = None,
    works_with: tuple = (),
    hidden: bool = False,
    repeat: bool = False,
):
    """A field with its flag. flags: the option strings (default: --name-with-dashes).
    type: a check's name. switch: True for --x/--no-x, "on" for --x alone. group: its
    heading in --help. aliases: (flags, value, help) of flags that set one value (--fp16
    sets precision fp16). table: the role (config.TABLE_ROLES) whose reading flags follow
    this one. works_with: the fields one of which must be set for this one to act (given
    alone it is refused). hidden: a flag --help leaves out. repeat: a list flag given
    several times adds up its values (argparse's extend), where dropping the earlier ones
    would lose what was asked. Which program has which flag:
    config.PROGRAM_DIFFERENCES."""
    metadata = {
        "flags": tuple(flags),
        "help": help,
        "type": type,
        "nargs": nargs,
        "choices": tuple(choices) if choices is not None else None,
        "metavar": metavar,
        "switch": switch,
        "group": group,
        "aliases": tuple(aliases),
        "table": table,
        "works_with": tuple(works_with),
        "hidden": hidden,
        "repeat": repeat,
    }
    if isinstance(default, (list, dict)):
        value = default
        return dataclasses.field(default_factory=lambda: type_copy(value), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def type_copy(value):
    return list(value) if isinstance(value, list) else dict(value)


def flags_of(f: dataclasses.Field) -> tuple:
    """A field's option strings: its own, or --name-with-dashes."""
    return f.metadata["flags"] or ("--" + f.name.replace("_", "-"),)


def default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def options_of(cls) -> list:
    """The fields of a configuration class that have a flag. A class nested by concept
    (programs.PredictConfig) has them in its sections, in the order of its FLAG_ORDER (a field
    not named there follows, in its section's order); RunConfig's sections are listed one by one
    (mixer.cli.entrypoints.TRAINING_CLASSES)."""
    found = [f for f in dataclasses.fields(cls) if "help" in f.metadata]
    order = getattr(cls, "FLAG_ORDER", None)
    if order is None:
        return found
    for section in sections_of(cls):
        found += options_of(section.default_factory)
    return sorted(found, key=lambda f: order.index(f.name) if f.name in order else len(order))


def sections_of(cls) -> list:
    """The fields of a configuration class that are configurations themselves (its sections)."""
    return [
        f
        for f in dataclasses.fields(cls)
        if f.default_factory is not dataclasses.MISSING
        and dataclasses.is_dataclass(f.default_factory)
    ]


def flat_values(config) -> dict:
    """{field: value} of a configuration and its sections' fields, by the fields' own names (which
    are their flags' destinations): a nested PredictConfig read as the flat one it was, in its
    flags' order, then its fields without a flag (`tables`)."""
    sections = {f.name for f in sections_of(type(config))}
    values = {}
    for f in dataclasses.fields(config):
        if f.name in sections:
            values.update(flat_values(getattr(config, f.name)))
        else:
            values[f.name] = getattr(config, f.name)
    order = [f.name for f in options_of(type(config))]
    return {name: values[name] for name in [*order, *(n for n in values if n not in order)]}

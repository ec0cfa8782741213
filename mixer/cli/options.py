"""The flags, generated: every program's parser is made here from its configuration's
fields (mixer.core.options.option), and nowhere else (tests/test_options.py holds that).

A field's metadata names its flag(s), check, number of values and one-line help; its
default is the dataclass field's. Where finetune.py and train_mixer.py differ is the
table mixer.core.config.PROGRAM_DIFFERENCES. The reading options of each input file
(--encoding, --key-sep, ...) are a generated family, add_table_args.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Optional

from mixer.version import __version__
from mixer.core import recipe
from mixer.core.config import TABLE_ROLES
from mixer.core.errors import UserError
from mixer.core.flags import (  # noqa: F401 - the checks and specs, kept importable here
    BadValue,
    CHECKS,
    Spec,
    digit_levels,
    encoding_name,
    non_negative_float,
    non_negative_int,
    open_unit_interval,
    positive_float,
    positive_int,
    separator,
    share_below_one,
    specs,
    unit_interval,
)
from mixer.core.options import flat_values, sections_of


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse hook
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def flag_type(check):
    """A flag's check (mixer.core.flags.CHECKS) as argparse's type: its refusal said as written."""

    @functools.wraps(check)
    def read(text: str):
        try:
            return check(text)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc))

    return read


def help_text(spec: Spec) -> str:
    """The field's one line, with its default from the field (never written in the help)
    or the recipe's values (mixer.core.recipe)."""
    if spec.hidden:
        return argparse.SUPPRESS
    text = spec.help
    if spec.name in recipe.MIXER and spec.default is None:
        mine, theirs = recipe.MIXER[spec.name], recipe.OCCCANINE_FINETUNE[spec.name]
        shown = "as --dropout" if mine is None else f"{mine:g}"
        text += f" (default: the recipe's, {shown}" + (
            f"; {theirs:g} from an OccCANINE model)" if theirs != mine else ")"
        )
    elif (
        spec.switch is not True and spec.default not in (None, False, [], ()) and not spec.required
    ):
        # a list as its flag takes it (--head flat), not as Python writes it (['flat'])
        shown = (
            " ".join(map(str, spec.default)).replace("%", "%%")
            if isinstance(spec.default, (list, tuple))
            else "%(default)s"
        )
        text += f" (default: {shown})"  # BooleanOptionalAction adds its own
    return text


def add_flag(parser: argparse.ArgumentParser, group, spec: Spec) -> None:
    if not spec.flag.startswith("-"):  # a positional argument: its name is its dest
        group.add_argument(spec.flag, help=spec.help)
        return
    kwargs = {
        "dest": spec.name,
        "help": help_text(spec),
        "default": None if spec.required else spec.default,
    }
    if spec.switch is True:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif spec.switch == "on":
        kwargs["action"] = "store_true"
    else:
        kwargs.update(
            {
                k: v
                for k, v in (
                    ("type", flag_type(CHECKS[spec.type]) if spec.type else None),
                    ("nargs", spec.nargs),
                    ("metavar", spec.metavar),
                    ("choices", list(spec.choices) if spec.choices else None),
                )
                if v is not None
            }
        )
    if spec.repeat:
        kwargs["action"] = "extend"
    if spec.required:
        kwargs["required"] = True
    group.add_argument(*spec.flags, **kwargs)
    for flags, value, text in spec.aliases:
        group.add_argument(*flags, dest=spec.name, action="store_const", const=value, help=text)


def add_flags(
    parser: argparse.ArgumentParser, classes, program: str = "", differences: Optional[dict] = None
) -> list:
    """Every flag of these configuration classes, under their headings; returns the specs.
    A field without a flag in this program still takes --config's value (set_defaults)."""
    groups = {}
    made = []
    for spec in specs(classes, program, differences):
        if not spec.flags:
            parser.set_defaults(**{spec.name: spec.default})
            continue
        if spec.group and spec.group not in groups:
            groups[spec.group] = parser.add_argument_group(spec.group)
        group = groups.get(spec.group, parser)
        add_flag(parser, group, spec)
        made.append(spec)
        if spec.table:
            made += add_table_args(parser, group, spec.table)
    parser.specs = {spec.name: spec for spec in made}
    return made


def table_specs(role: str) -> list:
    """The reading options of a role's files (mixer.core.config.TABLE_ROLES): the main
    data's --encoding, --sep, --sheet, --header-row and --ddi, or a role's own (--key-encoding,
    ...). Each file is read with its own role's options only (docs/formats.md)."""
    what, prefix = TABLE_ROLES[role]
    files = "input" if role in ("dataset", "input", "predictions") else f"the {what} file(s)"
    dest = prefix.replace("-", "_")
    return [
        Spec(
            dest + "encoding",
            (f"--{prefix}encoding",),
            None if prefix else "utf-8",
            type="encoding_name",
            help=f"text encoding of CSV {files}, e.g. cp1252 (docs/formats.md)",
        ),
        Spec(
            dest + "sep",
            (f"--{prefix}sep",),
            None,
            type="separator",
            help=f"separator of CSV {files}: , ; | or tab (unset: the file's own)",
        ),
        Spec(
            dest + "sheet",
            (f"--{prefix}sheet",),
            None,
            metavar="NAME",
            help=f"Excel {files}: the worksheet to read (unset: the first)",
        ),
        Spec(
            dest + "header_row",
            (f"--{prefix}header-row",),
            None,
            type="positive_int",
            metavar="N",
            help=f"CSV and Excel {files}: the row of the column names, from 1 (unset: the first not empty)",
        ),
        Spec(
            dest + "ddi",
            (f"--{prefix}ddi",),
            None,
            metavar="XML",
            help=f"IPUMS fixed-width {files} (.dat, .dat.gz): the DDI codebook (unset: the .xml beside it)",
        ),
    ]


def add_table_args(parser: argparse.ArgumentParser, group, role: str = "dataset") -> list:
    made = table_specs(role)
    for spec in made:
        add_flag(parser, group, spec)
    return made


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"mixer {__version__}")


def add_common(parser: argparse.ArgumentParser) -> None:
    """The training programs' --version and --config."""
    add_version(parser)
    parser.add_argument(
        "--config",
        metavar="YAML",
        help="read flags from a YAML file such as a run's args.yaml; flags given win",
    )


def config_file_parser() -> argparse.ArgumentParser:
    """--config alone, read before the program's parser (its file gives defaults)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config")
    return parser


# ----------------------------------------------------------------- values
def config_from(cls, values: dict):
    """A configuration of one class from flat values (a parse's, or the API's); a class nested
    by concept (PredictConfig) gets each section from them too."""
    sections = {f.name: config_from(f.default_factory, values) for f in sections_of(cls)}
    known = {f.name for f in dataclasses.fields(cls)} - set(sections)
    return cls(**{k: v for k, v in values.items() if k in known}, **sections)


def refuse_lone_companions(config, specs_by_name: dict) -> None:
    """An option set (not at its default) without one of the options it works with
    (option(works_with=...)): it would be ignored, so it is refused in one line."""
    values = flat_values(config)
    for spec in specs_by_name.values():
        if not spec.works_with or values[spec.name] == spec.default:
            continue
        if not any(values[other] not in (None, False) for other in spec.works_with):
            needs = " or ".join(specs_by_name[other].flag for other in spec.works_with)
            raise UserError(f"{spec.flag} works with {needs}; pass it, or leave out {spec.flag}")

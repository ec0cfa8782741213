"""From a command line to a configuration: --config files, build_config, and how a
program ends on a user's error.

The flags themselves are generated from the configurations (mixer.cli.options);
`build_config` turns the parsed values into a RunConfig; nothing past mixer.cli sees
argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from typing import Callable, Optional, Sequence

from mixer.cli.options import config_file_parser, config_from
from mixer.cli.options import (  # noqa: F401 - the checks, kept importable here for scripts
    Parser,
    digit_levels,
    encoding_name,
    non_negative_float,
    non_negative_int,
    open_unit_interval,
    positive_float,
    positive_int,
    separator,
    share_below_one,
    unit_interval,
)
from mixer.core import extras
from mixer.core.config import (
    NON_PERSISTED,
    OWN_OPTION_DESTS,
    SCORE_COLUMNS,
    DataConfig,
    DistConfig,
    LogConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
)
from mixer.core.errors import UserError, first_line, report

SECTIONS = {
    "data": DataConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "dist": DistConfig,
    "log": LogConfig,
}


# ------------------------------------------------------------------- config
def _load_yaml_defaults(path: str) -> dict:
    import yaml

    if not os.path.isfile(path):
        raise UserError(
            f"--config {path}: no such file; pass a YAML file such as a run's args.yaml"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"--config {path}: not valid YAML ({first_line(exc)})")
    if not isinstance(values, dict):
        raise UserError(f"--config {path}: expected a mapping of flag names to values")
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and key in SECTIONS:
            flat.update(value)  # the nested layout of args.yaml
        else:
            flat[key.replace("-", "_")] = value
    flat.update(flat.pop("read_options", None) or {})  # args.yaml: the other files' options
    # one-shot actions and launcher facts are not configuration (args.yaml of mixer 0.1 held them)
    return {k: v for k, v in flat.items() if k not in {name for _, name in NON_PERSISTED}}


def parse_args(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None):
    """Parse argv, taking defaults from --config YAML when given (flags win)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    known, _ = config_file_parser().parse_known_args(argv)
    if known.config:
        usable = config_file_values(parser, known.config)
        for action in parser._actions:
            if action.required and usable.get(action.dest) not in (None, [], ""):
                action.required = False  # the file gives it
        parser.set_defaults(**usable)
    namespace = parser.parse_args(argv)
    namespace.command = [parser.prog, *argv]  # what made the run, for its model card
    return namespace


def config_file_values(parser: argparse.ArgumentParser, path: str) -> dict:
    """A --config file's settings of this program, each checked as its flag is."""
    defaults = _load_yaml_defaults(path)
    dests = {action.dest for action in parser._actions} | set(parser._defaults)
    unknown = sorted(k for k in defaults if k not in dests and k not in CONFIG_KEYS)
    if unknown:
        raise UserError(
            f"--config {path}: unknown setting(s) {', '.join(unknown)} for {parser.prog}"
        )
    usable = {k: v for k, v in defaults.items() if k in dests}
    for action in parser._actions:  # the file's values get the flags' checks
        if action.dest in usable and action.dest != "help":
            try:
                usable[action.dest] = _coerce(action, usable[action.dest])
            except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
                raise UserError(f"--config {path}: {action.dest}: {exc}")
    return usable


def _coerce(action: argparse.Action, value):
    if value is None and action.default is None:  # a setting left to the run (args.yaml: null)
        return None
    if isinstance(
        action,
        (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction),
    ):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if value is None or isinstance(action, argparse._StoreConstAction):
        return value
    if action.nargs in ("+", "*"):
        return [_coerce_one(action, v) for v in (value if isinstance(value, list) else [value])]
    return _coerce_one(action, value)


def _coerce_one(action: argparse.Action, value):
    if action.type is not None:
        value = action.type(str(value))
    elif not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a single value, got {value!r}")
    else:
        value = str(value) if isinstance(value, str) else value
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


# Settings of the run configuration: an args.yaml of either program may hold
# some that the other program has no flag for; they are ignored, not errors.
CONFIG_KEYS = {f.name for section in SECTIONS.values() for f in dataclasses.fields(section)} | set(
    OWN_OPTION_DESTS
)


def build_config(values) -> RunConfig:
    """The run configuration from a parse's values (a namespace or a dict), checked."""
    values = dict(vars(values) if isinstance(values, argparse.Namespace) else values)
    sections = {name: config_from(section_cls, values) for name, section_cls in SECTIONS.items()}
    sections["data"].read_options = {
        k: values[k] for k in OWN_OPTION_DESTS if values.get(k) is not None
    }
    config = RunConfig(save_dir=values["save_dir"], **sections)
    validate_config(config)
    return config


def validate_config(config: RunConfig) -> None:
    data = config.data
    if data.language_col and data.language not in (None, "unk"):
        raise UserError(
            "--language and --language-col were both given; pass one: a language "
            "for every row, or the column that holds one per row"
        )
    if not data.token_cache and not data.prepare_only:
        raise UserError(
            "--no-token-cache goes with --prepare-only (prepare the data without "
            "tokenising it); training always tokenises, for its --encoder"
        )
    if config.train.early_stopping_patience and not config.train.keep_best:
        raise UserError(
            "--early-stopping-patience counts evaluations without an improvement of the "
            "--keep-best metric; pass --keep-best METRIC too, e.g. --keep-best val_loss"
        )
    clash = [
        c
        for c in data.report_cols
        if c in SCORE_COLUMNS
        or c.startswith(("flat_", "seq2seq_"))
        or c in (data.input_col, data.language_col, *data.target_cols)
    ]
    if clash:
        raise UserError(
            f"--report-cols {clash[0]}: scores.parquet has a column of that name, or it is "
            "a column the run reads already; report a column of another name"
        )
    if config.model.only_encoder and not config.model.initial_checkpoint:
        raise UserError("--only-encoder needs --initial-checkpoint RUN_DIR")
    if os.path.exists(config.save_dir) and not os.path.isdir(config.save_dir):
        raise UserError(f"--save-path {config.save_dir} is a file; pass a directory for the run")
    extras.check_training_config(
        config
    )  # a flag whose package is missing fails here, before any data


def run_main(main: Callable[[Optional[Sequence[str]]], int], argv=None) -> None:
    """Run an entry point: user errors become one line on stderr and exit 2."""
    debug = "--debug" in (sys.argv if argv is None else argv)
    try:
        code = main(argv)
    except UserError as exc:
        if debug:
            traceback.print_exc()
        report(exc, os.environ.get("RANK"))
        code = exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except SystemExit:  # argparse (--help, usage errors): before any process group
        raise
    except BaseException as exc:  # a bug: the traceback is the report
        report(exc, os.environ.get("RANK"))
        code = 1
    _exit(code or 0)


def _exit(code: int) -> None:
    """sys.exit, except after a process group (see distributed.exit_process).
    Looked up lazily so the --prepare-only path never imports torch."""
    distributed = sys.modules.get("mixer.distributed.world")
    if distributed is not None:
        distributed.exit_process(code)
    sys.exit(code)

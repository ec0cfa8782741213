"""Checks that features above the data layer register with it, so that writing and
preparing run them without importing those features. They guard an output that must not be replaced
(a filled audit), rows a run must not train on as they are (an audit's). mixer/__init__.py
has each feature register its own (mixer.audit.guards). No import of pandas here: the
registration runs at `import mixer`, before `--help`.
"""

from __future__ import annotations

from typing import Callable

# check(path, flag): raises UserError when `path` holds a file no output may replace
_OUTPUTS: list = []
# check(frame, path, flag, cfg): raises UserError when a training table's rows may not train
_TRAINING_TABLES: list = []
# read(table, path, cfg) -> the table an --extra-train file trains with (a feature's file, as rows)
_EXTRA_TRAIN: list = []


def _add(registry: list, function: Callable) -> Callable:
    if function not in registry:
        registry.append(function)
    return function


def protect_outputs(check: Callable) -> Callable:
    """Register check(path, flag), run on every output before any work (check_output_path)."""
    return _add(_OUTPUTS, check)


def check_training_tables(check: Callable) -> Callable:
    """Register check(frame, path, flag, cfg), run on each --dataset, --train-data and --val-data file."""
    return _add(_TRAINING_TABLES, check)


def read_extra_train_with(read: Callable) -> Callable:
    """Register read(table, path, cfg) -> table, run on each --extra-train file before its rows are used."""
    return _add(_EXTRA_TRAIN, read)


def check_output(path: str, flag: str) -> None:
    for check in _OUTPUTS:
        check(path, flag)


def check_training_table(frame, path: str, flag: str, cfg) -> None:
    for check in _TRAINING_TABLES:
        check(frame, path, flag, cfg)


def extra_train_table(table, path: str, cfg):
    for read in _EXTRA_TRAIN:
        table = read(table, path, cfg)
    return table

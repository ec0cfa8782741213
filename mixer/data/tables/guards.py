"""Checks that a feature above the data layer hands down to writing and preparing, so that
they run them without importing the feature. They guard an output that must not be replaced
(a filled audit), rows a run must not train on as they are (an audit's). The layer that calls
writing or preparing passes them (`guards=`): the audit's are mixer.audit.guards.GUARDS, which
every program, the prediction job and the APIs pass. Nothing is registered at import; a call
that passes none runs none (NONE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def _none(*args) -> None:
    pass


def _as_is(table, path: str, cfg):
    return table


@dataclass(frozen=True)
class Guards:
    """What a feature asks of the data layer.

    - `output(path, flag)`: raises UserError when `path` holds a file no output may replace
      (check_output_path, before any work);
    - `training_table(frame, path, flag, cfg)`: raises UserError when a training table's rows
      may not train (each --dataset, --train-data and --val-data file);
    - `extra_train(table, path, cfg) -> table`: the table an --extra-train file trains with (a
      feature's file, as rows).
    """

    output: Callable = _none
    training_table: Callable = _none
    extra_train: Callable = _as_is


NONE = Guards()  # no feature's checks: a caller that writes nothing a feature keeps

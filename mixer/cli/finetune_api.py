"""Fine-tuning from a notebook: `mixer.finetune(data, target_cols=..., save_path=...)`.

One code path with finetune.py: the keyword arguments become that program's flags
(each argument is the flag's name with '_', e.g. num_epochs=2 for --num-epochs 2), are
parsed by its parser, so they have its defaults and checks, and the run is trained by
the function the program calls. Bad input raises mixer.core.errors.UserError with the
program's one-line message, instead of printing it and exiting.
"""

from __future__ import annotations

import argparse
import os
from typing import Optional, Union

import pandas as pd

from mixer.core.errors import UserError

DATA_FILE = "dataset.parquet"  # a DataFrame given to finetune() is kept here, in the run


def finetune(data: Union[str, pd.DataFrame], target_cols=None, initial_checkpoint: Optional[str] = None,
             save_path: Optional[str] = None, **options):
    """Fine-tune on one dataset as finetune.py does; returns the trained model (mixer.load).

    data: a CSV or Parquet path, or a pandas DataFrame (written to SAVE_PATH/dataset.parquet,
    so that running the same call again resumes the run). target_cols: a column name or a
    list of them. options: any finetune.py flag by its name with '_' (input_col='occ1',
    num_epochs=2, encoder='canine-tiny', allow_codes_shorter_than_block_size=True,
    context_cols=['relation'], ...); True/False switch an on/off flag. Example:

        model = mixer.finetune(frame, target_cols=["hisco_1"], save_path="runs/nb", num_epochs=2)
        model.predict(["farm labourer"])
    """
    from mixer.cli import parsing as cli
    from mixer.cli.entrypoints import _train, finetune_parser

    if not save_path:
        raise UserError("save_path: name the run directory to write (e.g. save_path='runs/mine')")
    if target_cols is None or (not isinstance(target_cols, str) and not list(target_cols)):
        raise UserError("target_cols: name the code column(s), e.g. target_cols=['hisco_1']")
    for name, instead in (("dataset", "data (the first argument)"), ("save_dir", "save_path")):
        if name in options:
            raise UserError(f"{name}=: pass {instead} instead")
    parser = finetune_parser()
    parser.error = _raise_user_error  # one line as an exception, not an exit
    options = dict(options, target_cols=[target_cols] if isinstance(target_cols, str) else list(target_cols),
                   save_dir=save_path, initial_checkpoint=initial_checkpoint,
                   dataset=_dataset_path(data, save_path))
    namespace = cli.parse_args(parser, to_argv(parser, options))
    config = cli.build_config(namespace)
    _train(config)
    if config.data.prepare_only:
        return None
    from mixer.prediction.api import load

    return load(save_path)


def to_argv(parser: argparse.ArgumentParser, options: dict) -> list:
    """Keyword arguments as the program's flags; a name it has no flag for is an error."""
    actions = {}
    for action in parser._actions:  # the first flag of a name: --precision, not its alias --fp16
        if action.option_strings and action.dest not in ("help", "version"):
            actions.setdefault(action.dest, action)
    argv = []
    for name, value in options.items():
        action = actions.get(name)
        if action is None:
            raise UserError(f"{name}=: finetune.py has no flag --{name.replace('_', '-')}; "
                            "see python finetune.py --help for the options")
        if value is None:
            continue
        flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
        if isinstance(action, argparse.BooleanOptionalAction):
            if not isinstance(value, bool):
                raise UserError(f"{name}={value!r}: pass True or False")
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(action, (argparse._StoreConstAction, argparse._StoreTrueAction,
                                 argparse._StoreFalseAction, argparse._VersionAction)):
            raise UserError(f"{name}=: not an option of finetune(); see python finetune.py --help")
        elif action.nargs in ("+", "*"):
            values = [value] if isinstance(value, (str, int, float)) else list(value)
            argv.append(flag)
            argv.extend(str(v) for v in values)
        else:
            if isinstance(value, (list, tuple, dict, set)):
                raise UserError(f"{name}={value!r}: pass one value")
            argv.append(f"{flag}={value}")  # '=': a value such as '-1' is not read as a flag
    return argv


def _dataset_path(data, save_path: str) -> str:
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    if not isinstance(data, pd.DataFrame):
        raise UserError(f"data: pass a CSV or Parquet path or a pandas DataFrame, not {type(data).__name__}")
    if os.path.exists(save_path) and not os.path.isdir(save_path):
        raise UserError(f"save_path {save_path} is a file; pass a directory for the run")
    from mixer.core.io import atomic_write

    os.makedirs(save_path, exist_ok=True)
    path = os.path.join(save_path, DATA_FILE)
    frame = data.reset_index(drop=True)
    frame.columns = [str(c) for c in frame.columns]
    # the same DataFrame gives the same bytes, so a second call resumes the run
    atomic_write(path, lambda p: frame.to_parquet(p, index=False))
    return path


def _raise_user_error(message: str):
    raise UserError(f"finetune(): {message}")

"""Fine-tuning from a notebook: `mixer.finetune(data, target_cols=..., save_path=...)`.

One configuration with finetune.py. Each keyword argument is a field of the training
configuration, named as its flag with '_' (num_epochs=2 for --num-epochs 2), checked as the
flag is (mixer.core.flags.CHECKS). The run is trained by the function the
program calls. No command line is built. Bad input raises mixer.core.errors.UserError with the
program's one-line message, instead of printing it and exiting.
"""

from __future__ import annotations

import os
from typing import Optional, Union

import pandas as pd

from mixer.core.errors import UserError, first_line
from mixer.core.flags import checked  # noqa: F401 - the keywords read as their flags

DATA_FILE = "dataset.parquet"  # a DataFrame given to finetune() is kept here, in the run


def finetune(
    data: Union[str, pd.DataFrame],
    target_cols=None,
    initial_checkpoint: Optional[str] = None,
    save_path: Optional[str] = None,
    **options,
):
    """Fine-tune on one dataset as finetune.py does; returns the trained model (mixer.load).

    data: a CSV, Parquet, Excel or Stata path, or a pandas DataFrame (kept in
    SAVE_PATH/dataset.parquet, so that running the same call again resumes the run).
    target_cols: a column name or a list of them. options: any finetune.py flag by its
    name with '_' (input_col='occ1', num_epochs=2, encoder='canine-tiny',
    zero_padded_codes=True, context_cols=['relation'], ...); True/False switch an on/off
    flag. The options and the DataFrame are checked before anything is written; a run
    refused later (bad labels) leaves the run directory as it was. Example:

        model = mixer.finetune(frame, target_cols=["hisco_1"], save_path="runs/nb", num_epochs=2)
        model.predict(["farm labourer"])
    """
    from mixer.cli import parsing as cli
    from mixer.cli.entrypoints import _train

    if not save_path:
        raise UserError("save_path: name the run directory to write (e.g. save_path='runs/mine')")
    if isinstance(target_cols, str):
        target_cols = [target_cols]
    elif isinstance(target_cols, (list, tuple)):
        target_cols = list(target_cols)
    # anything else (a number, a DataFrame) is read or refused in one line as --target-cols (checked)
    if target_cols is None or target_cols == []:
        raise UserError("target_cols: name the code column(s), e.g. target_cols=['hisco_1']")
    for name, instead in (("dataset", "data (the first argument)"), ("save_dir", "save_path")):
        if name in options:
            raise UserError(f"{name}=: pass {instead} instead")
    frame = _as_table(data)  # before anything is written
    options = dict(
        options,
        target_cols=target_cols,
        save_dir=save_path,
        initial_checkpoint=initial_checkpoint,
        dataset=os.fspath(data) if frame is None else os.path.join(save_path, DATA_FILE),
    )
    config = cli.build_config(checked_values(options))
    kept = None if frame is None else KeptFrame(frame, save_path)
    try:
        _train(config)
    except UserError as exc:
        if kept is None:
            raise
        kept.undo()
        # a message about the DataFrame names it, not the file it is kept in (rows count from 1
        # in its order, as in a file)
        raise UserError(
            str(exc).replace(f"--dataset {kept.path}", "data").replace(kept.path, "data")
        ) from None
    if config.data.prepare_only:
        return None
    from mixer.prediction.api import load

    return load(save_path)


def checked_values(given: dict) -> dict:
    """finetune.py's values for these keyword arguments: each checked as its flag is (the
    same checks and messages), the rest at the field's default. A name is a field's
    (key_file) or its flag's without the dashes (key, lr); config= reads a YAML file
    as --config does."""
    from mixer.cli import parsing as cli
    from mixer.cli.entrypoints import finetune_parser

    parser = finetune_parser()
    specs = parser.specs
    by_name = {spec.name: spec for spec in specs.values()}
    for spec in specs.values():  # each flag by its own name: key= for --key (field key_file)
        for flag in spec.flags:
            by_name.setdefault(flag[2:].replace("-", "_"), spec)
    aliases = {
        flag[2:].replace("-", "_")
        for spec in specs.values()
        for flags, _, _ in spec.aliases
        for flag in flags
    }
    values = {}  # the rest: the fields' defaults (build_config)
    if given.get("config") is not None:
        values.update(cli.config_file_values(parser, os.fspath(given["config"])))
    values["command"] = [
        "mixer.finetune(" + ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None) + ")"
    ]
    for name, value in given.items():
        if name == "config":
            continue
        spec = by_name.get(name)
        if name in aliases:
            raise UserError(f"{name}=: not an option of finetune(); see python finetune.py --help")
        if spec is None:
            raise UserError(
                f"{name}=: finetune.py has no flag --{name.replace('_', '-')}; "
                "see python finetune.py --help for the options"
            )
        if value is not None:
            values[spec.name] = checked(name, spec, value)
    return values


def _as_table(data) -> Optional[pd.DataFrame]:
    """A DataFrame as a file holds one, or None for a path. Names are text and distinct; a
    column of numbers and text mixed (as pd.read_excel gives one) is text. Numbers stay
    numbers, so their lost zeros are restored as a file's are."""
    if isinstance(data, (str, os.PathLike)):
        return None
    if not isinstance(data, pd.DataFrame):
        raise UserError(
            f"data: pass a path (CSV, Parquet, .xlsx, .dta) or a pandas DataFrame, "
            f"not {type(data).__name__}"
        )
    from mixer.data.tables.reading import check_names, text_cells

    frame = data.reset_index(drop=True)
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    check_names(frame.columns, "(a DataFrame)", "data")
    return pd.DataFrame({c: text_cells(frame[c]) for c in frame.columns})


class KeptFrame:
    """The DataFrame written to SAVE_PATH/dataset.parquet, the file its run reads and
    resumes from. The same DataFrame gives the same bytes (a second call resumes); a
    run directory that holds another DataFrame's prepared run is refused before it is
    touched. undo() puts the directory back as it was when the run was refused before
    its data was prepared."""

    def __init__(self, frame: pd.DataFrame, save_path: str):
        import io

        from mixer.core.io import atomic_write

        if os.path.exists(save_path) and not os.path.isdir(save_path):
            raise UserError(f"save_path {save_path} is a file; pass a directory for the run")
        self.path = os.path.join(save_path, DATA_FILE)
        buffer = io.BytesIO()
        try:
            frame.to_parquet(buffer, index=False)
        except (ValueError, TypeError, NotImplementedError) as exc:  # pyarrow's ArrowInvalid,
            raise UserError(
                f"data: {_unkept(frame)} ({first_line(exc, 200)}); make it "  # ArrowTypeError,
                "text or numbers"
            )  # ArrowNotImplementedError (complex numbers) among them
        new = buffer.getvalue()
        self.before = _read_bytes(self.path) if os.path.isfile(self.path) else None
        self.save_path = save_path
        self.was_prepared = os.path.isdir(save_path) and self.prepared()
        if self.before not in (None, new) and self.prepared():
            raise UserError(
                f"save_path {save_path} holds a run of another DataFrame (its {DATA_FILE} "
                "differs); pass a new save_path, or the same DataFrame to resume"
            )
        self.made = _missing_dirs(save_path)
        os.makedirs(save_path, exist_ok=True)
        if new != self.before:
            atomic_write(self.path, lambda p: _write_bytes(p, new))
        self.new = new

    def prepared(self) -> bool:
        """Whether the run directory holds prepared data (its dataset.parquet is its input)."""
        from mixer.data.prepared.files import prepared_stamp

        return prepared_stamp(self.save_path) is not None

    def undo(self) -> None:
        if self.prepared() and not self.was_prepared:
            return  # this call prepared the run's data: the file is its input now
        from mixer.core.io import atomic_write

        if self.before is None:
            if os.path.exists(self.path):
                os.unlink(self.path)
        elif self.before != self.new:
            atomic_write(self.path, lambda p: _write_bytes(p, self.before))
        for directory in reversed(self.made):
            if os.path.isdir(directory) and not os.listdir(directory):
                os.rmdir(directory)


def _unkept(frame: pd.DataFrame) -> str:
    """Which column Parquet cannot hold, in words."""
    import io

    for column in frame.columns:
        try:
            frame[[column]].to_parquet(io.BytesIO(), index=False)
        except (ValueError, TypeError, NotImplementedError):
            return f"column {column!r} ({frame[column].dtype}) cannot be kept in Parquet"
    return "a column Parquet cannot hold"


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def _missing_dirs(path: str) -> list:
    """The directories os.makedirs(path) would create, outermost first."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing[::-1]

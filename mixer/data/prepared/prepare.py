"""Preparing: a run's data from its files. The order is reading (mixer.data.tables.reading:
every file through the one reader, with its role's options), normalising
(mixer.data.labels.normalise: codes as the code system spells them, the model's text), then
this module: the label checks (mixer.data.labels.checks), the key and its descriptions
(mixer.data.labels.key), the split (split), and the run directory's prepared files (files)
with the fingerprint of what they were prepared from (fingerprint).

Everything here is vectorised over columns: a formatter looks at each distinct
code once, and rows are handled by numpy/pandas. No torch import, so
`finetune.py --prepare-only` runs in seconds on millions of rows.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Callable, Optional

import numpy as np
import pandas as pd

from mixer.core.config import READ_OPTIONS, DataConfig, TableOptions
from mixer.core.errors import UserError
from mixer.data.labels.checks import check_empty_code_label, check_rows
from mixer.data.labels.columns import LANG, REPORT_PREFIX
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.labels.key import (
    Descriptions,
    build_key,
    extend_key,
    read_descriptions,
    read_key_file,
)
from mixer.data.labels.normalise import check_one_spelling, hisco_key, width_reason
from mixer.data.prepared.files import Prepared, load_prepared, prepared_stamp, write_prepared
from mixer.data.prepared.fingerprint import describe_difference, run_stamp, same_as_legacy
from mixer.data.prepared.split import calibration_rows, split_rows
from mixer.data.tables.guards import NONE, Guards
from mixer.data.tables.reading import SHEET_ROWS, read_table


def make_formatter(cfg: DataConfig, max_num_codes: int, tokens: str = "mixer") -> CodeFormatter:
    return CodeFormatter(
        kind=cfg.formatter,
        block_size=cfg.block_size,
        max_num_codes=max_num_codes,
        use_within_block_sep=cfg.use_within_block_sep,
        allow_short=cfg.allow_codes_shorter_than_block_size,
        tokens=tokens,
    )


def spell_as_flags_say(cfg: DataConfig, formatter: CodeFormatter) -> None:
    """--zero-padded-codes: digit codes are --block-size digits."""
    if not cfg.zero_padded_codes:
        return
    if formatter.use_within_block_sep:
        raise UserError(
            "--zero-padded-codes pads digit codes to --block-size characters, but with "
            "--use-within-block-sep --block-size counts parts: leave one of them out"
        )
    if formatter.kind == "general":
        formatter.digit_width = formatter.block_size


def prepare(
    cfg: DataConfig,
    seed: int,
    log=print,
    base=None,
    tokens: str = "mixer",
    guards: Guards = NONE,
) -> Prepared:
    """Read, check, key and split the data of a run, in memory. With `base` (a
    whole-model start, mixer.models.sources.Base) the codes are read in the starting
    model's layout, and the key is its codes followed by any new ones. `guards`: a feature's
    checks of its training tables (an audit's rows: mixer.audit.guards.GUARDS)."""
    if base is not None:
        formatter = CodeFormatter.from_dict(base.formatter.to_dict())
        formatter.allow_short = cfg.allow_codes_shorter_than_block_size or formatter.allow_short
        if len(cfg.target_cols) > formatter.max_num_codes:
            raise UserError(
                f"--target-cols: {len(cfg.target_cols)} code columns, but the starting "
                f"model writes at most {formatter.max_num_codes} codes per row"
            )
    else:  # new heads: the decoder's tokens numbered as the model family numbers them
        formatter = make_formatter(cfg, len(cfg.target_cols), tokens)
    if base is None and formatter.kind == "hisco":
        formatter.block_size = 5
    elif base is None and formatter.kind == "occ1950":
        formatter.block_size = 3
    spell_as_flags_say(cfg, formatter)
    known = set(hisco_key()["code"]) if formatter.kind == "hisco" else None
    fixed = (
        read_key_file(cfg.key_file, formatter, known, cfg.table_options("key"), log)
        if cfg.key_file
        else None
    )
    why = width_reason(
        formatter, cfg.key_file if fixed is not None and fixed.attrs.get("width") else None
    )
    descriptions = (
        read_descriptions(cfg.code_descriptions, formatter, cfg.table_options("code_descriptions"))
        if cfg.code_descriptions
        else None
    )
    if fixed is not None:
        own = Descriptions({c: d for c, d in zip(fixed["code"], fixed["description"]) if d})
        descriptions = own if descriptions is None else descriptions.over(own)
    allowed = set(fixed["code"]) if fixed is not None else None
    if cfg.empty_code_label is not None:
        check_empty_code_label(cfg, formatter, known, allowed)

    seen, sources = set(), []  # sources: (file, its codes), for check_one_spelling

    def load(paths, role):
        frames = []
        for path in paths:
            frame = read_role_file(cfg, role, path, paths, log)
            guards.training_table(frame, path, TableOptions(role=role).what, cfg)  # an audit's rows
            checked = check_rows(frame, cfg, formatter, path, known, allowed, log, why)
            if checked.dropped:
                log(f"{path}: dropped {checked.dropped} row(s) with bad labels (--drop-bad-labels)")
            frames.append(checked.frame)
            seen.update(checked.codes)
            sources.append((f"{TableOptions(role=role).what} {path}", checked.codes))
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        if len(frame) == 0:
            raise UserError(
                f"{TableOptions(role=role).what}: no rows left after dropping bad labels"
            )
        return frame

    cal = None
    if cfg.dataset:
        frame = load([cfg.dataset], "dataset")
        train, val, cal = (
            frame.iloc[rows].reset_index(drop=True)
            for rows in split_rows(len(frame), cfg.share_val, seed, cfg.share_calibration)
        )
        cal = cal if cfg.share_calibration else None
    else:
        train, val = load(cfg.train_data, "train_data"), load(cfg.val_data, "val_data")
        if cfg.share_calibration:  # the held-out files are the rows like those to be coded
            chosen = np.zeros(len(val), dtype=bool)
            chosen[calibration_rows(len(val), cfg.share_calibration, seed)] = True
            val, cal = val[~chosen].reset_index(drop=True), val[chosen].reset_index(drop=True)
    if cfg.extra_train:  # rows checked by hand: training only, after the split
        train = add_rows(
            train,
            read_extra_train(cfg, formatter, known, allowed, seen, log, why, sources, guards),
        )
    # with codes shorter than the block allowed: one number written two ways is refused
    check_one_spelling(sources)
    if fixed is not None:  # every code of --key, those absent from the data too
        seen = set(fixed["code"])
    if base is None:
        formatter.fit_alphabet(sorted(seen))
        key = build_key(
            formatter, seen, descriptions, order=None if fixed is None else list(fixed["code"])
        )
    else:
        key = extend_key(base, formatter, seen, descriptions)
    return Prepared(train=train, val=val, key=key, formatter=formatter, cal=cal)


def read_role_file(cfg: DataConfig, role: str, path: str, paths: list, log) -> pd.DataFrame:
    """One of a role's files, read with the role's options. A role's options apply to each of
    its files (--train-data A B --encoding cp1252 reads both so), which an error about one of
    several files says, since its hint then changes how the others are read too."""
    options = cfg.table_options(role)
    try:
        return read_table(path, options, log=log)
    except UserError as exc:
        named = [
            options.flag(o)
            for o in READ_OPTIONS
            if re.search(rf"(?<![\w-]){re.escape(options.flag(o))}\b", str(exc))
        ]
        if len(paths) < 2 or not named:
            raise
        raise UserError(
            f"{exc} ({' and '.join(named)} applies to each of the {len(paths)} "
            f"{options.what} files: files that need other options are saved alike "
            "first, e.g. all as UTF-8)"
        ) from None


def read_extra_train(
    cfg: DataConfig,
    formatter: CodeFormatter,
    known,
    allowed,
    seen: set,
    log,
    why: str = "",
    sources: Optional[list] = None,
    guards: Guards = NONE,
) -> pd.DataFrame:
    """The rows of --extra-train files that a person filled (a code in checked_1..), checked
    like any training row, with the run's text, language and context columns."""
    from mixer.data.labels.checking import checked_columns, filled_rows, with_run_names

    frames = []
    inputs = (
        [cfg.input_col] + ([cfg.language_col] if cfg.language_col else []) + list(cfg.context_cols)
    )
    for path in cfg.extra_train:
        table = read_role_file(cfg, "extra_train", path, cfg.extra_train, log)
        table = guards.extra_train(table, path, cfg)  # an audit: refused, or its checked rows
        table = with_run_names(table, inputs, path, log)
        columns = checked_columns(table, path)
        filled = filled_rows(table, columns)
        if not filled.any():
            raise UserError(
                f"--extra-train {path}: no row has a code in {', '.join(columns)}; fill "
                "the right codes of the rows you checked"
            )
        if len(columns) > len(cfg.target_cols):
            extra = filled_rows(table.loc[filled], columns[len(cfg.target_cols) :])
            if extra.any():
                raise UserError(
                    f"--extra-train {path}: a row has codes in {columns[len(cfg.target_cols)]} "
                    f"or later, but the run has {len(cfg.target_cols)} code slot(s)"
                )
            columns = columns[: len(cfg.target_cols)]
        rows = table.loc[filled].reset_index(drop=True)
        rows.attrs = dict(table.attrs)
        if SHEET_ROWS in rows.attrs:
            rows.attrs[SHEET_ROWS] = list(np.asarray(table.attrs[SHEET_ROWS])[filled])
        checked = check_rows(
            rows,
            dataclasses.replace(cfg, target_cols=columns, empty_code_label=None, report_cols=[]),
            formatter,
            path,
            known,
            allowed,
            log,
            why,
            numbers=np.flatnonzero(filled) + 1,
        )
        if checked.dropped:
            log(
                f"{path}: dropped {checked.dropped} checked row(s) with bad labels (--drop-bad-labels)"
            )
        seen.update(checked.codes)
        if sources is not None:
            sources.append((f"--extra-train {path}", checked.codes))
        log(f"{path}: {len(checked.frame)} checked row(s) added to the training rows")
        frames.append(checked.frame)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def add_rows(train: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """Training rows and more rows, code columns kept categorical (one union of categories)."""
    for column in [c for c in train.columns if c.startswith("code_")]:
        if column not in extra.columns:
            extra[column] = (
                pd.Categorical.from_codes(np.full(len(extra), 0), [""]) if len(extra) else ""
            )
        categories = train[column].cat.categories.union(
            extra[column].astype("category").cat.categories
        )
        train[column] = train[column].cat.set_categories(categories)
        extra[column] = extra[column].astype("category").cat.set_categories(categories)
    for column in [
        c for c in train.columns if c.startswith(REPORT_PREFIX) and c not in extra.columns
    ]:
        extra[column] = ""  # checked rows carry no --report-cols
    extra = extra[[c for c in train.columns]]
    for column in (LANG,):
        if isinstance(train[column].dtype, pd.CategoricalDtype) or isinstance(
            extra[column].dtype, pd.CategoricalDtype
        ):
            categories = pd.Index(train[column].astype("category").cat.categories).union(
                extra[column].astype("category").cat.categories
            )
            train[column] = train[column].astype("category").cat.set_categories(categories)
            extra[column] = extra[column].astype("category").cat.set_categories(categories)
    return pd.concat([train, extra], ignore_index=True)


def prepare_run_data(
    cfg: DataConfig,
    seed: int,
    run_dir: str,
    log=print,
    check: Optional[Callable[[Prepared], None]] = None,
    base=None,
    tokens: str = "mixer",
    guards: Guards = NONE,
) -> Prepared:
    """Reuse the run directory's data when it was prepared from the same input
    and settings, else prepare it and, once `check` (if any) accepts it, write it:
    bad input leaves the run directory as it was. Reused data comes without its
    text (training reads token ids; see load_prepared). `guards`: as prepare takes them."""
    stamp = run_stamp(cfg, seed, base, tokens)
    existing = prepared_stamp(run_dir)
    if existing is not None:
        digest = existing.get(
            "digest"
        )  # the typed stamp (files hashed again) only when the first differs
        if (
            digest != stamp["digest"]
            and digest != run_stamp(cfg, seed, base, tokens, typed=True)["digest"]
            and not same_as_legacy(existing, cfg, seed)
        ):
            raise UserError(
                f"{run_dir} holds data prepared from other input or settings "
                f"({describe_difference(existing, stamp)}); use a new --save-path, "
                "or the original files and flags to resume"
            )
        log(f"reusing prepared data in {run_dir}")
        prepared = load_prepared(run_dir, with_text=False)  # 10M texts would take a GB
        if check is not None:
            check(prepared)
        return prepared
    start = time.perf_counter()
    prepared = prepare(cfg, seed, log, base, tokens, guards)
    if check is not None:
        check(prepared)
    write_prepared(prepared, run_dir, stamp)
    rows = (
        f"{len(prepared.train)} training and {len(prepared.val)} validation"
        if prepared.cal is None
        else f"{len(prepared.train)} training, {len(prepared.val)} validation and {len(prepared.cal)} calibration"
    )
    log(
        f"prepared {rows} rows, {len(prepared.key)} codes, in {run_dir} ({time.perf_counter() - start:.1f} s)"
    )
    return prepared

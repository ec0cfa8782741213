"""Preparing: a run's data from its files. The order is reading (mixer.data.reading: every
file through the one reader, with its role's options), normalising (mixer.data.normalise:
codes as the code system spells them, the model's text), then this module. It does the
label checks, the key and the split, and writes the run directory's prepared files with the
fingerprint of what they were prepared from.

Everything here is vectorised over columns: a formatter looks at each distinct
code once, and rows are handled by numpy/pandas. No torch import, so
`finetune.py --prepare-only` runs in seconds on millions of rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pandas as pd

from mixer.core.config import READ_OPTIONS, TABLE_ROLES, DataConfig, TableOptions, option_dest
from mixer.core.errors import UserError
from mixer.data.tables import guards
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.labels.normalise import (
    check_one_spelling, code_column, describe_restored, hisco_key, key_digit_width, model_input,
    restore_digits, width_reason,
)
from mixer.data.tables.reading import (
    SHEET_ROWS, as_text, canonical_options, check_input_path, read_table, require_columns, row_names,
)

TEXT, LANG = "text", "lang"  # column names of prepared data
DESC_CHARS = "desc_chars"  # prepared column: characters of `text` that are the description
PREPARED_FILES = ("data_train.parquet", "data_val.parquet", "key.csv", "prepared.json")
CALIBRATION_FILE = "data_cal.parquet"  # --share-calibration: rows that choose nothing (docs/coding.md)
REPORT_PREFIX = "report:"  # prepared columns of --report-cols: "report:source" holds the column source
ROW_GROUP = 1_000_000


def code_columns(max_num_codes: int) -> list[str]:
    return [f"code_{i + 1}" for i in range(max_num_codes)]


# ------------------------------------------------------------------ labels
@dataclass
class Checked:
    """Rows of one table after label checks."""

    frame: pd.DataFrame  # text, lang, code_1..code_K (normalised, '' = none), row
    dropped: int
    codes: set  # the distinct codes of the kept rows


def check_rows(frame: pd.DataFrame, cfg: DataConfig, formatter: CodeFormatter, path: str,
               known: Optional[set] = None, allowed: Optional[set] = None, log=None,
               why: str = "", numbers: Optional[np.ndarray] = None) -> Checked:
    """Validate text and codes of every row, vectorised; bad rows are an error
    naming them, or dropped with --drop-bad-labels. Codes are first spelled as the code
    system spells them (mixer.data.normalise; `why` says why its digit codes have a fixed
    width, in the line that counts the zeros restored). `allowed`: the codes of --key (a
    code outside it is bad). With --empty-code-label a row without any code gets that
    code in its first slot. `numbers`: each row's number in its file (rows count from 1
    under the header), where the frame holds some of the file's rows only."""
    flags = {cfg.input_col: "--input-col"}
    flags.update({c: "--target-cols" for c in cfg.target_cols})
    flags.update({c: "--context-cols" for c in cfg.context_cols})
    if cfg.language_col:
        flags[cfg.language_col] = "--language-col"
    flags.update({c: "--report-cols" for c in cfg.report_cols if c not in flags})
    require_columns(frame, list(flags), path, flags)

    text = frame[cfg.input_col].astype("str").str.strip()
    empty_text = text.eq("").to_numpy()
    desc_chars = text.str.len().to_numpy(dtype=np.int32)
    n_rows, n_cols = len(frame), len(cfg.target_cols)
    # the whole context: the tokeniser fits it to the model's input (mixer.data.tokens)
    text = model_input(text, frame, cfg.context_cols)[0]
    # all code cells as one column of strings (column after column), normalised and
    # factorised: the formatter then looks at each distinct value once
    columns = [code_column(frame, c, formatter) for c in cfg.target_cols]
    for column, spelled in zip(cfg.target_cols, columns):
        if log is not None and (line := describe_restored(path, column, spelled, formatter, why)):
            log(line)
    cells = pd.concat([spelled.text for spelled in columns], ignore_index=True)
    if cfg.empty_code_label is not None and n_cols:
        no_code = np.ones(n_rows, dtype=bool)
        for column in range(n_cols):
            no_code &= cells.iloc[column * n_rows:(column + 1) * n_rows].eq("").to_numpy()
        if no_code.any():
            cells = cells.copy()
            cells.iloc[np.flatnonzero(no_code)] = cfg.empty_code_label  # the first code column
    not_whole = np.stack([spelled.not_whole for spelled in columns], axis=1)  # (rows, cols)
    ids, uniques = pd.factorize(cells, sort=False)
    normalised, reasons = [], []
    for value in uniques:  # each distinct code once
        code, reason = formatter.check(value, known) if value != "" else ("", "")
        if value != "" and not reason and allowed is not None and code not in allowed:
            reason = f"not in --key {cfg.key_file}"
        normalised.append(code)
        reasons.append(reason)
    normalised = np.asarray(normalised, dtype=object)
    reasons = np.asarray(reasons, dtype=object)
    ids = ids.reshape(n_cols, n_rows).T
    # distinct values may be one code ('-1' and '-1 ' in the formatter's eyes)
    code_ids, code_names = pd.factorize(normalised, sort=False)
    cell_code = code_ids[ids]  # (rows, cols) index into code_names
    code_names = np.asarray(code_names, dtype=object)
    codes = code_names[cell_code]
    cell_reason = reasons[ids]
    if not_whole.any():  # fractional values in a column of numbers are not codes
        cell_reason = np.where(not_whole, "not a whole number (the column holds numbers)", cell_reason)
    raw = np.asarray(uniques, dtype=object)[ids]  # as normalised: as written, or zeros restored

    problems = []  # (mask, description)
    problems.append((empty_text, f"empty text in {cfg.input_col!r}"))
    problems.append(((codes == "").all(axis=1), "no code in any target column"))
    bad_cells = cell_reason != ""
    if bad_cells.any():
        problems.append((bad_cells.any(axis=1), "bad codes"))
    bad = np.zeros(n_rows, dtype=bool)
    for mask, _ in problems:
        bad |= mask
    if bad.any() and not cfg.drop_bad_labels:
        shown = row_names(frame, np.arange(n_rows), numbers)  # a workbook's: also as Excel numbers them
        raise UserError(_describe_bad_rows(path, problems, bad_cells, cell_reason, raw, cfg, shown))

    lang = (frame[cfg.language_col].astype("str").str.strip().reset_index(drop=True)
            if cfg.language_col else pd.Categorical.from_codes(np.zeros(n_rows, dtype=np.int8),
                                                               [cfg.language or "unk"]))
    # Codes are packed to the left: empty slots last, so block k is the k-th code.
    order = np.argsort(codes == "", axis=1, kind="stable")
    cell_code = np.take_along_axis(cell_code, order, axis=1)
    # categorical columns: no string copies per row, dictionary-encoded in Parquet
    categories = pd.Index(code_names, dtype=object)
    out = pd.DataFrame({TEXT: text.reset_index(drop=True), LANG: lang})
    if cfg.context_cols:  # training noise edits the description, never the context
        out[DESC_CHARS] = desc_chars
    for column in cfg.report_cols:  # breakdowns of the run's final evaluation, as text
        out[REPORT_PREFIX + column] = as_text(frame[column]).reset_index(drop=True).astype("category")
    for i, name in enumerate(code_columns(n_cols)):
        out[name] = pd.Categorical.from_codes(cell_code[:, i], categories)
    out["row"] = np.arange(1, n_rows + 1) if numbers is None else np.asarray(numbers)
    keep = ~bad
    present = np.bincount(cell_code[keep].ravel(), minlength=len(categories)) > 0
    kept_codes = {c for c, used in zip(categories, present) if used and c != ""}
    frame = out[keep].reset_index(drop=True) if bad.any() else out
    return Checked(frame=frame, dropped=int(bad.sum()), codes=kept_codes)


def _describe_bad_rows(path, problems, bad_cells, cell_reason, raw, cfg, numbers) -> str:
    parts = []
    for mask, what in problems:
        rows = np.flatnonzero(mask)
        if not len(rows):
            continue
        if what == "bad codes":
            examples = []
            for row in rows[:3]:
                col = int(np.flatnonzero(bad_cells[row])[0])
                examples.append(f"row {numbers[row]} {cfg.target_cols[col]}={str(raw[row, col])!r}: "
                                f"{cell_reason[row, col]}")
            parts.append(f"{len(rows)} row(s) with bad codes ({'; '.join(examples)})")
        else:
            shown = ", ".join(str(numbers[r]) for r in rows[:5])
            parts.append(f"{len(rows)} row(s) with {what} (rows {shown}{', ...' if len(rows) > 5 else ''})")
    return (f"{path}: " + "; ".join(parts) +
            ". Fix these rows or pass --drop-bad-labels to skip them (rows count from 1 after the header)")


# ------------------------------------------------------------------ key
def build_key(formatter: CodeFormatter, codes, descriptions: Optional["Descriptions"] = None,
              order: Optional[list] = None) -> pd.DataFrame:
    """The label key: code, index, description ('' when unknown). `order`: the codes of
    --key, as listed; else built-in HISCO has its full list, other systems the sorted
    distinct codes seen."""
    if order is not None:
        known = dict(zip(hisco_key()["code"], hisco_key()["description"])) if formatter.kind == "hisco" else {}
        key = pd.DataFrame({"code": order, "description": [known.get(c, "") for c in order]})
    elif formatter.kind == "hisco":
        key = hisco_key()
    else:
        key = pd.DataFrame({"code": sorted(c for c in codes if c != ""), "description": ""})
    if descriptions is not None:
        given = pd.Series(descriptions.lookup(key["code"]), index=key.index, dtype=object)
        key["description"] = given.fillna(key["description"])
    key.insert(1, "index", np.arange(len(key)))
    return key.reset_index(drop=True)


def labels_of(frame: pd.DataFrame, key_codes, max_num_codes: int) -> np.ndarray:
    """Key indices (rows, max_num_codes), -1 where a slot is empty (also the slots a
    model has beyond the data's code columns). Column by column, through each
    column's categories where it has them (a prepared split's code columns), so
    that no row-sized array of Python strings is made (10M rows on every rank)."""
    key = pd.Index(list(key_codes))
    labels = np.full((len(frame), max_num_codes), -1, dtype=np.int64)
    for slot, column in enumerate(c for c in code_columns(max_num_codes) if c in frame.columns):
        values = frame[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            # the key index of each category, then -1 for the missing category code -1
            lookup = np.append(key.get_indexer(values.cat.categories.astype(str)), -1)
            labels[:, slot] = lookup[values.cat.codes.to_numpy()]
        else:  # "" and codes outside the key -> -1
            labels[:, slot] = key.get_indexer(values.to_numpy(dtype=object))
    return labels


def split_rows(n_rows: int, share_val: float, seed: int,
               share_calibration: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded random split: (train, validation, calibration indices), each sorted. The
    validation rows are the same with or without a calibration share: its rows come out
    of the training rows."""
    n_val = int(round(n_rows * share_val))
    n_cal = int(round(n_rows * share_calibration))
    if not share_calibration and (n_val < 1 or n_val >= n_rows):
        raise UserError(f"--share-val {share_val} of {n_rows} rows leaves "
                        f"{n_val} validation and {n_rows - n_val} training rows; "
                        "both need at least one: change --share-val or add rows")
    if share_calibration and (n_val < 1 or n_val + n_cal >= n_rows):
        raise UserError(f"--share-val {share_val} and --share-calibration {share_calibration} of {n_rows} rows "
                        f"leave {n_val} validation and {max(n_rows - n_val - n_cal, 0)} training rows; both need "
                        "at least one: lower the shares or add rows")
    if share_calibration and n_cal < 1:
        raise UserError(f"--share-calibration {share_calibration} of {n_rows} rows sets no row aside: "
                        "raise it, or leave it out")
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[n_val + n_cal:]), np.sort(order[:n_val]), np.sort(order[n_val:n_val + n_cal])


def calibration_rows(n_rows: int, share_calibration: float, seed: int) -> np.ndarray:
    """The rows of the validation files set aside for calibration (train_mixer.py):
    a seeded share of them, sorted; the rest stay validation rows."""
    n_cal = int(round(n_rows * share_calibration))
    if n_cal < 1:
        raise UserError(f"--share-calibration {share_calibration} of the {n_rows} rows of --val-data sets no "
                        "row aside: raise it, or leave it out")
    if n_cal >= n_rows:
        raise UserError(f"--share-calibration {share_calibration} of the {n_rows} rows of --val-data "
                        "leaves no validation row: lower it or add validation rows")
    return np.sort(np.random.default_rng([seed, 11]).permutation(n_rows)[:n_cal])


# ------------------------------------------------------------------ prepared data
FINGERPRINT_SETTINGS = ("input_col", "context_cols", "target_cols", "language", "language_col", "formatter",
                        "block_size", "use_within_block_sep", "drop_bad_labels",
                        "allow_codes_shorter_than_block_size", "share_val")
# settings that join the identity only when set (how the files are read, optional
# labels and spellings), so runs prepared before they existed keep their fingerprint
OPTIONAL_SETTINGS = {"encoding": "utf-8", "sep": None, "sheet": None, "header_row": None,
                     "read_options": {}, "empty_code_label": None, "zero_padded_codes": False,
                     "share_calibration": 0.0, "report_cols": []}
HASH_BLOCK = 1 << 23


def content_hash(path: str) -> str:
    """xxh3-128 of the file's bytes: about 0.2 s per GB (docs/data.md)."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(HASH_BLOCK)
            if not block:
                return digest.hexdigest()
            digest.update(block)


def file_identity(path: str, file_flag: str) -> dict:
    """What makes a file the same input: its bytes, not its path or time stamp, so a
    copy in a per-job directory is the same data and any edit is another."""
    check_input_path(path, file_flag)
    return {"name": os.path.basename(path), "bytes": os.path.getsize(path),
            "xxh3_128": content_hash(path)}


def run_files(cfg: DataConfig) -> dict:
    """{role: [paths]}: every file the run reads, by role (mixer.core.config.TABLE_ROLES)."""
    files = {"dataset": [cfg.dataset]} if cfg.dataset else {"train_data": list(cfg.train_data),
                                                            "val_data": list(cfg.val_data)}
    files.update({"code_descriptions": [cfg.code_descriptions] if cfg.code_descriptions else [],
                  "key": [cfg.key_file] if cfg.key_file else [], "extra_train": list(cfg.extra_train)})
    return {role: paths for role, paths in files.items() if paths}


def reading_settings(cfg: DataConfig, files: dict, typed: bool = False) -> dict:
    """How the run's files are read, as part of its identity. Each option as the files
    make it mean (mixer.data.reading.canonical_options: a typed value that only says what
    the file says by itself, such as --sep ',' on a file whose header uses ',', is the
    default). With `typed`, each option as given (how runs were identified before)."""
    values = {}
    for role, paths in files.items():
        given, canonical = cfg.table_options(role), None
        for option in READ_OPTIONS:
            value, default = getattr(given, option), getattr(TableOptions(), option)
            if not typed and value != default:
                canonical = canonical or [canonical_options(path, given) for path in paths]  # once a role
                if all(getattr(options, option) == default for options in canonical):
                    value = default
            if value != default:
                values[option_dest(role, option)] = value
    main = {k: v for k, v in values.items() if k in READ_OPTIONS}
    own = {k: v for k, v in values.items() if k not in READ_OPTIONS}
    return {**main, **({"read_options": own} if own else {})}


def fingerprint(cfg: DataConfig, seed: int, typed: bool = False) -> dict:
    """The identity of a run's prepared data: each role's files by content (training and
    validation apart, in order), how they are read, and the data settings."""
    files = run_files(cfg)
    inputs = {role: [file_identity(p, TableOptions(role=role).what) for p in paths]
              for role, paths in files.items()}
    settings = {k: getattr(cfg, k) for k in FINGERPRINT_SETTINGS}
    settings.update({k: getattr(cfg, k) for k, default in OPTIONAL_SETTINGS.items()
                     if k not in ("read_options",) + READ_OPTIONS and getattr(cfg, k) != default})
    settings.update(reading_settings(cfg, files, typed))
    settings["seed"] = seed
    contents = {role: [[f["bytes"], f["xxh3_128"]] for f in files] for role, files in inputs.items()}
    digest = hashlib.sha256(json.dumps([contents, settings], sort_keys=True).encode()).hexdigest()
    return {"identity": "content", "inputs": inputs, "settings": settings, "digest": digest[:16]}


def run_stamp(cfg: DataConfig, seed: int, base=None, tokens: str = "mixer", typed: bool = False) -> dict:
    """The fingerprint with what else fixes the prepared data: the decoder's token layout
    and the starting model (its layout and key)."""
    stamp = fingerprint(cfg, seed, typed)
    if tokens != "mixer":
        stamp["settings"]["tokens"] = tokens
        stamp["digest"] = hashlib.sha256(json.dumps([stamp["digest"], tokens]).encode()).hexdigest()[:16]
    if base is not None:
        stamp["settings"]["start"] = base.describe()
        stamp["digest"] = hashlib.sha256(json.dumps([stamp["digest"], stamp["settings"]["start"]],
                                                    sort_keys=True).encode()).hexdigest()[:16]
    return stamp


def same_as_legacy(old: dict, cfg: DataConfig, seed: int) -> bool:
    """Prepared by mixer 0.1 (files identified by path, size and time) from these very
    files and settings: accepted, so that runs started before the upgrade resume."""
    if old.get("identity") == "content" or "files" not in old:
        return False
    files = [cfg.dataset] if cfg.dataset else list(cfg.train_data) + list(cfg.val_data)
    stats = [[os.path.abspath(p), os.path.getsize(p), int(os.stat(p).st_mtime)] for p in files]
    legacy = ("input_col", "target_cols", "language", "language_col", "formatter", "block_size",
              "use_within_block_sep", "drop_bad_labels", "allow_codes_shorter_than_block_size",
              "share_val", "code_descriptions")
    settings = {k: getattr(cfg, k) for k in legacy}
    settings["seed"] = seed
    digest = hashlib.sha256(json.dumps([stats, settings], sort_keys=True).encode()).hexdigest()
    return old.get("digest") == digest[:16]


def describe_difference(old: dict, new: dict) -> str:
    """What changed between two fingerprints, in words."""
    if old.get("identity") != "content":
        return "it was prepared by mixer 0.1, which identified files by path and time"
    changed = []
    for role in sorted(set(old.get("inputs", {})) | set(new["inputs"])):
        before = [[f["bytes"], f["xxh3_128"]] for f in old.get("inputs", {}).get(role, [])]
        after = [[f["bytes"], f["xxh3_128"]] for f in new["inputs"].get(role, [])]
        if before != after:
            names = ", ".join(f["name"] for f in old.get("inputs", {}).get(role, [])) or "none"
            changed.append(f"--{role.replace('_', '-')} differs (it was: {names})")

    def flat(settings: dict) -> dict:
        values = {k: v for k, v in settings.items() if k != "read_options"}
        return {**values, **settings.get("read_options", {})}

    before, after = flat(old.get("settings", {})), flat(new["settings"])
    defaults = {**{option_dest(role, option): getattr(TableOptions(), option)
                   for role in TABLE_ROLES for option in READ_OPTIONS}, **OPTIONAL_SETTINGS}
    for name in list(after) + [k for k in before if k not in after]:
        default = defaults.get(name)
        if before.get(name, default) != after.get(name, default):
            flag = "--seed" if name == "seed" else "--" + name.replace("_", "-")
            changed.append(f"{flag} was {before.get(name, default)!r}, now {after.get(name, default)!r}")
    return "; ".join(changed) or "the settings differ"


@dataclass
class Prepared:
    train: pd.DataFrame
    val: pd.DataFrame
    key: pd.DataFrame
    formatter: CodeFormatter
    cal: Optional[pd.DataFrame] = None  # --share-calibration's rows, which choose nothing


def make_formatter(cfg: DataConfig, max_num_codes: int, tokens: str = "mixer") -> CodeFormatter:
    return CodeFormatter(kind=cfg.formatter, block_size=cfg.block_size,
                         max_num_codes=max_num_codes,
                         use_within_block_sep=cfg.use_within_block_sep,
                         allow_short=cfg.allow_codes_shorter_than_block_size, tokens=tokens)


def spell_as_flags_say(cfg: DataConfig, formatter: CodeFormatter) -> None:
    """--zero-padded-codes: digit codes are --block-size digits."""
    if not cfg.zero_padded_codes:
        return
    if formatter.use_within_block_sep:
        raise UserError("--zero-padded-codes pads digit codes to --block-size characters, but with "
                        "--use-within-block-sep --block-size counts parts: leave one of them out")
    if formatter.kind == "general":
        formatter.digit_width = formatter.block_size


def prepare(cfg: DataConfig, seed: int, log=print, base=None, tokens: str = "mixer") -> Prepared:
    """Read, check, key and split the data of a run, in memory. With `base` (a
    whole-model start, mixer.models.sources.Base) the codes are read in the starting
    model's layout, and the key is its codes followed by any new ones."""
    if base is not None:
        formatter = CodeFormatter.from_dict(base.formatter.to_dict())
        formatter.allow_short = cfg.allow_codes_shorter_than_block_size or formatter.allow_short
        if len(cfg.target_cols) > formatter.max_num_codes:
            raise UserError(f"--target-cols: {len(cfg.target_cols)} code columns, but the starting "
                            f"model writes at most {formatter.max_num_codes} codes per row")
    else:  # new heads: the decoder's tokens numbered as the model family numbers them
        formatter = make_formatter(cfg, len(cfg.target_cols), tokens)
    if base is None and formatter.kind == "hisco":
        formatter.block_size = 5
    elif base is None and formatter.kind == "occ1950":
        formatter.block_size = 3
    spell_as_flags_say(cfg, formatter)
    known = set(hisco_key()["code"]) if formatter.kind == "hisco" else None
    fixed = (read_key_file(cfg.key_file, formatter, known, cfg.table_options("key"), log)
             if cfg.key_file else None)
    why = width_reason(formatter, cfg.key_file if fixed is not None and fixed.attrs.get("width") else None)
    descriptions = (read_descriptions(cfg.code_descriptions, formatter, cfg.table_options("code_descriptions"))
                    if cfg.code_descriptions else None)
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
            guards.check_training_table(frame, path, TableOptions(role=role).what, cfg)  # an audit's rows
            checked = check_rows(frame, cfg, formatter, path, known, allowed, log, why)
            if checked.dropped:
                log(f"{path}: dropped {checked.dropped} row(s) with bad labels (--drop-bad-labels)")
            frames.append(checked.frame)
            seen.update(checked.codes)
            sources.append((f"{TableOptions(role=role).what} {path}", checked.codes))
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        if len(frame) == 0:
            raise UserError(f"{TableOptions(role=role).what}: no rows left after dropping bad labels")
        return frame

    cal = None
    if cfg.dataset:
        frame = load([cfg.dataset], "dataset")
        train, val, cal = (frame.iloc[rows].reset_index(drop=True)
                           for rows in split_rows(len(frame), cfg.share_val, seed, cfg.share_calibration))
        cal = cal if cfg.share_calibration else None
    else:
        train, val = load(cfg.train_data, "train_data"), load(cfg.val_data, "val_data")
        if cfg.share_calibration:  # the held-out files are the rows like those to be coded
            chosen = np.zeros(len(val), dtype=bool)
            chosen[calibration_rows(len(val), cfg.share_calibration, seed)] = True
            val, cal = val[~chosen].reset_index(drop=True), val[chosen].reset_index(drop=True)
    if cfg.extra_train:  # rows checked by hand: training only, after the split
        train = add_rows(train, read_extra_train(cfg, formatter, known, allowed, seen, log, why, sources))
    # with codes shorter than the block allowed: one number written two ways is refused
    check_one_spelling(sources)
    if fixed is not None:  # every code of --key, those absent from the data too
        seen = set(fixed["code"])
    if base is None:
        formatter.fit_alphabet(sorted(seen))
        key = build_key(formatter, seen, descriptions, order=None if fixed is None else list(fixed["code"]))
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
        named = [options.flag(o) for o in READ_OPTIONS
                 if re.search(rf"(?<![\w-]){re.escape(options.flag(o))}\b", str(exc))]
        if len(paths) < 2 or not named:
            raise
        raise UserError(f"{exc} ({' and '.join(named)} applies to each of the {len(paths)} "
                        f"{options.what} files: files that need other options are saved alike "
                        "first, e.g. all as UTF-8)") from None


def read_extra_train(cfg: DataConfig, formatter: CodeFormatter, known, allowed, seen: set, log,
                     why: str = "", sources: Optional[list] = None) -> pd.DataFrame:
    """The rows of --extra-train files that a person filled (a code in checked_1..), checked
    like any training row, with the run's text, language and context columns."""
    from mixer.data.labels.checking import checked_columns, filled_rows, with_run_names

    frames = []
    inputs = [cfg.input_col] + ([cfg.language_col] if cfg.language_col else []) + list(cfg.context_cols)
    for path in cfg.extra_train:
        table = read_role_file(cfg, "extra_train", path, cfg.extra_train, log)
        table = guards.extra_train_table(table, path, cfg)  # an audit: refused, or its checked rows
        table = with_run_names(table, inputs, path, log)
        columns = checked_columns(table, path)
        filled = filled_rows(table, columns)
        if not filled.any():
            raise UserError(f"--extra-train {path}: no row has a code in {', '.join(columns)}; fill "
                            "the right codes of the rows you checked")
        if len(columns) > len(cfg.target_cols):
            extra = filled_rows(table.loc[filled], columns[len(cfg.target_cols):])
            if extra.any():
                raise UserError(f"--extra-train {path}: a row has codes in {columns[len(cfg.target_cols)]} "
                                f"or later, but the run has {len(cfg.target_cols)} code slot(s)")
            columns = columns[:len(cfg.target_cols)]
        rows = table.loc[filled].reset_index(drop=True)
        rows.attrs = dict(table.attrs)
        if SHEET_ROWS in rows.attrs:
            rows.attrs[SHEET_ROWS] = list(np.asarray(table.attrs[SHEET_ROWS])[filled])
        checked = check_rows(rows, dataclasses.replace(cfg, target_cols=columns, empty_code_label=None,
                                                       report_cols=[]),
                             formatter, path, known, allowed, log, why, numbers=np.flatnonzero(filled) + 1)
        if checked.dropped:
            log(f"{path}: dropped {checked.dropped} checked row(s) with bad labels (--drop-bad-labels)")
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
            extra[column] = pd.Categorical.from_codes(np.full(len(extra), 0), [""]) if len(extra) else ""
        categories = train[column].cat.categories.union(extra[column].astype("category").cat.categories)
        train[column] = train[column].cat.set_categories(categories)
        extra[column] = extra[column].astype("category").cat.set_categories(categories)
    for column in [c for c in train.columns if c.startswith(REPORT_PREFIX) and c not in extra.columns]:
        extra[column] = ""  # checked rows carry no --report-cols
    extra = extra[[c for c in train.columns]]
    for column in (LANG,):
        if isinstance(train[column].dtype, pd.CategoricalDtype) or isinstance(extra[column].dtype, pd.CategoricalDtype):
            categories = pd.Index(train[column].astype("category").cat.categories).union(
                extra[column].astype("category").cat.categories)
            train[column] = train[column].astype("category").cat.set_categories(categories)
            extra[column] = extra[column].astype("category").cat.set_categories(categories)
    return pd.concat([train, extra], ignore_index=True)


HISCO_LAYOUT = ("hisco", "en_hisco_text")  # data/hisco_key.csv: its codes are HISCO's, zeros lost


def _code_layout(table: pd.DataFrame) -> tuple:
    """(code column, description column or None, whether the file is in the HISCO key layout)."""
    if set(HISCO_LAYOUT) <= set(table.columns):
        return "hisco", "en_hisco_text", True
    if "code" in table.columns:
        return "code", "description" if "description" in table.columns else None, False
    return None, None, False


def _codes_of(table: pd.DataFrame, column: str, formatter: CodeFormatter, hisco_layout: bool):
    """A file's codes as the run spells them; the HISCO layout's as HISCO spells them."""
    return code_column(table, column, CodeFormatter(kind="hisco") if hisco_layout else formatter)


def read_key_file(path: str, formatter: CodeFormatter, known: Optional[set],
                  options: TableOptions = TableOptions(role="key"), log=None) -> pd.DataFrame:
    """--key: code and description, in the file's order (a run's key.csv works, in its
    index order). Every code is normalised and checked as the data's codes are, once; a
    bad, empty or repeated code is an error naming it. In a general code system whose
    --key digit codes all have one width, digit codes are that many digits: the
    formatter's digit_width is set (frame.attrs['width'] says so)."""
    table = read_table(path, options, log=log)
    code_col, text_col, hisco_layout = _code_layout(table)
    if code_col is None:
        raise UserError(f"--key {path}: needs a column 'code' (and optionally 'description'); "
                        f"it has: {', '.join(map(str, table.columns[:12]))}")
    if "index" in table.columns and not hisco_layout:
        order = pd.to_numeric(table["index"], errors="coerce")
        if order.isna().any():
            raise UserError(f"--key {path}: column 'index' holds a value that is not a number")
        table = table.iloc[np.argsort(order.to_numpy(), kind="stable")]
    spelled = _codes_of(table, code_col, formatter, hisco_layout)
    spelling = CodeFormatter(kind="hisco") if hisco_layout else formatter
    if log is not None and (line := describe_restored(f"--key {path}", code_col, spelled, spelling,
                                                      width_reason(spelling))):
        log(line)
    descriptions = (as_text(table[text_col]).to_numpy(dtype=object) if text_col
                    else np.full(len(table), "", dtype=object))
    out, seen = [], set()
    for row, (raw, text) in enumerate(zip(spelled.text, descriptions)):
        if raw == "":
            if hisco_layout:  # the HISCO key layout starts with an empty row
                continue
            raise UserError(f"--key {path}: row {row + 1} has no code; every row names one code")
        code, reason = formatter.check(raw, known)
        if reason:
            raise UserError(f"--key {path}: row {row + 1} code {raw!r}: {reason}")
        if code in seen:
            raise UserError(f"--key {path}: code {code!r} appears twice; list each code once")
        seen.add(code)
        out.append((code, "" if text is None else str(text)))
    if not out:
        raise UserError(f"--key {path}: no codes; list one code per row in a column 'code'")
    key = pd.DataFrame(out, columns=["code", "description"])
    if formatter.kind == "general" and formatter.zero_pad is None and not formatter.use_within_block_sep:
        formatter.digit_width = key_digit_width(key["code"])
        key.attrs["width"] = formatter.digit_width
    return key


@dataclass
class Descriptions:
    """code -> description, from a file; `width`: the width the file's digit codes were
    restored to (the HISCO key layout: 5), so that a code written without its zeros
    finds its description too."""

    texts: dict
    width: Optional[int] = None

    def lookup(self, codes) -> list:
        """Each code's description, or None."""
        codes = pd.Series(list(codes), dtype=object).astype(str)
        restored, _ = restore_digits(codes, self.width)
        return [self.texts.get(c, self.texts.get(r)) for c, r in zip(codes, restored)]

    def over(self, other: "Descriptions") -> "Descriptions":
        """These descriptions, and the other's for codes these lack."""
        return Descriptions({**other.texts, **self.texts}, self.width)


def read_descriptions(path: str, formatter: CodeFormatter,
                      options: TableOptions = TableOptions(role="code_descriptions")) -> Descriptions:
    """--code-descriptions: a table with columns code and description, or the HISCO key
    layout (data/hisco_key.csv), in any format the reader reads; codes spelled as the
    run spells them."""
    table = read_table(path, options)
    code_col, text_col, hisco_layout = _code_layout(table)
    if code_col is None or text_col is None:
        raise UserError(f"--code-descriptions {path}: needs columns 'code' and 'description' (or the "
                        f"HISCO key's 'hisco' and 'en_hisco_text'); it has: "
                        f"{', '.join(map(str, table.columns[:12]))}")
    spelled = _codes_of(table, code_col, formatter, hisco_layout)
    texts = as_text(table[text_col])
    listed = (spelled.text != "").to_numpy()
    return Descriptions(dict(zip(spelled.text[listed], texts[listed])),
                        5 if hisco_layout else formatter.zero_pad)


def check_empty_code_label(cfg: DataConfig, formatter: CodeFormatter, known, allowed) -> None:
    label = cfg.empty_code_label
    if label.strip() != label or label == "":
        raise UserError(f"--empty-code-label {label!r}: give a code without spaces, e.g. -1")
    code, reason = formatter.check(label, known)
    if reason or code != label:
        raise UserError(f"--empty-code-label {label!r}: {reason or f'is written {code!r} in this code system'}; "
                        "give a code the code system accepts")
    if allowed is not None and label not in allowed:
        raise UserError(f"--empty-code-label {label!r} is not in --key {cfg.key_file}; add it there")


def extend_key(base, formatter: CodeFormatter, seen: set, descriptions: Optional[Descriptions]) -> pd.DataFrame:
    """The starting model's codes (its flat head's order), then the data's new codes."""
    symbols = set(formatter.alphabet) | set(formatter.special_codes)
    strange = sorted(c for c in seen if not set(formatter.parts(c)) <= symbols)
    if strange:
        raise UserError(f"code {strange[0]!r} ({len(strange)} code(s) in all) has characters the "
                        "starting model's decoder cannot write; pass --only-encoder to start new "
                        "heads for this code system")
    known = set(base.codes)
    codes = list(base.codes) + sorted(c for c in seen if c not in known)
    given = descriptions.lookup(codes) if descriptions is not None else [None] * len(codes)
    key = pd.DataFrame({"code": codes, "description": [text if text is not None else
                                                       base.descriptions.get(c, "")
                                                       for c, text in zip(codes, given)]})
    key.insert(1, "index", np.arange(len(key)))
    return key


def write_prepared(prepared: Prepared, run_dir: str, stamp: dict) -> None:
    """Write data_train/data_val/key.csv/prepared.json; each file atomically."""
    from mixer.core.io import atomic_write

    os.makedirs(run_dir, exist_ok=True)
    # row groups of a million rows: the token cache splits its work over ranks by them
    atomic_write(os.path.join(run_dir, "data_train.parquet"),
                 lambda p: prepared.train.to_parquet(p, index=False, row_group_size=ROW_GROUP))
    atomic_write(os.path.join(run_dir, "data_val.parquet"),
                 lambda p: prepared.val.to_parquet(p, index=False, row_group_size=ROW_GROUP))
    if prepared.cal is not None:
        atomic_write(os.path.join(run_dir, CALIBRATION_FILE),
                     lambda p: prepared.cal.to_parquet(p, index=False, row_group_size=ROW_GROUP))
    atomic_write(os.path.join(run_dir, "key.csv"), lambda p: prepared.key.to_csv(p, index=False))
    rows = {"train": len(prepared.train), "val": len(prepared.val)}
    if prepared.cal is not None:
        rows["cal"] = len(prepared.cal)
    meta = dict(stamp, formatter=prepared.formatter.to_dict(), rows=rows)
    atomic_write(os.path.join(run_dir, "prepared.json"),
                 lambda p: _write_json(p, meta))


def read_key(run_dir: str) -> pd.DataFrame:
    return pd.read_csv(os.path.join(run_dir, "key.csv"), dtype={"code": str, "description": str},
                       keep_default_na=False)


def load_prepared(run_dir: str, with_text: bool = True) -> Prepared:
    """The prepared splits; without their text (training reads tokens from the
    cache), a 10M-row split loads in seconds and little memory."""
    with open(os.path.join(run_dir, "prepared.json")) as handle:
        meta = json.load(handle)
    import pyarrow.parquet as pq

    present = set(pq.read_schema(os.path.join(run_dir, "data_train.parquet")).names)
    columns = None if with_text else [c for c in code_columns(meta["formatter"]["max_num_codes"])
                                      if c in present] + [LANG, "row"]
    cal = os.path.join(run_dir, CALIBRATION_FILE)
    return Prepared(
        train=pd.read_parquet(os.path.join(run_dir, "data_train.parquet"), columns=columns),
        val=pd.read_parquet(os.path.join(run_dir, "data_val.parquet"), columns=columns),
        key=read_key(run_dir),
        formatter=CodeFormatter.from_dict(meta["formatter"]),
        cal=pd.read_parquet(cal, columns=columns) if "cal" in meta.get("rows", {}) else None,
    )


def read_split(run_dir: str, split: str, columns: list) -> pd.DataFrame:
    """Some columns of one prepared split ("train", "val", "cal"), e.g. the texts of the
    rows a run's final evaluation scored."""
    return pd.read_parquet(os.path.join(run_dir, f"data_{split}.parquet"), columns=columns)


def iter_split(run_dir: str, split: str, columns, batch_size: int = 1 << 18):
    """(the split's column names, an iterator of DataFrames of `columns(names)` in batches of
    rows): one prepared split read in pieces, for a run of any size."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(os.path.join(run_dir, f"data_{split}.parquet"))
    names = list(parquet.schema_arrow.names)
    wanted = list(columns(names)) if callable(columns) else list(columns)
    return names, (batch.to_pandas() for batch in parquet.iter_batches(columns=wanted, batch_size=batch_size))


def prepared_stamp(run_dir: str) -> Optional[dict]:
    path = os.path.join(run_dir, "prepared.json")
    if not all(os.path.exists(os.path.join(run_dir, f)) for f in PREPARED_FILES):
        return None
    with open(path) as handle:
        stamp = json.load(handle)
    if "cal" in stamp.get("rows", {}) and not os.path.exists(os.path.join(run_dir, CALIBRATION_FILE)):
        return None  # prepared again, like a run whose split files are missing
    return stamp


def prepare_run_data(cfg: DataConfig, seed: int, run_dir: str, log=print,
                     check: Optional[Callable[[Prepared], None]] = None, base=None,
                     tokens: str = "mixer") -> Prepared:
    """Reuse the run directory's data when it was prepared from the same input
    and settings, else prepare it and, once `check` (if any) accepts it, write it:
    bad input leaves the run directory as it was. Reused data comes without its
    text (training reads token ids; see load_prepared)."""
    stamp = run_stamp(cfg, seed, base, tokens)
    existing = prepared_stamp(run_dir)
    if existing is not None:
        digest = existing.get("digest")  # the typed stamp (files hashed again) only when the first differs
        if digest != stamp["digest"] and digest != run_stamp(cfg, seed, base, tokens, typed=True)["digest"] \
                and not same_as_legacy(existing, cfg, seed):
            raise UserError(f"{run_dir} holds data prepared from other input or settings "
                            f"({describe_difference(existing, stamp)}); use a new --save-path, "
                            "or the original files and flags to resume")
        log(f"reusing prepared data in {run_dir}")
        prepared = load_prepared(run_dir, with_text=False)  # 10M texts would take a GB
        if check is not None:
            check(prepared)
        return prepared
    start = time.perf_counter()
    prepared = prepare(cfg, seed, log, base, tokens)
    if check is not None:
        check(prepared)
    write_prepared(prepared, run_dir, stamp)
    rows = (f"{len(prepared.train)} training and {len(prepared.val)} validation" if prepared.cal is None else
            f"{len(prepared.train)} training, {len(prepared.val)} validation and {len(prepared.cal)} calibration")
    log(f"prepared {rows} rows, {len(prepared.key)} codes, in {run_dir} ({time.perf_counter() - start:.1f} s)")
    return prepared


def _write_json(path: str, values: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=1)

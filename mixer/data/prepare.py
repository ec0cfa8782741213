"""Reading tables, checking labels, building the key, splitting, writing prepared data.

Everything here is vectorised over columns: a formatter looks at each distinct
code once, and rows are handled by numpy/pandas. No torch import, so
`finetune.py --prepare-only` runs in seconds on millions of rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pandas as pd

from mixer.core.config import DataConfig
from mixer.core.errors import UserError
from mixer.data.formatter import CodeFormatter, hisco_key, read_descriptions
from mixer.data.tables import (
    TableOptions, as_text, check_input_path, code_cells, read_table, require_columns,
)

TEXT, LANG = "text", "lang"  # column names of prepared data
PREPARED_FILES = ("data_train.parquet", "data_val.parquet", "key.csv", "prepared.json")
ROW_GROUP = 1_000_000


def code_columns(max_num_codes: int) -> list[str]:
    return [f"code_{i + 1}" for i in range(max_num_codes)]


# ------------------------------------------------------------------ context
CONTEXT_SEP = " [SEP] "
DESC_CHARS = "desc_chars"  # prepared column: characters of `text` that are the description


def model_text(descriptions: pd.Series, frame: Optional[pd.DataFrame], context_cols) -> pd.Series:
    """The text a model reads for each row, built here for training, predict.py and the
    Python API alike: the description, then each context column that has a value, as
    'name: value', e.g. 'servant [SEP] relation: wife [SEP] industry: coal'. With
    context the description is stripped first (training always strips it), so
    'farmer ' and 'farmer' read the same; an empty or missing value is left out
    (never written as 'nan'); the column names and their order come from the run.
    Without context the description is passed on as it is (the input recipe decides
    about surrounding spaces: OccCANINE's models keep them)."""
    return context_within(descriptions, frame, context_cols)[0]


def context_within(descriptions: pd.Series, frame: Optional[pd.DataFrame], context_cols,
                   room=None) -> tuple:
    """(model_text's text, rows whose context was cut). `room`: per row, the characters
    the description and its context may take (a model with a fixed input length, e.g.
    OccCANINE's 128); the context is cut from its end to fit, the description never."""
    if not context_cols:
        return descriptions, 0
    text = descriptions.reset_index(drop=True).astype(str).str.strip()
    context = pd.Series("", index=text.index, dtype=object)
    for column in context_cols:
        values = as_text(frame[column]).str.strip().reset_index(drop=True)
        context = context + (CONTEXT_SEP + column + ": " + values).where(values != "", "")
    cut = 0
    if room is not None:
        space = np.maximum(np.asarray(room) - text.str.len().to_numpy(), 0)
        over = np.flatnonzero(context.str.len().to_numpy() > space)
        if len(over):
            context = context.copy()
            context.iloc[over] = [context.iloc[i][:space[i]] for i in over]
            cut = len(over)
    return text + context, cut


def occcanine_room(langs, n_rows: int) -> np.ndarray:
    """Characters left for description and context in OccCANINE's input: 128 ids are
    [CLS] lang [SEP] text [SEP], the language written out ('unk' when unknown)."""
    from mixer.data.tokens import OCCCANINE_MAX_LEN as MAX_INPUT_LEN

    langs = pd.Series(np.broadcast_to(np.asarray(langs, dtype=object), (n_rows,))).astype(str)
    lengths = langs.where(langs != "", "unk").str.len().to_numpy()
    return MAX_INPUT_LEN - 2 - len("[SEP]") - lengths


# ------------------------------------------------------------------ labels
@dataclass
class Checked:
    """Rows of one table after label checks."""

    frame: pd.DataFrame  # text, lang, code_1..code_K (normalised, '' = none), row
    dropped: int
    codes: set  # the distinct codes of the kept rows


def check_rows(frame: pd.DataFrame, cfg: DataConfig, formatter: CodeFormatter, path: str,
               known: Optional[set] = None, allowed: Optional[set] = None, log=None) -> Checked:
    """Validate text and codes of every row, vectorised; bad rows are an error
    naming them, or dropped with --drop-bad-labels. `allowed`: the codes of --key (a
    code outside it is bad). With --empty-code-label a row without any code gets that
    code in its first slot."""
    flags = {cfg.input_col: "--input-col"}
    flags.update({c: "--target-cols" for c in cfg.target_cols})
    flags.update({c: "--context-cols" for c in cfg.context_cols})
    if cfg.language_col:
        flags[cfg.language_col] = "--language-col"
    require_columns(frame, list(flags), path, flags)

    text = frame[cfg.input_col].astype("str").str.strip()
    empty_text = text.eq("").to_numpy()
    desc_chars = text.str.len().to_numpy(dtype=np.int32)
    n_rows, n_cols = len(frame), len(cfg.target_cols)
    room = None
    if cfg.context_cols and formatter.tokens == "occcanine":  # OccCANINE's fixed 128 characters
        langs = (frame[cfg.language_col].astype("str").str.strip().to_numpy(dtype=object)
                 if cfg.language_col else cfg.language or "unk")
        room = occcanine_room(langs, n_rows)
    text, cut = context_within(text, frame, cfg.context_cols, room)
    if cut and log is not None:
        log(f"{path}: the context of {cut} row(s) was cut from its end to fit OccCANINE's 128 characters")
    # all code cells as one column of strings (column after column), stripped and
    # factorised: the formatter then looks at each distinct value once
    columns = [code_cells(frame, c) for c in cfg.target_cols]
    cells = pd.concat([cells for cells, _ in columns], ignore_index=True)
    if cfg.empty_code_label is not None and n_cols:
        no_code = np.ones(n_rows, dtype=bool)
        for column in range(n_cols):
            no_code &= cells.iloc[column * n_rows:(column + 1) * n_rows].eq("").to_numpy()
        if no_code.any():
            cells = cells.copy()
            cells.iloc[np.flatnonzero(no_code)] = cfg.empty_code_label  # the first code column
    not_whole = np.stack([mask for _, mask in columns], axis=1)  # (rows, cols)
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
    # distinct raw values may normalise to one code ('1110' and '01110' in HISCO)
    code_ids, code_names = pd.factorize(normalised, sort=False)
    cell_code = code_ids[ids]  # (rows, cols) index into code_names
    code_names = np.asarray(code_names, dtype=object)
    codes = code_names[cell_code]
    cell_reason = reasons[ids]
    if not_whole.any():  # fractional values in a column of numbers are not codes
        cell_reason = np.where(not_whole, "not a whole number (the column holds numbers)", cell_reason)
    raw = np.asarray(uniques, dtype=object)[ids]

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
        raise UserError(_describe_bad_rows(path, problems, bad_cells, cell_reason, raw, cfg))

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
    for i, name in enumerate(code_columns(n_cols)):
        out[name] = pd.Categorical.from_codes(cell_code[:, i], categories)
    out["row"] = np.arange(1, n_rows + 1)
    keep = ~bad
    present = np.bincount(cell_code[keep].ravel(), minlength=len(categories)) > 0
    kept_codes = {c for c, used in zip(categories, present) if used and c != ""}
    frame = out[keep].reset_index(drop=True) if bad.any() else out
    return Checked(frame=frame, dropped=int(bad.sum()), codes=kept_codes)


def _describe_bad_rows(path, problems, bad_cells, cell_reason, raw, cfg) -> str:
    parts = []
    for mask, what in problems:
        rows = np.flatnonzero(mask)
        if not len(rows):
            continue
        if what == "bad codes":
            examples = []
            for row in rows[:3]:
                col = int(np.flatnonzero(bad_cells[row])[0])
                examples.append(f"row {row + 1} {cfg.target_cols[col]}={str(raw[row, col])!r}: "
                                f"{cell_reason[row, col]}")
            parts.append(f"{len(rows)} row(s) with bad codes ({'; '.join(examples)})")
        else:
            shown = ", ".join(str(r + 1) for r in rows[:5])
            parts.append(f"{len(rows)} row(s) with {what} (rows {shown}{', ...' if len(rows) > 5 else ''})")
    return (f"{path}: " + "; ".join(parts) +
            ". Fix these rows or pass --drop-bad-labels to skip them (rows count from 1 after the header)")


# ------------------------------------------------------------------ key
def build_key(formatter: CodeFormatter, codes, descriptions: Optional[dict] = None,
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
    if descriptions:
        key["description"] = key["code"].map(descriptions).fillna(key["description"])
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


def split_rows(n_rows: int, share_val: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split: (train indices, validation indices), both sorted."""
    n_val = int(round(n_rows * share_val))
    if n_val < 1 or n_val >= n_rows:
        raise UserError(f"--share-val {share_val} of {n_rows} rows leaves "
                        f"{n_val} validation and {n_rows - n_val} training rows; "
                        "both need at least one: change --share-val or add rows")
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


# ------------------------------------------------------------------ prepared data
FINGERPRINT_SETTINGS = ("input_col", "context_cols", "target_cols", "language", "language_col", "formatter",
                        "block_size", "use_within_block_sep", "drop_bad_labels",
                        "allow_codes_shorter_than_block_size", "share_val")
# settings that join the identity only when set (how the files are read, optional
# labels), so runs prepared before they existed keep their fingerprint
OPTIONAL_SETTINGS = {"encoding": "utf-8", "sep": None, "sheet": None, "empty_code_label": None}
HASH_BLOCK = 1 << 23


def table_options(cfg: DataConfig) -> TableOptions:
    return TableOptions(encoding=cfg.encoding, sep=cfg.sep, sheet=cfg.sheet)


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


def file_identity(path: str, what: str) -> dict:
    """What makes a file the same input: its bytes, not its path or time stamp, so a
    copy in a per-job directory is the same data and any edit is another."""
    check_input_path(path, what)
    return {"name": os.path.basename(path), "bytes": os.path.getsize(path),
            "xxh3_128": content_hash(path)}


def fingerprint(cfg: DataConfig, seed: int) -> dict:
    """The identity of a run's prepared data: each role's files by content (training and
    validation apart, in order), the code descriptions, and the data settings."""
    if cfg.dataset:
        inputs = {"dataset": [file_identity(cfg.dataset, "--dataset")]}
    else:
        inputs = {"train_data": [file_identity(p, "--train-data") for p in cfg.train_data],
                  "val_data": [file_identity(p, "--val-data") for p in cfg.val_data]}
    if cfg.code_descriptions:
        inputs["code_descriptions"] = [file_identity(cfg.code_descriptions, "--code-descriptions")]
    if cfg.key_file:
        inputs["key"] = [file_identity(cfg.key_file, "--key")]
    if cfg.extra_train:
        inputs["extra_train"] = [file_identity(p, "--extra-train") for p in cfg.extra_train]
    settings = {k: getattr(cfg, k) for k in FINGERPRINT_SETTINGS}
    settings.update({k: getattr(cfg, k) for k, default in OPTIONAL_SETTINGS.items()
                     if getattr(cfg, k) != default})
    settings["seed"] = seed
    contents = {role: [[f["bytes"], f["xxh3_128"]] for f in files] for role, files in inputs.items()}
    digest = hashlib.sha256(json.dumps([contents, settings], sort_keys=True).encode()).hexdigest()
    return {"identity": "content", "inputs": inputs, "settings": settings, "digest": digest[:16]}


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
    for name in list(new["settings"]) + [k for k in old.get("settings", {}) if k not in new["settings"]]:
        value = new["settings"].get(name, OPTIONAL_SETTINGS.get(name))
        if old.get("settings", {}).get(name, OPTIONAL_SETTINGS.get(name)) != value:
            flag = "--seed" if name == "seed" else "--" + name.replace("_", "-")
            changed.append(f"{flag} was {old.get('settings', {}).get(name, OPTIONAL_SETTINGS.get(name))!r}, "
                           f"now {value!r}")
    return "; ".join(changed) or "the settings differ"


@dataclass
class Prepared:
    train: pd.DataFrame
    val: pd.DataFrame
    key: pd.DataFrame
    formatter: CodeFormatter


def make_formatter(cfg: DataConfig, max_num_codes: int, tokens: str = "mixer") -> CodeFormatter:
    return CodeFormatter(kind=cfg.formatter, block_size=cfg.block_size,
                         max_num_codes=max_num_codes,
                         use_within_block_sep=cfg.use_within_block_sep,
                         allow_short=cfg.allow_codes_shorter_than_block_size, tokens=tokens)


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
    known = set(hisco_key()["code"]) if formatter.kind == "hisco" else None
    descriptions = read_descriptions(cfg.code_descriptions) if cfg.code_descriptions else None
    fixed = read_key_file(cfg.key_file, formatter, known) if cfg.key_file else None
    if fixed is not None:
        file_descriptions = {c: d for c, d in zip(fixed["code"], fixed["description"]) if d}
        descriptions = {**file_descriptions, **(descriptions or {})}
    allowed = set(fixed["code"]) if fixed is not None else None
    if cfg.empty_code_label is not None:
        check_empty_code_label(cfg, formatter, known, allowed)

    seen = set()

    def load(paths, what):
        frames = []
        for path in paths:
            frame = read_table(path, what, options=table_options(cfg), log=log)
            checked = check_rows(frame, cfg, formatter, path, known, allowed, log)
            if checked.dropped:
                log(f"{path}: dropped {checked.dropped} row(s) with bad labels (--drop-bad-labels)")
            frames.append(checked.frame)
            seen.update(checked.codes)
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        if len(frame) == 0:
            raise UserError(f"{what}: no rows left after dropping bad labels")
        return frame

    if cfg.dataset:
        frame = load([cfg.dataset], "--dataset")
        train_idx, val_idx = split_rows(len(frame), cfg.share_val, seed)
        train, val = frame.iloc[train_idx].reset_index(drop=True), frame.iloc[val_idx].reset_index(drop=True)
    else:
        train, val = load(cfg.train_data, "--train-data"), load(cfg.val_data, "--val-data")
    if cfg.extra_train:  # rows checked by hand: training only, after the split
        train = add_rows(train, read_extra_train(cfg, formatter, known, allowed, seen, log))
    if fixed is not None:  # every code of --key, those absent from the data too
        seen = set(fixed["code"])
    if base is None:
        formatter.fit_alphabet(sorted(seen))
        key = build_key(formatter, seen, descriptions, order=None if fixed is None else list(fixed["code"]))
    else:
        key = extend_key(base, formatter, seen, descriptions)
    return Prepared(train=train, val=val, key=key, formatter=formatter)


def read_extra_train(cfg: DataConfig, formatter: CodeFormatter, known, allowed, seen: set, log) -> pd.DataFrame:
    """The rows of --extra-train files that a person filled (a code in checked_1..), checked
    like any training row, with the run's text, language and context columns."""
    import dataclasses

    from mixer.data.audits import training_table
    from mixer.data.checking import checked_columns, filled_rows

    frames = []
    for path in cfg.extra_train:
        table = training_table(read_table(path, "--extra-train"), path, cfg.train_on_audit)  # audits
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
        rows.attrs = table.attrs
        checked = check_rows(rows, dataclasses.replace(cfg, target_cols=columns, empty_code_label=None),
                             formatter, path, known, allowed, log)
        if checked.dropped:
            log(f"{path}: dropped {checked.dropped} checked row(s) with bad labels (--drop-bad-labels)")
        seen.update(checked.codes)
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
    extra = extra[[c for c in train.columns]]
    for column in (LANG,):
        if isinstance(train[column].dtype, pd.CategoricalDtype) or isinstance(extra[column].dtype, pd.CategoricalDtype):
            categories = pd.Index(train[column].astype("category").cat.categories).union(
                extra[column].astype("category").cat.categories)
            train[column] = train[column].astype("category").cat.set_categories(categories)
            extra[column] = extra[column].astype("category").cat.set_categories(categories)
    return pd.concat([train, extra], ignore_index=True)


def read_key_file(path: str, formatter: CodeFormatter, known: Optional[set]) -> pd.DataFrame:
    """--key: code and description, in the file's order (a run's key.csv works, in its
    index order). Every code is checked as the data's codes are, once; a bad, empty or
    repeated code is an error naming it."""
    table = read_table(path, "--key")
    hisco_layout = {"hisco", "en_hisco_text"} <= set(table.columns)  # data/hisco_key.csv
    code_col = "hisco" if hisco_layout else ("code" if "code" in table.columns else None)
    if code_col is None:
        raise UserError(f"--key {path}: needs a column 'code' (and optionally 'description'); "
                        f"it has: {', '.join(map(str, table.columns[:12]))}")
    if "index" in table.columns and not hisco_layout:
        order = pd.to_numeric(table["index"], errors="coerce")
        if order.isna().any():
            raise UserError(f"--key {path}: column 'index' holds a value that is not a number")
        table = table.iloc[np.argsort(order.to_numpy(), kind="stable")]
    text_col = next((c for c in ("description", "en_hisco_text") if c in table.columns), None)
    codes, _ = code_cells(table, code_col)
    if hisco_layout:  # HISCO codes, 5 characters, in a file that lost their leading zeros
        codes = codes.where(~codes.str.isdigit(), codes.str.zfill(5))
    descriptions = (as_text(table[text_col]).to_numpy(dtype=object) if text_col
                    else np.full(len(table), "", dtype=object))
    out, seen = [], set()
    for row, (raw, text) in enumerate(zip(codes, descriptions)):
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
    return pd.DataFrame(out, columns=["code", "description"])


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


def extend_key(base, formatter: CodeFormatter, seen: set, descriptions: Optional[dict]) -> pd.DataFrame:
    """The starting model's codes (its flat head's order), then the data's new codes."""
    symbols = set(formatter.alphabet) | set(formatter.special_codes)
    strange = sorted(c for c in seen if not set(formatter.parts(c)) <= symbols)
    if strange:
        raise UserError(f"code {strange[0]!r} ({len(strange)} code(s) in all) has characters the "
                        "starting model's decoder cannot write; pass --only-encoder to start new "
                        "heads for this code system")
    known = set(base.codes)
    codes = list(base.codes) + sorted(c for c in seen if c not in known)
    merged = dict(base.descriptions)
    merged.update(descriptions or {})
    key = pd.DataFrame({"code": codes, "description": [merged.get(c, "") for c in codes]})
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
    atomic_write(os.path.join(run_dir, "key.csv"), lambda p: prepared.key.to_csv(p, index=False))
    meta = dict(stamp, formatter=prepared.formatter.to_dict(),
                rows={"train": len(prepared.train), "val": len(prepared.val)})
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
    return Prepared(
        train=pd.read_parquet(os.path.join(run_dir, "data_train.parquet"), columns=columns),
        val=pd.read_parquet(os.path.join(run_dir, "data_val.parquet"), columns=columns),
        key=read_key(run_dir),
        formatter=CodeFormatter.from_dict(meta["formatter"]),
    )


def prepared_stamp(run_dir: str) -> Optional[dict]:
    path = os.path.join(run_dir, "prepared.json")
    if not all(os.path.exists(os.path.join(run_dir, f)) for f in PREPARED_FILES):
        return None
    with open(path) as handle:
        return json.load(handle)


def prepare_run_data(cfg: DataConfig, seed: int, run_dir: str, log=print,
                     check: Optional[Callable[[Prepared], None]] = None, base=None,
                     tokens: str = "mixer") -> Prepared:
    """Reuse the run directory's data when it was prepared from the same input
    and settings, else prepare it and, once `check` (if any) accepts it, write it:
    bad input leaves the run directory as it was. Reused data comes without its
    text (training reads token ids; see load_prepared)."""
    stamp = fingerprint(cfg, seed)
    if tokens != "mixer":
        stamp["settings"]["tokens"] = tokens
        stamp["digest"] = hashlib.sha256(json.dumps([stamp["digest"], tokens]).encode()).hexdigest()[:16]
    if base is not None:  # the starting model fixes the layout and the key: part of the identity
        stamp["settings"]["start"] = base.describe()
        stamp["digest"] = hashlib.sha256(json.dumps([stamp["digest"], stamp["settings"]["start"]],
                                                    sort_keys=True).encode()).hexdigest()[:16]
    existing = prepared_stamp(run_dir)
    if existing is not None:
        if existing.get("digest") != stamp["digest"] and not same_as_legacy(existing, cfg, seed):
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
    log(f"prepared {len(prepared.train)} training and {len(prepared.val)} validation rows, "
        f"{len(prepared.key)} codes, in {run_dir} ({time.perf_counter() - start:.1f} s)")
    return prepared


def _write_json(path: str, values: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=1)

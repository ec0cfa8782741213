"""Strings already coded by hand win: `predict.py --lookup FILE` and `Model.predict(...,
lookup=...)` (docs/coding.md, "Lookup tables").

A lookup is a table of inputs and their codes, read through the one reader with the
options of its role (--lookup-encoding, ...). Three layouts are recognised:

- a filled `--to-check` file: the rows with codes in checked_1..;
- a filled audit (predict.py --audit): the rows with true_code_1.., or with the
  predicted codes where `correct` says yes.
- a coding dictionary: any table, its description column named by --lookup-input-col
  (default: the prediction's input column) and its code columns by --lookup-code-cols;
  a table with the model's own columns (its input column and its first target column, as
  its training file had them) is one without --lookup-code-cols, its codes read from the
  model's target columns it has and the further columns of their families (hisco_2.. beside
  a model trained on hisco_1 alone: an entry of two codes needs two code slots, --top-k 2).

A check list's description column is the prediction's input column (--input-col, else
the model's) when the file has it, else the first column the check list wrote (a list
written with --input-col title is read back without --lookup-input-col).

An entry is keyed by what the model reads (mixer.prediction.api.Model.model_inputs: the
description, language and context as the run's recipe spells them and the tokenizer
normalises them, mixer.data.inputs.tokens.reading_keys). So a row of the input takes the entry's
codes exactly when the model would read the two alike ('Civil Engineer' takes the entry
'civil engineer' of a model whose tokenizer lower-cases; the language too, so 'EN' is
'en' to it, except a language with a flat threshold of its own). A table without the language
column holds entries for every language. One input listed with two code sets is refused,
naming both lines. A code the model's key lacks (a typo, or a code never seen in
training) is taken as written and said in one line naming the lines; an entry with more
codes than the output has code slots is refused before anything is predicted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.core.naming import FLAGS, Names
from mixer.data.tables.job_columns import is_blank

SEP = " & "  # a code set as one string, codes sorted (scores.parquet's true_codes)
LAYOUTS = ("to-check", "audit", "dictionary")


@dataclass
class Lookup:
    """Entries read from a lookup table: each a description (with its language, or none
    for every language, and its context) and the set of its codes, spelled as the model
    spells them."""

    path: str
    layout: str
    texts: pd.Series
    langs: Optional[pd.Series]  # None: the table has no language column (every language)
    context: Optional[pd.DataFrame]
    codes: list  # per entry, its codes (a tuple, sorted)
    lines: np.ndarray  # per entry, its line in the file (2: the first under the header)
    identity: dict  # the file's bytes and hash (mixer.data.prepared.fingerprint.file_identity)
    outside_key: int = 0  # entries with a code the model's key lacks (said when read)
    columns: str = ""  # where a dictionary's descriptions and codes were read, in words
    names: Names = FLAGS  # how its messages name the options: its reader's (flags or keywords)
    _keys: dict = None  # {language or None: {model input: entry}}

    @property
    def fingerprint(self) -> str:
        return "l-" + self.identity["xxh3_128"][:16]

    def record(self) -> dict:
        """What a predictions file's provenance says of the lookup."""
        return {
            "file": self.identity["name"],
            "bytes": self.identity["bytes"],
            "xxh3_128": self.identity["xxh3_128"],
            "layout": self.layout,
            "entries": len(self.codes),
            "entries_outside_key": self.outside_key,
        }

    def check(self, model, slots: int, langs=None, flag: Optional[str] = None) -> None:
        """Before anything is predicted: every entry fits the output's `slots` code slots,
        and no two entries the model reads alike give two code sets (for the table's own
        languages, or `langs` when it has no language column)."""
        widest = max((len(c) for c in self.codes), default=0)
        if widest > slots:
            entry = next(e for e, c in enumerate(self.codes) if len(c) == widest)
            raise UserError(
                f"{self.names('lookup')} {self.path}: line {self.lines[entry]} has {widest} codes "
                f"({SEP.join(self.codes[entry])}), the output {slots} code slot(s); pass "
                f"{flag or self.names.before('top_k')}{widest}"
            )
        if self.langs is not None:
            self.match(model, np.zeros(0, dtype=object), np.zeros(0, dtype=object))
        elif langs is not None:
            langs = np.asarray(sorted(set(np.asarray(langs, dtype=object).tolist())), dtype=object)
            self.match(model, np.full(len(langs), "", dtype=object), langs)

    def match(self, model, inputs: np.ndarray, langs: np.ndarray) -> np.ndarray:
        """Per row (its model input, mixer.prediction.api.Model.model_inputs, and language),
        the index of its entry, or -1."""
        keys = self._keys if self._keys is not None else {}
        self._keys = keys
        inputs = np.asarray(inputs, dtype=object)
        wanted = (
            [None]
            if self.langs is not None
            else sorted(set(np.asarray(langs, dtype=object).tolist()))
        )
        for lang in wanted:
            if lang not in keys:
                keys[lang] = self._entries(model, lang)
        if self.langs is not None:
            table = keys[None]
            return np.asarray([table.get(i, -1) for i in inputs], dtype=np.int64)
        langs = np.asarray(langs, dtype=object)
        return np.asarray([keys[lang].get(i, -1) for i, lang in zip(inputs, langs)], dtype=np.int64)

    def _entries(self, model, lang) -> dict:
        """{model input: entry} for the entries read in language `lang` (None: their own);
        the same input twice with two code sets is refused, naming the lines."""
        langs = self.langs if lang is None else lang
        inputs = model.model_inputs(self.texts, langs, self.context)
        found: dict = {}
        for entry, key in enumerate(inputs):
            if is_blank(self.texts.iloc[entry]):
                continue
            first = found.setdefault(key, entry)
            if first != entry and self.codes[first] != self.codes[entry]:
                a, b = self.texts.iloc[first], self.texts.iloc[entry]
                what = (
                    f"{a!r}" if a == b else f"{a!r} and {b!r}, which the model reads as one input,"
                )
                raise UserError(
                    f"{self.names('lookup')} {self.path}: line {self.lines[first]} and line {self.lines[entry]} give "
                    f"{what} two code sets ({SEP.join(self.codes[first]) or 'none'} and "
                    f"{SEP.join(self.codes[entry]) or 'none'}); keep one"
                )
        return found


def read_for(
    model,
    path: str,
    input_col: Optional[str] = None,
    code_cols=None,
    language_col: Optional[str] = None,
    options: Optional[TableOptions] = None,
    log=None,
    default_input_col: Optional[str] = None,
    note=None,
    names: Names = FLAGS,
) -> Lookup:
    """A lookup read for `model` (mixer.prediction.api.Model): its input, language and
    context columns, its key and its target columns. input_col: --lookup-input-col;
    default_input_col: the prediction's input column (default: the model's). log: how the
    file was read; note: the line on codes the key lacks (default: log); names: how its
    messages name the options."""
    from mixer.data.tables.job_columns import job_columns

    predictor = model.predictor
    columns = job_columns(predictor.config, default_input_col, None, language_col)  # the job's rule
    return read_lookup(
        path,
        options or TableOptions(role="lookup"),
        predictor.formatter,
        columns.input_col,
        columns.language_col,
        columns.context_cols,
        input_col,
        code_cols,
        log=log,
        key=predictor.codes,
        target_cols=model_target_cols(predictor),
        note=note,
        names=names,
    )


def model_target_cols(predictor) -> list:
    """The target columns of the model's training file: a run's (args.yaml), or OccCANINE's
    <system>_1.. (as its training data and its --columns occcanine output name them)."""
    import yaml

    from mixer.models.occcanine import system_name

    directory = predictor.config.get("model_dir")
    for folder in [directory, os.path.dirname(os.path.normpath(directory))] if directory else []:
        path = os.path.join(folder, "args.yaml")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                cols = ((yaml.safe_load(handle) or {}).get("data") or {}).get("target_cols")
            return [str(c) for c in cols or []]
    if predictor.family == "occcanine":
        return [f"{system_name(predictor, None)}_{k + 1}" for k in range(predictor.default_top_k())]
    return []


def read_lookup(
    path: str,
    options: TableOptions,
    formatter,
    input_col: str,
    language_col: Optional[str],
    context_cols: list,
    input_flag_col: Optional[str] = None,
    code_cols: Optional[list] = None,
    log=None,
    key=None,
    target_cols=(),
    note=None,
    names: Names = FLAGS,
) -> Lookup:
    """A lookup table read by the one reader and checked: its layout, its codes (spelled as
    the model spells them, each a code of the model's code system; those `key` lacks said
    in one line). input_col: the prediction's input column, the description column unless
    input_flag_col (--lookup-input-col) names another."""
    from mixer.audit.file import is_audit
    from mixer.data.labels.checking import TOOL_COLUMN, checked_columns, filled_rows, with_run_names
    from mixer.data.prepared.fingerprint import file_identity
    from mixer.data.tables.reading import read_table

    where = f"{names('lookup')} {path}"
    identity = file_identity(path, names("lookup"))
    frame = read_table(path, options, log=log)
    lines = np.arange(len(frame)) + 2
    target_cols = list(target_cols or [])
    own = (
        bool(target_cols)
        and (input_flag_col or input_col) in frame.columns
        and target_cols[0] in frame.columns
    )
    if code_cols:
        layout = "dictionary"
    elif is_audit(frame):
        layout = "audit"
    elif any(str(c).startswith("checked_") for c in frame.columns):
        layout = "to-check"
    elif (
        own
    ):  # the model's own columns, as its training file had them (those it has), and further ones
        layout, code_cols = "dictionary", _own_code_columns(target_cols, frame.columns)
    else:
        theirs = (
            f" (the model's own: {input_col} and {', '.join(target_cols)})" if target_cols else ""
        )
        raise UserError(
            f"{where}: neither a filled --to-check file (checked_1..), a filled audit nor a "
            f"dictionary with the model's columns{theirs}; name a dictionary's code columns with "
            f"{names('lookup_code_cols')} (and its description column with "
            f"{names('lookup_input_col')})"
        )
    text_col = input_flag_col or input_col
    if layout == "audit":
        from mixer.audit.train_on import truth_cells
        from mixer.audit.verdicts import parse_audit

        audit = parse_audit(frame, path, names("lookup"))
        cells = truth_cells(audit)
        frame, lines = audit.frame, audit.lines
        text_col = input_flag_col or audit.design.audit_text_col
        columns = [f"\x00code_{k}" for k in range(len(cells))]
        frame = frame.assign(**dict(zip(columns, cells)))
        filled = filled_rows(frame, columns)
    elif layout == "to-check":
        frame = with_run_names(frame, [input_col, language_col, *context_cols], path, log)
        columns = checked_columns(frame, path)
        filled = filled_rows(frame, columns)
        if (
            not input_flag_col and text_col not in frame.columns
        ):  # the list writes its description first
            written = [c for c in frame.columns if not TOOL_COLUMN.match(str(c))]
            text_col = written[0] if written else text_col
    else:
        missing = [c for c in code_cols if c not in frame.columns]
        if missing:
            raise UserError(
                f"{where}: no column {', '.join(map(repr, missing))} ({names('lookup_code_cols')}); it has: "
                f"{', '.join(map(str, frame.columns[:12]))}"
            )
        columns = list(code_cols)
        filled = filled_rows(frame, columns)
    if text_col not in frame.columns:
        flag = names("lookup_input_col") + (
            "" if input_flag_col else " (default: the input column)"
        )
        raise UserError(
            f"{where}: no column {text_col!r} ({flag}); it has: {', '.join(map(str, frame.columns[:12]))}"
        )
    missing_context = [c for c in context_cols if c not in frame.columns]
    if missing_context:
        raise UserError(
            f"{where}: no column {', '.join(map(repr, missing_context))}: the model reads these "
            "context columns, and an entry is matched on what the model reads"
        )
    if not filled.any():
        raise UserError(
            f"{where}: no row has a code in {', '.join(map(str, columns))}; fill the codes "
            "of the rows you coded"
        )
    codes, written = _code_sets(frame, columns, formatter, where, lines)
    rows = np.flatnonzero(filled)
    texts = frame[text_col].astype(object).where(frame[text_col].notna(), "").astype(str)
    langs = None
    if language_col and language_col in frame.columns:
        langs = (
            frame[language_col]
            .astype(object)
            .where(frame[language_col].notna(), "")
            .astype(str)
            .str.strip()
        )
        langs = langs.iloc[rows].reset_index(drop=True)
    context = frame[context_cols].iloc[rows].reset_index(drop=True) if context_cols else None
    lookup = Lookup(
        path,
        layout,
        texts.iloc[rows].reset_index(drop=True),
        langs,
        context,
        [codes[r] for r in rows],
        np.asarray(lines)[rows],
        identity,
        columns=(
            f"descriptions in {text_col}, codes in {', '.join(map(str, columns))}"
            if layout == "dictionary"
            else ""
        ),
        names=names,
    )
    if key is not None:
        line = _outside_key(lookup, set(key), written, rows)
        if line and (note or log) is not None:
            (note or log)(line)
    return lookup


def _own_code_columns(target_cols: list, columns) -> list:
    """A dictionary's code columns where it has the model's own: the model's target columns
    it has, and the further columns of their numbered families (hisco_2, hisco_3, ... beside
    a model's hisco_1): a second code written in hisco_2 is a code of the entry, which the
    output then needs a slot for (--top-k), not a column to drop without a word."""
    import re

    present = [str(c) for c in columns]
    found = [c for c in target_cols if c in present]
    for col in target_cols:
        numbered = re.fullmatch(r"(.*?)(\d+)", str(col))
        if not numbered:
            continue
        prefix = numbered.group(1)
        more = [
            c for c in present if c not in found and re.fullmatch(re.escape(prefix) + r"\d+", c)
        ]
        found += sorted(more, key=lambda c: int(c[len(prefix) :]))
    return found


SHOWN = 8  # lines named in a message; the rest counted


def _outside_key(lookup: Lookup, key: set, written: dict, rows: np.ndarray) -> Optional[str]:
    """One line naming the entries whose codes the model's key lacks (a typo, or a code the
    model never learnt), each code as read and, where zeros were restored, as written; sets
    lookup.outside_key. None when every code is the model's."""
    found = []
    for entry, codes in enumerate(lookup.codes):
        strange = [c for c in codes if c not in key]
        if strange:
            shown = ", ".join(
                f"{c!r}" + (f" (written {w!r})" if (w := written.get((rows[entry], c))) else "")
                for c in strange
            )
            found.append(f"line {lookup.lines[entry]} {shown}")
    lookup.outside_key = len(found)
    if not found:
        return None
    more = f", and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (
        f"note: {lookup.names('lookup')} {lookup.path}: {len(found):,} of {len(lookup.codes):,} entries give a code the "
        f"model's key lacks, written as given without a description: {'; '.join(found[:SHOWN])}{more}; "
        "check them (a typo, or a code the model never learnt)"
    )


def _code_sets(frame: pd.DataFrame, columns: list, formatter, where: str, lines) -> tuple:
    """(per row, its distinct codes spelled as the model spells them, sorted; {(row, code):
    the code as written} where zeros were restored); a code the code system cannot hold is
    refused, naming its line."""
    from mixer.data.labels.normalise import code_column

    spelled = [code_column(frame, column, formatter) for column in columns]
    written = {}
    for column, read in zip(columns, spelled):
        for r in np.flatnonzero(read.restored):
            written[(int(r), read.text.iat[r])] = str(frame[column].iat[r]).strip()
    spelled = [read.text.to_numpy(dtype=object) for read in spelled]
    out = []
    checked: dict = {}
    for r in range(len(frame)):
        codes = sorted({c for c in (column[r] for column in spelled) if c})
        for code in codes:
            if code not in checked:
                checked[code] = formatter.check(code)[1]
            if checked[code]:
                raise UserError(f"{where}: line {lines[r]}: code {code!r} {checked[code]}")
        out.append(tuple(codes))
    return out, written


SOURCE = "source"  # where a row's codes came from: lookup | model
FROM_LOOKUP, FROM_MODEL = "lookup", "model"


def apply_lookup(
    table: pd.DataFrame, entries: np.ndarray, lookup: Lookup, description_of: dict, full_length: int
) -> pd.DataFrame:
    """A head's code table with the rows that match an entry (`entries`, Lookup.match) given
    the entry's codes: prob_k and confidence empty (a person's codes have none), coded auto,
    at the full level; and `source`."""
    import re

    out = table.copy()
    rows = np.flatnonzero(entries >= 0)
    columns = sorted(
        (c for c in out.columns if re.match(r"^code_\d+$", str(c))), key=lambda c: int(c[5:])
    )
    if len(rows):
        codes = [lookup.codes[e] for e in entries[rows]]
        widest = max(len(c) for c in codes)
        if widest > len(columns):
            entry = next(e for e in entries[rows] if len(lookup.codes[e]) == widest)
            raise UserError(
                f"{lookup.names('lookup')} {lookup.path}: line {lookup.lines[entry]} has {widest} "
                f"codes, the output {len(columns)} code slot(s); pass "
                f"{lookup.names.before('top_k')}{widest}"
            )
        for k, column in enumerate(columns):
            values = [c[k] if k < len(c) else "" for c in codes]
            out.loc[out.index[rows], column] = values
            if f"prob_{k + 1}" in out.columns:
                out.loc[out.index[rows], f"prob_{k + 1}"] = np.nan
            if f"desc_{k + 1}" in out.columns:
                out.loc[out.index[rows], f"desc_{k + 1}"] = [
                    description_of.get(c, "") for c in values
                ]
        for column in out.columns:  # level_confidence_<crosswalk>: a class-level target's
            if column in ("confidence", "confidence_raw") or str(column).startswith(
                "level_confidence_"
            ):
                out.loc[out.index[rows], column] = np.nan
        for column in out.columns:  # coded, and coded_<crosswalk> at a class level
            if column == "coded" or str(column).startswith("coded_"):
                out.loc[out.index[rows], column] = "auto"
        if "level" in out.columns:
            out.loc[out.index[rows], "level"] = full_length
    out[SOURCE] = np.where(entries >= 0, FROM_LOOKUP, FROM_MODEL)
    return out

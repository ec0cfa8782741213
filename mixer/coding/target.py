"""Predicting at a target accuracy: `predict.py --target-accuracy 0.95` and
`Model.predict(..., target=...)` (docs/coding.md, "Predicting at a target accuracy").

A threshold on the row confidence (raw, temperature 1) is chosen on labelled rows that
chose nothing else, predicted here with the very model, head, thresholds and precision that
code the new rows. So the coded rows' accuracy reaches the target with the
stated confidence on new rows like them (mixer.coding.guarantee: Learn-then-Test over a
grid fixed in advance). Each row is then `auto` (its confidence passes) or `check`.

Labelled rows come from the run's scores.parquet (the validation rows with chose ==
False) or from a file of the user's (--calibration-data with --calibration-truth-cols,
or a filled simple random audit). A lookup table's inputs are left out of them: the rows
the lookup codes are not the model's to code.

With shorter codes (--shorter-codes), a row whose full code set misses the threshold gets
its codes cut to the longest prefix length of its code system (mixer.coding.levels)
whose confidence passes the same threshold. The guarantee then counts each row right at the
level it is given. The threshold is chosen by mixer.coding.guarantee's own
procedure (choose_with_levels: the same fixed sequence over the same grid, START
included), each grid point's coded rows counted by that rule.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.core.naming import FLAGS, Names

AUTO, CHECK = "auto", "check"
CODED = "coded"  # auto | check
LEVEL = "level"  # the length of the codes given: the full code's, or a prefix length
# the confidence of the codes as given, on the raw scale (temperature 1) whatever the model's
# calibration: the scale the threshold is compared on; the calibration is fit on the full
# codes' confidence and says nothing of a prefix's, hence _raw, as confidence_raw
LEVEL_CONFIDENCE = "level_confidence_raw"
SCORES = "scores.parquet"
SEP = " & "


@dataclass
class Labelled:
    """Labelled rows to choose on: each row's model text and language (context already in
    the text, as the run's prepared data holds it), its true code set, and in words where
    the rows come from."""

    texts: np.ndarray
    langs: np.ndarray
    truth: list  # per row, a tuple of codes
    rows: str  # which rows, in words
    lines: Optional[np.ndarray] = None  # per row, its line in the file (a file of the user's)
    desc_chars: Optional[np.ndarray] = (
        None  # per row, the characters of its text that are the description
    )

    def __len__(self) -> int:
        return len(self.texts)

    def without(self, keep: np.ndarray) -> "Labelled":
        keep = np.asarray(keep, dtype=bool)
        return Labelled(
            self.texts[keep],
            self.langs[keep],
            [t for t, k in zip(self.truth, keep) if k],
            self.rows,
            None if self.lines is None else self.lines[keep],
            None if self.desc_chars is None else self.desc_chars[keep],
        )


@dataclass(frozen=True)
class Target:
    """A threshold chosen for one head: what predict.py applies to every row and writes in
    a predictions file's provenance."""

    head: str
    accuracy: float
    confidence: float
    threshold: Optional[float]  # raw confidence; None: no threshold reaches the target
    levels: (
        tuple  # prefix lengths tried after the full code (longest first); () without shorter codes
    )
    full_length: int
    procedure: str
    bound: Optional[float]
    coded_share: float  # of the labelled rows
    rows_used: int
    rows: str
    needed: Optional[int] = None
    note: str = ""
    cause: str = (
        ""  # mixer.coding.guarantee.Choice.cause: none, few (labelled rows) or file (rows to code)
    )
    by_level: dict = field(default_factory=dict)  # {level: (labelled rows coded at it, right)}
    top_k: Optional[int] = None  # the settings it was chosen with, which predict must use
    flat_threshold: Optional[float] = None
    owner: int = field(default=0, compare=False)  # id() of the Predictor that chose it
    rows_to_code: Optional[int] = (
        None  # the rows it was chosen to code (None: rows like the labelled ones)
    )
    # the level the accuracy is counted at: None for the codes, or a crosswalk (its classes:
    # mixer.coding.levels); its rows are marked in coded_<name> (mark_column)
    level: object = None
    also: tuple = ()  # Targets at other levels, chosen on the same rows: their marks written too

    @property
    def level_name(self) -> str:
        """'code', or the crosswalk's name."""
        from mixer.coding.levels import level_name

        return "code" if self.level is None else level_name(self.level)

    @property
    def mark_column(self) -> str:
        """The column of the rows' marks: coded for the codes, coded_<name> for a crosswalk."""
        return CODED if self.level is None else f"{CODED}_{self.level_name}"

    @property
    def scored_levels(self) -> tuple:
        """The levels the predictor scores for this target and those it carries (also)."""
        out = []
        for target in (self, *self.also):
            for level in (*target.levels, *(() if target.level is None else (target.level,))):
                if all(level is not seen for seen in out):
                    out.append(level)
        return tuple(out)

    def record(self) -> dict:
        """What a predictions file's provenance says of the target."""
        return {
            "head": self.head,
            "accuracy": self.accuracy,
            "confidence": self.confidence,
            "threshold": self.threshold,
            "procedure": self.procedure,
            "bound": self.bound,
            "labelled_rows": self.rows_used,
            "labelled_coded_share": self.coded_share,
            "rows": self.rows,
            "shorter_codes": list(self.levels),
            "rows_to_code": self.rows_to_code,
            "level": self.level_name,
            **({"also": [t.record() for t in self.also]} if self.also else {}),
        }

    describe = record  # the name docs/python-api.md gave before

    def check_reached(self, names: Names = FLAGS) -> None:
        """Refuse to code at a lower accuracy silently: no threshold, no prediction. names:
        how the refusal names the options (predict.py's flags or the API's keywords)."""
        for other in self.also:
            other.check_reached(names)
        if self.threshold is not None:
            return
        advice = ("code more rows at once, " if self.cause == "file" else "") + (
            f"pass more labelled rows ({names('calibration_data')}) or a lower "
            f"{names('target_accuracy')}"
            + ("" if self.levels else f", or {names.switch('shorter_codes')}")
        )
        note = self.note or (
            f"{self.rows_used:,} labelled rows cannot show accuracy {self.accuracy:g} at "
            f"{self.confidence:g} confidence"
        )
        at = "" if self.level is None else f", at the level {self.level_name}"
        raise UserError(
            f"{names.before('target_accuracy')}{self.accuracy:g} ({self.head} head{at}; labelled rows: "
            f"{self.rows}): {note}; {advice}"
        )

    def levels_given(self, table: pd.DataFrame, shortenable: Optional[np.ndarray] = None) -> tuple:
        """(each row's level: the length of the codes it is given, or 0 for a check; the raw
        confidence of the codes at that level). No threshold: every row is a check."""
        from mixer.coding.confidence import CONFIDENCE, LEVEL_CONFIDENCE as AT

        limit = np.inf if self.threshold is None else self.threshold
        scored = CONFIDENCE if self.level is None else AT.format(self.level_name)
        confidence = table[scored].to_numpy(dtype=np.float64)
        level = np.where(confidence >= limit, self.full_length, 0)
        given = confidence.copy()
        if self.levels and shortenable is None:
            shortenable = _shortenable(table)
        for length in self.levels:
            at = table[AT.format(length)].to_numpy(dtype=np.float64)
            take = (level == 0) & shortenable & (at >= limit)
            level[take], given[take] = length, at[take]
        return level, given


def _shortenable(table: pd.DataFrame) -> np.ndarray:
    """Rows whose every code has a coarser class (HISCO's -1..-3 have none)."""
    from mixer.coding.levels import prefix

    out = np.ones(len(table), dtype=bool)
    for column in code_columns(table):
        codes = table[column].to_numpy(dtype=object)
        out &= np.asarray([not c or prefix(c, 1) is not None for c in codes], dtype=bool)
    return out


def code_columns(table: pd.DataFrame) -> list:
    import re

    found = [c for c in table.columns if re.match(r"^code_\d+$", str(c))]
    return sorted(found, key=lambda c: int(c.split("_")[1]))


def predicted_code_sets(table: pd.DataFrame) -> list:
    columns = code_columns(table)
    values = (
        table[columns].to_numpy(dtype=object)
        if columns
        else np.zeros((len(table), 0), dtype=object)
    )
    return [tuple(sorted({c for c in row if isinstance(c, str) and c})) for row in values]


def mark(table: pd.DataFrame, target: Target, description_of: dict) -> pd.DataFrame:
    """A head's table with `coded` (auto | check; Model.predict then empties it for a row
    without a description). With shorter codes, it has the codes of rows given at a coarser
    level cut to it (prob_k empty), `level` and `level_confidence_raw` (raw scale, the
    threshold's: LEVEL_CONFIDENCE)."""
    from mixer.coding.levels import prefix_set
    from mixer.coding.confidence import LEVEL_CONFIDENCE as AT

    out = table
    for other in target.also:  # each level's own mark (coded_<name>)
        out = mark(out, other, description_of)
    level, given = target.levels_given(table)
    if target.level is not None:  # the class level: the codes stay; the classes' confidence too
        return out.assign(**{target.mark_column: np.where(level > 0, AUTO, CHECK)})
    out = out.drop(columns=[AT.format(length) for length in target.levels])
    if target.levels:
        shorter = np.flatnonzero((level > 0) & (level < target.full_length))
        columns = code_columns(out)
        for row in shorter:
            codes = sorted(prefix_set([out[c].iat[row] for c in columns], int(level[row])))
            for k, column in enumerate(columns):
                out.iat[row, out.columns.get_loc(column)] = codes[k] if k < len(codes) else ""
        for k in range(1, len(columns) + 1):
            if f"prob_{k}" in out.columns:
                out.loc[out.index[shorter], f"prob_{k}"] = np.nan
            if f"desc_{k}" in out.columns:
                out.loc[out.index[shorter], f"desc_{k}"] = [
                    description_of.get(c, "") for c in out[f"code_{k}"].iloc[shorter]
                ]
        out[LEVEL] = np.where(level > 0, level, target.full_length)
        out[LEVEL_CONFIDENCE] = np.where(
            level > 0, given, table["confidence"].to_numpy(dtype=np.float64)
        )
    out[CODED] = np.where(level > 0, AUTO, CHECK)
    return out


# ------------------------------------------------------------------ labelled rows
# A labelled file is refused as the model's own training rows when more than this share of its
# rows are training rows by their content and more than new rows would be (docs/coding.md)
MOSTLY_TRAINED = 0.5
# ... and an exact binomial test puts the file's share above the run's own held-out rows' at
# this level: a file drawn like the validation rows shares its inputs with training as they do
TRAINED_LEVEL = 0.001


@dataclass
class TrainedOn:
    """What a run knows of the rows it trained on (its data_train.parquet): the keys of its
    rows as the model remembers them (the text as the model reads it, whatever its language,
    with the row's code set: _row_keys), and the share of its own held-out rows (data_val.parquet, never trained on)
    whose key is among them: what new rows like them show."""

    keys: np.ndarray  # sorted unique uint64 hashes
    fresh: Optional[float]  # share of the run's validation rows that are training rows by content
    where: str  # the run directory's name
    partial: Optional[str] = None  # a line: earlier training rows (of the run's start) not known


def _row_keys(model, texts, langs, truth) -> np.ndarray:
    """Per row, a hash of its text as the model reads it (and its context) and the row's code
    set, whatever language stands beside the text: a model remembers a training row by what it
    read of its text, and scores that text with any language, another or none, as the row it
    trained on (a run without a language column read 'unk'; a file of its rows says 'en').
    `langs` is not read: every row is keyed as of one language, so that the key holds the
    text as the recipe spells it and the tokenizer normalises it, with the literal
    'unk[SEP]' before it for OccCANINE's models (the same for every row)."""
    from mixer.data.inputs.tokens import UNKNOWN_LANGUAGE

    texts = np.asarray(texts, dtype=object)
    inputs = np.asarray(
        model.reading_keys(texts, np.full(len(texts), UNKNOWN_LANGUAGE, dtype=object)),
        dtype=object,
    )
    codes = np.asarray([SEP.join(t) for t in truth], dtype=object)
    if not len(inputs):
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(inputs + "\x01" + codes)


def _code_columns(names) -> list:
    return sorted(
        (c for c in names if c.startswith("code_") and c[5:].isdigit()), key=lambda c: int(c[5:])
    )


def _split_keys(model, run_dir: str, split: str) -> np.ndarray:
    """Per row of a prepared split, its key (_row_keys), read in batches."""
    from mixer.data.prepared.files import iter_split

    names, batches = iter_split(
        run_dir, split, lambda names: ["text", "lang", *_code_columns(names)]
    )
    codes = _code_columns(names)
    keys = []
    for frame in batches:
        cells = frame[codes].astype(object).where(frame[codes].notna(), "").to_numpy(dtype=object)
        truth = [tuple(sorted({str(c) for c in row if c})) for row in cells]
        texts = frame["text"].astype(str).to_numpy(dtype=object)
        keys.append(
            _row_keys(model, texts, frame["lang"].astype(str).to_numpy(dtype=object), truth)
        )
    return np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint64)


def _earlier_runs(run_dir: str) -> tuple:
    """(the run directories whose training rows the model also trained on, following each
    run's source back: --initial-checkpoint a mixer run; a line saying the check covers only
    the rows known, or None). An earlier start whose rows cannot be read (OccCANINE's
    weights, a run directory no longer there) ends the chain with that line."""
    import json

    from mixer.models.sources import run_dir_of

    found, current, partial = [], run_dir, None
    while True:
        try:
            with open(os.path.join(current, "config.json"), encoding="utf-8") as handle:
                source = json.load(handle).get("source") or {}
        except (OSError, ValueError):
            source = {}
        kind, origin = source.get("kind", "encoder"), source.get("from")
        if kind == "encoder":
            return found, partial
        where = os.path.basename(os.path.normpath(run_dir))
        if kind == "run" and origin:
            earlier = run_dir_of(str(origin))
            earlier = next(
                (
                    d
                    for d in (earlier, os.path.dirname(os.path.normpath(earlier)))
                    if os.path.exists(os.path.join(d, "data_train.parquet"))
                ),
                None,
            )
            if earlier is not None and os.path.abspath(earlier) not in {
                os.path.abspath(d) for d in [run_dir, *found]
            }:
                found.append(earlier)
                current = earlier
                continue
            if earlier is not None:  # a loop of runs: every one is read
                return found, partial
            why = f"the run it started from, {origin}, has no data_train.parquet here"
        else:
            why = (
                f"it started from {origin or 'weights'} ({kind}), whose training rows are not known"
            )
        return found, (
            f"note: the check for rows {where} trained on covers its own training rows"
            + (
                f" and those of {', '.join(os.path.basename(os.path.normpath(d)) for d in found)}"
                if found
                else ""
            )
            + f" only: {why}"
        )


def _run_dir(model) -> Optional[str]:
    """The directory of a mixer run's prepared data (RUN, or RUN for RUN/best); None when
    the model's training rows are not known (an OccCANINE model, an epoch's weights)."""
    model_dir = model.predictor.config.get("model_dir")
    if not model_dir:
        return None
    return next(
        (
            d
            for d in (model_dir, os.path.dirname(os.path.normpath(model_dir)))
            if os.path.exists(os.path.join(d, "data_train.parquet"))
        ),
        None,
    )


# What a model's run directory tells of it, read once per Model and kept here, not on the Model:
# {Model: {"trained_on": TrainedOn or None, "known_languages": set or None}}, gone with the Model
_READ = weakref.WeakKeyDictionary()


def trained_on(model) -> Optional[TrainedOn]:
    """The run's training rows (TrainedOn), read once per Model; None where not known."""
    read = _READ.setdefault(model, {})
    if "trained_on" not in read:
        run_dir, found = _run_dir(model), None
        if run_dir is not None:
            earlier, partial = _earlier_runs(run_dir)
            keys = np.unique(
                np.concatenate([_split_keys(model, d, "train") for d in [run_dir, *earlier]])
            )
            val = os.path.join(run_dir, "data_val.parquet")
            val_keys = (
                _split_keys(model, run_dir, "val")
                if os.path.exists(val)
                else np.zeros(0, dtype=np.uint64)
            )
            found = TrainedOn(
                keys,
                float(np.isin(val_keys, keys).mean()) if len(val_keys) else None,
                os.path.basename(os.path.normpath(run_dir)),
                partial,
            )
        read["trained_on"] = found
    return read["trained_on"]


def known_languages(model) -> Optional[set]:
    """The language values the model trained with: those of its training rows, and 'unk'
    where training showed rows as of unknown language (--unk-lang-prob above 0); None when
    not known (an OccCANINE model, an epoch's weights, a run that started from another
    model's weights, which knew languages of its own). Read once per Model."""
    read = _READ.setdefault(model, {})
    if "known_languages" not in read:
        from mixer.data.prepared.files import read_split

        run_dir, found = _run_dir(model), None
        started = (model.predictor.config.get("source") or {}).get("kind", "encoder")
        if run_dir is not None and started == "encoder" and model.predictor.family == "mixer":
            langs = read_split(run_dir, "train", ["lang"])["lang"]
            found = {str(v) for v in langs.dropna().unique()}
            if _unknown_kept(run_dir):
                from mixer.data.inputs.tokens import UNKNOWN_LANGUAGE

                found.add(UNKNOWN_LANGUAGE)
        read["known_languages"] = found
    return read["known_languages"]


def _unknown_kept(run_dir: str) -> bool:
    """Whether training showed the model rows of unknown language (--unk-lang-prob above 0)."""
    import yaml

    path = os.path.join(run_dir, "args.yaml")
    if not os.path.exists(path):
        return True
    with open(path, encoding="utf-8") as handle:
        args = yaml.safe_load(handle) or {}
    value = (args.get("train") or {}).get("unk_lang_prob", 0.25)
    return value is None or float(value) > 0


def language_note(model, counts: dict, where: str) -> str:
    """One line on rows (`counts`: {language value: rows}) whose language the model never
    trained with, as the model reads the language ('EN' is 'en' to a lower-casing
    tokenizer: mixer.data.inputs.tokens.read_languages); '' when none, or when the model's
    training languages are not known."""
    known = known_languages(model)
    if known is None or not counts:
        return ""
    from mixer.data.inputs.tokens import read_languages

    ids = model.predictor.token_ids
    return unknown_languages_line(counts, known, where, lambda values: read_languages(ids, values))


def unknown_languages_line(counts: dict, known: set, where: str, read=None) -> str:
    """One line on rows whose language the model never trained with ('' when none). read:
    per array of language values, the language as the model reads it (compared so)."""
    if read is not None:
        readings = set(read(np.asarray(sorted(known), dtype=object)).tolist())
        values = list(counts)
        as_read = dict(zip(values, read(np.asarray(values, dtype=object)).tolist()))
        unknown = {value: n for value, n in counts.items() if as_read[value] not in readings}
    else:
        unknown = {value: n for value, n in counts.items() if value not in known}
    if not unknown:
        return ""
    shown = ", ".join(f"{v!r} ({n:,})" for v, n in sorted(unknown.items(), key=lambda x: -x[1])[:8])
    more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
    trained = ", ".join(map(repr, sorted(known)[:8])) + (
        f" and {len(known) - 8} more" if len(known) > 8 else ""
    )
    return (
        f"note: {where}: {sum(unknown.values()):,} rows have a language value the model never trained with: "
        f"{shown}{more} (it trained with {trained}); it reads them as an input it never saw, so their codes "
        "may differ from those of a language it knows"
    )


def leave_out_trained(labelled: Labelled, model, where: str, log=None) -> Labelled:
    """Labelled rows of a file without the rows the model trained on, as their content tells
    (the text as the model reads it and the code set, whatever the language: TrainedOn):
    counted and said in one line. A file of mostly such rows, more than new rows like the
    run's own held-out rows would hold, is refused: it is the training data, on which the
    model is right more often than on new rows."""
    from mixer.coding.guarantee import binomial_upper_tail

    trained = trained_on(model)
    if trained is None or not len(labelled):
        return labelled
    if trained.partial and log is not None:
        log(trained.partial)
    seen = np.isin(_row_keys(model, labelled.texts, labelled.langs, labelled.truth), trained.keys)
    k, n = int(seen.sum()), len(labelled)
    if not k:
        return labelled
    fresh = trained.fresh if trained.fresh is not None else 0.0
    above = float(binomial_upper_tail(k, n, fresh)) < TRAINED_LEVEL
    share = f"{k:,} of its {n:,} labelled rows ({k / n:.0%})"
    like = (
        f"new rows like the run's own held-out rows would hold about {fresh:.0%}"
        if trained.fresh is not None
        else "the run has no held-out rows to compare with"
    )
    if k / n > MOSTLY_TRAINED and above:
        raise UserError(
            f"{where}: {share} are rows {trained.where} trained on (the same text as the model reads it and codes, in any language), "
            f"where {like}: the model is right more often on rows it trained on, so no threshold "
            "chosen on them holds on new rows; pass labelled rows it never trained on (a random "
            "sample of the file to code, checked by hand)"
        )
    if not above:
        if log is not None:
            log(
                f"{where}: {share} have the text and codes of rows {trained.where} trained on, as {like}: "
                "kept (rows like these are new draws of common inputs)"
            )
        return labelled
    if log is not None:
        log(
            f"{where}: {share} are rows {trained.where} trained on (the same text as the model reads it and codes, in any language), more than {like}: "
            "left out (the model is right more often on rows it trained on)"
        )
    out = labelled.without(~seen)
    out.rows += f", less the {k:,} the model trained on"
    return out


def run_rows(
    model_dir: Optional[str],
    source: str,
    flag: Optional[str] = None,
    language: Optional[str] = None,
    names: Names = FLAGS,
) -> Labelled:
    """A run's labelled rows that chose nothing: the rows of its scores.parquet with chose ==
    False; for a run from before scores.parquet, its validation rows when they chose
    nothing (no --keep-best, no early stop, no tuned thresholds: only_measured). language:
    the one language the rows to code are predicted with, given for a run that read no
    language column (its rows have none of their own): they are predicted with it too, so
    that the threshold is chosen on the numbers it is applied to. flag: the option that asked
    for them (default: names' target_accuracy)."""
    rows = _run_rows(model_dir, source, flag or names("target_accuracy"), names)
    if language is not None and (len(rows.langs) == 0 or (rows.langs != language).any()):
        rows.langs = np.full(len(rows), language, dtype=object)
        rows.rows += f", predicted with language {language!r} as the rows to code are"
    return rows


def _run_rows(model_dir: Optional[str], source: str, flag: str, names: Names) -> Labelled:
    own = (
        f"pass labelled rows of your own with {names.before('calibration_data')}FILE "
        f"{names.before('calibration_truth_cols')}COL... (a filled audit qualifies)"
    )
    if not model_dir:
        raise UserError(
            f"{flag}: --checkpoint {source} is not a run directory of this tool (or names an "
            f"epoch's weights), so it has no held-out labelled rows; {own}"
        )
    name = os.path.basename(os.path.normpath(model_dir))
    if os.path.exists(os.path.join(model_dir, SCORES)):
        scores = read_scores(model_dir)
        held = scores[~scores["chose"].to_numpy(dtype=bool)]
        if not len(held):
            raise UserError(
                f"{flag}: every scored row of {model_dir} chose something (the best model, the early "
                "stop or the thresholds); train with --share-calibration 0.1 to set rows aside, or "
                + own
            )
        truth = [tuple(sorted(c for c in str(cell).split(SEP) if c)) for cell in held["true_codes"]]
        return Labelled(
            held["text"].to_numpy(dtype=object),
            held["lang"].astype(str).to_numpy(dtype=object),
            truth,
            f"the {len(held):,} scored rows of {name} that chose nothing ({SCORES}, chose false)",
            desc_chars=_scored_desc_chars(model_dir, held),
        )
    parent = os.path.dirname(os.path.normpath(model_dir))
    if name == "best" and os.path.exists(os.path.join(parent, "args.yaml")):
        raise UserError(
            f"{flag}: {model_dir} has no {SCORES} yet: a run writes it for its best model when it "
            f"ends; let the run finish (or resume it), or {own}"
        )
    why = only_measured(model_dir)
    if why:
        raise UserError(
            f"{flag}: {model_dir} has no {SCORES} (a run writes it when it ends: this one has not "
            f"ended, was stopped, or is from an earlier version) and its validation rows "
            f"{why}; {own}"
        )
    from mixer.data.prepared.files import load_prepared

    val = load_prepared(model_dir).val
    columns = sorted(
        (c for c in val.columns if str(c).startswith("code_")), key=lambda c: int(c[5:])
    )
    cells = val[columns].astype(str).replace("nan", "").to_numpy(dtype=object)
    truth = [tuple(sorted({c for c in row if c})) for row in cells]
    from mixer.data.labels.columns import DESC_CHARS

    return Labelled(
        val["text"].astype(str).to_numpy(dtype=object),
        val["lang"].astype(str).to_numpy(dtype=object),
        truth,
        f"the {len(val):,} validation rows of {name}, which chose nothing (a run without "
        "--keep-best, early stopping or tuned thresholds)",
        desc_chars=_context_split(val[DESC_CHARS].to_numpy(), val["text"])
        if DESC_CHARS in val
        else None,
    )


def _context_split(desc_chars: np.ndarray, texts) -> Optional[np.ndarray]:
    """desc_chars where some row's text holds context (prediction then builds its input by the
    context rule, as training did), else None (the text is the description)."""
    desc_chars = np.asarray(desc_chars, dtype=np.int64)
    lengths = pd.Series(texts).astype(str).str.len().to_numpy()
    return desc_chars if (desc_chars < lengths).any() else None


def _scored_desc_chars(model_dir: str, held: pd.DataFrame) -> Optional[np.ndarray]:
    """The description's characters of scored rows, from the prepared split each row comes
    from (the run's data_val / data_cal); None when the run read no context."""
    from mixer.data.labels.columns import DESC_CHARS
    from mixer.data.prepared.files import load_prepared

    run_dir = model_dir
    if not os.path.exists(os.path.join(run_dir, "prepared.json")):
        run_dir = os.path.dirname(os.path.normpath(model_dir))  # RUN/best: the run's own data
    if not os.path.exists(os.path.join(run_dir, "prepared.json")):
        return None
    prepared = load_prepared(run_dir)
    frames = {"val": prepared.val, "cal": getattr(prepared, "cal", None)}
    if any(
        f is None or DESC_CHARS not in f.columns
        for s, f in frames.items()
        if s in set(held.get("split", ["val"]))
    ):
        return None
    splits = (
        held["split"].astype(str).to_numpy()
        if "split" in held.columns
        else np.full(len(held), "val")
    )
    rows = held["row"].to_numpy(dtype=np.int64)
    desc_chars = np.array(
        [frames[s][DESC_CHARS].iat[r] for s, r in zip(splits, rows)], dtype=np.int64
    )
    return _context_split(desc_chars, held["text"])


def only_measured(run_dir: str) -> str:
    """'' when a run's validation rows chose nothing (they measured it alone), else what
    they chose, in words."""
    import yaml

    from mixer.models.sources import run_config

    config = run_config(run_dir)
    path = os.path.join(run_dir, "args.yaml")
    if not os.path.exists(path) or not os.path.exists(os.path.join(run_dir, "data_val.parquet")):
        return "cannot be found (no args.yaml and data_val.parquet beside the model)"
    with open(path, encoding="utf-8") as handle:
        args = yaml.safe_load(handle) or {}
    train = args.get("train") or {}
    if (
        train.get("keep_best")
        or train.get("early_stopping_patience")
        or (config.get("weights") or {}).get("kind") == "best"
    ):
        return "chose the best model or the early stop (--keep-best)"
    if train.get("tune_threshold"):
        return "chose the flat head's thresholds (--tune-threshold)"
    return ""


def read_scores(model_dir: str) -> pd.DataFrame:
    """A run's own per-row validation scores (written by its training; mixer.training)."""
    import pyarrow.parquet as pq

    return pq.read_table(
        os.path.join(model_dir, SCORES), columns=["row", "lang", "text", "chose", "true_codes"]
    ).to_pandas()


def file_rows(
    path: str,
    options,
    truth_cols: Optional[list],
    model,
    input_col: str,
    language_col: Optional[str],
    language: str,
    context_cols: list,
    log=None,
    names: Names = FLAGS,
) -> Labelled:
    """Labelled rows of the user's own: a table with the true codes in `truth_cols`, or a
    filled audit drawn at random (simple, not stratified), each line as many rows as it
    stands for. A row whose truth cells are all empty is not labelled: it is left out, and
    said in `rows`. A filled --to-check file is refused: it holds the least confident rows."""
    from mixer.audit.file import is_audit
    from mixer.audit.verdicts import parse_audit
    from mixer.data.labels.normalise import code_column
    from mixer.data.tables.job_columns import blank_descriptions
    from mixer.data.tables.reading import read_table

    frame = read_table(path, options, log=log)
    where = f"{options.what} {path}"  # the API's keyword from Python (options.keyword)
    if any(str(c).startswith("checked_") for c in frame.columns) and not is_audit(frame):
        raise UserError(
            f"{where}: a --to-check file holds the rows the model was least sure of, not rows "
            "like the ones to code; pass a random sample checked by hand (predict.py --audit)"
        )
    formatter = model.predictor.formatter
    lines = np.arange(len(frame)) + 2
    repeat = np.ones(len(frame), dtype=np.int64)
    if is_audit(frame):
        audit = parse_audit(frame, path, names("calibration_data"))
        design = audit.design
        if design.stratified:
            raise UserError(
                f"{where}: a stratified audit ({names('audit_by', design.by)}) samples its strata at "
                "different rates; choose on a simple random audit (predict.py --audit N without "
                "--audit-by)"
            )
        if any("check" in reason for reason in design.left_out):
            raise UserError(
                f"{where}: drawn from the rows coded automatically at a target accuracy, not from "
                "all rows; it checks that promise (evaluate.py --audit) but cannot choose a threshold"
            )
        checked = np.asarray([c is not None for c in audit.correct]) | audit.has_codes
        unknown = np.asarray([c is False for c in audit.correct]) & ~audit.has_codes
        if unknown.any():
            raise UserError(
                f"{where}: {int(unknown.sum())} row(s) marked wrong without the right codes "
                f"({audit.row_names(unknown)}); fill true_code_1.. for them, or the rows chosen "
                "on would leave out exactly the rows the model got wrong"
            )
        from mixer.audit.train_on import truth_cells

        cells = truth_cells(audit)
        frame, lines = audit.frame, audit.lines
        truth = [tuple(sorted({c for c in cell if c})) for cell in zip(*cells)]
        keep = checked
        if design.unit != "rows":
            # a line stands for the rows drawn with that description: as many rows to the model
            repeat = audit.draws
        stopped = _first_blank(checked)
        keep = keep & (
            np.arange(len(frame)) < stopped
        )  # the rows checked before the first left blank
        text_col = design.audit_text_col
        rows = f"a simple random audit, {int(repeat[keep].sum()):,} rows checked ({os.path.basename(path)})"
    else:
        if not truth_cols:
            raise UserError(
                f"{where}: name the columns of its true codes with {names('calibration_truth_cols')}"
            )
        missing = [c for c in truth_cols if c not in frame.columns]
        if missing:
            raise UserError(
                f"{where}: no column {', '.join(map(repr, missing))} ({names('calibration_truth_cols')}); "
                f"it has: {', '.join(map(str, frame.columns[:12]))}"
            )
        spelled = [code_column(frame, c, formatter).text.to_numpy(dtype=object) for c in truth_cols]
        truth = [tuple(sorted({c for c in row if c})) for row in zip(*spelled)]
        # a row whose truth cells are all empty is not labelled (as evaluate.py reads it): counted
        # as a row, it would count as wrong (a partly labelled file, the usual case)
        keep = np.asarray([bool(t) for t in truth], dtype=bool)
        text_col = input_col
        rows = None  # said below, once the rows without a description are known too
    for column, flag in [
        (text_col, names("input_col")),
        *[(c, "a context column the model reads") for c in context_cols],
    ]:
        if column not in frame.columns:
            raise UserError(
                f"{where}: no column {column!r} ({flag}); it has: {', '.join(map(str, frame.columns[:12]))}"
            )
    texts = frame[text_col].astype(object).where(frame[text_col].notna(), "").astype(str)
    if language_col and language_col in frame.columns:
        langs = (
            frame[language_col]
            .astype(object)
            .where(frame[language_col].notna(), "")
            .astype(str)
            .str.strip()
        )
    elif language_col:
        raise UserError(
            f"{where}: no column {language_col!r} ({names('language_col')}); the rows to code have one"
        )
    else:
        langs = pd.Series([language] * len(frame), dtype=object)
    described = ~blank_descriptions(texts)
    if rows is None:  # a table with truth columns
        unlabelled, undescribed = int((~keep).sum()), int((keep & ~described).sum())
        left_out = (
            [f"{unlabelled:,} without a true code in {', '.join(truth_cols)}"] if unlabelled else []
        )
        left_out += [f"{undescribed:,} without a description"] if undescribed else []
        kept = int((keep & described).sum())
        rows = f"{kept:,} labelled rows of {os.path.basename(path)}" + (
            f", less {' and '.join(left_out)}" if left_out else ""
        )
        if not kept:
            raise UserError(
                f"{where}: none of its {len(frame):,} rows has both a description ({text_col}) and "
                f"a true code ({', '.join(truth_cols)}); fill the true codes of some rows"
            )
    keep &= described
    context = frame[context_cols].reset_index(drop=True) if context_cols else None
    _, model_texts, _, desc_chars = model.read_inputs(
        texts.reset_index(drop=True), langs.reset_index(drop=True), context, say_fit=False
    )
    index = np.repeat(np.flatnonzero(keep), repeat[keep])
    labelled = Labelled(
        np.asarray(model_texts, dtype=object)[index],
        langs.to_numpy(dtype=object)[index],
        [truth[i] for i in index],
        rows,
        np.asarray(lines)[index],
        None if desc_chars is None else np.asarray(desc_chars)[index],
    )
    if log is not None and len(labelled):  # as the input's: a language the model never trained with
        values, counts = np.unique(labelled.langs.astype(str), return_counts=True)
        note = language_note(model, dict(zip(values.tolist(), counts.tolist())), where)
        if note:
            log(note)
    return leave_out_trained(labelled, model, where, log)


def _first_blank(checked: np.ndarray) -> int:
    """Rows checked from the top: a person who stops early leaves a random sample."""
    blank = np.flatnonzero(~checked)
    return int(blank[0]) if len(blank) else len(checked)


# ------------------------------------------------------------------ the choice
def choose(
    predictor,
    head: str,
    accuracy: float,
    confidence: float,
    labelled: Labelled,
    levels=(),
    top_k=None,
    threshold=None,
    batch_size: int = 256,
    rows_to_code=None,
    at=(None,),
    names: Names = FLAGS,
) -> Target:
    """The threshold for `head` (mixer.coding.guarantee's procedure), chosen on `labelled`
    predicted here, as the new rows will be. at: the levels the accuracy is counted at, each
    with its own threshold: None for the codes, a crosswalk for its classes; the first's
    Target carries the others' (Target.also), all chosen on the one prediction of the rows.
    Shorter codes (levels) serve the codes' level alone."""
    if not len(labelled):
        raise UserError(f"{names('target_accuracy')}: no labelled rows to choose a threshold on")
    at = tuple(at) or (None,)
    walks = tuple(level for level in at if level is not None)
    levels = tuple(sorted(levels, reverse=True))
    table = predictor.predict(
        labelled.texts,
        labelled.langs,
        head,
        top_k,
        threshold,
        batch_size,
        (*levels, *walks),
        desc_chars=labelled.desc_chars,
    )
    full = predictor.formatter.block_size
    chosen = [
        Target(
            head,
            accuracy,
            confidence,
            None,
            levels if level is None else (),  # shorter codes serve the codes' level alone
            full,
            "",
            None,
            0.0,
            len(labelled),
            labelled.rows,
            top_k=top_k,
            flat_threshold=threshold,
            owner=id(predictor),
            rows_to_code=rows_to_code,
            level=level,
        )
        for level in at
    ]
    chosen = [_sequence(t, table, labelled.truth, rows_to_code) for t in chosen]
    return dataclasses.replace(chosen[0], also=tuple(chosen[1:]))


def right_by_level(truth: list, predicted: list, levels, full: int) -> dict:
    """{length: per row, whether its codes are right cut to it}: the exact set at the full
    length, mixer.coding.levels.prefix_correct at each prefix length."""
    from mixer.coding.levels import prefix_correct

    right = {full: np.asarray([set(t) == set(p) for t, p in zip(truth, predicted)], dtype=bool)}
    for length in levels:
        right[int(length)] = prefix_correct(truth, predicted, int(length))
    return right


def _right_given(right: dict, level: np.ndarray) -> np.ndarray:
    """Per row, right at the level it is given (False for a check)."""
    out = np.zeros(len(level), dtype=bool)
    for length, values in right.items():
        at = level == length
        out[at] = values[at]
    return out


def _sequence(probe: Target, table: pd.DataFrame, truth: list, rows_to_code) -> Target:
    """mixer.coding.guarantee's procedure, written there once: choose_threshold on the rows'
    confidence, or with shorter codes choose_with_levels, each grid point's rows counted
    at the level the rule gives them (levels_given) and right at it. At a crosswalk's level,
    choose_threshold on the rows' class confidence, a row right when its classes are."""
    from mixer.coding import guarantee

    predicted = predicted_code_sets(table)
    delta = 1.0 - probe.confidence
    confidences, corrects = _by_level(probe, table, truth, predicted)
    if probe.levels:
        choice, _ = guarantee.choose_with_levels(
            confidences, corrects, probe.accuracy, delta, rows_to_code
        )
    else:
        choice = guarantee.choose_threshold(
            confidences[0], corrects[0], probe.accuracy, delta, rows_to_code
        )
    procedure = choice.procedure
    if probe.levels:
        procedure += (
            ", each grid point's coded rows counted at the level they are given (shorter codes)"
        )
    target = dataclasses.replace(
        probe,
        threshold=choice.threshold,
        procedure=procedure,
        bound=choice.bound,
        coded_share=choice.coded_share,
        needed=choice.needed,
        note=choice.note,
        cause=choice.cause,
    )
    if target.threshold is not None:
        level, _ = target.levels_given(table)
        if target.level is not None:
            from mixer.coding.levels import level_correct

            right = (level > 0) & level_correct(truth, predicted, target.level)
        else:
            right = _right_given(
                right_by_level(truth, predicted, target.levels, target.full_length), level
            )
        target = dataclasses.replace(
            target,
            by_level={
                int(L): (int((level == L).sum()), int(right[level == L].sum()))
                for L in sorted(set(level.tolist()) - {0}, reverse=True)
            },
        )
    return target


def _by_level(probe: Target, table: pd.DataFrame, truth: list, predicted: list) -> tuple:
    """(per level, the full code first and then the prefix lengths longest first: each row's
    raw confidence, and whether its codes cut to that level are right), as
    mixer.coding.guarantee.level_counts reads them. A row whose codes have no coarser class
    (HISCO's -1..-3) never passes a prefix level, as Target.levels_given has it."""
    from mixer.coding.confidence import LEVEL_CONFIDENCE as AT

    if probe.level is not None:  # a crosswalk's classes: their confidence, right when they are
        from mixer.coding.levels import level_correct

        at = table[AT.format(probe.level_name)].to_numpy(dtype=np.float64)
        return [at], [level_correct(truth, predicted, probe.level)]
    right = right_by_level(truth, predicted, probe.levels, probe.full_length)
    confidences = [table["confidence"].to_numpy(dtype=np.float64)]
    corrects = [right[probe.full_length]]
    if probe.levels:
        shortenable = _shortenable(table)
        for length in probe.levels:
            at = table[AT.format(length)].to_numpy(dtype=np.float64)
            confidences.append(np.where(shortenable, at, -np.inf))
            corrects.append(right[int(length)])
    return confidences, corrects

"""The audit file: a random sample of predictions for a person to check by hand
(`predict.py --audit`), read back to be scored (`evaluate.py --audit`) or, when asked
for, to train on (`--extra-train AUDIT --train-on-audit`). docs/evaluation.md, "Audits".

Each row carries the predicted codes (code_k, prob_k, desc_k) and empty columns for the
person: `correct` (yes or no) and `true_code_1..` (the right codes), and `note`. Three
bookkeeping columns tie it to where it came from, in cells that survive Excel (text
that no spreadsheet reads as a number or a date):

- `audit`: the design, as JSON in ASCII (any 8-bit re-save keeps it), the same on every
  row: how it was drawn (unit, stratum column, seed; each stratum's rows and draws, or, in a
  stratified audit, their number and a digest of them, so the cell stays short whatever the
  number of strata), a fingerprint of the predictions it was drawn from (their descriptions
  and codes, row by row) and of the model (its weights), and an id that is a hash of all of
  it, so an edit shows;
- `audit_check`: per row, a hash of the id, the row's place in the design and its
  predicted codes, so a row pasted from another audit, or codes changed by hand, show;
- `audit_stratum`, `audit_stratum_rows`, `audit_stratum_drawn` (stratified audits): per
  row, its stratum's number in the design, that stratum's rows in the file and rows drawn
  (checked against the digest in `audit`);
- `audit_ranks` (unit descriptions): the places, in their stratum's draw order, of the
  rows drawn that the line stands for (`audit_draws` of them), so that a person who stops
  early is scored on the rows drawn before the first line left blank.

The file is written by mixer.data.writing (its columns named by output_names: an input
column that would take one of the audit's names is written <name>_input) and read back by
mixer.data.reading with the options of its role (evaluate.py's --audit-encoding, ...;
--extra-train's for an audit trained on). Its codes, predicted and true, are read as the
model spells its codes (mixer.data.normalise, with the model's code system, which the
design carries): a spreadsheet's '64100.0' is 64100, and digit codes that lost their
leading zeros get them back where the model's codes have a known width (HISCO's 5, a
--key's or --zero-padded-codes' width), as training reads them. What a spreadsheet does
to such codes is not an edit; where the width is not known, a code that lost its zeros is
another code.

No torch here.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.data.formatter import CodeFormatter
from mixer.data.normalise import code_column, code_text
from mixer.data.reading import NUMERIC_COLUMNS, as_text, row_names
from mixer.data.verdicts import AUDIT, CHECK, CORRECT, TRUE_CODE_COLUMN, is_audit

STRATUM = "audit_stratum"
STRATUM_ROWS = "audit_stratum_rows"  # its stratum's rows in the file
STRATUM_DRAWN = "audit_stratum_drawn"  # its stratum's rows drawn
ROW = "audit_row"  # unit rows: the row's number in the predicted file (1: the first under the header)
DRAWS = "audit_draws"  # unit descriptions: the rows drawn that have this description
RANKS = "audit_ranks"  # unit descriptions: their places in the stratum's draw order (1: drawn first)
NOTE = "note"
TRUE_CODE = "true_code_{}"
UNITS = ("rows", "descriptions")
VERSION = 3  # 3: ASCII design, strata by digest, descriptions with their ranks; 2: codes spelled as the
# model spells them (1 compared them without leading zeros)
# what the model's formatter says of how its codes are spelled (mixer.data.normalise.width_of)
SPELLING = ("kind", "block_size", "use_within_block_sep", "allow_short", "digit_width")

YES = {"yes", "y", "true", "1", "right", "correct"}
NO = {"no", "n", "false", "0", "wrong", "incorrect"}
_SPACES = re.compile(r"\s+")


def _hash(text: str) -> str:
    import xxhash

    return xxhash.xxh3_64(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------ what identifies rows
def descriptions(values: pd.Series) -> pd.Series:
    """Descriptions as compared across files: text, runs of spaces and line breaks as one space."""
    return as_text(values).str.replace(_SPACES, " ", regex=True).str.strip()


def description_keys(values: pd.Series) -> np.ndarray:
    """A short hash of each description (what a run stores of the audit rows it trained on)."""
    text = descriptions(values)
    codes, uniques = pd.factorize(text)
    hashed = np.asarray([_hash(u) for u in uniques], dtype=object)
    return hashed[codes] if len(codes) else np.asarray([], dtype=object)


def spelling_of(formatter: CodeFormatter) -> dict:
    """How a model spells its codes, as the design keeps it."""
    return {name: getattr(formatter, name) for name in SPELLING}


def spelled(frame: pd.DataFrame, column: str, formatter: CodeFormatter) -> pd.Series:
    """A column of codes as the model spells them (mixer.data.normalise.code_column)."""
    return code_column(frame, column, formatter).text.reset_index(drop=True)


def canonical_codes(frame: pd.DataFrame, columns: list, formatter: CodeFormatter) -> pd.Series:
    """Each row's codes in column order, spelled as the model spells them, joined by '|'."""
    if not columns:
        return pd.Series([""] * len(frame), dtype=object)
    joined = spelled(frame, columns[0], formatter)
    for column in columns[1:]:
        joined = joined + "|" + spelled(frame, column, formatter)
    return joined


class PredictionsDigest:
    """A fingerprint of predictions, fed row blocks in order: every row's description and
    codes (spelled by the model's formatter). The same for a file however it was chunked,
    and for the file read back."""

    def __init__(self, formatter: CodeFormatter):
        import xxhash

        self._hash = xxhash.xxh3_128()
        self.formatter = formatter
        self.rows = 0

    def update(self, texts: pd.Series, codes: pd.DataFrame, columns: list) -> None:
        codes = canonical_codes(codes, columns, self.formatter)
        lines = descriptions(texts).reset_index(drop=True) + "\x1e" + codes
        self._hash.update(("\n".join(lines.tolist()) + "\n").encode("utf-8"))
        self.rows += len(lines)

    def hexdigest(self) -> str:
        return "p-" + self._hash.hexdigest()[:20]


# ------------------------------------------------------------------ the design
@dataclass(frozen=True)
class Stratum:
    label: Optional[str]  # None: the rows without a value in the stratum column
    rows: int  # rows of the file in it that were drawn from
    drawn: int  # rows drawn


@dataclass(frozen=True)
class Design:
    """How an audit was drawn and from what: the `audit` column."""

    unit: str
    by: Optional[str]
    seed: int
    strata: tuple
    predictions: str  # PredictionsDigest of the predicted rows
    predicted_rows: int  # rows of the predicted file
    model: str
    source: str
    head: str
    threshold: str
    text_col: str  # the description column, as the predictions file names it
    audit_text_col: str  # the description column, as the audit names it
    code_columns: tuple  # the head's code columns in the predictions file
    expected: Optional[float]  # mean prob_1 over the rows drawn from
    margin: Optional[float]  # --audit-margin, when it chose the size
    left_out: dict = field(default_factory=dict)  # {reason: rows not drawn from}
    spelling: dict = field(default_factory=dict)  # the model's code system (SPELLING)
    by_col: Optional[str] = None  # the stratum column, as the audit names it
    strata_count: int = 0  # stratified: the number of strata, in the `audit` cell beside their digest
    strata_digest: str = ""  # stratified: strata_digest(strata)

    def __deepcopy__(self, memo) -> "Design":
        """Itself: a design is not changed once made, and pandas deep-copies a table's attrs
        (where the audit table keeps its design) at every step."""
        return self

    @property
    def formatter(self) -> CodeFormatter:
        """The model's code system, as far as it decides how codes are spelled."""
        return CodeFormatter(**self.spelling)

    @property
    def audit_code_columns(self) -> tuple:
        """The head's code columns as the audit names them: code_1, code_2, ..."""
        return tuple(f"code_{k + 1}" for k in range(len(self.code_columns)))

    @property
    def stratified(self) -> bool:
        return self.by is not None

    @property
    def drawn(self) -> int:
        return sum(s.drawn for s in self.strata)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.strata)

    def _body(self) -> dict:
        body = asdict(self)
        if self.stratified:  # the strata by digest: their rows and draws are on the rows (STRATUM_...)
            body["strata"] = None
            body["strata_count"] = self.strata_count or len(self.strata)
            body["strata_digest"] = self.strata_digest or strata_digest(self.strata)
        else:
            body["strata"] = [[s.label, s.rows, s.drawn] for s in self.strata]
        body["code_columns"] = list(self.code_columns)
        body["version"] = VERSION
        return body

    @property
    def id(self) -> str:
        return "a-" + _hash(json.dumps(self._body(), sort_keys=True, ensure_ascii=True))[:12]

    def to_json(self) -> str:
        """The `audit` cell: ASCII (labels as \\u escapes), so that a re-save in any 8-bit
        encoding (Excel's cp1252) keeps it as written."""
        return json.dumps({"id": self.id, **self._body()}, sort_keys=True, ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> "Design":
        try:
            body = json.loads(text)
            stated = body.pop("id")
            version = body.pop("version")
        except (ValueError, TypeError, KeyError, AttributeError):
            version = None
        if version in (1, 2):
            raise UserError(f"{where}: drawn by an earlier mixer (audit version {version}); draw the audit "
                            "again with predict.py --audit (the same predictions, N, seed and strata draw the "
                            "same rows: copy your verdicts over by audit_row)")
        try:
            if version != VERSION:
                raise ValueError("version")
            body["strata"] = (() if body["strata"] is None else  # stratified: read from the rows
                              tuple(Stratum(label, int(rows), int(drawn)) for label, rows, drawn in body["strata"]))
            body["code_columns"] = tuple(body["code_columns"])
            design = cls(**body)
        except (ValueError, TypeError, KeyError, AttributeError):
            raise UserError(f"{where}: its '{AUDIT}' column is not what predict.py --audit wrote; "
                            "restore it from the file predict.py wrote")
        if design.id != stated or design.stratified != (not design.strata):
            raise UserError(f"{where}: its '{AUDIT}' column was changed; restore it from the file "
                            "predict.py wrote")
        return design


def strata_digest(strata) -> str:
    """A digest of the strata's rows and draws, in order (not their labels: a re-save in
    another encoding may change a label's letters, which the scoring does not use)."""
    return "s-" + _hash(json.dumps([[s.rows, s.drawn] for s in strata]))[:12]


def row_check(audit_id: str, stratum: int, unit: str, codes: str) -> str:
    return "c-" + _hash(f"{audit_id}\x1f{stratum}\x1f{unit}\x1f{codes}")[:12]


def checks(audit_id: str, strata: np.ndarray, units: pd.Series, codes: pd.Series) -> list:
    return [row_check(audit_id, int(s), u, c) for s, u, c in zip(strata, units, codes)]


def unit_values(frame: pd.DataFrame, unit: str) -> pd.Series:
    """What places a row in the design: its row number (rows), the ranks of its draws
    (descriptions: whole numbers joined by a space); whole numbers as the normaliser reads
    them (a spreadsheet's 12.0 is 12)."""
    if unit == "rows":
        return code_text(frame, ROW)[0].reset_index(drop=True)
    text = code_text(frame, RANKS)[0].reset_index(drop=True)
    return text.map(lambda cell: " ".join(_whole(part) for part in cell.split()))


def _whole(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def ranks_text(ranks) -> str:
    return " ".join(str(int(r)) for r in sorted(ranks))


def verdict_columns(slots: int) -> list:
    return [CORRECT] + [TRUE_CODE.format(k + 1) for k in range(slots)] + [NOTE]


def own_columns(unit: str, predicted: list, slots: int, stratified: bool) -> list:
    """The audit's own columns: the unit's, the head's (code_k, prob_k, desc_k), the
    person's, the bookkeeping."""
    return ([ROW if unit == "rows" else DRAWS] + list(predicted) + verdict_columns(slots)
            + ([STRATUM, STRATUM_ROWS, STRATUM_DRAWN] if stratified else [])
            + ([] if unit == "rows" else [RANKS]) + [CHECK, AUDIT])


def input_names(kind: str, inputs, own: list) -> list:
    """The input's columns as an audit file of `kind` names them beside the audit's `own`
    columns: mixer.data.writing.output_names, which also keeps the input out of the
    true_code_k names the audit's reader takes as a person's codes (an input's
    true_code_9 beside true_code_1..3)."""
    from mixer.data.writing import output_names

    return output_names(kind, inputs, own, TRUE_CODE_COLUMN)[:len(inputs)]


# ------------------------------------------------------------------ reading it back
@dataclass
class Audit:
    """An audit file read back and checked: its rows, design, and each row's verdict."""

    frame: pd.DataFrame
    design: Design
    path: str
    stratum: np.ndarray  # each row's stratum number
    draws: np.ndarray  # rows of the design each row stands for (1 for unit rows)
    correct: np.ndarray  # True / False / None: the `correct` column
    true_columns: list  # true_code_k columns with a code somewhere
    has_codes: np.ndarray  # a true code given
    lines: np.ndarray = None  # each row's line in the file (2: the first under the header)
    ranks: list = None  # unit descriptions: each line's draws' places in its stratum's draw order

    def row_names(self, rows) -> str:
        """Rows named as a person finds them: by audit_row, else the file's line."""
        rows = list(np.flatnonzero(rows)) if np.asarray(rows).dtype == bool else list(rows)
        if self.design.unit == "rows":
            shown = [f"{ROW} {self.frame[ROW].iloc[r]}" for r in rows[:5]]
        else:
            shown = [f"line {self.lines[r]}" for r in rows[:5]]
        return ", ".join(shown) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")


_CHECK_CELL = re.compile(r"^c-[0-9a-f]{12}$")
_DESIGN_CELL = re.compile(r'^\{.*"id": "a-[0-9a-f]{12}"', re.S)  # Design.to_json's


def audit_rows(frame: pd.DataFrame) -> np.ndarray:
    """The rows of a table that carry an audit's bookkeeping as predict.py --audit writes it:
    an `audit` cell holding its design, or an `audit_check` cell, or both (an audit, or its
    rows copied into another table with one of those columns or both)."""
    rows = np.zeros(len(frame), dtype=bool)
    if AUDIT in frame.columns:  # the design is the same on every row: checked once per value
        ids, cells = pd.factorize(as_text(frame[AUDIT]).str.strip())
        rows |= np.asarray([bool(_DESIGN_CELL.match(cell)) for cell in cells], dtype=bool)[ids]
    if CHECK in frame.columns:
        rows |= as_text(frame[CHECK]).str.strip().str.match(_CHECK_CELL).to_numpy()
    return rows


def parse_verdicts(frame: pd.DataFrame, where: str, lines=None) -> np.ndarray:
    """yes/no (y/n, true/false, 1/0, right/wrong) -> True/False; blank -> None."""
    values = frame[CORRECT]
    text = code_text(frame, CORRECT)[0].str.lower()  # a spreadsheet's 1.0 is 1
    out = np.full(len(text), None, dtype=object)
    yes, no = text.isin(YES).to_numpy(), text.isin(NO).to_numpy()
    out[yes], out[no] = True, False
    bad = ~(yes | no) & text.ne("").to_numpy()
    if bad.any():
        rows = np.flatnonzero(bad)
        lines = np.arange(len(frame)) + 2 if lines is None else lines
        shown = ", ".join(f"line {lines[r]} {values.iloc[r]!r}" for r in rows[:5])
        raise UserError(f"{where}: '{CORRECT}' holds yes or no (or y/n, true/false, 1/0, right/wrong; nothing "
                        f"for a row not checked); {shown}{' ...' if len(rows) > 5 else ''}: fix these cells")
    return out


def _empty_rows(frame: pd.DataFrame) -> np.ndarray:
    """Rows whose every cell is blank: a row cleared in a spreadsheet (';;;;' in a CSV)."""
    empty = np.ones(len(frame), dtype=bool)
    for column in frame.columns:
        empty &= as_text(frame[column]).str.strip().eq("").to_numpy()
    return empty


def _named_lines(lines: np.ndarray, rows) -> str:
    rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows)
    return ", ".join(f"line {lines[r]}" for r in rows[:5]) + (" ..." if len(rows) > 5 else "")


def _whole_numbers(frame: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(code_text(frame, column)[0], errors="coerce").to_numpy(dtype=float)


def _strata_of_rows(frame: pd.DataFrame, design: Design, strata: np.ndarray, lines: np.ndarray,
                    where: str) -> tuple:
    """A stratified audit's strata, from its rows (STRATUM_ROWS, STRATUM_DRAWN, the label in
    the stratum column), checked against the digest in the `audit` cell."""
    sizes, drawn = _whole_numbers(frame, STRATUM_ROWS), _whole_numbers(frame, STRATUM_DRAWN)
    labels = as_text(frame[design.by_col]).str.strip() if design.by_col in frame.columns else None
    found = []
    for h in range(design.strata_count):
        rows = np.flatnonzero(strata == h)
        if not len(rows):
            raise UserError(f"{where}: no row of stratum {h} ({STRATUM} {h}) is left; restore its rows from "
                            "the file predict.py wrote (leave rows you did not check blank)")
        pairs = set(zip(sizes[rows], drawn[rows]))
        if len(pairs) != 1 or not all(np.isfinite(v) for v in next(iter(pairs))):
            raise UserError(f"{where}: the rows of stratum {h} ({_named_lines(lines, rows)}) differ in "
                            f"{STRATUM_ROWS} or {STRATUM_DRAWN}; restore them from the file predict.py wrote")
        size, count = next(iter(pairs))
        label = labels.iloc[rows[0]] if labels is not None else str(h)
        found.append(Stratum(label or None, int(size), int(count)))
    found = tuple(found)
    if strata_digest(found) != design.strata_digest:
        raise UserError(f"{where}: {STRATUM_ROWS} or {STRATUM_DRAWN} were changed; restore them from the file "
                        "predict.py wrote")
    return found


def _description_ranks(frame: pd.DataFrame, design: Design, strata: np.ndarray, units: pd.Series,
                       lines: np.ndarray, where: str) -> list:
    """Each line's ranks (unit descriptions), checked: as many as audit_draws says, each
    rank of a stratum on one line only, none beyond the stratum's draws."""
    ranks = [np.asarray([int(r) for r in cell.split()], dtype=np.int64) if cell else np.zeros(0, np.int64)
             for cell in units]
    stated = _whole_numbers(frame, DRAWS)
    wrong = np.asarray([len(r) != n for r, n in zip(ranks, stated)])
    if wrong.any():
        raise UserError(f"{where}: {_named_lines(lines, wrong)}: {DRAWS} differs from the ranks in {RANKS}; "
                        "restore them from the file predict.py wrote")
    for h, stratum in enumerate(design.strata):
        rows = np.flatnonzero(strata == h)
        held = np.concatenate([ranks[r] for r in rows]) if len(rows) else np.zeros(0, np.int64)
        owner = np.concatenate([np.full(len(ranks[r]), r) for r in rows]) if len(rows) else held
        values, counts = np.unique(held, return_counts=True)
        if (counts > 1).any():
            twice = values[counts > 1][0]
            copies = owner[held == twice]
            raise UserError(f"{where}: line {lines[copies[1]]} repeats line {lines[copies[0]]} (the same rows "
                            "drawn, counted twice); remove the copy")
        if len(held) > stratum.drawn or (len(held) and (held.min() < 1 or held.max() > stratum.drawn)):
            raise UserError(f"{where}: its lines stand for {len(held):,} rows drawn"
                            f"{f' in stratum {h}' if design.stratified else ''}, more than the "
                            f"{stratum.drawn:,} drawn; remove the lines copied or added")
    return ranks


def parse_audit(frame: pd.DataFrame, path: str, what: str = "--audit") -> Audit:
    """Check an audit read back (the design, each row's check, the verdicts) before any
    of it is used. Rows whose every cell is blank (cleared in a spreadsheet) are skipped."""
    where = f"{what} {path}"
    if not is_audit(frame):
        raise UserError(f"{where}: not an audit (no '{AUDIT}' and '{CHECK}' columns); pass the file "
                        "predict.py --audit wrote, filled in")
    empty = _empty_rows(frame)
    lines = np.flatnonzero(~empty) + 2
    attrs = frame.attrs
    frame = frame.loc[~empty].reset_index(drop=True)
    frame.attrs = attrs
    stated = as_text(frame[AUDIT]).str.strip()
    if stated.eq("").any():
        raise UserError(f"{where}: rows without '{AUDIT}' (e.g. line {lines[int(np.argmax(stated.eq('').to_numpy()))]}); "
                        "an audit's rows all come from predict.py; remove rows added by hand")
    if stated.nunique() > 1:
        raise UserError(f"{where}: holds rows of {stated.nunique()} audits; score each audit's file alone")
    if not len(frame):
        raise UserError(f"{where}: no rows; pass the file predict.py --audit wrote, filled in")
    design = Design.from_json(stated.iloc[0], where)
    unit_columns = [ROW] if design.unit == "rows" else [DRAWS, RANKS]
    needed = [*unit_columns, *design.audit_code_columns] + (
        [STRATUM, STRATUM_ROWS, STRATUM_DRAWN] if design.stratified else [])
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UserError(f"{where}: no column {', '.join(map(repr, missing))}; keep the columns "
                        "predict.py wrote (add your verdicts in correct and true_code_1..)")
    units = unit_values(frame, design.unit)
    count = design.strata_count if design.stratified else len(design.strata)
    strata = _whole_numbers(frame, STRATUM) if design.stratified else np.zeros(len(frame))
    valid_strata = np.isfinite(strata) & (strata >= 0) & (strata < count)
    strata = np.where(valid_strata, strata, 0).astype(np.int64)
    formatter = design.formatter
    codes = canonical_codes(frame, list(design.audit_code_columns), formatter)
    expected = checks(design.id, strata, units, codes)
    bad = ~valid_strata | (np.asarray(expected, dtype=object) != as_text(frame[CHECK]).str.strip().to_numpy())
    if bad.any():
        rows = np.flatnonzero(bad)
        raise UserError(f"{where}: {len(rows)} row(s) ({_named_lines(lines, rows)}) differ from what predict.py "
                        f"wrote in their predicted codes or {' or '.join(unit_columns)}, {STRATUM}, {CHECK}; "
                        "restore them (write your verdicts in correct and true_code_1.. only)")
    if design.stratified:
        import dataclasses

        design = dataclasses.replace(design, strata=_strata_of_rows(frame, design, strata, lines, where))
    ranks = None
    if design.unit == "rows":
        if units.duplicated().any():
            raise UserError(f"{where}: {ROW} {units[units.duplicated()].iloc[0]} appears twice; remove the copy")
        draws = np.ones(len(frame), dtype=np.int64)
    else:
        ranks = _description_ranks(frame, design, strata, units, lines, where)
        draws = np.asarray([len(r) for r in ranks], dtype=np.int64)
    correct = (parse_verdicts(frame, where, lines) if CORRECT in frame.columns
               else np.full(len(frame), None, dtype=object))
    true_columns = sorted((c for c in frame.columns if TRUE_CODE_COLUMN.match(str(c))),
                          key=lambda c: int(TRUE_CODE_COLUMN.match(c).group(1)))
    # the codes, predicted and true, from here on as the model spells them
    codes = {c: spelled(frame, c, formatter) for c in [*design.audit_code_columns, *true_columns]}
    frame = frame.assign(**codes)
    frame.attrs[NUMERIC_COLUMNS] = [c for c in frame.attrs.get(NUMERIC_COLUMNS, ()) if c not in codes]
    has_codes = np.zeros(len(frame), dtype=bool)
    for column in true_columns:
        has_codes |= frame[column].ne("").to_numpy()
    return Audit(frame, design, path, strata, draws, correct, true_columns, has_codes, lines, ranks)


def read_audit(path: str, options: TableOptions = TableOptions(role="audit"), log=None) -> Audit:
    """An audit file read by the one reader, with its role's options, and checked."""
    from mixer.data.reading import read_table

    return parse_audit(read_table(path, options, log=log), path, options.what)


def check_drawn_from(audit: Audit, predictions: pd.DataFrame, path: str) -> None:
    """Refuse predictions other than those the audit was drawn from."""
    design = audit.design
    columns = [design.text_col, *design.code_columns]
    missing = [c for c in columns if c not in predictions.columns]
    digest = PredictionsDigest(design.formatter)
    if not missing:
        digest.update(predictions[design.text_col], predictions, list(design.code_columns))
    if missing or digest.hexdigest() != design.predictions:
        found = (f"it lacks {', '.join(map(repr, missing))}" if missing
                 else f"its {digest.rows:,} rows fingerprint {digest.hexdigest()}")
        raise UserError(f"--audit {audit.path}: drawn from other predictions ({design.predicted_rows:,} rows "
                        f"fingerprinted {design.predictions}, by {design.source}) than --predictions "
                        f"{path} ({found}); score it with the predictions it was drawn from")


# ------------------------------------------------------------------ training on an audit
_TRAIN_REFUSAL = ("its rows measure the model, and a model trained or validated on them is measured on rows "
                  "it has seen; pass --train-on-audit to use them anyway (the next audit of the new model's "
                  "predictions is then drawn from the other rows)")


def refuse_audit_rows(table: pd.DataFrame, path: str, what: str, allowed: bool) -> None:
    """--dataset, --train-data, --val-data (a DataFrame given to finetune() is a --dataset):
    rows that carry an audit's bookkeeping (audit_rows) are audit rows, refused unless
    --train-on-audit; with it they are used as they are, and recorded (trained_descriptions).
    Rows copied without those columns cannot be told from any other row."""
    rows = audit_rows(table)
    if rows.any() and not allowed:
        raise UserError(f"{what} {path}: {int(rows.sum()):,} row(s) of an audit (predict.py --audit; e.g. row "
                        f"{row_names(table, [np.argmax(rows)])[0]}, by its '{AUDIT}' or '{CHECK}' cell): "
                        f"{_TRAIN_REFUSAL}, or remove those rows")


def training_table(table: pd.DataFrame, path: str, allowed: bool) -> pd.DataFrame:
    """--extra-train: a file that is not an audit as it is; an audit refused unless
    --train-on-audit, else its checked rows as checked_1.. (the true codes, or the
    predicted codes where `correct` says yes)."""
    if not is_audit(table) and not audit_rows(table).any():
        return table
    if not allowed:
        raise UserError(f"--extra-train {path}: an audit (predict.py --audit): {_TRAIN_REFUSAL}")
    if not is_audit(table):  # one of its two columns kept: the rows are used as the table has them
        return table
    audit = parse_audit(table, path, "--extra-train")
    out = audit.frame.copy()
    truth = _truth_cells(audit)
    for k, column in enumerate(truth):
        out[f"checked_{k + 1}"] = column
    return out


def _truth_cells(audit: Audit) -> list:
    """Per code slot, the right code of each row that can train: its true codes, or its
    predicted codes when `correct` says yes and none are written; '' otherwise."""
    predicted = list(audit.design.audit_code_columns)
    slots = max(len(predicted), len(audit.true_columns))
    yes = np.asarray([c is True for c in audit.correct])
    blank = np.full(len(audit.frame), "", dtype=object)
    cells = []
    for k in range(slots):  # the codes are spelled (parse_audit)
        given = audit.frame[audit.true_columns[k]].to_numpy(dtype=object) if k < len(audit.true_columns) else blank
        own = audit.frame[predicted[k]].to_numpy(dtype=object) if k < len(predicted) else blank
        cells.append(np.where(audit.has_codes, given, np.where(yes, own, "")))
    return cells


def trained_descriptions(paths: list, options: TableOptions = TableOptions(role="extra_train"),
                         previous=(), tables=()) -> list:
    """The description keys of the audit rows a run trains on, with those its starting run
    trained on: the rows the next audit leaves out. `paths`: the --extra-train files (read
    with `options`, the role's), whose audits' checked rows train; `tables`: (path,
    options, text column) of the --dataset, --train-data and --val-data files, whose rows
    that carry an audit's bookkeeping (audit_rows) all count, validation rows included."""
    from mixer.data.reading import read_table

    keys = set(previous or ())
    for path, table_options, text_col in tables:
        table = read_table(path, table_options)
        rows = audit_rows(table)
        if rows.any() and text_col in table.columns:
            keys.update(description_keys(table.loc[rows, text_col]))
    for path in paths:
        table = read_table(path, options)
        if is_audit(table):
            audit = parse_audit(table, path, options.what)
            trained = np.asarray([bool(c) for c in _truth_cells(audit)[0]])
            keys.update(description_keys(audit.frame.loc[trained, audit.design.audit_text_col]))
    return sorted(keys)

"""The audit file's columns and its design: a random sample of predictions for a person
to check by hand (`predict.py --audit`), read back to be scored (`evaluate.py --audit`) or,
when asked for, to train on (`--extra-train AUDIT --train-on-audit`). docs/evaluation.md,
"Audits". Drawn by mixer.audit.draw, read back by mixer.audit.verdicts.

Each row carries the predicted codes (code_k, prob_k, desc_k) and empty columns for the
person: `correct` (yes or no) and `true_code_1..` (the right codes), and `note`. Three
bookkeeping columns tie it to where it came from, in cells that survive Excel (text
that no spreadsheet reads as a number or a date).

- `audit`: the design, as JSON in ASCII (any 8-bit re-save keeps it), the same on every
  row. It holds how it was drawn: unit, stratum column, seed, and each stratum's rows and
  draws. A stratified audit holds their number and a digest of them instead, so the cell
  stays short whatever the number of strata. It also holds fingerprints of the predictions
  it was drawn from (their descriptions and codes, row by row) and of the model (its
  weights). Its id is a hash of all of it, so an edit shows.
- `audit_check`: per row, a hash of the id, the row's place in the design and its
  predicted codes, so a row pasted from another audit, or codes changed by hand, show.
- `audit_stratum`, `audit_stratum_rows`, `audit_stratum_drawn` (stratified audits): per
  row, its stratum's number in the design, that stratum's rows in the file and rows drawn
  (checked against the digest in `audit`).
- `audit_ranks` (unit descriptions): the places, in their stratum's draw order, of the
  rows drawn that the line stands for (`audit_draws` of them). So a person who stops
  early is scored on the rows drawn before the first line left blank.

The file is written by mixer.data.tables.writing, its columns named by output_names: an input
column that would take one of the audit's names is written <name>_input. It is read back by
mixer.data.tables.reading with the options of its role (evaluate.py's --audit-encoding, ...;
--extra-train's for an audit trained on). Its codes, predicted and true, are read as the
model spells its codes (mixer.data.labels.normalise, with the model's code system, which the
design carries). A spreadsheet's '64100.0' is 64100, and digit codes that lost their
leading zeros get them back where the model's codes have a known width (HISCO's 5, a
--key's or --zero-padded-codes' width), as training reads them. What a spreadsheet does
to such codes is not an edit; where the width is not known, a code that lost its zeros is
another code.

No torch here.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.labels.normalise import code_column, code_text
from mixer.data.tables.reading import as_text

AUDIT = "audit"
CHECK = "audit_check"
CORRECT = "correct"
TRUE_CODE_COLUMN = re.compile(r"^true_code_(\d+)$")
STRATUM = "audit_stratum"
STRATUM_ROWS = "audit_stratum_rows"  # its stratum's rows in the file
STRATUM_DRAWN = "audit_stratum_drawn"  # its stratum's rows drawn
ROW = (
    "audit_row"  # unit rows: the row's number in the predicted file (1: the first under the header)
)
DRAWS = "audit_draws"  # unit descriptions: the rows drawn that have this description
RANKS = (
    "audit_ranks"  # unit descriptions: their places in the stratum's draw order (1: drawn first)
)
NOTE = "note"
TRUE_CODE = "true_code_{}"
UNITS = ("rows", "descriptions")
VERSION = (
    3  # 3: ASCII design, strata by digest, descriptions with their ranks; 2: codes spelled as the
)
# model spells them (1 compared them without leading zeros)
# what the model's formatter says of how its codes are spelled (mixer.data.labels.normalise.width_of)
SPELLING = ("kind", "block_size", "use_within_block_sep", "allow_short", "digit_width")

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
    """A column of codes as the model spells them (mixer.data.labels.normalise.code_column)."""
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
        self.tee = None  # a file that keeps the bytes hashed, for a killed job to hash again (keep)

    def update(self, texts: pd.Series, codes: pd.DataFrame, columns: list) -> None:
        codes = canonical_codes(codes, columns, self.formatter)
        lines = descriptions(texts).reset_index(drop=True) + "\x1e" + codes
        data = ("\n".join(lines.tolist()) + "\n").encode("utf-8")
        self._hash.update(data)
        if self.tee is not None:
            self.tee.write(data)
        self.rows += len(lines)

    def keep(self, path: str, state: Optional[tuple] = None) -> bool:
        """Keep the bytes hashed in `path` (the hash itself cannot be saved); with `state` (what
        state() gave), the hash and rows of a killed job's digest taken up again from it.
        Whether they were: the bytes kept are known by their checksum in `state`, not by their
        length, so that a file a lost node left cut short, with zeros where its tail was, or
        garbled is not taken for the rows hashed. Such a digest (False) starts again from no
        row, its file emptied, for the caller to hash the rows again (AuditSink.replay)."""
        if not state:
            self.tee = open(path, "wb")
            return True
        rows, size, checksum = (tuple(state) + (None,))[:3]  # a state without one: hashed again
        self.tee = open(path, "r+b" if os.path.exists(path) else "w+b")
        self.tee.truncate(size)  # what a chunk after the last journal entry wrote goes
        while True:
            block = self.tee.read(1 << 24)
            if not block:
                break
            self._hash.update(block)
        if self.tee.tell() == size and self._hash.hexdigest() == checksum:
            self.rows = rows
            return True
        self._hash.reset()
        self.tee.seek(0)
        self.tee.truncate(0)
        return False

    def state(self) -> tuple:
        """(rows, bytes kept, their checksum) so far, with keep(): the bytes on the disk before
        the journal that names them (mixer.prediction.resume)."""
        self.tee.flush()
        os.fsync(self.tee.fileno())
        return self.rows, self.tee.tell(), self._hash.hexdigest()

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
    strata_count: int = (
        0  # stratified: the number of strata, in the `audit` cell beside their digest
    )
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
        if (
            self.stratified
        ):  # the strata by digest: their rows and draws are on the rows (STRATUM_...)
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
            raise UserError(
                f"{where}: drawn by an earlier mixer (audit version {version}); draw the audit "
                "again with predict.py --audit (the same predictions, N, seed and strata draw the "
                "same rows: copy your verdicts over by audit_row)"
            )
        try:
            if version != VERSION:
                raise ValueError("version")
            body["strata"] = (
                ()
                if body["strata"] is None
                # stratified: read from the rows
                else tuple(
                    Stratum(label, int(rows), int(drawn)) for label, rows, drawn in body["strata"]
                )
            )
            body["code_columns"] = tuple(body["code_columns"])
            design = cls(**body)
        except (ValueError, TypeError, KeyError, AttributeError):
            raise UserError(
                f"{where}: its '{AUDIT}' column is not what predict.py --audit wrote; "
                "restore it from the file predict.py wrote"
            )
        if design.id != stated or design.stratified != (not design.strata):
            raise UserError(
                f"{where}: its '{AUDIT}' column was changed; restore it from the file "
                "predict.py wrote"
            )
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
    return (
        [ROW if unit == "rows" else DRAWS]
        + list(predicted)
        + verdict_columns(slots)
        + ([STRATUM, STRATUM_ROWS, STRATUM_DRAWN] if stratified else [])
        + ([] if unit == "rows" else [RANKS])
        + [CHECK, AUDIT]
    )


def input_names(kind: str, inputs, own: list) -> list:
    """The input's columns as an audit file of `kind` names them beside the audit's `own`
    columns: mixer.data.tables.writing.output_names, which also keeps the input out of the
    true_code_k names the audit's reader takes as a person's codes (an input's
    true_code_9 beside true_code_1..3)."""
    from mixer.data.tables.writing import output_names

    return output_names(kind, inputs, own, TRUE_CODE_COLUMN)[: len(inputs)]


def is_audit(frame: pd.DataFrame) -> bool:
    return AUDIT in frame.columns and CHECK in frame.columns


_CHECK_CELL = re.compile(r"^c-[0-9a-f]{12}$")
_DESIGN_CELL = re.compile(r'^\{.*"id": "a-[0-9a-f]{12}"', re.S)  # Design.to_json's


def audit_rows(frame: pd.DataFrame) -> np.ndarray:
    """The rows of a table that carry an audit's bookkeeping as predict.py --audit writes
    it. They hold an `audit` cell holding its design, or an `audit_check` cell, or both (an
    audit, or its
    rows copied into another table with one of those columns or both)."""
    rows = np.zeros(len(frame), dtype=bool)
    if AUDIT in frame.columns:  # the design is the same on every row: checked once per value
        ids, cells = pd.factorize(as_text(frame[AUDIT]).str.strip())
        rows |= np.asarray([bool(_DESIGN_CELL.match(cell)) for cell in cells], dtype=bool)[ids]
    if CHECK in frame.columns:
        rows |= as_text(frame[CHECK]).str.strip().str.match(_CHECK_CELL).to_numpy()
    return rows

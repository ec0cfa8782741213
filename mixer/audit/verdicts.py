"""An audit a person has filled in, read back. Its design, each row's check and the
verdicts checked before any of it is used (parse_audit). The predictions it was drawn from
are checked (check_drawn_from). It is never overwritten by an output (refuse_filled_audit,
among mixer.audit.guards.GUARDS, which the layers above pass to writing).

No torch here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mixer.audit.file import (
    AUDIT,
    CHECK,
    CORRECT,
    DRAWS,
    RANKS,
    ROW,
    STRATUM,
    STRATUM_DRAWN,
    STRATUM_ROWS,
    TRUE_CODE_COLUMN,
    Design,
    PredictionsDigest,
    Stratum,
    canonical_codes,
    checks,
    is_audit,
    spelled,
    strata_digest,
    unit_values,
)
from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.data.labels.normalise import code_text
from mixer.data.tables.reading import NUMERIC_COLUMNS, as_text, column_names, read_table

YES = {"yes", "y", "true", "1", "right", "correct"}
NO = {"no", "n", "false", "0", "wrong", "incorrect"}


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
        raise UserError(
            f"{where}: '{CORRECT}' holds yes or no (or y/n, true/false, 1/0, right/wrong; nothing "
            f"for a row not checked); {shown}{' ...' if len(rows) > 5 else ''}: fix these cells"
        )
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


def _strata_of_rows(
    frame: pd.DataFrame, design: Design, strata: np.ndarray, lines: np.ndarray, where: str
) -> tuple:
    """A stratified audit's strata, from its rows (STRATUM_ROWS, STRATUM_DRAWN, the label in
    the stratum column), checked against the digest in the `audit` cell."""
    sizes, drawn = _whole_numbers(frame, STRATUM_ROWS), _whole_numbers(frame, STRATUM_DRAWN)
    labels = as_text(frame[design.by_col]).str.strip() if design.by_col in frame.columns else None
    found = []
    for h in range(design.strata_count):
        rows = np.flatnonzero(strata == h)
        if not len(rows):
            raise UserError(
                f"{where}: no row of stratum {h} ({STRATUM} {h}) is left; restore its rows from "
                "the file predict.py wrote (leave rows you did not check blank)"
            )
        pairs = set(zip(sizes[rows], drawn[rows]))
        if len(pairs) != 1 or not all(np.isfinite(v) for v in next(iter(pairs))):
            raise UserError(
                f"{where}: the rows of stratum {h} ({_named_lines(lines, rows)}) differ in "
                f"{STRATUM_ROWS} or {STRATUM_DRAWN}; restore them from the file predict.py wrote"
            )
        size, count = next(iter(pairs))
        label = labels.iloc[rows[0]] if labels is not None else str(h)
        found.append(Stratum(label or None, int(size), int(count)))
    found = tuple(found)
    if strata_digest(found) != design.strata_digest:
        raise UserError(
            f"{where}: {STRATUM_ROWS} or {STRATUM_DRAWN} were changed; restore them from the file "
            "predict.py wrote"
        )
    return found


def _description_ranks(
    frame: pd.DataFrame,
    design: Design,
    strata: np.ndarray,
    units: pd.Series,
    lines: np.ndarray,
    where: str,
) -> list:
    """Each line's ranks (unit descriptions), checked: as many as audit_draws says, each
    rank of a stratum on one line only, none beyond the stratum's draws."""
    ranks = [
        np.asarray([int(r) for r in cell.split()], dtype=np.int64)
        if cell
        else np.zeros(0, np.int64)
        for cell in units
    ]
    stated = _whole_numbers(frame, DRAWS)
    wrong = np.asarray([len(r) != n for r, n in zip(ranks, stated)])
    if wrong.any():
        raise UserError(
            f"{where}: {_named_lines(lines, wrong)}: {DRAWS} differs from the ranks in {RANKS}; "
            "restore them from the file predict.py wrote"
        )
    for h, stratum in enumerate(design.strata):
        rows = np.flatnonzero(strata == h)
        held = np.concatenate([ranks[r] for r in rows]) if len(rows) else np.zeros(0, np.int64)
        owner = np.concatenate([np.full(len(ranks[r]), r) for r in rows]) if len(rows) else held
        values, counts = np.unique(held, return_counts=True)
        if (counts > 1).any():
            twice = values[counts > 1][0]
            copies = owner[held == twice]
            raise UserError(
                f"{where}: line {lines[copies[1]]} repeats line {lines[copies[0]]} (the same rows "
                "drawn, counted twice); remove the copy"
            )
        if len(held) > stratum.drawn or (
            len(held) and (held.min() < 1 or held.max() > stratum.drawn)
        ):
            raise UserError(
                f"{where}: its lines stand for {len(held):,} rows drawn"
                f"{f' in stratum {h}' if design.stratified else ''}, more than the "
                f"{stratum.drawn:,} drawn; remove the lines copied or added"
            )
    return ranks


def parse_audit(frame: pd.DataFrame, path: str, file_flag: str = "--audit") -> Audit:
    """Check an audit read back (the design, each row's check, the verdicts) before any
    of it is used. Rows whose every cell is blank (cleared in a spreadsheet) are skipped."""
    where = f"{file_flag} {path}"
    if not is_audit(frame):
        raise UserError(
            f"{where}: not an audit (no '{AUDIT}' and '{CHECK}' columns); pass the file "
            "predict.py --audit wrote, filled in"
        )
    empty = _empty_rows(frame)
    lines = np.flatnonzero(~empty) + 2
    attrs = frame.attrs
    frame = frame.loc[~empty].reset_index(drop=True)
    frame.attrs = attrs
    stated = as_text(frame[AUDIT]).str.strip()
    if stated.eq("").any():
        raise UserError(
            f"{where}: rows without '{AUDIT}' (e.g. line {lines[int(np.argmax(stated.eq('').to_numpy()))]}); "
            "an audit's rows all come from predict.py; remove rows added by hand"
        )
    if stated.nunique() > 1:
        raise UserError(
            f"{where}: holds rows of {stated.nunique()} audits; score each audit's file alone"
        )
    if not len(frame):
        raise UserError(f"{where}: no rows; pass the file predict.py --audit wrote, filled in")
    design = Design.from_json(stated.iloc[0], where)
    unit_columns = [ROW] if design.unit == "rows" else [DRAWS, RANKS]
    needed = [*unit_columns, *design.audit_code_columns] + (
        [STRATUM, STRATUM_ROWS, STRATUM_DRAWN] if design.stratified else []
    )
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UserError(
            f"{where}: no column {', '.join(map(repr, missing))}; keep the columns "
            "predict.py wrote (add your verdicts in correct and true_code_1..)"
        )
    units = unit_values(frame, design.unit)
    count = design.strata_count if design.stratified else len(design.strata)
    strata = _whole_numbers(frame, STRATUM) if design.stratified else np.zeros(len(frame))
    valid_strata = np.isfinite(strata) & (strata >= 0) & (strata < count)
    strata = np.where(valid_strata, strata, 0).astype(np.int64)
    formatter = design.formatter
    codes = canonical_codes(frame, list(design.audit_code_columns), formatter)
    expected = checks(design.id, strata, units, codes)
    bad = ~valid_strata | (
        np.asarray(expected, dtype=object) != as_text(frame[CHECK]).str.strip().to_numpy()
    )
    if bad.any():
        rows = np.flatnonzero(bad)
        raise UserError(
            f"{where}: {len(rows)} row(s) ({_named_lines(lines, rows)}) differ from what predict.py "
            f"wrote in their predicted codes or {' or '.join(unit_columns)}, {STRATUM}, {CHECK}; "
            "restore them (write your verdicts in correct and true_code_1.. only)"
        )
    if design.stratified:
        import dataclasses

        design = dataclasses.replace(
            design, strata=_strata_of_rows(frame, design, strata, lines, where)
        )
    ranks = None
    if design.unit == "rows":
        if units.duplicated().any():
            raise UserError(
                f"{where}: {ROW} {units[units.duplicated()].iloc[0]} appears twice; remove the copy"
            )
        draws = np.ones(len(frame), dtype=np.int64)
    else:
        ranks = _description_ranks(frame, design, strata, units, lines, where)
        draws = np.asarray([len(r) for r in ranks], dtype=np.int64)
    correct = (
        parse_verdicts(frame, where, lines)
        if CORRECT in frame.columns
        else np.full(len(frame), None, dtype=object)
    )
    true_columns = sorted(
        (c for c in frame.columns if TRUE_CODE_COLUMN.match(str(c))),
        key=lambda c: int(TRUE_CODE_COLUMN.match(c).group(1)),
    )
    # the codes, predicted and true, from here on as the model spells them
    codes = {c: spelled(frame, c, formatter) for c in [*design.audit_code_columns, *true_columns]}
    frame = frame.assign(**codes)
    frame.attrs[NUMERIC_COLUMNS] = [
        c for c in frame.attrs.get(NUMERIC_COLUMNS, ()) if c not in codes
    ]
    has_codes = np.zeros(len(frame), dtype=bool)
    for column in true_columns:
        has_codes |= frame[column].ne("").to_numpy()
    return Audit(frame, design, path, strata, draws, correct, true_columns, has_codes, lines, ranks)


def read_audit(path: str, options: TableOptions = TableOptions(role="audit"), log=None) -> Audit:
    """An audit file read by the one reader, with its role's options, and checked."""
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
        found = (
            f"it lacks {', '.join(map(repr, missing))}"
            if missing
            else f"its {digest.rows:,} rows fingerprint {digest.hexdigest()}"
        )
        raise UserError(
            f"--audit {audit.path}: drawn from other predictions ({design.predicted_rows:,} rows "
            f"fingerprinted {design.predictions}, by {design.source}) than --predictions "
            f"{path} ({found}); score it with the predictions it was drawn from"
        )


# ------------------------------------------------------------------ never overwritten
def holds_verdicts(path: str) -> bool:
    """Whether an existing file is an audit with a verdict in it (a `correct` cell or a true
    code filled): what an output must not overwrite. Files that cannot be an audit (a
    CSV file whose first line does not name audit_check, a workbook or other table over
    16 MiB) or cannot be read are not read through."""
    if not os.path.isfile(path):
        return False
    kind = path.lower().rsplit(".", 1)[-1]
    if kind in ("csv", "tsv", "txt"):
        with open(path, "rb") as handle:
            if CHECK.encode() not in handle.read(1 << 16).split(b"\n", 1)[0]:
                return False
    elif os.path.getsize(path) > 16 << 20 or CHECK not in (column_names(path) or [CHECK]):
        return False
    table = None
    for encoding in ("utf-8", "cp1252"):  # as predict.py wrote it, or as Excel re-saved it
        try:
            table = read_table(path, TableOptions(role="audit", encoding=encoding))
            break
        except UserError:
            continue
    if table is None or not is_audit(table):
        return False
    columns = [c for c in table.columns if c == CORRECT or TRUE_CODE_COLUMN.match(str(c))]
    return any(as_text(table[c]).str.strip().ne("").any() for c in columns)


def refuse_filled_audit(path: str, file_flag: str) -> None:
    """An output that would replace an audit a person has filled in: refused."""
    if holds_verdicts(path):
        raise UserError(
            f"{file_flag} {path}: an audit with verdicts in it, which this would replace; write to "
            "another file, or delete it first if its verdicts are not wanted"
        )

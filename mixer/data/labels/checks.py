"""Label checks: the text and the codes of every row of a table, vectorised over columns
(a formatter looks at each distinct code once). Bad rows are an error naming them, or
dropped with --drop-bad-labels; the rows kept have the prepared columns
(mixer.data.labels.columns). No torch import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.config import DataConfig
from mixer.core.errors import UserError
from mixer.data.labels.columns import DESC_CHARS, LANG, REPORT_PREFIX, TEXT, code_columns
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.labels.normalise import code_column, describe_restored, model_input
from mixer.data.tables.job_columns import blank_descriptions
from mixer.data.tables.reading import as_text, require_columns, row_names


@dataclass
class Checked:
    """Rows of one table after label checks."""

    frame: pd.DataFrame  # text, lang, code_1..code_K (normalised, '' = none), row
    dropped: int
    codes: set  # the distinct codes of the kept rows


def check_rows(
    frame: pd.DataFrame,
    cfg: DataConfig,
    formatter: CodeFormatter,
    path: str,
    known: Optional[set] = None,
    allowed: Optional[set] = None,
    log=None,
    why: str = "",
    numbers: Optional[np.ndarray] = None,
) -> Checked:
    """Validate text and codes of every row, vectorised; bad rows are an error
    naming them, or dropped with --drop-bad-labels. Codes are first spelled as the code
    system spells them (mixer.data.labels.normalise; `why` says why its digit codes have a fixed
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
    empty_text = blank_descriptions(text)  # spaces, a zero-width space, ...: nothing to learn
    desc_chars = text.str.len().to_numpy(dtype=np.int32)
    n_rows, n_cols = len(frame), len(cfg.target_cols)
    # the whole context: the tokeniser fits it to the model's input (mixer.data.inputs.tokens)
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
            no_code &= cells.iloc[column * n_rows : (column + 1) * n_rows].eq("").to_numpy()
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
        cell_reason = np.where(
            not_whole, "not a whole number (the column holds numbers)", cell_reason
        )
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
        shown = row_names(
            frame, np.arange(n_rows), numbers
        )  # a workbook's: also as Excel numbers them
        raise UserError(_describe_bad_rows(path, problems, bad_cells, cell_reason, raw, cfg, shown))

    lang = (
        frame[cfg.language_col].astype("str").str.strip().reset_index(drop=True)
        if cfg.language_col
        else pd.Categorical.from_codes(np.zeros(n_rows, dtype=np.int8), [cfg.language or "unk"])
    )
    # Codes are packed to the left: empty slots last, so block k is the k-th code.
    order = np.argsort(codes == "", axis=1, kind="stable")
    cell_code = np.take_along_axis(cell_code, order, axis=1)
    # categorical columns: no string copies per row, dictionary-encoded in Parquet
    categories = pd.Index(code_names, dtype=object)
    out = pd.DataFrame({TEXT: text.reset_index(drop=True), LANG: lang})
    if cfg.context_cols:  # training noise edits the description, never the context
        out[DESC_CHARS] = desc_chars
    for column in cfg.report_cols:  # breakdowns of the run's final evaluation, as text
        out[REPORT_PREFIX + column] = (
            as_text(frame[column]).reset_index(drop=True).astype("category")
        )
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
                examples.append(
                    f"row {numbers[row]} {cfg.target_cols[col]}={str(raw[row, col])!r}: "
                    f"{cell_reason[row, col]}"
                )
            parts.append(f"{len(rows)} row(s) with bad codes ({'; '.join(examples)})")
        else:
            shown = ", ".join(str(numbers[r]) for r in rows[:5])
            parts.append(
                f"{len(rows)} row(s) with {what} (rows {shown}{', ...' if len(rows) > 5 else ''})"
            )
    return (
        f"{path}: "
        + "; ".join(parts)
        + ". Fix these rows or pass --drop-bad-labels to skip them (rows count from 1 after the header)"
    )


def check_empty_code_label(cfg: DataConfig, formatter: CodeFormatter, known, allowed) -> None:
    label = cfg.empty_code_label
    if label.strip() != label or label == "":
        raise UserError(f"--empty-code-label {label!r}: give a code without spaces, e.g. -1")
    code, reason = formatter.check(label, known)
    if reason or code != label:
        raise UserError(
            f"--empty-code-label {label!r}: {reason or f'is written {code!r} in this code system'}; "
            "give a code the code system accepts"
        )
    if allowed is not None and label not in allowed:
        raise UserError(
            f"--empty-code-label {label!r} is not in --key {cfg.key_file}; add it there"
        )

"""Classes beside the codes (--crosswalk, Model.predict(crosswalk=)): the one place a
prediction's code table, OccCANINE's table or the alternatives get their class columns
(mixer.data.labels.crosswalk.with_classes), called where predict.py's job and the API build
their output frame; the codes without a class counted over the whole file and said in one
line at the end. docs/classes.md.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

import pandas as pd

from mixer.core.errors import UserError
from mixer.data.labels.crosswalk import check_names, load_crosswalk, with_classes

CONTEXT = ("status", "relation", "product")  # PredictConfig's fields: the input's columns
CONTEXT_FLAGS = {"status": "--status-col", "relation": "--relation-col", "product": "--product-col"}
EXAMPLES = 3  # codes without a class named in the closing line


def names_of(crosswalk) -> list:
    """--crosswalk's values, or the API's crosswalk= (a name or path, or a list of them)."""
    if crosswalk is None:
        return []
    return [crosswalk] if isinstance(crosswalk, str) else [str(c) for c in crosswalk]


def load(crosswalk, formatter=None, options=None, width=None) -> list:
    """The crosswalks named, each read once and checked (distinct names); width: without a
    model, the digit width a user's table's codes are restored to (evaluate.py's
    --code-length)."""
    walks = [load_crosswalk(name, formatter, options, width) for name in names_of(crosswalk)]
    check_names(walks)
    return walks


def code_columns(table: pd.DataFrame, stem: str, prefixes=("",)) -> dict:
    """{prefix: the columns <prefix><stem>_k of `table`, by k}: a head's codes (stem 'code'
    for mixer's tables, the code system's name for OccCANINE's)."""
    found = {}
    for prefix in prefixes:
        pattern = re.compile(re.escape(f"{prefix}{stem}_") + r"(\d+)$")
        slots = sorted((int(m.group(1)), c) for c in table.columns if (m := pattern.match(str(c))))
        found[prefix] = [c for _, c in slots]
    return found


class Classes:
    """The crosswalks of one job and the codes each left without a class, over its chunks
    (a state a resumed job continues from)."""

    def __init__(self, walks: list, flag: str = "--crosswalk"):
        self.walks, self.flag = walks, flag
        self.unclassed = {walk.name: Counter() for walk in walks}

    def add(self, table: pd.DataFrame, codes: dict, context: Optional[dict] = None):
        """`table` with the class columns of every crosswalk; codes: code_columns();
        context: {status, relation, product: each row's values} where named."""
        context = context or {}
        table, missing = with_classes(
            table, self.walks, codes, *(context.get(name) for name in CONTEXT)
        )
        for name, found in missing.items():
            self.unclassed[name].update(found.tolist())
        return table

    def line(self) -> Optional[str]:
        """One line on the codes that got no class (None when every code got one)."""
        parts = []
        for name, counts in self.unclassed.items():
            total = sum(counts.values())
            if total:
                shown = ", ".join(f"{code} ({n:,})" for code, n in counts.most_common(EXAMPLES))
                parts.append(f"{name} {total:,} (most: {shown})")
        if not parts:
            return None
        return (
            f"{self.flag}: code(s) the table gives no class, left blank: {'; '.join(parts)}; "
            "docs/classes.md says why a code may have none"
        )

    def state_dict(self) -> dict:
        return {name: dict(counts) for name, counts in self.unclassed.items()}

    def load_state_dict(self, state: Optional[dict]) -> None:
        for name, counts in (state or {}).items():
            self.unclassed[name] = Counter(counts)


def context_values(frame: pd.DataFrame, config, where: str, repeat: int = 1) -> dict:
    """{status, relation, product: the input's values} of the columns named (a column
    missing from `frame` refused in one line); each value `repeat` times (the alternatives'
    rows)."""
    from mixer.data.tables.reading import missing_column

    values = {}
    for name in CONTEXT:
        column = getattr(config, name)
        if not column:
            continue
        if column not in frame.columns:
            raise missing_column(column, frame.columns, where, CONTEXT_FLAGS[name])
        series = frame[column].reset_index(drop=True)
        values[name] = series.repeat(repeat).reset_index(drop=True) if repeat > 1 else series
    return values


def refuse_without_codes(config, codes: bool = True) -> None:
    """--crosswalk where the job writes no codes (`codes`: whether an output of the job reads
    the code table, mixer.prediction.sinks.reads), or only a matrix: one line, nothing run."""
    from mixer.data.tables.sinks import is_matrix

    if not config.outputs.crosswalk:
        return
    if is_matrix(config):
        raise UserError(
            f"--crosswalk adds classes beside codes, and --what {config.outputs.what} writes a matrix "
            "with a column per code: leave out one of them"
        )
    if not codes:
        raise UserError(
            "--crosswalk adds classes beside the codes of --output, --to-check or --audit; "
            "pass one of them"
        )


def for_api(crosswalk, what: str, formatter, status=None, relation=None, product=None) -> list:
    """The crosswalks Model.predict(crosswalk=) names, read with the model's code system;
    refused beside a matrix, and status=, relation=, product= without one."""
    if crosswalk is None:
        if any(value is not None for value in (status, relation, product)):
            raise UserError(
                "status=, relation= and product= pick a crosswalk's rows: pass crosswalk="
            )
        return []
    if what != "codes":
        raise UserError(
            f"crosswalk= adds classes beside codes, and what={what!r} is a matrix with a "
            "column per code: leave out one of them"
        )
    return load(crosswalk, formatter)


def add_for_api(table: pd.DataFrame, walks: list, stem: str, index, picks: dict) -> pd.DataFrame:
    """Model.predict's code table with its crosswalks' classes (the codes without one said on
    stderr); picks: {status, relation, product: one value, or one per row (paired with the
    texts' `index`)} where given."""
    import sys

    from mixer.prediction.rows import per_row

    values = {name: per_row(name, v, index) for name, v in picks.items() if v is not None}
    classes = Classes(walks, flag="crosswalk=")
    table = classes.add(table, code_columns(table, stem), values)
    if line := classes.line():
        print(line, file=sys.stderr)
    return table

"""Crosswalks: codes mapped to classes (many codes to one class), for classes beside the codes.

The interface every layer above uses (stable):

    CROSSWALKS                      the names mixer ships: hisclass, hisclass_5, socpo, hiscam
    load_crosswalk(name_or_path, formatter=None, options=None, width=None) -> Crosswalk
        a shipped name, or a user's table (CSV, Parquet, Excel, Stata; read by the one reader,
        mixer.data.tables.reading) with the columns code and class, and label if it likes;
        `formatter` (the model's CodeFormatter) spells the table's codes as the model writes
        them (zeros restored); without a model, `width` (evaluate.py's --code-length) gives
        the table's digit codes shorter than it their zeros back, as the scored codes get
        them; `options` (TableOptions) how the file is read
    Crosswalk.name                  the name the output columns take (a file's: its stem)
    Crosswalk.numeric               True for a score (HISCAM), not a class
    Crosswalk.labelled              whether its classes have labels (label columns written)
    Crosswalk.classes               the classes the table gives, in their order (1, 2, ... 13)
    Crosswalk.classify(codes, status=None, relation=None, product=None) -> pd.Series[str]
        each code's class, '' where the table gives none (an unknown code, a blank code, a
        row of the table without a class); the HISCO tables compare codes as the model writes
        them (5 digits, zeros restored: the table writes 2290 for 02290). status, relation,
        product: the file's own HISCO status, relation and product codes (text, one per code),
        which pick the table's row for them (below)
    Crosswalk.label(classes) -> pd.Series[str]   each class's label ('' for a score or none)
    Crosswalk.groups(codes) -> list, Crosswalk.group_set(codes) -> frozenset
        the crosswalk as a level of the codes (the class confidence, the guarantee and an
        audit at the class level): each code's class, a code without one kept whole
    Crosswalk.first(per_code) -> pd.Series[str]  the row-level class of rows with several
        codes: the first code's that has one (per_code: one Series per code column, in order)
    Crosswalk.width                 digit codes shorter than this are read with their zeros
                                    restored (HISCO's tables: 5; a user's table: None)
    class_columns(walk, slots, prefix='') -> list   the columns with_classes writes
    with_classes(table, walks, {prefix: code columns}, status, relation, product)
        -> (table with the class columns, {name: codes without a class})
    check_names(walks)              two crosswalks of one name, or a reserved one, refused

The HISCO tables (mixer/resources/hisco-ses/hisco_ses.csv, from the R package hisco;
attribution in data/README.md) hold each HISCO code's own row and rows for a HISCO status,
relation or product code with it. A row's class is that of the most specific row the table
has for the values given: status, relation and product all as given, then leaving out
product, then relation, then both, ..., down to the code's own row ('' stands for a value not
given). A blank class in the row found is the scheme's answer (no class); it does not fall
back. A user's table has one row per code (a code listed twice with two classes is refused).

Numpy and pandas only, no torch.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Optional

import pandas as pd

from mixer.core.config import TableOptions
from mixer.core.errors import UserError
from mixer.data.labels.formatter import RESOURCES
from mixer.data.tables.reading import as_text, read_table, require_columns

CROSSWALKS = ("hisclass", "hisclass_5", "socpo", "hiscam")
SES_DIR = os.path.join(RESOURCES, "hisco-ses")
SES_TABLE = os.path.join(SES_DIR, "hisco_ses.csv")
# a shipped crosswalk: its column of hisco_ses.csv, and its labels' file and columns (or None)
SHIPPED = {
    "hisclass": ("HISCLASS", ("hisclass.csv", "hisclass", "hisclass_label")),
    "hisclass_5": ("HISCLASS_5", ("hisclass_5.csv", "hisclass_5", "hisclass_5_label")),
    "socpo": ("SOCPO", ("socpo.csv", "socpo", "socpo_label")),
    "hiscam": ("HISCAM_U1", None),
}
CONTEXT = ("STATUS", "RELATION", "PRODUCT")  # the HISCO table's columns that pick a row
HISCO_WIDTH = 5
USER_COLUMNS = ("code", "class")  # a user's crosswalk: these, and "label" if it has one


@dataclass(frozen=True)
class Crosswalk:
    """One crosswalk: codes to classes (read with load_crosswalk)."""

    name: str
    source: str  # the table's path
    numeric: bool  # a score (HISCAM), not a class
    rows: dict = field(repr=False)  # (code, status, relation, product) -> class
    labels: dict = field(repr=False)  # class -> its label
    classes: tuple = field(repr=False)  # the classes the table gives, in order
    width: Optional[int] = None  # digit codes shorter than this get their zeros back (HISCO: 5)

    def classify(self, codes, status=None, relation=None, product=None) -> pd.Series:
        """Each code's class ('' where the table gives none), on the codes' index."""
        codes = as_text(pd.Series(codes)).str.strip()
        if self.width:  # '2290' from a file that lost the zero is 02290, as the model writes it
            codes = codes.where(
                ~(codes.str.fullmatch(r"\d+") & (codes.str.len() < self.width)),
                codes.str.zfill(self.width),
            )
        given = [None if v is None else _context_text(v) for v in (status, relation, product)]
        if all(v is None for v in given):
            return _mapped(codes, self._own)
        keys = pd.DataFrame(
            {
                "code": codes.to_numpy(dtype=object),
                **{
                    name: ("" if v is None else v.to_numpy(dtype=object))
                    for name, v in zip(CONTEXT, given)
                },
            }
        )
        distinct = keys.drop_duplicates().copy()
        distinct["class"] = [self._pick(*values) for values in distinct.itertuples(index=False)]
        found = keys.merge(distinct, how="left", on=["code", *CONTEXT])["class"]
        return pd.Series(found.to_numpy(dtype=object), index=codes.index)

    @cached_property
    def _own(self) -> dict:
        """Each code's own row's class (no status, relation or product)."""
        return {key[0]: value for key, value in self.rows.items() if not any(key[1:])}

    @property
    def labelled(self) -> bool:
        """Whether its classes have labels (the class columns then have label columns)."""
        return not self.numeric and bool(self.labels)

    def _pick(self, code, *values) -> str:
        """The class of the most specific row the table has for a code and its values."""
        choices = [(v, "") if v else ("",) for v in values]
        for wanted in itertools.product(*choices):
            found = self.rows.get((code, *wanted))
            if found is not None:
                return found
        return ""

    def groups(self, codes) -> list:
        """Per code, its group as a level of the codes (mixer.coding.levels; an audit's class
        level): its class (the code's own row), or for a code the table gives no class the
        code itself, marked apart from the classes (it is right only as itself)."""
        codes = [str(c) for c in codes]
        classes = self.classify(codes).to_numpy(dtype=object) if codes else []
        return [k if k else f"\x00{c}" for c, k in zip(codes, classes)]

    def group_set(self, codes) -> frozenset:
        """One row's codes as the set of their groups (groups)."""
        codes = [str(c) for c in codes if c is not None and str(c)]
        return frozenset(self.groups(codes))

    def label(self, classes) -> pd.Series:
        """Each class's label ('' for a class without one, a score, or no class)."""
        classes = pd.Series(classes)
        return _mapped(classes, self.labels)

    def first(self, per_code) -> pd.Series:
        """The row-level class: the first code's (in the order the codes are written) that
        has one, '' where none has. per_code: each code column's classes, in order."""
        per_code = list(per_code)
        result = per_code[0].copy()
        for later in per_code[1:]:
            result = result.where(result != "", later.to_numpy())
        return result


def _mapped(values: pd.Series, mapping: dict) -> pd.Series:
    """values looked up in mapping, '' where it has none, on values' index."""
    return values.astype(object).map(mapping).astype(object).fillna("")


def _context_text(values) -> pd.Series:
    """A file's status, relation or product codes as the table writes them: whole numbers
    without leading zeros ('031', '31.0' and 31 are '31'); blank stays blank."""
    text = as_text(pd.Series(values)).str.strip().str.replace(r"\.0+$", "", regex=True)
    digits = text.str.fullmatch(r"\d+")
    return text.where(~digits, text.str.lstrip("0").replace("", "0"))


def _class_order(classes) -> tuple:
    """Classes in their order: numbers by value (1, 2, ... 13), then the rest as text."""

    def key(c):
        try:
            return (0, float(c), c)
        except ValueError:
            return (1, 0.0, c)

    return tuple(sorted(set(classes) - {""}, key=key))


def load_crosswalk(
    name_or_path: str,
    formatter=None,
    options: Optional[TableOptions] = None,
    width: Optional[int] = None,
) -> Crosswalk:
    """A crosswalk by its name (CROSSWALKS) or a user's table's path."""
    name = str(name_or_path).strip()
    if name.lower() in CROSSWALKS:
        return _shipped(name.lower())
    if not os.path.isfile(name):
        raise UserError(
            f"--crosswalk {name}: neither a crosswalk mixer ships ({', '.join(CROSSWALKS)}) nor "
            "a file; name one of those, or a table with the columns code and class (and label)"
        )
    return _user_table(name, formatter, options or TableOptions(role="crosswalk"), width)


@lru_cache(maxsize=None)
def _shipped(name: str) -> Crosswalk:
    column, label_file = SHIPPED[name]
    table = _ses_table()
    codes = table["HISCO"].str.strip()
    codes = codes.where(~codes.str.fullmatch(r"\d+"), codes.str.zfill(HISCO_WIDTH))
    context = [_context_text(table[c]).to_numpy() for c in CONTEXT]
    values = table[column].str.strip().to_numpy()
    rows = {key[:4]: key[4] for key in zip(codes.to_numpy(), *context, values)}
    labels = {}
    if label_file is not None:
        file, class_column, label_column = label_file
        labelled = read_table(os.path.join(SES_DIR, file), TableOptions(role="crosswalk"))
        labels = dict(zip(labelled[class_column].str.strip(), labelled[label_column].str.strip()))
    return Crosswalk(
        name=name,
        source=SES_TABLE,
        numeric=label_file is None,
        rows=rows,
        labels=labels,
        classes=_class_order(values),
        width=HISCO_WIDTH,
    )


@lru_cache(maxsize=1)
def _ses_table() -> pd.DataFrame:
    return read_table(SES_TABLE, TableOptions(role="crosswalk"))


def _user_table(path: str, formatter, options: TableOptions, width: Optional[int]) -> Crosswalk:
    table = read_table(path, options)
    table.columns = [str(c) for c in table.columns]
    require_columns(table, list(USER_COLUMNS), path, {c: "--crosswalk" for c in USER_COLUMNS})
    if formatter is not None:
        from mixer.data.labels.normalise import code_column

        codes = code_column(table, "code", formatter).text
    else:  # no model: the codes as written, digits given their zeros back to `width`
        from mixer.data.labels.normalise import restore_digits

        codes, _ = restore_digits(as_text(table["code"]).str.strip(), width)
    classes = as_text(table["class"]).str.strip()
    listed = codes != ""
    pairs = pd.DataFrame({"code": codes[listed], "class": classes[listed]}).drop_duplicates()
    twice = pairs["code"].duplicated(keep=False)
    if twice.any():
        code = pairs["code"][twice].iloc[0]
        both = ", ".join(repr(c) for c in pairs["class"][pairs["code"] == code])
        raise UserError(
            f"--crosswalk {path}: code {code!r} has two classes ({both}); a crosswalk gives "
            "each code one class: keep one row per code"
        )
    labels = {}
    if "label" in table.columns:
        labelled = pd.DataFrame({"class": classes, "label": as_text(table["label"]).str.strip()})
        labelled = labelled[(labelled["class"] != "") & (labelled["label"] != "")]
        labelled = labelled.drop_duplicates()
        twice = labelled["class"].duplicated(keep=False)
        if twice.any():  # the output would give the class one of them, the last row's
            name = labelled["class"][twice].iloc[0]
            both = ", ".join(repr(c) for c in labelled["label"][labelled["class"] == name])
            raise UserError(
                f"--crosswalk {path}: class {name!r} has two labels ({both}); a class has one "
                "label: write it alike on each of its rows"
            )
        labels = dict(zip(labelled["class"], labelled["label"]))
    stem = os.path.splitext(os.path.basename(path))[0]
    return Crosswalk(
        name=re.sub(r"\W+", "_", stem).strip("_") or "crosswalk",
        source=path,
        numeric=False,
        rows={(c, "", "", ""): k for c, k in zip(pairs["code"], pairs["class"])},
        labels=labels,
        classes=_class_order(pairs["class"]),
        width=None if formatter is not None else width,
    )


# ------------------------------------------------------------------ classes beside codes
# the names a crosswalk's columns may not take: the code table's and the check list's own
RESERVED = ("code", "prob", "desc", "confidence", "source", "coded", "level", "alternative")
RESERVED += ("checked", "true_code", "n_rows", "occ1", "conf")


def class_columns(walk: Crosswalk, slots: list, prefix: str = "") -> list:
    """The columns `with_classes` adds for one crosswalk and one head's code columns
    (`slots` of them): per code k its class <name>_k (and <name>_label_k), then the row's
    class <name> (and <name>_label); a score (HISCAM) and a table without labels have no
    label columns. `prefix`: the head's, as the code table writes it ('flat_' beside
    'seq2seq_')."""
    label = walk.labelled
    names = []
    for k in range(1, slots + 1):
        names += [f"{prefix}{walk.name}_{k}"] + ([f"{prefix}{walk.name}_label_{k}"] * label)
    return names + [f"{prefix}{walk.name}"] + ([f"{prefix}{walk.name}_label"] * label)


def with_classes(table: pd.DataFrame, walks, codes: dict, status=None, relation=None, product=None):
    """(the table with each crosswalk's class columns after its own, the codes without a
    class: {crosswalk name: the codes, as a Series}). codes: {prefix: the code columns of
    one head, in order} (mixer's code_1, code_2, ...; OccCANINE's hisco_1, ...). status,
    relation, product: each row's values, or None. The row's class: the first code's that
    has one (Crosswalk.first). A score's columns (HISCAM) are numbers, NaN where blank."""
    added, unclassed = {}, {}
    for walk in walks:
        missing = []
        written = _score if walk.numeric else (lambda classes: classes)
        for prefix, columns in codes.items():
            names = iter(class_columns(walk, len(columns), prefix))
            per_code = []
            for column in columns:
                code = as_text(table[column]).str.strip()
                classes = walk.classify(code, status, relation, product).set_axis(table.index)
                per_code.append(classes)
                added[next(names)] = written(classes)
                if walk.labelled:
                    added[next(names)] = walk.label(classes)
                missing.append(code[(code != "") & (classes == "")])
            row = walk.first(per_code) if per_code else pd.Series("", index=table.index)
            added[next(names)] = written(row)
            if walk.labelled:
                added[next(names)] = walk.label(row)
        unclassed[walk.name] = pd.concat(missing) if missing else pd.Series([], dtype=object)
        taken = [name for name in added if name in table.columns]
        if taken:  # OccCANINE's codes are named by the code system (hisco_1): never replaced
            raise UserError(
                f"--crosswalk {walk.source}: its columns would be named {taken[0]}, ..., as the "
                f"code table's own; rename the file (e.g. {walk.name}_groups.csv)"
            )
    return table.assign(**added), unclassed


def _score(values: pd.Series) -> pd.Series:
    """A score's text as numbers (float64), NaN where the table gives none."""
    return pd.to_numeric(values.where(values != "", None), errors="coerce").astype("float64")


def check_names(walks) -> None:
    """Refuse two crosswalks of one name, or a table named as a column of the code table."""
    seen = set()
    for walk in walks:
        if walk.name in seen:
            raise UserError(
                f"--crosswalk: {walk.name} named twice; name each crosswalk once (a file by "
                "another name when two files share one)"
            )
        if walk.name in RESERVED:
            raise UserError(
                f"--crosswalk {walk.source}: its columns would be named {walk.name}_1, ..., as "
                f"the code table's own; rename the file (e.g. {walk.name}_groups.csv)"
            )
        seen.add(walk.name)

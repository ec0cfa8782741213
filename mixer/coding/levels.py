"""Coarser classes of a code system as prefixes of its codes (HISCO's major, minor and unit
groups): which prefix lengths a system has, and whether a row is right at a level; and any
many-to-one mapping of codes (a crosswalk's classes) read as a level the same way."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

# Prefix lengths of the coarser classes, by code system. OCC1950 groups its codes by number
# ranges, not prefixes, so it has none; a user's own system has none unless they give a table.
LEVELS = {
    "hisco": [1, 2, 3],
    "isco": [1, 2, 3],
    "isco68": [1, 2, 3],
    "isco88": [1, 2, 3],
    "isco08": [1, 2, 3],
    "occ1950": [],
}
NAMES = {
    "hisco": {1: "major group", 2: "minor group", 3: "unit group"},
    "isco": {1: "major group", 2: "sub-major group", 3: "minor group"},
}
# HISCO's special codes (-1 no occupation, -2 no information, -3 not classifiable) have no
# coarser class.
NO_LEVEL = {"-1", "-2", "-3"}


def levels_for(system: Optional[str], table: Optional[Sequence[int]] = None) -> list:
    """The prefix lengths of a code system's coarser classes, shortest first: HISCO and ISCO
    1, 2, 3; OCC1950 none; a user's system `table` or none."""
    if table is not None:
        return sorted({int(length) for length in table})
    return list(LEVELS.get(str(system or "").lower(), []))


def prefix(code: str, length: int) -> Optional[str]:
    """The code's class at a prefix length, None for a code without one (HISCO's -1..-3)."""
    code = str(code)
    if not code or code in NO_LEVEL or code.startswith("-"):
        return None
    return code[:length]


def prefix_set(codes, length: int) -> frozenset:
    """The set of classes at a prefix length of one row's codes (codes without a class stay whole)."""
    return frozenset(
        code if prefix(code, length) is None else prefix(code, length)
        for code in codes
        if str(code)
    )


def _as_sets(rows) -> list:
    out = []
    for row in rows:
        if isinstance(row, str):
            row = [c.strip() for c in row.split("&")] if row.strip() else []
        out.append([str(c) for c in row if c is not None and str(c) != "" and str(c) != "nan"])
    return out


def prefix_correct(true_sets, predicted_sets, length: int) -> np.ndarray:
    """Per row: the predicted codes cut to `length` characters are exactly the true codes cut
    so (sets; a row as a list of codes or as codes joined with ' & ')."""
    true_sets, predicted_sets = _as_sets(true_sets), _as_sets(predicted_sets)
    if len(true_sets) != len(predicted_sets):
        raise ValueError(f"{len(true_sets)} true rows but {len(predicted_sets)} predicted rows")
    return np.array(
        [prefix_set(t, length) == prefix_set(p, length) for t, p in zip(true_sets, predicted_sets)],
        dtype=bool,
    )


# ------------------------------------------------------------------ any many-to-one mapping
# A level is a prefix length (an int) or a crosswalk (mixer.data.labels.crosswalk.Crosswalk):
# both map codes many-to-one, and the row confidence, the guarantee and the marks read a level
# through these functions alone.
def is_prefix(level) -> bool:
    """A prefix length, not a crosswalk."""
    return isinstance(level, (int, np.integer))


def level_name(level) -> str:
    """How a level is named in columns and messages: its length ('3'), or the crosswalk's
    name ('hisclass')."""
    return str(int(level)) if is_prefix(level) else str(level.name)


def group_keys(codes, level) -> list:
    """Per code, its group at a level: the code cut to the prefix length (as the row
    confidence has always cut it, HISCO's -1..-3 included), or its class; a code the
    crosswalk gives no class is a group of its own (Crosswalk.groups)."""
    codes = [str(c) for c in codes]
    if is_prefix(level):
        return [c[: int(level)] for c in codes]
    return level.groups(codes)


def group_set(codes, level) -> frozenset:
    """The set of groups at a level of one row's codes: prefix_set at a prefix length; at a
    crosswalk, the classes, a code without one kept whole (it is right only as itself)."""
    if is_prefix(level):
        return prefix_set(codes, int(level))
    return level.group_set(codes)


def level_correct(true_sets, predicted_sets, level) -> np.ndarray:
    """Per row: the predicted codes' groups at a level are exactly the true codes' groups
    (prefix_correct at a prefix length)."""
    if is_prefix(level):
        return prefix_correct(true_sets, predicted_sets, int(level))
    true_sets, predicted_sets = _as_sets(true_sets), _as_sets(predicted_sets)
    if len(true_sets) != len(predicted_sets):
        raise ValueError(f"{len(true_sets)} true rows but {len(predicted_sets)} predicted rows")
    return np.array(
        [group_set(t, level) == group_set(p, level) for t, p in zip(true_sets, predicted_sets)],
        dtype=bool,
    )

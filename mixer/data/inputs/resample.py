"""Resampling the training rows per epoch: rare codes drawn up, dominant codes down.

`epoch_rows` is a pure function of (the rows' first codes, seed, epoch, options): every
rank computes the same rows, whatever the number of processes, and a resumed run draws
its epoch again exactly. The size of an epoch depends on the code counts only, so it is
the same in every epoch and the schedule (counted in rows) can use it.

- upsample_below N: a code (the row's first code) with fewer than N training rows keeps
  all of them and gets N - count more, drawn from them with replacement.
- downsample_top F: a code with more than a share F of the training rows keeps
  floor(F x rows) of them, drawn without replacement.
Rows without a code form a group of their own.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

STREAM = 0x5E5A  # the draw's own stream beside the epoch permutation's (seed, epoch)


def is_active(upsample_below: int, downsample_top: Optional[float]) -> bool:
    return bool(upsample_below) or downsample_top is not None


def group_sizes(first_codes: np.ndarray, upsample_below: int, downsample_top: Optional[float]):
    """(group of each row, rows of each group, rows each group has in an epoch)."""
    _, groups, counts = np.unique(np.asarray(first_codes), return_inverse=True, return_counts=True)
    target = counts.copy()
    if upsample_below:
        target = np.where(counts < upsample_below, upsample_below, target)
    if downsample_top is not None:
        cap = max(1, int(np.floor(downsample_top * len(first_codes))))
        target = np.where(counts > cap, cap, target)
    return groups.reshape(-1), counts, target


def epoch_size(
    first_codes: np.ndarray, upsample_below: int, downsample_top: Optional[float]
) -> int:
    if not is_active(upsample_below, downsample_top):
        return len(first_codes)
    return int(group_sizes(first_codes, upsample_below, downsample_top)[2].sum())


def epoch_rows(
    first_codes: np.ndarray,
    seed: int,
    epoch: int,
    upsample_below: int = 0,
    downsample_top: Optional[float] = None,
) -> np.ndarray:
    """The training rows of one epoch (indices into the rows, repeated where drawn up),
    sorted; drawn from (seed, epoch) alone."""
    first_codes = np.asarray(first_codes)
    if not is_active(upsample_below, downsample_top) or not len(first_codes):
        return np.arange(len(first_codes))
    groups, counts, target = group_sizes(first_codes, upsample_below, downsample_top)
    rng = np.random.default_rng([seed, epoch, STREAM])
    by_group = np.argsort(groups, kind="stable")  # rows of group 0, then group 1, ...
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    keep = np.ones(len(first_codes), dtype=bool)
    for group in np.flatnonzero(target < counts):  # the few dominant codes
        rows = by_group[starts[group] : starts[group] + counts[group]]
        dropped = rng.choice(len(rows), size=counts[group] - target[group], replace=False)
        keep[rows[dropped]] = False
    extra_per_group = np.where(target > counts, target - counts, 0)
    extra_groups = np.repeat(np.arange(len(counts)), extra_per_group)  # the many rare codes at once
    offsets = np.floor(rng.random(len(extra_groups)) * counts[extra_groups]).astype(np.int64)
    extra = by_group[starts[extra_groups] + offsets]
    return np.sort(np.concatenate([np.flatnonzero(keep), extra]))

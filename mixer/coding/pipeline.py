"""The row steps after the model, one object: a code table as the predictor wrote it in, the
code table a user gets out. For one head: the target's marks (and shorter codes), the
calibrated confidence beside the raw one, the lookup's entries in place of the model's codes,
nothing for the rows without a description (docs/coding.md).

Built once (per predict.py job, per Model.predict call) from the options, which are checked
then; predict.py's file job and Model.predict both code their rows through it, so the two
give the same table. Its interface to the predictor is narrow: what to predict with (head,
top_k, threshold, the levels a target scores) and, per batch, the raw table back.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.core.naming import FLAGS, Names

RAW_CONFIDENCE = "confidence_raw"  # beside a calibrated confidence


class CodingPipeline:
    """The row steps of one head. model: what reads the rows (mixer.prediction.api.Model:
    its predictor, and the keys a lookup matches rows by); lookup: a mixer.coding.lookup
    Lookup or None; target: a mixer.coding.target Target chosen for this model, head, top_k
    and threshold, or None. names: how a refusal names the options (predict.py's flags or
    the API's keywords); lookup_checked: the lookup was checked already (predict.py checks it
    once for all heads, in the input's language)."""

    def __init__(
        self,
        model,
        head: str,
        top_k: Optional[int] = None,
        threshold: Optional[float] = None,
        lookup=None,
        target=None,
        names: Names = FLAGS,
        lookup_checked: bool = False,
    ):
        self.model, self.predictor = model, model.predictor
        self.head, self.top_k, self.threshold = head, top_k, threshold
        self.lookup, self.target = lookup, target
        self.scaling = self.predictor.calibration.get(head, (1.0, 0.0))
        if target is not None:
            self._check_target()
        if lookup is not None and not lookup_checked:  # an entry too wide or two alike: at once
            lookup.check(model, top_k or self.predictor.default_top_k(), flag=names.before("top_k"))

    def _check_target(self) -> None:
        """A target chosen for another model, head, top_k or threshold: refused."""
        from mixer.audit.draw import threshold_used

        predictor, target = self.predictor, self.target

        def settled(k, t):  # top_k=None and the model's own top-k are one setting
            return k or predictor.default_top_k(), threshold_used(predictor, self.head, t)

        if (
            target.head != self.head
            or settled(target.top_k, target.flat_threshold) != settled(self.top_k, self.threshold)
            or target.owner != id(predictor)
        ):
            raise UserError(
                f"target= was chosen for head {target.head!r} (top_k {target.top_k}, "
                f"threshold {target.flat_threshold}) by another model or settings; choose it with "
                "this model and the head, top_k and threshold you predict with"
            )

    @property
    def scored_levels(self) -> tuple:
        """The levels whose confidence the predictor scores for the target (shorter codes)."""
        return self.target.scored_levels if self.target is not None else ()

    def entries(self, keys: np.ndarray, langs: np.ndarray) -> Optional[np.ndarray]:
        """Per row (its model input key and language), its lookup entry or -1; None without
        a lookup. Asked before predicting: two entries the model reads alike fail at once."""
        if self.lookup is None:
            return None
        return self.lookup.match(self.model, keys, langs)

    def code(
        self, table: pd.DataFrame, entries: Optional[np.ndarray], blank: np.ndarray
    ) -> pd.DataFrame:
        """The predictor's raw code table of a batch of rows -> the rows' code table: marked
        against the target, the confidence calibrated, the lookup's entries in, `blank`
        rows (no description) empty."""
        predictor = self.predictor
        if self.target is not None:
            from mixer.coding.target import mark

            table = mark(table, self.target, predictor.description_of)
        table = calibrated(table, self.scaling)
        if entries is not None:
            from mixer.coding.lookup import apply_lookup

            table = apply_lookup(
                table,
                entries,
                self.lookup,
                predictor.description_of,
                predictor.formatter.block_size,
            )
        return without_codes(table, np.asarray(blank, dtype=bool))


def calibrated(table: pd.DataFrame, scaling: tuple) -> pd.DataFrame:
    """The code table's confidence calibrated with the head's (temperature, bias), the raw one
    beside it (confidence_raw); as it is without a calibration or a confidence column."""
    from mixer.coding.confidence import CONFIDENCE

    if CONFIDENCE not in table.columns or tuple(scaling) == (1.0, 0.0):
        return table
    from mixer.coding.calibration import calibrate

    raw = table[CONFIDENCE].to_numpy(dtype=np.float64)
    table.insert(table.columns.get_loc(CONFIDENCE) + 1, RAW_CONFIDENCE, raw)
    table[CONFIDENCE] = np.where(np.isnan(raw), np.nan, calibrate(raw, *scaling))
    return table


def without_codes(table: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """A code table with nothing in `rows`: no code, description or mark (""), no
    probability or confidence (NaN), no whole number (a shorter code's `level`: the column
    becomes pandas' nullable Int64, the rows <NA>, an empty cell in a file)."""
    if not rows.any():
        return table
    table = table.copy()
    for column in table.columns:
        if pd.api.types.is_integer_dtype(table[column]):
            table[column] = table[column].astype("Int64")
            table.loc[rows, column] = pd.NA
            continue
        numeric = column.startswith("prob_") or pd.api.types.is_float_dtype(table[column])
        table.loc[rows, column] = np.nan if numeric else ""
    return table

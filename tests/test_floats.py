"""The suite's one comparison of predictions computed in other batches (conftest.py,
docs/tests.md): what is exact stays exact, probabilities may differ by float rounding."""

import numpy as np
import pandas as pd
import pytest

from conftest import FLOATS, assert_same_predictions


def audit_rows(**changes) -> pd.DataFrame:
    """Two audit rows as read back from a file (every cell text), prob_1 as issue 34 saw
    it with --chunk-size 1000 on an AVX-512 CPU."""
    rows = {
        "audit_row": ["12", "407"],
        "occ1": ["farmer", "wine merchant"],
        "code_1": ["61110", "41025"],
        "prob_1": ["0.0746537447", "0.93125"],
        "code_2": ["", "41030"],
        "prob_2": ["", "0.0512"],
        "audit_check": ["c-1f3a", "c-77e0"],
    }
    rows.update(changes)
    return pd.DataFrame(rows)


def test_rounding_passes_and_anything_exact_that_differs_fails():
    whole = audit_rows()
    assert_same_predictions(
        audit_rows(prob_1=["0.0746537298", "0.93125"]), whole
    )  # --chunk-size 37: 2 ulps
    ulps = np.float32(0.93125) + 3 * np.spacing(np.float32(0.93125))
    assert_same_predictions(audit_rows(prob_1=["0.0746537447", repr(float(ulps))]), whole)
    for changed in (
        dict(code_1=["61110", "41030"]),
        dict(audit_row=["12", "408"]),
        dict(audit_check=["c-1f3a", "c-77e1"]),
        dict(occ1=["wine merchant", "farmer"]),
        dict(prob_1=["0.0746544", "0.93125"]),  # 1e-5 of the value: more than rounding
        dict(prob_2=["0.0512", "0.0512"]),
    ):  # a probability where there is none
        with pytest.raises(AssertionError):
            assert_same_predictions(audit_rows(**changed), whole)
    with pytest.raises(AssertionError):  # the same columns, in the same order
        assert_same_predictions(whole[list(whole.columns)[::-1]], whole)


def test_the_tolerance_is_a_few_float32_roundings():
    eps = float(np.finfo(np.float32).eps)
    assert 4 * eps < FLOATS["rtol"] < 16 * eps
    assert FLOATS["atol"] < FLOATS["rtol"]

"""Code systems: checking, blocks and back (HISCO, OCC1950, general codes)."""

import pandas as pd
import pytest

from mixer.core.config import DataConfig
from mixer.core.errors import UserError
from mixer.data.labels.formatter import PAD, CodeFormatter
from mixer.data.labels.normalise import hisco_key
from mixer.data.labels.checks import check_rows
from mixer.data.prepared.prepare import make_formatter


def round_trip(formatter: CodeFormatter, codes):
    formatter.fit_alphabet(codes)
    blocks = formatter.encode_blocks(codes)
    return [formatter.decode_block(b) for b in blocks]


def test_hisco_round_trip_keeps_leading_zeros_and_special_codes():
    f = CodeFormatter(kind="hisco", block_size=5)
    known = set(hisco_key()["code"])
    assert "01110" in known and "-1" in known  # the shipped list, zeros restored
    for raw in ("01110", "99910", "-1", "-2", "-3"):
        assert f.check(raw, known) == (raw, "")
    codes = ["01110", "99910", "-1", "-3"]
    assert round_trip(f, codes) == codes


def test_hisco_codes_get_their_zeros_back_before_they_are_checked(capsys):
    """HISCO codes are 5 digits: one that came shorter lost its zeros, and the one
    normaliser (mixer.data.labels.normalise) restores them, with or without
    --allow-codes-shorter-than-block-size; the formatter checks codes so spelled."""
    known = set(hisco_key()["code"])
    assert "leading zeros" in CodeFormatter(kind="hisco").check("1110", known)[1]
    assert "not in the HISCO" in CodeFormatter(kind="hisco").check("12345", known)[1]
    frame = pd.DataFrame(
        {"occ1": ["chemist", "chemist", "none"], "hisco_1": ["1110", "01110", "-1"]}
    )
    for allow_short in (False, True):
        cfg = DataConfig(
            target_cols=["hisco_1"],
            formatter="hisco",
            allow_codes_shorter_than_block_size=allow_short,
        )
        checked = check_rows(
            frame,
            cfg,
            make_formatter(cfg, 1),
            "x.csv",
            known,
            log=print,
            why="HISCO codes are 5 digits",
        )
        assert checked.frame["code_1"].astype(str).tolist() == ["01110", "01110", "-1"]
        assert checked.codes == {"01110", "-1"}  # one class
    assert (
        "x.csv: hisco_1: 1 code(s) without their leading zeros read as 5-digit codes "
        "(e.g. '1110' -> '01110'; HISCO codes are 5 digits)"
    ) in capsys.readouterr().out


def test_occ1950_round_trip():
    f = CodeFormatter(kind="occ1950", block_size=3)
    assert f.check("007") == ("007", "")
    assert "digits" in f.check("0a7")[1]
    assert "longer" in f.check("1234")[1]
    assert round_trip(f, ["007", "123", "999"]) == ["007", "123", "999"]


def test_general_codes_round_trip_and_short_codes():
    f = CodeFormatter(kind="general", block_size=4)
    assert round_trip(f, ["A1b2", "0012", "zz-9"]) == ["A1b2", "0012", "zz-9"]
    assert "shorter" in f.check("12")[1]
    f_short = CodeFormatter(kind="general", block_size=4, allow_short=True)
    assert f_short.check("12") == ("12", "")
    assert round_trip(f_short, ["12", "1234"]) == ["12", "1234"]
    assert "longer" in f.check("12345")[1]


def test_within_block_separator_makes_parts_tokens():
    f = CodeFormatter(kind="general", block_size=3, use_within_block_sep=True)
    codes = ["1,12,0", "10,2,3"]
    assert f.check("1,12,0") == ("1,12,0", "")
    assert round_trip(f, codes) == codes
    assert f.encode_blocks(["1,12,0"]).shape == (1, 3)


def test_empty_and_invalid_blocks_decode():
    f = CodeFormatter(kind="general", block_size=2, alphabet=["1", "2"])
    assert f.decode_block([PAD, PAD]) is None
    assert f.decode_block([1, PAD]) == "[BOS]"  # a special token inside shows by name


def test_several_codes_per_row_keep_zeros_and_pack_left():
    frame = pd.DataFrame(
        {
            "occ1": ["farmer and fisher", "fisher", "clerk"],
            "c1": ["61110", "", "03950"],
            "c2": ["64100", "64100", ""],
        }
    )
    cfg = DataConfig(target_cols=["c1", "c2"], block_size=5)
    checked = check_rows(frame, cfg, make_formatter(cfg, 2), "x.csv")
    got = checked.frame[["code_1", "code_2"]].to_numpy().tolist()
    assert got == [["61110", "64100"], ["64100", ""], ["03950", ""]]


def test_label_errors_name_rows_and_columns():
    frame = pd.DataFrame({"occ1": ["a", "b", "c", "d"], "c1": ["61110", "6110", "61110", ""]})
    cfg = DataConfig(target_cols=["c1"], block_size=5)
    with pytest.raises(UserError) as err:
        check_rows(frame, cfg, make_formatter(cfg, 1), "x.csv")
    message = str(err.value)
    assert "row 2 c1='6110'" in message and "shorter" in message
    assert "no code in any target column (rows 4)" in message
    assert "--drop-bad-labels" in message
    cfg.drop_bad_labels = True
    checked = check_rows(frame, cfg, make_formatter(cfg, 1), "x.csv")
    assert checked.dropped == 2 and list(checked.frame["row"]) == [1, 3]

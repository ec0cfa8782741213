"""The guarantee at a crosswalk's class level (docs/coding.md, "At the class level"):
--target-level hisclass chooses its threshold on labelled rows scored by their classes,
with the class confidence (mixer.coding.levels, the prefix levels' own mechanism), and a
row carries a mark per level asked."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from mixer.cli.entrypoints import predict_main
from mixer.core.errors import UserError


def held_out(run):
    scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
    return scores[~scores["chose"]].reset_index(drop=True)


def test_the_class_level_threshold_is_the_guarantee_on_rows_scored_by_class(run_dir):
    import mixer
    from mixer.coding.guarantee import choose_threshold
    from mixer.coding.levels import level_correct
    from mixer.coding.target import predicted_code_sets
    from mixer.data.labels.crosswalk import load_crosswalk

    model = mixer.load(run_dir)
    both = model.target(0.5, 0.9, target_level=["code", "hisclass"], rows_to_code=240)
    (classes,) = both.also
    assert both.mark_column == "coded" and classes.mark_column == "coded_hisclass"
    rows = held_out(run_dir)
    walk = load_crosswalk("hisclass")
    table = model._predictor.predict(rows["text"], rows["lang"], "flat", levels=(walk,))
    truth = [tuple(sorted(set(t.split(" & ")) - {""})) for t in rows["true_codes"]]
    right = level_correct(truth, predicted_code_sets(table), walk)
    at = table["level_confidence_hisclass"].to_numpy()
    expected = choose_threshold(at, right, 0.5, 0.1, 240)
    assert expected.threshold is not None
    assert classes.threshold == expected.threshold and classes.bound == expected.bound
    # the codes' own promise is unchanged by asking for the class level beside it
    assert both.threshold == model.target(0.5, 0.9, rows_to_code=240).threshold
    # a row's classes are never less sure than its codes (flat head)
    assert (at >= table["confidence"].to_numpy() - 1e-12).all()
    alone = model.target(0.5, 0.9, target_level="hisclass", rows_to_code=240)
    assert alone.threshold == classes.threshold and alone.also == ()


def test_predict_py_writes_a_mark_per_level_and_says_each(run_dir, common_csv, tmp_path, capsys):
    import mixer

    model = mixer.load(run_dir)
    both = model.target(0.5, 0.9, target_level=["code", "hisclass"], rows_to_code=240)
    out = tmp_path / "coded.csv"
    argv = ["--checkpoint", run_dir, "--input", common_csv, "--output", str(out)]
    target = ["--target-accuracy", "0.5", "--target-confidence", "0.9"]
    assert predict_main([*argv, *target, "--target-level", "code", "hisclass"]) == 0
    written = pd.read_csv(out, dtype={"coded": str, "coded_hisclass": str})
    code_auto = written["confidence"] >= both.threshold
    class_auto = written["level_confidence_hisclass"] >= both.also[0].threshold
    assert (written["coded"] == np.where(code_auto, "auto", "check")).all()
    assert (written["coded_hisclass"] == np.where(class_auto, "auto", "check")).all()
    assert class_auto.any()
    said = capsys.readouterr()
    err = said.out + said.err
    assert "target: flat head at the level hisclass (coded_hisclass)" in err
    assert "coded hisclass (coded_hisclass) automatically at accuracy >= 0.5" in err
    assert f": {class_auto.sum():,} rows" in err
    sidecar = json.load(open(f"{out}.provenance.json"))
    assert sidecar["target"]["flat"]["level"] == "code"
    assert sidecar["target"]["flat"]["also"][0]["level"] == "hisclass"
    assert sidecar["result"]["coded"]["flat"]["coded_hisclass"]["auto"] == class_auto.sum()
    # the class level alone: its mark only, and the check list takes its checks
    alone, check = tmp_path / "alone.csv", tmp_path / "check.csv"
    assert (
        predict_main(
            [*argv[:-1], str(alone), *target, "--target-level", "hisclass"]
            + ["--to-check", "500", str(check)]
        )
        == 0
    )
    written = pd.read_csv(alone, dtype={"coded_hisclass": str})
    assert "coded" not in written.columns
    assert (written["coded_hisclass"] == np.where(class_auto, "auto", "check")).all()
    assert pd.read_csv(check)["n_rows"].sum() == (~class_auto).sum()


def test_what_a_class_level_cannot_be_asked_with_is_refused(run_dir):
    import mixer

    model = mixer.load(run_dir)
    with pytest.raises(UserError, match="hiscam.: a score, not classes"):
        model.target(0.5, target_level="hiscam")
    with pytest.raises(UserError, match="name code in target_level= too"):
        model.target(0.5, target_level="hisclass", shorter_codes=True, code_levels=[1, 2])
    with pytest.raises(UserError, match="names a level twice"):
        model.target(0.5, target_level=["hisclass", "hisclass"])
    with pytest.raises(UserError, match="target_level= works with target_accuracy="):
        model.predict(["farmer"], target_level="hisclass")


def test_an_audit_is_scored_at_the_code_and_the_class_level_with_intervals(tmp_path, capsys):
    from mixer.audit import statistics as stats
    from mixer.audit.draw import AuditDraw, AuditRequest, write_audit
    from mixer.cli.entrypoints import evaluate_main
    from mixer.data.labels.formatter import CodeFormatter

    # HISCLASS: 06510 and 14120 are 2, 99910 and 97120 are 11, 61110 is 8; -1 has no class
    predicted = ["06510", "06510", "99910", "99910", "61110", "-1"]
    truth = ["14120", "06510", "97120", "61110", "61110", "-1"]
    path = tmp_path / "audit.csv"
    frame = pd.DataFrame({"occ1": [f"occupation {i}" for i in range(len(predicted))]})
    draw = AuditDraw(
        AuditRequest(str(path), size=len(predicted)).check(), "occ1", [], CodeFormatter("hisco")
    )
    draw.add(frame, pd.DataFrame({"code_1": predicted, "prob_1": [0.9] * len(predicted)}))
    table, lines = draw.finish("m-test", "test", "flat", "0.5")
    write_audit(table, str(path), lines, log=lambda line: None)
    filled = pd.read_csv(path, dtype=str, keep_default_na=False)
    by_row = dict(zip(frame["occ1"], truth))  # each row's own truth, by its description
    filled["true_code_1"] = filled["occ1"].map(by_row)
    filled.to_csv(path, index=False)
    assert evaluate_main(["--audit", str(path), "--crosswalk", "hisclass"]) == 0
    scores = pd.read_csv(tmp_path / "audit_scores.csv", dtype={"digits": str})
    code, classes = (scores[scores["digits"] == d].iloc[0] for d in ("all", "hisclass"))
    assert (code["checked"], code["correct"]) == (6, 3)
    assert (classes["checked"], classes["correct"]) == (6, 5)
    for row, right in ((code, 3), (classes, 5)):
        expected = stats.simple(right, 6)
        assert (row["low"], row["high"]) == pytest.approx((expected.low, expected.high))
    assert "hisclass" in capsys.readouterr().out
    with pytest.raises(UserError, match="each code's own row"):
        evaluate_main(["--audit", str(path), "--crosswalk", "hisclass", "--status-col", "s"])


def test_the_production_curve_has_the_class_level_beside_the_codes(
    run_dir, common_csv, tmp_path, capsys
):
    from mixer.cli.entrypoints import evaluate_main
    from mixer.data.labels.crosswalk import load_crosswalk

    out = tmp_path / "coded.csv"
    argv = ["--checkpoint", run_dir, "--input", common_csv, "--output", str(out)]
    target = ["--target-accuracy", "0.5", "--target-confidence", "0.9"]
    assert predict_main([*argv, *target, "--target-level", "code", "hisclass"]) == 0
    table = tmp_path / "coded_evaluation.csv"
    evaluate = ["--predictions", str(out), "--truth-cols", "hisco_1", "hisco_2"]
    assert evaluate_main([*evaluate, "--output", str(table), "--crosswalk", "hisclass"]) == 0
    curve = pd.read_csv(tmp_path / "coded_production.csv", keep_default_na=False)
    assert set(curve["head"]) == {"prediction", "prediction:hisclass"}
    # every row coded (the curve's last point): the accuracy of the classes, ordered by their
    # own confidence column
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    walk = load_crosswalk("hisclass")

    def classes(columns):
        return [walk.group_set([c for c in row if c]) for row in written[columns].to_numpy()]

    truth, predicted = classes(["hisco_1", "hisco_2"]), classes(["code_1", "code_2"])
    right = np.mean([t == p for t, p in zip(truth, predicted)])
    last = curve[(curve["head"] == "prediction:hisclass") & (curve["group"] == "all")].iloc[-1]
    assert last["coded_share"] == 1.0 and last["accuracy"] == pytest.approx(right)
    assert "level_confidence_hisclass: on new rows like these" in capsys.readouterr().out


def test_the_seq2seq_head_chooses_on_its_codes_confidence_at_the_class_level(run_dir):
    import mixer
    from mixer.coding.guarantee import choose_threshold
    from mixer.coding.levels import level_correct
    from mixer.coding.target import predicted_code_sets
    from mixer.data.labels.crosswalk import load_crosswalk

    model = mixer.load(run_dir)
    chosen = model.target(0.2, 0.9, head="seq2seq", target_level="hisclass", rows_to_code=240)
    rows = held_out(run_dir)
    walk = load_crosswalk("hisclass")
    table = model._predictor.predict(rows["text"], rows["lang"], "seq2seq", levels=(walk,))
    np.testing.assert_array_equal(table["level_confidence_hisclass"], table["confidence"])
    truth = [tuple(sorted(set(t.split(" & ")) - {""})) for t in rows["true_codes"]]
    right = level_correct(truth, predicted_code_sets(table), walk)
    expected = choose_threshold(table["confidence"].to_numpy(), right, 0.2, 0.1, 240)
    assert chosen.threshold == expected.threshold


def test_two_processes_mark_both_levels_as_one(run_dir, common_csv, tmp_path):
    from conftest import rank0_gathers_cmd, run

    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    flags = ["--checkpoint", run_dir, "--input", common_csv, "--target-accuracy", "0.5"]
    flags += ["--target-confidence", "0.9", "--target-level", "code", "hisclass"]
    assert predict_main([*flags, "--output", str(one)]) == 0
    run(
        rank0_gathers_cmd(2, "predict.py")
        + ["--distributed", *flags, "--output", str(two), "--chunk-size", "50"]
    )
    a, b = (pd.read_csv(path, dtype=str, keep_default_na=False) for path in (one, two))
    assert a["coded_hisclass"].tolist() == b["coded_hisclass"].tolist()
    assert a["coded"].tolist() == b["coded"].tolist() and (a["coded_hisclass"] == "auto").any()
    made = [json.load(open(f"{path}.provenance.json")) for path in (one, two)]
    assert made[0]["target"] == made[1]["target"] and made[0]["result"] == made[1]["result"]

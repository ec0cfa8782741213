"""Which predictions to use, in predict.py and the API (issue 37; docs/coding.md): row
confidence per head, calibration, --target-accuracy and its labelled rows, shorter codes,
--lookup, the provenance of a predictions file, --calibrate."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, write_scores
from mixer.cli.entrypoints import finetune_main, predict_main
from mixer.core.errors import UserError


@pytest.fixture
def copy_of(tmp_path):
    def copy(run):
        target = tmp_path / "run_copy"
        shutil.copytree(run, target)
        return str(target)

    return copy


def held_out(run):
    scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
    return scores[~scores["chose"]].reset_index(drop=True)


def code_sets(table, prefix="code_"):
    columns = [c for c in table.columns if c.startswith(prefix) and c[len(prefix) :].isdigit()]
    return [
        frozenset(c for c in row if isinstance(c, str) and c) for row in table[columns].to_numpy()
    ]


# ------------------------------------------------------------------ confidence
def test_flat_confidence_is_the_chance_of_the_exact_code_set(run_dir, common_csv):
    import mixer
    from mixer.coding.confidence import flat_confidence

    model = mixer.load(run_dir)
    texts = pd.read_csv(common_csv, dtype=str, keep_default_na=False)["occ1"].head(30)
    table = model.predict(texts, threshold=0.1)  # a low threshold: rows of 1 and 2 codes
    logits = model.predict(texts, what="logits").to_numpy(np.float64)
    chosen = np.zeros(logits.shape, dtype=bool)
    index = {code: i for i, code in enumerate(model.codes["code"])}
    for row, codes in enumerate(code_sets(table)):
        chosen[row, [index[c] for c in codes]] = True
    assert {len(s) for s in code_sets(table)} >= {1, 2}
    assert (
        "confidence_raw" not in table.columns
    )  # an uncalibrated model's confidence is its raw one
    np.testing.assert_allclose(
        table["confidence"].to_numpy(), flat_confidence(logits, chosen), rtol=1e-5
    )


def test_a_run_calibrated_at_its_end_predicts_calibrated_confidence(
    trained, run_dir, common_csv, tmp_path
):
    """predict.py reads the run's calibration.json: confidence is its temperature and bias
    applied to the raw confidence, which stays beside it; no code changes."""
    from mixer.coding.calibration import calibrate_entry, read_calibration

    entries = read_calibration(trained)["heads"]
    assert {"temperature", "bias"} <= set(entries["flat"]) and entries["flat"]["bias"] != 0.0
    for head in ("flat", "seq2seq"):
        calibrated, raw = str(tmp_path / f"cal_{head}.csv"), str(tmp_path / f"raw_{head}.csv")
        for run, out in ((trained, calibrated), (run_dir, raw)):
            assert (
                predict_main(
                    ["--checkpoint", run, "--input", common_csv, "--output", out, "--head", head]
                )
                == 0
            )
        calibrated, raw = (
            pd.read_csv(p, dtype=str, keep_default_na=False) for p in (calibrated, raw)
        )
        pd.testing.assert_frame_equal(
            calibrated.drop(columns=["confidence", "confidence_raw"]),
            raw.drop(columns=["confidence"]),
        )
        assert calibrated["confidence_raw"].tolist() == raw["confidence"].tolist()
        np.testing.assert_allclose(
            calibrated["confidence"].astype(float),
            calibrate_entry(raw["confidence"].astype(float), entries[head]),
            rtol=1e-6,
        )


def test_seq2seq_confidence_and_several_heads_in_predict_py(run_dir, common_csv, tmp_path):
    import mixer

    model = mixer.load(run_dir)
    texts = pd.read_csv(common_csv, dtype=str, keep_default_na=False)["occ1"].head(20)
    seq = model.predict(texts, head="seq2seq")
    confidence = seq["confidence"].to_numpy()
    assert ((confidence > 0) & (confidence <= 1)).all()
    # the blocks' own probabilities multiply to at least the whole sequence's (EOS/PAD blocks add factors)
    assert (confidence <= seq["prob_1"].to_numpy() + 1e-9).all()
    assert "confidence" not in model.predict(texts, head="full").columns  # not covered
    out = tmp_path / "both.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--head",
                "flat",
                "seq2seq",
            ]
        )
        == 0
    )
    written = pd.read_csv(out)
    assert {"flat_confidence", "seq2seq_confidence"} <= set(written.columns)
    np.testing.assert_allclose(written["seq2seq_confidence"].head(20), confidence, rtol=1e-5)


def test_occcanine_greedy_confidence_is_its_own(hisco_model):
    import mixer

    model = mixer.load(hisco_model["hub"])
    table = model.predict(["farmer", "fisherman and farmer", "smith"], lang="en", head="seq2seq")
    np.testing.assert_allclose(table["confidence"].to_numpy(), table["prob_1"].to_numpy())


# ------------------------------------------------------------------ calibration
def labelled_by(csv):
    """--calibrate's labelled rows of a file: the run's own held-out rows (96) are fewer than a
    fit needs (mixer.coding.calibration.MIN_ROWS); the 240 rows of the example titles, which
    repeat the training rows' inputs as the run's own held-out rows do, are like new rows."""
    return ["--calibration-data", csv, "--calibration-truth-cols", "hisco_1", "hisco_2"]


def test_calibrate_fits_a_temperature_and_bias_that_change_no_code(
    run_dir, copy_of, common_csv, capsys
):
    import mixer
    from mixer.coding.calibration import calibrate, fit_scaling

    run = copy_of(run_dir)
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    texts = frame["occ1"]
    before = mixer.load(run).predict(texts, head="seq2seq")
    assert "confidence_raw" not in before.columns
    assert predict_main(["--checkpoint", run, "--calibrate", *labelled_by(common_csv)]) == 0
    stored = json.load(open(os.path.join(run, "calibration.json")))
    # the temperature is the one fit on the labelled rows, predicted as predict.py predicts them
    model = mixer.load(run)
    table = model._predictor.predict(texts, ["unk"] * len(texts), "seq2seq")
    truth = [frozenset(c for c in row if c) for row in frame[["hisco_1", "hisco_2"]].to_numpy()]
    correct = np.asarray([t == p for t, p in zip(truth, code_sets(table))])
    scaling = stored["heads"]["seq2seq"]["temperature"], stored["heads"]["seq2seq"]["bias"]
    assert scaling == pytest.approx(fit_scaling(table["confidence"], correct))
    assert scaling != pytest.approx((1.0, 0.0))
    assert os.path.exists(os.path.join(run, "reliability_flat.png"))
    assert (
        "expected calibration error on rows the fit did not see (5-fold cross-validation)"
        in capsys.readouterr().out
    )
    after = model.predict(texts, head="seq2seq")
    pd.testing.assert_frame_equal(
        after.drop(columns=["confidence", "confidence_raw"]), before.drop(columns=["confidence"])
    )
    np.testing.assert_allclose(after["confidence_raw"], before["confidence"])
    np.testing.assert_allclose(after["confidence"], calibrate(before["confidence"], *scaling))


def test_calibrate_refuses_what_it_cannot_fit_on(run_dir, copy_of, tmp_path, common_csv):
    run = copy_of(run_dir)
    os.remove(
        os.path.join(run, "scores.parquet")
    )  # a run from before scores.parquet: its rows chose nothing
    with pytest.raises(
        UserError,
        match=r"96 labelled rows \(the 96 validation rows of run_copy, which chose "
        r"nothing .* are too few: a fit needs at least 100",
    ):
        predict_main(["--checkpoint", run, "--calibrate"])
    with pytest.raises(UserError, match="leave out --input"):
        predict_main(["--checkpoint", run, "--calibrate", "--input", common_csv])
    shutil.copy(os.path.join(run, "model.safetensors"), os.path.join(run, "epoch_1.safetensors"))
    with pytest.raises(
        UserError, match="is none"
    ):  # an epoch's weights: the run's files are not theirs
        predict_main(["--checkpoint", os.path.join(run, "epoch_1.safetensors"), "--calibrate"])


def test_calibrate_refuses_head_threshold_and_top_k(run_dir):
    # it fits both heads at the model's own thresholds, those predict.py applies it at (a --head
    # at its default value, flat, is the same as none)
    for flag in (
        ["--head", "seq2seq"],
        ["--head", "flat", "seq2seq"],
        ["--threshold", "0.2"],
        ["--top-k", "1"],
    ):
        with pytest.raises(UserError, match=f"leave out {flag[0]}"):
            predict_main(["--checkpoint", run_dir, "--calibrate", *flag])


def test_calibrate_refuses_every_output_of_a_prediction_job(run_dir, tmp_path):
    """--calibrate writes calibration.json alone: each output a prediction job writes is
    refused in one line, those its sinks declare (--embeddings and --summary-plot too, which
    it left unwritten without a word)."""
    for flag in (
        ["--output", str(tmp_path / "out.csv")],
        ["--embeddings", str(tmp_path / "e.npy")],
        ["--to-check", "5", str(tmp_path / "c.csv")],
        ["--audit", "5", str(tmp_path / "a.csv")],
        ["--summary-plot", str(tmp_path / "plot.png")],
    ):
        with pytest.raises(UserError, match=f"writes calibration.json alone; leave out {flag[0]}"):
            predict_main(["--checkpoint", run_dir, "--calibrate", *flag])
    assert list(tmp_path.iterdir()) == []


def test_calibrate_refuses_a_directory_it_cannot_write_before_predicting(
    run_dir, copy_of, monkeypatch
):
    from mixer.prediction.predict import Predictor

    run = copy_of(run_dir)
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda path, mode, **kw: (
            False
            if os.path.samefile(path, run) and mode & os.W_OK
            else real_access(path, mode, **kw)
        ),
    )

    def no_prediction(*args, **kwargs):
        raise AssertionError("predicted before checking the directory")

    monkeypatch.setattr(Predictor, "predict", no_prediction)
    with pytest.raises(UserError, match=r"not writable; copy the model directory") as raised:
        predict_main(["--checkpoint", run, "--calibrate"])
    assert "\n" not in str(raised.value) and run in str(raised.value)
    assert not os.path.exists(os.path.join(run, "calibration.json"))


def test_calibrate_writes_its_files_as_one_step(trained, copy_of, monkeypatch, common_csv):
    run = copy_of(trained)
    names = ["calibration.json", "reliability_flat.png", "reliability_seq2seq.png"]
    before = {name: open(os.path.join(run, name), "rb").read() for name in names}
    real_replace = os.replace

    def busy(src, dst, *args, **kwargs):  # calibration.json a read-only mount of its own (EBUSY)
        if os.path.basename(dst) == "calibration.json" and ".tmp-" in os.path.basename(src):
            raise OSError(16, "Device or resource busy")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", busy)
    with pytest.raises(UserError, match="are as they were") as raised:
        predict_main(["--checkpoint", run, "--calibrate", *labelled_by(common_csv)])
    assert "\n" not in str(raised.value)
    assert {name: open(os.path.join(run, name), "rb").read() for name in names} == before
    assert not [f for f in os.listdir(run) if f.startswith(".tmp-")]


def test_calibrate_says_what_it_was_fit_on_and_keeps_nothing_of_the_run_s_own(
    trained, copy_of, common_csv
):
    run = copy_of(trained)
    assert "splits" in json.load(
        open(os.path.join(run, "calibration.json"))
    )  # the run's end-of-run fit
    assert predict_main(["--checkpoint", run, "--calibrate", *labelled_by(common_csv)]) == 0
    stored = json.load(open(os.path.join(run, "calibration.json")))
    assert set(stored) == {"version", "heads", "rows", "fit_by", "fit_on"}
    assert stored["fit_by"] == "predict.py --calibrate"
    assert (
        stored["fit_on"]["thresholds"] == "the model's own"
        and stored["fit_on"]["data"] == "common.csv"
    )
    assert stored["fit_on"]["count"] == stored["heads"]["flat"]["rows"]
    assert all("held_out" not in entry for entry in stored["heads"].values())
    # the card's summary still reads the scored rows (scores.parquet's splits)
    from mixer.coding.scores import read_summary

    assert read_summary(run)["splits"]


# ------------------------------------------------------------------ a target accuracy
def chosen_here(run, accuracy, confidence=0.9, rows_to_code=None, quantize=None):
    """The threshold mixer.coding.guarantee chooses on the run's held-out rows, predicted here."""
    import mixer
    from mixer.coding.guarantee import choose_threshold

    rows = held_out(run)
    model = mixer.load(run, quantize=quantize)
    table = model._predictor.predict(rows["text"], rows["lang"], "flat")
    truth = [frozenset(t.split(" & ")) - {""} for t in rows["true_codes"]]
    correct = [t == p for t, p in zip(truth, code_sets(table))]
    return choose_threshold(table["confidence"], correct, accuracy, 1 - confidence, rows_to_code)


def test_target_accuracy_marks_rows_by_the_threshold_chosen_on_rows_that_chose_nothing(
    run_dir, common_csv, tmp_path, capsys
):
    accuracy = (
        0.5  # the tiny model's held-out accuracy is 0.54: a target its most confident rows reach
    )
    expected = chosen_here(run_dir, accuracy, rows_to_code=240)
    assert expected.threshold is not None and 0 < expected.coded_share < 1
    out = tmp_path / "coded.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--target-accuracy",
                str(accuracy),
                "--target-confidence",
                "0.9",
            ]
        )
        == 0
    )
    written = pd.read_csv(out, dtype={"coded": str})
    auto = written["confidence"] >= expected.threshold
    assert (written["coded"] == np.where(auto, "auto", "check")).all()
    assert auto.any() and not auto.all()
    err = capsys.readouterr().err
    assert (
        f"the model coded automatically at accuracy >= {accuracy:g} (confidence 0.9): {auto.sum():,} rows"
        in err
    )
    assert "target= was chosen for" not in err  # the API's note: predict.py counted its own rows
    sidecar = json.load(open(f"{out}.provenance.json"))
    assert sidecar["target"]["flat"]["threshold"] == pytest.approx(expected.threshold)
    assert sidecar["result"]["coded"]["flat"]["auto"] == auto.sum()


def test_an_unreachable_target_is_refused_with_the_rows_it_would_take(
    run_dir, common_csv, tmp_path
):
    out = tmp_path / "never.csv"
    with pytest.raises(UserError, match=r"accuracy 0.8 .* about [\d,]+ like them would"):
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--target-accuracy",
                "0.8",
                "--target-confidence",
                "0.9",
            ]
        )
    assert not os.listdir(tmp_path)  # nothing half-written


def test_target_accuracy_is_chosen_again_at_int8(run_dir):
    import mixer

    model = mixer.load(run_dir, quantize="int8")
    target = model.target(0.5, 0.9)
    assert target.threshold == pytest.approx(chosen_here(run_dir, 0.5, quantize="int8").threshold)
    fp32 = mixer.load(run_dir).target(0.5, 0.9)
    with pytest.raises(UserError, match="by another model or settings"):
        model.predict(["farmer"], target=fp32)  # a threshold of fp32 numbers is not int8's


def test_target_accuracy_needs_labelled_rows_that_chose_nothing(
    run_dir, copy_of, hisco_model, common_csv, tmp_path
):
    import mixer

    with pytest.raises(
        UserError, match="labelled rows of your own with calibration_data="
    ):  # the API names keywords
        mixer.load(hisco_model["hub"]).target(0.9)
    run = copy_of(run_dir)
    write_scores(run, chose=10_000)  # every row chose something
    with pytest.raises(UserError, match="every scored row .* chose something"):
        mixer.load(run).target(0.5)
    # a filled --to-check file holds the least confident rows, not rows like the ones to code
    check = tmp_path / "check.csv"
    assert (
        predict_main(
            ["--checkpoint", run_dir, "--input", common_csv, "--to-check", "5", str(check)]
        )
        == 0
    )
    with pytest.raises(UserError, match="least sure of"):
        mixer.load(run_dir).target(0.5, labelled=str(check))


def test_labelled_rows_of_ones_own_and_a_filled_audit(run_dir, common_csv, tmp_path):
    import mixer
    from mixer.coding.guarantee import choose_threshold

    model = mixer.load(run_dir)
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    target = model.target(0.5, 0.9, labelled=common_csv, truth_cols=["hisco_1", "hisco_2"])
    table = model.predict(frame["occ1"])
    truth = [frozenset(c for c in row if c) for row in frame[["hisco_1", "hisco_2"]].to_numpy()]
    correct = [t == p for t, p in zip(truth, code_sets(table))]
    assert target.threshold == choose_threshold(table["confidence"], correct, 0.5, 0.1).threshold
    assert target.rows_used == len(frame)
    # an audit, filled: its rows with their verdicts; a stratified one is refused
    audit = tmp_path / "audit.csv"
    assert (
        predict_main(["--checkpoint", run_dir, "--input", common_csv, "--audit", "40", str(audit)])
        == 0
    )
    filled = pd.read_csv(audit, dtype=str, keep_default_na=False)
    truth_of = frame.drop_duplicates("occ1").set_index("occ1")
    filled["true_code_1"] = truth_of["hisco_1"].reindex(filled["occ1"]).to_numpy()
    filled["true_code_2"] = truth_of["hisco_2"].reindex(filled["occ1"]).to_numpy()
    filled.loc[30:, ["true_code_1", "true_code_2"]] = ""  # the person stopped after 30 rows
    filled.to_csv(audit, index=False)
    from_audit = model.target(0.5, 0.9, labelled=str(audit))
    assert from_audit.rows_used == 30
    strata = tmp_path / "strata.csv"
    frame.assign(half=np.arange(len(frame)) % 2).to_csv(tmp_path / "halves.csv", index=False)
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                str(tmp_path / "halves.csv"),
                "--audit",
                "20",
                str(strata),
                "--audit-by",
                "half",
            ]
        )
        == 0
    )
    with pytest.raises(UserError, match="stratified audit"):
        model.target(0.5, labelled=str(strata))


def test_rows_without_a_true_code_are_not_labelled_rows(
    run_dir, copy_of, common_csv, tmp_path, capsys
):
    """A partly labelled --calibration-data file: rows whose truth cells are all empty are
    left out (not counted as wrong), for --target-accuracy and --calibrate alike, and said."""
    import mixer
    from mixer.coding.guarantee import choose_threshold

    model = mixer.load(run_dir)
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    unlabelled = np.arange(len(frame)) % 3 == 0
    half = frame.copy()
    half.loc[unlabelled, ["hisco_1", "hisco_2"]] = ""
    path = tmp_path / "partly.csv"
    half.to_csv(path, index=False)
    target = model.target(0.5, 0.9, labelled=str(path), truth_cols=["hisco_1", "hisco_2"])
    labelled = frame[~unlabelled]
    table = model.predict(labelled["occ1"])
    truth = [frozenset(c for c in row if c) for row in labelled[["hisco_1", "hisco_2"]].to_numpy()]
    correct = [t == p for t, p in zip(truth, code_sets(table))]
    assert target.threshold == choose_threshold(table["confidence"], correct, 0.5, 0.1).threshold
    assert target.rows_used == len(labelled)
    assert f"less {unlabelled.sum()} without a true code in hisco_1, hisco_2" in target.rows
    run = copy_of(run_dir)
    assert (
        predict_main(
            [
                "--checkpoint",
                run,
                "--calibrate",
                "--calibration-data",
                str(path),
                "--calibration-truth-cols",
                "hisco_1",
                "hisco_2",
            ]
        )
        == 0
    )
    assert (
        f"on {len(labelled)} rows ({len(labelled)} labelled rows of partly.csv, less {unlabelled.sum()} "
        "without a true code" in capsys.readouterr().out
    )
    half[["hisco_1", "hisco_2"]] = ""
    half.to_csv(path, index=False)
    with pytest.raises(
        UserError, match=f"none of its {len(half)} rows has both a description .* and a true code"
    ):
        model.target(0.5, 0.9, labelled=str(path), truth_cols=["hisco_1", "hisco_2"])


def test_to_check_takes_the_rest_and_an_audit_the_rows_coded(run_dir, common_csv, tmp_path):
    out, check, audit = tmp_path / "out.csv", tmp_path / "check.csv", tmp_path / "audit.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--target-accuracy",
                "0.5",
                "--target-confidence",
                "0.9",
                "--to-check",
                "1000",
                str(check),
                "--audit",
                "1000",
                str(audit),
            ]
        )
        == 0
    )
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    listed = pd.read_csv(check, dtype=str, keep_default_na=False)
    assert set(listed["occ1"]) == set(written.loc[written["coded"] == "check", "occ1"])
    drawn = pd.read_csv(audit, dtype=str, keep_default_na=False)
    assert len(drawn) == (written["coded"] == "auto").sum()
    assert set(drawn["occ1"]) <= set(written.loc[written["coded"] == "auto", "occ1"])
    assert "needing a check (--target-accuracy)" in drawn["audit"].iloc[0]
    import mixer

    with pytest.raises(UserError, match="coded automatically at a target accuracy"):
        mixer.load(run_dir).target(
            0.5, labelled=str(audit)
        )  # it checks the promise; it cannot choose


# ------------------------------------------------------------------ shorter codes
def test_shorter_codes_give_the_longest_prefix_that_passes(run_dir, common_csv, tmp_path):
    import mixer
    from mixer.coding import target as targets

    model = mixer.load(run_dir)
    plain = model.target(0.5, 0.9)
    shorter = model.target(0.5, 0.9, shorter_codes=True, levels=[1, 2, 3])
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    full = model.predict(frame["occ1"], target=plain)
    cut = model.predict(frame["occ1"], target=shorter)
    assert set(cut["level"]) > {5}  # some rows are given a coarser class
    given = cut["coded"] == "auto"
    assert given.sum() > (full["coded"] == "auto").sum()
    for row in np.flatnonzero((cut["level"] < 5).to_numpy() & given.to_numpy()):
        level = int(cut["level"].iloc[row])
        assert cut["level_confidence_raw"].iloc[row] >= shorter.threshold
        whole = [
            c for c in model.predict(frame["occ1"].iloc[[row]])[["code_1", "code_2"]].iloc[0] if c
        ]
        assert code_sets(cut.iloc[[row]])[0] == frozenset(c[:level] for c in whole)
    # without levels, the counting of shorter codes is choose_threshold's own test
    rows = held_out(run_dir)
    table = model._predictor.predict(rows["text"], rows["lang"], "flat")
    truth = [tuple(sorted(set(t.split(" & ")) - {""})) for t in rows["true_codes"]]
    probe = targets.Target("flat", 0.5, 0.9, None, (), 5, "", None, 0.0, len(rows), "")
    assert targets._sequence(probe, table, truth, None).threshold == plain.threshold
    with pytest.raises(UserError, match="code_levels="):  # the API's keyword
        model.target(0.5, shorter_codes=True)  # a code system of the user's: no levels known


@pytest.fixture(scope="module")
def shorter_target(run_dir):
    import mixer

    model = mixer.load(run_dir)
    return model, model.target(0.5, 0.9, shorter_codes=True, levels=[1, 2, 3])


@pytest.fixture
def with_a_blank(common_csv, tmp_path):
    """common_csv with its 6th row's description emptied (spaces)."""
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    frame.loc[5, "occ1"] = "  "
    path = tmp_path / "with_blank.csv"
    frame.to_csv(path, index=False)
    return str(path)


def test_a_row_without_a_description_has_no_level_in_the_api(shorter_target):
    model, target = shorter_target
    table = model.predict(["farmer", "", "labourer"], target=target)
    assert table["level"].isna().tolist() == [False, True, False]
    assert table["coded"].iloc[1] == "" and np.isnan(table["confidence"].iloc[1])
    assert set(table["level"].dropna().astype(int)) <= {1, 2, 3, 5}


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".dta"])
def test_a_row_without_a_description_has_no_level_in_every_file(
    run_dir, with_a_blank, tmp_path, suffix
):
    out = tmp_path / f"out{suffix}"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                with_a_blank,
                "--output",
                str(out),
                "--target-accuracy",
                "0.2",
                "--target-confidence",
                "0.9",
                "--shorter-codes",
                "--code-levels",
                "1",
                "2",
                "3",
            ]
        )
        == 0
    )
    written = {
        ".csv": lambda p: pd.read_csv(
            p, dtype={"coded": str}, keep_default_na=False, na_values=[""]
        ),
        ".parquet": pd.read_parquet,
        ".dta": pd.read_stata,
    }[suffix](out)
    assert written["level"].isna().tolist() == [i == 5 for i in range(len(written))]
    assert set(written["level"].dropna().astype(int)) <= {1, 2, 3, 5}


def test_rows_without_a_description_are_counted_beside_auto_and_check(
    run_dir, with_a_blank, tmp_path, capsys
):
    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                with_a_blank,
                "--output",
                str(out),
                "--target-accuracy",
                "0.3",
                "--target-confidence",
                "0.9",
            ]
        )
        == 0
    )
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert written["coded"].tolist()[5] == "" and set(written["coded"].drop(index=5)) <= {
        "auto",
        "check",
    }
    auto, check = (int((written["coded"] == kind).sum()) for kind in ("auto", "check"))
    assert auto + check == len(written) - 1
    err = capsys.readouterr().err
    assert f"needs a check: {check:,} rows ({check / len(written):.1%}; " in err
    assert f"; 1 rows ({1 / len(written):.1%}) without a description: no code" in err
    result = json.load(open(f"{out}.provenance.json"))["result"]["coded"]["flat"]
    assert (result["auto"], result["check"], result["no_description"]) == (auto, check, 1)


def test_the_level_confidence_says_it_is_on_the_raw_scale(trained, common_csv):
    """Beside a calibrated confidence, the shorter code's confidence stays raw (the threshold's
    scale) and its name says so, as confidence_raw's does."""
    import mixer

    model = mixer.load(trained)
    target = model.target(0.3, 0.9, shorter_codes=True, levels=[1, 2, 3])
    table = model.predict(
        pd.read_csv(common_csv, dtype=str, keep_default_na=False)["occ1"], target=target
    )
    assert "level_confidence_raw" in table.columns and "level_confidence" not in table.columns
    full = (table["level"] == 5).to_numpy()
    np.testing.assert_array_equal(
        table["level_confidence_raw"][full], table["confidence_raw"][full]
    )
    assert not np.allclose(
        table["confidence"][full], table["confidence_raw"][full]
    )  # calibrated beside it
    auto = (table["coded"] == "auto").to_numpy()
    assert (table["level_confidence_raw"][auto] >= target.threshold).all()


def synthetic_rows(n=1000):
    """Rows whose accuracy rises with their confidence, the most confident one wrong, and a
    coarser level (1 character) that never passes: shorter codes can change nothing."""
    rng = np.random.default_rng(0)
    confidence = np.sort(rng.uniform(0.0, 1.0, n))[::-1]
    right = rng.uniform(size=n) < 0.8 + 0.2 * confidence
    right[0] = False
    table = pd.DataFrame(
        {
            "code_1": np.where(right, "11111", "22222"),
            "prob_1": confidence,
            "confidence": confidence,
            "level_confidence_1": np.zeros(n),
        }
    )
    return table, [("11111",)] * n


def test_shorter_codes_choose_by_the_guarantees_own_procedure():
    """The levels path is mixer.coding.guarantee's (START included): with a level that never
    passes it chooses what the plain path chooses; an unreachable target is the one-line
    refusal, not a crash in the count of the rows it would take."""
    from mixer.coding import guarantee
    from mixer.coding import target as targets

    table, truth = synthetic_rows()

    def probe(levels, accuracy=0.9):
        return targets.Target(
            "flat", accuracy, 0.95, None, levels, 5, "", None, 0.0, len(table), "synthetic"
        )

    plain = targets._sequence(probe(()), table.drop(columns="level_confidence_1"), truth, None)
    cut = targets._sequence(probe((1,)), table, truth, None)
    assert plain.threshold is not None and cut.threshold == plain.threshold
    assert cut.coded_share == plain.coded_share and cut.bound == plain.bound
    assert f"the first point tested one with rows to pass {guarantee.START:g}" in cut.procedure
    assert "counted at the level they are given" in cut.procedure
    for rows_to_code in (None, 5000):
        never = targets._sequence(probe((1,), accuracy=0.999), table, truth, rows_to_code)
        assert never.threshold is None and never.note
        with pytest.raises(
            UserError,
            match="no confidence threshold reaches accuracy 0.999 .*a lower --target-accuracy$",
        ):
            never.check_reached()


def test_an_unreachable_target_with_shorter_codes_is_refused_in_one_line(
    run_dir, common_csv, tmp_path
):
    out = tmp_path / "never.csv"
    with pytest.raises(
        UserError, match="accuracy 0.99 .*or a lower --target-accuracy$"
    ):  # less its suggestion
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--target-accuracy",
                "0.99",
                "--shorter-codes",
                "--code-levels",
                "1",
                "2",
                "3",
            ]
        )
    assert not os.listdir(tmp_path)


# ------------------------------------------------------------------ lookup
def test_lookup_codes_win_matched_on_what_the_model_reads(run_dir, common_csv, tmp_path, capsys):
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    first = frame["occ1"].iloc[0]
    dictionary = tmp_path / "dict.csv"
    pd.DataFrame(
        {"title": [f"  {first} ", "no such title"], "c1": ["61110", "99910"], "c2": ["64100", ""]}
    ).to_csv(dictionary, index=False)
    out = tmp_path / "out.parquet"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--lookup",
                str(dictionary),
                "--lookup-input-col",
                "title",
                "--lookup-code-cols",
                "c1",
                "c2",
            ]
        )
        == 0
    )
    written = pd.read_parquet(out)
    matched = written["occ1"] == first  # the model strips its text: '  x ' reads as 'x'
    assert (written.loc[matched, "source"] == "lookup").all() and (
        written.loc[~matched, "source"] == "model"
    ).all()
    assert code_sets(written[matched]) == [frozenset({"61110", "64100"})] * int(matched.sum())
    assert written.loc[matched, "confidence"].isna().all()
    assert f"{int(matched.sum())} rows" in capsys.readouterr().err
    sidecar = json.load(open(f"{out}.provenance.json"))
    assert (
        sidecar["lookup"]["entries"] == 2 and sidecar["result"]["source"]["lookup"] == matched.sum()
    )
    # one input, two code sets: refused, naming the lines
    pd.DataFrame({"title": [first, f"{first} "], "c1": ["61110", "99910"]}).to_csv(
        dictionary, index=False
    )
    with pytest.raises(UserError, match="line 2 and line 3 give .* two code sets"):
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(tmp_path / "x.csv"),
                "--lookup",
                str(dictionary),
                "--lookup-input-col",
                "title",
                "--lookup-code-cols",
                "c1",
            ]
        )
    pd.DataFrame({"occ1": [first], "c1": ["6111"]}).to_csv(dictionary, index=False)
    with pytest.raises(UserError, match="line 2: code '6111'"):
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(tmp_path / "x.csv"),
                "--lookup",
                str(dictionary),
                "--lookup-code-cols",
                "c1",
            ]
        )
    assert not os.path.exists(tmp_path / "x.csv")


def test_a_filled_check_list_is_a_lookup_and_the_threshold_is_chosen_without_its_rows(
    run_dir, common_csv, tmp_path
):
    import mixer

    check = tmp_path / "check.csv"
    assert (
        predict_main(
            ["--checkpoint", run_dir, "--input", common_csv, "--to-check", "6", str(check)]
        )
        == 0
    )
    filled = pd.read_csv(check, dtype=str, keep_default_na=False)
    filled.loc[:2, "checked_1"] = "99910"  # three rows checked
    filled.to_csv(check, index=False)
    model = mixer.load(run_dir)
    lookup = model.lookup(str(check))
    assert lookup.layout == "to-check" and len(lookup.codes) == 3
    table = model.predict(filled["occ1"], lookup=lookup)
    assert table["source"].tolist() == ["lookup"] * 3 + ["model"] * 3
    assert (table["code_1"].iloc[:3] == "99910").all()
    # the labelled rows the lookup covers are left out of the choice
    rows = held_out(run_dir)
    rows.iloc[:4][["text"]].rename(columns={"text": "occ1"}).assign(code="99910").to_csv(
        tmp_path / "held.csv", index=False
    )
    covered = model.target(
        0.5, 0.9, lookup=model.lookup(str(tmp_path / "held.csv"), code_cols=["code"])
    )
    assert covered.rows_used == (~rows["text"].isin(rows["text"].iloc[:4])).sum() < len(rows)


# ------------------------------------------------------------------ provenance
@pytest.mark.parametrize("suffix", [".parquet", ".dta", ".csv", ".xlsx"])
def test_every_predictions_file_says_what_made_it(run_dir, common_csv, tmp_path, suffix):
    from mixer.data.tables.reading import file_label
    from mixer.coding import provenance
    from mixer.audit.draw import model_fingerprint
    import mixer

    out = str(tmp_path / f"out{suffix}")
    assert predict_main(["--checkpoint", run_dir, "--input", common_csv, "--output", out]) == 0
    made = provenance.read(out)
    assert made["model"]["fingerprint"] == model_fingerprint(mixer.load(run_dir)._predictor)
    assert made["mixer"] == mixer.__version__ and made["input"]["name"] == "common.csv"
    assert made["thresholds"] == {"flat": "0.5"} and made["calibration"] == {
        "flat": {"temperature": 1.0, "bias": 0.0}
    }
    assert made["result"]["rows"] == 240
    carried = file_label(out)
    if suffix in (".parquet", ".dta"):
        assert carried == f"mixer provenance {made['id']}" and len(carried) <= 80
    else:
        assert carried is None  # CSV and Excel: the sidecar alone
    # a second file written otherwise has another id; a sidecar moved beside it is refused
    other = str(tmp_path / f"other{suffix}")
    assert (
        predict_main(
            ["--checkpoint", run_dir, "--input", common_csv, "--output", other, "--top-k", "1"]
        )
        == 0
    )
    assert provenance.read(other)["id"] != made["id"]
    if suffix in (".parquet", ".dta"):
        shutil.copy(f"{out}.provenance.json", f"{other}.provenance.json")
        with pytest.raises(UserError, match="the sidecar is another file's"):
            provenance.read(other)


@pytest.mark.parametrize("failing", ["out.csv", "out.csv.provenance.json"])
def test_a_failed_commit_leaves_the_old_file_and_its_own_sidecar(
    run_dir, common_csv, tmp_path, monkeypatch, failing
):
    out = str(tmp_path / "out.csv")
    assert predict_main(["--checkpoint", run_dir, "--input", common_csv, "--output", out]) == 0
    before = {path: open(path, "rb").read() for path in (out, f"{out}.provenance.json")}
    real_replace = os.replace

    def busy(src, dst, *args, **kwargs):  # the file (or its sidecar) a read-only mount of its own
        # the file's temp: beside it, or in a resumable job's parts (.tmp-out.csv.parts/output.csv)
        if os.path.basename(dst) == failing and ".tmp-" in src:
            raise OSError(16, "Device or resource busy")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", busy)
    argv = ["--checkpoint", run_dir, "--input", common_csv, "--output", out, "--top-k", "1"]
    argv += ["--target-accuracy", "0.3"]
    with pytest.raises(UserError, match="writing it failed .*as before") as raised:
        predict_main(argv)
    assert "\n" not in str(raised.value)
    assert {path: open(path, "rb").read() for path in before} == before
    # what was predicted stays in the job's parts: the same command writes it, predicting nothing
    assert "the 1 chunk(s) predicted are kept" in str(raised.value)
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp-") and "parts" not in f] == []
    monkeypatch.setattr(os, "replace", real_replace)
    assert predict_main(argv) == 0
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]


# ------------------------------------------------------------------ N processes
def test_two_processes_choose_the_threshold_and_mark_the_rows_of_one(run_dir, common_csv, tmp_path):
    from conftest import rank0_gathers_cmd, run, run_program

    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    flags = [
        "--checkpoint",
        run_dir,
        "--input",
        common_csv,
        "--target-accuracy",
        "0.3",
        "--target-confidence",
        "0.9",
        "--batch-size",
        "16",
    ]
    run_program("predict.py", *flags, "--output", one)
    run(
        rank0_gathers_cmd(2, "predict.py")
        + ["--distributed", *flags, "--output", str(two), "--chunk-size", "50"]
    )
    a, b = (pd.read_csv(path, dtype=str, keep_default_na=False) for path in (one, two))
    assert a["coded"].tolist() == b["coded"].tolist() and (a["coded"] == "auto").any()
    made = [json.load(open(f"{path}.provenance.json")) for path in (one, two)]
    assert made[0]["target"] == made[1]["target"]
    assert made[0]["result"] == made[1]["result"]


def test_the_best_model_of_a_run_that_has_not_ended_is_named_as_such(trained, tmp_path, common_csv):
    """Review of issue 37: RUN/best of a running or stopped run has no scores.parquet yet;
    --target-accuracy blamed an earlier version and a missing args.yaml."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    best = run / "best"
    best.mkdir()
    for name in ("config.json", "key.csv", "model.safetensors", "encoder", "tokenizer"):
        source = run / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, best / name)
    with pytest.raises(
        UserError,
        match=r"best has no scores.parquet yet: a run writes it for its best model when "
        r"it ends; let the run finish",
    ):
        predict_main(
            [
                "--checkpoint",
                str(best),
                "--input",
                common_csv,
                "--output",
                str(tmp_path / "o.csv"),
                "--target-accuracy",
                "0.3",
            ]
        )


# ------------------------------------------------------------------ issue 42: labelled rows, calibration, languages
@pytest.fixture(scope="module")
def varied_run(tmp_path_factory, toy_frame):
    """A tiny run on 400 rows of the example data as they come (few titles repeat, so its own
    held-out rows share about a quarter of their inputs and codes with its training rows)."""
    base = tmp_path_factory.mktemp("varied")
    data = base / "data.csv"
    toy_frame[toy_frame["hisco_1"].str.len() == 5].head(400).to_csv(data, index=False)
    run = base / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                str(data),
                "--target-cols",
                "hisco_1",
                "--save-path",
                str(run),
                "--share-val",
                "0.4",
                *TINY,
                "--max-steps",
                "30",
                "--batch-size",
                "16",
                "--learning-rate",
                "5e-3",
            ]
        )
        == 0
    )
    return str(run)


def split_as_labelled(run, split, path, rows=None):
    """A prepared split of the run written as a labelled file (its text and code)."""
    frame = pd.read_parquet(os.path.join(run, f"data_{split}.parquet"))
    table = pd.DataFrame(
        {"occ1": frame["text"].astype(str), "hisco_1": frame["code_1"].astype(str)}
    )
    table = table if rows is None else table.head(rows)
    table.to_csv(path, index=False)
    return table


def test_labelled_rows_the_model_trained_on_are_refused_or_left_out(varied_run, tmp_path, capsys):
    """Issue 42, item 2: a labelled file of the run's own training rows is refused in one line
    (for --target-accuracy, --calibrate and Model.target); rows like the run's own held-out rows
    are kept; a file with more training rows than those would hold loses them, counted."""
    import mixer

    model = mixer.load(varied_run)
    trained = split_as_labelled(varied_run, "train", tmp_path / "train.csv", rows=150)
    truth = ["--calibration-truth-cols", "hisco_1"]
    with pytest.raises(
        UserError, match=r"150 of its 150 labelled rows \(100%\) are rows run trained on"
    ) as raised:
        model.target(0.05, 0.5, labelled=str(tmp_path / "train.csv"), truth_cols=["hisco_1"])
    assert "\n" not in str(raised.value)
    with pytest.raises(UserError, match="are rows run trained on"):
        predict_main(
            [
                "--checkpoint",
                varied_run,
                "--input",
                str(tmp_path / "train.csv"),
                "--output",
                str(tmp_path / "out.csv"),
                "--target-accuracy",
                "0.05",
                "--calibration-data",
                str(tmp_path / "train.csv"),
                *truth,
            ]
        )
    assert not os.path.exists(tmp_path / "out.csv")
    before = open(os.path.join(varied_run, "calibration.json")).read()
    with pytest.raises(UserError, match="are rows run trained on"):
        predict_main(
            [
                "--checkpoint",
                varied_run,
                "--calibrate",
                "--calibration-data",
                str(tmp_path / "train.csv"),
                *truth,
            ]
        )
    assert open(os.path.join(varied_run, "calibration.json")).read() == before
    # the run's own held-out rows, as a file: trained-on inputs and codes as often as new rows have them
    val = split_as_labelled(varied_run, "val", tmp_path / "val.csv")
    seen = set(
        zip(
            pd.read_parquet(os.path.join(varied_run, "data_train.parquet"))["text"].astype(str),
            pd.read_parquet(os.path.join(varied_run, "data_train.parquet"))["code_1"].astype(str),
        )
    )
    in_train = np.asarray([(t, c) in seen for t, c in zip(val["occ1"], val["hisco_1"])])
    assert 0 < in_train.mean() < 0.5
    kept = model.target(0.05, 0.5, labelled=str(tmp_path / "val.csv"), truth_cols=["hisco_1"])
    assert kept.rows_used == len(val)
    assert f"{in_train.sum()} of its {len(val)} labelled rows" in capsys.readouterr().err
    # the held-out rows and 60 training rows: more than new rows hold, less than half: left out
    mixed = pd.concat([val, trained.tail(60)], ignore_index=True)
    mixed.to_csv(tmp_path / "mixed.csv", index=False)
    left = np.concatenate([in_train, np.ones(60, dtype=bool)])
    target = model.target(0.05, 0.5, labelled=str(tmp_path / "mixed.csv"), truth_cols=["hisco_1"])
    assert target.rows_used == int((~left).sum())
    assert f"less the {left.sum()} the model trained on" in target.rows
    assert f"{left.sum()} of its {len(mixed)} labelled rows" in capsys.readouterr().err


# every language value a file may state beside a training row's text: as given, in another
# case, another language, blank, unknown and one the run never saw
EVERY_LANGUAGE = ["en", "EN", "da", "", "unk", "xx"]


@pytest.mark.parametrize("language", EVERY_LANGUAGE)
def test_training_rows_are_known_whatever_language_the_file_states(varied_run, tmp_path, language):
    """Issue 50, item 1: the run read no language column (its rows are 'unk'); its training
    rows passed with any --language are still its training rows, as the model scores them:
    refused for --target-accuracy, --calibrate and Model.target alike."""
    import mixer

    split_as_labelled(varied_run, "train", tmp_path / "train.csv", rows=150)
    labelled = ["--calibration-data", str(tmp_path / "train.csv")]
    labelled += ["--calibration-truth-cols", "hisco_1", "--language", language]
    with pytest.raises(UserError, match=r"150 of its 150 labelled rows \(100%\) are rows run"):
        mixer.load(varied_run).target(
            0.05,
            0.5,
            calibration_data=str(tmp_path / "train.csv"),
            calibration_truth_cols=["hisco_1"],
            language=language,
        )
    out = tmp_path / "out.csv"
    with pytest.raises(UserError, match="are rows run trained on"):
        predict_main(
            ["--checkpoint", varied_run, "--input", str(tmp_path / "train.csv")]
            + ["--output", str(out), "--target-accuracy", "0.05", *labelled]
        )
    assert not os.path.exists(out)
    with pytest.raises(UserError, match="are rows run trained on"):
        predict_main(["--checkpoint", varied_run, "--calibrate", *labelled])


def test_training_rows_are_known_whatever_language_each_row_states(varied_run, tmp_path):
    """Issue 50, item 1: a language column with every value, row by row."""
    import mixer

    table = split_as_labelled(varied_run, "train", tmp_path / "train.csv", rows=150)
    table["lang"] = [EVERY_LANGUAGE[i % len(EVERY_LANGUAGE)] for i in range(len(table))]
    table.to_csv(tmp_path / "train.csv", index=False)
    with pytest.raises(UserError, match=r"150 of its 150 labelled rows \(100%\) are rows run"):
        mixer.load(varied_run).target(
            0.05,
            0.5,
            calibration_data=str(tmp_path / "train.csv"),
            calibration_truth_cols=["hisco_1"],
            language_col="lang",
        )


@pytest.mark.parametrize("literal", [False, True], ids=["pair", "occcanine"])
def test_a_training_row_is_keyed_by_its_text_as_read_in_any_language(literal):
    """Issue 50, item 1: the key of a training row (mixer.coding.target._row_keys) is the same
    for every language beside its text, for a model that reads the language as a tokenizer
    pair and for OccCANINE's, which reads the literal 'lang[SEP]text'; its text as the model
    reads it (lower-cased, in ASCII, stripped where the recipe says so) and its codes still
    tell rows apart."""
    from types import SimpleNamespace

    from mixer.coding.target import _row_keys
    from mixer.data.inputs.tokens import CanineIds, InputRecipe, reading_keys

    recipe = InputRecipe(
        max_len=128,
        language="literal" if literal else "pair",
        lowercase=literal,
        ascii=literal,
        strip=not literal,
    )
    ids = CanineIds(recipe)
    model = SimpleNamespace(reading_keys=lambda texts, langs: reading_keys(ids, texts, langs))
    langs = np.asarray(EVERY_LANGUAGE + ["da"], dtype=object)
    texts = np.full(len(langs), "farmer", dtype=object)
    truth = [("61110",)] * len(langs)
    keys = _row_keys(model, texts, langs, truth)
    assert len(set(keys.tolist())) == 1
    spelled = "FÁRMER" if literal else " farmer "  # the same text as this model reads it
    other = _row_keys(
        model,
        np.asarray([spelled, "fisher", "farmer"], dtype=object),
        np.asarray(["unk", "unk", "unk"], dtype=object),
        [("61110",), ("61110",), ("64100",)],
    )
    assert other[0] == keys[0]
    assert keys[0] not in other[1:]


def test_calibrate_refuses_too_few_rows_and_a_degenerate_fit_keeping_the_old(
    trained, copy_of, common_csv, tmp_path
):
    """Issue 42, item 4: 10 rows, or rows the flat head gets all right, fit nothing; the
    calibration the model had stays as it was."""
    import mixer

    run = copy_of(trained)
    before = open(os.path.join(run, "calibration.json")).read()
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    frame.head(10).to_csv(tmp_path / "ten.csv", index=False)
    with pytest.raises(
        UserError,
        match=r"10 labelled rows .* are too few: a fit needs at least 100; the model's "
        "calibration is as it was",
    ):
        predict_main(["--checkpoint", run, "--calibrate", *labelled_by(str(tmp_path / "ten.csv"))])
    predicted = mixer.load(run).predict(
        frame["occ1"]
    )  # every row labelled with the flat head's own codes
    frame["hisco_1"], frame["hisco_2"] = (
        predicted["code_1"].to_numpy(),
        predicted["code_2"].to_numpy(),
    )
    frame.to_csv(tmp_path / "right.csv", index=False)
    with pytest.raises(
        UserError,
        match=r"flat head: 0 of its 240 labelled rows are wrong \(at least 20 right and "
        "20 wrong",
    ):
        predict_main(
            ["--checkpoint", run, "--calibrate", *labelled_by(str(tmp_path / "right.csv"))]
        )
    assert open(os.path.join(run, "calibration.json")).read() == before


def test_calibrate_reports_the_error_on_rows_the_fit_did_not_see(run_dir, copy_of, common_csv):
    import mixer
    from mixer.coding.calibration import cross_validated, expected_calibration_error

    run = copy_of(run_dir)
    assert predict_main(["--checkpoint", run, "--calibrate", *labelled_by(common_csv)]) == 0
    entry = json.load(open(os.path.join(run, "calibration.json")))["heads"]["flat"]
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    table = mixer.load(run)._predictor.predict(frame["occ1"], ["unk"] * len(frame), "flat")
    truth = [frozenset(c for c in row if c) for row in frame[["hisco_1", "hisco_2"]].to_numpy()]
    correct = np.asarray([t == p for t, p in zip(truth, code_sets(table))])
    held = entry["cross_validated"]
    assert held["folds"] == 5
    assert held["ece_after"] == pytest.approx(
        expected_calibration_error(cross_validated(table["confidence"], correct), correct)
    )
    assert held["ece_after"] != pytest.approx(
        entry["ece_after"]
    )  # not the error on the rows fit on


def test_a_language_the_model_never_saw_is_said_and_the_labelled_rows_take_it(
    run_dir, common_csv, tmp_path, capsys
):
    """Issue 42, item 7: the run trained with 'unk' alone; --language en is said in one line, and
    --target-accuracy predicts the run's labelled rows with 'en' as it predicts the file."""
    import mixer
    from mixer.coding.guarantee import choose_threshold

    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(tmp_path / "o.csv"),
                "--language",
                "en",
            ]
        )
        == 0
    )
    notes = [line for line in capsys.readouterr().err.splitlines() if "never trained with" in line]
    assert notes == [
        f"note: --input {common_csv}: 240 rows have a language value the model never trained with: "
        "'en' (240) (it trained with 'unk'); it reads them as an input it never saw, so their codes "
        "may differ from those of a language it knows"
    ]
    model = mixer.load(run_dir)
    target = model.target(0.3, 0.9, lang="en")
    assert "predicted with language 'en'" in target.rows
    rows = held_out(run_dir)
    table = model._predictor.predict(rows["text"], ["en"] * len(rows), "flat")
    truth = [frozenset(t.split(" & ")) - {""} for t in rows["true_codes"]]
    correct = [t == p for t, p in zip(truth, code_sets(table))]
    assert target.threshold == choose_threshold(table["confidence"], correct, 0.3, 0.1).threshold
    assert (
        model.target(0.3, 0.9, lang="unk").rows == model.target(0.3, 0.9).rows
    )  # its own: as it was


def test_coding_flags_and_a_threshold_that_would_do_nothing_are_refused(
    run_dir, common_csv, tmp_path, capsys
):
    """Issue 42's messages: --target-accuracy or --lookup with --embeddings alone, --threshold
    with the seq2seq head alone, and a header-only input with a target, each in one line before
    any work."""
    import mixer

    for flags in (["--target-accuracy", "0.3"], ["--lookup", common_csv]):
        with pytest.raises(
            UserError, match=f"{flags[0]} marks rows of the code table, which --output"
        ):
            predict_main(
                [
                    "--checkpoint",
                    run_dir,
                    "--input",
                    common_csv,
                    "--embeddings",
                    str(tmp_path / "e.npy"),
                    *flags,
                ]
            )
    with pytest.raises(
        UserError, match="--threshold 0.99 is the flat and full heads'.*seq2seq head decodes"
    ):
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(tmp_path / "o.csv"),
                "--head",
                "seq2seq",
                "--threshold",
                "0.99",
            ]
        )
    # the API's threshold= is the flat and full heads' too; a loop over heads passes it to each, so
    # the seq2seq head takes it without a word there (its docstring says so)
    flat_only = mixer.load(run_dir).predict(["farmer"], head="seq2seq", threshold=0.99)
    assert flat_only.equals(mixer.load(run_dir).predict(["farmer"], head="seq2seq"))
    # with the flat head beside it, --threshold is the flat head's and the seq2seq head's codes are its own
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(tmp_path / "two.csv"),
                "--head",
                "flat",
                "seq2seq",
                "--threshold",
                "0.99",
            ]
        )
        == 0
    )
    assert not os.path.exists(tmp_path / "e.npy")
    header = tmp_path / "header.csv"
    header.write_text("occ1,hisco_1,hisco_2\n")
    capsys.readouterr()
    with pytest.raises(UserError, match=f"--input {header}: no rows below its header"):
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                str(header),
                "--output",
                str(tmp_path / "h.csv"),
                "--target-accuracy",
                "0.3",
                "--target-confidence",
                "0.9",
            ]
        )
    assert "target:" not in capsys.readouterr().out  # no threshold chosen first


def test_a_language_per_row_at_a_target_says_the_run_s_rows_keep_its_language(run_dir, capsys):
    """As predict.py --language-col on a run without a language column: the API's
    predict(language=[one per row], target_accuracy=...) says in one line that the threshold
    was chosen on the run's rows read in its own language."""
    import mixer

    model = mixer.load(run_dir)
    capsys.readouterr()
    try:  # two rows to code: the threshold may be out of reach, said after the note
        model.predict(
            ["farmer", "labourer"],
            language=["en", "da"],
            target_accuracy=0.3,
            target_confidence=0.9,
        )
    except (
        UserError
    ) as error:  # too few rows to code, or no threshold: either way refused after the note
        assert "rows to code are too few" in str(error) or "no confidence threshold reaches" in str(
            error
        )
    said = [
        line
        for line in capsys.readouterr().err.splitlines()
        if "labelled rows have no language column" in line
    ]
    assert said == [
        "note: the run's labelled rows have no language column; they are predicted with language 'unk', "
        "the rows to code with their own (language=, one per row): the threshold holds for rows of "
        "that language (docs/coding.md)"
    ]


def test_the_api_s_file_lines_name_its_keywords(run_dir, common_csv, capsys):
    """The API reads a labelled file and a lookup with its own keywords: its lines name
    calibration_data= and options=TableOptions(sep=...), not predict.py's flags."""
    import mixer

    model = mixer.load(run_dir)
    try:
        model.target(
            0.3, 0.9, calibration_data=common_csv, calibration_truth_cols=["hisco_1", "hisco_2"]
        )
    except UserError:  # reached or not: the reading line comes first
        pass
    model.lookup(common_csv, code_cols=["hisco_1"])
    err = capsys.readouterr().err
    assert (
        f"calibration_data= {common_csv}: CSV, separator ',' (found in the header line; "
        "options=TableOptions(sep=...) sets it)"
    ) in err
    assert f"lookup= {common_csv}: CSV, separator ','" in err
    assert "--calibration-data" not in err and "--lookup-sep" not in err  # its own rows' line too


def test_rows_without_a_description_are_not_rows_to_code(run_dir, common_csv, tmp_path):
    """The guarantee counts the rows the model codes: 2,000 empty rows added to a file change
    neither the rows to code nor the threshold (a second review: they made a file whose real
    rows were too few pass)."""
    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    padded = pd.concat(
        [frame, pd.DataFrame({c: [""] * 2000 for c in frame.columns})], ignore_index=True
    )
    padded_csv = tmp_path / "padded_input.csv"
    padded.to_csv(padded_csv, index=False)
    chosen = {}
    for name, path in (("plain", common_csv), ("padded", padded_csv)):
        out = tmp_path / f"{name}.csv"
        assert (
            predict_main(
                [
                    "--checkpoint",
                    run_dir,
                    "--input",
                    str(path),
                    "--output",
                    str(out),
                    "--target-accuracy",
                    "0.5",
                    "--target-confidence",
                    "0.9",
                ]
            )
            == 0
        )
        chosen[name] = json.load(open(f"{out}.provenance.json"))["target"]["flat"]
    assert chosen["plain"]["rows_to_code"] == chosen["padded"]["rows_to_code"] == len(frame)
    assert chosen["plain"]["threshold"] == chosen["padded"]["threshold"]
    import mixer
    from mixer.coding.targeting import count_rows_to_code

    model = mixer.load(run_dir)
    assert count_rows_to_code(model, padded["occ1"], None, None, None) == len(frame)


def test_an_output_that_is_a_file_the_job_reads_or_its_sidecar_is_refused(
    run_dir, common_csv, tmp_path
):
    """A third review: a filled check list passed back as --lookup and asked for again by
    --to-check under the same name lost its hand codes; an output could also replace the
    labelled rows, the descriptions or the output's own provenance sidecar."""
    check = tmp_path / "check.csv"
    check.write_text("occ1,checked_1\nfarmer,61110\n", encoding="utf-8")
    before = check.read_bytes()
    out = tmp_path / "out.csv"
    cases = [
        (["--lookup", str(check), "--to-check", "5", str(check)], "--to-check", "--lookup"),
        (["--lookup", str(check), "--output", str(check)], "--output", "--lookup"),
        (
            ["--code-descriptions", str(check), "--audit", "5", str(check)],
            "--audit",
            "--code-descriptions",
        ),
        (["--to-check", "5", f"{out}.provenance.json"], "--to-check", "--output's provenance"),
        (
            [
                "--target-accuracy",
                "0.5",
                "--calibration-data",
                str(check),
                "--calibration-truth-cols",
                "checked_1",
                "--to-check",
                "5",
                str(check),
            ],
            "--to-check",
            "--calibration-data",
        ),
    ]
    for extra, flag, other in cases:
        argv = ["--checkpoint", run_dir, "--input", common_csv, *extra]
        if "--output" not in extra:
            argv += ["--output", str(out)]
        with pytest.raises(
            UserError, match=f"^{flag} .*: is the {re.escape(other)} file and would replace it"
        ):
            predict_main(argv)
        assert check.read_bytes() == before and not out.exists()


def test_the_api_counts_rows_to_code_as_predict_py_and_says_a_target_chosen_for_others(
    run_dir, common_csv, capsys
):
    """target(rows_to_code=texts) counts the texts as predict.py counts its input (rows with
    a description); a target used on another number of rows says so once."""
    import mixer

    texts = pd.read_csv(common_csv, dtype=str, keep_default_na=False)["occ1"].tolist()
    model = mixer.load(run_dir)
    padded = model.target(0.5, 0.9, rows_to_code=texts + [""] * 500)
    assert (
        padded.rows_to_code == len(texts) == model.target(0.5, 0.9, rows_to_code=texts).rows_to_code
    )
    capsys.readouterr()
    model.predict(texts[:30], target=padded)
    model.predict(texts[:30], target=padded)
    err = capsys.readouterr().err
    assert (
        err.count(f"note: target= was chosen for {len(texts):,} rows to code and these are 30") == 1
    )
    with pytest.raises(UserError, match="pass a string, a list of strings or a pandas Series"):
        model.predict(pd.DataFrame({"occ1": texts}), target_accuracy=0.5)


def test_an_output_that_is_a_file_of_the_run_is_refused_and_an_earlier_prediction_there_is_not(
    copy_of, run_dir, common_csv
):
    """A fourth review: --output RUN/key.csv replaced the run's key (its next prediction then
    failed with a traceback). An earlier prediction written into the run (its sidecar beside
    it) may be written again."""
    run = copy_of(run_dir)
    key = os.path.join(run, "key.csv")
    before = open(key, "rb").read()
    for name in ("key.csv", "scores.parquet", "data_train.parquet"):
        with pytest.raises(
            UserError,
            match=f"^--output .*{name}: is the --checkpoint .*'s {name} file and would replace it",
        ):
            predict_main(
                ["--checkpoint", run, "--input", common_csv, "--output", os.path.join(run, name)]
            )
    assert open(key, "rb").read() == before
    mine = os.path.join(run, "codes.csv")
    for _ in range(2):  # written, then written again
        assert predict_main(["--checkpoint", run, "--input", common_csv, "--output", mine]) == 0


def test_the_file_job_builds_each_head_s_pipeline_once_and_checks_no_option_per_chunk(
    run_dir, common_csv, tmp_path, monkeypatch
):
    """predict.py codes its chunks through the row steps built once per head
    (mixer.coding.pipeline.CodingPipeline), not through Model.predict, which checks every
    keyword again; the file is the one the API writes for the same rows."""
    import mixer
    from mixer.coding import pipeline
    from mixer.prediction.api import Model

    frame = pd.read_csv(common_csv, dtype=str, keep_default_na=False)
    table = str(tmp_path / "lookup.csv")
    frame.drop_duplicates("occ1").head(10)[["occ1", "hisco_1"]].to_csv(table, index=False)
    model = mixer.load(run_dir)
    api = model.predict(frame["occ1"], lookup=model.lookup(table, code_cols=["hisco_1"]))
    built = []
    real = pipeline.CodingPipeline.__init__

    def counted(self, *args, **kwargs):
        built.append(args[1])
        real(self, *args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("the file job called Model.predict")

    monkeypatch.setattr(pipeline.CodingPipeline, "__init__", counted)
    monkeypatch.setattr(Model, "predict", refused)
    out = tmp_path / "coded.csv"
    argv = ["--checkpoint", run_dir, "--input", common_csv, "--output", str(out)]
    argv += ["--lookup", table, "--lookup-code-cols", "hisco_1"]
    assert predict_main([*argv, "--head", "flat", "seq2seq", "--chunk-size", "50"]) == 0
    assert built == ["flat", "seq2seq"]  # one per head for 240 rows in 5 chunks
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert (written["flat_code_1"].to_numpy() == api["code_1"].to_numpy()).all()
    assert (written["source"].to_numpy() == api["source"].to_numpy()).all()


def test_a_check_both_reach_names_the_flag_or_the_keyword_its_caller_typed(
    run_dir, common_csv, tmp_path
):
    """The labelled rows' and the lookup's checks are the program's and the API's: each
    message names the option as its caller wrote it, built so, never rewritten."""
    import mixer

    model = mixer.load(run_dir)
    with pytest.raises(UserError) as raised:
        model.target(0.5, calibration_data=common_csv)
    assert str(raised.value) == (
        f"calibration_data= {common_csv}: name the columns of its true codes with "
        "calibration_truth_cols="
    )
    argv = ["--checkpoint", run_dir, "--input", common_csv, "--output", str(tmp_path / "o.csv")]
    with pytest.raises(UserError) as raised:
        predict_main([*argv, "--target-accuracy", "0.5", "--calibration-data", common_csv])
    assert str(raised.value) == (
        f"--calibration-data {common_csv}: name the columns of its true codes with "
        "--calibration-truth-cols"
    )
    with pytest.raises(UserError, match=r"^lookup= .*: no column 'nope' \(code_cols=\)"):
        model.lookup(common_csv, code_cols=["nope"])
    with pytest.raises(UserError, match=r"^--lookup .*: no column 'nope' \(--lookup-code-cols\)"):
        predict_main([*argv, "--lookup", common_csv, "--lookup-code-cols", "nope"])

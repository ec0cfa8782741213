"""The class level beside the code level at the end of a training run (--crosswalk,
docs/classes.md "At the end of a training run"): the scored rows' class confidence and
correctness, the guarantee and the curve at each crosswalk's level, the model card's rows."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, run_program

RUN = [
    "--dropout",
    "0",
    "--seed",
    "5",
    "--max-steps",
    "4",
    "--eval-interval",
    "4",
    "--share-val",
    "0.09",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    "--language",
    "en",
    *TINY,
    "--share-calibration",
    "0.2",
]


@pytest.fixture(scope="module")
def classed(tmp_path_factory, small_csv):
    """A tiny run that names two crosswalks."""
    out = str(tmp_path_factory.mktemp("classed") / "run")
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--batch-size",
        8,
        *RUN,
        "--crosswalk",
        "hisclass",
        "socpo",
    )
    return out, proc.stdout + proc.stderr


def test_the_scored_rows_carry_each_crosswalks_class_confidence_and_correctness(classed):
    from mixer.coding.levels import level_correct
    from mixer.data.labels.crosswalk import load_crosswalk

    run, _ = classed
    scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
    for name in ("hisclass", "socpo"):
        walk = load_crosswalk(name)
        for head in ("flat", "seq2seq"):
            confidence = scores[f"{head}_confidence_{name}"].to_numpy(np.float64)
            correct = scores[f"{head}_correct_{name}"].to_numpy(bool)
            assert ((confidence >= 0) & (confidence <= 1)).all()
            # right at the codes is right at the classes; the classes as level_correct reads them
            assert correct[scores[f"{head}_correct"].to_numpy(bool)].all()
            expected = level_correct(scores["true_codes"], scores[f"{head}_codes"], walk)
            assert correct.tolist() == expected.tolist()
        # the flat head: its code set implies its class set, never less likely
        assert (scores["flat_confidence_" + name] >= scores["flat_confidence"] * (1 - 1e-9)).all()
    # seq2seq: the confidence of its codes themselves (docs/classes.md)
    assert np.allclose(scores["seq2seq_confidence_hisclass"], scores["seq2seq_confidence"])


def test_the_end_of_a_run_reports_each_class_level_beside_the_code_level(classed):
    run, out = classed
    for name in ("hisclass", "socpo"):
        for head in ("flat", "seq2seq"):
            assert (
                f"  {head} head at the {name} level: on new rows, predict.py --target-accuracy "
                f"0.95 --target-level {name} codes " in out
            )
            assert (
                f"  {head} head at the {name} level, read off the curve of these rows (a point "
                "estimate, not a promise for new rows): at 95% accuracy: " in out
            )
    # the code level's guarantee with its coverage and realised accuracy on the scored rows
    assert "  flat head: on new rows, predict.py --target-accuracy 0.95 codes " in out
    assert "rows like them); on those rows it codes " in out
    curve = pd.read_csv(os.path.join(run, "production_curve.csv"), keep_default_na=False)
    assert set(curve["head"]) == {
        "flat",
        "seq2seq",
        "flat hisclass",
        "seq2seq hisclass",
        "flat socpo",
        "seq2seq socpo",
    }
    last = curve[(curve["head"] == "flat hisclass") & (curve["by"] == "all")].iloc[-1]
    scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
    assert last["coded_rows"] == len(scores)
    assert last["accuracy"] == pytest.approx(scores["flat_correct_hisclass"].mean())
    assert os.path.getsize(os.path.join(run, "production_curve_flat_class_hisclass.png")) > 0
    with open(os.path.join(run, "README.md")) as handle:
        card = handle.read()
    for name in ("hisclass", "socpo"):
        assert f"| classes ({name}) coded on new rows at 95% accuracy (the guarantee)" in card
        assert f"| classes ({name}) coded at 95% accuracy, read off these rows' curve |" in card
    with open(os.path.join(run, "args.yaml")) as handle:
        assert "hisclass" in handle.read()


def test_the_guarantee_at_a_class_level_is_chosen_as_predict_chooses_it():
    from mixer.coding.guarantee import choose_threshold
    from mixer.coding.scores import GUARANTEE_ROWS, head_guarantee

    rng = np.random.default_rng(3)
    confidence = rng.uniform(size=3000)
    frame = pd.DataFrame(
        {
            "chose": np.arange(3000) < 50,
            "flat_confidence": confidence / 2,
            "flat_correct": rng.uniform(size=3000) < confidence / 2,
            "flat_confidence_hisclass": confidence,
            "flat_correct_hisclass": rng.uniform(size=3000) < 0.9 + 0.1 * confidence,
        }
    )
    held = ~frame["chose"].to_numpy()
    entry = head_guarantee(frame, "flat", "hisclass")
    choice = choose_threshold(
        confidence[held], frame["flat_correct_hisclass"][held], 0.95, 0.05, GUARANTEE_ROWS
    )
    assert choice.threshold is not None and entry["guarantee_rows"] == 2950
    assert entry["guaranteed_share"] == choice.coded_share
    coded = confidence[held] >= choice.threshold
    assert entry["realised_accuracy"] == frame["flat_correct_hisclass"][held][coded].mean()


@pytest.mark.parametrize(
    "name, said",
    [
        ("hisklass", "--crosswalk hisklass: neither a crosswalk mixer ships"),
        ("hiscam", "--crosswalk hiscam: a score, not classes, has no class level to report"),
    ],
)
def test_a_crosswalk_the_run_cannot_report_is_refused_before_anything_is_written(
    tmp_path, small_csv, name, said
):
    out = tmp_path / "run"
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        *RUN,
        "--crosswalk",
        name,
        check=False,
    )
    assert proc.returncode == 2
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_resumed_run_reports_the_crosswalks_its_own_command_names(tmp_path, small_csv):
    """The crosswalk only changes what the run's end reports: a resumed job may name another,
    and its end reports that one (args.yaml records it)."""
    out = str(tmp_path / "run")
    first = run_program(
        "finetune.py", "--dataset", small_csv, "--save-path", out, *RUN, "--crosswalk", "hisclass"
    )
    assert "at the hisclass level" in first.stdout + first.stderr
    more = [a if a != "4" else "6" for a in RUN]  # --max-steps 6, --eval-interval 6
    second = run_program(
        "finetune.py", "--dataset", small_csv, "--save-path", out, *more, "--crosswalk", "socpo"
    )
    said = second.stdout + second.stderr
    assert "resuming from" in said and "at the socpo level" in said
    assert "at the hisclass level" not in said
    columns = pd.read_parquet(os.path.join(out, "scores.parquet")).columns
    assert "flat_correct_socpo" in columns and "flat_correct_hisclass" not in columns
    with open(os.path.join(out, "args.yaml")) as handle:
        text = handle.read()
    assert "- socpo" in text and "hisclass" not in text


def test_two_processes_store_the_class_levels_of_one(classed, tmp_path, small_csv):
    """torchrun, 2 processes of batch 4, rank 0 gathering: the class columns of one process."""
    from conftest import rank0_gathers_cmd, run

    one, _ = classed
    two = str(tmp_path / "run")
    run(
        rank0_gathers_cmd(2, "finetune.py")
        + ["--distributed", "--dataset", small_csv, "--save-path", two, "--batch-size", "4"]
        + [str(a) for a in RUN]
        + ["--crosswalk", "hisclass", "socpo"]
    )
    left, right = (
        pd.read_parquet(os.path.join(d, "scores.parquet")).sort_values(
            ["split", "row"], ignore_index=True
        )
        for d in (one, two)
    )
    assert list(left.columns) == list(right.columns)
    floats = [c for c in left.columns if "_confidence" in c]
    assert "flat_confidence_hisclass" in floats
    pd.testing.assert_frame_equal(left.drop(columns=floats), right.drop(columns=floats))
    np.testing.assert_allclose(
        left[floats].to_numpy(), right[floats].to_numpy(), rtol=1e-6, atol=1e-7
    )  # floats of one and of two processes round differently (tests/conftest.py)

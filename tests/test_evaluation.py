"""The paper's evaluation table: definitions by hand, evaluate.py, and the table
finetune.py writes for its validation rows."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from conftest import TINY, run_program
from mixer.reporting import evaluation


def test_statistics_per_row_then_averaged():
    """Row 1: true {61110, 64100}, predicted {61110}: accuracy 1/2, precision 1,
    recall 1/2, F1 2/3. Row 2: true {64100}, predicted {64100, 61110}: 1/2, 1/2, 1, 2/3.
    At 3 digits 99920 counts for 99910; the special code -1 is compared whole."""
    truth = [{"61110", "64100"}, {"64100"}, {"99910"}, {"-1"}, set()]
    predicted = [{"61110"}, {"64100", "61110"}, {"99920"}, {"-1"}, {"12345"}]
    table = evaluation.evaluation_table(truth, {"flat": predicted}, digits=[3, 5])
    five = table[table["digits"] == 5].iloc[0]
    assert five["n"] == 4  # the row without a true code is left out
    assert five["accuracy"] == pytest.approx((0.5 + 0.5 + 0 + 1) / 4)
    assert five["precision"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert five["recall"] == pytest.approx((0.5 + 1 + 0 + 1) / 4)
    assert five["f1"] == pytest.approx((2 / 3 + 2 / 3 + 0 + 1) / 4)
    three = table[table["digits"] == 3].iloc[0]
    assert three["accuracy"] == pytest.approx((0.5 + 0.5 + 1 + 1) / 4)


def test_evaluate_py_prints_and_writes_the_table_by_group(tmp_path):
    frame = pd.DataFrame(
        {
            "occ1": list("abcd"),
            "lang": ["en", "en", "da", "da"],
            "hisco_1": ["61110", "64100", "99910", "-1"],
            "hisco_2": ["64100", "", "", ""],
            "flat_code_1": ["61110", "64100", "99920", "-1"],
            "flat_code_2": ["", "61110", "", ""],
            "seq2seq_code_1": ["61110", "64100", "99910", "-2"],
            "seq2seq_code_2": ["64100", "", "", ""],
        }
    )
    path = tmp_path / "preds.csv"
    frame.to_csv(path, index=False)
    proc = run_program(
        "evaluate.py", "--predictions", path, "--truth-cols", "hisco_1", "hisco_2", "--by", "lang"
    )
    table = pd.read_csv(tmp_path / "preds_evaluation.csv", keep_default_na=False)
    assert (tmp_path / "preds_evaluation.png").stat().st_size > 1000
    assert set(table["head"]) == {"flat", "seq2seq"} and set(table["lang"]) == {"all", "en", "da"}
    assert len(table) == 2 * 3 * 5 and "accuracy" in proc.stdout
    en = table[
        (table["lang"] == "en") & (table["head"] == "seq2seq") & (table["digits"] == 5)
    ].iloc[0]
    assert en["n"] == 2 and en["f1"] == pytest.approx((1 + 1) / 2)
    da = table[
        (table["lang"] == "da") & (table["head"] == "seq2seq") & (table["digits"] == 1)
    ].iloc[0]
    assert da["accuracy"] == pytest.approx(0.5)  # -2 for -1: wrong at every number of digits


def test_true_codes_that_lost_their_zeros_are_noted_without_code_length(tmp_path, capsys):
    """Predictions written with their zeros ('01110') against true codes that lost them
    ('1110', a number column): scored as written, with a note naming --code-length."""
    from mixer.cli.entrypoints import evaluate_main

    path = tmp_path / "p.parquet"
    pd.DataFrame(
        {"hisco_1": [1110, 61110, 2000], "code_1": ["01110", "61110", "02000"]}
    ).to_parquet(path)
    assert (
        evaluate_main(["--predictions", str(path), "--truth-cols", "hisco_1", "--digits", "5"]) == 0
    )
    err = capsys.readouterr().err
    assert (
        "note: 2 distinct true code(s) are digits shorter than the predictions' 5-digit codes (e.g. "
        "'1110' beside '01110'), scored as written; if they lost leading zeros, pass --code-length 5"
    ) in err
    assert (
        evaluate_main(["--predictions", str(path), "--truth-cols", "hisco_1", "--code-length", "5"])
        == 0
    )
    assert "note" not in capsys.readouterr().err


def test_a_group_called_all_is_not_merged_with_the_overall_rows():
    truth = [{"61110"}, {"64100"}, {"83110"}]
    predicted = [{"61110"}, {"99999"}, {"99999"}]
    table = evaluation.evaluation_table(
        truth, {"flat": predicted}, ["all", "x", "x"], digits=[5], group_name="source"
    )
    assert list(table["source"]) == ["(all)", "all", "x"]
    assert list(table["n"]) == [3, 1, 2] and list(table["accuracy"]) == pytest.approx([1 / 3, 1, 0])


def test_numeric_groups_sort_as_numbers_and_blank_groups_are_named():
    """A year column read with blanks comes as floats: 900 before 1850, no '.0', no 'nan'."""
    truth = [{"61110"}] * 5
    groups = [1850.0, 900.0, float("nan"), 1850.0, None]
    table = evaluation.evaluation_table(truth, {"flat": [{"61110"}] * 5}, groups, digits=[5])
    assert list(table["group"]) == ["all", "900", "1850", "(blank)"] and list(table["n"]) == [
        5,
        1,
        2,
        2,
    ]
    text = evaluation.evaluation_table(
        truth, {"flat": [set()] * 5}, ["b", "A", " ", "b", "c"], digits=[5]
    )
    assert list(text["group"]) == ["all", "A", "b", "c", "(blank)"]
    # the same year column as text (a CSV): '1850.0' is 1850, 'NaN' is blank, order fixed
    csv = evaluation.evaluation_table(
        truth, {"flat": [set()] * 5}, ["1850.0", "900", "NaN", "20", "1850"], digits=[5]
    )
    assert list(csv["group"]) == ["all", "20", "900", "1850", "(blank)"] and list(csv["n"]) == [
        5,
        1,
        1,
        2,
        1,
    ]
    named = evaluation.evaluation_table(
        truth, {"flat": [set()] * 5}, ["(blank)", "", "x", None, "x"], digits=[5]
    )
    assert list(named["group"]) == ["all", "(blank)", "x", "((blank))"] and list(named["n"]) == [
        5,
        1,
        2,
        2,
    ]


def test_plain_code_columns_are_predictions_unless_predict_py_heads_are_there():
    assert evaluation.prediction_groups(["code_1", "flat_code_1", "seq2seq_code_1"]) == {
        "flat": ["flat_code_1"],
        "seq2seq": ["seq2seq_code_1"],
    }
    assert evaluation.prediction_groups(["hisco_1", "code_1", "isco_code_1"]) == {
        "prediction": ["code_1"],
        "isco": ["isco_code_1"],
    }


def test_outputs_through_a_symbolic_link_write_its_target_and_keep_the_link(tmp_path):
    from mixer.data.tables.writing import OutputWriter

    predictions = tmp_path / "preds.csv"
    pd.DataFrame({"hisco_1": ["61110"], "code_1": ["61110"]}).to_csv(predictions, index=False)
    (tmp_path / "store").mkdir()
    for name in ("table.csv", "out.csv"):
        (tmp_path / name).symlink_to(tmp_path / "store" / name)  # dangling until written
    run_program(
        "evaluate.py",
        "--predictions",
        predictions,
        "--truth-cols",
        "hisco_1",
        "--output",
        tmp_path / "table.csv",
    )
    writer = OutputWriter(str(tmp_path / "out.csv"))
    writer.write(pd.DataFrame({"a": [1]}))
    writer.commit()
    for name in ("table.csv", "out.csv"):
        assert (tmp_path / name).is_symlink() and (tmp_path / "store" / name).stat().st_size > 0
    assert "accuracy" in (tmp_path / "store" / "table.csv").read_text()


def test_run_files_replace_a_link_and_outputs_check_where_it_points(tmp_path, monkeypatch):
    """A run directory's own files are never written through a link (a run built with
    links to another run's files must not overwrite that run); a user-named output
    through a link is checked where it points: its suffix and its directory."""
    from mixer.core.errors import UserError
    from mixer.core.io import write_text
    from mixer.data.tables.writing import check_output_path

    (tmp_path / "base.json").write_text("base")
    (tmp_path / "run.json").symlink_to(tmp_path / "base.json")
    write_text(str(tmp_path / "run.json"), "mine")
    assert (
        not (tmp_path / "run.json").is_symlink() and (tmp_path / "run.json").read_text() == "mine"
    )
    assert (tmp_path / "base.json").read_text() == "base"
    (tmp_path / "latest.parquet").symlink_to(tmp_path / "real.csv")
    with pytest.raises(UserError, match="whose suffix differs"):
        check_output_path(str(tmp_path / "latest.parquet"), "--output", {})
    monkeypatch.setattr(
        os, "access", lambda path, mode: False
    )  # a read-only directory (tests run as root)
    with pytest.raises(UserError, match="is not writable"):
        check_output_path(str(tmp_path / "out.csv"), "--output", {})


@pytest.fixture
def predictions_csv(tmp_path):
    path = tmp_path / "preds.csv"
    pd.DataFrame({"hisco_1": ["61110"], "code_1": ["61110"]}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "flag,name,message",
    [
        ("--output", "missing/t.csv", "does not exist; create it first"),
        ("--plot", "missing/t.png", "does not exist; create it first"),
        ("--output", "newdir/", "names a directory"),
        ("--plot", "plotdir/", "names a directory"),
    ],
)
def test_evaluate_refuses_outputs_in_a_missing_directory_before_writing(
    predictions_csv, tmp_path, flag, name, message
):
    proc = run_program(
        "evaluate.py",
        "--predictions",
        predictions_csv,
        "--truth-cols",
        "hisco_1",
        flag,
        f"{tmp_path}/{name}",
        check=False,
    )
    assert proc.returncode == 2 and message in proc.stderr and flag in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["preds.csv"]  # nothing written


@pytest.mark.parametrize("flag", ["--output", "--plot"])
def test_evaluate_refuses_to_write_over_the_predictions(predictions_csv, tmp_path, flag):
    before = predictions_csv.read_bytes()
    proc = run_program(
        "evaluate.py",
        "--predictions",
        predictions_csv,
        "--truth-cols",
        "hisco_1",
        flag,
        predictions_csv,
        check=False,
    )
    assert proc.returncode == 2 and "is the --predictions file" in proc.stderr
    assert predictions_csv.read_bytes() == before


def test_evaluate_without_any_true_code_is_a_user_error(tmp_path):
    path = tmp_path / "preds.csv"
    pd.DataFrame({"hisco_1": ["", ""], "code_1": ["61110", "64100"]}).to_csv(path, index=False)
    proc = run_program("evaluate.py", "--predictions", path, "--truth-cols", "hisco_1", check=False)
    assert proc.returncode == 2 and "no row has a code in --truth-cols hisco_1" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["preds.csv"]


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--output", "{input}"], "is the --input file"),
        (["--output", "{tmp}/newdir/"], "names a directory"),
        (["--output", "{tmp}/out.csv", "--summary-plot", "{tmp}/nodir/s.png"], "--summary-plot"),
        (["--output", "{tmp}/out.csv", "--summary-plot", "{tmp}/s.csv"], "name it .png"),
    ],
)
def test_predict_checks_its_output_paths_before_the_model_loads(
    tmp_path, small_csv, flags, message
):
    source = tmp_path / "input.csv"
    source.write_bytes(open(small_csv, "rb").read())
    flags = [f.format(input=source, tmp=tmp_path) for f in flags]
    proc = run_program(
        "predict.py",
        "--checkpoint",
        tmp_path / "no-run-needed",
        "--input",
        source,
        *flags,
        check=False,
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert source.read_bytes() == open(small_csv, "rb").read()
    assert sorted(os.listdir(tmp_path)) == ["input.csv"]


def test_training_writes_the_table_predict_and_evaluate_give(small_csv, tmp_path):
    run = tmp_path / "run"
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        run,
        "--max-steps",
        "8",
        "--learning-rate",
        "3e-3",
        "--share-val",
        "0.2",
        "--dropout",
        "0",
        *TINY,
    )
    written = pd.read_csv(run / "evaluation.csv", keep_default_na=False)
    predictions = tmp_path / "val_predictions.csv"
    run_program(
        "predict.py",
        "--checkpoint",
        run,
        "--input",
        run / "data_val.parquet",
        "--input-col",
        "text",
        "--head",
        "flat",
        "seq2seq",
        "--output",
        predictions,
    )
    run_program(
        "evaluate.py",
        "--predictions",
        predictions,
        "--truth-cols",
        "code_1",
        "code_2",
        "--output",
        tmp_path / "table.csv",
    )  # the validation file's own code columns
    table = pd.read_csv(tmp_path / "table.csv", keep_default_na=False)
    table = table.rename(columns={"group": "lang"})
    assert set(written["head"]) == {
        "flat",
        "seq2seq",
        "flat noised",
        "seq2seq noised",
    }  # --eval-noise
    written = written[written["head"].isin(["flat", "seq2seq"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(written, table, check_exact=False, atol=1e-9)
    assert os.path.exists(run / "model.safetensors")


@pytest.mark.parametrize(
    "schedule,steps",
    [
        (
            ["--max-steps", "4", "--eval-interval", "2"],
            [2, 4],
        ),  # the interval lands on the last step
        (
            ["--num-epochs", "2"],
            [2, 4],
        ),  # each epoch ends with an evaluation, the last at the last step
    ],
)
def test_the_last_evaluation_writes_the_table_when_an_interval_lands_on_the_last_step(
    small_csv, tmp_path, schedule, steps
):
    from mixer.cli.entrypoints import finetune_main

    run = tmp_path / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "hisco_2",
                "--save-path",
                str(run),
                "--share-val",
                "0.09",
                "--batch-size",
                "64",
                *schedule,
                *TINY,
            ]
        )
        == 0
    )
    logs = pd.read_csv(run / "logs.csv")
    assert logs["step"].tolist() == steps  # the last step is evaluated once
    table = pd.read_csv(run / "evaluation.csv", keep_default_na=False)
    assert table["n"].max() == logs["val_rows"].iloc[-1] == 11

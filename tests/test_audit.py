"""Audits end to end with a tiny model on the shipped data: the example of
docs/evaluation.md run as written, a draw that depends on the seed and the rows alone,
strata and sizing, descriptions, the refusals, Excel, and training on an audit.
The statistics themselves: tests/test_audit_statistics.py."""

import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, TINY, TOY, assert_same_predictions, bottom_k, env_for_subprocess
from mixer.audit import file as audit_file
from mixer.audit import statistics as stats
from mixer.audit import train_on
from mixer.audit.guards import GUARDS
from mixer.audit.draw import PROBABILITY_UNITS
from mixer.audit.verdicts import read_audit
from mixer.cli.entrypoints import evaluate_main, finetune_main, predict_main, train_mixer_main
from mixer.core.errors import UserError
from mixer.reporting.evaluation import group_order


def simulate_check(*argv):
    spec = importlib.util.spec_from_file_location(
        "simulate_audit_check", os.path.join(ROOT, "scripts", "simulate_audit_check.py")
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(a) for a in argv]) == 0


def docs_example() -> list:
    """The commands of the first bash block of docs/evaluation.md's "Audits"."""
    with open(os.path.join(ROOT, "docs", "evaluation.md"), encoding="utf-8") as handle:
        section = handle.read().split("\n## Audits\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [
        shlex.split(line, comments=True)
        for line in block.split("\n")
        if shlex.split(line, comments=True)
    ]


def run_in_process(command: list) -> None:
    assert command[0] == "python", command
    program, args = command[1], command[2:]
    if program == "-c":
        exec(args[0], {})
    elif program == "predict.py":
        assert predict_main(args) == 0
    elif program == "evaluate.py":
        assert evaluate_main(args) == 0
    elif program == "scripts/simulate_audit_check.py":
        simulate_check(*args)
    else:
        raise AssertionError(f"a command the test does not know: {command}")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """docs/evaluation.md's example as written, in a directory where runs/quickstart is a
    tiny model trained on the shipped data (its held-back rows are the quickstart's: the
    split depends on the data and the seed alone). Also the held-back rows with a decade."""
    base = tmp_path_factory.mktemp("audit")
    assert (
        finetune_main(
            [
                "--dataset",
                TOY,
                "--target-cols",
                "hisco_1",
                "--allow-codes-shorter-than-block-size",
                "--save-path",
                str(base / "runs" / "quickstart"),
                *TINY,
                "--max-steps",
                "60",
                "--batch-size",
                "32",
                "--learning-rate",
                "3e-3",
                "--no-eval-noise",
                "--no-ngram-head",  # the estimates below are of the tiny encoder's errors
            ]
        )
        == 0
    )
    os.symlink(os.path.join(ROOT, "data"), base / "data")
    here = os.getcwd()
    os.chdir(base)
    try:
        for command in docs_example():
            run_in_process(command)
    finally:
        os.chdir(here)
    held = read(base / "held_back.csv")
    draw = np.random.default_rng(0).random(len(held))
    held["decade"] = np.select([draw < 0.6, draw < 0.95, draw < 0.99], ["1850", "1880", "1900"], "")
    held.to_csv(base / "held_decades.csv", index=False)
    return base


def read(path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def true_codes(column: pd.Series) -> pd.Series:
    """HISCO codes with their leading zeros (as --code-length 5 restores them)."""
    return column.where(~column.str.fullmatch(r"\d+"), column.str.zfill(5))


def model_dir(example) -> str:
    return str(example / "runs" / "quickstart")


def test_the_docs_example_runs_and_estimates_the_accuracy_of_all_rows(example):
    audit = read(example / "audit.csv")
    predicted = read(example / "held_back_predicted.csv")
    assert len(predicted) == 800 and len(audit) == 200
    # the sample: the 200 rows of smallest sampling key, in key order
    rows = audit["audit_row"].astype(int).to_numpy() - 1
    assert list(rows) == list(bottom_k(stats.row_keys(0, np.arange(800)), 200))
    assert (audit["occ1"].to_numpy() == predicted["occ1"].to_numpy()[rows]).all()
    # the estimate: the share right of the rows drawn, with Clopper & Pearson's interval
    right = (
        predicted["code_1"].to_numpy()[rows] == true_codes(predicted["hisco_1"]).to_numpy()[rows]
    )
    scores = pd.read_csv(example / "audit_scores.csv", dtype={"digits": str, "threshold": str})
    whole = scores.iloc[0]
    assert (whole["stratum"], whole["digits"], whole["rows"], whole["checked"], whole["blank"]) == (
        "all",
        "all",
        800,
        200,
        0,
    )
    assert whole["correct"] == right.sum() and whole["accuracy"] == pytest.approx(right.mean())
    assert (whole["low"], whole["high"]) == pytest.approx(stats.interval(right.sum(), 200))
    assert (whole["model"], whole["head"], whole["threshold"]) == ("runs/quickstart", "flat", "0.5")
    assert os.path.getsize(example / "audit_scores.png") > 0
    # what it estimates: the accuracy of all 800 rows, within 4 standard errors
    full = pd.read_csv(example / "held_back_predicted_evaluation.csv").iloc[0]["accuracy"]
    assert full == pytest.approx((predicted["code_1"] == true_codes(predicted["hisco_1"])).mean())
    assert abs(whole["accuracy"] - full) <= 4 * math.sqrt(full * (1 - full) / 200)


@pytest.mark.floats
def test_the_draw_depends_on_the_seed_and_the_rows_alone(example, tmp_path):
    """The rows drawn, their codes and the design are exact; prob_1 comes from batches
    padded to other lengths (the chunks), so it is equal up to float rounding."""
    import mixer

    held = example / "held_decades.csv"
    drawn = {}
    for chunk in (37, 1000):
        out = tmp_path / f"audit{chunk}.csv"
        assert (
            predict_main(
                [
                    "--checkpoint",
                    model_dir(example),
                    "--input",
                    str(held),
                    "--audit",
                    "60",
                    str(out),
                    "--audit-by",
                    "decade",
                    "--chunk-size",
                    str(chunk),
                ]
            )
            == 0
        )
        drawn[chunk] = read(out)
    assert_same_predictions(drawn[37], drawn[1000])
    # the Python API draws the same sample, with the same design (fingerprints included)
    api = mixer.load(model_dir(example)).audit(read(held), 60, by="decade")
    assert api["audit_row"].tolist() == drawn[37]["audit_row"].astype(int).tolist()
    assert api["audit"].iloc[0] == drawn[37]["audit"].iloc[0]
    # within each decade: its allocation of the rows of smallest key
    frame = read(held)
    labels = group_order(set(frame["decade"]) - {""}, None) + [""]
    sizes = [int((frame["decade"] == label).sum()) for label in labels]
    keys = stats.row_keys(0, np.arange(len(frame)))
    for label, count in zip(labels, stats.allocate(sizes, 60)):
        members = np.flatnonzero(frame["decade"] == label)
        expected = sorted(members[bottom_k(keys[members], int(count))] + 1)
        assert (
            sorted(drawn[37].loc[drawn[37]["decade"] == label, "audit_row"].astype(int)) == expected
        )
    other = mixer.load(model_dir(example)).audit(read(held), 60, by="decade", seed=1)
    assert set(other["audit_row"]) != set(api["audit_row"])


def test_a_stratified_audit_sized_by_its_margin_and_scored_with_blanks(example, tmp_path, capsys):
    held, audit, predicted = (
        example / "held_decades.csv",
        tmp_path / "audit.csv",
        tmp_path / "predicted.csv",
    )
    assert (
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                str(held),
                "--output",
                str(predicted),
                "--audit",
                str(audit),
                "--audit-margin",
                "0.08",
                "--audit-by",
                "decade",
            ]
        )
        == 0
    )
    said = capsys.readouterr().err
    # the size: the fewest rows for +-0.08 at each decade's mean prob_1, for this design (its
    # allocation and weights), said before anything is checked. The means are summed in
    # millionths as the draw sums them, in any order: a mean summed otherwise can round to
    # another third decimal (a tie of floats) and so to another size.
    units = np.rint(pd.to_numeric(read(predicted)["prob_1"]).to_numpy() * PROBABILITY_UNITS).astype(
        np.int64
    )
    expected = round(int(units.sum()) / PROBABILITY_UNITS / len(units), 3)
    frame, drawn = read(held), read(audit)
    labels = group_order(set(frame["decade"]) - {""}, None) + [""]
    sizes = [int((frame["decade"] == label).sum()) for label in labels]
    by_decade = [
        round(int(units[(frame["decade"] == label).to_numpy()].sum()) / PROBABILITY_UNITS / size, 3)
        for label, size in zip(labels, sizes)
    ]
    count = stats.design_size(sizes, by_decade, 0.08)
    assert (
        f"audit: {count:,} rows give a 95% interval that reaches at most 0.08 from the estimate on either "
        f"side at the accuracy the model expects, {expected:.3f}" in said
    )
    # the allocation, printed, and drawn
    allocation = stats.allocate(sizes, count)
    assert (
        allocation[-1] == 2 > count * sizes[-1] / sum(sizes)
    )  # the blank decade: more than its share
    for label, size, n in zip(labels, sizes, allocation):
        assert re.search(
            rf"\n  {re.escape(label or '(blank)')} +{size:,} rows +\S+ +-> {n}  \(expected 0\.\d+\)\n",
            said,
        )
        assert (drawn["decade"] == label).sum() == n
    # a person checks from the top and stops 7 rows before the end: those are blanks
    checked = len(drawn) - 7
    simulate_check(audit, "--truth-cols", "hisco_1", "--rows", checked)
    assert (
        evaluate_main(
            [
                "--audit",
                str(audit),
                "--predictions",
                str(predicted),
                "--code-length",
                "5",
                "--digits",
                "3",
            ]
        )
        == 0
    )
    scores = pd.read_csv(tmp_path / "audit_scores.csv", dtype={"digits": str, "decade": str})
    filled = read(audit)
    is_checked = filled["true_code_1"] != ""
    for digits, width in (("all", None), ("3", 3)):
        right = [
            (a[:width] == b[:width])
            for a, b in zip(filled["code_1"], true_codes(filled["true_code_1"]))
        ]
        right = np.asarray(right) & is_checked.to_numpy()
        correct = [right[(filled["decade"] == label).to_numpy()].sum() for label in labels]
        counted = [(is_checked & (filled["decade"] == label)).sum() for label in labels]
        part = scores[scores["digits"] == digits].reset_index(drop=True)
        whole = stats.stratified(sizes, correct, counted)
        assert (part.loc[0, "decade"], part.loc[0, "checked"], part.loc[0, "blank"]) == (
            "all",
            checked,
            7,
        )
        assert part.loc[0, ["accuracy", "low", "high", "n_eff"]].astype(
            float
        ).tolist() == pytest.approx([whole.value, whole.low, whole.high, whole.n_eff])
        assert part["decade"].tolist()[1:] == ["1850", "1880", "1900", "(blank)"]
        for h in range(len(labels)):
            own = stats.simple(correct[h], counted[h])
            assert part.loc[h + 1, ["low", "high"]].astype(float).tolist() == pytest.approx(
                [own.low, own.high]
            )
    assert "left blank 7" in capsys.readouterr().out


def test_an_audit_of_descriptions_is_the_rows_drawn_collapsed(example, tmp_path):
    held = read(example / "held_back.csv")
    out = tmp_path / "descriptions.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                str(example / "held_back.csv"),
                "--audit",
                "120",
                str(out),
                "--audit-unit",
                "descriptions",
            ]
        )
        == 0
    )
    drawn = read(out)
    rows = bottom_k(stats.row_keys(0, np.arange(len(held))), 120)
    counts = held["occ1"].iloc[rows].value_counts()
    assert drawn["occ1"].is_unique and len(drawn) == len(counts) < 120
    assert drawn.set_index("occ1")["audit_draws"].astype(int).to_dict() == counts.to_dict()
    # a verdict per description counts once per row drawn
    truth = held.drop_duplicates("occ1").set_index("occ1")["hisco_1"]
    right = drawn["code_1"].to_numpy() == true_codes(truth.reindex(drawn["occ1"])).to_numpy()
    drawn["correct"] = np.where(right, "yes", "no")
    drawn.to_csv(out, index=False)
    assert evaluate_main(["--audit", str(out)]) == 0
    whole = pd.read_csv(tmp_path / "descriptions_scores.csv").iloc[0]
    weighted = int((drawn["audit_draws"].astype(int) * right).sum())
    assert (whole["checked"], whole["correct"]) == (120, weighted)
    assert (whole["low"], whole["high"]) == pytest.approx(stats.interval(weighted, 120))


def test_an_audit_is_scored_only_against_what_it_was_drawn_from(example, tmp_path):
    audit_path, predicted = example / "audit.csv", str(example / "held_back_predicted.csv")
    other = tmp_path / "seq2seq.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                str(example / "held_back.csv"),
                "--output",
                str(other),
                "--head",
                "seq2seq",
            ]
        )
        == 0
    )
    with pytest.raises(
        UserError, match="drawn from other predictions .* than --predictions .*seq2seq.csv"
    ):
        evaluate_main(["--audit", str(audit_path), "--predictions", str(other)])
    read(predicted).iloc[1:].to_csv(tmp_path / "fewer.csv", index=False)
    with pytest.raises(UserError, match="drawn from other predictions"):
        evaluate_main(["--audit", str(audit_path), "--predictions", str(tmp_path / "fewer.csv")])
    audit = read(audit_path)
    wrong = audit["code_1"] != true_codes(audit["true_code_1"])

    def refused(frame, message):
        frame.to_csv(tmp_path / "edited.csv", index=False)
        with pytest.raises(UserError, match=message):
            evaluate_main(
                [
                    "--audit",
                    str(tmp_path / "edited.csv"),
                    "--predictions",
                    predicted,
                    "--code-length",
                    "5",
                ]
            )
        assert not os.path.exists(tmp_path / "edited_scores.csv")  # nothing written

    first_wrong = int(np.flatnonzero(wrong)[0])
    refused(
        audit.assign(
            code_1=audit["code_1"].where(audit.index != first_wrong, audit["true_code_1"])
        ),
        rf"1 row\(s\) \(line {first_wrong + 2}\) differ from what predict.py wrote",
    )
    refused(
        audit.assign(audit=audit["audit"].str.replace('"seed": 0', '"seed": 1')),
        "'audit' column was changed",
    )
    for earlier in (1, 2):
        refused(
            audit.assign(audit=audit["audit"].str.replace('"version": 3', f'"version": {earlier}')),
            rf"drawn by an earlier mixer \(audit version {earlier}\); draw the audit again",
        )
    sized = example / "other_audit.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                str(example / "held_back.csv"),
                "--audit",
                "5",
                str(sized),
                "--audit-seed",
                "3",
            ]
        )
        == 0
    )
    refused(pd.concat([audit, read(sized)]), "holds rows of 2 audits")
    refused(
        pd.concat([audit, audit.iloc[:1]]), f"audit_row {audit['audit_row'].iloc[0]} appears twice"
    )
    refused(
        audit.assign(correct=np.where(wrong, "yes", "")),
        "'correct' says otherwise than the true codes",
    )
    refused(audit.assign(correct="maybe"), "'correct' holds yes or no")
    with pytest.raises(UserError, match="leave out --truth-cols"):
        evaluate_main(["--audit", str(audit_path), "--truth-cols", "hisco_1"])
    with pytest.raises(UserError, match="not an audit"):
        evaluate_main(["--audit", predicted])
    held = str(example / "held_back.csv")
    for flags, message in [
        (
            ["--audit", "20", "a.csv", "--audit-margin", "0.03"],
            "--audit-margin 0.03: the margin chooses the number of rows",
        ),
        (["--audit", "a.csv"], "give the number of rows .* or the half-width"),
        (
            ["--audit", "5", "a.csv", "--what", "probs", "--output", "p.parquet"],
            "--audit draws from the code table",
        ),
        (["--audit", "5", "a.csv", "--audit-by", "parish"], r"no column 'parish' \(--audit-by\)"),
        (["--audit", "10", "a.csv", "--audit-by", "occ1"], "more strata than the audit has rows"),
    ]:
        with pytest.raises(UserError, match=message):
            predict_main(["--checkpoint", model_dir(example), "--input", held, *flags])
    assert not os.path.exists("a.csv")


def test_an_audit_checked_in_excel_scores_as_written(example, tmp_path):
    """Filled in Excel: true codes typed as numbers (leading zeros gone), verdicts as 'Yes';
    as .xlsx (openpyxl saves it) and as a CSV file Excel saved (numbers as numbers)."""
    import mixer
    import openpyxl

    model = mixer.load(model_dir(example))
    held = read(example / "held_back.csv")
    table = model.audit(held, 40, str(tmp_path / "audit.xlsx"))
    truth = table["hisco_1"].tolist()
    book = openpyxl.load_workbook(tmp_path / "audit.xlsx")
    sheet = book.active
    header = [cell.value for cell in sheet[1]]
    for row, code in enumerate(truth, start=2):
        if row % 4:
            sheet.cell(row, header.index("true_code_1") + 1).value = (
                int(code) if code.isdigit() else code
            )
        else:  # a verdict alone, as a person types it
            right = (
                sheet.cell(row, header.index("code_1") + 1).value
                == true_codes(pd.Series([code]))[0]
            )
            sheet.cell(row, header.index("correct") + 1).value = "Yes" if right else "No"
    book.save(tmp_path / "audit.xlsx")
    assert evaluate_main(["--audit", str(tmp_path / "audit.xlsx"), "--code-length", "5"]) == 0
    excel = pd.read_csv(tmp_path / "audit_scores.csv")
    # the same verdicts in a CSV that a spreadsheet saved: every number-like cell a number
    csv = table.assign(
        true_code_1=[c if r % 4 else "" for r, c in enumerate(truth, start=2)],
        correct=[pd.NA if r % 4 else None for r in range(2, len(truth) + 2)],
    )
    csv["correct"] = [
        ""
        if r % 4
        else (
            "Yes"
            if table["code_1"].iloc[r - 2] == true_codes(pd.Series([truth[r - 2]]))[0]
            else "No"
        )
        for r in range(2, len(truth) + 2)
    ]
    csv.to_csv(tmp_path / "saved.csv", index=False)
    pd.read_csv(tmp_path / "saved.csv").to_csv(
        tmp_path / "saved.csv", index=False
    )  # codes become numbers
    assert pd.read_csv(tmp_path / "saved.csv")["code_1"].dtype.kind in "if"
    assert evaluate_main(["--audit", str(tmp_path / "saved.csv"), "--code-length", "5"]) == 0
    saved = pd.read_csv(tmp_path / "saved_scores.csv")
    assert excel["checked"].iloc[0] == 40
    pd.testing.assert_frame_equal(excel, saved)


def test_training_on_an_audit_is_asked_for_and_the_next_audit_leaves_its_rows_out(
    example, small_csv, tmp_path, capsys
):
    audit = example / "audit.csv"  # filled by the docs' example
    argv = [
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--allow-codes-shorter-than-block-size",
        "--share-val",
        "0.09",
        *TINY,
        "--max-steps",
        "1",
        "--no-eval-noise",
    ]
    with pytest.raises(UserError, match="an audit .* pass --train-on-audit"):
        finetune_main(
            [*argv, "--save-path", str(tmp_path / "refused"), "--extra-train", str(audit)]
        )
    run = tmp_path / "trained"
    assert (
        finetune_main(
            [*argv, "--save-path", str(run), "--extra-train", str(audit), "--train-on-audit"]
        )
        == 0
    )
    filled = read(audit)
    assert len(pd.read_parquet(run / "data_train.parquet")) == 110 + len(
        filled
    )  # 121 rows, 11 for validation
    with open(run / "config.json", encoding="utf-8") as handle:
        audited = json.load(handle)["audited"]
    assert sorted(set(audit_file.description_keys(filled["occ1"]))) == audited
    # a run that starts from it keeps them
    assert (
        finetune_main(
            [*argv, "--save-path", str(tmp_path / "after"), "--initial-checkpoint", str(run)]
        )
        == 0
    )
    with open(tmp_path / "after" / "config.json", encoding="utf-8") as handle:
        assert json.load(handle)["audited"] == audited
    # the next audit of this model's predictions: only rows whose description it did not train on
    held = read(example / "held_back.csv")
    seen = held["occ1"].isin(set(filled["occ1"]))
    assert (
        predict_main(
            [
                "--checkpoint",
                str(run),
                "--input",
                str(example / "held_back.csv"),
                "--audit",
                "100",
                str(tmp_path / "next.csv"),
            ]
        )
        == 0
    )
    following = read(tmp_path / "next.csv")
    assert not following["occ1"].isin(set(filled["occ1"])).any()
    design = json.loads(following["audit"].iloc[0])
    assert design["left_out"] == {"in audits the model trained on": int(seen.sum())}
    assert design["strata"] == [[None, int((~seen).sum()), 100]]
    # its score says plainly that it is of the rows not trained on, not of the whole file
    simulate_check(tmp_path / "next.csv", "--truth-cols", "hisco_1")
    assert evaluate_main(["--audit", str(tmp_path / "next.csv")]) == 0
    population = f"{int((~seen).sum()):,} of 800 predicted rows; {int(seen.sum()):,} in audits the model trained on left out"
    assert set(pd.read_csv(tmp_path / "next_scores.csv")["population"]) == {population}
    assert (
        f"the estimate is for the {int((~seen).sum()):,} rows drawn from, not all 800"
        in capsys.readouterr().out
    )


def test_an_audit_reads_its_codes_as_the_model_spells_them():
    """An audit's codes go through the one normaliser (mixer.data.labels.normalise) with the model's
    code system: a spreadsheet's 6510.0 is 6510, a number cell a whole number, and a digit
    code that lost its leading zeros gets them back where the model's codes have a width
    (HISCO's 5, a --key's or --zero-padded-codes' width; number cells, which keep no zeros:
    --block-size, whatever --allow-codes-shorter-than-block-size says); where they have
    none, a text 6510 is not 06510."""
    from mixer.data.labels.formatter import CodeFormatter
    from mixer.data.tables.reading import frame_as_text

    hisco, toy = (
        CodeFormatter(kind="hisco"),
        CodeFormatter(allow_short=True),
    )  # toy: the tests' model
    padded, fixed = CodeFormatter(digit_width=5), CodeFormatter()
    parts = CodeFormatter(block_size=3, use_within_block_sep=True)
    text = pd.DataFrame(
        {"code_1": ["06510", "6510", " 06510 ", "-1"], "code_2": ["", "", "14120", ""]}
    )
    decimals = pd.DataFrame(
        {"code_1": ["6510.0", "14120.0", ""]}
    )  # a CSV column as a spreadsheet writes numbers
    numbers = frame_as_text(
        pd.DataFrame({"code_1": [6510.0, 14120.0, np.nan]}), "test"
    )  # Excel, Stata, Parquet
    assert audit_file.canonical_codes(text, ["code_1", "code_2"], hisco).tolist() == [
        "06510|",
        "06510|",
        "06510|14120",
        "-1|",
    ]
    assert audit_file.canonical_codes(text, ["code_1", "code_2"], padded).tolist() == [
        "06510|",
        "06510|",
        "06510|14120",
        "-1|",
    ]
    for unknown in (toy, fixed):  # a text column of a code system without a width: as written
        assert audit_file.canonical_codes(text, ["code_1"], unknown).tolist() == [
            "06510",
            "6510",
            "06510",
            "-1",
        ]
    for frame in (decimals, numbers):  # numbers keep no zeros: the block size is their width
        for formatter in (hisco, fixed, toy):
            assert audit_file.canonical_codes(frame, ["code_1"], formatter).tolist() == [
                "06510",
                "14120",
                "",
            ]
    assert audit_file.canonical_codes(
        pd.DataFrame({"code_1": ["1,12,0"]}), ["code_1"], parts
    ).tolist() == ["1,12,0"]


def drawn_without_a_model(formatter, codes: list, path, inputs=None, **request) -> pd.DataFrame:
    """An audit of every row (or `size` rows) of a small table whose predicted codes are
    given: the draw of predict.py and Model.audit, without a model (`request`: by=, unit=,
    size=, seed=, as AuditRequest takes them)."""
    from mixer.audit.draw import AuditDraw, AuditRequest, write_audit

    frame = pd.DataFrame({"occ1": [f"occupation {i}" for i in range(len(codes))], **(inputs or {})})
    predicted = pd.DataFrame({"code_1": codes, "prob_1": [0.9] * len(codes)})
    draw = AuditDraw(
        AuditRequest(str(path), **{"size": len(codes), **request}).check(), "occ1", [], formatter
    )
    draw.add(frame, predicted)
    table, lines = draw.finish("m-test", "test", "flat", "0.5")
    write_audit(table, str(path), lines, log=lambda line: None)
    return table


def test_a_spreadsheet_that_drops_zeros_is_no_edit_where_the_model_has_a_width(tmp_path, capsys):
    """A HISCO model's audit saved by a spreadsheet as CSV (06510 becomes 6510, true codes
    typed as numbers) scores as written, without --code-length; a model whose codes have no
    width cannot tell 6510 from 06510, so there the change is an edit, refused."""
    from mixer.data.labels.formatter import CodeFormatter

    codes = ["06510", "14120", "06510", "-1"]
    for formatter, kept in (
        (CodeFormatter(kind="hisco"), True),
        (CodeFormatter(allow_short=True), False),
    ):
        path = tmp_path / f"{formatter.kind}.csv"
        table = drawn_without_a_model(formatter, codes, path)
        saved = read(
            path
        )  # the true codes typed as numbers (06510 as 6510), one of them another code
        saved["true_code_1"] = saved["code_1"].str.lstrip("0").replace("14120", "1110")
        saved["code_1"] = saved["code_1"].str.lstrip("0")
        saved.to_csv(path, index=False)
        if not kept:  # the rows whose code lost its zero, named by their lines
            lines = ", ".join(
                f"line {i + 2}" for i in np.flatnonzero(table["code_1"].str.startswith("0"))
            )
            with pytest.raises(
                UserError, match=rf"2 row\(s\) \({lines}\) differ from what predict.py wrote"
            ):
                evaluate_main(["--audit", str(path)])
            continue
        assert evaluate_main(["--audit", str(path)]) == 0
        whole = pd.read_csv(tmp_path / f"{formatter.kind}_scores.csv").iloc[0]
        assert (whole["checked"], whole["correct"]) == (4, 3)
    assert (
        "score with --code-length" not in capsys.readouterr().out
    )  # the zeros are back: nothing to warn of


def test_an_audit_names_the_input_columns_through_the_one_naming_step(tmp_path):
    """The input's columns beside the audit's own are named by mixer.data.tables.writing.output_names,
    in the audit's format: one that would take an audit's name, or that the audit's reader
    would read as a person's code (true_code_7), is written <name>_input; Stata's names are
    made valid. The audit reads back as written."""
    from mixer.data.labels.formatter import CodeFormatter

    inputs = {
        "code_1": ["a"] * 3,
        "correct": ["b"] * 3,
        "true_code_7": ["c"] * 3,
        "parish name": ["d"] * 3,
    }
    for name in ("audit.csv", "audit.dta"):
        table = drawn_without_a_model(
            CodeFormatter(kind="hisco"), ["06510", "14120", "-1"], tmp_path / name, inputs
        )
        parish = "parish name" if name.endswith(".csv") else "parish_name"
        assert list(table.columns)[:6] == [
            "audit_row",
            "occ1",
            "code_1_input",
            "correct_input",
            "true_code_7_input",
            parish,
        ]
        assert list(table.columns)[6:] == [
            "code_1",
            "prob_1",
            "correct",
            "true_code_1",
            "note",
            "audit_check",
            "audit",
        ]
        audit = read_audit(str(tmp_path / name))
        assert audit.true_columns == ["true_code_1"] and audit.design.audit_text_col == "occ1"
        assert audit.frame["code_1"].tolist() == table["code_1"].tolist()
        assert sorted(audit.frame["code_1"]) == ["-1", "06510", "14120"]


def test_an_audit_is_read_with_its_own_flags(tmp_path):
    """evaluate.py reads --audit with its role's options (--audit-encoding, --audit-sep,
    --audit-sheet, --audit-header-row) and --predictions with the main ones: an audit
    re-saved by Excel on Windows (cp1252, ';') beside UTF-8 predictions."""
    from mixer.data.labels.formatter import CodeFormatter

    path = tmp_path / "audit.csv"
    drawn_without_a_model(
        CodeFormatter(kind="hisco"),
        ["06510", "14120", "-1"],
        path,
        {"parish": ["Tromsø", "Åsnes", "Bergen"]},
    )
    filled = read(path)
    filled["correct"] = "yes"
    filled.to_csv(path, index=False, sep=";", encoding="cp1252")
    with pytest.raises(
        UserError, match=r"--audit .*audit.csv: not UTF-8 text.*--audit-encoding cp1252"
    ):
        evaluate_main(["--audit", str(path)])
    with pytest.raises(UserError, match="--audit-sep"):
        evaluate_main(["--audit", str(path), "--audit-encoding", "cp1252", "--audit-sep", ","])
    assert (
        evaluate_main(["--audit", str(path), "--audit-encoding", "cp1252", "--encoding", "utf-8"])
        == 0
    )
    assert pd.read_csv(tmp_path / "audit_scores.csv").iloc[0]["correct"] == 3


HISCO_CODES = ["06510", "14120", "-1", "99910"]


def hisco():
    from mixer.data.labels.formatter import CodeFormatter

    return CodeFormatter(kind="hisco")


def test_an_audit_all_right_or_all_wrong_is_scored_with_its_picture(tmp_path, monkeypatch):
    """A stratum, or the whole audit, all right (all wrong): its interval ends at 1 (starts
    at 0) exactly, the picture's error bars are clipped at 0, and the table and the picture
    are written together: when the picture cannot be drawn, neither is (the table was
    written first, then the plot raised 'yerr must not contain negative values')."""
    from mixer.audit import scores as audit_scores

    path = tmp_path / "audit.csv"
    parish = ["A"] * 300 + ["B"] * 300
    drawn_without_a_model(hisco(), ["06510"] * 600, path, {"parish": parish}, by="parish", size=178)
    filled = read(path)
    for verdicts in (np.where(filled["parish"] == "A", "yes", "no"), "yes"):
        filled.assign(correct=verdicts).to_csv(path, index=False)
        assert evaluate_main(["--audit", str(path)]) == 0
        scores = pd.read_csv(tmp_path / "audit_scores.csv", dtype={"parish": str}).set_index(
            "parish"
        )
        assert (scores.loc["A", "accuracy"], scores.loc["A", "high"]) == (1.0, 1.0)
        assert os.path.getsize(tmp_path / "audit_scores.png") > 0
    assert (scores.loc["all", "accuracy"], scores.loc["all", "high"]) == (1.0, 1.0)
    filled.assign(correct=np.where(filled["parish"] == "A", "yes", "no")).to_csv(path, index=False)
    assert evaluate_main(["--audit", str(path)]) == 0
    assert pd.read_csv(tmp_path / "audit_scores.csv").set_index("parish").loc["B", "low"] == 0.0
    # an interval that ends a hair below its estimate (Wilson's 0.9999999999999999) is drawn
    table = pd.read_csv(tmp_path / "audit_scores.csv")
    table.loc[1, ["accuracy", "high"]] = [1.0, 0.9999999999999999]
    assert audit_scores.render_scores(table)[:4] == b"\x89PNG"
    # a picture that fails: nothing written
    for written in ("audit_scores.csv", "audit_scores.png"):
        os.remove(tmp_path / written)

    def fails(table):
        raise RuntimeError("no picture")

    monkeypatch.setattr(audit_scores, "render_scores", fails)
    with pytest.raises(RuntimeError, match="no picture"):
        evaluate_main(["--audit", str(path)])
    assert not os.path.exists(tmp_path / "audit_scores.csv") and not os.path.exists(
        tmp_path / "audit_scores.png"
    )


def descriptions_audit(path, size=40):
    """An audit of descriptions of 60 rows: 30 'farmer', 10 'smith', 20 distinct."""
    texts = ["farmer"] * 30 + ["smith"] * 10 + [f"rare {i}" for i in range(20)]
    codes = ["61110"] * 30 + ["83110"] * 10 + ["99910"] * 20
    return drawn_without_a_model(
        hisco(), codes, path, {"occ1": texts}, unit="descriptions", size=size
    )


def test_an_audit_of_descriptions_stopped_early_counts_the_rows_before_the_first_blank_line(
    tmp_path, capsys
):
    """Its lines are in the order of their first row drawn, each with the ranks of the rows
    drawn it stands for; a person who checks the first 3 lines is scored on the rows drawn
    before the first rank of a line left blank (not on every row of the 3 lines, which
    favours frequent descriptions); the table gives lines and rows."""
    path = tmp_path / "descriptions.csv"
    table = descriptions_audit(path)
    ranks = [[int(r) for r in cell.split()] for cell in table["audit_ranks"]]
    assert [len(r) for r in ranks] == table["audit_draws"].tolist() and sum(map(len, ranks)) == 40
    assert sorted(sum(ranks, [])) == list(range(1, 41))
    assert [r[0] for r in ranks] == sorted(r[0] for r in ranks)  # listed by their first row drawn
    filled = read(path)
    filled.loc[:2, "correct"] = "yes"
    filled.to_csv(path, index=False)
    assert evaluate_main(["--audit", str(path)]) == 0
    stop = min(set(range(1, 42)) - set(sum(ranks[:3], [])))
    whole = pd.read_csv(tmp_path / "descriptions_scores.csv").iloc[0]
    assert (whole["checked"], whole["blank"], whole["lines_checked"], whole["lines"]) == (
        stop - 1,
        40 - (stop - 1),
        3,
        len(table),
    )
    assert stop - 1 < sum(
        map(len, ranks[:3])
    )  # the rows of the 3 lines drawn after the stop are not counted
    assert f"checked 3 of {len(table)} lines" in capsys.readouterr().out


def test_a_copied_line_of_an_audit_of_descriptions_is_refused(tmp_path):
    """A line pasted twice would count its rows twice (282 rows checked of 200 drawn)."""
    path = tmp_path / "descriptions.csv"
    descriptions_audit(path)
    filled = read(path).assign(correct="yes")
    for edited, message in [
        (
            pd.concat([filled, filled.iloc[[1]]]),
            rf"line {len(filled) + 2} repeats line 3 "
            r"\(the same rows drawn, counted twice\); remove the copy",
        ),
        (
            filled.assign(audit_draws=filled["audit_draws"].astype(int) + 1),
            "audit_draws differs from the ranks in audit_ranks",
        ),
    ]:
        edited.to_csv(tmp_path / "edited.csv", index=False)
        with pytest.raises(UserError, match=message):
            evaluate_main(["--audit", str(tmp_path / "edited.csv")])
        assert not os.path.exists(tmp_path / "edited_scores.csv")


def test_a_stratified_audit_re_saved_in_cp1252_with_labels_outside_it_scores(tmp_path):
    """Excel on Windows re-saves a CSV in cp1252: letters it lacks (ł, ś, ć) become '?'. The
    `audit` cell is ASCII (the stratum column's name as \\u escapes) and the scoring does not
    use the labels' letters, so the audit scores as filled."""
    path = tmp_path / "audit.csv"
    place = ["Łódź"] * 20 + ["Kraków"] * 20 + ["Tromsø"] * 20
    table = drawn_without_a_model(
        hisco(), ["06510"] * 60, path, {"miejscowość": place}, by="miejscowość", size=30
    )
    assert table["audit"].iloc[0].isascii() and "miejscowo\\u015b\\u0107" in table["audit"].iloc[0]
    filled = read(path).assign(correct="yes")
    filled.to_csv(path, index=False, encoding="cp1252", errors="replace", sep=";")
    assert "miejscowo??" in (tmp_path / "audit.csv").read_text(encoding="cp1252").split("\n")[0]
    assert evaluate_main(["--audit", str(path), "--audit-encoding", "cp1252"]) == 0
    scores = pd.read_csv(tmp_path / "audit_scores.csv")
    assert scores["checked"].tolist() == [30, 10, 10, 10] and scores["rows"].tolist() == [
        60,
        20,
        20,
        20,
    ]


def test_an_audit_of_800_strata_fits_a_spreadsheet_cell_and_its_strata_are_checked(tmp_path):
    """800 parishes (their list in the cell took 36,000 characters, more than an Excel cell
    holds): the strata are on the rows (audit_stratum_rows, _drawn) with a digest in the
    `audit` cell, which stays short, so the audit is written as .xlsx and scores; an edit
    of a stratum's rows or draws is refused."""
    parish = [f"parish {i:04d}" for i in range(800) for _ in range(3)]
    path = tmp_path / "audit.xlsx"
    table = drawn_without_a_model(
        hisco(), ["06510"] * 2400, path, {"parish": parish}, by="parish", size=1800
    )
    assert len(table["audit"].iloc[0]) < 2000 and table["audit_stratum"].nunique() == 800
    with pytest.raises(
        UserError, match="no row is checked yet"
    ):  # read back and checked: design, strata, rows
        evaluate_main(["--audit", str(path)])
    filled = table.assign(correct="yes")
    filled.to_csv(tmp_path / "audit.csv", index=False)
    assert evaluate_main(["--audit", str(tmp_path / "audit.csv")]) == 0
    whole = pd.read_csv(tmp_path / "audit_scores.csv").iloc[0]
    assert (whole["rows"], whole["drawn"], whole["checked"]) == (2400, 1800, 1800)
    first = filled["audit_stratum"] == filled["audit_stratum"].iloc[0]
    for edited, message in [
        (
            filled.assign(
                audit_stratum_rows=np.where(filled.index == 0, 4, filled["audit_stratum_rows"])
            ),
            r"the rows of stratum \d+ \(line 2, .*\) differ in audit_stratum_rows",
        ),
        (
            filled.assign(audit_stratum_rows=np.where(first, 4, filled["audit_stratum_rows"])),
            "audit_stratum_rows or audit_stratum_drawn were changed",
        ),
        (filled[~first], r"no row of stratum \d+ .* is left"),
    ]:
        edited.to_csv(tmp_path / "edited.csv", index=False)
        with pytest.raises(UserError, match=message):
            evaluate_main(["--audit", str(tmp_path / "edited.csv")])


def test_a_row_cleared_in_a_spreadsheet_is_skipped(tmp_path, capsys):
    """A row whose every cell was cleared (';;;;' in the CSV) is not 'a row added by hand':
    it is skipped, as a row removed from the file; other lines keep their numbers."""
    path = tmp_path / "audit.csv"
    drawn_without_a_model(hisco(), HISCO_CODES, path)
    filled = read(path).assign(correct="yes")
    filled.loc[1] = ""
    filled.loc[2, "correct"] = "maybe"
    filled.to_csv(path, index=False, sep=";")
    with pytest.raises(UserError, match="line 4 'maybe'"):
        evaluate_main(["--audit", str(path)])
    filled.loc[2, "correct"] = "no"
    filled.to_csv(path, index=False, sep=";")
    assert evaluate_main(["--audit", str(path)]) == 0
    whole = pd.read_csv(tmp_path / "audit_scores.csv").iloc[0]
    assert (whole["checked"], whole["correct"]) == (3, 2)
    assert "1 of them missing from the file" in capsys.readouterr().out


def test_an_audit_with_verdicts_is_never_overwritten(example, tmp_path):
    """Drawing again to a file that holds a filled audit (any format, or re-saved in
    cp1252) is refused before any work; an audit not yet filled may be drawn again."""
    from mixer.audit.draw import AuditRequest

    for name in ("audit.csv", "audit.xlsx"):
        path = tmp_path / name
        drawn_without_a_model(hisco(), HISCO_CODES, path)
        request = AuditRequest(str(path), size=4).check()
        request.check_path({})  # no verdicts yet: drawn again
        filled = read(path) if name.endswith(".csv") else pd.read_excel(path, dtype=str).fillna("")
        filled.loc[0, "true_code_1"] = "06510"
        if name.endswith(".csv"):
            filled.to_csv(path, index=False, encoding="cp1252", sep=";")
        else:
            filled.to_excel(path, index=False)
        with pytest.raises(
            UserError,
            match=rf"--audit .*{name}: an audit with verdicts in it, which this would "
            "replace; write to another file, or delete it first",
        ):
            request.check_path({})
    filled = example / "audit.csv"  # filled by the docs' example
    before = filled.read_bytes()
    with pytest.raises(UserError, match="an audit with verdicts in it"):
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                str(example / "held_back.csv"),
                "--audit",
                "5",
                str(filled),
            ]
        )
    with pytest.raises(UserError, match="an audit with verdicts in it"):
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                str(example / "held_back.csv"),
                "--output",
                str(filled),
            ]
        )
    assert filled.read_bytes() == before


def test_the_audit_guards_come_with_any_import_of_mixer(tmp_path):
    """mixer.data knows the audit only by the guards a caller passes it (mixer.audit.guards.GUARDS,
    mixer.data.tables.guards): the writer given them refuses to replace a filled audit, and
    `import mixer` still loads no pandas."""
    filled = tmp_path / "audit.csv"
    filled.write_text("occ1,audit,audit_check,correct\nfarmer,x,y,yes\n")
    code = (
        "import sys\n"
        "import mixer\n"
        "assert 'pandas' not in sys.modules\n"
        "from mixer.audit.guards import GUARDS\n"
        "assert 'pandas' not in sys.modules\n"
        "from mixer.core.errors import UserError\n"
        "from mixer.data.tables.writing import check_output_path\n"
        "try:\n"
        f"    check_output_path({str(filled)!r}, '--output', {{}}, GUARDS)\n"
        "except UserError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env_for_subprocess(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "an audit with verdicts in it, which this would replace" in proc.stdout


def test_audit_rows_in_any_training_table_are_refused_unless_asked_for(
    example, small_csv, tmp_path
):
    """An audit passed as --dataset (its true_code_1 as the target), a training file with
    an audit's rows appended (their audit and audit_check columns kept), or audit rows as
    --val-data (which choose the checkpoint and the threshold): refused without
    --train-on-audit; with it, the run records their descriptions as audited."""
    audit = read(example / "audit.csv")  # filled by the docs' example
    small = read(small_csv)
    appended = pd.concat(
        [small, audit[[*small.columns.drop("hisco_2"), "audit", "audit_check"]]], ignore_index=True
    )
    appended.to_csv(tmp_path / "appended.csv", index=False)
    common = ["--allow-codes-shorter-than-block-size", *TINY, "--max-steps", "1", "--no-eval-noise"]
    refused = [
        (finetune_main, ["--dataset", str(example / "audit.csv"), "--target-cols", "true_code_1"]),
        (finetune_main, ["--dataset", str(tmp_path / "appended.csv"), "--target-cols", "hisco_1"]),
        (
            train_mixer_main,
            [
                "--train-data",
                small_csv,
                "--val-data",
                str(tmp_path / "appended.csv"),
                "--target-cols",
                "hisco_1",
            ],
        ),
    ]
    for main, argv in refused:
        with pytest.raises(
            UserError,
            match=r"--(dataset|val-data) .*: 200 row\(s\) of an audit .* pass "
            "--train-on-audit",
        ):
            main([*argv, *common, "--save-path", str(tmp_path / "refused")])
    run = tmp_path / "trained"
    assert (
        finetune_main(
            [
                "--dataset",
                str(tmp_path / "appended.csv"),
                "--target-cols",
                "hisco_1",
                *common,
                "--share-val",
                "0.09",
                "--save-path",
                str(run),
                "--train-on-audit",
            ]
        )
        == 0
    )
    with open(run / "config.json", encoding="utf-8") as handle:
        assert json.load(handle)["audited"] == sorted(
            set(audit_file.description_keys(audit["occ1"]))
        )


def test_audit_rows_in_a_training_table_are_named_as_rows_of_its_format(tmp_path):
    """Review of issue 34: the refusal named a CSV 'line' for every format; it names the row
    under the header, and in a workbook also the row Excel shows (docs/formats.md)."""
    from mixer.core.config import DataConfig
    from mixer.data.prepared.prepare import prepare
    from conftest import write_xlsx

    rows = (
        [["occ1", "hisco_1", "audit", "audit_check"]]
        + [["farmer", "61110", "", ""]] * 4
        + [["smith", "83110", '{"id": "a"}', "c-0123456789ab"]]
    )
    table = pd.DataFrame(rows[1:], columns=rows[0])
    table.to_csv(tmp_path / "t.csv", index=False)
    table.to_parquet(tmp_path / "t.parquet")
    write_xlsx(tmp_path / "t.xlsx", [["Occupations, 1850"], [], *rows])
    for name, header_row, row in (
        ("t.csv", None, "row 5,"),
        ("t.parquet", None, "row 5,"),
        ("t.xlsx", 3, "row 5 (sheet row 8),"),
    ):
        with pytest.raises(UserError) as error:
            prepare(
                DataConfig(
                    dataset=str(tmp_path / name), target_cols=["hisco_1"], header_row=header_row
                ),
                0,
                log=lambda _: None,
                guards=GUARDS,
            )
        assert f"1 row(s) of an audit (predict.py --audit; e.g. {row} by its 'audit'" in str(
            error.value
        )


def test_rows_that_keep_one_of_an_audit_s_two_columns_are_still_audit_rows(tmp_path):
    """Review of issue 34: rows that kept an audit's `audit` column but not `audit_check`
    trained without --train-on-audit. Either column as predict.py writes it marks the
    rows; an `audit` column of a user's own (not an audit's design) does not."""
    from mixer.core.config import DataConfig
    from mixer.data.prepared.prepare import prepare

    design = audit_file.Design(
        unit="rows",
        by=None,
        seed=0,
        strata=(audit_file.Stratum(None, 10, 2),),
        predictions="p-0",
        predicted_rows=10,
        model="m-0",
        source="runs/x",
        head="flat",
        threshold="0.5",
        text_col="occ1",
        audit_text_col="occ1",
        code_columns=("code_1",),
        expected=None,
        margin=None,
    )
    rows = pd.DataFrame({"occ1": ["farmer"] * 4 + ["smith"], "hisco_1": ["61110"] * 4 + ["83110"]})
    marked = {
        "audit only": rows.assign(audit=[""] * 4 + [design.to_json()]),
        "audit_check only": rows.assign(audit_check=[""] * 4 + ["c-0123456789ab"]),
    }
    for name, table in marked.items():
        table.to_csv(tmp_path / "t.csv", index=False)
        with pytest.raises(
            UserError, match=r"1 row\(s\) of an audit .*e\.g\. row 5, .*pass --train-on-audit"
        ):
            prepare(
                DataConfig(dataset=str(tmp_path / "t.csv"), target_cols=["hisco_1"], share_val=0.2),
                0,
                log=lambda _: None,
                guards=GUARDS,
            )
        assert audit_file.audit_rows(table).tolist() == [False] * 4 + [True], name
        assert (
            prepare(
                DataConfig(
                    dataset=str(tmp_path / "t.csv"),
                    target_cols=["hisco_1"],
                    train_on_audit=True,
                    share_val=0.2,
                ),
                0,
                log=lambda _: None,
                guards=GUARDS,
            ).train
            is not None
        )
    own = rows.assign(audit=["checked by JS", "", "", "", "{}"])  # a user's column of that name
    assert not audit_file.audit_rows(own).any()
    with pytest.raises(UserError, match="an audit .*pass --train-on-audit"):  # as --extra-train too
        train_on.training_table(marked["audit only"], "a.csv", allowed=False)
    for (
        table
    ) in marked.values():  # with --train-on-audit, as the refusal says: its rows as they are
        pd.testing.assert_frame_equal(train_on.training_table(table, "a.csv", allowed=True), table)


def test_an_int8_audit_is_drawn_said_to_be_approximate_and_scored_against_its_own_predictions(
    example, tmp_path
):
    held = str(example / "held_back.csv")
    fp32_audit, int8_audit, int8_predicted = (
        tmp_path / "fp32.csv",
        tmp_path / "int8.csv",
        tmp_path / "p8.csv",
    )
    assert (
        predict_main(
            ["--checkpoint", model_dir(example), "--input", held, "--audit", "20", str(fp32_audit)]
        )
        == 0
    )
    assert (
        predict_main(
            [
                "--checkpoint",
                model_dir(example),
                "--input",
                held,
                "--output",
                str(int8_predicted),
                "--quantize",
                "int8",
                "--audit",
                "20",
                str(int8_audit),
            ]
        )
        == 0
    )
    fp32_design = json.loads(read(fp32_audit)["audit"].iloc[0])
    int8_design = json.loads(read(int8_audit)["audit"].iloc[0])
    assert int8_design["source"] == f"{model_dir(example)} (--quantize int8: approximate)"
    assert fp32_design["source"] == model_dir(example)
    assert int8_design["model"] != fp32_design["model"]  # other numerics, another model fingerprint
    simulate_check(int8_audit, "--truth-cols", "hisco_1")
    assert (
        evaluate_main(
            ["--audit", str(int8_audit), "--predictions", str(int8_predicted), "--code-length", "5"]
        )
        == 0
    )
    scores = pd.read_csv(tmp_path / "int8_scores.csv", dtype=str)
    assert scores.iloc[0]["model"].endswith("(--quantize int8: approximate)")
    # the API draws it alike
    import mixer

    table = mixer.load(model_dir(example), device="cpu", quantize="int8").audit(read(held), 20)
    assert json.loads(table["audit"].iloc[0])["model"] == int8_design["model"]


def test_the_predictions_digest_is_on_the_disk_before_a_journal_names_it(tmp_path, monkeypatch):
    """A resumed job takes the audit's digest up again from the bytes it kept (mixer.audit.draw
    .AuditSink): state() syncs them to the disk, as every other part is before the journal
    names it, and gives their checksum, by which keep() knows them (a lost node's file of the
    same length but other bytes is hashed again, not taken)."""
    from mixer.data.labels.formatter import CodeFormatter

    synced, fsync = [], os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[1])
    path = str(tmp_path / "digest.bin")
    digest = audit_file.PredictionsDigest(CodeFormatter(kind="hisco"))
    digest.keep(path)
    texts, codes = pd.Series(["farmer", "smith"]), pd.DataFrame({"code_1": ["61110", "83110"]})
    digest.update(texts, codes, ["code_1"])
    state = digest.state()
    assert digest.tee.fileno() in synced
    digest.tee.close()
    again = audit_file.PredictionsDigest(CodeFormatter(kind="hisco"))
    assert again.keep(path, state) and again.rows == 2
    again.update(texts, codes, ["code_1"])
    again.tee.close()
    data = open(path, "rb").read()
    with open(path, "wb") as handle:  # the first rows' bytes, one letter otherwise
        handle.write(data[:3] + b"X" + data[4:])
    damaged = audit_file.PredictionsDigest(CodeFormatter(kind="hisco"))
    assert not damaged.keep(path, state) and damaged.rows == 0
    damaged.tee.close()
    assert os.path.getsize(path) == 0

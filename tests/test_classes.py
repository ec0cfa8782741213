"""Classes beside the codes (predict.py --crosswalk, Model.predict(crosswalk=), evaluate.py
--crosswalk; docs/classes.md): every output format and shape, the check list and the audit
carry them; the input's status picks the table's row; a user's table; codes without a class
left blank and counted; resume, two processes and the API give the CLI's file."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, env_for_subprocess, fails, run, run_program, torchrun_cmd
from mixer.cli.entrypoints import evaluate_main, predict_main
from mixer.data.labels.crosswalk import load_crosswalk
from mixer.data.tables.reading import read_table

ENGINEER = "chief civil engineer of the works"  # coded 02290 by the lookup (HISCLASS 2, or 1 as 31)
FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"  # mixer.prediction.resume: a kill -9 after chunk k


@pytest.fixture(scope="module")
def records(tmp_path_factory, small_csv) -> str:
    """240 rows of the example data with a HISCO status column (31, 33 or blank), the
    engineer's rows among them, and rows without a description."""
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    rows = pd.concat([frame, frame], ignore_index=True).head(240).copy()
    rows.loc[::10, "occ1"] = ENGINEER
    rows.loc[::37, "occ1"] = ""
    rows["status"] = np.array(["31", "", "33"], dtype=object)[np.arange(240) % 3]
    path = tmp_path_factory.mktemp("classes") / "records.csv"
    rows.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def lookup(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("lookup") / "lookup.csv"
    pd.DataFrame({"occ1": [ENGINEER], "hisco_1": ["02290"], "hisco_2": [""]}).to_csv(
        path, index=False
    )
    return str(path)


def predict(run_dir, records, out, *extra) -> list:
    return [
        "--checkpoint",
        run_dir,
        "--input",
        records,
        "--output",
        str(out),
        "--chunk-size",
        "50",
        *map(str, extra),
    ]


def classes_of(table: pd.DataFrame, name: str, codes: list, status=None) -> dict:
    """What the crosswalk gives the table's own codes: {column: classes}."""
    walk = load_crosswalk(name)
    expected, per_code = {}, []
    for k, column in enumerate(codes, start=1):
        found = walk.classify(table[column], status=status).tolist()
        expected[f"{name}_{k}"] = found
        per_code.append(pd.Series(found))
        if walk.labelled:
            expected[f"{name}_label_{k}"] = walk.label(pd.Series(found)).tolist()
    row = walk.first(per_code)
    expected[name] = row.tolist()
    if walk.labelled:
        expected[f"{name}_label"] = walk.label(row).tolist()
    return expected


def score(values) -> np.ndarray:
    """A HISCAM column (text or numbers) as floats, NaN where blank."""
    values = pd.Series(values, dtype=object)
    return pd.to_numeric(values.where(values.astype(str) != "", None)).to_numpy(float)


def read_back(path) -> pd.DataFrame:
    return read_table(str(path)).fillna("")


@pytest.mark.parametrize("suffix", ["csv", "parquet", "xlsx", "dta"])
def test_every_format_carries_each_codes_class_and_the_rows(
    tiny_two_code_run, records, lookup, tmp_path, suffix
):
    out = tmp_path / f"coded.{suffix}"
    extra = ["--crosswalk", "hisclass", "hiscam", "--status-col", "status", "--lookup", lookup]
    assert predict_main(predict(tiny_two_code_run, records, out, *extra)) == 0
    table = read_back(out)
    for name in ("hisclass", "hiscam"):
        for column, values in classes_of(
            table, name, ["code_1", "code_2"], table["status"]
        ).items():
            if name == "hiscam":  # a score: numbers, blank (NaN) where the table gives none
                assert np.array_equal(score(table[column]), score(values), equal_nan=True)
            else:
                assert table[column].astype(str).tolist() == values, column
    if suffix in ("parquet", "dta"):
        written = pd.read_parquet(out) if suffix == "parquet" else pd.read_stata(out)
        assert written["hiscam_1"].dtype.kind == "f" and written["hisclass_1"].dtype.kind != "f"
    engineer = table[table["occ1"] == ENGINEER]  # 02290: HISCLASS 1 with status 31, 4 with 33
    assert set(zip(engineer["status"], engineer["hisclass"])) == {
        ("31", "1"),
        ("", "2"),
        ("33", "4"),
    }
    assert set(engineer["hiscam"]) == {"89.01"}
    assert (table.loc[table["occ1"] == "", "hisclass"] == "").all()


def test_the_check_list_and_the_audit_carry_the_classes(tiny_two_code_run, records, tmp_path):
    out, check, audit = tmp_path / "coded.csv", tmp_path / "check.csv", tmp_path / "audit.csv"
    extra = ["--crosswalk", "socpo", "--to-check", 10, check, "--audit", 20, audit]
    assert predict_main(predict(tiny_two_code_run, records, out, *extra)) == 0
    columns = ["socpo_1", "socpo_label_1", "socpo_2", "socpo_label_2", "socpo", "socpo_label"]
    listed = read_back(check)
    assert columns == [c for c in listed.columns if c.startswith("socpo")]
    for column, values in classes_of(listed, "socpo", ["code_1", "code_2"]).items():
        assert listed[column].tolist() == values
    drawn, coded = read_back(audit), read_back(out)
    assert columns == [c for c in drawn.columns if c.startswith("socpo")]
    rows = coded.iloc[drawn["audit_row"].astype(int) - 1].reset_index(drop=True)
    assert rows[columns].equals(drawn[columns])  # the file's rows, classes and all


def test_a_users_table_and_the_codes_it_gives_no_class(
    tiny_two_code_run, records, tmp_path, capsys
):
    coded = tmp_path / "plain.csv"
    assert predict_main(predict(tiny_two_code_run, records, coded)) == 0
    codes = read_back(coded)[["code_1", "code_2"]]
    listed = sorted(set(codes["code_1"]) - {""})[:2]  # two codes mapped, the others not
    groups = tmp_path / "my groups.csv"
    pd.DataFrame({"code": listed, "class": ["A", "B"], "label": ["Alpha", "Beta"]}).to_csv(
        groups, index=False
    )
    out = tmp_path / "grouped.csv"
    capsys.readouterr()
    assert predict_main(predict(tiny_two_code_run, records, out, "--crosswalk", groups)) == 0
    table = read_back(out)
    expected = {"A": "Alpha", "B": "Beta", "": ""}
    for k in (1, 2):
        mapped = dict(zip(listed, ["A", "B"]))
        assert table[f"my_groups_{k}"].tolist() == [mapped.get(c, "") for c in codes[f"code_{k}"]]
        assert table[f"my_groups_label_{k}"].tolist() == [
            expected[c] for c in table[f"my_groups_{k}"]
        ]
    cells = codes.to_numpy().ravel()
    unclassed = int(((cells != "") & ~np.isin(cells, listed)).sum())
    said = [line for line in capsys.readouterr().err.splitlines() if "no class" in line]
    assert len(said) == 1 and f"my_groups {unclassed:,} (most:" in said[0]


def test_other_shapes_carry_the_classes_and_a_matrix_is_refused(
    tiny_two_code_run, records, tmp_path, capsys
):
    out = tmp_path / "occ.csv"
    assert (
        predict_main(
            predict(
                tiny_two_code_run,
                records,
                out,
                "--columns",
                "occcanine",
                "--crosswalk",
                "hisclass_5",
            )
        )
        == 0
    )
    table = read_back(out)
    system = [
        c
        for c in table.columns
        if c.endswith("_1") and not c.startswith(("prob", "desc", "hisclass"))
    ]
    assert len(system) == 1
    expected = classes_of(table, "hisclass_5", [system[0], system[0][:-1] + "2"])
    for column, values in expected.items():
        assert table[column].tolist() == values
    alternatives = tmp_path / "alternatives.csv"
    args = ["--alternatives", 2, "--head", "seq2seq", "--crosswalk", "hisclass"]
    assert (
        predict_main(
            predict(tiny_two_code_run, records, alternatives, *args, "--status-col", "status")
        )
        == 0
    )
    table = read_back(alternatives)
    status = table["status"]  # each input row's status on each of its alternatives
    for column, values in classes_of(table, "hisclass", ["code_1", "code_2"], status).items():
        assert table[column].tolist() == values
    capsys.readouterr()
    fails(
        capsys,
        "predict",
        predict(
            tiny_two_code_run,
            records,
            tmp_path / "m.csv",
            "--what",
            "probs",
            "--crosswalk",
            "hisclass",
        ),
        "--crosswalk adds classes beside codes",
        "leave out one of them",
    )
    assert not (tmp_path / "m.csv").exists()


def test_the_api_gives_the_programs_columns(tiny_two_code_run, records, lookup, tmp_path):
    import mixer

    out = tmp_path / "coded.csv"
    extra = ["--crosswalk", "hisclass", "socpo", "--status-col", "status", "--lookup", lookup]
    assert predict_main(predict(tiny_two_code_run, records, out, *extra)) == 0
    written = read_back(out)
    frame = read_back(records)
    model = mixer.load(tiny_two_code_run)
    table = model.predict(
        frame["occ1"],
        crosswalk=["hisclass", "socpo"],
        status=frame["status"],
        lookup=model.lookup(lookup),
    )
    columns = [c for c in written.columns if c.startswith(("hisclass", "socpo"))]
    assert columns == [c for c in table.columns if c.startswith(("hisclass", "socpo"))]
    assert table[columns].reset_index(drop=True).astype(str).equals(written[columns].astype(str))


def test_a_killed_job_resumes_to_the_file_of_one_run_through(
    tiny_two_code_run, records, tmp_path, capsys
):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir(), cut.mkdir()
    groups = tmp_path / "groups.csv"  # one code: the model's others have no class, counted
    pd.DataFrame({"code": ["02290"], "class": ["A"]}).to_csv(groups, index=False)
    extra = ["--crosswalk", "hisclass", groups, "--status-col", "status"]
    capsys.readouterr()
    assert predict_main(predict(tiny_two_code_run, records, whole / "out.csv", *extra)) == 0
    through = [line for line in capsys.readouterr().err.splitlines() if "no class" in line]
    cmd = predict(tiny_two_code_run, records, cut / "out.csv", *extra)
    environment = {**env_for_subprocess(), FAULT: "2"}
    killed = run_program("predict.py", *cmd, check=False, env=environment)
    assert killed.returncode == 9 and not (cut / "out.csv").exists(), killed.stderr
    again = run_program("predict.py", *cmd)
    assert "continuing an unfinished run after its 2 chunk(s)" in again.stdout
    assert (cut / "out.csv").read_bytes() == (whole / "out.csv").read_bytes()
    # the codes without a class, counted over the chunks before the kill and after it
    assert [line for line in again.stderr.splitlines() if "no class" in line] == through
    assert len(through) == 1 and "groups " in through[0]


def test_a_crosswalk_edited_before_a_resume_is_named_as_a_file(
    tiny_two_code_run, records, tmp_path
):
    """A killed job continues only with its crosswalk tables as they were; an edited table
    is refused in one line naming the file and what changed, as an edited --input is (it
    printed the journal's record of the file, a dict of its size, time and hash)."""
    groups = tmp_path / "groups.csv"
    pd.DataFrame({"code": ["02290"], "class": ["A"]}).to_csv(groups, index=False)
    cmd = predict(tiny_two_code_run, records, tmp_path / "out.csv", "--crosswalk", "hisclass")
    cmd += [groups]
    environment = {**env_for_subprocess(), FAULT: "2"}
    assert run_program("predict.py", *cmd, check=False, env=environment).returncode == 9
    pd.DataFrame({"code": ["02290"], "class": ["B"]}).to_csv(groups, index=False)
    os.utime(groups, ns=(1, 1))  # another time for certain, on any file system
    again = run_program("predict.py", *cmd, check=False)
    lines = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(lines) == 1, again.stderr
    assert f"were made with --crosswalk {groups} as it was then (" in lines[0]
    assert "the file changed since" in lines[0] and "'sample'" not in lines[0]


def test_two_processes_write_one_processes_file(tiny_two_code_run, records, tmp_path):
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    extra = ["--crosswalk", "hisclass", "hiscam", "--status-col", "status"]
    run_program("predict.py", *predict(tiny_two_code_run, records, one, *extra))
    cmd = torchrun_cmd(2, "--standalone") + [os.path.join(ROOT, "predict.py"), "--distributed"]
    run(cmd + [str(a) for a in predict(tiny_two_code_run, records, two, *extra)])
    assert pd.read_parquet(two).equals(pd.read_parquet(one))


def test_evaluate_scores_the_classes_beside_the_codes(tmp_path, capsys):
    table = read_table(os.path.join(ROOT, "mixer", "resources", "hisco-ses", "hisco_ses.csv"))
    own = table[(table["STATUS"] == "") & (table["RELATION"] == "") & (table["PRODUCT"] == "")]
    eleven = own.loc[own["HISCLASS"] == "11", "HISCO"].str.zfill(5).head(2).tolist()
    two = own.loc[own["HISCLASS"] == "2", "HISCO"].str.zfill(5).head(1).tolist()
    # row 1: the code wrong, its class right; row 2: both right; row 3: both wrong
    frame = pd.DataFrame(
        {"truth": [eleven[0], eleven[0], two[0]], "code_1": [eleven[1], eleven[0], eleven[0]]}
    )
    path = tmp_path / "preds.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "scores.csv"
    argv = ["--predictions", str(path), "--truth-cols", "truth", "--crosswalk", "hisclass"]
    assert evaluate_main(argv + ["--output", str(out)]) == 0
    scores = pd.read_csv(out, dtype={"digits": str})
    whole = scores[scores["digits"] == "5"]["accuracy"].iloc[0]
    classes = scores[scores["digits"] == "hisclass"]["accuracy"].iloc[0]
    assert whole == pytest.approx(1 / 3) and classes == pytest.approx(2 / 3)
    assert "hisclass" in capsys.readouterr().out


def test_evaluate_restores_a_users_tables_zeros_with_the_code_length(tmp_path, capsys):
    """A table saved by a spreadsheet lost its codes' zeros (2290 for 02290): with
    --code-length 5 its codes are read as the scored codes are, as predict.py reads them
    with the model's width, so every row's class is found."""
    frame = pd.DataFrame(
        {"truth": ["2290", "02290", "61110", "02290"], "code_1": ["02290"] * 2 + ["61110"] * 2}
    )
    path, groups = tmp_path / "preds.csv", tmp_path / "groups.csv"
    frame.to_csv(path, index=False)
    pd.DataFrame({"code": ["2290", "61110"], "class": ["A", "B"]}).to_csv(groups, index=False)
    out = tmp_path / "scores.csv"
    argv = ["--predictions", str(path), "--truth-cols", "truth", "--code-length", "5"]
    assert evaluate_main(argv + ["--crosswalk", str(groups), "--output", str(out)]) == 0
    row = pd.read_csv(out, dtype={"digits": str}).set_index("digits").loc["groups"]
    assert row["n"] == 4 and row["accuracy"] == pytest.approx(3 / 4)
    assert load_crosswalk(str(groups), width=5).classify(["02290", "2290"]).tolist() == ["A", "A"]


def test_a_crosswalk_named_as_occcanines_code_columns_never_replaces_the_codes(
    hisco_model, records, tmp_path, capsys
):
    """OccCANINE's table names its codes by the code system (hisco_1 ..): a table of one's
    own named hisco.csv would write its classes over them, and the file came out without
    its codes. It is refused in one line, nothing written."""
    folder = tmp_path / "out"
    folder.mkdir()
    groups = tmp_path / "hisco.csv"
    pd.DataFrame({"code": ["02290"], "class": ["A"]}).to_csv(groups, index=False)
    argv = ["--checkpoint", hisco_model["hub"], "--input", records, "--output"]
    argv += [folder / "coded.csv", "--columns", "occcanine", "--crosswalk", "hisclass", groups]
    fails(
        capsys,
        "predict",
        argv,
        f"--crosswalk {groups}: its columns would be named hisco_1, ..., as the code table's own",
        watch=folder,
    )


def test_crosswalk_given_twice_keeps_both():
    """--crosswalk hisclass --crosswalk socpo asks for both: the second does not drop the
    first, in predict.py and evaluate.py alike."""
    from mixer.cli.entrypoints import evaluate_parser, predict_parser

    argv = ["--crosswalk", "hisclass", "--crosswalk", "socpo", "hiscam"]
    predict_args = ["--checkpoint", "run", "--input", "in.csv", "--output", "out.csv"]
    evaluate_args = ["--predictions", "p.csv", "--truth-cols", "hisco_1"]
    for parser, given in ((predict_parser(), predict_args), (evaluate_parser(), evaluate_args)):
        assert parser.parse_args(given + argv).crosswalk == ["hisclass", "socpo", "hiscam"]
        assert parser.parse_args(given).crosswalk is None


def test_bad_crosswalk_arguments_are_refused_in_one_line_with_nothing_written(
    tiny_two_code_run, records, tmp_path, capsys
):
    out = tmp_path / "out.csv"
    groups = tmp_path / "groups.csv"
    pd.DataFrame({"code": ["02290"], "class": ["A"]}).to_csv(groups, index=False)
    cases = [
        (["--crosswalk", "hisclass", "--status-col", "state"], "no column 'state' (--status-col)"),
        (["--status-col", "status"], "--status-col works with --crosswalk"),
        (["--crosswalk", "hisclas"], "neither a crosswalk mixer ships"),
        (["--crosswalk", "hisclass", "hisclass"], "hisclass named twice"),
        (["--crosswalk", "hisclass", "--crosswalk", "hisclass"], "hisclass named twice"),
    ]
    for extra, needle in cases:
        fails(capsys, "predict", predict(tiny_two_code_run, records, out, *extra), needle)
        assert sorted(os.listdir(tmp_path)) == ["groups.csv"]
    fails(
        capsys,
        "predict",
        predict(tiny_two_code_run, records, groups, "--crosswalk", groups),
        f"--output {groups}: is the --crosswalk {groups} file and would replace it",
    )
    assert pd.read_csv(groups).shape == (1, 2)
    fails(
        capsys,
        "predict",
        ["--checkpoint", tiny_two_code_run, "--input", records, "--embeddings", tmp_path / "e.npy"]
        + ["--crosswalk", "hisclass"],
        "--crosswalk adds classes beside the codes of --output, --to-check or --audit",
    )

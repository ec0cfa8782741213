"""A lookup, a check list and the counts of distinct inputs read inputs as the model reads
them (issue 42, items 1, 6 and 8 and the lookup's messages; docs/coding.md, "Lookup
tables"): a word-piece model whose tokenizer lower-cases and strips accents, as minilm's
does, and CANINE models, which read code points."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from mixer.cli.entrypoints import finetune_main, predict_main
from mixer.core.errors import UserError

# the variants of two titles that a lower-casing, accent-stripping tokenizer reads as two inputs
ROWS = ["civil engineer", "Civil Engineer", "farmer", "FARMER", "Farmer", "fármer", "smith"]
SMALL = [
    "--decoder-dim",
    "32",
    "--decoder-layers",
    "1",
    "--decoder-heads",
    "2",
    "--max-len",
    "24",
    "--log-interval",
    "5",
    "--max-steps",
    "4",
    "--batch-size",
    "8",
    "--share-val",
    "0.25",
]


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory, tiny_bert_dir) -> str:
    """A tiny run of the word-piece model of conftest (its tokenizer lower-cases and strips
    accents, as minilm's), trained as the quickstart is: zero-padded codes, shorter allowed."""
    base = tmp_path_factory.mktemp("bert_lookup")
    titles = {
        "farmer": "61110",
        "civil engineer": "02200",
        "smith": "83110",
        "fisher": "64100",
        "weaver": "75430",
        "miller": "77120",
        "tailor": "79100",
        "baker": "77610",
    }
    frame = pd.DataFrame(
        [(t, c) for t, c in titles.items() for _ in range(5)], columns=["occ1", "hisco_1"]
    )
    frame.to_csv(base / "train.csv", index=False)
    run = base / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                str(base / "train.csv"),
                "--target-cols",
                "hisco_1",
                "--zero-padded-codes",
                "--allow-codes-shorter-than-block-size",
                "--encoder",
                tiny_bert_dir,
                "--save-path",
                str(run),
                *SMALL,
            ]
        )
        == 0
    )
    return str(run)


@pytest.fixture
def rows_csv(tmp_path) -> str:
    path = tmp_path / "rows.csv"
    pd.DataFrame({"occ1": ROWS}).to_csv(path, index=False)
    return str(path)


def write(path, frame: pd.DataFrame) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def test_the_key_is_what_the_tokenizer_reads(bert_run):
    import mixer

    model = mixer.load(bert_run)
    keys = model.model_inputs(
        ROWS + [" civil  engineer ", "civil engineer"], lang=["unk"] * 8 + ["en"]
    )
    groups = pd.Series(range(len(keys))).groupby(keys).apply(list).tolist()
    # lower case, accents, spaces: one input; another language is another input
    assert sorted(groups) == [[0, 1, 7], [2, 3, 4, 5], [6], [8]]


def test_a_lookup_codes_the_rows_the_model_reads_as_its_entries(
    bert_run, rows_csv, tmp_path, capsys
):
    lookup = write(
        tmp_path / "dict.csv",
        pd.DataFrame({"title": ["civil engineer", "farmer"], "code": ["02200", "61110"]}),
    )
    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
                "--lookup-input-col",
                "title",
                "--lookup-code-cols",
                "code",
            ]
        )
        == 0
    )
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert written["source"].tolist() == ["lookup"] * 6 + ["model"]
    assert written["code_1"].tolist()[:6] == ["02200"] * 2 + ["61110"] * 4
    # the shares of distinct inputs count them as the model reads them: 2 of 3, not 6 of 7
    assert "6 rows (85.7%; 66.7% of distinct inputs) coded by the lookup" in capsys.readouterr().err


def test_two_entries_the_model_reads_alike_with_two_code_sets_are_refused(
    bert_run, rows_csv, tmp_path, monkeypatch
):
    from mixer.prediction.predict import Predictor

    def never(*args, **kwargs):
        raise AssertionError("predicted before the lookup was checked")

    monkeypatch.setattr(Predictor, "predict", never)
    lookup = write(
        tmp_path / "dict.csv",
        pd.DataFrame({"occ1": ["smith", "farmer", "FARMER"], "code": ["83110", "61110", "62105"]}),
    )
    out = tmp_path / "out.csv"
    with pytest.raises(
        UserError,
        match=r"line 3 and line 4 give 'farmer' and 'FARMER', which the model reads as "
        r"one input, two code sets \(61110 and 62105\); keep one",
    ) as raised:
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
                "--lookup-code-cols",
                "code",
            ]
        )
    assert "\n" not in str(raised.value)
    assert not out.exists()
    # an entry of two codes with one code slot: refused before anything is predicted
    write(lookup, pd.DataFrame({"occ1": ["farmer"], "c1": ["61110"], "c2": ["64100"]}))
    with pytest.raises(
        UserError,
        match=r"line 2 has 2 codes \(61110 & 64100\), the output 1 code slot\(s\); "
        r"pass --top-k 2",
    ):
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
                "--lookup-code-cols",
                "c1",
                "c2",
                "--top-k",
                "1",
            ]
        )
    assert not out.exists()
    import mixer  # the API checks it before predicting too

    with pytest.raises(UserError, match=r"pass top_k=2"):
        mixer.load(bert_run).predict(
            ROWS, lookup=mixer.load(bert_run).lookup(lookup, code_cols=["c1", "c2"]), top_k=1
        )


def test_the_check_list_groups_rows_as_the_model_reads_them(bert_run, rows_csv, tmp_path):
    check = tmp_path / "check.csv"
    assert (
        predict_main(
            ["--checkpoint", bert_run, "--input", rows_csv, "--to-check", "10", str(check)]
        )
        == 0
    )
    listed = pd.read_csv(check, dtype=str, keep_default_na=False)
    assert len(listed) == 3
    counts = dict(zip(listed["occ1"], listed["n_rows"].astype(int)))
    assert counts == {"civil engineer": 2, "farmer": 4, "smith": 1}  # as the first such row has it


def test_codes_the_key_lacks_are_said_naming_the_lines(bert_run, rows_csv, tmp_path, capsys):
    lookup = write(
        tmp_path / "dict.csv",
        pd.DataFrame(
            {"occ1": ["farmer", "smith", "civil engineer"], "code": ["6111", "abc", "02200"]}
        ),
    )
    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
                "--lookup-code-cols",
                "code",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "key lacks" in line]
    assert said == [
        f"note: --lookup {lookup}: 2 of 3 entries give a code the model's key lacks, written as given "
        "without a description: line 2 '06111' (written '6111'); line 3 'abc'; check them (a typo, or "
        "a code the model never learnt)"
    ]
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert written.loc[written["occ1"] == "smith", "code_1"].tolist() == ["abc"]
    assert json.load(open(f"{out}.provenance.json"))["lookup"]["entries_outside_key"] == 2


def test_a_check_list_written_with_input_col_is_read_back_without_lookup_input_col(
    bert_run, tmp_path
):
    rows = write(tmp_path / "rows.csv", pd.DataFrame({"title": ROWS}))
    check = tmp_path / "check.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows,
                "--input-col",
                "title",
                "--to-check",
                "3",
                str(check),
            ]
        )
        == 0
    )
    filled = pd.read_csv(check, dtype=str, keep_default_na=False)
    assert list(filled.columns[:2]) == ["title", "n_rows"]
    filled["checked_1"] = "99999"
    filled.to_csv(check, index=False)
    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows,
                "--input-col",
                "title",
                "--output",
                str(out),
                "--lookup",
                str(check),
            ]
        )
        == 0
    )
    assert (pd.read_csv(out, dtype=str)["source"] == "lookup").all()
    # an input with the model's own column: the check list's description column is its first
    other = write(tmp_path / "other.csv", pd.DataFrame({"occ1": ROWS}))
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                other,
                "--output",
                str(out),
                "--lookup",
                str(check),
            ]
        )
        == 0
    )
    assert (pd.read_csv(out, dtype=str)["source"] == "lookup").all()


def test_a_dictionary_with_the_models_own_columns_needs_no_code_cols(
    bert_run, rows_csv, tmp_path, capsys
):
    lookup = write(
        tmp_path / "coded.csv",
        pd.DataFrame({"occ1": ["farmer"], "lang": ["en"], "hisco_1": ["61110"]}),
    )
    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
            ]
        )
        == 0
    )
    assert (
        f"lookup: 1 entries of {lookup} (dictionary: descriptions in occ1, codes in hisco_1)"
        in capsys.readouterr().out
    )
    assert (pd.read_csv(out, dtype=str)["source"] == "lookup").sum() == 4
    write(
        lookup, pd.DataFrame({"occ1": ["farmer"], "code": ["61110"]})
    )  # other columns: named as before
    with pytest.raises(
        UserError, match=r"the model's own: occ1 and hisco_1\); name a dictionary's code columns"
    ):
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
            ]
        )


def test_canine_reads_case_apart_and_occcanine_reads_as_its_rule(hisco_model, tmp_path):
    """CANINE has no normaliser: 'Farmer' and 'farmer' are two inputs to a canine run
    (its recipe keeps case); OccCANINE's rule lower-cases and transliterates."""
    import mixer
    from mixer.data.inputs.tokens import CanineIds, InputRecipe, reading_keys

    keys = reading_keys(CanineIds(InputRecipe()), ["farmer", "Farmer", " farmer", "fármer"], "unk")
    assert (
        len(set(keys)) == 3 and keys[0] == keys[2]
    )  # mixer's recipe strips, keeps case and accents
    occ = mixer.load(hisco_model["hub"])
    keys = occ.model_inputs(["farmer", "FARMER", "fármer", "farmer ", "smith"], lang="en")
    assert len(set(keys[:3])) == 1 and len(set(keys)) == 3  # OccCANINE keeps surrounding spaces
    # OccCANINE's own columns (occ1, hisco_1..hisco_5; here the first alone): a dictionary
    path = write(tmp_path / "coded.csv", pd.DataFrame({"occ1": ["Fármer"], "hisco_1": ["61110"]}))
    lookup = occ.lookup(path)
    assert (lookup.layout, lookup.columns) == (
        "dictionary",
        "descriptions in occ1, codes in hisco_1",
    )
    assert occ.predict(["farmer", "smith"], lang="en", lookup=lookup)["source"].tolist() == [
        "lookup",
        "model",
    ]


def test_the_lookup_reading_line_is_printed_once_under_torchrun(bert_run, rows_csv, tmp_path):
    from conftest import rank0_gathers_cmd, run

    lookup = write(tmp_path / "dict.csv", pd.DataFrame({"occ1": ["farmer"], "hisco_1": ["6111"]}))
    proc = run(
        rank0_gathers_cmd(2, "predict.py")
        + [
            "--distributed",
            "--checkpoint",
            bert_run,
            "--input",
            rows_csv,
            "--output",
            str(tmp_path / "out.csv"),
            "--lookup",
            lookup,
        ]
    )
    said = (proc.stdout + proc.stderr).splitlines()
    assert len([line for line in said if line.startswith(f"--lookup {lookup}")]) == 1, said
    assert len([line for line in said if "key lacks" in line]) == 1
    assert len([line for line in said if line.startswith("lookup: ")]) == 1


# ------------------------------------------------------------------ languages as the model reads them, earlier runs
@pytest.fixture(scope="module")
def lang_runs(tmp_path_factory, tiny_bert_dir, toy_frame) -> dict:
    """Two tiny runs of the word-piece model on rows of language 'en' (distinct titles, so
    the first run's held-out rows are mostly new inputs): `first`, and `second` started from
    it (--initial-checkpoint) on other rows. Both show rows as 'unk' in a share of draws
    (--unk-lang-prob 0.5)."""
    base = tmp_path_factory.mktemp("lang_runs")
    frame = toy_frame[toy_frame["hisco_1"].str.len() == 5].drop_duplicates("occ1").head(240)
    frame = frame[["occ1", "hisco_1"]].assign(lang="en").reset_index(drop=True)
    paths = {}
    for name, rows, start in (
        ("first", frame.head(160), []),
        ("second", frame.tail(80), ["--initial-checkpoint"]),
    ):
        rows.to_csv(base / f"{name}.csv", index=False)
        run = base / name
        if start:
            start = start + [paths["first"]]
        assert (
            finetune_main(
                [
                    "--dataset",
                    str(base / f"{name}.csv"),
                    "--target-cols",
                    "hisco_1",
                    "--language-col",
                    "lang",
                    "--zero-padded-codes",
                    "--allow-codes-shorter-than-block-size",
                    "--encoder",
                    tiny_bert_dir,
                    "--save-path",
                    str(run),
                    "--unk-lang-prob",
                    "0.5",
                    *start,
                    *SMALL,
                ]
            )
            == 0
        )
        paths[name] = str(run)
    return paths


def training_rows(run, path, lang=None) -> str:
    frame = pd.read_parquet(os.path.join(run, "data_train.parquet"))
    table = pd.DataFrame(
        {"occ1": frame["text"].astype(str), "hisco_1": frame["code_1"].astype(str)}
    )
    if lang is not None:
        table["lang"] = lang
    return write(path, table)


def test_training_rows_given_as_unknown_language_or_in_capitals_are_still_training_rows(
    lang_runs, tmp_path
):
    """The run trained with 'en' (and 'unk' in a share of draws, --unk-lang-prob): a labelled
    file of its training rows is its training data, refused, whatever language it states: as
    given, in capitals, another one, blank, unknown or one the run never saw (issue 50, item 1:
    the model remembers a text it trained on whatever language stands beside it)."""
    import mixer

    model = mixer.load(lang_runs["first"])
    for lang in ("en", "EN", "da", "", "unk", "xx"):
        path = training_rows(lang_runs["first"], tmp_path / f"train_{lang}.csv", lang)
        with pytest.raises(UserError, match="are rows first trained on"):
            model.target(0.05, 0.5, labelled=path, truth_cols=["hisco_1"])


def test_a_run_started_from_another_run_knows_its_training_rows_too(lang_runs, tmp_path, capsys):
    import shutil

    import mixer

    second = mixer.load(lang_runs["second"])
    path = training_rows(lang_runs["first"], tmp_path / "first.csv", "en")
    with pytest.raises(UserError, match="are rows second trained on"):
        second.target(0.05, 0.5, labelled=path, truth_cols=["hisco_1"])
    # the earlier run gone: the check covers the run's own rows, said in one line
    moved = tmp_path / "second"
    shutil.copytree(lang_runs["second"], moved)
    config = json.load(open(moved / "config.json"))
    config["source"]["from"] = str(tmp_path / "gone")
    json.dump(config, open(moved / "config.json", "w"))
    capsys.readouterr()
    try:  # the first run's rows are new rows to it now: a threshold is chosen on them, or none reaches
        mixer.load(str(moved)).target(0.99, 0.99, labelled=path, truth_cols=["hisco_1"])
    except UserError as error:
        assert "trained on" not in str(error)
    said = [
        line
        for line in capsys.readouterr().err.splitlines()
        if "covers its own training rows only" in line
    ]
    assert said == [
        f"note: the check for rows second trained on covers its own training rows only: the run it "
        f"started from, {tmp_path / 'gone'}, has no data_train.parquet here"
    ]


def test_languages_the_model_reads_alike_are_one_language(lang_runs, rows_csv, tmp_path, capsys):
    """'EN' and 'en' are one input to a lower-casing tokenizer: one key, one lookup entry, one
    check-list item, and no note that 'EN' is a language the model never trained with. A
    language with a flat threshold of its own keeps its key as written."""
    import mixer
    from mixer.data.inputs.tokens import reading_keys

    model = mixer.load(lang_runs["first"])
    keys = model.model_inputs(["farmer", "Farmer", "farmer"], lang=["en", "EN", "da"])
    assert keys[0] == keys[1] != keys[2]
    ids = model._predictor.token_ids
    assert (
        len(set(reading_keys(ids, ["farmer", "farmer"], ["en", "EN"], own_threshold={"EN": 0.3})))
        == 2
    )
    lookup = write(
        tmp_path / "dict.csv",
        pd.DataFrame(
            {"occ1": ["farmer", "farmer"], "lang": ["en", "EN"], "hisco_1": ["61110", "62105"]}
        ),
    )
    with pytest.raises(UserError, match=r"line 2 and line 3 give 'farmer' two code sets"):
        model.predict(ROWS, lang="en", lookup=model.lookup(lookup))
    rows = write(
        tmp_path / "rows.csv", pd.DataFrame({"occ1": ["farmer", "Farmer"], "lang": ["en", "EN"]})
    )
    check = tmp_path / "check.csv"
    assert (
        predict_main(
            ["--checkpoint", lang_runs["first"], "--input", rows, "--to-check", "10", str(check)]
        )
        == 0
    )
    assert len(pd.read_csv(check)) == 1
    assert "never trained with" not in capsys.readouterr().err
    # labelled rows get the input's note on a language the model never trained with
    labelled = write(
        tmp_path / "labelled.csv",
        pd.DataFrame(
            {"occ1": ["farmer"] * 3, "hisco_1": ["61110"] * 3, "lang": ["EN", "da", "da"]}
        ),
    )
    try:
        model.target(0.99, 0.99, labelled=labelled, truth_cols=["hisco_1"])
    except UserError:  # 3 rows: no threshold reaches the target
        pass
    said = [line for line in capsys.readouterr().err.splitlines() if "never trained with" in line]
    assert len(said) == 1 and said[0].startswith(
        f"note: calibration_data= {labelled}: 2 rows have a language "
        "value the model never trained with: 'da' (2)"
    )


def test_a_dictionary_with_the_models_own_columns_reads_their_further_codes(
    bert_run, rows_csv, tmp_path
):
    """A model trained on hisco_1 alone: a dictionary's hisco_2 holds second codes, read (an
    entry of two codes needs two code slots, refused before predicting otherwise), not dropped."""
    lookup = write(
        tmp_path / "coded.csv",
        pd.DataFrame(
            {"occ1": ["farmer", "smith"], "hisco_1": ["61110", "83110"], "hisco_2": ["64100", ""]}
        ),
    )
    out = tmp_path / "out.csv"
    with pytest.raises(
        UserError,
        match=r"line 2 has 2 codes \(61110 & 64100\), the output 1 code slot\(s\); "
        r"pass --top-k 2",
    ):
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
            ]
        )
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows_csv,
                "--output",
                str(out),
                "--lookup",
                lookup,
                "--top-k",
                "2",
            ]
        )
        == 0
    )
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    farmer = written[written["occ1"] == "farmer"]
    assert (farmer["code_1"].tolist(), farmer["code_2"].tolist()) == (["61110"], ["64100"])


def test_rows_without_a_description_are_neither_the_lookups_nor_the_models(
    bert_run, tmp_path, capsys
):
    """A lookup covering every described row: the row without a description is counted apart,
    not as a model row nor as a distinct input; a check list with nothing to check is
    written with its header alone, and the job ends well."""
    rows = write(tmp_path / "rows.csv", pd.DataFrame({"occ1": ROWS + ["  "]}))
    lookup = write(
        tmp_path / "dict.csv",
        pd.DataFrame(
            {"occ1": ["civil engineer", "farmer", "smith"], "hisco_1": ["02200", "61110", "83110"]}
        ),
    )
    out, check = tmp_path / "out.csv", tmp_path / "check.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                bert_run,
                "--input",
                rows,
                "--output",
                str(out),
                "--lookup",
                lookup,
                "--to-check",
                "5",
                str(check),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert (
        f"source: 7 rows (87.5%; 100.0% of distinct inputs) coded by the lookup {lookup}, 0 by the model, "
        "1 without a description: no code"
    ) in err
    result = json.load(open(f"{out}.provenance.json"))["result"]
    assert result["source"]["model"] == 0 and result["source"]["no_description"] == 1
    assert result["distinct_inputs"] == 3
    assert (
        f"--to-check {check}: nothing to check, written with its header alone: the lookup or the target "
        "accuracy took all 7 rows with a description"
    ) in err
    listed = pd.read_csv(check, dtype=str)
    assert len(listed) == 0 and "checked_1" in listed.columns

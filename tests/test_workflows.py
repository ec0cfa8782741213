"""OccCANINE's workflows in mixer: any code system with its own splits and a fixed key,
rows without a code as a class, OccCANINE's output shapes, descriptions for any system."""

import os
import re

import numpy as np
import pandas as pd
import pytest

from conftest import FLOATS, TINY, assert_floats_close, run_program
from mixer.cli.entrypoints import finetune_main, train_mixer_main
from mixer.core.errors import UserError


def read_key(run_dir):
    return pd.read_csv(os.path.join(run_dir, "key.csv"), dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def pst_files(tmp_path_factory):
    """PST2-style codes ('1,12,0': comma-separated parts) in a training and a validation
    file of the user's own; the validation file holds a code the training rows lack."""
    directory = tmp_path_factory.mktemp("pst")
    titles = {"farmer": "1,1,0", "fisher": "1,12,0", "smith": "2,3,1", "weaver": "2,40,2"}
    rows = [(t, c, "") for t, c in titles.items()] * 6 + [
        ("farmer and fisher", "1,1,0", "1,12,0")
    ] * 4
    train = pd.DataFrame(rows, columns=["occ1", "pst_1", "pst_2"])
    val = pd.DataFrame([("smith", "2,3,1", ""), ("carter", "5,9,9", "")], columns=train.columns)
    train.to_csv(directory / "train.csv", index=False)
    val.to_parquet(directory / "val.parquet")
    key = pd.DataFrame(
        {
            "code": ["9,9,9", "5,9,9", "2,40,2", "2,3,1", "1,12,0", "1,1,0"],
            "description": ["unused code", "carter", "", "", "", ""],
        }
    )
    key.to_csv(directory / "key.csv", index=False)
    return directory


def train_general(directory, run, *extra):
    return train_mixer_main(
        [
            "--formatter",
            "general",
            "--use-within-block-sep",
            "--block-size",
            "3",
            "--target-col-naming",
            "pst",
            "--num-target-cols",
            "2",
            "--train-data",
            str(directory / "train.csv"),
            "--val-data",
            str(directory / "val.parquet"),
            "--save-dir",
            str(run),
            "--max-steps",
            "1",
            *TINY,
            *map(str, extra),
        ]
    )


def test_train_mixer_general_formatter_with_own_splits_and_a_fixed_key(pst_files, tmp_path):
    assert train_general(pst_files, tmp_path / "free") == 0
    free = read_key(tmp_path / "free")
    assert list(free["code"]) == sorted(
        ["1,1,0", "1,12,0", "2,3,1", "2,40,2", "5,9,9"]
    )  # from the data
    assert train_general(pst_files, tmp_path / "fixed", "--key", pst_files / "key.csv") == 0
    fixed = read_key(tmp_path / "fixed")
    # the file's codes in the file's order, a code absent from every row included
    assert list(fixed["code"]) == ["9,9,9", "5,9,9", "2,40,2", "2,3,1", "1,12,0", "1,1,0"]
    assert fixed["description"].iloc[0] == "unused code"
    from safetensors.torch import load_file

    weights = load_file(os.path.join(tmp_path / "fixed", "model.safetensors"))
    assert weights["flat_head.weight"].shape[0] == 6
    # a second run given the first run's key.csv numbers its codes the same way
    assert (
        train_general(pst_files, tmp_path / "again", "--key", tmp_path / "fixed" / "key.csv") == 0
    )
    assert read_key(tmp_path / "again")["code"].tolist() == fixed["code"].tolist()
    # the run predicts codes of that numbering; the unused code can be written by the decoder
    import mixer

    model = mixer.load(str(tmp_path / "fixed"))
    assert list(model.codes["code"]) == list(fixed["code"])


def test_key_refuses_data_codes_outside_it_and_bad_key_files(pst_files, tmp_path):
    small = pd.DataFrame({"code": ["1,1,0", "1,12,0", "2,3,1", "2,40,2"]})  # lacks 5,9,9
    small.to_csv(tmp_path / "small.csv", index=False)
    with pytest.raises(UserError, match=r"val\.parquet.*5,9,9.*not in --key"):
        train_general(pst_files, tmp_path / "r1", "--key", tmp_path / "small.csv")
    assert not os.path.exists(tmp_path / "r1" / "key.csv")  # nothing half-written
    pd.DataFrame({"code": ["1,1,0", "1,1,0"]}).to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(UserError, match="appears twice"):
        train_general(pst_files, tmp_path / "r2", "--key", tmp_path / "twice.csv")
    pd.DataFrame({"code": ["1,1,0,4"]}).to_csv(tmp_path / "long.csv", index=False)
    with pytest.raises(
        UserError, match=r"--key .*row 1 code '1,1,0,4': longer than --block-size 3"
    ):
        train_general(pst_files, tmp_path / "r3", "--key", tmp_path / "long.csv")
    pd.DataFrame({"label": ["1,1,0"]}).to_csv(tmp_path / "nocol.csv", index=False)
    with pytest.raises(UserError, match="needs a column 'code'"):
        train_general(pst_files, tmp_path / "r4", "--key", tmp_path / "nocol.csv")
    # from the command line: one line, exit status 2
    proc = run_program(
        "train_mixer.py",
        "--formatter",
        "general",
        "--use-within-block-sep",
        "--block-size",
        "3",
        "--target-col-naming",
        "pst",
        "--num-target-cols",
        "2",
        "--train-data",
        pst_files / "train.csv",
        "--val-data",
        pst_files / "val.parquet",
        "--save-dir",
        tmp_path / "r5",
        "--key",
        tmp_path / "missing.csv",
        *TINY,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--key" in proc.stderr


def test_finetune_key_keeps_hisco_key_layout_codes_with_their_zeros(tmp_path, small_csv):
    # data/hisco_key.csv (OccCANINE's layout, leading zeros lost) as the key of a hisco run
    from conftest import ROOT

    run = tmp_path / "run"
    assert (
        train_mixer_main(
            [
                "--train-data",
                small_csv,
                "--val-data",
                small_csv,
                "--num-target-cols",
                "2",
                "--key",
                os.path.join(ROOT, "data", "hisco_key.csv"),
                "--save-dir",
                str(run),
                "--max-steps",
                "1",
                *TINY,
            ]
        )
        == 0
    )
    key = read_key(run)
    assert len(key) == 1919 and "01110" in set(key["code"]) and key["code"].iloc[0] == "-3"
    # finetune.py on the shipped data (HISCO codes that lost their zeros, in a general code
    # system) with that key: the key's 5 digits restore the data's zeros (issue 27, item 6)
    toy = os.path.join(ROOT, "data", "toy_hisco.csv")
    assert (
        finetune_main(
            [
                "--dataset",
                toy,
                "--target-cols",
                "hisco_1",
                "--allow-codes-shorter-than-block-size",
                "--key",
                os.path.join(ROOT, "data", "hisco_key.csv"),
                "--save-path",
                str(tmp_path / "general"),
                "--prepare-only",
                "--no-token-cache",
            ]
        )
        == 0
    )
    train = pd.read_parquet(tmp_path / "general" / "data_train.parquet")
    assert (
        "06510" in set(train["code_1"].astype(str))
        and not (train["code_1"].astype(str).str.len() == 4).any()
    )
    assert read_key(tmp_path / "general")["code"].tolist() == key["code"].tolist()


def test_empty_code_label_learns_rows_without_a_code(tmp_path, small_csv):
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    frame.loc[frame.index[:30], ["hisco_1", "hisco_2"]] = ""  # "no occupation given"
    csv = tmp_path / "blank.csv"
    frame.to_csv(csv, index=False)
    common = [
        "--dataset",
        str(csv),
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--share-val",
        "0.09",
        *TINY,
        "--max-steps",
        "1",
    ]
    with pytest.raises(UserError, match="30 row.s. with no code in any target column"):
        finetune_main([*common, "--save-path", str(tmp_path / "default")])  # the default: an error
    with pytest.raises(UserError, match="--empty-code-label 'none': shorter than --block-size 5"):
        finetune_main([*common, "--save-path", str(tmp_path / "bad"), "--empty-code-label", "none"])
    run = tmp_path / "labelled"
    assert finetune_main([*common, "--save-path", str(run), "--empty-code-label", "00000"]) == 0
    assert "00000" in set(read_key(run)["code"])
    prepared = pd.concat([pd.read_parquet(run / f"data_{s}.parquet") for s in ("train", "val")])
    assert (prepared["code_1"].astype(str) == "00000").sum() == 30
    assert (prepared["code_2"].astype(str) == "").sum() >= 30
    # a changed label is another preparation: the run directory refuses it
    with pytest.raises(UserError, match="--empty-code-label was '00000', now '00001'"):
        finetune_main([*common, "--save-path", str(run), "--empty-code-label", "00001"])


# ------------------------------------------------------------------ output shapes
@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory, small_csv):
    run = tmp_path_factory.mktemp("shapes") / "run"
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
                *TINY,
                "--max-steps",
                "30",
                "--batch-size",
                "16",
                "--learning-rate",
                "2e-3",
            ]
        )
        == 0
    )
    return str(run)


TEXTS = ["farmer", "agricultural labourer", "coal miner", "farmer", "engineer and fireman", "smith"]


def sets_of(table, prefix="code_"):
    columns = [c for c in table.columns if c.startswith(prefix) and c[len(prefix) :].isdigit()]
    return [
        frozenset(c for c in row if isinstance(c, str) and c) for row in table[columns].to_numpy()
    ]


def test_score_matrices_agree_with_the_code_table(shapes_run):
    import mixer

    model = mixer.load(shapes_run)
    codes = list(model.codes["code"])
    series = pd.Series(TEXTS, index=[10, 11, 12, 13, 14, 15])
    table = model.predict(series)
    probs = model.predict(series, what="probs")
    assert list(probs.columns) == codes and list(probs.index) == list(series.index)
    assert probs.to_numpy().max(1) == pytest.approx(table["prob_1"].to_numpy(), abs=1e-6)
    assert [codes[i] for i in probs.to_numpy().argmax(1)] == list(table["code_1"])
    logits = model.predict(series, what="logits")
    assert 1 / (1 + np.exp(-logits.to_numpy())) == pytest.approx(probs.to_numpy(), abs=1e-6)
    binary = model.predict(series, what="bin", threshold=0.05)
    assert [
        frozenset(binary.columns[binary.iloc[r].to_numpy() == 1]) for r in range(len(binary))
    ] == sets_of(model.predict(series, threshold=0.05))
    full = model.predict(series, what="probs", head="full")
    full_table = model.predict(series, head="full")
    for r, code in enumerate(full_table["code_1"]):
        assert full.iloc[r][code] == pytest.approx(full_table["prob_1"].iloc[r], abs=1e-6)
    occ = model.predict(series, what="bin", columns="occcanine", system="hisco")
    assert list(occ.columns) == [f"hisco_{c}" for c in codes]
    with pytest.raises(UserError, match="greedy decoding gives no probability"):
        model.predict(series, what="probs", head="seq2seq")
    with pytest.raises(UserError, match="what='odds'"):
        model.predict(series, what="odds")


def test_greedy_alternatives_start_with_the_greedy_codes_and_differ(shapes_run):
    import mixer
    from mixer.prediction.outputs import blocked_generate

    model = mixer.load(shapes_run)
    predictor = model._predictor
    # without blocks, the decoding is the model's own greedy decoding, token for token
    for _, states, _, mask, _ in predictor._encoded(
        np.asarray(TEXTS, dtype=object), np.full(len(TEXTS), "unk", dtype=object), 8
    ):
        tokens, probs = blocked_generate(predictor.model, states, mask, 10, None)
        expected_tokens, expected_probs = predictor.model.generate(states, mask, 10)
        assert torch_equal(tokens, expected_tokens) and torch_equal(probs, expected_probs)
    alternatives = model.alternatives(pd.Series(TEXTS, index=list("abcdef")), k=3)
    assert list(alternatives.index) == [i for i in "abcdef" for _ in range(3)]
    assert list(alternatives["alternative"]) == [1, 2, 3] * len(TEXTS)
    greedy = sets_of(model.predict(TEXTS, head="seq2seq"))
    found = sets_of(alternatives)
    for row in range(len(TEXTS)):
        mine = found[3 * row : 3 * row + 3]
        assert mine[0] == greedy[row]
        written = [
            s
            for s, p in zip(mine, alternatives["prob"].iloc[3 * row : 3 * row + 3])
            if not np.isnan(p)
        ]
        assert len(set(written)) == len(written) >= 2  # different code sets
    assert found[0:3] == found[9:12]  # the same text, the same alternatives
    occ = model.alternatives(TEXTS[:2], k=2, columns="occcanine", system="hisco")
    assert list(occ.columns) == [
        "occ1",
        "hisco_1",
        "desc_1",
        "hisco_2",
        "desc_2",
        "top-k-pos",
        "conf",
    ]
    assert list(occ["top-k-pos"]) == [0, 1, 0, 1]
    with pytest.raises(UserError, match="at most 50 alternatives"):
        model.alternatives(TEXTS, k=51)


def test_a_row_without_a_description_gets_no_code_in_every_output(shapes_run, tmp_path, capsys):
    """Review of issue 34: an empty description got a code and a probability. A row with no
    text (empty, spaces, missing) has nothing to code: no code, an empty prob, in every head
    and shape, predict.py and the API alike, and their number is printed."""
    import mixer
    from mixer.cli.entrypoints import predict_main

    model = mixer.load(shapes_run)
    texts = pd.Series(["farmer", "", "   ", None, "smith"], index=list("abcde"))
    blank = np.asarray([False, True, True, True, False])
    for head in ("flat", "seq2seq", "full"):
        table = model.predict(
            texts, head=head, threshold=0.0
        )  # a threshold of 0: every row has codes
        numbers = [c for c in table if c.startswith("prob_") or c.startswith("confidence")]
        assert head == "full" or "confidence" in numbers  # the row confidence is a number too: NaN
        assert (table.loc[blank, [c for c in table if c not in numbers]] == "").all().all(), head
        assert table.loc[blank, numbers].isna().all().all(), head
        assert capsys.readouterr().err.count("note: 3 row(s) without a description") == 1
        described = model.predict(texts[~blank], head=head, threshold=0.0)
        pd.testing.assert_frame_equal(table[~blank], described)
        assert (described["code_1"] != "").all()
    probs = model.predict(texts, what="probs")
    assert probs[blank].isna().all().all() and probs[~blank].notna().all().all()
    assert model.predict(texts, what="bin", threshold=0.0)[blank].eq(0).all().all()
    alternatives = model.alternatives(texts, k=2)
    assert (alternatives.loc[["b", "c", "d"], "code_1"] == "").all()
    assert alternatives.loc[["b", "c", "d"], "prob"].isna().all()
    assert (alternatives.loc[["a", "e"], "code_1"] != "").all()
    source = pd.DataFrame({"occ1": ["farmer", "", "smith", " ", "miner"]})
    source.to_csv(tmp_path / "in.csv", index=False)
    capsys.readouterr()
    assert (
        predict_main(
            [
                "--checkpoint",
                shapes_run,
                "--input",
                str(tmp_path / "in.csv"),
                "--output",
                str(tmp_path / "out.csv"),
                "--chunk-size",
                "2",
                "--threshold",
                "0",
            ]
        )
        == 0
    )
    assert (
        f"--input {tmp_path / 'in.csv'}: 2 row(s) without a description" in capsys.readouterr().err
    )
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out["code_1"] == "") == [False, True, False, True, False] and list(
        out["prob_1"] == ""
    ) == [False, True, False, True, False]


# descriptions a person sees nothing in: a zero-width space, a byte-order mark, a word joiner,
# a no-break space, an ideographic space, a soft hyphen, and such characters mixed with spaces
SHOWS_NOTHING = ["\u200b", "\ufeff", "\u2060", "\xa0", "\u3000", "\xad", " \u200b\t\u200d "]


def test_a_description_of_characters_that_show_nothing_is_blank_everywhere(
    shapes_run, tmp_path, capsys
):
    """Issue 50, "also seen": a description of a zero-width space alone was coded where "" and
    " " get no code. Blank means blank whatever Unicode calls the character: no code and no
    probability from the API and predict.py, counted with the rows without a description, and
    a lookup entry of such a text is no entry (it codes nothing)."""
    import mixer
    from mixer.cli.entrypoints import predict_main

    model = mixer.load(shapes_run)
    texts = pd.Series(["farmer", *SHOWS_NOTHING, "smith"])
    blank = np.asarray([False] + [True] * len(SHOWS_NOTHING) + [False])
    table = model.predict(texts, threshold=0.0)  # a threshold of 0: every described row has codes
    assert (table.loc[blank, "code_1"] == "").all() and table.loc[blank, "prob_1"].isna().all()
    assert (table.loc[~blank, "code_1"] != "").all()
    assert f"note: {len(SHOWS_NOTHING)} row(s) without a description" in capsys.readouterr().err
    pd.DataFrame({"occ1": ["\u200b", "\ufeff"], "hisco_1": ["99910", "99910"]}).to_csv(
        tmp_path / "lookup.csv", index=False
    )
    pd.DataFrame({"occ1": texts}).to_csv(tmp_path / "in.csv", index=False)
    argv = ["--checkpoint", shapes_run, "--input", str(tmp_path / "in.csv")]
    argv += ["--output", str(tmp_path / "out.csv"), "--threshold", "0", "--chunk-size", "3"]
    assert predict_main(argv + ["--lookup", str(tmp_path / "lookup.csv")]) == 0
    said = capsys.readouterr().err
    assert f"{len(SHOWS_NOTHING)} row(s) without a description" in said
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out["code_1"] == "") == list(blank) and list(out["prob_1"] == "") == list(blank)


def test_a_check_list_holds_no_description_of_characters_that_show_nothing(shapes_run, tmp_path):
    """--to-check lists the descriptions most worth a person's check: a row of a zero-width
    space alone got no code (blank), yet the list took it as a description (str.strip keeps
    it), at its top with confidence 0: a checker's time spent on nothing. The list takes the
    prediction's one blank rule."""
    from mixer.cli.entrypoints import predict_main

    texts = ["farmer", *SHOWS_NOTHING, "smith", "", " "]
    pd.DataFrame({"occ1": texts}).to_csv(tmp_path / "in.csv", index=False)
    listed = tmp_path / "chk.csv"
    argv = ["--checkpoint", shapes_run, "--input", str(tmp_path / "in.csv")]
    argv += ["--output", str(tmp_path / "out.csv"), "--chunk-size", "3"]
    assert predict_main(argv + ["--to-check", "50", str(listed)]) == 0
    checks = pd.read_csv(listed, dtype=str, keep_default_na=False)
    assert sorted(checks["occ1"]) == ["farmer", "smith"]


def test_blank_is_unicode_s_white_space_and_default_ignorable_characters():
    """The one rule (mixer.data.tables.job_columns.is_blank, blank_descriptions): a text of
    Unicode's White_Space and Default_Ignorable_Code_Point characters alone, checked for every
    code point against the `regex` package's Unicode tables; one visible character is enough
    to be a description."""
    import regex

    from mixer.data.tables.job_columns import blank_descriptions, is_blank

    shows_nothing = regex.compile(r"[\p{White_Space}\p{Default_Ignorable_Code_Point}]")
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    expected = np.asarray([bool(shows_nothing.match(p)) or p.isspace() for p in points])
    assert (blank_descriptions(pd.Series(points, dtype=object)) == expected).all()
    assert [is_blank(p) for p in ("\u200b", "\ufeff", "\u2060", "x")] == [True, True, True, False]
    values = pd.Series(["", None, np.nan, *SHOWS_NOTHING, "\u200bsmith", "smith\ufeff", "-"])
    assert list(blank_descriptions(values)) == [True] * (3 + len(SHOWS_NOTHING)) + [False] * 3
    assert is_blank(None) and is_blank(float("nan")) and not is_blank("\u200bsmith")


def torch_equal(a, b):
    import torch

    return bool(torch.equal(a, b))


@pytest.mark.floats
def test_predict_py_writes_occcanine_shapes(shapes_run, small_csv, tmp_path):
    import mixer
    from mixer.cli.entrypoints import predict_main

    def predict(output, *args):
        return predict_main(
            [
                "--checkpoint",
                shapes_run,
                "--input",
                small_csv,
                "--output",
                str(output),
                *map(str, args),
            ]
        )

    model = mixer.load(shapes_run)
    source = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    assert predict(tmp_path / "probs.npy", "--what", "probs", "--chunk-size", "50") == 0
    matrix = np.load(tmp_path / "probs.npy")
    expected = model.predict(source["occ1"], what="probs").to_numpy()
    assert matrix.shape == (len(source), len(model.codes))
    assert_floats_close(matrix, expected)  # chunks of 50: other batches
    assert predict(tmp_path / "bin.parquet", "--what", "bin") == 0
    binary = pd.read_parquet(tmp_path / "bin.parquet")
    assert list(binary.columns) == list(model.codes["code"]) and len(binary) == len(source)
    assert (
        predict(
            tmp_path / "occ.csv",
            "--columns",
            "occcanine",
            "--system",
            "hisco",
            "--top-k",
            "3",
            "--code-descriptions",
            os.path.join(os.path.dirname(__file__), "..", "data", "hisco_key.csv"),
        )
        == 0
    )
    occ = pd.read_csv(tmp_path / "occ.csv", dtype=str, keep_default_na=False)
    assert list(occ.columns) == [
        "occ1",
        "hisco_1",
        "prob_1",
        "desc_1",
        "hisco_2",
        "prob_2",
        "desc_2",
        "hisco_3",
        "prob_3",
        "desc_3",
    ]
    assert (occ["occ1"] == source["occ1"]).all()
    assert (occ.loc[occ["hisco_3"] == "", "desc_3"] == "No pred").all()
    assert occ.loc[occ["hisco_1"] != "", "desc_1"].str.len().gt(0).all()  # HISCO titles
    assert predict(tmp_path / "alt.csv", "--alternatives", "2", "--chunk-size", "50") == 0
    alt = pd.read_csv(tmp_path / "alt.csv", dtype=str, keep_default_na=False)
    assert len(alt) == 2 * len(source) and list(alt.columns[:3]) == list(source.columns)
    assert (alt["occ1"].iloc[::2].to_numpy() == source["occ1"].to_numpy()).all()
    for output, args, message in (
        ("x.csv", ["--what", "probs", "--head", "seq2seq"], "greedy decoding gives no probability"),
        ("x.csv", ["--alternatives", "2", "--what", "bin"], "pass one of them"),
        ("x.csv", ["--what", "bin", "--head", "flat", "seq2seq"], "takes one --head"),
        ("codes.npy", [], ".npy holds a matrix"),
    ):
        with pytest.raises(UserError, match=re.escape(message)):
            predict(tmp_path / output, *args)
        assert not os.path.exists(tmp_path / output)
    proc = run_program(
        "predict.py",
        "--checkpoint",
        shapes_run,
        "--input",
        small_csv,
        "--output",
        tmp_path / "x.csv",
        "--alternatives",
        "2",
        "--what",
        "bin",
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_code_descriptions_for_a_model_of_any_code_system(pst_files, tmp_path):
    import mixer

    run = tmp_path / "pst"
    assert train_general(pst_files, run) == 0
    model = mixer.load(str(run))
    assert "desc_1" not in model.predict(["smith"]).columns  # the run was given none
    described = mixer.load(str(run), code_descriptions=str(pst_files / "key.csv"))
    row = described.predict(["smith"], top_k=1)
    assert row["desc_1"].iloc[0] == {"5,9,9": "carter"}.get(row["code_1"].iloc[0], "")
    assert described.codes.set_index("code").loc["5,9,9", "description"] == "carter"
    as_dict = mixer.load(str(run), code_descriptions={"2,3,1": "smith", "1,1,0": "farmer"})
    assert as_dict.codes.set_index("code").loc["2,3,1", "description"] == "smith"
    with pytest.raises(UserError, match="none of its codes is a code of the model"):
        mixer.load(str(run), code_descriptions={"99999": "nothing"})
    pd.DataFrame({"code": ["2,3,1"], "description": ["smith"]}).to_csv(
        tmp_path / "d.csv", index=False
    )
    run_program(
        "predict.py",
        "--checkpoint",
        run,
        "--input",
        pst_files / "train.csv",
        "--output",
        tmp_path / "p.csv",
        "--code-descriptions",
        tmp_path / "d.csv",
    )
    out = pd.read_csv(tmp_path / "p.csv", dtype=str, keep_default_na=False)
    assert (out.loc[out["code_1"] == "2,3,1", "desc_1"] == "smith").all()
    assert (out.loc[out["code_1"] != "2,3,1", "desc_1"] == "").all()


# ------------------------------------------------------------------ notebook
def test_finetune_from_a_notebook_is_finetune_py(tmp_path, small_csv):
    import mixer
    import yaml

    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    tiny = dict(
        encoder="canine-tiny",
        decoder_dim=32,
        decoder_layers=1,
        decoder_heads=2,
        max_len=48,
        max_steps=2,
        share_val=0.09,
        dropout=0.0,
    )
    model = mixer.finetune(
        frame, target_cols=["hisco_1", "hisco_2"], save_path=str(tmp_path / "nb"), **tiny
    )
    assert isinstance(model, mixer.prediction.api.Model) and len(model.predict(["farmer"])) == 1
    # the same run from the command line: the same configuration, data and weights
    argv = [
        "--dataset",
        str(tmp_path / "nb" / "dataset.parquet"),
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        str(tmp_path / "cli"),
    ]
    for name, value in tiny.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    assert finetune_main(argv) == 0
    args = [yaml.safe_load(open(tmp_path / run / "args.yaml")) for run in ("nb", "cli")]
    for section in ("data", "model", "train"):
        a = {k: v for k, v in args[0][section].items() if k != "dataset"}
        b = {k: v for k, v in args[1][section].items() if k != "dataset"}
        assert a == b, section
    from safetensors.torch import load_file

    a, b = (load_file(os.path.join(tmp_path / run, "model.safetensors")) for run in ("nb", "cli"))
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    # the same call again resumes (here: finds the run complete) instead of refusing the data
    again = mixer.finetune(
        frame, target_cols=["hisco_1", "hisco_2"], save_path=str(tmp_path / "nb"), **tiny
    )
    assert list(again.codes["code"]) == list(model.codes["code"])
    # errors are the programs' one-line messages, raised
    with pytest.raises(UserError, match="no flag --num-epoch;"):
        mixer.finetune(frame, target_cols="hisco_1", save_path=str(tmp_path / "x"), num_epoch=2)
    with pytest.raises(UserError, match="--batch-size: must be 1 or more"):
        mixer.finetune(frame, target_cols="hisco_1", save_path=str(tmp_path / "x"), batch_size=0)
    with pytest.raises(UserError, match="no column 'occupation'"):
        mixer.finetune(
            small_csv,
            target_cols="hisco_1",
            save_path=str(tmp_path / "y"),
            input_col="occupation",
            **tiny,
        )
    with pytest.raises(UserError, match="row.s. with no code"):
        mixer.finetune(
            frame.assign(hisco_1=""), target_cols="hisco_1", save_path=str(tmp_path / "z"), **tiny
        )


def test_finetune_checks_a_dataframe_and_its_options_before_it_writes_anything(tmp_path):
    """mixer.finetune(DataFrame) (issue 27, item 7): a column of numbers and text mixed (as
    pd.read_excel gives one) is read as text; duplicate column names and bad options are
    UserErrors before anything is written; a refused run leaves the run directory as it
    was, and another DataFrame never replaces a run's own."""
    import mixer

    frame = pd.DataFrame(
        {
            "occ1": ["farmer", "fisher", "smith", "weaver"] * 3,
            "hisco_1": [61110, "-1", 83110, 1110] * 3,
        }
    )  # numbers and text
    run = tmp_path / "new" / "run"
    with pytest.raises(
        UserError, match=r"row 4 hisco_1='1110': shorter .*pass --zero-padded-codes"
    ):
        mixer.finetune(
            frame, target_cols="hisco_1", save_path=str(run), prepare_only=True, token_cache=False
        )
    assert not os.path.exists(tmp_path / "new")  # refused: nothing written, no directory made
    twice = frame.set_axis(["occ1", "occ1"], axis=1)
    with pytest.raises(UserError, match="duplicate column name.s. .occ1."):
        mixer.finetune(twice, target_cols="occ1", save_path=str(run))
    with pytest.raises(UserError, match="--batch-size: must be 1 or more"):
        mixer.finetune(frame, target_cols="hisco_1", save_path=str(run), batch_size=0)
    assert not os.path.exists(tmp_path / "new")
    good = dict(
        target_cols="hisco_1",
        save_path=str(run),
        prepare_only=True,
        token_cache=False,
        zero_padded_codes=True,
        allow_codes_shorter_than_block_size=True,
    )
    assert mixer.finetune(frame, **good) is None
    assert read_key(run)["code"].tolist() == ["-1", "01110", "61110", "83110"]
    kept = (run / "dataset.parquet").read_bytes()
    with pytest.raises(UserError, match="holds a run of another DataFrame"):
        mixer.finetune(frame.assign(occ1="clerk"), **good)
    assert (run / "dataset.parquet").read_bytes() == kept  # the first run's copy is intact
    assert mixer.finetune(frame, **good) is None  # the same DataFrame: the same run


# ------------------------------------------------------------------ the checking loop
@pytest.mark.floats
def test_to_check_lists_the_descriptions_worth_checking_and_extra_train_learns_them(
    shapes_run, small_csv, tmp_path
):
    from mixer.cli.entrypoints import predict_main

    source = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    pool = pd.concat(
        [source, source.head(10), source.head(10)], ignore_index=True
    )  # repeated titles
    pool.to_csv(tmp_path / "pool.csv", index=False)
    assert (
        predict_main(
            [
                "--checkpoint",
                shapes_run,
                "--input",
                str(tmp_path / "pool.csv"),
                "--to-check",
                "8",
                str(tmp_path / "check.csv"),
                "--chunk-size",
                "40",
            ]
        )
        == 0
    )
    check = pd.read_csv(tmp_path / "check.csv", dtype=str, keep_default_na=False)
    assert list(check.columns) == [
        "occ1",
        "n_rows",
        "confidence",
        "code_1",
        "prob_1",
        "code_2",
        "prob_2",
        "checked_1",
        "checked_2",
    ]
    assert len(check) == 8 and check["occ1"].is_unique and (check["checked_1"] == "").all()
    # the order: rows sharing the description x (1 - confidence), over every chunk; the
    # confidence is the row's in its whole code set (docs/coding.md), not its top code's
    import mixer

    model = mixer.load(shapes_run)
    table = model.predict(pool["occ1"]).assign(occ1=pool["occ1"].to_numpy())
    counts = pool["occ1"].value_counts()
    first = table.drop_duplicates("occ1").set_index("occ1")
    score = counts * (1 - first["confidence"].reindex(counts.index).fillna(0))
    expected = score.sort_values(ascending=False, kind="stable")
    assert check["n_rows"].astype(int).tolist() == counts.reindex(check["occ1"]).tolist()
    top = expected.to_numpy()[:9]
    assert not np.isclose(
        top[:-1], top[1:], **FLOATS
    ).any()  # no tie within rounding: the order is exact
    assert check["occ1"].tolist() == expected.index[:8].tolist()
    assert_floats_close(
        check["confidence"].astype(float), first["confidence"].reindex(check["occ1"])
    )  # chunks of 40
    # a person fills some rows; only those become training rows
    truth = source.drop_duplicates("occ1").set_index("occ1")["hisco_1"]
    check.loc[:4, "checked_1"] = truth.reindex(check["occ1"].iloc[:5]).to_numpy()
    check.loc[0, "checked_2"] = "99910" if check.loc[0, "checked_1"] != "99910" else ""
    check.to_csv(tmp_path / "filled.csv", index=False)
    run = tmp_path / "again"
    argv = [
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--share-val",
        "0.09",
        *TINY,
        "--max-steps",
        "1",
    ]
    assert finetune_main([*argv, "--save-path", str(tmp_path / "plain")]) == 0
    assert (
        finetune_main(
            [*argv, "--save-path", str(run), "--extra-train", str(tmp_path / "filled.csv")]
        )
        == 0
    )
    plain = pd.read_parquet(tmp_path / "plain" / "data_train.parquet")
    train = pd.read_parquet(run / "data_train.parquet")
    assert len(train) == len(plain) + 5
    added = train.iloc[len(plain) :]
    assert added["text"].tolist() == check["occ1"].iloc[:5].tolist()
    assert added["code_1"].astype(str).tolist() == check["checked_1"].iloc[:5].tolist()
    assert added["code_2"].astype(str).tolist()[0] == check.loc[0, "checked_2"]
    pd.testing.assert_frame_equal(
        pd.read_parquet(run / "data_val.parquet"),
        pd.read_parquet(tmp_path / "plain" / "data_val.parquet"),
    )  # the same split
    # files that cannot be training rows are named
    check.assign(checked_1="", checked_2="").to_csv(tmp_path / "empty.csv", index=False)
    with pytest.raises(UserError, match="no row has a code in checked_1, checked_2"):
        finetune_main(
            [
                *argv,
                "--save-path",
                str(tmp_path / "e"),
                "--extra-train",
                str(tmp_path / "empty.csv"),
            ]
        )
    with pytest.raises(UserError, match="no checked_1, checked_2, ... columns"):
        finetune_main([*argv, "--save-path", str(tmp_path / "f"), "--extra-train", small_csv])
    with pytest.raises(UserError, match="N must be a whole number"):
        predict_main(
            ["--checkpoint", shapes_run, "--input", small_csv, "--to-check", "many", "c.csv"]
        )


# ------------------------------------------------------------------ context for OccCANINE models
HOUSEHOLD = {
    ("servant", "wife"): "1,1",
    ("servant", "son"): "1,2",
    ("farmer", "wife"): "2,1",
    ("farmer", "son"): "2,2",
    ("miner", "wife"): "3,1",
    ("miner", "son"): "3,2",
}


def test_occcanine_models_learn_context_within_their_128_characters(hisco_model, tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(240):
        title, relation = ["servant", "farmer", "miner"][i % 3], ["wife", "son"][rng.integers(2)]
        rows.append((title, relation, HOUSEHOLD[(title, relation)], "en"))
    frame = pd.DataFrame(rows, columns=["occ1", "relation", "code_1", "lang"])
    long = pd.DataFrame(
        [("servant", "wife " + "x" * 200, "1,1", "en"), ("w" * 130, "son", "1,2", "en")],
        columns=frame.columns,
    )
    pd.concat([frame, long]).to_csv(tmp_path / "households.csv", index=False)
    run = tmp_path / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                str(tmp_path / "households.csv"),
                "--target-cols",
                "code_1",
                "--use-within-block-sep",
                "--block-size",
                "2",
                "--context-cols",
                "relation",
                "--language-col",
                "lang",
                "--initial-checkpoint",
                hisco_model["hub"],
                "--only-encoder",
                "--save-path",
                str(run),
                "--num-epochs",
                "8",
                "--batch-size",
                "16",
                "--learning-rate",
                "1e-3",
                "--dropout",
                "0",
                "--share-val",
                "0.2",
                "--seed",
                "1",
                "--no-augmentation",
                "--no-eval-noise",
            ]
        )
        == 0
    )  # the context is the subject
    out = capsys.readouterr().out
    assert "the context of 2 row(s) was cut from its end to fit OccCANINE's 128 characters" in out
    from mixer.data.inputs.token_cache import load

    read = {}  # each prepared text -> what the model reads of it (the token cache's characters)
    for split in ("train", "val"):
        cache = load(next((run / "cache").glob(f"tokens_{split}_*")).as_posix())
        for i, text in enumerate(pd.read_parquet(run / f"data_{split}.parquet")["text"]):
            read[text] = "".join(map(chr, cache.row(i)[1:-1]))
    cut = read["servant [SEP] relation: wife " + "x" * 200]
    assert cut == ("en[SEP]servant [sep] relation: wife " + "x" * 200)[:126]  # [CLS] + 126 + [SEP]
    # (OccCANINE's recipe lower-cases the text it reads, the context too)
    assert (
        read["w" * 130 + " [SEP] relation: son"] == "en[SEP]" + "w" * 119
    )  # never cut for its context
    accuracy = float(out.split("validation:")[1].split("flat_accuracy ")[1].split(",")[0])
    assert accuracy >= 0.9  # the title alone is right at most about half the time
    import mixer

    model = mixer.load(str(run))
    assert model.family == "occcanine"
    got = model.predict(
        ["servant", "servant"], lang="en", context={"relation": ["wife", "son"]}, top_k=1
    )
    assert got["code_1"].tolist() == ["1,1", "1,2"]
    with pytest.raises(UserError, match="reads context columns relation"):
        model.predict(["servant"], lang="en")
    from mixer.cli.export_occcanine import export

    with pytest.raises(UserError, match="trained with --context-cols relation"):
        export(str(run), str(tmp_path / "hub"))
    assert not os.path.exists(tmp_path / "hub")


def test_check_list_counts_each_description_and_language_over_chunks_and_skips_blank_text(tmp_path):
    from mixer.data.labels.checking import CheckList

    checks = CheckList(3, str(tmp_path / "c.csv"), ["occ1", "lang"], "", 2)
    chunk = pd.DataFrame(
        {"occ1": ["a", "a", "b", "a", None, " "], "lang": ["en", "da", "en", "en", "en", "en"]}
    )
    predicted = pd.DataFrame(
        {
            "code_1": ["1", "2", "3", "1", "", ""],
            "prob_1": [0.9, 0.5, 0.2, 0.9, np.nan, np.nan],
            "code_2": [""] * 6,
            "prob_2": [np.nan] * 6,
        }
    )
    inputs = (
        chunk["lang"] + "|" + chunk["occ1"].fillna("").str.strip()
    ).tolist()  # what the model reads
    checks.add(chunk, predicted, inputs)
    checks.add(chunk.iloc[:2], predicted.iloc[:2], inputs[:2])  # a second chunk
    assert checks.commit() == 3
    table = pd.read_csv(tmp_path / "c.csv", dtype=str, keep_default_na=False)
    # a/da: 2 rows x 0.5; b/en: 1 x 0.8; a/en: 3 x 0.1; blank text is never listed
    assert table[["occ1", "lang", "n_rows"]].values.tolist() == [
        ["a", "da", "2"],
        ["b", "en", "1"],
        ["a", "en", "3"],
    ]
    import mixer

    with pytest.raises(UserError, match="dataset=: pass data"):
        mixer.finetune("x.csv", target_cols="a", save_path=str(tmp_path / "r"), dataset="y.csv")


def test_a_check_list_of_any_format_is_read_back_under_the_run_names(tmp_path):
    """Review of issue 27, item 2: a check list written as .dta ('occ title' is occ_title
    there) or .xlsx ('occ1 ' is occ1 there) feeds back with --extra-train: its columns are
    read under the run's names (the variable labels, or the naming rule), and the writer and
    the reader say so."""
    from mixer.core.config import DataConfig
    from mixer.data.labels.checking import CheckList
    from mixer.data.prepared.prepare import prepare

    data = tmp_path / "data.csv"
    pd.DataFrame(
        {
            "occ title": ["farmer", "fisher", "smith", "weaver"] * 2,
            "hisco_1": ["61110", "64100"] * 4,
            "place ": ["x", "y"] * 4,
        }
    ).to_csv(data, index=False)
    chunk = pd.DataFrame({"occ title": ["miner", "tailor"], "place ": ["x", ""]})
    predicted = pd.DataFrame({"code_1": ["61110", "64100"], "prob_1": [0.5, 0.4]})
    for suffix in (".dta", ".xlsx"):
        path = str(tmp_path / f"check{suffix}")
        said = []
        checks = CheckList(2, path, ["occ title", "place "], "", 1, log=said.append)
        checks.add(chunk, predicted, ["miner|x", "tailor|"])
        checks.commit()
        assert said and "columns written under other names" in said[0]
        written = (
            pd.read_stata(path) if suffix == ".dta" else pd.read_excel(path, dtype=str)
        ).fillna("")
        assert {"occ title", "place "} - set(written.columns)  # a name the format cannot hold
        written["checked_1"] = (
            ["71110", "79100"] if written.iloc[0, 0] == "miner" else ["79100", "71110"]
        )
        if suffix == ".dta":
            from mixer.data.tables.writing import OutputWriter

            writer = OutputWriter(path)  # as Stata saves it: the labels kept
            writer.write(
                written[["n_rows", "confidence", "code_1", "prob_1", "checked_1"]],
                inputs=written[["occ_title", "place_"]].set_axis(["occ title", "place "], axis=1),
            )
            writer.commit()
        else:
            written.to_excel(path, index=False)
        said = []
        cfg = DataConfig(
            dataset=str(data),
            input_col="occ title",
            context_cols=["place "],
            target_cols=["hisco_1"],
            share_val=0.25,
            extra_train=[path],
        )
        prepared = prepare(cfg, 0, log=said.append)
        added = prepared.train.tail(2)
        assert sorted(added["text"]) == ["miner [SEP] place : x", "tailor"], suffix
        assert any("columns read under the run's names" in line for line in said), said


def test_extra_train_errors_name_the_rows_of_the_check_list(tmp_path):
    """Review of issue 27, item 7: a bad code in a filled row of a check list is named by
    that row's number in the file, not by its place among the filled rows."""
    from mixer.core.config import DataConfig
    from mixer.data.prepared.prepare import prepare

    data = tmp_path / "data.csv"
    data.write_text("occ1,hisco_1\n" + "farmer,61110\nfisher,64100\n" * 3)
    check = tmp_path / "check.csv"
    check.write_text(
        "occ1,n_rows,confidence,code_1,prob_1,checked_1\nminer,3,0.2,61110,0.2,\n"
        "tailor,2,0.3,64100,0.3,\nsmith,1,0.4,83110,0.4,641100\n"
    )
    cfg = DataConfig(
        dataset=str(data), target_cols=["hisco_1"], share_val=0.25, extra_train=[str(check)]
    )
    with pytest.raises(UserError, match=r"row 3 checked_1='641100': longer than --block-size 5"):
        prepare(cfg, 0, log=lambda _: None)


def test_one_number_written_two_ways_names_the_file_of_each_spelling(tmp_path):
    """Review of issue 27, item 8: '01110' in the dataset and '1110' in a check list is
    refused naming both files (it named the dataset for both); as an Excel number cell the
    check list's 1110 is 01110, one class."""
    import openpyxl
    from mixer.core.config import DataConfig
    from mixer.data.prepared.prepare import prepare

    data = tmp_path / "ds.csv"
    data.write_text("occ1,hisco_1\n" + "chemist,01110\nfisher,64100\n" * 3)
    check = tmp_path / "check.csv"
    check.write_text("occ1,checked_1\nchemist's help,1110\n")
    cfg = DataConfig(
        dataset=str(data),
        target_cols=["hisco_1"],
        share_val=0.25,
        extra_train=[str(check)],
        allow_codes_shorter_than_block_size=True,
    )
    with pytest.raises(UserError) as error:
        prepare(cfg, 0, log=lambda _: None)
    assert str(error.value).startswith(
        f"codes '01110' (--dataset {data}) and '1110' (--extra-train {check}) "
        "are one number written with and without leading zeros"
    )
    book = openpyxl.Workbook()
    book.active.append(["occ1", "checked_1"])
    book.active.append(["chemist's help", 1110])
    book.save(tmp_path / "check.xlsx")
    cfg.extra_train = [str(tmp_path / "check.xlsx")]
    assert list(prepare(cfg, 0, log=lambda _: None).key["code"]) == ["01110", "64100"]


def test_a_check_list_that_cannot_be_written_names_the_input_row_and_leaves_nothing(
    tmp_path, monkeypatch
):
    """Review of issue 27, item 10: a text the check list's format cannot hold is named by
    its row in the input as well as in the check list, and the half-written workbook is
    dropped (no 'Exception ignored ... I/O operation on closed file' at exit)."""
    import gc
    import sys

    from mixer.data.labels.checking import CheckList

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    texts = [f"title {i}" for i in range(300)]
    texts[150] = "bad\x01title"
    checks = CheckList(300, str(tmp_path / "c.xlsx"), ["occ1"], "", 1)
    for start in range(0, 300, 100):
        chunk = pd.DataFrame({"occ1": texts[start : start + 100]})
        predicted = pd.DataFrame(
            {"code_1": ["61110"] * 100, "prob_1": np.linspace(0.99, 0.0, 300)[start : start + 100]}
        )
        checks.add(chunk, predicted, chunk["occ1"].tolist())
    with pytest.raises(
        UserError, match=r"row 150 \(input row 151\) column 'occ1' holds a control character"
    ):
        checks.commit()
    del checks
    gc.collect()
    assert not unraisable and os.listdir(tmp_path) == []


def test_finetune_takes_each_flag_by_its_name_and_refuses_in_one_line(tmp_path):
    """Review of issue 27, item 11: mixer.finetune(key=...) is --key (its dest is key_file);
    a DataFrame where a path goes and a complex column are one-line UserErrors; a refused
    call into a directory that holds a run prepared from the command line leaves no
    dataset.parquet there."""
    import mixer

    frame = pd.DataFrame(
        {
            "occ1": ["farmer", "fisher", "smith", "weaver"] * 2,
            "hisco_1": ["61110", "64100", "83110", "75100"] * 2,
        }
    )
    key = tmp_path / "key.csv"
    key.write_text(
        "code,description\n61110,farmer\n64100,fisher\n83110,smith\n75100,weaver\n99999,other\n"
    )
    run = tmp_path / "api"
    assert (
        mixer.finetune(
            frame,
            target_cols="hisco_1",
            save_path=str(run),
            key=str(key),
            prepare_only=True,
            token_cache=False,
            share_val=0.25,
        )
        is None
    )
    assert read_key(run)["code"].tolist() == ["61110", "64100", "83110", "75100", "99999"]
    for bad, message in (
        (
            dict(code_descriptions=frame),
            r"^code_descriptions=: pass text, a number or a file's "
            r"path, not a DataFrame \(write it to a file",
        ),
        (dict(context_cols=[frame]), r"^context_cols=: pass text"),
    ):
        with pytest.raises(UserError, match=message) as error:
            mixer.finetune(frame, target_cols="hisco_1", save_path=str(tmp_path / "x"), **bad)
        assert "\n" not in str(error.value)
    with pytest.raises(
        UserError, match=r"^data: column 'z' \(complex128\) cannot be kept in Parquet"
    ) as error:
        mixer.finetune(frame.assign(z=1 + 2j), target_cols="hisco_1", save_path=str(tmp_path / "x"))
    assert "\n" not in str(error.value) and not os.path.exists(tmp_path / "x")
    cli_run = tmp_path / "cli"
    data = tmp_path / "data.csv"
    frame.to_csv(data, index=False)
    assert (
        finetune_main(
            [
                "--dataset",
                str(data),
                "--target-cols",
                "hisco_1",
                "--share-val",
                "0.25",
                "--save-path",
                str(cli_run),
                "--prepare-only",
                "--no-token-cache",
            ]
        )
        == 0
    )
    before = sorted(os.listdir(cli_run))
    with pytest.raises(UserError, match="prepared from other input or settings"):
        mixer.finetune(
            frame.assign(occ1="clerk"),
            target_cols="hisco_1",
            save_path=str(cli_run),
            share_val=0.25,
            prepare_only=True,
            token_cache=False,
        )
    assert sorted(os.listdir(cli_run)) == before  # no dataset.parquet left behind
    with pytest.raises(UserError, match=r"^data: 4 row\(s\) with bad codes \(row 2 hisco_1='6410'"):
        mixer.finetune(
            frame.assign(hisco_1=["61110", "6410"] * 4),
            target_cols="hisco_1",
            save_path=str(run / "y"),
        )


def test_finetune_refuses_odd_target_and_list_values_in_one_line_as_the_flags_do(tmp_path):
    """Review of issue 36: target_cols=5 was a TypeError traceback ('int' object is not
    iterable), not a one-line message; it is read as --target-cols 5 is (a column named
    '5', which this frame lacks). context_cols=[] is refused as --context-cols with no
    column is, as before issue 36 (the generated checks took it as no context)."""
    import mixer

    frame = pd.DataFrame(
        {
            "occ1": ["farmer", "fisher", "smith", "weaver"] * 2,
            "hisco_1": ["61110", "64100", "83110", "75100"] * 2,
        }
    )
    for bad, message in (
        (dict(target_cols=5), r"'5'"),
        (
            dict(target_cols="hisco_1", context_cols=[]),
            r"^finetune\(\): argument --context-cols: expected at least one argument$",
        ),
    ):
        with pytest.raises(UserError, match=message) as error:
            mixer.finetune(
                frame, save_path=str(tmp_path / "x"), prepare_only=True, token_cache=False, **bad
            )
        assert "\n" not in str(error.value)
        assert not os.path.exists(tmp_path / "x" / "prepared.json")

"""OccCANINE's workflows in mixer: any code system with its own splits and a fixed key,
rows without a code as a class, OccCANINE's output shapes, descriptions for any system."""

import os

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, run_program
from mixer.entrypoints import finetune_main, train_mixer_main
from mixer.errors import UserError


def read_key(run_dir):
    return pd.read_csv(os.path.join(run_dir, "key.csv"), dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def pst_files(tmp_path_factory):
    """PST2-style codes ('1,12,0': comma-separated parts) in a training and a validation
    file of the user's own; the validation file holds a code the training rows lack."""
    directory = tmp_path_factory.mktemp("pst")
    titles = {"farmer": "1,1,0", "fisher": "1,12,0", "smith": "2,3,1", "weaver": "2,40,2"}
    rows = [(t, c, "") for t, c in titles.items()] * 6 + [("farmer and fisher", "1,1,0", "1,12,0")] * 4
    train = pd.DataFrame(rows, columns=["occ1", "pst_1", "pst_2"])
    val = pd.DataFrame([("smith", "2,3,1", ""), ("carter", "5,9,9", "")], columns=train.columns)
    train.to_csv(directory / "train.csv", index=False)
    val.to_parquet(directory / "val.parquet")
    key = pd.DataFrame({"code": ["9,9,9", "5,9,9", "2,40,2", "2,3,1", "1,12,0", "1,1,0"],
                        "description": ["unused code", "carter", "", "", "", ""]})
    key.to_csv(directory / "key.csv", index=False)
    return directory


def train_general(directory, run, *extra):
    return train_mixer_main(["--formatter", "general", "--use-within-block-sep", "--block-size", "3",
                             "--target-col-naming", "pst", "--num-target-cols", "2",
                             "--train-data", str(directory / "train.csv"),
                             "--val-data", str(directory / "val.parquet"), "--save-dir", str(run),
                             "--max-steps", "1", *TINY, *map(str, extra)])


def test_train_mixer_general_formatter_with_own_splits_and_a_fixed_key(pst_files, tmp_path):
    assert train_general(pst_files, tmp_path / "free") == 0
    free = read_key(tmp_path / "free")
    assert list(free["code"]) == sorted(["1,1,0", "1,12,0", "2,3,1", "2,40,2", "5,9,9"])  # from the data
    assert train_general(pst_files, tmp_path / "fixed", "--key", pst_files / "key.csv") == 0
    fixed = read_key(tmp_path / "fixed")
    # the file's codes in the file's order, a code absent from every row included
    assert list(fixed["code"]) == ["9,9,9", "5,9,9", "2,40,2", "2,3,1", "1,12,0", "1,1,0"]
    assert fixed["description"].iloc[0] == "unused code"
    from safetensors.torch import load_file

    weights = load_file(os.path.join(tmp_path / "fixed", "model.safetensors"))
    assert weights["flat_head.weight"].shape[0] == 6
    # a second run given the first run's key.csv numbers its codes the same way
    assert train_general(pst_files, tmp_path / "again", "--key", tmp_path / "fixed" / "key.csv") == 0
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
    with pytest.raises(UserError, match=r"--key .*row 1 code '1,1,0,4': longer than --block-size 3"):
        train_general(pst_files, tmp_path / "r3", "--key", tmp_path / "long.csv")
    pd.DataFrame({"label": ["1,1,0"]}).to_csv(tmp_path / "nocol.csv", index=False)
    with pytest.raises(UserError, match="needs a column 'code'"):
        train_general(pst_files, tmp_path / "r4", "--key", tmp_path / "nocol.csv")
    # from the command line: one line, exit status 2
    proc = run_program("train_mixer.py", "--formatter", "general", "--use-within-block-sep",
                       "--block-size", "3", "--target-col-naming", "pst", "--num-target-cols", "2",
                       "--train-data", pst_files / "train.csv", "--val-data", pst_files / "val.parquet",
                       "--save-dir", tmp_path / "r5", "--key", tmp_path / "missing.csv", *TINY, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--key" in proc.stderr


def test_finetune_key_keeps_hisco_key_layout_codes_with_their_zeros(tmp_path, small_csv):
    # data/hisco_key.csv (OccCANINE's layout, leading zeros lost) as the key of a hisco run
    from conftest import ROOT

    run = tmp_path / "run"
    assert train_mixer_main(["--train-data", small_csv, "--val-data", small_csv, "--num-target-cols", "2",
                             "--key", os.path.join(ROOT, "data", "hisco_key.csv"),
                             "--save-dir", str(run), "--max-steps", "1", *TINY]) == 0
    key = read_key(run)
    assert len(key) == 1919 and "01110" in set(key["code"]) and key["code"].iloc[0] == "-3"


def test_empty_code_label_learns_rows_without_a_code(tmp_path, small_csv):
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    frame.loc[frame.index[:30], ["hisco_1", "hisco_2"]] = ""  # "no occupation given"
    csv = tmp_path / "blank.csv"
    frame.to_csv(csv, index=False)
    common = ["--dataset", str(csv), "--target-cols", "hisco_1", "hisco_2", "--share-val", "0.09",
              *TINY, "--max-steps", "1"]
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

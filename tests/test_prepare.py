"""Preparation: no heavy imports, written once, reused, refused when the input changed."""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, env_for_subprocess


def test_prepare_only_imports_no_torch_and_is_reused(tmp_path, small_csv):
    run = tmp_path / "run"
    code = (
        "import sys\n"
        "from mixer.entrypoints import finetune_main\n"
        f"finetune_main(['--dataset', {small_csv!r}, '--target-cols', 'hisco_1', 'hisco_2',"
        f" '--save-path', {str(run)!r}, '--prepare-only'])\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env_for_subprocess(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "prepared 109 training and 12 validation rows" in proc.stdout
    for name in ("data_train.parquet", "data_val.parquet", "key.csv", "args.yaml", "prepared.json"):
        assert os.path.exists(run / name)
    train = pd.read_parquet(run / "data_train.parquet")
    assert list(train.columns) == ["text", "lang", "code_1", "code_2", "row"]
    before = os.stat(run / "data_train.parquet").st_mtime_ns
    again = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env_for_subprocess(),
                           capture_output=True, text=True)
    assert "reusing prepared data" in again.stdout
    assert os.stat(run / "data_train.parquet").st_mtime_ns == before
    changed = subprocess.run([sys.executable, os.path.join(ROOT, "finetune.py"), "--dataset",
                              small_csv, "--target-cols", "hisco_1", "--save-path", str(run),
                              "--prepare-only"], cwd=ROOT, env=env_for_subprocess(),
                             capture_output=True, text=True)
    assert changed.returncode == 2 and "prepared from other input or settings" in changed.stderr


@pytest.mark.parametrize("categorical", [False, True])
def test_labels_of_maps_codes_to_key_indices_and_blanks_to_minus_one(categorical):
    from mixer.data import labels_of

    frame = pd.DataFrame({"code_1": ["b", "a", "", "zz", "c"], "code_2": ["", "c", "a", "", "b"],
                          "lang": ["en"] * 5})
    if categorical:  # a prepared split's columns; categories in another order, one unused
        for column in ("code_1", "code_2"):
            frame[column] = pd.Categorical(frame[column], categories=["zz", "c", "", "b", "a", "q"])
        frame.loc[4, "code_1"] = None  # a missing cell
    labels = labels_of(frame, ["a", "b", "c"], 3)
    expected = [[1, -1, -1], [0, 2, -1], [-1, 0, -1], [-1, -1, -1],
                [-1 if categorical else 2, 1, -1]]
    assert labels.tolist() == expected and labels.dtype == np.int64

"""What a training run stores for choosing which predictions to use (docs/coding.md,
"What a run stores"): rows that choose nothing (--share-calibration), the user's
breakdown columns (--report-cols), and the per-row scores of the final evaluation."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, TINY, run_program  # noqa: F401 (the runs below)
from mixer.core.config import DataConfig
from mixer.core.errors import UserError


def prepared_dir(tmp_path, small_csv, name="run", **settings):
    from mixer.data.prepare import prepare_run_data

    cfg = DataConfig(dataset=small_csv, target_cols=["hisco_1", "hisco_2"], **settings)
    run_dir = str(tmp_path / name)
    prepare_run_data(cfg, 42, run_dir, log=lambda _line: None)
    return run_dir


def split(run_dir, name):
    return pd.read_parquet(os.path.join(run_dir, f"data_{name}.parquet"))


def test_a_calibration_share_comes_out_of_the_training_rows(tmp_path, small_csv):
    plain = prepared_dir(tmp_path, small_csv, "plain")
    cal = prepared_dir(tmp_path, small_csv, "cal", share_calibration=0.2)
    assert not os.path.exists(os.path.join(plain, "data_cal.parquet"))
    rows = {name: split(cal, name)["row"].tolist() for name in ("train", "val", "cal")}
    assert len(rows["cal"]) == round(121 * 0.2)
    # the validation rows stay those of a run without the share; the three splits part the file
    assert rows["val"] == split(plain, "val")["row"].tolist()
    assert sorted(rows["train"] + rows["val"] + rows["cal"]) == list(range(1, 122))
    assert set(rows["cal"]) <= set(split(plain, "train")["row"])


def test_the_calibration_share_is_part_of_the_prepared_data_identity(tmp_path, small_csv):
    from mixer.data.prepare import prepare_run_data, prepared_stamp, run_stamp

    plain = DataConfig(dataset=small_csv, target_cols=["hisco_1", "hisco_2"])
    assert "share_calibration" not in run_stamp(plain, 42)["settings"]  # older directories keep theirs
    run_dir = prepared_dir(tmp_path, small_csv, share_calibration=0.2)
    assert prepared_stamp(run_dir)["rows"] == {"train": 85, "val": 12, "cal": 24}
    with pytest.raises(UserError, match="--share-calibration was 0.2, now 0.1"):
        prepare_run_data(DataConfig(dataset=small_csv, target_cols=["hisco_1", "hisco_2"],
                                    share_calibration=0.1), 42, run_dir, log=lambda _line: None)


def test_train_mixer_sets_the_calibration_share_aside_from_the_validation_files(tmp_path, small_csv):
    from mixer.data.prepare import prepare_run_data

    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    frame.iloc[:80].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[80:].to_csv(tmp_path / "val.csv", index=False)
    cfg = DataConfig(train_data=[str(tmp_path / "train.csv")], val_data=[str(tmp_path / "val.csv")],
                     target_cols=["hisco_1", "hisco_2"], share_calibration=0.25)
    prepare_run_data(cfg, 42, str(tmp_path / "run"), log=lambda _line: None)
    run_dir = str(tmp_path / "run")
    assert len(split(run_dir, "train")) == 80
    val, cal = split(run_dir, "val"), split(run_dir, "cal")
    assert (len(val), len(cal)) == (31, 10)
    assert sorted(val["row"].tolist() + cal["row"].tolist()) == list(range(1, 42))


def test_report_columns_are_kept_through_preparation(tmp_path, small_csv):
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    frame["source"] = np.where(np.arange(len(frame)) % 2, "census", "parish")
    frame["decade"] = (1850 + 10 * (np.arange(len(frame)) % 3)).astype(str)
    path = tmp_path / "with_source.csv"
    frame.to_csv(path, index=False)
    run_dir = prepared_dir(tmp_path, str(path), report_cols=["source", "decade"], share_calibration=0.1)
    for name in ("train", "val", "cal"):
        part = split(run_dir, name)
        expected = frame.set_index(np.arange(1, len(frame) + 1)).loc[part["row"]]
        assert part["report:source"].astype(str).tolist() == expected["source"].tolist()
        assert part["report:decade"].astype(str).tolist() == expected["decade"].tolist()


def test_a_missing_report_column_is_refused_naming_the_flag(tmp_path, small_csv):
    with pytest.raises(UserError, match="--report-cols"):
        prepared_dir(tmp_path, small_csv, report_cols=["parish"])
    assert not os.path.exists(tmp_path / "run" / "prepared.json")


@pytest.mark.parametrize("column", ["chose", "flat_confidence", "hisco_1"])
def test_a_report_column_named_like_a_score_column_is_refused(tmp_path, small_csv, column):
    from mixer.cli import entrypoints, parsing

    argv = ["--dataset", small_csv, "--target-cols", "hisco_1", "--save-path", str(tmp_path / "run"),
            "--report-cols", column]
    with pytest.raises(UserError, match=f"^--report-cols {column}: .*another name$"):
        parsing.build_config(parsing.parse_args(entrypoints.finetune_parser(), argv))

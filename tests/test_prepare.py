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
        "from mixer.cli.entrypoints import finetune_main\n"
        f"finetune_main(['--dataset', {small_csv!r}, '--target-cols', 'hisco_1', 'hisco_2',"
        f" '--save-path', {str(run)!r}, '--prepare-only'])\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "prepared 109 training and 12 validation rows" in proc.stdout
    for name in ("data_train.parquet", "data_val.parquet", "key.csv", "args.yaml", "prepared.json"):
        assert os.path.exists(run / name)
    train = pd.read_parquet(run / "data_train.parquet")
    assert list(train.columns) == ["text", "lang", "code_1", "code_2", "row"]
    before = os.stat(run / "data_train.parquet").st_mtime_ns
    again = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
    )
    assert "reusing prepared data" in again.stdout
    assert os.stat(run / "data_train.parquet").st_mtime_ns == before
    changed = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "finetune.py"),
            "--dataset",
            small_csv,
            "--target-cols",
            "hisco_1",
            "--save-path",
            str(run),
            "--prepare-only",
        ],
        cwd=ROOT,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
    )
    assert changed.returncode == 2 and "prepared from other input or settings" in changed.stderr


@pytest.mark.parametrize("categorical", [False, True])
def test_labels_of_maps_codes_to_key_indices_and_blanks_to_minus_one(categorical):
    from mixer.data.labels.key import labels_of

    frame = pd.DataFrame(
        {"code_1": ["b", "a", "", "zz", "c"], "code_2": ["", "c", "a", "", "b"], "lang": ["en"] * 5}
    )
    if categorical:  # a prepared split's columns; categories in another order, one unused
        for column in ("code_1", "code_2"):
            frame[column] = pd.Categorical(frame[column], categories=["zz", "c", "", "b", "a", "q"])
        frame.loc[4, "code_1"] = None  # a missing cell
    labels = labels_of(frame, ["a", "b", "c"], 3)
    expected = [
        [1, -1, -1],
        [0, 2, -1],
        [-1, 0, -1],
        [-1, -1, -1],
        [-1 if categorical else 2, 1, -1],
    ]
    assert labels.tolist() == expected and labels.dtype == np.int64


def test_a_token_cache_of_other_prepared_data_is_rebuilt(tmp_path, small_csv):
    """Prepared files removed, changed data of the same row count prepared in their place:
    the token cache built from the old texts must not be used under the new labels."""
    from mixer.data.inputs.token_cache import load, read_manifest

    run = tmp_path / "run"

    def prepare(csv):
        return subprocess.run(
            [
                sys.executable,
                os.path.join(ROOT, "finetune.py"),
                "--dataset",
                csv,
                "--target-cols",
                "hisco_1",
                "--save-path",
                str(run),
                "--prepare-only",
                "--encoder",
                "canine-tiny",
            ],
            cwd=ROOT,
            env=env_for_subprocess(),
            capture_output=True,
            text=True,
        )

    first = prepare(small_csv)
    assert first.returncode == 0, first.stderr
    caches = sorted(p for p in os.listdir(run / "cache") if p.startswith("tokens_train"))
    assert len(caches) == 1
    cache_dir = str(run / "cache" / caches[0])
    old_ids = np.asarray(load(cache_dir).ids).copy()
    upper = tmp_path / "upper.csv"
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    frame["occ1"] = frame["occ1"].str.upper()
    frame.to_csv(upper, index=False)
    for name in ("data_train.parquet", "data_val.parquet", "key.csv", "prepared.json", "args.yaml"):
        os.unlink(run / name)
    second = prepare(str(upper))
    assert second.returncode == 0, second.stderr
    assert (
        "was built from other prepared data" in second.stdout and "rebuilding it" in second.stdout
    )
    texts = pd.read_parquet(run / "data_train.parquet")["text"]
    rebuilt = load(cache_dir)
    assert read_manifest(cache_dir)["rows"] == len(texts)
    first_row = rebuilt.row(0)
    assert "".join(map(chr, first_row[1:-1])) == texts[0] and not np.array_equal(
        rebuilt.ids, old_ids
    )
    # the same data again: the cache is reused, nothing rebuilt
    third = prepare(str(upper))
    assert "tokenising" not in third.stdout and "rebuilding" not in third.stdout


def test_prepare_only_times_its_two_stages_and_can_leave_tokenising_out(
    tmp_path, small_csv, capsys, monkeypatch
):
    import re

    from mixer.cli.parsing import run_main
    from mixer.cli.entrypoints import finetune_main, finetune_parser

    monkeypatch.chdir(tmp_path)
    help_text = " ".join(finetune_parser().format_help().split())
    assert (
        "tokenise the data for --encoder" in help_text
        and "--no-token-cache: the data alone" in help_text
    )
    common = ["--dataset", small_csv, "--target-cols", "hisco_1", "hisco_2", "--prepare-only"]
    # no encoder chosen yet: a name that would be fetched from the hub if it were touched
    assert (
        finetune_main(
            [*common, "--save-path", "plain", "--no-token-cache", "--encoder", "not-chosen/yet"]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert re.search(r"^data prepared in plain in \d+\.\d s \(--prepare-only\)$", out, re.M), out
    assert "token cache" not in out and "fetching" not in err
    assert not os.path.exists(tmp_path / "plain" / "cache")
    assert finetune_main([*common, "--save-path", "tokens", "--encoder", "canine-tiny"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^data prepared in tokens in \d+\.\d s", out, re.M), out
    assert re.search(
        r"^token cache ready in \d+\.\d s \(--prepare-only; --no-token-cache skips it\)$", out, re.M
    ), out
    assert len(os.listdir(tmp_path / "tokens" / "cache")) == 2  # training and validation ids
    with pytest.raises(SystemExit) as exit_info:
        run_main(
            finetune_main,
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "--save-path",
                "train",
                "--no-token-cache",
            ],
        )
    assert exit_info.value.code == 2
    assert "--no-token-cache goes with --prepare-only" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "train")


CONSOLE_SCRIPT = """import re, sys
from mixer.cli.entrypoints import {function}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({function}())
"""  # what pip writes for a [project.scripts] entry


@pytest.mark.parametrize(
    "command,function",
    [
        ("mixer-finetune", "finetune_cli"),
        ("mixer-train", "train_mixer_cli"),
        ("mixer-predict", "predict_cli"),
        ("mixer-evaluate", "evaluate_cli"),
    ],
)
def test_installed_commands_use_their_own_name(tmp_path, command, function):
    script = tmp_path / command
    script.write_text(CONSOLE_SCRIPT.format(function=function))
    shown = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=tmp_path,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0 and shown.stdout.startswith(f"usage: {command} "), shown.stdout[
        :200
    ]
    wrong = subprocess.run(
        [sys.executable, str(script), "--no-such-flag"],
        cwd=tmp_path,
        env=env_for_subprocess(),
        capture_output=True,
        text=True,
    )
    assert (
        wrong.returncode == 2
        and f"{command}: error: " in wrong.stderr
        and ".py" not in wrong.stderr
    )


def _number_tables(tmp_path, frame) -> list:
    """The same table as a Parquet integer column, an .xlsx of number cells and a Stata
    numeric variable."""
    import openpyxl

    parquet, dta, xlsx = tmp_path / "n.parquet", tmp_path / "n.dta", tmp_path / "n.xlsx"
    frame.to_parquet(parquet)
    frame.to_stata(dta, write_index=False, version=118)
    book = openpyxl.Workbook()
    book.active.append(list(frame.columns))
    for row in frame.itertuples(index=False):
        book.active.append(list(row))
    book.save(xlsx)
    return [str(parquet), str(dta), str(xlsx)]


def test_number_codes_get_their_zeros_back_whatever_allow_short_says(tmp_path):
    """Review of issue 27, item 1: a number column cannot carry a leading zero, so its digit
    codes are --block-size digits with short codes allowed too; the hint for -1 (a code
    written shorter) then leads to one class per code, not '1110' beside '01110'. A --key
    stored as numbers is spelled so, and restores the data's zeros."""
    from mixer.core.config import DataConfig
    from mixer.core.errors import UserError
    from mixer.data.prepared.prepare import prepare

    frame = pd.DataFrame(
        {"occ1": ["chemist", "engineer", "farmer", "no title"], "hisco_1": [1110, 2000, 61110, -1]}
    )
    for path in _number_tables(tmp_path, frame):
        cfg = DataConfig(dataset=path, target_cols=["hisco_1"], share_val=0.25)
        with pytest.raises(UserError) as error:
            prepare(cfg, 0, log=lambda _: None)
        assert "hisco_1='-1'" in str(
            error.value
        ) and "--allow-codes-shorter-than-block-size" in str(error.value)
        said = []
        cfg.allow_codes_shorter_than_block_size = True
        prepared = prepare(cfg, 0, log=said.append)
        assert list(prepared.key["code"]) == ["-1", "01110", "02000", "61110"], path
        assert any(
            "2 code(s) without their leading zeros read as 5-digit codes" in line for line in said
        )
    key = tmp_path / "key.xlsx"
    _number_tables(tmp_path, pd.DataFrame({"code": [1110, 2000, 61110, 7110], "description": "x"}))
    os.replace(tmp_path / "n.xlsx", key)
    data = tmp_path / "d.csv"
    data.write_text("occ1,hisco_1\nchemist,1110\nengineer,02000\nfarmer,61110\nsmith,7110\n")
    said = []
    prepared = prepare(
        DataConfig(
            dataset=str(data),
            target_cols=["hisco_1"],
            share_val=0.25,
            key_file=str(key),
            allow_codes_shorter_than_block_size=True,
        ),
        0,
        log=said.append,
    )
    assert list(prepared.key["code"]) == ["01110", "02000", "61110", "07110"]
    assert any(line.startswith(f"--key {key}: code: 3 code(s)") for line in said)

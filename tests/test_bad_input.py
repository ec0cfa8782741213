"""Bad input: exit status 2, one line on stderr naming the problem and the fix,
no traceback, and the run directory exactly as it was."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from conftest import TINY, fails
from mixer.cli.entrypoints import finetune_main, predict_main
from mixer.core.errors import UserError


def write(path, text):
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return str(path)


def ft(data, run, *extra):
    return ["--dataset", data, "--target-cols", "hisco_1", "--save-path", run, *TINY, *extra]


@pytest.fixture
def run_dir(tmp_path):
    """A run directory holding an earlier run's file that must stay untouched."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs.csv").write_text("step,epoch\n1,0\n")
    return str(run)


GOOD = (
    "occ1,hisco_1\nfarmer,61110\nfisher,64100\nclerk,39310\nsmith,83110\nminer,71110\n"
    "weaver,75100\nlabourer,99910\ncarter,98620\ntailor,79100\nbaker,77610\n"
)  # 10 rows


@pytest.mark.parametrize(
    "name,text,needles",
    [
        ("empty.csv", "", ["empty"]),
        ("header.csv", "occ1,hisco_1\n", ["header but no rows"]),
        ("latin1.csv", "occ1,hisco_1\nm\u00e9decin,06110\n".encode("latin-1"), ["not UTF-8"]),
        ("dupe.csv", "occ1,hisco_1,hisco_1\nfarmer,61110,61110\n", ["duplicate column", "hisco_1"]),
        (
            "nocol.csv",
            "text,hisco_1\nfarmer,61110\n",
            ["no column 'occ1'", "--input-col", "text, hisco_1"],
        ),
        ("notarget.csv", "occ1,code\nfarmer,61110\n", ["no column 'hisco_1'", "--target-cols"]),
        (
            "spaced.csv",
            "occ1 ,hisco_1\nfarmer,61110\n",
            [
                "the file has: 'occ1 ', hisco_1; the file's 'occ1 ' "
                "differs by spaces: pass --input-col 'occ1 '"
            ],
        ),
        ("emptytext.csv", GOOD + ",61110\n", ["empty text", "rows 11"]),
        # characters that show nothing are no text to learn from (issue 50): blank, as "" is
        (
            "invisible.csv",
            GOOD + "\u200b,61110\n\ufeff\u2060,61110\n\u00a0\u3000,99910\n",
            ["empty text", "rows 11, 12, 13"],
        ),
        (
            "long.csv",
            GOOD + "weaver,751100\n",
            ["row 11 hisco_1='751100'", "longer than --block-size 5"],
        ),
        (
            "short.csv",
            GOOD + "gardener,6210\n",
            ["row 11 hisco_1='6210'", "shorter", "--allow-codes-shorter"],
        ),
        (
            "several.csv",
            GOOD + "farmer and fisher,61110 64100\n",
            ["row 11", "one code per target column"],
        ),
        ("nocode.csv", GOOD + "gardener,\n", ["no code in any target column (rows 11)"]),
    ],
)
def test_bad_dataset(capsys, tmp_path, run_dir, name, text, needles):
    data = write(tmp_path / name, text)
    fails(capsys, "finetune", ft(data, run_dir), data, *needles, watch=run_dir)


def test_missing_file_and_directory(capsys, tmp_path, run_dir):
    fails(capsys, "finetune", ft(tmp_path / "nope.csv", run_dir), "no such file", watch=run_dir)
    fails(capsys, "finetune", ft(tmp_path, run_dir), "is a directory", watch=run_dir)


def test_nan_text_in_parquet(capsys, tmp_path, run_dir):
    path = str(tmp_path / "nan.parquet")
    pd.DataFrame(
        {
            "occ1": ["farmer", None, "clerk", "smith", "fisher"],
            "hisco_1": ["61110", "64100", "39310", "83110", "64100"],
        }
    ).to_parquet(path)
    fails(capsys, "finetune", ft(path, run_dir), "empty text", "rows 2", watch=run_dir)


def test_characters_outside_a_built_in_code_system(capsys, tmp_path, run_dir):
    data = write(tmp_path / "t.csv", "occ1,hisco_1\nfarmer,61110\nfisher,6A100\n")
    fails(
        capsys,
        "train",
        [
            "--train-data",
            data,
            "--val-data",
            data,
            "--save-dir",
            run_dir,
            "--num-target-cols",
            "1",
            *TINY,
        ],
        "row 2 hisco_1='6A100'",
        "not a HISCO code",
        watch=run_dir,
    )


@pytest.mark.parametrize(
    "extra,needles",
    [
        (["--share-val", "1.5"], ["--share-val", "strictly between 0 and 1"]),
        (["--share-val", "0"], ["--share-val"]),
        (["--share-val", "0.01"], ["--share-val 0.01 of 10 rows", "0 validation"]),
        (["--batch-size", "0"], ["--batch-size", "must be 1 or more"]),
        (["--batch-size", "eight"], ["--batch-size", "expected a whole number"]),
        (["--learning-rate", "fast"], ["--learning-rate", "expected a number"]),
        (["--language", "en", "--language-col", "lang"], ["--language and --language-col"]),
        (["--only-encoder"], ["--only-encoder needs --initial-checkpoint"]),
        (
            ["--early-stopping-patience", "3"],
            ["--early-stopping-patience", "pass --keep-best METRIC too"],
        ),
        (
            ["--keep-best", "accuracy"],
            ["--keep-best", "invalid choice: 'accuracy'", "val_flat_accuracy"],
        ),
        (
            ["--keep-best", "val_noisy_flat_accuracy", "--no-eval-noise"],
            ["--keep-best val_noisy_flat_accuracy", "noised validation copy", "--eval-noise 2"],
        ),
    ],
)
def test_bad_flags(capsys, tmp_path, run_dir, extra, needles):
    data = write(tmp_path / "good.csv", GOOD)
    fails(capsys, "finetune", ft(data, run_dir, *extra), *needles, watch=run_dir)


def test_save_path_that_is_a_file(capsys, tmp_path):
    data = write(tmp_path / "good.csv", GOOD)
    target = tmp_path / "file.txt"
    target.write_text("keep me")
    fails(capsys, "finetune", ft(data, target), "is a file")
    assert target.read_text() == "keep me"


def test_initial_checkpoint_missing_or_truncated(capsys, tmp_path, run_dir):
    data = write(tmp_path / "good.csv", GOOD)
    fails(
        capsys,
        "finetune",
        ft(data, run_dir, "--initial-checkpoint", tmp_path / "none"),
        "no such file",
        watch=run_dir,
    )
    truncated = tmp_path / "last.pt"
    truncated.write_bytes(b"PK\x03\x04 truncated")
    fails(
        capsys,
        "finetune",
        ft(data, run_dir, "--initial-checkpoint", truncated),
        "not a complete checkpoint",
        watch=run_dir,
    )


def test_codes_the_starting_decoder_cannot_write_are_named(capsys, tmp_path, small_csv):
    """A whole-model start keeps the earlier run's decoder: codes with characters it
    has no token for need new heads (new codes it can write only extend the key)."""
    earlier = str(tmp_path / "earlier")
    assert (
        finetune_main(
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "hisco_2",
                "--save-path",
                earlier,
                "--max-steps",
                "1",
                *TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    data = write(tmp_path / "letters.csv", "occ1,code\nfarmer,AB123\nfisher,CD456\nsmith,AB123\n")
    run = str(tmp_path / "new")
    fails(
        capsys,
        "finetune",
        [
            "--dataset",
            data,
            "--target-cols",
            "code",
            "--save-path",
            run,
            "--initial-checkpoint",
            earlier,
            "--share-val",
            "0.4",
            *TINY,
        ],
        "cannot write",
        "--only-encoder",
    )
    assert not os.path.exists(run)


def test_predict_with_a_run_directory_lacking_files(capsys, tmp_path):
    data = write(tmp_path / "good.csv", GOOD)
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    fails(
        capsys,
        "predict",
        ["--checkpoint", empty_run, "--input", data, "--output", tmp_path / "out.csv"],
        "model.safetensors is written at the end",
    )
    (empty_run / "last.pt").write_bytes(b"unfinished")  # a run that has not finished
    fails(
        capsys,
        "predict",
        ["--checkpoint", empty_run, "--input", data, "--output", tmp_path / "out.csv"],
        "lacks model.safetensors",
    )
    fails(
        capsys,
        "predict",
        ["--checkpoint", tmp_path / "nothing", "--input", data, "--output", tmp_path / "out.csv"],
        "no such run directory or model file",
    )


def test_predict_output_in_a_missing_directory_and_missing_column(capsys, tmp_path, small_csv):
    run = str(tmp_path / "run")
    assert (
        finetune_main(
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "--save-path",
                run,
                "--max-steps",
                "1",
                *TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    fails(
        capsys,
        "predict",
        [
            "--checkpoint",
            run,
            "--input",
            small_csv,
            "--output",
            tmp_path / "no" / "such" / "out.csv",
        ],
        "does not exist",
        "create it",
    )
    fails(
        capsys,
        "predict",
        [
            "--checkpoint",
            run,
            "--input",
            small_csv,
            "--output",
            tmp_path / "out.csv",
            "--input-col",
            "job",
        ],
        "no column 'job'",
    )
    assert not os.path.exists(tmp_path / "out.csv")
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]


@pytest.mark.parametrize("source", ["runs/quickstrat", "./x", "../x", "~/x", "/abs/x", "x"])
def test_a_missing_local_path_is_named_and_never_fetched(capsys, tmp_path, monkeypatch, source):
    """A source is a hub id only when it cannot be a path: with runs/ on disk,
    runs/quickstrat is a mistyped run directory, not a repository to download."""
    import huggingface_hub

    def no_download(*args, **kwargs):
        raise AssertionError(f"{source} went to the hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    data = write(tmp_path / "good.csv", GOOD)
    line = fails(
        capsys,
        "predict",
        ["--checkpoint", source, "--input", data, "--output", tmp_path / "out.csv"],
        f"--checkpoint {source}: no such",
    )
    if source == "runs/quickstrat":
        assert "runs/ exists, so this is a local path, not a Hugging Face model id" in line
    fails(
        capsys,
        "finetune",
        ft(data, "run", "--initial-checkpoint", source),
        f"--initial-checkpoint {source}: no such",
        watch=str(tmp_path / "runs"),
    )
    if "/" in source:
        fails(
            capsys,
            "finetune",
            ft(data, "run2", "--encoder", source),
            f"--encoder {source}: no such model directory",
        )
    for written in ("run", "run2", "out.csv"):  # refused before any data was prepared
        assert not os.path.exists(tmp_path / written)


def test_an_owner_name_source_is_a_hub_id_said_before_the_fetch(capsys, tmp_path, monkeypatch):
    import huggingface_hub

    said_before = []

    def offline(repo_id, **kwargs):  # what was printed before the download began
        said_before.append((repo_id, capsys.readouterr().err))
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()  # another directory does not make owner/name a path
    data = write(tmp_path / "good.csv", GOOD)
    fails(
        capsys,
        "predict",
        ["--checkpoint", "someone/occ-model", "--input", data, "--output", tmp_path / "out.csv"],
        "someone/occ-model: not in the Hugging Face cache",
    )
    assert said_before == [("someone/occ-model", "fetching Hugging Face model someone/occ-model\n")]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--target-confidence", "0.99"], "--target-confidence works with --target-accuracy"),
        (["--shorter-codes"], "--shorter-codes works with --target-accuracy"),
        (
            ["--target-accuracy", "0.9", "--code-levels", "1", "2"],
            "--code-levels works with --shorter-codes",
        ),
        (
            ["--calibration-data", "x.csv"],
            "--calibration-data works with --target-accuracy or --calibrate",
        ),
        (
            ["--calibration-truth-cols", "hisco_1"],
            "--calibration-truth-cols works with --calibration-data",
        ),
        (["--lookup-input-col", "occ1"], "--lookup-input-col works with --lookup"),
        (["--lookup-code-cols", "hisco_1"], "--lookup-code-cols works with --lookup"),
    ],
)
def test_an_option_that_acts_only_beside_another_is_refused_alone(flags, named, tmp_path):
    """Review of issue 37: these were accepted and silently ignored. Refused in one line
    before any model loads (the checkpoint here does not exist)."""
    with pytest.raises(UserError, match=named):
        predict_main(
            [
                "--checkpoint",
                str(tmp_path / "none"),
                "--input",
                "in.csv",
                "--output",
                "out.csv",
                *flags,
            ]
        )

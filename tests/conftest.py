"""Shared fixtures: small real data, tiny models, helpers to run the programs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One thread per process, in the pytest workers (tests that train in-process) as in the
# programs they start: the suite runs in 2 workers on 2 cores, and torch's own default (a
# thread per core in each worker) would put 4 busy threads on 2 cores. Set before any
# test module imports torch; a value the caller set wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
TOY = os.path.join(ROOT, "data", "toy_hisco.csv")

# A tiny model and a short schedule: a run takes a few seconds on 2 cores.
TINY = ["--encoder", "canine-tiny", "--decoder-dim", "32", "--decoder-layers", "1",
        "--decoder-heads", "2", "--max-len", "48", "--log-interval", "5"]


# Floats computed two ways (another batch, padding, chunk, number of processes or threads, or
# another CPU's kernels) round differently: float32 keeps 24 bits, so one rounding is at most
# 6e-8 of a value and a few roundings apart is rtol 1e-6; atol 1e-7 is for values near 0,
# whose rounding is that of the larger terms they were computed from. One tolerance for the
# suite (docs/tests.md); the tests that use it are marked `floats`.
FLOATS = dict(rtol=1e-6, atol=1e-7)
# Weights trained for a few steps in two layouts (processes, batch splits, length groups, a
# resume in another layout) drift further: each step starts from the last one's rounding, and
# Adam scales every update by its gradient's own size, so a few ulps of a small gradient move a
# weight by more. docs/distributed.md promises weights within 1e-5 after such short runs; their
# validation metrics (a loss near 6, sums over rows) within 2e-5.
TRAINED_WEIGHTS_ATOL, TRAINED_METRICS_ATOL = 1e-5, 2e-5
# The float columns of a prediction table or an audit; every other column is exact.
FLOAT_COLUMN = re.compile(r"(\w+_)?(prob(_\d+)?|conf(idence)?(_raw)?|level_confidence_\d+)")


def assert_floats_close(actual, expected, err_msg: str = "") -> None:
    """Floats computed two ways, within FLOATS (NaN where the other has NaN)."""
    np.testing.assert_allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float),
                               err_msg=err_msg, **FLOATS)


def assert_same_predictions(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Two prediction tables (or audits) computed in different batches: the codes, rows, ids
    and their order exactly, the probabilities within FLOATS. Read from a file as text or
    returned by the API alike."""
    assert list(actual.columns) == list(expected.columns)
    floats = [c for c in expected.columns if FLOAT_COLUMN.fullmatch(str(c))]
    pd.testing.assert_frame_equal(actual.drop(columns=floats), expected.drop(columns=floats), check_exact=True)
    for column in floats:
        assert_floats_close(pd.to_numeric(actual[column].replace("", np.nan)),
                            pd.to_numeric(expected[column].replace("", np.nan)), err_msg=column)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The whole suite (no paths given) runs in 2 pytest-xdist workers, one test file each
    at a time: most of a test's time is a subprocess starting Python, torch and
    transformers, so 2 cores run two. Paths given, -n given, --pdb, -p no:xdist or no
    xdist installed: one process, as pytest would."""
    if (not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput")
            or config.args_source != pytest.Config.ArgsSource.TESTPATHS
            or config.option.numprocesses is not None or config.option.dist != "no"
            or config.getoption("usepdb") or config.getoption("collectonly")):
        return
    config.option.numprocesses, config.option.dist, config.option.tx = 2, "loadfile", ["popen"] * 2


def env_for_subprocess() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_program(script: str, *args, timeout: int = 300, check: bool = True, env=None):
    """Run one of the entry points as a user would; returns the CompletedProcess."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env or env_for_subprocess())
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def toy_frame() -> pd.DataFrame:
    return pd.read_csv(TOY, dtype=str, keep_default_na=False)


@pytest.fixture(scope="session")
def small_csv(tmp_path_factory, toy_frame) -> str:
    """121 real rows (an odd validation set of 11 with --share-val 0.09), two code columns:
    some rows carry a second code."""
    frame = toy_frame[toy_frame["hisco_1"].str.len() == 5].head(121).copy()
    frame["hisco_2"] = ""
    frame.loc[frame.index[::7], "hisco_2"] = "99910"
    frame.loc[frame["hisco_1"] == "99910", "hisco_2"] = ""
    path = tmp_path_factory.mktemp("data") / "small.csv"
    frame.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="session")
def tiny_two_code_run(tmp_path_factory, small_csv) -> str:
    """A tiny run of two code slots, 8 steps: the model prediction tests share (its codes
    matter less than that it predicts)."""
    from mixer.cli.entrypoints import finetune_main

    out = tmp_path_factory.mktemp("tiny_two_code") / "run"
    assert finetune_main(["--dataset", small_csv, "--target-cols", "hisco_1", "hisco_2", "--save-path", str(out),
                          "--share-val", "0.1", *TINY, "--max-steps", "8", "--batch-size", "16"]) == 0
    return str(out)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> str:
    """A BERT-like model and tokenizer saved with save_pretrained: no network."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    directory = tmp_path_factory.mktemp("tiny-bert")
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *("##" + c for c in letters)]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(directory / "vocab.txt"))
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def run_without(modules, script: str, *args, timeout: int = 300, check: bool = True):
    """Run an entry point as if the packages of `modules` were not installed: each is
    set to None in sys.modules before anything imports it, so `import x` raises
    ImportError and importlib.util.find_spec('x') says it is absent."""
    blocked = "".join(f"sys.modules[{name!r}] = None; " for name in modules)
    code = (f"import runpy, sys; {blocked}sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env_for_subprocess())
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc

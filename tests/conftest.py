"""Shared fixtures and helpers, the one module every test file imports them from: small real
data, tiny models, helpers to run the programs (one process or torchrun) and compare their
results. A test file never imports another test file (tests/test_architecture.py holds it)."""

from __future__ import annotations

import os
import re
import shutil
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
TINY = [
    "--encoder",
    "canine-tiny",
    "--decoder-dim",
    "32",
    "--decoder-layers",
    "1",
    "--decoder-heads",
    "2",
    "--max-len",
    "48",
    "--log-interval",
    "5",
]


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
    np.testing.assert_allclose(
        np.asarray(actual, dtype=float),
        np.asarray(expected, dtype=float),
        err_msg=err_msg,
        **FLOATS,
    )


def assert_same_predictions(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Two prediction tables (or audits) computed in different batches: the codes, rows, ids
    and their order exactly, the probabilities within FLOATS. Read from a file as text or
    returned by the API alike."""
    assert list(actual.columns) == list(expected.columns)
    floats = [c for c in expected.columns if FLOAT_COLUMN.fullmatch(str(c))]
    pd.testing.assert_frame_equal(
        actual.drop(columns=floats), expected.drop(columns=floats), check_exact=True
    )
    for column in floats:
        assert_floats_close(
            pd.to_numeric(actual[column].replace("", np.nan)),
            pd.to_numeric(expected[column].replace("", np.nan)),
            err_msg=column,
        )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The whole suite (no paths given) runs in 2 pytest-xdist workers, one test file each
    at a time: most of a test's time is a subprocess starting Python, torch and
    transformers, so 2 cores run two. Paths given, -n given, --pdb, -p no:xdist or no
    xdist installed: one process, as pytest would."""
    if (
        not config.pluginmanager.hasplugin("xdist")
        or hasattr(config, "workerinput")
        or config.args_source != pytest.Config.ArgsSource.TESTPATHS
        or config.option.numprocesses is not None
        or config.option.dist != "no"
        or config.getoption("usepdb")
        or config.getoption("collectonly")
    ):
        return
    config.option.numprocesses, config.option.dist, config.option.tx = 2, "loadfile", ["popen"] * 2


def env_for_subprocess() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def predict_argv(run, source, out, *extra) -> list:
    """predict.py's arguments: the model, the input, the output, then `extra` (as text)."""
    return ["--checkpoint", str(run), "--input", str(source), "--output", str(out)] + [
        str(value) for value in extra
    ]


def run_program(script: str, *args, timeout: int = 300, check: bool = True, env=None):
    """Run one of the entry points as a user would; returns the CompletedProcess."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env or env_for_subprocess(),
    )
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


def zipf_census(tmp_path_factory, small_csv, rows: int, seed: int, blank_every: int) -> str:
    """A census-like file: `rows` rows drawn from small_csv's 121 descriptions by a Zipf law
    (a few drawn often), every `blank_every`-th without a description."""
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(frame) + 1) ** 1.1
    drawn = frame.iloc[rng.choice(len(frame), rows, p=weights / weights.sum())]
    drawn = drawn.reset_index(drop=True)
    drawn.loc[::blank_every, "occ1"] = ""
    path = tmp_path_factory.mktemp("census") / "census.csv"
    drawn.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="session")
def tiny_two_code_run(tmp_path_factory, small_csv) -> str:
    """A tiny run of two code slots, 8 steps: the model prediction tests share (its codes
    matter less than that it predicts)."""
    from mixer.cli.entrypoints import finetune_main

    out = tmp_path_factory.mktemp("tiny_two_code") / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "hisco_2",
                "--save-path",
                str(out),
                "--share-val",
                "0.1",
                *TINY,
                "--max-steps",
                "8",
                "--batch-size",
                "16",
            ]
        )
        == 0
    )
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
    model = BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def run_without(modules, script: str, *args, timeout: int = 300, check: bool = True):
    """Run an entry point as if the packages of `modules` were not installed: each is
    set to None in sys.modules before anything imports it, so `import x` raises
    ImportError and importlib.util.find_spec('x') says it is absent."""
    blocked = "".join(f"sys.modules[{name!r}] = None; " for name in modules)
    code = (
        f"import runpy, sys; {blocked}sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, os.path.join(ROOT, script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env_for_subprocess(),
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# ------------------------------------------------------------------ launches, and runs compared
# Shared by the test files that launch programs under torchrun or compare two runs' results.
def torchrun_cmd(nproc: int, *launcher_args) -> list:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        *launcher_args,
    ]


def run(cmd, timeout=300, check=True, env=None):
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env or env_for_subprocess(),
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# Runs a program with every all-gather refused: what only rank 0 uses (evaluation rows,
# prediction chunks and embeddings, RNG states, setup reports) is gathered to rank 0 alone.
RANK0_GATHERS = """
import runpy, sys
import torch.distributed as dist

def refused(*args, **kwargs):
    raise AssertionError("all_gather_object: every rank would receive every rank's data")

dist.all_gather_object = refused
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def rank0_gathers_cmd(nproc: int, script: str) -> list:
    """torchrun of one of the programs, on one node, with all-gathers refused."""
    return torchrun_cmd(nproc, "--standalone") + [
        "--no-python",
        sys.executable,
        "-c",
        RANK0_GATHERS,
        os.path.join(ROOT, script),
    ]


def start(cmd, env=None) -> subprocess.Popen:
    """A program left running, its output read line by line (wait_for_line)."""
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env or env_for_subprocess(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def wait_for_line(proc, prefix: str) -> list:
    """Read the process's output until a line starts with prefix (the run is training)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return seen
    raise AssertionError("".join(seen))


def children(pid: int) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def weights(run_dir):
    from safetensors.torch import load_file

    return load_file(os.path.join(run_dir, "model.safetensors"))


def max_difference(a, b) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def val_metrics(run_dir) -> pd.DataFrame:
    table = pd.read_csv(os.path.join(run_dir, "logs.csv"))
    return table[[c for c in table.columns if c.startswith("val_")] + ["step"]]


def assert_same_metrics(a, b):
    left, right = val_metrics(a), val_metrics(b)
    assert list(left.columns) == list(right.columns)
    assert len(left) == len(right) == 2
    assert left["val_rows"].tolist() == right["val_rows"].tolist() == [11, 11]  # every row once
    np.testing.assert_allclose(
        left.to_numpy(float), right.to_numpy(float), atol=TRAINED_METRICS_ATOL, rtol=0
    )


# ------------------------------------------------------------------ bad input
def snapshot(directory) -> dict:
    """Every file under a directory with its size and mtime."""
    out = {}
    if not os.path.exists(directory):
        return out
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            stat = os.stat(path)
            out[path] = (stat.st_size, stat.st_mtime_ns)
    return out


def fails(capsys, program, argv, *needles, watch=None):
    """Run a program in-process on bad input: exit status 2, one line on stderr holding each
    needle, no traceback, and `watch` (a directory) exactly as it was. Returns the line."""
    from mixer.cli.entrypoints import evaluate_main, finetune_main, predict_main, train_mixer_main
    from mixer.cli.parsing import run_main

    main = {
        "finetune": finetune_main,
        "train": train_mixer_main,
        "predict": predict_main,
        "evaluate": evaluate_main,
    }[program]
    before = snapshot(watch) if watch else None
    with pytest.raises(SystemExit) as exit_info:
        run_main(main, [str(a) for a in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert str(needle) in lines[0], lines[0]
    if watch:
        assert snapshot(watch) == before, "the run directory changed"
    return lines[0]


# ------------------------------------------------------------------ files and audits
def write_xlsx(path, rows, sheet="data", before=None, formats_by_cell=None):
    """rows[0] is the header; cells keep their Python types (str stays text)."""
    import openpyxl  # requirements.txt installs it (the extra mixer[excel])

    book = openpyxl.Workbook()
    book.remove(book.active)
    if before:
        book.create_sheet(before)
    sheet_ = book.create_sheet(sheet)
    for row in rows:
        sheet_.append(row)
    for (row, column), number_format in (formats_by_cell or {}).items():
        sheet_.cell(row=row, column=column).number_format = number_format
    book.save(path)
    return str(path)


def bottom_k(keys: np.ndarray, k: int) -> np.ndarray:
    """The positions of the k smallest keys, smallest first: what an audit of k rows draws."""
    if k >= len(keys):
        return np.argsort(keys)
    smallest = np.argpartition(keys, k)[:k]
    return smallest[np.argsort(keys[smallest])]


# ------------------------------------------------------------------ a run that chooses which predictions to use
# Module-scoped: each test file that asks for them trains its own (docs/coding.md's tests).
@pytest.fixture(scope="module")
def common_csv(tmp_path_factory, toy_frame) -> str:
    """240 rows of the example data's 40 most common titles, 6 each (a tiny model learns
    them in seconds), a second code on the titles with 'and'."""
    frame = toy_frame[toy_frame["hisco_1"].str.len() == 5]
    common = frame["occ1"].value_counts().head(40).index
    frame = (
        frame[frame["occ1"].isin(common)]
        .groupby("occ1")
        .head(6)
        .sample(frac=1, random_state=1)
        .copy()
    )
    frame["hisco_2"] = np.where(frame["occ1"].str.contains(" and "), "99910", "")
    path = tmp_path_factory.mktemp("common") / "common.csv"
    frame.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, common_csv):
    """A tiny run of two code slots, as training leaves it (calibrated at its end)."""
    from mixer.cli.entrypoints import finetune_main

    run = tmp_path_factory.mktemp("coding") / "trained"
    assert (
        finetune_main(
            [
                "--dataset",
                common_csv,
                "--target-cols",
                "hisco_1",
                "hisco_2",
                "--save-path",
                str(run),
                "--share-val",
                "0.4",
                *TINY,
                "--max-steps",
                "60",
                "--batch-size",
                "16",
                "--seed",
                "4",  # its most confident held-out rows are right, as these tests need
                "--learning-rate",
                "5e-3",
                # the encoder's confidences alone: the n-gram head (tests/test_ngram_head.py)
                # codes these 121 rows nearly all right, leaving no threshold to choose
                "--no-ngram-head",
            ]
        )
        == 0
    )
    return str(run)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, trained):
    """The run without its calibration (as a run of an earlier version, or an OccCANINE
    model, is), with a scores.parquet whose first 5 validation rows chose something and the
    others nothing (docs/coding.md)."""
    run = tmp_path_factory.mktemp("coding") / "run"
    shutil.copytree(trained, run)
    os.remove(run / "calibration.json")
    write_scores(run, chose=5)
    return str(run)


def write_scores(run, chose: int) -> pd.DataFrame:
    """scores.parquet's documented columns, from the run's validation rows."""
    val = pd.read_parquet(os.path.join(run, "data_val.parquet"))
    truth = [
        " & ".join(sorted({str(c) for c in row if isinstance(c, str) and c}))
        for row in val[["code_1", "code_2"]].astype(object).to_numpy()
    ]
    scores = pd.DataFrame(
        {
            "row": np.arange(len(val)),
            "split": "val",
            "lang": val["lang"].astype(str),
            "text": val["text"].astype(str),
            "chose": np.arange(len(val)) < chose,
            "true_codes": truth,
        }
    )
    scores.to_parquet(os.path.join(run, "scores.parquet"), index=False)
    return scores


@pytest.fixture
def model_rows(monkeypatch) -> list:
    """How many inputs the model computed, over every call of its encoder (a list of each
    call's count; sum it)."""
    from mixer.prediction.predict import Predictor

    counted = []
    encoded = Predictor._encoded

    def counting(self, texts, *args, **kwargs):
        counted.append(len(texts))
        return encoded(self, texts, *args, **kwargs)

    monkeypatch.setattr(Predictor, "_encoded", counting)
    return counted


# ------------------------------------------------------------------ OccCANINE's architecture at toy size
@pytest.fixture(scope="module")
def hisco_model(tmp_path_factory):
    """A HISCO model in the hub layout and as a training checkpoint, and its reference
    (tests/occcanine_reference.py)."""
    from occcanine_reference import save_hisco_model

    return save_hisco_model(tmp_path_factory.mktemp("occcanine"))


# ------------------------------------------------------------------ IPUMS fixed-width extracts
def write_ipums_extract(
    data_path,
    variables: list,
    rows: list,
    structure: str = "rectangular",
    charset: str = "ISO-8859-1",
    xml_path=None,
) -> str:
    """An IPUMS fixed-width extract as IPUMS delivers one: `data_path` (.dat, or .dat.gz
    compressed) and its DDI codebook (DDI-Codebook 2.5, as ipumspy reads it) at `xml_path`, by
    default the .xml of its name beside it. `variables`: (name, width, kind, decimals, value
    labels) with kind "numeric" or "character"; `rows`: one tuple of values per record (None:
    blank). Numbers are written zero-padded to their width, with their implied decimals
    (12.5 with 2 decimals is 01250), text left-aligned padded with spaces. Returns the .xml's path."""
    import gzip
    from xml.sax.saxutils import escape, quoteattr

    data_path = str(data_path)
    lines = []
    for row in rows:
        cells = []
        for (name, width, kind, decimals, _), value in zip(variables, row):
            if value is None:
                cell = " " * width
            elif kind == "numeric":
                cell = str(int(round(value * 10**decimals))).zfill(width)
            else:
                cell = str(value).ljust(width)
            assert len(cell) == width, (name, value)
            cells.append(cell)
        lines.append("".join(cells) + "\n")
    body = "".join(lines).encode(charset)
    if data_path.endswith(".gz"):
        with gzip.open(data_path, "wb") as handle:
            handle.write(body)
    else:
        with open(data_path, "wb") as handle:
            handle.write(body)
    name = os.path.basename(data_path[: -len(".gz")] if data_path.endswith(".gz") else data_path)
    groups = (
        '<recGrp rectype="H" recidvar="RECTYPE" keyvar="SERIAL"><labl>Household</labl></recGrp>'
        '<recGrp rectype="P" recidvar="RECTYPE" keyvar="SERIAL"><labl>Person</labl></recGrp>'
        if structure == "hierarchical"
        else ""
    )
    described, start = [], 1
    for name_, width, kind, decimals, labels in variables:
        categories = "".join(
            f"<catgry><catValu>{escape(str(value))}</catValu><labl>{escape(label)}</labl></catgry>"
            for value, label in (labels or {}).items()
        )
        dcml = f' dcml="{decimals}"' if kind == "numeric" else ""
        described.append(
            f'<var ID={quoteattr(name_)} files="F1" name={quoteattr(name_)} intrvl="discrete"{dcml}>'
            f'<location StartPos="{start}" EndPos="{start + width - 1}" width="{width}" '
            f'fileid="F1"/><labl>{escape(name_.title())}</labl><txt>{escape(name_)}</txt>'
            f"{categories}<concept>Test</concept>"
            f'<varFormat type="{kind}" schema="other"/></var>'
        )
        start += width
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<codeBook xmlns="ddi:codebook:2_5" version="2.5" ID="test_extract">'
        '<stdyDscr><citation><serStmt><serName abbr="USA">IPUMS USA</serName>'
        "<serInfo>https://doi.org/10.18128/D010.V0</serInfo></serStmt></citation>"
        "<stdyInfo><notes>us1900a: 1900 1%</notes></stdyInfo>"
        "<dataAccs><useStmt><citReq>A test codebook.</citReq>"
        "<conditions>None: made by a test.</conditions></useStmt></dataAccs></stdyDscr>"
        f'<fileDscr ID="F1" URI="{escape(name)}"><fileTxt><fileName>{escape(name)}</fileName>'
        f'<fileCont>A test extract</fileCont><fileStrc type="{structure}">{groups}</fileStrc>'
        f'<fileType charset="{charset}">ascii</fileType><format>fixed length fields</format>'
        "<filePlac>Minneapolis, MN: IPUMS</filePlac></fileTxt></fileDscr>"
        f"<dataDscr>{''.join(described)}</dataDscr></codeBook>\n"
    )
    if xml_path is None:
        xml_path = os.path.join(os.path.dirname(data_path), name[: -len(".dat")] + ".xml")
    with open(xml_path, "w", encoding="utf-8") as handle:
        handle.write(xml)
    return str(xml_path)

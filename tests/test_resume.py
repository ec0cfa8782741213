"""A killed prediction resumes for every output kind, in one process and under torchrun
(issue 43; docs/predicting.md, "A killed prediction"): the final file byte-identical to an
uninterrupted run's, at most one chunk redone."""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import env_for_subprocess, fails, predict_argv, ROOT, run_program, write_xlsx

FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"  # mixer.prediction.resume: "k" is a kill -9 after chunk k
STAMP = "1700000000"  # SOURCE_DATE_EPOCH: the time an Excel or Stata file states, fixed across runs


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture(scope="module")
def census(tmp_path_factory, small_csv) -> str:
    """600 rows drawn from 121 descriptions (a few drawn often, as in a census), with a
    number column and rows without a description: 7 chunks of 90."""
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, len(frame) + 1) ** 1.1
    rows = frame.iloc[rng.choice(len(frame), 600, p=weights / weights.sum())].reset_index(drop=True)
    rows.loc[::53, "occ1"] = ""
    rows["year"] = 1850 + np.arange(600) % 40
    path = tmp_path_factory.mktemp("census") / "census.csv"
    rows.to_csv(path, index=False)
    return str(path)


def predict_cmd(run, census, out, *extra) -> list:
    return predict_argv(run, census, out, "--chunk-size", 90, *extra)


def same_name(tmp_path, name: str, *folders) -> list:
    """Outputs of one name in folders of their own: a file's provenance (which Parquet and
    Stata files carry) names the output."""
    paths = []
    for folder in folders:
        (tmp_path / folder).mkdir()
        paths.append(tmp_path / folder / name)
    return paths


def env(**values) -> dict:
    environment = env_for_subprocess()
    environment.pop("SOURCE_DATE_EPOCH", None)
    environment.update(values)
    return environment


# ------------------------------------------------------------------ every output kind
@pytest.mark.parametrize(
    "suffix, extra, fault, done",
    [
        (
            "parquet",
            ["--head", "flat", "seq2seq"],
            "3",
            3,
        ),  # a kill -9 after chunk 3's rows, before its entry
        ("xlsx", [], "1:TERM", 2),  # a scheduler's SIGTERM: chunk 1 kept, exit 0
        ("dta", ["--head", "flat", "seq2seq"], "3", 3),
        ("npy", ["--what", "probs", "--head", "flat"], "1:TERM", 2),
    ],
)
def test_every_output_kind_killed_resumes_to_the_bytes_of_an_uninterrupted_run(
    run, census, tmp_path, suffix, extra, fault, done, monkeypatch, capsys
):
    from mixer.cli.entrypoints import predict_main

    whole, cut = same_name(tmp_path, f"out.{suffix}", "whole", "cut")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", STAMP)
    assert predict_main(predict_cmd(run, census, whole, *extra)) == 0
    killed = run_program(
        "predict.py",
        *predict_cmd(run, census, cut, *extra),
        check=False,
        env=env(SOURCE_DATE_EPOCH=STAMP, **{FAULT: fault}),
    )
    assert killed.returncode == (0 if "TERM" in fault else 9), killed.stderr
    assert not cut.exists()
    # run again without the fixed time: an Excel or Stata file states the first run's (the journal's)
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    capsys.readouterr()
    assert predict_main(predict_cmd(run, census, cut, *extra)) == 0
    assert (
        f"continuing an unfinished run after its {done} chunk(s) ({90 * done} rows"
        in capsys.readouterr().out
    )
    assert cut.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in cut.parent.iterdir()) == [cut.name, cut.name + ".provenance.json"]


def test_a_file_written_through_parts_is_the_file_written_directly(tmp_path):
    """What a resumable job writes (each chunk kept as a part, the file written from the parts
    read back; resumed after any chunk) is byte for byte what the writer writes without parts:
    Parquet keeps its layout (a row group per chunk), Excel and Stata their cells."""
    from mixer.data.tables.writing import OutputWriter

    rng = np.random.default_rng(0)
    chunks = [
        pd.DataFrame(
            {
                "occ1": [f"farmer {i}" for i in range(start, start + 40)],
                "birth year": np.arange(start, start + 40),
                "prob_1": rng.random(40),
                "code_1": ["61110"] * 39 + [""],
            }
        )
        for start in range(0, 120, 40)
    ]
    inputs = ["occ1", "birth year"]  # Stata names the second birth_year, labelled with its name
    for suffix in ("parquet", "xlsx", "dta", "csv"):
        direct = OutputWriter(
            str(tmp_path / f"direct.{suffix}"), label="made by a test", stamp=1.7e9
        )
        for chunk in chunks:
            direct.write(chunk[["prob_1", "code_1"]], inputs=chunk[inputs])
        direct.commit()
        expected = (tmp_path / f"direct.{suffix}").read_bytes()
        for kept in range(len(chunks) + 1):  # a job that stopped after `kept` chunks, continued
            parts = tmp_path / f"parts-{suffix}-{kept}"
            parts.mkdir()
            out = tmp_path / f"resumed-{kept}.{suffix}"
            first = OutputWriter(
                str(out),
                label="made by a test",
                tmp=str(parts / f"output.{suffix}"),
                parts=str(parts),
                stamp=1.7e9,
            )
            for chunk in chunks[:kept]:
                first.write(chunk[["prob_1", "code_1"]], inputs=chunk[inputs])
            first.close()
            resumed = OutputWriter(
                str(out),
                label="made by a test",
                tmp=str(parts / f"output.{suffix}"),
                parts=str(parts),
                stamp=1.7e9,
            )
            resumed.resume(kept, 40 * kept)
            for chunk in chunks[kept:]:
                resumed.write(chunk[["prob_1", "code_1"]], inputs=chunk[inputs])
            resumed.commit()
            assert out.read_bytes() == expected, (suffix, kept)
    import pyarrow.parquet as pq

    assert pq.ParquetFile(tmp_path / "direct.parquet").metadata.num_row_groups == 3


def test_excel_and_stata_files_state_the_time_given_not_the_clock_s(tmp_path, monkeypatch):
    """An Excel workbook (its creation, modification and zip entries' times) and a Stata
    file (its time stamp) state SOURCE_DATE_EPOCH (a resumable job: its first run's start),
    so the same rows give the same bytes whenever they are written."""
    import datetime as dt
    import time
    import zipfile

    from mixer.data.tables.writing import write_table

    frame = pd.DataFrame({"occ1": ["farmer", "smith"], "prob_1": [0.5, 0.25]})
    monkeypatch.setenv("SOURCE_DATE_EPOCH", STAMP)
    write_table(frame, str(tmp_path / "a.xlsx"))
    write_table(frame, str(tmp_path / "a.dta"))
    with zipfile.ZipFile(tmp_path / "a.xlsx") as book:
        assert {info.date_time for info in book.infolist()} == {time.localtime(int(STAMP))[:6]}
        core = book.read("docProps/core.xml")
    assert core.count(b"2023-11-14T22:13:20Z") == 2  # created and modified
    local = dt.datetime.fromtimestamp(int(STAMP))
    assert f"{local:%d} Nov {local:%Y %H:%M}".encode() in (tmp_path / "a.dta").read_bytes()[:300]


# ------------------------------------------------------------------ torchrun
def torchrun(*args) -> list:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--standalone",
        os.path.join(ROOT, "predict.py"),
        "--distributed",
        *map(str, args),
    ]


def launch(cmd, environment, check=True):
    import subprocess

    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=environment
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def two_processes(run, census, tmp_path_factory) -> dict:
    """torchrun, 2 processes, run through: a CSV (two heads) and a Parquet file."""
    outputs = {}
    for suffix, extra in (
        ("csv", ["--head", "flat", "seq2seq", "--batch-size", "8"]),
        ("parquet", []),
    ):
        out = tmp_path_factory.mktemp("two") / f"out.{suffix}"
        launch(torchrun(*predict_cmd(run, census, out, *extra)), env())
        outputs[suffix] = out.read_bytes()
    return outputs


def test_two_processes_killed_and_run_again_write_what_they_write_run_through(
    run, census, two_processes, tmp_path
):
    """torchrun, 2 processes. Rank 1 lost after chunk 2 (its node gone: torchrun ends rank 0,
    whose collective fails): the parts stay. The same command continues after chunk 2; then
    rank 0 killed after chunk 4's rows, before its journal entry; the same command again
    continues after chunk 3. The CSV is byte-identical to 2 processes' run through."""
    (two,) = same_name(tmp_path, "out.csv", "two")
    cmd = predict_cmd(run, census, two, "--head", "flat", "seq2seq", "--batch-size", "8")
    lost = launch(torchrun(*cmd), env(**{FAULT: "2:LOST"}), check=False)
    assert lost.returncode != 0 and not two.exists()
    killed = launch(torchrun(*cmd), env(**{FAULT: "4"}), check=False)
    assert "continuing an unfinished run after its 3 chunk(s) (270 rows" in killed.stdout
    assert killed.returncode != 0 and not two.exists()
    again = launch(torchrun(*cmd), env())
    assert "continuing an unfinished run after its 4 chunk(s) (360 rows" in again.stdout
    assert two.read_bytes() == two_processes["csv"]
    assert sorted(p.name for p in two.parent.iterdir()) == ["out.csv", "out.csv.provenance.json"]


def test_two_processes_stop_together_on_a_signal_and_one_process_continues(
    run, census, two_processes, tmp_path
):
    """torchrun, 2 processes, Parquet: SIGTERM to rank 0 after chunk 1 stops both ranks after
    it (they agree), exit 0. One process continues the job (any layout: 1 and N processes
    compute each input in the same batch, Predictor.shared) to the bytes of 2 processes run
    through."""
    (stopped,) = same_name(tmp_path, "out.parquet", "stopped")
    first = launch(torchrun(*predict_cmd(run, census, stopped)), env(**{FAULT: "1:TERM"}))
    assert (
        "stopped after 2 chunk(s) (180 rows) on a signal: run the same command to continue"
        in first.stderr
    )
    assert not stopped.exists()
    again = run_program("predict.py", *predict_cmd(run, census, stopped), env=env())
    assert "continuing an unfinished run after its 2 chunk(s) (180 rows" in again.stdout
    assert stopped.read_bytes() == two_processes["parquet"]


# ------------------------------------------------------------------ a hostile review's cases
KILLED_IN_COMMIT = """
import os, runpy, sys
from mixer.prediction import sinks
sinks.SummaryPlotSink.commit = lambda self, job: os._exit(9)  # a kill once the output is in place
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_kill_while_the_outputs_are_committed_costs_no_chunk(
    run, census, tmp_path, monkeypatch, capsys
):
    """Killed after the output is renamed into place, before the other outputs and the journal's
    removal: the parts stay whole (the output's own file is linked into place, not moved), so
    the same command continues after every chunk and commits the same bytes again."""
    import subprocess

    from mixer.cli.entrypoints import predict_main

    whole, cut = same_name(tmp_path, "out.csv", "whole", "cut")
    extra = ["--embeddings", "e.npy", "--summary-plot", "plot.png"]
    cmd = lambda out: predict_cmd(
        run, census, out, *[str(out.parent / e) if "." in e else e for e in extra]
    )  # noqa: E731
    assert predict_main(cmd(whole)) == 0
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_COMMIT, os.path.join(ROOT, "predict.py"), *cmd(cut)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env(),
    )
    assert killed.returncode == 9, killed.stderr
    assert cut.exists()  # the output was in place when the kill came
    capsys.readouterr()
    assert predict_main(cmd(cut)) == 0
    assert "continuing an unfinished run after its 7 chunk(s) (600 rows" in capsys.readouterr().out
    for name in ("out.csv", "out.csv.provenance.json", "e.npy"):
        if name.endswith(".json"):  # the sidecar names its own folder
            assert (cut.parent / name).read_text().replace("/cut/", "/") == (
                whole.parent / name
            ).read_text().replace("/whole/", "/")
        else:
            assert (cut.parent / name).read_bytes() == (whole.parent / name).read_bytes()
    assert sorted(p.name for p in cut.parent.iterdir()) == sorted(
        p.name for p in whole.parent.iterdir()
    )


def test_a_second_job_on_the_same_output_is_refused_while_the_first_runs(run, census, tmp_path):
    """Two jobs on one output at once (a requeue while the first still runs, a double launch)
    would both write into its parts: the second is refused in one line while the first holds
    the parts' lock, and runs once the lock is free (the kernel frees it when a job ends)."""
    import fcntl

    from mixer.prediction.resume import parts_dir

    out = tmp_path / "out.csv"
    with open(parts_dir(str(out)) + ".lock", "a") as lock:  # the first job, running
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = run_program("predict.py", *predict_cmd(run, census, out), check=False, env=env())
        assert second.returncode == 2, second.stderr
        assert f"--output {out}: another predict.py is writing it now" in second.stderr
        assert "Traceback" not in second.stderr and not out.exists()
    run_program("predict.py", *predict_cmd(run, census, out), env=env())
    assert out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "out.csv",
        "out.csv.provenance.json",
    ]


def test_the_store_spills_beside_the_jobs_output_never_beside_its_input(tmp_path):
    """An --audit or --to-check job without --output: the store's spill file goes beside that
    output (where a killed job's leftovers are swept), not into the input's directory, which
    on a cluster is often a shared, read-only data directory."""
    from mixer.core.programs import PredictConfig, PredictData, PredictOutputs
    from mixer.distributed.world import World
    from mixer.prediction.predict_job import DistinctStores

    data, out = tmp_path / "data", tmp_path / "out"
    for config in (
        PredictConfig(
            data=PredictData(input=str(data / "in.csv")),
            outputs=PredictOutputs(audit=["30", str(out / "audit.csv")]),
        ),
        PredictConfig(
            data=PredictData(input=str(data / "in.csv")),
            outputs=PredictOutputs(to_check=["30", str(out / "check.csv")]),
        ),
    ):
        stores = DistinctStores(config, World())
        assert stores.table.spill_dir == str(out)
        stores.close()


def test_a_resumed_embeddings_job_counts_no_rows_without_a_code(run, census, tmp_path):
    """An --embeddings job writes no codes, so it says nothing of rows without a description,
    killed and continued or not (the skipped chunks' blank rows were counted as if coded)."""
    out = tmp_path / "e.npy"
    cmd = ["--checkpoint", run, "--input", census, "--embeddings", str(out), "--chunk-size", "90"]
    killed = run_program("predict.py", *cmd, check=False, env=env(**{FAULT: "3"}))
    assert killed.returncode == 9, killed.stderr
    again = run_program("predict.py", *cmd, env=env())
    assert "continuing an unfinished run after its 3 chunk(s)" in again.stdout
    assert "without a description" not in again.stderr


def test_other_thresholds_in_the_models_config_are_refused_on_resume(run, census, tmp_path):
    """The model's own flat thresholds (config.json: a run's tuning writes them) make the codes:
    a run continued after they changed would mix two thresholds' rows in one file."""
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(run, model)
    out = tmp_path / "out.csv"
    cmd = predict_cmd(str(model), census, out)
    killed = run_program("predict.py", *cmd, check=False, env=env(**{FAULT: "2"}))
    assert killed.returncode == 9, killed.stderr
    config = json.loads((model / "config.json").read_text())
    config["threshold"] = 0.02
    (model / "config.json").write_text(json.dumps(config))
    refused = run_program("predict.py", *cmd, check=False, env=env())
    assert (
        refused.returncode == 2
        and "other flat thresholds in the model's config.json" in refused.stderr
    )


def test_a_job_that_does_not_resume_never_removes_a_running_jobs_parts(run, census, tmp_path):
    """A second command on an output a job is writing (here --alternatives, which does not
    resume and so would remove the parts it finds) is refused while the first job holds the
    lock; the parts stay."""
    import fcntl

    from mixer.prediction.resume import parts_dir

    out = tmp_path / "out.csv"
    killed = run_program(
        "predict.py", *predict_cmd(run, census, out), check=False, env=env(**{FAULT: "1"})
    )
    assert killed.returncode == 9, killed.stderr
    parts = sorted(os.listdir(parts_dir(str(out))))
    with open(parts_dir(str(out)) + ".lock", "a") as lock:  # the first job, running again
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other = run_program(
            "predict.py",
            *predict_cmd(run, census, out, "--alternatives", 2),
            check=False,
            env=env(),
        )
        assert other.returncode == 2 and "another predict.py is writing it now" in other.stderr
        assert sorted(os.listdir(parts_dir(str(out)))) == parts


DISK_FULL = """
import errno, os, runpy, sys
from mixer.prediction import resume, store
dump, calls = resume._dump, [0]
def full(*args):
    calls[0] += 1
    if calls[0] == 10:
        raise OSError(errno.EDQUOT, "Disk quota exceeded")
    return dump(*args)
resume._dump = store._dump = full  # the journal's states and the stores' parts
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_full_disk_keeps_the_chunks_done_and_the_same_command_continues(run, census, tmp_path):
    """A quota or a full disk mid-job (routine on a shared cluster) is one line, exit 2, and the
    chunks done stay: the same command continues to the bytes of an uninterrupted run."""
    import subprocess

    whole, cut = same_name(tmp_path, "out.parquet", "whole", "cut")
    run_program("predict.py", *predict_cmd(run, census, whole), env=env(SOURCE_DATE_EPOCH=STAMP))
    full = subprocess.run(
        [
            sys.executable,
            "-c",
            DISK_FULL,
            os.path.join(ROOT, "predict.py"),
            *predict_cmd(run, census, cut),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env(SOURCE_DATE_EPOCH=STAMP),
    )
    assert full.returncode == 2, full.stderr
    assert "they are kept: free space and run the same command to continue" in full.stderr
    assert "Traceback" not in full.stderr and not cut.exists()
    again = run_program(
        "predict.py", *predict_cmd(run, census, cut), env=env(SOURCE_DATE_EPOCH=STAMP)
    )
    assert "continuing an unfinished run after its" in again.stdout
    assert cut.read_bytes() == whole.read_bytes()


# ------------------------------------------------------------------ one time for every file
def test_a_resumed_jobs_check_list_and_audit_state_its_first_start(run, census, tmp_path):
    """A check list (.xlsx) and an audit (.dta) state the time the job first started, kept in
    the journal, as the output does: killed, then run again at another time, each is the
    uninterrupted run's bytes."""
    folders = {}
    for folder in ("whole", "cut"):
        (tmp_path / folder).mkdir()
        folders[folder] = [tmp_path / folder / name for name in ("out.csv", "chk.xlsx", "aud.dta")]

    def cmd(out, checks, audit) -> list:
        return predict_cmd(run, census, out, "--to-check", 15, checks, "--audit", 20, audit)

    run_program("predict.py", *cmd(*folders["whole"]), env=env(SOURCE_DATE_EPOCH=STAMP))
    killed = run_program(
        "predict.py",
        *cmd(*folders["cut"]),
        check=False,
        env=env(SOURCE_DATE_EPOCH=STAMP, **{FAULT: "3"}),
    )
    assert killed.returncode == 9, killed.stderr
    again = run_program("predict.py", *cmd(*folders["cut"]), env=env())  # the clock's time now
    assert "continuing an unfinished run after its 3 chunk(s)" in again.stdout
    for whole, cut in zip(folders["whole"], folders["cut"]):
        assert cut.read_bytes() == whole.read_bytes(), cut.name


@pytest.mark.parametrize("kind", ["pdf", "svg"])
def test_a_resumed_jobs_summary_plot_states_its_first_start(run, census, tmp_path, kind):
    """A --summary-plot drawn as PDF or SVG states a time (matplotlib's creation date): it was
    the time of writing, where the job's other files state its first start, and an SVG's ids
    were drawn at random. Killed, then run again at another time, it is the uninterrupted
    run's bytes, as the output is."""
    files = {}
    for folder in ("whole", "cut"):
        (tmp_path / folder).mkdir()
        files[folder] = [tmp_path / folder / name for name in ("out.xlsx", f"summary.{kind}")]

    def cmd(out, plot) -> list:
        return predict_cmd(run, census, out, "--summary-plot", plot)

    run_program("predict.py", *cmd(*files["whole"]), env=env(SOURCE_DATE_EPOCH=STAMP))
    killed = run_program(
        "predict.py",
        *cmd(*files["cut"]),
        check=False,
        env=env(SOURCE_DATE_EPOCH=STAMP, **{FAULT: "2"}),
    )
    assert killed.returncode == 9, killed.stderr
    again = run_program("predict.py", *cmd(*files["cut"]), env=env())  # the clock's time now
    assert "continuing an unfinished run after its 2 chunk(s)" in again.stdout
    for whole, cut in zip(files["whole"], files["cut"]):
        assert cut.read_bytes() == whole.read_bytes(), cut.name


# ------------------------------------------------------------------ problems in the rows
def census_with(census, tmp_path, name: str, change) -> str:
    """The census with `change` made to its rows (a DataFrame of text), as CSV."""
    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    change(frame)
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return str(path)


def ragged(census, tmp_path) -> str:
    """The census 70 times over (more than the 1 MiB a CSV reader parses at a time), row 40,000
    with two cells more than the header names."""
    lines = open(census, encoding="utf-8").read().splitlines()
    lines = lines[:1] + lines[1:] * 70
    lines[40_000] += ",x,y"
    path = tmp_path / "ragged.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def control_character(frame):
    frame.loc[499, "occ1"] = "farm\x01er"


def nul(frame):
    frame.loc[499, "occ1"] = "farm\x00er"


def parishes(frame):  # one parish for 450 rows, then a parish a row: 151 strata
    frame["parish"] = ["north"] * 450 + [f"p{i}" for i in range(150)]


@pytest.mark.parametrize(
    "make, extra, said",
    [
        (
            lambda census, tmp: census_with(census, tmp, "ctl.csv", control_character),
            ["--output", "out.xlsx"],
            "row 500 column 'occ1' holds a control character an Excel file cannot store",
        ),
        (
            lambda census, tmp: census_with(census, tmp, "ctl.csv", control_character),
            ["--output", "out.csv", "--audit", "20", "aud.xlsx"],
            "row 500 column 'occ1' holds a control character an Excel file cannot store",
        ),
        (
            lambda census, tmp: census_with(census, tmp, "nul.csv", nul),
            ["--output", "out.dta"],
            "row 500 column 'occ1' holds a NUL character a Stata file cannot store",
        ),
        (ragged, ["--output", "out.csv"], "row 40000 has 6 cell(s), but the header"),
        (
            lambda census, tmp: census_with(census, tmp, "parish.csv", parishes),
            ["--output", "out.csv", "--audit", "100", "aud.csv", "--audit-by", "parish"],
            "--audit-by parish: more than 100 values",
        ),
    ],
)
def test_a_problem_in_a_late_row_is_found_before_any_chunk_is_predicted(
    run, census, tmp_path, monkeypatch, capsys, make, extra, said
):
    """A row that would stop the job mid-way (a control character bound for an Excel file, a row
    with more cells than the header, too many strata for --audit-by) is found by one pass over
    the input before any chunk is predicted: one line, exit 2, nothing written, no chunk lost."""
    from mixer.prediction import predict_job

    def predicted(*args):
        raise AssertionError("a chunk was predicted before the problem was found")

    monkeypatch.setattr(predict_job, "code_rows", predicted)
    monkeypatch.chdir(tmp_path)
    source = make(census, tmp_path)
    argv = ["--checkpoint", run, "--input", source, "--chunk-size", "90", *extra]
    line = fails(capsys, "predict", argv, said, watch=tmp_path)
    assert "continue" not in line


def test_a_matrix_to_excel_holds_no_input_column_to_refuse(run, census, tmp_path):
    """--what probs to .xlsx writes the matrix alone: a control character in the input's
    description is no reason to refuse it."""
    from mixer.cli.entrypoints import predict_main

    source = census_with(census, tmp_path, "ctl.csv", control_character)
    out = tmp_path / "probs.xlsx"
    argv = ["--checkpoint", run, "--input", source, "--output", out, "--chunk-size", "90"]
    assert predict_main([*map(str, argv), "--what", "probs", "--head", "flat"]) == 0
    assert out.exists()


def test_alternatives_to_excel_are_counted_k_rows_an_input_before_the_model_loads(run, tmp_path):
    """--alternatives K writes K rows an input row: an .xlsx output is refused before the model
    loads when they are more than a sheet holds, though the input's rows alone fit."""
    rows = 400_000  # 1,200,000 rows with K = 3
    source = tmp_path / "many.csv"
    source.write_text("occ1\n" + "farmer\n" * rows)
    proc = run_program(
        "predict.py",
        *["--checkpoint", run, "--input", source, "--output", tmp_path / "alt.xlsx"],
        *["--alternatives", "3"],
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        f"has {rows:,} rows, {3 * rows:,} rows with --alternatives 3, more than an Excel sheet "
        "holds" in proc.stderr
    )
    assert "loaded" not in proc.stdout.lower() and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.csv"]


def test_a_problem_met_mid_job_keeps_the_chunks_done_for_the_same_command(
    run, census, tmp_path, capsys
):
    """What the pass cannot find (an Excel input is not read twice: its strata are counted as
    its rows are predicted) ends the job in one line, exit 2, keeping the chunks done as a full
    disk does: the same command continues after them, predicting none of them again."""
    from mixer.prediction import resume

    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    parishes(frame)
    source = write_xlsx(tmp_path / "parish.xlsx", [list(frame.columns)] + frame.values.tolist())
    out = tmp_path / "out.csv"
    argv = ["--checkpoint", run, "--input", source, "--output", out, "--chunk-size", "90"]
    argv += ["--audit", "100", tmp_path / "aud.csv", "--audit-by", "parish"]
    line = fails(capsys, "predict", argv, "--audit-by parish: more than 100 values")
    assert "the 6 chunk(s) predicted are kept: the same command continues them" in line
    parts = resume.parts_dir(str(out))
    assert os.path.isdir(parts) and not out.exists()
    from mixer.cli.parsing import run_main
    from mixer.cli.entrypoints import predict_main

    with pytest.raises(SystemExit):
        run_main(predict_main, [str(a) for a in argv])
    assert "continuing an unfinished run after its 6 chunk(s)" in capsys.readouterr().out
    assert os.path.isdir(parts)


def test_the_faults_tests_inject_go_through_one_seam():
    """The kills, signals and lost nodes the tests ask for (MIXER_PREDICT_FAULT_AFTER_CHUNK)
    are read and done in mixer/prediction/faults.py alone: no other module of the job names
    the variable, ends its process or signals itself."""
    import ast

    seam = os.path.join(ROOT, "mixer", "prediction", "faults.py")
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "mixer")):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == seam:
                continue
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            for node in ast.walk(tree):
                named = isinstance(node, ast.Constant) and "MIXER_PREDICT_FAULT" in str(node.value)
                call = ast.unparse(node) if isinstance(node, ast.Call) else ""
                ends = os.sep + "prediction" + os.sep in path and (
                    call.startswith("os._exit(") or call.startswith("os.kill(os.getpid()")
                )
                if named or ends:
                    found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not found, found
    with open(seam, encoding="utf-8") as handle:
        assert "MIXER_PREDICT_FAULT_AFTER_CHUNK" in handle.read()

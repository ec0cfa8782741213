"""predict.py as a shared cluster runs it (issue 43; docs/predicting.md, "A killed
prediction"): a full disk at the very end, an output reached through a link, the input by
another path or copied to a node's scratch disk, a job continued on another device, a
compressed file, two outputs of one directory. A third review's cases: each was lost,
mixed or misread before."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys

import pandas as pd
import pytest

from conftest import ROOT, env_for_subprocess, fails, run_program, zipf_census

FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"  # mixer.prediction.resume: "k" is a kill -9 after chunk k
STAMP = "1700000000"  # SOURCE_DATE_EPOCH: the time a Stata file states, fixed across runs


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture(scope="module")
def census(tmp_path_factory, small_csv) -> str:
    """360 rows drawn from 121 descriptions (a few drawn often), some without one: 4 chunks of 90."""
    return zipf_census(tmp_path_factory, small_csv, 360, 5, 41)


@pytest.fixture(scope="module")
def whole(run, census, tmp_path_factory) -> dict:
    """The files of uninterrupted runs, by suffix."""
    from mixer.cli.entrypoints import predict_main

    folder, out = tmp_path_factory.mktemp("whole"), {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SOURCE_DATE_EPOCH", STAMP)
        for suffix in ("csv", "dta"):
            assert predict_main(cmd(run, census, folder / f"out.{suffix}")) == 0
            out[suffix] = (folder / f"out.{suffix}").read_bytes()
    return out


def cmd(run, census, out) -> list:
    return ["--checkpoint", run, "--input", census, "--output", str(out), "--chunk-size", "90"]


def env(**values) -> dict:
    environment = env_for_subprocess()
    environment["SOURCE_DATE_EPOCH"] = STAMP
    environment.update(values)
    return environment


def killed_after(chunk: int, *args) -> None:
    proc = run_program("predict.py", *args, check=False, env=env(**{FAULT: str(chunk)}))
    assert proc.returncode == 9, proc.stderr


def continued(*args, chunks: int) -> None:
    proc = run_program("predict.py", *args, env=env())
    assert f"continuing an unfinished run after its {chunks} chunk(s)" in proc.stdout, proc.stdout


def refused(*args) -> str:
    proc = run_program("predict.py", *args, check=False, env=env())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


FULL_AT_THE_END = """
import errno, runpy, sys
from mixer.data.tables import formats
def full(self):
    raise OSError(errno.ENOSPC, "No space left on device")
formats.StataWriter.close = full  # a .dta file is written whole at the end
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_full_disk_at_the_end_keeps_every_chunk_and_the_same_command_writes_it(
    run, census, whole, tmp_path
):
    """A Stata or Excel file is written whole once every chunk is predicted: the moment a
    disk fills is most likely then. The failure was a one-line error, but it removed the
    parts, so the whole job was lost. Now every chunk stays, the line says so, and the same
    command writes the file (the bytes of an uninterrupted run) without predicting again."""
    import subprocess

    out = tmp_path / "out.dta"
    full = subprocess.run(
        [sys.executable, "-c", FULL_AT_THE_END, os.path.join(ROOT, "predict.py")]
        + cmd(run, census, out),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env(),
    )
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr
    assert "no space left on the device" in full.stderr
    assert "the 4 chunk(s) predicted are kept" in full.stderr and not out.exists()
    continued(*cmd(run, census, out), chunks=4)
    assert out.read_bytes() == whole["dta"]


def test_an_output_through_a_link_keeps_its_parts_beside_the_file_it_writes(
    run, census, whole, tmp_path
):
    """`--output results/latest.csv`, a link into project space (mixer.core.io.write_target:
    the link stays, its target is written). The parts lay beside the link, so the output was
    renamed from the link's directory into the target's: across file systems that fails at
    the very end, and a read-only directory of links failed at the start. They lie beside
    the file written now, and a killed job continues through the link to the same bytes."""
    links, space = tmp_path / "results", tmp_path / "project"
    links.mkdir()
    space.mkdir()
    (links / "latest.csv").symlink_to(space / "run5.csv")
    args = cmd(run, census, links / "latest.csv")
    killed_after(1, *args)
    assert (space / ".tmp-run5.csv.parts" / "journal.json").exists()
    assert sorted(os.listdir(links)) == ["latest.csv"]  # the link alone
    continued(*args, chunks=1)
    assert (links / "latest.csv").is_symlink()
    assert (space / "run5.csv").read_bytes() == whole["csv"]
    assert sorted(os.listdir(space)) == ["run5.csv", "run5.csv.provenance.json"]


def test_the_input_by_another_path_continues_and_a_copy_with_a_new_time_is_refused(
    run, census, whole, tmp_path
):
    """The input is known by what it is (its size, modification time and a hash of its
    ends), not the path naming it: a link to it continues, and so does a copy that keeps its
    time, as a job that stages its input on a node's scratch disk (cp -p, rsync -a) makes.
    A copy with a new time cannot be told from a changed file: refused in one line naming
    both files and their times. Before, a link was refused as another input."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy2(census, data / "census.csv")
    (tmp_path / "link.csv").symlink_to(data / "census.csv")
    out = tmp_path / "out.csv"
    killed_after(1, *cmd(run, data / "census.csv", out))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copyfile(data / "census.csv", scratch / "census.csv")  # a new time
    stat = os.stat(data / "census.csv")
    os.utime(scratch / "census.csv", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    line = refused(*cmd(run, scratch / "census.csv", out))
    assert f"were made with another --input ({data / 'census.csv'}, " in line
    assert f"now {scratch / 'census.csv'}, " in line and "cp -p" in line
    assert line.endswith("run that command again to continue, or pass --restart to start over")
    continued(*cmd(run, tmp_path / "link.csv", out), chunks=1)
    assert out.read_bytes() == whole["csv"]
    # a copy that keeps the time (cp -p): the same file
    out.unlink()
    killed_after(2, *cmd(run, data / "census.csv", out))
    shutil.copy2(data / "census.csv", scratch / "kept.csv")
    continued(*cmd(run, scratch / "kept.csv", out), chunks=2)
    assert out.read_bytes() == whole["csv"]
    # the same path, its content changed
    out.unlink()
    killed_after(1, *cmd(run, data / "census.csv", out))
    with open(data / "census.csv", "a", encoding="utf-8") as handle:
        handle.write("farmer,61110,\n")
    line = refused(*cmd(run, data / "census.csv", out))
    assert f"were made with --input {data / 'census.csv'} as it was then (" in line
    assert "the file changed since" in line


def test_a_refused_input_says_what_of_it_changed(run, census, tmp_path):
    """An input whose size is the same was refused as "the file changed since" beside two
    equal sizes and, within a second, two equal times: a line that contradicts itself. A
    file only touched says its time changed and its content as far as known did not; an edit
    whose time was put back says its ends changed."""
    data = tmp_path / "census.csv"
    shutil.copy2(census, data)
    out = tmp_path / "out.csv"
    killed_after(1, *cmd(run, data, out))
    stat = os.stat(data)
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # touched: the same second
    line = refused(*cmd(run, data, out))
    assert "its time changed since, its size and its first and last 64 KiB did not" in line
    text = data.read_bytes()
    data.write_bytes(text[:-2] + (b"x" if text[-2:-1] != b"x" else b"y") + text[-1:])
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # its time put back
    line = refused(*cmd(run, data, out))
    assert "its first or last 64 KiB changed since, its size and time did not" in line


def test_another_kind_of_device_is_refused_and_another_cpu_continues_saying_so(
    run, census, whole, tmp_path
):
    """The journal keeps the device a job computes on. A job killed on a GPU node and
    requeued on a CPU node (or run in bf16 there and fp32 here) would write rows of two
    numerics into one file: refused in one line naming both. A node of another CPU
    generation or GPU model (same kind, same precision: kernels that round otherwise in the
    last bits) continues, as a requeue onto any node of a partition does, and says so in one
    line. Before, the device was not recorded and any change went on in silence."""
    out = tmp_path / "out.csv"
    killed_after(1, *cmd(run, census, out))
    journal = tmp_path / ".tmp-out.csv.parts" / "journal.json"
    saved = json.loads(journal.read_text())
    here = saved["made_by"]["device"]
    assert here["kind"] == "cpu" and here["precision"] == "fp32" and here["name"]
    saved["made_by"]["device"] = {
        "kind": "cuda",
        "name": "NVIDIA H100 80GB HBM3",
        "precision": "bf16",
    }
    journal.write_text(json.dumps(saved))
    line = refused(*cmd(run, census, out))
    assert "were made with another device (cuda (NVIDIA H100 80GB HBM3), bf16; now cpu (" in line
    assert not out.exists()
    saved["made_by"]["device"] = {"kind": "cpu"}  # a key lacking: was a traceback (KeyError)
    journal.write_text(json.dumps(saved))
    assert "were made with another device (cpu (None), None; now cpu (" in refused(
        *cmd(run, census, out)
    )
    saved["made_by"]["device"] = dict(here, name="another CPU")  # another CPU's kernels
    journal.write_text(json.dumps(saved))
    proc = run_program("predict.py", *cmd(run, census, out), env=env())
    assert "continuing an unfinished run after its 1 chunk(s)" in proc.stdout
    assert (
        f"the unfinished run began on cpu (another CPU), fp32 and continues on cpu ({here['name']}), "
        "fp32: the inputs first met from here on are computed by this device's kernels"
    ) in proc.stdout
    assert out.read_bytes() == whole["csv"]  # (this test's two "CPUs" are one)


def test_a_journal_whose_input_keys_are_an_earlier_mixers_is_refused(run, census, tmp_path):
    """The stores of a killed job hold input keys. A journal from a mixer whose keys told
    inputs apart otherwise (before the places of a tokenizer's added tokens joined the key:
    its journal states no key version) would join its keys with this version's, and an input
    met before the kill would be computed again under another key: refused in one line,
    naming it. Before, such a journal was continued."""
    out = tmp_path / "out.csv"
    killed_after(1, *cmd(run, census, out))
    journal = tmp_path / ".tmp-out.csv.parts" / "journal.json"
    saved = json.loads(journal.read_text())
    from mixer.data.inputs.tokens import KEY_VERSION

    assert saved["made_by"]["keys"] == KEY_VERSION
    del saved["made_by"]["keys"]
    journal.write_text(json.dumps(saved))
    line = refused(*cmd(run, census, out))
    assert f"were made with input keys of version 1 (now {KEY_VERSION}: an earlier mixer's" in line
    assert line.endswith("or pass --restart to start over")
    assert not out.exists()


def test_a_gzipped_census_is_predicted_as_the_plain_one_and_a_gzip_output_written(
    run, census, whole, tmp_path, capsys
):
    """A census often comes gzip'd (census.csv.gz): it was refused ("decompress it first"), and
    an output named .csv.gz too. It is read as it arrives, named so or named .csv, giving the
    plain file's output byte for byte; --output out.csv.gz writes that output gzip'd."""
    import gzip

    from mixer.cli.entrypoints import predict_main

    packed = tmp_path / "census.csv.gz"
    with open(census, "rb") as source, gzip.open(packed, "wb") as target:
        target.write(source.read())
    misnamed = tmp_path / "census_gz.csv"  # gzip'd, named .csv
    shutil.copyfile(packed, misnamed)
    for source in (packed, misnamed):
        out = tmp_path / f"out-{source.name}.csv"
        assert predict_main(cmd(run, str(source), out)) == 0
        assert out.read_bytes() == whole["csv"]
    assert "CSV (gzip), separator ','" in capsys.readouterr().out
    out = tmp_path / "out.csv.gz"
    sides = ["--to-check", "5", "{}check.csv{}", "--audit", "5", "{}audit.csv{}"]
    plain_sides = [str(tmp_path / a.format("plain-", "")) if "{" in a else a for a in sides]
    assert predict_main(cmd(run, census, tmp_path / "plain.csv") + plain_sides) == 0
    gz_sides = [str(tmp_path / a.format("", ".gz")) if "{" in a else a for a in sides]
    assert predict_main(cmd(run, str(packed), out) + gz_sides) == 0
    assert gzip.decompress(out.read_bytes()) == whole["csv"]
    for name in ("check.csv", "audit.csv"):  # the side outputs too, by the same writer
        packed_side = (tmp_path / f"{name}.gz").read_bytes()
        assert gzip.decompress(packed_side) == (tmp_path / f"plain-{name}").read_bytes()
    capsys.readouterr()
    fails(
        capsys,
        "predict",
        cmd(run, census, tmp_path / "out.csv.bz2"),
        f"--output {tmp_path / 'out.csv.bz2'}: a compressed output is written as gzip'd CSV only",
        watch=str(tmp_path),
    )


def test_a_killed_job_on_a_gzipped_input_resumes_byte_identical(run, census, whole, tmp_path):
    """A kill -9 after a chunk of a job reading census.csv.gz and writing out.csv.gz: the same
    command continues after the chunks done (the input read again from its start, the chunks
    done not predicted again) and the output is the uninterrupted run's bytes."""
    import gzip

    from mixer.cli.entrypoints import predict_main

    packed = tmp_path / "census.csv.gz"
    with open(census, "rb") as source, gzip.open(packed, "wb") as target:
        target.write(source.read())
    plain = tmp_path / "whole.csv.gz"
    assert predict_main(cmd(run, str(packed), plain)) == 0
    out = tmp_path / "out.csv.gz"
    killed_after(2, *cmd(run, str(packed), out))
    assert not out.exists()
    continued(*cmd(run, str(packed), out), chunks=2)
    assert out.read_bytes() == plain.read_bytes()
    assert gzip.decompress(out.read_bytes()) == whole["csv"]


def test_a_job_sweeps_its_own_killed_temp_files_not_another_outputs(run, census, tmp_path):
    """The sweep of a killed job's `.tmp-<output>.<pid>` files took any name that went on
    with a number: out.csv's job removed the resume parts and temp files of out.csv.999999998
    (any suffix is a CSV output) when no process had that number."""
    from mixer.cli.entrypoints import predict_main

    other = tmp_path / ".tmp-out.csv.999999998.parts"  # out.csv.999999998's parts
    other.mkdir()
    (other / "journal.json").write_text("{}")
    others_temp = tmp_path / ".tmp-out.csv.999999998.4242"  # its temp file
    others_temp.write_text("rows")
    stale = tmp_path / ".tmp-out.csv.999999999"  # out.csv's own, of a process gone
    stale.write_text("rows")
    assert predict_main(cmd(run, census, tmp_path / "out.csv")) == 0
    assert not stale.exists()
    assert (other / "journal.json").exists() and others_temp.exists()
    # the temp files of --to-check and --audit too (written at the end: a kill then left them)
    stale = [tmp_path / ".tmp-check.csv.999999999", tmp_path / ".tmp-audit.csv.999999999"]
    for path in stale:
        path.write_text("rows")
    argv = cmd(run, census, tmp_path / "out.csv")
    argv += ["--to-check", "5", str(tmp_path / "check.csv")]
    argv += ["--audit", "5", str(tmp_path / "audit.csv")]
    assert predict_main(argv) == 0
    assert not any(path.exists() for path in stale)


def test_every_part_is_on_the_disk_before_the_journal_names_it(run, census, tmp_path, monkeypatch):
    """A node lost (not only its process) keeps what reached the disk: a part, a state or the
    output so far written but still in the node's cache came back short or zeros, under a
    journal that named it whole. Each is synced before the journal's entry is renamed in."""
    from mixer.cli.entrypoints import predict_main

    events, fsync, replace = [], os.fsync, os.replace
    monkeypatch.setattr(
        os,
        "fsync",
        lambda fd: (events.append(("sync", os.readlink(f"/proc/self/fd/{fd}"))), fsync(fd))[1],
    )
    monkeypatch.setattr(
        os, "replace", lambda src, dst: (events.append(("rename", str(dst))), replace(src, dst))[1]
    )
    out = tmp_path / "out.csv"
    argv = cmd(run, census, out) + ["--embeddings", str(tmp_path / "e.npy")]
    assert predict_main(argv) == 0
    entries = [
        i
        for i, (kind, path) in enumerate(events)
        if kind == "rename" and path.endswith("journal.json")
    ]
    assert len(entries) == 5  # the journal opened, then an entry per chunk
    for chunk, (before, at) in enumerate(zip(entries, entries[1:])):
        synced = {os.path.basename(path) for kind, path in events[before:at] if kind == "sync"}
        assert {
            "output.csv",
            "embeddings.raw",
            f"store-{chunk}.pkl.new",
            f"state-{chunk}.pkl.new",
            "journal.json.new",
        } <= synced, (chunk, synced)


def test_a_journal_a_lost_node_left_unreadable_starts_over_in_one_line(
    run, census, whole, tmp_path
):
    """A journal renamed in but not on the disk when its node was lost reads back empty: the
    same command failed with a traceback (JSONDecodeError). It starts over, saying why."""
    out = tmp_path / "out.csv"
    killed_after(2, *cmd(run, census, out))
    (tmp_path / ".tmp-out.csv.parts" / "journal.json").write_bytes(b"")
    again = run_program("predict.py", *cmd(run, census, out), env=env())
    assert "starts over (an unfinished run's" in again.stdout and "cannot be read" in again.stdout
    assert out.read_bytes() == whole["csv"]
    # JSON, yet not a journal's shape (made_by a list): was a traceback (AttributeError)
    out.unlink()
    killed_after(1, *cmd(run, census, out))
    journal = tmp_path / ".tmp-out.csv.parts" / "journal.json"
    saved = json.loads(journal.read_text())
    journal.write_text(json.dumps(dict(saved, made_by={"mixer": "0.1.0"})))  # another version's
    assert "were made with mixer 0.1.0 (now " in refused(*cmd(run, census, out))
    journal.write_text(json.dumps(dict(saved, made_by=[])))
    again = run_program("predict.py", *cmd(run, census, out), env=env())
    assert "starts over (an unfinished run's" in again.stdout and "cannot be read" in again.stdout
    assert out.read_bytes() == whole["csv"]


def test_two_columns_of_one_name_are_refused_before_the_model_loads(
    run, tmp_path, capsys, monkeypatch
):
    """A header with two columns of one name was refused at the first chunk, once the model
    had loaded: on a cluster, after the queue, the node and a big model's minutes."""
    from mixer.prediction.predict import Predictor

    def loaded(*args, **kwargs):
        raise AssertionError("the model loaded before the header was checked")

    monkeypatch.setattr(Predictor, "load", loaded)
    doubled = tmp_path / "doubled.csv"
    doubled.write_text("occ1,year,year\nfarmer,1850,1851\n", encoding="utf-8")
    fails(
        capsys,
        "predict",
        cmd(run, doubled, tmp_path / "out.csv"),
        f"--input {doubled}: duplicate column name(s) 'year'; rename them",
    )


def test_a_csv_whose_header_begins_like_bzip2_is_read_as_text_and_a_bzip2_file_decompressed(
    run, census, tmp_path, capsys
):
    """A CSV was taken for bzip2 by its first four bytes ("BZh" and a digit), so a file whose
    first column is named, say, BZh9 was refused as compressed. bzip2's header goes on with a
    block's magic number: that is checked too, and a real bzip2 file is read decompressed."""
    import bz2

    from mixer.cli.entrypoints import predict_main

    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    frame.insert(0, "BZh91", "x")
    text = tmp_path / "bzh.csv"
    frame.to_csv(text, index=False)
    assert predict_main(cmd(run, str(text), tmp_path / "out.csv")) == 0
    assert len(pd.read_csv(tmp_path / "out.csv")) == len(frame)
    capsys.readouterr()
    packed = tmp_path / "packed.csv"
    packed.write_bytes(bz2.compress(text.read_bytes()))
    assert predict_main(cmd(run, str(packed), tmp_path / "out2.csv")) == 0
    assert (tmp_path / "out2.csv").read_bytes() == (tmp_path / "out.csv").read_bytes()
    assert "CSV (bzip2)" in capsys.readouterr().out


OTHER_CPU_PER_RANK = """
import os, runpy, sys
import torch
torch.backends.cpu.get_cpu_capability = lambda: "CPU" + os.environ["RANK"]  # a node per rank
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_each_ranks_device_is_in_the_journal_not_rank_0s_alone(run, census, whole, tmp_path):
    """torchrun over nodes of two CPU generations or GPU models: the journal kept rank 0's
    device alone, so a requeue whose other ranks landed on another model than before went
    on without the line that says its rows are computed by other kernels. Each rank's device
    is kept where they differ, and a continuation on other devices says so."""
    import subprocess

    out = tmp_path / "out.csv"
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--standalone",
        "--no-python",
        sys.executable,
        "-c",
        OTHER_CPU_PER_RANK,
        os.path.join(ROOT, "predict.py"),
        "--distributed",
        *map(str, cmd(run, census, out)),
    ]
    killed = subprocess.run(
        torchrun, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env(**{FAULT: "1"})
    )
    assert killed.returncode != 0 and not out.exists(), killed.stderr
    saved = json.loads((tmp_path / ".tmp-out.csv.parts" / "journal.json").read_text())
    assert saved["made_by"]["device"] == {
        "kind": "cpu",
        "name": "rank 0 CPU0; rank 1 CPU1",
        "precision": "fp32",
    }
    proc = run_program("predict.py", *cmd(run, census, out), env=env())
    assert "continuing an unfinished run after its 1 chunk(s)" in proc.stdout
    assert "the unfinished run began on cpu (rank 0 CPU0; rank 1 CPU1), fp32 and continues" in (
        proc.stdout
    )
    assert out.exists()


def test_ctrl_c_in_a_python_session_and_the_same_call_again_continues(
    run, census, whole, tmp_path, monkeypatch, capsys
):
    """predict_main called twice in one Python session (a notebook): Ctrl-C after chunk 1
    keeps the parts, and the second call, in the same process, continues them to the bytes
    of a run never stopped: the first call's lock on the parts is freed as a killed
    process's is (flock is per open file: the same process is refused otherwise)."""
    from mixer.cli.entrypoints import predict_main
    from mixer.prediction import resume

    done = resume.Journal.done

    def interrupted(self, chunk, *args, **kwargs):
        done(self, chunk, *args, **kwargs)
        if chunk == 1:
            raise KeyboardInterrupt

    out = tmp_path / "out.csv"
    monkeypatch.setattr(resume.Journal, "done", interrupted)
    with pytest.raises(KeyboardInterrupt):
        predict_main(cmd(run, census, out))
    monkeypatch.setattr(resume.Journal, "done", done)
    assert (tmp_path / ".tmp-out.csv.parts" / "journal.json").exists() and not out.exists()
    capsys.readouterr()
    assert predict_main(cmd(run, census, out)) == 0
    said = capsys.readouterr()
    assert "continuing an unfinished run after its 2 chunk(s)" in said.out + said.err
    assert out.read_bytes() == whole["csv"]


# ------------------------------------------------------------------ every writer of the job
def test_a_full_disk_while_the_store_spills_keeps_the_chunks_done(
    run, census, whole, tmp_path, capsys, monkeypatch
):
    """Past --store-memory the distinct-input store spills to SQLite. A disk that fills then
    gave SQLite's "database or disk is full" as a traceback, exit 1, and the parts removed:
    every finished chunk lost. It is now the line any writer of the job gives
    (mixer.core.io.writing), naming the spill file and the full disk; the chunks done stay,
    and the same command continues to the bytes of an uninterrupted run."""
    import sqlite3

    from mixer.cli.entrypoints import predict_main
    from mixer.prediction import predict_job

    monkeypatch.setattr(predict_job, "MEGABYTE", 1)  # --store-memory 1: 1 byte, each chunk spills
    spills = [0]

    class Full(sqlite3.Connection):  # SQLite's own SQLITE_FULL at the third spill
        def executemany(self, *args):
            spills[0] += 1
            if spills[0] == 3:
                self.execute("PRAGMA max_page_count = 1")  # no page more than it has
            return super().executemany(*args)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, factory=Full, **k))
    out = tmp_path / "out.csv"
    args = cmd(run, census, out) + ["--store-memory", "1"]
    line = fails(
        capsys,
        "predict",
        args,
        f"--store-memory's spill file {tmp_path}{os.sep}.tmp-out.csv.",
        ".store.sqlite: writing failed after ",
        " chunk(s) (no space left on the device); they are kept: free space and run the same "
        "command to continue",
    )
    assert line.startswith("error: ")
    journal = tmp_path / ".tmp-out.csv.parts" / "journal.json"
    assert journal.exists() and not out.exists()
    kept = json.loads(journal.read_text())["chunks"]  # where the third spill fell (a window
    assert kept >= 2 and f"writing failed after {kept} chunk(s)" in line  # holds chunks)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".store.sqlite")]
    spills[0] = -(10**9)  # space freed
    assert predict_main(args) == 0
    assert f"continuing an unfinished run after its {kept} chunk(s)" in capsys.readouterr().out
    assert out.read_bytes() == whole["csv"]


def test_a_full_disk_while_writing_embeddings_names_that_file_and_the_cause(
    run, census, tmp_path, capsys, monkeypatch
):
    """--embeddings e.npy on a disk that fills after 2 chunks (/dev/full: the kernel's own
    ENOSPC) said "--output o.csv: writing failed after 2 chunk(s) (192000 requested and 0
    written)": the wrong file, and numpy's count in place of the cause. It names the file
    that failed and that the disk is full; the chunks stay, and the same command continues
    to the bytes of an uninterrupted run."""
    from mixer.cli.entrypoints import predict_main
    from mixer.prediction.sinks import EmbeddingWriter

    (tmp_path / "whole").mkdir()
    whole = tmp_path / "whole" / "e.npy"
    assert (
        predict_main(cmd(run, census, tmp_path / "whole" / "o.csv") + ["--embeddings", str(whole)])
        == 0
    )
    write, calls = EmbeddingWriter.write, [0]

    def full_from_the_third_chunk(self, vectors):
        calls[0] += 1
        if calls[0] == 3 and self.raw is not None:
            self.raw.close()
            self.raw = open("/dev/full", "ab")  # every write: no space left on the device
        return write(self, vectors)

    monkeypatch.setattr(EmbeddingWriter, "write", full_from_the_third_chunk)
    out, npy = tmp_path / "o.csv", tmp_path / "e.npy"
    args = cmd(run, census, out) + ["--embeddings", str(npy)]
    capsys.readouterr()
    line = fails(
        capsys,
        "predict",
        args,
        f"--embeddings {npy}: writing failed after 2 chunk(s) (no space left on the device); "
        "they are kept: free space and run the same command to continue",
    )
    assert "--output" not in line and "requested" not in line
    assert not npy.exists() and not out.exists()
    calls[0] = -(10**9)  # space freed
    assert predict_main(args) == 0
    assert "continuing an unfinished run after its 2 chunk(s)" in capsys.readouterr().out
    assert npy.read_bytes() == whole.read_bytes()
    assert out.read_bytes() == (tmp_path / "whole" / "o.csv").read_bytes()


@pytest.fixture(scope="module")
def whole_audit(run, census, tmp_path_factory) -> tuple:
    """The output and the audit of an uninterrupted run with --audit 20."""
    from mixer.cli.entrypoints import predict_main

    folder = tmp_path_factory.mktemp("whole_audit")
    out, audit = folder / "out.csv", folder / "audit.csv"
    assert predict_main(cmd(run, census, out) + ["--audit", "20", str(audit)]) == 0
    return out.read_bytes(), audit.read_bytes()


@pytest.mark.parametrize("damage", ["cut short", "zeros at its tail", "garbled"])
def test_an_audit_digest_a_lost_node_damaged_is_hashed_again(
    run, census, whole_audit, tmp_path, capsys, damage
):
    """The audit's digest (the bytes of the predictions it hashes, kept beside the journal) was
    not fsynced, and known on a resume by its length alone. After a lost node (the file cut
    short; zeros where its tail was; garbled) the rerun refused, or went on with exit 0 and
    wrote an audit of another fingerprint, which evaluate.py --audit then refuses after the
    rows are checked by hand. It is known by its checksum now: a damaged one is hashed again
    from the chunks done (their codes read back from the store), and the audit is the
    uninterrupted run's, byte for byte."""
    from mixer.cli.entrypoints import predict_main

    out, audit = tmp_path / "out.csv", tmp_path / "audit.csv"
    args = cmd(run, census, out) + ["--audit", "20", str(audit)]
    killed_after(2, *args)
    digest = tmp_path / ".tmp-out.csv.parts" / "audit-digest.bin"
    data = digest.read_bytes()
    half = len(data) // 2
    if damage == "cut short":
        digest.write_bytes(data[:half])
    elif damage == "zeros at its tail":
        digest.write_bytes(data[:half] + bytes(len(data) - half))
    else:  # the same length, one letter otherwise
        digest.write_bytes(data[:half] + bytes([data[half] ^ 0x01]) + data[half + 1 :])
    assert predict_main(args) == 0
    assert "continuing an unfinished run after its 2 chunk(s)" in capsys.readouterr().out
    assert (out.read_bytes(), audit.read_bytes()) == whole_audit


def test_a_full_disk_while_a_side_output_keeps_its_pieces_names_that_output(
    run, census, whole, tmp_path, capsys, monkeypatch
):
    """A check list and a summary plot keep their pieces beside the journal with each chunk.
    A full disk there was said of --output, a file that had not failed; it is said of the
    output whose pieces could not be written (one mechanism for every writer), and the same
    command continues to the bytes of an uninterrupted run."""
    from mixer.cli.entrypoints import predict_main
    from mixer.data.tables import sinks

    dump, calls = sinks.dump_atomically, [0]

    def full_at_the_fourth(*args):  # a chunk's pieces: the check list's, then the plot's
        calls[0] += 1
        if calls[0] == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return dump(*args)

    monkeypatch.setattr(sinks, "dump_atomically", full_at_the_fourth)
    out, plot = tmp_path / "out.csv", tmp_path / "summary.png"
    args = cmd(run, census, out) + ["--to-check", "5", str(tmp_path / "chk.csv")]
    args += ["--summary-plot", str(plot)]
    fails(
        capsys,
        "predict",
        args,
        f"--summary-plot {plot}: writing failed after 1 chunk(s) (no space left on the device); "
        "they are kept: free space and run the same command to continue",
    )
    calls[0] = -(10**9)  # space freed
    assert predict_main(args) == 0
    assert "continuing an unfinished run after its 1 chunk(s)" in capsys.readouterr().out
    assert out.read_bytes() == whole["csv"] and plot.exists()

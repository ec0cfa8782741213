"""A window's model call in groups of batches (mixer.prediction.predict_job.Window.call,
mixer.prediction.resume.WindowGroups; docs/predicting.md, "A killed prediction"): each group's
results kept beside the journal as soon as it is done, so that a kill during the call redoes
at most one group, and the file is byte-identical to an uninterrupted run's."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest

from conftest import env_for_subprocess, predict_argv, ROOT, run_program, torchrun_cmd, zipf_census
from conftest import run as launch

FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"  # mixer.prediction.faults: "gk" a kill after group k
BATCH = 4  # --batch-size: a group of GROUP_BATCHES batches holds 16 inputs


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture(scope="module")
def census(tmp_path_factory, small_csv) -> str:
    """600 rows drawn from 121 descriptions by a Zipf law, some without a description: one
    window (12 chunks of 50) whose call holds several groups."""
    return zipf_census(tmp_path_factory, small_csv, 600, 5, 53)


def inputs(run, census) -> int:
    """The file's distinct model inputs (the store's keys: model input, blank description)."""
    import mixer

    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    read = mixer.load(run, device="cpu").model_inputs(frame["occ1"].tolist())
    return len(set(zip(read, frame["occ1"].str.strip().eq(""))))


def group() -> int:
    from mixer.prediction.predict_job import GROUP_BATCHES

    return GROUP_BATCHES * BATCH


def cmd(run, census, out, *extra) -> list:
    return predict_argv(run, census, out, "--chunk-size", 50, "--batch-size", BATCH, *extra)


def env(**values) -> dict:
    environment = env_for_subprocess()
    environment.update(values)
    return environment


def parts(out) -> str:
    return os.path.join(os.path.dirname(out), f".tmp-{os.path.basename(out)}.parts")


def kept(out) -> list:
    """The group files beside the journal."""
    folder = parts(out)
    return (
        sorted(n for n in os.listdir(folder) if n.startswith("window-"))
        if os.path.isdir(folder)
        else []
    )


def uninterrupted(run, census, tmp_path, *extra) -> bytes:
    from mixer.cli.entrypoints import predict_main

    whole = tmp_path / "whole" / "out.csv"
    whole.parent.mkdir()
    assert predict_main(cmd(run, census, whole, *extra)) == 0
    return whole.read_bytes()


def killed(run, census, out, fault: str, *extra):
    out.parent.mkdir(exist_ok=True)
    proc = run_program(
        "predict.py", *cmd(run, census, out, *extra), check=False, env=env(**{FAULT: fault})
    )
    return proc


@pytest.mark.parametrize(
    "extra, fault, code",
    [
        (["--head", "flat"], "g2", 9),  # the seam's kill once group 2 is kept
        (["--head", "flat"], "g2:KILL", -signal.SIGKILL),  # a real kill -9 there
    ],
)
def test_a_kill_after_a_group_resumes_to_the_bytes_and_computes_only_the_groups_after_it(
    run, census, tmp_path, model_rows, capsys, extra, fault, code
):
    from mixer.cli.entrypoints import predict_main

    whole = uninterrupted(run, census, tmp_path, *extra)
    total = inputs(run, census)
    assert total > 4 * group()  # a call of several groups
    cut = tmp_path / "cut" / "out.csv"
    proc = killed(run, census, cut, fault, *extra)
    assert proc.returncode == code, proc.stderr
    assert kept(cut) == [f"window-0-table-{g}.pkl" for g in range(3)]
    model_rows.clear()
    assert predict_main(cmd(run, census, cut, *extra)) == 0
    assert sum(model_rows) == total - 3 * group()  # groups 0-2 taken from the disk
    assert model_rows == [group()] * len(model_rows[:-1]) + model_rows[-1:]
    assert cut.read_bytes() == whole
    assert sorted(p.name for p in cut.parent.iterdir()) == ["out.csv", "out.csv.provenance.json"]


def test_a_kill_in_the_embeddings_call_keeps_the_code_tables_groups(
    run, census, tmp_path, model_rows
):
    """Two stores, each its own call in groups: a kill in the embeddings' call (after its
    group 1) redoes neither the code table's call nor those two groups."""
    import numpy as np

    from mixer.cli.entrypoints import predict_main

    extra = ["--head", "flat", "seq2seq"]
    whole = uninterrupted(
        run, census, tmp_path, *extra, "--embeddings", tmp_path / "whole" / "e.npy"
    )
    total = inputs(run, census)
    tables = -(-total // group())  # the code table's groups, kept first
    cut = tmp_path / "cut" / "out.csv"
    vectors = ["--embeddings", tmp_path / "cut" / "e.npy"]
    proc = killed(run, census, cut, f"g{tables + 1}", *extra, *vectors)
    assert proc.returncode == 9, proc.stderr
    assert len(kept(cut)) == tables + 2
    model_rows.clear()
    assert predict_main(cmd(run, census, cut, *extra, *vectors)) == 0
    assert sum(model_rows) == total - 2 * group()  # the embeddings' groups after group 1 alone
    assert cut.read_bytes() == whole
    assert np.array_equal(
        np.load(tmp_path / "cut" / "e.npy"), np.load(tmp_path / "whole" / "e.npy")
    )


def test_a_damaged_or_foreign_group_file_is_computed_again(run, census, tmp_path, model_rows):
    """Group 0's file cut short (a node lost before it reached the disk), group 1's garbled,
    group 2's holding other keys under its name: each is computed again, never trusted."""
    from mixer.cli.entrypoints import predict_main
    from mixer.prediction.resume import WindowGroups

    whole = uninterrupted(run, census, tmp_path, "--head", "flat")
    cut = tmp_path / "cut" / "out.csv"
    assert killed(run, census, cut, "g3", "--head", "flat").returncode == 9
    folder = parts(cut)
    path = [os.path.join(folder, f"window-0-table-{g}.pkl") for g in range(4)]
    with open(path[0], "r+b") as handle:
        handle.truncate(os.path.getsize(path[0]) // 2)
    with open(path[1], "r+b") as handle:
        handle.seek(os.path.getsize(path[1]) - 40)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))

    class Beside:  # the journal as WindowGroups reads it: its folder
        dir = folder

        def path(self, name):
            return os.path.join(folder, name)

    groups = WindowGroups(Beside(), 0, "table")
    import pickle

    with open(path[2], "rb") as handle:
        handle.read(len(WindowGroups.MAGIC) + 16)
        _, _, _, keys, rows = pickle.load(handle)
    groups.save(2, keys[::-1], rows)  # whole, of this window and group, but of other keys
    model_rows.clear()
    assert predict_main(cmd(run, census, cut, "--head", "flat")) == 0
    assert sum(model_rows) == inputs(run, census) - group()  # group 3 alone taken
    assert cut.read_bytes() == whole


def test_a_kill_while_the_windows_first_chunk_is_written_redoes_no_model_work(
    run, census, tmp_path, model_rows
):
    """Killed once the call is done, as chunk 0 is kept, before its journal entry ("0"):
    every group is on the disk, so the same command computes none of them again. Killed just
    after that entry ("0:KILL"), before the groups are removed: they are an earlier window's,
    never read (chunk 0's entry holds the window's inputs), and go with the parts at the end."""
    from mixer.cli.entrypoints import predict_main

    whole = uninterrupted(run, census, tmp_path, "--head", "flat")
    for fault, code in (("0", 9), ("0:KILL", -signal.SIGKILL)):
        cut = tmp_path / f"cut{code}" / "out.csv"
        assert killed(run, census, cut, fault, "--head", "flat").returncode == code
        assert len(kept(cut)) == -(-inputs(run, census) // group())
        model_rows.clear()
        assert predict_main(cmd(run, census, cut, "--head", "flat")) == 0
        assert sum(model_rows) == 0
        assert cut.read_bytes() == whole
        assert not os.path.exists(parts(cut))


def test_an_earlier_windows_groups_are_swept_when_a_call_begins(tmp_path):
    from mixer.prediction.resume import WindowGroups

    class Beside:
        dir = str(tmp_path)

        def path(self, name):
            return os.path.join(self.dir, name)

    earlier = WindowGroups(Beside(), 0, "table")
    earlier.save(0, ["a", "b"], pd.DataFrame({"x": [1, 2]}))
    (tmp_path / "window-3-table-0.pkl.new").write_bytes(b"cut short")
    now = WindowGroups(Beside(), 3, "table")
    now.save(1, ["c"], pd.DataFrame({"x": [3]}))
    (tmp_path / "state-0.pkl").write_bytes(b"")  # not a group's: left alone
    now.sweep()
    assert sorted(os.listdir(tmp_path)) == ["state-0.pkl", "window-3-table-1.pkl"]
    assert now.load(1, ["c"]).equals(pd.DataFrame({"x": [3]}))
    assert now.load(1, ["d"]) is None and now.load(0, ["c"]) is None


def test_restart_sweeps_the_groups(run, census, tmp_path, model_rows):
    from mixer.cli.entrypoints import predict_main

    cut = tmp_path / "cut" / "out.csv"
    assert killed(run, census, cut, "g1", "--head", "flat").returncode == 9
    assert kept(cut)
    model_rows.clear()
    assert predict_main(cmd(run, census, cut, "--head", "flat", "--restart")) == 0
    assert sum(model_rows) == inputs(run, census)
    assert not os.path.exists(parts(cut))


# ------------------------------------------------------------------ torchrun
def torchrun(*args) -> list:
    return torchrun_cmd(2, "--standalone") + [
        os.path.join(ROOT, "predict.py"),
        "--distributed",
        *map(str, args),
    ]


@pytest.mark.floats
def test_one_process_killed_mid_window_continues_in_two_and_two_in_one(run, census, tmp_path):
    """The groups do not depend on the number of processes (each computes every N-th batch
    of a group's plan): a window's call killed after group 2 in one process continues under
    torchrun with 2, and one killed under 2 (rank 0, which keeps the groups) continues in one
    process, each to the bytes of one process run through."""
    extra = ["--head", "flat", "seq2seq"]
    whole = uninterrupted(run, census, tmp_path, *extra)
    one_two = tmp_path / "one-two" / "out.csv"
    assert killed(run, census, one_two, "g2", *extra).returncode == 9
    assert len(kept(one_two)) == 3
    launch(torchrun(*cmd(run, census, one_two, *extra)), env=env())
    assert one_two.read_bytes() == whole
    two_one = tmp_path / "two-one" / "out.csv"
    two_one.parent.mkdir()
    lost = launch(
        torchrun(*cmd(run, census, two_one, *extra)), env=env(**{FAULT: "g2"}), check=False
    )
    assert lost.returncode != 0 and not two_one.exists()
    assert len(kept(two_one)) == 3
    run_program("predict.py", *cmd(run, census, two_one, *extra), env=env())
    assert two_one.read_bytes() == whole


# ------------------------------------------------------------------ one call's batches
@pytest.fixture(scope="module")
def occcanine(hisco_model):
    return hisco_model["hub"]


@pytest.mark.floats
@pytest.mark.parametrize(
    "model, extra, batches",
    [
        ("run", ["--head", "flat", "seq2seq", "--embeddings", "{dir}/e.npy"], 4),
        ("run", ["--head", "full", "flat", "--batch-size", "24"], 1),  # groups of lcm(24, 16)
        ("run", ["--what", "probs", "--head", "full", "--batch-size", "24"], 1),
        ("run", ["--what", "bin", "--head", "seq2seq"], 4),
        ("run", ["--what", "logits", "--threshold", "0.3"], 4),
        ("occcanine", ["--what", "probs", "--language", "en"], 4),  # OccCANINE's shaped matrix
        ("occcanine", ["--head", "flat", "seq2seq", "--language", "en"], 4),
        # the row steps on each group (the calibration of the run's calibration.json, rows
        # without a description emptied) to Parquet, which keeps the columns' types
        ("run", ["--head", "flat", "seq2seq", "--to-parquet"], 4),
    ],
)
def test_a_call_in_groups_writes_the_bytes_of_one_call(
    request, census, tmp_path, monkeypatch, model, extra, batches
):
    """Every path the window's call takes (several heads at once, the full head's batches of
    at most 16, a matrix, OccCANINE's, the embeddings): cut in groups at batch boundaries of
    its plan, the batches are one call's, and so are the bytes of every file."""
    import numpy as np

    from mixer.cli.entrypoints import predict_main
    from mixer.prediction import predict_job

    checkpoint = request.getfixturevalue(model if model == "occcanine" else "run")
    written = {}
    for name, most in (("one", 10**9), ("groups", batches)):
        folder = tmp_path / name
        folder.mkdir()
        args = [a.format(dir=folder) for a in extra if a != "--to-parquet"]
        suffix = "npy" if "--what" in extra else "parquet" if "--to-parquet" in extra else "csv"
        out = folder / f"out.{suffix}"
        with monkeypatch.context() as patched:
            patched.setattr(predict_job, "GROUP_BATCHES", most)
            assert predict_main(cmd(checkpoint, census, out, *args)) == 0
        written[name] = {
            p.name: p.read_bytes() for p in folder.iterdir() if "provenance" not in p.name
        }
        if suffix == "npy":
            written[name]["matrix"] = np.load(out).tobytes()
    assert written["one"] == written["groups"]


@pytest.mark.parametrize("batch", [16, 17, 100])
def test_the_full_heads_groups_are_4_of_its_own_batches(run, census, tmp_path, model_rows, batch):
    """The full head batches 16 rows at most whatever --batch-size: a group is 4 of its
    batches (64 inputs), so a kill redoes at most those, at any --batch-size."""
    from mixer.cli.entrypoints import predict_main

    args = ("--chunk-size", 50, "--batch-size", batch, "--head", "full")
    whole = tmp_path / "whole.csv"
    assert predict_main(predict_argv(run, census, whole, *args)) == 0
    assert sum(model_rows) == inputs(run, census) and max(model_rows) <= 4 * 16
    cut = tmp_path / "cut" / "out.csv"
    cut.parent.mkdir()
    proc = run_program(
        "predict.py", *predict_argv(run, census, cut, *args), check=False, env=env(**{FAULT: "g0"})
    )
    assert proc.returncode == 9, proc.stderr  # a group was kept, and the kill came after it
    assert predict_main(predict_argv(run, census, cut, *args)) == 0
    assert cut.read_bytes() == whole.read_bytes()


def test_a_group_is_cut_where_every_batching_of_the_call_cuts():
    """4 batches of --batch-size; beside the full head's 16 rows, the least run of rows both
    batchings cut at where 4 batches are not one."""
    from types import SimpleNamespace

    from mixer.prediction.predict_job import Window

    def rows(batch, heads, store="table"):
        config = SimpleNamespace(
            run=SimpleNamespace(batch_size=batch), coding=SimpleNamespace(head=heads)
        )
        return Window.group_rows(SimpleNamespace(job=SimpleNamespace(config=config)), store)

    assert rows(64, ["flat"]) == rows(64, ["flat", "seq2seq"]) == 256
    assert rows(64, ["full"]) == rows(8, ["full"]) * 2 == 64
    assert rows(64, ["flat", "full"]) == 256  # 16 divides 64
    assert rows(17, ["flat", "full"]) == 272  # 16 batches of 17, 17 of 16: the least common run
    assert rows(17, ["full"], store="vectors") == 68  # the embeddings batch --batch-size


def test_a_full_disk_while_a_group_is_written_keeps_the_groups_done_and_says_so(
    run, census, tmp_path, monkeypatch, capsys, model_rows
):
    """The first window's call, group 2's file cannot reach the disk: one line saying what is
    kept and that the same command continues, no piece of the file left, and the run that
    continues takes groups 0-1 and writes the uninterrupted run's bytes."""
    import errno

    from mixer.cli.entrypoints import predict_main
    from mixer.core.errors import UserError
    from mixer.prediction import resume

    whole = uninterrupted(run, census, tmp_path, "--head", "flat")
    cut = tmp_path / "cut" / "out.csv"
    cut.parent.mkdir()
    save, fsync = resume.WindowGroups.save, os.fsync

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    def full(self, group, keys, rows):
        monkeypatch.setattr(os, "fsync", no_space if group == 2 else fsync)
        try:
            return save(self, group, keys, rows)
        finally:
            monkeypatch.setattr(os, "fsync", fsync)

    monkeypatch.setattr(resume.WindowGroups, "save", full)
    with pytest.raises(UserError) as refused:
        predict_main(cmd(run, census, cut, "--head", "flat"))
    line = str(refused.value)
    assert "\n" not in line and "no space left on the device" in line, line
    assert "after 2 group(s) of batches of the first model call" in line, line
    assert "run the same command to continue" in line, line
    assert kept(cut) == ["window-0-table-0.pkl", "window-0-table-1.pkl"]  # no .new left
    monkeypatch.setattr(resume.WindowGroups, "save", save)
    model_rows.clear()
    assert predict_main(cmd(run, census, cut, "--head", "flat")) == 0
    assert sum(model_rows) == inputs(run, census) - 2 * group()
    assert cut.read_bytes() == whole


def test_the_first_calls_groups_continued_on_another_device_say_so(
    run, census, tmp_path, model_rows, capsys
):
    """A journal of no chunk whose groups were computed on another CPU model: the groups are
    taken, and the run says so, as a journal of chunks does (its kernels round otherwise)."""
    import json

    from mixer.cli.entrypoints import predict_main

    cut = tmp_path / "cut" / "out.csv"
    proc = killed(run, census, cut, "g2", "--head", "flat")
    assert proc.returncode == 9, proc.stderr
    journal = os.path.join(parts(cut), "journal.json")
    with open(journal, encoding="utf-8") as handle:
        saved = json.load(handle)
    saved["made_by"]["device"]["name"] = "Another CPU model"
    with open(journal, "w", encoding="utf-8") as handle:
        json.dump(saved, handle)
    capsys.readouterr()
    model_rows.clear()
    assert predict_main(cmd(run, census, cut, "--head", "flat")) == 0
    said = capsys.readouterr().out  # the job's lines (stdout)
    assert sum(model_rows) == inputs(run, census) - 3 * group()
    assert "continuing an unfinished run's first model call after 3 group(s)" in said, said
    assert "began on" in said and "Another CPU model" in said, said

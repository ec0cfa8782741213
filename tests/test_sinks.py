"""predict.py's outputs are sinks the job is handed (mixer.prediction.sink, predict_file's
`sinks`; docs/architecture.md, "A new output of predict.py"): a new output is a new sink, not
edits to the job."""

from __future__ import annotations

import pandas as pd
import pytest

from mixer.cli.entrypoints import predict_main
from mixer.core.errors import UserError
from mixer.prediction import sink as sinks
from mixer.prediction.sinks import default_sinks


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture
def outside():
    """A sink passed in from outside the job: it records what the job hands it."""
    events = []

    class Recording(sinks.Sink):
        fail_at = None

        @classmethod
        def check(cls, args):
            events.append("check")
            if args.coding.top_k == 7:
                raise UserError("refused by the outside sink")

        @classmethod
        def wanted(cls, args):
            return True

        def __init__(self, job):
            events.append("open")

        def add(self, job, part):
            if part.number == self.fail_at:
                raise RuntimeError("the outside sink failed")
            events.append(("add", part.number, len(part.chunk), list(part.predicted["code_1"])))

        def commit(self, job):
            events.append("commit")

        def abort(self):
            events.append("abort")

    return events, Recording


def with_sink(argv, sink):
    """predict.py with its own outputs and `sink` after them."""
    return predict_main(argv, sinks=[*default_sinks(), sink])


def test_a_registered_sink_gets_every_chunk_in_order_and_commits(run, small_csv, tmp_path, outside):
    events, recording = outside
    out = tmp_path / "out.csv"
    assert (
        with_sink(
            ["--checkpoint", run, "--input", small_csv, "--output", str(out), "--chunk-size", "50"],
            recording,
        )
        == 0
    )
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    adds = [e for e in events if isinstance(e, tuple)]
    assert events[:2] == ["check", "open"] and events[-1] == "commit"
    assert [e[1] for e in adds] == list(range(len(adds))) and sum(e[2] for e in adds) == len(table)
    assert (
        sum((e[3] for e in adds), []) == table["code_1"].tolist()
    )  # the rows the output file holds


def test_a_failing_sink_aborts_every_sink_and_leaves_nothing(run, small_csv, tmp_path, outside):
    events, recording = outside
    recording.fail_at = 1
    out = tmp_path / "out.csv"
    with pytest.raises(RuntimeError, match="outside sink failed"):
        with_sink(
            ["--checkpoint", run, "--input", small_csv, "--output", str(out), "--chunk-size", "50"],
            recording,
        )
    assert events[-1] == "abort" and "commit" not in events
    assert list(tmp_path.iterdir()) == []  # the output's temp file aborted with it


def test_a_sinks_check_refuses_before_the_model_loads(
    run, small_csv, tmp_path, outside, monkeypatch
):
    from mixer.prediction.predict import Predictor

    def never(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(Predictor, "load", never)
    with pytest.raises(
        UserError, match="refused by the outside sink"
    ):  # the program: one line, exit 2
        with_sink(
            [
                "--checkpoint",
                run,
                "--input",
                small_csv,
                "--output",
                str(tmp_path / "out.csv"),
                "--top-k",
                "7",
            ],
            outside[1],
        )
    assert outside[0] == ["check"] and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ a killed job resumes each sink
OUTSIDE = '''
import json, os, sys

from mixer.prediction import sink as sinks


class Counting(sinks.Sink):
    """Rows per code over the file, written at the end: a state that a kill must not lose."""

    @classmethod
    def wanted(cls, args):
        return True

    def __init__(self, job):
        self.counts, self.path = {}, job.config.outputs.output + ".counts.json"

    def add(self, job, part):
        if part.number == int(os.environ.get("DIE_AT", "-1")):  # a kill -9 with no journal to keep
            os._exit(9)
        for code in part.predicted["code_1"]:
            self.counts[code] = self.counts.get(code, 0) + 1

    def state_dict(self):
        return dict(self.counts)

    def load_state_dict(self, state):
        print(f"restored {sum(state.values())} rows", flush=True)
        self.counts = dict(state)

    def commit(self, job):
        with open(self.path, "w") as handle:
            json.dump(self.counts, handle, sort_keys=True)


class Stateless(Counting):
    state_dict = sinks.Sink.state_dict  # keeps no state: a killed job starts over


from mixer.cli.entrypoints import predict_main  # noqa: E402
from mixer.prediction.sinks import default_sinks  # noqa: E402

outside = Stateless if sys.argv[1] == "stateless" else Counting
sys.exit(predict_main(sys.argv[2:], sinks=[*default_sinks(), outside]))
'''


def run_outside(tmp_path, kind: str, *args, env=None):
    import subprocess
    import sys

    from conftest import ROOT, env_for_subprocess

    script = tmp_path / "outside.py"
    script.write_text(OUTSIDE, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script), kind, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**env_for_subprocess(), **(env or {})},
    )


def test_a_sink_registered_from_outside_keeps_and_restores_its_state(run, small_csv, tmp_path):
    whole, cut = tmp_path / "whole.csv", tmp_path / "cut.csv"
    cmd = ["--checkpoint", run, "--input", small_csv, "--chunk-size", "30", "--output"]
    assert run_outside(tmp_path, "stateful", *cmd, whole).returncode == 0
    killed = run_outside(
        tmp_path, "stateful", *cmd, cut, env={"MIXER_PREDICT_FAULT_AFTER_CHUNK": "2"}
    )
    assert killed.returncode == 9 and not cut.exists()
    again = run_outside(tmp_path, "stateful", *cmd, cut)
    assert again.returncode == 0, again.stderr
    assert (
        "restored 60 rows" in again.stdout
    )  # the state saved with chunk 1, the last one journaled
    assert (tmp_path / "cut.csv.counts.json").read_bytes() == (
        tmp_path / "whole.csv.counts.json"
    ).read_bytes()
    assert cut.read_bytes() == whole.read_bytes()


class Stateless(sinks.Sink):
    """A sink registered from outside that keeps no state (no Sink.state_dict)."""

    @classmethod
    def wanted(cls, args):
        return True

    def __init__(self, job):
        pass


def test_a_sink_without_state_makes_a_killed_job_start_over_and_says_so(
    run, small_csv, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out.csv"
    cmd = ["--checkpoint", run, "--input", small_csv, "--chunk-size", "30", "--output", out]
    killed = run_outside(tmp_path, "stateless", *cmd, env={"DIE_AT": "2"})  # kill -9 at chunk 2
    assert killed.returncode == 9 and not out.exists()
    assert not (tmp_path / ".tmp-out.csv.parts").exists()  # no journal: nothing to continue
    assert with_sink(list(map(str, cmd)), Stateless) == 0
    assert (
        f"--output {out}: removed 1 temporary file(s) a killed run left; this job starts over (its output "
        "test_sinks.Stateless keeps no state to continue from (it defines no Sink.state_dict), so it does not "
        "resume)"
    ) in capsys.readouterr().out
    assert len(pd.read_csv(out)) == 121 and sorted(p.name for p in tmp_path.iterdir()) == [
        "out.csv",
        "out.csv.provenance.json",
        "outside.py",
    ]


# ------------------------------------------------------------------ an output declared in one place
def tally_sink(path, stop_at=None):
    """A user's own output, declared in its class alone: rows per first code, to a JSON file
    of its own. With `stop_at`, a scheduler's SIGTERM arrives while that chunk is written."""
    import json
    import signal

    class Tally(sinks.Sink):
        flag, usage, reads, rank = "--tally", "--tally FILE", frozenset({"codes"}), 5

        @classmethod
        def files(cls, config):
            return {cls.flag: str(path)}

        def __init__(self, job):
            self.counts = {}

        def file(self):
            return self.flag, str(path)

        def add(self, job, part):
            for code in part.predicted["code_1"]:
                self.counts[code] = self.counts.get(code, 0) + 1
            if part.number == stop_at:
                signal.raise_signal(signal.SIGTERM)

        def state_dict(self):
            return dict(self.counts)

        def load_state_dict(self, state):
            self.counts = dict(state)

        def commit(self, job):
            with open(path, "w") as handle:
                json.dump(self.counts, handle, sort_keys=True)

    return Tally


def test_a_sink_passed_in_is_the_jobs_only_output_and_resumes_after_a_stop(
    run, small_csv, tmp_path, capsys
):
    """predict_main/predict_file take the sinks to write: a job whose one output is a sink of
    the caller's (no --output) is accepted, its parts lie beside that sink's declared file,
    and a stop mid-file continues to the bytes of a run never stopped."""
    import signal

    whole, cut = tmp_path / "whole.json", tmp_path / "cut.json"
    cmd = ["--checkpoint", run, "--input", small_csv, "--chunk-size", "30"]
    assert predict_main(cmd, sinks=[*default_sinks(), tally_sink(whole)]) == 0
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        assert predict_main(cmd, sinks=[*default_sinks(), tally_sink(cut, stop_at=1)]) == 0
    finally:
        for number, handler in before.items():  # the job's own, taken for its run
            signal.signal(number, handler)
    assert "stopped after 2 chunk(s) (60 rows) on a signal" in capsys.readouterr().err
    assert not cut.exists() and (tmp_path / ".tmp-cut.json.parts").is_dir()
    assert predict_main(cmd, sinks=[*default_sinks(), tally_sink(cut)]) == 0
    assert "continuing an unfinished run after its 2 chunk(s)" in capsys.readouterr().out
    assert cut.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json", "whole.json"]


# ------------------------------------------------------------------ the journal: stateful parts
def stopped_at(cmd, path, chunk):
    """predict_main with the tally sink, stopped by a scheduler's signal at chunk `chunk`."""
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        assert predict_main(cmd, sinks=[*default_sinks(), tally_sink(path, stop_at=chunk)]) == 0
    finally:
        for number, handler in before.items():  # the job's own, taken for its run
            signal.signal(number, handler)


def test_the_journal_keeps_each_stateful_part_by_its_name(run, small_csv, tmp_path, capsys):
    """The resume journal saves {name: state_dict} of the job's stateful parts, handed to it:
    each sink that resumes, the coding's tallies, the counts over the file and the stores. It
    names no output's format itself (the output's length is the output sink's state)."""
    import json
    import pickle

    out = tmp_path / "out.csv"
    cmd = ["--checkpoint", run, "--input", small_csv, "--chunk-size", "30", "--output", str(out)]
    stopped_at(cmd + ["--to-check", "5", str(tmp_path / "check.csv")], tmp_path / "t.json", 1)
    parts = tmp_path / ".tmp-out.csv.parts"
    with open(parts / "state-1.pkl", "rb") as handle:
        states = pickle.load(handle)
    names = {
        "mixer.prediction.sink_output.OutputSink",
        "mixer.prediction.sink_check_list.CheckListSink",
    }
    assert names | {"coding", "progress", "store"} <= set(states)
    assert states["mixer.prediction.sink_output.OutputSink"]["chunks"] == 2
    assert (
        states["mixer.prediction.sink_output.OutputSink"]["size"]
        == (parts / "output.csv").stat().st_size
    )
    assert sum(states["progress"]["languages"].values()) == 60  # the rows of chunks 0 and 1
    journal = json.loads((parts / "journal.json").read_text())
    assert set(journal) == {"made_by", "chunks", "rows", "started"}  # no output's length


def test_a_journal_of_the_earlier_layout_is_refused_in_one_line(run, small_csv, tmp_path, capsys):
    """A job killed under the journal's earlier layout (the output's length in journal.json, the
    states in a list) is refused as a journal of another mixer is, naming it, and --restart
    starts over; before, its parts were read as this layout's."""
    import json

    out = tmp_path / "out.csv"
    cmd = ["--checkpoint", run, "--input", small_csv, "--chunk-size", "30", "--output", str(out)]
    stopped_at(cmd, tmp_path / "t.json", 1)
    journal = tmp_path / ".tmp-out.csv.parts" / "journal.json"
    saved = json.loads(journal.read_text())
    del saved["made_by"]["journal"]  # as the earlier layout wrote it
    journal.write_text(json.dumps(dict(saved, size=1)))
    with pytest.raises(UserError) as refused:
        predict_main(cmd, sinks=[*default_sinks(), tally_sink(tmp_path / "t.json")])
    assert "were made with a journal of layout 1 (now 2: an earlier mixer's" in str(refused.value)
    assert str(refused.value).endswith("or pass --restart to start over")
    assert not out.exists()
    whole = tmp_path / "whole.csv"
    assert predict_main([*cmd[:-1], str(whole)]) == 0
    assert (
        predict_main(cmd + ["--restart"], sinks=[*default_sinks(), tally_sink(tmp_path / "t.json")])
        == 0
    )
    assert out.read_bytes() == whole.read_bytes()


# ------------------------------------------------------------------ the job's context: read-only
def test_a_sink_reads_the_jobs_context_and_cannot_change_it(run, small_csv, tmp_path):
    """A sink gets the job's context, frozen (as a training hook gets RunState): what it
    reads (the options, the model, the columns, the coding) and nothing it can set for
    another sink to read; the job's progress is its own object, not the sinks'."""
    import dataclasses

    from mixer.prediction.sink import JobContext

    seen = []

    class Meddling(sinks.Sink):
        @classmethod
        def wanted(cls, config):
            return True

        def __init__(self, job):
            seen.append(type(job))

        def add(self, job, part):
            with pytest.raises(dataclasses.FrozenInstanceError):
                job.output_kind = "csv"  # one sink telling another through the job
            seen.append((job.config.outputs.output, hasattr(job, "progress")))

    out = tmp_path / "out.csv"
    argv = ["--checkpoint", run, "--input", small_csv, "--output", str(out), "--chunk-size", "50"]
    assert with_sink(argv, Meddling) == 0
    assert seen[0] is JobContext and seen[1:] == [(str(out), False)] * 3


# ------------------------------------------------------------------ the lists, from the sinks
def test_the_files_no_output_may_replace_are_read_from_the_sinks_declarations(
    run, small_csv, tmp_path
):
    """The files a job's outputs may not replace were a list written by hand of predict.py's
    own outputs: --output named as a sink's file passed in was taken, and the sink's file
    replaced at the end. They are read from what the sinks declare, the caller's too; and the
    fields the output's provenance leaves out are the sinks' own (their flags and options)."""
    from mixer.prediction.sinks import unrecorded

    tally = tmp_path / "tally.json"
    argv = ["--checkpoint", run, "--input", small_csv, "--output", str(tally)]
    with pytest.raises(UserError, match="^--output .*tally.json: is the --tally file and would"):
        predict_main(argv, sinks=[*default_sinks(), tally_sink(tally)])
    assert list(tmp_path.iterdir()) == []

    class Beside(tally_sink(tally)):
        options = ("top_k",)  # a field that shapes its file alone (here, for the test)

    assert {"to_check", "audit", "audit_seed", "embeddings", "summary_plot"} <= set(
        unrecorded(default_sinks())
    )
    assert "output" not in unrecorded(default_sinks()) and "top_k" in unrecorded([Beside])


DECLARED = '''
import json, os, sys

from mixer.core.io import atomic_write
from mixer.prediction import sink as sinks


class Tally(sinks.Sink):
    """Rows per first code, to a JSON file of its own: declared here alone."""

    flag, usage, reads, rank = "--tally", "--tally FILE", frozenset({"codes"}), 5

    @classmethod
    def files(cls, config):
        return {cls.flag: os.environ["TALLY"]}

    def __init__(self, job):
        self.counts = {}

    def file(self):
        return self.flag, os.environ["TALLY"]

    def add(self, job, part):
        for code in part.predicted["code_1"]:
            self.counts[code] = self.counts.get(code, 0) + 1

    def state_dict(self):
        return dict(self.counts)

    def load_state_dict(self, state):
        self.counts = dict(state)

    def commit(self, job):
        def write(tmp):
            with open(tmp, "w") as handle:
                json.dump(self.counts, handle, sort_keys=True)

        atomic_write(os.environ["TALLY"], write)


from mixer.cli.entrypoints import predict_main  # noqa: E402
from mixer.prediction.sinks import default_sinks  # noqa: E402

sys.exit(predict_main(sys.argv[1:], sinks=[*default_sinks(), Tally]))
'''


def test_an_output_declared_in_its_own_module_is_checked_resumed_and_swept(
    run, small_csv, tmp_path
):
    """An output kind added in one place, a module of its own (here a script's): killed -9
    through the faults seam, the same command continues its file to an uninterrupted run's
    bytes; the job sweeps a killed run's temp file of it as it does its own outputs'; and
    it is one of the files no output may replace. No file of mixer's names it."""
    import subprocess
    import sys

    from conftest import ROOT, env_for_subprocess

    script = tmp_path / "declared.py"
    script.write_text(DECLARED, encoding="utf-8")

    def declared(folder, *args, **env):
        return subprocess.run(
            [sys.executable, str(script), "--checkpoint", run, "--input", small_csv, *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env={**env_for_subprocess(), "TALLY": str(folder / "tally.json"), **env},
        )

    for folder in ("whole", "cut"):
        (tmp_path / folder).mkdir()
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    cmd = ["--chunk-size", "30", "--output"]
    assert declared(whole, *cmd, whole / "out.csv").returncode == 0
    killed = declared(cut, *cmd, cut / "out.csv", MIXER_PREDICT_FAULT_AFTER_CHUNK="2")
    assert killed.returncode == 9 and not (cut / "tally.json").exists()
    stale = cut / ".tmp-tally.json.999999999"  # a temp file of a run killed while committing
    stale.write_text("{}")
    again = declared(cut, *cmd, cut / "out.csv")
    assert again.returncode == 0, again.stderr
    assert "continuing an unfinished run after its 2 chunk(s)" in again.stdout
    assert f"--tally {cut / 'tally.json'}: removed 1 temporary file(s)" in again.stdout
    assert not stale.exists()
    for name in ("tally.json", "out.csv"):
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name
    refused = declared(cut, "--output", cut / "tally.json")
    assert refused.returncode != 0
    assert f"--output {cut / 'tally.json'}: is the --tally file and would" in refused.stderr


def test_a_sink_that_edits_its_part_changes_no_other_output(run, small_csv, tmp_path):
    """Each sink gets its own copy of a chunk's part: a sink handed in before the output that
    changes a code and adds a column reaches neither a CSV nor a Parquet output, and so both
    hold the same rows as a job without it."""

    class Editing(sinks.Sink):
        @classmethod
        def wanted(cls, config):
            return True

        def __init__(self, job):
            pass

        def add(self, job, part):
            part.predicted["code_1"] = "REVIEW"
            part.predicted["checked"] = False
            part.chunk.loc[:, "occ1"] = "edited"

        def state_dict(self):
            return None

    written = {}
    for ext in ("csv", "parquet"):
        for edits in (False, True):
            out = tmp_path / f"{edits}.{ext}"
            given = [Editing, *default_sinks()] if edits else default_sinks()
            argv = ["--checkpoint", run, "--input", small_csv, "--output", str(out)]
            assert predict_main(argv, sinks=given) == 0
            written[ext, edits] = out.read_bytes() if ext == "csv" else pd.read_parquet(out)
    assert written["csv", True] == written["csv", False]
    pd.testing.assert_frame_equal(written["parquet", True], written["parquet", False])
    assert "REVIEW" not in set(written["parquet", True]["code_1"])


def test_an_output_asked_for_that_no_sink_passed_writes_is_refused(run, small_csv, tmp_path):
    """--to-check with sinks that do not write a check list: refused in one line naming the
    flag and the sink that writes it, before anything is written."""
    from mixer.prediction.sinks import OutputSink

    out, check = tmp_path / "out.csv", tmp_path / "check.csv"
    argv = ["--checkpoint", run, "--input", small_csv, "--output", str(out)]
    with pytest.raises(UserError, match=r"^--to-check .*check\.csv: none of the sinks passed"):
        predict_main([*argv, "--to-check", "5", str(check)], sinks=[OutputSink])
    assert not out.exists() and not check.exists()


def test_no_sink_at_all_is_refused_in_a_line_that_says_so(run, small_csv, tmp_path):
    argv = ["--checkpoint", run, "--input", small_csv, "--output", str(tmp_path / "out.csv")]
    with pytest.raises(UserError, match="^the sinks passed write no file: pass predict.py's own"):
        predict_main(argv, sinks=[])


def test_predict_file_of_a_configuration_built_in_code_makes_predict_py_s_checks(
    run, small_csv, tmp_path
):
    """predict_file(config) takes what the flags take (head greedy: seq2seq's decoding) and
    refuses what they refuse (a language given both for every row and as a column)."""
    from mixer.core.programs import PredictConfig
    from mixer.prediction.predict_job import predict_file

    def config(out, **fields):
        made = PredictConfig()
        made.model.checkpoint, made.data.input, made.outputs.output = run, small_csv, str(out)
        for name, value in fields.items():
            section, field = name.split("__")
            setattr(getattr(made, section), field, value)
        return made

    greedy, seq2seq = tmp_path / "greedy.csv", tmp_path / "seq2seq.csv"
    predict_file(config(greedy, coding__head=["greedy"]))
    predict_file(config(seq2seq, coding__head=["seq2seq"]))
    assert greedy.read_bytes() == seq2seq.read_bytes()
    both = config(tmp_path / "both.csv", data__language="en", data__language_col="occ1")
    with pytest.raises(UserError, match="^--language and --language-col were both given"):
        predict_file(both)
    assert not (tmp_path / "both.csv").exists()

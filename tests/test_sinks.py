"""predict.py's outputs are sinks a feature registers (mixer.data.tables.sinks; docs/architecture.md,
"A new output of predict.py"): a new output is a new sink, not edits to the job."""

from __future__ import annotations

import pandas as pd
import pytest

from mixer.cli.entrypoints import predict_main
from mixer.core.errors import UserError
from mixer.data.tables import sinks


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture
def outside(monkeypatch):
    """A sink registered from outside the job: it records what the job hands it."""
    events = []

    class Recording(sinks.Sink):
        fail_at = None

        @classmethod
        def check(cls, args):
            events.append("check")
            if args.top_k == 7:
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

    monkeypatch.setattr(sinks, "_SINKS", list(sinks._SINKS))
    sinks.register(60, lambda: Recording)
    return events, Recording


def test_a_registered_sink_gets_every_chunk_in_order_and_commits(run, small_csv, tmp_path, outside):
    events, _ = outside
    out = tmp_path / "out.csv"
    assert predict_main(["--checkpoint", run, "--input", small_csv, "--output", str(out),
                         "--chunk-size", "50"]) == 0
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    adds = [e for e in events if isinstance(e, tuple)]
    assert events[:2] == ["check", "open"] and events[-1] == "commit"
    assert [e[1] for e in adds] == list(range(len(adds))) and sum(e[2] for e in adds) == len(table)
    assert sum((e[3] for e in adds), []) == table["code_1"].tolist()  # the rows the output file holds


def test_a_failing_sink_aborts_every_sink_and_leaves_nothing(run, small_csv, tmp_path, outside):
    events, recording = outside
    recording.fail_at = 1
    out = tmp_path / "out.csv"
    with pytest.raises(RuntimeError, match="outside sink failed"):
        predict_main(["--checkpoint", run, "--input", small_csv, "--output", str(out), "--chunk-size", "50"])
    assert events[-1] == "abort" and "commit" not in events
    assert list(tmp_path.iterdir()) == []  # the output's temp file aborted with it


def test_a_sinks_check_refuses_before_the_model_loads(run, small_csv, tmp_path, outside, monkeypatch):
    from mixer.prediction.predict import Predictor

    def never(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(Predictor, "load", never)
    with pytest.raises(UserError, match="refused by the outside sink"):  # the program: one line, exit 2
        predict_main(["--checkpoint", run, "--input", small_csv, "--output", str(tmp_path / "out.csv"),
                      "--top-k", "7"])
    assert outside[0] == ["check"] and list(tmp_path.iterdir()) == []

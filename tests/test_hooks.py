"""What a run does at an evaluation and at its end are named hooks (mixer.training.hooks):
a new end-of-run step is a new hook, registered, and the loop (trainer.py) is not edited."""

import os

import pytest

from conftest import TINY
from mixer.cli.entrypoints import finetune_main
from mixer.training import hooks


class Witness(hooks.Hook):
    """An extra end-of-run step: it records where the loop called it and writes a file."""

    name = "witness"

    def __init__(self):
        self.calls = []

    def on_start(self, state, control):
        self.calls.append(("start", state.step))

    def on_evaluate(self, state, control):
        self.calls.append(("evaluated", state.evaluation.row["step"]))

    def on_end(self, state, control):
        model = os.path.join(state.run_dir, "model.safetensors")
        self.calls.append(("end", state.step, state.completed, os.path.exists(model)))
        with open(os.path.join(state.run_dir, "witness.txt"), "w", encoding="utf-8") as handle:
            handle.write(f"ended at step {state.step}\n")


def train(run_dir, csv, *extra):
    args = [
        "--dataset",
        csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        str(run_dir),
        "--share-val",
        "0.09",
        "--max-steps",
        "6",
        "--batch-size",
        "8",
        "--eval-interval",
        "3",
        *TINY,
        *map(str, extra),
    ]
    assert finetune_main(args) == 0
    return str(run_dir)


@pytest.fixture
def witnesses(monkeypatch):
    made = []

    def factory(cfg):
        made.append(Witness())
        return made[-1]

    monkeypatch.setattr(hooks, "REGISTERED", [factory])
    return made


def test_a_registered_hook_runs_at_the_end_of_a_run_after_the_built_in_ones(
    witnesses, small_csv, tmp_path
):
    run = train(tmp_path / "run", small_csv, "--keep-best", "val_loss")
    (witness,) = witnesses
    # evaluations at step 3, at step 6 with the encoder alone (the best is chosen among
    # these: the n-gram head changes the final one), and the final one at step 6; the end
    # after the last model is written
    assert witness.calls == [
        ("start", 0),
        ("evaluated", 3),
        ("evaluated", 6),
        ("evaluated", 6),
        ("end", 6, True, True),
    ]
    with open(os.path.join(run, "witness.txt"), encoding="utf-8") as handle:
        assert handle.read() == "ended at step 6\n"
    assert os.path.exists(os.path.join(run, "best", "README.md"))  # the built-in hooks ran too


def test_a_stopped_job_does_not_end_the_run_and_its_continuation_does(
    witnesses, small_csv, tmp_path
):
    run = train(tmp_path / "run", small_csv, "--stop-at-step", "4")
    assert [call[0] for call in witnesses[0].calls] == ["start", "evaluated"]
    assert not os.path.exists(os.path.join(run, "witness.txt"))
    train(tmp_path / "run", small_csv)
    assert witnesses[1].calls == [("start", 4), ("evaluated", 6), ("end", 6, True, True)]


def test_the_built_in_hooks_and_their_order():
    from mixer.core.config import TrainConfig
    from mixer.training.run import build_hooks

    names = [hook.name for hook in build_hooks(TrainConfig(tune_threshold=True))]
    assert names == [
        "training curves",
        "keep the best model",
        "n-gram head",  # before the thresholds and scores: they are of the combined flat head
        "tune thresholds",
        "scores and calibration",
        "model cards",
    ]
    assert "tune thresholds" not in [
        hook.name for hook in build_hooks(TrainConfig(tune_threshold=False))
    ]


# ------------------------------------------------------------------ the contract: state, control, own state
class Misses(hooks.Hook):
    """A duty that needs the final evaluation's rows, as one hook: the validation rows the
    flat head got wrong, in misses.csv (rank 0)."""

    name = "misses"

    def on_final_rows(self, state, control):
        rows = control.final_rows()  # (row, true codes, flat codes, seq2seq codes, confidences)
        if not state.is_main:
            return
        with open(os.path.join(state.run_dir, "misses.csv"), "w", encoding="utf-8") as handle:
            handle.write("row,true,flat\n")
            for row, true, flat, *_ in rows["val"]:
                if set(flat) != set(true):
                    handle.write(f"{row},{' & '.join(sorted(true))},{' & '.join(sorted(flat))}\n")


class Counter(hooks.Hook):
    """A hook with its own state: the evaluations of the run, over every job."""

    name = "counter"

    def __init__(self):
        self.evaluations = []

    def on_evaluate(self, state, control):
        self.evaluations.append(state.evaluation.row["step"])

    def state_dict(self):
        return {"evaluations": list(self.evaluations)}

    def load_state_dict(self, saved):
        self.evaluations = list(saved["evaluations"])


def test_a_duty_that_needs_the_final_evaluations_rows_is_one_hook(monkeypatch, small_csv, tmp_path):
    import pandas as pd

    monkeypatch.setattr(hooks, "REGISTERED", [lambda cfg: Misses()])
    run = train(tmp_path / "run", small_csv)
    misses = pd.read_csv(os.path.join(run, "misses.csv"), dtype=str, keep_default_na=False)
    scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
    wrong = scores[(scores["split"] == "val") & ~scores["flat_correct"]]
    assert len(wrong) > 0 and misses["row"].astype(int).tolist() == wrong["row"].tolist()
    assert misses["flat"].tolist() == wrong["flat_codes"].tolist()
    assert misses["true"].tolist() == wrong["true_codes"].tolist()


def test_a_hooks_own_state_is_saved_in_the_training_state_and_resumed(
    monkeypatch, small_csv, tmp_path
):
    import torch

    made = []
    monkeypatch.setattr(hooks, "REGISTERED", [lambda cfg: made.append(Counter()) or made[-1]])
    run = train(tmp_path / "run", small_csv, "--stop-at-step", "4")
    assert torch.load(os.path.join(run, "last.pt"), weights_only=True)["hooks"]["counter"] == {
        "evaluations": [3]
    }
    train(tmp_path / "run", small_csv)
    assert made[1].evaluations == [3, 6]  # the first job's, loaded back, and its own
    assert torch.load(os.path.join(run, "last.pt"), weights_only=True)["hooks"]["counter"] == {
        "evaluations": [3, 6]
    }


def test_the_state_a_hook_receives_is_read_only():
    from mixer.training.contract import RunState

    state = RunState(trainer=None)
    for name in ("step", "stop_reason", "thresholds", "model_extra", "evaluation"):
        with pytest.raises(AttributeError):
            setattr(state, name, None)


def test_a_training_state_from_before_the_hooks_kept_their_own_gives_the_best_to_its_hook():
    """mixer before issue 45 kept the best's record and the patience count in "progress"."""
    from mixer.training.best.hook import KeepBest
    from mixer.training.resume import hook_states

    record = {"metric": "val_loss", "value": 1.0, "step": 4, "place": [0, 32]}
    keep = KeepBest()
    keep.load_state_dict(
        hook_states({"progress": {"step": 6, "best": record, "evals_since_best": 2}})[KeepBest.name]
    )
    assert keep.best == record and keep.state_dict() == {"best": record, "evals_since_best": 2}
    assert hook_states({"progress": {"step": 6}, "hooks": {"counter": {"evaluations": [3]}}}) == {
        "counter": {"evaluations": [3]}
    }


def test_a_run_stopped_with_the_old_layout_of_the_training_state_ends_as_an_uninterrupted_one(
    small_csv, tmp_path
):
    import json

    import torch

    keep = ["--keep-best", "val_loss", "--early-stopping-patience", "5"]
    whole = train(tmp_path / "whole", small_csv, *keep)
    run = train(tmp_path / "run", small_csv, *keep, "--stop-at-step", "4")
    path = os.path.join(run, "last.pt")
    state = torch.load(path, weights_only=True)
    state["progress"].update(
        state.pop("hooks")["keep the best model"]
    )  # as mixer before issue 45 wrote it
    torch.save(state, path)
    train(tmp_path / "run", small_csv, *keep)

    def kept(directory):
        with open(os.path.join(directory, "best", "config.json"), encoding="utf-8") as handle:
            weights = json.load(handle)["weights"]
        saved = torch.load(os.path.join(directory, "last.pt"), weights_only=True)["hooks"][
            "keep the best model"
        ]
        return weights, saved["evals_since_best"], saved["best"]["step"]

    assert kept(run) == kept(whole)

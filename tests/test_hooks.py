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
    args = ["--dataset", csv, "--target-cols", "hisco_1", "hisco_2", "--save-path", str(run_dir),
            "--share-val", "0.09", "--max-steps", "6", "--batch-size", "8", "--eval-interval", "3",
            *TINY, *map(str, extra)]
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


def test_a_registered_hook_runs_at_the_end_of_a_run_after_the_built_in_ones(witnesses, small_csv, tmp_path):
    run = train(tmp_path / "run", small_csv, "--keep-best", "val_loss")
    (witness,) = witnesses
    # evaluations at step 3 and the final one at step 6; the end after the last model is written
    assert witness.calls == [("start", 0), ("evaluated", 3), ("evaluated", 6), ("end", 6, True, True)]
    with open(os.path.join(run, "witness.txt"), encoding="utf-8") as handle:
        assert handle.read() == "ended at step 6\n"
    assert os.path.exists(os.path.join(run, "best", "README.md"))  # the built-in hooks ran too


def test_a_stopped_job_does_not_end_the_run_and_its_continuation_does(witnesses, small_csv, tmp_path):
    run = train(tmp_path / "run", small_csv, "--stop-at-step", "4")
    assert [call[0] for call in witnesses[0].calls] == ["start", "evaluated"]
    assert not os.path.exists(os.path.join(run, "witness.txt"))
    train(tmp_path / "run", small_csv)
    assert witnesses[1].calls == [("start", 4), ("evaluated", 6), ("end", 6, True, True)]


def test_the_built_in_hooks_and_their_order():
    from mixer.core.config import TrainConfig
    from mixer.training.run import build_hooks

    names = [hook.name for hook in build_hooks(TrainConfig(tune_threshold=True))]
    assert names == ["training curves", "keep the best model", "tune thresholds", "scores and calibration",
                     "model cards"]
    assert "tune thresholds" not in [hook.name for hook in build_hooks(TrainConfig(tune_threshold=False))]

"""What a run does at an evaluation and at its end, as named hooks the Trainer calls
at fixed points (as Hugging Face's TrainerCallback and Lightning's Callback do).

The loop (mixer.training.trainer) is train step, evaluate, save, stop; keeping the best
(mixer.training.best.hook), tuning the thresholds, the scores and calibration rows,
and the model cards are hooks here. A new end-of-run step is a new hook: a class with
a name, added to `REGISTERED` (or to the list mixer.training.run.build_hooks makes).

Every rank calls every hook at every point, in the list's order: a hook that makes a
collective call makes it on every rank, and writes files on rank 0 alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from mixer.distributed import world as mdist
from mixer.models.model import read_model_config
from mixer.models.sources import BEST_DIR
from mixer.reporting import card
from mixer.reporting.tracking import logger
from mixer.training.validation import tuning_report


@dataclass
class Evaluation:
    """One evaluation as the hooks see it: its row of metrics, and what they add to it."""

    row: dict
    chooses: bool  # measured on the rows and thresholds every evaluation used (the best's)
    note: str = ""  # what the evaluation line adds
    save: bool = False  # the training state must be saved now, whatever --save-interval says
    new_best: bool = False
    stop: bool = False  # the run ends here (early stopping)


class Hook:
    """A run's duty at fixed points of the loop; every method is a no-op here."""

    name = "hook"
    collects_rows = False  # each evaluation keeps its rows (for the evaluation table)

    def attach(self, trainer) -> None:
        """When the Trainer is built, before any state is loaded."""

    def on_start(self, trainer) -> None:
        """Before the first step of this job, the training state loaded (all ranks)."""

    def on_evaluate(self, trainer, evaluation: Evaluation) -> None:
        """An evaluation measured, before its line is logged and the state saved."""

    def on_evaluated(self, trainer, evaluation: Evaluation) -> None:
        """After the evaluation's line and the state it saved."""

    def before_final(self, trainer, full: bool) -> bool:
        """Before the run's final evaluation is decided; False: a stop signal interrupted."""
        return True

    def needs_final(self, trainer) -> bool:
        """The final evaluation must run even if the last step was evaluated."""
        return False

    def before_final_evaluation(self, trainer, final: bool) -> bool:
        """Just before the final evaluation (when `final`); False: interrupted."""
        return True

    def on_scored(self, trainer, gathered: Optional[dict], which: str) -> None:
        """The final evaluation's rows gathered (rank 0's; None elsewhere)."""

    def on_end(self, trainer) -> None:
        """The run ended: its last step's model, state and evaluation are written."""


# factories (TrainConfig -> Hook or None) that every run adds after its own hooks
REGISTERED: list = []


def register(factory: Callable) -> Callable:
    """Every run from now on calls factory(cfg)'s hook (None: none) after its own."""
    REGISTERED.append(factory)
    return factory


def registered(cfg) -> list:
    """The hooks the registered factories make for this run."""
    return [hook for hook in (factory(cfg) for factory in REGISTERED) if hook is not None]


class Curves(Hook):
    """The training curves of logs.csv, plotted when the run ends (rank 0)."""

    name = "training curves"

    def on_end(self, trainer) -> None:
        if trainer.world.is_main:
            from mixer.reporting.plot import plot_training_curves

            plot_training_curves(trainer.run_dir)


class TuneThresholds(Hook):
    """--tune-threshold: the flat thresholds tuned before the final evaluation."""

    name = "tune thresholds"

    def before_final(self, trainer, full: bool) -> bool:
        return tune_thresholds(trainer, full)

    def needs_final(self, trainer) -> bool:
        return True  # the final evaluation reads the tuned thresholds


class Scores(Hook):
    """The per-row scores and what is derived from them (mixer.training.scores), and the
    --share-calibration rows they take in."""

    name = "scores and calibration"

    def needs_final(self, trainer) -> bool:
        return trainer.validator.collected is None and lacks_scores(trainer, trainer.run_dir)  # all ranks

    def before_final_evaluation(self, trainer, final: bool) -> bool:
        return not (final or trainer.validator.collected is not None) or score_calibration_rows(trainer)

    def on_scored(self, trainer, gathered: Optional[dict], which: str) -> None:
        write_scores(trainer, gathered, trainer.run_dir, which)


class Cards(Hook):
    """The model cards (mixer.reporting.card): RUN/README.md, and RUN/best/README.md."""

    name = "model cards"

    def on_start(self, trainer) -> None:
        best = trainer.progress.best
        if best is not None and trainer.world.is_main:  # resumed: the card may predate best/
            card.write(trainer.run_dir, *card_files(trainer, best, trainer.run_dir, trainer.parts.model_extra))

    def on_evaluated(self, trainer, evaluation: Evaluation) -> None:
        if evaluation.new_best and trainer.world.is_main:
            self.on_start(trainer)

    def on_end(self, trainer) -> None:
        """RUN/README.md describes the weights --checkpoint RUN predicts with (the best,
        when the run kept one), RUN/best/README.md the best (rank 0)."""
        if not trainer.world.is_main:
            return
        best = trainer.progress.best
        best_dir = os.path.join(trainer.run_dir, BEST_DIR)
        stored = read_model_config(best_dir if best is not None else trainer.run_dir)  # as prediction reads it
        card.write(trainer.run_dir, *card_files(trainer, best, trainer.run_dir, stored))
        if best is not None:
            card.write(best_dir, *card_files(trainer, best, best_dir, stored))


# ------------------------------------------------------------------ what the hooks share
def tune_thresholds(trainer, full: bool, stored_in: Optional[str] = None) -> bool:
    """The flat threshold with the best F1 per language (overall for languages with few
    rows) becomes the run's, for the final evaluation and predict.py (`stored_in`'s
    config.json; the run directory's by default) (all ranks)."""
    loader = trainer.parts.full_val_loader if full else None
    with trainer.window.paused():
        if trainer.evaluate(loader, tune_threshold=True) is None:  # all ranks
            trainer.progress.eval_pending = True
            return False
    before = trainer.parts.thresholds
    tuned, report = trainer.validator.tuned
    trainer.parts.thresholds = tuned
    extra = trainer.parts.model_extra
    extra["threshold"] = tuned.default  # predict.py's and the API's default
    extra["thresholds"] = tuned.table
    extra["thresholds_from"] = "tuned for these weights on the validation rows"
    logger.info(tuning_report(before, tuned, report, stored_in or trainer.run_dir))
    return True


def lacks_scores(trainer, directory: str) -> bool:
    """The directory holds no scores.parquet: rank 0 looks, every rank gets its answer
    (all ranks). A job killed after its final evaluation finds none and scores again."""
    from mixer.training.scores import SCORES

    world = trainer.world
    missing = mdist.main_only(lambda: not os.path.exists(os.path.join(directory, SCORES)), world)
    return bool(mdist.broadcast_object(missing, world))  # all ranks


def score_calibration_rows(trainer) -> bool:
    """--share-calibration's rows scored with the weights and thresholds as they are
    (all ranks; nothing to do without them). False when a stop signal interrupted it."""
    trainer.validator.collected_cal = None
    if trainer.parts.cal_loader is None:
        return True
    with trainer.window.paused():
        return trainer.evaluate(trainer.parts.cal_loader, collect=True, split="cal") is not None  # all ranks


def write_scores(trainer, gathered: Optional[dict], directory: str, which: Optional[str]) -> Optional[dict]:
    """The end-of-run step (mixer.training.scores.CodingStep) on gathered rows: the model
    directory's files, written into it unless it is RUN/best/ (the keeper writes that
    whole), and returned (rank 0; None on the others)."""
    if gathered is None or trainer.parts.coding is None:
        return None
    files = trainer.parts.coding.files(gathered, directory, which)
    if files and directory == trainer.run_dir:
        from mixer.core.io import write_content

        for name, content in files.items():
            write_content(os.path.join(directory, name), content)
    return files


def card_files(trainer, best: Optional[dict], where: str, stored: dict) -> tuple:
    """The model card (mixer.reporting.card.model_card) of the run as it stands, and what
    it was made from (card.json: the OccCANINE export makes its own card from it)."""
    p, parts = trainer.progress, trainer.parts
    progress = {"step": p.step, "total_steps": trainer.total_steps, "planned_epochs": parts.schedule.epochs,
                "epochs": trainer.epoch_fraction(), "stop_reason": p.stop_reason,
                "elapsed": trainer.eta.elapsed(), "ended": trainer.completed, "jobs": p.jobs}
    last = {"step": p.step, "place": [p.epoch, p.rows_in_epoch], "metrics": trainer.last_metrics,
            "table": trainer.last_table}
    data = {"facts": parts.card_facts, "progress": progress,
            "best": None if best is None else {k: v for k, v in best.items() if k != "table"},
            "last": {k: v for k, v in last.items() if k != "table"}}
    run_dir = trainer.run_dir
    coding = coding_summary(run_dir if best is None else os.path.join(run_dir, BEST_DIR), where)
    return card.model_card(parts.card_facts, where, stored, progress, best, last, coding=coding), data


def coding_summary(weights_dir: str, card_dir: str) -> Optional[dict]:
    """The scores of the weights in `weights_dir` as the card in `card_dir` shows them
    (mixer.training.scores.read_summary, with the path from the card to their files)."""
    from mixer.training.scores import read_summary

    summary = read_summary(weights_dir)
    if summary is None:
        return None
    relative = os.path.relpath(weights_dir, card_dir)
    return dict(summary, files="" if relative == "." else relative + "/")

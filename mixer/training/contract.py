"""The one contract between the loop and its hooks (mixer.training.hooks), as Hugging
Face's TrainerCallback events all receive (args, state, control): every hook point gets
the run's state, read-only (`RunState`), and a control (`Control`) through which a hook
asks the loop for what it needs: a stop, an evaluation, a save, the best weights kept
or swapped in, the final evaluation's rows. Only the control changes the run; a hook's
own state is its own (Hook.state_dict, saved in the training state).

Both are the loop's side: they read and change the Trainer so that no hook does.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Optional


@dataclass(frozen=True)
class Evaluation:
    """The evaluation a hook is called for (RunState.evaluation)."""

    row: dict  # its row of metrics, as logs.csv gets it
    on_sample: bool  # measured on the rows and thresholds every evaluation used (the best is chosen on these)
    final: bool  # the run's final evaluation


class RunState:
    """The run as a hook sees it, read-only: properties over the Trainer, no setters.
    Mappings come as read-only views or copies."""

    def __init__(self, trainer):
        self._t = trainer

    # what the run is
    @property
    def cfg(self):
        return self._t.cfg

    @property
    def world(self):
        return self._t.world

    @property
    def is_main(self) -> bool:
        return self._t.world.is_main

    @property
    def run_dir(self) -> str:
        return self._t.run_dir

    @property
    def model(self):
        """To save or read (RUN/best/), never to change: Control.load_weights swaps weights."""
        return self._t.parts.model

    @property
    def full_val(self) -> bool:
        """The final evaluation reads every validation row (--full-val-at-end)."""
        return self._t.parts.full_val_loader is not None

    @property
    def thresholds(self):
        return self._t.parts.thresholds

    @property
    def model_extra(self):
        """config.json's content as it stands (a live read-only view)."""
        return MappingProxyType(self._t.parts.model_extra)

    @property
    def card_facts(self) -> dict:
        return copy.deepcopy(self._t.parts.card_facts)

    @property
    def eval_conditions(self) -> dict:
        return copy.deepcopy(self._t.parts.eval_conditions)

    @property
    def coding(self):
        """The end-of-run step on scored rows (mixer.coding.scores.CodingStep), or None."""
        return self._t.parts.coding

    # where it stands
    @property
    def step(self) -> int:
        return self._t.progress.step

    @property
    def epoch(self) -> int:
        return self._t.progress.epoch

    @property
    def rows_in_epoch(self) -> int:
        return self._t.progress.rows_in_epoch

    @property
    def total_steps(self) -> int:
        return self._t.total_steps

    @property
    def planned_epochs(self) -> int:
        return self._t.parts.schedule.epochs

    @property
    def epochs(self) -> float:
        return self._t.epoch_fraction()

    @property
    def last_eval_step(self) -> int:
        return self._t.progress.last_eval_step

    @property
    def stop_reason(self) -> Optional[str]:
        return self._t.progress.stop_reason

    @property
    def jobs(self) -> list:
        return copy.deepcopy(self._t.progress.jobs)

    @property
    def elapsed(self) -> float:
        return self._t.eta.elapsed()

    @property
    def completed(self) -> bool:
        """The run reached its end and wrote its final files (on_end)."""
        return self._t.completed

    @property
    def evaluation(self) -> Optional[Evaluation]:
        """The evaluation being handled (on_evaluate), else the last one."""
        return self._t.evaluation

    @property
    def last_metrics(self) -> dict:
        return dict(self._t.last_metrics)

    @property
    def last_table(self) -> Optional[str]:
        """evaluation.csv of the last step's weights (rank 0)."""
        return self._t.last_table

    @property
    def rows_kept(self) -> bool:
        """The last evaluation kept its rows (they make the final evaluation's, if none runs)."""
        return self._t.validator.collected is not None

    @property
    def scored_last(self) -> bool:
        """This job's final evaluation scored the last step's weights (every rank)."""
        return self._t.scored_last

    @property
    def final_which(self) -> Optional[str]:
        """What the final evaluation's rows score ("the weights of the last step, N")."""
        return self._t.final_which


class Control:
    """What a hook may ask of the loop. Requests (note, save, stop, keep_rows,
    request_final, score_calibration) are honoured at the loop's next fitting place;
    services (evaluate, tune_thresholds, evaluate_rows, ...) run at once and are
    collective: every rank asks for them. A service a stop signal interrupts returns
    None (or False) and sets `interrupted`."""

    def __init__(self, trainer):
        self._t = trainer
        self.keeps_rows = False  # every evaluation on the sample keeps its rows
        self.begin_evaluation()
        self.begin_final()

    # ------------------------------------------------ the loop's side
    def begin_evaluation(self) -> None:
        self.text, self.should_save, self.stopped = "", False, False

    def begin_final(self) -> None:
        self.final_requested, self.calibration_requested, self.interrupted = False, False, False

    # ------------------------------------------------ requests
    def note(self, text: str) -> None:
        """What this evaluation's line adds."""
        self.text = text

    def save(self) -> None:
        """Save the training state after this evaluation, whatever --save-interval says."""
        self.should_save = True

    def stop(self, reason: str) -> None:
        """The run ends after this evaluation (early stopping), for `reason`."""
        self._t.progress.stop_reason = reason
        self.stopped = True

    def keep_rows(self) -> None:
        """Every evaluation on the sample keeps its rows (evaluation_table)."""
        self.keeps_rows = True

    def request_final(self) -> None:
        """(before_final) The final evaluation runs even if the last step was evaluated."""
        self.final_requested = True

    def score_calibration(self) -> None:
        """(before_final) --share-calibration's rows are scored with the final evaluation's
        rows (when it runs or the last evaluation kept its rows)."""
        self.calibration_requested = True

    # ------------------------------------------------ services (all ranks)
    def evaluate(self) -> bool:
        """An evaluation of the sample now, logged as the periodic ones are."""
        t = self._t
        t.evaluate_and_log()
        if t.progress.eval_pending:
            self.interrupted = True
        return not self.interrupted

    def tune_thresholds(self, full: bool) -> Optional[tuple]:
        """The flat thresholds with the best F1 per language on the sample (every row with
        `full`) become the run's, for the final evaluation and config.json:
        (before, tuned, report), or None when a stop signal interrupted it."""
        t = self._t
        with t.window.paused():
            if t.evaluate(t.parts.full_val_loader if full else None, tune_threshold=True) is None:
                t.progress.eval_pending = True
                self.interrupted = True
                return None
        before = t.parts.thresholds
        tuned, report = t.validator.tuned
        self.use_thresholds(
            tuned,
            {
                "threshold": tuned.default,
                "thresholds": tuned.table,
                "thresholds_from": "tuned for these weights on the validation rows",
            },
        )
        return before, tuned, report

    def use_thresholds(self, thresholds, extra: dict) -> None:
        """These flat thresholds from now on, and `extra` in config.json (threshold, thresholds,
        thresholds_from)."""
        self._t.parts.thresholds = thresholds
        self._t.parts.model_extra.update(extra)

    def score_calibration_rows(self) -> bool:
        """--share-calibration's rows scored now with the weights and thresholds as they are
        (nothing to do without them)."""
        t = self._t
        t.validator.collected_cal = None
        if t.parts.cal_loader is None:
            return True
        with t.window.paused():
            if t.evaluate(t.parts.cal_loader, collect=True, split="cal") is None:
                self.interrupted = True
        return not self.interrupted

    def evaluate_rows(self, as_final: bool) -> Optional[tuple]:
        """(metrics, rows gathered to rank 0) of the weights as they are: on the rows the
        final evaluation reads, and their noised copy (`as_final`), or on the sample every
        evaluation read; None when a stop signal interrupted it."""
        t = self._t
        t.validator.collected_noised = None  # the last step's, until measure() replaces it
        metrics = (
            t.measure(t.parts.full_val_loader, collect=True)
            if as_final
            else t.evaluate(None, collect=True)
        )
        if metrics is None:
            self.interrupted = True
            return None
        return metrics, t.validator.gather_rows()

    def encoder_flat_logits(self, rows):
        """The encoder's flat logits of these validation rows as written, (rows, codes): each
        rank computes them alone, the same bits on every rank (no collective)."""
        return self._t.validator.encoder_flat_logits(rows)

    def add_to_flat_logits(self, offsets: dict) -> None:
        """Every evaluation from now on adds offsets[split](rows) to the flat logits of a
        batch's rows (split: "val", "noised", "cal"; a function of the rows' indices in the
        split: mixer.training.validation.Validator.flat_offsets)."""
        self._t.validator.flat_offsets = dict(offsets)

    def evaluation_table(self) -> Optional[str]:
        """The evaluation table of this evaluation's rows (keep_rows), on rank 0."""
        return self._t.validator.evaluation_table()

    def table_of(self, gathered: Optional[dict]) -> Optional[str]:
        """The evaluation table of rows gathered (no collective)."""
        return self._t.validator.table_of(gathered)

    def load_weights(self, directory: str) -> None:
        """The weights of a model directory (RUN/best/) into the run's model: the last
        step's are saved by then (on_end)."""
        from safetensors.torch import load_file

        from mixer.models.model import MODEL_FILE, unwrap_model

        unwrap_model(self._t.parts.model).load_state_dict(
            load_file(os.path.join(directory, MODEL_FILE))
        )

    def final_rows(self) -> Optional[dict]:
        """The rows the final evaluation scored, gathered to rank 0 (None elsewhere, or when
        this job scored none: RunState.scored_last)."""
        return self._t.last_gathered

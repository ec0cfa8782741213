"""The best model during a run (--keep-best, --early-stopping-patience): a hook of the
loop (mixer.training.hooks) around the keeper (mixer.training.best.keeper). Its own
state, the best's record and the patience count, is saved in the training state under
its name (a training state from before it held them in "progress": mixer.training.resume)."""

from __future__ import annotations

import os
from typing import Optional

from mixer.models.sources import BEST_DIR
from mixer.reporting import card
from mixer.reporting.tracking import logger
from mixer.training.best.keeper import BestKeeper, Standing, drop_moved_best
from mixer.training.hooks import (
    Hook,
    card_files,
    lacks_scores,
    ngram_head_applies,
    ngram_head_differs,
    ngram_file,
    tune_thresholds,
    write_scores,
)

INTERRUPTED = object()


class KeepBest(Hook):
    """Judges each evaluation (the new best, the patience count, early stopping), writes
    RUN/best/ at a new best, and its final files at the end. Without --keep-best it only
    drops a best a resumed state records when RUN/best/ was moved away."""

    name = "keep the best model"

    def __init__(self):
        self.standing = Standing()  # its own state: the best's record and the patience count
        self.keeper: Optional[BestKeeper] = None
        self.unwritten = (
            False  # a new best that RUN/best/ does not hold yet (written after the save)
        )

    @property
    def best(self) -> Optional[dict]:
        """The best evaluation's record so far, or None."""
        return self.standing.best

    def state_dict(self) -> dict:
        return {"best": self.standing.best, "evals_since_best": self.standing.evals_since_best}

    def load_state_dict(self, saved: dict) -> None:
        self.standing.best = saved.get("best")
        self.standing.evals_since_best = saved.get("evals_since_best", 0)

    def on_start(self, state, control) -> None:
        cfg, standing = state.cfg, self.where(state)
        self.starting_thresholds = (
            state.thresholds,
            {k: state.model_extra.get(k) for k in ("threshold", "thresholds", "thresholds_from")},
        )  # what --tune-threshold starts from
        if cfg.keep_best:
            self.keeper = BestKeeper(
                cfg,
                state.world,
                state.run_dir,
                state.model_extra,
                lambda record: self.best_files(state, record),
                logger.info,
                state.eval_conditions,
            )
            control.keep_rows()  # the table of a new best
            self.keeper.start(standing, state.model)  # all ranks
        elif (
            standing.best is not None
        ):  # RUN/best/ moved away (keeper.check_resume refuses it otherwise)
            drop_moved_best(
                standing,
                state.run_dir,
                "this run keeps no best model",
                logger.warning if state.is_main else (lambda _line: None),
            )

    def on_evaluate(self, state, control) -> None:
        evaluation = state.evaluation
        if self.keeper is None or not evaluation.on_sample:
            return
        standing = self.where(state)
        verdict = self.keeper.judge(
            standing, evaluation.row, planned_end=state.step >= state.total_steps
        )  # all ranks
        if verdict.stop:
            control.stop(standing.stop_reason)
        if verdict.new_best:
            standing.best = self.keeper.record(
                standing, evaluation.row, control.evaluation_table()
            )  # all ranks
            self.unwritten = True
            control.save()  # last.pt records it before RUN/best/ holds it
        control.note(self.keeper.note(standing, verdict))

    def on_save(self, state, control) -> None:
        if self.unwritten and state.is_main:
            self.keeper.write(state.model, self.standing.best)
        self.unwritten = False

    def before_final(self, state, control) -> None:
        """The last step competes on the rows the others did, before the final rows,
        thresholds or flat head (the n-gram head's) change (all ranks)."""
        if (
            self.keeper is not None
            and state.last_eval_step != state.step
            and (state.full_val or state.cfg.tune_threshold or ngram_head_applies(state))
        ):
            control.evaluate()  # all ranks

    def on_end(self, state, control) -> None:
        """The best model's final files (all ranks): its per-row scores and what is derived
        from them. When the final rows or thresholds differ from those it was chosen with
        (--full-val-at-end, --tune-threshold), they also hold its thresholds tuned on its
        own outputs and its evaluation on the final rows. When its n-gram head is not the
        run's (a run finished without one, run again with it, or the reverse), it is scored
        again with the run's. RUN/best/ rewritten whole, with the run's ngram.npz. The
        best of the last step takes the last step's scores. A stop signal here leaves
        RUN/best/ as it was; the job, run again, does it."""
        best = self.standing.best
        if best is None:
            return
        best_dir = os.path.join(state.run_dir, BEST_DIR)
        remeasure, same = (
            bool(state.cfg.tune_threshold or state.full_val),
            best["step"] == state.step,
        )
        if not remeasure and same and state.scored_last:
            gathered = (
                control.final_rows()
            )  # this job's final evaluation scored these very weights (rank 0)
        elif (
            not remeasure
            and not lacks_scores(state, best_dir)
            and not ngram_head_differs(state, best_dir)
        ):  # all ranks
            return  # a job run again after the end: RUN/best/ holds its final files already
        else:
            gathered = self.evaluate_best(state, control, best, best_dir, remeasure)  # all ranks
            if gathered is INTERRUPTED:
                return
        if state.is_main:
            which = None if same else f"the best model's weights, step {best['step']}"
            files = write_scores(state, gathered, best_dir, which)
            # scored with the run's n-gram head: RUN/best/ written whole with its file
            self.keeper.write(state.model, best, dict(files or {}, **ngram_file(state)))
            if same and files:
                logger.info(
                    f"scores of the best model, the last step's weights: {best_dir} (as above)"
                )

    def evaluate_best(self, state, control, best: dict, best_dir: str, remeasure: bool):
        """The best's weights swapped in (its thresholds tuned again from the run's
        starting ones) and evaluated as the final evaluation evaluates: its rows gathered
        to rank 0, or INTERRUPTED (all ranks)."""
        if best["step"] != state.step:
            control.load_weights(best_dir)  # all ranks (the last step's are saved)
            if (
                state.cfg.tune_threshold
            ):  # from the thresholds the run started with, as for the last step's
                control.use_thresholds(*self.starting_thresholds)
                if not tune_thresholds(state, control, state.full_val, best_dir):
                    return INTERRUPTED
        measured = control.score_calibration_rows() and control.evaluate_rows(
            as_final=remeasure
        )  # all ranks
        if not measured:
            logger.warning(
                f"the best model's final evaluation was interrupted; {best_dir} keeps the files it had"
            )
            return INTERRUPTED
        metrics, gathered = measured
        if remeasure:
            best["metrics"] = dict(best["metrics"], **{f"val_{k}": v for k, v in metrics.items()})
            best["table"] = control.table_of(gathered)
        return gathered

    def where(self, state) -> Standing:
        """Its standing, at the run's place."""
        s = self.standing
        s.step, s.epoch, s.rows_in_epoch = state.step, state.epoch, state.rows_in_epoch
        return s

    def best_files(self, state, record: dict) -> dict:
        """What RUN/best/ carries besides the model: its evaluation table and model card."""
        text, data = card_files(
            state, record, os.path.join(state.run_dir, BEST_DIR), dict(state.model_extra)
        )
        files = {card.CARD: text, card.CARD_DATA: card.data_text(data)}
        if record.get("table"):
            files["evaluation.csv"] = record["table"]
        return files

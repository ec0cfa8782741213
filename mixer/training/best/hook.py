"""The best model during a run (--keep-best, --early-stopping-patience): a hook of the
loop (mixer.training.hooks) around the keeper (mixer.training.best.keeper)."""

from __future__ import annotations

import os

from mixer.models.sources import BEST_DIR
from mixer.reporting import card
from mixer.reporting.tracking import logger
from mixer.training.best.keeper import BestKeeper, drop_moved_best
from mixer.training.hooks import (Evaluation, Hook, card_files, lacks_scores, score_calibration_rows,
                                  tune_thresholds, write_scores)


class KeepBest(Hook):
    """Judges each evaluation (the new best, the patience count, early stopping), writes
    RUN/best/ at a new best, and its final files at the end. Without --keep-best it only
    drops a best a resumed state records when RUN/best/ was moved away."""

    name = "keep the best model"

    def attach(self, trainer) -> None:
        cfg, parts = trainer.cfg, trainer.parts
        self.keeper = (BestKeeper(cfg, trainer.world, trainer.run_dir, parts.model_extra,
                                  lambda record: self.best_files(trainer, record), logger.info,
                                  parts.eval_conditions) if cfg.keep_best else None)
        self.collects_rows = self.keeper is not None
        self.starting_thresholds = (parts.thresholds, {k: parts.model_extra.get(k) for k in (
            "threshold", "thresholds", "thresholds_from")})  # what --tune-threshold starts from

    def on_start(self, trainer) -> None:
        progress = trainer.progress
        if self.keeper is not None:
            self.keeper.start(progress, trainer.parts.model)  # all ranks
        elif progress.best is not None:  # RUN/best/ moved away (keeper.check_resume refuses it otherwise)
            drop_moved_best(progress, trainer.run_dir, "this run keeps no best model",
                            logger.warning if trainer.world.is_main else (lambda _line: None))

    def on_evaluate(self, trainer, evaluation: Evaluation) -> None:
        if not evaluation.chooses or self.keeper is None:
            return
        progress = trainer.progress
        verdict = self.keeper.judge(progress, evaluation.row,
                                    planned_end=progress.step >= trainer.total_steps)  # all ranks
        if verdict.new_best:
            table = trainer.validator.evaluation_table()  # all ranks: gathered to rank 0
            progress.best = self.keeper.record(progress, evaluation.row, table)
        evaluation.note = self.keeper.note(progress, verdict)
        evaluation.save = evaluation.new_best = verdict.new_best  # last.pt records it before best/ holds it
        evaluation.stop = verdict.stop

    def on_evaluated(self, trainer, evaluation: Evaluation) -> None:
        if evaluation.new_best and trainer.world.is_main:
            self.keeper.write(trainer.parts.model, trainer.progress.best)

    def before_final(self, trainer, full: bool) -> bool:
        """The last step competes on the rows the others did, before the final rows or
        thresholds change (all ranks)."""
        p = trainer.progress
        if self.keeper is not None and p.last_eval_step != p.step and (full or trainer.cfg.tune_threshold):
            trainer.evaluate_and_log()  # all ranks
            if p.eval_pending:
                return False
        return True

    def on_end(self, trainer) -> None:
        """The best model's final files (all ranks): its per-row scores and what is derived
        from them. When the final rows or thresholds differ from those it was chosen with
        (--full-val-at-end, --tune-threshold), they also hold its thresholds tuned on its
        own outputs and its evaluation on the final rows. RUN/best/ rewritten whole. The
        best of the last step takes the last step's scores. A stop signal here leaves
        RUN/best/ as it was; the job, run again, does it."""
        cfg, parts, validator = trainer.cfg, trainer.parts, trainer.validator
        best, full = trainer.progress.best, parts.full_val_loader
        if best is None:
            return
        best_dir = os.path.join(trainer.run_dir, BEST_DIR)
        remeasure = bool(cfg.tune_threshold or full is not None)
        if not remeasure and best["step"] == trainer.progress.step and trainer.scored_last:
            gathered = trainer.last_gathered  # this job's final evaluation scored these very weights (rank 0)
        elif not remeasure and not lacks_scores(trainer, best_dir):  # all ranks
            return  # a job run again after the end: RUN/best/ holds its final files already
        else:
            if best["step"] != trainer.progress.step:
                self.keeper.load_weights(parts.model)  # all ranks (the last step's are saved)
                if cfg.tune_threshold:  # from the thresholds the run started with, as for the last step's
                    parts.thresholds, extra = self.starting_thresholds
                    parts.model_extra.update(extra)
                    if not tune_thresholds(trainer, full is not None, best_dir):
                        return
            if not score_calibration_rows(trainer):  # all ranks
                logger.warning(f"the best model's final evaluation was interrupted; {best_dir} keeps "
                               "the files it had")
                return
            validator.collected_noised = None  # the last step's, until measure() replaces it
            metrics = (trainer.measure(full, collect=True) if remeasure
                       else trainer.evaluate(None, collect=True))  # all ranks: the rows it was chosen on
            if metrics is None:
                logger.warning(f"the best model's final evaluation was interrupted; {best_dir} keeps "
                               "the files it had")
                return
            gathered = validator.gather_rows()  # all ranks
            if remeasure:
                best["metrics"] = dict(best["metrics"], **{f"val_{k}": v for k, v in metrics.items()})
                best["table"] = validator.table_of(gathered)
        if trainer.world.is_main:
            same = best["step"] == trainer.progress.step
            files = write_scores(trainer, gathered, best_dir, None if same else f"the best model's weights, "
                                                                                f"step {best['step']}")
            self.keeper.write(parts.model, best, files or {})
            if same and files:
                logger.info(f"scores of the best model, the last step's weights: {best_dir} (as above)")

    def best_files(self, trainer, record: dict) -> dict:
        """What RUN/best/ carries besides the model: its evaluation table and model card."""
        text, data = card_files(trainer, record, os.path.join(trainer.run_dir, BEST_DIR),
                                trainer.parts.model_extra)
        files = {card.CARD: text, card.CARD_DATA: card.data_text(data)}
        if record.get("table"):
            files["evaluation.csv"] = record["table"]
        return files

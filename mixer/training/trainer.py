"""The training loop, written once for one process and for DDP: train step, evaluate,
save, stop.

`fit()` reads like a table of contents. One optimizer step is mixer.training.step's,
evaluating itself the Validator's (mixer.training.validation), the training state
mixer.training.resume's; what a run does at an evaluation or at its end (the best
model, early stopping, thresholds, scores, cards) are hooks (mixer.training.hooks),
called at the loop's points (start, step end, evaluation, save, before the final
evaluation, its rows, end), each with the run's state, read-only, and the control
through which a hook asks for what it needs (mixer.training.contract). Every rank runs
every line here; rank-0-only side effects go through `tracker` (a NullTracker
elsewhere) and `checkpointer` (None elsewhere).
Collectives are marked "all ranks".
"""

from __future__ import annotations

import contextlib
import time
from typing import Optional

import torch

from mixer.core.config import TrainConfig, epoch_number
from mixer.distributed import world as mdist
from mixer.distributed.world import World
from mixer.models.checkpoint import Checkpointer, rng_state
from mixer.models.model import save_model
from mixer.reporting.eta import Eta
from mixer.reporting.tracking import NullTracker, logger
from mixer.training import resume
from mixer.training.contract import Control, Evaluation, RunState
from mixer.training.hooks import Hook
from mixer.training.parts import Progress, TrainParts, TrainWindow
from mixer.training.step import optimizer_step, steps_of_epoch
from mixer.training.validation import Validator


class Trainer:
    def __init__(
        self,
        cfg: TrainConfig,
        world: World,
        parts: TrainParts,
        run_dir: str,
        tracker=None,
        checkpointer: Optional[Checkpointer] = None,
        key_codes=(),
        hooks: tuple[Hook, ...] = (),
    ):
        self.cfg = cfg
        self.world = world
        self.parts = parts
        self.run_dir = run_dir
        self.tracker = tracker or NullTracker()
        self.checkpointer = checkpointer
        self.key_codes = list(key_codes)
        self.progress = Progress()
        self.device = world.device
        self.device_type = "cuda" if world.device.startswith("cuda") else "cpu"
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
        self.autocast = (
            (lambda: torch.autocast(self.device_type, dtype=amp_dtype))
            if amp_dtype
            else contextlib.nullcontext
        )
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=cfg.precision == "fp16" and self.device_type == "cuda"
        )
        self.stop_requested = False
        self.last_metrics: dict = {}
        self.completed = False  # the run reached its end and wrote its final files
        self.last_table: Optional[str] = None  # evaluation.csv of the last step's weights (rank 0)
        self.last_gathered: Optional[dict] = None  # the rows its final evaluation scored (rank 0)
        self.final_which: Optional[str] = None  # what they score
        self.scored_last = False  # this job scored the last step's weights (every rank)
        self.evaluation: Optional[Evaluation] = None  # the evaluation the hooks are called for
        self._saved_step = -1
        self.window = TrainWindow()
        self.validator = Validator(
            cfg,
            world,
            parts,
            run_dir,
            self.autocast,
            self.key_codes,
            stopping=lambda: self.stop_requested,
        )
        self.eta = Eta(0)  # fit() starts the real one, from the resumed state
        self.signals_back = lambda: None  # fit() takes SIGTERM / SIGUSR1 (stop_on_signals)
        self.hooks: list = list(
            hooks
        )  # what the run does at evaluations and at its end (mixer.training.hooks)
        self.state, self.control = RunState(self), Control(self)  # what every hook point receives

    # ------------------------------------------------------------ the loop
    def fit(self) -> dict:
        self.signals_back = resume.stop_on_signals(self.request_stop)  # Slurm pre-emption:
        # finish the step, agree, save; the handlers of before given back by close()
        self.eta = Eta(
            self.progress.step, self.progress.elapsed, bool(self.cfg.early_stopping_patience)
        )
        if self.parts.card_facts.get("job"):
            self.progress.jobs.append(
                dict(self.parts.card_facts["job"], from_step=self.progress.step)
            )
        self.call("on_start")  # all ranks
        self.tracker.start_progress(self.total_steps, self.progress.step)
        if self.progress.eval_pending and not self.finished():  # interrupted before the restart
            self.evaluate_and_log()  # (the final evaluation runs again in finish())
        self.window = TrainWindow(self.window.clock)  # start-up is not training time
        while not self.should_stop():
            self.parts.sampler.set_epoch(self.progress.epoch, self.progress.rows_in_epoch)
            steps_before = self.progress.step
            for micro_batches in steps_of_epoch(self.parts.train_loader, self.cfg.grad_accum_steps):
                self.train_step(micro_batches)
                if self.progress.rows_in_epoch >= self.parts.sampler.rows_per_epoch:
                    self.end_epoch()
                self.maybe_evaluate()
                self.maybe_save()
                if self.should_stop():
                    break
            if self.progress.step == steps_before:  # never loop without training
                raise RuntimeError(
                    f"epoch {self.progress.epoch} yielded no step at row "
                    f"{self.progress.rows_in_epoch}; please report this"
                )
        self.completed = self.finished() and self.finish()
        if self.completed:
            self.call("on_end")  # all ranks
        else:
            self.save_checkpoint()
            logger.info(
                f"stopped at step {self.progress.step}; run again with the same "
                f"--save-path to continue"
            )
        self.tracker.close()
        return self.last_metrics

    # ------------------------------------------------------------ one step
    def train_step(self, micro_batches: list) -> None:
        local_loss = optimizer_step(self, micro_batches)  # all ranks
        rows = micro_batches[0].global_rows
        self.progress.step += 1
        self.progress.rows_in_epoch += rows
        self.window.add(local_loss, rows)
        self.maybe_report()
        self.call("on_step_end")

    def maybe_report(self) -> None:
        if not (self.progress.step % self.cfg.log_interval == 0 or self.finished()):
            return
        values = self.window_values()  # all ranks
        reading = self.eta.reading(
            self.progress.step,
            self.total_steps,
            self.epoch_fraction(),
            self.parts.schedule.epochs,
            self.evaluations_left(),
        )
        self.tracker.log_train(self.progress.step, dict(values, **reading.scalars()))
        self.tracker.progress(self.progress.step, values, reading)

    def window_values(self) -> dict:
        """Train loss and throughput since the last report, summed over ranks."""
        loss, rows, seconds = self.window.take()
        sums = torch.tensor([loss, rows], dtype=torch.float64, device=self.device)
        mdist.all_reduce_sum(sums, self.world)  # all ranks (rows are global already)
        loss_sum, _ = sums.tolist()
        values = {
            "loss": loss_sum / max(rows, 1),
            "lr": self.parts.scheduler.get_last_lr()[0],
            "samples_per_sec": rows / max(seconds, 1e-9),
        }
        self._last_train = values
        return values

    # ------------------------------------------------------------ evaluation
    def should_evaluate(self) -> bool:
        """Every --eval-interval steps, except at the last step: there the final
        evaluation (finish) runs instead, the one that also writes evaluation.csv."""
        if self.cfg.eval_interval and not self.finished():
            return self.progress.step % self.cfg.eval_interval == 0
        return False

    def maybe_evaluate(self) -> None:
        if self.should_evaluate():
            self.evaluate_and_log()

    def evaluate_and_log(self, full: bool = False, final: bool = False) -> dict:
        if self.window.rows:
            self.window_values()  # all ranks
        began = time.perf_counter()
        with self.window.paused():  # training throughput leaves evaluation and saving out
            row = self._evaluate_and_log(full, final)
        self.eta.evaluated(time.perf_counter() - began)
        return row

    def _evaluate_and_log(self, full: bool, final: bool) -> dict:
        loader = self.parts.full_val_loader if full and self.parts.full_val_loader else None
        rows = self.parts.val_rows[1 if loader is not None else 0]
        logger.info(f"evaluating at step {self.progress.step} on {rows:,} validation rows")
        # on the rows and thresholds every evaluation used, with the encoder's flat head
        # alone (not the n-gram head's combination): the best is chosen on these
        on_sample = (
            loader is None and self.validator.tuned is None and not self.validator.flat_offsets
        )
        metrics = self.measure(
            loader, collect=final or (on_sample and self.control.keeps_rows)
        )  # all ranks
        self._saved_step = -1  # the evaluation state changed: the next save writes it
        if metrics is None:  # a stop signal arrived: save now, evaluate when the job continues
            self.progress.eval_pending = True
            logger.warning(
                f"evaluation at step {self.progress.step} interrupted by the stop "
                "signal; it runs first when the job continues"
            )
            return {}
        train = getattr(self, "_last_train", {})
        row = {
            "step": self.progress.step,
            "epoch": self.progress.epoch,
            "train_loss": train.get("loss", float("nan")),
            "lr": self.parts.scheduler.get_last_lr()[0],
            "samples_per_sec": train.get("samples_per_sec", float("nan")),
        }
        row.update({f"val_{k}": v for k, v in metrics.items()})
        self.evaluation = Evaluation(row, on_sample, final)
        self.control.begin_evaluation()
        self.call("on_evaluate")  # all ranks
        control = self.control
        self.tracker.log_eval(
            row, control.text, epoch_number(self.progress.epoch, self.progress.rows_in_epoch)
        )
        self.progress.last_eval_step = self.progress.step
        self.progress.last_eval_full = loader is not None or self.parts.full_val_loader is None
        self.progress.eval_pending = False
        self.last_metrics = row
        if not self.cfg.save_interval or control.should_save:
            self.save_checkpoint()  # all ranks
        if control.stopped:
            logger.info(f"stopping at step {self.progress.step}: {self.progress.stop_reason}")
        return row

    def measure(self, loader=None, collect: bool = False) -> Optional[dict]:
        """The validation metrics of `loader`'s rows (the sample by default), and with
        --eval-noise of their noised copy as noisy_*; None when a stop signal interrupted
        them (all ranks)."""
        metrics = self.evaluate(loader, collect=collect)  # all ranks
        noisy_loader = (
            self.parts.noisy_full_val_loader if loader is not None else self.parts.noisy_val_loader
        )  # the same rows as the clean figures
        if metrics is not None and noisy_loader is not None:
            noisy = self.evaluate(noisy_loader, collect=collect, noised=True)  # all ranks
            metrics = (
                None
                if noisy is None
                else dict(
                    metrics,
                    **{
                        f"noisy_{k}": noisy[k]
                        for k in ("flat_accuracy", "flat_f1", "seq2seq_accuracy", "seq2seq_f1")
                    },
                )
            )
        return metrics

    def evaluate(
        self,
        loader=None,
        tune_threshold: bool = False,
        collect: bool = False,
        noised: bool = False,
        split: str = "val",
    ) -> Optional[dict]:
        """Metrics on the validation rows (all ranks): see Validator.evaluate."""
        return self.validator.evaluate(loader, tune_threshold, collect, noised, split)

    # ------------------------------------------------------------ epochs, saving, stopping
    def end_epoch(self) -> None:
        self.progress.epoch += 1
        self.progress.rows_in_epoch = 0
        if not self.cfg.eval_interval and not self.finished():
            self.evaluate_and_log()
        if self.cfg.save_each_epoch and self.world.is_main:
            save_model(
                self.parts.model,
                self.run_dir,
                self.parts.model_extra,
                filename=f"epoch_{self.progress.epoch}.safetensors",
            )

    def maybe_save(self) -> None:
        if self.cfg.save_interval and self.progress.step % self.cfg.save_interval == 0:
            with self.window.paused():
                self.save_checkpoint()

    def save_checkpoint(self) -> None:
        if self._saved_step == self.progress.step:
            return  # this very state is on disk already
        self._saved_step = self.progress.step
        rng = mdist.gather_to_main(rng_state(), self.world)  # all ranks: each rank's RNG, to rank 0
        if self.checkpointer is not None:  # rank 0 alone writes
            state = self.state_dict()
            state["rng"] = rng
            self.checkpointer.save(state)
        self.call("on_save")  # all ranks

    def state_dict(self) -> dict:
        return resume.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        resume.load_state_dict(self, state)

    def resume_report(self, path: str) -> str:
        return resume.resume_report(self, path)

    def close(self) -> None:
        """The job ended, however it ended: every hook stops what it still runs, and SIGTERM /
        SIGUSR1 get their handlers of before the job back."""
        self.signals_back()
        for hook in self.hooks:
            if hasattr(hook, "close"):  # a hook registered from outside may predate close
                hook.close()

    def call(self, point: str) -> None:
        """Every hook's method `point` with the run's state and the control, in the
        list's order (all ranks)."""
        for hook in self.hooks:
            getattr(hook, point)(self.state, self.control)

    @property
    def total_steps(self) -> int:
        return self.parts.schedule.total_steps

    def finished(self) -> bool:
        """The planned end reached, or early stopping ended the run."""
        return self.progress.step >= self.total_steps or self.progress.stop_reason is not None

    def epoch_fraction(self) -> float:
        return self.progress.epoch + self.progress.rows_in_epoch / max(
            1, self.parts.sampler.rows_per_epoch
        )

    def evaluations_left(self) -> int:
        """The evaluations still to come, the final one included (for the ETA)."""
        p, interval = self.progress, self.cfg.eval_interval
        periodic = (
            (self.total_steps - 1) // interval - p.step // interval
            if interval
            else self.parts.schedule.epochs - p.epoch - 1
        )
        return max(0, periodic) + 1

    def should_stop(self) -> bool:
        stop_at = self.cfg.stop_at_step
        requested = mdist.any_rank(self.stop_requested, self.world)  # all ranks
        return self.finished() or requested or bool(stop_at and self.progress.step >= stop_at)

    def finish(self) -> bool:
        """The final evaluation, evaluation.csv, the per-row scores and what is derived from
        them (mixer.coding.scores), the tuned thresholds, the model. False when a stop
        signal interrupted the final evaluation: nothing final is written and the job
        continues with it."""
        full, p, control = self.parts.full_val_loader is not None, self.progress, self.control
        control.begin_final()
        for hook in self.hooks:  # they may evaluate, tune, ask for the final evaluation (all ranks)
            hook.before_final(self.state, control)
            if (
                control.interrupted
            ):  # a stop signal: nothing final logged yet, the job continues here
                p.eval_pending = True
                return False
        final = (
            p.last_eval_step != p.step or (full and not p.last_eval_full) or control.final_requested
        )
        if control.calibration_requested and (final or self.validator.collected is not None):
            if not control.score_calibration_rows():  # all ranks
                p.eval_pending = True
                return False
        if final:
            self.evaluate_and_log(full=full, final=True)  # all ranks
            if self.progress.eval_pending:
                return False
        self.scored_last = self.validator.collected is not None  # the same on every rank
        if self.scored_last:
            self.last_gathered = self.validator.gather_rows()  # all ranks
            self.final_which = f"the weights of the last step, {self.progress.step}"
            self.last_table = self.validator.write_evaluation(self.final_which, self.last_gathered)
            self.call("on_final_rows")
        self.save_checkpoint()  # all ranks: the final state, whatever --save-interval says
        if self.world.is_main:
            save_model(
                self.parts.model,
                self.run_dir,
                dict(
                    self.parts.model_extra,
                    weights={
                        "kind": "last",
                        "step": self.progress.step,
                        "epoch": self.progress.epoch,
                        "place": [self.progress.epoch, self.progress.rows_in_epoch],
                    },
                ),
            )
        return True

    def request_stop(self, signum, _frame) -> None:
        self.stop_requested = True
        logger.warning(f"received signal {signum}: saving and stopping after this step")

"""The training loop, written once for one process and for DDP.

`fit()` reads like a table of contents; the work is in `train_step`,
`evaluate`, `maybe_evaluate`, `maybe_save`. Evaluating itself (metrics on the
validation rows, the rows of evaluation.csv, threshold tuning) is the
Validator's (mixer.training.validation); the Trainer decides when, logs and
saves. Every rank runs every line here;
rank-0-only side effects go through `tracker` (a NullTracker elsewhere) and
`checkpointer` (None elsewhere). Collectives are marked "all ranks".
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from mixer.distributed import world as mdist
from mixer.models.checkpoint import Checkpointer, rng_state, set_rng_state
from mixer.core.config import TrainConfig, epoch_number
from mixer.distributed.world import World
from mixer.core.errors import UserError, first_line
from mixer.distributed.gradsync import no_grad_sync
from mixer.models.losses import row_losses, step_loss
from mixer.reporting.metrics import Thresholds
from mixer.models.model import read_model_config, save_model, unwrap_model
from mixer.models.sources import BEST_DIR
from mixer.reporting import card
from mixer.reporting.eta import Eta
from mixer.training.best import BestKeeper, drop_moved_best
from mixer.training.schedule import Layout, Schedule, Segment
from mixer.reporting.tracking import NullTracker, logger
from mixer.training.validation import Validator, tuning_report

MAX_NONFINITE_IN_A_ROW = 5


@dataclass
class Progress:
    step: int = 0
    epoch: int = 0
    rows_in_epoch: int = 0  # rows of this epoch's permutation already trained on
    nonfinite_steps: int = 0
    last_eval_step: int = -1
    last_eval_full: bool = False  # the last evaluation used every validation row
    eval_pending: bool = False  # an evaluation a stop signal interrupted: it runs first on resume
    # the layout that made the steps, and the schedule's step -> position map (mixer.training.schedule)
    layout: Optional[dict] = None
    base_global_batch: Optional[int] = None
    schedule_segment: Optional[list] = None
    best: Optional[dict] = None  # the best evaluation so far (--keep-best; mixer.training.best)
    evals_since_best: int = 0  # evaluations after the best without an improvement
    stop_reason: Optional[str] = None  # why the run ended before its planned end (early stopping)
    jobs: list = field(default_factory=list)  # each job's command and settings from its first step (the card's)
    elapsed: float = 0.0  # seconds of training, evaluations included, over every job of the run


@dataclass
class TrainParts:
    """What the loop works on, built by mixer.training.run."""

    model: torch.nn.Module  # possibly DDP-wrapped
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    train_loader: torch.utils.data.DataLoader  # yields each micro-batch as a list of Batches (Collator.grouped)
    sampler: object  # mixer.data.dataset.StepSampler
    val_loader: torch.utils.data.DataLoader  # the validation sample (--val-max-rows)
    key_blocks: torch.Tensor
    num_blocks: int
    block_size: int
    formatter: object  # mixer.data.formatter.CodeFormatter: token ids and how blocks read
    schedule: Schedule  # run length and learning-rate position (mixer.training.schedule)
    full_val_loader: Optional[torch.utils.data.DataLoader] = None  # --full-val-at-end
    val_rows: tuple = (0, 0)  # rows of the validation sample, of the whole validation split
    val_langs: Optional[np.ndarray] = None  # language of each validation row (evaluation.csv)
    thresholds: Thresholds = Thresholds()  # the flat head's, by language (as prediction uses)
    noisy_val_loader: Optional[torch.utils.data.DataLoader] = None  # --eval-noise: noised copy
    noisy_full_val_loader: Optional[torch.utils.data.DataLoader] = None  # of every row (final)
    model_extra: dict = field(default_factory=dict)  # written to config.json
    card_facts: dict = field(default_factory=dict)  # what the model card says of the run (mixer.reporting.card)
    eval_conditions: dict = field(default_factory=dict)  # what the metrics are measured with (best.conditions)
    grad_sync: Callable[[], None] = no_grad_sync  # gradients DDP does not own (mixer.distributed.gradsync)
    cal_loader: Optional[torch.utils.data.DataLoader] = None  # --share-calibration's rows, scored at the end
    cal_langs: Optional[np.ndarray] = None  # their languages
    coding: Optional[object] = None  # the end-of-run step on the scored rows (mixer.training.scores.CodingStep)


class TrainWindow:
    """Training loss and rows since the last report, and the training time they took:
    time spent evaluating or saving (`paused()`) is not training time."""

    def __init__(self, clock: Optional[Callable[[], float]] = None):
        self.clock = clock or time.perf_counter
        self.loss, self.rows, self.excluded = 0.0, 0, 0.0
        self.start = self.clock()

    def add(self, loss: float, rows: int) -> None:
        self.loss += loss
        self.rows += rows

    @contextlib.contextmanager
    def paused(self):
        begin = self.clock()
        try:
            yield
        finally:
            self.excluded += self.clock() - begin

    def take(self) -> tuple:
        """(loss sum, rows, training seconds) of the window; starts the next one."""
        now = self.clock()
        values = (self.loss, self.rows, now - self.start - self.excluded)
        self.loss, self.rows, self.excluded, self.start = 0.0, 0, 0.0, now
        return values


class Trainer:
    def __init__(self, cfg: TrainConfig, world: World, parts: TrainParts, run_dir: str,
                 tracker=None, checkpointer: Optional[Checkpointer] = None, key_codes=()):
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
        self.autocast = (lambda: torch.autocast(self.device_type, dtype=amp_dtype)) if amp_dtype \
            else contextlib.nullcontext
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.precision == "fp16" and self.device_type == "cuda")
        self.stop_requested = False
        self.last_metrics: dict = {}
        self.completed = False  # the run reached its end and wrote its final files
        self.last_table: Optional[str] = None  # evaluation.csv of the last step's weights (rank 0)
        self.last_gathered: Optional[dict] = None  # the rows its final evaluation scored (rank 0)
        self.scored_last = False  # this job scored the last step's weights (every rank)
        self._saved_step = -1
        self._window = TrainWindow()
        self.validator = Validator(cfg, world, parts, run_dir, self.autocast, self.key_codes,
                                   stopping=lambda: self.stop_requested)
        self.keeper = (BestKeeper(cfg, world, run_dir, parts.model_extra, self.best_files, logger.info,
                                  parts.eval_conditions) if cfg.keep_best else None)
        self.starting_thresholds = (parts.thresholds, {k: parts.model_extra.get(k) for k in (
            "threshold", "thresholds", "thresholds_from")})  # what --tune-threshold starts from
        self.eta = Eta(0)  # fit() starts the real one, from the resumed state

    # ------------------------------------------------------------ the loop
    def fit(self) -> dict:
        self.install_signal_handlers()
        self.eta = Eta(self.progress.step, self.progress.elapsed, bool(self.cfg.early_stopping_patience))
        if self.parts.card_facts.get("job"):
            self.progress.jobs.append(dict(self.parts.card_facts["job"], from_step=self.progress.step))
        if self.keeper is not None:
            self.keeper.start(self.progress, self.parts.model)  # all ranks
        elif self.progress.best is not None:  # RUN/best/ moved away (best.check_resume refuses it otherwise)
            drop_moved_best(self.progress, self.run_dir, "this run keeps no best model",
                            logger.warning if self.world.is_main else (lambda _line: None))
        if self.progress.best is not None and self.world.is_main:  # resumed: the card may predate best/
            card.write(self.run_dir, *self.card_files(self.progress.best, self.run_dir, self.parts.model_extra))
        self.tracker.start_progress(self.total_steps, self.progress.step)
        if self.progress.eval_pending and not self.finished():  # interrupted before the restart
            self.evaluate_and_log()  # (the final evaluation runs again in finish())
        self._window = TrainWindow(self._window.clock)  # start-up is not training time
        while not self.should_stop():
            self.parts.sampler.set_epoch(self.progress.epoch, self.progress.rows_in_epoch)
            steps_before = self.progress.step
            for micro_batches in self.steps_of_epoch():
                self.train_step(micro_batches)
                if self.progress.rows_in_epoch >= self.parts.sampler.rows_per_epoch:
                    self.end_epoch()
                self.maybe_evaluate()
                self.maybe_save()
                if self.should_stop():
                    break
            if self.progress.step == steps_before:  # never loop without training
                raise RuntimeError(f"epoch {self.progress.epoch} yielded no step at row "
                                   f"{self.progress.rows_in_epoch}; please report this")
        self.completed = self.finished() and self.finish()
        if self.completed:
            self.finish_best()  # all ranks
            self.write_cards()
        else:
            self.save_checkpoint()
            logger.info(f"stopped at step {self.progress.step}; run again with the same "
                        f"--save-path to continue")
        self.tracker.close()
        return self.last_metrics

    def steps_of_epoch(self):
        """Groups the loader's micro-batches into optimizer steps: each arrives as its
        length groups (mixer.data.dataset.Collator.grouped), and a step trains on all of them."""
        group, micro_batches = [], 0
        for batches in self.parts.train_loader:
            group.extend(batches)
            micro_batches += 1
            if micro_batches == self.cfg.grad_accum_steps:
                yield group
                group, micro_batches = [], 0

    # ------------------------------------------------------------ one step
    def train_step(self, micro_batches: list) -> None:
        model = self.parts.model
        model.train()
        local_loss = torch.zeros((), device=self.device)
        for i, batch in enumerate(micro_batches):
            batch = batch.to(self.device, non_blocking=True)
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                with self.autocast():
                    flat_logits, seq_logits = model(batch.input_ids, batch.attention_mask,
                                                    batch.decoder_input)
                total, _, _ = row_losses(flat_logits, seq_logits, batch.labels, batch.targets,
                                         self.parts.num_blocks, self.parts.block_size,
                                         self.cfg.seq2seq_weight, self.parts.formatter.pad_id)
                loss = step_loss(total, batch.weights, batch.global_rows, self.world.world_size)
                self.scaler.scale(loss).backward()  # all ranks (DDP all-reduce on the last micro-step)
            local_loss += (total.detach() * batch.weights).sum()
        self.parts.grad_sync()  # all ranks
        rows = micro_batches[0].global_rows
        self.scaler.unscale_(self.parts.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.max_grad_norm)
        if torch.isfinite(norm):  # the same on every rank: gradients are already averaged
            self.scaler.step(self.parts.optimizer)
            self.progress.nonfinite_steps = 0
        else:
            self.progress.nonfinite_steps += 1
            self.skip_nonfinite_step()
        self.scaler.update()
        self.parts.scheduler.step()
        self.parts.optimizer.zero_grad(set_to_none=True)
        self.progress.step += 1
        self.progress.rows_in_epoch += rows
        self._window.add(float(local_loss), rows)
        self.maybe_report()

    def skip_nonfinite_step(self) -> None:
        step = self.progress.step + 1
        if self.scaler.is_enabled():
            logger.info(f"step {step}: non-finite gradients, step skipped (fp16 loss scale lowered)")
            return
        logger.warning(f"warning: step {step}: non-finite loss or gradients; step skipped "
                       f"({self.progress.nonfinite_steps} in a row)")
        if self.progress.nonfinite_steps >= MAX_NONFINITE_IN_A_ROW:
            raise UserError(f"training diverged: {self.progress.nonfinite_steps} steps in a row up "
                            f"to step {step} had non-finite loss; lower --learning-rate or use "
                            "--precision fp32. The last good checkpoint is kept.")

    def maybe_report(self) -> None:
        if not (self.progress.step % self.cfg.log_interval == 0 or self.finished()):
            return
        values = self.window_values()  # all ranks
        reading = self.eta.reading(self.progress.step, self.total_steps, self.epoch_fraction(),
                                   self.parts.schedule.epochs, self.evaluations_left())
        self.tracker.log_train(self.progress.step, dict(values, **reading.scalars()))
        self.tracker.progress(self.progress.step, values, reading)

    def window_values(self) -> dict:
        """Train loss and throughput since the last report, summed over ranks."""
        loss, rows, seconds = self._window.take()
        sums = torch.tensor([loss, rows], dtype=torch.float64, device=self.device)
        mdist.all_reduce_sum(sums, self.world)  # all ranks (rows are global already)
        loss_sum, _ = sums.tolist()
        values = {"loss": loss_sum / max(rows, 1), "lr": self.parts.scheduler.get_last_lr()[0],
                  "samples_per_sec": rows / max(seconds, 1e-9)}
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
        if self._window.rows:
            self.window_values()  # all ranks
        began = time.perf_counter()
        with self._window.paused():  # training throughput leaves evaluation and saving out
            row = self._evaluate_and_log(full, final)
        self.eta.evaluated(time.perf_counter() - began)
        return row

    def _evaluate_and_log(self, full: bool, final: bool) -> dict:
        loader = self.parts.full_val_loader if full and self.parts.full_val_loader else None
        rows = self.parts.val_rows[1 if loader is not None else 0]
        logger.info(f"evaluating at step {self.progress.step} on {rows:,} validation rows")
        # it takes part in the choice of the best on the rows and thresholds every evaluation used
        chooses = self.keeper is not None and loader is None and self.validator.tuned is None
        metrics = self.measure(loader, collect=final or chooses)  # all ranks
        self._saved_step = -1  # the evaluation state changed: the next save writes it
        if metrics is None:  # a stop signal arrived: save now, evaluate when the job continues
            self.progress.eval_pending = True
            logger.warning(f"evaluation at step {self.progress.step} interrupted by the stop "
                           "signal; it runs first when the job continues")
            return {}
        train = getattr(self, "_last_train", {})
        row = {"step": self.progress.step, "epoch": self.progress.epoch,
               "train_loss": train.get("loss", float("nan")),
               "lr": self.parts.scheduler.get_last_lr()[0],
               "samples_per_sec": train.get("samples_per_sec", float("nan"))}
        row.update({f"val_{k}": v for k, v in metrics.items()})
        verdict = (self.keeper.judge(self.progress, row, planned_end=self.progress.step >= self.total_steps)
                   if chooses else None)  # all ranks
        if verdict is not None and verdict.new_best:
            table = self.validator.evaluation_table()  # all ranks: gathered to rank 0
            self.progress.best = self.keeper.record(self.progress, row, table)
        self.tracker.log_eval(row, self.keeper.note(self.progress, verdict) if verdict else "",
                              epoch_number(self.progress.epoch, self.progress.rows_in_epoch))
        self.progress.last_eval_step = self.progress.step
        self.progress.last_eval_full = loader is not None or self.parts.full_val_loader is None
        self.progress.eval_pending = False
        self.last_metrics = row
        if not self.cfg.save_interval or (verdict is not None and verdict.new_best):
            self.save_checkpoint()  # all ranks; the state records a new best before best/ holds it
        if verdict is not None and verdict.new_best and self.world.is_main:
            self.keeper.write(self.parts.model, self.progress.best)
            card.write(self.run_dir, *self.card_files(self.progress.best, self.run_dir, self.parts.model_extra))
        if verdict is not None and verdict.stop:
            logger.info(f"stopping at step {self.progress.step}: {self.progress.stop_reason}")
        return row

    def measure(self, loader=None, collect: bool = False) -> Optional[dict]:
        """The validation metrics of `loader`'s rows (the sample by default), and with
        --eval-noise of their noised copy as noisy_*; None when a stop signal interrupted
        them (all ranks)."""
        metrics = self.evaluate(loader, collect=collect)  # all ranks
        noisy_loader = (self.parts.noisy_full_val_loader if loader is not None
                        else self.parts.noisy_val_loader)  # the same rows as the clean figures
        if metrics is not None and noisy_loader is not None:
            noisy = self.evaluate(noisy_loader, collect=collect, noised=True)  # all ranks
            metrics = None if noisy is None else dict(metrics, **{
                f"noisy_{k}": noisy[k] for k in ("flat_accuracy", "flat_f1", "seq2seq_accuracy",
                                                 "seq2seq_f1")})
        return metrics

    def evaluate(self, loader=None, tune_threshold: bool = False, collect: bool = False,
                 noised: bool = False, split: str = "val") -> Optional[dict]:
        """Metrics on the validation rows (all ranks): see Validator.evaluate."""
        return self.validator.evaluate(loader, tune_threshold, collect, noised, split)

    # ------------------------------------------------------------ epochs, saving, stopping
    def end_epoch(self) -> None:
        self.progress.epoch += 1
        self.progress.rows_in_epoch = 0
        if not self.cfg.eval_interval and not self.finished():
            self.evaluate_and_log()
        if self.cfg.save_each_epoch and self.world.is_main:
            save_model(self.parts.model, self.run_dir, self.parts.model_extra,
                       filename=f"epoch_{self.progress.epoch}.safetensors")

    def maybe_save(self) -> None:
        if self.cfg.save_interval and self.progress.step % self.cfg.save_interval == 0:
            with self._window.paused():
                self.save_checkpoint()

    def save_checkpoint(self) -> None:
        if self._saved_step == self.progress.step:
            return  # this very state is on disk already
        self._saved_step = self.progress.step
        rng = mdist.gather_to_main(rng_state(), self.world)  # all ranks: each rank's RNG, to rank 0
        if self.checkpointer is None:  # rank 0 alone writes
            return
        state = self.state_dict()
        state["rng"] = rng
        self.checkpointer.save(state)

    def state_dict(self) -> dict:
        p, schedule = self.progress, self.parts.schedule
        return {
            "model": unwrap_model(self.parts.model).state_dict(),
            "optimizer": self.parts.optimizer.state_dict(),
            "scheduler": self.parts.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {"step": p.step, "epoch": p.epoch, "rows_in_epoch": p.rows_in_epoch,
                         "nonfinite_steps": p.nonfinite_steps, "last_eval_step": p.last_eval_step,
                         "last_eval_full": p.last_eval_full, "eval_pending": p.eval_pending,
                         "layout": schedule.layout.to_dict(),
                         "base_global_batch": schedule.plan.base_global_batch,
                         "schedule_segment": schedule.segment.to_list(), "best": p.best,
                         "evals_since_best": p.evals_since_best, "stop_reason": p.stop_reason,
                         "jobs": p.jobs,
                         "elapsed": self.eta.elapsed()},
            "rng": [rng_state()],
            "key": self.key_codes,
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("key") and self.key_codes and list(state["key"]) != self.key_codes:
            raise UserError(f"{self.run_dir}/last.pt was trained with a different label key; "
                            "use a new --save-path")
        peaks = [group["initial_lr"] for group in self.parts.optimizer.param_groups]  # these flags'
        try:
            unwrap_model(self.parts.model).load_state_dict(state["model"])
            self.parts.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise UserError(f"{self.run_dir}/last.pt does not fit the model these flags build "
                            f"({first_line(exc)}); resume with the run's own flags (--config "
                            f"{self.run_dir}/args.yaml) or use a new --save-path")
        self.parts.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        known = {f for f in Progress.__dataclass_fields__}
        self.progress = Progress(**{k: v for k, v in state["progress"].items() if k in known})
        self.resume_schedule()
        self.restore_flag_learning_rates(peaks)
        states = state["rng"]
        self.reseeded = len(states) != self.world.world_size
        if self.reseeded:  # another layout: rank r's saved stream is not this rank r's
            seed_streams(self.cfg.seed, self.world.rank, self.progress.step)
        else:  # the same layout: each rank continues its own stream exactly
            set_rng_state(states[self.world.rank])

    def restore_flag_learning_rates(self, peaks: list) -> None:
        """The peak learning rates are this run's (--learning-rate, --head-lr-scale, and
        --scale-lr for the global batch it runs with now), not the saved ones; the schedule's
        factor applies to them as before. Unchanged flags and layout: the same numbers."""
        scheduler, groups = self.parts.scheduler, self.parts.optimizer.param_groups
        self.saved_peak_lr = scheduler.base_lrs[0]
        factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
        for group, peak in zip(groups, peaks):
            group["initial_lr"] = peak
            group["lr"] = peak * factor
        scheduler.base_lrs = list(peaks)
        scheduler._last_lr = [group["lr"] for group in groups]

    def resume_schedule(self) -> None:
        """Count the steps left from the saved position (any layout)."""
        p, schedule = self.progress, self.parts.schedule
        saved = Layout(**p.layout) if p.layout else schedule.layout  # mixer 0.1 files: the same
        base = p.base_global_batch or saved.global_batch
        segment = Segment(*p.schedule_segment) if p.schedule_segment else Segment()
        schedule.resume(p.step, (p.epoch, p.rows_in_epoch), segment, base)
        self.resumed_layout = saved

    def resume_report(self, path: str) -> str:
        """One line: where the run continues, and what changed when the global batch did."""
        p, schedule = self.progress, self.parts.schedule
        line = (f"resuming from {path} at step {p.step} (epoch {epoch_number(p.epoch, p.rows_in_epoch)}, "
                f"row {p.rows_in_epoch} of {schedule.plan.rows})")
        saved, layout = self.resumed_layout, schedule.layout
        if saved.global_batch != layout.global_batch:
            end_epoch, end_row = schedule.plan.end
            line += (f"; global batch changed from {saved.describe()} to {layout.describe()}: "
                     f"the run continues from this row of the same epoch order with the "
                     f"learning-rate schedule {100 * schedule.fraction_done(p.step):.1f}% done, "
                     f"and ends after {schedule.total_steps - p.step} more step(s), "
                     + (f"at epoch {end_epoch + 1} row {end_row}" if end_row
                        else f"at the end of epoch {epoch_number(end_epoch, 0)}"))
        if getattr(self, "reseeded", False):
            line += (f"; {self.world.world_size} process(es) where {saved.world_size} saved their "
                     f"random state: each rank's stream (dropout) starts from (seed, rank, step)")
        peak = self.parts.scheduler.base_lrs[0]
        if not math.isclose(peak, self.saved_peak_lr, rel_tol=1e-12):
            line += (f"; peak learning rate now {peak:g} (was {self.saved_peak_lr:g}), from this "
                     f"run's flags")
        return line

    @property
    def total_steps(self) -> int:
        return self.parts.schedule.total_steps

    def finished(self) -> bool:
        """The planned end reached, or early stopping ended the run."""
        return self.progress.step >= self.total_steps or self.progress.stop_reason is not None

    def epoch_fraction(self) -> float:
        return self.progress.epoch + self.progress.rows_in_epoch / max(1, self.parts.sampler.rows_per_epoch)

    def evaluations_left(self) -> int:
        """The evaluations still to come, the final one included (for the ETA)."""
        p, interval = self.progress, self.cfg.eval_interval
        periodic = ((self.total_steps - 1) // interval - p.step // interval if interval
                    else self.parts.schedule.epochs - p.epoch - 1)
        return max(0, periodic) + 1

    def should_stop(self) -> bool:
        stop_at = self.cfg.stop_at_step
        requested = mdist.any_rank(self.stop_requested, self.world)  # all ranks
        return self.finished() or requested or bool(stop_at and self.progress.step >= stop_at)

    def finish(self) -> bool:
        """The final evaluation, evaluation.csv, the per-row scores and what is derived from
        them (mixer.training.scores), the tuned thresholds, the model. False when a stop
        signal interrupted the final evaluation: nothing final is written and the job
        continues with it."""
        full = self.parts.full_val_loader is not None
        if (self.keeper is not None and self.progress.last_eval_step != self.progress.step
                and (full or self.cfg.tune_threshold)):
            self.evaluate_and_log()  # all ranks: the last step competes on the rows the others did
            if self.progress.eval_pending:
                return False
        if self.cfg.tune_threshold and not self.tune_thresholds(full):
            return False
        final = (self.progress.last_eval_step != self.progress.step or self.cfg.tune_threshold
                 or (full and not self.progress.last_eval_full)
                 or (self.validator.collected is None and self.lacks_scores(self.run_dir)))  # all ranks
        if (final or self.validator.collected is not None) and not self.score_calibration_rows():  # all ranks
            self.progress.eval_pending = True  # nothing final logged yet: the job continues here
            return False
        if final:
            self.evaluate_and_log(full=full, final=True)  # all ranks
            if self.progress.eval_pending:
                return False
        self.scored_last = self.validator.collected is not None  # the same on every rank
        if self.scored_last:
            gathered = self.validator.gather_rows()  # all ranks
            self.last_gathered = gathered
            which = f"the weights of the last step, {self.progress.step}"
            self.last_table = self.validator.write_evaluation(which, gathered)
            self.write_scores(gathered, self.run_dir, which)
        self.save_checkpoint()  # all ranks: the final state, whatever --save-interval says
        if self.world.is_main:
            save_model(self.parts.model, self.run_dir, dict(self.parts.model_extra, weights={
                "kind": "last", "step": self.progress.step, "epoch": self.progress.epoch,
                "place": [self.progress.epoch, self.progress.rows_in_epoch]}))
            from mixer.reporting.plot import plot_training_curves

            plot_training_curves(self.run_dir)
        return True

    def lacks_scores(self, directory: str) -> bool:
        """The directory holds no scores.parquet: rank 0 looks, every rank gets its answer
        (all ranks). A job killed after its final evaluation finds none and scores again."""
        from mixer.training.scores import SCORES

        missing = mdist.main_only(lambda: not os.path.exists(os.path.join(directory, SCORES)), self.world)
        return bool(mdist.broadcast_object(missing, self.world))  # all ranks

    def score_calibration_rows(self) -> bool:
        """--share-calibration's rows scored with the weights and thresholds as they are
        (all ranks; nothing to do without them). False when a stop signal interrupted it."""
        self.validator.collected_cal = None
        if self.parts.cal_loader is None:
            return True
        with self._window.paused():
            return self.evaluate(self.parts.cal_loader, collect=True, split="cal") is not None  # all ranks

    def write_scores(self, gathered: Optional[dict], directory: str, which: Optional[str]) -> Optional[dict]:
        """The end-of-run step (mixer.training.scores.CodingStep) on gathered rows: the model
        directory's files, written into it unless it is RUN/best/ (the keeper writes that
        whole), and returned (rank 0; None on the others)."""
        if gathered is None or self.parts.coding is None:
            return None
        files = self.parts.coding.files(gathered, directory, which)
        if files and directory == self.run_dir:
            from mixer.core.io import write_content

            for name, content in files.items():
                write_content(os.path.join(directory, name), content)
        return files

    def finish_best(self) -> None:
        """The best model's final files (all ranks): its per-row scores and what is derived
        from them, and, when the final rows or thresholds differ from those it was chosen
        with (--full-val-at-end, --tune-threshold), its thresholds tuned on its own outputs
        and its evaluation on the final rows; RUN/best/ rewritten whole. The best of the
        last step takes the last step's scores. A stop signal here leaves RUN/best/ as it
        was; the job, run again, does it."""
        best, full = self.progress.best, self.parts.full_val_loader
        if best is None:
            return
        best_dir = os.path.join(self.run_dir, BEST_DIR)
        remeasure = bool(self.cfg.tune_threshold or full is not None)
        if not remeasure and best["step"] == self.progress.step and self.scored_last:
            gathered = self.last_gathered  # this job's final evaluation scored these very weights (rank 0)
        elif not remeasure and not self.lacks_scores(best_dir):  # all ranks
            return  # a job run again after the end: RUN/best/ holds its final files already
        else:
            if best["step"] != self.progress.step:
                self.keeper.load_weights(self.parts.model)  # all ranks (the last step's are saved)
                if self.cfg.tune_threshold:  # from the thresholds the run started with, as for the last step's
                    self.parts.thresholds, extra = self.starting_thresholds
                    self.parts.model_extra.update(extra)
                    if not self.tune_thresholds(full is not None, best_dir):
                        return
            if not self.score_calibration_rows():  # all ranks
                logger.warning(f"the best model's final evaluation was interrupted; {best_dir} keeps "
                               "the files it had")
                return
            self.validator.collected_noised = None  # the last step's, until measure() replaces it
            metrics = (self.measure(full, collect=True) if remeasure
                       else self.evaluate(None, collect=True))  # all ranks: the rows it was chosen on
            if metrics is None:
                logger.warning(f"the best model's final evaluation was interrupted; {best_dir} keeps "
                               "the files it had")
                return
            gathered = self.validator.gather_rows()  # all ranks
            if remeasure:
                best["metrics"] = dict(best["metrics"], **{f"val_{k}": v for k, v in metrics.items()})
                best["table"] = self.validator.table_of(gathered)
        if self.world.is_main:
            same = best["step"] == self.progress.step
            files = self.write_scores(gathered, best_dir, None if same else f"the best model's weights, step "
                                                                             f"{best['step']}")
            self.keeper.write(self.parts.model, best, files or {})
            if same and files:
                logger.info(f"scores of the best model, the last step's weights: {best_dir} (as above)")

    def best_files(self, record: dict) -> dict:
        """What RUN/best/ carries besides the model: its evaluation table and model card."""
        text, data = self.card_files(record, os.path.join(self.run_dir, BEST_DIR), self.parts.model_extra)
        files = {card.CARD: text, card.CARD_DATA: card.data_text(data)}
        if record.get("table"):
            files["evaluation.csv"] = record["table"]
        return files

    def write_cards(self) -> None:
        """The model cards at the end: RUN/README.md describes the weights --checkpoint RUN
        predicts with (the best, when the run kept one), RUN/best/README.md the best (rank 0)."""
        if not self.world.is_main:
            return
        best = self.progress.best
        best_dir = os.path.join(self.run_dir, BEST_DIR)
        stored = read_model_config(best_dir if best is not None else self.run_dir)  # as prediction reads it
        card.write(self.run_dir, *self.card_files(best, self.run_dir, stored))
        if best is not None:
            card.write(best_dir, *self.card_files(best, best_dir, stored))

    def card_files(self, best: Optional[dict], where: str, stored: dict) -> tuple:
        """The model card (mixer.reporting.card.model_card) of the run as it stands, and what
        it was made from (card.json: the OccCANINE export makes its own card from it)."""
        p = self.progress
        progress = {"step": p.step, "total_steps": self.total_steps, "planned_epochs": self.parts.schedule.epochs,
                    "epochs": self.epoch_fraction(), "stop_reason": p.stop_reason, "elapsed": self.eta.elapsed(),
                    "ended": self.completed, "jobs": p.jobs}
        last = {"step": p.step, "place": [p.epoch, p.rows_in_epoch], "metrics": self.last_metrics,
                "table": self.last_table}
        data = {"facts": self.parts.card_facts, "progress": progress,
                "best": None if best is None else {k: v for k, v in best.items() if k != "table"},
                "last": {k: v for k, v in last.items() if k != "table"}}
        coding = coding_summary(self.run_dir if best is None else os.path.join(self.run_dir, BEST_DIR), where)
        return card.model_card(self.parts.card_facts, where, stored, progress, best, last, coding=coding), data

    def tune_thresholds(self, full: bool, stored_in: Optional[str] = None) -> bool:
        """--tune-threshold: the flat threshold with the best F1 per language (overall for
        languages with few rows) on the validation rows becomes the run's, used by the
        final evaluation that follows and stored for predict.py in `stored_in`'s
        config.json (the run directory's by default) (all ranks)."""
        loader = self.parts.full_val_loader if full else None
        with self._window.paused():
            if self.evaluate(loader, tune_threshold=True) is None:  # all ranks
                self.progress.eval_pending = True
                return False
        before = self.parts.thresholds
        tuned, report = self.validator.tuned
        self.parts.thresholds = tuned
        self.parts.model_extra["threshold"] = tuned.default  # predict.py's and the API's default
        self.parts.model_extra["thresholds"] = tuned.table
        self.parts.model_extra["thresholds_from"] = "tuned for these weights on the validation rows"
        logger.info(tuning_report(before, tuned, report, stored_in or self.run_dir))
        return True

    def install_signal_handlers(self) -> None:
        """SIGTERM / SIGUSR1 (Slurm pre-emption): finish the step, agree, save, exit 0."""
        def request_stop(signum, _frame):
            self.stop_requested = True
            logger.warning(f"received signal {signum}: saving and stopping after this step")

        for sig in (signal.SIGTERM, getattr(signal, "SIGUSR1", None)):
            if sig is not None:
                try:
                    signal.signal(sig, request_stop)
                except ValueError:  # not the main thread
                    pass


def coding_summary(weights_dir: str, card_dir: str) -> Optional[dict]:
    """The scores of the weights in `weights_dir` as the card in `card_dir` shows them
    (mixer.training.scores.read_summary, with the path from the card to their files)."""
    from mixer.training.scores import read_summary

    summary = read_summary(weights_dir)
    if summary is None:
        return None
    relative = os.path.relpath(weights_dir, card_dir)
    return dict(summary, files="" if relative == "." else relative + "/")


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def seed_streams(seed: int, rank: int, step: int) -> None:
    """Seed this rank's torch (CPU and GPU), numpy and Python random streams from
    (seed, rank, step): after a resume in another layout every rank draws its own
    dropout masks, and the same resume draws the same ones again."""
    import random

    words = np.random.SeedSequence([seed, rank, step]).generate_state(2, dtype=np.uint64)
    random.seed(int(words[0]))
    np.random.seed(int(words[0]) % (2 ** 32))
    torch.manual_seed(int(words[1]) % (2 ** 63))  # torch.manual_seed seeds every GPU too

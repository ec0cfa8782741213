"""What the loop works on and keeps: the parts a run is built from (mixer.training.run),
the progress the training state saves, and the training-time window of a report."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from mixer.distributed.gradsync import no_grad_sync
from mixer.reporting.metrics import Thresholds
from mixer.training.schedule import Schedule


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
    stop_reason: Optional[str] = None  # why the run ended before its planned end (early stopping)
    jobs: list = field(
        default_factory=list
    )  # each job's command and settings from its first step (the card's)
    elapsed: float = 0.0  # seconds of training, evaluations included, over every job of the run


@dataclass
class TrainParts:
    """What the loop works on, built by mixer.training.run."""

    model: torch.nn.Module  # possibly DDP-wrapped
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    train_loader: (
        torch.utils.data.DataLoader
    )  # yields each micro-batch as a list of Batches (Collator.grouped)
    sampler: object  # mixer.data.inputs.dataset.StepSampler
    val_loader: torch.utils.data.DataLoader  # the validation sample (--val-max-rows)
    key_blocks: torch.Tensor
    num_blocks: int
    block_size: int
    formatter: object  # mixer.data.labels.formatter.CodeFormatter: token ids and how blocks read
    schedule: Schedule  # run length and learning-rate position (mixer.training.schedule)
    full_val_loader: Optional[torch.utils.data.DataLoader] = None  # --full-val-at-end
    val_rows: tuple = (0, 0)  # rows of the validation sample, of the whole validation split
    val_langs: Optional[np.ndarray] = None  # language of each validation row (evaluation.csv)
    thresholds: Thresholds = Thresholds()  # the flat head's, by language (as prediction uses)
    noisy_val_loader: Optional[torch.utils.data.DataLoader] = None  # --eval-noise: noised copy
    noisy_full_val_loader: Optional[torch.utils.data.DataLoader] = None  # of every row (final)
    model_extra: dict = field(default_factory=dict)  # written to config.json
    card_facts: dict = field(
        default_factory=dict
    )  # what the model card says of the run (mixer.reporting.card)
    eval_conditions: dict = field(
        default_factory=dict
    )  # what the metrics are measured with (best.conditions)
    grad_sync: Callable[[], None] = (
        no_grad_sync  # gradients DDP does not own (mixer.distributed.gradsync)
    )
    cal_loader: Optional[torch.utils.data.DataLoader] = (
        None  # --share-calibration's rows, scored at the end
    )
    cal_langs: Optional[np.ndarray] = None  # their languages
    coding: Optional[object] = (
        None  # the end-of-run step on the scored rows (mixer.coding.scores.CodingStep)
    )
    crosswalks: list = field(
        default_factory=list
    )  # --crosswalk's tables: each a level the scored rows carry (mixer.data.labels.crosswalk)


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

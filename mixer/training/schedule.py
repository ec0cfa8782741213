"""How long a run is and where its learning rate stands, counted in training rows.

A run's length comes from its flags: `--num-epochs` passes over the training
rows, or `--max-steps` steps of the global batch the run started with (the
base layout), i.e. the position in the data those steps reach. Progress is a
position: (epoch, rows of that epoch's permutation already trained on).

The global batch may change between restarts (another number of processes,
`--batch-size` or `--grad-accum-steps`). The steps left are then counted from the
position in the new global batch. The learning-rate schedule, which
is a function of a position measured in steps of the base layout, continues
from where it stood and reaches its end exactly at the last step. While the
global batch stays what it was, a step's schedule position is the step
itself, so nothing changes for runs that are never re-laid out.

No torch here: the arithmetic is tested with plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Layout:
    """How one optimizer step is made: processes x rows per micro-batch x micro-batches."""

    world_size: int
    batch_size: int
    grad_accum_steps: int

    @property
    def global_batch(self) -> int:
        return self.world_size * self.batch_size * self.grad_accum_steps

    def describe(self) -> str:
        return (
            f"{self.global_batch} ({self.world_size} process(es) x {self.batch_size} rows x "
            f"{self.grad_accum_steps} accumulation step(s))"
        )

    def to_dict(self) -> dict:
        return {
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "grad_accum_steps": self.grad_accum_steps,
        }


def steps_per_epoch(rows: int, global_batch: int) -> int:
    """Every row is trained on once per epoch; the last step may be smaller."""
    return math.ceil(rows / global_batch)


def steps_between(start: tuple, end: tuple, rows: int, global_batch: int) -> int:
    """Optimizer steps from position `start` to the first step boundary at or after `end`.
    Positions are (epoch, rows of that epoch done), with rows < `rows`."""
    (epoch, row), (end_epoch, end_row) = start, end
    if (epoch, row) >= (end_epoch, end_row):
        return 0
    if epoch == end_epoch:
        return math.ceil((end_row - row) / global_batch)
    return (
        math.ceil((rows - row) / global_batch)
        + (end_epoch - epoch - 1) * steps_per_epoch(rows, global_batch)
        + math.ceil(end_row / global_batch)
    )


@dataclass(frozen=True)
class Plan:
    """The run's length and warm-up, in steps of the base global batch."""

    rows: int  # training rows per epoch
    base_global_batch: int
    total: int  # schedule length, in base steps
    warmup: int  # warm-up length, in base steps
    end: tuple  # the position where training ends

    @classmethod
    def make(
        cls,
        rows: int,
        base_global_batch: int,
        num_epochs: int,
        max_steps: Optional[int],
        warmup_steps: Optional[int],
        warmup_pct: float,
    ) -> "Plan":
        per_epoch = steps_per_epoch(rows, base_global_batch)
        if max_steps:
            total = max_steps
            epochs, steps = divmod(max_steps, per_epoch)
            end = (epochs, steps * base_global_batch)
        else:
            total = num_epochs * per_epoch
            end = (num_epochs, 0)
        warmup = warmup_steps if warmup_steps is not None else int(math.ceil(warmup_pct * total))
        return cls(
            rows=rows, base_global_batch=base_global_batch, total=total, warmup=warmup, end=end
        )

    def factor(self, position: float) -> float:
        """Linear warm-up to the peak, then linear decay to 0 at the end."""
        if self.warmup and position < self.warmup:
            return (position + 1) / self.warmup
        span = max(1, self.total - self.warmup)
        return max(0.0, (self.total - position) / span)


@dataclass(frozen=True)
class Segment:
    """Schedule position of optimizer step s: start_position + (s - start_step) * rate."""

    start_step: int = 0
    start_position: float = 0.0
    rate: float = 1.0

    def position(self, step: int) -> float:
        return self.start_position + (step - self.start_step) * self.rate

    @property
    def is_identity(self) -> bool:
        return self.start_step == 0 and self.start_position == 0.0 and self.rate == 1.0

    def to_list(self) -> list:
        return [self.start_step, self.start_position, self.rate]


class Schedule:
    """The plan, the current layout and the step -> position mapping.

    `factor(step)` is what the LambdaLR calls; `total_steps` is the step at
    which training ends under the current layout."""

    def __init__(
        self,
        rows: int,
        layout: Layout,
        num_epochs: int,
        max_steps: Optional[int],
        warmup_steps: Optional[int],
        warmup_pct: float,
    ):
        self.layout = layout
        self._length = dict(
            num_epochs=num_epochs,
            max_steps=max_steps,
            warmup_steps=warmup_steps,
            warmup_pct=warmup_pct,
        )
        self.plan = Plan.make(rows, layout.global_batch, **self._length)
        self.segment = Segment()
        self.total_steps = self.plan.total

    def factor(self, step: int) -> float:
        return self.plan.factor(self.segment.position(step))

    @property
    def epochs(self) -> int:
        """The epochs the run plans: whole ones, and the one --max-steps ends inside."""
        epochs, rows = self.plan.end
        return epochs + (1 if rows else 0)

    def fraction_done(self, step: int) -> float:
        return min(1.0, self.segment.position(step) / max(1, self.plan.total))

    def resume(self, step: int, position: tuple, segment: Segment, base_global_batch: int) -> None:
        """Continue from `step` at data `position`; `segment` mapped the steps made so far
        to schedule positions, measured in steps of `base_global_batch`."""
        if base_global_batch != self.plan.base_global_batch:
            self.plan = Plan.make(self.plan.rows, base_global_batch, **self._length)
        remaining = steps_between(position, self.plan.end, self.plan.rows, self.layout.global_batch)
        self.total_steps = step + remaining
        if self.layout.global_batch == base_global_batch and segment.is_identity:
            self.segment = (
                segment  # never re-laid out: position = step (the schedule as it always was)
            )
            return
        here = segment.position(step)
        rate = (self.plan.total - here) / remaining if remaining else 1.0
        self.segment = Segment(step, here, rate)

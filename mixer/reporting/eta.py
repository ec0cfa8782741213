"""Where a run is and how long it has left, for every progress line: the plain lines
of a log file (as under Slurm), the bar on a terminal, W&B and TensorBoard.

The estimate is measured, never assumed: the seconds a training step has taken in
this job (everything between evaluations: data, steps, checkpoints) times the steps
left, plus the mean evaluation of this job times the evaluations left. Before the first
evaluation its time is unknown, and the line says so. Elapsed counts every job of the
run (the training state keeps it across a resume). With early stopping the run may end
sooner, and the line says that too.

No torch here: the arithmetic is tested with a fake clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from mixer.core.config import epoch_number


def clock_text(seconds: float) -> str:
    """0:04:05, 27:46:40 (hours grow past a day: a log reader sums nothing)."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass(frozen=True)
class Reading:
    """One progress report's place and time."""

    step: int
    total_steps: int
    epoch: int  # the epoch of the step, from 1 (epoch_number)
    epochs: int
    epoch_fraction: float  # epochs done, with the part of the current one
    elapsed: float
    remaining: Optional[float]  # None: no step measured yet
    evaluations_timed: bool
    early_stopping: bool

    def where(self) -> str:
        return f"{self.step}/{self.total_steps} steps, epoch {self.epoch}/{self.epochs}"

    def when(self) -> str:
        text = f"elapsed {clock_text(self.elapsed)}"
        if self.remaining is None:
            return text
        text += f", remaining {clock_text(self.remaining)}"
        notes = ([] if self.evaluations_timed else ["evaluations not timed yet"]) + (
            ["early stopping may end it sooner"] if self.early_stopping else []
        )
        return text + (f" ({'; '.join(notes)})" if notes else "")

    def scalars(self) -> dict:
        """For W&B and TensorBoard (train/... beside loss and lr)."""
        values = {"epoch": self.epoch_fraction, "elapsed_s": self.elapsed}
        if self.remaining is not None:
            values["remaining_s"] = self.remaining
        return values


class Eta:
    """Measures this job's steps and evaluations; `reading` makes a progress report."""

    def __init__(
        self,
        step: int,
        elapsed_before: float = 0.0,
        early_stopping: bool = False,
        clock: Optional[Callable[[], float]] = None,
    ):
        self.clock = clock or time.monotonic
        self.start = self.clock()
        self.start_step = step
        self.elapsed_before = elapsed_before
        self.early_stopping = early_stopping
        self.evaluation_seconds: list = []

    def elapsed(self) -> float:
        return self.elapsed_before + self.clock() - self.start

    def evaluated(self, seconds: float) -> None:
        self.evaluation_seconds.append(seconds)

    def reading(
        self, step: int, total_steps: int, epoch_fraction: float, epochs: int, evaluations_left: int
    ) -> Reading:
        steps = step - self.start_step
        remaining = None
        if steps > 0:
            training = self.clock() - self.start - sum(self.evaluation_seconds)
            remaining = training / steps * max(0, total_steps - step)
            if self.evaluation_seconds:
                remaining += (
                    evaluations_left * sum(self.evaluation_seconds) / len(self.evaluation_seconds)
                )
        whole = int(epoch_fraction)
        epoch = min(epoch_number(whole, 0 if epoch_fraction == whole else 1), epochs)
        return Reading(
            step,
            total_steps,
            epoch,
            epochs,
            epoch_fraction,
            self.elapsed(),
            remaining,
            bool(self.evaluation_seconds),
            self.early_stopping,
        )


SIGNAL_MARGIN = 120  # seconds: scripts/slurm_*.sbatch ask for the time-limit signal this early


def slurm_line(
    remaining: float,
    job_end: float,
    now: float,
    job_id: str,
    early_stopping: bool,
    evaluations_timed: bool = True,
) -> str:
    """The start-up line under Slurm: the estimate against the job's end, less the
    margin at which the project's job scripts have Slurm send the time-limit signal
    (--signal=B:USR1@120): the run must end before the signal, not before the limit."""
    left = job_end - now
    usable = left - SIGNAL_MARGIN
    head = (
        f"Slurm job {job_id}: {clock_text(left)} left until its time limit, "
        f"{clock_text(usable)} until the time-limit signal of scripts/slurm_*.sbatch "
        f"(--signal=B:USR1@{SIGNAL_MARGIN}); this run needs about {clock_text(remaining)} more"
        + ("" if evaluations_timed else " and its evaluations")
    )
    if remaining <= usable:
        return head + ": it should end in this job"
    share = max(0.0, usable) / remaining
    return (
        head
        + f": the signal comes first, after about {100 * share:.0f}% of it"
        + (" (unless early stopping ends the run sooner)" if early_stopping else "")
        + ". At the time-limit signal every rank saves and stops; the run continues only "
        "when the job is requeued: scripts/slurm_*.sbatch ask Slurm for the signal "
        f"(--signal=B:USR1@{SIGNAL_MARGIN}) and --requeue, and requeue the job themselves; a job "
        "without them must be submitted again with the same --save-path"
    )

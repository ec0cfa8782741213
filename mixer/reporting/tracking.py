"""Where numbers go: logs.csv, W&B, TensorBoard, the progress bar. Rank 0 holds a real
`Tracker`; other ranks hold a `NullTracker` that does nothing, so callers never
test the rank themselves."""

from __future__ import annotations

import csv
import logging
import os
import sys
from typing import Optional

LOGS = "logs.csv"
BASE_COLUMNS = ["step", "epoch", "train_loss", "lr", "samples_per_sec"]

logger = logging.getLogger("mixer")


def configure_logging(level: str, is_main: bool) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level if is_main else "ERROR")
    logger.propagate = False


class NullTracker:
    def start_progress(self, total: int, initial: int) -> None: ...
    def progress(self, step: int, values: dict, reading=None) -> None: ...
    def log_eval(self, row: dict, note: str, epoch: int) -> None: ...
    def log_train(self, step: int, values: dict) -> None: ...
    def close(self) -> None: ...


class Tracker(NullTracker):
    """logs.csv (one row per evaluation), optional W&B run, progress bar or log lines."""

    def __init__(
        self,
        run_dir: str,
        config: dict,
        wandb_settings: Optional[dict] = None,
        resume_step: int = 0,
        tensorboard: bool = False,
    ):
        self.path = os.path.join(run_dir, LOGS)
        self.bar = None
        self.wandb = None
        self.tensorboard = None
        self.slurm_said = None  # the Slurm line: not yet, or said with(out) evaluations timed
        self._trim_logs(resume_step)
        if wandb_settings:
            from mixer.reporting.wandb_run import start_wandb

            self.wandb = start_wandb(run_dir, config, **wandb_settings)
        if tensorboard:  # for clusters where W&B is not allowed: the same scalars, as files
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(
                os.path.join(run_dir, "tensorboard"), purge_step=resume_step + 1
            )

    def _trim_logs(self, resume_step: int) -> None:
        """On resume, rows written after the checkpoint are replayed: drop them."""
        if not os.path.exists(self.path):
            return
        with open(self.path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        kept = [r for r in rows if int(r["step"]) <= resume_step]
        if len(kept) != len(rows):
            self._write_rows(kept, list(rows[0].keys()) if rows else BASE_COLUMNS)

    def _write_rows(self, rows, columns) -> None:
        from mixer.core.io import atomic_write

        def write(tmp):
            with open(tmp, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)

        atomic_write(self.path, write)

    def start_progress(self, total: int, initial: int) -> None:
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def progress(self, step: int, values: dict, reading=None) -> None:
        """A progress report: the bar's postfix on a terminal, else one plain line with
        where the run is and how long it has left (mixer.reporting.eta.Reading)."""
        text = {k: f"{v:.4g}" for k, v in values.items()}
        if self.bar is not None:
            self.bar.n = step
            if reading is not None:  # the bar shows the steps and the elapsed time itself
                self.bar.set_description(f"epoch {reading.epoch}/{reading.epochs}", refresh=False)
                if reading.remaining is not None:
                    from mixer.reporting.eta import clock_text

                    text["remaining"] = clock_text(reading.remaining)
            self.bar.set_postfix(text, refresh=True)
        else:
            parts = [f"{k} {v}" for k, v in text.items()]
            if reading is not None:
                parts = [reading.where()] + parts + [reading.when()]
            logger.info("step %d: %s", step, ", ".join(parts))
        if (
            reading is not None
            and reading.remaining is not None
            and self.slurm_said in (None, False)
        ):
            if self.slurm_said is None or reading.evaluations_timed:
                self.slurm_said = reading.evaluations_timed
                self.say_slurm(reading)

    def say_slurm(self, reading) -> None:
        """Under Slurm: the estimate against the job's time limit, at the first report, and
        again when the first evaluation's time is part of it."""
        import time

        from mixer.distributed.launch import slurm_job_end
        from mixer.reporting.eta import slurm_line

        job = slurm_job_end()
        if job is not None:
            self.write(
                slurm_line(
                    reading.remaining,
                    job[1],
                    time.time(),
                    job[0],
                    reading.early_stopping,
                    reading.evaluations_timed,
                )
            )

    def write(self, message: str) -> None:
        """A line beside the bar, or in the log."""
        if self.bar is not None:
            self.bar.write(message)
        else:
            logger.info(message)

    def log_train(self, step: int, values: dict) -> None:
        scalars = {f"train/{k}": v for k, v in values.items()}
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)
        self._tensorboard(scalars, step)

    def _tensorboard(self, scalars: dict, step: int) -> None:
        if self.tensorboard is not None:
            for name, value in scalars.items():
                self.tensorboard.add_scalar(name, value, step)
            self.tensorboard.flush()

    def log_eval(self, row: dict, note: str, epoch: int) -> None:
        """logs.csv's row (its `epoch`: epochs completed) and the evaluation line, which
        names `epoch`, the step's epoch from 1 (mixer.reporting.eta.epoch_number)."""
        exists = os.path.exists(self.path)
        if exists:
            with open(self.path, newline="") as handle:
                header = next(csv.reader(handle), [])
            if header != list(row):
                with open(self.path, newline="") as handle:
                    old = list(csv.DictReader(handle))
                self._write_rows(old + [row], list(dict.fromkeys(header + list(row))))
                exists = None
        if exists is not None:
            with open(self.path, "a", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(row))
                if not exists:
                    writer.writeheader()
                writer.writerow(row)
        scalars = {k: v for k, v in row.items() if k != "step"}
        if self.wandb is not None:
            self.wandb.log(scalars, step=int(row["step"]))
        self._tensorboard(scalars, int(row["step"]))
        summary = ", ".join(
            f"{k[4:]} {v:.4f}"
            for k, v in row.items()
            if k
            in (
                "val_loss",
                "val_flat_accuracy",
                "val_flat_f1",
                "val_seq2seq_accuracy",
                "val_token_accuracy",
            )
        )
        self.write(
            f"eval step {row['step']} (epoch {epoch}): {summary}" + (f"; {note}" if note else "")
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.tensorboard is not None:
            self.tensorboard.close()

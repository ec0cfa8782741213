"""The best model of a run and when to stop (--keep-best, --early-stopping-patience).

The rule (`judge`, plain numbers). An evaluation is the new best when its metric is
strictly better than the best so far (lower for losses, higher for the rest; NaN never
is). So is one whose metric equals the best's at an earlier place in the data (ties keep
the earlier step). The patience count is the number of evaluations after the best that
did not improve on it by at least --early-stopping-min-delta; an evaluation at or before
the best's place (one a resume replays) counts none. Places are (epoch, rows of the
epoch trained on): a resume in another layout counts other steps, never another place.

In the run (`BestKeeper`, all ranks): each evaluation's metrics are already all-reduced
sums over every rank's rows. Rank 0 judges and every rank receives its verdict
(a broadcast), so every rank agrees on the best and stops at the same step. The best's
record (metric, value, step, epoch, place, its metrics and its evaluation table) and
the patience count (`Standing`, the KeepBest hook's own state) live in the training
state (last.pt). A new best is committed in
this order: last.pt first (it holds the record and the weights of this very step), then
RUN/best/ (mixer.models.model_dir, written whole or not at all), then RUN/README.md. A
kill between the two leaves a state whose best is ahead of RUN/best/: the resume
writes RUN/best/ from the weights it loaded, which are the best's. A best/ left without
a training state (a run started over in the same directory) is removed.

The record holds what its value was measured with (`conditions`): a resume that would
measure the metric otherwise, or by another metric, is refused while RUN/best/ holds it
(`check_resume`, before anything is written). With RUN/best/ moved away the run drops
the state's record and count and keeps its best afresh, or none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from mixer.core.config import BEST_METRICS, TrainConfig, epoch_number
from mixer.core.errors import UserError
from mixer.distributed import world as mdist
from mixer.models.sources import BEST_DIR, is_run_directory, run_config

RECORD_KEYS = (
    "metric",
    "value",
    "step",
    "epoch",
    "place",
    "conditions",
)  # best/config.json's "weights", and "metrics"


@dataclass
class Standing:
    """Where the best stands: the best's record and the patience count (the KeepBest
    hook's own state, saved in the training state), at the run's place (step, epoch,
    rows of the epoch), and the stop reason a verdict gave."""

    best: Optional[dict] = None  # the best evaluation so far
    evals_since_best: int = 0  # evaluations after the best without an improvement
    step: int = 0
    epoch: int = 0
    rows_in_epoch: int = 0
    stop_reason: Optional[str] = None  # why the run ends early (early stopping)


@dataclass(frozen=True)
class Verdict:
    new_best: bool
    waited: int  # evaluations after the best without an improvement
    stop: bool


def better(metric: str, value: float, than: float) -> bool:
    if value != value:  # NaN
        return False
    if than != than:
        return True
    return value < than if BEST_METRICS[metric] == "min" else value > than


def judge(
    best: Optional[dict],
    waited: int,
    metric: str,
    value: float,
    place: tuple,
    patience: Optional[int],
    min_delta: float,
) -> Verdict:
    """The verdict on one evaluation (see the module's docstring)."""
    if best is None:
        new_best, improved, after_best = value == value, True, True
    else:
        earlier = tuple(place) < tuple(best["place"])
        new_best = better(metric, value, best["value"]) or (value == best["value"] and earlier)
        improved = better(metric, value, best["value"]) and abs(value - best["value"]) >= min_delta
        after_best = tuple(place) > tuple(best["place"])
    waited = waited + 1 if after_best and not improved else 0
    return Verdict(new_best, waited, bool(patience) and waited >= patience)


def check_metric(cfg: TrainConfig) -> None:
    """Before anything is written: a noised metric needs the noised validation copy."""
    if cfg.keep_best and "noisy" in cfg.keep_best and not cfg.eval_noise:
        raise UserError(
            f"--keep-best {cfg.keep_best} is measured on the noised validation copy, which "
            "this run does not make; leave out --no-eval-noise (or pass --eval-noise 2), "
            "or keep the best by another metric"
        )


def conditions(cfg: TrainConfig, sample, thresholds) -> dict:
    """What an evaluation's metrics depend on besides the weights, recorded with the best.
    They are its validation rows (`sample`, the rows every evaluation reads), the loss
    weights (val_loss), the flat thresholds (the flat head's counts) and the noised copy's edits
    (the noised metrics). A value measured under other conditions does not compare."""
    import hashlib

    import numpy as np

    rows = np.asarray(sample, dtype=np.int64)
    return {
        "rows": int(len(rows)),
        "sample": hashlib.sha256(rows.tobytes()).hexdigest()[:16],
        "val_max_rows": cfg.val_max_rows,
        "seq2seq_weight": float(cfg.seq2seq_weight),
        "threshold": float(thresholds.default),
        "thresholds": thresholds.table,
        "eval_noise": cfg.eval_noise,
    }


def changed_condition(metric: str, recorded: Optional[dict], current: dict) -> Optional[tuple]:
    """(as recorded, as now, the flags as recorded) when a condition `metric` depends on
    differs, else None; a record without conditions (mixer before they were recorded)
    is not checked."""
    from mixer.reporting.metrics import Thresholds

    if not recorded:
        return None
    if (recorded["rows"], recorded["sample"]) != (current["rows"], current["sample"]):
        was, now = recorded["rows"], current["rows"]
        return (
            f"on {was:,} validation rows",
            f"on {now:,}" if was != now else "on another sample of them",
            f"--val-max-rows {recorded['val_max_rows']}",
        )
    if metric == "val_loss" and recorded["seq2seq_weight"] != current["seq2seq_weight"]:
        return (
            f"with --seq2seq-weight {recorded['seq2seq_weight']:g}",
            f"with {current['seq2seq_weight']:g}",
            f"--seq2seq-weight {recorded['seq2seq_weight']:g}",
        )
    if "flat" in metric and not metric.endswith("_loss"):
        was = Thresholds.of(recorded["threshold"], recorded["thresholds"])
        now = Thresholds.of(current["threshold"], current["thresholds"])
        if was != now:
            return (
                f"with flat thresholds {was.describe()}",
                f"with {now.describe()}",
                "the thresholds it had (--threshold, --inherit-thresholds)",
            )
    if "noisy" in metric and recorded["eval_noise"] != current["eval_noise"]:
        return (
            f"with --eval-noise {recorded['eval_noise']}",
            f"with {current['eval_noise']}",
            f"--eval-noise {recorded['eval_noise']}",
        )
    return None


def disk_record(run_dir: str) -> Optional[dict]:
    """The record RUN/best/ holds (its config.json's "weights"), or None; the record of
    the previous best/ when a kill interrupted a swap (mixer.models.model_dir.recover
    puts it back)."""
    for name in (BEST_DIR, f".{BEST_DIR}.old"):
        best_dir = os.path.join(run_dir, name)
        if is_run_directory(best_dir):
            record = run_config(best_dir).get("weights") or {}
            return record if record.get("kind") == "best" else None
    return None


def check_resume(run_dir: str, metric: Optional[str], current: dict, resuming: bool) -> None:
    """Before anything is written: a resumed run whose RUN/best/ holds a best keeps it by
    the metric it chose, measured as it was measured. With RUN/best/ moved away the run
    continues without that best (BestKeeper.start, or without --keep-best the KeepBest hook
    (mixer.training.best.hook), drops the state's record)."""
    record = disk_record(run_dir) if resuming else None
    if record is None:
        return
    if record["metric"] != metric:
        raise metric_changed(run_dir, record["metric"])
    changed = changed_condition(metric, record.get("conditions"), current)
    if changed is not None:
        was, now, flags = changed
        best_dir = os.path.join(run_dir, BEST_DIR)
        raise UserError(
            f"{run_dir} keeps its best model by {metric} as measured {was} ({best_dir}, step "
            f"{record['step']}); this run would measure it {now}, which does not compare "
            f"with it: resume with {flags}, or move {best_dir} away to keep the best afresh"
        )


def metric_changed(run_dir: str, kept: str) -> UserError:
    return UserError(
        f"{run_dir} keeps its best model by {kept} ({run_dir}/{BEST_DIR}); resume with "
        f"--keep-best {kept}, or move {run_dir}/{BEST_DIR} away to continue without it"
    )


def drop_moved_best(standing, run_dir: str, why: str, log: Callable[[str], None]) -> None:
    """RUN/best/ was moved away and this run keeps no best, or keeps it otherwise (`why`):
    the training state's record and patience count go (rank 0's decision, every rank
    drops it)."""
    best = standing.best
    log(
        f"{os.path.join(run_dir, BEST_DIR)} was moved away: the best the training state records "
        f"({best['metric']} {best['value']:.4f} at step {best['step']}) is dropped; {why}"
    )
    standing.best, standing.evals_since_best = None, 0


def discard_leftover(run_dir: str, log: Callable[[str], None]) -> None:
    """A run that starts over (no training state to resume) removes a best model an
    earlier run left in its directory: predict.py --checkpoint RUN would take it for
    this run's (rank 0, before training)."""
    from mixer.models.model_dir import recover

    best_dir = os.path.join(run_dir, BEST_DIR)
    recover(run_dir, BEST_DIR)
    if os.path.isdir(best_dir):
        import shutil

        shutil.rmtree(best_dir)
        log(
            f"removed {best_dir}: a best model left without a training state to resume (the run "
            "starts over)"
        )


class BestKeeper:
    """The best model of one run (every rank holds one; rank 0 alone writes).

    write_files(record) -> {file name: text} gives the files RUN/best/ carries besides
    the model (its evaluation table, its model card); extra is config.json's content."""

    def __init__(
        self,
        cfg: TrainConfig,
        world: mdist.World,
        run_dir: str,
        extra: dict,
        write_files: Callable[[dict], dict],
        log: Callable[[str], None],
        conditions: Optional[dict] = None,
    ):
        self.metric = cfg.keep_best
        self.conditions = conditions or {}  # what its evaluations are measured with (`conditions`)
        self.patience = cfg.early_stopping_patience
        self.min_delta = cfg.early_stopping_min_delta
        self.world = world
        self.run_dir = run_dir
        self.extra = extra  # the Trainer's model_extra: thresholds change when they are tuned
        self.write_files = write_files
        self.log = log

    def judge(self, standing, row: dict, planned_end: bool = False) -> Verdict:
        """Rank 0's verdict on an evaluation, on every rank (all ranks); updates the
        patience count and, when it runs out before the planned end, the stop reason."""
        verdict = None
        if self.world.is_main:
            verdict = judge(
                standing.best,
                standing.evals_since_best,
                self.metric,
                row[self.metric],
                place_of(standing),
                self.patience,
                self.min_delta,
            )
            if planned_end:  # the run ends here anyway: nothing for early stopping to end
                verdict = Verdict(verdict.new_best, verdict.waited, False)
        verdict = mdist.broadcast_object(verdict, self.world)  # all ranks
        standing.evals_since_best = verdict.waited
        if verdict.stop:
            best = standing.best
            by = f" by at least {self.min_delta:g}" if self.min_delta else ""
            standing.stop_reason = (
                f"early stopping: {self.metric} did not improve on {best['value']:.4f} (step "
                f"{best['step']}, epoch {epoch_number(*best['place'])}){by} in {self.patience} evaluation(s)"
            )
        return verdict

    def note(self, standing, verdict: Verdict) -> str:
        """What the evaluation line adds: a new best, or how patient the run still is."""
        best = standing.best
        if verdict.new_best:  # standing.best is already its record
            return (
                f"new best {self.metric} {best['value']:.4f}" if best else f"new best {self.metric}"
            )
        if best is None:  # every evaluation so far was NaN: NaN is never the best
            return f"no best {self.metric} yet: it was NaN, which is never the best"
        text = f"best {self.metric} {best['value']:.4f} at step {best['step']}"
        if self.patience and verdict.waited:
            text += f"; {verdict.waited} of {self.patience} evaluation(s) without improvement"
        return text

    def record(self, standing, row: dict, table: Optional[str]) -> dict:
        """The best's record as the training state keeps it."""
        return {
            "metric": self.metric,
            "value": float(row[self.metric]),
            "step": standing.step,
            "epoch": standing.epoch,
            "place": list(place_of(standing)),
            "conditions": self.conditions,
            "metrics": {k: v for k, v in row.items() if k.startswith("val_")},
            "table": table,
        }

    def write(self, model, record: dict, more: Optional[dict] = None) -> None:
        """RUN/best/ of `model` (rank 0), with `more` files (the end of a run's scores)."""
        from mixer.models.model_dir import write_model_dir

        weights = dict({k: record[k] for k in RECORD_KEYS}, kind="best", metrics=record["metrics"])
        write_model_dir(
            self.run_dir,
            BEST_DIR,
            model,
            dict(self.extra, weights=weights),
            dict(self.write_files(record), **(more or {})),
        )

    def start(self, standing, model) -> None:
        """Make a resumed state's best and RUN/best/ agree before training (rank 0
        decides, every rank receives the result; all ranks)."""
        best = mdist.main_only(lambda: self._reconcile(standing, model), self.world)  # all ranks
        best, waited = mdist.broadcast_object(
            (best, standing.evals_since_best), self.world
        )  # all ranks
        standing.best, standing.evals_since_best = best, waited
        if best is not None:
            waited = f"{standing.evals_since_best}" + (
                f" of {self.patience}" if self.patience else ""
            )
            self.log(
                f"best so far: {self.metric} {best['value']:.4f} at step {best['step']} "
                f"({os.path.join(self.run_dir, BEST_DIR)}); {waited} evaluation(s) after it "
                "without improvement"
            )

    def _reconcile(self, standing, model) -> Optional[dict]:
        from mixer.models.model_dir import recover

        recover(self.run_dir, BEST_DIR)
        best_dir = os.path.join(self.run_dir, BEST_DIR)
        disk, state = disk_record(self.run_dir), standing.best
        if disk is not None and disk["metric"] != self.metric:  # check_resume refused it before
            raise metric_changed(self.run_dir, disk["metric"])
        if state is not None and disk is None and state["metric"] != self.metric:
            drop_moved_best(
                standing, self.run_dir, f"this run keeps its best by {self.metric} afresh", self.log
            )
            return None
        changed = state and changed_condition(self.metric, state.get("conditions"), self.conditions)
        if changed and disk is None:
            drop_moved_best(
                standing,
                self.run_dir,
                f"this run measures {self.metric} {changed[1]}, not "
                f"{changed[0]}, and keeps its best afresh",
                self.log,
            )
            return None
        if state is not None and (disk is None or tuple(state["place"]) > tuple(disk["place"])):
            if state["step"] == standing.step:  # killed between last.pt and RUN/best/: finish it
                self.write(model, state)
                self.log(
                    f"wrote {best_dir}: the best model (step {state['step']}) the training state "
                    "records, which the interrupted job had not written yet"
                )
                return state
            self.log(
                f"warning: {best_dir} lacks the best model the training state records (step "
                f"{state['step']}, {self.metric} {state['value']:.4f}); the run continues with "
                + ("the one it holds" if disk else "none")
            )
            if disk is None:  # moved away: the count of evaluations after it goes with it
                standing.evals_since_best = 0
            return _from_disk(best_dir, disk)
        if disk is not None and (state is None or tuple(disk["place"]) > tuple(state["place"])):
            return _from_disk(
                best_dir, disk
            )  # newer than the state: last.pt did not load, last.prev.pt did
        return state


def _from_disk(best_dir: str, disk: Optional[dict]) -> Optional[dict]:
    if disk is None:
        return None
    record = {k: disk.get(k) for k in RECORD_KEYS}
    return dict(record, metrics=disk.get("metrics") or {}, table=_read(best_dir, "evaluation.csv"))


def place_of(standing) -> tuple:
    return (standing.epoch, standing.rows_in_epoch)


def _read(directory: str, name: str) -> Optional[str]:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()

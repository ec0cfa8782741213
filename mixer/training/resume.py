"""The training state a run saves and resumes from (last.pt), for the Trainer: what it
holds, how it is loaded back in this run's layout and flags, and the line that says so."""

from __future__ import annotations

import math

import numpy as np
import torch

from mixer.core.config import epoch_number
from mixer.core.errors import UserError, first_line
from mixer.distributed.launch import stop_on_signals  # noqa: F401 - the trainer's, as before
from mixer.models.checkpoint import rng_state, set_rng_state
from mixer.models.model import unwrap_model
from mixer.training.parts import Progress
from mixer.training.schedule import Layout, Segment


def state_dict(trainer) -> dict:
    p, schedule = trainer.progress, trainer.parts.schedule
    return {
        "model": unwrap_model(trainer.parts.model).state_dict(),
        "optimizer": trainer.parts.optimizer.state_dict(),
        "scheduler": trainer.parts.scheduler.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "progress": {
            "step": p.step,
            "epoch": p.epoch,
            "rows_in_epoch": p.rows_in_epoch,
            "nonfinite_steps": p.nonfinite_steps,
            "last_eval_step": p.last_eval_step,
            "last_eval_full": p.last_eval_full,
            "eval_pending": p.eval_pending,
            "layout": schedule.layout.to_dict(),
            "base_global_batch": schedule.plan.base_global_batch,
            "schedule_segment": schedule.segment.to_list(),
            "stop_reason": p.stop_reason,
            "jobs": p.jobs,
            "elapsed": trainer.eta.elapsed(),
        },
        "rng": [rng_state()],
        "key": trainer.key_codes,
        "hooks": {hook.name: saved for hook in trainer.hooks if (saved := hook.state_dict())},
    }


def hook_states(state: dict) -> dict:
    """Each hook's own state, by the hook's name. A training state from before the hooks
    kept their own (mixer before issue 45) held the best's record and the patience count
    in "progress": they are the KeepBest hook's."""
    if "hooks" in state:
        return state["hooks"]
    from mixer.training.best.hook import KeepBest

    progress = state.get("progress", {})
    return {
        KeepBest.name: {
            "best": progress.get("best"),
            "evals_since_best": progress.get("evals_since_best", 0),
        }
    }


def load_state_dict(trainer, state: dict) -> None:
    if state.get("key") and trainer.key_codes and list(state["key"]) != trainer.key_codes:
        raise UserError(
            f"{trainer.run_dir}/last.pt was trained with a different label key; "
            "use a new --save-path"
        )
    peaks = [group["initial_lr"] for group in trainer.parts.optimizer.param_groups]  # these flags'
    try:
        unwrap_model(trainer.parts.model).load_state_dict(state["model"])
        trainer.parts.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise UserError(
            f"{trainer.run_dir}/last.pt does not fit the model these flags build "
            f"({first_line(exc)}); resume with the run's own flags (--config "
            f"{trainer.run_dir}/args.yaml) or use a new --save-path"
        )
    trainer.parts.scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler"):
        trainer.scaler.load_state_dict(state["scaler"])
    known = {f for f in Progress.__dataclass_fields__}
    trainer.progress = Progress(**{k: v for k, v in state["progress"].items() if k in known})
    saved = hook_states(state)
    for hook in trainer.hooks:
        if hook.name in saved:
            hook.load_state_dict(saved[hook.name])
    resume_schedule(trainer)
    restore_flag_learning_rates(trainer, peaks)
    states = state["rng"]
    trainer.reseeded = len(states) != trainer.world.world_size
    if trainer.reseeded:  # another layout: rank r's saved stream is not this rank r's
        seed_streams(trainer.cfg.seed, trainer.world.rank, trainer.progress.step)
    else:  # the same layout: each rank continues its own stream exactly
        set_rng_state(states[trainer.world.rank])


def restore_flag_learning_rates(trainer, peaks: list) -> None:
    """The peak learning rates are this run's (--learning-rate, --head-lr-scale, and
    --scale-lr for the global batch it runs with now), not the saved ones; the schedule's
    factor applies to them as before. Unchanged flags and layout: the same numbers."""
    scheduler, groups = trainer.parts.scheduler, trainer.parts.optimizer.param_groups
    trainer.saved_peak_lr = scheduler.base_lrs[0]
    factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
    for group, peak in zip(groups, peaks):
        group["initial_lr"] = peak
        group["lr"] = peak * factor
    scheduler.base_lrs = list(peaks)
    scheduler._last_lr = [group["lr"] for group in groups]


def resume_schedule(trainer) -> None:
    """Count the steps left from the saved position (any layout)."""
    p, schedule = trainer.progress, trainer.parts.schedule
    saved = Layout(**p.layout) if p.layout else schedule.layout  # mixer 0.1 files: the same
    base = p.base_global_batch or saved.global_batch
    segment = Segment(*p.schedule_segment) if p.schedule_segment else Segment()
    schedule.resume(p.step, (p.epoch, p.rows_in_epoch), segment, base)
    trainer.resumed_layout = saved


def resume_report(trainer, path: str) -> str:
    """One line: where the run continues, and what changed when the global batch did."""
    p, schedule = trainer.progress, trainer.parts.schedule
    line = (
        f"resuming from {path} at step {p.step} (epoch {epoch_number(p.epoch, p.rows_in_epoch)}, "
        f"row {p.rows_in_epoch} of {schedule.plan.rows})"
    )
    saved, layout = trainer.resumed_layout, schedule.layout
    if saved.global_batch != layout.global_batch:
        end_epoch, end_row = schedule.plan.end
        line += (
            f"; global batch changed from {saved.describe()} to {layout.describe()}: "
            f"the run continues from this row of the same epoch order with the "
            f"learning-rate schedule {100 * schedule.fraction_done(p.step):.1f}% done, "
            f"and ends after {schedule.total_steps - p.step} more step(s), "
            + (
                f"at epoch {end_epoch + 1} row {end_row}"
                if end_row
                else f"at the end of epoch {epoch_number(end_epoch, 0)}"
            )
        )
    if getattr(trainer, "reseeded", False):
        line += (
            f"; {trainer.world.world_size} process(es) where {saved.world_size} saved their "
            f"random state: each rank's stream starts from (seed, rank, step)"
        )
    peak = trainer.parts.scheduler.base_lrs[0]
    if not math.isclose(peak, trainer.saved_peak_lr, rel_tol=1e-12):
        line += (
            f"; peak learning rate now {peak:g} (was {trainer.saved_peak_lr:g}), from this "
            f"run's flags"
        )
    return line


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def seed_streams(seed: int, rank: int, step: int) -> None:
    """Seed this rank's torch (CPU and GPU), numpy and Python random streams from
    (seed, rank, step): after a resume in another layout every rank has its own stream,
    and the same resume draws the same again. Dropout and training noise draw nothing
    from them: they are keyed by the row (mixer.models.keyed_dropout, mixer.data.inputs.noise)."""
    import random

    words = np.random.SeedSequence([seed, rank, step]).generate_state(2, dtype=np.uint64)
    random.seed(int(words[0]))
    np.random.seed(int(words[0]) % (2**32))
    torch.manual_seed(int(words[1]) % (2**63))  # torch.manual_seed seeds every GPU too

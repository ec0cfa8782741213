"""One optimizer step: the forward and backward passes of its micro-batches, the
gradients synchronised and clipped, and the update, skipped on non-finite gradients
(all ranks run every line)."""

from __future__ import annotations

import contextlib

import torch

from mixer.core.errors import UserError
from mixer.models import keyed_dropout
from mixer.models.losses import row_losses, step_loss
from mixer.reporting.tracking import logger

MAX_NONFINITE_IN_A_ROW = 5


def steps_of_epoch(train_loader, grad_accum_steps: int):
    """Groups the loader's micro-batches into optimizer steps: each arrives as its
    length groups (mixer.data.inputs.dataset.Collator.grouped), and a step trains on all of them."""
    group, micro_batches = [], 0
    for batches in train_loader:
        group.extend(batches)
        micro_batches += 1
        if micro_batches == grad_accum_steps:
            yield group
            group, micro_batches = [], 0


def optimizer_step(trainer, micro_batches: list) -> float:
    """This rank's weighted loss sum of the step (all ranks)."""
    cfg, parts, scaler = trainer.cfg, trainer.parts, trainer.scaler
    model = parts.model
    model.train()
    local_loss = torch.zeros((), device=trainer.device)
    for i, batch in enumerate(micro_batches):
        batch = batch.to(trainer.device, non_blocking=True)
        last = i == len(micro_batches) - 1
        sync = (
            contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        )
        with sync:
            with trainer.autocast(), dropout_keys(trainer, batch, model):
                flat_logits, seq_logits = model(
                    batch.input_ids, batch.attention_mask, batch.decoder_input
                )
            total, _, _ = row_losses(
                flat_logits,
                seq_logits,
                batch.labels,
                batch.targets,
                parts.num_blocks,
                parts.block_size,
                cfg.seq2seq_weight,
                parts.formatter.pad_id,
            )
            loss = step_loss(total, batch.weights, batch.global_rows, trainer.world.world_size)
            scaler.scale(loss).backward()  # all ranks (DDP all-reduce on the last micro-step)
        local_loss += (total.detach() * batch.weights).sum()
    parts.grad_sync()  # all ranks
    scaler.unscale_(parts.optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    if torch.isfinite(norm):  # the same on every rank: gradients are already averaged
        scaler.step(parts.optimizer)
        trainer.progress.nonfinite_steps = 0
    else:
        trainer.progress.nonfinite_steps += 1
        skip_nonfinite_step(trainer)
    scaler.update()
    parts.scheduler.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return float(local_loss)


def dropout_keys(trainer, batch, model):
    """The forward pass's dropout masks keyed by each row's draw (seed, epoch, position in
    the epoch's order), whatever batch, rank or padding carries the row."""
    if batch.draws is None:
        return contextlib.nullcontext()
    keys = keyed_dropout.row_keys(trainer.cfg.seed, batch.draws[:, 0], batch.draws[:, 1])
    return keyed_dropout.rows(keys.to(trainer.device, non_blocking=True), model)


def skip_nonfinite_step(trainer) -> None:
    progress = trainer.progress
    step = progress.step + 1
    if trainer.scaler.is_enabled():
        logger.info(f"step {step}: non-finite gradients, step skipped (fp16 loss scale lowered)")
        return
    logger.warning(
        f"warning: step {step}: non-finite loss or gradients; step skipped "
        f"({progress.nonfinite_steps} in a row)"
    )
    if progress.nonfinite_steps >= MAX_NONFINITE_IN_A_ROW:
        raise UserError(
            f"training diverged: {progress.nonfinite_steps} steps in a row up "
            f"to step {step} had non-finite loss; lower --learning-rate or use "
            "--precision fp32. The last good checkpoint is kept."
        )

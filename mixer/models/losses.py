"""Losses, per row, so that any sum of rows divided by any count is exact.

Each row's loss is a fixed function of that row alone (a mean over its
decoder positions, a sum over the codes of the key), so rows weigh the same whichever batch or rank they land in.
The training loss of a step is sum(row losses) / rows in the global batch;
`step_loss` multiplies by world_size because DDP divides gradients by it.
One process with batch N*B and N processes with batch B then take the same
step (up to float rounding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixer.data.labels.formatter import PAD as MIXER_PAD


def multi_hot(labels: torch.Tensor, num_labels: int) -> torch.Tensor:
    """(rows, slots) key indices, -1 = empty -> (rows, num_labels) 0/1 floats."""
    out = torch.zeros(labels.size(0), num_labels + 1, device=labels.device)
    out.scatter_(1, torch.where(labels < 0, num_labels, labels), 1.0)
    return out[:, :num_labels]


def block_costs(
    seq_logits: torch.Tensor, targets: torch.Tensor, num_blocks: int, block_size: int
) -> torch.Tensor:
    """cost[r, i, j]: mean cross-entropy of target block i read from predicted block j."""
    rows, vocab = seq_logits.size(0), seq_logits.size(-1)
    log_probs = seq_logits[:, : num_blocks * block_size].float().log_softmax(-1)
    log_probs = log_probs.view(rows, num_blocks, block_size, vocab)
    target_blocks = targets[:, : num_blocks * block_size].view(rows, num_blocks, block_size)
    # gather log p_j(s, target_i(s)) for every pair (i, j)
    index = target_blocks.unsqueeze(2).expand(rows, num_blocks, num_blocks, block_size)
    picked = log_probs.unsqueeze(1).expand(rows, num_blocks, num_blocks, block_size, vocab)
    picked = picked.gather(-1, index.unsqueeze(-1)).squeeze(-1)  # (r, i, j, s)
    return -picked.mean(-1)


def seq2seq_row_loss(
    seq_logits: torch.Tensor,
    targets: torch.Tensor,
    num_blocks: int,
    block_size: int,
    pad_id: int = MIXER_PAD,
) -> torch.Tensor:
    """Order-invariant seq2seq loss per row.

    A target block holding a code costs the cheapest predicted block; an empty
    target block (all PAD) must be predicted where it stands. The EOS position
    is plain cross-entropy. The row's loss is the mean over its positions.
    """
    costs = block_costs(seq_logits, targets, num_blocks, block_size)  # (r, i, j)
    best = costs.min(dim=2).values
    aligned = costs.diagonal(dim1=1, dim2=2)
    is_code = (
        targets[:, : num_blocks * block_size].view(-1, num_blocks, block_size)[..., 0] != pad_id
    )
    block_loss = torch.where(is_code, best, aligned)  # (r, i)
    tail = num_blocks * block_size
    eos_loss = F.cross_entropy(
        seq_logits[:, tail:].float().flatten(0, 1), targets[:, tail:].flatten(), reduction="none"
    )
    eos_loss = eos_loss.view(targets.size(0), -1).sum(1)
    total_positions = targets.size(1)
    return (block_loss.sum(1) * block_size + eos_loss) / total_positions


def flat_row_loss(flat_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """BCE of the flat head, summed over the codes of the key, per row.

    A sum, not a mean: with a key of hundreds of codes a mean would shrink the
    flat head's pull on the shared encoder by that factor."""
    target = multi_hot(labels, flat_logits.size(-1))
    return F.binary_cross_entropy_with_logits(flat_logits.float(), target, reduction="none").sum(1)


def row_losses(
    flat_logits,
    seq_logits,
    labels,
    targets,
    num_blocks,
    block_size,
    seq2seq_weight,
    pad_id: int = MIXER_PAD,
):
    """(total, seq2seq, flat) per row."""
    seq = seq2seq_row_loss(seq_logits, targets, num_blocks, block_size, pad_id)
    flat = flat_row_loss(flat_logits, labels)
    return seq2seq_weight * seq + (1.0 - seq2seq_weight) * flat, seq, flat


def step_loss(
    row_total: torch.Tensor, weights: torch.Tensor, global_rows: int, world_size: int
) -> torch.Tensor:
    """This micro-batch's share of the global-batch mean, scaled for DDP's averaging.
    `weights` is 1 per real row and 0 for a placeholder row (mixer.data.inputs.dataset.StepSampler)."""
    return (row_total * weights).sum() * (world_size / global_rows)

"""Losses: order invariance and exact splitting over batches and ranks."""

import math

import pytest
import torch

from conftest import FLOATS
from mixer.data.labels.formatter import EOS, PAD
from mixer.models.losses import flat_row_loss, multi_hot, row_losses, seq2seq_row_loss, step_loss


def make_targets(blocks, block_size):
    rows = [sum(row, []) + [EOS] for row in blocks]
    return torch.tensor(rows)


def test_seq2seq_loss_is_invariant_to_block_order():
    torch.manual_seed(0)
    num_blocks, block_size, vocab = 3, 4, 9
    logits = torch.randn(2, num_blocks * block_size + 1, vocab)
    a, b = [3, 4, 5, 6], [7, 8, 3, 4]
    pad = [PAD] * block_size
    forward = make_targets([[a, b, pad], [b, pad, pad]], block_size)
    swapped = make_targets([[b, a, pad], [b, pad, pad]], block_size)
    loss_fwd = seq2seq_row_loss(logits, forward, num_blocks, block_size)
    loss_swp = seq2seq_row_loss(logits, swapped, num_blocks, block_size)
    assert torch.allclose(loss_fwd, loss_swp)
    # and it is not a trivial constant: another code costs something else
    other = make_targets([[a, a, pad], [b, pad, pad]], block_size)
    assert not torch.allclose(
        seq2seq_row_loss(logits, other, num_blocks, block_size)[0], loss_fwd[0]
    )


def test_seq2seq_loss_prefers_matching_block():
    num_blocks, block_size, vocab = 2, 2, 6
    target = make_targets([[[3, 4], [5, 3]]], block_size)
    logits = torch.full((1, 5, vocab), -10.0)
    # predicted block 0 spells [5,3], block 1 spells [3,4]: the swapped order
    for pos, tok in enumerate([5, 3, 3, 4, EOS]):
        logits[0, pos, tok] = 10.0
    assert seq2seq_row_loss(logits, target, num_blocks, block_size).item() < 1e-3


def test_flat_loss_and_multi_hot():
    labels = torch.tensor([[0, 2], [1, -1]])
    assert multi_hot(labels, 3).tolist() == [[1, 0, 1], [0, 1, 0]]
    logits = torch.zeros(2, 3)
    assert torch.allclose(
        flat_row_loss(logits, labels), torch.full((2,), 3 * math.log(2)), atol=1e-4
    )


@pytest.mark.floats
def test_step_losses_of_split_batches_add_up_to_the_full_batch():
    """What DDP relies on: N shards with world_size scaling, averaged, equal one batch."""
    torch.manual_seed(1)
    rows, num_blocks, block_size, vocab, labels_n = 6, 2, 3, 7, 5
    seq = torch.randn(rows, num_blocks * block_size + 1, vocab)
    flat = torch.randn(rows, labels_n)
    targets = torch.randint(3, vocab, (rows, num_blocks * block_size + 1))
    targets[:, -1] = EOS
    labels = torch.randint(0, labels_n, (rows, num_blocks))
    total, _, _ = row_losses(flat, seq, labels, targets, num_blocks, block_size, 0.3)
    ones = torch.ones(rows)
    whole = step_loss(total, ones, rows, world_size=1)
    shards = [
        step_loss(total[:2], ones[:2], rows, world_size=2),
        step_loss(total[2:], ones[2:], rows, world_size=2),
    ]
    torch.testing.assert_close(whole, sum(shards) / 2, **FLOATS)  # other sums: equal up to rounding
    torch.testing.assert_close(whole, total.mean(), **FLOATS)
    # a placeholder row (weight 0) adds nothing: a rank with no rows of the step
    placeholder = step_loss(total[:1], torch.zeros(1), rows, world_size=2)
    assert placeholder.item() == 0.0

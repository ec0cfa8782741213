"""Data order and sharding with explicit ranks (no process group needed)."""

import numpy as np

from mixer.dataset import StepSampler, shard_indices


def steps(sampler):
    """{step: [indices of this rank, in micro-batch order]} and the global sizes."""
    out, sizes = [], []
    micro = list(sampler)
    per_step = sampler.grad_accum_steps
    for i in range(0, len(micro), per_step):
        group = micro[i:i + per_step]
        out.append([idx for batch in group for idx, _ in batch])
        sizes.append(group[0][0][1])
    return out, sizes


def test_n_processes_see_the_rows_one_process_sees_with_n_times_the_batch():
    rows, seed = 103, 7
    single = StepSampler(rows, batch_size=8, world_size=1, rank=0, grad_accum_steps=1, seed=seed)
    ranks = [StepSampler(rows, batch_size=4, world_size=2, rank=r, grad_accum_steps=1, seed=seed)
             for r in range(2)]
    accum = StepSampler(rows, batch_size=4, world_size=1, rank=0, grad_accum_steps=2, seed=seed)
    for epoch in (0, 1):
        for s in [single, accum, *ranks]:
            s.set_epoch(epoch)
        one, sizes = steps(single)
        two = [steps(s)[0] for s in ranks]
        assert len(one) == single.steps_per_epoch == 13
        for step, rows_of_step in enumerate(one):
            assert rows_of_step == two[0][step] + two[1][step]
            assert not set(two[0][step]) & set(two[1][step])
        assert steps(accum)[0] == one
        assert sizes[-1] == 103 - 12 * 8  # the tail step is kept, its size is global


def test_epochs_differ_and_resume_continues_mid_epoch():
    sampler = StepSampler(50, batch_size=5, world_size=1, rank=0, grad_accum_steps=1, seed=1)
    sampler.set_epoch(0)
    first, _ = steps(sampler)
    sampler.set_epoch(1)
    assert steps(sampler)[0] != first
    sampler.set_epoch(0, start=15)
    assert steps(sampler)[0] == first[3:]


def test_tail_too_small_for_every_rank_is_dropped():
    sampler = StepSampler(9, batch_size=2, world_size=2, rank=0, grad_accum_steps=2, seed=0)
    assert sampler.step_sizes() == [8]  # the 9th row cannot give 4 micro-batches a row


def test_eval_shards_cover_every_row_once():
    for world in (1, 2, 3, 4):
        shards = [shard_indices(11, world, r) for r in range(world)]
        together = np.concatenate(shards)
        assert sorted(together.tolist()) == list(range(11))


def test_rows_per_epoch_counts_the_rows_the_steps_take():
    for rows, batch, world, accum in ((103, 8, 1, 1), (9, 2, 2, 2), (50, 5, 2, 1), (7, 4, 2, 1)):
        sampler = StepSampler(rows, batch, world, 0, accum, seed=0)
        assert sampler.rows_per_epoch == sum(sampler.step_sizes())

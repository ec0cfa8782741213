"""Data order and sharding with explicit ranks (no process group needed)."""

import numpy as np

from mixer.data.inputs.dataset import StepSampler, shard_indices


def steps(sampler):
    """{step: [indices of this rank, in micro-batch order]} and the global sizes."""
    out, sizes = [], []
    micro = list(sampler)
    per_step = sampler.grad_accum_steps
    for i in range(0, len(micro), per_step):
        group = micro[i : i + per_step]
        out.append([idx for batch in group for idx, _, weight, *_ in batch if weight])
        sizes.append(group[0][0][1])
    return out, sizes


def test_n_processes_see_the_rows_one_process_sees_with_n_times_the_batch():
    rows, seed = 103, 7
    single = StepSampler(rows, batch_size=8, world_size=1, rank=0, grad_accum_steps=1, seed=seed)
    ranks = [
        StepSampler(rows, batch_size=4, world_size=2, rank=r, grad_accum_steps=1, seed=seed)
        for r in range(2)
    ]
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


def test_a_tail_smaller_than_the_micro_batches_is_trained_with_placeholders():
    """9 rows, 2 ranks x 2 micro-batches: the 9th row is trained; the three micro-batches
    without a row carry a placeholder of weight 0, so every rank runs the same passes."""
    samplers = [
        StepSampler(9, batch_size=2, world_size=2, rank=r, grad_accum_steps=2, seed=0)
        for r in range(2)
    ]
    assert samplers[0].step_sizes() == [8, 1]
    micro = [list(s) for s in samplers]
    assert [len(m) for m in micro] == [4, 4]  # 2 steps x 2 micro-batches on each rank
    tail = [batch for m in micro for batch in m[2:]]
    weights = sorted(w for batch in tail for _, _, w, *_ in batch)
    assert weights == [0.0, 0.0, 0.0, 1.0]
    real = [i for m in micro for batch in m for i, _, w, *_ in batch if w]
    assert sorted(real) == list(range(9))


def test_eval_shards_cover_every_row_once():
    for world in (1, 2, 3, 4):
        shards = [shard_indices(11, world, r) for r in range(world)]
        together = np.concatenate(shards)
        assert sorted(together.tolist()) == list(range(11))


def test_rows_per_epoch_counts_the_rows_the_steps_take():
    for rows, batch, world, accum in ((103, 8, 1, 1), (9, 2, 2, 2), (50, 5, 2, 1), (7, 4, 2, 1)):
        sampler = StepSampler(rows, batch, world, 0, accum, seed=0)
        assert sampler.rows_per_epoch == sum(sampler.step_sizes())


def rows_seen_across_a_relayout(rows, before, after, stop_after_steps, seed=3):
    """Train `stop_after_steps` steps of epoch 0 in layout `before` (world, batch, accum),
    then the rest of the epoch in layout `after`, as a resumed run does: every rank's
    sampler starts at the saved row. Returns the rows trained, in order of steps."""

    def rank_samplers(layout, start):
        world, batch, accum = layout
        out = [StepSampler(rows, batch, world, r, accum, seed) for r in range(world)]
        for s in out:
            s.set_epoch(0, start)
        return out

    first = rank_samplers(before, 0)
    per_rank = [steps(s)[0][:stop_after_steps] for s in first]
    sizes = steps(first[0])[1][:stop_after_steps]
    seen = [i for step in zip(*per_rank) for part in step for i in part]
    assert len(seen) == sum(sizes)
    second = rank_samplers(after, sum(sizes))
    rest = [steps(s)[0] for s in second]
    seen += [i for step in zip(*rest) for part in step for i in part]
    return seen


def test_a_resume_with_another_global_batch_trains_every_row_of_the_epoch_once():
    rows = 223  # divides none of the global batches below
    for before, after in (
        ((1, 8, 1), (2, 8, 1)),
        ((2, 8, 1), (1, 8, 1)),
        ((1, 8, 1), (1, 8, 2)),
        ((2, 5, 3), (3, 4, 1)),
    ):
        for stop in (1, 3, 7):
            seen = rows_seen_across_a_relayout(rows, before, after, stop)
            assert sorted(seen) == list(range(rows)), (before, after, stop)
            order = StepSampler(rows, 1, 1, 0, 1, seed=3).permutation()
            assert set(seen[: stop * 8]) <= set(order[: len(seen)])  # the same epoch order


# ------------------------------------------------------------------ length groups
def padded(lengths, cuts):
    return sum(len(part) * part.max() for part in np.split(np.asarray(lengths), cuts))


def test_length_groups_cut_where_the_padded_tokens_are_fewest():
    import itertools

    from mixer.data.inputs.dataset import fewest_padded

    rng = np.random.default_rng(1)
    for _ in range(200):
        lengths = np.sort(rng.integers(1, 40, rng.integers(1, 9)))
        groups = int(rng.integers(1, 5))
        cuts = fewest_padded(lengths, groups)
        assert len(cuts) < groups and cuts == sorted(set(cuts))
        assert all(0 < c < len(lengths) for c in cuts)
        best = min(
            padded(lengths, list(c))
            for k in range(groups)
            for c in itertools.combinations(range(1, len(lengths)), k)
        )
        assert padded(lengths, cuts) == best
    # one long noised row among short ones gets a group of its own
    assert fewest_padded(np.array([5, 5, 6, 6, 6, 7, 30]), 2) == [6]
    assert fewest_padded(np.array([6, 6, 6]), 4) == []  # nothing to gain: one group


def test_a_grouped_micro_batch_holds_its_rows_once_each_padded_to_its_group():
    from mixer.data.inputs.dataset import Collator
    from mixer.data.inputs.padding import EVERY_POSITION, InputPadding

    lengths = [4, 17, 5, 3, 16, 6, 4, 5]
    items = [
        (np.arange(1, n + 1), np.array([i % 3, -1]), 8, 1.0, 100 + i) for i, n in enumerate(lengths)
    ]
    whole = Collator(0, np.arange(6).reshape(3, 2)).grouped(items)
    assert len(whole) == 1 and whole[0].input_ids.shape == (8, 17)
    groups = Collator(0, np.arange(6).reshape(3, 2), groups=2).grouped(items)
    assert [g.input_ids.shape for g in groups] == [(6, 6), (2, 17)]
    assert sorted(np.concatenate([g.rows for g in groups]).tolist()) == list(range(100, 108))
    for group in groups:  # each row keeps its ids, labels and the step's size
        for row, ids, mask, labels in zip(
            group.rows, group.input_ids, group.attention_mask, group.labels
        ):
            n = lengths[row - 100]
            assert ids[:n].tolist() == list(range(1, n + 1)) and int(mask.sum()) == n
            assert labels.tolist() == [(row - 100) % 3, -1]
        assert group.global_rows == 8
    # batches padded to one length whatever their rows (OccCANINE's decoder) gain nothing: one group
    fixed = InputPadding(max_len=32, rate=4, right_context=2, reads=EVERY_POSITION)
    assert len(Collator(0, np.arange(6).reshape(3, 2), padding=fixed, groups=2).grouped(items)) == 1


def test_how_many_length_groups_a_run_uses():
    import dataclasses

    import pytest

    from mixer.core.config import RunConfig
    from mixer.core.errors import UserError
    from mixer.training.run import length_groups

    config = RunConfig()

    def with_(train=None, dist=None):
        return dataclasses.replace(
            config,
            train=dataclasses.replace(config.train, **(train or {})),
            dist=dataclasses.replace(config.dist, **(dist or {})),
        )

    assert length_groups(config, "cpu") == 2 and length_groups(config, "cuda:0") == 1
    assert length_groups(with_({"length_groups": 3}), "cuda:0") == 3
    # a resumed run keeps its own; one from before length groups was padded whole
    assert length_groups(config, "cuda:0", {"train": {"length_groups": 2}}) == 2
    assert length_groups(config, "cpu", {"train": {"seed": 1}}) == 1
    # DDP's static graph takes one synchronised backward pass per step
    assert length_groups(with_(dist={"static_graph": True}), "cpu") == 1
    for bad in ({"length_groups": 2}, {"grad_accum_steps": 2}):
        with pytest.raises(UserError, match="--static-graph"):
            length_groups(with_(bad, {"static_graph": True}), "cpu")


def test_evaluation_batches_take_rows_shortest_first_and_every_row_once():
    """With each row's token count, an evaluation's batches hold rows of similar length
    (a stable sort: equal lengths keep their order); without, the rows' own order."""
    from mixer.data.inputs.dataset import eval_batches

    lengths = np.array([9, 2, 7, 2, 5, 1, 8])
    rows = np.array([0, 2, 3, 4, 6])  # this rank's share
    assert eval_batches(rows, 2, lengths) == [[3, 4], [2, 6], [0]]
    assert eval_batches(rows, 2) == [[0, 2], [3, 4], [6]]
    assert eval_batches(np.array([], dtype=np.int64), 2, lengths) == []

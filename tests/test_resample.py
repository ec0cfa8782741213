"""Resampling of the training rows (mixer.data.inputs.resample): drawn by (seed, epoch) only, so
every rank and a resumed run see the same epoch; the schedule counts the resampled rows."""

import numpy as np
import pytest

from conftest import TINY
from mixer.data.inputs.dataset import StepSampler
from mixer.data.inputs.resample import epoch_rows, epoch_size

# code 0 dominant (60 rows), code 1 common (30), codes 2, 3 rare (3 and 1 rows), 6 without code
CODES = np.array([0] * 60 + [1] * 30 + [2] * 3 + [3] + [-1] * 6)
np.random.default_rng(0).shuffle(CODES)


def counts(rows):
    return {c: int((CODES[rows] == c).sum()) for c in (0, 1, 2, 3, -1)}


def test_rare_codes_are_drawn_up_and_dominant_codes_down():
    rows = epoch_rows(CODES, seed=1, epoch=0, upsample_below=5)
    assert counts(rows) == {0: 60, 1: 30, 2: 5, 3: 5, -1: 6}
    assert set(np.flatnonzero(CODES == 2)) <= set(rows)  # every rare row kept, more drawn from them
    rows = epoch_rows(CODES, seed=1, epoch=0, downsample_top=0.2)  # at most 20 rows a code
    assert counts(rows) == {0: 20, 1: 20, 2: 3, 3: 1, -1: 6}
    assert len(set(rows)) == len(rows)  # drawn down without replacement
    both = epoch_rows(CODES, seed=1, epoch=0, upsample_below=5, downsample_top=0.2)
    assert counts(both) == {0: 20, 1: 20, 2: 5, 3: 5, -1: 6}
    assert epoch_size(CODES, 5, 0.2) == len(both) == 56
    assert np.array_equal(epoch_rows(CODES, 1, 0), np.arange(len(CODES)))  # off: every row once


def test_the_draw_depends_on_seed_and_epoch_only():
    a = epoch_rows(CODES, seed=1, epoch=3, upsample_below=5, downsample_top=0.2)
    assert np.array_equal(
        a, epoch_rows(CODES.copy(), seed=1, epoch=3, upsample_below=5, downsample_top=0.2)
    )
    assert not np.array_equal(
        a, epoch_rows(CODES, seed=1, epoch=4, upsample_below=5, downsample_top=0.2)
    )
    assert not np.array_equal(
        a, epoch_rows(CODES, seed=2, epoch=3, upsample_below=5, downsample_top=0.2)
    )
    sizes = {len(epoch_rows(CODES, 1, e, 5, 0.2)) for e in range(5)}
    assert sizes == {56}  # the same size in every epoch: the schedule can count on it


@pytest.mark.parametrize("world, accum", [(2, 1), (3, 2)])
def test_ranks_together_train_the_resampled_epoch_of_one_process(world, accum):
    def rows_of(epoch):
        return epoch_rows(CODES, 7, epoch, upsample_below=5, downsample_top=0.2)

    for epoch in (0, 1):
        single = StepSampler(len(CODES), 8 * world * accum, 1, 0, 1, seed=7, epoch_rows=rows_of)
        single.set_epoch(epoch)
        assert single.rows_per_epoch == 56
        one = [i for batch in single for i, _, w, *_ in batch if w]
        ranks = [
            StepSampler(len(CODES), 8, world, r, accum, seed=7, epoch_rows=rows_of)
            for r in range(world)
        ]
        steps = []
        for sampler in ranks:
            sampler.set_epoch(epoch)
            steps.append([[i for i, _, w, *_ in batch if w] for batch in sampler])
        # step by step, the ranks' micro-batches hold the single process's batch
        merged = [
            sorted(sum((steps[r][s * accum + m] for r in range(world) for m in range(accum)), []))
            for s in range(single.steps_per_epoch)
        ]
        per_step = [
            sorted(one[s * single.global_batch_size : (s + 1) * single.global_batch_size])
            for s in range(single.steps_per_epoch)
        ]
        assert merged == per_step
        assert sorted(one) == sorted(rows_of(epoch).tolist())


def test_a_run_prints_and_schedules_the_resampled_epoch(tmp_path, small_csv, capsys):
    from mixer.cli.entrypoints import finetune_main

    assert (
        finetune_main(
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "--share-val",
                "0.09",
                "--save-path",
                str(tmp_path / "run"),
                *TINY,
                "--num-epochs",
                "1",
                "--batch-size",
                "32",
                "--upsample-below",
                "4",
                "--downsample-top",
                "0.05",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    import pandas as pd

    train = pd.read_parquet(tmp_path / "run" / "data_train.parquet")
    size = epoch_size(train["code_1"].astype(str).to_numpy(), 4, 0.05)
    assert size != len(train)
    assert f"{len(train)} training rows (resampled: {size} per epoch)" in out
    steps = -(-size // 32)
    assert f"steps per epoch {steps}, total steps {steps}" in out


def test_a_resumed_resampled_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, small_csv):
    from safetensors.torch import load_file

    from mixer.cli.entrypoints import finetune_main

    common = [
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--share-val",
        "0.09",
        *TINY,
        "--num-epochs",
        "2",
        "--batch-size",
        "16",
        "--dropout",
        "0",
        "--upsample-below",
        "3",
        "--downsample-top",
        "0.05",
    ]
    assert finetune_main([*common, "--save-path", str(tmp_path / "straight")]) == 0
    assert (
        finetune_main([*common, "--save-path", str(tmp_path / "split"), "--stop-at-step", "7"]) == 0
    )
    assert finetune_main([*common, "--save-path", str(tmp_path / "split")]) == 0
    a, b = (load_file(str(tmp_path / run / "model.safetensors")) for run in ("straight", "split"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0

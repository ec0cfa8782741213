"""The run length and the learning-rate schedule across changes of the global batch
(plain numbers: mixer.training.schedule has no torch)."""

import math

import pytest

from mixer.training.schedule import Layout, Plan, Schedule, steps_between, steps_per_epoch

ROWS = 223


def run_with_relayout(layouts_and_stops, num_epochs=3, max_steps=None, warmup_pct=0.1):
    """Simulate a run that restarts with each (layout, stop step) in turn, the way
    Trainer.load_state_dict resumes the schedule. Returns [(step, lr factor, epoch, row)]."""
    history, saved = [], None
    for layout, stop in layouts_and_stops:
        schedule = Schedule(ROWS, layout, num_epochs, max_steps, None, warmup_pct)
        if saved is None:
            step, epoch, row = 0, 0, 0
        else:
            step, epoch, row, segment, base = saved
            schedule.resume(step, (epoch, row), segment, base)
        g = layout.global_batch
        while step < schedule.total_steps and (stop is None or step < stop):
            history.append((step, schedule.factor(step), epoch, row))
            row += min(g, ROWS - row)
            step += 1
            if row >= ROWS:
                epoch, row = epoch + 1, 0
        saved = (step, epoch, row, schedule.segment, schedule.plan.base_global_batch)
    return history, saved


def test_an_unchanged_layout_keeps_the_schedule_of_the_steps():
    one = Layout(1, 8, 1)
    history, (step, epoch, row, segment, _) = run_with_relayout([(one, 10), (one, None)])
    plan = Plan.make(ROWS, 8, 3, None, None, 0.1)
    assert segment.is_identity and step == plan.total == 3 * math.ceil(ROWS / 8)
    assert [f for _, f, _, _ in history] == [plan.factor(s) for s in range(plan.total)]
    assert (epoch, row) == (3, 0)


@pytest.mark.parametrize(
    "before,after",
    [
        (Layout(1, 8, 1), Layout(2, 8, 1)),  # 1 -> 2 processes
        (Layout(2, 8, 1), Layout(1, 8, 1)),  # 2 -> 1
        (Layout(1, 8, 1), Layout(1, 8, 2)),  # accumulation 1 -> 2
        (Layout(2, 4, 3), Layout(3, 5, 1)),
    ],
)
@pytest.mark.parametrize("stop", [1, 10, 25])
def test_a_new_global_batch_ends_on_the_planned_epochs_with_a_continuous_schedule(
    before, after, stop
):
    history, (step, epoch, row, segment, base) = run_with_relayout([(before, stop), (after, None)])
    assert (epoch, row) == (3, 0)  # the planned 3 epochs, no more, no less
    assert base == before.global_batch
    factors = [f for _, f, _, _ in history]
    assert segment.position(step) == pytest.approx(Plan.make(ROWS, base, 3, None, None, 0.1).total)
    # the learning rate keeps its course: the first step after the change stands where
    # the next step of the old layout would have stood
    at = stop
    plan = Plan.make(ROWS, before.global_batch, 3, None, None, 0.1)
    assert factors[: at + 1] == [plan.factor(s) for s in range(at + 1)]
    # and it decays to (almost) zero at the last step
    assert factors[-1] < 2.5 / len(factors)
    decay = max(at, math.ceil(0.1 * len(factors)) + 1)
    assert all(b <= a + 1e-12 for a, b in zip(factors[decay:], factors[decay + 1 :]))


def test_max_steps_means_the_rows_of_the_first_global_batch():
    """--max-steps 30 with global batch 8 ends where 30 such steps end; resumed with 16,
    the run stops at the first step boundary at or after that position."""
    history, (step, epoch, row, _, _) = run_with_relayout(
        [(Layout(1, 8, 1), 5), (Layout(2, 8, 1), None)], max_steps=30
    )
    end = ROWS + 2 * 8  # 28 steps of 8 fill epoch 0 (the last takes 7 rows), 2 more
    assert end <= epoch * ROWS + row < end + 16


def test_steps_between_counts_partial_steps():
    assert steps_per_epoch(223, 16) == 14
    assert steps_between((0, 8), (2, 0), 223, 16) == math.ceil(215 / 16) + 14
    assert steps_between((1, 0), (1, 0), 223, 16) == 0
    assert steps_between((0, 100), (0, 120), 223, 16) == 2


def test_two_relayouts_still_end_on_plan():
    history, (step, epoch, row, segment, base) = run_with_relayout(
        [(Layout(1, 8, 1), 7), (Layout(2, 8, 1), 20), (Layout(1, 4, 3), None)]
    )
    assert (epoch, row) == (3, 0) and base == 8
    assert segment.position(step) == pytest.approx(Plan.make(ROWS, 8, 3, None, None, 0.1).total)

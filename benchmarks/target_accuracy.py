"""Does a threshold chosen for a target accuracy keep its promise on new rows? Issue 37's
targets, measured on a labelled scored file (benchmarks/coding_scores.py writes one):

    python benchmarks/target_accuracy.py runs/coding/scores.parquet --reps 300

For each head and condition (as written; with 1-2 typos a row, chosen on typo rows too),
over seeded repetitions of "choose on one part of the labelled rows, apply to the rest":

1. the point estimate (the issue's quick measurement) and plain fixed-sequence Learn-then-Test
   (exact binomial tests at delta 0.05) choosing on 800 of 2,000 rows and applying to 1,200;
   then mixer's choice (mixer.coding.guarantee with rows_to_code) on the same splits and with
   a larger rest (1,000 / the other 3,000): how often the accuracy of the coded rows in the
   rest is at least the target, with its Monte Carlo error; the median share coded; the
   rest's own standard error; the share of repetitions whose threshold reaches the target
   on all labelled rows (the population the guarantee speaks of, as near as these rows
   come), and the failures the rest's sampling alone explains;
2. calibration: a temperature (alone, and with a bias) fit on half the rows, the expected
   calibration error on the other half before and after;
3. shorter codes (HISCO's unit, minor and major groups): the share coded at the target with
   and without them, per level, and the promise kept at the level given;
4. (--sections 4) where the fixed sequence starts: the share coded and the promise kept for
   the plain start and for START 0.3, 0.5 and 0.7.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.coding import calibration, curve, guarantee  # noqa: E402

HEADS = ("flat", "seq2seq")
CONDITIONS = ((False, "as written"), (True, "with typos"))


def point_estimate_threshold(conf, correct, target):
    """The threshold the production curve shows at the target (no guarantee)."""
    point = curve.coded_at(curve.production_curve(conf, correct), target)
    return None if point is None else float(point["threshold"])


def shortfall_chance(rows: int, accuracy: float, target: float) -> float:
    """P(Bin(rows, accuracy) < ceil(target rows)): a rest of this size falling short by chance."""
    if rows == 0:
        return 0.0
    needed = math.ceil(target * rows - 1e-9)
    return float(1.0 - guarantee.binomial_upper_tail(needed, rows, min(accuracy, 1.0)))


class Outcome:
    """One configuration's repetitions."""

    def __init__(self, name):
        self.name, self.kept, self.shares, self.accuracy, self.se = name, [], [], [], []
        self.population_kept, self.rest_alone, self.none = [], [], 0

    def add(self, threshold, conf_all, correct_all, rest, target, levels=None):
        if threshold is None:
            self.none += 1
            self.kept.append(True)  # nothing coded breaks no promise
            self.shares.append(0.0)
            self.population_kept.append(True)
            self.rest_alone.append(0.0)
            return
        if levels is None:
            coded_all = conf_all >= threshold
            right_all = correct_all
        else:  # conf_all, correct_all: lists per level, whole code first
            given = guarantee.given_levels(conf_all, threshold)
            coded_all = given >= 0
            right_all = np.zeros(len(given), dtype=bool)
            for level, right in enumerate(correct_all):
                right_all |= (given == level) & right
        coded = coded_all[rest]
        m = int(coded.sum())
        realised = right_all[rest][coded].mean() if m else 1.0
        population = right_all[coded_all].mean()
        self.kept.append(realised >= target)
        self.shares.append(m / len(rest))
        self.accuracy.append(realised)
        self.se.append(math.sqrt(realised * (1 - realised) / m) if m else 0.0)
        self.population_kept.append(population >= target)
        self.rest_alone.append(shortfall_chance(m, population, target))

    def line(self) -> str:
        reps = len(self.kept)
        rate = float(np.mean(self.kept))
        mc = math.sqrt(rate * (1 - rate) / reps)
        acc = f"{np.median(self.accuracy):.4f}" if self.accuracy else "-"
        se = f"{np.median(self.se):.4f}" if self.se else "-"
        return (
            f"  {self.name:<44} kept {rate:6.1%} (MC error {mc:.1%})  coded {np.median(self.shares):6.1%}"
            f"  realised {acc} (rest SE {se})  population kept {np.mean(self.population_kept):6.1%}"
            f"  rest alone {np.mean(self.rest_alone):5.1%}  none {self.none}"
        )


def promise(frame, head, target, reps, seed):
    """Section 1 for one head and condition."""
    conf = frame[f"{head}_confidence"].to_numpy()
    correct = frame[f"{head}_correct"].to_numpy()
    rows = len(frame)
    rng = np.random.default_rng(seed)
    big = f"1,000 -> {rows - 1000:,}"
    configs = [  # (name, rows it chooses on, rows it is applied to, how it chooses)
        (
            "point estimate, 800 -> 1,200",
            800,
            2000,
            lambda c, r, m: point_estimate_threshold(c, r, target),
        ),
        (
            "plain fixed sequence, 800 -> 1,200",
            800,
            2000,
            lambda c, r, m: guarantee.choose_threshold(c, r, target, start=None).threshold,
        ),
        (
            "mixer, 800 -> 1,200",
            800,
            2000,
            lambda c, r, m: guarantee.choose_threshold(c, r, target).threshold,
        ),
        (
            "mixer + rows_to_code, 800 -> 1,200",
            800,
            2000,
            lambda c, r, m: guarantee.choose_threshold(c, r, target, rows_to_code=m).threshold,
        ),
        (
            f"plain fixed sequence, {big}",
            1000,
            rows,
            lambda c, r, m: guarantee.choose_threshold(c, r, target, start=None).threshold,
        ),
        (
            f"mixer, {big}",
            1000,
            rows,
            lambda c, r, m: guarantee.choose_threshold(c, r, target).threshold,
        ),
        (
            f"mixer + rows_to_code, {big}",
            1000,
            rows,
            lambda c, r, m: guarantee.choose_threshold(c, r, target, rows_to_code=m).threshold,
        ),
    ]
    out = {name: Outcome(name) for name, *_ in configs}
    for _ in range(reps):
        pool = rng.permutation(rows)
        for name, chooses, used, choose in configs:
            pick, rest = pool[:chooses], pool[chooses:used]
            out[name].add(choose(conf[pick], correct[pick], len(rest)), conf, correct, rest, target)
    return out


def calibration_check(frame, head, reps, seed):
    """Section 2: fit on half the rows, ECE on the other half: the temperature alone, and the
    temperature with a bias (mixer.coding.calibration.fit_scaling, what a run stores)."""
    conf = frame[f"{head}_confidence"].to_numpy()
    correct = frame[f"{head}_correct"].to_numpy()
    rng = np.random.default_rng(seed)
    fits, before, alone, scaled = [], [], [], []
    for _ in range(reps):
        order = rng.permutation(len(conf))
        fit, held = order[: len(conf) // 2], order[len(conf) // 2 :]
        t_alone = calibration.fit_temperature(conf[fit], correct[fit])
        t, bias = calibration.fit_scaling(conf[fit], correct[fit])
        fits.append((t_alone, t, bias))
        before.append(calibration.expected_calibration_error(conf[held], correct[held]))
        alone.append(
            calibration.expected_calibration_error(
                calibration.calibrate(conf[held], t_alone), correct[held]
            )
        )
        scaled.append(
            calibration.expected_calibration_error(
                calibration.calibrate(conf[held], t, bias), correct[held]
            )
        )
    before, alone, scaled = np.array(before), np.array(alone), np.array(scaled)
    t_alone, t, bias = np.median(np.array(fits), axis=0)
    return [
        f"  ECE on rows not fit on: raw {np.median(before):.4f}; temperature alone (T {t_alone:.3f}) "
        f"{np.median(alone):.4f} (halved in {np.mean(alone <= before / 2):.0%} of {reps} splits); "
        f"temperature and bias (T {t:.3f}, bias {bias:.3f}) {np.median(scaled):.4f} "
        f"(median ratio {np.median(scaled / before):.2f}; halved in {np.mean(scaled <= before / 2):.0%})"
    ]


def shorter_codes(frame, head, levels, target, reps, seed):
    """Section 3: with and without shorter codes, mixer's choice on 1,000 rows, the rest coded."""
    whole = frame[f"{head}_confidence"].to_numpy()
    whole_right = frame[f"{head}_correct"].to_numpy()
    ordered = sorted(levels, reverse=True)  # unit group first, then minor, then major
    confs = [whole] + [frame[f"{head}_confidence_{L}"].to_numpy() for L in ordered]
    rights = [whole_right] + [frame[f"{head}_correct_{L}"].to_numpy() for L in ordered]
    rng = np.random.default_rng(seed)
    plain, fallback = Outcome("whole codes only"), Outcome("with shorter codes")
    level_shares = []
    for _ in range(reps):
        pool = rng.permutation(len(frame))
        choose, rest = pool[:1000], pool[1000:]
        choice = guarantee.choose_threshold(whole[choose], whole_right[choose], target)
        plain.add(choice.threshold, whole, whole_right, rest, target)
        choice, _ = guarantee.choose_with_levels(
            [c[choose] for c in confs], [r[choose] for r in rights], target
        )
        fallback.add(choice.threshold, confs, rights, rest, target, levels=True)
        if choice.threshold is None:
            level_shares.append([0.0] * len(confs))
        else:
            given = guarantee.given_levels([c[rest] for c in confs], choice.threshold)
            level_shares.append([(given == i).mean() for i in range(len(confs))])
    shares = np.median(np.array(level_shares), axis=0)
    names = ["whole code"] + [f"{L} digits" for L in ordered]
    per_level = ", ".join(f"{n} {s:.1%}" for n, s in zip(names, shares))
    return [
        plain.line(),
        fallback.line(),
        f"  median share of the rest given each level: {per_level}",
    ]


def level_curves(frame, head, levels, target):
    """The prefix rule checked on the production curve at each level (all rows, point
    estimates): the share coded at the target with the level's own confidence, and with the
    whole code's confidence in its place; the level confidence's calibration error."""
    lines = []
    for L in sorted(levels, reverse=True):
        right = frame[f"{head}_correct_{L}"].to_numpy()
        own = frame[f"{head}_confidence_{L}"].to_numpy()
        whole = frame[f"{head}_confidence"].to_numpy()
        shares = []
        for conf in (own, whole):
            point = curve.coded_at(curve.production_curve(conf, right), target)
            shares.append(0.0 if point is None else float(point["coded_share"]))
        lines.append(
            f"  {L} digits: accuracy {right.mean():.4f}; at {target:.0%}: {shares[0]:.1%} coded by the "
            f"level's confidence, {shares[1]:.1%} by the whole code's; ECE of the level's "
            f"{calibration.expected_calibration_error(own, right):.4f}"
        )
    return lines


def draw(scores, heads, target, folder, seed):
    """production.png: every head as written and with typos; reliability_<head>.png: the
    temperature fit on half the rows as written, the diagram drawn on the other half."""
    os.makedirs(folder, exist_ok=True)
    curves = []
    for noisy, condition in CONDITIONS:
        frame = scores[scores["noisy"] == noisy]
        for head in heads:
            one = curve.production_curve(frame[f"{head}_confidence"], frame[f"{head}_correct"])
            one["group"] = f"{head}, {condition}"
            curves.append(one)
    curve.plot_curve(
        pd.concat(curves, ignore_index=True),
        os.path.join(folder, "production.png"),
        target,
        title="production curves on 4,000 unseen rows",
    )
    frame = scores[~scores["noisy"]].reset_index(drop=True)
    order = np.random.default_rng(seed).permutation(len(frame))
    fit, held = order[: len(frame) // 2], order[len(frame) // 2 :]
    for head in heads:
        conf, right = frame[f"{head}_confidence"].to_numpy(), frame[f"{head}_correct"].to_numpy()
        t, bias = calibration.fit_scaling(conf[fit], right[fit])
        calibration.reliability_diagram(
            os.path.join(folder, f"reliability_{head}.png"),
            conf[held],
            calibration.calibrate(conf[held], t, bias),
            right[held],
            f"{head} head, rows not fit on (T {t:.2f}, bias {bias:.2f})",
        )
    print(f"drew {folder}/production.png and reliability_<head>.png")


def start_comparison(frame, head, target, reps, seed, starts=(None, 0.3, 0.5, 0.7)):
    """Section 4: where the fixed sequence starts (mixer.coding.guarantee.START), 1,000 rows
    choose and the rest are coded: median share coded and the promise kept, per start."""
    conf = frame[f"{head}_confidence"].to_numpy()
    correct = frame[f"{head}_correct"].to_numpy()
    parts = []
    for start in starts:
        rng = np.random.default_rng(seed)
        shares, kept = [], []
        for _ in range(reps):
            pool = rng.permutation(len(frame))
            choose, rest = pool[:1000], pool[1000:]
            threshold = guarantee.choose_threshold(
                conf[choose], correct[choose], target, start=start
            ).threshold
            coded = conf[rest] >= (np.inf if threshold is None else threshold)
            shares.append(coded.mean())
            kept.append(not coded.any() or correct[rest][coded].mean() >= target)
        parts.append(
            f"{'plain' if start is None else start}: coded {np.median(shares):.1%} (mean "
            f"{np.mean(shares):.1%}), kept {np.mean(kept):.1%}"
        )
    return "  start of the sequence: " + "; ".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scores", help="a scored file from benchmarks/coding_scores.py")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--levels", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--heads", nargs="+", default=list(HEADS))
    parser.add_argument("--sections", default="123")
    parser.add_argument(
        "--plots",
        default=None,
        metavar="DIR",
        help="also draw the production curves and reliability diagrams into DIR",
    )
    args = parser.parse_args(argv)
    scores = pd.read_parquet(args.scores)
    if args.plots:
        draw(scores, args.heads, args.target, args.plots, args.seed)
    print(
        f"{args.scores}: {len(scores)} scored rows; target {args.target}, delta 0.05, {args.reps} repetitions, "
        f"seed {args.seed}"
    )
    for noisy, condition in CONDITIONS:
        frame = scores[scores["noisy"] == noisy].reset_index(drop=True)
        for head in args.heads:
            print(
                f"\n{head} head, {condition}: {len(frame)} rows, accuracy {frame[f'{head}_correct'].mean():.4f}; "
                + curve.headline(
                    curve.production_curve(frame[f"{head}_confidence"], frame[f"{head}_correct"]),
                    args.target,
                    rows="these rows",
                )
                + " (point estimate)"
            )
            if "1" in args.sections:
                for outcome in promise(frame, head, args.target, args.reps, args.seed).values():
                    print(outcome.line())
            if "2" in args.sections:
                for line in calibration_check(frame, head, args.reps, args.seed):
                    print(line)
            if "4" in args.sections:
                print(start_comparison(frame, head, args.target, args.reps, args.seed))
            if "3" in args.sections and args.levels:
                for line in level_curves(frame, head, args.levels, args.target):
                    print(line)
                for line in shorter_codes(
                    frame, head, args.levels, args.target, args.reps, args.seed
                ):
                    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

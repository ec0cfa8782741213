"""Prediction with new heads on OccCANINE's encoder (--only-encoder, --new-heads fast): the
run's batches padded as far as their rows need, against the same run with every input
padded to 128 characters, and how far their outputs agree (one model: its own reference).

    python benchmarks/new_heads_predict_speed.py [--rows 500] [--batch-size 64] [--run RUN]

Without --run, trains one (finetune.py --initial-checkpoint HUB --only-encoder on the example
data, --max-steps 1 by default) from a hub directory of OccCANINE_s2s_mix's architecture
(CANINE-s, random weights, benchmarks/occcanine_speed.py's writer). Prints, for the flat head
and greedy decoding, records/s and the characters computed per row of each, and their
agreement: the share of rows whose codes are identical and the largest difference of a
probability (the flat head's top codes at threshold 0, so every row has codes to compare).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import EXAMPLE_FLAGS  # noqa: E402
from occcanine_speed import Padded128, characters_per_row, rate, write_full_size_model  # noqa: E402

from mixer.core.precision import cpu_model  # noqa: E402


def trained_run(workdir: str, steps: int) -> str:
    hub = os.path.join(workdir, "occcanine-hub")
    if not os.path.exists(os.path.join(hub, "model.safetensors")):
        write_full_size_model(hub)
    run_dir = os.path.join(workdir, "new-heads-run")
    subprocess.run(
        [
            sys.executable,
            "finetune.py",
            *EXAMPLE_FLAGS,
            "--language",
            "en",
            "--save-path",
            run_dir,
            "--initial-checkpoint",
            hub,
            "--only-encoder",
            "--max-steps",
            str(steps),
            "--batch-size",
            "8",
            "--val-max-rows",
            "8",
            "--no-eval-noise",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return run_dir


def agreement(ours: pd.DataFrame, padded: pd.DataFrame) -> tuple:
    """(share of rows with identical codes, largest probability difference)."""
    codes = [c for c in ours.columns if c.startswith("code_")]
    probs = [c for c in ours.columns if c.startswith("prob_")]
    same = float((ours[codes].to_numpy() == padded[codes].to_numpy()).all(axis=1).mean())
    a, b = ours[probs].to_numpy(float), padded[probs].to_numpy(float)  # NaN: no code in that place
    gap = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))
    return same, float(np.nan_to_num(gap, nan=np.inf).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--run", default=None, help="a run with new heads on OccCANINE's encoder")
    parser.add_argument(
        "--train-steps", type=int, default=1, help="without --run: steps of the run trained"
    )
    parser.add_argument("--workdir", default="/tmp/mixer-bench-new-heads")
    args = parser.parse_args()
    import mixer

    run_dir = args.run or trained_run(args.workdir, args.train_steps)
    model = mixer.load(run_dir, device="cpu")
    heads = model.predictor.model.cfg
    texts = np.asarray(
        pd.unique(pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str)["occ1"])[
            : args.rows
        ]
    )
    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} "
        f"threads, torch {torch.__version__}; {len(texts)} distinct descriptions, batch {args.batch_size}, "
        f"fp32; {run_dir}: family {heads.family}, decoder reads padding: {heads.reads_padding}"
    )
    for head in ("flat", "seq2seq"):
        speed, chars = (
            rate(model, texts, head, args.batch_size),
            characters_per_row(model, texts, head, args.batch_size),
        )
        # threshold 0: every row's top codes and their probabilities are compared, not only
        # those above the run's threshold
        ours = model.predict(texts, lang="en", head=head, batch_size=args.batch_size, threshold=0.0)
        with Padded128():
            speed_128 = rate(model, texts, head, args.batch_size)
            padded = model.predict(
                texts, lang="en", head=head, batch_size=args.batch_size, threshold=0.0
            )
        same, gap = agreement(ours, padded)
        print(
            f"{head:8s}: {speed:6.1f} records/s, {chars:5.1f} characters per row; padded to 128: "
            f"{speed_128:6.1f} records/s ({speed / speed_128:.2f}x); codes identical in {100 * same:.1f}% "
            f"of rows, probabilities within {gap:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()

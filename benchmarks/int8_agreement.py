"""How far int8 prediction (--quantize int8) is from fp32: the same rows predicted both ways.

    python benchmarks/int8_agreement.py RUN_DIR [RUN_DIR ...] [--random-occcanine]

For each trained run, its validation rows (data_val.parquet, with their true codes) are
predicted in fp32 and in int8 with the flat head and greedy decoding; per head it prints:
top-1 agreement (the same first code), agreement of the code sets (the same codes above
the threshold, or decoded), the largest difference of a first code's probability, and the
accuracy (the predicted code set equals the true one) in fp32 and int8 and its change.
Targets on trained models: top-1 agreement >= 99.5%, accuracy within 0.3 points.
--random-occcanine also predicts the example data's distinct descriptions with
OccCANINE's architecture at random weights (as benchmarks/occcanine_speed.py builds it;
its flat head at threshold 0, as no code clears OccCANINE's): agreement only, no target
(random weights have near ties). --alternatives also predicts each run with the other
choices of mixer.models.quantize.quantize_encoder (weight scales per output row; the
feed-forward output layers, whose inputs have the widest range, left in fp32).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def code_sets(table: pd.DataFrame) -> list:
    columns = [c for c in table.columns if c.startswith("code_")]
    return [frozenset(c for c in row if c) for row in table[columns].to_numpy(dtype=object)]


def compare(fp32: pd.DataFrame, int8: pd.DataFrame, truth=None) -> str:
    top1 = float((fp32["code_1"].to_numpy() == int8["code_1"].to_numpy()).mean())
    sets_a, sets_b = code_sets(fp32), code_sets(int8)
    same_sets = float(np.mean([a == b for a, b in zip(sets_a, sets_b)]))
    gap = float(np.nanmax(np.abs(fp32["prob_1"].astype(float) - int8["prob_1"].astype(float))))
    line = (
        f"top-1 agreement {100 * top1:.2f}%, code sets {100 * same_sets:.2f}%, largest prob_1 "
        f"difference {gap:.4f}"
    )
    if truth is not None:
        acc_a = float(np.mean([a == t for a, t in zip(sets_a, truth)]))
        acc_b = float(np.mean([b == t for b, t in zip(sets_b, truth)]))
        line += (
            f", accuracy fp32 {100 * acc_a:.2f}% int8 {100 * acc_b:.2f}% "
            f"({100 * (acc_b - acc_a):+.2f} points)"
        )
    return line


FFN_OUTPUT = r"(?<!attention)\.output\.dense$"  # a transformer layer's feed-forward output (BERT's and CANINE's names)
ALTERNATIVES = {
    "weight scales per output row": {"per_channel": True},
    "feed-forward outputs in fp32": {"keep_fp32": FFN_OUTPUT},
    "both": {"per_channel": True, "keep_fp32": FFN_OUTPUT},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="*", help="run directories (their validation rows are predicted)"
    )
    parser.add_argument("--random-occcanine", action="store_true")
    parser.add_argument(
        "--rows", type=int, default=500, help="--random-occcanine: distinct descriptions"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--alternatives", action="store_true", help="also other choices of layers and scales"
    )
    args = parser.parse_args()
    import torch

    import mixer
    from mixer.core.precision import cpu_model
    from mixer.models.quantize import quantize_encoder
    from mixer.data.labels.columns import code_columns
    from mixer.data.prepared.files import load_prepared

    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), quantized engine "
        f"{', '.join(torch.backends.quantized.supported_engines)}"
    )
    for run in args.runs:
        val = load_prepared(run).val
        columns = [c for c in code_columns(8) if c in val.columns]
        truth = [
            frozenset(c for c in row if c)
            for row in val[columns].astype(str).to_numpy(dtype=object)
        ]
        texts, langs = val["text"].astype(str).tolist(), val["lang"].astype(str).tolist()
        fp32 = mixer.load(run, device="cpu")
        int8 = mixer.load(run, device="cpu", quantize="int8")
        print(
            f"{run}: {len(texts)} validation rows, encoder {fp32.config.get('encoder_source', '?')}"
        )
        exact = {
            head: fp32.predict(texts, lang=langs, head=head, batch_size=args.batch_size)
            for head in ("flat", "seq2seq")
        }
        for head, a in exact.items():
            b = int8.predict(texts, lang=langs, head=head, batch_size=args.batch_size)
            print(f"  {head:8s}: {compare(a, b, truth)}", flush=True)
        for label, choice in ALTERNATIVES.items() if args.alternatives else ():
            other = mixer.load(run, device="cpu")
            quantize_encoder(other.predictor.model.encoder, **choice)
            other.predictor.quantize = "int8"  # one row at a time, as --quantize runs it
            for head, a in exact.items():
                b = other.predict(texts, lang=langs, head=head, batch_size=args.batch_size)
                print(f"  {head:8s}, {label}: {compare(a, b, truth)}", flush=True)
    if args.random_occcanine:
        from occcanine_speed import write_full_size_model

        texts = pd.unique(
            pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str)["occ1"]
        )[: args.rows]
        with tempfile.TemporaryDirectory(prefix="occcanine-s-") as directory:
            write_full_size_model(directory)
            fp32 = mixer.load(directory, device="cpu")
            int8 = mixer.load(directory, device="cpu", quantize="int8")
            print(
                f"OccCANINE's architecture, random weights: {len(texts)} distinct descriptions (no target; "
                "flat head at threshold 0: its 5 most probable codes)"
            )
            for head, threshold in (("flat", 0.0), ("seq2seq", None)):
                a = fp32.predict(
                    list(texts),
                    lang="en",
                    head=head,
                    threshold=threshold,
                    batch_size=args.batch_size,
                )
                b = int8.predict(
                    list(texts),
                    lang="en",
                    head=head,
                    threshold=threshold,
                    batch_size=args.batch_size,
                )
                print(f"  {head:8s}: {compare(a, b)}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()

"""Score a trained run's validation rows for benchmarks/target_accuracy.py: each row's
confidence and correctness for the flat and seq2seq heads, whole and at each coarser level,
as written and with 1 or 2 edits of mixer's training noise a row.

    python benchmarks/coding_scores.py RUN_DIR --system hisco --output runs/coding/scores.parquet

Columns: row, lang, text, noisy (bool), true_codes, and per head h: h_codes,
h_confidence, h_correct, and per level L of the system: h_confidence_L, h_correct_L
(mixer.coding.confidence and mixer.coding.levels; docs/coding.md). The model runs through
the predictor's own encoder, heads and thresholds; the confidences are computed from the
flat logits and the decoder's step probabilities by mixer.coding.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SEED = 37


def noisy_texts(texts: list, train_texts: list, seed: int = SEED) -> list:
    """Each text with 1 or 2 edits (half the rows each, drawn by row) of the training noise."""
    from mixer.data.inputs import noise

    positions = np.arange(len(texts))
    edits = 1 + (noise.uniforms(seed, noise.EVAL_EPOCH, positions, noise.STREAM_APPLY) < 0.5)
    keys = noise.hashes(seed, noise.EVAL_EPOCH, positions, noise.STREAM_EDITS)
    words = noise.word_list(train_texts)
    return [noise.noised(t, int(e), k, words) for t, e, k in zip(texts, edits, keys)]


def score(predictor, texts, langs, levels, batch_size=128) -> dict:
    """Per head: codes per row, the row confidence, and per level its confidence."""
    import torch

    from mixer.coding import confidence
    from mixer.reporting.metrics import decoded_codes, flat_prediction

    f = predictor.formatter
    top_k = predictor.default_top_k()
    steps = f.max_num_codes * f.block_size  # what predict.py decodes for mixer's family
    n = len(texts)
    out = {
        "flat": {"codes": [None] * n, "confidence": np.zeros(n)},
        "seq2seq": {"codes": [None] * n, "confidence": np.zeros(n)},
    }
    for head in out.values():
        head.update({f"confidence_{L}": np.zeros(n) for L in levels})
    with torch.no_grad():
        for rows, states, pooled, mask, row_langs in predictor._encoded(
            np.asarray(texts, dtype=object),
            np.asarray(langs, dtype=object),
            batch_size,
            states=True,
        ):
            logits = predictor.flat_logits(pooled, np.asarray(texts, dtype=object)[rows]).float()
            limits = (
                torch.from_numpy(predictor.row_thresholds(row_langs, None)).to(logits).unsqueeze(1)
            )
            index, _, picked = flat_prediction(logits.sigmoid(), limits, top_k, predictor.rules)
            chosen = torch.zeros_like(logits, dtype=torch.bool)
            chosen.scatter_(1, index, picked)
            logits_np, chosen_np = logits.cpu().numpy().astype(np.float64), chosen.cpu().numpy()
            flat = out["flat"]
            flat["confidence"][rows] = confidence.flat_confidence(logits_np, chosen_np)
            for L in levels:
                flat[f"confidence_{L}"][rows] = confidence.flat_level_confidence(
                    logits_np, chosen_np, predictor.codes, L
                )
            for i, row in enumerate(rows):
                flat["codes"][row] = sorted(predictor.codes[chosen_np[i]])
            tokens, token_probs = predictor.model.generate(states, mask, steps)
            token_probs = token_probs.float().cpu().numpy()
            s2s = out["seq2seq"]
            s2s["confidence"][rows] = confidence.sequence_confidence(token_probs)
            for L in levels:
                s2s[f"confidence_{L}"][rows] = confidence.sequence_level_confidence(
                    token_probs, f.block_size, f.max_num_codes, L
                )
            for i, codes in zip(rows, decoded_codes(tokens.cpu(), f)):
                s2s["codes"][i] = sorted(set(codes))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument(
        "--system", default="hisco", help="code system for the levels (mixer.coding.levels)"
    )
    parser.add_argument("--output", required=True)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    from mixer.coding.levels import levels_for, prefix_correct
    from mixer.prediction.predict import Predictor

    levels = levels_for(args.system)
    val = pd.read_parquet(os.path.join(args.run_dir, "data_val.parquet"))
    train = pd.read_parquet(os.path.join(args.run_dir, "data_train.parquet"), columns=["text"])
    code_cols = [c for c in val.columns if c.startswith("code_")]
    truth = [
        sorted({str(c) for c in row if isinstance(c, str) and c})
        for row in val[code_cols].astype(object).itertuples(index=False)
    ]
    predictor = Predictor.load(args.run_dir, device=args.device)
    texts, langs = val["text"].astype(str).tolist(), val["lang"].astype(str).tolist()
    parts = []
    for noisy, row_texts in (
        (False, texts),
        (True, noisy_texts(texts, train["text"].astype(str).tolist())),
    ):
        scored = score(predictor, row_texts, langs, levels)
        part = pd.DataFrame(
            {
                "row": val["row"].to_numpy(),
                "lang": langs,
                "text": row_texts,
                "noisy": noisy,
                "true_codes": [" & ".join(t) for t in truth],
            }
        )
        for head, values in scored.items():
            part[f"{head}_codes"] = [" & ".join(c) for c in values["codes"]]
            part[f"{head}_confidence"] = values["confidence"]
            part[f"{head}_correct"] = [set(c) == set(t) for c, t in zip(values["codes"], truth)]
            for L in levels:
                part[f"{head}_confidence_{L}"] = values[f"confidence_{L}"]
                part[f"{head}_correct_{L}"] = prefix_correct(truth, values["codes"], L)
        parts.append(part)
        print(
            f"{'noisy' if noisy else 'as written'}: flat accuracy {part['flat_correct'].mean():.4f}, "
            f"seq2seq accuracy {part['seq2seq_correct'].mean():.4f} on {len(part)} rows"
        )
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    pd.concat(parts, ignore_index=True).to_parquet(args.output, index=False)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

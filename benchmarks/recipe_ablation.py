"""The default recipe taken apart on a run's own split: the encoder's flat head alone, the
character n-gram head alone (mixer.models.ngram), and the two combined as the run's end
combines them, with and without the noised training copies and with other variants. Per
variant: top-code accuracy on the validation rows as written and on the very noised copy
the run scores (--eval-noise), the share --target-accuracy 0.95 would code on new rows
(mixer.coding.guarantee.choose_threshold on every validation row, confidence = the highest
sigmoid of the flat logits: the run's own guarantee line reads its calibrated confidence),
and the time of the extra fit (docs/training.md, "The character n-gram head").

    python benchmarks/recipe_ablation.py RUN_DIR
    python benchmarks/recipe_ablation.py --split data/toy_hisco.csv runs/heldout
        # writes runs/heldout/train.csv and heldout.csv: 2,000 rows drawn (seed 54) held out
    python benchmarks/recipe_ablation.py RUN_DIR --heldout runs/heldout/heldout.csv
        # also: predict.py --target-accuracy 0.95 on rows the run never used: share coded
        # and its realised accuracy (--heldout-only: that alone)

The weights are chosen on the validation rows as written (never on the noised rows).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HELD_OUT, SPLIT_SEED = 2000, 54


def split(data: str, out_dir: str) -> None:
    """train.csv (every row but HELD_OUT drawn with SPLIT_SEED) and heldout.csv."""
    frame = pd.read_csv(data, dtype=str, keep_default_na=False)
    held = np.zeros(len(frame), dtype=bool)
    held[np.random.default_rng(SPLIT_SEED).choice(len(frame), HELD_OUT, replace=False)] = True
    os.makedirs(out_dir, exist_ok=True)
    frame[~held].to_csv(os.path.join(out_dir, "train.csv"), index=False)
    frame[held].to_csv(os.path.join(out_dir, "heldout.csv"), index=False)
    print(f"{(~held).sum()} training rows, {held.sum()} held out: {out_dir}")


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def measure(z_val, z_noised, truth) -> tuple:
    from mixer.coding.guarantee import choose_threshold
    from mixer.coding.scores import GUARANTEE_ROWS

    rows = np.arange(len(truth))
    right = truth[rows, z_val.argmax(axis=1)] > 0
    share = choose_threshold(
        sigmoid(z_val.max(axis=1)), right, 0.95, 0.05, GUARANTEE_ROWS
    ).coded_share
    noised = (truth[rows, z_noised.argmax(axis=1)] > 0).mean() if z_noised is not None else None
    return right.mean(), noised, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?")
    parser.add_argument("--split", nargs=2, metavar=("DATA", "OUT_DIR"))
    parser.add_argument("--heldout", help="labelled rows the run never used (its input columns)")
    parser.add_argument("--heldout-only", action="store_true", help="--heldout, no ablation")
    args = parser.parse_args()
    if args.split:
        split(*args.split)
        return
    if args.heldout_only:
        import mixer

        heldout(mixer.load(args.run_dir, device="cpu"), args.run_dir, args.heldout)
        return
    import sklearn.feature_extraction.text  # noqa: F401 (imported before any fit is timed)
    import sklearn.svm  # noqa: F401

    import mixer
    from mixer.data.inputs.noise import noised_texts, word_list
    from mixer.models import ngram
    from mixer.prediction.outputs import score_matrix

    run = args.run_dir
    train = pd.read_parquet(os.path.join(run, "data_train.parquet"))
    val = pd.read_parquet(os.path.join(run, "data_val.parquet"))
    with open(os.path.join(run, "args.yaml")) as handle:
        train_args = yaml.safe_load(handle)["train"]
    seed, edits = train_args["seed"], train_args.get("eval_noise") or 0
    model = mixer.load(run, device="cpu")
    predictor = model.predictor
    codes = list(predictor.codes)
    index = {code: i for i, code in enumerate(codes)}
    truth = np.zeros((len(val), len(codes)), dtype=np.float32)
    for column in [c for c in val.columns if c.startswith("code_")]:
        found = val[column].map(index)
        kept = np.flatnonzero(found.notna().to_numpy())
        truth[kept, found.iloc[kept].astype(int).to_numpy()] = 1
    words = word_list(train["text"])
    texts = [str(t) for t in val["text"]]
    noised = noised_texts(texts, seed, edits, words) if edits else None
    langs = val["lang"].astype(str).tolist()
    stored_head, predictor.ngram = predictor.ngram, None  # the encoder's flat logits alone
    logits = score_matrix(predictor, texts, langs, "logits", "flat", 256).astype(np.float64)
    logits_noised = (
        score_matrix(predictor, noised, langs, "logits", "flat", 256).astype(np.float64)
        if noised
        else None
    )
    predictor.ngram = stored_head
    first = train["code_1"].map(index)
    kept = first.notna().to_numpy()
    train_texts = train["text"].to_numpy(dtype=object)[kept]
    classes = first[kept].astype(int).to_numpy()

    def fitted(copies=ngram.NOISED_COPIES, **settings):
        """(head, seconds) fitted as the run fits it, with these module settings."""
        saved = {name: getattr(ngram, name) for name in settings}
        saved["NOISED_COPIES"] = ngram.NOISED_COPIES
        for name, value in dict(settings, NOISED_COPIES=copies).items():
            setattr(ngram, name, value)
        try:
            start = time.perf_counter()
            rows, labels = ngram.training_texts(train_texts, classes, seed, words)
            head = ngram.fit(rows, labels, len(codes))
            return head, time.perf_counter() - start
        finally:
            for name, value in saved.items():
                setattr(ngram, name, value)

    table = []

    def add(name, weight, head, seconds):
        s_val = head.scores(texts) if head is not None else 0
        s_noised = head.scores(noised) if head is not None and noised else 0
        z_val = logits + weight * s_val if weight is not None else s_val
        z_noised = (
            (logits_noised + weight * s_noised if weight is not None else s_noised)
            if noised
            else None
        )
        accuracy, noisy, share = measure(np.asarray(z_val), z_noised, truth)
        table.append((name, weight, accuracy, noisy, share, seconds))

    def combined(name, head, seconds, by="accuracy"):
        weight, measured = ngram.choose_weight(logits, head.scores(texts), truth)
        if by == "cross-entropy":
            weight = min(ngram.WEIGHTS, key=lambda w: (measured[w][1], w))
        add(name, weight, head, seconds)

    add("encoder's flat head alone", 0.0, None, 0.0)
    default, seconds = fitted()
    add("n-gram head alone (the default's fit)", None, default, seconds)
    plain, plain_seconds = fitted(copies=0, MIN_DF=1)
    add("n-gram alone, the baseline's (no copies, every n-gram)", None, plain, plain_seconds)
    combined("combined, no noised copies, every n-gram", plain, plain_seconds)
    bare, bare_seconds = fitted(copies=0)
    combined(f"combined, no noised copies, min_df {ngram.MIN_DF}", bare, bare_seconds)
    combined(f"**combined, {ngram.NOISED_COPIES} noised copies (the default)**", default, seconds)
    combined("the default, weight by cross-entropy", default, seconds, by="cross-entropy")
    every, every_seconds = fitted(MIN_DF=1)
    combined(f"combined, {ngram.NOISED_COPIES} noised copies, every n-gram", every, every_seconds)
    five, five_seconds = fitted(NGRAMS=(1, 5))
    combined(f"combined, {ngram.NOISED_COPIES} noised copies, 1-5-grams", five, five_seconds)
    print(f"{run}: {len(val)} validation rows, noised copy {edits} edits a row; top-code accuracy")
    print("| variant | weight | accuracy | noised accuracy | guarantee share at 0.95 | fit (s) |")
    print("|---|---|---|---|---|---|")
    for name, weight, accuracy, noisy, share, secs in table:
        shown = "" if weight is None else f"{weight:g}"
        noisy = "" if noisy is None else f"{noisy:.4f}"
        print(f"| {name} | {shown} | {accuracy:.4f} | {noisy} | {share:.3f} | {secs:.1f} |")
    if stored_head is not None:
        print(f"the run's own head ({ngram.NGRAM_FILE}): weight {stored_head.weight:g}")
    if args.heldout:
        heldout(model, run, args.heldout)


def heldout(model, run: str, path: str) -> None:
    """--target-accuracy 0.95 (its threshold for a file of a million rows, as the run's
    guarantee line states it) on labelled rows the run never used."""
    from mixer.coding.target import AUTO, CODED

    with open(os.path.join(run, "args.yaml")) as handle:
        data = yaml.safe_load(handle)["data"]
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    truth_col = data["target_cols"][0]
    # the threshold the run's guarantee line states: for a file of a million rows like these
    target = model.target(0.95, rows_to_code=1_000_000)
    out = model.predict(list(frame[data["input_col"]]), target=target)
    auto = (out[CODED] == AUTO).to_numpy()
    true = frame[truth_col]
    if data.get("zero_padded_codes"):  # as the run read its codes
        true = true.str.zfill(data["block_size"])
    right = (out["code_1"].to_numpy() == true.to_numpy()) & auto
    print(
        f"held out ({len(frame)} rows the run never used, {path}): --target-accuracy 0.95 "
        f"codes {auto.mean():.1%}, realised accuracy {right.sum() / max(auto.sum(), 1):.1%}"
    )


if __name__ == "__main__":
    main()

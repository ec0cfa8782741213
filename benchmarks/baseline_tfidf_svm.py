"""The classical baseline on the same split as a run: TF-IDF of character
1-4-grams + linear SVM (scikit-learn), trained on the run's data_train and
scored on its data_val with the same exact-match accuracy as the run, as written
and on the very noised copy of the validation rows the run scores (--eval-noise:
the same edits, seed and word list, mixer.data.inputs.noise.noised_texts).

    python benchmarks/baseline_tfidf_svm.py runs/quickstart
"""

import argparse
import os
import sys
import time

import pandas as pd
import yaml
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.svm import LinearSVC

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    args = parser.parse_args()
    train = pd.read_parquet(os.path.join(args.run_dir, "data_train.parquet"))
    val = pd.read_parquet(os.path.join(args.run_dir, "data_val.parquet"))
    # single-code rows: the first code is the class (multi-code rows are scored as a set below)
    start = time.perf_counter()
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)
    features = vectorizer.fit_transform(train["text"])
    classifier = LinearSVC(C=1.0).fit(features, train["code_1"])
    predicted = classifier.predict(vectorizer.transform(val["text"]))
    code_cols = [c for c in val.columns if c.startswith("code_")]
    truth = val[code_cols].apply(lambda r: {c for c in r if c}, axis=1)
    accuracy = sum({p} == t for p, t in zip(predicted, truth)) / len(val)
    seconds = time.perf_counter() - start
    noisy_accuracy, edits = noised_accuracy(args.run_dir, train, val, vectorizer, classifier, truth)
    log = (
        pd.read_csv(os.path.join(args.run_dir, "logs.csv"))
        if os.path.exists(os.path.join(args.run_dir, "logs.csv"))
        else None
    )
    print(
        f"baseline (TF-IDF char 1-4 + LinearSVC): accuracy {accuracy:.4f} on {len(val)} "
        f"validation rows ({seconds:.1f} s)"
    )
    if noisy_accuracy is not None:
        print(
            f"baseline on the noised validation rows ({edits} edits each): accuracy {noisy_accuracy:.4f}"
        )
    if log is not None and len(log):
        last = log.iloc[-1]
        print(
            f"mixer run {args.run_dir}: flat accuracy {last['val_flat_accuracy']:.4f}, "
            f"seq2seq accuracy {last['val_seq2seq_accuracy']:.4f} at step {int(last['step'])}"
        )
        print(f"ratio mixer/baseline (flat): {last['val_flat_accuracy'] / accuracy:.3f}")
        if noisy_accuracy is not None and "val_noisy_flat_accuracy" in last:
            print(
                f"mixer run on the noised rows: flat accuracy {last['val_noisy_flat_accuracy']:.4f}, "
                f"seq2seq accuracy {last['val_noisy_seq2seq_accuracy']:.4f}"
            )
            print(
                f"ratio mixer/baseline on the noised rows (flat): "
                f"{last['val_noisy_flat_accuracy'] / noisy_accuracy:.3f}"
            )


def noised_accuracy(run_dir, train, val, vectorizer, classifier, truth):
    """The baseline's accuracy on the run's noised validation copy (None without one)."""
    from mixer.data.inputs.noise import noised_texts, word_list

    with open(os.path.join(run_dir, "args.yaml")) as handle:
        train_args = yaml.safe_load(handle)["train"]
    edits = train_args.get("eval_noise") or 0
    if not edits or "desc_chars" in val.columns:  # context runs: the baseline reads no context
        return None, edits
    from mixer.training.validation import validation_sample

    rows = validation_sample(len(val), train_args.get("val_max_rows") or 0, train_args["seed"])
    texts = noised_texts(
        list(val["text"].iloc[rows]),
        train_args["seed"],
        edits,
        word_list(train["text"]),
        positions=rows,
    )  # the run's sample, its draws
    predicted = classifier.predict(vectorizer.transform(texts))
    return sum({p} == t for p, t in zip(predicted, truth.iloc[rows])) / len(rows), edits


if __name__ == "__main__":
    main()

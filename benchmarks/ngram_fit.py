"""Where the character n-gram head's fit goes (mixer.models.ngram.fit, step by step) on a
run's training rows, and the same SVM fitted one code at a time on 2 threads:

    python benchmarks/ngram_fit.py runs/quickstart
"""

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    import joblib
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC

    from mixer.data.inputs.noise import word_list
    from mixer.models import ngram

    train = pd.read_parquet(os.path.join(args.run_dir, "data_train.parquet"))
    key = pd.read_csv(os.path.join(args.run_dir, "key.csv"), dtype=str)
    index = {code: i for i, code in enumerate(key.iloc[:, 0])}
    classes = np.array([index[code] for code in train["code_1"]])
    start = time.perf_counter()
    texts, labels = ngram.training_texts(
        list(train["text"]), classes, args.seed, word_list(train["text"])
    )
    noised = time.perf_counter()
    features = ngram._vectorizer().fit_transform(texts)
    tfidf = time.perf_counter()
    svm = LinearSVC(C=ngram.C, random_state=0).fit(features, labels)
    fitted = time.perf_counter()
    print(
        f"{len(texts):,} rows ({len(train):,} and {ngram.NOISED_COPIES} noised copies), "
        f"{features.shape[1]:,} n-grams, {len(svm.classes_)} codes: noised copies "
        f"{noised - start:.1f} s, TF-IDF {tfidf - noised:.1f} s, LinearSVC {fitted - tfidf:.1f} s"
    )
    with joblib.parallel_backend("threading", n_jobs=2):
        start = time.perf_counter()
        each = OneVsRestClassifier(LinearSVC(C=ngram.C, random_state=0), n_jobs=2)
        each.fit(features, labels)
        seconds = time.perf_counter() - start
    coef = np.vstack([estimator.coef_ for estimator in each.estimators_])
    print(
        f"one binary SVM per code on 2 threads: {seconds:.1f} s; its weights differ from "
        f"LinearSVC's by at most {np.abs(coef - svm.coef_).max():.1e}"
    )


if __name__ == "__main__":
    main()

"""Class shares corrected by an audit (mixer.audit.shares): coverage and width of the
intervals in random audits of rows whose true codes are known.

The rows: data/toy_hisco.csv, half of it (seeded) to train a TF-IDF (character 1-4-grams)
+ linear SVM classifier, the other half the "file" whose classes are shared: real
predictions with a real error structure. The classes: HISCLASS (--level, as
evaluate.py --shares takes it: prefix:1 for HISCO's major groups).
For each audit size, `--audits` random audits (simple random samples of rows, as
predict.py --audit draws them): the share of audits whose interval holds the file's true
share, for each class (the worst class shown) and for all classes at once
(--simultaneous); the median width of the corrected interval (mixer's, precision+leak,
beside the same intersected with the audit alone and the errors+audit interval mixer used
before it: METHODS in mixer.audit.shares), of the audit's own
(Clopper-Pearson on the audit alone) and of the large-sample PPI interval (the counted share
plus the audit's mean error, +-1.96 standard errors: Angelopoulos et al. 2023's normal
interval, written here). Then a shifted source: the same file with 10 typos in each
description, which the classifier trained on clean text codes worse, so the counted
shares are off.

    python benchmarks/class_shares.py                   # 1,000 audits at each size
    python benchmarks/class_shares.py --audits 200      # quicker
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.audit import shares  # noqa: E402

SIZES = (50, 100, 200, 500, 1000)
METHODS = ("post-stratified", "precision+leak", "precision+leak+audit", "errors+audit")
OLD = "errors+audit"  # the interval mixer used before precision+leak, for comparison


def predictions(typos: int, level: str, seed: int = 0) -> tuple:
    """(true class, predicted class, code accuracy) of the file's rows at `level`."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.svm import LinearSVC

    from mixer.data.inputs.noise import noised

    frame = pd.read_csv(
        os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False
    )
    frame = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    train, rest = frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :]
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)
    model = LinearSVC(C=1.0).fit(vectorizer.fit_transform(train["occ1"]), train["hisco_1"])
    texts = rest["occ1"].tolist()
    if typos:
        texts = [noised(t, typos, key=1000 + i) for i, t in enumerate(texts)]
    predicted = model.predict(vectorizer.transform(texts))
    classify = shares.classifier(level)
    truth = classify([rest["hisco_1"].to_numpy(dtype=object)])
    guess = classify([np.asarray(predicted, dtype=object)])
    return truth, guess, float(np.mean(predicted == rest["hisco_1"].to_numpy()))


def simulate(truth, guess, audits: int, rng, label: str) -> list:
    classes = shares.class_order(list(truth) + list(guess))
    index = {c: k for k, c in enumerate(classes)}
    t = np.asarray([index[c] for c in truth])
    p = np.asarray([index[c] for c in guess])
    n_rows, k = len(t), len(classes)
    true_share = np.bincount(t, minlength=k) / n_rows
    counted = np.bincount(p, minlength=k)[None, :].astype(float)
    counted_share = counted[0] / n_rows
    out = []
    for n in SIZES:
        cover = {m: np.zeros(k) for m in METHODS}
        together = {m: 0 for m in METHODS}
        widths = {m: [] for m in METHODS}
        audit_cover, audit_width = np.zeros(k), []
        normal_cover, normal_width = np.zeros(k), []
        for _ in range(audits):
            rows = rng.choice(n_rows, size=n, replace=False)
            args = (classes, counted, np.asarray([n_rows]), p[rows], t[rows])
            rest = (np.zeros(n, dtype=np.int64), np.ones(n), False)
            for method in METHODS:
                table = shares.share_estimates(*args, *rest, method=method)
                low, high = table["low"], table["high"]
                cover[method] += (low <= true_share) & (true_share <= high)
                widths[method].append(high - low)
                both = shares.share_estimates(*args, *rest, simultaneous=True, method=method)
                together[method] += bool(
                    ((both["low"] <= true_share) & (true_share <= both["high"])).all()
                )
            a_low, a_high = table["audit_low"], table["audit_high"]
            audit_cover += (a_low <= true_share) & (true_share <= a_high)
            audit_width.append(a_high - a_low)
            d = (t[rows][:, None] == np.arange(k)) * 1.0 - (p[rows][:, None] == np.arange(k))
            centre = counted_share + d.mean(axis=0)
            half = 1.96 * d.std(axis=0, ddof=1) / np.sqrt(n)
            normal_cover += (centre - half <= true_share) & (true_share <= centre + half)
            normal_width.append(2 * half)
        audit_median = float(np.median(np.asarray(audit_width), axis=0).mean())
        normal_median = float(np.median(np.asarray(normal_width), axis=0).mean())
        old_median = float(np.median(np.asarray(widths[OLD]), axis=0).mean())
        for method in METHODS:
            median = float(np.median(np.asarray(widths[method]), axis=0).mean())
            out.append(
                {
                    "source": label,
                    "n": n,
                    "interval": method,
                    "worst class covered": (cover[method] / audits).min(),
                    "all at once": together[method] / audits,
                    "median width": median,
                    "/ audit alone": median / audit_median,
                    f"/ {OLD}": median / old_median,
                    "/ normal PPI": median / normal_median,
                }
            )
        out.append(
            {
                "source": label,
                "n": n,
                "interval": "audit alone (CP)",
                "worst class covered": (audit_cover / audits).min(),
                "median width": audit_median,
            }
        )
        out.append(
            {
                "source": label,
                "n": n,
                "interval": "normal PPI",
                "worst class covered": (normal_cover / audits).min(),
                "median width": normal_median,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=1000, help="random audits at each size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--level", default="hisclass", help="as evaluate.py --shares: hisclass, prefix:1, ..."
    )
    args = parser.parse_args()
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    rows = []
    for label, typos in (("as written", 0), ("10 typos a row", 10)):
        truth, guess, accuracy = predictions(typos, args.level, args.seed)
        counted = pd.Series(guess).value_counts(normalize=True)
        true = pd.Series(truth).value_counts(normalize=True)
        off = (counted.reindex(true.index.union(counted.index), fill_value=0) - true).abs().max()
        print(
            f"{label}: {len(truth):,} rows, code accuracy {accuracy:.3f}, {args.level} accuracy "
            f"{np.mean(truth == guess):.3f}, counted shares off by up to {off:.3f}"
        )
        rows += simulate(truth, guess, args.audits, rng, label)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep=""))
    print(
        f"{args.audits} audits at each size, seed {args.seed}, {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()

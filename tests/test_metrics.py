"""Metric sums against the prediction rules, on hand-made decoder outputs."""

import numpy as np
import torch

from mixer.data.labels.formatter import PAD, CodeFormatter
from mixer.prediction.heads import ranked_codes
from mixer.reporting.metrics import (
    MIN_TUNE_ROWS,
    MetricSums,
    Thresholds,
    decoded_blocks,
    decoded_codes,
    multi_hot_and_unknown,
)


def test_repeated_invalid_blocks_count_once_in_metrics_and_in_predictions():
    """A row decoded as [bad, bad, 64]: predict.py writes two codes, so the training
    metrics must count two predicted codes, not three."""
    f = CodeFormatter(kind="general", block_size=2, max_num_codes=3, alphabet=list("0123456789"))
    codes = np.array(["11", "64"], dtype=object)
    key_blocks = torch.from_numpy(f.encode_blocks(list(codes)))
    bad = [3 + 9, 3 + 9]  # "99": not in the key
    tokens = torch.tensor(
        [
            bad + bad + key_blocks[1].tolist(),  # bad, bad, 64
            key_blocks[0].tolist() + bad + [PAD, PAD],
        ]
    )  # 11, bad, (empty)
    block_probs = np.full((2, 3), 0.9)
    predicted, _ = ranked_codes(decoded_blocks(tokens, 3, 2), block_probs, f, top_k=3)
    assert [sorted(c for c in row if c) for row in predicted] == [["64", "99"], ["11", "99"]]

    seq_codes = decoded_codes(tokens, f)
    hot, unknown = multi_hot_and_unknown(seq_codes, {"11": 0, "64": 1}, 2, "cpu")
    assert unknown.tolist() == [1, 1] and hot.tolist() == [[0, 1], [1, 0]]
    labels = torch.tensor([[1, -1, -1], [0, -1, -1]])
    sums = MetricSums("cpu")
    rows = torch.zeros(2)
    sums.add_batch(
        row_total=rows,
        row_seq=rows,
        row_flat=rows,
        seq_logits=torch.zeros(2, 7, 13),
        targets=torch.zeros(2, 7, dtype=torch.long),
        flat_probs=torch.tensor([[0.1, 0.9], [0.9, 0.1]]),
        labels=labels,
        seq_codes=seq_codes,
        code_index={"11": 0, "64": 1},
        threshold=0.5,
        num_labels=2,
        top_k=3,
    )
    result = sums.result()
    assert result["seq2seq_precision"] == 2 / 4  # 4 predicted codes in all, 2 right
    assert result["seq2seq_recall"] == 1.0


def _tuning_sums(probs, labels, groups, n_groups):
    sums = MetricSums("cpu", tune_groups=n_groups)
    rows = torch.zeros(len(probs))
    sums.add_batch(
        row_total=rows,
        row_seq=rows,
        row_flat=rows,
        seq_logits=torch.zeros(len(probs), 5, 8),
        targets=torch.zeros(len(probs), 5, dtype=torch.long),
        flat_probs=probs,
        labels=labels,
        seq_codes=[[]] * len(probs),
        code_index={},
        threshold=0.5,
        num_labels=4,
        top_k=2,
        groups=torch.as_tensor(groups),
    )
    return sums


def test_the_tuned_threshold_is_the_one_with_the_best_f1():
    """Row A holds codes 0 and 1 (1 at probability 0.355); row B holds code 2, with a wrong
    code 3 at 0.30. Thresholds in (0.30, 0.35] predict every set exactly (F1 1.0); 0.5
    misses code 1 (F1 0.8). Among equal F1s the one nearest 0.5 is kept."""
    probs = torch.tensor([[0.9, 0.355, 0.05, 0.01], [0.02, 0.01, 0.8, 0.30]])
    labels = torch.tensor([[0, 1], [2, -1]])
    sums = _tuning_sums(probs, labels, [0, 0], 1)
    tuned, report = sums.best_thresholds(["en"], Thresholds.of(0.5))
    f1, at_half, rows = report["all"]
    assert (tuned.default, f1, rows) == (0.35, 1.0, 2) and abs(at_half - 0.8) < 1e-12
    assert tuned.table == {}  # 2 rows: too few for a threshold of its own


def test_thresholds_are_tuned_per_language_with_enough_rows():
    """Language 'a' needs a low threshold (its second code at 0.355), 'b' a high one (a
    wrong code at 0.6); 'c' has too few rows and takes the overall best."""
    a = ([[0.9, 0.355, 0.05, 0.01]], [[0, 1]])
    b = ([[0.9, 0.05, 0.6, 0.01]], [[0, -1]])
    c = ([[0.9, 0.2, 0.05, 0.01]], [[0, -1]])
    many = MIN_TUNE_ROWS
    probs = torch.tensor(a[0] * many + b[0] * many + c[0] * 3)
    labels = torch.tensor(a[1] * many + b[1] * many + c[1] * 3)
    groups = [0] * many + [1] * many + [2] * 3
    tuned, report = _tuning_sums(probs, labels, groups, 3).best_thresholds(
        ["a", "b", "c"], Thresholds.of(0.5)
    )
    assert tuned.table["a"] <= 0.35 and tuned.table["b"] > 0.6 and "c" not in tuned.table
    assert report["a"][0] == 1.0 and report["b"][0] == 1.0
    assert set(report) == {"all", "a", "b"}
    # what prediction uses: the table where it has the language, else the default
    assert list(tuned.for_languages(["a", "b", "c", "zz"])) == [
        tuned.table["a"],
        tuned.table["b"],
        tuned.default,
        tuned.default,
    ]


def test_tuning_keeps_the_table_it_started_with_and_tunes_the_default_on_the_other_languages():
    """An OccCANINE table: 'en' (enough rows) is tuned, 'da' (too few) keeps 0.24; 'zz' (enough,
    outside the table) gets its own; three small languages outside the table, together
    enough, tune the default they share."""
    en = ([[0.9, 0.355, 0.05, 0.01]], [[0, 1]])
    high = ([[0.9, 0.05, 0.6, 0.01]], [[0, -1]])  # a wrong code at 0.6: a threshold above it
    da = ([[0.9, 0.2, 0.05, 0.01]], [[0, -1]])
    many, few = MIN_TUNE_ROWS, MIN_TUNE_ROWS // 3 + 1
    probs = torch.tensor(en[0] * many + high[0] * many + da[0] * 3 + high[0] * 3 * few)
    labels = torch.tensor(en[1] * many + high[1] * many + da[1] * 3 + high[1] * 3 * few)
    groups = [0] * many + [1] * many + [2] * 3 + [3] * few + [4] * few + [5] * few
    start = Thresholds.of(0.31, {"en": 0.26, "da": 0.24, "unk": 0.31})
    tuned, report = _tuning_sums(probs, labels, groups, 6).best_thresholds(
        ["en", "zz", "da", "x1", "x2", "x3"], start
    )
    assert tuned.table["da"] == 0.24 and tuned.table["unk"] == 0.31 and tuned.table["en"] <= 0.35
    assert tuned.table["zz"] > 0.6 and tuned.default > 0.6 and "x1" not in tuned.table
    assert set(report) == {"en", "zz", "others"} and report["others"][2] == 3 * few
    # too few rows outside the table: the default stays
    tuned, report = _tuning_sums(probs[:many], labels[:many], [0] * many, 1).best_thresholds(
        ["en"], start
    )
    assert tuned.default == 0.31 and set(report) == {"en"}

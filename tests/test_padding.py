"""CANINE inputs padded as far as their longest row needs (mixer.data.inputs.padding), not to 128.

The rule is checked against the outputs at the full length on every boundary it has: rows
of every remainder modulo the downsampling rate, a row that fills the batch's length, the
128-character cut; for CANINE-s's rate and kernel (4, 4) and canine-tiny's (2, 2); and it is
shown to be tight (one character less and the outputs change). Then through the model of
both families, and through prediction: the same predictions as with every batch padded
to the full length, every head."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import FLOATS, assert_floats_close, assert_same_predictions
from mixer.data.inputs.padding import CHARACTERS, EVERY_POSITION, POOLED, InputPadding

CANINE_S_RATES = dict(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    num_hash_buckets=512,
    num_hash_functions=4,
    downsampling_rate=4,
    upsampling_kernel_size=4,
)
TINY_RATES = dict(CANINE_S_RATES, downsampling_rate=2, upsampling_kernel_size=2)
SHORT_WINDOW = dict(
    CANINE_S_RATES, local_transformer_stride=16
)  # a window shorter than the padding
MAX_LEN = 128
# Character states (and a decoder that reads them) at two lengths are compared by their
# largest difference, not by the suite's FLOATS: a state near 0 is the sum of larger terms
# and keeps their rounding, more than its own ulps (docs/occcanine.md measured up to 3.1e-6
# at width 64 and 1.2e-5 at CANINE-s's 768), while one character below the rule they differ
# by 0.76 or more.
CHARACTER_STATES_ATOL = 1e-4


def canine(settings):
    from transformers import CanineConfig, CanineModel

    torch.manual_seed(3)
    return CanineModel(CanineConfig(**settings)).eval()


def outputs(model, rows, length):
    """Pooled vectors and each row's character states, the rows padded to `length`."""
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.as_tensor(row), 1
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    return out.pooler_output, [out.last_hidden_state[i, : len(row)] for i, row in enumerate(rows)]


def gap(a, b) -> float:
    return float((a - b).abs().max())


def close(a, b) -> bool:
    """Within the suite's FLOATS (pooled vectors, the flat head's logits)."""
    return bool(torch.isclose(a, b, **FLOATS).all())


@pytest.mark.floats
@pytest.mark.parametrize(
    "settings",
    [CANINE_S_RATES, TINY_RATES, SHORT_WINDOW],
    ids=["rate4-kernel4", "rate2-kernel2", "window16"],
)
def test_the_rule_gives_the_outputs_of_the_full_length_on_its_boundaries_and_is_tight(settings):
    model = canine(settings)
    rate = settings["downsampling_rate"]
    pooled_rule = InputPadding.for_encoder(model.config, MAX_LEN, POOLED)
    chars_rule = InputPadding.for_encoder(model.config, MAX_LEN, CHARACTERS)
    generator = np.random.default_rng(0)
    # every remainder modulo the rate, short rows, rows whose characters read past a local
    # attention window of 16 (SHORT_WINDOW) and rows at the 128-character cut
    lengths = (
        list(range(3, 3 + 3 * rate))
        + list(range(15, 19))
        + list(range(29, 35))
        + list(range(MAX_LEN - 2 * rate, MAX_LEN + 1))
    )
    for n in lengths:
        row = [0xE000, *generator.integers(32, 5000, n - 2), 0xE001]
        full_pooled, [full_chars] = outputs(model, [row], MAX_LEN)
        pooled_at = pooled_rule.length(n)
        chars_at = chars_rule.length(n)
        assert n <= pooled_at <= chars_at <= MAX_LEN
        assert close(outputs(model, [row], pooled_at)[0], full_pooled), n
        assert gap(outputs(model, [row], chars_at)[1][0], full_chars) < CHARACTER_STATES_ATOL, n
        if chars_at < MAX_LEN:  # tight: one character less changes the characters' states
            assert (
                gap(outputs(model, [row], chars_at - 1)[1][0], full_chars) > CHARACTER_STATES_ATOL
            ), n
        if pooled_at > max(n, rate):  # ... and the pooled vector
            assert gap(outputs(model, [row], pooled_at - 1)[0], full_pooled) > 1e-5, n
    # a batch padded to its longest row's need gives every row what it gets alone at 128
    rows = [[0xE000, *generator.integers(32, 5000, n - 2), 0xE001] for n in (5, 17, 30, 31, 9)]
    batch_pooled, batch_chars = outputs(model, rows, chars_rule.length(max(map(len, rows))))
    for i, row in enumerate(rows):
        alone_pooled, [alone_chars] = outputs(model, [row], MAX_LEN)
        assert (
            close(batch_pooled[i], alone_pooled[0])
            and gap(batch_chars[i], alone_chars) < CHARACTER_STATES_ATOL
        )


@pytest.mark.floats
def test_what_each_family_reads_sets_the_padding():
    from mixer.data.inputs.dataset import Collator
    from mixer.models.model import HeadsConfig, MixerModel

    encoder = canine(CANINE_S_RATES)
    heads = HeadsConfig(
        num_labels=4,
        vocab_size=8,
        target_len=6,
        decoder_dim=32,
        decoder_heads=2,
        decoder_layers=1,
        dropout=0.0,
    )
    import dataclasses

    mixer_model = MixerModel(encoder, heads).eval()
    occ_model = MixerModel(
        canine(CANINE_S_RATES), dataclasses.replace(heads, family="occcanine")
    ).eval()
    # new heads of OccCANINE's form on its encoder that mask padding (--new-heads fast)
    fast_model = MixerModel(
        canine(CANINE_S_RATES),
        dataclasses.replace(heads, family="occcanine", decoder_reads_padding=False),
    ).eval()
    assert (
        mixer_model.padding_reads(decoder=True)
        == mixer_model.padding_reads(decoder=False)
        == CHARACTERS
    )
    assert (occ_model.padding_reads(decoder=False), occ_model.padding_reads(decoder=True)) == (
        POOLED,
        EVERY_POSITION,
    )
    assert (fast_model.padding_reads(decoder=False), fast_model.padding_reads(decoder=True)) == (
        POOLED,
        CHARACTERS,
    )
    occ_training = InputPadding.for_encoder(encoder.config, MAX_LEN, EVERY_POSITION)
    assert occ_training.fixed and occ_training.length(7) == MAX_LEN
    # word-piece encoders: the longest row (rounded up on GPUs)
    from transformers import BertConfig

    assert (
        InputPadding.for_encoder(BertConfig(), MAX_LEN, EVERY_POSITION, multiple=8).length(13) == 16
    )
    # a CANINE training batch computes about the characters its rows have
    items = [(np.arange(1, n + 1), np.array([0, -1]), 2, 1.0, i) for i, n in enumerate((9, 23))]
    mixer_batch = Collator(
        0,
        np.arange(6).reshape(3, 2),
        padding=InputPadding.for_encoder(encoder.config, MAX_LEN, CHARACTERS),
    )(items)
    occ_batch = Collator(0, np.arange(6).reshape(3, 2), padding=occ_training, groups=2).grouped(
        items
    )
    assert mixer_batch.input_ids.shape[1] == 32 and [b.input_ids.shape[1] for b in occ_batch] == [
        MAX_LEN
    ]

    # through the model: mixer's heads at the rule equal the full length, and new heads that
    # mask padding; OccCANINE's flat head too, but its own decoder reads the padding as well:
    # only the full length is exact for it
    generator = np.random.default_rng(1)
    rows = [[0xE000, *generator.integers(32, 5000, n - 2), 0xE001] for n in (6, 13, 27)]

    def heads_at(model, length):
        ids = torch.zeros(len(rows), length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = torch.as_tensor(row), 1
        decoder_input = torch.tensor([[1, 3, 4, 5, 6, 7]] * len(rows))
        with torch.no_grad():
            return model(ids, mask, decoder_input)

    longest = max(map(len, rows))
    for model, reads, decoder_exact in (
        (mixer_model, CHARACTERS, True),
        (occ_model, POOLED, False),
        (fast_model, CHARACTERS, True),
    ):
        flat_full, seq_full = heads_at(model, MAX_LEN)
        flat, seq = heads_at(
            model, InputPadding.for_encoder(encoder.config, MAX_LEN, reads).length(longest)
        )
        assert close(flat, flat_full)
        assert (gap(seq, seq_full) < CHARACTER_STATES_ATOL) == decoder_exact


@pytest.fixture(scope="module")
def canine_run(tmp_path_factory, small_csv):
    """A run of mixer's family with the canine-tiny encoder (two steps: the weights are
    what they are, only the padding is compared)."""
    from conftest import TINY, run_program

    run = tmp_path_factory.mktemp("padding") / "run"
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        run,
        "--max-steps",
        "2",
        "--language",
        "en",
        *TINY,
    )
    return str(run)


@pytest.mark.floats
def test_predictions_at_the_rule_are_those_at_the_full_length_in_every_head(
    canine_run, toy_frame, monkeypatch
):
    import mixer
    from mixer.prediction.predict import Predictor

    texts = list(toy_frame["occ1"].iloc[:150]) + ["x" * 200, "a", "Bäcker und Müller  "]
    model = mixer.load(canine_run, device="cpu")
    heads = {
        head: model.predict(texts, lang="en", head=head) for head in ("flat", "seq2seq", "full")
    }
    embeddings = model.embeddings(texts, lang="en")
    widths = []
    original = Predictor.padding

    def full_length(self, states):
        padding = original(self, states)
        widths.append(padding.length(3))
        return dataclasses.replace(padding, reads=EVERY_POSITION)

    assert original(model._predictor, True).length(3) < model._predictor.recipe.max_len
    monkeypatch.setattr(Predictor, "padding", full_length)
    for head, ours in heads.items():
        assert_same_predictions(ours, model.predict(texts, lang="en", head=head))
    assert_floats_close(embeddings, model.embeddings(texts, lang="en"))
    assert widths  # the full length was used


def test_the_token_cache_holds_each_row_at_its_own_length(canine_run):
    import glob
    import os

    from mixer.data.inputs import token_cache
    from mixer.data.prepared.files import load_prepared

    prepared = load_prepared(canine_run)
    [directory] = glob.glob(os.path.join(canine_run, "cache", "tokens_train_*"))
    cache = token_cache.load(directory)
    assert cache is not None and len(cache) == len(prepared.train)
    # [CLS] en [SEP] text [SEP], each row as long as it is (cut at --max-len 48), never padded
    expected = np.minimum(prepared.train["text"].str.len().to_numpy() + len("en") + 3, 48)
    assert (cache.lengths() == expected).all() and expected.min() < 48
    assert os.path.getsize(os.path.join(directory, "ids.bin")) == 4 * int(expected.sum())


# ------------------------------------------------------------------ int8 on CPUs
@pytest.mark.floats
def test_int8_quantizes_the_encoder_s_linear_layers_and_stays_close_to_fp32(canine_run, toy_frame):
    import mixer
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    texts = list(toy_frame["occ1"].iloc[:200])
    fp32 = mixer.load(canine_run, device="cpu")
    int8 = mixer.load(canine_run, device="cpu", quantize="int8")
    linear = [
        name
        for name, m in fp32._predictor.model.named_modules()
        if type(m) is torch.nn.Linear and name.startswith("encoder.")
    ]
    quantized = [
        name for name, m in int8._predictor.model.named_modules() if isinstance(m, Int8Linear)
    ]
    assert (
        quantized == linear and len(linear) > 10
    )  # every linear layer of the encoder, the heads in fp32
    assert not any(isinstance(m, Int8Linear) for m in fp32._predictor.model.modules())
    for head in ("flat", "seq2seq"):
        a, b = fp32.predict(texts, lang="en", head=head), int8.predict(texts, lang="en", head=head)
        gap_1 = np.nanmax(np.abs(a["prob_1"].astype(float) - b["prob_1"].astype(float)))
        assert 0 < gap_1 < 0.01, head  # approximate, and close (agreement on trained models:
        # benchmarks/int8_agreement.py; these weights have near ties)
        # each row's int8 encoding is its own; the heads run on the batch in fp32, so other
        # batches and another order give the same codes and probabilities within float rounding
        alone = (
            int8.predict(texts[::-1], lang="en", head=head, batch_size=1)
            .iloc[::-1]
            .reset_index(drop=True)
        )
        assert_same_predictions(alone, b)
    np.testing.assert_array_equal(
        int8.embeddings(texts, lang="en"),
        int8.embeddings(texts[::-1], lang="en", batch_size=7)[::-1],
    )


def test_predict_py_says_int8_is_approximate_and_refuses_what_it_cannot_run(
    canine_run, small_csv, tmp_path
):
    from conftest import run_program

    from mixer.core.errors import UserError
    from mixer.models.quantize import check_quantize

    proc = run_program(
        "predict.py",
        "--checkpoint",
        canine_run,
        "--input",
        small_csv,
        "--output",
        tmp_path / "int8.csv",
        "--quantize",
        "int8",
    )
    assert "--quantize int8" in proc.stderr and "approximate" in proc.stderr
    assert len(pd.read_csv(tmp_path / "int8.csv")) == 121
    bad = run_program(
        "predict.py",
        "--checkpoint",
        canine_run,
        "--input",
        small_csv,
        "--output",
        tmp_path / "bf16.csv",
        "--quantize",
        "int8",
        "--precision",
        "bf16",
        check=False,
    )
    assert bad.returncode == 2 and "leave --precision at fp32" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "bf16.csv").exists()
    with pytest.raises(UserError, match="runs on CPUs"):
        check_quantize("int8", "cuda:0", "fp32")

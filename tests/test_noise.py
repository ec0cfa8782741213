"""Training noise: the edits, and that a row's noise is a function of (seed, epoch,
position) alone, so N processes, any worker count and a resume draw the same."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from mixer.data.inputs import noise
from mixer.data.inputs.dataset import RowDataset, StepSampler
from mixer.data.inputs.noise import KEYBOARD, NoiseConfig, draw, noised, noised_texts, word_list
from mixer.data.inputs.token_cache import TokenCache
from mixer.data.inputs.tokens import CanineIds, InputRecipe
from mixer.data.inputs.training_inputs import RowInputs, TextStore, build_text_store, language_codes


def test_each_edit_does_what_it_says():
    rng = random.Random(3)
    text = "agricultural labourer"
    assert len(noise._delete(text, rng, ())) == len(text) - 1
    assert len(noise._insert(text, rng, ())) == len(text) + 1
    substituted = noise._substitute(text, rng, ())
    assert len(substituted) == len(text) and sum(a != b for a, b in zip(text, substituted)) <= 1
    swapped = noise._swap("ab", rng, ())
    assert swapped == "ba"
    assert noise._word_swap("wine merchant", rng, ()) == "merchant wine"
    typed = noise._keyboard("a", rng, ())
    assert typed in KEYBOARD["a"]
    assert noise._keyboard("A", rng, ()) in KEYBOARD["a"].upper()
    padded = noise._pad("smith", rng, ())
    assert " smith " in padded and len(padded) >= len("smith") + 3
    assert noise._word("farmer", rng, ["fisher"]) in ("fisher farmer", "farmer fisher")
    for edit in noise.EDITS.values():  # nothing to edit: no error
        edit("", rng, ["x"])


def test_noise_is_a_function_of_seed_epoch_and_position_only():
    config = NoiseConfig(0.3, 3, 0.25)
    positions = np.arange(1000)
    langs = np.full(1000, "en", dtype=object)
    whole = draw(config, 42, 2, positions, langs)
    # any subset, in any order (a rank's share, a worker's batch), draws the same per position
    picked = np.random.default_rng(0).permutation(1000)[:300]
    part = draw(config, 42, 2, picked, langs[picked])
    assert (part.noised == whole.noised[picked]).all() and (part.keys == whole.keys[picked]).all()
    assert (part.unknown == whole.unknown[picked]).all()
    # about the asked shares, and another epoch or seed draws otherwise
    assert 0.25 < whole.noised.mean() < 0.35 and 0.2 < whole.unknown.mean() < 0.3
    assert (draw(config, 42, 3, positions, langs).keys != whole.keys).all()
    assert (draw(config, 43, 2, positions, langs).keys != whole.keys).all()
    # rows already of unknown language stay so
    assert not draw(config, 42, 2, positions, np.full(1000, "unk", dtype=object)).unknown.any()
    texts = ["agricultural labourer"] * 5
    assert noised_texts(texts, 1, 2) == noised_texts(texts, 1, 2) != texts


def test_the_sampler_gives_each_row_its_epoch_and_position_whatever_the_layout():
    """The draws of a step are the same whether one process or two ranks take it."""

    def draws(samplers, epoch):
        out = set()
        for s in samplers:
            s.set_epoch(epoch)
            for batch in s:
                out |= {(row, e, pos) for row, _, weight, e, pos in batch if weight}
        return out

    one = [StepSampler(50, 8, 1, 0, 1, seed=3)]
    two = [StepSampler(50, 4, 2, r, 1, seed=3) for r in range(2)]
    accumulated = [StepSampler(50, 2, 2, r, 2, seed=3) for r in range(2)]
    reference = draws(one, 1)
    assert reference == draws(two, 1) == draws(accumulated, 1)
    order = one[0].permutation()
    assert all(order[pos] == row for row, _, pos in reference)


@pytest.fixture()
def store(tmp_path):
    frame = pd.DataFrame(
        {
            "text": ["farmer", "wine merchant", "smith", "labourer"],
            "lang": ["en", "en", "unk", "en"],
            "code_1": ["1", "2", "3", "4"],
        }
    )
    frame.to_parquet(tmp_path / "data_train.parquet", row_group_size=3)  # a store of 2 batches
    path = str(tmp_path / "texts.arrow")
    build_text_store(str(tmp_path), "train", path)
    return frame, TextStore(path)


def test_clean_rows_keep_the_cache_ids_and_noised_rows_are_tokenised_as_their_text(store):
    frame, texts = store
    ids = CanineIds(InputRecipe(max_len=32))
    flat, lengths = ids.encode(frame["text"].to_numpy(object), frame["lang"].to_numpy(object))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    cache = TokenCache(flat, offsets)
    codes, names = language_codes(frame["lang"])
    config = NoiseConfig(0.5, 2, 0.5)
    inputs = RowInputs(cache, ids, texts, codes, names, config, seed=9)
    assert texts.words == ["farmer", "labourer", "merchant", "smith", "wine"]
    rows, positions = np.array([0, 1, 2, 3] * 10), np.arange(40)
    got = inputs.ids(rows, 4, positions)
    plan = draw(config, 9, 4, positions, frame["lang"].to_numpy(object)[rows])
    changed = 0
    for k, row in enumerate(rows):
        text, lang = frame["text"][row], frame["lang"][row]
        if plan.noised[k]:
            text = noised(text, 2, plan.keys[k], texts.words)
        if plan.unknown[k]:
            lang = "unk"
        expected, _ = ids.encode(np.array([text], object), np.array([lang], object))
        assert got[k].tolist() == expected.tolist()
        if not (plan.noised[k] or plan.unknown[k]):
            assert got[k].tolist() == cache.row(row).tolist()
        changed += got[k].tolist() != cache.row(row).tolist()
    assert changed > 5
    # the dataset hands a batch to the inputs whole, with each row's draw
    dataset = RowDataset(inputs, np.zeros((4, 1), dtype=np.int64))
    items = dataset.__getitems__([(int(r), 40, 1.0, 4, int(p)) for r, p in zip(rows, positions)])
    assert [item[0].tolist() for item in items] == [g.tolist() for g in got]


def test_word_list_is_sorted_and_distinct():
    assert word_list(["b a", "a  c", ""]) == ["a", "b", "c"]


def test_the_noised_validation_copy_is_the_baseline_s_text(store):
    """--eval-noise: every validation row with its edits at the fixed evaluation draw, the
    same texts benchmarks/baseline_tfidf_svm.py scores (mixer.data.inputs.noise.noised_texts)."""
    frame, texts = store
    ids = CanineIds(InputRecipe(max_len=64))
    flat, lengths = ids.encode(frame["text"].to_numpy(object), frame["lang"].to_numpy(object))
    cache = TokenCache(flat, np.concatenate([[0], np.cumsum(lengths)]))
    codes, names = language_codes(frame["lang"])
    inputs = RowInputs(
        cache, ids, texts, codes, names, NoiseConfig(1.0, 2, 0.0), seed=5, every_row=True
    )
    dataset = RowDataset(inputs, np.zeros((4, 1), dtype=np.int64))
    got = [item[0].tolist() for item in dataset.__getitems__([0, 1, 2, 3])]  # as evaluation asks
    expected_texts = noised_texts(list(frame["text"]), 5, 2, word_list(frame["text"]))
    expected, lengths = ids.encode(
        np.asarray(expected_texts, object), frame["lang"].to_numpy(object)
    )
    starts = np.concatenate([[0], np.cumsum(lengths)])
    assert got == [expected[starts[i] : starts[i + 1]].tolist() for i in range(4)]
    assert expected_texts != list(frame["text"])
    # the training epochs' draws are other draws
    assert got != [
        g.tolist()
        for g in RowInputs(cache, ids, texts, codes, names, NoiseConfig(1.0, 2, 0.0), seed=5).ids(
            np.arange(4), 0, np.arange(4)
        )
    ]


def test_the_text_store_reads_rows_across_its_batches(store):
    frame, texts = store
    assert texts.table.column("text").num_chunks == 2
    order = np.array([3, 0, 2, 1, 3])
    assert texts.rows(order) == ([frame["text"][i] for i in order], [""] * 5)

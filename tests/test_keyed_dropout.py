"""Keyed dropout (mixer.models.keyed_dropout): each mask a function of (seed, the row's draw,
the module, the element), so a row gets its masks whatever batch, padding or process carries
it; and the masks are good dropout. The layouts themselves (processes, nodes, accumulation,
length groups, a resume in another layout) are compared with the default recipe in
test_distributed.py, test_new_heads.py and test_occcanine.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import FLOATS
from mixer.models import keyed_dropout as kd
from mixer.models.model import HeadsConfig, MixerModel, set_dropout

P = 0.1


def mask(
    seed=5, epoch=0, positions=range(64), module="layer.dropout", shape=(40, 32), p=P
) -> np.ndarray:
    keys = kd.row_keys(seed, [epoch] * len(positions), list(positions))
    return kd.keep_mask(keys, kd.module_id(module), shape, p).numpy()


def binomial_ok(kept: int, n: int, p_keep: float) -> bool:
    return abs(kept - n * p_keep) <= 5 * np.sqrt(n * p_keep * (1 - p_keep))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_the_share_kept_is_one_minus_p_within_binomial_error(p):
    keep = mask(p=p, shape=(50, 64))
    assert binomial_ok(int(keep.sum()), keep.size, 1 - p)
    # and so for every row, position and channel alone
    for axis in (0, 1, 2):
        shares = keep.mean(axis=tuple(a for a in range(3) if a != axis))
        n = keep.size // keep.shape[axis]
        assert np.all(np.abs(shares - (1 - p)) <= 5 * np.sqrt(p * (1 - p) / n))


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel().astype(float), b.ravel().astype(float))[0, 1])


def test_no_correlation_across_rows_positions_channels_steps_seeds_and_modules():
    keep = mask(shape=(40, 32))  # (64 rows, 40 positions, 32 channels)
    n = keep[:-1].size
    bound = 5 / np.sqrt(n)
    assert abs(correlation(keep[:-1], keep[1:])) < bound  # neighbouring rows (draws)
    assert abs(correlation(keep[:, :-1], keep[:, 1:])) < bound  # neighbouring positions
    assert abs(correlation(keep[:, :, :-1], keep[:, :, 1:])) < bound  # neighbouring channels
    for other in (
        mask(epoch=1),
        mask(seed=6),
        mask(module="layer.other"),
    ):  # next epoch, seed, module
        assert abs(correlation(keep, other)) < 5 / np.sqrt(keep.size)


def test_masks_differ_across_rows_and_across_draws_of_a_row():
    """What a weak hash (one that drops the row or the draw from the key) would fail: two
    rows, or one row in two epochs, agree where independent masks would, p^2 + (1-p)^2."""
    keep = mask(positions=[7, 8], shape=(200, 64))
    again = mask(epoch=3, positions=[7, 8], shape=(200, 64))
    expected = P**2 + (1 - P) ** 2
    n = keep[0].size
    for a, b in ((keep[0], keep[1]), (keep[0], again[0]), (keep[1], again[1])):
        agree = int((a == b).sum())
        assert binomial_ok(agree, n, expected), agree / n
    assert np.array_equal(
        keep, mask(positions=[7, 8], shape=(200, 64))
    )  # a function: the same again


def test_a_row_keeps_its_mask_whatever_its_padding_and_the_batch():
    """Coordinates, not flat offsets: a longer padded length or another batch changes nothing
    at a row's real positions."""
    short = mask(positions=[3, 9], shape=(12, 16))
    long = mask(positions=[9, 3, 4], shape=(30, 16))
    assert np.array_equal(short[0], long[1, :12]) and np.array_equal(short[1], long[0, :12])
    attention = mask(positions=[3], shape=(2, 12, 12))  # (heads, queries, keys)
    padded = mask(positions=[3], shape=(2, 20, 20))
    assert np.array_equal(attention[0], padded[0, :, :12, :12])


def tiny_model(encoder: str, family: str = "mixer", attention_only: bool = False) -> MixerModel:
    torch.manual_seed(0)
    if encoder == "bert":
        from transformers import BertConfig, BertModel

        model = BertModel(
            BertConfig(
                vocab_size=100,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                hidden_dropout_prob=P,
                attention_probs_dropout_prob=P,
            )
        )
    else:
        from mixer.models.encoders import build_encoder

        model = build_encoder("canine-tiny", P).model
    heads = HeadsConfig(
        num_labels=7,
        vocab_size=12,
        target_len=6,
        decoder_dim=32,
        decoder_layers=1,
        decoder_heads=2,
        dropout=P,
        family=family,
    )
    if family == "occcanine":
        heads.decoder_reads_padding = False
    mixer = MixerModel(model, heads)
    if attention_only:  # the encoder's attention probabilities alone are dropped
        for name, module in mixer.named_modules():
            if isinstance(module, torch.nn.Dropout) and not name.endswith("attention.self.dropout"):
                module.p = 0.0
        set_dropout(mixer.decoder, 0.0)
    return mixer


LENGTHS = [20, 12, 9, 16]


def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 100, (4, 20), generator=generator)
    attention = torch.ones(4, 20, dtype=torch.long)
    for row, length in enumerate(LENGTHS):
        attention[row, length:] = 0
        ids[row, length:] = 0
    return ids, attention, torch.randint(0, 12, (4, 6), generator=generator)


def forward(model, keys, ids, attention, decoder, rows=slice(None), length=None):
    length = length or int(attention[rows].sum(1).max())
    with kd.rows(keys[rows], model):
        return model(ids[rows, :length], attention[rows, :length], decoder[rows])


def gradients(model) -> dict:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.floats
@pytest.mark.parametrize(
    "encoder,family,padding",
    [
        ("bert", "mixer", "own"),  # a word-piece encoder: each part padded to its own longest row
        ("canine", "mixer", "whole"),  # CANINE reads its padding: its batches keep one length
        ("canine", "occcanine", "whole"),  # OccCANINE's layout: new heads on its encoder
    ],
)
def test_a_sub_batch_gets_exactly_its_rows_masks(encoder, family, padding):
    """4 rows at once, and the same rows as 2 + 2 (accumulated, as gradient accumulation, length
    groups and other processes cut a batch): the same outputs and the same gradient sum."""
    model = tiny_model(encoder, family)
    assert kd.install(model) > 0
    model.train()
    ids, attention, decoder = batch()
    keys = kd.row_keys(5, [0, 0, 1, 1], [3, 8, 1, 40])
    whole_length = None if padding == "own" else 20
    flat, seq = forward(model, keys, ids, attention, decoder, length=whole_length)
    (flat.sum() + seq.sum()).backward()
    whole = gradients(model)
    model.zero_grad()
    parts = [
        forward(model, keys, ids, attention, decoder, rows, whole_length)
        for rows in (slice(0, 2), slice(2, 4))
    ]
    for part in parts:
        (part[0].sum() + part[1].sum()).backward()
    torch.testing.assert_close(torch.cat([p[0] for p in parts]), flat, **FLOATS)
    torch.testing.assert_close(torch.cat([p[1] for p in parts]), seq, **FLOATS)
    split = gradients(model)
    assert split.keys() == whole.keys()
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], rtol=1e-5, atol=1e-6, msg=name)
    # dropout is on, keyed by the row: another draw of row 0 alone changes row 0 alone
    other = kd.row_keys(5, [0, 0, 1, 1], [4, 8, 1, 40])
    changed, _ = forward(model, other, ids, attention, decoder, length=whole_length)
    moved = (changed - flat).abs().amax(1)
    assert moved[0] > 1e-3 and torch.all(moved[1:] == 0)


def test_attention_probabilities_are_keyed_in_a_word_piece_encoder():
    """Only attention-probability dropout on (transformers computes it with its own stream
    otherwise): keyed, and none of torch's random stream is drawn."""
    model = tiny_model("bert", attention_only=True)
    kd.install(model)
    model.train()
    ids, attention, decoder = batch()
    keys = kd.row_keys(5, [0] * 4, [3, 8, 1, 40])
    torch.manual_seed(1)
    state = torch.get_rng_state()
    flat, _ = forward(model, keys, ids, attention, decoder)
    assert torch.equal(torch.get_rng_state(), state)  # no draw from the stream
    assert model.encoder.config._attn_implementation == "sdpa"  # switched back after the pass
    torch.manual_seed(2)
    again, _ = forward(model, keys, ids, attention, decoder)
    assert torch.equal(again, flat)
    changed, _ = forward(model, kd.row_keys(5, [0] * 4, [4, 8, 1, 40]), ids, attention, decoder)
    assert (changed - flat)[0].abs().max() > 1e-4 and torch.equal(changed[1:], flat[1:])
    model.eval()
    with torch.no_grad():
        plain = model(ids, attention, decoder)[0]
    assert (plain - flat)[0].abs().max() > 1e-4  # the training pass did drop


@pytest.mark.parametrize("encoder", ["bert", "canine"])
def test_evaluation_is_untouched(encoder):
    """In evaluation a keyed model computes what the model with nn.Dropout computes, exactly."""
    ids, attention, decoder = batch()
    plain, keyed = tiny_model(encoder).eval(), tiny_model(encoder).eval()
    kd.install(keyed)
    keys = kd.row_keys(5, [0] * 4, [3, 8, 1, 40])
    with torch.no_grad():
        expected = plain(ids, attention, decoder)
        with kd.rows(keys, keyed):
            got = keyed(ids, attention, decoder)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert plain.state_dict().keys() == keyed.state_dict().keys()  # no new weights or buffers


def test_the_training_batches_carry_each_rows_draw():
    """The sampler's (epoch, position) reach the batch: the key of a row's masks."""
    from mixer.data.inputs.dataset import Collator, StepSampler

    sampler = StepSampler(10, 2, 1, 0, 1, seed=3)
    sampler.set_epoch(1)
    items = next(iter(sampler))

    class Inputs:
        def ids(self, rows, epoch, positions):
            return [np.arange(3 + r % 4) for r in rows]

    from mixer.data.inputs.dataset import RowDataset

    dataset = RowDataset(Inputs(), np.zeros((10, 1), dtype=np.int64))
    got = Collator(0, np.zeros((1, 2), dtype=np.int64))(dataset.__getitems__(items))
    assert got.draws.tolist() == [[1, item[4]] for item in items]


@pytest.mark.floats
@pytest.mark.parametrize("family", ["mixer", "occcanine"])
def test_the_keyed_decoder_is_nn_transformer_decoders_wiring(family):
    """The decoder's training pass with keyed attention dropout computes what
    nn.TransformerDecoder computes, but for the masks (compared without dropout)."""
    model = tiny_model("canine", family).eval()
    ids, attention, decoder = batch()
    with torch.no_grad():
        states, _ = model.encode(ids, attention)
        expected = model.decoder(decoder, states, attention == 0)
        got = model.decoder.keyed_forward(decoder, states, attention == 0)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)

"""OccCANINE's model as documented (../shared/OCCCANINE.md), at toy size: the reference
tests/test_occcanine.py predicts against, and the HISCO model the `hisco_model` fixture
(conftest.py) saves in OccCANINE's layouts for every test file that reads one. Not a test
file: test files import it, and it imports none of them."""

from __future__ import annotations

import json
import math

import torch
from safetensors.torch import save_file
from torch import nn

SMALL_CANINE = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    num_hash_buckets=512,
    num_hash_functions=4,
    downsampling_rate=4,
    upsampling_kernel_size=4,
)
TEXTS = [
    "farmer",
    "Agricultural Labourer",
    "wine and spirit merchant",
    "Bäcker und Müller",
    "  fisherman  ",
    "smed, åbenrå",
    "engineer and fireman",
    "x" * 200,
    "coal miner's wife",
    "FARMER & WIFE",
    "servant",
    "",
]


class Reference(nn.Module):
    """OccCANINE's mixer model as documented: names, shapes, sequence-first decoder."""

    def __init__(self, codes: int, vocab: int):
        from transformers import CanineConfig, CanineModel

        super().__init__()
        self.encoder = CanineModel(CanineConfig(**SMALL_CANINE))
        hidden = SMALL_CANINE["hidden_size"]
        self.linear_decoder = nn.Linear(hidden, codes)
        self.decoder = nn.Module()
        self.decoder.token_emb = nn.Module()
        self.decoder.token_emb.embedding = nn.Embedding(vocab, hidden)
        self.decoder.positional_encoding = nn.Module()
        den = torch.exp(-torch.arange(0, hidden, 2) * math.log(10000) / hidden)
        pos = torch.arange(0, 128).reshape(128, 1)
        table = torch.zeros(128, hidden)
        table[:, 0::2], table[:, 1::2] = torch.sin(pos * den), torch.cos(pos * den)
        self.decoder.positional_encoding.register_buffer("pos_embedding", table.unsqueeze(1))
        self.decoder.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(hidden, 8, hidden, 0.0), 3
        )
        self.decoder.head = nn.Linear(hidden, vocab)

    def encode(self, strings):
        from transformers import CanineTokenizer

        batch = CanineTokenizer()(
            strings, padding="max_length", max_length=128, truncation=True, return_tensors="pt"
        )
        out = self.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return out.last_hidden_state, out.pooler_output

    def decode(
        self, memory, tokens
    ):  # memory (rows, M, d), tokens (rows, T) -> logits (rows, T, V)
        hidden = memory.size(-1)
        x = self.decoder.token_emb.embedding(tokens) * math.sqrt(hidden)
        x = x.transpose(0, 1) + self.decoder.positional_encoding.pos_embedding[: tokens.size(1)]
        causal = torch.triu(torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool), 1)
        out = self.decoder.decoder(x, memory.transpose(0, 1), tgt_mask=causal)
        return self.decoder.head(out).transpose(0, 1)


def save_hisco_model(base) -> dict:
    """A HISCO model in the hub layout (base/hub) and as a training checkpoint
    (base/last.bin), and its reference: the `hisco_model` fixture's value."""
    from mixer.data.labels.normalise import hisco_key

    torch.manual_seed(11)
    key = list(hisco_key()["code"])
    model = Reference(len(key), 19).eval()
    with torch.no_grad():  # decisive heads, so that real codes come out
        model.decoder.head.weight.mul_(4)
        model.decoder.head.bias[8:18] += 2.5
        model.decoder.head.bias[1] += 1.0
        model.linear_decoder.weight.mul_(6)
    hub = base / "hub"
    hub.mkdir()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, hub / "model.safetensors")
    (hub / "config.json").write_text(
        json.dumps(
            {
                "model_domain": "Multilingual_CANINE",
                "model_type": "seq2seq_mixer",
                "n_classes": 1918,
                "num_classes_flat": 1919,
                "num_classes": [18] * 27,
                "dropout_rate": 0,
            }
        )
    )
    torch.save({"model": state, "step": 0}, base / "last.bin")
    return {
        "model": model,
        "key": key,
        "hub": str(hub),
        "bin": str(base / "last.bin"),
        "base": base,
    }

"""The mixer model: an encoder with a flat head and a block seq2seq decoder.

The flat head is a linear layer over the mean-pooled encoder states, one
logit per code in the key (multi-label, sigmoid). The decoder writes codes as
max_num_codes blocks of block_size tokens, then EOS, attending to the encoder
states. Saving and loading go through `unwrap_model` so that files never hold
DDP's `module.` or torch.compile's `_orig_mod.` prefixes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from mixer.formatter import BOS


@dataclass
class HeadsConfig:
    num_labels: int
    vocab_size: int  # decoder tokens
    target_len: int  # decoder labels per row (blocks + EOS)
    decoder_dim: int = 256
    decoder_layers: int = 2
    decoder_heads: int = 4
    dropout: float = 0.1


class BlockDecoder(nn.Module):
    """A small causal transformer decoder over code tokens."""

    def __init__(self, cfg: HeadsConfig, memory_dim: int):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.decoder_dim)
        self.position = nn.Embedding(cfg.target_len + 1, cfg.decoder_dim)
        self.memory_proj = nn.Linear(memory_dim, cfg.decoder_dim)
        layer = nn.TransformerDecoderLayer(cfg.decoder_dim, cfg.decoder_heads, 4 * cfg.decoder_dim,
                                           cfg.dropout, batch_first=True, norm_first=True)
        self.layers = nn.TransformerDecoder(layer, cfg.decoder_layers)
        self.norm = nn.LayerNorm(cfg.decoder_dim)
        self.out = nn.Linear(cfg.decoder_dim, cfg.vocab_size)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor):
        length = tokens.size(1)
        positions = torch.arange(length, device=tokens.device)
        hidden = self.embed(tokens) + self.position(positions)
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device,
                                                                dtype=hidden.dtype)
        hidden = self.layers(hidden, self.memory_proj(memory), tgt_mask=causal, tgt_is_causal=True,
                             memory_key_padding_mask=memory_pad)
        return self.out(self.norm(hidden))


class MixerModel(nn.Module):
    def __init__(self, encoder: nn.Module, cfg: HeadsConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = encoder
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None  # we pool ourselves; an unused pooler would upset DDP
        hidden = encoder.config.hidden_size
        self.flat_dropout = nn.Dropout(cfg.dropout)
        self.flat_head = nn.Linear(hidden, cfg.num_labels)
        # Start at the prior of "one code in num_labels": without it the first
        # hundreds of steps only push every logit down.
        nn.init.constant_(self.flat_head.bias, -math.log(max(cfg.num_labels - 1, 1)))
        self.decoder = BlockDecoder(cfg, hidden)
        set_dropout(self, cfg.dropout)

    def encode(self, input_ids, attention_mask):
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return states, pooled

    def forward(self, input_ids, attention_mask, decoder_input):
        states, pooled = self.encode(input_ids, attention_mask)
        flat_logits = self.flat_head(self.flat_dropout(pooled))
        seq_logits = self.decoder(decoder_input, states, attention_mask == 0)
        return flat_logits, seq_logits

    @torch.no_grad()
    def generate(self, states, attention_mask, steps: int):
        """Greedy decoding: (token ids, their probabilities), each (rows, steps)."""
        tokens = torch.full((states.size(0), 1), BOS, dtype=torch.long, device=states.device)
        probs = []
        for _ in range(steps):
            logits = self.decoder(tokens, states, attention_mask == 0)[:, -1].float()
            p, nxt = logits.softmax(-1).max(-1)
            probs.append(p)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
        return tokens[:, 1:], torch.stack(probs, dim=1)


def set_dropout(module: nn.Module, p: float) -> None:
    """Every dropout in the model, encoder included, gets probability p."""
    for sub in module.modules():
        if isinstance(sub, nn.Dropout):
            sub.p = p
        if isinstance(sub, nn.MultiheadAttention):
            sub.dropout = p


def unwrap_model(model: nn.Module) -> nn.Module:
    """Strip DDP (.module) and torch.compile (._orig_mod) wrappers, however nested."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


# ------------------------------------------------------------------ files
MODEL_FILE, CONFIG_FILE = "model.safetensors", "config.json"


def save_model(model: nn.Module, run_dir: str, extra: dict, filename: str = MODEL_FILE) -> None:
    """model.safetensors (+ config.json) of the unwrapped model, atomically."""
    from safetensors.torch import save_file

    from mixer.io import atomic_write, write_text

    model = unwrap_model(model)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(os.path.join(run_dir, filename), lambda p: save_file(state, p))
    if filename == MODEL_FILE:
        config = dict(extra, heads=asdict(model.cfg))
        write_text(os.path.join(run_dir, CONFIG_FILE), json.dumps(config, indent=1))


def read_model_config(run_dir: str) -> dict:
    with open(os.path.join(run_dir, CONFIG_FILE), encoding="utf-8") as handle:
        return json.load(handle)

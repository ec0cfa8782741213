"""The mixer model: an encoder with a flat head and a block seq2seq decoder.

One model class, configured by its family (`HeadsConfig.family`, whose facts
mixer.models.family holds):

- "mixer": the flat head reads the mean of the encoder states. A small pre-norm
  transformer decoder of its own width (learned positions, the memory projected
  to its width, padding of the memory masked) writes the codes.
- "occcanine": the layout of OccCANINE's published models: the flat head reads
  the encoder's pooler output. The decoder works at the encoder's width, scales
  its token embeddings by sqrt(width), adds sinusoidal positions, uses post-norm
  layers and attends to every encoder position, padding included, as OccCANINE's
  code runs it (`decoder_reads_padding`). New heads by default mask the padding,
  so their batches need not be padded to 128 (mixer.data.inputs.padding). Its weights are
  read and written by mixer.models.occcanine; this module does not know where they
  come from.

The decoder writes codes as max_num_codes blocks of block_size tokens, then
EOS. Greedy decoding keeps each layer's keys and values (and the memory's,
computed once), so a step costs one token, not the whole prefix again.
Saving goes through `unwrap_model`: files never hold DDP's `module.` or
torch.compile's `_orig_mod.` prefixes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from mixer.models import keyed_dropout
from mixer.models.family import family


@dataclass
class HeadsConfig:
    num_labels: int
    vocab_size: int  # decoder tokens
    target_len: int  # decoder labels per row (blocks + EOS)
    decoder_dim: int = 256
    decoder_layers: int = 2
    decoder_heads: int = 4
    dropout: float = 0.1
    family: str = "mixer"
    bos_id: int = 1
    decoder_ff: int = 0  # feed-forward width; 0: 4 x decoder_dim (mixer), decoder_dim (occcanine)
    max_positions: int = 128  # occcanine: length of the sinusoidal position table
    # the decoder attends to the encoder's padding positions too; None: as the family does
    # (OccCANINE's reads them; a config.json from before this field holds none)
    decoder_reads_padding: Optional[bool] = None

    @property
    def reads_padding(self) -> bool:
        """The decoder attends to every position of its input, padding included (OccCANINE's form)."""
        if self.decoder_reads_padding is None:
            return family(self.family).decoder_reads_padding
        return self.decoder_reads_padding

    @classmethod
    def from_dict(cls, values: dict) -> "HeadsConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @property
    def feed_forward(self) -> int:
        if self.decoder_ff:
            return self.decoder_ff
        return family(self.family).decoder_ff_ratio * self.decoder_dim


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """(length, dim): sin on even, cos on odd features, as OccCANINE's decoder builds it."""
    den = torch.exp(-torch.arange(0, dim, 2) * math.log(10000) / dim)
    pos = torch.arange(0, length).reshape(length, 1)
    table = torch.zeros((length, dim))
    table[:, 0::2] = torch.sin(pos * den)
    table[:, 1::2] = torch.cos(pos * den)
    return table


class BlockDecoder(nn.Module):
    """A causal transformer decoder over code tokens, in the family's style."""

    def __init__(self, cfg: HeadsConfig, memory_dim: int):
        super().__init__()
        self.cfg = cfg
        self.sinusoidal = family(cfg.family).sinusoidal_decoder
        self.embed = nn.Embedding(cfg.vocab_size, cfg.decoder_dim)
        if self.sinusoidal:
            self.embed_scale = math.sqrt(cfg.decoder_dim)
            self.register_buffer(
                "position_table",
                sinusoidal_positions(cfg.max_positions, cfg.decoder_dim),
                persistent=False,
            )
            self.position_dropout = nn.Dropout(cfg.dropout)
            self.memory_proj = nn.Identity()
            self.norm = nn.Identity()
        else:
            self.embed_scale = 1.0
            self.position = nn.Embedding(cfg.target_len + 1, cfg.decoder_dim)
            self.memory_proj = nn.Linear(memory_dim, cfg.decoder_dim)
            self.norm = nn.LayerNorm(cfg.decoder_dim)
        layer = nn.TransformerDecoderLayer(
            cfg.decoder_dim,
            cfg.decoder_heads,
            cfg.feed_forward,
            cfg.dropout,
            batch_first=True,
            norm_first=not self.sinusoidal,
        )
        self.layers = nn.TransformerDecoder(layer, cfg.decoder_layers)
        self.out = nn.Linear(cfg.decoder_dim, cfg.vocab_size)
        self.mask_memory_padding = not cfg.reads_padding

    def embed_tokens(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        hidden = (
            self.embed(tokens) * self.embed_scale if self.embed_scale != 1.0 else self.embed(tokens)
        )
        positions = torch.arange(start, start + tokens.size(1), device=tokens.device)
        if self.sinusoidal:
            return self.position_dropout(hidden + self.position_table[positions].to(hidden.dtype))
        return hidden + self.position(positions)

    def memory_padding(self, memory_pad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return memory_pad if self.mask_memory_padding else None

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor):
        """Logits for every position (teacher forcing): (rows, length, vocab)."""
        if (
            self.training
            and keyed_dropout.current_rows() is not None
            and any(
                layer.self_attn.dropout > 0 or layer.multihead_attn.dropout > 0
                for layer in self.layers.layers
            )
        ):
            return self.keyed_forward(tokens, memory, memory_pad)
        length = tokens.size(1)
        hidden = self.embed_tokens(tokens)
        causal = nn.Transformer.generate_square_subsequent_mask(
            length, device=tokens.device, dtype=hidden.dtype
        )
        hidden = self.layers(
            hidden,
            self.memory_proj(memory),
            tgt_mask=causal,
            tgt_is_causal=True,
            memory_key_padding_mask=self.memory_padding(memory_pad),
        )
        return self.out(self.norm(hidden))

    def keyed_forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor):
        """forward in training with keyed dropout: nn.TransformerDecoderLayer's wiring, its
        attention probabilities dropped with the keyed mask (mixer.models.keyed_dropout)
        where nn.MultiheadAttention would draw its own."""
        hidden = self.embed_tokens(tokens)
        memory = self.memory_proj(memory)
        pad = self.memory_padding(memory_pad)
        cross_allowed = None if pad is None else (~pad.bool())[:, None, None, :]  # (rows, 1, 1, M)
        length = tokens.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
        for layer in self.layers.layers:
            hidden = _decoder_layer(
                layer,
                hidden,
                lambda h: layer.dropout1(_attend_keyed(layer.self_attn, h, h, causal)),
                lambda h: layer.dropout2(
                    _attend_keyed(layer.multihead_attn, h, memory, cross_allowed)
                ),
            )
        return self.out(self.norm(hidden))

    # ------------------------------------------------------------ cached decoding
    def start_cache(
        self, memory: torch.Tensor, memory_pad: Optional[torch.Tensor]
    ) -> "DecoderCache":
        """Keys and values of the memory, once per row and layer."""
        memory = self.memory_proj(memory)
        cross = [_heads_kv(layer.multihead_attn, memory) for layer in self.layers.layers]
        pad = self.memory_padding(memory_pad)
        allowed = None if pad is None else (~pad.bool())[:, None, None, :]  # (rows, 1, 1, M)
        return DecoderCache(cross=cross, allowed=allowed, self_kv=[None] * len(self.layers.layers))

    def tree_step(self, tokens: torch.Tensor, position: int, tree: "TreeCache") -> torch.Tensor:
        """Logits after each node of a prefix tree (rows, nodes, vocab): node n adds
        token tokens[n] at `position` to its parent's prefix, whose keys and values
        `tree` holds per row and node."""
        rows = tree.cross[0][0].size(0)
        hidden = self._embed_at(tokens, position, rows)
        for index, layer in enumerate(self.layers.layers):
            hidden = _layer_tree_step(layer, hidden, tree, index)
        return self.out(self.norm(hidden))

    def _embed_at(self, tokens: torch.Tensor, position: int, rows: int) -> torch.Tensor:
        hidden = (
            self.embed(tokens) * self.embed_scale if self.embed_scale != 1.0 else self.embed(tokens)
        )
        if self.sinusoidal:
            hidden = self.position_dropout(hidden + self.position_table[position].to(hidden.dtype))
        else:
            hidden = hidden + self.position.weight[position]
        return hidden.unsqueeze(0).expand(rows, -1, -1)

    def step(self, tokens: torch.Tensor, cache: "DecoderCache") -> torch.Tensor:
        """Logits of the next token after `tokens` (rows, new) given what `cache` holds;
        the cache grows by the new positions."""
        start = 0 if cache.self_kv[0] is None else cache.self_kv[0][0].size(2)
        hidden = self.embed_tokens(tokens, start)
        for index, layer in enumerate(self.layers.layers):
            hidden = _layer_step(layer, hidden, cache, index)
        return self.out(self.norm(hidden[:, -1]))


@dataclass
class DecoderCache:
    cross: list  # per layer (keys, values) of the memory: (rows, heads, M, head_dim)
    allowed: Optional[torch.Tensor]  # (rows, 1, 1, M) True where a memory position may be read
    self_kv: list  # per layer (keys, values) of the tokens so far, or None

    def select(self, rows: torch.Tensor) -> "DecoderCache":
        """The cache of some rows (repeated as asked): the search over the key uses it."""
        pick = lambda kv: None if kv is None else (kv[0][rows], kv[1][rows])  # noqa: E731
        return DecoderCache(
            [pick(kv) for kv in self.cross],
            None if self.allowed is None else self.allowed[rows],
            [pick(kv) for kv in self.self_kv],
        )


@dataclass
class TreeCache:
    """Keys and values of a prefix tree's nodes, per row: self_kv[layer] is
    (keys, values) of shape (rows, nodes, heads, length, head_dim)."""

    cross: list
    allowed: Optional[torch.Tensor]
    self_kv: list

    @classmethod
    def start(cls, cache: DecoderCache) -> "TreeCache":  # one node: the BOS prefix
        return cls(
            cache.cross, cache.allowed, [(k.unsqueeze(1), v.unsqueeze(1)) for k, v in cache.self_kv]
        )

    def grow(self, parent_of: torch.Tensor) -> "TreeCache":
        """The parents' keys and values for each node of the next level."""
        return TreeCache(
            self.cross, self.allowed, [(k[:, parent_of], v[:, parent_of]) for k, v in self.self_kv]
        )


def _layer_tree_step(
    layer: nn.TransformerDecoderLayer, x: torch.Tensor, tree: TreeCache, index: int
):
    """One decoder layer for one new token per node: x (rows, nodes, dim)."""
    attention = layer.self_attn
    heads = attention.num_heads

    def self_attention(h):
        rows, nodes, dim = h.shape
        keys, values = _heads_kv(attention, h)  # (rows, heads, nodes, hd)
        old_k, old_v = tree.self_kv[index]  # (rows, nodes, heads, length, hd)
        keys = torch.cat([old_k, keys.transpose(1, 2).unsqueeze(3)], 3)
        values = torch.cat([old_v, values.transpose(1, 2).unsqueeze(3)], 3)
        tree.self_kv[index] = (keys, values)
        weight, bias = attention.in_proj_weight, attention.in_proj_bias
        query = F.linear(h, weight[:dim], None if bias is None else bias[:dim])
        query = query.view(rows, nodes, heads, 1, dim // heads)
        out = F.scaled_dot_product_attention(query, keys, values)  # (rows, nodes, heads, 1, hd)
        return layer.dropout1(attention.out_proj(out.reshape(rows, nodes, dim)))

    def cross_attention(h):  # the nodes of a row are the queries of one attention
        keys, values = tree.cross[index]
        return layer.dropout2(_attend(layer.multihead_attn, h, keys, values, tree.allowed))

    return _decoder_layer(layer, x, self_attention, cross_attention)


def _decoder_layer(
    layer: nn.TransformerDecoderLayer, x: torch.Tensor, self_attention, cross_attention
):
    """nn.TransformerDecoderLayer's residual wiring around the given attentions."""

    def feed_forward(h):
        return layer.dropout3(layer.linear2(layer.dropout(layer.activation(layer.linear1(h)))))

    if layer.norm_first:
        x = x + self_attention(layer.norm1(x))
        x = x + cross_attention(layer.norm2(x))
        return x + feed_forward(layer.norm3(x))
    x = layer.norm1(x + self_attention(x))
    x = layer.norm2(x + cross_attention(x))
    return layer.norm3(x + feed_forward(x))


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    rows, length, dim = x.shape
    return x.view(rows, length, heads, dim // heads).transpose(1, 2)


def _heads_kv(attention: nn.MultiheadAttention, source: torch.Tensor):
    dim = attention.embed_dim
    weight, bias = attention.in_proj_weight, attention.in_proj_bias
    keys = F.linear(source, weight[dim : 2 * dim], None if bias is None else bias[dim : 2 * dim])
    values = F.linear(source, weight[2 * dim :], None if bias is None else bias[2 * dim :])
    return _split_heads(keys, attention.num_heads), _split_heads(values, attention.num_heads)


def _attend(attention: nn.MultiheadAttention, query_in: torch.Tensor, keys, values, allowed=None):
    dim = attention.embed_dim
    weight, bias = attention.in_proj_weight, attention.in_proj_bias
    query = F.linear(query_in, weight[:dim], None if bias is None else bias[:dim])
    query = _split_heads(query, attention.num_heads)
    dropout = attention.dropout if attention.training else 0.0
    out = F.scaled_dot_product_attention(query, keys, values, attn_mask=allowed, dropout_p=dropout)
    out = out.transpose(1, 2).reshape(query_in.shape)
    return attention.out_proj(out)


def _attend_keyed(
    attention: nn.MultiheadAttention, query_in: torch.Tensor, source: torch.Tensor, allowed
):
    """nn.MultiheadAttention in training, its probabilities (rows, heads, queries, keys)
    dropped with the keyed mask of the module's id."""
    dim = attention.embed_dim
    weight, bias = attention.in_proj_weight, attention.in_proj_bias
    query = _split_heads(
        F.linear(query_in, weight[:dim], None if bias is None else bias[:dim]), attention.num_heads
    )
    keys, values = _heads_kv(attention, source)
    scores = torch.matmul(query, keys.transpose(-2, -1)) * (query.size(-1) ** -0.5)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    probs = keyed_dropout.keyed_dropout(
        scores.softmax(-1),
        attention.dropout,
        getattr(attention, "_keyed_dropout_id", 0),
        attention.training,
    )
    out = torch.matmul(probs, values).transpose(1, 2).reshape(query_in.shape)
    return attention.out_proj(out)


def _layer_step(
    layer: nn.TransformerDecoderLayer, x: torch.Tensor, cache: DecoderCache, index: int
):
    """One decoder layer for new positions x (rows, new, dim), reading and growing the cache."""

    def self_attention(h):
        keys, values = _heads_kv(layer.self_attn, h)
        old = cache.self_kv[index]
        if old is not None:
            keys, values = torch.cat([old[0], keys], 2), torch.cat([old[1], values], 2)
        cache.self_kv[index] = (keys, values)
        new = h.size(1)
        causal = None
        if new > 1:  # several new positions at once: each sees itself and what is before
            total = keys.size(2)
            causal = torch.ones(new, total, dtype=torch.bool, device=h.device).tril(total - new)
        return layer.dropout1(_attend(layer.self_attn, h, keys, values, causal))

    def cross_attention(h):
        keys, values = cache.cross[index]
        return layer.dropout2(_attend(layer.multihead_attn, h, keys, values, cache.allowed))

    return _decoder_layer(layer, x, self_attention, cross_attention)


class _PooledReady(Exception):
    """Ends an encoder pass once the pooled vector exists (MixerModel.pooled)."""


class MixerModel(nn.Module):
    def __init__(self, encoder: nn.Module, cfg: HeadsConfig):
        super().__init__()
        self.family = family(cfg.family)  # ValueError for a name it does not know
        self.cfg = cfg
        self.encoder = encoder
        if not self.family.flat_reads_pooler and getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None  # we pool ourselves; an unused pooler would upset DDP
        hidden = encoder.config.hidden_size
        self.flat_dropout = nn.Dropout(cfg.dropout)
        self.flat_head = nn.Linear(hidden, cfg.num_labels)
        # Start at the prior of "one code in num_labels": without it the first
        # hundreds of steps only push every logit down.
        nn.init.constant_(self.flat_head.bias, -math.log(max(cfg.num_labels - 1, 1)))
        self.decoder = BlockDecoder(cfg, hidden)
        set_dropout(self, cfg.dropout)

    def padding_reads(self, decoder: bool) -> str:
        """What of the encoder's output a pass reads, which decides how far its batches are
        padded (mixer.data.inputs.padding): OccCANINE's flat head reads the pooled vector, and a
        decoder that reads padding (OccCANINE's own) every position. mixer's heads, and
        new heads that mask padding, read the real characters' states. `decoder`: the pass
        runs the decoder."""
        from mixer.data.inputs.padding import CHARACTERS, EVERY_POSITION, POOLED

        if decoder and self.cfg.reads_padding:
            return EVERY_POSITION
        if self.family.flat_reads_pooler and not decoder:
            return POOLED
        return CHARACTERS

    def encode(self, input_ids, attention_mask):
        """(encoder states, the pooled vector the flat head reads)."""
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        states = out.last_hidden_state
        if self.family.flat_reads_pooler:
            return states, out.pooler_output
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return states, pooled

    def pooled(self, input_ids, attention_mask):
        """The flat head's input alone. CANINE's pooler reads its molecule states, before
        the upsampling and the final character layer, so those are not computed: the
        same vector, 1.4x faster (flat predictions and embeddings of OccCANINE models)."""
        pooler = getattr(self.encoder, "pooler", None)
        if not self.family.flat_reads_pooler or pooler is None:
            return self.encode(input_ids, attention_mask)[1]
        found = {}

        def stop(_module, _inputs, output):
            found["pooled"] = output
            raise _PooledReady

        handle = pooler.register_forward_hook(stop)
        try:
            self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        except _PooledReady:
            pass
        finally:
            handle.remove()
        return found["pooled"]

    def forward(self, input_ids, attention_mask, decoder_input):
        states, pooled = self.encode(input_ids, attention_mask)
        flat_logits = self.flat_head(self.flat_dropout(pooled))
        seq_logits = self.decoder(decoder_input, states, attention_mask == 0)
        return flat_logits, seq_logits

    @torch.no_grad()
    def first_block_probs(self, states, attention_mask, blocks: torch.Tensor) -> torch.Tensor:
        """(rows, codes): the probability that each row's first block is each code's block
        (`blocks`: (codes, block_size) token ids), every code scored from one encoder pass.

        The codes share prefixes (HISCO's 1,919 codes have ~4,000 distinct prefixes, not
        1,919 x 5), and each prefix is decoded once per row, one level at a time. The
        prefixes of a level are the query positions of one batched step, reading the
        memory's keys and values without copying them per prefix."""
        rows, block_size = states.size(0), blocks.size(1)
        cache = self.decoder.start_cache(states, attention_mask == 0)
        bos = torch.full((rows, 1), self.cfg.bos_id, dtype=torch.long, device=states.device)
        log_next = (
            self.decoder.step(bos, cache).float().log_softmax(-1).unsqueeze(1)
        )  # (rows, 1, V)
        parents = torch.zeros(blocks.size(0), dtype=torch.long, device=blocks.device)
        node_of_code = parents
        node_logp = torch.zeros(rows, 1, device=states.device)
        tree = TreeCache.start(cache)
        for level in range(block_size):
            prefixes, inverse = torch.unique(blocks[:, : level + 1], dim=0, return_inverse=True)
            parent_of = torch.zeros(len(prefixes), dtype=torch.long, device=blocks.device)
            parent_of[inverse] = node_of_code
            tokens = prefixes[:, -1]
            node_logp = node_logp[:, parent_of] + log_next[:, parent_of, tokens]
            node_of_code = inverse
            if level + 1 < block_size:
                tree = tree.grow(parent_of)
                logits = self.decoder.tree_step(tokens, level + 1, tree)  # (rows, nodes, V)
                log_next = logits.float().log_softmax(-1)
        return node_logp[:, node_of_code].exp()

    @torch.no_grad()
    def generate(self, states, attention_mask, steps: int):
        """Greedy decoding: (token ids, their probabilities), each (rows, steps)."""
        cache = self.decoder.start_cache(states, attention_mask == 0)
        token = torch.full(
            (states.size(0), 1), self.cfg.bos_id, dtype=torch.long, device=states.device
        )
        tokens, probs = [], []
        for _ in range(steps):
            logits = self.decoder.step(token, cache).float()
            p, token = logits.softmax(-1).max(-1, keepdim=True)
            tokens.append(token)
            probs.append(p)
        return torch.cat(tokens, 1), torch.cat(probs, 1)


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

    from mixer.core.io import atomic_write, write_text

    model = unwrap_model(model)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(os.path.join(run_dir, filename), lambda p: save_file(state, p))
    if filename == MODEL_FILE:
        config = dict(extra, heads=asdict(model.cfg))
        write_text(os.path.join(run_dir, CONFIG_FILE), json.dumps(config, indent=1))


def read_model_config(run_dir: str) -> dict:
    with open(os.path.join(run_dir, CONFIG_FILE), encoding="utf-8") as handle:
        return json.load(handle)

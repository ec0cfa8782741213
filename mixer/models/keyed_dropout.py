"""Dropout whose masks are a function of where they fall, not of a random stream.

A training step's dropout masks decide which model a layout trains: drawn from
each process's own stream, in the order its batch holds the rows, they would
differ with the number of processes, the batch per process, gradient
accumulation, length groups, padding and a resume. Here every mask element is a
hash of

    (the row's key: seed, epoch and its place in the epoch's order, mixer.data.inputs.dataset;
     the module's id: a hash of its qualified name in the model;
     the element's own coordinates in its row: (position, channel), or (head, query, key)
     for attention probabilities)

so a row gets the same masks whatever batch, rank or padded length carries it.

The hash is splitmix64 (Steele, Lea and Flood 2014; it passes BigCrush): the row
and module give a 64-bit stream seed s, element e draws mix64(s + (e + 1) * golden
gamma), and the element is kept when the draw's top 24 bits are at least p * 2^24.
Coordinates are packed into e with fixed strides (21 bits a dimension), never by
the tensor's own sizes, so a padded length does not move a real position's draw.
torch's int64 arithmetic wraps, and its right shift sign-extends: the logical
shift is a shift and a mask.

The keys of the rows in a forward pass are set by `rows(keys)` around it (the
training step does, mixer.training.step); outside it, or in evaluation, a
KeyedDropout is nn.Dropout. Attention probabilities: CANINE and mixer's decoder
apply them through modules and functions of this module; word-piece encoders
whose attention goes through transformers' attention interface (BERT, RoBERTa,
XLM-R, MiniLM, ...) compute it eagerly inside `rows`, with the keyed mask, via
the interface entry KEYED_ATTENTION (evaluation and prediction keep their own
implementation, untouched).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

GAMMA = 0x9E3779B97F4A7C15
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
KEEP_BITS = 24
COORD_BITS = 21  # a dimension of a row's tensor up to 2M entries; 3 dimensions in 63 bits
KEYED_ATTENTION = "mixer_keyed"

_ROWS: contextvars.ContextVar = contextvars.ContextVar("mixer_keyed_rows", default=None)


def _signed(value: int) -> int:
    """A 64-bit word as torch's int64 holds it."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def mix64_numpy(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 words (numpy's uint64 arithmetic wraps)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(MIX1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(MIX2)
        return x ^ (x >> np.uint64(31))


def combine(*parts) -> np.ndarray:
    """One 64-bit key (uint64 array) from several integer arrays or ints, in order."""
    key = np.zeros(np.broadcast(*[np.asarray(p) for p in parts]).shape, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for part in parts:
            key = mix64_numpy(
                key * np.uint64(31) + np.asarray(part).astype(np.uint64) + np.uint64(GAMMA)
            )
    return key


def row_keys(seed: int, epochs, positions) -> torch.Tensor:
    """(rows,) int64: the key of each row's draw: seed, epoch and position in the epoch's
    order (the position names the draw; the sampler maps it to the row, whichever rank,
    layout or restart takes it)."""
    key = combine(
        np.uint64(seed % (1 << 64)),
        np.asarray(epochs, dtype=np.int64),
        np.asarray(positions, dtype=np.int64),
    )
    return torch.from_numpy(key.view(np.int64).copy())


def module_id(name: str) -> int:
    """A stable 64-bit id of a module's qualified name (the same in every process)."""
    return _signed(int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little"))


@contextlib.contextmanager
def rows(keys: torch.Tensor, model: Optional[nn.Module] = None):
    """Dropout in the forward passes inside is keyed by `keys` (rows,), one per batch row.
    `model`: its transformers encoders compute attention with the keyed mask meanwhile."""
    token = _ROWS.set(keys)
    switched = _switch_attention(model) if model is not None else []
    try:
        yield
    finally:
        for config, before in switched:
            config._attn_implementation_internal = before
        _ROWS.reset(token)


def current_rows() -> Optional[torch.Tensor]:
    return _ROWS.get()


def _mix64_(x: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser in place on int64 words (logical shifts by masking)."""
    for shift, factor in ((30, MIX1), (27, MIX2), (31, None)):
        torch.bitwise_right_shift(x, shift, out=scratch)
        scratch.bitwise_and_((1 << (64 - shift)) - 1)
        x.bitwise_xor_(scratch)
        if factor is not None:
            x.mul_(_signed(factor))
    return x


def element_index(shape, device) -> torch.Tensor:
    """Each element's coordinates in its row packed with fixed strides: shape (1, *shape)."""
    dims = len(shape)
    if dims > 63 // COORD_BITS:
        raise ValueError(f"keyed dropout: rows of {dims} dimensions (at most {63 // COORD_BITS})")
    index = torch.zeros((1,) * (dims + 1), dtype=torch.int64, device=device)
    for axis, size in enumerate(shape):
        if size >= 1 << COORD_BITS:
            raise ValueError(
                f"keyed dropout: a dimension of {size} (at most {(1 << COORD_BITS) - 1})"
            )
        view = [1] * (dims + 1)
        view[axis + 1] = size
        stride = COORD_BITS * (dims - 1 - axis)
        index = index + (torch.arange(size, device=device, dtype=torch.int64) << stride).view(view)
    return index


def keep_mask(keys: torch.Tensor, module: int, shape, p: float) -> torch.Tensor:
    """(rows, *shape) bool: True where an element is kept at dropout p (all on keys' device)."""
    seeds = keys * 31 + _signed(module + GAMMA)  # the stream of each (row, module)
    seeds = _mix64_(seeds, torch.empty_like(seeds))
    x = _steps(tuple(shape), keys.device) + seeds.view((-1,) + (1,) * len(shape))  # (rows, *shape)
    _mix64_(x, torch.empty_like(x))
    top = torch.bitwise_right_shift(x, 64 - KEEP_BITS).bitwise_and_((1 << KEEP_BITS) - 1)
    return top >= int(round(p * (1 << KEEP_BITS)))


_STEPS: dict = {}


def _steps(shape: tuple, device) -> torch.Tensor:
    """(element index + 1) x golden gamma: splitmix64's counter of each element (cached)."""
    found = _STEPS.get((shape, str(device)))
    if found is None:
        found = (element_index(shape, device) + 1) * _signed(GAMMA)
        if len(_STEPS) > 256:
            _STEPS.clear()
        _STEPS[(shape, str(device))] = found
    return found


def keyed_dropout(x: torch.Tensor, p: float, module: int, training: bool = True) -> torch.Tensor:
    """Dropout of x (rows first) keyed by the current rows; nn.functional.dropout outside `rows`."""
    if not training or p == 0.0:
        return x
    keys = _ROWS.get()
    if keys is None:
        return F.dropout(x, p, training)
    if p >= 1.0:
        return x * 0.0
    if x.size(0) != keys.size(0):
        raise RuntimeError(
            f"keyed dropout: a tensor of {x.size(0)} rows in a batch of {keys.size(0)}"
        )
    keep = keep_mask(keys, module, tuple(x.shape[1:]), p)
    return x * (keep.to(x.dtype) * (1.0 / (1.0 - p)))


class KeyedDropout(nn.Dropout):
    """nn.Dropout whose mask is keyed (module docstring); `p` is read as nn.Dropout's."""

    def __init__(self, p: float = 0.5, module: int = 0):
        super().__init__(p)
        self.module_id = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return keyed_dropout(x, self.p, self.module_id, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, keyed"


def install(model: nn.Module) -> int:
    """Every nn.Dropout of `model` becomes a KeyedDropout of the same p, its id the hash of
    its qualified name; every attention module gets the id of its own name for the
    probabilities' mask. Returns how many dropouts were replaced."""
    replaced = 0
    for name, parent in list(model.named_modules()):
        parent._keyed_dropout_id = module_id(name + "#attention")
        for child_name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                qualified = f"{name}.{child_name}" if name else child_name
                keyed = KeyedDropout(child.p, module_id(qualified))
                keyed.train(child.training)
                setattr(parent, child_name, keyed)
                replaced += 1
    _register_attention()
    return replaced


# ------------------------------------------------------------------ transformers' attention
def _attention_configs(model: nn.Module) -> list:
    """The configs of the model's transformers encoders, whose attention may go through the
    attention interface, when any of its dropouts has p > 0 (the attention modules pass
    their dropout module's p, which need not be the config's)."""
    found, dropping = {}, False
    for module in model.modules():
        if isinstance(module, nn.Dropout) and module.p > 0:
            dropping = True
        config = getattr(module, "config", None)
        if config is None or not hasattr(config, "_attn_implementation_internal"):
            continue
        if (
            getattr(config, "model_type", "") == "canine"
        ):  # its attention applies a module: keyed already
            continue
        found[id(config)] = config
    return list(found.values()) if dropping else []


def _switch_attention(model: nn.Module) -> list:
    if not model.training:
        return []
    switched = []
    for config in _attention_configs(model):
        switched.append((config, config._attn_implementation_internal))
        config._attn_implementation_internal = KEYED_ATTENTION
    return switched


def keyed_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_kwargs
):
    """transformers' eager attention, its probabilities dropped with the keyed mask
    (query, key, value: (rows, heads, length, head_dim))."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = F.softmax(weights, dim=-1)
    identity = getattr(module, "_keyed_dropout_id", 0)
    weights = keyed_dropout(weights, dropout, identity, module.training)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


_REGISTERED = False


def _register_attention() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask
    except ImportError:  # transformers without the interface: nothing to switch
        return
    AttentionInterface.register(KEYED_ATTENTION, keyed_attention)
    AttentionMaskInterface.register(KEYED_ATTENTION, eager_mask)
    _REGISTERED = True

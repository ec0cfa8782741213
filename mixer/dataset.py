"""From prepared rows to batches: tokenisation cache, the sampler, collation.

Texts are tokenised once and cached in the run directory as two .npy files
(flat token ids + offsets), memory-mapped by every rank and every later run.
Batches are padded to their longest row, not to --max-len.

The sampler owns the data order. Each epoch has one global permutation
(seeded by seed and epoch); an optimizer step takes the next
`batch_size * world_size * grad_accum_steps` rows of it, rank r takes its
slice and splits it into micro-batches. One process with batch N*B and N
processes with batch B therefore see the same rows in the same steps.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch

from mixer.formatter import EOS, PAD
from mixer.precision import round_up

TOKENIZE_CHUNK = 20_000


# ------------------------------------------------------------------ tokenisation
def model_input_texts(texts, langs) -> tuple[list, Optional[list]]:
    """('text', None) when no row has a language, else pairs (lang, text);
    the tokenizer joins a pair as '<lang>[SEP]<text>'."""
    langs = np.asarray(langs, dtype=object)
    if (langs == "unk").all():
        return list(texts), None
    return list(langs), list(texts)


def tokenize(tokenizer, texts, langs, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every row as (flat int32 ids, int64 offsets of len rows + 1)."""
    texts = np.asarray(texts, dtype=object)
    langs = np.asarray(langs, dtype=object)
    pieces, lengths = [], []
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        chunk_texts = texts[start:start + TOKENIZE_CHUNK]
        chunk_langs = langs[start:start + TOKENIZE_CHUNK]
        known = chunk_langs != "unk"
        ids = [None] * len(chunk_texts)
        if (~known).any():
            out = tokenizer(list(chunk_texts[~known]), truncation=True, max_length=max_len)
            for row, seq in zip(np.flatnonzero(~known), out["input_ids"]):
                ids[row] = seq
        if known.any():
            out = tokenizer(list(chunk_langs[known]), list(chunk_texts[known]),
                            truncation="only_second", max_length=max_len)
            for row, seq in zip(np.flatnonzero(known), out["input_ids"]):
                ids[row] = seq
        lengths.extend(len(seq) for seq in ids)
        pieces.extend(ids)
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for seq in pieces for t in seq), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def tokenizer_fingerprint(tokenizer, max_len: int) -> str:
    probe = tokenizer(["farmer and fisher"], ["en"], truncation=True, max_length=max_len)["input_ids"]
    text = f"{type(tokenizer).__name__}|{len(tokenizer)}|{max_len}|{probe}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class TokenCache:
    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index]:self.offsets[index + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def cached_tokens(run_dir: str, split: str, tokenizer, texts, langs, max_len: int,
                  build: bool) -> TokenCache:
    """Load the cache of a split, building it first when `build` (rank 0)."""
    from mixer.io import atomic_write

    tag = tokenizer_fingerprint(tokenizer, max_len)
    base = os.path.join(run_dir, "cache", f"tokens_{split}_{tag}")
    ids_path, offsets_path = base + ".ids.npy", base + ".offsets.npy"
    if build and not (os.path.exists(ids_path) and os.path.exists(offsets_path)):
        os.makedirs(os.path.dirname(base), exist_ok=True)
        flat, offsets = tokenize(tokenizer, texts, langs, max_len)
        atomic_write(ids_path, lambda p: _save_npy(p, flat))
        atomic_write(offsets_path, lambda p: _save_npy(p, offsets))  # written last: marks complete
    cache = TokenCache(np.load(ids_path, mmap_mode="r"), np.load(offsets_path, mmap_mode="r"))
    if len(cache) != len(texts):
        raise RuntimeError(f"token cache {base} does not match the data; delete {run_dir}/cache")
    return cache


def _save_npy(path: str, array: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, array)


# ------------------------------------------------------------------ dataset
class RowDataset(torch.utils.data.Dataset):
    """Rows by index; the sampler passes (index, rows in this step's global batch)."""

    def __init__(self, tokens: TokenCache, labels: np.ndarray):
        self.tokens = tokens
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, item):
        index, global_rows, weight = item if isinstance(item, tuple) else (item, 0, 1.0)
        return np.asarray(self.tokens.row(index)), self.labels[index], global_rows, weight


@dataclass
class Batch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor  # (rows, slots) key indices, -1 empty
    decoder_input: torch.Tensor  # BOS + blocks
    targets: torch.Tensor  # blocks + EOS
    global_rows: int
    weights: torch.Tensor  # (rows,) 1, or 0 for a placeholder row (see StepSampler)

    def to(self, device: str, non_blocking: bool = False) -> "Batch":
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(move(self.input_ids), move(self.attention_mask), move(self.labels),
                     move(self.decoder_input), move(self.targets), self.global_rows,
                     move(self.weights))

    def pin_memory(self) -> "Batch":
        return Batch(self.input_ids.pin_memory(), self.attention_mask.pin_memory(),
                     self.labels.pin_memory(), self.decoder_input.pin_memory(),
                     self.targets.pin_memory(), self.global_rows, self.weights.pin_memory())


class Collator:
    """Pads to the longest row of the batch and lays codes out as decoder blocks."""

    def __init__(self, pad_id: int, key_blocks: np.ndarray, bos: int = 1,
                 pad_to: Optional[int] = None, pad_multiple: int = 1):
        self.pad_id = pad_id
        self.pad_to = pad_to  # a fixed length for encoders that need one
        self.pad_multiple = pad_multiple  # on GPUs: few distinct shapes (mixer.precision)
        # one extra all-PAD block for empty slots (index -1)
        self.blocks = np.vstack([key_blocks, np.full((1, key_blocks.shape[1]), PAD)]).astype(np.int64)
        self.bos = bos

    def targets(self, labels: np.ndarray) -> np.ndarray:
        rows = labels.shape[0]
        blocks = self.blocks[labels].reshape(rows, -1)  # -1 picks the PAD block
        return np.concatenate([blocks, np.full((rows, 1), EOS)], axis=1)

    def __call__(self, items) -> Batch:
        longest = self.pad_to or round_up(max(len(item[0]) for item in items), self.pad_multiple)
        input_ids = np.full((len(items), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(items), longest), dtype=np.int64)
        for row, (ids, *_) in enumerate(items):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        labels = np.stack([item[1] for item in items])
        targets = self.targets(labels)
        decoder_input = np.concatenate([np.full((len(items), 1), self.bos), targets[:, :-1]], axis=1)
        weights = torch.tensor([item[3] for item in items])
        return Batch(torch.from_numpy(input_ids), torch.from_numpy(mask), torch.from_numpy(labels),
                     torch.from_numpy(decoder_input), torch.from_numpy(targets), items[0][2],
                     weights)


# ------------------------------------------------------------------ sampling
class StepSampler:
    """Batch sampler: yields this rank's micro-batches, grad_accum_steps per step.

    Every row of an epoch's permutation is trained on once: the last step of
    an epoch (or of a resumed stretch) takes what is left. When a step has
    fewer rows than it has micro-batches (world_size x grad_accum_steps), an
    empty micro-batch carries one placeholder row of weight 0, so every rank
    still runs the same forward/backward passes and collectives; its loss is
    multiplied by 0 and changes nothing."""

    def __init__(self, num_rows: int, batch_size: int, world_size: int, rank: int,
                 grad_accum_steps: int, seed: int):
        self.num_rows = num_rows
        self.world_size = world_size
        self.rank = rank
        self.grad_accum_steps = grad_accum_steps
        self.global_batch_size = batch_size * world_size * grad_accum_steps
        self.seed = seed
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Epoch of the permutation, and rows of it already consumed (resume)."""
        self.epoch = epoch
        self.start = start

    def step_sizes(self, start: int = 0) -> list:
        """Rows of each remaining global batch, from row `start` of the epoch."""
        return [min(self.global_batch_size, self.num_rows - begin)
                for begin in range(start, self.num_rows, self.global_batch_size)]

    @property
    def rows_per_epoch(self) -> int:
        return self.num_rows

    @property
    def steps_per_epoch(self) -> int:
        return len(self.step_sizes())

    def permutation(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.num_rows)

    def __iter__(self) -> Iterator[list]:
        """Micro-batches of (row index, rows in the step's global batch, weight)."""
        order = self.permutation()
        begin = self.start
        for size in self.step_sizes(self.start):
            chunk = order[begin:begin + size]
            begin += size
            mine = np.array_split(chunk, self.world_size)[self.rank]
            for micro in np.array_split(mine, self.grad_accum_steps):
                if len(micro):
                    yield [(int(i), size, 1.0) for i in micro]
                else:
                    yield [(int(chunk[0]), size, 0.0)]

    def __len__(self) -> int:
        return len(self.step_sizes(self.start)) * self.grad_accum_steps


def shard_indices(num_rows: int, world_size: int, rank: int) -> np.ndarray:
    """This rank's contiguous share of the rows: every row on exactly one rank, no padding."""
    return np.array_split(np.arange(num_rows), world_size)[rank]


def eval_batches(indices: np.ndarray, batch_size: int) -> list:
    return [list(map(int, indices[i:i + batch_size])) for i in range(0, len(indices), batch_size)]

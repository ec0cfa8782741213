"""From prepared rows to batches: the dataset, the sampler, collation.

Token ids come from the run's token cache (mixer.data.inputs.token_cache). Batches are
padded to their longest row, not to --max-len (to a multiple of 8 on GPUs).
A training micro-batch is cut into --length-groups groups of rows of similar
length, each padded on its own: one long (noised) row no longer pads the
whole batch. The rows stay the same, and so does the gradient up to the order
of its sums (rounding): dropout masks are keyed by each row's draw (epoch,
position in the epoch's order), not by its place in a batch
(mixer.models.keyed_dropout).

The sampler owns the data order. Each epoch has one global permutation
(seeded by seed and epoch); an optimizer step takes the next
`batch_size * world_size * grad_accum_steps` rows of it, rank r takes its
slice and splits it into micro-batches. One process with batch N*B and N
processes with batch B therefore see the same rows in the same steps.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch

from mixer.data.labels.formatter import EOS, PAD
from mixer.data.inputs.padding import InputPadding


# ------------------------------------------------------------------ loader workers
def ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader workers leave pre-emption to the training process: a scheduler that
    signals the whole process group (SIGTERM, Slurm's USR1) must not kill a worker
    before the trainer has saved. The trainer shuts its workers down itself."""
    for name in ("SIGTERM", "SIGUSR1"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def stop_workers(*loaders) -> None:
    """Shut the loaders' worker processes down now (they ignore SIGTERM, so the
    interpreter's exit, which terminates them with it, must not be left to do it)."""
    for loader in loaders:
        iterator = getattr(loader, "_iterator", None)  # persistent workers live here
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        if loader is not None:
            loader._iterator = None


# ------------------------------------------------------------------ dataset
class RowDataset(torch.utils.data.Dataset):
    """Rows by index. The sampler passes (index, rows in this step's global batch,
    weight, epoch, position in the epoch's order); evaluation passes plain indices.
    A batch's token ids are made together (`__getitems__`, which the DataLoader
    calls with the whole batch): the cache's, or the noised rows tokenised at once
    (mixer.data.inputs.training_inputs)."""

    def __init__(
        self, inputs, labels: np.ndarray
    ):  # inputs: a mixer.data.inputs.training_inputs.RowInputs
        self.inputs = inputs
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def lengths(self) -> np.ndarray:
        """Each row's token count as written (a noised copy's differ by its few edits)."""
        return self.inputs.tokens.lengths()

    def __getitem__(self, item):
        return self.__getitems__([item])[0]

    def __getitems__(self, items: list) -> list:
        items = [item if isinstance(item, tuple) else (item, 0, 1.0, 0, item) for item in items]
        rows = np.fromiter((item[0] for item in items), dtype=np.int64, count=len(items))
        positions = np.fromiter((item[4] for item in items), dtype=np.int64, count=len(items))
        ids = self.inputs.ids(rows, items[0][3], positions)
        return [
            (ids[k], self.labels[index], size, weight, index, (epoch, position))
            for k, (index, size, weight, epoch, position) in enumerate(items)
        ]


@dataclass
class Batch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor  # (rows, slots) key indices, -1 empty
    decoder_input: torch.Tensor  # BOS + blocks
    targets: torch.Tensor  # blocks + EOS
    global_rows: int
    weights: torch.Tensor  # (rows,) 1, or 0 for a placeholder row (see StepSampler)
    rows: Optional[np.ndarray] = None  # the dataset's row indices (stays on the CPU)
    # (rows, 2): each row's draw, (epoch, position in the epoch's order), which keys its
    # dropout masks (mixer.models.keyed_dropout); stays on the CPU
    draws: Optional[np.ndarray] = None

    def to(self, device: str, non_blocking: bool = False) -> "Batch":
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(
            move(self.input_ids),
            move(self.attention_mask),
            move(self.labels),
            move(self.decoder_input),
            move(self.targets),
            self.global_rows,
            move(self.weights),
            self.rows,
            self.draws,
        )

    def pin_memory(self) -> "Batch":
        return Batch(
            self.input_ids.pin_memory(),
            self.attention_mask.pin_memory(),
            self.labels.pin_memory(),
            self.decoder_input.pin_memory(),
            self.targets.pin_memory(),
            self.global_rows,
            self.weights.pin_memory(),
            self.rows,
            self.draws,
        )


class Collator:
    """Pads a batch as far as its longest row needs (`padding`, mixer.data.inputs.padding: the
    longest row itself for word-piece encoders) and lays codes out as decoder blocks.

    groups: `grouped` cuts a training micro-batch into this many groups of rows of
    similar length (none where every batch is padded to one length anyway)."""

    def __init__(
        self,
        pad_id: int,
        key_blocks: np.ndarray,
        bos: int = 1,
        padding: InputPadding = InputPadding(),
        code_pad: int = PAD,
        eos: int = EOS,
        groups: int = 1,
    ):
        self.pad_id = pad_id  # of the encoder's input
        self.padding = padding
        self.groups = 1 if padding.fixed else groups
        # one extra block of the decoder's PAD for empty slots (index -1)
        self.blocks = np.vstack([key_blocks, np.full((1, key_blocks.shape[1]), code_pad)]).astype(
            np.int64
        )
        self.bos = bos
        self.eos = eos

    def targets(self, labels: np.ndarray) -> np.ndarray:
        rows = labels.shape[0]
        blocks = self.blocks[labels].reshape(rows, -1)  # -1 picks the PAD block
        return np.concatenate([blocks, np.full((rows, 1), self.eos)], axis=1)

    def grouped(self, items) -> list:
        """A training micro-batch as a list of Batches. Its rows are sorted by length (stable:
        the same rows give the same groups on every run) and cut where the padded tokens
        of at most `groups` groups are fewest, each group padded to its own longest row."""
        if self.groups == 1 or len(items) == 1:
            return [self(items)]
        lengths = np.asarray([len(item[0]) for item in items])
        order = np.argsort(lengths, kind="stable")
        cuts = fewest_padded(self.padding.lengths(lengths[order]), self.groups)
        return [self([items[k] for k in part]) for part in np.split(order, cuts)]

    def __call__(self, items) -> Batch:
        longest = self.padding.length(max(len(item[0]) for item in items))
        input_ids = np.full((len(items), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(items), longest), dtype=np.int64)
        for row, (ids, *_) in enumerate(items):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        labels = np.stack([item[1] for item in items])
        targets = self.targets(labels)
        decoder_input = np.concatenate(
            [np.full((len(items), 1), self.bos), targets[:, :-1]], axis=1
        )
        weights = torch.tensor([item[3] for item in items])
        rows = np.asarray([item[4] for item in items]) if len(items[0]) > 4 else None
        draws = (
            np.asarray([item[5] for item in items], dtype=np.int64).reshape(len(items), 2)
            if len(items[0]) > 5
            else None
        )
        return Batch(
            torch.from_numpy(input_ids),
            torch.from_numpy(mask),
            torch.from_numpy(labels),
            torch.from_numpy(decoder_input),
            torch.from_numpy(targets),
            items[0][2],
            weights,
            rows,
            draws,
        )


def fewest_padded(lengths: np.ndarray, groups: int) -> list:
    """Where to cut ascending `lengths` into at most `groups` runs so that the padded
    tokens, sum over runs of rows x longest, are fewest. `lengths`: the length each row
    would be padded to alone (the Collator's InputPadding.lengths, which grow with the
    row), so a run's cost is its rows x its last length. Rows of one length never gain
    from a cut between them, so the dynamic programme runs over the distinct lengths:
    O(groups x distinct^2), at most --max-len distinct lengths whatever the batch size.
    Ties keep fewer groups and earlier cuts: the same lengths always give the same cuts."""
    lengths = np.asarray(lengths, dtype=np.int64)
    values, counts = np.unique(lengths, return_counts=True)
    before = np.concatenate([[0], np.cumsum(counts)])  # rows before the i-th distinct length
    distinct = len(values)
    best = np.full(distinct + 1, np.iinfo(np.int64).max // 4, dtype=np.int64)  # first j lengths
    best[0] = 0
    choices = []
    for _ in range(min(groups, distinct)):
        new, choice = best.copy(), np.arange(distinct + 1)  # keeping the runs so far: no new cut
        for end in range(1, distinct + 1):
            costs = best[:end] + (before[end] - before[:end]) * values[end - 1]
            start = int(np.argmin(costs))
            if costs[start] < new[end]:
                new[end], choice[end] = costs[start], start
        best = new
        choices.append(choice)
    cuts, end = [], distinct
    for choice in reversed(choices):  # walk back through the runs
        start = int(choice[end])
        if start != end:
            if start > 0:
                cuts.append(int(before[start]))
            end = start
    return sorted(cuts)


# ------------------------------------------------------------------ sampling
class StepSampler:
    """Batch sampler: yields this rank's micro-batches, grad_accum_steps per step.

    Every row of an epoch's permutation is trained on once: the last step of
    an epoch (or of a resumed stretch) takes what is left. When a step has
    fewer rows than it has micro-batches (world_size x grad_accum_steps), an
    empty micro-batch carries one placeholder row of weight 0, so every rank
    still runs the same forward/backward passes and collectives. Its loss is
    multiplied by 0 and changes nothing."""

    def __init__(
        self,
        num_rows: int,
        batch_size: int,
        world_size: int,
        rank: int,
        grad_accum_steps: int,
        seed: int,
        epoch_rows=None,
    ):
        # epoch_rows: epoch -> the epoch's row indices (mixer.data.inputs.resample; the same size every
        # epoch), permuted instead of every row once; rows_per_epoch is then its length
        self.epoch_rows = epoch_rows
        self.num_rows = len(epoch_rows(0)) if epoch_rows is not None else num_rows
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
        return [
            min(self.global_batch_size, self.num_rows - begin)
            for begin in range(start, self.num_rows, self.global_batch_size)
        ]

    @property
    def rows_per_epoch(self) -> int:
        return self.num_rows

    @property
    def steps_per_epoch(self) -> int:
        return len(self.step_sizes())

    def permutation(self) -> np.ndarray:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_rows)
        return order if self.epoch_rows is None else self.epoch_rows(self.epoch)[order]

    def __iter__(self) -> Iterator[list]:
        """Micro-batches of (row index, rows in the step's global batch, weight, epoch,
        position in the epoch's order): the position names the row's draw of noise,
        whichever rank, layout or restart takes it (mixer.data.inputs.noise)."""
        order = self.permutation()
        begin = self.start
        for size in self.step_sizes(self.start):
            positions = np.arange(begin, begin + size)
            begin += size
            mine = np.array_split(positions, self.world_size)[self.rank]
            for micro in np.array_split(mine, self.grad_accum_steps):
                if len(micro):
                    yield [(int(order[p]), size, 1.0, self.epoch, int(p)) for p in micro]
                else:
                    yield [(int(order[positions[0]]), size, 0.0, self.epoch, int(positions[0]))]

    def __len__(self) -> int:
        return len(self.step_sizes(self.start)) * self.grad_accum_steps


def shard_indices(num_rows: int, world_size: int, rank: int) -> np.ndarray:
    """This rank's contiguous share of the rows: every row on exactly one rank, no padding."""
    return np.array_split(np.arange(num_rows), world_size)[rank]


def eval_batches(indices: np.ndarray, batch_size: int, lengths=None) -> list:
    """An evaluation's batches of `indices`. With `lengths` (each row's token count,
    RowDataset.lengths) the rows are taken shortest first (a stable sort), so that a batch
    pads its rows to about their own length (the example data's 800 validation rows, 4,738
    tokens, are padded to 12,544 in batches of 128 in row order, to 5,376 shortest first).
    An evaluation's figures are sums over rows and its collected rows are sorted by row,
    so only their last bits depend on the order."""
    indices = np.asarray(indices)
    if lengths is not None and len(indices):
        indices = indices[np.argsort(np.asarray(lengths)[indices], kind="stable")]
    return [list(map(int, indices[i : i + batch_size])) for i in range(0, len(indices), batch_size)]

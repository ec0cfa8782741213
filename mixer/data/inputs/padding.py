"""How long a batch of encoder inputs is padded: what its longest row needs, and no more.

Word-piece encoders (BERT-like) mask padding exactly: a row's outputs do not depend on
how much padding follows it, so a batch is padded to its longest row.

CANINE does not mask it everywhere. Its characters are turned into molecules and back
(transformers' CanineModel; the numbers are CANINE-s's: downsampling rate r = 4,
upsampling kernel k = 4). Padding a batch to L characters changes a row of n
characters (its [CLS] and [SEP] included) unless L is long enough:

- The molecules: a strided convolution over the L character states gives floor(L/r)
  windows. The last is dropped and [CLS] put first, so molecule j >= 1 holds characters
  [(j-1)r, jr). Their attention mask is computed from the characters another way, by a max
  pool over the same windows, NOT shifted by the [CLS] molecule. So molecule j may be
  attended to when characters [jr, (j+1)r) hold a real one: molecules 0 .. ceil(n/r)-1
  (the last window of real characters is masked out, and every molecule that is attended
  to holds real characters only).
- The pooled output ([CLS] molecule through the deep stack, then the pooler) reads only
  those molecules, so it is the same for every L with floor(L/r) >= ceil(n/r):
  L >= r * ceil(n/r). Shorter, some of them are missing.
- The character outputs: the final state of a real character p reads, through the
  upsampling convolution (zero-padded at the sequence's end), the states of the
  characters up to p + e, e = k-1-(k-1)//2 (2 in CANINE-s). Each is joined with the deep
  state of its own molecule 1 + p//r. But every character from (floor(L/r) - 1) * r on
  gets the last molecule instead of its own. So the real characters' states are those
  of any longer padding when each character up to n - 1 + e gets its own molecule:
  (floor(L/r) - 1) * r > n - 1 + e, i.e. L >= r * (floor((n - 1 + e)/r) + 2).
- The first character layer attends locally, in windows of W characters fixed from
  position 0 (W is `local_transformer_stride`, 128 in CANINE-s), the last one cut at L.
  It masks padding, so a window that holds a real character gives the same states for
  any L; but a window of padding alone attends to its own padding evenly, up to where it
  ends, and so changes with L. The real characters' states read every character up to the
  last one of the last molecule they read, r * ((n - 1 + e)//r + 1) - 1. When that one lies
  in a window after the last real character's, L must take that window whole (or reach
  max_len, where the reference cuts it too). The pooled output reads real characters only.

Checked numerically for every n and every L up to 128, several rates and kernels, and a
window shorter than the padding (benchmarks/canine_padding_rule.py; the boundaries on
every test run: tests/test_padding.py; docs/occcanine.md). At or above the rule a row's
outputs are those of the full length up to float rounding (about 1e-6; mostly
bit-identical). One character below it they differ (by 1e-4 to 1 in the pooled output,
by 0.5 or more in the characters).

What is read decides the rule: OccCANINE's flat head (and its embeddings) read the
pooled output. mixer's own heads read the states of the real characters (their mean,
and the decoder masks padding), and so do new heads on OccCANINE's encoder unless they
are in its form. OccCANINE's decoder attends to EVERY position of its memory, padding
included (its published code passes no memory mask), so anything that runs OccCANINE's
decoder is exact only at the full input length, 128. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POOLED, CHARACTERS, EVERY_POSITION = "pooled", "characters", "every position"
READS = (POOLED, CHARACTERS, EVERY_POSITION)


@dataclass(frozen=True)
class InputPadding:
    """The padded length of a batch, from its longest row (in tokens, [CLS] and [SEP]
    included). `rate` 0: the encoder masks padding exactly (a batch is padded to its
    longest row). Otherwise CANINE's downsampling rate, with `right_context` characters
    read after each position by its upsampling, its local attention in windows of
    `window` characters, inputs at most `max_len` long, and `reads` what of the outputs
    is used. `multiple`: lengths rounded up to it (GPUs run
    few distinct shapes faster; mixer.core.precision.pad_multiple)."""

    max_len: int = 0  # 0: no cap
    rate: int = 0
    right_context: int = 0
    window: int = 0  # CANINE's local attention window (local_transformer_stride); 0: none
    reads: str = CHARACTERS
    multiple: int = 1

    @classmethod
    def for_encoder(cls, config, max_len: int, reads: str, multiple: int = 1) -> "InputPadding":
        """The padding of an encoder (its transformers config) for what a pass reads."""
        if reads not in READS:
            raise ValueError(f"reads {reads!r}: one of {', '.join(READS)}")
        if getattr(config, "model_type", "") != "canine":
            return cls(max_len=max_len, multiple=multiple)
        kernel = int(config.upsampling_kernel_size)
        return cls(
            max_len=max_len,
            rate=int(config.downsampling_rate),
            right_context=(kernel - 1) - (kernel - 1) // 2,
            window=int(getattr(config, "local_transformer_stride", 0) or 0),
            reads=reads,
            multiple=multiple,
        )

    @property
    def fixed(self) -> bool:
        """Every batch is padded to max_len, whatever its rows."""
        return bool(self.rate) and self.reads == EVERY_POSITION

    def lengths(self, longest) -> np.ndarray:
        """The padded length for each longest-row length in `longest` (vectorised)."""
        n = np.asarray(longest, dtype=np.int64)
        if not self.rate:  # masked exactly: the longest row (never past the model's max_len)
            need = -(-n // self.multiple) * self.multiple
            return np.minimum(need, self.max_len) if self.max_len else need
        r = self.rate
        if self.reads == POOLED:
            need = r * -(-n // r)
        elif self.reads == CHARACTERS:
            need = r * ((n - 1 + self.right_context) // r + 2)
            if self.window:  # a window of padding alone that is read must be whole
                last_read = r * ((n - 1 + self.right_context) // r + 1) - 1
                w = self.window
                need = np.where(
                    last_read // w > (n - 1) // w, np.maximum(need, (last_read // w + 1) * w), need
                )
        else:
            need = np.full_like(n, self.max_len)
        need = np.maximum(need, r)  # one window at least: the molecules' max pool needs it
        need = -(-need // self.multiple) * self.multiple
        return np.minimum(need, self.max_len) if self.max_len else need

    def length(self, longest: int) -> int:
        return int(self.lengths(np.asarray([longest]))[0])

    def describe(self) -> str:
        """For a run's setup lines."""
        if not self.rate:
            return "inputs padded to the longest row of each batch"
        if self.fixed:
            return (
                f"inputs padded to {self.max_len} characters: OccCANINE's decoder reads every "
                "position of its input, padding included"
            )
        return (
            f"inputs padded to what the longest row of each batch needs ({self.reads} read; "
            f"at most {self.max_len} characters; docs/occcanine.md)"
        )

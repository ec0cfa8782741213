"""Spelling noise for training rows: the edits historical descriptions carry.

Clerks' abbreviations, variant spellings and OCR errors ("labourer", "laborer",
"iabourer") are what users' text looks like, so training rows are noised each
time they are drawn, the way OccCANINE trains its models (its
histocc/attacker.py). With probability `prob` a row gets `edits` edits, each of a
kind drawn uniformly, with replacement, from these:

    delete      one character removed.
    keyboard    one letter replaced by a neighbour on a QWERTY keyboard.
    insert      one random lower-case letter inserted.
    substitute  one character replaced by a random lower-case letter.
    swap        two neighbouring characters exchanged.
    word_swap   two neighbouring words exchanged (words joined by single spaces).
    pad         1-20 random characters (letters and space) before the text, after
                it, or both (each side with probability 1/2; neither -> both).
    word        a word of the training descriptions inserted between two words.

Differences from OccCANINE's attacker, on purpose: the keyboard table also
applies to upper-case letters (kept upper-case). Each kind leaves a text
it cannot edit as it is (OccCANINE's does too, except that its `word` kind
also applies to an empty text; ours as well).

Reproducibility is the point of this module. The noise of a row depends only on
(seed, epoch, position in the epoch's order): never on the rank, the number of
processes or DataLoader workers, or a restart. So N processes still learn what
one learns and a resumed run continues the same noise. Each draw is a 64-bit hash
of those numbers (splitmix64), vectorised over a batch; the edits of a noised
row come from Python's `random.Random` seeded with such a hash.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

KINDS = ("delete", "keyboard", "insert", "substitute", "swap", "word_swap", "pad", "word")
LETTERS = string.ascii_lowercase
PAD_CHARS = string.ascii_lowercase + " "
PAD_MAX = 20

# neighbouring keys on a QWERTY keyboard
KEYBOARD = {
    "a": "qwsz",
    "b": "vghn",
    "c": "xdfv",
    "d": "serfcx",
    "e": "wsdr",
    "f": "rtgvcd",
    "g": "tyhbvf",
    "h": "yujnbg",
    "i": "ujklo",
    "j": "uikmnh",
    "k": "ijolm",
    "l": "kop",
    "m": "njkl",
    "n": "bhjm",
    "o": "iklp",
    "p": "ol",
    "q": "wa",
    "r": "edft",
    "s": "wedxz",
    "t": "rfgy",
    "u": "yhji",
    "v": "cfgb",
    "w": "qase",
    "x": "zsdc",
    "y": "tghu",
    "z": "asx",
}

# streams of draws: one hash per (seed, epoch, position, stream)
STREAM_APPLY, STREAM_UNKNOWN, STREAM_EDITS = 1, 2, 3
EVAL_EPOCH = (1 << 31) - 1  # the validation rows' fixed noise (--eval-noise) is this "epoch"

_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class NoiseConfig:
    prob: float = 0.3  # --augmentation-prob: share of drawn rows that are noised
    edits: int = 3  # --num-transformations: edits of a noised row
    unknown_prob: float = 0.25  # --unk-lang-prob: a row's language becomes "unk" for that draw

    @property
    def active(self) -> bool:
        return (self.prob > 0 and self.edits > 0) or self.unknown_prob > 0


# ------------------------------------------------------------------ draws
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hashes(seed: int, epoch: int, positions, stream: int) -> np.ndarray:
    """One uint64 per position, a function of (seed, epoch, position, stream) only."""
    positions = np.asarray(positions, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & _MASK) + np.uint64(0x9E3779B97F4A7C15))
        key = _mix(key ^ np.uint64(epoch & _MASK))
        key = _mix(key ^ np.uint64(stream))
        return _mix(key ^ (positions * np.uint64(0x9E3779B97F4A7C15)))


def uniforms(seed: int, epoch: int, positions, stream: int) -> np.ndarray:
    """Uniform draws in [0, 1), 53 bits each."""
    return (hashes(seed, epoch, positions, stream) >> np.uint64(11)).astype(np.float64) / float(
        1 << 53
    )


# ------------------------------------------------------------------ the edits
def _delete(text: str, rng: random.Random, words) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + text[i + 1 :]


def _keyboard(text: str, rng: random.Random, words) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    near = KEYBOARD.get(text[i].lower())
    if near is None:
        return text
    new = rng.choice(near)
    return text[:i] + (new.upper() if text[i].isupper() else new) + text[i + 1 :]


def _insert(text: str, rng: random.Random, words) -> str:
    if not text:
        return text
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice(LETTERS) + text[i:]


def _substitute(text: str, rng: random.Random, words) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + rng.choice(LETTERS) + text[i + 1 :]


def _swap(text: str, rng: random.Random, words) -> str:
    if len(text) < 2:
        return text
    i = rng.randrange(len(text) - 1)
    return text[:i] + text[i + 1] + text[i] + text[i + 2 :]


def _word_swap(text: str, rng: random.Random, words) -> str:
    parts = text.split()
    if len(parts) < 2:
        return text
    i = rng.randrange(len(parts) - 1)
    parts[i], parts[i + 1] = parts[i + 1], parts[i]
    return " ".join(parts)


def _pad(text: str, rng: random.Random, words) -> str:
    def chars() -> str:
        return "".join(rng.choice(PAD_CHARS) for _ in range(rng.randint(1, PAD_MAX)))

    lead = chars() if rng.random() < 0.5 else ""
    trail = chars() if rng.random() < 0.5 else ""
    if not lead and not trail:
        lead, trail = chars(), chars()
    return f"{lead} {text} {trail}"


def _word(text: str, rng: random.Random, words) -> str:
    if not words:
        return text
    parts = text.split()
    parts.insert(rng.randrange(len(parts) + 1), words[rng.randrange(len(words))])
    return " ".join(parts)


EDITS = {
    "delete": _delete,
    "keyboard": _keyboard,
    "insert": _insert,
    "substitute": _substitute,
    "swap": _swap,
    "word_swap": _word_swap,
    "pad": _pad,
    "word": _word,
}


def noised(text: str, edits: int, key: int, words: Sequence[str] = ()) -> str:
    """`text` after `edits` edits drawn from a random.Random seeded with `key`."""
    rng = random.Random(int(key))
    for _ in range(edits):
        text = EDITS[KINDS[rng.randrange(len(KINDS))]](text, rng, words)
    return text


def word_list(texts) -> list:
    """The words the `word` edit inserts: the distinct whitespace-separated words of
    the training descriptions, sorted (the same list on every rank and restart)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = (
        texts
        if isinstance(texts, (pa.Array, pa.ChunkedArray))
        else pa.array(list(texts), pa.string())
    )
    words = pc.unique(pc.list_flatten(pc.utf8_split_whitespace(array)))
    return sorted(w for w in words.to_pylist() if w)


# ------------------------------------------------------------------ a batch
@dataclass
class RowNoise:
    """What happens to each row of a batch in one draw."""

    noised: np.ndarray  # bool: the row's description is edited
    unknown: np.ndarray  # bool: the row's language becomes "unk"
    keys: np.ndarray  # uint64: the seed of each noised row's edits


def draw(
    config: NoiseConfig,
    seed: int,
    epoch: int,
    positions,
    langs: Optional[np.ndarray] = None,
    every_row: bool = False,
) -> RowNoise:
    """The noise of rows at `positions` of epoch `epoch`. every_row: all rows get
    `config.edits` edits and keep their language (the validation rows' --eval-noise)."""
    positions = np.asarray(positions, dtype=np.int64)
    if every_row:
        noised_rows = np.full(len(positions), config.edits > 0)
        unknown = np.zeros(len(positions), dtype=bool)
    else:
        noised_rows = (uniforms(seed, epoch, positions, STREAM_APPLY) < config.prob) & (
            config.edits > 0
        )
        unknown = uniforms(seed, epoch, positions, STREAM_UNKNOWN) < config.unknown_prob
        if langs is not None:
            unknown &= np.asarray(langs, dtype=object) != "unk"
    return RowNoise(noised_rows, unknown, hashes(seed, epoch, positions, STREAM_EDITS))


def noised_texts(
    texts: Sequence[str],
    seed: int,
    edits: int,
    words: Sequence[str] = (),
    epoch: int = EVAL_EPOCH,
    positions=None,
) -> list:
    """Every text with `edits` edits, as the validation rows get them (--eval-noise):
    row i's noise is drawn for position `positions[i]` (default i) of `epoch`.
    benchmarks/baseline_tfidf_svm.py scores the baseline on these very texts."""
    positions = np.arange(len(texts)) if positions is None else positions
    keys = hashes(seed, epoch, positions, STREAM_EDITS)
    return [noised(t, edits, k, words) for t, k in zip(texts, keys)]

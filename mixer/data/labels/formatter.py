"""Code systems: which strings are codes, and how a code becomes a block of tokens.

A formatter checks codes (once per distinct value, never once per row), turns
codes into fixed-size blocks of decoder tokens and back. Built-in systems:

- general: any code system; the label key is built from the data.
- hisco:   HISCO, 5 characters, plus the special codes -1, -2, -3; the key is
           the full HISCO list shipped in mixer/resources/hisco_key.csv
           (read by mixer.data.labels.normalise.hisco_key).
- occ1950: OCC1950, 3 digits; the key is built from the data.

Numpy only: data preparation must not import torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ["[PAD]", "[BOS]", "[EOS]"]
# OccCANINE's decoders number their special tokens so (histocc/formatter/constants.py)
OCCCANINE_SPECIAL_TOKENS = ["[UNK]", "[PAD]", "[BOS]", "[EOS]", "[SEP]"]
OCCCANINE_HISCO_SYMBOLS = ["-3", "-2", "-1"] + [str(d) for d in range(10)]
PART_SEP = ","

RESOURCES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "resources"
)  # mixer/resources
HISCO_KEY_PATH = os.path.join(RESOURCES, "hisco_key.csv")
HISCO_SPECIAL = ("-1", "-2", "-3")
FORMATTERS = ("general", "hisco", "occ1950")


@dataclass(frozen=True)
class TokenSet:
    """How a decoder numbers its tokens (CodeFormatter.tokens names one)."""

    specials: list  # the special tokens, numbered first
    unused_entries: (
        int  # entries of the vocabulary no token uses (as OccCANINE's decoders are built)
    )
    short_fill: str  # what ends a code shorter than a block
    hisco_specials: bool  # HISCO's -1/-2/-3: one symbol repeated over the block
    hisco_symbols: list  # HISCO's alphabet
    own_symbols: (
        bool  # the model's symbols are given (chars.json, the model's own layout), not fitted
    )
    decode: object  # (formatter, tokens) -> the code a block spells, or None


def _symbols(f: "CodeFormatter") -> tuple:
    """(how many special tokens, token -> its symbol or None)."""
    specials, alphabet = len(f.specials), f.alphabet

    def symbol(t):
        return alphabet[t - specials] if specials <= t < specials + len(alphabet) else None

    return specials, symbol


def _decode_mixer(f: "CodeFormatter", tokens: list) -> Optional[str]:
    """An all-PAD block is no code; a special token inside shows by its name ('64[EOS]10'),
    so two blocks read the same only when their tokens are."""
    specials, symbol = _symbols(f)
    while tokens and tokens[-1] == f.pad_id:
        tokens.pop()
    if not tokens:
        return None
    parts = [f.specials[t] if t < specials else symbol(t) or f"[{t}]" for t in tokens]
    return PART_SEP.join(parts) if f.use_within_block_sep else "".join(parts)


def _decode_occcanine(f: "CodeFormatter", tokens: list) -> Optional[str]:
    """As OccCANINE's models' own code reads a block: a block holding PAD is no code,
    HISCO's -1/-2/-3 is known by its first token, and a block with tokens that are not
    symbols is dropped. In other systems the special tokens of a block are skipped."""
    _, symbol = _symbols(f)
    if f.kind == "hisco":
        if f.pad_id in tokens:
            return None
        if symbol(tokens[0]) in f.special_codes:
            return symbol(tokens[0])
        parts = [symbol(t) for t in tokens]
        return None if None in parts else "".join(parts)
    if all(t == f.pad_id for t in tokens):
        return None
    skip = {f.pad_id, f.bos_id, f.eos_id, f.specials.index("[SEP]")}
    parts = [symbol(t) or "?" for t in tokens if t not in skip]
    return (PART_SEP if f.use_within_block_sep else "").join(parts) or None


# "mixer": [PAD] [BOS] [EOS], codes shorter than a block end in PAD;
# "occcanine": [UNK] [PAD] [BOS] [EOS] [SEP] as OccCANINE's models number them, short
# codes end in EOS, HISCO's -1/-2/-3 are one symbol repeated over the block, and the
# vocabulary has one more (unused) entry, as its decoders are built.
TOKEN_SETS = {
    "mixer": TokenSet(SPECIAL_TOKENS, 0, "[PAD]", False, list("-0123456789"), False, _decode_mixer),
    "occcanine": TokenSet(
        OCCCANINE_SPECIAL_TOKENS, 1, "[EOS]", True, OCCCANINE_HISCO_SYMBOLS, True, _decode_occcanine
    ),
}


@dataclass
class CodeFormatter:
    """How codes of one code system are checked and laid out for the decoder."""

    kind: str = "general"
    block_size: int = 5
    max_num_codes: int = 1
    use_within_block_sep: bool = False
    allow_short: bool = False
    # general systems: digit codes are this many digits (--zero-padded-codes, or the width of
    # --key's codes); shorter ones lost their leading zeros (mixer.data.labels.normalise restores them)
    digit_width: Optional[int] = None
    alphabet: list[str] = field(default_factory=list)  # token len(specials) + i is alphabet[i]
    tokens: str = "mixer"  # how the decoder numbers its tokens: a name of TOKEN_SETS

    # ------------------------------------------------------------ layout
    @property
    def token_set(self) -> TokenSet:
        return TOKEN_SETS[self.tokens]

    @property
    def specials(self) -> list[str]:
        return self.token_set.specials

    @property
    def pad_id(self) -> int:
        return self.specials.index("[PAD]")

    @property
    def bos_id(self) -> int:
        return self.specials.index("[BOS]")

    @property
    def eos_id(self) -> int:
        return self.specials.index("[EOS]")

    @property
    def vocab_size(self) -> int:
        return len(self.specials) + len(self.alphabet) + self.token_set.unused_entries

    @property
    def special_codes(self) -> tuple:
        """Codes written as one symbol repeated over the block (OccCANINE's HISCO)."""
        return HISCO_SPECIAL if self.token_set.hisco_specials and self.kind == "hisco" else ()

    @property
    def target_len(self) -> int:
        """Decoder labels per row: max_num_codes blocks, then EOS."""
        return self.max_num_codes * self.block_size + 1

    @property
    def zero_pad(self) -> Optional[int]:
        """The width digit codes have in this system (shorter ones lost leading zeros), or
        None when the system does not fix one."""
        return {"hisco": 5, "occ1950": 3}.get(self.kind, self.digit_width)

    def to_dict(self) -> dict:
        values = asdict(self)
        if values["digit_width"] is None:  # runs prepared before it existed keep their identity
            del values["digit_width"]
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "CodeFormatter":
        return cls(**values)

    def parts(self, code: str) -> list[str]:
        if code in self.special_codes:
            return [code] * self.block_size
        return code.split(PART_SEP) if self.use_within_block_sep else list(code)

    # ------------------------------------------------------------ checking
    def check(self, code: str, known: Optional[set] = None) -> tuple[str, str]:
        """(normalised code, reason it is bad or '') for one distinct raw value."""
        if re.search(r"\S[\s;&|]+\S", code):
            return (
                code,
                "holds several codes? put one code per target column (--target-cols A B ...)",
            )
        if self.kind in ("hisco", "occ1950"):
            width = 5 if self.kind == "hisco" else 3
            if code in HISCO_SPECIAL and self.kind == "hisco":
                return code, ""
            if not code.isdigit():
                return code, f"not a {self.kind.upper()} code (digits only)"
            if len(code) < width:  # mixer.data.labels.normalise restores the zeros before this
                return code, f"shorter than {width} characters (write it with its leading zeros)"
            if len(code) > width:
                return code, f"longer than {width} characters"
            if known is not None and code not in known:
                return code, f"not in the {self.kind.upper()} code list"
            return code, ""
        parts = self.parts(code)
        if any(not part or part != part.strip() for part in parts) or re.search(r"\s", code):
            return code, "contains spaces or empty parts"
        if len(parts) > self.block_size:
            return code, f"longer than --block-size {self.block_size}"
        if len(parts) < self.block_size and not self.allow_short:
            shorter = (
                "pass --allow-codes-shorter-than-block-size if the code system has shorter codes"
            )
            if code.isdigit() and not self.use_within_block_sep:  # a number that lost its zeros?
                return code, (
                    f"shorter than --block-size {self.block_size} (leading zeros lost? pass "
                    f"--zero-padded-codes to read it as {code.zfill(self.block_size)!r}; "
                    f"{shorter})"
                )
            return code, f"shorter than --block-size {self.block_size} ({shorter})"
        return code, ""

    # ------------------------------------------------------------ blocks
    def fit_alphabet(self, codes) -> None:
        own = self.token_set.own_symbols  # the model's own symbols (chars.json)
        if self.kind == "hisco":
            self.alphabet = list(self.token_set.hisco_symbols)
            return
        if self.kind == "occ1950":
            if not own:
                self.alphabet = list("0123456789")
            return
        if own and self.alphabet:
            return
        symbols = set()
        for code in codes:
            symbols.update(self.parts(code))
        self.alphabet = sorted(symbols)

    def symbol_tokens(self) -> dict:
        return {symbol: i + len(self.specials) for i, symbol in enumerate(self.alphabet)}

    def encode_blocks(self, codes) -> np.ndarray:
        """Token blocks (len(codes), block_size) for distinct codes (e.g. the key)."""
        lookup = self.symbol_tokens()
        fill = self.specials.index(self.token_set.short_fill)
        blocks = np.full((len(codes), self.block_size), fill, dtype=np.int64)
        for row, code in enumerate(codes):
            parts = self.parts(code)
            unknown = [p for p in parts if p not in lookup]
            if unknown:
                from mixer.core.errors import UserError

                raise UserError(
                    f"code {code!r}: the decoder has no token for {unknown[0]!r}; "
                    "its characters must be the model's (chars.json)"
                )
            blocks[row, : len(parts)] = [lookup[p] for p in parts]
        return blocks

    def decode_block(self, tokens) -> Optional[str]:
        """The code a block of token ids spells, or None for no code, as the token set
        reads it (TOKEN_SETS)."""
        return self.token_set.decode(self, [int(t) for t in tokens])

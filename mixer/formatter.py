"""Code systems: which strings are codes, and how a code becomes a block of tokens.

A formatter checks codes (once per distinct value, never once per row), turns
codes into fixed-size blocks of decoder tokens and back. Built-in systems:

- general: any code system; the label key is built from the data.
- hisco:   HISCO, 5 characters, plus the special codes -1, -2, -3; the key is
           the full HISCO list shipped in mixer/resources/hisco_key.csv.
- occ1950: OCC1950, 3 digits; the key is built from the data.

Numpy and pandas only: data preparation must not import torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ["[PAD]", "[BOS]", "[EOS]"]
PART_SEP = ","

RESOURCES = os.path.join(os.path.dirname(__file__), "resources")
HISCO_KEY_PATH = os.path.join(RESOURCES, "hisco_key.csv")
HISCO_SPECIAL = ("-1", "-2", "-3")
FORMATTERS = ("general", "hisco", "occ1950")


@dataclass
class CodeFormatter:
    """How codes of one code system are checked and laid out for the decoder."""

    kind: str = "general"
    block_size: int = 5
    max_num_codes: int = 1
    use_within_block_sep: bool = False
    allow_short: bool = False
    alphabet: list[str] = field(default_factory=list)  # token i + 3 is alphabet[i]

    # ------------------------------------------------------------ layout
    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.alphabet)

    @property
    def target_len(self) -> int:
        """Decoder labels per row: max_num_codes blocks, then EOS."""
        return self.max_num_codes * self.block_size + 1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "CodeFormatter":
        return cls(**values)

    def parts(self, code: str) -> list[str]:
        return code.split(PART_SEP) if self.use_within_block_sep else list(code)

    # ------------------------------------------------------------ checking
    def check(self, code: str, known: Optional[set] = None) -> tuple[str, str]:
        """(normalised code, reason it is bad or '') for one distinct raw value."""
        if re.search(r"\S[\s;&|]+\S", code):
            return code, "holds several codes? put one code per target column (--target-cols A B ...)"
        if self.kind in ("hisco", "occ1950"):
            width = 5 if self.kind == "hisco" else 3
            if code in HISCO_SPECIAL and self.kind == "hisco":
                return code, ""
            if not code.isdigit():
                return code, f"not a {self.kind.upper()} code (digits only)"
            if len(code) < width:
                if not self.allow_short:
                    return code, (f"shorter than {width} characters (leading zeros lost?)")
                code = code.zfill(width)
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
            return code, (f"shorter than --block-size {self.block_size} (leading zeros lost? "
                          "pass --allow-codes-shorter-than-block-size)")
        return code, ""

    # ------------------------------------------------------------ blocks
    def fit_alphabet(self, codes) -> None:
        if self.kind in ("hisco", "occ1950"):
            self.alphabet = list("-0123456789") if self.kind == "hisco" else list("0123456789")
            return
        symbols = set()
        for code in codes:
            symbols.update(self.parts(code))
        self.alphabet = sorted(symbols)

    def encode_blocks(self, codes) -> np.ndarray:
        """Token blocks (len(codes), block_size) for distinct codes (e.g. the key)."""
        lookup = {symbol: i + len(SPECIAL_TOKENS) for i, symbol in enumerate(self.alphabet)}
        blocks = np.full((len(codes), self.block_size), PAD, dtype=np.int64)
        for row, code in enumerate(codes):
            parts = self.parts(code)
            blocks[row, : len(parts)] = [lookup[p] for p in parts]
        return blocks

    def decode_block(self, tokens) -> Optional[str]:
        """The code a block of token ids spells; None for an empty block. A special
        token inside shows by its name ('64[EOS]10'), so two blocks decode to the same
        text only when they hold the same tokens."""
        tokens = [int(t) for t in tokens]
        while tokens and tokens[-1] == PAD:
            tokens.pop()
        if not tokens:
            return None
        parts = [SPECIAL_TOKENS[t] if t < len(SPECIAL_TOKENS) else self.alphabet[t - len(SPECIAL_TOKENS)]
                 for t in tokens]
        return PART_SEP.join(parts) if self.use_within_block_sep else "".join(parts)


def hisco_key() -> pd.DataFrame:
    """The full HISCO list: code (5 characters, leading zeros restored), description."""
    table = pd.read_csv(HISCO_KEY_PATH, dtype=str, keep_default_na=False)
    table = table[table["hisco"].str.strip() != ""]
    codes = table["hisco"].str.strip()
    numeric = codes.str.isdigit()
    codes = codes.where(~numeric, codes.str.zfill(5))
    return pd.DataFrame({"code": codes.to_numpy(), "description": table["en_hisco_text"].to_numpy()})


def read_descriptions(path: str) -> dict:
    """code -> description from a CSV with columns (code, description) or the HISCO key layout."""
    from mixer.errors import UserError

    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise UserError(f"--code-descriptions {path}: cannot read it ({exc})")
    for code_col, text_col in (("code", "description"), ("hisco", "en_hisco_text")):
        if code_col in table.columns and text_col in table.columns:
            return dict(zip(table[code_col].str.strip(), table[text_col]))
    raise UserError(f"--code-descriptions {path}: needs columns 'code' and 'description'")

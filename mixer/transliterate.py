"""Text to ASCII, the way OccCANINE's models were fed.

OccCANINE transliterates its inputs with the `unidecode` package before its
models read them. unidecode is GPL-2.0-or-later; mixer is Apache-2.0 and does
not copy it: mixer imports it when it is installed (requirements.txt installs
it, so predictions match OccCANINE's by default) and otherwise falls back to
a rule of its own (Unicode decomposition without accents, then a short table
for letters that do not decompose, e.g. ß, æ, ø, þ), which agrees with
unidecode on the Latin letters of the languages OccCANINE covers but not on
Greek or other scripts. Whoever must ship mixer without GPL code can leave
unidecode out; mixer then says once that it uses its own rule.
"""

from __future__ import annotations

import sys
import unicodedata

OWN_TABLE = {
    "ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "œ": "oe", "Œ": "OE",
    "đ": "d", "Đ": "D", "ð": "d", "Ð": "D", "þ": "th", "Þ": "Th", "ł": "l", "Ł": "L",
    "ı": "i", "ħ": "h", "Ħ": "H", "ŧ": "t", "Ŧ": "T", "ŋ": "ng", "Ŋ": "NG", "ĸ": "q",
    "‘": "'", "’": "'", "‚": ",", "“": '"', "”": '"', "„": ",,", "–": "-", "—": "--",
    "…": "...", "«": "<<", "»": ">>", "\u00a0": " ",
}

_unidecode = None
_warned = False


def _load():
    global _unidecode
    if _unidecode is None:
        try:
            from unidecode import unidecode

            _unidecode = unidecode
        except ImportError:
            _unidecode = False
    return _unidecode


def uses_unidecode() -> bool:
    return bool(_load())


def own_rule(text: str) -> str:
    """mixer's own transliteration (no GPL code): see the module docstring."""
    out = []
    for char in unicodedata.normalize("NFKD", text):
        if ord(char) < 128:
            out.append(char)
        elif unicodedata.combining(char):
            continue
        else:
            out.append(OWN_TABLE.get(char, ""))
    return "".join(out)


def transliterate(text: str) -> str:
    if text.isascii():
        return text
    unidecode = _load()
    if unidecode:
        return unidecode(text)
    global _warned
    if not _warned:
        _warned = True
        print("note: the unidecode package is not installed, so non-ASCII text is transliterated "
              "by mixer's own rule, which can differ from what OccCANINE's models saw "
              "(pip install Unidecode to match them)", file=sys.stderr)
    return own_rule(text)

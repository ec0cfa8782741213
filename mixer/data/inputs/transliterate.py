"""Text to ASCII, the way OccCANINE's models were fed.

OccCANINE transliterates its inputs with the `unidecode` package before its models read
them. unidecode is GPL-2.0-or-later. mixer is Apache-2.0 and does not copy it. mixer
imports it when it is installed (`pip install 'mixer[occcanine]'`; requirements.txt
installs it) so that predictions match OccCANINE's. Otherwise it uses a rule of its own:
Unicode decomposition without accents, then a short table for Latin letters that do not
decompose (ß, æ, ø, þ, ...). That table agrees with unidecode on the Latin letters of
the languages OccCANINE covers. Then `anyascii` (ISC licence) spells every other
character, so Greek, Cyrillic and other scripts are spelled out in ASCII, never deleted
(emoji are dropped, as unidecode drops them). anyascii and unidecode differ on some of
them (Cyrillic 'я': 'ya' against 'ia'), so an OccCANINE model run without unidecode says
so once (`exactness_note`).
"""

from __future__ import annotations

import unicodedata

from anyascii import anyascii

OWN_TABLE = {
    "ß": "ss",
    "ẞ": "SS",
    "æ": "ae",
    "Æ": "AE",
    "ø": "o",
    "Ø": "O",
    "œ": "oe",
    "Œ": "OE",
    "đ": "d",
    "Đ": "D",
    "ð": "d",
    "Ð": "D",
    "þ": "th",
    "Þ": "Th",
    "ł": "l",
    "Ł": "L",
    "ı": "i",
    "ħ": "h",
    "Ħ": "H",
    "ŧ": "t",
    "Ŧ": "T",
    "ŋ": "ng",
    "Ŋ": "NG",
    "ĸ": "q",
    "‘": "'",
    "’": "'",
    "‚": ",",
    "“": '"',
    "”": '"',
    "„": ",,",
    "–": "-",
    "—": "--",
    "…": "...",
    "«": "<<",
    "»": ">>",
    "\u00a0": " ",
}

_unidecode = None


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


def exactness_note(recipe) -> str | None:
    """The line an OccCANINE-style run or prediction prints when its input recipe
    transliterates and unidecode is missing; None when there is nothing to say."""
    if not getattr(recipe, "ascii", False) or uses_unidecode():
        return None
    from mixer.core.extras import install_hint

    return (
        "note: the Unidecode package is not installed, so predictions may differ from "
        "OccCANINE's on non-ASCII text (mixer transliterates with its own rule and anyascii); "
        f"to match them: {install_hint('occcanine')}"
    )


def own_rule(text: str) -> str:
    """mixer's own transliteration (no GPL code): see the module docstring."""
    out = []
    for char in unicodedata.normalize("NFKD", text):
        if ord(char) < 128:
            out.append(char)
        elif unicodedata.combining(char):
            continue
        elif char in OWN_TABLE:
            out.append(OWN_TABLE[char])
        elif ord(char) > 0xFFFF and unicodedata.category(char) == "So":
            continue  # emoji: anyascii names them (":fishing_pole_and_fish:"), unidecode drops them
        else:
            out.append(anyascii(char))
    return "".join(out)


def transliterate(text: str) -> str:
    if text.isascii():
        return text
    unidecode = _load()
    return unidecode(text) if unidecode else own_rule(text)

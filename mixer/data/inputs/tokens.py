"""From (language, text) to token ids: one implementation for training, the
token cache and prediction, fast at OccCANINE scale.

An `InputRecipe` says how a row becomes the model's input. It takes the text alone or
with its language (as a tokenizer pair `lang [SEP] text`, or as the literal
string `lang[SEP]text` that OccCANINE's models read), lower-cased and
transliterated to ASCII or not, cut to `max_len` tokens.

Context columns (mixer.data.labels.normalise.model_input) follow the description, and one rule
fits them into `max_len` for every encoder. The description is kept whole and the
context is cut from its end, in what the encoder reads (characters for CANINE, tokens
for word pieces). Where the description alone is longer, it is cut and the context
left out. Each such row is counted (`fitted`) and the count printed (`context_note`).

Two tokenisers, both without torch (so `--prepare-only` stays light):

- CANINE reads Unicode code points: its ids are `[CLS] + code points + [SEP]`. They are
computed for a million rows at a time with numpy (CanineTokenizer does the
  same one row at a time in Python, ~16,000 rows/s).
- Every other encoder goes through its fast tokenizer's Rust backend
  (`tokenizers`), which encodes a batch on every core.

Both give exactly the ids transformers' tokenizer gives (tested on awkward
text: accents, CJK, emoji, empty strings, over-long strings).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
import pandas as pd

CANINE_CLS, CANINE_SEP = 0xE000, 0xE001
UNKNOWN_LANGUAGE = "unk"
OCCCANINE_MAX_LEN = 128  # OccCANINE pads and cuts every input to 128 characters
# How context columns are fitted into max_len (InputRecipe.context_fit):
DESCRIPTION_WHOLE = "description-whole"  # the description whole, the context cut from its end
# runs trained before the rule (their stored recipe has no context_fit): the description and
# context as one text cut from its end, OccCANINE's inputs first cut at 128 raw characters
JOINED = "joined"
FITS, CONTEXT_CUT, DESCRIPTION_CUT = 0, 1, 2  # per row: what did not fit (`fitted`)
CHUNK_ROWS = 200_000  # rows tokenised at a time: bounds memory whatever the data size


@dataclass(frozen=True)
class InputRecipe:
    """How a row (language, text) becomes the model's input."""

    max_len: int = 64
    # "pair": the tokenizer's pair (lang, text) when the language is known, else the text;
    # "literal": the string f"{lang}[SEP]{text}", with lang "unk" when unknown (OccCANINE)
    language: str = "pair"
    lowercase: bool = False
    ascii: bool = False  # transliterate to ASCII (OccCANINE's prediction does)
    strip: bool = True  # surrounding spaces removed (OccCANINE keeps them)
    context_fit: str = DESCRIPTION_WHOLE  # how context columns are fitted into max_len

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Optional[dict]) -> "InputRecipe":
        """The recipe a run stored; one stored before context_fit existed fits as it was trained."""
        known = {k: v for k, v in (values or {}).items() if k in cls.__dataclass_fields__}
        return cls(**{"context_fit": JOINED, **known})


def to_ascii(texts: np.ndarray) -> np.ndarray:
    """ASCII transliteration, each distinct text once. Uses `unidecode` (GPL-2.0+,
    what OccCANINE's own prediction uses) when it is installed. Otherwise mixer's
    own rule (mixer.data.inputs.transliterate): Unicode decomposition without the accents and a
    small table, which agree with unidecode on the Latin letters of European
    languages, then anyascii for other scripts."""
    from mixer.data.inputs.transliterate import transliterate

    unique, inverse = np.unique(texts.astype(str), return_inverse=True)
    return np.asarray([transliterate(t) for t in unique], dtype=object)[inverse]


def _spelled(texts, recipe: InputRecipe, strip: bool) -> np.ndarray:
    """Texts as the recipe spells them: stripped (when `strip`), lower-cased, in ASCII."""
    texts = np.asarray(texts, dtype=object)
    if strip:
        texts = np.asarray([t.strip() for t in texts], dtype=object)
    if recipe.lowercase:
        texts = np.asarray([t.lower() for t in texts], dtype=object)
    if recipe.ascii:
        texts = to_ascii(texts)
    return texts


def model_strings(texts, langs, recipe: InputRecipe) -> tuple:
    """(first, second): the strings the tokeniser reads. `second` is None except for
    tokenizer pairs, where rows of unknown language have first = text, second = None."""
    texts = _spelled(texts, recipe, recipe.strip)
    langs = np.asarray(langs, dtype=object)
    if recipe.language == "literal":
        langs = np.where(langs == "", UNKNOWN_LANGUAGE, langs)
        return langs + "[SEP]" + texts, None
    known = langs != UNKNOWN_LANGUAGE
    if not known.any():
        return texts, None
    return np.where(known, langs, texts), np.where(known, texts, None)


PIECE_SEP = "\x1f"  # between the pieces of a key (a control character: no tokenizer keeps one)


def reading_keys(ids, texts, langs, own_threshold=()) -> np.ndarray:
    """Per row (a model text, description and context, and its language), a key that two
    rows share exactly when the model reads them alike: the run's own rule (the recipe:
    stripped, lower-cased, in ASCII, the language beside the text or before it) and then
    the tokenizer's own normalisation, taken from the tokenizer itself: a fast tokenizer's
    normalizer (BERT's lower-cases and strips accents: 'Fármer' reads as 'farmer') and its
    pre-tokenizer (words and punctuation: 'civil  engineer' and 'civil-engineer' read as
    'civil engineer' and 'civil - engineer'). CANINE reads code points: its key is the
    recipe's string. Kept apart, although the model may give them one prediction: texts
    that differ only past max_len (it cuts them) or in characters its vocabulary lacks (one
    [UNK]): a person reading them may code them differently. A slow tokenizer (no fast
    version) is keyed by the recipe alone. The language is part of the key as the model
    reads it, as the text is ('EN' and 'en' are one language to a lower-casing tokenizer,
    two to CANINE); `own_threshold`: the language values with a flat threshold of their own
    (mixer.reporting.metrics.Thresholds.table), which select it by the value as given, so
    such a value is also keyed as given: 'EN' and 'en' stay apart where either has one."""
    texts = np.asarray(texts, dtype=object)
    langs = np.broadcast_to(np.asarray(langs, dtype=object), (len(texts),))
    if not len(texts):
        return np.zeros(0, dtype=object)
    lang_text = pd.Series(langs, dtype=object).astype(str)
    text = pd.Series(texts, dtype=object).astype(str)
    if (lang_text == lang_text.iloc[0]).all():  # one language: each distinct text once
        codes, distinct = pd.factorize(text)
        distinct_texts = np.asarray(distinct, dtype=object)
        distinct_langs = np.full(len(distinct_texts), lang_text.iloc[0], dtype=object)
    else:
        codes, distinct = pd.factorize(lang_text + "\x00" + text)
        pairs = [value.split("\x00", 1) for value in distinct]
        distinct_texts = np.asarray([p[1] for p in pairs], dtype=object)
        distinct_langs = np.asarray([p[0] for p in pairs], dtype=object)
    first, second = model_strings(distinct_texts, distinct_langs, ids.recipe)
    read = _reader(ids)
    second = itertools.repeat(None) if second is None else second
    own = set(own_threshold or ())
    keys = np.asarray(
        [
            f"{lang if lang in own else ''}\x00{read(a)}\x00" + ("\x02" if b is None else read(b))
            for lang, a, b in zip(distinct_langs, first, second)
        ],
        dtype=object,
    )
    return keys[codes]


def read_languages(ids, langs) -> np.ndarray:
    """Per language value, the language as the model reads it (reading_keys): through the
    tokenizer's normalisation where the language is the first text of a pair ('EN' reads
    as 'en' to a lower-casing tokenizer), as written where it is part of a literal string
    that CANINE reads by code points; the unknown language (the text alone) as itself."""
    langs = np.asarray(langs, dtype=object).astype(str)
    read = _reader(ids)
    if ids.recipe.language == "literal":
        langs = np.where(langs == "", UNKNOWN_LANGUAGE, langs)
        return np.asarray([read(f"{lang}[SEP]") for lang in langs], dtype=object)
    return np.asarray(
        [UNKNOWN_LANGUAGE if lang == UNKNOWN_LANGUAGE else "\x01" + read(lang) for lang in langs],
        dtype=object,
    )


ADDED_SEP = "\x03"  # before a key's added tokens (_reader)
# the version of what a reading key tells apart: a resumed prediction's stores hold keys, so
# a journal whose keys are of another version is refused (mixer.prediction.resume). 2: the
# places of a tokenizer's added tokens ([SEP], [UNK], ...) are part of the key. 3: a
# description of characters that show nothing (a zero-width space, ...) is blank, as "" is
# (mixer.data.tables.job_columns.is_blank): no input, where version 2 keyed and coded it.
KEY_VERSION = 3


def _reader(ids):
    """A string as the tokenizer reads it before its vocabulary: its pieces (see reading_keys).
    A fast tokenizer finds its added tokens ([SEP], [UNK], [MASK], ...) in the text before it
    normalises it: 'farmer [SEP]' holds the one token [SEP], 'farmer [sep]' the pieces '[',
    'sep', ']' of a lower-casing tokenizer, which its normalizer and pre-tokenizer alone read
    alike. Where a text holds an added token's text in any case (as given, or once
    normalised), its key also holds each such place as written, in order: finer than the
    tokenizer (two spellings it reads alike may be two keys), never coarser (two readings
    never share a key)."""
    backend = getattr(ids, "backend", None)
    if backend is None:
        return str
    normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    added = _added_tokens(backend)

    def read(text: str) -> str:
        raw = str(text)
        normal = normalizer.normalize_str(raw) if normalizer is not None else raw
        text = normal
        if pre_tokenizer is not None:
            text = PIECE_SEP.join(piece for piece, _ in pre_tokenizer.pre_tokenize_str(normal))
        if added is None:
            return text
        # found in the text as given and as normalised (a token matched after normalising)
        found = [added.findall(raw), added.findall(normal)]
        if not found[0] and not found[1]:
            return text
        return text + "".join(ADDED_SEP + PIECE_SEP.join(places) for places in found)

    return read


def _added_tokens(backend):
    """A pattern that finds a tokenizer's added tokens in a text, in any case; None without any."""
    import re

    contents = sorted(
        {token.content for token in backend.get_added_tokens_decoder().values() if token.content},
        key=len,
        reverse=True,
    )
    if not contents:
        return None
    return re.compile("|".join(map(re.escape, contents)), re.IGNORECASE)


# ------------------------------------------------------------------ context
def split_context(texts, desc_chars) -> tuple:
    """(descriptions, contexts) of model texts: the first desc_chars[i] characters of row i
    are its description, the rest its context (mixer.data.labels.normalise.model_input)."""
    descriptions = np.asarray([t[:n] for t, n in zip(texts, desc_chars)], dtype=object)
    contexts = np.asarray([t[n:] for t, n in zip(texts, desc_chars)], dtype=object)
    return descriptions, contexts


def _fit_of(head_lengths: np.ndarray, context_lengths: np.ndarray, room) -> np.ndarray:
    """Per row FITS, CONTEXT_CUT or DESCRIPTION_CUT: `room` holds the head (everything up to
    the description's end) and as much of the context as it leaves."""
    fit = np.full(len(head_lengths), FITS, dtype=np.int8)
    has = context_lengths > 0
    fit[has & (head_lengths + context_lengths > room)] = CONTEXT_CUT
    fit[has & (head_lengths > room)] = DESCRIPTION_CUT
    return fit


def _lengths(strings) -> np.ndarray:
    return np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))


def _joined(descriptions, contexts, langs, recipe: InputRecipe) -> np.ndarray:
    """The texts a JOINED recipe reads: description and context as one text; OccCANINE's
    inputs with the context first cut to its 128 characters as written (before spelling)."""
    if recipe.language == "literal":
        langs = np.broadcast_to(np.asarray(langs, dtype=object), (len(descriptions),))
        written = _lengths([lang if lang != "" else UNKNOWN_LANGUAGE for lang in langs])
        room = recipe.max_len - 2 - len("[SEP]") - written - _lengths(descriptions)
        contexts = [c[: max(r, 0)] for c, r in zip(contexts, room)]
    return np.asarray([d + c for d, c in zip(descriptions, contexts)], dtype=object)


def context_note(fit: np.ndarray, ids, training: bool) -> Optional[str]:
    """One line on the rows whose context was cut to fit the model's input (`fit` from
    `fitted`, or the counts (cut, over)), naming what makes room; None when none was."""
    cut, over = (
        (int(np.count_nonzero(fit)), int(np.count_nonzero(fit == DESCRIPTION_CUT)))
        if isinstance(fit, np.ndarray)
        else fit
    )
    if not cut:
        return None
    recipe = ids.recipe
    if recipe.language == "literal":
        limit, remedy = f"OccCANINE's {recipe.max_len} characters", ""
    elif training:
        limit, remedy = (
            f"--max-len {recipe.max_len} ({ids.unit})",
            "; pass a larger --max-len to make room",
        )
    else:
        limit = f"the {recipe.max_len} {ids.unit} the model reads (its --max-len)"
        remedy = "; a model trained with a larger --max-len makes room"
    alone = (
        f"; in {over} of them the description alone is longer and was cut, the context left out"
        if over
        else ""
    )
    return f"the context of {cut} row(s) was cut from its end to fit {limit}{alone}{remedy}"


# ------------------------------------------------------------------ tokenisers
class CanineIds:
    """CANINE's ids, vectorised: [CLS] + code points (cut to max_len - 2) + [SEP];
    a pair is [CLS] + first + [SEP] + second + [SEP] with only the second cut."""

    kind = "canine"
    unit = "characters"
    pad_id = 0

    def __init__(self, recipe: InputRecipe):
        self.recipe = recipe

    def encode(self, texts, langs, desc_chars=None) -> tuple[np.ndarray, np.ndarray]:
        return self.fitted(texts, langs, desc_chars)[:2]

    def fitted(self, texts, langs, desc_chars=None) -> tuple:
        """(ids, lengths, fit per row); desc_chars: per row, the characters of the text that
        are its description (the rest is context), None without context."""
        if desc_chars is None:
            return (
                *_code_point_ids(self._strings(texts, langs), self.recipe.max_len),
                np.full(len(texts), FITS, dtype=np.int8),
            )
        descriptions, contexts = split_context(texts, desc_chars)
        heads = self._strings(descriptions, langs)
        tails = _spelled(contexts, self.recipe, strip=False)
        room = max(self.recipe.max_len - 2, 0)
        head_lengths, tail_lengths = _lengths(heads), _lengths(tails)
        if self.recipe.context_fit == JOINED:
            strings = self._strings(_joined(descriptions, contexts, langs, self.recipe), langs)
        else:
            keep = np.clip(room - head_lengths, 0, tail_lengths)
            strings = [h + t[:k] for h, t, k in zip(heads, tails, keep)]
        return (
            *_code_point_ids(strings, self.recipe.max_len),
            _fit_of(head_lengths, tail_lengths, room),
        )

    def _strings(self, texts, langs) -> np.ndarray:
        first, second = model_strings(texts, langs, self.recipe)
        if second is not None:  # a pair: join with CANINE's [SEP]; only the text is ever cut
            has = np.array([s is not None for s in second])
            first = np.where(has, first + chr(CANINE_SEP) + np.where(has, second, ""), first)
        return first


def _code_point_ids(strings, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    strings = [str(s) for s in strings]
    n = len(strings)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    points = np.frombuffer("".join(strings).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    keep = np.minimum(lengths, max(max_len - 2, 0))
    out_lengths = keep + 2
    out_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(out_lengths[:-1], out=out_starts[1:])
    ids = np.empty(int(out_lengths.sum()), dtype=np.int32)
    ids[out_starts] = CANINE_CLS
    ids[out_starts + out_lengths - 1] = CANINE_SEP
    src_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=src_starts[1:])
    kept = int(keep.sum())
    keep_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(keep[:-1], out=keep_starts[1:])
    within = np.arange(kept, dtype=np.int64) - np.repeat(keep_starts, keep)
    ids[np.repeat(out_starts + 1, keep) + within] = points[np.repeat(src_starts, keep) + within]
    return ids, out_lengths.astype(np.int32)


class BackendIds:
    """A fast tokenizer's Rust backend: texts encoded in batches on every core, alone and
    without special tokens. Each row is then laid out in numpy by the tokenizer's own
    template for a text (`[CLS] text [SEP]`) or a pair (`[CLS] lang [SEP] text [SEP]`),
    taken from the tokenizer for each language once. A text has the same tokens alone
    as second of a pair, and the text is what gets cut, as truncation='only_second' does;
    encoding pairs directly ran at half the speed. A context is encoded apart (each distinct
    one once) and follows the description's tokens."""

    kind = "tokenizers"
    unit = "tokens"
    SENTINEL = "x"

    def __init__(self, backend, recipe: InputRecipe, pad_id: int = 0):
        self.recipe = recipe
        self.pad_id = pad_id
        self.backend = backend
        self.backend.no_padding()
        self.backend.no_truncation()
        self._templates: dict = {}

    @classmethod
    def from_file(cls, tokenizer_json: str, recipe: InputRecipe, pad_id: int = 0) -> "BackendIds":
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(tokenizer_json), recipe, pad_id)

    def _template(self, first: Optional[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids before the text, ids after it) for a text alone (first None) or after `first`."""
        if first not in self._templates:
            alone = self.backend.encode(self.SENTINEL, add_special_tokens=False).ids
            whole = (
                self.backend.encode(self.SENTINEL, add_special_tokens=True)
                if first is None
                else self.backend.encode(first, self.SENTINEL, add_special_tokens=True)
            ).ids
            at = max(
                i for i in range(len(whole) - len(alone) + 1) if whole[i : i + len(alone)] == alone
            )  # the text is the last occurrence
            self._templates[first] = (
                np.asarray(whole[:at], dtype=np.int32),
                np.asarray(whole[at + len(alone) :], dtype=np.int32),
            )
        return self._templates[first]

    def _token_lists(self, strings) -> list:
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [e.ids for e in encode([str(t) for t in strings], add_special_tokens=False)]

    def _texts(self, texts, langs) -> tuple:
        """(each row's text tokens, the row's template index, the templates)."""
        first, second = model_strings(texts, langs, self.recipe)
        if second is None:
            row_texts, row_firsts = first, np.full(len(first), None, dtype=object)
        else:
            has = np.array([s is not None for s in second], dtype=bool)
            row_texts = np.where(has, second, first)
            row_firsts = np.where(has, first, None)
        kinds, kind_of_row = np.unique(
            np.asarray([f if f is not None else "\x00" for f in row_firsts], dtype=object),
            return_inverse=True,
        )
        templates = [self._template(None if k == "\x00" else k) for k in kinds]
        return self._token_lists(row_texts), kind_of_row.reshape(-1), templates

    def encode(self, texts, langs, desc_chars=None) -> tuple[np.ndarray, np.ndarray]:
        return self.fitted(texts, langs, desc_chars)[:2]

    def fitted(self, texts, langs, desc_chars=None) -> tuple:
        """(ids, lengths, fit per row); desc_chars as CanineIds.fitted's."""
        if desc_chars is None:
            return (
                *self._layout(*self._texts(texts, langs)),
                np.full(len(texts), FITS, dtype=np.int8),
            )
        descriptions, contexts = split_context(texts, desc_chars)
        rows, kind_of_row, templates = self._texts(descriptions, langs)
        room = self.recipe.max_len - self._around(kind_of_row, templates)
        head_lengths = _lengths(rows)
        # factorised as objects: a fixed-width copy would cost every row the longest context
        inverse, distinct = pd.factorize(
            pd.Series(_spelled(contexts, self.recipe, strip=False), dtype=object).astype(str)
        )
        distinct = np.asarray(distinct, dtype=object)
        tail_of = self._token_lists(distinct)
        inverse = inverse.reshape(-1)
        tail_lengths = _lengths(tail_of)[inverse]
        fit = _fit_of(head_lengths, tail_lengths, room)
        if self.recipe.context_fit == JOINED:
            return (
                *self._layout(
                    *self._texts(_joined(descriptions, contexts, langs, self.recipe), langs)
                ),
                fit,
            )
        keep = np.clip(room - head_lengths, 0, tail_lengths)
        rows = [row + tail_of[t][:k] for row, t, k in zip(rows, inverse, keep)]
        return (*self._layout(rows, kind_of_row, templates), fit)

    @staticmethod
    def _around(kind_of_row, templates) -> np.ndarray:
        """Per row, the template's ids before and after its text."""
        return np.asarray([len(t[0]) + len(t[1]) for t in templates], dtype=np.int64)[kind_of_row]

    def _layout(
        self, rows: list, kind_of_row: np.ndarray, templates: list
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each row's text tokens in its template, cut to max_len."""
        text_lengths = _lengths(rows)
        text_ids = np.fromiter(
            itertools.chain.from_iterable(rows), dtype=np.int32, count=int(text_lengths.sum())
        )
        before = np.asarray([len(t[0]) for t in templates], dtype=np.int64)[kind_of_row]
        after = np.asarray([len(t[1]) for t in templates], dtype=np.int64)[kind_of_row]
        keep = np.minimum(text_lengths, np.maximum(self.recipe.max_len - before - after, 0))
        lengths = before + keep + after
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        ids = np.empty(int(lengths.sum()), dtype=np.int32)
        for k, (head, tail) in enumerate(templates):  # the special tokens, per template
            mine = np.flatnonzero(kind_of_row == k)
            for i, token in enumerate(head):
                ids[starts[mine] + i] = token
            for i, token in enumerate(tail):
                ids[starts[mine] + before[mine] + keep[mine] + i] = token
        text_starts = np.zeros(len(text_lengths), dtype=np.int64)
        np.cumsum(text_lengths[:-1], out=text_starts[1:])
        keep_starts = np.zeros(len(keep), dtype=np.int64)
        np.cumsum(keep[:-1], out=keep_starts[1:])
        within = np.arange(int(keep.sum()), dtype=np.int64) - np.repeat(keep_starts, keep)
        ids[np.repeat(starts + before, keep) + within] = text_ids[
            np.repeat(text_starts, keep) + within
        ]
        return ids, lengths.astype(np.int32)


def token_ids_for(tokenizer, model_type: str, recipe: InputRecipe):
    """The tokeniser for an encoder: CANINE's vectorised ids, a fast tokenizer's
    backend, or (for slow-only tokenizers) transformers' own, row by row."""
    if model_type == "canine":
        return CanineIds(recipe)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        from tokenizers import Tokenizer

        return BackendIds(Tokenizer.from_str(backend.to_str()), recipe, tokenizer.pad_token_id or 0)
    return SlowIds(tokenizer, recipe)


class SlowIds:
    """Any other transformers tokenizer (no fast version), row by row: slow, but right. A
    context rides on the text, which truncation cuts from its end: the description whole
    where it fits, the context cut from its end."""

    kind = "transformers"
    unit = "tokens"

    def __init__(self, tokenizer, recipe: InputRecipe):
        self.tokenizer = tokenizer
        self.recipe = recipe
        self.pad_id = tokenizer.pad_token_id or 0

    def encode(self, texts, langs, desc_chars=None):
        return self.fitted(texts, langs, desc_chars)[:2]

    def fitted(self, texts, langs, desc_chars=None) -> tuple:
        """(ids, lengths, fit per row); desc_chars as CanineIds.fitted's."""
        fit = np.full(len(texts), FITS, dtype=np.int8)
        if desc_chars is not None:
            descriptions, contexts = split_context(texts, desc_chars)
            heads = [len(row) for row in self._rows(descriptions, langs, None)]
            tails = [
                len(self.tokenizer(str(c), add_special_tokens=False)["input_ids"]) if c else 0
                for c in _spelled(contexts, self.recipe, strip=False)
            ]
            fit = _fit_of(
                np.asarray(heads, dtype=np.int64),
                np.asarray(tails, dtype=np.int64),
                self.recipe.max_len,
            )
            if self.recipe.context_fit == JOINED:
                texts = _joined(descriptions, contexts, langs, self.recipe)
        rows = self._rows(texts, langs, self.recipe.max_len)
        lengths = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
        return (
            np.fromiter(itertools.chain.from_iterable(rows), np.int32, int(lengths.sum())),
            lengths,
            fit,
        )

    def _rows(self, texts, langs, max_len: Optional[int]) -> list:
        first, second = model_strings(texts, langs, self.recipe)
        cut = dict(max_length=max_len) if max_len else {}
        rows = []
        for a, b in zip(first, second if second is not None else itertools.repeat(None)):
            if b is None:
                rows.append(self.tokenizer(str(a), truncation=bool(max_len), **cut)["input_ids"])
            else:
                rows.append(
                    self.tokenizer(
                        str(a), str(b), truncation="only_second" if max_len else False, **cut
                    )["input_ids"]
                )
        return rows


PROBE = (
    [
        "farmer and fisher",
        "Bäcker und Müller",
        "農夫",
        "fisherman 🎣",
        "",
        "x" * 600,
        "  spaced  out  ",
    ],
    ["en", "unk", "unk", "da", "en", "unk", "ge"],
)


def tag_of(ids) -> str:
    """Names a tokeniser's cache by what it does: its kind, recipe and the ids it gives
    a fixed set of awkward rows. A tokenizer read from tokenizer.json (no torch) and the
    same tokenizer loaded by transformers share one cache."""
    probe_ids, probe_lengths = ids.encode(
        np.asarray(PROBE[0], dtype=object), np.asarray(PROBE[1], dtype=object)
    )
    recipe = ids.recipe.to_dict()
    if recipe.get("context_fit") == DESCRIPTION_WHOLE:  # the rule of today's runs: the caches
        del recipe["context_fit"]  # built before it (same ids for rows that fit) stay valid
    text = json.dumps(
        [ids.kind, recipe, probe_ids.tolist(), probe_lengths.tolist()], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def encode_in_chunks(ids, texts, langs, chunk_rows: int = CHUNK_ROWS):
    """Yield (ids, lengths) of consecutive chunks of rows."""
    for start in range(0, len(texts), chunk_rows):
        yield ids.encode(texts[start : start + chunk_rows], langs[start : start + chunk_rows])

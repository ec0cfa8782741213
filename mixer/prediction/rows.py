"""The rows a caller of the Python API passes, as the model reads them: texts (a string, a
list or a pandas Series, whose index the result keeps), one language or one per row, the
context columns; the rows without a description; one value or one per row paired with the
texts by index or position. mixer.prediction.api.Model's methods read their rows here.
"""

from __future__ import annotations

import sys
from typing import Iterable, Union

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.data.tables.job_columns import blank_descriptions, job_columns

Texts = Union[str, Iterable[str], pd.Series]
Languages = Union[None, str, Iterable[str], pd.Series]
Context = Union[None, pd.DataFrame, dict]


def read_rows(
    model, texts: Texts, lang: Languages, context: Context, say_fit: bool = True
) -> tuple:
    """(the rows' index, texts, languages, characters of each text that are its description
    or None without context): a Series keeps its index in the result."""
    from mixer.data.labels.normalise import model_input

    if isinstance(texts, str):
        texts = [texts]
    if not is_list_like(texts):
        raise UserError(f"texts={texts!r}: pass a string, a list of strings or a pandas Series")
    index = texts.index if isinstance(texts, pd.Series) else None
    if index is not None:  # a Series and a DataFrame beside it pair rows by index, as in pandas
        lang = aligned("lang", lang, index)
        context = aligned("context", context, index)
    texts = pd.Series(list(texts), dtype=object).where(lambda s: s.notna(), "").astype(str)
    index = index if index is not None else texts.index
    if lang is None:
        lang = model.predictor.config.get("language") or "unk"
    if isinstance(lang, str):
        langs = np.full(len(texts), lang.strip(), dtype=object)
    elif not is_list_like(lang):
        raise UserError(f"lang={lang!r}: pass a language code ('en'), one per text, or None")
    else:  # as training and predict.py read a language column: missing -> '', stripped
        langs = pd.Series(list(lang), dtype=object)
        langs = np.asarray(langs.where(langs.notna(), "").astype(str).str.strip(), dtype=object)
        if len(langs) != len(texts):
            raise UserError(f"lang has {len(langs)} values for {len(texts)} texts")
    if say_fit and model.says_languages:
        note = language_line(model, langs, "lang")
        if note:
            print(note, file=sys.stderr)
    columns = job_columns(model.predictor.config).context_cols  # the job's rule: the run's own
    if context is not None and not columns:
        raise UserError("context= was given but this model reads no context columns; leave it out")
    frame = None
    if columns:
        if context is None:
            raise UserError(
                f"this model reads context columns {', '.join(columns)}: pass "
                "context= (a DataFrame or a dict of lists)"
            )
        frame = pd.DataFrame(context).reset_index(drop=True)
        missing = [c for c in columns if c not in frame.columns]
        if missing or len(frame) != len(texts):
            raise UserError(f"context needs columns {', '.join(columns)} with one value per text")
    texts, desc_chars = model_input(texts, frame, columns)
    texts = texts.to_numpy(dtype=object)
    if desc_chars is not None and say_fit and model.says_context_fit:
        from mixer.data.inputs.tokens import context_note

        note = context_note(
            model.predictor.context_fit(texts, langs, desc_chars),
            model.predictor.token_ids,
            training=False,
        )
        if note:
            print(f"note: {note}", file=sys.stderr)
    return index, texts, langs, desc_chars


def blank_rows(model, texts: Texts) -> tuple:
    """(texts, the rows without a description: empty, spaces or missing, nothing to code),
    an iterator read into a list. Their number is said on stderr unless the caller counts
    them itself."""
    if is_list_like(texts) and not isinstance(texts, (pd.Series, list, tuple, np.ndarray)):
        texts = list(texts)
    values = [texts] if isinstance(texts, str) else texts if is_list_like(texts) else []
    blank = blank_descriptions(pd.Series(list(values), dtype=object))
    if blank.any() and model.note_blank:
        print(
            f"note: {int(blank.sum()):,} row(s) without a description (empty or spaces): no code, "
            "prob empty",
            file=sys.stderr,
        )
    return texts, blank


def language_line(model, langs, where: str) -> str:
    """One line on rows whose language the model never trained with ('' when none, or
    when the model's training languages are not known)."""
    from mixer.coding.target import language_note

    if not len(langs):
        return ""
    values, counts = np.unique(np.asarray(langs, dtype=object).astype(str), return_counts=True)
    return language_note(model, dict(zip(values.tolist(), counts.tolist())), where)


def per_row(name: str, value, index: pd.Index) -> pd.Series:
    """One value for every row, or one per row (a Series paired by index, a list by
    position), as a Series in the rows' order."""
    if isinstance(value, str) or not is_list_like(value):
        return pd.Series([value] * len(index), dtype=object)
    values = pd.Series(list(aligned(name, value, index)), dtype=object)
    if len(values) != len(index):
        raise UserError(f"{name}= has {len(values)} values for {len(index)} texts")
    return values


def aligned(name: str, value, index: pd.Index):
    """A Series or DataFrame given beside a Series of texts, in the texts' row order
    (matched by index label); anything else as it is (by position)."""
    if not isinstance(value, (pd.Series, pd.DataFrame)) or value.index.equals(index):
        return value
    if (
        index.is_unique
        and value.index.is_unique
        and len(value.index) == len(index)
        and value.index.isin(index).all()
    ):
        return value.reindex(index)
    extra = [label for label in value.index[:50] if label not in index][:3]
    missing = [label for label in index[:50] if label not in value.index][:3]
    detail = "; ".join(
        part
        for part in (
            f"it has {extra}, which the texts lack" if extra else "",
            f"it lacks {missing}" if missing else "",
        )
        if part
    )
    raise UserError(
        f"{name}'s index does not match the texts' index ({detail or 'repeated labels'}): "
        f"give {name} the texts' index, or pass plain lists to pair rows by position"
    )


def is_list_like(value) -> bool:
    return pd.api.types.is_list_like(value) and not isinstance(value, (dict, pd.DataFrame))

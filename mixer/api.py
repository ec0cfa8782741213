"""The Python API: a model in a notebook.

    import mixer
    m = mixer.load("runs/quickstart")                   # or an OccCANINE model / hub id
    m.predict(["farmer and fisher", "smith"], lang="en")  # a pandas.DataFrame
    m.embeddings(["farmer"], lang="en")                 # numpy array (rows, hidden)
    m.codes                                             # the key: code, description

predict.py is a shell over this module: the same columns and values.
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

import numpy as np
import pandas as pd

from mixer.errors import UserError
from mixer.predict import Predictor

Texts = Union[str, Iterable[str], pd.Series]
Languages = Union[None, str, Iterable[str], pd.Series]
Context = Union[None, pd.DataFrame, dict]


class Model:
    """A trained model: a run directory of this tool or an OccCANINE model."""

    def __init__(self, predictor: Predictor, source: str):
        self._predictor = predictor
        self.source = source

    @property
    def family(self) -> str:
        """'mixer' or 'occcanine' (mixer.model)."""
        return self._predictor.family

    @property
    def codes(self) -> pd.DataFrame:
        """The label key: code and description, in the order of the flat head."""
        return pd.DataFrame({"code": self._predictor.codes, "description": self._predictor.descriptions})

    @property
    def config(self) -> dict:
        return dict(self._predictor.config)

    def predict(self, texts: Texts, lang: Languages = None, top_k: Optional[int] = None,
                head: str = "flat", threshold: Optional[float] = None, context: Context = None,
                batch_size: int = 256) -> pd.DataFrame:
        """Codes for texts: code_k, prob_k and (when the key has them) desc_k, k = 1 .. top_k.

        texts: a string, a list or a pandas Series. lang: one language for all rows
        ('en'), one per row, or None for the model's own default. head: 'flat',
        'seq2seq' (greedy decoding) or 'full' (every code of the key scored by the
        decoder). threshold: the flat/full threshold (default: the model's; by
        language for OccCANINE's models). context: the context columns the model was
        trained with (a DataFrame or a dict of lists), when it has any."""
        texts, langs = self._inputs(texts, lang, context)
        return self._predictor.predict(texts, langs, head, top_k, threshold, batch_size)

    def embeddings(self, texts: Texts, lang: Languages = None, context: Context = None,
                   batch_size: int = 256) -> np.ndarray:
        """The pooled encoder output the flat head reads: (rows, hidden), float32."""
        texts, langs = self._inputs(texts, lang, context)
        return self._predictor.embeddings(texts, langs, batch_size)

    def _inputs(self, texts: Texts, lang: Languages, context: Context) -> tuple:
        from mixer.data import with_context

        if isinstance(texts, str):
            texts = [texts]
        texts = pd.Series(list(texts), dtype=object).where(lambda s: s.notna(), "").astype(str)
        if lang is None:
            lang = self._predictor.config.get("language") or "unk"
        if isinstance(lang, str):
            langs = np.full(len(texts), lang, dtype=object)
        else:
            langs = np.asarray(pd.Series(list(lang), dtype=object).fillna("unk").astype(str), dtype=object)
            if len(langs) != len(texts):
                raise UserError(f"lang has {len(langs)} values for {len(texts)} texts")
        columns = self._predictor.config.get("context_cols") or []
        if columns:
            if context is None:
                raise UserError(f"this model reads context columns {', '.join(columns)}: pass "
                                "context= (a DataFrame or a dict of lists)")
            frame = pd.DataFrame(context).reset_index(drop=True)
            missing = [c for c in columns if c not in frame.columns]
            if missing or len(frame) != len(texts):
                raise UserError(f"context needs columns {', '.join(columns)} with one value per text")
            texts = with_context(texts, frame, columns)
        return texts.to_numpy(dtype=object), langs

    def __repr__(self) -> str:
        return f"mixer.Model({self.source!r}, family={self.family!r}, codes={len(self._predictor.codes)})"


def load(source: str, device: Optional[str] = None, precision: str = "fp32",
         force_precision: bool = False) -> Model:
    """A model from a run directory of this tool, an OccCANINE hub directory or
    training checkpoint, or a hub id (e.g. 'Christianvedel/OccCANINE_s2s_mix').
    device: None for cuda:0 when there is a GPU, else the CPU."""
    return Model(Predictor.load(source, device, precision, force_precision), source)

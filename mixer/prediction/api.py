"""The Python API: a model in a notebook.

    import mixer
    m = mixer.load("runs/quickstart")                   # or an OccCANINE model / hub id
    m.predict(["farmer and fisher", "smith"], lang="en")  # a pandas.DataFrame
    m.embeddings(["farmer"], lang="en")                 # numpy array (rows, hidden)
    m.codes                                             # the key: code, description
    m.audit(frame, 200, "audit.csv")                    # a random sample to check by hand

predict.py is a shell over this module: the same columns and values. A method's keywords are
predict.py's options by their field names, checked by the flags' own checks
(mixer.prediction.keywords); a check further down is handed the Model's `names`
(mixer.core.naming) and names the keyword itself. The row steps after the model are one
object, mixer.coding.pipeline.CodingPipeline; the rows a caller passes are read by
mixer.prediction.rows; a target by mixer.coding.targeting; the other shapes of a prediction
are mixer.prediction.outputs'.
"""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np
import pandas as pd

from mixer.coding import targeting
from mixer.coding.pipeline import CodingPipeline
from mixer.core.errors import UserError
from mixer.core.naming import FLAGS, KEYWORDS, Names
from mixer.prediction import classes, keywords, outputs, rows
from mixer.prediction.keywords import RENAMED, one_head  # noqa: F401 - RENAMED: its earlier home
from mixer.prediction.predict import Predictor
from mixer.prediction.rows import Context, Languages, Texts


class Model:
    """A trained model: a run directory of this tool or an OccCANINE model."""

    def __init__(
        self,
        predictor: Predictor,
        source: str,
        note_blank: bool = True,
        says_context_fit: bool = True,
        says_languages: bool = True,
        names: Names = FLAGS,
    ):
        """note_blank, says_context_fit, says_languages: whether a call says on stderr how
        many rows have no description, how their context fits, which languages the model
        never trained with (predict.py counts them over its chunks and says them once).
        names: how its messages name options (predict.py's flags; load(): the keywords)."""
        self._predictor = predictor
        self.source = source
        self.note_blank, self.says_context_fit = note_blank, says_context_fit
        self.says_languages, self.names = says_languages, names
        self._noted = set()  # targets whose rows to code were said to differ, once each

    @property
    def predictor(self) -> Predictor:
        """What predicts: the network, its key and its thresholds (mixer.prediction.predict)."""
        return self._predictor

    @property
    def family(self) -> str:
        """'mixer' or 'occcanine' (mixer.models.model)."""
        return self._predictor.family

    @property
    def codes(self) -> pd.DataFrame:
        """The label key: code and description, in the order of the flat head."""
        return pd.DataFrame(
            {"code": self._predictor.codes, "description": self._predictor.descriptions}
        )

    @property
    def config(self) -> dict:
        return dict(self._predictor.config)

    def predict(
        self,
        texts: Texts,
        language: Languages = None,
        top_k: Optional[int] = None,
        head: Optional[str] = None,
        threshold: Optional[float] = None,
        context: Context = None,
        batch_size: Optional[int] = None,
        what: Optional[str] = None,
        columns: Optional[str] = None,
        system: Optional[str] = None,
        lookup=None,
        target=None,
        *,
        target_accuracy: Optional[float] = None,
        target_confidence: Optional[float] = None,
        calibration_data=None,
        calibration_truth_cols=None,
        shorter_codes: Optional[bool] = None,
        code_levels=None,
        target_level=None,
        crosswalk=None,
        status=None,
        relation=None,
        product=None,
        **renamed,
    ) -> pd.DataFrame:
        """Codes for texts: code_k, prob_k and (when the key has them) desc_k, k = 1 .. top_k,
        and each row's `confidence` (calibrated when the model has a calibration.json, then
        with `confidence_raw` beside it). The keywords are predict.py's options by their names
        (top_k for --top-k), checked as its flags are; None: predict.py's default; `lang` is
        the earlier name of `language` (docs/python-api.md has each keyword).

        texts: a string, a list or a pandas Series (the result keeps its index; a language or
        context Series/DataFrame beside it is paired by index, lists by position). A row
        without a description gets no code. what: 'codes' or a matrix ('probs', 'logits',
        'bin'); columns='occcanine': OccCANINE's names. lookup: a path or Model.lookup's
        result. target: Model.target's result, or target_accuracy= (with its companions) to
        choose one here as predict.py does for a file of these rows. crosswalk (with status,
        relation, product): each code's class beside it (docs/classes.md)."""
        asked = keywords.given("predict", locals())
        head = one_head(asked.head)
        formatter = self._predictor.formatter
        walks = classes.for_api(asked.crosswalk, asked.what, formatter, status, relation, product)
        outputs.check_api(self._predictor, asked, head)
        if asked.what != "codes" or asked.columns != "mixer":
            targeting.for_predict(self, asked, texts, context, None, None, self._noted)
            if lookup is not None or target is not None:
                raise UserError(
                    "lookup= and target= give the code table; leave out what= and columns="
                )
            table = outputs.api_table(self, texts, context, asked, head)
        else:
            lookup = self.lookup(lookup) if isinstance(lookup, str) else lookup
            target = targeting.for_predict(self, asked, texts, context, lookup, target, self._noted)
            pipeline = CodingPipeline(
                self, head, asked.top_k, asked.threshold, lookup, target, self.names
            )
            targeting.note_uncounted(target, self._noted)
            table = self.code_table(texts, asked.language, context, pipeline, asked.batch_size)
        if not walks:
            return table
        stem = (
            outputs.system_name(self._predictor, asked.system)
            if asked.columns == "occcanine"
            else "code"
        )
        index = texts.index if isinstance(texts, pd.Series) else table.index
        picks = {"status": status, "relation": relation, "product": product}
        return classes.add_for_api(table, walks, stem, index, picks)

    def code_table(
        self, texts: Texts, lang: Languages, context: Context, pipeline, batch_size: int = 256
    ) -> pd.DataFrame:
        """The code table of these rows through a coding pipeline built once for them
        (mixer.coding.pipeline.CodingPipeline: the lookup, calibration, target marks, shorter
        codes), no keyword checked again: predict.py's file job calls it per chunk."""
        texts, blank = rows.blank_rows(self, texts)
        index, texts, langs, desc_chars = self.read_inputs(texts, lang, context)
        entries = None  # a lookup's entry of each row, matched before predicting
        if pipeline.lookup is not None:
            entries = pipeline.entries(self.reading_keys(texts, langs), langs)
        table = self._predictor.predict(
            texts,
            langs,
            pipeline.head,
            pipeline.top_k,
            pipeline.threshold,
            batch_size,
            pipeline.scored_levels,
            desc_chars=desc_chars,
        )
        return pipeline.code(table, entries, blank).set_axis(index)

    def scaling(self, head: str) -> tuple:
        """The head's calibration (temperature, bias) from its model directory's
        calibration.json; (1.0, 0.0) without one."""
        return self._predictor.calibration.get(head, (1.0, 0.0))

    def temperature(self, head: str) -> float:
        """The head's calibration temperature (1.0 without one); its bias: scaling()."""
        return self.scaling(head)[0]

    def lookup(
        self,
        path: str,
        input_col: Optional[str] = None,
        code_cols=None,
        language_col: Optional[str] = None,
        options=None,
        log=None,
    ):
        """A lookup table (mixer.coding.lookup): a filled --to-check file, a filled audit,
        or a coding dictionary with `input_col` and `code_cols` (without code_cols: a table
        with the model's own input and target columns); read by the one reader with
        `options` (a mixer.core.config.TableOptions of role 'lookup'). log: where its lines
        go (how it was read, codes the model's key lacks); default stderr."""
        from mixer.coding.lookup import read_for
        from mixer.core.config import TableOptions

        return read_for(
            self,
            path,
            input_col,
            code_cols,
            language_col,
            options or TableOptions(role="lookup", keyword="options"),  # its lines: options=
            log=log or (lambda m: print(m, file=sys.stderr)),
            names=self.names.with_own(lookup_input_col="input_col", lookup_code_cols="code_cols"),
        )

    def target(
        self,
        target_accuracy: Optional[float] = None,
        target_confidence: Optional[float] = None,
        head: Optional[str] = None,
        calibration_data=None,
        calibration_truth_cols=None,
        lookup=None,
        shorter_codes: Optional[bool] = None,
        rows_to_code=None,
        top_k: Optional[int] = None,
        threshold: Optional[float] = None,
        input_col: Optional[str] = None,
        language=None,
        language_col: Optional[str] = None,
        batch_size: Optional[int] = None,
        options=None,
        code_levels=None,
        target_level=None,
        **renamed,
    ):
        """A threshold for `head` at which the coded rows reach `target_accuracy` with
        probability `target_confidence` on new rows like the labelled ones (docs/coding.md).
        The keywords are predict.py's options by their names, checked as its flags are; None:
        predict.py's default. calibration_data: None for the run's held-out rows
        (scores.parquet, chose == False), or a path to labelled rows of your own (true codes in
        `calibration_truth_cols`, or a filled simple random audit). lookup: rows it covers are
        left out. rows_to_code: the rows that will be coded (a count, or the texts), whose own
        sampling error is then covered too, as predict.py counts its input's rows: without it
        the promise is of the population the labelled rows come from. shorter_codes: a row whose
        codes miss the threshold may get them cut to a coarser class (`code_levels`: prefix
        lengths; default the code system's). language: the language the rows to code are
        predicted with; the run's own rows (a run without a language column) are predicted with
        it too. A labelled file's rows the model trained on are left out, or the file refused
        (docs/coding.md, "Rows the model trained on"). Pass the result to predict(target=...), or pass
        target_accuracy= to predict(), which counts the rows as predict.py does.
        target_level: 'code' (the default), a crosswalk's name or table, or a list of them: the
        accuracy counted at each level, each with its own threshold (the result's also holds
        the others; docs/coding.md). Earlier names: accuracy, confidence, labelled, truth_cols,
        lang, levels."""
        asked = keywords.given("target", locals())
        if asked.target_accuracy is None:
            raise UserError("target(): pass target_accuracy, e.g. model.target(0.95)")
        head, predictor, names = one_head(asked.head), self._predictor, self.names
        shorter = asked.shorter_codes
        targeting.check_asked(
            asked.target_accuracy, asked.target_confidence, head, predictor, shorter, names
        )
        at = targeting.target_levels(predictor, asked.target_level, head, shorter, names)
        lookup = self.lookup(lookup) if isinstance(lookup, str) else lookup
        return targeting.choose_for(self, asked, head, at, lookup, rows_to_code, options, names)

    def levels(self) -> list:
        """The prefix lengths of the model's code system's coarser classes (mixer.coding.levels)."""
        from mixer.coding.levels import levels_for

        block = self._predictor.formatter.block_size
        return [n for n in levels_for(self._predictor.formatter.kind) if n < block]

    def audit(
        self,
        frame: pd.DataFrame,
        n: Optional[int] = None,
        path: Optional[str] = None,
        *,
        audit_margin: Optional[float] = None,
        audit_by: Optional[str] = None,
        audit_unit: Optional[str] = None,
        audit_seed: Optional[int] = None,
        input_col: Optional[str] = None,
        language: Languages = None,
        language_col: Optional[str] = None,
        head: Optional[str] = None,
        threshold: Optional[float] = None,
        top_k: Optional[int] = None,
        batch_size: Optional[int] = None,
        **renamed,
    ) -> pd.DataFrame:
        """A random sample of the rows of `frame`, predicted, to check by hand: what
        predict.py --audit writes (docs/evaluation.md, "Audits"), returned as a DataFrame
        and, with `path` (.csv, .xlsx, .parquet), written there for evaluate.py --audit.
        The keywords are predict.py's options by their names, checked as its flags are;
        None: predict.py's default. Earlier names: margin, by, unit, seed, lang.

        n rows, or with `audit_margin` the fewest rows whose 95% interval reaches at most
        that margin from the estimate on either side at the accuracy the model expects (with
        `audit_by`, each stratum's, for the design). audit_by: a column of `frame` to stratify
        by. audit_unit: 'rows' or 'descriptions' (the rows drawn, collapsed to distinct
        descriptions). input_col, language / language_col: as predict.py's (default: the
        model's)."""
        from mixer.audit.draw import NOT_WRITTEN, AuditRequest, audit_frame

        asked = keywords.given("audit", locals())
        request = AuditRequest(
            path or NOT_WRITTEN,
            n,
            asked.audit_margin,
            asked.audit_by,
            asked.audit_unit,
            asked.audit_seed,
            names=self.names,
        ).check()
        return audit_frame(self, frame, request, asked, one_head(asked.head))

    def alternatives(
        self,
        texts: Texts,
        lang: Languages = None,
        k: int = 3,
        context: Context = None,
        batch_size: int = 256,
        columns: str = "mixer",
        system: Optional[str] = None,
    ) -> pd.DataFrame:
        """Greedy top-k: k different code sets the decoder writes for each text, each with its
        confidence (the product of its steps' probabilities), as OccCANINE's greedy-topk.
        A long table, k rows per text in input order: alternative (1..k), code_1.., prob,
        desc_.. (columns='occcanine': <system>_i, desc_i, top-k-pos from 0, conf). The
        result's index repeats each text's index k times."""
        return outputs.api_alternatives(self, texts, lang, k, context, batch_size, columns, system)

    def model_inputs(
        self, texts: Texts, lang: Languages = None, context: Context = None
    ) -> np.ndarray:
        """Per row, a key of what the model reads: its language, text and context as the
        run's input recipe spells them and its tokenizer normalises them (BERT's lower-cases
        and strips accents; mixer.data.inputs.tokens.reading_keys). Rows with equal keys get equal
        predictions; a lookup matches, a --to-check list groups and predict.py counts
        distinct inputs by it. The key is opaque: compare it, do not show it."""
        _, texts, langs, _ = self.read_inputs(texts, lang, context, say_fit=False)
        return self.reading_keys(texts, langs)

    def embeddings(
        self, texts: Texts, lang: Languages = None, context: Context = None, batch_size: int = 256
    ) -> np.ndarray:
        """The pooled encoder output the flat head reads: (rows, hidden), float32."""
        keywords.require_count("batch_size", batch_size)
        _, texts, langs, desc_chars = self.read_inputs(texts, lang, context)
        return self._predictor.embeddings(texts, langs, batch_size, desc_chars)

    def context_fit(
        self, texts: Texts, lang: Languages = None, context: Context = None
    ) -> np.ndarray:
        """Per row, whether its context fits the model's input (mixer.data.inputs.tokens.fitted)."""
        _, texts, langs, desc_chars = self.read_inputs(texts, lang, context, say_fit=False)
        if desc_chars is None:
            return np.zeros(len(texts), dtype=np.int8)
        return self._predictor.context_fit(texts, langs, desc_chars)

    def read_inputs(
        self, texts: Texts, lang: Languages, context: Context, say_fit: bool = True
    ) -> tuple:
        """(the rows' index, texts, languages, characters of each text that are its description
        or None without context), as the model reads them (mixer.prediction.rows.read_rows)."""
        return rows.read_rows(self, texts, lang, context, say_fit)

    def reading_keys(self, texts, langs) -> np.ndarray:
        """Per row of model texts and languages, the key of what the model reads
        (model_inputs; mixer.data.inputs.tokens.reading_keys)."""
        from mixer.data.inputs.tokens import reading_keys

        return reading_keys(
            self._predictor.token_ids, texts, langs, self._predictor.thresholds.table
        )

    def __repr__(self) -> str:
        return f"mixer.Model({self.source!r}, family={self.family!r}, codes={len(self._predictor.codes)})"


def load(
    source: str,
    device: Optional[str] = None,
    precision: str = "fp32",
    force_precision: bool = False,
    tf32: Optional[bool] = None,
    code_descriptions=None,
    quantize: Optional[str] = None,
) -> Model:
    """A model from a run directory of this tool, an OccCANINE hub directory or
    training checkpoint, or a hub id (e.g. 'Christianvedel/OccCANINE_s2s_mix').
    device: None for cuda:0 when there is a GPU, else the CPU. tf32: on a GPU, fp32
    matrix products in TF32, faster but approximate (about 1e-3 in probability);
    None: on for this tool's models (they train with it), off for OccCANINE's
    (exact predictions). code_descriptions: a CSV (code,description or the HISCO key
    layout), a dict or a DataFrame: descriptions of the model's codes (desc_k), for a
    model of any code system. quantize: 'int8' on a CPU, the encoder's linear layers in int8:
    approximate predictions (mixer.models.quantize); None: fp32."""
    predictor = Predictor.load(
        source, device, precision, force_precision, tf32=tf32, quantize=quantize
    )
    if code_descriptions is not None:
        from mixer.prediction.outputs import set_descriptions

        set_descriptions(predictor, code_descriptions)
    return Model(predictor, source, names=KEYWORDS)  # its messages name its keywords

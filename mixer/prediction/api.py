"""The Python API: a model in a notebook.

    import mixer
    m = mixer.load("runs/quickstart")                   # or an OccCANINE model / hub id
    m.predict(["farmer and fisher", "smith"], lang="en")  # a pandas.DataFrame
    m.embeddings(["farmer"], lang="en")                 # numpy array (rows, hidden)
    m.codes                                             # the key: code, description
    m.audit(frame, 200, "audit.csv")                    # a random sample to check by hand

predict.py is a shell over this module: the same columns and values.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import re
import sys
from typing import Iterable, Optional, Union

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.data.tables.job_columns import blank_descriptions, job_columns
from mixer.prediction.predict import Predictor

MAX_ALTERNATIVES = 50
RAW_CONFIDENCE = "confidence_raw"  # beside a calibrated confidence
Texts = Union[str, Iterable[str], pd.Series]
Languages = Union[None, str, Iterable[str], pd.Series]
Context = Union[None, pd.DataFrame, dict]


# ------------------------------------------------------------------ keywords
# the keywords of predict, target and audit are PredictConfig's fields, by their names, read
# by their flags' own checks; these names of earlier versions still work
RENAMED = {
    "lang": "language",
    "accuracy": "target_accuracy",
    "confidence": "target_confidence",
    "labelled": "calibration_data",
    "truth_cols": "calibration_truth_cols",
    "levels": "code_levels",
    "margin": "audit_margin",
    "by": "audit_by",
    "unit": "audit_unit",
    "seed": "audit_seed",
}


@functools.lru_cache(maxsize=1)
def _field_specs() -> dict:
    """{field: its flag's Spec} of predict.py's configuration."""
    from mixer.core.flags import specs
    from mixer.core.programs import PredictConfig

    return {spec.name: spec for spec in specs([PredictConfig])}


def settings(call: str, given: dict, renamed: Optional[dict] = None) -> dict:
    """The keywords of an API call as predict.py's configuration reads them: each a field of
    PredictConfig, checked by its flag's own check (mixer.core.flags.CHECKS) with a message
    that names the keyword, and where left unset (None) the field's default, the program's.
    `renamed`: keywords of earlier versions given, read under their fields' names."""
    from mixer.core.flags import checked
    from mixer.core.options import default_of
    from mixer.core.programs import PredictConfig

    given = dict(given)
    for old, value in (renamed or {}).items():
        new = RENAMED.get(old)
        if new is None or new not in given:
            raise UserError(
                f"{old}=: not a keyword of {call}(); its keywords are predict.py's options by their "
                f"names (help(mixer.api.Model.{call}))"
            )
        if given[new] is not None:
            raise UserError(
                f"{call}(): {old}= and {new}= both given; pass {new}= ({old}= is its earlier name)"
            )
        given[new] = value
    fields = {f.name: f for f in dataclasses.fields(PredictConfig)}
    specs = _field_specs()
    values = {}
    for name, value in given.items():
        spec = specs.get(name)
        if value is None:
            values[name] = default_of(fields[name]) if name in fields else None
        elif (
            spec is not None
            and (spec.type or spec.choices or spec.switch)
            and not _is_object(value)
        ):
            values[name] = checked(name, spec, value, keyword=True)
        else:
            values[name] = value
    return values


def _is_object(value) -> bool:
    """A value of the API's own (a Lookup, a DataFrame, per-row languages), which no flag reads."""
    return not isinstance(value, (str, int, float, bool, np.integer, np.floating, list, tuple))


KEYWORD = re.compile(r"--([a-z][a-z0-9-]*)(?: ((?!-)[^\s,;:()]+)(:?))?")
WORDS = set(
    "a an and as at but by for from given gives has in instead is marks needs not of on only or takes the "
    "to too was were with without works writes".split()
)  # a word after a flag: not its value
PROGRAM = re.compile(
    r"(?:predict|evaluate|finetune|train_mixer)\.py[^;)]*"
)  # a command, kept as typed


@functools.lru_cache(maxsize=1)
def api_keywords() -> dict:
    """{field: the keyword that sets it}: the fields that are keywords of predict, target and
    audit, and the lookup's own names in Model.lookup."""
    import inspect

    fields = _field_specs()
    names = {
        name: name
        for method in (Model.predict, Model.target, Model.audit)
        for name in inspect.signature(method).parameters
        if name in fields
    }
    return {**names, "lookup_input_col": "input_col", "lookup_code_cols": "code_cols"}


def keyword_message(message: str) -> str:
    """A message of the program's as the API says it: each flag that is a keyword of the API
    by its keyword (--top-k 0: -> top_k=0:, --head flat -> head='flat', --shorter-codes ->
    shorter_codes=True). Other flags (--checkpoint, --lookup-sep, finetune.py's) and commands
    (predict.py --audit N) stay as they are."""
    specs, keywords = _field_specs(), api_keywords()

    def keyword(match):
        flag, value, colon = match.group(1).replace("-", "_"), match.group(2), match.group(3) or ""
        if flag not in keywords:
            return match.group(0)
        spec, name = specs[flag], keywords[flag]
        if value is not None and not spec.switch and (colon or value.lower() not in WORDS):
            shown = value if spec.type or value.isupper() else repr(value)
            return f"{name}={shown}{colon}"
        rest = "" if value is None else f" {value}{colon}"
        return f"{name}={'True' if spec.switch else ''}{rest}"

    kept = [(m.start(), m.end()) for m in PROGRAM.finditer(message)]
    parts, at = [], 0
    for start, end in kept:
        parts += [KEYWORD.sub(keyword, message[at:start]), message[start:end]]
        at = end
    return "".join(parts + [KEYWORD.sub(keyword, message[at:])])


def says_keywords(method):
    """A public method of the API: a UserError it raises names keywords, not flags (a Model
    that predict.py made keeps the flags in its messages)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if not self._keywords:
            return method(self, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        except UserError as exc:
            raise UserError(keyword_message(str(exc))) from None

    return call


class Model:
    """A trained model: a run directory of this tool or an OccCANINE model."""

    def __init__(self, predictor: Predictor, source: str, note_blank: bool = True):
        self._predictor = predictor
        self.source = source
        self._says_context_fit = True  # predict.py counts over its chunks and says it once
        self._note_blank = note_blank  # predict.py counts them over its whole file instead
        self._keywords = False  # load() sets it: messages name keywords, not predict.py's flags
        self._noted = set()  # targets chosen without rows_to_code, said once each
        self._says_languages = (
            True  # predict.py counts languages over its chunks and says them once
        )

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

    @says_keywords
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
        """Codes for texts: code_k, prob_k and (when the key has them) desc_k, k = 1 .. top_k.

        The keywords are predict.py's options by their names (top_k for --top-k), checked as
        its flags are; None: predict.py's default (docs/python-api.md). `lang` is the earlier
        name of `language`.

        texts: a string, a list or a pandas Series (the result keeps its index). language:
        one language for all rows ('en'), one per row, or None for the model's own
        default. head: 'flat', 'seq2seq' (or 'greedy': greedy decoding) or 'full' (every code of the key scored by the
        decoder). threshold: the flat/full threshold, unused by seq2seq (default: the model's; by
        language for OccCANINE's models). context: the context columns the model was
        trained with (a DataFrame or a dict of lists), when it has any. When texts is a
        Series, a lang Series and a context DataFrame are matched to it by index (a
        different index is an error); lists and dicts of lists go by position.

        what: 'codes' (the table above), or a matrix with a column per code of the key
        (mixer.prediction.outputs): 'probs' (flat or full head), 'logits' (flat head) or 'bin' (1 for
        each code the table would hold). columns: 'occcanine' for OccCANINE's column names
        and order (its predict() table: occ1, <system>_k, prob_k, desc_k; a matrix's
        columns <system>_<code>); system: that name (default: hisco, occ1950 or code).

        A row without a description (empty or spaces) has nothing to code: no code, an
        empty prob (NaN rows in a matrix), whatever its language and context; their number
        is printed.

        The code table also holds each row's `confidence` (flat and seq2seq heads: the
        chance its code set is exactly right; calibrated when the model has a
        calibration.json, then with `confidence_raw` beside it; docs/coding.md). lookup: a
        table of hand-coded inputs (a path, or Model.lookup's result): a row the model reads
        as one of its entries takes its codes (column `source`: lookup or model). target:
        Model.target's result: each row is `coded` auto or check (and with shorter codes
        given a `level`). target_accuracy (with target_confidence, calibration_data,
        calibration_truth_cols, shorter_codes, code_levels): the threshold chosen here as
        predict.py --target-accuracy chooses it for a file of these rows (the rows to code
        counted, less those the lookup covers), then applied: the same marks as predict.py's.
        target_level: 'code' (the default) or a crosswalk (a name or a table's path), or a
        list of them: the accuracy counted at each, each with its own threshold and mark
        (`coded` for the codes, `coded_<name>` for a crosswalk's classes; docs/coding.md).

        crosswalk: a name (hisclass, hisclass_5, socpo, hiscam) or a table's path, or a list of
        them: each code's class beside it and the row's, as predict.py --crosswalk writes them
        (docs/classes.md); status, relation, product: the rows' HISCO status, relation and
        product codes (one value for all rows, or one per row, paired with texts as language
        is), which pick the crosswalk's row for them (predict.py's --status-col, ...)."""
        walks = self._crosswalks(crosswalk, what, status, relation, product)
        table = self._codes(
            texts,
            context,
            lookup,
            target,
            dict(
                language=language,
                top_k=top_k,
                head=head,
                threshold=threshold,
                batch_size=batch_size,
                what=what,
                columns=columns,
                system=system,
                target_accuracy=target_accuracy,
                target_confidence=target_confidence,
                calibration_data=calibration_data,
                calibration_truth_cols=calibration_truth_cols,
                shorter_codes=shorter_codes,
                code_levels=code_levels,
                target_level=target_level,
            ),
            renamed,
        )
        if not walks:
            return table
        from mixer.prediction.classes import Classes, code_columns

        index = texts.index if isinstance(texts, pd.Series) else table.index
        values = {
            name: self._per_row(name, value, index)
            for name, value in (("status", status), ("relation", relation), ("product", product))
            if value is not None
        }
        occcanine = settings("predict", {"columns": columns})["columns"] == "occcanine"
        stem = self._system(system) if occcanine else "code"
        classes = Classes(walks, flag="crosswalk=")
        table = classes.add(table, code_columns(table, stem), values)
        if line := classes.line():
            print(line, file=sys.stderr)
        return table

    def _crosswalks(self, crosswalk, what, *context) -> list:
        """The crosswalks crosswalk= names, read with the model's code system; refused
        beside a matrix, and status=, relation=, product= without one."""
        if crosswalk is None:
            if any(value is not None for value in context):
                raise UserError(
                    "status=, relation= and product= pick a crosswalk's rows: pass crosswalk="
                )
            return []
        what = settings("predict", {"what": what})["what"]
        if what != "codes":
            raise UserError(
                f"crosswalk= adds classes beside codes, and what={what!r} is a matrix with a "
                "column per code: leave out one of them"
            )
        from mixer.prediction.classes import load

        return load(crosswalk, self._predictor.formatter)

    def _system(self, system) -> str:
        from mixer.prediction import outputs

        return outputs.system_name(
            self._predictor, settings("predict", {"system": system})["system"]
        )

    @staticmethod
    def _per_row(name: str, value, index: pd.Index) -> pd.Series:
        """One value for every row, or one per row (a Series paired by index, a list by
        position), as a Series in the rows' order."""
        if isinstance(value, str) or not _is_list_like(value):
            return pd.Series([value] * len(index), dtype=object)
        values = pd.Series(list(_aligned(name, value, index)), dtype=object)
        if len(values) != len(index):
            raise UserError(f"{name}= has {len(values)} values for {len(index)} texts")
        return values

    def _codes(self, texts: Texts, context: Context, lookup, target, options: dict, renamed):
        """predict() without the crosswalks' classes: options, its keywords by their names."""
        given = settings("predict", options, renamed)
        lang, top_k, threshold, batch_size = (
            given["language"],
            given["top_k"],
            given["threshold"],
            given["batch_size"],
        )
        what, columns, system = given["what"], given["columns"], given["system"]
        head = one_head(given["head"])
        if top_k is not None:
            most = max(len(self._predictor.codes), self._predictor.default_top_k())
            if top_k > most:
                raise UserError(
                    f"top_k={top_k}: the model has {len(self._predictor.codes)} codes; "
                    f"ask for at most {most}"
                )
        from mixer.prediction import outputs

        outputs.check_what(what, head)
        _require_choice("columns", columns, outputs.COLUMN_STYLES)
        name = outputs.system_name(self._predictor, system)
        if given["target_accuracy"] is not None:
            if target is not None:
                raise UserError("target= and target_accuracy= both given; pass one")
            if what != "codes" or columns != "mixer":
                raise UserError(
                    "target_accuracy= marks rows of the code table; leave out what= and columns="
                )
            lookup = self.lookup(lookup) if isinstance(lookup, str) else lookup
            if (
                lang is not None
                and not isinstance(lang, str)
                and given["calibration_data"] is None
                and self._predictor.config.get("language_col") is None
            ):  # as predict.py --language-col
                self._run_language_note("their own (language=, one per row)")
            target = self.target(
                given["target_accuracy"],
                given["target_confidence"],
                head,
                given["calibration_data"],
                given["calibration_truth_cols"],
                lookup,
                given["shorter_codes"],
                self._rows_to_code(texts, lang, context, lookup),
                top_k,
                threshold,
                language=lang if isinstance(lang, str) else None,
                batch_size=batch_size,
                code_levels=given["code_levels"],
                target_level=given["target_level"],
            )
            target.check_reached()
        else:
            for companion in (
                "calibration_data",
                "calibration_truth_cols",
                "code_levels",
                "target_level",
            ):
                if given[companion] is not None:
                    raise UserError(
                        f"{companion}= works with target_accuracy=; pass it, or leave out {companion}="
                    )
            if given["shorter_codes"]:
                raise UserError(
                    "shorter_codes=True works with target_accuracy=; pass it, or leave out shorter_codes="
                )
            # the API's own (predict.py hands each chunk's new inputs to a target it counted itself)
            if (
                self._keywords
                and target is not None
                and target.rows_to_code is not None
                and id(target) not in self._noted
            ):
                lookup = self.lookup(lookup) if isinstance(lookup, str) else lookup
                here = self._rows_to_code(texts, lang, context, lookup)
                if here != target.rows_to_code:  # e.g. a file coded in parts: said once
                    self._noted.add(id(target))
                    print(
                        f"note: target= was chosen for {target.rows_to_code:,} rows to code and these are {here:,}: "
                        "its promise is for the rows it was chosen for (code them all with it, or choose it with "
                        "rows_to_code= these texts)",
                        file=sys.stderr,
                    )
        texts, blank = self._blank(texts)
        index, texts, langs, desc_chars = self._inputs(texts, lang, context)
        if what in ("probs", "logits"):
            matrix = outputs.score_matrix(
                self._predictor, texts, langs, what, head, batch_size, desc_chars
            )
            matrix[blank] = np.nan
            return pd.DataFrame(
                matrix,
                index=index,
                columns=outputs.matrix_columns(self._predictor.codes, columns, name),
            )
        if what != "codes" or columns != "mixer":
            if lookup is not None or target is not None:
                raise UserError(
                    "lookup= and target= give the code table; leave out what= and columns="
                )
        elif lookup is not None or target is not None or self._predictor.calibration:
            return without_codes(
                self._coded(
                    texts, langs, head, top_k, threshold, batch_size, lookup, target, desc_chars
                ),
                blank,
            ).set_axis(index)
        table = without_codes(
            self._predictor.predict(
                texts, langs, head, top_k, threshold, batch_size, desc_chars=desc_chars
            ),
            blank,
        ).set_axis(index)
        if what == "bin":
            return pd.DataFrame(
                outputs.binary_matrix(table, self._predictor.codes),
                index=index,
                columns=outputs.matrix_columns(self._predictor.codes, columns, name),
            )
        return outputs.STYLES[columns].code_table(
            table, texts, self._predictor.description_of, name, head
        )

    # ------------------------------------------------------------ which predictions to use
    def scaling(self, head: str) -> tuple:
        """The head's calibration (temperature, bias) from its model directory's
        calibration.json; (1.0, 0.0) without one."""
        return self._predictor.calibration.get(head, (1.0, 0.0))

    def temperature(self, head: str) -> float:
        """The head's calibration temperature (1.0 without one); its bias: scaling()."""
        return self.scaling(head)[0]

    @says_keywords
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
        from mixer.core.config import TableOptions
        from mixer.coding.lookup import read_for

        options = options or TableOptions(
            role="lookup", keyword="options"
        )  # its lines name options=, not flags
        return read_for(
            self,
            path,
            input_col,
            code_cols,
            language_col,
            options,
            log=log or (lambda m: print(m, file=sys.stderr)),
        )

    @says_keywords
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
        target_accuracy= to predict(), which counts the rows as predict.py does. Earlier names:
        target_level: 'code' (the default), a crosswalk's name or table, or a list of them: the
        accuracy counted at each level, each with its own threshold (the result's also holds
        the others; docs/coding.md). Earlier names: accuracy, confidence, labelled, truth_cols,
        lang, levels."""
        given = settings(
            "target",
            dict(
                target_accuracy=target_accuracy,
                target_confidence=target_confidence,
                head=head,
                calibration_data=calibration_data,
                calibration_truth_cols=calibration_truth_cols,
                shorter_codes=shorter_codes,
                top_k=top_k,
                threshold=threshold,
                input_col=input_col,
                language=language,
                language_col=language_col,
                batch_size=batch_size,
                code_levels=code_levels,
                target_level=target_level,
            ),
            renamed,
        )
        if given["target_accuracy"] is None:
            raise UserError("target(): pass target_accuracy, e.g. model.target(0.95)")
        accuracy, confidence, labelled = (
            given["target_accuracy"],
            given["target_confidence"],
            given["calibration_data"],
        )
        truth_cols, shorter_codes, levels = (
            given["calibration_truth_cols"],
            given["shorter_codes"],
            given["code_levels"],
        )
        top_k, threshold, batch_size = given["top_k"], given["threshold"], given["batch_size"]
        head = one_head(given["head"])
        lang, language_col = given["language"], given["language_col"]
        from mixer.core.config import TableOptions
        from mixer.coding import target as targets

        check_target_args(accuracy, confidence, head, self._predictor, shorter_codes)
        at = self._target_levels(given["target_level"], head, shorter_codes)
        config = self._predictor.config
        if (
            labelled is None
        ):  # the run's rows, predicted with the language the rows to code are (item 7)
            own = (
                config.get("language_col") is None
                and language_col is None
                and isinstance(lang, str)
            )
            rows = targets.run_rows(
                config.get("model_dir"), self.source, language=lang.strip() if own else None
            )
            if config.get("language_col") is None and language_col is not None:
                self._run_language_note(f"their {language_col!r}")
        else:
            if given["language"] is not None and not isinstance(given["language"], str):
                raise UserError(
                    "language=: one language for every labelled row ('en'), or language_col="
                )
            columns = job_columns(
                config, given["input_col"], given["language"], given["language_col"]
            )
            options = options or TableOptions(
                role="calibration_data", keyword="options"
            )  # its lines name options=
            rows = targets.file_rows(
                labelled,
                options,
                truth_cols,
                self,
                columns.input_col,
                columns.language_col,
                columns.language,
                columns.context_cols,
                log=lambda m: print(m, file=sys.stderr),
            )
        if lookup is not None:
            lookup = self.lookup(lookup) if isinstance(lookup, str) else lookup
        if rows_to_code is not None and not isinstance(rows_to_code, (int, np.integer)):
            # the texts to code, counted as predict.py counts them: described, not the lookup's
            rows_to_code = self._rows_to_code(rows_to_code, lang, None, lookup)
        if lookup is not None:
            covered = lookup.match(self, self._strings(rows.texts, rows.langs), rows.langs) >= 0
            rows = rows.without(~covered)
            rows.rows += f", less the {int(covered.sum()):,} the lookup covers"
        levels = (list(levels) if levels else self.levels()) if shorter_codes else ()
        if shorter_codes and not levels:
            raise UserError(
                f"--shorter-codes: the model's code system ({self._predictor.formatter.kind}) has no "
                "coarser classes known by prefix; name their prefix lengths with --code-levels, "
                "e.g. 1 2 3 for HISCO codes"
            )
        too_long = [n for n in levels if n >= self._predictor.formatter.block_size]
        if too_long:
            raise UserError(
                f"--code-levels {too_long[0]}: a prefix shorter than the codes' "
                f"{self._predictor.formatter.block_size} characters"
            )
        return targets.choose(
            self._predictor,
            head,
            float(accuracy),
            float(confidence),
            rows,
            levels,
            top_k,
            threshold,
            batch_size,
            rows_to_code,
            at,
        )

    def _target_levels(self, names, head: str, shorter_codes) -> tuple:
        """--target-level's values as levels: None for 'code', a Crosswalk for each other
        (read with the model's code system); refused where no class confidence exists."""
        names = ["code"] if not names else ([names] if isinstance(names, str) else list(names))
        if len(set(names)) < len(names):
            raise UserError(
                f"--target-level: {', '.join(names)} names a level twice; name each once"
            )
        from mixer.prediction.classes import load

        walks = load(
            [n for n in names if str(n).strip().lower() != "code"], self._predictor.formatter
        )
        if walks and head == "seq2seq" and self._predictor.rules.seq2seq_order == "decoded":
            raise UserError(
                f"--target-level {walks[0].name}: OccCANINE's greedy decoder gives one confidence "
                "per row, none per class; use --head flat, or the codes' level"
            )
        if walks and any(w.numeric for w in walks):
            raise UserError(
                f"--target-level {next(w.name for w in walks if w.numeric)}: a score, not classes; "
                "name a crosswalk of classes (hisclass, hisclass_5, socpo or a table)"
            )
        if shorter_codes and "code" not in [str(n).strip().lower() for n in names]:
            raise UserError(
                "--shorter-codes shortens codes at the codes' level; name code in --target-level "
                "too, or leave out --shorter-codes"
            )
        found = iter(walks)
        return tuple(None if str(n).strip().lower() == "code" else next(found) for n in names)

    def levels(self) -> list:
        """The prefix lengths of the model's code system's coarser classes (mixer.coding.levels)."""
        from mixer.coding.levels import levels_for

        return [
            n
            for n in levels_for(self._predictor.formatter.kind)
            if n < self._predictor.formatter.block_size
        ]

    def _coded(
        self, texts, langs, head, top_k, threshold, batch_size, lookup, target, desc_chars=None
    ) -> pd.DataFrame:
        """The code table with confidence calibrated, rows marked against a target, and a
        lookup's entries in place of the model's codes."""
        from mixer.coding import target as targets
        from mixer.prediction.predict import CONFIDENCE

        from mixer.audit.draw import threshold_used

        predictor = self._predictor
        if target is not None:
            # the settings as predicted with: top_k=None and the model's own top-k are one setting
            settled = lambda k, t: (
                k or predictor.default_top_k(),
                threshold_used(predictor, head, t),
            )  # noqa: E731
            if (
                target.head != head
                or settled(target.top_k, target.flat_threshold) != settled(top_k, threshold)
                or target.owner != id(predictor)
            ):
                raise UserError(
                    f"target= was chosen for head {target.head!r} (top_k {target.top_k}, threshold "
                    f"{target.flat_threshold}) by another model or settings; choose it with this "
                    "model and the head, top_k and threshold you predict with"
                )
            if target.rows_to_code is None and id(target) not in self._noted:
                self._noted.add(id(target))
                print(
                    f"note: target= was chosen without rows_to_code: it promises accuracy {target.accuracy:g} "
                    "on rows like the labelled ones, not on these rows; predict.py counts the rows it codes "
                    "(pass rows_to_code= to target(), or target_accuracy= to predict())",
                    file=sys.stderr,
                )
        entries = None
        if lookup is not None:  # before predicting: an entry too wide or two alike fail at once
            lookup = self.lookup(lookup) if isinstance(lookup, str) else lookup
            lookup.check(self, top_k or predictor.default_top_k(), flag="top_k=")
            entries = lookup.match(self, self._strings(texts, langs), langs)
        table = predictor.predict(
            texts,
            langs,
            head,
            top_k,
            threshold,
            batch_size,
            target.scored_levels if target is not None else (),
            desc_chars=desc_chars,
        )
        if target is not None:
            table = targets.mark(table, target, predictor.description_of)
        scaling = self.scaling(head)
        if CONFIDENCE in table.columns and scaling != (1.0, 0.0):
            from mixer.coding.calibration import calibrate

            raw = table[CONFIDENCE].to_numpy(dtype=np.float64)
            table.insert(table.columns.get_loc(CONFIDENCE) + 1, RAW_CONFIDENCE, raw)
            table[CONFIDENCE] = np.where(np.isnan(raw), np.nan, calibrate(raw, *scaling))
        if lookup is not None:
            from mixer.coding.lookup import apply_lookup

            table = apply_lookup(
                table, entries, lookup, predictor.description_of, predictor.formatter.block_size
            )
        return table

    def _run_language_note(self, theirs: str) -> None:
        """One line: the run's labelled rows (a run without a language column) are predicted
        in the run's language, the rows to code in their own (`theirs`, in words)."""
        print(
            f"note: the run's labelled rows have no language column; they are predicted with language "
            f"{self._predictor.config.get('language') or 'unk'!r}, the rows to code with {theirs}: the "
            "threshold holds for rows of that language (docs/coding.md)",
            file=sys.stderr,
        )

    def _rows_to_code(self, texts: Texts, lang: Languages, context: Context, lookup) -> int:
        """The rows the model will code, as predict.py counts them: every row with a
        description, less those the lookup covers."""
        _, model_texts, langs, _ = self._inputs(
            texts, lang, context, say_fit=False
        )  # texts checked first
        described = ~blank_descriptions(
            pd.Series([texts] if isinstance(texts, str) else list(texts), dtype=object)
        )
        if lookup is None:
            return int(described.sum())
        return int(
            ((lookup.match(self, self._strings(model_texts, langs), langs) < 0) & described).sum()
        )

    def _strings(self, texts, langs) -> np.ndarray:
        """Per row of model texts and languages, the key of what the model reads
        (model_inputs; mixer.data.inputs.tokens.reading_keys)."""
        from mixer.data.inputs.tokens import reading_keys

        return reading_keys(
            self._predictor.token_ids, texts, langs, self._predictor.thresholds.table
        )

    @says_keywords
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
        given = settings(
            "audit",
            dict(
                audit_margin=audit_margin,
                audit_by=audit_by,
                audit_unit=audit_unit,
                audit_seed=audit_seed,
                input_col=input_col,
                language=language,
                language_col=language_col,
                head=head,
                threshold=threshold,
                top_k=top_k,
                batch_size=batch_size,
            ),
            renamed,
        )
        margin, by, unit, seed = (
            given["audit_margin"],
            given["audit_by"],
            given["audit_unit"],
            given["audit_seed"],
        )
        threshold, top_k, batch_size, lang = (
            given["threshold"],
            given["top_k"],
            given["batch_size"],
            given["language"],
        )
        head = one_head(given["head"])
        from mixer.audit.draw import (
            PREDICTED,
            AuditDraw,
            AuditRequest,
            audited_source,
            model_fingerprint,
            threshold_used,
            write_audit,
        )

        request = AuditRequest(path or "(not written)", n, margin, by, unit, seed).check()
        if path:
            request.check_path({})
        if not isinstance(frame, pd.DataFrame):
            raise UserError(
                f"frame={type(frame).__name__}: pass the rows to audit as a pandas DataFrame"
            )
        config = self._predictor.config
        input_col, language_col, _, context_cols = job_columns(
            config, given["input_col"], lang, given["language_col"]
        )
        for column in [input_col, language_col, by, *context_cols]:
            if column and column not in frame.columns:
                raise UserError(
                    f"frame has no column {column!r}; it has: {', '.join(map(str, frame.columns[:12]))}"
                )
        predicted = self.predict(
            frame[input_col],
            frame[language_col] if language_col else lang,
            top_k,
            head,
            threshold,
            frame[context_cols] if context_cols else None,
            batch_size,
        )
        draw = AuditDraw(
            request,
            input_col,
            [language_col, *context_cols],
            self._predictor.formatter,
            excluded=config.get("audited") or (),
        )
        own = [
            c for c in predicted.columns if PREDICTED.match(str(c))
        ]  # as predict.py's audit has them
        draw.add(frame, predicted[own])
        table, lines = draw.finish(
            model_fingerprint(self._predictor),
            audited_source(self._predictor, self.source),
            head,
            threshold_used(self._predictor, head, threshold),
        )
        if path:
            write_audit(table, path, lines)
        else:
            print("\n".join(lines), file=sys.stderr)
        return table

    @says_keywords
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
        from mixer.prediction import outputs

        _require_count("k", k)
        if k > MAX_ALTERNATIVES:
            raise UserError(
                f"k={k}: at most {MAX_ALTERNATIVES} alternatives (each costs up to 3 greedy "
                "decodings of every row)"
            )
        _require_count("batch_size", batch_size)
        _require_choice("columns", columns, outputs.COLUMN_STYLES)
        texts, blank = self._blank(texts)
        index, texts, langs, desc_chars = self._inputs(texts, lang, context)
        codes, confidence = outputs.greedy_alternatives(
            self._predictor, texts, langs, k, batch_size, desc_chars
        )
        codes[blank], confidence[blank] = "", np.nan
        table = outputs.alternatives_table(
            codes,
            confidence,
            self._predictor.description_of,
            columns,
            outputs.system_name(self._predictor, system),
            self._predictor.has_descriptions,
            texts,
        )
        table.index = np.repeat(np.asarray(index), k)
        return table

    def model_inputs(
        self, texts: Texts, lang: Languages = None, context: Context = None
    ) -> np.ndarray:
        """Per row, a key of what the model reads: its language, text and context as the
        run's input recipe spells them and its tokenizer normalises them (BERT's lower-cases
        and strips accents; mixer.data.inputs.tokens.reading_keys). Rows with equal keys get equal
        predictions; a lookup matches, a --to-check list groups and predict.py counts
        distinct inputs by it. The key is opaque: compare it, do not show it."""
        _, texts, langs, _ = self._inputs(texts, lang, context, say_fit=False)
        return self._strings(texts, langs)

    def embeddings(
        self, texts: Texts, lang: Languages = None, context: Context = None, batch_size: int = 256
    ) -> np.ndarray:
        """The pooled encoder output the flat head reads: (rows, hidden), float32."""
        _require_count("batch_size", batch_size)
        _, texts, langs, desc_chars = self._inputs(texts, lang, context)
        return self._predictor.embeddings(texts, langs, batch_size, desc_chars)

    def _blank(self, texts: Texts) -> tuple:
        """(texts, the rows without a description: empty, spaces or missing, nothing to code),
        an iterator read into a list. Their number is said on stderr unless the caller counts
        them itself."""
        if _is_list_like(texts) and not isinstance(texts, (pd.Series, list, tuple, np.ndarray)):
            texts = list(texts)
        values = [texts] if isinstance(texts, str) else texts if _is_list_like(texts) else []
        blank = blank_descriptions(pd.Series(list(values), dtype=object))
        if blank.any() and self._note_blank:
            print(
                f"note: {int(blank.sum()):,} row(s) without a description (empty or spaces): no code, "
                "prob empty",
                file=sys.stderr,
            )
        return texts, blank

    def _context_fit(
        self, texts: Texts, lang: Languages = None, context: Context = None
    ) -> np.ndarray:
        """Per row, whether its context fits the model's input (mixer.data.inputs.tokens.fitted)."""
        _, texts, langs, desc_chars = self._inputs(texts, lang, context, say_fit=False)
        if desc_chars is None:
            return np.zeros(len(texts), dtype=np.int8)
        return self._predictor.context_fit(texts, langs, desc_chars)

    def _inputs(
        self, texts: Texts, lang: Languages, context: Context, say_fit: bool = True
    ) -> tuple:
        """(the rows' index, texts, languages, characters of each text that are its description
        or None without context): a Series keeps its index in the result."""
        from mixer.data.labels.normalise import model_input

        if isinstance(texts, str):
            texts = [texts]
        if not _is_list_like(texts):
            raise UserError(f"texts={texts!r}: pass a string, a list of strings or a pandas Series")
        index = texts.index if isinstance(texts, pd.Series) else None
        if index is not None:  # a Series and a DataFrame beside it pair rows by index, as in pandas
            lang = _aligned("lang", lang, index)
            context = _aligned("context", context, index)
        texts = pd.Series(list(texts), dtype=object).where(lambda s: s.notna(), "").astype(str)
        index = index if index is not None else texts.index
        if lang is None:
            lang = self._predictor.config.get("language") or "unk"
        if isinstance(lang, str):
            langs = np.full(len(texts), lang.strip(), dtype=object)
        elif not _is_list_like(lang):
            raise UserError(f"lang={lang!r}: pass a language code ('en'), one per text, or None")
        else:  # as training and predict.py read a language column: missing -> '', stripped
            langs = pd.Series(list(lang), dtype=object)
            langs = np.asarray(langs.where(langs.notna(), "").astype(str).str.strip(), dtype=object)
            if len(langs) != len(texts):
                raise UserError(f"lang has {len(langs)} values for {len(texts)} texts")
        if say_fit and self._says_languages:
            note = self._language_note(langs, "lang")
            if note:
                print(note, file=sys.stderr)
        columns = job_columns(self._predictor.config).context_cols  # the job's rule: the run's own
        if context is not None and not columns:
            raise UserError(
                "context= was given but this model reads no context columns; leave it out"
            )
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
                raise UserError(
                    f"context needs columns {', '.join(columns)} with one value per text"
                )
        texts, desc_chars = model_input(texts, frame, columns)
        texts = texts.to_numpy(dtype=object)
        if desc_chars is not None and say_fit and self._says_context_fit:
            from mixer.data.inputs.tokens import context_note

            note = context_note(
                self._predictor.context_fit(texts, langs, desc_chars),
                self._predictor.token_ids,
                training=False,
            )
            if note:
                print(f"note: {note}", file=sys.stderr)
        return index, texts, langs, desc_chars

    def _language_note(self, langs, where: str) -> str:
        """One line on rows whose language the model never trained with ('' when none, or
        when the model's training languages are not known)."""
        from mixer.coding.target import language_note

        if not len(langs):
            return ""
        values, counts = np.unique(np.asarray(langs, dtype=object).astype(str), return_counts=True)
        return language_note(self, dict(zip(values.tolist(), counts.tolist())), where)

    def __repr__(self) -> str:
        return f"mixer.Model({self.source!r}, family={self.family!r}, codes={len(self._predictor.codes)})"


def one_head(head) -> str:
    """The API's one head (predict.py's --head takes several): 'greedy' is seq2seq."""
    if isinstance(head, list):
        if len(head) != 1:
            raise UserError(f"head={head!r}: one head ('flat', 'seq2seq' or 'full')")
        head = head[0]
    return "seq2seq" if head == "greedy" else head


def without_codes(table: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """A code table with nothing in `rows`: no code, description or mark (""), no
    probability or confidence (NaN), no whole number (a shorter code's `level`: the column
    becomes pandas' nullable Int64, the rows <NA>, an empty cell in a file)."""
    if not rows.any():
        return table
    table = table.copy()
    for column in table.columns:
        if pd.api.types.is_integer_dtype(table[column]):
            table[column] = table[column].astype("Int64")
            table.loc[rows, column] = pd.NA
            continue
        numeric = column.startswith("prob_") or pd.api.types.is_float_dtype(table[column])
        table.loc[rows, column] = np.nan if numeric else ""
    return table


def check_target_args(accuracy, confidence, head: str, predictor, shorter_codes: bool) -> None:
    """What a target accuracy cannot be asked with, refused in one line."""
    for name, value in (("target accuracy", accuracy), ("target confidence", confidence)):
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not 0.0 < float(value) < 1.0
        ):
            raise UserError(f"{name} {value!r}: a share between 0 and 1, e.g. 0.95")
    if head == "full":
        raise UserError(
            "--target-accuracy: the full head has no row confidence (not covered); use --head flat "
            "or seq2seq"
        )
    # codes as decoded (OccCANINE's greedy decoder): one confidence per row, none per level
    if shorter_codes and head == "seq2seq" and predictor.rules.seq2seq_order == "decoded":
        raise UserError(
            "--shorter-codes: OccCANINE's greedy decoder gives one confidence per row, none per "
            "level; use --head flat"
        )


def _aligned(name: str, value, index: pd.Index):
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


def _is_list_like(value) -> bool:
    return pd.api.types.is_list_like(value) and not isinstance(value, (dict, pd.DataFrame))


def _require_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value!r}: choose one of {', '.join(choices)}")


def _require_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name}={value!r}: must be a whole number, 1 or more")


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
    model = Model(predictor, source)
    model._keywords = True  # the API's own: its messages name its keywords
    return model

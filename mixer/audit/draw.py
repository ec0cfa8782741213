"""Drawing an audit from predictions: `predict.py --audit N AUDIT.csv` and
`mixer.load(...).audit(frame, n)` (docs/evaluation.md, "Audits").

`AuditDraw` sees the predicted rows once, in order, in blocks of any size (predict.py's
chunks, on rank 0), and keeps per stratum only the rows of smallest sampling key
(mixer.audit.statistics.row_keys). At the end it knows every stratum's rows, sizes the
audit, allocates it and writes the rows drawn. What it draws depends on the seed and the
rows alone: not on --chunk-size, nor on the number of processes.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.core.naming import FLAGS, Names
from mixer.audit import file as audit_file
from mixer.audit import statistics as stats
from mixer.data.tables.job_columns import blank_descriptions

# the draw's own columns, never a file's
_KEY, _ROW, _STRATUM, _RANK, _PLACE = "\x00key", "\x00row", "\x00stratum", "\x00rank", "\x00place"
PREDICTED = re.compile(r"^(code|prob|desc)_\d+$")  # a head's columns, as the audit names them
PROBABILITY_UNITS = 10**6  # prob_1 summed in millionths: the same sum in any order
MARGIN_ROOM = (
    4  # rows kept per stratum, with --audit-margin: this many times a simple sample's at 0.5
)


@dataclass(frozen=True)
class AuditRequest:
    """What a person asked for: `size` rows, or the rows that give +-`margin`."""

    path: str
    size: Optional[int] = None
    margin: Optional[float] = None
    by: Optional[str] = None
    unit: str = "rows"
    seed: int = 0
    names: Names = FLAGS  # how its messages name the options: predict.py's flags or the API's

    @property
    def asked(self) -> str:
        """Where a message says the audit was asked for: --audit PATH, or the API's audit()."""
        return "audit()" if self.names.keyword else f"--audit {self.path}"

    def check(self) -> "AuditRequest":
        names = self.names
        if (self.size is None) == (self.margin is None):
            rows = "n=" if names.keyword else f"--audit N {self.path}"
            raise UserError(
                f"{self.asked}: give the number of rows ({rows}) or the half-width of the "
                f"interval ({names.before('audit_margin')}0.03), one of them"
            )
        if self.size is not None and (
            isinstance(self.size, bool)
            or not isinstance(self.size, (int, np.integer))
            or self.size < 1
        ):
            size = f"n={self.size!r}" if names.keyword else f"--audit {self.size}"
            raise UserError(f"{size}: the number of rows must be a whole number, 1 or more")
        if self.margin is not None and not 0 < self.margin < 0.5:
            raise UserError(
                f"{names('audit_margin', self.margin)}: a half-width between 0 and 0.5, e.g. 0.03"
            )
        if self.unit not in audit_file.UNITS:
            raise UserError(
                f"{names('audit_unit', self.unit)}: choose {' or '.join(audit_file.UNITS)}"
            )
        return self

    def check_path(self, inputs: dict) -> None:
        """Before any work: a file that can be written, and none of the job's other files."""
        from mixer.audit.guards import GUARDS
        from mixer.data.tables.writing import check_output_path

        check_output_path(self.path, "--audit", inputs, GUARDS)
        self.kind  # noqa: B018 - a kind that is written, or the refusal

    @property
    def kind(self) -> str:
        """The audit file's format (csv, parquet, excel, stata); csv when it is not written."""
        from mixer.data.tables.writing import output_kind

        return output_kind(self.path, "--audit")

    @property
    def most(self) -> int:
        """The most rows the audit can take: its size, or with a margin MARGIN_ROOM times the
        rows a simple sample takes at the worst accuracy, 0.5. (A stratified design takes
        more than a simple sample where its floors and weights cost precision)."""
        return (
            self.size
            if self.size is not None
            else MARGIN_ROOM * stats.sample_size(0.5, self.margin)
        )


def parse_audit_args(
    values: list, margin: Optional[float], by: Optional[str], unit: str, seed: int
) -> AuditRequest:
    """--audit N AUDIT.csv, or --audit AUDIT.csv with --audit-margin."""
    if len(values) == 1:
        return AuditRequest(values[0], None, margin, by, unit, seed).check()
    if len(values) != 2:
        raise UserError(
            f"--audit {' '.join(values)}: pass N AUDIT.csv, or AUDIT.csv with --audit-margin"
        )
    count, path = values
    try:
        size = int(count)
    except ValueError:
        raise UserError(
            f"--audit {count} {path}: N must be a whole number, e.g. --audit 200 audit.csv"
        )
    if margin is not None:
        raise UserError(
            f"--audit {count} {path} --audit-margin {margin}: the margin chooses the number "
            f"of rows; pass --audit {path} --audit-margin {margin}, or leave the margin out"
        )
    return AuditRequest(path, size, None, by, unit, seed).check()


class AuditDraw:
    """An audit drawn from predicted rows seen once, in order (rank 0 alone).

    text_col: the description column, as the predictions name it. key_cols: what makes
    a description (text, language and context columns), for unit 'descriptions'.
    formatter: the model's code system (its codes are spelled by it, mixer.data.labels.normalise).
    prefix: what the predictions file puts before the head's columns ('flat_' when it holds
    several heads). excluded: description keys the model trained on from audits
    (mixer.audit.train_on.trained_descriptions)."""

    @classmethod
    def for_output(
        cls,
        request: AuditRequest,
        kind: str,
        inputs,
        outputs,
        keys: list,
        head: str,
        prefixed: bool,
        predictor,
    ) -> "AuditDraw":
        """predict.py's draw: the input's columns by the names a predictions file of `kind`
        gives them beside the `outputs` (mixer.data.tables.writing.output_names)."""
        import dataclasses

        from mixer.data.tables.writing import output_names

        names = output_names(kind, inputs, outputs)[: len(inputs)]
        name = dict(zip(inputs, names)).get
        request = dataclasses.replace(
            request, by=name(request.by, request.by) if request.by else None
        )
        draw = cls(
            request,
            name(keys[0]),
            [name(k) for k in keys[1:] if k],
            predictor.formatter,
            f"{head}_" if prefixed else "",
            predictor.config.get("audited") or (),
        )
        draw.shown = names
        return draw

    def add_output(
        self, chunk: pd.DataFrame, predicted: pd.DataFrame, skips: Optional[dict] = None
    ) -> None:
        """predict.py's rows: the input's columns as the predictions file names them, and the
        head's columns of a table that may hold several heads. skips: {reason: rows not to
        draw from} (a lookup's rows; the rows that need a check at a target accuracy)."""
        self.add(*self._as_output(chunk, predicted), skips)

    def rehash(self, chunk: pd.DataFrame, predicted: pd.DataFrame) -> None:
        """predict.py's rows of a chunk drawn from already, hashed again into the predictions'
        digest alone (a resumed job whose digest was damaged: AuditSink.replay)."""
        frame, predicted = self._as_output(chunk, predicted)
        frame, predicted = frame.reset_index(drop=True), predicted.reset_index(drop=True)
        self.digest.update(frame[self.text_col], predicted, _code_columns(predicted))

    def _as_output(self, chunk: pd.DataFrame, predicted: pd.DataFrame) -> tuple:
        own = [
            c
            for c in predicted.columns
            if str(c).startswith(self.prefix) and PREDICTED.match(str(c)[len(self.prefix) :])
        ] + [c for c in getattr(self, "extra", ()) if c in predicted.columns]  # a draw resumed
        # from a journal written before the class columns has none
        return (
            chunk.set_axis(self.shown, axis=1),
            predicted[own].rename(columns=lambda c: c[len(self.prefix) :]),
        )

    def __init__(
        self,
        request: AuditRequest,
        text_col: str,
        key_cols: list,
        formatter,
        prefix: str = "",
        excluded=(),
    ):
        self.request, self.text_col, self.prefix = request, text_col, prefix
        self.formatter = formatter
        self.kind = request.kind
        self.code_columns = []
        self.key_cols = list(dict.fromkeys(c for c in (text_col, *key_cols, request.by) if c))
        self.excluded = frozenset(excluded)
        self.kept = None
        self.names = None  # {input column: its name in the audit}
        self.predicted = []  # the head's columns, as predict.py orders them
        self.extra = []  # the prediction's columns drawn beside them (classes of --crosswalk)
        self.sizes: dict = {}
        self.probability: dict = {}  # per stratum, prob_1 of the rows drawn from, in PROBABILITY_UNITS
        self.left_out = {"no description": 0, "in audits the model trained on": 0}
        self.digest = audit_file.PredictionsDigest(formatter)
        self.offset = 0

    def add(
        self, frame: pd.DataFrame, predicted: pd.DataFrame, skips: Optional[dict] = None
    ) -> None:
        """The next rows: `frame` as the predictions file holds them (input columns) and
        the head's `predicted` code_k, prob_k (desc_k), in the same order."""
        from mixer.reporting.evaluation import group_label

        frame, predicted = frame.reset_index(drop=True), predicted.reset_index(drop=True)
        self.code_columns = [self.prefix + c for c in _code_columns(predicted)]
        rows = np.arange(self.offset, self.offset + len(frame))
        self.offset += len(frame)
        if self.request.by and self.request.by not in frame.columns:
            raise UserError(
                f"{self.request.asked}: no column {self.request.by!r} "
                f"({self.request.names('audit_by')}); the rows have: "
                f"{', '.join(map(str, frame.columns[:12]))}"
            )
        self.digest.update(frame[self.text_col], predicted, _code_columns(predicted))
        texts = frame[self.text_col]
        eligible = ~blank_descriptions(texts)
        self.left_out["no description"] += int((~eligible).sum())
        if self.excluded:
            seen = np.isin(audit_file.description_keys(texts), list(self.excluded)) & eligible
            self.left_out["in audits the model trained on"] += int(seen.sum())
            eligible &= ~seen
        for reason, skipped in (skips or {}).items():
            skipped = np.asarray(skipped, dtype=bool) & eligible
            self.left_out[reason] = self.left_out.get(reason, 0) + int(skipped.sum())
            eligible &= ~skipped
        if not eligible.any():
            return
        labels = (
            pd.Series([group_label(v) for v in frame[self.request.by]], dtype=object)
            if self.request.by
            else pd.Series([None] * len(frame), dtype=object)
        )
        best = pd.to_numeric(predicted["prob_1"], errors="coerce").fillna(0.0).clip(0, 1).to_numpy()
        units = pd.Series(np.rint(best * PROBABILITY_UNITS).astype(np.int64))
        for label, count in labels[eligible].value_counts(dropna=False, sort=False).items():
            label = None if pd.isna(label) else label
            self.sizes[label] = self.sizes.get(label, 0) + int(count)
        for label, total in (
            units[eligible]
            .groupby(labels[eligible].to_numpy(), dropna=False, sort=False)
            .sum()
            .items()
        ):
            label = None if pd.isna(label) else label
            self.probability[label] = self.probability.get(label, 0) + int(total)
        if len(self.sizes) > self.request.most:
            raise UserError(
                f"{self.request.names('audit_by', self.request.by)}: more than "
                f"{self.request.most} values, more "
                f"strata than the audit has rows; stratify by a coarser column"
            )
        if (
            self.names is None
        ):  # the audit's columns beside the input's, named once (mixer.data.tables.writing)
            self.predicted = list(predicted.columns)
            own = audit_file.own_columns(
                self.request.unit,
                self.predicted,
                len(self.code_columns),
                self.request.by is not None,
            )
            self.names = dict(
                zip(frame.columns, audit_file.input_names(self.kind, list(frame.columns), own))
            )
        rows_out = frame.set_axis([self.names[c] for c in frame.columns], axis=1)
        candidates = pd.concat([rows_out, predicted], axis=1)[eligible]
        candidates[_KEY] = stats.row_keys(self.request.seed, rows[eligible])
        candidates[_ROW] = rows[eligible] + 1
        candidates[_STRATUM] = labels[eligible].to_numpy()
        kept = (
            candidates
            if self.kept is None
            else pd.concat([self.kept, candidates], ignore_index=True)
        )
        self.kept = (
            kept.sort_values(_KEY, kind="stable")
            .groupby(_STRATUM, dropna=False, sort=False)
            .head(self.request.most)
        )

    # ------------------------------------------------------------ the end
    def finish(self, model: str, source: str, head: str, threshold: str) -> tuple:
        """(the audit table, the lines that say how it was drawn)."""
        from mixer.reporting.evaluation import group_order

        request = self.request
        total = sum(self.sizes.values())
        if not total:
            raise UserError(
                f"{request.asked}: no row with a description to draw"
                + (
                    " that the model did not train on"
                    if self.left_out["in audits the model trained on"]
                    else ""
                )
            )
        named = set(label for label in self.sizes if label is not None)
        labels = group_order(named, None) + ([None] if None in self.sizes else [])
        sizes = [self.sizes[label] for label in labels]
        expected = round(sum(self.probability.values()) / PROBABILITY_UNITS / total, 3)
        by_stratum = [
            round(self.probability.get(label, 0) / PROBABILITY_UNITS / n, 3)
            for label, n in zip(labels, sizes)
        ]
        asked = (
            request.size if request.size is not None else self._size(sizes, expected, by_stratum)
        )
        count = min(asked, total)
        try:
            allocation = stats.allocate(sizes, count) if request.by else np.asarray([count])
        except ValueError:
            raise UserError(
                f"{request.names('audit_by', request.by)}: {len(labels)} values; {count} rows "
                "cannot give each "
                f"{stats.STRATUM_FLOOR} rows; audit more rows or stratify by a coarser column"
            )
        chosen = pd.concat(
            [
                self.kept[_stratum_rows(self.kept, label)].head(int(n))
                for label, n in zip(labels, allocation)
            ]
        ).sort_values(_KEY, kind="stable")
        chosen[_STRATUM] = [
            labels.index(None if pd.isna(label) else label) for label in chosen[_STRATUM]
        ]
        design = audit_file.Design(
            unit=request.unit,
            by=request.by,
            seed=request.seed,
            strata=tuple(
                audit_file.Stratum(label, n_rows, int(n))
                for label, n_rows, n in zip(labels, sizes, allocation)
            ),
            predictions=self.digest.hexdigest(),
            predicted_rows=self.digest.rows,
            model=model,
            source=source,
            head=head,
            threshold=threshold,
            text_col=self.text_col,
            code_columns=tuple(self.code_columns),
            expected=expected,
            margin=request.margin,
            left_out={reason: n for reason, n in self.left_out.items() if n},
            audit_text_col=self.names[self.text_col],
            spelling=audit_file.spelling_of(self.formatter),
            by_col=self.names.get(request.by) if request.by else None,
        )
        table = self._table(chosen, design)
        return table, self._report(design, asked, total, by_stratum)

    def _size(self, sizes: list, expected: float, by_stratum: list) -> int:
        """--audit-margin: the fewest rows whose interval reaches at most the margin from the
        estimate on either side at the accuracy the model expects (stratified: at each
        stratum's, with the allocation and the weights the scoring uses)."""
        request = self.request
        if not request.by:
            return stats.sample_size(expected, request.margin)
        try:
            count = stats.design_size(sizes, by_stratum, request.margin)
        except ValueError:  # fewer rows than the floors: the floors are the least
            count = sum(min(n, stats.STRATUM_FLOOR) for n in sizes)
        if count > request.most and count < sum(sizes):
            raise UserError(
                f"{request.names('audit_margin', request.margin)} "
                f"{request.names('audit_by', request.by)}: these strata take "
                f"{count:,} rows for it (their floors and weights), more than {request.most:,}; "
                f"pass {'n=' if request.names.keyword else '--audit N AUDIT'} for a size of your "
                "own, or stratify by a coarser column"
            )
        return count

    def _table(self, chosen: pd.DataFrame, design: audit_file.Design) -> pd.DataFrame:
        """The audit's lines in the order a person checks them (_interleaved). Unit
        descriptions: each description once per stratum, where its first row drawn was,
        with its draws' ranks (their places in the stratum's draw order)."""
        predicted = self.predicted
        by_stratum = chosen.groupby(_STRATUM, sort=False)
        rank = by_stratum.cumcount().to_numpy() + 1  # chosen is in key order
        chosen = chosen.assign(
            **{_RANK: rank, _PLACE: (rank - 1) / by_stratum[_KEY].transform("size").to_numpy()}
        )
        if design.unit == "rows":
            inputs = list(self.names.values())
        else:
            inputs = [self.names[c] for c in self.key_cols]
            group = chosen.groupby(inputs + [_STRATUM], dropna=False, sort=False)[_RANK]
            chosen = chosen.assign(
                **{
                    audit_file.DRAWS: group.transform("size").to_numpy(),
                    audit_file.RANKS: group.transform(audit_file.ranks_text).to_numpy(),
                }
            )
            chosen = chosen.drop_duplicates(inputs + [_STRATUM])  # the first row drawn of each
        chosen = _interleaved(chosen)
        unit = (
            pd.Series(chosen[_ROW].to_numpy(), name=audit_file.ROW)
            if design.unit == "rows"
            else pd.Series(chosen[audit_file.DRAWS].to_numpy(), name=audit_file.DRAWS)
        )
        out = pd.concat([unit, chosen[inputs + predicted].reset_index(drop=True)], axis=1)
        for column in audit_file.verdict_columns(len(self.code_columns)):
            out[column] = ""
        strata = chosen[_STRATUM].to_numpy()
        if design.stratified:
            out[audit_file.STRATUM] = strata
            out[audit_file.STRATUM_ROWS] = [design.strata[h].rows for h in strata]
            out[audit_file.STRATUM_DRAWN] = [design.strata[h].drawn for h in strata]
        if design.unit != "rows":
            out[audit_file.RANKS] = chosen[audit_file.RANKS].to_numpy()
        units = audit_file.unit_values(out, design.unit)
        codes = audit_file.canonical_codes(out, list(design.audit_code_columns), self.formatter)
        out[audit_file.CHECK] = audit_file.checks(design.id, strata, units, codes)
        out[audit_file.AUDIT] = design.to_json()
        out.attrs["audit"] = design
        return out

    def _report(self, design: audit_file.Design, asked: int, total: int, by_stratum: list) -> list:
        request = self.request
        drawn = design.drawn
        left = "".join(
            f"; {n:,} {reason} are not drawn from" for reason, n in design.left_out.items()
        )
        lines = [
            f"audit: {drawn:,} rows drawn at random (seed {request.seed}) from the {total:,} rows "
            f"with a description of {design.predicted_rows:,}{left}"
        ]
        if request.margin is not None:
            how = (
                f"at each stratum's (below), with the allocation and weights below; a simple sample would "
                f"take {stats.sample_size(design.expected, request.margin):,}"
                if design.stratified
                else f"at 0.5 it would take {stats.sample_size(0.5, request.margin):,}"
            )
            lines.append(
                f"audit: {asked:,} rows give a 95% interval that reaches at most {request.margin:g} from "
                f"the estimate on either side at the accuracy the model expects, {design.expected:.3f} "
                f"(the mean of prob_1 over the rows drawn from; {how}); if the accuracy is lower, "
                "the interval is wider"
            )
        if asked > total:
            lines.append(
                f"audit: {asked:,} rows asked, the file has {total:,}: all of them are drawn"
            )
        if design.stratified:
            lines.append(
                f"audit by {design.by}: proportional to the rows, each stratum at least "
                f"{stats.STRATUM_FLOOR} rows (all of a smaller one)"
            )
            width = max(len(_shown(s.label)) for s in design.strata)
            for s, guess in zip(design.strata, by_stratum):
                lines.append(
                    f"  {_shown(s.label):<{width}}  {s.rows:>9,} rows  {s.rows / total:6.1%}  "
                    f"-> {s.drawn:,}"
                    + (f"  (expected {guess:.3f})" if request.margin is not None else "")
                )
        return lines


def _interleaved(chosen: pd.DataFrame) -> pd.DataFrame:
    """The order a person checks in: each stratum's rows in key order (a description at its
    first row drawn), the strata interleaved in proportion to their draws, every stratum's
    first row at the top. The first m rows are then a (stratified) random sample too, so a
    person who stops early has one (descriptions: mixer.audit.scores counts the
    rows drawn before the first line left blank)."""
    return chosen.iloc[np.lexsort((chosen[_KEY].to_numpy(), chosen[_PLACE].to_numpy()))]


def _stratum_rows(kept: pd.DataFrame, label) -> np.ndarray:
    column = kept[_STRATUM]
    return column.isna().to_numpy() if label is None else (column == label).to_numpy()


def _code_columns(frame: pd.DataFrame) -> list:
    found = [c for c in frame.columns if re.match(r"^code_\d+$", str(c))]
    return sorted(found, key=lambda c: int(c.split("_")[1]))


def _shown(label) -> str:
    return "(blank)" if label is None else label


def model_fingerprint(predictor) -> str:
    """A hash of the model's weights and codes: the same model, however it was saved or loaded.
    A model predicting in int8 (--quantize) is its fp32 weights' hash (taken before they were
    quantized) marked int8: other numerics, so another fingerprint. A model with a character
    n-gram head beside its flat head (mixer.models.ngram) is marked with the head's digest:
    the same weights with another head, or none, predict otherwise."""
    import xxhash

    if getattr(predictor, "quantize", None):
        marked = f"{predictor.fp32_fingerprint}:{predictor.quantize}".encode()
        fingerprint = "m-" + xxhash.xxh3_128(marked).hexdigest()[:16]
    else:
        fingerprint = weights_fingerprint(predictor.model, predictor.codes)
    ngram = getattr(predictor, "ngram", None)
    if ngram is None:
        return fingerprint
    return "m-" + xxhash.xxh3_128(f"{fingerprint}:ngram:{ngram.digest()}".encode()).hexdigest()[:16]


def weights_fingerprint(model, codes) -> str:
    """model_fingerprint of a model in fp32 (or bf16: any plain tensors) and its codes."""
    import torch
    import xxhash

    digest = xxhash.xxh3_128()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    digest.update("\x1f".join(map(str, codes)).encode("utf-8"))
    return "m-" + digest.hexdigest()[:16]


def audited_source(predictor, source: str) -> str:
    """The model as the audit names it: int8 predictions are said to be approximate."""
    mode = getattr(predictor, "quantize", None)
    return f"{source} (--quantize {mode}: approximate)" if mode else source


def threshold_used(predictor, head: str, threshold: Optional[float]) -> str:
    """The threshold the head's codes were chosen at, as the audit reports it."""
    if head == "seq2seq":
        return "none (seq2seq head)"
    return f"{threshold:g}" if threshold is not None else predictor.thresholds.describe()


def audit_frame(model, frame, request: AuditRequest, asked, head: str):
    """The Python API's audit (mixer.prediction.api.Model.audit): the rows of the DataFrame
    `frame` predicted by `model` with `asked`'s options (a namespace of predict.py's fields,
    mixer.prediction.keywords.given) and `head`, drawn as predict.py --audit draws, written to
    request.path when one is given (else its lines said on stderr); the audit table."""
    from mixer.data.tables.job_columns import job_columns

    if request.path != NOT_WRITTEN:
        request.check_path({})
    if not isinstance(frame, pd.DataFrame):
        raise UserError(
            f"frame={type(frame).__name__}: pass the rows to audit as a pandas DataFrame"
        )
    predictor, lang = model.predictor, asked.language
    config = predictor.config
    input_col, language_col, _, context_cols = job_columns(
        config, asked.input_col, lang, asked.language_col
    )
    for column in [input_col, language_col, request.by, *context_cols]:
        if column and column not in frame.columns:
            raise UserError(
                f"frame has no column {column!r}; it has: {', '.join(map(str, frame.columns[:12]))}"
            )
    predicted = model.predict(
        frame[input_col],
        frame[language_col] if language_col else lang,
        asked.top_k,
        head,
        asked.threshold,
        frame[context_cols] if context_cols else None,
        asked.batch_size,
    )
    draw = AuditDraw(
        request,
        input_col,
        [language_col, *context_cols],
        predictor.formatter,
        excluded=config.get("audited") or (),
    )
    draw.add(frame, predicted[[c for c in predicted.columns if PREDICTED.match(str(c))]])
    table, lines = draw.finish(
        model_fingerprint(predictor),
        audited_source(predictor, model.source),
        head,
        threshold_used(predictor, head, asked.threshold),
    )
    if request.path != NOT_WRITTEN:
        write_audit(table, request.path, lines)
    else:
        print("\n".join(lines), file=sys.stderr)
    return table


NOT_WRITTEN = "(not written)"  # the path of an audit the API returns without a file


def finish_audit(
    draw: Optional[AuditDraw],
    request: AuditRequest,
    predictor,
    source: str,
    head: str,
    threshold: Optional[float],
    stamp: Optional[float] = None,
) -> None:
    """predict.py's end (rank 0): the audit drawn, described and written, stating the time
    `stamp` (the job's first start) where its format states one."""
    if draw is None:
        raise UserError(f"--audit {request.path}: the input has no rows to draw from")
    table, lines = draw.finish(
        model_fingerprint(predictor),
        audited_source(predictor, source),
        head,
        threshold_used(predictor, head, threshold),
    )
    write_audit(table, request.path, lines, stamp=stamp)


def write_audit(
    table: pd.DataFrame, path: str, lines: list, log=None, stamp: Optional[float] = None
) -> None:
    """The audit, through mixer.data.tables.writing (its columns are already named by output_names,
    mixer.audit.file.input_names)."""
    from mixer.audit.guards import GUARDS
    from mixer.data.tables.writing import write_table

    write_table(table, path, "--audit", stamp=stamp, guards=GUARDS)
    design = table.attrs["audit"]
    if design.unit == "rows":
        unit, early = "rows", "if you stop early, the rows checked are still a random sample"
    else:
        unit = f"distinct descriptions ({design.drawn:,} rows drawn)"
        early = (
            "if you stop early, the score counts the rows drawn before the first line left blank, "
            "which are a random sample; a line checked after it does not count"
        )
    for line in lines + [
        f"audit: wrote {len(table):,} {unit} to {path}, in random order: check them from "
        f"the top ({early}); write yes or no in 'correct', or the right codes in "
        f"true_code_1..; then score it with evaluate.py --audit {path}"
    ]:
        (log or (lambda m: print(m, file=sys.stderr)))(line)


def output_format(config) -> str:
    """The format of the job's --output (csv where there is none), read from the configuration
    as the output reads it: the audit names its columns as that file names them, without
    asking the output's sink."""
    from mixer.data.tables.writing import output_kind

    return output_kind(config.outputs.output, "--output") if config.outputs.output else "csv"


class AuditSink:
    """predict.py --audit as a sink (the protocol of mixer.prediction.sink.Sink, a layer above,
    which the prediction job passes it in: mixer.prediction.sinks.default_sinks): the draw sees
    each chunk's code table on rank 0 and is drawn, described and written at the end, before
    the job's closing lines. A killed job continues the draw from its state (state_dict, load_state_dict):
    the same rows drawn, whatever the chunks and wherever the kill."""

    early = True
    replaying = False  # set by `load_state_dict`: the chunks completed before come to `replay`

    @classmethod
    def files(cls, config) -> dict:
        return {cls.flag: config.outputs.audit[-1]} if config.outputs.audit else {}

    @classmethod
    def wanted(cls, config) -> bool:
        return bool(config.outputs.audit)

    @classmethod
    def beside(cls, config) -> dict:
        return {}  # nothing beside the audit file

    @classmethod
    def cells(cls, config, columns) -> Optional[list]:
        return None  # every input column beside the draw's

    @classmethod
    def check(cls, config) -> None:
        from mixer.data.tables.sinks import refuse_shaped

        if not config.outputs.audit:
            return
        request = cls.request(config)
        refuse_shaped(config, "--audit", "draws from the code table")
        request.check_path({})  # its kind (the job's other files: the job's own check)

    @staticmethod
    def request(config) -> AuditRequest:
        return parse_audit_args(
            config.outputs.audit,
            config.outputs.audit_margin,
            config.outputs.audit_by,
            config.outputs.audit_unit,
            config.outputs.audit_seed,
        )

    options = ("audit_margin", "audit_by", "audit_unit", "audit_seed")  # the draw's design
    flag, field, usage, reads, rank = (
        "--audit",
        "audit",
        "--audit N FILE",
        frozenset({"codes"}),
        4,
    )
    DIGEST = "audit-digest.bin"  # beside a resume journal: the bytes the predictions' digest hashed

    def __init__(self, job):
        self.audit, self.draw = self.request(job.config), None
        self.journal, self.formatter = job.journal, job.predictor.formatter

    def file(self) -> tuple:
        return "--audit", self.audit.path

    def add(self, job, part) -> None:
        config = job.config
        self.replaying = False  # the chunks a killed run completed are behind
        if self.draw is None:
            self.draw = AuditDraw.for_output(
                self.audit,
                output_format(config),
                part.chunk.columns,
                part.predicted.columns,
                [job.columns.input_col, job.columns.language_col, *job.columns.context_cols],
                config.coding.head[0],
                len(config.coding.head) > 1,
                job.predictor,
            )
            if job.classes is not None:  # each code's class beside it (--crosswalk)
                from mixer.data.labels.crosswalk import class_columns

                slots = config.coding.top_k or job.predictor.default_top_k()
                self.draw.extra = [
                    name
                    for walk in job.classes.walks
                    for name in class_columns(walk, slots, self.draw.prefix)
                ]
            if self.journal is not None:
                self.draw.digest.keep(self.journal.path(self.DIGEST))
        self.draw.add_output(
            part.chunk, part.predicted, job.coding.audit_skips(part.predicted, config.coding.head)
        )

    def state_dict(self) -> Optional[dict]:
        """The draw so far: the rows kept per stratum (at most the audit's size each), the
        strata's counts, and the predictions' digest (its bytes kept beside the journal)."""
        if self.draw is None:
            return None
        return {
            "draw": {k: v for k, v in vars(self.draw).items() if k not in ("digest", "formatter")},
            "digest": self.draw.digest.state(),
        }

    def load_state_dict(self, state: Optional[dict]) -> None:
        if state is None:
            return
        self.draw = AuditDraw.__new__(AuditDraw)
        vars(self.draw).update(state["draw"], formatter=self.formatter)
        self.draw.digest = audit_file.PredictionsDigest(self.formatter)
        # a digest a lost node left damaged: its rows hashed again as the job passes them (replay)
        self.replaying = not self.draw.digest.keep(self.journal.path(self.DIGEST), state["digest"])

    def replay(self, job, part) -> None:
        """A chunk the killed run completed, its code table read back from the store: hashed
        again into the digest, which then ends as an uninterrupted run's."""
        self.draw.rehash(part.chunk, part.predicted)

    def suspend(self) -> None:
        self._close()

    def commit(self, job) -> None:
        self._close()
        finish_audit(
            self.draw,
            self.audit,
            job.predictor,
            job.config.model.checkpoint,
            job.config.coding.head[0],
            job.config.coding.threshold,
            job.started,
        )

    def abort(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.draw is not None and self.draw.digest.tee is not None:
            self.draw.digest.tee.close()

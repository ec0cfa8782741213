"""predict.py's duties for "which predictions to use" (docs/coding.md): the lookup table,
the threshold of each head at --target-accuracy, what each output row's source and
marking is, the counts printed at the end and the provenance of the file written.

Rank 0 chooses the thresholds (it predicts the labelled rows once) and every rank
receives them, so N processes mark rows as one does.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError


class Coding:
    """What a prediction job does besides predicting: built by `prepare` on every rank."""

    def __init__(
        self, lookup=None, targets: Optional[dict] = None, provenance: Optional[dict] = None
    ):
        self.lookup = lookup
        self.targets = targets or {}
        self.pipelines = {}  # {head: its mixer.coding.pipeline.CodingPipeline}, set by prepare
        self.provenance = provenance
        self.rows = 0
        self.by_source = {"lookup": 0, "model": 0}
        self.blank = 0  # rows without a description: coded by neither, not an input
        self.by_coded = {head: {"auto": 0, "check": 0} for head in self.targets}
        # the other levels' marks (--target-level code hisclass): {head: {mark column: counts}}
        self.by_also = {
            head: {t.mark_column: {"auto": 0, "check": 0} for t in target.also}
            for head, target in self.targets.items()
        }
        self.by_level = {head: {} for head in self.targets}
        self.no_description = {head: 0 for head in self.targets}  # coded "": nothing to code
        self.inputs = {
            "all": [],
            "lookup": [],
            **{f"{h}:{c}": [] for h in self.targets for c in ("auto", "check")},
        }
        self._saved = {}  # per name of `inputs`, how far its pieces are beside a resume journal
        self.beside = None  # that journal, where the job resumes (keep_beside)

    @property
    def active(self) -> bool:
        return self.lookup is not None or bool(self.targets)

    # ------------------------------------------------------------ rows
    def split_source(self, results: list) -> pd.DataFrame:
        """Several heads' tables side by side with one `source` column (the same for each)."""
        from mixer.coding.lookup import SOURCE

        sources = [r.pop(c) for r in results for c in list(r.columns) if c.endswith(SOURCE)]
        table = pd.concat(results, axis=1)
        if sources:
            table[SOURCE] = sources[0].to_numpy()
        return table

    def tally(
        self,
        predicted: pd.DataFrame,
        inputs: Optional[np.ndarray],
        heads: list,
        blank: Optional[np.ndarray] = None,
        rows_of: Optional[np.ndarray] = None,
    ) -> None:
        """Rank 0: count a chunk's rows and, with a lookup or a target (`inputs`, the model
        inputs of its rows), by source and, per head, auto or check (and level). blank: the
        rows without a description, coded by neither the lookup nor the model and no input
        (counted apart). rows_of: each row's input in `inputs` where those are the distinct
        inputs of the rows (each hashed once), else `inputs` holds one per row."""
        from mixer.data.tables.reading import as_text

        self.rows += len(predicted)
        if inputs is None:
            return
        blank = (
            np.zeros(len(predicted), dtype=bool) if blank is None else np.asarray(blank, dtype=bool)
        )
        self.blank += int(blank.sum())
        hashed = (
            pd.util.hash_array(np.asarray(inputs, dtype=object))
            if len(inputs)
            else np.zeros(0, np.uint64)
        )
        if rows_of is not None:
            hashed = hashed[rows_of]
        self.inputs["all"].append(np.unique(hashed[~blank]))
        if "source" in predicted.columns:
            lookup = (predicted["source"].to_numpy() == "lookup") & ~blank
            self.by_source["lookup"] += int(lookup.sum())
            self.inputs["lookup"].append(np.unique(hashed[lookup]))
        else:
            lookup = np.zeros(len(predicted), dtype=bool)
        self.by_source["model"] += int((~lookup & ~blank).sum())
        for head, target in self.targets.items():
            prefix = "" if len(heads) == 1 else f"{head}_"
            for column, counts in self.by_also[head].items():
                also = as_text(predicted[f"{prefix}{column}"]).to_numpy()
                for kind in ("auto", "check"):
                    counts[kind] += int(((also == kind) & ~lookup).sum())
            coded = as_text(predicted[f"{prefix}{target.mark_column}"]).to_numpy()
            for kind in (
                "auto",
                "check",
            ):  # of the rows the model coded (a lookup's rows are its own)
                rows = (coded == kind) & ~lookup
                self.by_coded[head][kind] += int(rows.sum())
                self.inputs[f"{head}:{kind}"].append(np.unique(hashed[rows]))
            self.no_description[head] += int(((coded == "") & ~lookup).sum())
            if f"{prefix}level" in predicted.columns:
                levels = predicted[f"{prefix}level"].to_numpy()[(coded == "auto") & ~lookup]
                for level, count in zip(*np.unique(levels, return_counts=True)):
                    self.by_level[head][int(level)] = self.by_level[head].get(int(level), 0) + int(
                        count
                    )

    def check_rows(self, predicted: pd.DataFrame, heads: list) -> np.ndarray:
        """Rows a --to-check list may take: the model's, and with a target the first head's checks."""
        rows = np.ones(len(predicted), dtype=bool)
        if "source" in predicted.columns:
            rows &= predicted["source"].to_numpy() == "model"
        head = heads[0]
        if head in self.targets:
            prefix = "" if len(heads) == 1 else f"{head}_"
            rows &= predicted[f"{prefix}{self.targets[head].mark_column}"].to_numpy() == "check"
        return rows

    def audit_skips(self, predicted: pd.DataFrame, heads: list) -> dict:
        """{reason: rows an audit does not draw from}: a lookup's rows, and with a target the
        rows that need a check, so that the audit checks the promise on the rows coded."""
        skips = {}
        if "source" in predicted.columns:
            skips["coded by the lookup"] = predicted["source"].to_numpy() == "lookup"
        head = heads[0]
        if head in self.targets:
            prefix = "" if len(heads) == 1 else f"{head}_"
            skips[AUDIT_CHECK_REASON] = (
                predicted[f"{prefix}{self.targets[head].mark_column}"].to_numpy() == "check"
            ) & ~skips.get("coded by the lookup", np.zeros(len(predicted), dtype=bool))
        return skips

    # ------------------------------------------------------------ a killed job resumed
    def keep_beside(self, journal) -> None:
        """Rank 0 of a job that resumes: the journal whose folder the pieces go to."""
        self.beside = journal

    def state_dict(self) -> dict:
        """Rank 0: the tallies so far, for the resume journal (mixer.prediction.resume): the
        counts, and the distinct inputs' hashes in pieces beside the journal (save_pieces)."""
        from mixer.data.tables.sinks import save_pieces

        self._saved = {
            name: save_pieces(
                self.beside, f"coding-{n}", self.inputs[name], self._saved.get(name, (0, 0))
            )
            for n, name in enumerate(sorted(self.inputs))
        }
        return {
            "rows": self.rows,
            "by_source": dict(self.by_source),
            "blank": self.blank,
            "by_coded": {h: dict(c) for h, c in self.by_coded.items()},
            "by_level": {h: dict(c) for h, c in self.by_level.items()},
            "by_also": {h: {c: dict(n) for c, n in m.items()} for h, m in self.by_also.items()},
            "no_description": dict(self.no_description),
            "inputs": dict(self._saved),
        }

    def load_state_dict(self, state: dict) -> None:
        """The tallies a killed run had after its last chunk completed."""
        from mixer.data.tables.sinks import load_pieces

        self.rows, self.by_source, self.blank = state["rows"], state["by_source"], state["blank"]
        self.by_coded, self.by_level = state["by_coded"], state["by_level"]
        self.by_also = state.get("by_also", self.by_also)
        self.no_description = state["no_description"]
        self._saved = state["inputs"]
        self.inputs = {
            name: load_pieces(self.beside, f"coding-{n}", self._saved[name])
            for n, name in enumerate(sorted(self.inputs))
        }

    # ------------------------------------------------------------ the end
    def _distinct(self, name: str) -> int:
        parts = self.inputs.get(name) or []
        return len(np.unique(np.concatenate(parts))) if parts else 0

    def result(self) -> dict:
        out = {"rows": self.rows}
        if not self.active:
            return out
        out["distinct_inputs"] = self._distinct("all")
        if self.lookup is not None:
            out["source"] = {
                "lookup": self.by_source["lookup"],
                "model": self.by_source["model"],
                "no_description": self.blank,
                "lookup_distinct": self._distinct("lookup"),
            }
        for head, counts in self.by_coded.items():
            out.setdefault("coded", {})[head] = {
                **counts,
                "no_description": self.no_description[head],
                "auto_distinct": self._distinct(f"{head}:auto"),
                "check_distinct": self._distinct(f"{head}:check"),
                "auto_by_level": {
                    str(k): v for k, v in sorted(self.by_level[head].items(), reverse=True)
                },
                **{column: dict(n) for column, n in self.by_also[head].items()},
            }
        return out

    def report(self) -> list:
        """The lines printed at the end: rows per source, and per head the shares auto and check,
        and the rows without a description (coded "": no code), so that the shares add up."""
        lines = []
        rows, distinct = max(self.rows, 1), max(self._distinct("all"), 1)
        if self.lookup is not None:
            n = self.by_source["lookup"]
            lines.append(
                f"source: {n:,} rows ({n / rows:.1%}; {self._distinct('lookup') / distinct:.1%} of distinct "
                f"inputs) coded by the lookup {self.lookup.path}, {self.by_source['model']:,} by the model"
                + (f", {self.blank:,} without a description: no code" if self.blank else "")
            )
        for head, target in self.targets.items():
            auto, check = self.by_coded[head]["auto"], self.by_coded[head]["check"]
            levels = ""
            if target.levels and self.by_level[head]:
                levels = (
                    " ("
                    + ", ".join(
                        f"{v:,} at {k} characters"
                        for k, v in sorted(self.by_level[head].items(), reverse=True)
                    )
                    + ")"
                )
            at = "" if target.level is None else f" {target.level_name} ({target.mark_column})"
            lines.append(
                f"{head}: the model coded{at} automatically at accuracy >= {target.accuracy:g} (confidence "
                f"{target.confidence:g}): {auto:,} rows ({auto / rows:.1%}; "
                f"{self._distinct(head + ':auto') / distinct:.1%} of distinct inputs){levels}; "
                f"needs a check: {check:,} rows ({check / rows:.1%}; "
                f"{self._distinct(head + ':check') / distinct:.1%} of distinct inputs)"
                + (
                    f"; {blank:,} rows ({blank / rows:.1%}) without a description: no code"
                    if (blank := self.no_description[head])
                    else ""
                )
            )
            for other in target.also:
                counts = self.by_also[head][other.mark_column]
                lines.append(
                    f"{head}: the model coded {other.level_name} ({other.mark_column}) automatically "
                    f"at accuracy >= {other.accuracy:g} (confidence {other.confidence:g}): "
                    f"{counts['auto']:,} rows ({counts['auto'] / rows:.1%}); needs a check: "
                    f"{counts['check']:,} rows ({counts['check'] / rows:.1%})"
                )
        return lines


AUDIT_CHECK_REASON = "needing a check (--target-accuracy)"  # an audit's left_out reason


def prepare(
    config,
    model,
    predictor,
    input_col: str,
    language_col: Optional[str],
    language: str,
    context_cols: list,
    world,
    say,
    others: Optional[dict] = None,
) -> Coding:
    """The lookup (every rank reads it), each head's threshold (rank 0 chooses, every rank
    receives it) and, on rank 0, the provenance of the output. `others`: {field: why} of the
    fields of the job's other outputs, which the provenance does not record (passed in by the
    prediction job from its sinks)."""
    from mixer.distributed import world as mdist

    lookup = None
    if config.coding.lookup:
        from mixer.coding.lookup import read_for

        # the run's input column is the description's by default; rank 0 alone says how it was read
        lookup = read_for(
            model,
            config.coding.lookup,
            config.coding.lookup_input_col,
            config.coding.lookup_code_cols,
            language_col,
            config.table_options("lookup"),
            log=say,
            default_input_col=input_col,
            note=lambda m: print(m, file=sys.stderr) if world.is_main else None,
        )
        # before predicting: an entry wider than the output, or two the model reads alike
        lookup.check(
            model,
            config.coding.top_k or predictor.default_top_k(),
            None if language_col else [language],
        )
        say(
            f"lookup: {len(lookup.codes):,} entries of {config.coding.lookup} ({lookup.layout}"
            + (f": {lookup.columns})" if lookup.columns else ")")
        )
    targets = {}
    if config.coding.target_accuracy is not None:

        def choose():
            rows_to_code, rows = _rows_to_code(
                config, model, lookup, input_col, language_col, language, context_cols
            )
            if not rows:  # before any threshold is chosen for no rows
                from mixer.data.tables.job_columns import no_rows

                raise UserError(no_rows(config.data.input))
            chosen = {}
            for head in config.coding.head:
                target = model.target(
                    config.coding.target_accuracy,
                    config.coding.target_confidence,
                    head,
                    config.coding.calibration_data,
                    config.coding.calibration_truth_cols,
                    lookup,
                    config.coding.shorter_codes,
                    rows_to_code,
                    config.coding.top_k,
                    None if head == "seq2seq" else config.coding.threshold,
                    input_col,
                    language if not language_col else None,
                    language_col,
                    config.run.batch_size,
                    config.table_options("calibration_data"),
                    levels=config.coding.code_levels,
                    target_level=config.coding.target_level,
                )
                target.check_reached()
                chosen[head] = target
                for line in describe_target(target, rows_to_code):
                    say(line)
            return chosen

        chosen = mdist.main_only(choose, world)  # all ranks
        chosen = mdist.broadcast_object(chosen, world)
        targets = {head: dataclasses.replace(t, owner=id(predictor)) for head, t in chosen.items()}
    elif config.coding.shorter_codes:
        raise UserError(
            "--shorter-codes gives a shorter code where the full one misses a threshold; pass "
            "--target-accuracy A"
        )
    elif config.coding.calibration_data:
        raise UserError(
            "--calibration-data is chosen on with --target-accuracy (or --calibrate); pass one"
        )
    coding = Coding(lookup, targets)
    from mixer.coding.pipeline import CodingPipeline

    coding.pipelines = {  # the row steps of each head, built once for every chunk
        head: CodingPipeline(
            model,
            head,
            config.coding.top_k,
            None if head == "seq2seq" else config.coding.threshold,
            lookup,
            targets.get(head),
            lookup_checked=True,  # above, in the input's languages
        )
        for head in config.coding.head
    }
    if config.outputs.output and world.is_main:
        coding.provenance = _provenance(config, predictor, lookup, targets, others or {})
    return coding


def describe_target(target, rows_to_code) -> list:
    share = f"{target.coded_share:.1%}"
    at = "" if target.level is None else f" at the level {target.level_name} ({target.mark_column})"
    scored = "raw confidence" if target.level is None else f"raw {target.level_name} confidence"
    lines = [
        f"target: {target.head} head{at}, threshold {target.threshold:.6g} on the {scored}, chosen "
        f"on {target.rows_used:,} labelled rows ({target.rows}); {share} of them pass it, the lower "
        f"confidence bound of their accuracy {target.bound:.4f}"
        + (f", the {rows_to_code:,} rows to code counted" if rows_to_code else "")
    ]
    for level, (coded, right) in target.by_level.items():
        where = f"{level} characters" if target.level is None else target.level_name
        lines.append(
            f"  labelled rows coded at {where}: {coded:,}, right {right / max(coded, 1):.1%}"
        )
    lines.append(
        f"  procedure: {target.procedure}; it assumes the rows to code are like the labelled rows "
        "(an audit of the auto rows checks that: docs/coding.md)"
    )
    if target.also:
        lines.append(
            f"  each level's promise holds with probability {target.confidence:g} on its own; all "
            f"{1 + len(target.also)} together with at least "
            f"{max(0.0, 1 - (1 + len(target.also)) * (1 - target.confidence)):g}"
        )
    for other in target.also:
        lines += describe_target(other, rows_to_code)
    return lines


def _rows_to_code(config, model, lookup, input_col, language_col, language, context_cols) -> tuple:
    """(the input's rows the model codes: those with a description, less those a lookup
    covers; the input's rows). A row without a description gets no code, so it is not one of
    the rows whose own accuracy the guarantee counts."""
    from mixer.data.tables.job_columns import blank_descriptions, text_column
    from mixer.data.tables.reading import iter_chunks

    rows = total = 0
    for chunk in iter_chunks(
        config.data.input, config.run.chunk_size, options=config.table_options("input")
    ):
        total += len(chunk)
        texts = text_column(chunk, input_col)
        described = ~blank_descriptions(texts)
        if lookup is None:
            rows += int(described.sum())
            continue
        langs = text_column(chunk, language_col).str.strip() if language_col else language
        context = chunk[context_cols].reset_index(drop=True) if context_cols else None
        inputs = model.model_inputs(texts, langs, context)
        lang_values = np.asarray(
            langs if not isinstance(langs, str) else [langs] * len(texts), dtype=object
        )
        rows += int(((lookup.match(model, inputs, lang_values) < 0) & described).sum())
    return rows, total


def _provenance(config, predictor, lookup, targets: dict, others: dict) -> dict:
    from mixer.version import __version__
    from mixer.coding import provenance
    from mixer.audit.draw import threshold_used

    return provenance.make(
        {
            "mixer": __version__,
            "model": provenance.model_part(predictor, config.model.checkpoint),
            "heads": list(config.coding.head),
            "top_k": config.coding.top_k or predictor.default_top_k(),
            "thresholds": {
                head: threshold_used(predictor, head, config.coding.threshold)
                for head in config.coding.head
            },
            "calibration": {
                head: dict(
                    zip(("temperature", "bias"), predictor.calibration.get(head, (1.0, 0.0)))
                )
                for head in config.coding.head
            },
            "target": {head: target.record() for head, target in targets.items()} or None,
            "lookup": lookup.record() if lookup is not None else None,
            "input": provenance.input_part(config.data.input),
            "output": os.path.basename(config.outputs.output),
            "options": provenance.options_part(config, others),
            "columns": provenance.columns_part(config, predictor),
        }
    )

"""A target accuracy as a caller asks for it: Model.target(...) and Model.predict(...,
target_accuracy=...) of the Python API (mixer.prediction.api). What cannot be asked together
is refused, the levels the accuracy is counted at are read, the labelled rows found (the
run's own or a file's), the rows the lookup covers left out and the threshold chosen
(mixer.coding.target.choose). A model is passed in (mixer.prediction.api.Model) and asked only
what it does; messages name the options as `names` says (mixer.core.naming).
"""

from __future__ import annotations

import numbers
import sys
from typing import Optional

import numpy as np
import pandas as pd

from mixer.core.errors import UserError
from mixer.core.naming import FLAGS


def check_asked(accuracy, confidence, head: str, predictor, shorter_codes, names=FLAGS) -> None:
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
            f"{names('target_accuracy')}: the full head has no row confidence (not covered); use "
            f"{names('head', 'flat')} or seq2seq"
        )
    # codes as decoded (OccCANINE's greedy decoder): one confidence per row, none per level
    if shorter_codes and head == "seq2seq" and predictor.rules.seq2seq_order == "decoded":
        raise UserError(
            f"{names.switch('shorter_codes')}: OccCANINE's greedy decoder gives one confidence "
            f"per row, none per level; use {names('head', 'flat')}"
        )


def target_levels(predictor, level_names, head: str, shorter_codes, names=FLAGS) -> tuple:
    """--target-level's values as levels: None for 'code', a Crosswalk for each other (read
    with the model's code system); refused where no class confidence exists."""
    from mixer.data.labels.crosswalk import check_names, load_crosswalk

    given = level_names or ["code"]
    given = [given] if isinstance(given, str) else list(given)
    if len(set(given)) < len(given):
        raise UserError(
            f"{names('target_level')}: {', '.join(map(str, given))} names a level twice; name "
            "each once"
        )
    is_code = [str(n).strip().lower() == "code" for n in given]
    walks = [load_crosswalk(n, predictor.formatter) for n, code in zip(given, is_code) if not code]
    check_names(walks)
    if walks and head == "seq2seq" and predictor.rules.seq2seq_order == "decoded":
        raise UserError(
            f"{names('target_level', walks[0].name)}: OccCANINE's greedy decoder gives one "
            f"confidence per row, none per class; use {names('head', 'flat')}, or the codes' level"
        )
    if walks and any(w.numeric for w in walks):
        raise UserError(
            f"{names('target_level', next(w.name for w in walks if w.numeric))}: a score, not "
            "classes; name a crosswalk of classes (hisclass, hisclass_5, socpo or a table)"
        )
    if shorter_codes and not any(is_code):
        raise UserError(
            f"{names.switch('shorter_codes')} shortens codes at the codes' level; name code in "
            f"{names('target_level')} too, or leave out {names.switch('shorter_codes')}"
        )
    found = iter(walks)
    return tuple(None if code else next(found) for code in is_code)


def code_levels(predictor, asked, shorter_codes, names=FLAGS) -> tuple:
    """The prefix lengths shorter codes are cut to: those asked, or the code system's."""
    if not shorter_codes:
        return ()
    from mixer.coding.levels import levels_for

    block = predictor.formatter.block_size
    levels = (
        list(asked) if asked else [n for n in levels_for(predictor.formatter.kind) if n < block]
    )
    if not levels:
        raise UserError(
            f"{names.switch('shorter_codes')}: the model's code system ({predictor.formatter.kind}) "
            f"has no coarser classes known by prefix; name their prefix lengths with "
            f"{names('code_levels')}, e.g. {'[1, 2, 3]' if names.keyword else '1 2 3'} for HISCO codes"
        )
    too_long = [n for n in levels if n >= block]
    if too_long:
        raise UserError(
            f"{names('code_levels', too_long[0])}: a prefix shorter than the codes' {block} "
            "characters"
        )
    return tuple(levels)


def choose_for(model, asked, head: str, at: tuple, lookup, rows_to_code, options, names) -> object:
    """Model.target's threshold: `asked`, its keywords as predict.py reads them (a namespace:
    mixer.prediction.keywords.given); at: the levels (target_levels)."""
    from mixer.coding import target as targets
    from mixer.core.config import TableOptions
    from mixer.data.tables.job_columns import job_columns

    config, lang = model.predictor.config, asked.language
    if asked.calibration_data is None:  # the run's rows, in the rows to code's language
        own = config.get("language_col") is None and asked.language_col is None
        rows = targets.run_rows(
            config.get("model_dir"),
            model.source,
            language=lang.strip() if own and isinstance(lang, str) else None,
            names=names,
        )
        if config.get("language_col") is None and asked.language_col is not None:
            run_language_note(model.predictor, f"their {asked.language_col!r}")
    else:
        if lang is not None and not isinstance(lang, str):
            raise UserError(
                "language=: one language for every labelled row ('en'), or language_col="
            )
        columns = job_columns(config, asked.input_col, lang, asked.language_col)
        rows = targets.file_rows(
            asked.calibration_data,
            options or TableOptions(role="calibration_data", keyword="options"),
            asked.calibration_truth_cols,
            model,
            columns.input_col,
            columns.language_col,
            columns.language,
            columns.context_cols,
            log=lambda m: print(m, file=sys.stderr),
            names=names,
        )
    if rows_to_code is not None and not isinstance(rows_to_code, (int, np.integer)):
        # the texts to code, counted as predict.py counts them: described, not the lookup's
        rows_to_code = count_rows_to_code(model, rows_to_code, lang, None, lookup)
    if lookup is not None:
        covered = lookup.match(model, model.reading_keys(rows.texts, rows.langs), rows.langs) >= 0
        rows = rows.without(~covered)
        rows.rows += f", less the {int(covered.sum()):,} the lookup covers"
    levels = code_levels(model.predictor, asked.code_levels, asked.shorter_codes, names)
    return targets.choose(
        model.predictor,
        head,
        float(asked.target_accuracy),
        float(asked.target_confidence),
        rows,
        levels,
        asked.top_k,
        asked.threshold,
        asked.batch_size,
        rows_to_code,
        at,
        names=names,
    )


def for_predict(model, asked, texts, context, lookup, target, noted: set) -> Optional[object]:
    """Model.predict's target: the one passed (target=), or at target_accuracy= the one chosen
    for these rows as predict.py chooses it for a file of them (the rows to code counted,
    less those the lookup covers); what works only beside target_accuracy= refused without
    it. noted: the targets whose rows were said to differ (said once each)."""
    lang = asked.language
    if asked.target_accuracy is None:
        for companion in ("calibration_data", "calibration_truth_cols", "code_levels"):
            if getattr(asked, companion) is not None:
                raise UserError(
                    f"{companion}= works with target_accuracy=; pass it, or leave out {companion}="
                )
        if asked.target_level is not None:
            raise UserError(
                "target_level= works with target_accuracy=; pass it, or leave out target_level="
            )
        if asked.shorter_codes:
            raise UserError(
                "shorter_codes=True works with target_accuracy=; pass it, or leave out "
                "shorter_codes="
            )
        if target is not None and target.rows_to_code is not None and id(target) not in noted:
            here = count_rows_to_code(model, texts, lang, context, lookup)
            if here != target.rows_to_code:  # e.g. a file coded in parts: said once
                noted.add(id(target))
                print(
                    f"note: target= was chosen for {target.rows_to_code:,} rows to code and these "
                    f"are {here:,}: its promise is for the rows it was chosen for (code them all "
                    "with it, or choose it with rows_to_code= these texts)",
                    file=sys.stderr,
                )
        return target
    if target is not None:
        raise UserError("target= and target_accuracy= both given; pass one")
    if asked.what != "codes" or asked.columns != "mixer":
        raise UserError(
            "target_accuracy= marks rows of the code table; leave out what= and columns="
        )
    if (
        lang is not None
        and not isinstance(lang, str)
        and asked.calibration_data is None
        and model.predictor.config.get("language_col") is None
    ):  # as predict.py --language-col
        run_language_note(model.predictor, "their own (language=, one per row)")
    target = model.target(
        asked.target_accuracy,
        asked.target_confidence,
        asked.head,
        asked.calibration_data,
        asked.calibration_truth_cols,
        lookup,
        asked.shorter_codes,
        count_rows_to_code(model, texts, lang, context, lookup),
        asked.top_k,
        asked.threshold,
        language=lang if isinstance(lang, str) else None,
        batch_size=asked.batch_size,
        code_levels=asked.code_levels,
        target_level=asked.target_level,
    )
    target.check_reached(model.names)
    return target


def note_uncounted(target, noted: set) -> None:
    """Once per target (noted: their ids): one chosen without rows_to_code promises nothing of
    the rows it codes."""
    if target is None or target.rows_to_code is not None or id(target) in noted:
        return
    noted.add(id(target))
    print(
        f"note: target= was chosen without rows_to_code: it promises accuracy {target.accuracy:g} "
        "on rows like the labelled ones, not on these rows; predict.py counts the rows it codes "
        "(pass rows_to_code= to target(), or target_accuracy= to predict())",
        file=sys.stderr,
    )


def run_language_note(predictor, theirs: str) -> None:
    """One line: the run's labelled rows (a run without a language column) are predicted
    in the run's language, the rows to code in their own (`theirs`, in words)."""
    print(
        f"note: the run's labelled rows have no language column; they are predicted with language "
        f"{predictor.config.get('language') or 'unk'!r}, the rows to code with {theirs}: the "
        "threshold holds for rows of that language (docs/coding.md)",
        file=sys.stderr,
    )


def count_rows_to_code(model, texts, lang, context, lookup) -> int:
    """The rows the model will code, as predict.py counts them: every row with a
    description, less those the lookup covers."""
    from mixer.data.tables.job_columns import blank_descriptions

    _, model_texts, langs, _ = model.read_inputs(texts, lang, context, say_fit=False)
    described = ~blank_descriptions(
        pd.Series([texts] if isinstance(texts, str) else list(texts), dtype=object)
    )
    if lookup is None:
        return int(described.sum())
    keys = model.reading_keys(model_texts, langs)
    return int(((lookup.match(model, keys, langs) < 0) & described).sum())

"""Calibrating a model that exists, without training it again: `predict.py --checkpoint
MODEL --calibrate` (docs/coding.md, "Calibrating an existing model").

It predicts labelled rows that chose nothing with each head asked for (the run's
held-out rows, mixer.coding.target.run_rows, or --calibration-data). It fits a
temperature and a bias per head (mixer.coding.calibration.fit_scaling) and writes
calibration.json, with a reliability diagram per head, into the model's directory. The
scaling is monotone: it changes no code and no ranking, only the confidence a user reads,
so a threshold chosen at --target-accuracy (on the raw confidence) stays what it was.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from mixer.core.errors import UserError
from mixer.core.programs import PredictConfig

CALIBRATED_HEADS = ("flat", "seq2seq")


def calibrate_main(config: PredictConfig, predictor_class, model_class, outputs: tuple = ()) -> int:
    """predictor_class and model_class: mixer.prediction's Predictor and Model, given by the
    program (mixer.cli.entrypoints), which loads through them once the options are checked:
    the coding sits below prediction and asks of the model only what it does. `outputs`: the
    flags of the prediction outputs given (mixer.prediction.sinks.job_outputs), refused."""
    for flag, value in (
        ("--input", config.data.input),
        *((flag, True) for flag in outputs),
        ("--target-accuracy", config.coding.target_accuracy),
        ("--lookup", config.coding.lookup),
    ):
        if value:
            raise UserError(
                f"--calibrate fits each head's temperature and bias and writes calibration.json "
                f"alone; leave out {flag}"
            )
    for flag, value in (
        ("--head", config.coding.head),
        ("--threshold", config.coding.threshold),
        ("--top-k", config.coding.top_k),
    ):
        if value is not None:  # argparse's defaults are None: only what the user gave is refused
            raise UserError(
                f"--calibrate fits the flat and the seq2seq head both, each at the model's own "
                f"thresholds and top-k (those predict.py applies the calibration at); leave out {flag}"
            )
    heads = list(
        CALIBRATED_HEADS
    )  # both, always: the full head has no row confidence (not covered)
    if config.model.quantize or config.model.precision != "fp32":
        raise UserError(
            "--calibrate fits the calibration of the model's own numbers; leave out --quantize and "
            "--precision (calibration does not move a threshold, which --target-accuracy chooses "
            "again at any precision)"
        )
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    predictor = predictor_class.load(
        config.model.checkpoint,
        None,
        config.model.precision,
        config.model.force_precision,
        log=log,
        tf32=config.model.tf32,
        announce=print,
    )
    model = model_class(predictor, config.model.checkpoint)
    model_dir = predictor.config.get("model_dir")
    if not model_dir:
        raise UserError(
            f"--calibrate writes calibration.json into the model's directory; --checkpoint "
            f"{config.model.checkpoint} is none (pass a run directory, RUN/best, or an OccCANINE model "
            "saved in a directory of its own)"
        )
    check_writable(model_dir, config.model.checkpoint)  # before any prediction
    rows = labelled_rows(config, model, predictor)
    from mixer.coding.calibration import MIN_ROWS

    if len(rows) < MIN_ROWS:  # before any prediction
        raise UserError(
            refusal(
                f"{len(rows):,} labelled rows ({rows.rows}) are too few: a fit needs at least "
                f"{MIN_ROWS}"
            )
        )
    if predictor.family == "occcanine" and "seq2seq" in heads:
        print(
            "note: the seq2seq calibration applies to OccCANINE's own greedy confidence",
            file=sys.stderr,
        )
    entries, diagrams, lines = fit(predictor, heads, rows, config.run.batch_size)
    fit_on = {
        "rows": rows.rows,
        "count": len(rows),
        "data": os.path.basename(config.coding.calibration_data)
        if config.coding.calibration_data
        else None,
        "truth_cols": list(config.coding.calibration_truth_cols or [])
        if config.coding.calibration_data
        else None,
        "thresholds": "the model's own",
        "top_k": "the model's own",
    }
    path = write(model_dir, entries, rows.rows, diagrams, fit_on)
    for line in lines:
        print(line)
    print(
        f"wrote {path}: predict.py and the API now give calibrated confidence (confidence, with "
        "confidence_raw beside it); codes and thresholds are unchanged"
    )
    return 0


def refusal(why: str) -> str:
    """--calibrate's one line when it fits nothing: the old calibration is kept."""
    return (
        f"--calibrate: {why}; the model's calibration is as it was (docs/coding.md, \"Calibrating an "
        'existing model"): pass more labelled rows with --calibration-data FILE --calibration-truth-cols COL...'
    )


def check_writable(model_dir: str, checkpoint: str) -> None:
    """Refuse, before any work, a model directory --calibrate cannot write into."""
    if not os.access(model_dir, os.W_OK | os.X_OK):
        raise UserError(
            f"--calibrate writes calibration.json and the reliability diagrams into {model_dir}, "
            f"which is not writable; copy the model directory somewhere you can write (cp -r "
            f"{checkpoint} my_model) and pass --checkpoint my_model"
        )


def write(model_dir: str, entries: dict, rows: str, diagrams: dict, fit_on: dict) -> str:
    """calibration.json with these heads' entries and what they were fit on, and each
    head's reliability diagram ({file name: draw(path)}), all written under temporary names
    and renamed as one step, calibration.json last: a failure leaves the old set as it was.
    Nothing of the run's own calibration (its `splits`, each head's `held_out`) is kept: it
    described other rows."""
    import json
    import tempfile

    from mixer.coding.calibration import FILE, VERSION
    from mixer.core.io import current_umask, replace_together

    body = {
        "version": VERSION,
        "heads": entries,
        "rows": rows,
        "fit_by": "predict.py --calibrate",
        "fit_on": fit_on,
    }
    path = os.path.join(model_dir, FILE)
    temps = []
    try:
        pairs = []
        for name, draw in [*diagrams.items(), (FILE, None)]:
            suffix = os.path.splitext(name)[1]
            fd, tmp = tempfile.mkstemp(prefix=f".tmp-{name}.", suffix=suffix, dir=model_dir)
            os.close(fd)
            temps.append(tmp)
            if draw is None:
                with open(tmp, "w", encoding="utf-8") as handle:
                    handle.write(json.dumps(body, indent=2) + "\n")
            else:
                draw(tmp)
            os.chmod(tmp, 0o666 & ~current_umask())
            pairs.append((tmp, os.path.join(model_dir, name)))
        replace_together(pairs)
    except OSError as exc:
        raise UserError(
            f"--calibrate: writing into {model_dir} failed ({exc.strerror or exc}); its "
            f"calibration.json and reliability diagrams are as they were: free space or copy the "
            f"model directory somewhere you can write, and run it again"
        ) from exc
    finally:
        for tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


def labelled_rows(config, model, predictor):
    from mixer.coding import target as targets
    from mixer.data.tables.job_columns import job_columns

    model_config = predictor.config
    if not config.coding.calibration_data:
        return targets.run_rows(
            model_config.get("model_dir"), config.model.checkpoint, "--calibrate"
        )
    input_col, language_col, language, context_cols = job_columns(
        model_config, config.data.input_col, config.data.language, config.data.language_col
    )
    return targets.file_rows(
        config.coding.calibration_data,
        config.table_options("calibration_data"),
        config.coding.calibration_truth_cols,
        model,
        input_col,
        language_col,
        language,
        context_cols,
        log=lambda m: print(m, file=sys.stderr),
    )


def fit(predictor, heads: list, rows, batch_size: int) -> tuple:
    """({head: calibration.json's entry}, {diagram file: draw(path)}, lines to print): each
    head's temperature and bias fit on `rows`, predicted at the model's own thresholds and
    top-k (those predict.py applies the calibration at)."""
    from mixer.coding.calibration import (
        calibrate_entry,
        head_entry,
        reliability_diagram,
        unfit_reason,
    )
    from mixer.coding.target import predicted_code_sets

    entries, diagrams, lines, unfit = {}, {}, [], []
    for head in heads:
        table = predictor.predict(
            rows.texts, rows.langs, head, None, None, batch_size, desc_chars=rows.desc_chars
        )
        confidence = table["confidence"].to_numpy(dtype=np.float64)
        correct = np.asarray(
            [set(t) == set(p) for t, p in zip(rows.truth, predicted_code_sets(table))], dtype=bool
        )
        why = unfit_reason(confidence, correct)
        if why:  # refused below, for every head at once, before anything is written
            unfit.append(f"{head} head: {why}")
            continue
        entry = head_entry(confidence, correct, held_out=True)
        entry["diagram"] = f"reliability_{head}.png"
        diagrams[entry["diagram"]] = lambda path, c=confidence, e=entry, k=correct, h=head: (
            reliability_diagram(
                path, c, calibrate_entry(c, e), k, f"{h} head: {len(rows):,} labelled rows"
            )
        )
        entries[head] = entry
        held = entry["cross_validated"]
        lines.append(
            f"{head}: temperature {entry['temperature']:.4f} and bias {entry['bias']:.4f} on "
            f"{len(rows):,} rows ({rows.rows}); expected calibration error on rows the fit did not "
            f"see ({held['folds']}-fold cross-validation) {held['ece_before']:.4f} -> "
            f"{held['ece_after']:.4f} (on the rows fit on {entry['ece_after']:.4f}; accuracy "
            f"{correct.mean():.4f}); diagram {entry['diagram']}"
        )
        if held["ece_after"] >= held["ece_before"]:
            lines.append(
                f"warning: {head}: on rows the fit did not see the calibration error does not fall "
                f"({held['ece_before']:.4f} -> {held['ece_after']:.4f}): the raw confidence is as good "
                "on these rows; more labelled rows would show whether the scaling helps"
            )
    if unfit:
        raise UserError(refusal("; ".join(unfit)))
    return entries, diagrams, lines

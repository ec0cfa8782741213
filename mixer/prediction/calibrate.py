"""Calibrating a model that exists, without training it again: `predict.py --checkpoint
MODEL --calibrate` (docs/coding.md, "Calibrating an existing model").

It predicts labelled rows that chose nothing with each head asked for (the run's
held-out rows, mixer.prediction.target.run_rows, or --calibration-data), fits a
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

CALIBRATED_HEADS = ("flat", "seq2seq")


def calibrate_main(args) -> int:
    from mixer.prediction.api import Model
    from mixer.prediction.predict import Predictor

    for flag, value in (("--input", args.input), ("--output", args.output), ("--target-accuracy", args.target_accuracy),
                        ("--lookup", args.lookup), ("--to-check", args.to_check), ("--audit", args.audit)):
        if value:
            raise UserError(f"--calibrate fits each head's temperature and bias and writes calibration.json "
                            f"alone; leave out {flag}")
    heads = list(CALIBRATED_HEADS)  # both, always: the full head has no row confidence (not covered)
    if getattr(args, "quantize", None) or args.precision != "fp32":
        raise UserError("--calibrate fits the calibration of the model's own numbers; leave out --quantize and "
                        "--precision (calibration does not move a threshold, which --target-accuracy chooses "
                        "again at any precision)")
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    predictor = Predictor.load(args.checkpoint, None, args.precision, args.force_precision, log=log, tf32=args.tf32,
                               announce=print)
    model = Model(predictor, args.checkpoint)
    model_dir = predictor.config.get("model_dir")
    if not model_dir:
        raise UserError(f"--calibrate writes calibration.json into the model's directory; --checkpoint "
                        f"{args.checkpoint} is none (pass a run directory, RUN/best, or an OccCANINE model "
                        "saved in a directory of its own)")
    rows = labelled_rows(args, model, predictor)
    if predictor.family == "occcanine" and "seq2seq" in heads:
        print("note: the seq2seq calibration applies to OccCANINE's own greedy confidence", file=sys.stderr)
    entries, lines = fit(predictor, heads, rows, args.top_k, args.threshold, args.batch_size, model_dir)
    path = write(model_dir, entries, rows.rows)
    for line in lines:
        print(line)
    print(f"wrote {path}: predict.py and the API now give calibrated confidence (confidence, with "
          "confidence_raw beside it); codes and thresholds are unchanged")
    return 0


def write(model_dir: str, entries: dict, rows: str) -> str:
    """calibration.json with these heads' entries, written whole or not at all; what else a
    run stored in it (mixer.training) is kept."""
    import json

    from mixer.coding.calibration import FILE, VERSION, read_calibration
    from mixer.core.io import write_text

    stored = read_calibration(model_dir) or {}
    body = {**stored, "version": VERSION, "heads": {**(stored.get("heads") or {}), **entries}, "rows": rows,
            "fit_by": "predict.py --calibrate"}
    path = os.path.join(model_dir, FILE)
    write_text(path, json.dumps(body, indent=2) + "\n")
    return path


def labelled_rows(args, model, predictor):
    from mixer.core.config import table_options
    from mixer.prediction import target as targets

    config = predictor.config
    if not args.calibration_data:
        return targets.run_rows(config.get("model_dir"), args.checkpoint, "--calibrate")
    language_col = args.language_col or (None if args.language else config.get("language_col"))
    language = args.language or config.get("language") or "unk"
    return targets.file_rows(args.calibration_data, table_options(vars(args), "calibration_data"),
                             args.calibration_truth_cols, model, args.input_col or config["input_col"],
                             language_col, language, list(config.get("context_cols") or []),
                             log=lambda m: print(m, file=sys.stderr))


def fit(predictor, heads: list, rows, top_k, threshold, batch_size: int, model_dir: str) -> tuple:
    """({head: calibration.json's entry}, lines to print): each head's temperature and bias
    fit on `rows`, its reliability diagram written beside calibration.json."""
    from mixer.coding.calibration import calibrate_entry, head_entry, reliability_diagram
    from mixer.prediction.target import code_sets

    entries, lines = {}, []
    for head in heads:
        table = predictor.predict(rows.texts, rows.langs, head, top_k, threshold, batch_size,
                                  desc_chars=rows.desc_chars)
        confidence = table["confidence"].to_numpy(dtype=np.float64)
        correct = np.asarray([set(t) == set(p) for t, p in zip(rows.truth, code_sets(table))], dtype=bool)
        entry = head_entry(confidence, correct)
        entry["diagram"] = f"reliability_{head}.png"
        reliability_diagram(os.path.join(model_dir, entry["diagram"]), confidence,
                            calibrate_entry(confidence, entry), correct,
                            f"{head} head: {len(rows):,} labelled rows")
        entries[head] = entry
        lines.append(f"{head}: temperature {entry['temperature']:.4f} and bias {entry['bias']:.4f} on "
                     f"{len(rows):,} rows ({rows.rows}); "
                     f"expected calibration error {entry['ece_before']:.4f} -> {entry['ece_after']:.4f} on "
                     f"these rows (accuracy {correct.mean():.4f}); diagram {entry['diagram']}")
    return entries, lines

"""What a run stores at its end for choosing which predictions to use (docs/coding.md, "What
a run stores"). It stores each scored row's codes, confidences and correctness
(scores.parquet). In the same model directory goes what is derived from them: one
temperature per head (calibration.json), the production curve (CSV and PNG) and the
reliability diagrams.

`score_frame` builds the rows from what the Validator gathered to rank 0;
`coding_files` derives the rest; `CodingStep` is the step the end-of-run hooks call
(mixer.training.hooks.Scores for the last step's weights, mixer.training.best.hook.KeepBest
for the best's). Rank 0 alone runs
this module: the rows are gathered before, so N processes store what one does.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from typing import Optional

import numpy as np
import pandas as pd

from mixer.data.labels.columns import REPORT_PREFIX

HEADS = ("flat", "seq2seq")
SCORES = "scores.parquet"
CURVE = "production_curve.csv"
TARGET = 0.95  # the accuracy of the headline a run prints ("at 95% accuracy: ...")
# The guarantee the headline states first: predict.py --target-accuracy TARGET at its default
# confidence, on a file of this many new rows like the scored ones (docs/coding.md).
GUARANTEE_ROWS = 1_000_000
MIN_FIT_ROWS = 100  # fewer rows that chose nothing: the temperature is fit on every scored row
SPLITS = {"val": "validation", "cal": "calibration"}


def joined(codes) -> str:
    """A code set as scores.parquet writes it: sorted, joined with ' & '."""
    return " & ".join(sorted(set(codes)))


def chose_mask(rows: int, sample, keep_best: bool, tuned_on: Optional[str]) -> np.ndarray:
    """Which validation rows chose something: the evaluation sample every evaluation read,
    when it chose the best model and the early stop (--keep-best); the rows the flat
    thresholds were tuned on (`tuned_on`: "sample", "all" or None)."""
    chose = np.zeros(rows, dtype=bool)
    if keep_best or tuned_on == "sample":
        chose[np.asarray(sample, dtype=np.int64)] = True
    if tuned_on == "all":
        chose[:] = True
    return chose


def score_frame(
    gathered: dict, splits: dict, chose: np.ndarray, levels: list, report_cols: list, walks=()
) -> pd.DataFrame:
    """scores.parquet's rows: the validation rows of the final evaluation, then the
    calibration rows, each by its index into data_<split>.parquet. `splits`: {split: its
    prepared rows (text, lang, report:<col>)}; `chose`: per validation row, whether it
    chose something (calibration rows never did); `levels`: the code system's prefix
    lengths (mixer.coding.levels); `walks`: the crosswalks (--crosswalk) whose class
    confidence each row carries (its 7th item: {name: (flat, seq2seq)}), each a
    <head>_confidence_<name> and a <head>_correct_<name> column."""
    from mixer.coding.levels import level_correct, prefix_correct

    parts = []
    for split, rows in (("val", gathered["val"]), ("cal", gathered["cal"])):
        if not rows:
            continue
        index = np.array([r[0] for r in rows], dtype=np.int64)
        prepared = splits[split].iloc[index]
        part = {
            "row": index,
            "split": split,
            "lang": prepared["lang"].astype(str).to_numpy(),
            "text": prepared["text"].astype(str).to_numpy(),
            "chose": chose[index] if split == "val" else np.zeros(len(index), dtype=bool),
            "true_codes": [joined(r[1]) for r in rows],
        }
        truth = [set(r[1]) for r in rows]
        for h, head in enumerate(HEADS):
            predicted = [set(r[2 + h]) for r in rows]
            part[f"{head}_codes"] = [joined(codes) for codes in predicted]
            part[f"{head}_confidence"] = np.array([r[4 + h] for r in rows], dtype=np.float64)
            part[f"{head}_correct"] = np.array(
                [p == t for p, t in zip(predicted, truth)], dtype=bool
            )
            for length in levels:
                part[f"{head}_correct_{length}"] = prefix_correct(truth, predicted, length)
            for walk in walks:
                part[f"{head}_confidence_{walk.name}"] = np.array(
                    [r[6][walk.name][h] for r in rows], dtype=np.float64
                )
                part[f"{head}_correct_{walk.name}"] = level_correct(truth, predicted, walk)
        for column in report_cols:
            part[column] = prepared[REPORT_PREFIX + column].astype(str).to_numpy()
        parts.append(pd.DataFrame(part))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def fit_rows(frame: pd.DataFrame) -> tuple:
    """(mask of the rows the temperature is fit on, those rows in words): the rows that
    chose nothing when there are at least MIN_FIT_ROWS, else every scored row."""
    free = ~frame["chose"].to_numpy(bool)
    if free.sum() >= MIN_FIT_ROWS:
        return (
            free,
            f"the {int(free.sum()):,} scored rows that chose nothing (chose false in {SCORES})",
        )
    return np.ones(len(frame), dtype=bool), (
        f"all {len(frame):,} scored rows: only {int(free.sum()):,} chose nothing, fewer than {MIN_FIT_ROWS} "
        "(set rows aside with --share-calibration)"
    )


def coding_files(frame: pd.DataFrame, report_cols: list, title: str) -> tuple:
    """({file name: bytes or text} of a model directory, its summary (`summarise`)):
    scores.parquet, calibration.json, the production curve (CSV, a PNG per head and
    breakdown), the reliability diagram per head."""
    from mixer.coding.curve import plot_curve
    from mixer.coding.calibration import (
        FILE,
        VERSION,
        calibrate_entry,
        expected_calibration_error,
        head_entry,
        identity_entry,
        unfit_reason,
    )

    files = {SCORES: _parquet(frame)}
    fit, fit_words = fit_rows(frame)
    held = ~fit
    heads, curves = {}, []
    with tempfile.TemporaryDirectory() as scratch:
        for head in HEADS:
            confidence = frame[f"{head}_confidence"].to_numpy(np.float64)
            correct = frame[f"{head}_correct"].to_numpy(bool)
            # a fit at the clamp of its temperature, or on one outcome alone, pins nothing: the identity
            why = unfit_reason(confidence[fit], correct[fit], min_rows=0, min_outcome=1)
            entry = (
                identity_entry(confidence[fit], correct[fit], why)
                if why
                else head_entry(confidence[fit], correct[fit])
            )
            if held.sum() >= MIN_FIT_ROWS:  # rows it was not fit on: an honest ECE beside the fit's
                calibrated = calibrate_entry(confidence[held], entry)
                entry["held_out"] = {
                    "rows": int(held.sum()),
                    "ece_before": expected_calibration_error(confidence[held], correct[held]),
                    "ece_after": expected_calibration_error(calibrated, correct[held]),
                }
            heads[head] = entry
            curves.append(head_curves(frame, head, report_cols, entry))
            files.update(_plots(scratch, frame, head, curves[-1], entry, fit, title, report_cols))
            for level in class_levels(frame):  # the class level's curve, by language
                curves.append(head_curves(frame, head, [], None, level))
                name = f"production_curve_{head}_class_{_safe(level)}.png"
                plot_curve(
                    curves[-1],
                    os.path.join(scratch, name),
                    TARGET,
                    f"{title}: {head} head at the {level} level, by language",
                )
                files[name] = _read(os.path.join(scratch, name))
    counts = frame["split"].value_counts()
    splits = {s: int(counts[s]) for s in SPLITS if s in counts.index}
    calibration = {"version": VERSION, "heads": heads, "rows": fit_words, "splits": splits}
    curve = pd.concat(curves, ignore_index=True)
    files[FILE] = json.dumps(calibration, indent=2) + "\n"
    files[CURVE] = curve.to_csv(index=False)
    return files, summarise(calibration, curve, splits, frame)


def summarise(calibration: dict, curve: pd.DataFrame, splits: dict, frame: pd.DataFrame) -> dict:
    """What the logs and the model card say of a model directory's scores: the rows by
    split, which rows the temperatures were fit on, and per head its temperature, ECE
    before and after, the share the guarantee codes at TARGET (`frame`: the scored rows)
    and the headline read off the curve; the same two at each crosswalk's class level
    (`levels`: {name: ...}, when the rows carry one)."""
    heads = {}
    for head, entry in calibration["heads"].items():
        heads[head] = dict(entry, **level_summary(curve, splits, frame, head))
        levels = {
            level: level_summary(curve, splits, frame, head, level) for level in class_levels(frame)
        }
        if levels:
            heads[head]["levels"] = levels
    return {
        "target": TARGET,
        "splits": {SPLITS.get(s, s): int(n) for s, n in splits.items()},
        "fit_on": calibration["rows"],
        "heads": heads,
        "confidence": _guarantee_confidence(),
        "rows_to_code": GUARANTEE_ROWS,
    }


def read_summary(directory: str) -> Optional[dict]:
    """summarise() of the files a model directory holds, or None when it has no scores
    (a run from before them, or one that has not ended)."""
    from mixer.coding.calibration import read_calibration

    calibration = read_calibration(directory)
    curve_path = os.path.join(directory, CURVE)
    if (
        calibration is None
        or not os.path.exists(curve_path)
        or not os.path.exists(os.path.join(directory, SCORES))
    ):
        return None
    curve = pd.read_csv(
        curve_path, dtype={"head": str, "by": str, "group": str}, keep_default_na=False
    )
    frame = pd.read_parquet(os.path.join(directory, SCORES))
    splits = calibration.get("splits")
    if (
        not splits
    ):  # predict.py --calibrate's calibration.json: the scored rows are scores.parquet's
        counts = frame["split"].value_counts()
        splits = {s: int(counts[s]) for s in SPLITS if s in counts.index}
    return summarise(calibration, curve, splits, frame)


def class_levels(frame: pd.DataFrame) -> list:
    """The crosswalks whose class level the scored rows carry (score_frame's
    flat_confidence_<name> columns), in their order."""
    start = "flat_confidence_"
    return [c[len(start) :] for c in frame.columns if c.startswith(start)]


def _suffix(level: Optional[str]) -> str:
    return f"_{level}" if level else ""


def level_summary(
    curve: pd.DataFrame, splits: dict, frame: pd.DataFrame, head: str, level: Optional[str] = None
) -> dict:
    """A head's headline read off its curve and its guarantee, at the code level (`level`
    None) or at a crosswalk's class level (its curve's head is '<head> <level>')."""
    name = f"{head} {level}" if level else head
    return dict(
        **head_headline(curve[curve["head"] == name], _rows_word(splits)),
        **head_guarantee(frame, head, level),
    )


def _rows_word(splits: dict) -> str:
    return " and ".join(SPLITS[s] for s in SPLITS if splits.get(s)) + " rows"


def head_curves(
    frame: pd.DataFrame,
    head: str,
    report_cols: list,
    entry: Optional[dict],
    level: Optional[str] = None,
) -> pd.DataFrame:
    """The production curve of a head over every scored row: overall (by "all"), by
    language (by "lang") and by each --report-cols column, with each threshold also on
    the calibrated scale. At a crosswalk's class level (`level`; the head named
    '<head> <level>'), its class confidence and correctness; no temperature is fit there
    (`entry` None): calibrated_threshold empty."""
    from mixer.coding.calibration import calibrate_entry
    from mixer.coding.curve import ALL, production_curve

    confidence = frame[f"{head}_confidence{_suffix(level)}"].to_numpy(np.float64)
    correct = frame[f"{head}_correct{_suffix(level)}"].to_numpy(bool)
    parts = []
    for by in ["lang"] + list(report_cols):
        curve = production_curve(
            confidence, correct, frame[by].to_numpy(), distinct=frame["text"].to_numpy()
        )
        # the overall curve comes first, named "all" ("(all)" beside a group called all)
        overall = (
            np.arange(len(curve)) < (curve["group"] != curve["group"].iloc[0]).to_numpy().argmax()
        )
        parts.append(
            curve[~overall].assign(by=by) if parts else curve.assign(by=np.where(overall, ALL, by))
        )
    curve = pd.concat(parts, ignore_index=True)
    curve.insert(0, "head", f"{head} {level}" if level else head)
    curve.insert(1, "by", curve.pop("by"))
    curve.insert(
        curve.columns.get_loc("threshold") + 1,
        "calibrated_threshold",
        np.nan if entry is None else calibrate_entry(curve["threshold"].to_numpy(), entry),
    )
    return curve


def head_headline(curve: pd.DataFrame, rows: str) -> dict:
    """The headline of a head's curve at TARGET (a point estimate on these rows, not a
    promise for new ones), and the share it codes (None: none)."""
    from mixer.coding.curve import ALL, coded_at, headline

    overall = curve[curve["by"] == ALL]
    point = coded_at(overall, TARGET)
    return {
        "headline": headline(overall, TARGET, rows=rows),
        "coded_share": None if point is None else float(point["coded_share"]),
    }


def _guarantee_confidence() -> float:
    from mixer.core.programs import PredictCoding

    return PredictCoding.__dataclass_fields__["target_confidence"].default


def head_guarantee(frame: pd.DataFrame, head: str, level: Optional[str] = None) -> dict:
    """The share of new rows predict.py --target-accuracy TARGET codes with this head, at its
    default confidence, on a file of GUARANTEE_ROWS rows like the scored ones: its threshold
    chosen (mixer.coding.guarantee) on the scored rows that chose nothing, as predict.py chooses
    it; at a crosswalk's class level (`level`, --target-level <level>) on the rows' class
    confidence and correctness. guaranteed_share None: no such rows. realised_accuracy: the
    accuracy of those rows at or above the threshold (None: none coded)."""
    from mixer.coding.guarantee import choose_threshold

    held = ~frame["chose"].to_numpy(bool)
    if not held.any():
        return {"guaranteed_share": None, "guarantee_rows": 0, "realised_accuracy": None}
    confidence = frame[f"{head}_confidence{_suffix(level)}"].to_numpy(np.float64)[held]
    correct = frame[f"{head}_correct{_suffix(level)}"].to_numpy(bool)[held]
    choice = choose_threshold(
        confidence, correct, TARGET, 1.0 - _guarantee_confidence(), GUARANTEE_ROWS
    )
    coded = (
        confidence >= choice.threshold
        if choice.threshold is not None
        else np.zeros(len(confidence), dtype=bool)
    )
    return {
        "guaranteed_share": choice.coded_share if choice.threshold is not None else 0.0,
        "guarantee_rows": int(held.sum()),
        "realised_accuracy": float(correct[coded].mean()) if coded.any() else None,
    }


def guarantee_words(entry: dict, confidence: float, level: Optional[str] = None) -> str:
    """'on new rows, predict.py --target-accuracy 0.95 codes 68% automatically (...)': what the
    guarantee codes, named for what it is, at the code level or at a crosswalk's class level
    (`level`: --target-level <level>); then its coverage and realised accuracy on the rows
    its threshold was chosen on."""
    flag = f"--target-accuracy {TARGET:g}" + (f" --target-level {level}" if level else "")
    if entry.get("guaranteed_share") is None:
        return (
            f"on new rows, predict.py {flag} has no held-out scored rows to choose "
            "its threshold on (every scored row chose something: see --share-calibration)"
        )
    realised = entry.get("realised_accuracy")
    return (
        f"on new rows, predict.py {flag} codes {entry['guaranteed_share']:.0%} "
        f"automatically (its guarantee, at confidence {confidence:g}, its threshold chosen on the "
        f"{entry['guarantee_rows']:,} scored rows that chose nothing, for a file of {GUARANTEE_ROWS:,} "
        "rows like them); on those rows it codes "
        + (
            "none"
            if realised is None
            else f"{entry['guaranteed_share']:.1%} at a realised accuracy of {realised:.1%}"
        )
    )


def _plots(
    scratch: str, frame, head: str, curve, entry: dict, fit, title: str, report_cols: list
) -> dict:
    """The head's production curve by language and by each --report-cols column, and its
    reliability diagram on the rows the temperature was fit on, as PNG bytes."""
    from mixer.coding.calibration import calibrate_entry, reliability_diagram
    from mixer.coding.curve import ALL, plot_curve

    files = {}
    for by in ["lang"] + list(report_cols):
        name = (
            f"production_curve_{head}.png"
            if by == "lang"
            else f"production_curve_{head}_{_safe(by)}.png"
        )
        plot_curve(
            curve[curve["by"].isin([ALL, by])],
            os.path.join(scratch, name),
            TARGET,
            f"{title}: {head} head, by {'language' if by == 'lang' else by}",
        )
        files[name] = _read(os.path.join(scratch, name))
    confidence = frame[f"{head}_confidence"].to_numpy(np.float64)[fit]
    name = f"reliability_{head}.png"
    reliability_diagram(
        os.path.join(scratch, name),
        confidence,
        calibrate_entry(confidence, entry),
        frame[f"{head}_correct"].to_numpy(bool)[fit],
        f"{title}: {head} head, T {entry['temperature']:.3g} ({int(fit.sum()):,} rows)",
    )
    files[name] = _read(os.path.join(scratch, name))
    return files


class CodingStep:
    """The step at the end of a run, for the last step's weights and for the best's (rank
    0). It writes their scored rows as a model directory's files (scores.parquet, calibration.json,
    the production curve, the reliability diagrams), and the lines the run prints of
    them. `chose`: per validation row, whether it chose something (chose_mask)."""

    def __init__(
        self,
        run_dir: str,
        system: str,
        report_cols: list,
        chose: np.ndarray,
        title: str,
        log=print,
        crosswalks=(),
    ):
        from mixer.coding.levels import levels_for

        self.run_dir = run_dir
        self.crosswalks = list(crosswalks)  # --crosswalk: class levels beside the codes
        self.levels = levels_for(system)
        self.report_cols = list(report_cols)
        self.chose = chose
        self.title = title
        self.log = log
        self._splits: Optional[dict] = None

    def splits(self) -> dict:
        """The scored splits' texts, languages and report columns, read once."""
        if self._splits is None:
            from mixer.data.prepared.files import CALIBRATION_FILE, read_split

            columns = ["text", "lang"] + [REPORT_PREFIX + c for c in self.report_cols]
            names = ["val"] + (
                ["cal"] if os.path.exists(os.path.join(self.run_dir, CALIBRATION_FILE)) else []
            )
            self._splits = {name: read_split(self.run_dir, name, columns) for name in names}
        return self._splits

    def files(self, gathered: dict, where: str, which: Optional[str]) -> Optional[dict]:
        """{file name: content} of the model directory `where` from its gathered rows
        (mixer.training.validation.Validator.gather_rows), with its lines printed when
        `which` names the weights; None without rows."""
        frame = score_frame(
            gathered, self.splits(), self.chose, self.levels, self.report_cols, self.crosswalks
        )
        if frame.empty:
            return None
        files, summary = coding_files(frame, self.report_cols, self.title)
        for line in report_lines(summary, where, which) if which else []:
            self.log(line)
        return files


def report_lines(summary: dict, where: str, which: str) -> list:
    """What the run prints of a model directory's scores: where they are, each head's
    headline and its calibration."""
    splits = " and ".join(f"{n:,} {name}" for name, n in summary["splits"].items())
    lines = [
        f"scores of {splits} rows ({which}): {os.path.join(where, SCORES)}; production curve "
        f"{os.path.join(where, CURVE)}, calibration {os.path.join(where, 'calibration.json')}"
    ]
    for head, entry in summary["heads"].items():
        lines.append(f"  {head} head: {guarantee_words(entry, summary['confidence'])}")
        for level, at in entry.get("levels", {}).items():  # each crosswalk's class level beside
            lines.append(
                f"  {head} head at the {level} level: "
                f"{guarantee_words(at, summary['confidence'], level)}"
            )
            lines.append(
                f"  {head} head at the {level} level, read off the curve of these rows (a point "
                f"estimate, not a promise for new rows): {at['headline']}"
            )
        line = (
            f"  {head} head, read off the curve of these rows (a point estimate, not a promise for new "
            f"rows): {entry['headline']}; temperature {entry['temperature']:.3f}, expected "
            f"calibration error {entry['ece_before']:.4f} -> {entry['ece_after']:.4f}"
        )
        held = entry.get("held_out")
        if held:
            line += (
                f" (on {held['rows']:,} rows it was not fit on: {held['ece_before']:.4f} -> "
                f"{held['ece_after']:.4f})"
            )
        lines.append(line)
        if entry.get("not_fit"):
            lines.append(
                f"  {head} head: no calibration fit, the identity kept (temperature 1, bias 0): "
                f"{entry['not_fit']}"
            )
    lines.append(f"  temperature fit on {summary['fit_on']}")
    return lines


def _parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)

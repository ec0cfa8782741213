"""What a run does at an evaluation and at its end, as named hooks the Trainer calls
at fixed points of its loop (as Hugging Face's TrainerCallback and Lightning's Callback do).

The loop (mixer.training.trainer) is train step, evaluate, save, stop; keeping the best
(mixer.training.best.hook), tuning the thresholds, the scores and calibration rows,
and the model cards are hooks here. A new duty of a run is a new hook: a class with a
name, added to `REGISTERED` (or to the list mixer.training.run.build_hooks makes).

One contract (mixer.training.contract): every point receives the run's state,
read-only, and a control through which the hook asks the loop for what it needs (a
stop, an evaluation, a save, the best weights swapped in, the final evaluation's rows).
A hook keeps its own state, and the training state saves it (state_dict).

Every rank calls every hook at every point, in the list's order: a hook that makes a
collective call (or asks the control for one) makes it on every rank, and writes files
on rank 0 alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from mixer.distributed import world as mdist
from mixer.models.model import read_model_config
from mixer.models.sources import BEST_DIR
from mixer.reporting import card
from mixer.reporting.tracking import logger
from mixer.training.contract import Control, Evaluation, RunState  # noqa: F401 (the contract's types)
from mixer.training.validation import tuning_report


class Hook:
    """A run's duty at the points of the loop; every method is a no-op here. `name` is
    unique in a run: the training state keeps the hook's own state under it."""

    name = "hook"

    def on_start(self, state: RunState, control: Control) -> None:
        """Before the first step of this job, the training state loaded (all ranks)."""

    def on_step_end(self, state: RunState, control: Control) -> None:
        """After each optimizer step."""

    def on_evaluate(self, state: RunState, control: Control) -> None:
        """An evaluation measured (state.evaluation), before its line is logged and the
        training state saved: control.note, control.save, control.stop."""

    def on_save(self, state: RunState, control: Control) -> None:
        """The training state saved: what must follow it on disk (RUN/best/)."""

    def before_final(self, state: RunState, control: Control) -> None:
        """Before the run's final evaluation is decided: a hook may evaluate, tune, and
        ask for the final evaluation (control.request_final) and its rows."""

    def on_final_rows(self, state: RunState, control: Control) -> None:
        """The final evaluation's rows gathered (control.final_rows()) and evaluation.csv
        written; the last step's model not yet."""

    def on_end(self, state: RunState, control: Control) -> None:
        """The run ended: its last step's model, state and evaluation are written."""

    def close(self) -> None:
        """The job ended, however it ended (its end, a stop, an exception): what the hook
        started and still runs is stopped (every rank; no collective)."""

    def state_dict(self) -> dict:
        """The hook's own state, saved in the training state under its name ({}: none)."""
        return {}

    def load_state_dict(self, saved: dict) -> None:
        """Its state as a resumed training state saved it."""


# factories (TrainConfig -> Hook or None) that every run adds after its own hooks
REGISTERED: list = []


def register(factory: Callable) -> Callable:
    """Every run from now on calls factory(cfg)'s hook (None: none) after its own."""
    REGISTERED.append(factory)
    return factory


def registered(cfg) -> list:
    """The hooks the registered factories make for this run."""
    return [hook for hook in (factory(cfg) for factory in REGISTERED) if hook is not None]


class Curves(Hook):
    """The training curves of logs.csv, plotted when the run ends (rank 0)."""

    name = "training curves"

    def on_end(self, state, control) -> None:
        if state.is_main:
            from mixer.reporting.plot import plot_training_curves

            plot_training_curves(state.run_dir)


class TuneThresholds(Hook):
    """--tune-threshold: the flat thresholds tuned before the final evaluation, which then
    runs (it reads them)."""

    name = "tune thresholds"

    def before_final(self, state, control) -> None:
        if tune_thresholds(state, control, state.full_val):
            control.request_final()


class Scores(Hook):
    """The per-row scores and what is derived from them (mixer.coding.scores), and the
    --share-calibration rows they take in."""

    name = "scores and calibration"

    def before_final(self, state, control) -> None:
        if not state.rows_kept and lacks_scores(state, state.run_dir):  # all ranks
            control.request_final()  # a job killed after its final evaluation finds none and scores again
        control.score_calibration()

    def on_final_rows(self, state, control) -> None:
        write_scores(state, control.final_rows(), state.run_dir, state.final_which)


class NgramHead(Hook):
    """--ngram-head (on by default): the character n-gram head (mixer.models.ngram) fitted
    before the final evaluation on every rank alike (the same rows, and the weight chosen on
    flat logits every rank computes on the same batches: the same file in any layout),
    written by rank 0 as RUN/ngram.npz. The final evaluation, the scores and calibration
    are then of the combined flat head, as predict.py predicts; the evaluations before it
    are the encoder's alone. None for OccCANINE's family and for runs with context columns
    (their flat head stays the encoder's); --no-ngram-head removes an earlier file and
    makes the final evaluation and scores again (the encoder's)."""

    name = "n-gram head"

    def __init__(self):
        self.fitted = False  # this job wrote RUN/ngram.npz
        self.background = None  # the fit started with the job (mixer.models.ngram.BackgroundFit)

    def on_start(self, state, control) -> None:
        """The head's fit starts beside the training, at the lowest CPU priority: it reads
        the training rows alone, not the encoder."""
        from mixer.models import ngram

        if ngram_head_applies(state) and self.background is None:
            rows = ngram_rows(state)
            self.background = ngram.BackgroundFit(rows.texts, rows.classes, rows.num_codes)

    def before_final(self, state, control) -> None:
        from mixer.models.ngram import NGRAM_FILE

        self.fitted = False
        path = os.path.join(state.run_dir, NGRAM_FILE)
        background, self.background = self.background, None
        try:
            applies = ngram_head_applies(state)
            fitted = fit_ngram_head(state, control, background) if applies else None
        finally:
            if background is not None:
                background.close()
        if fitted is None:
            world = state.world
            earlier = mdist.main_only(lambda: os.path.exists(path), world)
            if bool(mdist.broadcast_object(earlier, world)):  # all ranks
                if state.is_main:
                    os.remove(path)  # an earlier run's: predict.py would read it
                control.request_final()  # its scores and calibration: the encoder's again
            return
        head, offsets, note = fitted
        control.add_to_flat_logits(offsets)
        control.request_final()  # the combined flat head's final evaluation and scores
        if state.is_main:
            head.save(state.run_dir)
            logger.info(note)
        self.fitted = True

    def close(self) -> None:
        """A job that ends before its final evaluation stops the fit it started."""
        background, self.background = self.background, None
        if background is not None:
            background.close()


class Cards(Hook):
    """The model cards (mixer.reporting.card): RUN/README.md, and RUN/best/README.md.
    `best` gives the run's best record (mixer.training.best.hook.KeepBest.best), or None."""

    name = "model cards"

    def __init__(self, best: Callable[[], Optional[dict]] = lambda: None):
        self.best = best
        self.described = None  # the best record RUN/README.md describes

    def on_start(self, state, control) -> None:
        best = self.described = self.best()
        if best is not None and state.is_main:  # resumed: the card may predate best/
            card.write(
                state.run_dir, *card_files(state, best, state.run_dir, dict(state.model_extra))
            )

    def on_save(self, state, control) -> None:
        if self.best() is not self.described:  # a new best, now in last.pt and RUN/best/
            self.on_start(state, control)

    def on_end(self, state, control) -> None:
        """RUN/README.md describes the weights --checkpoint RUN predicts with (the best,
        when the run kept one), RUN/best/README.md the best (rank 0)."""
        if not state.is_main:
            return
        best = self.best()
        best_dir = os.path.join(state.run_dir, BEST_DIR)
        stored = read_model_config(
            best_dir if best is not None else state.run_dir
        )  # as prediction reads it
        card.write(state.run_dir, *card_files(state, best, state.run_dir, stored))
        if best is not None:
            card.write(best_dir, *card_files(state, best, best_dir, stored))


# ------------------------------------------------------------------ what the hooks share
def ngram_head_applies(state) -> bool:
    """--ngram-head, on a model of mixer's family reading descriptions alone."""
    from mixer.models.model import unwrap_model

    return (
        bool(state.cfg.ngram_head)
        and unwrap_model(state.model).cfg.family == "mixer"
        and not state.model_extra.get("context_cols")
    )


@dataclass
class NgramRows:
    """What the n-gram head is fitted on: the training rows' texts and noised copies, each
    one's first code (its index in the key), how many training rows, and what a run needs
    after the fit (the prepared rows, the key's index, the noise's words)."""

    texts: list
    classes: Any
    num_codes: int
    rows: int
    prepared: Any
    index: dict
    words: Any


def ngram_rows(state) -> NgramRows:
    """At most ngram.MAX_FIT_ROWS training rows (a seeded draw, the same on every rank) and
    their ngram.NOISED_COPIES noised copies."""
    import numpy as np

    from mixer.data.inputs.noise import word_list
    from mixer.data.prepared.files import load_prepared
    from mixer.models import ngram

    cfg = state.cfg
    prepared = load_prepared(state.run_dir)
    index = {code: i for i, code in enumerate(prepared.key["code"])}
    first = prepared.train["code_1"].map(index)
    kept = np.flatnonzero(first.notna().to_numpy())
    if len(kept) > ngram.MAX_FIT_ROWS:  # a seeded draw, the same on every rank
        kept = np.sort(
            np.random.default_rng([cfg.seed, 54]).choice(kept, ngram.MAX_FIT_ROWS, replace=False)
        )
    words = word_list(prepared.train["text"])
    texts, classes = ngram.training_texts(
        prepared.train["text"].to_numpy(dtype=object)[kept],
        first.iloc[kept].astype(np.int64).to_numpy(),
        cfg.seed,
        words,
    )
    return NgramRows(texts, classes, len(index), len(kept), prepared, index, words)


def fit_ngram_head(state, control, background=None) -> Optional[tuple]:
    """(head, flat offsets per split, the line the run prints), or None when the training
    rows give no head (all ranks alike: no collective). The head is `background`'s (the fit
    started with the job: ngram.BackgroundFit) or fitted now, on the same rows; the weight
    is chosen on the validation sample every evaluation reads (--val-max-rows); the offsets
    are computed batch by batch."""
    import time

    import numpy as np

    from mixer.data.inputs.noise import noised_texts
    from mixer.models import ngram
    from mixer.training.validation import validation_sample

    started = time.perf_counter()
    cfg = state.cfg
    fit_rows = ngram_rows(state)
    prepared, index, words, kept = (
        fit_rows.prepared,
        fit_rows.index,
        fit_rows.words,
        fit_rows.rows,
    )
    if background is not None:
        head = background.result()
        how = (
            f"fitted beside the training, waited for {time.perf_counter() - started:.1f} s"
            if background.failure is None
            else f"fitted now: its fit beside the training failed, {background.failure}"
        )
    else:
        head, how = ngram.fit(fit_rows.texts, fit_rows.classes, fit_rows.num_codes), "fitted now"
    if head is None:
        logger.info("n-gram head: none (the training rows give fewer than 2 codes or no n-gram)")
        return None
    val_texts = prepared.val["text"].astype(str).to_numpy(dtype=object)
    sample = validation_sample(len(val_texts), cfg.val_max_rows or 0, cfg.seed)
    labels = np.zeros((len(sample), len(index)), dtype=np.float32)
    for column in [c for c in prepared.val.columns if c.startswith("code_")]:
        found = prepared.val[column].iloc[sample].map(index)
        rows = np.flatnonzero(found.notna().to_numpy())
        labels[rows, found.iloc[rows].astype(np.int64).to_numpy()] = 1
    head.weight, _ = ngram.choose_weight(
        control.encoder_flat_logits(sample), head.scores(list(val_texts[sample])), labels
    )
    offsets = {"val": lambda rows: head.offsets(list(val_texts[rows]))}
    edits = cfg.eval_noise or 0
    if edits:  # the very noised copy the run scores: row r's noise drawn for position r

        def noised(rows):
            return head.offsets(
                noised_texts(list(val_texts[rows]), cfg.seed, edits, words, positions=rows)
            )

        offsets["noised"] = noised
    if prepared.cal is not None:
        cal_texts = prepared.cal["text"].astype(str).to_numpy(dtype=object)
        offsets["cal"] = lambda rows: head.offsets(list(cal_texts[rows]))
    note = (
        f"n-gram head: character {ngram.NGRAMS[0]}-{ngram.NGRAMS[1]}-grams + linear SVM on "
        f"{kept} training rows and {ngram.NOISED_COPIES} noised copies ({how}), "
        f"{len(head.vocabulary)} n-grams, weight {head.weight:g} chosen on the validation rows "
        f"({time.perf_counter() - started:.1f} s): {ngram.NGRAM_FILE}. The final evaluation, "
        "the scores and calibration below are of the encoder's flat head + the n-gram head "
        "(what predict.py predicts); the evaluations above, the encoder's alone"
    )
    return head, offsets, note


def tune_thresholds(state, control, full: bool, stored_in: Optional[str] = None) -> bool:
    """The flat threshold with the best F1 per language (overall for languages with few
    rows) becomes the run's, for the final evaluation and predict.py (`stored_in`'s
    config.json; the run directory's by default) (all ranks). False: a stop signal
    interrupted it."""
    tuned = control.tune_thresholds(full)  # all ranks
    if tuned is None:
        return False
    logger.info(tuning_report(*tuned, stored_in or state.run_dir))
    return True


def lacks_scores(state, directory: str) -> bool:
    """The directory holds no scores.parquet: rank 0 looks, every rank gets its answer
    (all ranks)."""
    from mixer.coding.scores import SCORES

    world = state.world
    missing = mdist.main_only(lambda: not os.path.exists(os.path.join(directory, SCORES)), world)
    return bool(mdist.broadcast_object(missing, world))  # all ranks


def ngram_file(state) -> dict:
    """{ngram.npz: its bytes} of the run's n-gram head, {} without one (rank 0): what a
    model directory scored with it (RUN/best/, mixer.training.best.hook.KeepBest) carries."""
    from mixer.models.ngram import NGRAM_FILE

    path = os.path.join(state.run_dir, NGRAM_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as handle:
        return {NGRAM_FILE: handle.read()}


def ngram_head_differs(state, directory: str) -> bool:
    """The directory's ngram.npz is not the run's (one of the two missing, or other bytes):
    its scores are of another flat head than the run's. Rank 0 looks, every rank gets its
    answer (all ranks)."""
    from mixer.models.ngram import NGRAM_FILE

    def differs() -> bool:
        ours, theirs = (os.path.join(d, NGRAM_FILE) for d in (state.run_dir, directory))
        if not (os.path.exists(ours) and os.path.exists(theirs)):
            return os.path.exists(ours) != os.path.exists(theirs)
        with open(ours, "rb") as a, open(theirs, "rb") as b:
            return a.read() != b.read()

    world = state.world
    return bool(mdist.broadcast_object(mdist.main_only(differs, world), world))  # all ranks


def write_scores(
    state, gathered: Optional[dict], directory: str, which: Optional[str]
) -> Optional[dict]:
    """The end-of-run step (mixer.coding.scores.CodingStep) on gathered rows: the model
    directory's files, written into it unless it is RUN/best/ (the keeper writes that
    whole), and returned (rank 0; None on the others)."""
    if gathered is None or state.coding is None:
        return None
    files = state.coding.files(gathered, directory, which)
    if files and directory == state.run_dir:
        from mixer.core.io import write_content

        for name, content in files.items():
            write_content(os.path.join(directory, name), content)
    return files


def card_files(state, best: Optional[dict], where: str, stored: dict) -> tuple:
    """The model card (mixer.reporting.card.model_card) of the run as it stands, and what
    it was made from (card.json: the OccCANINE export makes its own card from it)."""
    facts = state.card_facts
    progress = {
        "step": state.step,
        "total_steps": state.total_steps,
        "planned_epochs": state.planned_epochs,
        "epochs": state.epochs,
        "stop_reason": state.stop_reason,
        "elapsed": state.elapsed,
        "ended": state.completed,
        "jobs": state.jobs,
    }
    last = {
        "step": state.step,
        "place": [state.epoch, state.rows_in_epoch],
        "metrics": state.last_metrics,
        "table": state.last_table,
    }
    data = {
        "facts": facts,
        "progress": progress,
        "best": None if best is None else {k: v for k, v in best.items() if k != "table"},
        "last": {k: v for k, v in last.items() if k != "table"},
    }
    run_dir = state.run_dir
    coding = coding_summary(run_dir if best is None else os.path.join(run_dir, BEST_DIR), where)
    return card.model_card(facts, where, stored, progress, best, last, coding=coding), data


def coding_summary(weights_dir: str, card_dir: str) -> Optional[dict]:
    """The scores of the weights in `weights_dir` as the card in `card_dir` shows them
    (mixer.coding.scores.read_summary, with the path from the card to their files)."""
    from mixer.coding.scores import read_summary

    summary = read_summary(weights_dir)
    if summary is None:
        return None
    relative = os.path.relpath(weights_dir, card_dir)
    return dict(summary, files="" if relative == "." else relative + "/")

"""The character n-gram head (mixer.models.ngram): fitted at the end of a run by default,
saved beside the model, and added to the flat head's logits wherever prediction makes them
(docs/training.md, "The character n-gram head")."""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, fails, run_program

SHORT = [*TINY, "--max-steps", "10", "--batch-size", "16", "--zero-padded-codes"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory, toy_frame) -> str:
    path = tmp_path_factory.mktemp("ngram") / "rows.csv"
    toy_frame.head(300).to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, rows):
    """A tiny run of the default recipe, and what finetune.py printed."""
    out = tmp_path_factory.mktemp("ngram") / "run"
    proc = run_program(
        "finetune.py", "--dataset", rows, "--target-cols", "hisco_1", "--save-path", out, *SHORT
    )
    return str(out), proc.stdout + proc.stderr


def test_the_head_is_fitted_and_saved_by_default_and_absent_with_the_flag_off(
    fitted, rows, tmp_path
):
    from mixer.models import ngram

    run, output = fitted
    head = ngram.read(run)
    assert head is not None and head.weight in ngram.WEIGHTS
    assert head.num_codes == len(pd.read_csv(os.path.join(run, "key.csv"), dtype=str))
    assert "n-gram head: character 1-4-grams + linear SVM on 270 training rows" in output
    assert "the evaluations above, the encoder's alone" in output
    # the run's final evaluation and its scores are the combined head's: predict.py's
    val = pd.read_parquet(os.path.join(run, "data_val.parquet"))
    scores = pd.read_parquet(os.path.join(run, "scores.parquet"))
    import mixer

    predicted = mixer.load(run).predict(list(val["text"]), head="flat")
    np.testing.assert_allclose(
        predicted["confidence_raw"].to_numpy(), scores["flat_confidence"].to_numpy(), rtol=1e-5
    )
    off = tmp_path / "off"
    proc = run_program(
        "finetune.py",
        "--dataset",
        rows,
        "--target-cols",
        "hisco_1",
        "--save-path",
        off,
        *SHORT,
        "--no-ngram-head",
    )
    assert not (off / ngram.NGRAM_FILE).exists() and "n-gram head" not in proc.stdout


def test_the_file_is_the_same_bytes_for_the_same_head(fitted, tmp_path):
    from mixer.models import ngram

    run, _ = fitted
    ngram.read(run).save(str(tmp_path))
    assert (tmp_path / ngram.NGRAM_FILE).read_bytes() == open(
        os.path.join(run, ngram.NGRAM_FILE), "rb"
    ).read()


def test_a_model_with_the_head_predicts_the_combined_logits_and_the_cli_the_api(
    fitted, rows, tmp_path
):
    import mixer
    from mixer.models import ngram

    run, _ = fitted
    alone = tmp_path / "alone"
    shutil.copytree(run, alone)
    os.remove(alone / ngram.NGRAM_FILE)
    texts = list(pd.read_csv(rows, dtype=str)["occ1"].head(40))
    combined = mixer.load(run).predict(texts, what="logits", head="flat")
    encoder = mixer.load(str(alone)).predict(texts, what="logits", head="flat")
    head = ngram.read(run)
    assert head.weight > 0  # the example rows pick a weight the combination shows in
    np.testing.assert_allclose(
        np.asarray(combined, dtype=np.float64),
        np.asarray(encoder, dtype=np.float64) + head.offsets(texts),
        rtol=1e-5,
        atol=1e-5,
    )
    # predict.py writes what the API returns
    frame = pd.DataFrame({"occ1": texts})
    frame.to_csv(tmp_path / "in.csv", index=False)
    run_program(
        "predict.py",
        "--checkpoint",
        run,
        "--input",
        tmp_path / "in.csv",
        "--output",
        tmp_path / "out.csv",
    )
    written = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    api = mixer.load(run).predict(texts)
    assert list(written["code_1"]) == list(api["code_1"])
    np.testing.assert_allclose(
        written["prob_1"].astype(float), api["prob_1"].astype(float), rtol=1e-5
    )
    without = mixer.load(str(alone)).predict(texts)
    assert not np.allclose(
        without["prob_1"].astype(float).to_numpy(), api["prob_1"].astype(float).to_numpy()
    )


def test_a_damaged_head_is_refused_in_one_line(fitted, rows, tmp_path, capsys):
    from mixer.models import ngram

    run, _ = fitted
    damaged = tmp_path / "damaged"
    shutil.copytree(run, damaged)
    (damaged / ngram.NGRAM_FILE).write_bytes(b"not a zip file")
    line = fails(
        capsys,
        "predict",
        ["--checkpoint", damaged, "--input", rows, "--output", tmp_path / "out.csv"],
        "ngram.npz",
        "cannot read the n-gram head",
        "delete it",
    )
    assert not (tmp_path / "out.csv").exists(), line


def _stored(path) -> dict:
    with np.load(path, allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


def test_a_head_damaged_inside_or_of_another_model_is_refused_in_one_line(
    fitted, rows, tmp_path, capsys
):
    """Bytes flipped inside a member (a zlib error, not a bad zip), arrays of the wrong kind
    (a weight that is not a number, float class indices) and a head of another key's size are
    refused in one line, as a file that is no zip is."""
    from mixer.models import ngram

    run, _ = fitted
    good = open(os.path.join(run, ngram.NGRAM_FILE), "rb").read()
    arrays = _stored(os.path.join(run, ngram.NGRAM_FILE))
    damages = {}
    for at in (60, 200, len(good) // 2):  # in the first members' compressed data, mid-file
        flipped = bytearray(good)
        flipped[at : at + 8] = bytes(b ^ 0xFF for b in good[at : at + 8])
        damages[f"flipped{at}"] = (bytes(flipped), "cannot read the n-gram head")
    damages |= {
        "nan": ({**arrays, "weight": np.float64("nan")}, "do not fit together"),
        "float": ({**arrays, "columns": arrays["columns"] + 0.5}, "do not fit together"),
        "other": ({**arrays, "num_codes": np.int64(arrays["num_codes"] + 1)}, "another model"),
    }
    for name, (damage, needle) in damages.items():
        damaged = tmp_path / name
        shutil.copytree(run, damaged)
        path = damaged / ngram.NGRAM_FILE
        if isinstance(damage, bytes):
            path.write_bytes(damage)
        else:
            np.savez(str(path)[: -len(".npz")], **damage)
        out = tmp_path / f"{name}.csv"
        fails(
            capsys,
            "predict",
            ["--checkpoint", damaged, "--input", rows, "--output", out],
            "ngram.npz",
            needle,
            "delete it",
        )
        assert not out.exists()


def test_choose_weight_takes_the_most_rows_right_then_the_lower_loss():
    from mixer.models import ngram

    logits = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, -1.0]])
    labels = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    # the n-gram scores put the right code first once weighted by 1.5 or more
    scores = np.array([[-1.0, -1.0, 1.0], [1.0, -1.0, -1.0]])
    weight, measured = ngram.choose_weight(logits, scores, labels)
    assert measured[0.0][0] == 0.0 and measured[weight][0] == 1.0
    assert weight == min(w for w in ngram.WEIGHTS if measured[w][0] == 1.0) or all(
        measured[weight][1] <= measured[w][1] for w in ngram.WEIGHTS if measured[w][0] == 1.0
    )


def test_the_best_model_is_scored_with_the_head_and_carries_its_file(rows, tmp_path):
    """--keep-best chooses among the encoder's own evaluations; RUN/best/ is then scored
    with the head, as predict.py reads it, and carries the same file."""
    import mixer
    from mixer.models import ngram

    out = tmp_path / "run"
    run_program(
        "finetune.py",
        "--dataset",
        rows,
        "--target-cols",
        "hisco_1",
        "--save-path",
        out,
        *SHORT,
        "--eval-interval",
        "5",
        "--keep-best",
        "val_flat_accuracy",
    )
    best = out / "best"
    assert (best / ngram.NGRAM_FILE).read_bytes() == (out / ngram.NGRAM_FILE).read_bytes()
    val = pd.read_parquet(out / "data_val.parquet")
    scores = pd.read_parquet(best / "scores.parquet")
    predicted = mixer.load(str(best)).predict(list(val["text"]), head="flat")
    np.testing.assert_allclose(
        predicted["confidence_raw"].to_numpy(), scores["flat_confidence"].to_numpy(), rtol=1e-5
    )


def test_a_run_finished_without_the_head_run_again_rescored_its_best_with_it(rows, tmp_path):
    """A --keep-best run finished without the head (as before it existed), run again with it:
    RUN/best/ gets the file and its scores are then of the combined head, as predict.py
    reads it (not the encoder's alone beside the head's file); run again without it, the
    file leaves RUN/ and RUN/best/ and their scores are the encoder's again."""
    import mixer
    from mixer.models import ngram

    out = tmp_path / "run"
    args = ["--dataset", rows, "--target-cols", "hisco_1", "--save-path", out, *SHORT]
    args += ["--eval-interval", "5", "--keep-best", "val_flat_accuracy"]
    for flags in (["--no-ngram-head"], [], ["--no-ngram-head"]):
        run_program("finetune.py", *args, *flags)
        val = list(pd.read_parquet(out / "data_val.parquet")["text"])
        for model in (out / "best", out):  # RUN/scores.parquet too: the encoder's again
            assert (model / ngram.NGRAM_FILE).exists() == (not flags)
            scores = pd.read_parquet(model / "scores.parquet")
            weights = model if model.name == "best" else model / "model.safetensors"
            predicted = mixer.load(str(weights)).predict(val, head="flat")
            np.testing.assert_allclose(
                predicted["confidence_raw"].to_numpy(),
                scores["flat_confidence"].to_numpy(),
                rtol=1e-5,
            )


def test_a_killed_prediction_is_refused_when_the_head_changed_since(fitted, rows, tmp_path, capsys):
    """The n-gram head is part of the model that made a killed job's chunks: one removed (or
    replaced) before the rerun is refused in one line, not mixed into the same output."""
    from conftest import env_for_subprocess
    from mixer.models import ngram

    run, _ = fitted
    model = tmp_path / "model"
    shutil.copytree(run, model)
    work = tmp_path / "work"
    work.mkdir()
    cmd = ["--checkpoint", model, "--input", rows, "--output", work / "out.csv"]
    cmd += ["--chunk-size", "100"]
    env = env_for_subprocess()
    env["MIXER_PREDICT_FAULT_AFTER_CHUNK"] = "1"  # a kill -9 once chunk 1 is written
    assert run_program("predict.py", *cmd, env=env, check=False).returncode == 9
    os.remove(model / ngram.NGRAM_FILE)
    fails(capsys, "predict", cmd, "ngram.npz", "--restart", watch=work)


def test_a_best_rescoring_interrupted_leaves_best_without_the_new_head(rows, tmp_path, monkeypatch):
    """A run finished without the head, run again with it, stopped by a signal while its best
    is scored with the head: RUN/best/ stays as it was, without ngram.npz beside the scores
    it holds (so the job run again scores it); then run again, best/ is consistent."""
    import mixer
    from mixer.cli.entrypoints import finetune_main
    from mixer.models import ngram
    from mixer.training.best import hook

    out = tmp_path / "run"
    args = ["--dataset", rows, "--target-cols", "hisco_1", "--save-path", out, *SHORT]
    args += ["--eval-interval", "5", "--keep-best", "val_flat_accuracy"]
    run_program("finetune.py", *args, "--no-ngram-head")
    best = out / "best"
    before = (best / "scores.parquet").read_bytes()
    with monkeypatch.context() as patched:
        patched.setattr(hook.KeepBest, "evaluate_best", lambda *a, **k: hook.INTERRUPTED)
        assert finetune_main([str(a) for a in args]) == 0
    assert (best / "scores.parquet").read_bytes() == before
    assert not (best / ngram.NGRAM_FILE).exists()
    run_program("finetune.py", *args)
    assert (best / ngram.NGRAM_FILE).read_bytes() == (out / ngram.NGRAM_FILE).read_bytes()
    val = list(pd.read_parquet(out / "data_val.parquet")["text"])
    predicted = mixer.load(str(best)).predict(val, head="flat")
    np.testing.assert_allclose(
        predicted["confidence_raw"].to_numpy(),
        pd.read_parquet(best / "scores.parquet")["flat_confidence"].to_numpy(),
        rtol=1e-5,
    )


def test_the_model_fingerprint_an_audit_states_tells_the_head_apart(fitted, tmp_path):
    """An audit and the predictions' provenance name the model by its fingerprint: the same
    weights predict otherwise with another n-gram head or none, so each gets its own, and a
    copy of the directory keeps it."""
    import mixer
    from mixer.audit.draw import model_fingerprint
    from mixer.models import ngram

    run, _ = fitted
    copy, alone = tmp_path / "copy", tmp_path / "alone"
    shutil.copytree(run, copy)
    shutil.copytree(run, alone)
    os.remove(alone / ngram.NGRAM_FILE)
    head = ngram.read(run)
    other = dataclasses.replace(head, weight=head.weight + 1.0)

    def print_of(directory) -> str:
        return model_fingerprint(mixer.load(str(directory)).predictor)

    with_head, without = print_of(run), print_of(alone)
    assert with_head != without and print_of(copy) == with_head
    reweighed = mixer.load(run).predictor
    reweighed.ngram = other
    assert model_fingerprint(reweighed) not in (with_head, without)


def test_the_fit_beside_the_training_gives_the_head_fitted_in_the_process(toy_frame):
    """The head fitted in the child process started with the run (BackgroundFit) is the
    head fit() gives on the same rows, to the bit; a child that fails is replaced by
    fitting in the process, and says why."""
    from mixer.models import ngram

    frame = toy_frame.head(400)
    texts = list(frame["occ1"])
    codes = {code: i for i, code in enumerate(sorted(set(frame["hisco_1"])))}
    classes = np.array([codes[code] for code in frame["hisco_1"]])
    here = ngram.fit(texts, classes, len(codes))
    background = ngram.BackgroundFit(texts, classes, len(codes))
    beside = background.result()
    assert background.failure is None
    assert beside.digest() == here.digest()
    assert beside.vocabulary.tolist() == here.vocabulary.tolist()
    assert np.array_equal(beside.coef, here.coef)

    broken = ngram.BackgroundFit(texts, classes, len(codes))
    broken.process.kill()  # as a child the machine's limits killed
    assert broken.result().digest() == here.digest()
    assert "status" in broken.failure


def test_the_run_starts_the_head_fit_with_its_training_and_uses_it(
    rows, tmp_path, monkeypatch, capsys
):
    """The fit starts when the job starts (before the first step), and the head written is
    the one fitted beside the training, as the run's line says."""
    import mixer
    from mixer.cli.entrypoints import finetune_main
    from mixer.models import ngram
    from mixer.training import trainer

    events = []
    started = ngram.BackgroundFit.__init__
    step = trainer.Trainer.train_step

    def start(self, *args):
        events.append("fit started")
        started(self, *args)

    def train_step(self, *args):
        events.append("step")
        return step(self, *args)

    monkeypatch.setattr(ngram.BackgroundFit, "__init__", start)
    monkeypatch.setattr(trainer.Trainer, "train_step", train_step)
    out = tmp_path / "run"
    args = ["--dataset", rows, "--target-cols", "hisco_1", "--save-path", out, *SHORT]
    assert finetune_main([str(a) for a in args]) == 0
    printed = "".join(capsys.readouterr())
    assert events[0] == "fit started" and events.count("fit started") == 1
    assert "step" in events
    assert "noised copies (fitted beside the training, waited for" in printed
    assert ngram.read(str(out)).digest() == mixer.load(str(out))._predictor.ngram.digest()


def test_a_process_forked_after_the_fit_started_does_not_hold_it_up(toy_frame):
    """A DataLoader's workers are forked after the job starts the fit, and keep what they
    inherit open for the whole training, the pipe into the fit included: the fit must not
    wait for that pipe's end."""
    import threading

    from mixer.models import ngram

    frame = toy_frame.head(300)
    codes = {code: i for i, code in enumerate(sorted(set(frame["hisco_1"])))}
    classes = np.array([codes[code] for code in frame["hisco_1"]])
    background = ngram.BackgroundFit(list(frame["occ1"]), classes, len(codes))
    release, hold = os.pipe()
    worker = os.fork()
    if worker == 0:  # a worker: alive, holding what it inherited, until released
        os.read(release, 1)
        os._exit(0)
    try:
        done = []
        waiter = threading.Thread(target=lambda: done.append(background.result()), daemon=True)
        waiter.start()
        waiter.join(timeout=120)  # seconds, where the fit takes about one
        assert done and done[0] is not None and background.failure is None
    finally:
        os.write(hold, b"x")
        os.waitpid(worker, 0)


def _fit_children() -> list:
    """This process's children that are (or were: zombies) a fit beside the training."""
    from conftest import children

    found = []
    for pid in children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"mixer.models.ngram" in cmdline or state == "Z":
            found.append(pid)
    return found


@pytest.mark.parametrize("how", ["stop-at-step", "exception"])
def test_no_fit_beside_the_training_outlives_a_job_that_ends_early(rows, tmp_path, how):
    """A job that ends before its final evaluation (--stop-at-step, a stop signal, an
    exception in a step) stops the fit it started: in a long Python session (mixer.finetune
    called again and again) it would otherwise live on, and wait with its head in a pipe."""
    import gc

    from mixer.cli.entrypoints import finetune_main
    from mixer.training import trainer

    args = ["--dataset", rows, "--target-cols", "hisco_1", "--save-path", tmp_path / "run"]
    args = [str(a) for a in [*args, *SHORT]]
    gc.disable()  # the job's objects are not collected before the check
    try:
        if how == "stop-at-step":
            assert finetune_main([*args, "--stop-at-step", "1"]) == 0
        else:
            step = trainer.Trainer.train_step

            def failing(self, *a):
                if self.progress.step >= 1:
                    raise RuntimeError("a failing step")
                return step(self, *a)

            trainer.Trainer.train_step = failing
            try:
                with pytest.raises(RuntimeError, match="a failing step"):
                    finetune_main(args)
            finally:
                trainer.Trainer.train_step = step
        assert _fit_children() == []
    finally:
        gc.enable()


def test_a_fit_beside_the_training_whose_output_is_unreadable_is_fitted_here(
    toy_frame, tmp_path, monkeypatch
):
    """A child that exits 0 but writes something else than the head (a site's start-up
    script printing, another python) is a failed child: the head is fitted in the process."""
    from mixer.models import ngram

    frame = toy_frame.head(200)
    codes = {code: i for i, code in enumerate(sorted(set(frame["hisco_1"])))}
    classes = np.array([codes[code] for code in frame["hisco_1"]])
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\ncat >/dev/null\necho 'welcome to the cluster'\n")
    python.chmod(0o755)
    monkeypatch.setattr(ngram.sys, "executable", str(python))
    background = ngram.BackgroundFit(list(frame["occ1"]), classes, len(codes))
    head = background.result()
    background.close()
    assert head.digest() == ngram.fit(list(frame["occ1"]), classes, len(codes)).digest()
    assert "could not be read" in background.failure


def test_the_fit_beside_the_training_reads_the_texts_as_they_are(toy_frame):
    """Texts reach the child as they are (a trailing NUL, a lone surrogate from bytes read
    with surrogateescape), and their size is what they hold: one long description does not
    make every row as long (a fixed-width array of MAX_FIT_ROWS rows would)."""
    import tracemalloc

    from mixer.models import ngram

    frame = toy_frame.head(200)
    texts = [t + "\x00" if i % 3 == 0 else t for i, t in enumerate(frame["occ1"])]
    texts[1] += " caf\udce9"
    codes = {code: i for i, code in enumerate(sorted(set(frame["hisco_1"])))}
    classes = np.array([codes[code] for code in frame["hisco_1"]])
    background = ngram.BackgroundFit(texts, classes, len(codes))
    head = background.result()
    background.close()
    assert background.failure is None
    assert head.digest() == ngram.fit(texts, classes, len(codes)).digest()

    long = [*texts[:-1], "x" * 20_000]
    tracemalloc.start()
    try:
        ngram.BackgroundFit(long, classes, len(codes)).close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak  # 200 rows of 20,000 characters would be 16 MB each copy


def test_a_fit_whose_parent_died_as_it_started_ends_at_once():
    """The parent-death signal is asked for once the child runs: a parent killed before
    that (kill -9 as the run starts) leaves a child that must see it and end, not fit."""
    import subprocess
    import sys

    from conftest import env_for_subprocess

    child = subprocess.Popen(
        [sys.executable, "-m", "mixer.models.ngram", str(os.getpid() + 10**7)],
        stdin=subprocess.PIPE,  # held open: a child that does not check waits on it
        stdout=subprocess.DEVNULL,
        env=env_for_subprocess(),
    )
    try:
        assert child.wait(timeout=60) != 0
    finally:
        child.kill()
        child.wait()
        child.stdin.close()


def test_a_fit_beside_the_training_that_gets_no_cpu_is_taken_over(toy_frame, monkeypatch):
    """On a machine whose other processes keep every core busy, the child at idle priority
    gets no CPU even while the run waits for it: the run then fits the head itself (the
    same head) and says why, instead of waiting without end. A stopped child stands for it."""
    import signal
    import threading

    from mixer.models import ngram

    monkeypatch.setattr(ngram, "TAKE_OVER_SECONDS", 0.5)
    frame = toy_frame.head(300)
    codes = {code: i for i, code in enumerate(sorted(set(frame["hisco_1"])))}
    classes = np.array([codes[code] for code in frame["hisco_1"]])
    texts = list(frame["occ1"])
    background = ngram.BackgroundFit(texts, classes, len(codes))
    os.kill(background.process.pid, signal.SIGSTOP)  # it gets no CPU from now on
    try:
        done = []
        waiter = threading.Thread(target=lambda: done.append(background.result()), daemon=True)
        waiter.start()
        waiter.join(timeout=120)  # seconds, where taking over takes about one
        assert done, "the run waited for a child that got no CPU"
        assert done[0].digest() == ngram.fit(texts, classes, len(codes)).digest()
        assert "of a core" in background.failure
        assert background.process.poll() is not None  # the child was stopped for good
    finally:
        background.close()

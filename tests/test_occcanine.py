"""OccCANINE's published models: read, predicted with exactly, fine-tuned, exported.

The models here are built from the documented architecture (../shared/OCCCANINE.md;
tests/occcanine_reference.py) with generated weights and a small CANINE, and
predicted with by a reference written here: sequence-first tensors, the whole
prefix decoded again at every greedy step, the input string built by hand.
mixer must give the same codes in the same order, probabilities and embeddings
within the suite's float tolerance (conftest.FLOATS)."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from conftest import (
    ROOT,
    TRAINED_WEIGHTS_ATOL,
    assert_floats_close,
    env_for_subprocess,
    run_program,
    run_without,
)
from occcanine_reference import TEXTS, Reference
from mixer.core.errors import UserError

THRESHOLDS = {"en": 0.26, "da": 0.24, "unk": 0.31}


# ------------------------------------------------------------------ the reference
HISCO_TOKEN = {str(c): c + 8 for c in range(-3, 10)}  # UNK 0, PAD 1, BOS 2, EOS 3, SEP 4
SYMBOL = {v: k for k, v in HISCO_TOKEN.items()}


def model_input(texts, lang):
    from unidecode import unidecode

    return [f"{lang}[SEP]{unidecode(t.lower())}" for t in texts]


def reference_flat(model, key, texts, lang):
    with torch.no_grad():
        probs = model.linear_decoder(model.encode(model_input(texts, lang))[1]).sigmoid()
    out = []
    for text, row in zip(texts, probs):
        top = torch.argsort(row, descending=True)[:5]
        out.append(
            []
            if blank(text)
            else [(key[i], float(row[i])) for i in top if row[i] > THRESHOLDS[lang]]
        )
    return out


def blank(text: str) -> bool:
    """A row without a description: mixer gives it no code where OccCANINE codes the bare
    'lang[SEP]' (docs/occcanine.md, where mixer differs on purpose)."""
    return not text.strip()


def read_block(block):
    if 1 in block:
        return None
    if block[0] in (5, 6, 7):
        return SYMBOL[block[0]]
    if all(t in SYMBOL for t in block):
        return "".join(SYMBOL[t] for t in block)
    return None


def reference_greedy(model, texts, lang):
    with torch.no_grad():
        memory = model.encode(model_input(texts, lang))[0]
        tokens = torch.full((len(texts), 1), 2)
        probs = torch.ones(len(texts), 1)
        for _ in range(26):  # 5 blocks of 5, then EOS: every step decodes the whole prefix
            step = model.decode(memory, tokens)[:, -1].softmax(-1)
            p, nxt = step.max(-1)
            tokens, probs = torch.cat([tokens, nxt[:, None]], 1), torch.cat([probs, p[:, None]], 1)
        out = []
        for row in range(len(texts)):
            blocks = [tokens[row, 1 + 5 * b : 6 + 5 * b].tolist() for b in range(5)]
            codes = [c for c in map(read_block, blocks) if c is not None]
            conf = float(probs[row].prod())
            if len(codes) > 1:  # order-invariant: each distinct code written first
                conf = 0.0
                for code in set(codes):
                    seq = torch.tensor(
                        [
                            [2]
                            + (
                                [HISCO_TOKEN[code]] * 5
                                if code in ("-1", "-2", "-3")
                                else [HISCO_TOKEN[ch] for ch in code]
                            )
                        ]
                    )
                    step = model.decode(memory[row : row + 1], seq[:, :-1]).softmax(-1)
                    conf += float(step[0].gather(1, seq[0, 1:, None]).prod())
            out.append(([], conf) if blank(texts[row]) else (codes, conf))
    return out


def assert_same_ranked(ours: pd.DataFrame, reference):
    for row, expected in enumerate(reference):
        got = [
            (ours[f"code_{k}"][row], ours[f"prob_{k}"][row])
            for k in range(1, 6)
            if ours[f"code_{k}"][row] != ""
        ]
        assert [c for c, _ in got] == [c for c, _ in expected], row
        assert_floats_close([p for _, p in got], [p for _, p in expected], err_msg=f"row {row}")


# ------------------------------------------------------------------ 1. predict
@pytest.mark.floats
@pytest.mark.parametrize("layout", ["hub", "bin"])
def test_predictions_equal_the_documented_model(hisco_model, layout):
    import mixer

    model = mixer.load(hisco_model[layout], device="cpu")
    assert model.family == "occcanine" and len(model.codes) == 1919
    for lang in ("en", "da"):
        assert_same_ranked(
            model.predict(TEXTS, lang=lang),
            reference_flat(hisco_model["model"], hisco_model["key"], TEXTS, lang),
        )
    greedy = model.predict(TEXTS, lang="en", head="seq2seq")
    reference = reference_greedy(hisco_model["model"], TEXTS, "en")
    assert sum(len(codes) > 1 for codes, _ in reference) >= 2  # rows of several codes are covered
    for row, (codes, conf) in enumerate(reference):
        got = [greedy[f"code_{k}"][row] for k in range(1, 6) if greedy[f"code_{k}"][row] != ""]
        assert got == codes, row
        if codes:
            assert_floats_close(greedy["prob_1"][row], conf, err_msg=f"row {row}")
    with torch.no_grad():
        pooled = hisco_model["model"].encode(model_input(TEXTS, "da"))[1].numpy()
    assert_floats_close(model.embeddings(TEXTS, lang="da"), pooled)


def reference_full(model, key, texts, lang, threshold):
    """Every code of the key scored as the first code by the decoder (teacher forcing on
    its block after BOS, the memory padded to 128), then thresholded and ranked."""
    with torch.no_grad():
        memory = model.encode(model_input(texts, lang))[0]
        blocks = torch.tensor(
            [
                [2]
                + (
                    [HISCO_TOKEN[c]] * 5
                    if c in ("-1", "-2", "-3")
                    else [HISCO_TOKEN[ch] for ch in c]
                )
                for c in key
            ]
        )
        probs = []
        for row in range(len(texts)):
            step = model.decode(
                memory[row : row + 1].expand(len(key), -1, -1), blocks[:, :-1]
            ).softmax(-1)
            probs.append(step.gather(2, blocks[:, 1:, None]).squeeze(2).prod(1))
    out = []
    for row in torch.stack(probs):
        top = torch.argsort(row, descending=True)[:5]
        out.append([(key[i], float(row[i])) for i in top if row[i] > threshold])
    return out


@pytest.mark.floats
def test_the_full_head_scores_every_code_as_the_documented_decoder(hisco_model):
    """The decoder reads every position of OccCANINE's 128 characters, padding included:
    the full head (and greedy decoding above) keep them, while the flat head and the
    embeddings read shorter batches (mixer.data.inputs.padding)."""
    import mixer

    model = mixer.load(hisco_model["hub"], device="cpu")
    texts = TEXTS[:6]
    reference = reference_full(hisco_model["model"], hisco_model["key"], texts, "en", 1e-7)
    ours = model.predict(
        texts, lang="en", head="full", threshold=1e-7
    )  # these weights' codes are unlikely
    for row, expected in enumerate(reference):
        assert len(expected) == 5 and [ours[f"code_{k}"][row] for k in range(1, 6)] == [
            c for c, _ in expected
        ]
        assert_floats_close(
            [ours[f"prob_{k}"][row] for k in range(1, 6)],
            [p for _, p in expected],
            err_msg=f"row {row}",
        )


def test_occcanine_predictions_are_true_fp32_unless_tf32_is_asked_for(hisco_model):
    """The TF32 switch seen by the encoder and the heads while a batch computes: off for
    OccCANINE's models (exact) even where the caller turned TF32 on, on with tf32=True;
    the caller's setting is back after a call and while a batch generator is suspended."""
    import mixer

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32)
    try:
        for callers, tf32, inside in [
            (True, None, False),
            (False, True, True),
            (True, False, False),
        ]:
            matmul.allow_tf32 = cudnn.allow_tf32 = callers
            model = mixer.load(hisco_model["hub"], device="cpu", tf32=tf32)
            net = model._predictor.model
            seen = []
            for part in (net.encoder, net.flat_head, net.decoder):
                part.register_forward_hook(
                    lambda *_: seen.append((matmul.allow_tf32, cudnn.allow_tf32))
                )
            model.predict(TEXTS[:3], lang="en")
            model.predict(TEXTS[:3], lang="en", head="seq2seq")
            model.embeddings(TEXTS[:3], lang="en")
            assert seen and set(seen) == {(inside, inside)}, (callers, tf32)
            assert (matmul.allow_tf32, cudnn.allow_tf32) == (callers, callers)
            batches = model._predictor._encoded(
                np.asarray(TEXTS, dtype=object), np.asarray(["en"] * len(TEXTS), dtype=object), 4
            )
            next(batches)  # suspended after its first batch
            assert (matmul.allow_tf32, cudnn.allow_tf32) == (callers, callers)
            batches.close()
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before


def test_predict_py_reads_every_layout_with_per_language_thresholds(hisco_model, tmp_path):
    data = tmp_path / "in.csv"
    pd.DataFrame({"occ1": TEXTS, "lang": ["en", "da"] * 6}).to_csv(data, index=False)
    outputs = []
    for source in (hisco_model["hub"], hisco_model["bin"]):
        out = tmp_path / f"out{len(outputs)}.csv"
        proc = run_program(
            "predict.py",
            "--checkpoint",
            source,
            "--input",
            data,
            "--output",
            out,
            "--language-col",
            "lang",
        )
        assert "[occcanine]" not in proc.stderr  # Unidecode is installed: nothing to say
        outputs.append(pd.read_csv(out, dtype=str, keep_default_na=False))
    pd.testing.assert_frame_equal(outputs[0], outputs[1])
    frame = outputs[0]
    for lang in ("en", "da"):  # each row with its language's threshold
        rows = frame["lang"] == lang
        expected = reference_flat(
            hisco_model["model"], hisco_model["key"], list(frame["occ1"][rows]), lang
        )
        got = [
            [c for c in frame.loc[i, [f"code_{k}" for k in range(1, 6)]] if c]
            for i in frame.index[rows]
        ]
        assert got == [[c for c, _ in e] for e in expected]
    assert set(frame.columns) >= {"code_1", "prob_1", "desc_1", "code_5"}


def test_a_hub_id_is_read_from_the_cache_offline(hisco_model, tmp_path):
    snapshot = tmp_path / "hf" / "hub" / "models--Christianvedel--OccCANINE_s2s_mix"
    revision = "0" * 40
    (snapshot / "snapshots" / revision).mkdir(parents=True)
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text(revision)
    for name in ("config.json", "model.safetensors"):
        os.link(os.path.join(hisco_model["hub"], name), snapshot / "snapshots" / revision / name)
    env = env_for_subprocess()
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    data = tmp_path / "in.csv"
    pd.DataFrame({"occ1": TEXTS[:4]}).to_csv(data, index=False)
    run_program(
        "predict.py",
        "--checkpoint",
        "Christianvedel/OccCANINE_s2s_mix",
        "--input",
        data,
        "--output",
        tmp_path / "out.csv",
        "--language",
        "en",
        env=env,
    )
    expected = reference_flat(hisco_model["model"], hisco_model["key"], TEXTS[:4], "en")
    assert pd.read_csv(tmp_path / "out.csv", dtype=str)["code_1"].tolist() == [
        e[0][0] for e in expected
    ]
    env["HF_HOME"] = str(tmp_path / "empty")
    proc = run_program(
        "predict.py",
        "--checkpoint",
        "Christianvedel/OccCANINE_OCC1950",
        "--input",
        data,
        "--output",
        tmp_path / "x.csv",
        env=env,
        check=False,
    )
    assert proc.returncode == 2 and "not in the Hugging Face cache" in proc.stderr
    said, error = (
        proc.stderr.strip().splitlines()
    )  # the fetch is announced, then its one-line error
    assert said == "fetching Hugging Face model Christianvedel/OccCANINE_OCC1950"
    assert error.startswith("error: --checkpoint Christianvedel/OccCANINE_OCC1950: not in the")


def test_a_general_system_checkpoint_with_its_key_beside_it(tmp_path):
    """Another code system: 3-digit codes, key.csv (system_code, code) beside the .bin,
    the decoder's symbols from the default set; reads, and its shapes are checked."""
    import mixer

    torch.manual_seed(3)
    codes = [f"{i:03d}" for i in range(0, 900, 30)]
    chars = [str(i) for i in range(-999, 1000)] + [chr(c) for c in range(97, 123)]
    import string

    chars = (
        [str(i) for i in range(-999, 1000)]
        + list(string.ascii_letters)
        + [c for c in string.punctuation if c not in "&,"]
    )
    model = Reference(len(codes), len(chars) + 6)
    pd.DataFrame({"system_code": codes, "code": range(len(codes))}).to_csv(
        tmp_path / "key.csv", index=False
    )
    torch.save({"model": model.state_dict()}, tmp_path / "ckpt.pt")
    loaded = mixer.load(str(tmp_path / "ckpt.pt"), device="cpu")
    assert list(loaded.codes["code"]) == codes
    expected = reference_flat(model.eval(), codes, TEXTS[:5], "en")
    assert_same_ranked(loaded.predict(TEXTS[:5], lang="en"), expected)


# ------------------------------------------------------------------ bad sources
def run_predict(source, tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("occ1\nfarmer\n")
    return run_program(
        "predict.py",
        "--checkpoint",
        source,
        "--input",
        data,
        "--output",
        tmp_path / "out.csv",
        check=False,
    )


def test_bad_sources_get_one_line_each(hisco_model, tmp_path):
    state = {k: v.clone() for k, v in hisco_model["model"].state_dict().items()}
    cases = {}
    torch.save(
        {"model": state, "extra": pickle.dumps}, tmp_path / "code.bin"
    )  # needs unpickling code
    cases["code.bin"] = "could run code"
    wrong = dict(state)
    wrong["linear_decoder.weight"] = wrong["linear_decoder.weight"][:100]
    wrong["linear_decoder.bias"] = wrong["linear_decoder.bias"][:100]
    torch.save({"model": wrong}, tmp_path / "wrongkey.bin")
    cases["wrongkey.bin"] = "no key"
    missing = {k: v for k, v in state.items() if k != "decoder.head.bias"}
    torch.save({"model": missing}, tmp_path / "missing.bin")
    cases["missing.bin"] = "decoder.head.bias"
    shapes = dict(state)
    shapes["decoder.decoder.layers.0.linear1.weight"] = torch.zeros(64, 128)
    torch.save({"model": shapes}, tmp_path / "shapes.bin")
    cases["shapes.bin"] = "shapes do not fit"
    for name, needle in cases.items():
        proc = run_predict(tmp_path / name, tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], (name, proc.stderr)
        assert "\x1b" not in proc.stderr  # no terminal colour codes from torch's message


# ------------------------------------------------------------------ 2. fine-tune
HISCO_DATA = [
    "--formatter",
    "hisco",
    "--num-target-cols",
    "1",
    "--allow-codes-shorter-than-block-size",
    "--language",
    "en",
    "--dropout",
    "0",
    "--val-max-rows",
    "32",
    "--batch-size",
    "8",
]


@pytest.fixture(scope="module")
def hisco_rows(tmp_path_factory, toy_frame) -> str:
    path = tmp_path_factory.mktemp("rows") / "hisco.csv"
    toy_frame.head(64).to_csv(path, index=False)
    return str(path)


def test_one_step_at_learning_rate_0_predicts_as_the_source(hisco_model, hisco_rows, tmp_path):
    import mixer

    out = tmp_path / "run"
    proc = run_program(
        "train_mixer.py",
        "--train-data",
        hisco_rows,
        "--val-data",
        hisco_rows,
        "--initial-checkpoint",
        hisco_model["hub"],
        "--save-dir",
        out,
        "--max-steps",
        1,
        "--learning-rate",
        0,
        *HISCO_DATA,
    )
    assert "1919 codes matched by code" in proc.stdout
    # OccCANINE's models keep their exact layout: no n-gram head beside their flat head
    assert not (out / "ngram.npz").exists() and "n-gram head" not in proc.stdout
    config = json.load(open(out / "config.json"))
    assert (
        config["source"]["kind"] == "occcanine" and config["source"]["from"] == hisco_model["hub"]
    )
    assert config["heads"]["family"] == "occcanine" and config["thresholds"]["en"] == 0.26
    assert config["threshold"] == 0.31  # languages outside the table: OccCANINE's, not 0.5
    # OccCANINE's own decoder, kept, reads every position: its batches stay at 128 characters
    assert config["heads"]["decoder_reads_padding"] is True and "new heads" not in proc.stdout
    assert "micro-batches padded whole: inputs padded to 128 characters" in proc.stdout
    assert "recipe: OccCANINE fine-tuning" in proc.stdout and "unknown language 0.25" in proc.stdout
    args = yaml.safe_load(open(out / "args.yaml"))  # the recipe, filled in where no flag said
    assert (
        args["train"]["head_lr_scale"],
        args["train"]["warmup_pct"],
        args["model"]["dropout"],
        args["model"]["head_dropout"],
        args["train"]["augmentation_prob"],
        args["train"]["num_transformations"],
    ) == (1.0, 0.0, 0.0, None, 0.3, 3)  # --dropout 0: all
    assert "from your flags: --learning-rate, --dropout" in proc.stdout
    source, run = mixer.load(hisco_model["hub"], device="cpu"), mixer.load(str(out), device="cpu")
    # languages in the table, outside it ("sv", "xx") and unknown, one per row or mixed
    mixed = (["en", "da", "sv", "unk", "xx", "ge", "", "is"] * len(TEXTS))[: len(TEXTS)]
    for lang in ("en", "da", "sv", "unk", "xx", mixed):
        for head in ("flat", "seq2seq"):
            pd.testing.assert_frame_equal(
                source.predict(TEXTS, lang=lang, head=head),
                run.predict(TEXTS, lang=lang, head=head),
                atol=1e-6,
            )
    # a run of OccCANINE's architecture as the start: OccCANINE's recipe again, not mixer's
    again = run_program(
        "train_mixer.py",
        "--train-data",
        hisco_rows,
        "--val-data",
        hisco_rows,
        "--initial-checkpoint",
        out,
        "--save-dir",
        tmp_path / "again",
        "--max-steps",
        1,
        "--no-eval-noise",
        *HISCO_DATA,
    )
    assert (
        "recipe: OccCANINE fine-tuning (the run starts from a run of OccCANINE's architecture"
        in again.stdout
    )
    assert "learning rate 2e-05, one rate for encoder and heads" in again.stdout
    # exported over an earlier export of another system: its key.json must not stay behind
    from mixer.cli.export_occcanine import export

    hub = tmp_path / "exported"
    hub.mkdir()
    (hub / "key.json").write_text('{"1,2,0": 0}')
    (hub / "chars.json").write_text('["1", ","]')
    assert "key.json" not in export(str(out), str(hub))
    assert sorted(os.listdir(hub)) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]  # the run's card
    pd.testing.assert_frame_equal(
        mixer.load(str(hub), device="cpu").predict(TEXTS, lang="en"),
        run.predict(TEXTS, lang="en"),
        atol=1e-6,
    )


@pytest.mark.floats
def test_fine_tuning_under_torchrun_learns_what_one_process_learns(
    hisco_model, hisco_rows, tmp_path
):
    from safetensors.torch import load_file

    from conftest import max_difference, run, torchrun_cmd

    # the whole model fine-tuned with dropout on (keyed by the row): 0.1 in the encoder as the
    # recipe has it, and 0.1 in OccCANINE's decoder and flat head, which the recipe leaves at 0
    data = [arg for arg in HISCO_DATA[:-2] if arg not in ("--dropout", "0")]
    common = [
        "--train-data",
        hisco_rows,
        "--val-data",
        hisco_rows,
        "--initial-checkpoint",
        hisco_model["bin"],
        "--max-steps",
        "2",
        "--learning-rate",
        "1e-3",
        "--head-dropout",
        "0.1",
        *data,
    ]
    run_program("train_mixer.py", *common, "--save-dir", tmp_path / "one", "--batch-size", 8)
    run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "train_mixer.py"),
            "--distributed",
            *common,
            "--save-dir",
            str(tmp_path / "two"),
            "--batch-size",
            "4",
        ]
    )
    one, two = (
        load_file(tmp_path / "one" / "model.safetensors"),
        load_file(tmp_path / "two" / "model.safetensors"),
    )
    assert max_difference(one, two) < TRAINED_WEIGHTS_ATOL
    start = load_file(os.path.join(hisco_model["hub"], "model.safetensors"))[
        "linear_decoder.weight"
    ]
    assert (one["flat_head.weight"] - start).abs().max() > 1e-4  # it did learn


def test_only_encoder_on_another_code_system_then_export_and_read_back(hisco_model, tmp_path):
    """New heads sized for a new key (comma-separated parts, PST2-like), in OccCANINE's form
    (--new-heads occcanine); the run exports to OccCANINE's hub layout, which reads back with
    the same predictions."""
    import mixer
    from mixer.cli.export_occcanine import export

    rows = pd.DataFrame(
        {
            "occ1": ["farmer", "fisher", "smith", "weaver"] * 8,
            "pst_1": ["1,2,0", "1,12,0", "2,40,3", "2,5,1"] * 8,
        }
    )
    data = tmp_path / "pst.csv"
    rows.to_csv(data, index=False)
    out = tmp_path / "run"
    proc = run_program(
        "finetune.py",
        "--dataset",
        data,
        "--target-cols",
        "pst_1",
        "--save-path",
        out,
        "--initial-checkpoint",
        hisco_model["bin"],
        "--only-encoder",
        "--new-heads",
        "occcanine",
        "--use-within-block-sep",
        "--block-size",
        "3",
        "--max-steps",
        "2",
        "--batch-size",
        "8",
        "--val-max-rows",
        "8",
        "--keep-best",
        "val_loss",
        "--eval-interval",
        "1",
    )
    assert (
        "loaded encoder weights" in proc.stdout and "flat head and decoder start new" in proc.stdout
    )
    assert "learning rate 2e-05, heads x5" in proc.stdout  # new heads learn faster
    assert "new heads (--new-heads occcanine): in OccCANINE's form" in proc.stdout
    assert "micro-batches padded whole: inputs padded to 128 characters" in proc.stdout
    config = json.load(open(out / "config.json"))
    assert (
        config["heads"]["family"] == "occcanine"
        and config["heads"]["decoder_reads_padding"] is True
    )
    assert yaml.safe_load(open(out / "args.yaml"))["model"]["new_heads"] == "occcanine"
    assert config["thresholds"] == {} and config["threshold"] == 0.5  # no HISCO table for PST
    hub = tmp_path / "exported"
    files = export(str(out), str(hub))
    assert {"config.json", "model.safetensors", "key.json", "chars.json", "README.md"} <= set(files)
    card = (hub / "README.md").read_text()  # the best model's card, and how to load the layout
    best = json.load(open(out / "best" / "config.json"))["weights"]
    assert (
        card.startswith("---\n")
        and "## OccCANINE's layout" in card
        and f"model: {out}/best: the best evaluation" in card
    )
    assert (
        f"This directory holds, in OccCANINE's layout, the best evaluation of the run `{out}` by val_loss: "
        f"{best['value']:.4f} at step {best['step']} (epoch 1), exported from `{out}/best`."
    ) in card
    # the thresholds it is read with (OccCANINE's: its config.json has none), and how to predict from it
    assert (
        "these thresholds are OccCANINE's, which OccCANINE's code, predict.py and `mixer.load` apply"
        in card
    )
    assert (
        "above 0.31 (by language: ca 0.3, da 0.24" in card
        and "measured with the run's thresholds, 0.5" in card
    )
    assert (
        f"python predict.py --checkpoint {hub} --input" in card and f'mixer.load("{hub}")' in card
    )
    last = tmp_path / "last"  # the last step's weights: their own card, not the best's
    export(str(out / "model.safetensors"), str(last))
    card = (last / "README.md").read_text()
    assert (
        f"This directory holds, in OccCANINE's layout, the weights of the last step of the run `{out}`, step 2 "
        f"(epoch 1), exported from `{out}/model.safetensors`."
    ) in card
    assert (
        "Measured at step 2 on " in card
        and f"model: {out}/model.safetensors: the weights of its run's last step" in card
    )
    config = json.load(open(hub / "config.json"))
    assert config["model_domain"] == "Multilingual_CANINE" and config["num_classes_flat"] == 4
    run_model, exported = mixer.load(str(out), device="cpu"), mixer.load(str(hub), device="cpu")
    # OccCANINE's layout holds no thresholds: its readers apply OccCANINE's table, while the
    # run (another code system) keeps 0.5; at one threshold both predict the same
    assert exported.predict(TEXTS, lang="en").shape == run_model.predict(TEXTS, lang="en").shape
    for head in ("flat", "seq2seq"):
        pd.testing.assert_frame_equal(
            run_model.predict(TEXTS, lang="en", head=head, top_k=2, threshold=0.26),
            exported.predict(TEXTS, lang="en", head=head, top_k=2, threshold=0.26),
        )
    before = (out / "config.json").read_bytes()
    for target in (out, tmp_path / "run" / ".", out / "encoder"):  # nor is anything in the run
        with pytest.raises(UserError, match="is \\(inside\\) a run directory"):
            export(str(out), str(target))
    assert (out / "config.json").read_bytes() == before


def test_a_fine_tuned_run_evaluates_with_the_thresholds_it_predicts_with(
    hisco_model, toy_frame, tmp_path
):
    """Rows in languages of OccCANINE's table, outside it and unknown: evaluation.csv of an
    lr-0 fine-tune equals predict.py (its stored thresholds by language) + evaluate.py."""
    frame = toy_frame.head(96).copy()
    frame["lang"] = (["en", "da", "sv", "unk", "ge", "xx"] * 16)[: len(frame)]
    data = tmp_path / "langs.csv"
    frame.to_csv(data, index=False)
    run = tmp_path / "run"
    run_program(
        "train_mixer.py",
        "--train-data",
        data,
        "--val-data",
        data,
        "--initial-checkpoint",
        hisco_model["hub"],
        "--save-dir",
        run,
        "--max-steps",
        1,
        "--learning-rate",
        0,
        *[a for a in HISCO_DATA if a not in ("--language", "en")],
        "--language-col",
        "lang",
        "--val-max-rows",
        0,
    )
    written = pd.read_csv(run / "evaluation.csv", keep_default_na=False)
    predictions = tmp_path / "val_predictions.csv"
    run_program(
        "predict.py",
        "--checkpoint",
        run,
        "--input",
        run / "data_val.parquet",
        "--input-col",
        "text",
        "--language-col",
        "lang",
        "--head",
        "flat",
        "seq2seq",
        "--output",
        predictions,
    )
    run_program(
        "evaluate.py",
        "--predictions",
        predictions,
        "--truth-cols",
        "code_1",
        "--by",
        "lang",
        "--output",
        tmp_path / "table.csv",
    )
    table = pd.read_csv(tmp_path / "table.csv", keep_default_na=False)
    written = written[written["head"].isin(["flat", "seq2seq"])].reset_index(drop=True)
    assert set(written["lang"]) >= {"en", "da", "sv", "unk", "ge", "xx"}
    assert (written["head"] == "flat").any()
    pd.testing.assert_frame_equal(
        written, table.rename(columns={"group": "lang"}), check_exact=False, atol=1e-9
    )


def test_without_unidecode_a_run_and_a_prediction_say_once_that_predictions_may_differ(
    hisco_model, hisco_rows, tmp_path
):
    """Only unidecode gives OccCANINE's exact inputs; without it (a GPL-free install) mixer
    spells Greek and Cyrillic out with anyascii and says once what to install."""
    note = "predictions may differ from OccCANINE's on non-ASCII text"
    hint = "[occcanine]'"  # pip install 'mixer[occcanine]', or this clone's path
    out = tmp_path / "run"
    for program, args in (
        (
            "finetune.py",
            [
                "--dataset",
                hisco_rows,
                "--target-cols",
                "hisco_1",
                "--prepare-only",
                "--allow-codes-shorter-than-block-size",
                "--save-path",
                tmp_path / "prep",
            ],
        ),
        (
            "train_mixer.py",
            [
                "--train-data",
                hisco_rows,
                "--val-data",
                hisco_rows,
                "--save-dir",
                out,
                "--max-steps",
                1,
                *HISCO_DATA,
            ],
        ),
    ):
        proc = run_without(
            ["unidecode"], program, "--initial-checkpoint", hisco_model["hub"], *args
        )
        text = proc.stdout + proc.stderr
        assert text.count(note) == 1 and text.count(hint) == 1, text
    data = tmp_path / "in.csv"
    texts = ["γεωργός και ψαράς", "кузнец", "farmer"]
    pd.DataFrame({"occ1": texts, "lang": ["gr", "unk", "en"]}).to_csv(data, index=False)
    proc = run_without(
        ["unidecode"],
        "predict.py",
        "--checkpoint",
        out,
        "--input",
        data,
        "--output",
        tmp_path / "codes.csv",
        "--language-col",
        "lang",
    )
    assert proc.stderr.count(note) == 1 and hint in proc.stderr, proc.stderr
    codes = pd.read_csv(tmp_path / "codes.csv", dtype=str, keep_default_na=False)
    assert list(codes["occ1"]) == texts

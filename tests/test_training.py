"""End to end on one process: training learns, resume is exact, save/load/predict agree."""

import json
import os

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, TINY, run_program
from mixer.cli.entrypoints import finetune_main


def finetune(tmp, csv, *extra):
    args = [
        "--dataset",
        csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        str(tmp),
        "--share-val",
        "0.09",
        *TINY,
        *map(str, extra),
    ]
    assert finetune_main(args) == 0
    return str(tmp)


def logs(run_dir):
    return pd.read_csv(os.path.join(run_dir, "logs.csv"))


def weights(run_dir):
    return load_file(os.path.join(run_dir, "model.safetensors"))


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def test_training_on_a_small_slice_lowers_the_loss(tmp_path, toy_frame):
    # 12 real descriptions, each 10 times: validation rows are descriptions the model trains on
    slice_ = toy_frame[toy_frame["hisco_1"].str.len() == 5].drop_duplicates("occ1").head(12)
    frame = pd.concat([slice_] * 10, ignore_index=True).assign(hisco_2="")
    csv = tmp_path / "slice.csv"
    frame.to_csv(csv, index=False)
    run = finetune(
        tmp_path / "run",
        str(csv),
        "--max-steps",
        40,
        "--eval-interval",
        10,
        "--batch-size",
        16,
        "--learning-rate",
        2e-3,
    )
    table = logs(run)
    assert list(table["step"]) == [10, 20, 30, 40]
    assert table["val_loss"].iloc[-1] < 0.8 * table["val_loss"].iloc[0]
    assert table["train_loss"].iloc[-1] < 0.8 * table["train_loss"].iloc[0]
    for column in (
        "epoch",
        "lr",
        "samples_per_sec",
        "val_flat_accuracy",
        "val_flat_f1",
        "val_seq2seq_accuracy",
        "val_seq2seq_precision",
        "val_seq2seq_recall",
        "val_token_accuracy",
        "val_flat_precision",
        "val_flat_recall",
    ):
        assert column in table.columns
    for name in (
        "args.yaml",
        "key.csv",
        "data_train.parquet",
        "data_val.parquet",
        "last.pt",
        "model.safetensors",
        "config.json",
    ):
        assert os.path.exists(os.path.join(run, name)), name


def test_resume_after_stopping_ends_with_the_same_weights(tmp_path, small_csv):
    common = [
        "--max-steps",
        12,
        "--batch-size",
        8,
        "--dropout",
        0,
        "--seed",
        3,
        "--eval-interval",
        4,
    ]
    straight = finetune(tmp_path / "straight", small_csv, *common)
    split = finetune(tmp_path / "split", small_csv, *common, "--stop-at-step", 5)
    assert not os.path.exists(os.path.join(split, "model.safetensors"))
    state = torch.load(os.path.join(split, "last.pt"), weights_only=True)
    assert state["progress"]["step"] == 5
    finetune(tmp_path / "split", small_csv, *common)
    assert max_difference(weights(straight), weights(split)) < 1e-6
    assert list(logs(split)["step"]) == [4, 8, 12]  # no duplicated rows after the resume
    assert np.allclose(logs(split)["val_loss"], logs(straight)["val_loss"], atol=1e-6)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, small_csv):
    run = tmp_path_factory.mktemp("trained") / "run"
    return finetune(
        run,
        small_csv,
        "--max-steps",
        30,
        "--batch-size",
        16,
        "--learning-rate",
        2e-3,
        "--code-descriptions",
        os.path.join(ROOT, "data", "hisco_key.csv"),
    )


def exact_match(frame, prefix_cols, truth_cols):
    predicted = (
        frame[prefix_cols].fillna("").astype(str).apply(lambda r: {c for c in r if c}, axis=1)
    )
    truth = frame[truth_cols].fillna("").astype(str).apply(lambda r: {c for c in r if c}, axis=1)
    return float(np.mean([p == t for p, t in zip(predicted, truth)]))


def test_predict_output_schema(trained_run, small_csv, tmp_path):
    out = tmp_path / "pred.csv"
    run_program("predict.py", "--checkpoint", trained_run, "--input", small_csv, "--output", out)
    source = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    result = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(result.columns) == list(source.columns) + [
        "code_1",
        "code_2",
        "prob_1",
        "prob_2",
        "desc_1",
        "desc_2",
        "confidence",
    ]
    assert len(result) == len(source)
    assert (result["occ1"] == source["occ1"]).all()  # input order kept
    probs = result["prob_1"].astype(float)
    assert ((probs >= 0) & (probs <= 1)).all()
    assert (result["code_1"] != "").all()
    assert result["desc_1"].str.len().gt(0).all()  # HISCO titles from --code-descriptions
    has_second = result["code_2"] != ""
    assert (
        result.loc[has_second, "prob_2"].astype(float)
        <= result.loc[has_second, "prob_1"].astype(float)
    ).all()


@pytest.mark.parametrize("head", ["flat", "seq2seq"])
def test_predict_agrees_with_the_training_evaluation(trained_run, tmp_path, head):
    out = tmp_path / f"val_{head}.parquet"
    run_program(
        "predict.py",
        "--checkpoint",
        trained_run,
        "--input",
        os.path.join(trained_run, "data_val.parquet"),
        "--input-col",
        "text",
        "--head",
        head,
        "--output",
        out,
    )
    frame = pd.read_parquet(out)
    accuracy = exact_match(frame, ["code_1", "code_2"], ["code_1_input", "code_2_input"])
    logged = logs(trained_run).iloc[-1][f"val_{head}_accuracy"]
    assert accuracy == pytest.approx(logged, abs=1e-9)


def test_save_load_predict_matches_the_in_memory_model(tmp_path):
    """A model saved the way training saves it predicts what the model in memory predicts."""
    from mixer.data.labels.key import build_key
    from mixer.models.encoders import build_encoder, save_encoder_files
    from mixer.data.labels.formatter import CodeFormatter
    from mixer.models.model import HeadsConfig, MixerModel, save_model
    from mixer.prediction.predict import Predictor

    torch.manual_seed(0)
    formatter = CodeFormatter(kind="general", block_size=5, max_num_codes=2)
    codes = ["61110", "64100", "99910", "03950"]
    formatter.fit_alphabet(codes)
    key = build_key(formatter, codes)
    encoder = build_encoder("canine-tiny", dropout=0.1)
    model = MixerModel(
        encoder.model,
        HeadsConfig(
            num_labels=len(key),
            vocab_size=formatter.vocab_size,
            target_len=formatter.target_len,
            decoder_dim=32,
            decoder_layers=1,
            decoder_heads=2,
        ),
    )
    extra = {
        "formatter": formatter.to_dict(),
        "max_len": 48,
        "input_col": "occ1",
        "language": "unk",
        "language_col": None,
        "threshold": 0.1,
    }
    run = str(tmp_path)
    save_model(model, run, extra)
    save_encoder_files(encoder, run)
    key.to_csv(os.path.join(run, "key.csv"), index=False)

    in_memory = Predictor(model, encoder.tokenizer, dict(extra, heads={}), key)
    loaded = Predictor.load(run, device="cpu")
    texts = np.array(["farm labourer", "wine and spirit merchant", "coal miner", "x"], dtype=object)
    langs = np.array(["unk", "en", "unk", "unk"], dtype=object)
    for head in ("flat", "seq2seq"):
        a = in_memory.predict(texts, langs, head=head)
        b = loaded.predict(texts, langs, head=head)
        pd.testing.assert_frame_equal(a, b)
    assert (a["code_1"] != "").any()


def test_train_mixer_with_built_in_code_systems(tmp_path, small_csv):
    from mixer.cli.entrypoints import train_mixer_main

    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    train, val = tmp_path / "train.csv", tmp_path / "val.parquet"
    frame.iloc[:100].to_csv(train, index=False)
    frame.iloc[100:].to_parquet(val)
    run = str(tmp_path / "hisco")
    assert (
        train_mixer_main(
            [
                "--train-data",
                str(train),
                "--val-data",
                str(val),
                "--formatter",
                "hisco",
                "--num-target-cols",
                "2",
                "--save-dir",
                run,
                "--max-steps",
                "3",
                *TINY,
            ]
        )
        == 0
    )
    key = pd.read_csv(os.path.join(run, "key.csv"), dtype=str, keep_default_na=False)
    assert len(key) == 1919 and "01110" in set(key["code"])  # the full HISCO list
    assert logs(run)["val_rows"].iloc[-1] == 21
    occ = frame.assign(occ_1=frame["hisco_1"].str[:3], occ_2="")
    occ.to_csv(tmp_path / "occ.csv", index=False)
    run = str(tmp_path / "occ")
    assert (
        train_mixer_main(
            [
                "--train-data",
                str(tmp_path / "occ.csv"),
                "--val-data",
                str(tmp_path / "occ.csv"),
                "--formatter",
                "occ1950",
                "--target-col-naming",
                "occ",
                "--num-target-cols",
                "2",
                "--save-dir",
                run,
                "--max-steps",
                "2",
                *TINY,
            ]
        )
        == 0
    )
    assert weights(run)["decoder.position.weight"].shape[0] == 2 * 3 + 2  # blocks of 3, EOS, BOS


def test_compile_is_skipped_on_cpu_with_a_clear_message(tmp_path, small_csv, capsys):
    finetune(tmp_path / "run", small_csv, "--max-steps", 1, "--compile")
    assert "--compile skipped on CPU" in capsys.readouterr().out


def test_tune_threshold_stores_the_best_threshold_that_predict_uses(small_csv, tmp_path):
    out = tmp_path / "run"
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "hisco_2",
        "--save-path",
        out,
        "--max-steps",
        "12",
        "--share-val",
        "0.3",
        "--tune-threshold",
        "--learning-rate",
        "3e-3",
        *TINY,
    )
    assert "tuned flat thresholds" in proc.stdout
    line = next(l for l in proc.stdout.splitlines() if l.startswith("  default (all rows):"))
    tuned = float(line.split()[3].rstrip(","))
    config = json.load(open(out / "config.json"))
    assert (
        config["threshold"] == tuned and config["thresholds"] == {}
    )  # 36 rows: no language of its own
    default, explicit = tmp_path / "a.csv", tmp_path / "b.csv"
    run_program("predict.py", "--checkpoint", out, "--input", small_csv, "--output", default)
    run_program(
        "predict.py",
        "--checkpoint",
        out,
        "--input",
        small_csv,
        "--output",
        explicit,
        "--threshold",
        tuned,
    )
    assert open(default).read() == open(explicit).read()


def test_python_api_keeps_a_series_index_and_checks_its_arguments(trained_run):
    import mixer
    from mixer.core.errors import UserError

    model = mixer.load(trained_run, device="cpu")
    texts = pd.Series(["farmer", "fisher", "smith"], index=[10, 20, 30])
    result = model.predict(texts, top_k=2)
    assert list(result.index) == [10, 20, 30]
    pd.testing.assert_frame_equal(
        result.reset_index(drop=True), model.predict(list(texts), top_k=2)
    )
    pd.testing.assert_frame_equal(
        model.predict(texts, head="greedy"), model.predict(texts, head="seq2seq")
    )
    pd.testing.assert_frame_equal(
        model.predict(texts, lang=[" unk", "unk ", "unk"]), model.predict(texts)
    )
    pd.testing.assert_frame_equal(
        model.predict(texts, threshold=np.float32(0.25)), model.predict(texts, threshold=0.25)
    )
    for bad, message in [
        (dict(top_k=0), "top_k=0"),
        (dict(top_k=1.5), "top_k=1.5"),
        (dict(top_k=10**9), "ask for at most"),
        (dict(threshold=True), "threshold=True"),
        (dict(lang=np.nan), "lang=nan"),
        (dict(threshold=1.5), "threshold=1.5"),
        (dict(head="beam"), "head='beam'"),
        (dict(context={"parish": ["a", "b", "c"]}), "reads no context columns"),
        (dict(batch_size=0), "batch_size=0"),
    ]:
        with pytest.raises(UserError, match=message):
            model.predict(texts, **bad)
    for texts in (None, 5):
        with pytest.raises(UserError, match="pass a string, a list of strings or a pandas Series"):
            model.predict(texts)


def test_predict_keeps_input_columns_named_like_its_output_and_a_named_index(trained_run, tmp_path):
    """With one head, input columns called like prediction columns are renamed (code_1 ->
    code_1_input, again while taken); with several heads the output is all prefixed, so a
    plain code_1 stays and evaluate.py reads it as truth, never as a head; pandas' named
    index stays a column."""
    source = tmp_path / "odd.parquet"
    pd.DataFrame(
        {
            "id": ["a", "b"],
            "occ1": ["farmer", "fisher"],
            "code_1": ["x", "y"],
            "code_1_input": ["p", "q"],
            "other_code_1": ["r", "s"],
        }
    ).set_index("id").to_parquet(source)
    for heads, out, names in (
        (["flat"], "one.parquet", ["code_1_input_input", "code_1_input", "other_code_1_input"]),
        (["flat", "seq2seq"], "two.csv", ["code_1", "code_1_input", "other_code_1_input"]),
    ):
        run_program(
            "predict.py",
            "--checkpoint",
            trained_run,
            "--input",
            source,
            "--output",
            tmp_path / out,
            "--head",
            *heads,
        )
        frame = (pd.read_parquet if out.endswith("parquet") else pd.read_csv)(tmp_path / out)
        assert len(set(frame.columns)) == len(frame.columns)
        assert list(frame.columns[:5]) == ["id", "occ1", *names]
        assert list(frame[names[0]]) == ["x", "y"] and list(frame["id"]) == ["a", "b"]
        for truth in (names[0], "code_1_input"):
            run_program("evaluate.py", "--predictions", tmp_path / out, "--truth-cols", truth)
            table = pd.read_csv(tmp_path / f"{out.split('.')[0]}_evaluation.csv")
            assert set(table["head"]) == ({"prediction"} if len(heads) == 1 else set(heads))


def test_predict_parquet_whose_column_types_differ_between_row_groups(trained_run, tmp_path):
    """A Parquet file written in parts: an integer column that has blanks in one row
    group only, a text column that is all blank in one: every chunk converts to other
    pandas types; the output keeps the input's column types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "parts.parquet"
    schema = pa.schema(
        [("occ1", pa.string()), ("year", pa.int64()), ("note", pa.string()), ("flag", pa.bool_())]
    )
    with pq.ParquetWriter(source, schema) as writer:
        writer.write_table(
            pa.table(
                {
                    "occ1": ["farmer", "fisher"],
                    "year": [1801, 1802],
                    "note": [None, None],
                    "flag": [True, False],
                },
                schema=schema,
            )
        )
        writer.write_table(
            pa.table(
                {
                    "occ1": ["smith", "clerk"],
                    "year": [None, 1804],
                    "note": ["a", None],
                    "flag": [None, True],
                },
                schema=schema,
            )
        )
    out = tmp_path / "pred.parquet"
    run_program(
        "predict.py",
        "--checkpoint",
        trained_run,
        "--input",
        source,
        "--output",
        out,
        "--chunk-size",
        2,
    )
    result = pq.read_table(out)
    assert result.schema.field("year").type == pa.int64()
    assert result.schema.field("note").type == pa.string()
    assert result.column("year").to_pylist() == [1801, 1802, None, 1804]
    assert result.column("occ1").to_pylist() == ["farmer", "fisher", "smith", "clerk"]
    assert result.column("flag").to_pylist() == [True, False, None, True]
    assert all(result.column("code_1").to_pylist())


def test_predict_parquet_output_reads_back_with_pandas_whatever_the_input_types(
    trained_run, tmp_path
):
    """Dictionary, list and time-zone columns pass through prediction and the output
    opens with pd.read_parquet (and evaluate.py), not only with pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "typed.parquet"
    pq.write_table(
        pa.table(
            {
                "occ1": pa.array(["farmer", "fisher", "smith"]).dictionary_encode(),
                "parish": pa.array(["A", None, "B"]).dictionary_encode(),
                "ages": pa.array([[30, 31], None, [40]]),
                "seen": pa.array([1, None, 3], pa.timestamp("us", tz="UTC")),
            }
        ),
        source,
    )
    out = tmp_path / "pred.parquet"
    run_program(
        "predict.py",
        "--checkpoint",
        trained_run,
        "--input",
        source,
        "--output",
        out,
        "--chunk-size",
        2,
    )
    frame = pd.read_parquet(out)
    assert list(frame["occ1"].astype(str)) == ["farmer", "fisher", "smith"]
    assert [None if v is None else list(v) for v in frame["ages"]] == [[30, 31], None, [40]]
    assert frame["code_1"].notna().all()


def test_a_resumed_run_keeps_its_recipe_and_a_run_from_before_noise_stays_without(
    small_csv, tmp_path
):
    """Flags left out on resume keep the values the run used (not the recipe's defaults);
    a run whose args.yaml predates training noise continues without noise."""
    import yaml

    out = tmp_path / "run"
    common = [
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        out,
        "--max-steps",
        "6",
        "--language",
        "en",
        *TINY,
    ]
    run_program(
        "finetune.py",
        *common,
        "--augmentation-prob",
        "0.5",
        "--learning-rate",
        "1e-3",
        "--stop-at-step",
        "2",
    )
    proc = run_program("finetune.py", *common, "--stop-at-step", "4")
    assert "spelling noise on 0.5 of the training rows" in proc.stdout
    assert (
        "learning rate 0.001" in proc.stdout and "as the run being resumed used them" in proc.stdout
    )
    args = yaml.safe_load(open(out / "args.yaml"))
    for name in ("augmentation_prob", "num_transformations", "unk_lang_prob", "eval_noise"):
        del args["train"][name]  # as mixer 0.2 wrote it
    (out / "args.yaml").write_text(yaml.safe_dump(args))
    proc = run_program("finetune.py", *common)
    assert "no spelling noise" in proc.stdout and "no noised validation copy" in proc.stdout
    assert "language 'unk'" not in proc.stdout


def test_the_noised_copy_scores_the_rows_the_clean_figures_score(small_csv, tmp_path):
    """--full-val-at-end: the final evaluation scores every validation row as written and
    noised; evaluation.csv's noised heads count the same rows."""
    out = tmp_path / "run"
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        out,
        "--max-steps",
        "3",
        "--share-val",
        "0.3",
        "--val-max-rows",
        "10",
        "--full-val-at-end",
        *TINY,
    )
    table = pd.read_csv(out / "evaluation.csv")
    counts = table[table["digits"] == 1].set_index("head")["n"]
    assert counts["flat"] == counts["flat noised"] == counts["seq2seq noised"] > 10
    final = logs(out).iloc[-1]
    assert final["val_rows"] == counts["flat"]


def test_evaluations_read_the_validation_rows_shortest_first(small_csv, tmp_path, monkeypatch):
    """The run's evaluations (each epoch's, the final one, the n-gram head's weight) batch
    the validation rows by length: in row order a batch is padded to its longest row, most
    of its tokens padding on short descriptions."""
    from mixer.models.model import MixerModel

    seen = []
    encode = MixerModel.encode

    def recording(self, input_ids, attention_mask):
        if not self.training:
            seen.append(attention_mask.sum(dim=1).tolist())
        return encode(self, input_ids, attention_mask)

    monkeypatch.setattr(MixerModel, "encode", recording)
    extra = ["--max-steps", "3", "--share-val", "0.3", "--eval-batch-size", "8"]
    finetune(tmp_path / "run", small_csv, *extra, "--no-eval-noise")
    assert len(seen) >= 8  # 37 rows in batches of 8, evaluated at least twice
    assert all(lengths == sorted(lengths) for lengths in seen), seen

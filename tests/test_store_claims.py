"""The distinct-input store's claims where configurations meet (issue 43; docs/predicting.md,
"Repeated descriptions" and "A killed prediction"), for both model families (mixer's runs and
OccCANINE's layout), with a language column (several languages, blanks, the same description
under two), context columns (blanks, contexts cut to fit), every head and output shape:

1. predict.py computes each distinct model input once per file, and every row comes out as
   chunk-by-chunk prediction without the store gives it (the reference: the Python API
   predicting each chunk on its own, never the store): the same codes, rows and order, floats
   within FLOATS;
2. one process and two (torchrun, gloo) write the same bytes;
3. a job killed at a chunk boundary and run again writes an uninterrupted run's bytes.

And the key itself: two rows share one exactly when the model reads them alike (the same
token ids and the same flat threshold), never when it reads them differently."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import (
    assert_floats_close,
    assert_same_predictions,
    env_for_subprocess,
    rank0_gathers_cmd,
    run,
    run_program,
)
from mixer.cli.entrypoints import finetune_main, predict_main

FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"


# ------------------------------------------------------------------ models and files
@pytest.fixture(scope="module")
def wordpiece_dir(tmp_path_factory) -> str:
    """A tiny BERT-like encoder with a real word-piece tokenizer (the packaged minilm's, which
    lower-cases, strips accents and splits punctuation): conftest's tiny_bert reads every
    word of these titles as one [UNK]."""
    import shutil

    from transformers import BertConfig, BertModel

    from mixer.models.encoders import package_model_dir

    directory = tmp_path_factory.mktemp("wordpiece")
    source = package_model_dir("minilm-l6")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(f"{source}/{name}", directory / name)
    BertModel(
        BertConfig(
            vocab_size=30522,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
        )
    ).save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory, wordpiece_dir) -> str:
    """A tiny run of a word-piece model (its tokenizer lower-cases and strips accents) that
    reads a language column and a context column; --max-len 12 cuts the longer contexts."""
    base = tmp_path_factory.mktemp("bert_claims")
    titles = {"farmer": "61110", "civil engineer": "02200", "smith": "83110", "weaver": "75430"}
    rows = [
        (title, lang, relation, code)
        for title, code in titles.items()
        for lang in ("en", "da")
        for relation in ("wife", "son", "")
    ]
    frame = pd.DataFrame(rows, columns=["occ1", "lang", "relation", "hisco_1"])
    frame.to_csv(base / "train.csv", index=False)
    out = base / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                str(base / "train.csv"),
                "--target-cols",
                "hisco_1",
                "--language-col",
                "lang",
                "--context-cols",
                "relation",
                "--zero-padded-codes",
                "--allow-codes-shorter-than-block-size",
                "--encoder",
                wordpiece_dir,
                "--save-path",
                str(out),
                "--decoder-dim",
                "32",
                "--decoder-layers",
                "1",
                "--decoder-heads",
                "2",
                "--max-len",
                "12",
                "--max-steps",
                "4",
                "--batch-size",
                "8",
                "--share-val",
                "0.25",
            ]
        )
        == 0
    )
    return str(out)


# descriptions the model may read alike (case, spaces, accents, punctuation) or not, blanks
MIXER_TEXTS = ["farmer", "Farmer", " farmer ", "farmer  labourer", "smith", "servant", "", "   "]
BERT_TEXTS = [
    "farmer",
    "Farmer",
    "fármer",
    " FARMER ",
    "civil engineer",
    "civil  engineer",
    "Civil-Engineer",
    "civil - engineer",
    "smith",
    "weaver",
    "",
    "  ",
]
OCC_TEXTS = [
    "farmer",
    "Farmer",
    " farmer",
    "Bäcker",
    "backer",
    "  fisherman  ",
    "fisherman",
    "smed, åbenrå",
    "smed, abenra",
    "wine and spirit merchant",
    "",
    "   ",
]
LANGS = ["en", "en", "da", "EN", "", "unk", "ge", "xx"]
RELATIONS = ["wife", "wife", "son", "", " wife ", "wife of the farmer of the big house in town"]


def census(path, texts, langs=None, relations=None, rows: int = 84, seed: int = 0) -> str:
    """Rows drawn from `texts` (the first ones most often), with a language and a relation
    column where given; rows 7-13 without a description (a chunk of 7 all blank)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(texts) + 1)
    frame = pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(rows)],
            "occ1": rng.choice(texts, rows, p=weights / weights.sum()),
        }
    )
    if langs is not None:
        frame["lang"] = rng.choice(langs, rows)
    if relations is not None:
        frame["relation"] = rng.choice(relations, rows)
    frame.loc[7:13, "occ1"] = ["", "  ", "", " ", "", "", "   "]
    frame.to_csv(path, index=False)
    return str(path)


def read_text(path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def options_language(options) -> tuple:
    """(--language, --language-col) among predict.py's options."""

    def value(flag):
        return options[options.index(flag) + 1] if flag in options else None

    return value("--language"), value("--language-col")


def reading(model, frame: pd.DataFrame, options=()) -> tuple:
    """What the API is given of a file's rows: (texts, languages, context), the columns
    chosen as predict.py chooses them with these options."""
    from mixer.data.tables.job_columns import job_columns

    columns = job_columns(model.config, None, *options_language(options))
    frame = frame.reset_index(drop=True)
    langs = frame[columns.language_col] if columns.language_col else columns.language
    context = frame[columns.context_cols] if columns.context_cols else None
    return frame[columns.input_col], langs, context


def chunk_by_chunk(source, frame, chunk_size, options=(), heads=None, embeddings=False, **kw):
    """What predict.py gave before the store: each chunk predicted on its own by the API."""
    import mixer

    model = mixer.load(source, device="cpu")
    heads = heads or [kw.pop("head", "flat")]
    tables = []
    for start in range(0, len(frame), chunk_size):
        texts, langs, context = reading(model, frame.iloc[start : start + chunk_size], options)
        if embeddings:
            tables.append(model.embeddings(texts, langs, context, batch_size=16))
            continue
        per_head = [
            model.predict(texts, langs, head=head, context=context, batch_size=16, **kw)
            for head in heads
        ]
        if len(heads) > 1:
            per_head = [t.add_prefix(f"{h}_") for t, h in zip(per_head, heads)]
        tables.append(pd.concat(per_head, axis=1))
    if embeddings:
        return np.concatenate(tables)
    return pd.concat(tables, ignore_index=True)


def distinct_inputs(source, frame, options=()) -> int:
    """The file's distinct model inputs: rows with and without a description apart."""
    import mixer

    model = mixer.load(source, device="cpu")
    texts, langs, context = reading(model, frame, options)
    keys = model.model_inputs(texts, langs, context)
    blank = texts.str.strip().eq("").to_numpy()
    return len(set(zip(keys, blank)))


def as_written(table: pd.DataFrame) -> pd.DataFrame:
    return table.astype(object).where(table.notna(), "").astype(str)


def predict(*args) -> None:
    assert predict_main([str(a) for a in args]) == 0


# ------------------------------------------------------------------ 1. once per file, the rows chunk by chunk
SOURCES = {"mixer": "tiny_two_code_run", "bert": "bert_run", "occcanine": "hisco_model"}


def source_of(request, family: str):
    value = request.getfixturevalue(SOURCES[family])
    return value["hub"] if family == "occcanine" else value


def with_language(family: str, options) -> list:
    """OccCANINE's models read no language column unless asked: --language-col lang where
    no --language is given (mixer's runs here read the run's own, or none)."""
    if family == "occcanine" and "--language" not in options:
        return ["--language-col", "lang", *options]
    return list(options)


def file_of(family: str, tmp_path, seed: int = 0) -> str:
    path = tmp_path / "census.csv"
    if family == "mixer":
        return census(path, MIXER_TEXTS, langs=LANGS, seed=seed)
    if family == "bert":
        return census(path, BERT_TEXTS, langs=LANGS, relations=RELATIONS, seed=seed)
    return census(path, OCC_TEXTS, langs=LANGS, seed=seed)


CODE_TABLES = [
    # family, chunk size, heads, options (--language-col lang: mixer's run reads a column it never had)
    ("mixer", 7, ["flat", "seq2seq"], ["--language-col", "lang"]),
    ("mixer", 1, ["seq2seq"], []),
    ("bert", 7, ["flat", "seq2seq"], []),
    ("bert", 1, ["flat"], ["--language", "da"]),
    ("bert", 1000, ["seq2seq"], ["--top-k", "2"]),
    ("bert", 1000, ["flat", "seq2seq"], ["--batch-size", "2"]),  # a window's call in groups
    ("occcanine", 7, ["flat"], []),
    ("occcanine", 1000, ["seq2seq"], []),
    ("occcanine", 1, ["flat"], ["--language", "da"]),
]


@pytest.mark.floats
@pytest.mark.parametrize("family, chunk_size, heads, options", CODE_TABLES)
def test_the_code_table_is_chunk_by_chunk_prediction_and_each_input_is_computed_once(
    request, tmp_path, model_rows, family, chunk_size, heads, options
):
    source, options = source_of(request, family), with_language(family, options)
    data = file_of(family, tmp_path)
    frame = read_text(data)
    out = tmp_path / "out.csv"
    predict(
        "--checkpoint",
        source,
        "--input",
        data,
        "--output",
        out,
        "--chunk-size",
        chunk_size,
        "--batch-size",
        16,
        "--head",
        *heads,
        *options,
    )
    computed = sum(model_rows)
    top_k = {"top_k": int(options[options.index("--top-k") + 1])} if "--top-k" in options else {}
    expected = chunk_by_chunk(source, frame, chunk_size, options, heads, **top_k)
    written = read_text(out)
    assert written[list(frame.columns)].equals(frame)
    assert_same_predictions(written.drop(columns=list(frame.columns)), as_written(expected))
    # each distinct input once per head, over the whole file
    assert computed == len(heads) * distinct_inputs(source, frame, options)


SHAPES = [
    # family, chunk size, options, output (a matrix of the store; OccCANINE's table and
    # alternatives by row, as chunk-by-chunk prediction has them)
    ("mixer", 7, ["--what", "logits", "--language-col", "lang"], "out.npy"),
    ("bert", 7, ["--what", "probs"], "out.npy"),
    ("occcanine", 7, ["--what", "bin", "--columns", "occcanine"], "out.csv"),
    ("occcanine", 1000, ["--what", "probs", "--head", "full"], "out.npy"),
    ("occcanine", 7, ["--columns", "occcanine"], "out.csv"),
    ("bert", 7, ["--alternatives", "2"], "out.csv"),
]


def api_keywords(options) -> dict:
    """predict.py's shape options as the API's keywords."""
    keywords = {}
    for flag, name in (("--what", "what"), ("--columns", "columns"), ("--head", "head")):
        if flag in options:
            keywords[name] = options[options.index(flag) + 1]
    return keywords


@pytest.mark.floats
@pytest.mark.parametrize("family, chunk_size, options, name", SHAPES)
def test_every_output_shape_is_chunk_by_chunk_prediction(
    request, tmp_path, family, chunk_size, options, name
):
    import mixer

    source, options = source_of(request, family), with_language(family, options)
    data = file_of(family, tmp_path)
    frame = read_text(data)
    out = tmp_path / name
    predict(
        "--checkpoint",
        source,
        "--input",
        data,
        "--output",
        out,
        "--chunk-size",
        chunk_size,
        "--batch-size",
        16,
        *options,
    )
    if "--alternatives" in options:
        model = mixer.load(source, device="cpu")
        tables = []
        for start in range(0, len(frame), chunk_size):
            texts, langs, context = reading(model, frame.iloc[start : start + chunk_size], options)
            tables.append(model.alternatives(texts, langs, 2, context, batch_size=16))
        expected = pd.concat(tables, ignore_index=True)
        written = read_text(out)
        assert_same_predictions(written.drop(columns=list(frame.columns)), as_written(expected))
        assert written[list(frame.columns)].equals(
            frame.loc[frame.index.repeat(2)].reset_index(drop=True)
        )
        return
    expected = chunk_by_chunk(source, frame, chunk_size, options, **api_keywords(options))
    if name.endswith(".npy"):
        got = np.load(out)
        assert got.shape == expected.shape
        assert_floats_close(got, expected.to_numpy(dtype=np.float64))
        return
    written = read_text(out)
    if "--what" in options:  # a 0/1 matrix: exact
        assert list(written.columns) == [str(c) for c in expected.columns]
        assert (written.to_numpy(dtype=np.int64) == expected.to_numpy(dtype=np.int64)).all()
        return
    assert_same_predictions(written, as_written(expected))


@pytest.mark.parametrize(
    "family, options",
    [("mixer", ["--language-col", "lang"]), ("bert", []), ("occcanine", [])],
)
def test_chunks_of_one_row_give_the_bits_each_row_alone_gives(
    request, tmp_path, monkeypatch, family, options
):
    """A chunk of one row: chunk-by-chunk prediction computes each row alone, the store each
    input alone at its first row (a window of one chunk: predict_job.Window). The model reads
    the rows of one key alike, so every embedding and probability is the very one the row
    alone gives, bit for bit (batches change nothing here: a key that joined two inputs the
    model reads differently would)."""
    from mixer.prediction import predict_job

    monkeypatch.setattr(predict_job, "LOOKAHEAD_CHUNKS", 1)
    source, options = source_of(request, family), with_language(family, options)
    data = file_of(family, tmp_path)
    frame = read_text(data)
    predict(
        "--checkpoint",
        source,
        "--input",
        data,
        "--embeddings",
        tmp_path / "e.npy",
        "--output",
        tmp_path / "p.npy",
        "--what",
        "probs",
        "--chunk-size",
        1,
        *options,
    )
    vectors = chunk_by_chunk(source, frame, 1, options, embeddings=True)
    probs = chunk_by_chunk(source, frame, 1, options, what="probs").to_numpy()
    assert np.array_equal(np.load(tmp_path / "e.npy"), vectors)
    assert np.array_equal(np.load(tmp_path / "p.npy"), probs, equal_nan=True)


# ------------------------------------------------------------------ the key is what the model reads
def reads(model, texts, langs, context):
    """Per row: the token ids the model reads, and the flat threshold it is coded with."""
    predictor = model._predictor
    _, model_texts, model_langs, desc_chars = model.read_inputs(
        texts, langs, context, say_fit=False
    )
    ids, lengths = predictor.token_ids.encode(model_texts, model_langs, desc_chars)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    thresholds = predictor.row_thresholds(model_langs, None)
    return [
        (tuple(ids[s : s + n].tolist()), float(t)) for s, n, t in zip(starts, lengths, thresholds)
    ]


@pytest.mark.parametrize("family", ["mixer", "bert", "occcanine"])
def test_rows_share_a_key_only_where_the_model_reads_them_alike(request, tmp_path, family):
    import mixer

    source = source_of(request, family)
    frame = read_text(file_of(family, tmp_path))
    extra = pd.DataFrame(
        {
            "occ1": [
                "farmer [SEP]",
                "farmer [sep]",
                "farmer [SEP] relation: wife",
                "farmer",
                "farmer [UNK]",
                "farmer [unk]",
            ],
            "lang": ["en"] * 6,
        }
    )
    if "relation" in frame.columns:
        extra["relation"] = ["", "", "", "wife", "", ""]
    frame = pd.concat([frame, extra], ignore_index=True).fillna("")
    model = mixer.load(source, device="cpu")
    options = ["--language-col", "lang"]
    texts, langs, context = reading(model, frame, options)
    keys = model.model_inputs(texts, langs, context)
    read = reads(model, texts, langs, context)
    readings: dict = {}
    for key, reading_of_row in zip(keys, read):
        readings.setdefault(key, set()).add(reading_of_row)
    shared = {key: found for key, found in readings.items() if len(found) > 1}
    assert not shared, shared
    # and texts it reads alike share one: case and accents to the word-piece tokenizer, which
    # lower-cases and strips them; case and accents to OccCANINE's recipe (lower case, ASCII)
    alike = {"bert": ("farmer", "Fármer"), "occcanine": ("Bäcker", "backer")}.get(family)
    if alike:
        pair = model.model_inputs(
            list(alike), "en", None if family == "occcanine" else {"relation": ["", ""]}
        )
        assert pair[0] == pair[1]


# ------------------------------------------------------------------ 3. a killed job resumes, 2. one process and two
RESUMES = [
    # family, options, outputs: a matrix of OccCANINE's with a language column; a word-piece run
    # with a language and a context column, two heads, every output that reads the code table
    ("occcanine", ["--what", "probs"], ["out.npy", "e.npy"]),
    (
        "bert",
        [
            "--head",
            "flat",
            "seq2seq",
            "--to-check",
            "5",
            "CHECK",
            "--audit",
            "20",
            "AUDIT",
            "--audit-by",
            "lang",
            "--summary-plot",
            "PLOT",
        ],
        ["out.parquet", "e.parquet"],
    ),
]


@pytest.mark.parametrize("family, options, names", RESUMES)
def test_a_job_killed_at_a_chunk_boundary_resumes_to_the_bytes_of_one_never_killed(
    request, tmp_path, model_rows, family, options, names
):
    source, options = source_of(request, family), with_language(family, options)
    data = file_of(family, tmp_path, seed=1)
    frame = read_text(data)

    def cmd(folder) -> list:
        folder.mkdir(exist_ok=True)
        files = {"CHECK": "check.csv", "AUDIT": "audit.csv", "PLOT": "plot.png"}
        given = [str(folder / files[o]) if o in files else o for o in options]
        return [
            "--checkpoint",
            source,
            "--input",
            data,
            "--output",
            folder / names[0],
            "--embeddings",
            folder / names[1],
            "--chunk-size",
            7,
            "--batch-size",
            16,
            *given,
        ]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    predict(*cmd(whole))
    env = env_for_subprocess()
    env[FAULT] = "5"  # chunk 5 written, its journal entry not: as kill -9 between the two
    killed = run_program("predict.py", *cmd(cut), env=env, check=False)
    assert killed.returncode == 9, killed.stderr
    model_rows.clear()
    predict(*cmd(cut))
    # the chunks after the 5 completed: only inputs the first 35 rows did not have, nor the
    # window of chunks computed with them (predict_job.Window: the first LOOKAHEAD_CHUNKS
    # chunks here, their new inputs kept with chunk 0)
    from mixer.prediction.predict_job import LOOKAHEAD_CHUNKS

    passes = 2 if "seq2seq" in options else 1
    later = distinct_inputs(source, frame, options) - distinct_inputs(
        source, frame.iloc[: max(35, 7 * LOOKAHEAD_CHUNKS)], options
    )
    assert sum(model_rows) == (passes + 1) * later  # the heads' and the embeddings'
    produced = sorted(p.name for p in whole.iterdir())
    assert sorted(p.name for p in cut.iterdir()) == produced
    for name in produced:
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name


def test_two_processes_write_one_process_bytes_with_occcanine_and_a_language_column(
    hisco_model, tmp_path
):
    data = file_of("occcanine", tmp_path, seed=2)
    common = [
        "--checkpoint",
        hisco_model["hub"],
        "--input",
        data,
        "--chunk-size",
        "7",
        "--batch-size",
        "4",
        "--head",
        "flat",
        "seq2seq",
        "--language-col",
        "lang",
    ]
    predict(*common, "--output", tmp_path / "one.csv", "--embeddings", tmp_path / "one.npy")
    run(
        rank0_gathers_cmd(2, "predict.py")
        + [
            "--distributed",
            *map(str, common),
            "--output",
            str(tmp_path / "two.csv"),
            "--embeddings",
            str(tmp_path / "two.npy"),
        ]
    )
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()
    assert (tmp_path / "one.npy").read_bytes() == (tmp_path / "two.npy").read_bytes()


# ------------------------------------------------------------------ the row steps: target marks, shorter codes
@pytest.fixture(scope="module")
def labelled(tmp_path_factory, toy_frame, tiny_two_code_run) -> str:
    """Rows the tiny model never trained on, labelled with its own flat codes: a target it
    reaches (tests/test_full_count.py's reasoning)."""
    import mixer

    rows = toy_frame[toy_frame["hisco_1"].str.len() == 5].iloc[121:241].reset_index(drop=True)
    predicted = mixer.load(tiny_two_code_run, device="cpu").predict(rows["occ1"], head="flat")
    path = tmp_path_factory.mktemp("labelled") / "labelled.csv"
    pd.DataFrame(
        {
            "occ1": rows["occ1"],
            "hisco_1": predicted["code_1"].fillna(""),
            "hisco_2": predicted["code_2"].fillna(""),
        }
    ).to_csv(path, index=False)
    return str(path)


@pytest.mark.floats
def test_target_marks_and_shorter_codes_are_chunk_by_chunk_prediction(
    tiny_two_code_run, labelled, tmp_path
):
    import mixer

    data = file_of("mixer", tmp_path)
    frame = read_text(data)
    out = tmp_path / "out.csv"
    predict(
        "--code-levels",
        1,
        2,
        3,
        "--checkpoint",
        tiny_two_code_run,
        "--input",
        data,
        "--output",
        out,
        "--chunk-size",
        7,
        "--batch-size",
        16,
        "--head",
        "flat",
        "--target-accuracy",
        "0.5",
        "--calibration-data",
        labelled,
        "--calibration-truth-cols",
        "hisco_1",
        "hisco_2",
        "--shorter-codes",
    )
    model = mixer.load(tiny_two_code_run, device="cpu")
    described = int((~frame["occ1"].str.strip().eq("")).sum())
    target = model.target(
        0.5,
        None,
        "flat",
        labelled,
        ["hisco_1", "hisco_2"],
        None,
        True,
        described,
        batch_size=16,
        code_levels=[1, 2, 3],
    )
    expected = pd.concat(
        [
            model.predict(
                frame["occ1"].iloc[start : start + 7].reset_index(drop=True),
                head="flat",
                batch_size=16,
                target=target,
            )
            for start in range(0, len(frame), 7)
        ],
        ignore_index=True,
    )
    written = read_text(out)
    assert "level" in written.columns and set(written["coded"]) >= {"auto", ""}
    assert_same_predictions(written.drop(columns=list(frame.columns)), as_written(expected))


@pytest.mark.floats
def test_a_text_holding_a_tokenizers_own_token_is_another_input(bert_run, tmp_path, model_rows):
    """'[SEP]' in a text is the word-piece tokenizer's separator, '[sep]' three pieces: two
    inputs, although its normalizer and pre-tokenizer alone read them alike."""
    path = tmp_path / "special.csv"
    pd.DataFrame(
        {"occ1": ["farmer [SEP]", "farmer [sep]", "farmer [UNK]", "farmer [unk]"] * 2, "lang": "en"}
    ).assign(relation="").to_csv(path, index=False)
    frame = read_text(path)
    out = tmp_path / "out.npy"
    predict(
        "--checkpoint",
        bert_run,
        "--input",
        path,
        "--output",
        out,
        "--what",
        "probs",
        "--chunk-size",
        1,
    )
    assert sum(model_rows) == 4
    assert_floats_close(np.load(out), chunk_by_chunk(bert_run, frame, 1, what="probs").to_numpy())


@pytest.mark.floats
def test_a_rows_prediction_does_not_depend_on_where_its_input_first_came(bert_run, tmp_path):
    """The same rows shuffled: each input is first seen in another chunk, beside other new
    inputs; every row keeps its codes, its floats within FLOATS."""
    data = file_of("bert", tmp_path)
    frame = read_text(data)
    shuffled = tmp_path / "shuffled.csv"
    frame.sample(frac=1, random_state=5).to_csv(shuffled, index=False)
    for path, out in ((data, "a.csv"), (shuffled, "b.csv")):
        predict(
            "--checkpoint",
            bert_run,
            "--input",
            path,
            "--output",
            tmp_path / out,
            "--chunk-size",
            7,
            "--head",
            "flat",
            "seq2seq",
        )
    a = read_text(tmp_path / "a.csv").set_index("id")
    b = read_text(tmp_path / "b.csv").set_index("id").loc[a.index]
    assert_same_predictions(b, a)


@pytest.mark.parametrize("case", ["shorter codes", "occcanine bin"])
def test_a_store_past_its_memory_writes_the_same_bytes(
    request, tiny_two_code_run, labelled, tmp_path, monkeypatch, case
):
    """Rows read back from the spill file (their types as kept: a shorter code's nullable
    level beside blank rows, a 0/1 matrix) write what rows kept in memory write."""
    from mixer.prediction import predict_job

    if case == "shorter codes":
        data, name = file_of("mixer", tmp_path), "out.parquet"
        options = [
            "--checkpoint",
            tiny_two_code_run,
            "--head",
            "flat",
            "--target-accuracy",
            "0.5",
            "--calibration-data",
            labelled,
            "--calibration-truth-cols",
            "hisco_1",
            "hisco_2",
            "--shorter-codes",
            "--code-levels",
            1,
            2,
            3,
        ]
    else:
        data, name = file_of("occcanine", tmp_path), "out.csv"
        options = [
            "--checkpoint",
            source_of(request, "occcanine"),
            "--language-col",
            "lang",
            "--what",
            "bin",
            "--columns",
            "occcanine",
        ]
    (tmp_path / "kept").mkdir()
    (tmp_path / "spilled").mkdir()
    kept = tmp_path / "kept" / name  # one name: the provenance names the output
    predict(*options, "--input", data, "--output", kept, "--chunk-size", 21)
    from mixer.prediction import store

    spilled_rows, spill = [], store.DistinctStore._spill
    monkeypatch.setattr(
        store.DistinctStore,
        "_spill",
        lambda self, first, rows: [spilled_rows.append(len(rows)), spill(self, first, rows)],
    )
    monkeypatch.setattr(predict_job, "MEGABYTE", 1)  # --store-memory 1: 1 byte, every row spills
    spilled = tmp_path / "spilled" / name
    predict(*options, "--input", data, "--output", spilled, "--chunk-size", 21, "--store-memory", 1)
    assert sum(spilled_rows) > 0
    assert spilled.read_bytes() == kept.read_bytes()


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory, bert_run) -> str:
    """The word-piece run with a flat threshold of its own for 'en' (a tuned run's, as
    config.json holds it): its tokenizer reads 'EN' and 'en' alike, its threshold does not."""
    import json
    import shutil

    run_dir = tmp_path_factory.mktemp("tuned") / "run"
    shutil.copytree(bert_run, run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    config["thresholds"] = {"en": 0.02, "da": 0.9}
    (run_dir / "config.json").write_text(json.dumps(config))
    return str(run_dir)


@pytest.mark.floats
@pytest.mark.parametrize("what", ["codes", "bin"])
def test_a_language_with_a_threshold_of_its_own_is_an_input_of_its_own(tuned_run, tmp_path, what):
    """'en' rows take up to 3 codes at 0.02, 'EN' rows at the default 0.5: the store keys
    them apart, though the model reads them alike."""
    data = file_of("bert", tmp_path)
    frame = read_text(data)
    out = tmp_path / "out.csv"
    predict(
        "--checkpoint",
        tuned_run,
        "--input",
        data,
        "--output",
        out,
        "--chunk-size",
        7,
        "--batch-size",
        16,
        "--what",
        what,
        "--top-k",
        3,
    )
    expected = chunk_by_chunk(tuned_run, frame, 7, what=what, top_k=3)
    written = read_text(out)
    if what == "bin":
        assert (written.to_numpy(dtype=np.int64) == expected.to_numpy(dtype=np.int64)).all()
        assert (
            len({tuple(row) for row in expected.to_numpy()}) > 1
        )  # the thresholds tell rows apart
    else:
        assert_same_predictions(written.drop(columns=list(frame.columns)), as_written(expected))

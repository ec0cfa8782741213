"""Context columns: the same title with two codes, told apart by the relation."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from conftest import assert_floats_close, run_program
from mixer.data.labels.normalise import model_text

CODES = {
    ("servant", "wife"): "54010",
    ("servant", "son"): "62105",
    ("labourer", "wife"): "99910",
    ("labourer", "son"): "62110",
    ("farmer", "wife"): "61110",
    ("farmer", "son"): "61115",
    ("weaver", "wife"): "75400",
    ("weaver", "son"): "75500",
    ("clerk", "wife"): "39310",
    ("clerk", "son"): "39320",
    ("miner", "wife"): "71100",
    ("miner", "son"): "71105",
}
LEARN = [
    "--target-cols",
    "hisco_1",
    "--encoder",
    "canine-tiny",
    "--decoder-dim",
    "32",
    "--decoder-layers",
    "1",
    "--decoder-heads",
    "2",
    "--max-len",
    "48",
    "--num-epochs",
    "6",
    "--batch-size",
    "16",
    "--learning-rate",
    "3e-3",
    "--dropout",
    "0",
]


@pytest.fixture(scope="module")
def households(tmp_path_factory) -> str:
    rng = np.random.default_rng(0)
    titles = sorted({t for t, _ in CODES})
    rows = []
    for i in range(600):
        title, relation = titles[i % len(titles)], ["wife", "son"][rng.integers(2)]
        rows.append((title, relation, CODES[(title, relation)], "coal" if i % 3 == 0 else None))
    path = tmp_path_factory.mktemp("context") / "households.parquet"
    pd.DataFrame(rows, columns=["occ1", "relation", "hisco_1", "industry"]).to_parquet(path)
    return str(path)


def test_the_template_leaves_missing_values_out():
    frame = pd.DataFrame({"relation": ["wife", None, ""], "industry": [None, "coal", np.nan]})
    texts = model_text(pd.Series(["servant", "miner", "clerk"]), frame, ["relation", "industry"])
    assert texts.tolist() == ["servant [SEP] relation: wife", "miner [SEP] industry: coal", "clerk"]


def accuracy(proc) -> float:
    line = next(l for l in proc.stdout.splitlines() if l.startswith("validation:"))
    return float(line.split("flat_accuracy ")[1].split(",")[0])


def test_context_solves_what_the_title_alone_cannot(households, tmp_path):
    with_ctx = run_program(
        "finetune.py",
        "--dataset",
        households,
        "--save-path",
        tmp_path / "ctx",
        "--context-cols",
        "relation",
        "industry",
        *LEARN,
    )
    without = run_program(
        "finetune.py", "--dataset", households, "--save-path", tmp_path / "plain", *LEARN
    )
    assert accuracy(with_ctx) >= 0.95 and accuracy(without) <= 0.75
    train = pd.read_parquet(tmp_path / "ctx" / "data_train.parquet")
    assert (
        train["text"]
        .str.fullmatch(r"\w+ \[SEP\] relation: (wife|son)( \[SEP\] industry: coal)?")
        .all()
    )
    # prediction rebuilds the same input from the file's columns
    out = tmp_path / "pred.csv"
    run_program(
        "predict.py", "--checkpoint", tmp_path / "ctx", "--input", households, "--output", out
    )
    predicted = pd.read_csv(out, dtype=str)
    assert (predicted["code_1"] == predicted["hisco_1"]).mean() >= 0.95
    missing = tmp_path / "no-relation.csv"
    pd.read_parquet(households).drop(columns=["relation"]).to_csv(missing, index=False)
    proc = run_program(
        "predict.py",
        "--checkpoint",
        tmp_path / "ctx",
        "--input",
        missing,
        "--output",
        tmp_path / "x.csv",
        check=False,
    )
    assert proc.returncode == 2 and "no column 'relation'" in proc.stderr
    # a title with spaces reads as in training ('servant' stripped, then the context), in the
    # API and so in predict.py: before, 'servant  [SEP] relation: wife' was a string never seen
    import mixer

    model = mixer.load(str(tmp_path / "ctx"), device="cpu")
    context = {"relation": ["wife", "son", "wife"], "industry": [None, "coal", ""]}
    clean = model.predict(["servant", "miner", "clerk"], context=context, top_k=3)
    spaced = model.predict(["servant  ", " miner", "\tclerk "], context=context, top_k=3)
    pd.testing.assert_frame_equal(clean, spaced)
    # training noise edits the title only: the prepared data knows where it ends
    assert (
        train["desc_chars"] == train["text"].str.split(" [SEP] ", regex=False).str[0].str.len()
    ).all()


def test_noise_edits_the_description_and_keeps_the_context(tmp_path):
    from mixer.data.inputs.noise import NoiseConfig
    from mixer.data.inputs.token_cache import TokenCache
    from mixer.data.inputs.tokens import CanineIds, InputRecipe
    from mixer.data.inputs.training_inputs import (
        RowInputs,
        TextStore,
        build_text_store,
        language_codes,
    )

    texts = model_text(
        pd.Series(["servant", "farm labourer"]),
        pd.DataFrame({"relation": ["wife", "son"]}),
        ["relation"],
    )
    frame = pd.DataFrame({"text": texts, "lang": ["en", "en"], "desc_chars": np.int32([7, 13])})
    frame.to_parquet(tmp_path / "data_train.parquet")
    build_text_store(str(tmp_path), "train", str(tmp_path / "t.arrow"))
    store = TextStore(str(tmp_path / "t.arrow"))
    assert store.rows(np.array([1, 0])) == (
        ["farm labourer", "servant"],
        [" [SEP] relation: son", " [SEP] relation: wife"],
    )
    assert store.words == ["farm", "labourer", "servant"]  # the descriptions' words only
    ids = CanineIds(InputRecipe(max_len=256))  # room for padded titles (up to 40 more characters)
    flat, lengths = ids.encode(texts.to_numpy(object), frame["lang"].to_numpy(object))
    cache = TokenCache(flat, np.concatenate([[0], np.cumsum(lengths)]))
    codes, names = language_codes(frame["lang"])
    inputs = RowInputs(cache, ids, store, codes, names, NoiseConfig(1.0, 3, 0.0), seed=1)
    for ids_of_row, row in zip(inputs.ids(np.array([0, 1] * 20), 0, np.arange(40)), [0, 1] * 20):
        text = "".join(map(chr, ids_of_row[1:-1]))
        assert text.startswith("en" + chr(0xE001)) and text.endswith(
            frame["text"][row][frame["desc_chars"][row] :]
        )
        description = text[3 : -len(frame["text"][row][frame["desc_chars"][row] :])]
        assert description == description.strip()  # as model_text builds it: no '  [SEP]'


@pytest.fixture(scope="module")
def context_model(households, tmp_path_factory):
    import mixer
    from mixer.cli.entrypoints import finetune_main

    run = tmp_path_factory.mktemp("ctx-api") / "run"
    assert (
        finetune_main(
            [
                "--dataset",
                households,
                "--save-path",
                str(run),
                "--context-cols",
                "relation",
                *LEARN[:10],
                "--max-steps",
                "1",
                "--batch-size",
                "8",
            ]
        )
        == 0
    )
    return mixer.load(str(run), device="cpu")


def test_the_api_pairs_a_series_with_its_context_and_languages_by_index(context_model):
    """A reordered lang Series and context DataFrame are matched to the texts by index
    (pandas' rule): every row gets its own relation and language, whatever the order."""
    model = context_model
    texts = pd.Series(["servant", "servant", "farmer"], index=[10, 20, 30])
    context = pd.DataFrame({"relation": ["wife", "son", "son"]}, index=[10, 20, 30])
    langs = pd.Series(["en", "da", "nl"], index=[10, 20, 30])
    seen = []
    real = model._predictor.predict

    def spy(texts_in, langs_in, *args, **kwargs):  # what reaches the model, row by row
        seen.append(list(zip(texts_in, langs_in)))
        return real(texts_in, langs_in, *args, **kwargs)

    model._predictor.predict = spy
    in_order = model.predict(texts, lang=langs, context=context)
    shuffled = [30, 10, 20]
    reordered = model.predict(texts, lang=langs.loc[shuffled], context=context.loc[shuffled])
    by_position = model.predict(
        list(texts), lang=list(langs), context={"relation": list(context["relation"])}
    )
    assert seen[0] == seen[1] == seen[2]
    assert [lang for _, lang in seen[0]] == ["en", "da", "nl"] and "wife" in seen[0][0][0]
    pd.testing.assert_frame_equal(reordered, in_order)
    pd.testing.assert_frame_equal(by_position.set_axis(texts.index), in_order)
    np.testing.assert_array_equal(
        model.embeddings(texts, lang=langs, context=context.loc[shuffled]),
        model.embeddings(texts, lang=langs, context=context),
    )
    from mixer.core.errors import UserError

    for bad in (
        dict(context=context.set_axis([10, 20, 31])),
        dict(lang=langs.set_axis([1, 2, 3])),
        dict(context=context.reset_index(drop=True)),
    ):
        with pytest.raises(UserError, match="index does not match the texts' index"):
            model.predict(texts, **{"context": context, **bad})


@pytest.mark.floats
def test_predict_py_pairs_each_row_with_its_own_context_in_every_chunk(context_model, tmp_path):
    """Chunks after the first (and a rank's share under torchrun) have an index that
    does not start at 0: each row still reads its own context columns."""
    from mixer.cli.entrypoints import predict_main

    frame = pd.DataFrame(
        {
            "occ1": ["servant", "farmer", "servant", "miner", "servant"],
            "relation": ["wife", "son", "son", "wife", None],
        }
    )
    frame.to_csv(tmp_path / "in.csv", index=False)
    assert (
        predict_main(
            [
                "--checkpoint",
                context_model.source,
                "--input",
                str(tmp_path / "in.csv"),
                "--output",
                str(tmp_path / "out.csv"),
                "--chunk-size",
                "2",
            ]
        )
        == 0
    )
    written = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    expected = context_model.predict(
        list(frame["occ1"]), context={"relation": list(frame["relation"])}
    )
    assert written["code_1"].tolist() == expected["code_1"].fillna("").tolist()
    assert_floats_close(
        pd.to_numeric(written["prob_1"]), expected["prob_1"]
    )  # chunks of 2: other batches


# ------------------------------------------------------------------ fitting the context (issue 34)
FIT_DESCRIPTIONS = ["servant", "farm labourer", " ".join("w" * 35), "miner"]
FIT_CONTEXT = pd.DataFrame(
    {"relation": ["wife", "son of the head of the household and his wife", "son", None]}
)
FIT_MAX_LEN = {
    "canine": 32,
    "tiny-bert": 12,
    "minilm-l6": 12,
    "slow-bert": 12,
}  # row 0 fits, row 1's context does not


def expected_rows(tokenizer, descriptions, contexts, max_len, lang):
    """The rule written out with transformers' tokenizer, row by row: the description's
    own encoding ([CLS] (lang [SEP]) description [SEP]) whole, as many of the context's
    tokens as fit before its last [SEP]; a description longer than the input alone, cut as
    usual."""
    rows = []
    for description, context in zip(descriptions, contexts):
        first = (lang, description) if lang != "unk" else (description,)
        whole = tokenizer(*first)["input_ids"]
        if len(whole) > max_len:
            rows.append(
                tokenizer(
                    *first,
                    truncation="only_second" if len(first) == 2 else True,
                    max_length=max_len,
                )["input_ids"]
            )
            continue
        tail = tokenizer(context, add_special_tokens=False)["input_ids"] if context else []
        rows.append(whole[:-1] + tail[: max_len - len(whole)] + whole[-1:])
    return rows


@pytest.mark.parametrize("encoder", ["canine", "tiny-bert", "minilm-l6", "slow-bert"])
def test_the_description_is_kept_whole_and_the_context_cut_from_its_end(encoder, tiny_bert_dir):
    """One rule for every encoder, in what it reads: characters for CANINE, tokens for word
    pieces (a fast tokenizer's backend, or a slow tokenizer row by row). Row 0 fits; row 1's
    context is cut; row 2's description alone is longer (cut, context left out); row 3 has
    no context."""
    from transformers import AutoTokenizer, BertTokenizer, CanineTokenizer

    from mixer.data.labels.normalise import model_input
    from mixer.data.inputs.tokens import (
        CONTEXT_CUT,
        DESCRIPTION_CUT,
        FITS,
        BackendIds,
        CanineIds,
        InputRecipe,
        SlowIds,
        context_note,
    )
    from mixer.models.encoders import package_model_dir

    max_len = FIT_MAX_LEN[encoder]
    recipe = InputRecipe(max_len=max_len)
    if encoder == "canine":
        tokenizer, ids = CanineTokenizer(), CanineIds(recipe)
    elif encoder == "slow-bert":
        tokenizer = BertTokenizer(vocab_file=f"{tiny_bert_dir}/vocab.txt")
        ids = SlowIds(tokenizer, recipe)
    else:
        directory = tiny_bert_dir if encoder == "tiny-bert" else package_model_dir(encoder)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        ids = BackendIds.from_file(f"{directory}/tokenizer.json", recipe, tokenizer.pad_token_id)
    texts, desc_chars = model_input(pd.Series(FIT_DESCRIPTIONS), FIT_CONTEXT, ["relation"])
    assert desc_chars.tolist() == [len(d) for d in FIT_DESCRIPTIONS]
    contexts = [t[n:] for t, n in zip(texts, desc_chars)]
    for lang in ("unk", "en"):  # a text alone, or after its language ([CLS] en [SEP] ...)
        got, lengths, fit = ids.fitted(
            texts.to_numpy(object), np.full(4, lang, dtype=object), desc_chars
        )
        assert rows_of(got, lengths) == expected_rows(
            tokenizer, FIT_DESCRIPTIONS, contexts, max_len, lang
        )
        assert fit.tolist()[1:] == [CONTEXT_CUT, DESCRIPTION_CUT, FITS]
    _, _, fit = ids.fitted(texts.to_numpy(object), np.full(4, "unk", dtype=object), desc_chars)
    assert fit.tolist() == [FITS, CONTEXT_CUT, DESCRIPTION_CUT, FITS]
    unit = "characters" if encoder == "canine" else "tokens"
    assert context_note(fit, ids, training=True) == (
        f"the context of 2 row(s) was cut from its end to fit --max-len {max_len} ({unit}); in 1 of them "
        "the description alone is longer and was cut, the context left out; pass a larger --max-len to "
        "make room"
    )


def rows_of(ids, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(lengths))]


def test_a_run_stored_before_the_rule_reads_its_input_as_it_was_trained():
    """A recipe stored without context_fit (runs before the rule) fits as those runs were
    trained: the joined text cut from its end, OccCANINE's inputs with the context first cut
    to 128 characters as written. The two differ where spelling changes a length: an emoji
    in the context, which OccCANINE's ASCII spelling drops."""
    from transformers import CanineTokenizer

    from mixer.data.labels.normalise import model_input
    from mixer.data.inputs.tokens import DESCRIPTION_WHOLE, JOINED, CanineIds, InputRecipe, to_ascii

    occcanine = dict(max_len=128, language="literal", lowercase=True, ascii=True, strip=False)
    stored = InputRecipe.from_dict(occcanine)  # config.json of a run before the rule
    assert (
        stored.context_fit == JOINED and InputRecipe(**occcanine).context_fit == DESCRIPTION_WHOLE
    )
    assert (
        InputRecipe.from_dict(InputRecipe(**occcanine).to_dict()).context_fit == DESCRIPTION_WHOLE
    )
    descriptions = pd.Series(["Servant", "farmer"])
    context = pd.DataFrame({"relation": ["wife 🎣" * 30, "son"]})
    texts, desc_chars = model_input(descriptions, context, ["relation"])
    langs = np.asarray(["en", ""], dtype=object)
    old, old_lengths, _ = CanineIds(stored).fitted(texts.to_numpy(object), langs, desc_chars)
    tokenizer = CanineTokenizer()
    room = 128 - 2 - len("[SEP]") - np.asarray([2, 3]) - desc_chars  # as written, before spelling
    before = [
        tokenizer(
            f"{lang or 'unk'}[SEP]{to_ascii(np.asarray([t[: n + r]], object))[0].lower()}",
            truncation=True,
            max_length=128,
        )["input_ids"]
        for t, n, r, lang in zip(texts, desc_chars, room, langs)
    ]
    assert rows_of(old, old_lengths) == before
    new, new_lengths, _ = CanineIds(InputRecipe(**occcanine)).fitted(
        texts.to_numpy(object), langs, desc_chars
    )
    assert (
        new_lengths.tolist() == [128, old_lengths[1]] and old_lengths[0] < 128
    )  # the rule fills the 128
    assert rows_of(new, new_lengths)[1] == rows_of(old, old_lengths)[1]


def long_households(path) -> list:
    """Issue 34's records: the relation decides the code, and 240 of 320 descriptions are
    76 to 90 characters long (longer than --max-len 64 alone), 40 are 45 characters (their
    context does not fit beside them), 40 are the bare title. Returns 20 long descriptions."""
    rng = np.random.default_rng(3)
    titles = sorted({t for t, _ in CODES})
    parish = " in the parish of saint mary magdalene and the township of " + "x" * 60
    rows = []
    for i in range(320):
        title, relation = titles[i % len(titles)], ["wife", "son"][rng.integers(2)]
        description = (
            (title + parish)[: 76 + i % 15]
            if i < 240
            else (title + parish)[:45]
            if i < 280
            else title
        )
        rows.append((description, relation, CODES[(title, relation)]))
    pd.DataFrame(rows, columns=["occ1", "relation", "hisco_1"]).to_csv(path, index=False)
    return [r[0] for r in rows[:20]]


def test_a_context_that_does_not_fit_is_counted_and_the_flag_named(tmp_path, capsys):
    """Issue 34: canine-tiny trained with --context-cols relation on descriptions of 76
    characters or more read none of the context at --max-len 64, and nothing said so. The
    rule keeps the description whole, so no context fits there: training, predict.py and
    the API count those rows and name --max-len; trained with room, the context is read."""
    import mixer
    from mixer.cli.entrypoints import finetune_main, predict_main

    data = tmp_path / "households.csv"
    long = long_households(data)
    argv = [
        "--dataset",
        str(data),
        "--context-cols",
        "relation",
        *LEARN[:10],
        "--max-steps",
        "1",
        "--batch-size",
        "8",
    ]
    tight, roomy = tmp_path / "tight", tmp_path / "roomy"
    assert finetune_main([*argv, "--save-path", str(tight), "--max-len", "64"]) == 0
    out = capsys.readouterr().out
    said = (
        "the context of 280 row(s) was cut from its end to fit --max-len 64 (characters); in 240 of "
        "them the description alone is longer and was cut, the context left out; pass a larger "
        "--max-len to make room ("
    )
    assert said in out
    training, validation = map(
        int, re.search(r"\((\d+) training, (\d+) validation row\(s\)\)", out).groups()
    )
    assert training + validation == 280 and validation > 0
    recipe = json.loads((tight / "config.json").read_text())["input_recipe"]
    assert recipe["context_fit"] == "description-whole"  # the rule the run was trained with
    # the character n-gram head reads no context: runs with context get none (docs/training.md)
    assert not (tight / "ngram.npz").exists() and "n-gram head" not in out
    # predict.py: one line for the whole file, over its chunks
    assert (
        predict_main(
            [
                "--checkpoint",
                str(tight),
                "--input",
                str(data),
                "--output",
                str(tmp_path / "p.csv"),
                "--chunk-size",
                "100",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("the context of") == 1
    assert (
        "note: the context of 280 row(s) was cut from its end to fit the 64 characters the model reads "
        "(its --max-len); in 240 of them the description alone is longer and was cut, the context left "
        "out; a model trained with a larger --max-len makes room"
    ) in err
    model = mixer.load(str(tight), device="cpu")
    wife = model.predict(long, context={"relation": ["wife"] * 20}, top_k=1)
    assert "note: the context of 20 row(s) was cut" in capsys.readouterr().err
    son = model.predict(long, context={"relation": ["son"] * 20}, top_k=1)
    assert (wife["prob_1"] == son["prob_1"]).all()  # nothing of the context fits: said above
    # a run stored before the rule (no context_fit) predicts with the input it was trained on
    config = json.loads((tight / "config.json").read_text())
    del config["input_recipe"]["context_fit"]
    (tight / "config.json").write_text(json.dumps(config))
    earlier = mixer.load(str(tight), device="cpu")
    assert earlier._predictor.recipe.context_fit == "joined"
    pd.testing.assert_frame_equal(
        earlier.predict(long, context={"relation": ["wife"] * 20}, top_k=1), wife
    )
    assert "note: the context of 20 row(s) was cut" in capsys.readouterr().err  # counted as well
    # with room (--max-len 128: 90 + 21 characters fit), nothing is cut and the context is read
    assert finetune_main([*argv, "--save-path", str(roomy), "--max-len", "128"]) == 0
    assert "the context of" not in capsys.readouterr().out
    model = mixer.load(str(roomy), device="cpu")
    wife = model.predict(long, context={"relation": ["wife"] * 20}, top_k=1)
    son = model.predict(long, context={"relation": ["son"] * 20}, top_k=1)
    assert "the context of" not in capsys.readouterr().err
    assert (wife["prob_1"] != son["prob_1"]).all()  # 20 of 20 rows read their context

"""Context columns: the same title with two codes, told apart by the relation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import assert_floats_close, run_program
from mixer.data.normalise import model_text

CODES = {("servant", "wife"): "54010", ("servant", "son"): "62105",
         ("labourer", "wife"): "99910", ("labourer", "son"): "62110",
         ("farmer", "wife"): "61110", ("farmer", "son"): "61115",
         ("weaver", "wife"): "75400", ("weaver", "son"): "75500",
         ("clerk", "wife"): "39310", ("clerk", "son"): "39320",
         ("miner", "wife"): "71100", ("miner", "son"): "71105"}
LEARN = ["--target-cols", "hisco_1", "--encoder", "canine-tiny", "--decoder-dim", "32",
         "--decoder-layers", "1", "--decoder-heads", "2", "--max-len", "48", "--num-epochs", "6",
         "--batch-size", "16", "--learning-rate", "3e-3", "--dropout", "0"]


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
    with_ctx = run_program("finetune.py", "--dataset", households, "--save-path", tmp_path / "ctx",
                           "--context-cols", "relation", "industry", *LEARN)
    without = run_program("finetune.py", "--dataset", households, "--save-path", tmp_path / "plain",
                          *LEARN)
    assert accuracy(with_ctx) >= 0.95 and accuracy(without) <= 0.75
    train = pd.read_parquet(tmp_path / "ctx" / "data_train.parquet")
    assert train["text"].str.fullmatch(r"\w+ \[SEP\] relation: (wife|son)( \[SEP\] industry: coal)?").all()
    # prediction rebuilds the same input from the file's columns
    out = tmp_path / "pred.csv"
    run_program("predict.py", "--checkpoint", tmp_path / "ctx", "--input", households, "--output", out)
    predicted = pd.read_csv(out, dtype=str)
    assert (predicted["code_1"] == predicted["hisco_1"]).mean() >= 0.95
    missing = tmp_path / "no-relation.csv"
    pd.read_parquet(households).drop(columns=["relation"]).to_csv(missing, index=False)
    proc = run_program("predict.py", "--checkpoint", tmp_path / "ctx", "--input", missing,
                       "--output", tmp_path / "x.csv", check=False)
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
    assert (train["desc_chars"] == train["text"].str.split(" [SEP] ", regex=False).str[0].str.len()).all()


def test_noise_edits_the_description_and_keeps_the_context(tmp_path):
    from mixer.data.noise import NoiseConfig
    from mixer.data.token_cache import TokenCache
    from mixer.data.tokens import CanineIds, InputRecipe
    from mixer.data.training_inputs import RowInputs, TextStore, build_text_store, language_codes

    texts = model_text(pd.Series(["servant", "farm labourer"]), pd.DataFrame({"relation": ["wife", "son"]}),
                       ["relation"])
    frame = pd.DataFrame({"text": texts, "lang": ["en", "en"], "desc_chars": np.int32([7, 13])})
    frame.to_parquet(tmp_path / "data_train.parquet")
    build_text_store(str(tmp_path), "train", str(tmp_path / "t.arrow"))
    store = TextStore(str(tmp_path / "t.arrow"))
    assert store.rows(np.array([1, 0])) == (["farm labourer", "servant"], [" [SEP] relation: son",
                                                                            " [SEP] relation: wife"])
    assert store.words == ["farm", "labourer", "servant"]  # the descriptions' words only
    ids = CanineIds(InputRecipe(max_len=256))  # room for padded titles (up to 40 more characters)
    flat, lengths = ids.encode(texts.to_numpy(object), frame["lang"].to_numpy(object))
    cache = TokenCache(flat, np.concatenate([[0], np.cumsum(lengths)]))
    codes, names = language_codes(frame["lang"])
    inputs = RowInputs(cache, ids, store, codes, names, NoiseConfig(1.0, 3, 0.0), seed=1)
    for ids_of_row, row in zip(inputs.ids(np.array([0, 1] * 20), 0, np.arange(40)), [0, 1] * 20):
        text = "".join(map(chr, ids_of_row[1:-1]))
        assert text.startswith("en" + chr(0xE001)) and text.endswith(frame["text"][row][frame["desc_chars"][row]:])
        description = text[3:-len(frame["text"][row][frame["desc_chars"][row]:])]
        assert description == description.strip()  # as model_text builds it: no '  [SEP]'




@pytest.fixture(scope="module")
def context_model(households, tmp_path_factory):
    import mixer
    from mixer.cli.entrypoints import finetune_main

    run = tmp_path_factory.mktemp("ctx-api") / "run"
    assert finetune_main(["--dataset", households, "--save-path", str(run), "--context-cols", "relation",
                          *LEARN[:10], "--max-steps", "1", "--batch-size", "8"]) == 0
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

    def spy(texts_in, langs_in, *args):  # what reaches the model, row by row
        seen.append(list(zip(texts_in, langs_in)))
        return real(texts_in, langs_in, *args)

    model._predictor.predict = spy
    in_order = model.predict(texts, lang=langs, context=context)
    shuffled = [30, 10, 20]
    reordered = model.predict(texts, lang=langs.loc[shuffled], context=context.loc[shuffled])
    by_position = model.predict(list(texts), lang=list(langs), context={"relation": list(context["relation"])})
    assert seen[0] == seen[1] == seen[2]
    assert [lang for _, lang in seen[0]] == ["en", "da", "nl"] and "wife" in seen[0][0][0]
    pd.testing.assert_frame_equal(reordered, in_order)
    pd.testing.assert_frame_equal(by_position.set_axis(texts.index), in_order)
    np.testing.assert_array_equal(model.embeddings(texts, lang=langs, context=context.loc[shuffled]),
                                  model.embeddings(texts, lang=langs, context=context))
    from mixer.core.errors import UserError

    for bad in (dict(context=context.set_axis([10, 20, 31])), dict(lang=langs.set_axis([1, 2, 3])),
                dict(context=context.reset_index(drop=True))):
        with pytest.raises(UserError, match="index does not match the texts' index"):
            model.predict(texts, **{"context": context, **bad})


@pytest.mark.floats
def test_predict_py_pairs_each_row_with_its_own_context_in_every_chunk(context_model, tmp_path):
    """Chunks after the first (and a rank's share under torchrun) have an index that
    does not start at 0: each row still reads its own context columns."""
    from mixer.cli.entrypoints import predict_main

    frame = pd.DataFrame({"occ1": ["servant", "farmer", "servant", "miner", "servant"],
                          "relation": ["wife", "son", "son", "wife", None]})
    frame.to_csv(tmp_path / "in.csv", index=False)
    assert predict_main(["--checkpoint", context_model.source, "--input", str(tmp_path / "in.csv"),
                         "--output", str(tmp_path / "out.csv"), "--chunk-size", "2"]) == 0
    written = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    expected = context_model.predict(list(frame["occ1"]), context={"relation": list(frame["relation"])})
    assert written["code_1"].tolist() == expected["code_1"].fillna("").tolist()
    assert_floats_close(pd.to_numeric(written["prob_1"]), expected["prob_1"])  # chunks of 2: other batches

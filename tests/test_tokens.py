"""Token ids equal transformers' tokenizers exactly, on awkward text; the cache."""

from __future__ import annotations

import numpy as np
import pytest

from mixer.data.inputs.tokens import BackendIds, CanineIds, InputRecipe, model_strings, tag_of

AWKWARD = [
    "farmer and fisher",
    "Bäcker und Müller",
    "smed, åbenrå",
    "农民 and 漁師",
    "fisherman 🎣🐟 (retired)",
    "",
    "a" * 300,
    "x",
    "  spaced   out  ",
    "tab\there",
    "line\nbreak",
    "ﬁsher (ligature)",
    "e\u0301 combining",
    "Ñandú",
    "Ωμέγα ψαράς",
    "\u200bzero width",
    "مزارع",
    "[SEP] inside",
    'quote " and , comma',
]
LANGS = [
    "en",
    "ge",
    "da",
    "unk",
    "en",
    "unk",
    "en",
    "unk",
    "unk",
    "fr",
    "en",
    "unk",
    "fr",
    "es",
    "gr",
    "unk",
    "unk",
    "en",
    "en",
]


def reference(tokenizer, texts, langs, max_len):
    """transformers' tokenizer on the stripped text (mixer's recipe strips)."""
    out = []
    for text, lang in zip(texts, langs):
        text = text.strip()
        if lang == "unk":
            out.append(tokenizer(text, truncation=True, max_length=max_len)["input_ids"])
        else:
            out.append(
                tokenizer(lang, text, truncation="only_second", max_length=max_len)["input_ids"]
            )
    return out


def rows_of(ids, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(lengths))]


@pytest.mark.parametrize("max_len", [16, 48, 128])
def test_canine_ids_are_the_tokenizers_code_points(max_len):
    from transformers import CanineTokenizer

    texts, langs = np.asarray(AWKWARD, dtype=object), np.asarray(LANGS, dtype=object)
    ids, lengths = CanineIds(InputRecipe(max_len=max_len)).encode(texts, langs)
    assert rows_of(ids, lengths) == reference(CanineTokenizer(), AWKWARD, LANGS, max_len)


def test_canine_literal_recipe_is_the_tokenizer_on_the_joined_string():
    """OccCANINE's input: the string 'lang[SEP]text', padded/cut to 128 characters."""
    from transformers import CanineTokenizer

    recipe = InputRecipe(max_len=128, language="literal", strip=False)
    texts, langs = np.asarray(AWKWARD, dtype=object), np.asarray(LANGS, dtype=object)
    ids, lengths = CanineIds(recipe).encode(texts, langs)
    tokenizer = CanineTokenizer()
    expected = [
        tokenizer(f"{lang}[SEP]{text}", truncation=True, max_length=128)["input_ids"]
        for text, lang in zip(AWKWARD, LANGS)
    ]
    assert rows_of(ids, lengths) == expected


@pytest.mark.parametrize("max_len", [8, 64])
def test_fast_tokenizer_backend_gives_the_tokenizers_ids(tiny_bert_dir, max_len):
    from transformers import AutoTokenizer

    from mixer.models.encoders import package_model_dir

    for directory in (tiny_bert_dir, package_model_dir("minilm-l6")):
        tokenizer = AutoTokenizer.from_pretrained(directory)
        fast = BackendIds.from_file(f"{directory}/tokenizer.json", InputRecipe(max_len=max_len))
        ids, lengths = fast.encode(
            np.asarray(AWKWARD, dtype=object), np.asarray(LANGS, dtype=object)
        )
        assert rows_of(ids, lengths) == reference(tokenizer, AWKWARD, LANGS, max_len)
        # read from the file without torch, or from the loaded tokenizer: one cache tag
        from mixer.data.inputs.tokens import token_ids_for

        assert tag_of(fast) == tag_of(
            token_ids_for(tokenizer, "bert", InputRecipe(max_len=max_len))
        )


def test_literal_recipe_lowercases_and_transliterates():
    recipe = InputRecipe(max_len=128, language="literal", lowercase=True, ascii=True)
    first, second = model_strings(["Bäcker ÆBLE", "Fisher"], ["ge", ""], recipe)
    assert second is None and list(first) == ["ge[SEP]backer aeble", "unk[SEP]fisher"]


def test_without_unidecode_greek_and_cyrillic_are_spelled_out_not_deleted(monkeypatch):
    """mixer's own rule (no GPL code) for Latin letters, then anyascii for other scripts:
    OccCANINE has a Greek language code ('gr'), and its input must keep the text."""
    from mixer.data.inputs import transliterate

    monkeypatch.setattr(transliterate, "_unidecode", False)  # as if Unidecode were not installed
    recipe = InputRecipe(max_len=128, language="literal", lowercase=True, ascii=True)
    texts = [
        "Γεωργός και ψαράς",
        "Кузнец",
        "жена шахтёра",
        "Bäcker ÆBLE",
        "Θυρωρός",
        "农民",
        "fisherman 🎣 ¿",
    ]
    first, _ = model_strings(texts, ["gr", "unk", "unk", "ge", "gr", "unk", "en"], recipe)
    assert list(first) == [
        "gr[SEP]georgos kai psaras",
        "unk[SEP]kuznets",
        "unk[SEP]zhena shakhtera",
        "ge[SEP]backer aeble",
        "gr[SEP]thyroros",
        "unk[SEP]NongMin",
        "en[SEP]fisherman  ?",
    ]  # emoji dropped, as unidecode does
    assert all(s.isascii() for s in first)
    # the Latin letters of OccCANINE's languages as unidecode spells them, from the own table
    assert (
        transliterate.own_rule("Straße, Ørsted, Þór, Łódź, œuvre — «x»")
        == "Strasse, Orsted, Thor, Lodz, oeuvre -- <<x>>"
    )


def test_an_occcanine_recipe_without_unidecode_gets_one_note_naming_the_extra(monkeypatch):
    from mixer.data.inputs import transliterate

    occcanine = InputRecipe(max_len=128, language="literal", lowercase=True, ascii=True)
    assert transliterate.exactness_note(occcanine) is None  # Unidecode is installed here
    monkeypatch.setattr(transliterate, "_unidecode", False)
    note = transliterate.exactness_note(occcanine)
    assert "\n" not in note and "may differ from OccCANINE's" in note
    assert "pip install '" in note and "[occcanine]'" in note
    assert transliterate.exactness_note(InputRecipe()) is None  # mixer's own models keep the text


def test_canine_runs_load_without_building_transformers_tokenizer(tmp_path, monkeypatch):
    """CanineTokenizer lists all 1.1M code points (about 2 s of CPU in every process
    that loads a CANINE model); mixer asks it only for its padding id and its file,
    which mixer writes as transformers does."""
    import transformers
    from transformers import AutoTokenizer, CanineTokenizer

    from mixer.models.encoders import build_encoder, encoder_from_run, save_encoder_files

    reference = CanineTokenizer()
    reference.save_pretrained(str(tmp_path / "theirs"))

    def refuse(*args, **kwargs):
        raise AssertionError("CanineTokenizer built")

    with monkeypatch.context() as patched:
        patched.setattr(transformers.CanineTokenizer, "__init__", refuse)
        encoder = build_encoder("canine-tiny", dropout=0.0)
        save_encoder_files(encoder, str(tmp_path / "run"))
        loaded = encoder_from_run(str(tmp_path / "run"))
    assert loaded.tokenizer.pad_token_id == encoder.tokenizer.pad_token_id == reference.pad_token_id
    ours, theirs = tmp_path / "run" / "tokenizer", tmp_path / "theirs"
    read = AutoTokenizer.from_pretrained(str(ours))  # what a user's transformers makes of the run
    assert type(read) is CanineTokenizer and read.model_max_length == reference.model_max_length
    assert read.special_tokens_map == reference.special_tokens_map
    assert read("Bäcker [SEP] x")["input_ids"] == reference("Bäcker [SEP] x")["input_ids"]
    if int(transformers.__version__.split(".")[0]) >= 5:  # the pinned release: its very file
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
        for path in theirs.iterdir():
            assert (ours / path.name).read_bytes() == path.read_bytes()

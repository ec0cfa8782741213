"""Token ids of the rows a step draws: from the token cache, or tokenised on the fly
when the draw noises the row (mixer.data.inputs.noise).

A clean row's ids come from the run's token cache (mixer.data.inputs.token_cache). A row whose
draw edits its description or hides its language is rebuilt from its text and
tokenised with the rest of the batch's such rows. It uses the same tokeniser that built
the cache (CANINE: numpy over code points; others: the fast tokenizer's backend).
So a row the draw leaves alone has exactly the ids it had without noise, and a
noised row has the ids its noised text has at prediction.

The texts live in a text store, RUN_DIR/cache/texts_<split>_<data>.arrow: an
uncompressed Arrow IPC file memory-mapped by every rank and DataLoader worker (the page
cache holds one copy per machine). It holds the description and, for runs
with context columns, the context after it (noise edits the description only),
and the words the `word` edit inserts. It is built once from the prepared split
and named by the split's content, like the token cache.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import numpy as np

from mixer.data.inputs.noise import NoiseConfig, draw, noised, word_list

TEXT_STORE_ROWS = 1_000_000  # rows per record batch


def prepared_data_id(run_dir: str, split: str) -> str:
    """The content of a prepared split (xxh3-128 of data_<split>.parquet, ~0.1 s per
    10M rows): what a cache built from it is named and checked by."""
    from mixer.data.prepared.fingerprint import content_hash

    return content_hash(os.path.join(run_dir, f"data_{split}.parquet"))[:16]


def split_caches(
    run_dir: str, token_ids, prepared, world=None, log: Callable[[str], None] = print
) -> dict:
    """{split: its token cache} for "train", "val" and, with --share-calibration, "cal",
    each checked against the prepared split's content (all ranks; no torch needed); says
    how many rows' context was cut to fit the model's input."""
    from mixer.data.inputs.token_cache import token_cache
    from mixer.data.inputs.tokens import context_note

    splits = [("train", prepared.train), ("val", prepared.val)]
    if prepared.cal is not None:
        splits.append(("cal", prepared.cal))
    caches = {
        split: token_cache(
            run_dir,
            split,
            token_ids,
            len(frame),
            world,
            data_id=prepared_data_id(run_dir, split),
            log=log,
        )
        for split, frame in splits
    }
    train, val = caches["train"].fit, caches["val"].fit
    note = context_note((train[0] + val[0], train[1] + val[1]), token_ids, training=True)
    if note:
        log(f"{note} ({train[0]} training, {val[0]} validation row(s))")
    return caches


# ------------------------------------------------------------------ text store
class TextStore:
    """A split's descriptions (and contexts), memory-mapped; pickles by path, so a
    DataLoader worker maps the file instead of receiving a copy."""

    def __init__(self, path: str):
        self.path = path
        self._table = None
        self._starts = None
        self._words = None

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.__init__(state["path"])

    @property
    def table(self):
        if self._table is None:
            self._table = _mapped(self.path)
            lengths = [len(chunk) for chunk in self._table.column("text").chunks]
            self._starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return self._table

    @property
    def words(self) -> "WordList":
        if self._words is None:
            self._words = WordList(_mapped(self.path + WORDS).column("word"))
        return self._words

    def __len__(self) -> int:
        return self.table.num_rows

    def rows(self, indices: np.ndarray) -> tuple:
        """(descriptions, contexts) of the rows: lists of str ('' where no context). Each
        row is read from its own record batch: a `take` over the whole column would first
        join every batch into one copy (per call)."""
        table, indices = self.table, np.asarray(indices, dtype=np.int64)
        names = ["text"] + (["context"] if "context" in table.column_names else [])
        out = {name: [None] * len(indices) for name in names}
        chunk_of = np.searchsorted(self._starts, indices, side="right") - 1
        for chunk in np.unique(chunk_of):
            picked = np.flatnonzero(chunk_of == chunk)
            local = indices[picked] - self._starts[chunk]
            for name in names:
                values = table.column(name).chunk(int(chunk)).take(local).to_pylist()
                for k, value in zip(picked, values):
                    out[name][k] = value
        return out["text"], out.get("context", [""] * len(indices))


class WordList:
    """The words the `word` edit inserts, memory-mapped: len() and [i] are all it needs."""

    def __init__(self, column):
        self.array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: int) -> str:
        return self.array[index].as_py()

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __iter__(self):
        return iter(self.array.to_pylist())


WORDS = ".words.arrow"


def _mapped(path: str):
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(path)).read_all()


def build_text_store(run_dir: str, split: str, path: str, has_context: bool = False) -> None:
    """Write the text store of a prepared split, a row group at a time. The description
    ends where the prepared `desc_chars` says (mixer.data.labels.normalise.description_chars)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mixer.data.labels.normalise import description_chars
    from mixer.data.labels.columns import DESC_CHARS, TEXT
    from mixer.data.inputs.tokens import split_context
    from mixer.core.io import atomic_write

    source = pq.ParquetFile(os.path.join(run_dir, f"data_{split}.parquet"))
    cut_given = DESC_CHARS in source.schema_arrow.names
    with_context = cut_given or has_context
    columns = [TEXT] + ([DESC_CHARS] if cut_given else [])
    schema = pa.schema(
        [("text", pa.large_string())] + ([("context", pa.large_string())] if with_context else [])
    )
    words: set = set()

    def write(tmp: str) -> None:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for index in range(source.num_row_groups):
                group = source.read_row_group(index, columns=columns)
                if with_context:  # description and context apart (a Python pass: context runs only)
                    texts = group.column(TEXT).to_pylist()
                    descriptions, contexts = split_context(
                        texts,
                        description_chars(
                            texts, group.column(DESC_CHARS).to_numpy() if cut_given else None
                        ),
                    )
                    arrays = [
                        pa.array(descriptions, pa.large_string()),
                        pa.array(contexts, pa.large_string()),
                    ]
                else:
                    arrays = [group.column(TEXT).combine_chunks().cast(pa.large_string())]
                words.update(word_list(arrays[0]))
                writer.write_batch(pa.record_batch(arrays, schema=schema))

    atomic_write(path, write)
    word_table = pa.table({"word": pa.array(sorted(words), pa.large_string())})

    def write_words(tmp: str) -> None:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, word_table.schema) as writer:
            writer.write_table(word_table)

    atomic_write(path + WORDS, write_words)  # last: the store is complete


def text_store(
    run_dir: str,
    split: str,
    data_id: str,
    world=None,
    log: Callable[[str], None] = print,
    has_context: bool = False,
) -> TextStore:
    """The split's text store, built first by rank 0 when absent (all ranks)."""
    path = os.path.join(run_dir, "cache", f"texts_{split}_{data_id}.arrow")

    def build():
        if not os.path.exists(path + WORDS):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            log(f"storing the {split} texts for on-the-fly noise in {path}")
            build_text_store(run_dir, split, path, has_context)

    if world is None or not world.is_distributed:
        build()
    else:
        from mixer.distributed import world as mdist

        mdist.main_first(build, world, others=lambda: None)
    return TextStore(path)


# ------------------------------------------------------------------ ids of drawn rows
class RowInputs:
    """Token ids of drawn rows: the cache's, or (noised rows) tokenised now.

    every_row: every row gets the noise's edits at the fixed evaluation "epoch",
    languages kept (the noised copy of the validation rows, --eval-noise)."""

    def __init__(
        self,
        tokens,
        token_ids=None,
        texts: Optional[TextStore] = None,
        lang_codes: Optional[np.ndarray] = None,
        lang_names: Optional[np.ndarray] = None,
        noise: Optional[NoiseConfig] = None,
        seed: int = 0,
        every_row: bool = False,
        words: Optional[TextStore] = None,
    ):
        self.tokens = tokens  # a mixer.data.inputs.token_cache.TokenCache
        self.token_ids = token_ids
        self.texts = texts
        self.lang_codes = lang_codes  # small ints per row; names in lang_names
        self.lang_names = lang_names
        self.noise = noise if noise is not None else NoiseConfig(0.0, 0, 0.0)
        self.seed = seed
        self.every_row = every_row
        self.words = words or texts  # whose words the `word` edit inserts: the training rows'
        self.active = self.noise.active and texts is not None and token_ids is not None

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, rows: np.ndarray, epoch: int, positions: np.ndarray) -> list:
        """The ids of `rows`, drawn at `positions` of epoch `epoch`."""
        out = [np.asarray(self.tokens.row(int(r))) for r in rows]
        if not self.active or not len(rows):
            return out
        from mixer.data.inputs.noise import EVAL_EPOCH

        rows = np.asarray(rows, dtype=np.int64)
        langs = self.lang_names[self.lang_codes[rows]]
        noise = draw(
            self.noise,
            self.seed,
            EVAL_EPOCH if self.every_row else epoch,
            positions,
            langs,
            every_row=self.every_row,
        )
        redo = np.flatnonzero(noise.noised | noise.unknown)
        if not len(redo):
            return out
        descriptions, contexts = self.texts.rows(rows[redo])
        descriptions = [
            noised(d, self.noise.edits, noise.keys[k], self.words.words) if noise.noised[k] else d
            for k, d in zip(redo, descriptions)
        ]
        texts, desc_chars = _joined(descriptions, contexts)
        new_langs = np.where(noise.unknown[redo], "unk", langs[redo]).astype(object)
        ids, lengths = self.token_ids.encode(texts, new_langs, desc_chars)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        for j, k in enumerate(redo):
            out[k] = ids[starts[j] : starts[j + 1]]
        return out


def _joined(descriptions: list, contexts: list) -> tuple:
    """(texts, characters of each that are its description): descriptions and contexts as
    mixer.data.labels.normalise.model_input joins them; with context the description stripped (a
    padded noised title ends in a space). None for the second where no row has context
    (the ids are then the same either way)."""
    descriptions = [d.strip() if c else d for d, c in zip(descriptions, contexts)]
    texts = np.asarray([d + c for d, c in zip(descriptions, contexts)], dtype=object)
    if not any(contexts):
        return texts, None
    return texts, np.fromiter(map(len, descriptions), dtype=np.int64, count=len(descriptions))


def language_codes(langs) -> tuple:
    """(codes, names) of a prepared split's language column: a byte or two per row."""
    import pandas as pd

    categorical = pd.Categorical(langs)
    return np.asarray(categorical.codes), np.asarray(categorical.categories, dtype=object)

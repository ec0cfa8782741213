"""The distinct-input store: each distinct model input's predicted rows, for one file.

A census repeats a description thousands of times; predict.py asks the model once per
distinct input of the whole file (mixer.prediction.predict_job), not once per chunk. The
store holds, per key, the row the job writes for it: the code table after every row step
(calibration, target marks, lookup, shorter codes), a matrix row (--what) or an embedding.
Every one of those steps depends only on the key and the model's output, so a stored row
is the row a fresh prediction would give (floats within rounding: other batches).

Memory grows with distinct inputs, not rows, and is bounded: the rows stay in memory up to
`budget` bytes; past it, newly seen inputs' rows go to an SQLite file beside the output's
temporary files (the first-seen inputs, the most frequent under a Zipf law, stay in
memory). The key index (key -> row number) stays in memory: about 100 bytes plus the
key's length per distinct input.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
from itertools import repeat
from typing import Optional

import numpy as np
import pandas as pd

from mixer.data.tables.sinks import dump_atomically as _dump


class DistinctStore:
    """Rows by key. `add` on a rank that holds no rows (payload None) records the keys only,
    so every rank agrees on which keys are new."""

    def __init__(self, budget: int, spill_dir: str, name: str):
        self.budget, self.spill_dir, self.name = budget, spill_dir, name
        self.ids: dict = {}
        self.blocks: list = []  # per block: its rows in memory, or Spilled
        self.starts: list = []
        self.merged = 0  # the blocks after the last _merge
        self.memory = 0
        self.spilled = 0
        self.db: Optional[sqlite3.Connection] = None
        self.path: Optional[str] = None

    def __len__(self) -> int:
        return len(self.ids)

    def known(self, keys: np.ndarray) -> np.ndarray:
        return self.numbers(keys) >= 0

    def numbers(self, keys: np.ndarray) -> np.ndarray:
        """Each key's row number in the store, -1 for a key it lacks."""
        return np.fromiter(map(self.ids.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))

    def add(self, keys: np.ndarray, rows=None) -> None:
        """Record new keys (none known yet) and, on the rank that keeps them, their rows in
        the keys' order: a DataFrame or a 2-d array."""
        if not len(keys):
            return
        first = len(self.ids)
        self.ids.update(zip(keys, range(first, first + len(keys))))
        if rows is None:
            return
        size = _size(rows)
        if isinstance(rows, pd.DataFrame):
            rows = rows.reset_index(drop=True)
        self.starts.append(first)
        if self.memory + size <= self.budget:
            self.blocks.append(rows)
            self.memory += size
            return
        self._spill(first, rows)
        self.blocks.append(Spilled(rows))

    def take(self, keys: np.ndarray, ids: Optional[np.ndarray] = None):
        """The rows of `keys` (all known), in their order; `ids`: their `numbers`, where known."""
        if ids is None:
            ids = np.fromiter(map(self.ids.__getitem__, keys), dtype=np.int64, count=len(keys))
        if len(self.blocks) >= self.merged + MERGE_AFTER:
            self._merge()
        block_of = np.searchsorted(np.asarray(self.starts), ids, side="right") - 1
        pieces, order = [], []
        for block in np.unique(block_of):
            where = np.flatnonzero(block_of == block)
            rows = self.blocks[block]
            local = ids[where] - self.starts[block]
            pieces.append(
                self._read(ids[where], rows)
                if isinstance(rows, Spilled)
                else rows.iloc[local]
                if isinstance(rows, pd.DataFrame)
                else rows[local]
            )
            order.append(where)
        if not pieces:
            return None
        position = np.argsort(np.concatenate(order), kind="stable")
        if isinstance(pieces[0], pd.DataFrame):
            table = pieces[0] if len(pieces) == 1 else pd.concat(pieces, ignore_index=True)
            return table.iloc[position].reset_index(drop=True)
        return np.concatenate(pieces)[position]

    def _merge(self) -> None:
        """Consecutive blocks in memory of the same columns and types made one, so that a
        chunk's `take` looks in a few blocks, not in one per chunk of the file so far (a
        window adds a block per chunk it holds). The rows and their types are as they were."""
        blocks, starts = [], []
        for start, rows in zip(self.starts, self.blocks):
            if blocks and _kind(rows) is not None and _kind(rows) == _kind(blocks[-1][-1]):
                blocks[-1].append(rows)
                continue
            blocks.append([rows])
            starts.append(start)
        self.blocks = [
            run[0]
            if len(run) == 1
            else pd.concat(run, ignore_index=True)
            if isinstance(run[0], pd.DataFrame)
            else np.concatenate(run)
            for run in blocks
        ]
        self.starts, self.merged = starts, len(blocks)

    def close(self) -> None:
        """Remove the spill file (at the end of the job, or when it stops)."""
        if self.db is not None:
            self.db.close()
            self.db = None
        if self.path and os.path.exists(self.path):
            os.unlink(self.path)

    # ------------------------------------------------------------ the spill file
    def _spill(self, first: int, rows) -> None:
        """Rows past the budget to the spill file. A failure to write it (a full disk: SQLite's
        "database or disk is full") is one line naming the file (mixer.core.io.writing), and
        predict.py's job keeps the chunks done."""
        from mixer.core.io import writing

        path = self.path or os.path.join(
            self.spill_dir, f".tmp-{self.name}.{os.getpid()}.store.sqlite"
        )
        with writing("--store-memory's spill file", path, errors=(sqlite3.Error,)):
            self._write(path, first, rows)
        self.spilled += len(rows)

    def _write(self, path: str, first: int, rows) -> None:
        if self.db is None:
            self.path = path
            if os.path.exists(self.path):
                os.unlink(self.path)
            self.db = sqlite3.connect(self.path)
            self.db.execute("PRAGMA journal_mode=OFF")
            self.db.execute("PRAGMA synchronous=OFF")
            self.db.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, value BLOB)")
        if isinstance(rows, pd.DataFrame):
            values = (
                pickle.dumps(row, protocol=5) for row in rows.itertuples(index=False, name=None)
            )
        else:
            values = (row.tobytes() for row in np.ascontiguousarray(rows))
        self.db.executemany(
            "INSERT INTO rows VALUES (?, ?)", zip(range(first, first + len(rows)), values)
        )
        self.db.commit()

    def _read(self, ids: np.ndarray, block: "Spilled"):
        found = {}
        for start in range(0, len(ids), 30_000):  # SQLite's limit on parameters
            part = [int(i) for i in ids[start : start + 30_000]]
            query = f"SELECT id, value FROM rows WHERE id IN ({','.join('?' * len(part))})"
            found.update(self.db.execute(query, part).fetchall())
        values = [found[int(i)] for i in ids]
        if block.columns is None:
            return np.frombuffer(b"".join(values), dtype=block.dtype).reshape(-1, block.width)
        table = pd.DataFrame.from_records(
            [pickle.loads(v) for v in values], columns=range(len(block.columns))
        )
        return table.astype(dict(enumerate(block.dtypes))).set_axis(block.columns, axis=1)


MERGE_AFTER = 8  # blocks added since the last merge that make `take` merge them first


def _kind(rows):
    """What blocks must share to be one (their columns and types), None for a spilled block."""
    if isinstance(rows, Spilled):
        return None
    if isinstance(rows, pd.DataFrame):
        return ("frame", tuple(rows.columns), tuple(rows.dtypes))
    return ("array", rows.dtype.str, rows.shape[1:])


class Spilled:
    """Where a block's rows went to disk: what reads them back in their types."""

    def __init__(self, rows):
        frame = isinstance(rows, pd.DataFrame)
        self.columns = list(rows.columns) if frame else None
        self.dtypes = list(rows.dtypes) if frame else None
        self.dtype, self.width = (None, None) if frame else (rows.dtype, rows.shape[1])


def _size(rows) -> int:
    if isinstance(rows, pd.DataFrame):
        return int(rows.memory_usage(deep=True, index=False).sum())
    return int(rows.nbytes)


class StoreLog:
    """A store as a stateful part of a job that resumes (mixer.prediction.resume): each
    chunk's new keys and their rows (`note`) written beside the journal as `<name>-<k>.pkl`
    (state_dict), the store as it grew, so that a resumed job fills later rows from the very
    values an uninterrupted one would; load_state_dict reads them back into the store, and
    `keys` gives what the other ranks add (their stores hold keys only)."""

    def __init__(self, store: DistinctStore, journal, name: str):
        self.store, self.journal, self.name = store, journal, name
        self.chunks, self.new = 0, None

    def note(self, new: tuple) -> None:
        """Rank 0: a chunk's new (keys, rows)."""
        self.new = new

    def state_dict(self) -> dict:
        _dump(self.journal.path(f"{self.name}-{self.chunks}.pkl"), self.new)
        self.chunks, self.new = self.chunks + 1, None
        return {"chunks": self.chunks}

    def load_state_dict(self, state: dict) -> None:
        self.chunks, self.loaded = state["chunks"], []
        for k in range(self.chunks):
            with open(self.journal.path(f"{self.name}-{k}.pkl"), "rb") as handle:
                keys, rows = pickle.load(handle)
            if keys is not None:
                self.store.add(keys, rows)
                self.loaded.append(keys)

    def keys(self) -> list:
        """Each completed chunk's new keys, as load_state_dict read them (rank 0)."""
        return getattr(self, "loaded", [])

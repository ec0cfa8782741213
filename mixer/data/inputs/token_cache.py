"""The token cache of a run directory: each split tokenised once per tokeniser,
shared by every rank and every later run (and by `--prepare-only`, so a
cluster user tokenises on a CPU node and trains on GPU nodes).

Layout: RUN_DIR/cache/tokens_<split>_<tag>/ids.bin (int32 token ids of every
row, one after another), offsets.npy (int64, rows + 1) and manifest.json,
written last: a directory without it is incomplete and is rebuilt. The manifest
counts the rows whose context was cut to fit (mixer.data.inputs.tokens).

Building it is split over the ranks. Rank r tokenises its share of the
prepared Parquet file's row groups, a million rows at a time, appending to its
own part files (peak memory does not grow with the number of rows). Rank 0
then joins the parts. Ranks wait for each other on the rendezvous store with
no time limit (mixer.distributed.world.all_ranks), never in a collective that
--dist-timeout would end.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from mixer.data.inputs.tokens import CHUNK_ROWS, tag_of

MANIFEST = "manifest.json"


@dataclass
class TokenCache:
    ids: np.ndarray  # memory-mapped int32
    offsets: np.ndarray  # int64, rows + 1
    fit: tuple = (
        0,
        0,
    )  # rows whose context was cut; of them, rows whose description alone is longer

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def cache_dir(run_dir: str, split: str, token_ids) -> str:
    return os.path.join(run_dir, "cache", f"tokens_{split}_{tag_of(token_ids)}")


def read_manifest(directory: str) -> Optional[dict]:
    manifest = os.path.join(directory, MANIFEST)
    if not os.path.exists(manifest):
        return None
    with open(manifest) as handle:
        return json.load(handle)


def load(
    directory: str, rows: Optional[int] = None, data_id: Optional[str] = None
) -> Optional[TokenCache]:
    """The cache in `directory`, or None when it is absent, incomplete, or built from
    other prepared data (another row count or content, `data_id`)."""
    meta = read_manifest(directory)
    if meta is None:
        return None
    if rows is not None and meta["rows"] != rows:
        return None
    if data_id is not None and meta.get("data") != data_id:
        return None
    offsets = np.load(os.path.join(directory, "offsets.npy"), mmap_mode="r")
    size = int(offsets[-1])
    ids = (
        np.memmap(os.path.join(directory, "ids.bin"), dtype=np.int32, mode="r", shape=(size,))
        if size
        else np.zeros(0, dtype=np.int32)
    )
    return TokenCache(ids, offsets, (meta.get("context_cut", 0), meta.get("description_cut", 0)))


def row_groups(parquet_path: str) -> list:
    """(first row, rows) of each row group of a Parquet file."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(parquet_path).metadata
    groups, start = [], 0
    for i in range(meta.num_row_groups):
        rows = meta.row_group(i).num_rows
        groups.append((start, rows))
        start += rows
    return groups


def my_groups(groups: list, world_size: int, rank: int) -> list:
    """Contiguous row groups per rank, balanced by rows."""
    total = sum(rows for _, rows in groups) or 1
    mine = []
    for index, (start, rows) in enumerate(groups):
        if min(world_size - 1, (start + rows // 2) * world_size // total) == rank:
            mine.append(index)
    return mine


def build_part(
    parquet_path: str,
    directory: str,
    token_ids,
    rank: int,
    world_size: int,
    text_col: str,
    lang_col: str,
) -> None:
    """Tokenise this rank's row groups into part-<rank>.ids / .lengths, and count in
    part-<rank>.fit the rows whose context was cut. The prepared `desc_chars` column says
    where each description ends (a split without it, one text per row: no context, or data
    prepared before the column existed)."""
    import pyarrow.parquet as pq

    from mixer.data.labels.columns import DESC_CHARS
    from mixer.data.inputs.tokens import DESCRIPTION_CUT

    groups = row_groups(parquet_path)
    ids_path = os.path.join(directory, f"part-{rank:05d}.ids")
    lengths_path = os.path.join(directory, f"part-{rank:05d}.lengths")
    fit_path = os.path.join(directory, f"part-{rank:05d}.fit")
    file = pq.ParquetFile(parquet_path)
    with_context = DESC_CHARS in file.schema_arrow.names
    counts = np.zeros(2, dtype=np.int64)
    with open(ids_path + ".tmp", "wb") as ids_out, open(lengths_path + ".tmp", "wb") as len_out:
        for index in my_groups(groups, world_size, rank):
            table = file.read_row_group(
                index, columns=[text_col, lang_col] + ([DESC_CHARS] if with_context else [])
            )
            for start in range(0, table.num_rows, CHUNK_ROWS):
                chunk = table.slice(start, CHUNK_ROWS)
                texts = np.asarray(chunk.column(text_col).to_pylist(), dtype=object)
                langs = np.asarray(chunk.column(lang_col).to_pylist(), dtype=object)
                desc_chars = chunk.column(DESC_CHARS).to_numpy() if with_context else None
                ids, lengths, fit = token_ids.fitted(texts, langs, desc_chars)
                counts += (np.count_nonzero(fit), np.count_nonzero(fit == DESCRIPTION_CUT))
                ids.astype(np.int32, copy=False).tofile(ids_out)
                lengths.astype(np.int32, copy=False).tofile(len_out)
    counts.tofile(fit_path + ".tmp")
    os.replace(ids_path + ".tmp", ids_path)
    os.replace(lengths_path + ".tmp", lengths_path)
    os.replace(fit_path + ".tmp", fit_path)


def join_parts(directory: str, world_size: int, rows: int, describe: dict) -> None:
    """Rank 0: one ids.bin and offsets.npy from the parts, then the manifest."""
    from mixer.core.io import atomic_write, write_text

    lengths = []
    fit = np.zeros(2, dtype=np.int64)
    for rank in range(world_size):
        path = os.path.join(directory, f"part-{rank:05d}.lengths")
        lengths.append(np.fromfile(path, dtype=np.int32))
        fit += np.fromfile(os.path.join(directory, f"part-{rank:05d}.fit"), dtype=np.int64)
    lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)
    if len(lengths) != rows:
        raise RuntimeError(
            f"token cache {directory}: {len(lengths)} rows tokenised, {rows} expected"
        )
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])

    def write_ids(tmp: str) -> None:
        with open(tmp, "wb") as out:
            for rank in range(world_size):
                with open(os.path.join(directory, f"part-{rank:05d}.ids"), "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 24)

    atomic_write(os.path.join(directory, "ids.bin"), write_ids)
    atomic_write(os.path.join(directory, "offsets.npy"), lambda p: _save(p, offsets))
    for rank in range(world_size):
        for suffix in (".ids", ".lengths", ".fit"):
            os.unlink(os.path.join(directory, f"part-{rank:05d}{suffix}"))
    write_text(
        os.path.join(directory, MANIFEST),
        json.dumps(
            dict(
                describe,
                rows=rows,
                tokens=int(offsets[-1]),
                context_cut=int(fit[0]),
                description_cut=int(fit[1]),
            ),
            indent=1,
        ),
    )


def _save(path: str, array: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, array)


def token_cache(
    run_dir: str,
    split: str,
    token_ids,
    rows: int,
    world=None,
    *,
    data_id: Optional[str] = None,
    text_col: str = "text",
    lang_col: str = "lang",
    log: Callable[[str], None] = print,
) -> TokenCache:
    """The cache of a split: loaded, or built first by all ranks together (all ranks).
    The cache is named by the tokeniser and its input recipe (max length, language
    handling) and records the prepared split it was built from (`data_id`, its
    content, mixer.data.inputs.training_inputs.prepared_data_id): a cache of other data is
    rebuilt, and the run says so. `world` None: one process that has no process
    group (and need not import torch)."""
    directory = cache_dir(run_dir, split, token_ids)
    cache = load(directory, rows, data_id)
    if cache is not None:
        return cache
    parquet = os.path.join(run_dir, f"data_{split}.parquet")
    world_size, rank = (world.world_size, world.rank) if world is not None else (1, 0)
    describe = {
        "split": split,
        "tokeniser": token_ids.kind,
        "recipe": token_ids.recipe.to_dict(),
        "data": data_id,
    }

    def prepare_directory():
        stale = read_manifest(directory)
        if stale is not None:
            log(
                f"the token cache in {directory} was built from other prepared data "
                f"({stale.get('rows')} rows, content {stale.get('data')}; now {rows} rows, "
                f"content {data_id}): rebuilding it"
            )
        if os.path.isdir(directory):  # incomplete (no manifest) or stale: start over
            shutil.rmtree(directory)
        os.makedirs(directory)
        log(
            f"tokenising {rows:,} {split} rows ({token_ids.kind}) into {directory}"
            + (f", split over {world_size} processes" if world_size > 1 else "")
        )

    def build():
        build_part(parquet, directory, token_ids, rank, world_size, text_col, lang_col)

    def join():
        join_parts(directory, world_size, rows, describe)

    start = time.perf_counter()
    if world is None or not world.is_distributed:
        prepare_directory()
        build()
        join()
    else:
        from mixer.distributed import world as mdist

        mdist.main_first(prepare_directory, world, others=lambda: None)
        mdist.all_ranks(build, world)  # every rank its share; waits without a time limit
        mdist.main_first(join, world, others=lambda: None)
    log(f"tokenised {rows:,} {split} rows in {time.perf_counter() - start:.1f} s")
    return load(directory, rows, data_id)

"""The prepared files of a run directory: data_train.parquet, data_val.parquet (and
data_cal.parquet), key.csv and prepared.json, each written atomically and read back:
whole, without the text, some columns, or in batches of rows."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from mixer.data.labels.columns import LANG, code_columns
from mixer.data.labels.formatter import CodeFormatter

PREPARED_FILES = ("data_train.parquet", "data_val.parquet", "key.csv", "prepared.json")
CALIBRATION_FILE = (
    "data_cal.parquet"  # --share-calibration: rows that choose nothing (docs/coding.md)
)
ROW_GROUP = 1_000_000


@dataclass
class Prepared:
    train: pd.DataFrame
    val: pd.DataFrame
    key: pd.DataFrame
    formatter: CodeFormatter
    cal: Optional[pd.DataFrame] = None  # --share-calibration's rows, which choose nothing


def write_prepared(prepared: Prepared, run_dir: str, stamp: dict) -> None:
    """Write data_train/data_val/key.csv/prepared.json; each file atomically."""
    from mixer.core.io import atomic_write

    os.makedirs(run_dir, exist_ok=True)
    # row groups of a million rows: the token cache splits its work over ranks by them
    atomic_write(
        os.path.join(run_dir, "data_train.parquet"),
        lambda p: prepared.train.to_parquet(p, index=False, row_group_size=ROW_GROUP),
    )
    atomic_write(
        os.path.join(run_dir, "data_val.parquet"),
        lambda p: prepared.val.to_parquet(p, index=False, row_group_size=ROW_GROUP),
    )
    if prepared.cal is not None:
        atomic_write(
            os.path.join(run_dir, CALIBRATION_FILE),
            lambda p: prepared.cal.to_parquet(p, index=False, row_group_size=ROW_GROUP),
        )
    atomic_write(os.path.join(run_dir, "key.csv"), lambda p: prepared.key.to_csv(p, index=False))
    rows = {"train": len(prepared.train), "val": len(prepared.val)}
    if prepared.cal is not None:
        rows["cal"] = len(prepared.cal)
    meta = dict(stamp, formatter=prepared.formatter.to_dict(), rows=rows)
    atomic_write(os.path.join(run_dir, "prepared.json"), lambda p: _write_json(p, meta))


def read_key(run_dir: str) -> pd.DataFrame:
    return pd.read_csv(
        os.path.join(run_dir, "key.csv"),
        dtype={"code": str, "description": str},
        keep_default_na=False,
    )


def load_prepared(run_dir: str, with_text: bool = True) -> Prepared:
    """The prepared splits; without their text (training reads tokens from the
    cache), a 10M-row split loads in seconds and little memory."""
    with open(os.path.join(run_dir, "prepared.json")) as handle:
        meta = json.load(handle)
    import pyarrow.parquet as pq

    present = set(pq.read_schema(os.path.join(run_dir, "data_train.parquet")).names)
    columns = (
        None
        if with_text
        else [c for c in code_columns(meta["formatter"]["max_num_codes"]) if c in present]
        + [LANG, "row"]
    )
    cal = os.path.join(run_dir, CALIBRATION_FILE)
    return Prepared(
        train=pd.read_parquet(os.path.join(run_dir, "data_train.parquet"), columns=columns),
        val=pd.read_parquet(os.path.join(run_dir, "data_val.parquet"), columns=columns),
        key=read_key(run_dir),
        formatter=CodeFormatter.from_dict(meta["formatter"]),
        cal=pd.read_parquet(cal, columns=columns) if "cal" in meta.get("rows", {}) else None,
    )


def read_split(run_dir: str, split: str, columns: list) -> pd.DataFrame:
    """Some columns of one prepared split ("train", "val", "cal"), e.g. the texts of the
    rows a run's final evaluation scored."""
    return pd.read_parquet(os.path.join(run_dir, f"data_{split}.parquet"), columns=columns)


def iter_split(run_dir: str, split: str, columns, batch_size: int = 1 << 18):
    """(the split's column names, an iterator of DataFrames of `columns(names)` in batches of
    rows): one prepared split read in pieces, for a run of any size."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(os.path.join(run_dir, f"data_{split}.parquet"))
    names = list(parquet.schema_arrow.names)
    wanted = list(columns(names)) if callable(columns) else list(columns)
    return names, (
        batch.to_pandas() for batch in parquet.iter_batches(columns=wanted, batch_size=batch_size)
    )


def prepared_stamp(run_dir: str) -> Optional[dict]:
    path = os.path.join(run_dir, "prepared.json")
    if not all(os.path.exists(os.path.join(run_dir, f)) for f in PREPARED_FILES):
        return None
    with open(path) as handle:
        stamp = json.load(handle)
    if "cal" in stamp.get("rows", {}) and not os.path.exists(
        os.path.join(run_dir, CALIBRATION_FILE)
    ):
        return None  # prepared again, like a run whose split files are missing
    return stamp


def _write_json(path: str, values: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=1)

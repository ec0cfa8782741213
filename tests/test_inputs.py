"""Input files as users have them: quoted newlines, codes stored as numbers, and the
identity of a prepared run directory's inputs."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import run_program
from mixer.core.config import DataConfig
from mixer.core.errors import UserError
from mixer.data.prepared.prepare import prepare_run_data
from mixer.data.tables.reading import iter_chunks, read_table


# ------------------------------------------------------------------ quoted newlines
@pytest.fixture(scope="module")
def newline_csv(tmp_path_factory, toy_frame) -> str:
    """About 3 MB (several of the CSV reader's 1 MiB blocks); every third description
    holds a quoted line break, as exported from a spreadsheet with wrapped cells."""
    frame = pd.concat([toy_frame[toy_frame["hisco_1"].str.len() == 5]] * 12, ignore_index=True)
    frame["occ1"] = np.where(
        frame.index % 3 == 0, frame["occ1"] + "\nand part-time fisher", frame["occ1"]
    )
    frame["row_id"] = [f"{i:07d}" for i in range(len(frame))]
    path = tmp_path_factory.mktemp("newlines") / "wrapped.csv"
    frame.to_csv(path, index=False)
    assert os.path.getsize(path) > 3 * (1 << 20)
    return str(path)


def test_csv_with_quoted_newlines_reads_whole_and_in_chunks(newline_csv):
    expected = pd.read_csv(newline_csv, dtype=str, keep_default_na=False)  # Python's reader
    whole = read_table(newline_csv)
    pd.testing.assert_frame_equal(whole, expected)
    assert whole["occ1"].str.contains("\n").sum() == (len(expected) + 2) // 3
    chunks = list(iter_chunks(newline_csv, chunk_size=7_001))
    assert [len(c) for c in chunks[:-1]] == [7_001] * (len(chunks) - 1)
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), expected)


def test_prepare_keeps_every_row_of_a_csv_with_quoted_newlines(newline_csv, tmp_path):
    run_program(
        "finetune.py",
        "--dataset",
        newline_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        tmp_path / "run",
        "--prepare-only",
    )
    train = pd.read_parquet(tmp_path / "run" / "data_train.parquet")
    val = pd.read_parquet(tmp_path / "run" / "data_val.parquet")
    rows = len(pd.read_csv(newline_csv, dtype=str))
    assert len(train) + len(val) == rows
    assert train["text"].str.contains("\nand part-time fisher").any()


def test_a_parquet_file_whose_pandas_metadata_pandas_cannot_read_is_read(tmp_path):
    """pandas records Arrow-backed dtypes it cannot parse back ('list<...>[pyarrow]');
    such a file is read by its Arrow types instead of failing with a TypeError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lists = pa.array([[1], [2]])
    pairs = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, 3.0, 4.0]), 2)
    for name, column in (
        ("list", lists),
        ("fixed_size_list", pairs),
    ):  # TypeError, NotImplementedError
        frame = pd.DataFrame(
            {
                "occ1": ["farmer", "fisher"],
                "hisco_1": ["61110", "64100"],
                "extra": pd.Series(column, dtype=pd.ArrowDtype(column.type)),
            }
        )
        path = tmp_path / f"arrow_backed_{name}.parquet"
        pq.write_table(pa.Table.from_pandas(frame), path)
        frame = read_table(str(path))
        assert list(frame["hisco_1"]) == ["61110", "64100"]


# ------------------------------------------------------------------ codes stored as numbers
def numeric_codes(tmp_path, second_code, name="codes.parquet") -> str:
    frame = pd.DataFrame(
        {
            "occ1": ["farmer and fisher", "farmer", "fisher", "smith"],
            "hisco_1": ["61110", "61110", "64100", "83110"],
        }
    )
    frame["hisco_2"] = second_code
    path = tmp_path / name
    if name.endswith(".csv"):
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return str(path)


def prepared_codes(path, run_dir) -> list:
    cfg = DataConfig(
        dataset=path, target_cols=["hisco_1", "hisco_2"], formatter="general", share_val=0.25
    )
    prepared = prepare_run_data(cfg, 0, str(run_dir), log=lambda _: None)
    both = pd.concat([prepared.train, prepared.val]).sort_values("row")
    return both[["code_1", "code_2"]].astype(str).values.tolist()


@pytest.mark.parametrize(
    "second",
    [
        pd.Series([64100.0, np.nan, np.nan, np.nan], dtype="float64"),  # pandas: ints with blanks
        pd.Series([64100, None, None, None], dtype="Int64"),  # nullable integers
        pd.Series(["64100", "", "", ""], dtype=object),  # text
    ],
    ids=["float64-nan", "Int64", "string"],
)
def test_parquet_code_columns_written_as_numbers_read_as_codes(tmp_path, second):
    codes = prepared_codes(numeric_codes(tmp_path, second), tmp_path / "run")
    assert codes == [["61110", "64100"], ["61110", ""], ["64100", ""], ["83110", ""]]


def test_csv_code_columns_a_spreadsheet_wrote_as_decimals(tmp_path):
    path = numeric_codes(tmp_path, ["64100.0", "", "", ""], name="sheet.csv")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame["hisco_1"] = frame["hisco_1"] + ".0"  # the whole column, as a spreadsheet writes it
    frame.to_csv(path, index=False)
    codes = prepared_codes(path, tmp_path / "run")
    assert codes == [["61110", "64100"], ["61110", ""], ["64100", ""], ["83110", ""]]


def test_a_fractional_number_in_a_code_column_is_a_bad_label_named(tmp_path):
    path = numeric_codes(tmp_path, pd.Series([64100.5, np.nan, np.nan, np.nan]))
    with pytest.raises(UserError, match=r"row 1 hisco_2='64100.5': not a whole number"):
        prepared_codes(path, tmp_path / "run")
    assert not os.path.exists(tmp_path / "run" / "prepared.json")


# ------------------------------------------------------------------ identity of inputs
def prepare(run_dir, train, val, descriptions=None):
    cfg = DataConfig(
        train_data=list(train),
        val_data=list(val),
        formatter="hisco",
        target_cols=["hisco_1"],
        code_descriptions=descriptions,
        allow_codes_shorter_than_block_size=True,
    )
    return prepare_run_data(cfg, 0, str(run_dir), log=lambda _: None)


@pytest.fixture()
def three_files(tmp_path, toy_frame):
    paths = []
    for i in range(3):
        path = tmp_path / f"part{i}.csv"
        toy_frame.iloc[i * 50 : (i + 1) * 50].to_csv(path, index=False)
        paths.append(str(path))
    return paths


def test_training_and_validation_files_are_told_apart(three_files, tmp_path):
    a, b, c = three_files
    prepare(tmp_path / "run", [a, b], [c])
    with pytest.raises(UserError, match="--train-data differs.*--val-data differs"):
        prepare(tmp_path / "run", [a], [b, c])


def test_a_copy_elsewhere_or_a_touched_file_is_the_same_input(three_files, tmp_path):
    a, b, c = three_files
    prepare(tmp_path / "run", [a], [b])
    moved = tmp_path / "job-tmpdir"
    moved.mkdir()
    copy = shutil.copy(a, moved / "renamed.csv")
    os.utime(b, (1, 1))  # touched: another time stamp, the same bytes
    prepared = prepare(tmp_path / "run", [copy], [b])
    assert len(prepared.train) == 50


def test_an_edit_that_keeps_size_and_time_is_caught(three_files, tmp_path):
    a, b, c = three_files
    prepare(tmp_path / "run", [a], [b])
    stat = os.stat(a)
    text = open(a).read()
    swapped = text.replace("farmer", "famrer", 1)
    assert len(swapped) == len(text) and swapped != text
    open(a, "w").write(swapped)
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(UserError, match="--train-data differs"):
        prepare(tmp_path / "run", [a], [b])


def test_code_descriptions_are_part_of_the_identity(three_files, tmp_path):
    a, b, _ = three_files
    descriptions = tmp_path / "titles.csv"
    descriptions.write_text("code,description\n99910,labourer\n")
    prepare(tmp_path / "run", [a], [b], str(descriptions))
    descriptions.write_text("code,description\n99910,general labourer\n")
    with pytest.raises(UserError, match="--code-descriptions differs"):
        prepare(tmp_path / "run", [a], [b], str(descriptions))

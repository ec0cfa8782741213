"""Compressed tables as they arrive (IPUMS delivers every extract gzip'd): gzip, bzip2 and xz
read by the one reader with every option of the file's role, row for row as the plain file;
zstd and zip refused in one line about inputs; an output named .csv.gz written gzip'd."""

from __future__ import annotations

import bz2
import gzip
import lzma
import sys
import zipfile

import pandas as pd
import pytest

from conftest import TOY
from mixer.core.config import DataConfig, TableOptions
from mixer.core.errors import UserError
from mixer.data.prepared.prepare import prepare_run_data
from mixer.data.tables import compression
from mixer.data.tables.reading import check_csv_rows, count_rows, iter_chunks, read_table
from mixer.data.tables.writing import OutputWriter, write_table


@pytest.fixture(scope="module")
def toy() -> pd.DataFrame:
    return pd.read_csv(TOY, dtype=str, keep_default_na=False)


def variants(folder, toy: pd.DataFrame) -> list:
    """(plain file, options) of the shapes a CSV arrives in: as written, tab-separated,
    cp1252 with ';', a 'sep=' line above the header, title rows above it."""
    out = []
    plain = folder / "plain.csv"
    toy.to_csv(plain, index=False)
    out.append((plain, TableOptions(role="input")))
    tsv = folder / "tabs.tsv"
    toy.to_csv(tsv, sep="\t", index=False)
    out.append((tsv, TableOptions(role="input")))
    windows = toy.copy()
    windows.loc[::3, "occ1"] = windows.loc[::3, "occ1"] + " à l'église"  # bytes past ASCII
    cp1252 = folder / "windows.txt"
    windows.to_csv(cp1252, sep=";", index=False, encoding="cp1252")
    out.append((cp1252, TableOptions(role="input", encoding="cp1252")))
    named = folder / "named.csv"
    named.write_text("sep=|\n" + toy.to_csv(sep="|", index=False))
    out.append((named, TableOptions(role="input")))
    titled = folder / "titled.csv"
    titled.write_text("Occupations, parish of X\n\n" + toy.to_csv(index=False))
    out.append((titled, TableOptions(role="dataset", header_row=3)))
    return out


def packed(path, suffix: str, name: str = None):
    """`path` compressed by `suffix`'s compression, named `name` (by default path + suffix)."""
    data = path.read_bytes()
    target = path.parent / (name or path.name + suffix)
    compress = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix]
    target.write_bytes(compress(data))
    return target


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_a_compressed_csv_reads_every_row_as_the_plain_file_with_its_options(tmp_path, toy, suffix):
    """Each shape of CSV, compressed and named so (.csv.gz, .tsv.gz, .txt.gz) or named as the
    plain file (a census.csv that is gzip'd), reads the same rows as the plain file, whole and
    in chunks, with the same separator, encoding, 'sep=' line and header row."""
    for plain, options in variants(tmp_path, toy):
        expected = read_table(str(plain), options)
        assert len(expected) == len(toy)
        misnamed = packed(plain, suffix, "misnamed-" + plain.name)
        for path in (packed(plain, suffix), misnamed):
            said = []
            whole = read_table(str(path), options, log=said.append)
            pd.testing.assert_frame_equal(whole, expected)
            assert f"CSV ({compression.NAMES[suffix]})" in said[0], said
            chunks = list(iter_chunks(str(path), 3000, options))
            assert [len(c) for c in chunks] == [3000, 3000, len(toy) - 6000]
            pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), expected)
            assert count_rows(str(path), options) == len(toy)
            check_csv_rows(str(path), options)  # predict.py's pass over the rows before a job
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("occ1,hisco_1\nfarmer,61110\nsmith, master,83110\n")
    with pytest.raises(UserError) as plain_error:
        check_csv_rows(str(ragged))
    misnamed = packed(ragged, suffix, "misnamed-ragged.csv")
    with pytest.raises(UserError) as packed_error:
        check_csv_rows(str(misnamed))
    assert str(packed_error.value) == str(plain_error.value).replace(str(ragged), str(misnamed))


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_the_row_pass_before_a_job_reads_a_compressed_csv_as_its_chunks_do(tmp_path, toy, suffix):
    """predict.py's pass over the rows before the first chunk (check_csv_rows) reads a
    compressed file as the chunks do, whatever its name (.csv.xz, a census.csv that is gzip'd):
    a whole file passes, a ragged row late in it is named in one line, a damaged copy is one
    line too."""
    lines = toy.to_csv(index=False).splitlines()
    plain = tmp_path / "census.csv"
    plain.write_text("\n".join(lines) + "\n")
    lines[7000] += ",x,y"
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("\n".join(lines) + "\n")
    for name in (None, "misnamed.csv"):
        check_csv_rows(str(packed(plain, suffix, name)))
        bad = packed(ragged, suffix, name and "ragged-" + name)
        with pytest.raises(UserError, match="row 7000 has 4 cell\\(s\\), but the header") as error:
            check_csv_rows(str(bad))
        assert "\n" not in str(error.value)
    cut = tmp_path / f"cut.csv{suffix}"
    cut.write_bytes(packed(plain, suffix).read_bytes()[:-100])
    with pytest.raises(UserError, match="cannot read it as"):
        check_csv_rows(str(cut))


def test_a_gzipped_file_that_does_not_decode_names_its_row_and_a_damaged_one_is_one_line(
    tmp_path, toy
):
    windows = toy.head(50).copy()
    windows.loc[30, "occ1"] = "église"
    path = tmp_path / "windows.csv"
    windows.to_csv(path, index=False, encoding="cp1252")
    gz = packed(path, ".gz")
    with pytest.raises(UserError, match=r"not UTF-8 text: row 31 \(line 32\).*--encoding cp1252"):
        list(iter_chunks(str(gz), 10))
    data = toy.to_csv(index=False).encode()
    plain = tmp_path / "extract.dta"
    toy.to_stata(plain, write_index=False, version=118)
    for suffix, compress, name in (
        (".gz", gzip.compress, "gzip"),
        (".bz2", bz2.compress, "bzip2"),
        (".xz", lzma.compress, "xz"),
    ):
        cut = tmp_path / f"cut.csv{suffix}"
        cut.write_bytes(compress(data)[:-100])  # a copy that stopped
        damaged = bytearray(compress(data))
        damaged[len(damaged) // 2] ^= 0xFF
        bad = tmp_path / f"bad.csv{suffix}"
        bad.write_bytes(bytes(damaged))
        trailing = tmp_path / f"trailing.csv{suffix}"
        trailing.write_bytes(compress(data) + b"junk after the end")  # "trailing garbage"
        stata = tmp_path / f"cut.dta{suffix}"
        stata.write_bytes(compress(plain.read_bytes())[:-100])
        dataset = DataConfig(dataset=str(bad), target_cols=["hisco_1"], zero_padded_codes=True)
        for path, read in (
            (cut, lambda: read_table(str(cut))),
            (cut, lambda: list(iter_chunks(str(cut), 1000))),
            (cut, lambda: count_rows(str(cut))),
            (bad, lambda: list(iter_chunks(str(bad), 1000))),
            *(  # bzip2's and xz's readers skip bytes after the end, as `gzip -t` does
                [(trailing, lambda: list(iter_chunks(str(trailing), 1000)))]
                if suffix == ".gz"
                else []
            ),
            (bad, lambda: prepare_run_data(dataset, 0, str(tmp_path / "run"), log=lambda _: 0)),
            (stata, lambda: list(iter_chunks(str(stata), 1000))),
        ):
            with pytest.raises(UserError) as error:
                read()
            line = str(error.value)
            assert line.startswith("--") and f" {path}: cannot read it as " in line, line
            assert line.endswith("copy it again") or "Stata" in line, line
            assert path != trailing or "has bytes after its end" in line, line
            assert "\n" not in line


def test_zstd_and_zip_inputs_are_refused_in_one_line_about_inputs(tmp_path, toy):
    """Item 8 of the full-count review: the refusal of a compressed input ended "...or name
    an output .csv or .parquet", advice for outputs about an input."""
    plain = tmp_path / "t.csv"
    toy.head(20).to_csv(plain, index=False)
    zst = tmp_path / "t.csv.zst"
    zst.write_bytes(compression.MAGIC[".zst"] + b"\x00" * 20)
    misnamed = tmp_path / "zst.csv"
    misnamed.write_bytes(zst.read_bytes())
    archive = tmp_path / "t.csv.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(plain, "t.csv")
    parquet = packed(tmp_path / "t.csv", ".gz", "t.parquet.gz")
    for path, said in (
        (zst, "is a .zst file"),
        (misnamed, "is compressed (.zst by its first bytes)"),
        (archive, "is a .zip file"),
    ):
        with pytest.raises(UserError) as error:
            read_table(str(path), TableOptions(role="input"))
        line = str(error.value)
        assert line.startswith(f"--input {path}: the file {said}"), line
        assert "inputs are read plain or compressed by gzip, bzip2 or xz" in line
        assert "output" not in line and "\n" not in line
    with pytest.raises(UserError, match="Parquet compresses itself"):
        read_table(str(parquet))


def test_a_gzipped_stata_file_reads_as_the_plain_one_in_chunks(tmp_path, toy, monkeypatch):
    """In chunks, strLs included: pandas read a file's strLs (at its end) again before each
    chunk, which a gzip'd file pays by decompressing from its start every time."""
    frame = toy.head(2500).copy()
    frame["year"] = range(len(frame))
    frame["note"] = [f"{i} " + "long text " * 300 for i in range(len(frame))]  # strL: > 2,045
    plain = tmp_path / "extract.dta"
    frame.to_stata(plain, write_index=False, version=118, convert_strl=["note"])
    expected = pd.concat(list(iter_chunks(str(plain), 1000)), ignore_index=True)
    assert (expected["note"].astype(str) == frame["note"]).all()
    rewinds, seek = [], gzip.GzipFile.seek

    def counted(self, offset, whence=0):
        if whence == 0 and offset < self.tell():  # back: decompressed again from the start
            rewinds.append(offset)
        return seek(self, offset, whence)

    monkeypatch.setattr(gzip.GzipFile, "seek", counted)
    for path in (packed(plain, ".gz"), packed(plain, ".gz", "misnamed.dta")):
        rewinds.clear()
        chunks = list(iter_chunks(str(path), 1000))
        assert [len(c) for c in chunks] == [1000, 1000, 500]
        assert len(rewinds) <= 2, rewinds  # the header's map, the strLs: not once a chunk
        pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), expected)
        pd.testing.assert_frame_equal(read_table(str(path)), read_table(str(plain)))
        assert count_rows(str(path)) == len(frame)


def test_a_gzipped_dataset_prepares_the_same_training_rows(tmp_path, toy):
    frame = toy.head(400)
    plain = tmp_path / "train.csv"
    frame.to_csv(plain, index=False, sep=";")
    gz = packed(plain, ".gz")
    runs = []
    for path in (plain, gz):
        run = tmp_path / f"run-{path.name}"
        prepare_run_data(
            DataConfig(
                dataset=str(path),
                target_cols=["hisco_1"],
                share_val=0.2,
                zero_padded_codes=True,
                allow_codes_shorter_than_block_size=True,
            ),
            0,
            str(run),
            log=lambda _: None,
        )
        runs.append(run)
    for name in ("data_train.parquet", "data_val.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(runs[0] / name), pd.read_parquet(runs[1] / name)
        )


def test_an_output_named_csv_gz_is_gzip_of_the_plain_csv(tmp_path, toy):
    frame = toy.head(300)
    write_table(frame, str(tmp_path / "plain.csv"))
    writer = OutputWriter(str(tmp_path / "out.csv.gz"))
    for start in range(0, 300, 100):  # one gzip member a chunk: one gzip file
        writer.write(frame.iloc[start : start + 100])
    writer.commit()
    data = (tmp_path / "out.csv.gz").read_bytes()
    assert data[:2] == compression.MAGIC[".gz"]
    assert gzip.decompress(data) == (tmp_path / "plain.csv").read_bytes()
    for name in ("out.csv.bz2", "out.parquet.gz", "out.dta.gz", "out.csv.zst"):
        with pytest.raises(UserError, match=r"written as gzip'd CSV only \(\.csv\.gz\)"):
            OutputWriter(str(tmp_path / name))


def test_without_isal_gzip_is_read_and_written_by_the_standard_library(tmp_path, toy, monkeypatch):
    """isal is a dependency for its speed only: where it cannot be imported, the standard
    library's gzip reads and writes the same rows."""
    plain = tmp_path / "plain.csv"
    toy.head(500).to_csv(plain, index=False)
    gz = packed(plain, ".gz")
    with_isal = read_table(str(gz))
    monkeypatch.setitem(sys.modules, "isal", None)
    monkeypatch.setitem(sys.modules, "isal.igzip", None)
    assert compression.gzip_module() is gzip
    pd.testing.assert_frame_equal(read_table(str(gz)), with_isal)
    write_table(with_isal, str(tmp_path / "out.csv.gz"))
    write_table(with_isal, str(tmp_path / "out.csv"))
    assert (
        gzip.decompress((tmp_path / "out.csv.gz").read_bytes())
        == (tmp_path / "out.csv").read_bytes()
    )


def test_evaluate_py_scores_a_gzipped_predictions_file_as_the_plain_one(tmp_path, toy, capsys):
    from mixer.cli.entrypoints import evaluate_main

    frame = toy.head(200).copy()
    frame["code_1"] = frame["hisco_1"].where(frame.index % 3 > 0, "99999")
    plain = tmp_path / "preds.csv"
    frame.to_csv(plain, sep=";", index=False)
    said = []
    for path in (plain, packed(plain, ".gz")):
        argv = ["--predictions", str(path), "--truth-cols", "hisco_1"]
        assert evaluate_main(argv) == 0
        said.append(capsys.readouterr().out.replace(str(path), "FILE"))
    assert said[1] == said[0].replace("CSV, separator", "CSV (gzip), separator")
    assert "accuracy" in said[0] and said[0] != said[1]
    assert f"wrote {tmp_path / 'preds_evaluation.csv'} and" in said[1]  # not preds.csv_...

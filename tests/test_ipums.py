"""IPUMS fixed-width extracts (a .dat or .dat.gz file with its DDI codebook) read through
ipumspy (docs/formats.md, "IPUMS extracts"): every row as the same rows written as CSV, for
reading, training and prediction; a killed prediction resumes; what cannot be read is refused
in one line. The extracts and their codebooks are written by the tests
(conftest.write_ipums_extract)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from conftest import (
    TINY,
    TOY,
    env_for_subprocess,
    fails,
    run_program,
    run_without,
    write_ipums_extract,
)
from mixer.core.config import TableOptions

FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"  # mixer.prediction.resume: "k" is a kill -9 after chunk k
OPTIONS = TableOptions(role="input")


def layout(width: int) -> list:
    """An IPUMS USA person extract's variables: numbers zero-padded, one with implied decimals,
    the occupation as written and its HISCO code with value labels."""
    return [
        ("YEAR", 4, "numeric", 0, {1900: "1900", 1910: "1910"}),
        ("SERIAL", 8, "numeric", 0, None),
        ("PERWT", 8, "numeric", 2, None),
        ("OCCSTR", width, "character", 0, None),
        ("OCCHISCO", 5, "numeric", 0, {2210: "Clerk", 61110: "General farmer"}),
    ]


@pytest.fixture(scope="module")
def census(tmp_path_factory):
    """300 records of the example data as an extract, gzip'd and not, and the same rows as a
    CSV file (numbers as numbers are written, text without the spaces that pad it). Some codes
    have four digits (a HISCO code whose leading zero a number cannot keep), some cells are
    blank, and the text holds commas, quotes, 'NA' and letters past ASCII."""
    toy = pd.read_csv(TOY, dtype=str, keep_default_na=False)
    rows = pd.concat(
        [toy[toy["hisco_1"].str.len() == 5].head(260), toy[toy["hisco_1"].str.len() == 4].head(40)]
    ).sample(frac=1.0, random_state=0)
    # text of one byte per letter (the .dat file is ISO-8859-1, the .dat.gz UTF-8)
    occ = [o.strip().encode("latin-1", "replace").decode("latin-1") for o in rows["occ1"]]
    occ[3], occ[4], occ[5], occ[6] = "NA", 'clerk, "head"  of  office', "brændevinsbrænder", ""
    codes = [int(c) for c in rows["hisco_1"]]
    codes[7] = None
    weights = [round(float(w), 2) for w in np.random.default_rng(0).uniform(0, 500, len(occ))]
    weights[8] = None
    records = [(1900 + 10 * (i % 2), i + 1, weights[i], occ[i], codes[i]) for i in range(len(occ))]
    folder = tmp_path_factory.mktemp("ipums")
    variables = layout(max(len(o) for o in occ) + 3)
    for name, charset in (("usa_00001.dat.gz", "UTF-8"), ("usa_00002.dat", "ISO-8859-1")):
        write_ipums_extract(folder / name, variables, records, charset=charset)

    def text(value):
        return "" if value is None else np.format_float_positional(value, trim="-")

    frame = pd.DataFrame(
        {
            "YEAR": [str(r[0]) for r in records],
            "SERIAL": [str(r[1]) for r in records],
            "PERWT": [text(r[2]) for r in records],
            "OCCSTR": occ,
            "OCCHISCO": ["" if c is None else str(c) for c in codes],
        }
    )
    frame.to_csv(folder / "usa.csv", index=False)
    return {
        "gz": str(folder / "usa_00001.dat.gz"),
        "dat": str(folder / "usa_00002.dat"),
        "csv": str(folder / "usa.csv"),
        "folder": folder,
    }


# ------------------------------------------------------------------ reading
@pytest.mark.parametrize("kind", ["gz", "dat"])
def test_every_row_of_an_extract_reads_as_the_same_rows_written_as_csv(census, kind):
    from mixer.data.tables.reading import count_rows, iter_chunks, read_table

    expected = read_table(census["csv"], OPTIONS)
    whole = read_table(census[kind], OPTIONS)
    pd.testing.assert_frame_equal(whole, expected, check_dtype=False)  # text alike, str or object
    # the columns of numbers are listed, as a Stata file's are: codes get their zeros back there
    assert whole.attrs["numeric_columns"] == ["YEAR", "SERIAL", "PERWT", "OCCHISCO"]
    chunks = list(iter_chunks(census[kind], 70, OPTIONS))
    assert [len(c) for c in chunks] == [70, 70, 70, 70, 20]
    assert str(chunks[0]["OCCHISCO"].dtype) == "int64[pyarrow]"  # the codebook's types
    assert str(chunks[0]["PERWT"].dtype) == "double[pyarrow]"
    from mixer.data.tables.reading import _numbers_as_text

    chunked = _numbers_as_text(pd.concat(chunks, ignore_index=True), census[kind], "--input")
    pd.testing.assert_frame_equal(chunked, expected, check_dtype=False)
    assert count_rows(census[kind], OPTIONS) == len(expected)


def test_a_codebook_elsewhere_is_named_by_the_role_s_ddi_option(census, tmp_path):
    from mixer.data.tables.reading import read_table

    data = tmp_path / "extract.dat.gz"
    data.write_bytes(open(census["gz"], "rb").read())
    (tmp_path / "codebooks").mkdir()
    xml = tmp_path / "codebooks" / "usa_00001.xml"
    xml.write_bytes((census["folder"] / "usa_00001.xml").read_bytes())
    with pytest.raises(Exception, match=r"extract\.xml is not beside it.*--key-ddi"):
        read_table(str(data), TableOptions(role="key"))
    frame = read_table(str(data), TableOptions(role="input", ddi=str(xml)))
    # as a reading's identity: --ddi counts where it names a codebook other than the one beside
    from mixer.data.tables.reading import canonical_options

    assert canonical_options(str(data), TableOptions(role="input", ddi=str(xml))).ddi == str(xml)
    beside = census["folder"] / "usa_00001.xml"
    assert canonical_options(census["gz"], TableOptions(role="input", ddi=str(beside))).ddi is None
    pd.testing.assert_frame_equal(frame, read_table(census["csv"], OPTIONS), check_dtype=False)


# ------------------------------------------------------------------ training and prediction
def prepare_cmd(dataset, out) -> list:
    return [
        "--dataset",
        dataset,
        "--input-col",
        "OCCSTR",
        "--target-cols",
        "OCCHISCO",
        "--drop-bad-labels",  # a person without an occupation, a blank code
        "--save-path",
        str(out),
        *TINY,
        "--max-steps",
        "2",
        "--batch-size",
        "16",
    ]


def test_finetune_trains_on_an_extract_s_coded_column_as_on_the_same_csv(census, tmp_path, capsys):
    """finetune.py --dataset usa_00001.dat.gz --input-col OCCSTR --target-cols OCCHISCO: the
    codes IPUMS stores as numbers get their leading zeros (HISCO codes are 5 digits), and the
    run's prepared data is that of the same rows as CSV read with --zero-padded-codes."""
    from mixer.cli.entrypoints import finetune_main
    from mixer.data.prepared.files import load_prepared

    runs = {kind: tmp_path / kind for kind in ("gz", "csv")}
    assert finetune_main(prepare_cmd(census["gz"], runs["gz"]) + ["--prepare-only"]) == 0
    said = capsys.readouterr().out
    assert "OCCHISCO: 40 code(s) without their leading zeros read as 5-digit codes" in said
    # the same codes as text: a short one is a bad label unless the flag says zeros were lost
    csv = prepare_cmd(census["csv"], runs["csv"]) + ["--prepare-only", "--zero-padded-codes"]
    assert finetune_main(csv) == 0
    extract, csv = (load_prepared(str(runs[k])) for k in ("gz", "csv"))
    for name in ("train", "val", "key"):
        pd.testing.assert_frame_equal(getattr(extract, name), getattr(csv, name))
    trained = tmp_path / "trained"
    assert finetune_main(prepare_cmd(census["gz"], trained)) == 0
    assert (trained / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


def predict_cmd(run, source, out, *extra) -> list:
    return [
        "--checkpoint",
        run,
        "--input",
        source,
        "--input-col",
        "OCCSTR",
        "--output",
        str(out),
        "--chunk-size",
        "45",
        *map(str, extra),
    ]


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_predictions_of_an_extract_are_those_of_the_same_csv(run, census, tmp_path, suffix):
    """The same codes and probabilities for every row, and the input's columns with the same
    values: a CSV output writes the extract's numbers as numbers (PERWT 336.0, where the CSV
    input's text was 336), a Parquet output keeps them numbers."""
    from mixer.cli.entrypoints import predict_main

    outs = {}
    for kind in ("gz", "csv"):
        (tmp_path / kind).mkdir()
        outs[kind] = tmp_path / kind / f"out.{suffix}"
        assert predict_main(predict_cmd(run, census[kind], outs[kind])) == 0
    if suffix == "csv":
        extract, csv = (
            pd.read_csv(outs[kind], keep_default_na=False, na_values=[""]) for kind in ("gz", "csv")
        )
    else:
        extract, csv = (pd.read_parquet(outs[kind]) for kind in ("gz", "csv"))
        assert pd.api.types.is_numeric_dtype(extract["OCCHISCO"].dtype)
        assert pd.api.types.is_numeric_dtype(extract["PERWT"].dtype)
        csv = csv.assign(
            **{c: pd.to_numeric(csv[c]) for c in ("YEAR", "SERIAL", "PERWT", "OCCHISCO")}
        )
    assert list(extract.columns) == list(csv.columns) and len(extract) == 300
    for column in extract.columns:
        left, right = extract[column], csv[column]
        if pd.api.types.is_numeric_dtype(left.dtype):
            np.testing.assert_array_equal(left.to_numpy(float), right.to_numpy(float), column)
        else:
            assert left.fillna("").tolist() == right.fillna("").tolist(), column


@pytest.fixture(scope="module")
def uninterrupted(run, census, tmp_path_factory) -> dict:
    """predict.py's output of each extract, run through."""
    from mixer.cli.entrypoints import predict_main

    outs = {}
    for kind in ("gz", "dat"):
        outs[kind] = tmp_path_factory.mktemp("whole") / "out.csv"
        assert predict_main(predict_cmd(run, census[kind], outs[kind])) == 0
    return outs


@pytest.mark.parametrize("kind, fault", [("gz", 1), ("gz", 5), ("dat", 3)])
def test_a_killed_prediction_of_an_extract_resumes_to_the_same_bytes(
    run, census, uninterrupted, tmp_path, capsys, kind, fault
):
    """kill -9 after chunk k of 7 (before its journal entry): the run again continues after
    the k chunks done, chunk k redone, and writes the bytes of an uninterrupted run."""
    from mixer.cli.entrypoints import predict_main

    cut = tmp_path / "out.csv"
    environment = env_for_subprocess()
    environment[FAULT] = str(fault)
    killed = run_program(
        "predict.py", *predict_cmd(run, census[kind], cut), check=False, env=environment
    )
    assert killed.returncode == 9, killed.stderr
    assert not cut.exists()
    capsys.readouterr()
    assert predict_main(predict_cmd(run, census[kind], cut)) == 0
    said = capsys.readouterr().out
    assert f"continuing an unfinished run after its {fault} chunk(s) ({45 * fault} rows" in said
    assert cut.read_bytes() == uninterrupted[kind].read_bytes()


# ------------------------------------------------------------------ refusals
def test_a_hierarchical_extract_is_refused_in_one_line(run, census, tmp_path, capsys):
    data = tmp_path / "usa_00003.dat.gz"
    write_ipums_extract(data, layout(30), [(1900, 1, 1.0, "farmer", 61110)], "hierarchical")
    out = tmp_path / "out.csv"
    fails(
        capsys,
        "predict",
        predict_cmd(run, data, out),
        "--input",
        "hierarchical IPUMS extract (record types H, P)",
        "rectangular",
        watch=tmp_path,
    )


def test_an_extract_without_its_codebook_is_refused_naming_the_flag(run, census, tmp_path, capsys):
    data = tmp_path / "usa_00004.dat"
    data.write_bytes(open(census["dat"], "rb").read())
    fails(
        capsys,
        "predict",
        predict_cmd(run, data, tmp_path / "out.csv"),
        "usa_00004.xml is not beside it",
        "--ddi",
        watch=tmp_path,
    )
    fails(
        capsys,
        "finetune",
        prepare_cmd(str(data), tmp_path / "run") + ["--ddi", str(tmp_path / "none.xml")],
        "--ddi",
        "none.xml: no such file",
        watch=tmp_path,
    )
    (tmp_path / "usa_00004.xml").write_text("<codeBook>not a codebook")
    fails(
        capsys,
        "predict",
        predict_cmd(run, data, tmp_path / "out.csv"),
        "cannot read it as an IPUMS DDI codebook",
        watch=tmp_path,
    )


def test_an_extract_is_read_not_written(run, census, tmp_path, capsys):
    fails(
        capsys,
        "predict",
        predict_cmd(run, census["csv"], tmp_path / "out.dat"),
        "--output",
        "read, not written",
        watch=tmp_path,
    )


def test_without_ipumspy_an_extract_is_refused_naming_the_extra(run, census, tmp_path):
    proc = run_without(
        ["ipumspy"],
        "predict.py",
        *predict_cmd(run, census["gz"], tmp_path / "out.csv"),
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "needs the ipumspy package" in lines[0] and "[ipums]'" in lines[0]
    assert os.listdir(tmp_path) == []


def test_an_extract_is_read_as_its_name_says_plain_or_gzip_d(run, census, tmp_path, capsys):
    import bz2
    import gzip

    plain = open(census["dat"], "rb").read()
    for name, body, needle in (
        ("usa_00005.dat", gzip.compress(plain), "gzip'd by its first bytes"),
        ("usa_00006.dat.gz", plain, "not gzip'd"),
        ("usa_00007.dat.bz2", bz2.compress(plain), "read plain or gzip'd"),
        ("USA_00008.DAT", plain, "in lower case"),
    ):
        (tmp_path / name).write_bytes(body)
        fails(
            capsys,
            "predict",
            predict_cmd(run, tmp_path / name, tmp_path / "out.csv"),
            f"--input {tmp_path / name}",
            needle,
            watch=tmp_path,
        )


def test_another_codebook_is_another_input_for_a_prepared_run_and_a_resume(
    run, census, tmp_path, capsys
):
    """The codebook makes the rows: a run directory prepared from an extract is not reused
    with another codebook (same data bytes), nor is a killed prediction continued with one."""
    from mixer.cli.entrypoints import finetune_main

    data = tmp_path / "usa_00009.dat.gz"
    data.write_bytes(open(census["gz"], "rb").read())
    xml = tmp_path / "usa_00009.xml"
    xml.write_bytes((census["folder"] / "usa_00001.xml").read_bytes())
    prepared = prepare_cmd(str(data), tmp_path / "run") + ["--prepare-only", "--no-token-cache"]
    assert finetune_main(prepared) == 0
    assert finetune_main(prepared) == 0  # the same: reused
    assert "reusing prepared data" in capsys.readouterr().out
    relabelled = xml.read_text(encoding="utf-8").replace("General farmer", "Farmer, general")
    xml.write_text(relabelled, encoding="utf-8")
    fails(capsys, "finetune", prepared, "holds data prepared from other input", "--dataset differs")

    out = tmp_path / "out.csv"
    environment = env_for_subprocess()
    environment[FAULT] = "1"
    killed = run_program("predict.py", *predict_cmd(run, data, out), check=False, env=environment)
    assert killed.returncode == 9, killed.stderr
    xml.write_text(relabelled.replace("Clerk", "Clerk, general"), encoding="utf-8")
    fails(capsys, "predict", predict_cmd(run, data, out), "were made with --ddi", str(xml))

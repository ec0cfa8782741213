"""Files as historians and economists keep them: Excel workbooks, Stata files, CSV
with ';' or tabs, in Windows encodings. Codes stay text in every one."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, TINY, env_for_subprocess, run_program, write_xlsx
from mixer.core.config import DataConfig
from mixer.core.errors import UserError
from mixer.data.tables import formats
from mixer.data.prepared.fingerprint import fingerprint
from mixer.data.prepared.prepare import prepare_run_data
from mixer.core.config import TableOptions
from mixer.data.tables.reading import NUMERIC_COLUMNS, first_undecodable, iter_chunks, read_table
from mixer.data.tables.writing import OutputWriter

import openpyxl  # noqa: E402  requirements.txt installs it (the extra mixer[excel])


def xlsx_cells(path) -> list:
    book = openpyxl.load_workbook(path, read_only=True)
    rows = [list(r) for r in book.worksheets[0].iter_rows(values_only=True)]
    book.close()
    return [row + [None] * (len(rows[0]) - len(row)) for row in rows]  # trailing empty cells


# ------------------------------------------------------------------ encodings
def test_a_cp1252_file_is_an_error_naming_the_row_byte_and_both_readings(tmp_path):
    path = tmp_path / "sv.csv"
    path.write_bytes("occ1;hisco_1\nbonde;61110\ndrängen;62120\nskräddare;79100\n".encode("cp1252"))
    with pytest.raises(UserError) as error:
        read_table(str(path))
    message = str(error.value)
    assert "not UTF-8 text: row 2 (line 3), byte 3 of that line (0xE4 at offset 27)" in message
    assert "as cp1252: 'drängen;62120'; as latin-1: 'drängen;62120'" in message
    assert "--encoding cp1252" in message and "\n" not in message
    with pytest.raises(UserError, match="row 2 .line 3."):  # the stream says so before any chunk
        next(iter_chunks(str(path), 1))
    frame = read_table(str(path), options=TableOptions(encoding="cp1252"))
    assert list(frame["occ1"]) == ["bonde", "drängen", "skräddare"]


def test_the_two_readings_differ_where_cp1252_and_latin1_differ(tmp_path):
    path = tmp_path / "quotes.csv"
    path.write_bytes(b"occ1,hisco_1\n\x93smith\x94,83110\n")
    with pytest.raises(UserError) as error:
        read_table(str(path))
    assert "as cp1252: '\u201csmith\u201d,83110'; as latin-1: '\\x93smith\\x94,83110'" in str(
        error.value
    )


def test_rows_are_counted_past_quoted_line_breaks(tmp_path):
    path = tmp_path / "wrapped.csv"
    path.write_bytes(
        'occ1,hisco_1\n"farmer\nand fisher",61110\nsmith,83110\nm\xe9decin,06110\n'.encode(
            "latin-1"
        )
    )
    with pytest.raises(UserError, match=r"row 3 \(line 5\)"):
        read_table(str(path))
    path.write_bytes('occ1,hisco_1\nfarmer,61110\n"a\nm\xe9decin\nb",06110\n'.encode("latin-1"))
    with pytest.raises(UserError, match=r"row 2 \(line 4\), byte 2 "):  # inside a quoted cell
        read_table(str(path))


def test_a_bad_byte_past_a_block_boundary_is_found_at_its_offset(tmp_path):
    """The scan reads 4 MiB blocks; a character split by a block's end is no error."""
    head = b"occ1\n" + "é".encode() * ((1 << 21) + 7)  # the boundary falls inside an 'é'
    path = tmp_path / "big.csv"
    path.write_bytes(head + b"\n\xff\n")
    assert first_undecodable(str(path), "utf-8") == len(head) + 1
    path.write_bytes(head + b"\n")
    assert first_undecodable(str(path), "utf-8") is None


def test_a_utf8_file_read_as_cp1252_is_read_so_and_the_user_told(tmp_path):
    path = tmp_path / "u8.csv"
    path.write_bytes(("occ1;hisco_1\n" + "bonde;61110\n" * 3 + "drängen;62120\n").encode("utf-8"))
    said = []
    frame = read_table(str(path), options=TableOptions(encoding="cp1252"), log=said.append)
    assert frame["occ1"].iloc[-1] == "drÃ¤ngen"  # the encoding given, never another
    assert said[1] == (
        f"--dataset {path}: note: the file is also valid UTF-8; its first line past ASCII "
        "reads as cp1252 'drÃ¤ngen;62120' and as UTF-8 'drängen;62120': if the second is "
        "right, leave --encoding out"
    )
    cp1252 = tmp_path / "cp.csv"
    cp1252.write_bytes("occ1;hisco_1\ndrängen;62120\n".encode("cp1252"))
    said = []
    read_table(str(cp1252), options=TableOptions(encoding="cp1252"), log=said.append)
    assert len(said) == 1  # no note where the encoding is the file's


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffocc1;hisco_1\ndrängen;62120\n".encode("utf-8"))
    assert list(read_table(str(path)).columns) == ["occ1", "hisco_1"]


# ------------------------------------------------------------------ separators
@pytest.mark.parametrize("sep,shown", [(";", "';'"), ("\t", "tab"), ("|", "'|'"), (",", "','")])
def test_the_separator_is_taken_from_the_header_and_said(tmp_path, sep, shown):
    path = tmp_path / "t.csv"
    path.write_text(f'occ1{sep}hisco_1{sep}note\nfarmer{sep}61110{sep}"a, b; c"\n')
    said = []
    frame = read_table(str(path), log=said.append)
    assert list(frame.columns) == ["occ1", "hisco_1", "note"]
    assert frame.loc[0, "note"] == "a, b; c"
    assert said == [
        f"--dataset {path}: CSV, separator {shown} (found in the header line; --sep sets "
        "it), encoding utf-8"
    ]


def test_a_header_read_as_one_column_holding_a_separator_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("occ1;lang\nfarmer;en\n")
    with pytest.raises(
        UserError,
        match=r"with --sep ',' the header is one column 'occ1;lang', which "
        r"holds ';'; pass --sep ';'",
    ):
        read_table(str(path), options=TableOptions(sep=","))
    quoted = tmp_path / "quoted.csv"  # a quoted name may hold anything
    quoted.write_text('"occ1;lang"\nfarmer\n')
    assert list(read_table(str(quoted)).columns) == ["occ1;lang"]
    tied = tmp_path / "tied.csv"
    tied.write_text("occ1;lang,x\n1;2,3\n")
    with pytest.raises(UserError, match="equally often; name the separator with --sep"):
        read_table(str(tied))


def test_a_sep_line_above_the_header_names_the_separator(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("sep=;\r\nocc1;hisco_1\r\nbonde;61110\r\ndrängen;62120\r\n".encode("cp1252"))
    with pytest.raises(UserError, match=r"row 2 \(line 4\)"):  # the sep= line is no row
        read_table(str(path))
    said = []
    frame = read_table(str(path), options=TableOptions(encoding="cp1252"), log=said.append)
    assert frame.values.tolist() == [["bonde", "61110"], ["drängen", "62120"]]
    assert "separator ';' (the file's 'sep=' line; --sep sets it)" in said[0]
    chunks = list(iter_chunks(str(path), 1, options=TableOptions(encoding="cp1252")))
    assert [c.values.tolist() for c in chunks] == [[["bonde", "61110"]], [["drängen", "62120"]]]


def test_every_hint_names_the_flag_of_the_file_it_is_about(tmp_path):
    """A --key file's encoding and separator are --key-encoding and --key-sep: every
    message about that file names them, never the main data's --encoding (issue 27, item 4)."""
    path = tmp_path / "key.csv"
    path.write_bytes("code;description\n61110;bonde\n62120;drängen\n".encode("cp1252"))
    key = TableOptions(role="key")
    with pytest.raises(UserError) as error:
        read_table(str(path), key)
    assert str(error.value).startswith(f"--key {path}: not UTF-8 text: row 2 (line 3)")
    assert "(e.g. --key-encoding cp1252)" in str(error.value) and "--encoding" not in str(
        error.value
    ).replace("--key-encoding", "")
    with pytest.raises(
        UserError, match=r"with --key-sep ',' the header is one column .*pass --key-sep ';'"
    ):
        read_table(str(path), TableOptions(encoding="cp1252", sep=",", role="key"))
    said = []
    read_table(str(path), TableOptions(encoding="cp1252", role="key"), log=said.append)
    assert said == [
        f"--key {path}: CSV, separator ';' (found in the header line; --key-sep sets it), "
        "encoding cp1252"
    ]


def test_a_typed_separator_that_the_file_names_anyway_is_the_same_run(tmp_path):
    """The fingerprint records the reading a file got, not which flags were typed: --sep ','
    on a file whose header uses ',' resumes a run prepared without it, and the other way
    round; a separator that reads the file otherwise is another run (issue 27, item 9)."""
    path = tmp_path / "data.csv"
    path.write_text("occ1,hisco_1\n" + "farmer,61110\nfisher,64100\n" * 5)
    run = str(tmp_path / "run")
    plain = DataConfig(dataset=str(path), target_cols=["hisco_1"], share_val=0.2)
    prepare_run_data(plain, 0, run, log=lambda _: None)
    for typed in (
        DataConfig(dataset=str(path), target_cols=["hisco_1"], share_val=0.2, sep=","),
        plain,
    ):
        said = []
        prepare_run_data(typed, 0, run, log=said.append)
        assert said == [f"reusing prepared data in {run}"]
    assert (
        fingerprint(plain, 0)["digest"]
        == fingerprint(
            DataConfig(
                dataset=str(path), target_cols=["hisco_1"], share_val=0.2, sep=",", header_row=1
            ),
            0,
        )["digest"]
    )
    other = tmp_path / "other"
    prepare_run_data(
        DataConfig(dataset=str(path), target_cols=["hisco_1"], share_val=0.2, sep=","),
        0,
        str(other),
        log=lambda _: None,
    )
    assert "sep" not in json.load(open(other / "prepared.json"))["settings"]
    semi = tmp_path / "semi.csv"
    semi.write_text("occ1;hisco_1;x,y\n" + "farmer;61110;a,b\nfisher;64100;c,d\n" * 5)
    prepare_run_data(
        DataConfig(dataset=str(semi), target_cols=["hisco_1"], share_val=0.2),
        0,
        str(tmp_path / "semi"),
        log=lambda _: None,
    )
    with pytest.raises(UserError, match="--sep was None, now ','"):  # ',' reads this file otherwise
        prepare_run_data(
            DataConfig(
                dataset=str(semi),
                target_cols=[
                    "hisco_1",
                ],
                share_val=0.2,
                sep=",",
            ),
            0,
            str(tmp_path / "semi"),
            log=lambda _: None,
        )


def test_an_encoding_that_reads_the_file_as_utf8_does_is_the_same_run(tmp_path):
    """An ASCII file resumed with --encoding cp1252, or a UTF-8 one with utf-8-sig, reads as
    it was read, so it is the same run; an encoding that reads the file otherwise is not."""
    path = tmp_path / "data.csv"
    path.write_text("occ1,hisco_1\n" + "farmer,61110\nfisher,64100\n" * 5)
    run = str(tmp_path / "run")
    prepare_run_data(
        DataConfig(dataset=str(path), target_cols=["hisco_1"], share_val=0.2),
        0,
        run,
        log=lambda _: None,
    )
    for encoding in ("cp1252", "utf-8-sig", "latin-1"):
        said = []
        prepare_run_data(
            DataConfig(
                dataset=str(path), target_cols=["hisco_1"], share_val=0.2, encoding=encoding
            ),
            0,
            run,
            log=said.append,
        )
        assert said == [f"reusing prepared data in {run}"], encoding
    path.write_text("occ1,hisco_1\n" + "drängen,61110\nfisher,64100\n" * 5)
    prepare_run_data(
        DataConfig(dataset=str(path), target_cols=["hisco_1"], share_val=0.2),
        0,
        str(tmp_path / "u8"),
        log=lambda _: None,
    )
    with pytest.raises(UserError, match="--encoding was 'utf-8', now 'iso8859-1'"):
        prepare_run_data(
            DataConfig(
                dataset=str(path), target_cols=["hisco_1"], share_val=0.2, encoding="iso8859-1"
            ),
            0,
            str(tmp_path / "u8"),
            log=lambda _: None,
        )


def test_a_run_prepared_with_a_typed_separator_before_it_was_canonical_resumes(tmp_path):
    """Runs whose fingerprint recorded the flags as typed (before) resume unchanged."""
    path = tmp_path / "data.csv"
    path.write_text("occ1,hisco_1\n" + "farmer,61110\nfisher,64100\n" * 5)
    cfg = DataConfig(dataset=str(path), target_cols=["hisco_1"], share_val=0.2, sep=",")
    run = tmp_path / "run"
    prepare_run_data(cfg, 0, str(run), log=lambda _: None)
    stamp = json.load(open(run / "prepared.json"))
    stamp.update(
        {k: v for k, v in fingerprint(cfg, 0, typed=True).items() if k in ("settings", "digest")}
    )
    assert stamp["settings"]["sep"] == ","
    (run / "prepared.json").write_text(json.dumps(stamp))
    said = []
    prepare_run_data(cfg, 0, str(run), log=said.append)
    assert said == [f"reusing prepared data in {run}"]


def test_a_title_row_above_the_header_is_named_and_skipped_with_header_row(tmp_path):
    """A workbook or CSV file with a title above the column names: the error says which row
    was taken as the header and names the flag that takes another; --header-row N reads
    it, and the run says which row it took (issue 27, item 8)."""
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "1850"
    sheet["A1"] = "Occupations, parish of X, 1850"
    sheet.merge_cells("A1:C1")
    sheet.append([])
    sheet.append(["occ1", "hisco_1", "note"])
    sheet.append(["farmer", "61110", "x"])
    sheet.append(["fisher", 64100, ""])
    path = str(tmp_path / "titled.xlsx")
    book.save(path)
    with pytest.raises(UserError) as error:
        read_table(path)
    assert str(error.value) == (
        f"--dataset {path}: sheet '1850': row 3 has a value in column B, which has no name in the header "
        "row (row 1: 'Occupations, parish of X, 1850'); if the column names are in another row (a title "
        "above them), pass --header-row with its number"
    )
    said = []
    frame = read_table(path, TableOptions(header_row=3, role="extra_train"), log=said.append)
    assert frame.values.tolist() == [["farmer", "61110", "x"], ["fisher", "64100", ""]]
    assert said == [
        f"--extra-train {path}: Excel, sheet '1850', header row 3 (--extra-train-header-row "
        "chooses another)"
    ]
    with pytest.raises(UserError, match=r"row 2 \(--header-row\) is empty"):
        read_table(path, TableOptions(header_row=2))
    csv_path = tmp_path / "titled.csv"
    csv_path.write_bytes(
        "Occupations of 1850\r\n\r\nocc1;hisco_1\r\nbonde;61110\r\ndrängen;62120\r\n".encode(
            "cp1252"
        )
    )
    said = []
    frame = read_table(
        str(csv_path), TableOptions(encoding="cp1252", header_row=3), log=said.append
    )
    assert frame.values.tolist() == [["bonde", "61110"], ["drängen", "62120"]]
    assert said[0].endswith("encoding cp1252, header row 3")
    with pytest.raises(
        UserError, match=r"not UTF-8 text: row 2 \(line 5\)"
    ):  # rows counted under it
        read_table(str(csv_path), TableOptions(header_row=3))
    chunks = list(iter_chunks(str(csv_path), 1, TableOptions(encoding="cp1252", header_row=3)))
    assert [c.values.tolist() for c in chunks] == [[["bonde", "61110"]], [["drängen", "62120"]]]


def both_readers_refuse(path, message: str, chunk_size: int = 1) -> None:
    """The whole-file reader (finetune.py, evaluate.py) and the streaming one (predict.py)
    refuse a file with the same one-line message."""
    for read in (read_table, lambda p: list(iter_chunks(p, chunk_size, TableOptions()))):
        with pytest.raises(UserError) as error:
            read(str(path))
        assert str(error.value) == message


def test_a_csv_title_row_or_blank_first_line_is_named_or_skipped(tmp_path):
    """Review of issue 27, item 4: a CSV title row gives an error naming the row taken as
    the header and --header-row (whole-file and streaming reader alike); blank lines above
    the header are skipped, as a workbook's empty rows are, never 'the file is empty'."""
    data = "occ1,hisco_1\nfarmer,61110\nsmith,83110\n"
    titled = tmp_path / "t.csv"
    titled.write_text("Occupations parish of X 1850\n" + data)
    expected = (
        f"--dataset {titled}: row 1 has 2 cell(s), but the header (line 1: 'Occupations parish of X "
        "1850') names 1 column(s): 'occ1,hisco_1'; if the column names are in another row (a title "
        "above them), pass --header-row with its number; else quote a cell that holds ',' "
        '("smith, master") (rows count from 1 under the header)'
    )
    both_readers_refuse(titled, expected)
    assert read_table(str(titled), TableOptions(header_row=2)).values.tolist() == [
        ["farmer", "61110"],
        ["smith", "83110"],
    ]
    blank = tmp_path / "b.csv"
    blank.write_text("\n ;\n" + data)
    assert read_table(str(blank)).values.tolist() == [["farmer", "61110"], ["smith", "83110"]]
    assert [len(c) for c in iter_chunks(str(blank), 1)] == [1, 1]
    assert (
        fingerprint(DataConfig(dataset=str(blank), target_cols=["hisco_1"]), 0)["digest"]
        == fingerprint(DataConfig(dataset=str(blank), target_cols=["hisco_1"], header_row=3), 0)[
            "digest"
        ]
    )
    blank.write_bytes(b"\n\nocc1,hisco_1\nfarmer,61110\n\nm\xe9decin,06110\n")
    with pytest.raises(
        UserError, match=r"not UTF-8 text: row 2 \(line 6\)"
    ):  # empty lines are no rows
        read_table(str(blank))
    (tmp_path / "empty.csv").write_text("\n\n")
    with pytest.raises(UserError, match="the file is empty"):
        read_table(str(tmp_path / "empty.csv"))


@pytest.mark.parametrize("sep", [";", "\t"], ids=["semicolon", "tab"])
def test_a_title_without_separators_above_a_semicolon_or_tab_table_names_header_row(tmp_path, sep):
    """Review of issue 34: a title line above a ';' or tab header read as the file's one
    column ('no column occ1; the file has: Occupations parish of X 1850'); the lines below
    using one separator alike show it is a title, and the error names --header-row."""
    titled = tmp_path / "t.csv"
    titled.write_text(
        f"Occupations parish of X 1850\n\nocc1{sep}hisco_1\nfarmer{sep}61110\nsmith{sep}83110\n"
    )
    shown = "tab" if sep == "\t" else repr(sep)
    both_readers_refuse(
        titled,
        f"--dataset {titled}: line 1 ('Occupations parish of X 1850') holds no separator, "
        f"but the lines below it use {shown}: if the column names are in line 3 (a title "
        "above them), pass --header-row 3; if the file is one column, pass --sep ','",
    )
    assert read_table(str(titled), TableOptions(header_row=3)).values.tolist() == [
        ["farmer", "61110"],
        ["smith", "83110"],
    ]
    with pytest.raises(UserError, match="pass --extra-train-header-row 3;"):
        read_table(str(titled), TableOptions(role="extra_train"))
    # one column whose cells hold the separator unevenly is one column, as before
    one = tmp_path / "one.csv"
    one.write_text(f"occ1\nfarmer{sep} fisher\nsmith\n")
    assert read_table(str(one)).values.tolist() == [[f"farmer{sep} fisher"], ["smith"]]
    assert read_table(str(titled), TableOptions(sep=",")).columns.tolist() == [
        "Occupations parish of X 1850"
    ]


def test_a_ragged_row_is_named_by_its_number_in_every_reader(tmp_path):
    """Review of issue 27, item 14: a row with more cells than the header gives its row
    number whichever reader met it (pyarrow's threaded reader gives none)."""
    path = tmp_path / "r.csv"
    path.write_text("occ1,hisco_1\n" + "farmer,61110\n" * 5000 + "smith, blacksmith,83110\n")
    both_readers_refuse(
        path,
        f"--dataset {path}: row 5001 has 3 cell(s), but the header (line 1: 'occ1,hisco_1') "
        "names 2 column(s): 'smith, blacksmith,83110'; quote a cell that holds ',' "
        '("smith, master") (rows count from 1 under the header)',
        chunk_size=1000,
    )
    path.write_text("occ1,hisco_1\nfarmer,61110\nsmith\n")
    with pytest.raises(UserError, match="row 2 has 1 cell.s., .* give the row its missing cells"):
        read_table(str(path))


def test_a_stray_quote_or_a_huge_line_is_named_by_its_line(tmp_path):
    """A quote opened in a cell (a ditto mark, an inch sign) and closed only far below joins
    more than the reader's 1 MiB block into one cell: the message names the line that opened
    it, and what to do, in a plain and a gzip'd file alike; a line of that length too (it
    was pyarrow's 'straddling object straddles two block boundaries')."""
    import gzip

    lines = ["occ1,hisco_1"] + [f"farmer {i},61110" for i in range(200_000)]
    lines[1] = '"a carter\nof the parish",98620'  # a quoted cell over two lines, closed
    lines[50] = '"farmer, and smith,61110'
    lines[-1] = 'smith" and farmer,61110'
    text = "\n".join(lines) + "\n"
    plain, packed = tmp_path / "q.csv", tmp_path / "q.csv.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    for path in (plain, packed):
        both_readers_refuse(
            path,
            f"--dataset {path}: line 52 ('\"farmer, and smith,61110') opens a quote (\") that "
            "no line near it closes, so the lines below it read as one cell of more than 1 MiB, "
            'and a cell that long is not read: double a quote inside a quoted cell ("5 ft 8"" '
            'tall") or remove the stray one',
            chunk_size=1000,
        )
    plain.write_text("occ1,hisco_1\nsmith,83110\n" + "x" * (5 << 20) + ",61110\n")
    both_readers_refuse(
        plain,
        f"--dataset {plain}: line 3 is 5,242,887 bytes long, more than 1 MiB, and a cell "
        "that long is not read: shorten that line",
        chunk_size=1000,
    )


def test_a_ditto_mark_that_joins_rows_into_a_cell_is_named_by_its_row(tmp_path, capsys):
    """A ditto mark written as a quote ('"', as census transcriptions write one) opens a
    quoted cell that the next one closes: the rows between were read as one cell, and the
    file as fewer rows than it has, without an error. Now one line names the row, in both
    readers; a cell with line breaks of its own is read."""
    lines = ["occ1,hisco_1"] + [f"farmer {i},61110" for i in range(400)]
    lines[50] = lines[51] = '",61110'  # two dittos one under the other: two rows read as one
    path = tmp_path / "ditto.csv"
    path.write_text("\n".join(lines) + "\n")
    both_readers_refuse(
        path,
        f"--dataset {path}: row 50's 'occ1' cell runs over 2 lines of the file (',61110\\n'): a "
        'quote (") at its start (a ditto mark?) closes only at a later one, which joins the '
        "lines between into one cell and leaves fewer rows than the file has; write a ditto "
        'mark as text (do), double a quote inside a quoted cell (""), or remove the stray one '
        "(rows count from 1 under the header)",
        chunk_size=100,
    )
    lines[51], lines[300] = "farmer 50,61110", '",61110'  # far apart: the rows between
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="row 50's 'occ1' cell runs over 251 lines of the file"):
        list(iter_chunks(str(path), 100, TableOptions()))
    path.write_text(
        'occ1,hisco_1\n"labourer\nand part-time fisher",61110\n"smith, master\nof the guild",'
        "83110\nfarmer,61110\n"
    )
    assert read_table(str(path))["occ1"].tolist()[:2] == [
        "labourer\nand part-time fisher",
        "smith, master\nof the guild",
    ]


def test_a_header_row_past_the_last_row_is_named_so(tmp_path):
    """Review of issue 27, item 5: --header-row past a sheet's (or a CSV file's) last row
    says so and names the flag, never 'the sheet is empty'."""
    path = write_xlsx(
        tmp_path / "s.xlsx", [["occ1", "hisco_1"]] + [["farmer", "61110"]] * 3, sheet="Sheet"
    )
    with pytest.raises(UserError) as error:
        read_table(path, TableOptions(header_row=900))
    assert str(error.value) == (
        f"--dataset {path}: sheet 'Sheet': row 900 (--header-row) is past its last row "
        "(4); name the row that holds the column names"
    )
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("occ1,hisco_1\nfarmer,61110\n")
    with pytest.raises(
        UserError, match=r"row 9000 \(--key-header-row\) is past the file's last line \(2\)"
    ):
        read_table(str(csv_path), TableOptions(header_row=9000, role="key"))


def test_trailing_empty_columns_of_a_csv_export_are_dropped_as_a_workbooks_are(tmp_path):
    """Review of issue 27, item 6: 'occ1,hisco_1,,' (a spreadsheet's export of its used
    range) reads as its two columns, as the Excel reader drops trailing empty header cells;
    a value under a column without a name is an error naming its row and column."""
    path = tmp_path / "e.csv"
    path.write_text("occ1,hisco_1,,\nfarmer,61110,,\nsmith,83110,,\n")
    for read in (read_table, lambda p: pd.concat(iter_chunks(p, 1, TableOptions()))):
        assert read(str(path)).values.tolist() == [["farmer", "61110"], ["smith", "83110"]]
    path.write_text("occ1,hisco_1,,\nfarmer,61110,,\nsmith,83110,, x\n")
    both_readers_refuse(
        path,
        f"--dataset {path}: row 2 has a value in column 4 (' x'), which has no name in "
        "the header (line 1: 'occ1,hisco_1,,'); name the column, or pass --header-row "
        "with the number of the row that holds the column names",
    )
    path.write_text(",occ1,,hisco_1,\n0,farmer,,61110,\n")  # inside the header: named by position
    with pytest.raises(UserError, match=r"columns 1, 3 have no name in the header; name them"):
        read_table(str(path))
    path.write_text(",occ1,hisco_1,\n0,farmer,61110,\n")  # pandas' index, written without a name
    assert list(read_table(str(path)).columns) == ["", "occ1", "hisco_1"]


def test_finetune_reads_a_semicolon_cp1252_export_and_says_how(tmp_path):
    frame = pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, nrows=40)
    frame.loc[0, "occ1"] = "drängen"
    path = tmp_path / "export.csv"
    path.write_bytes(frame.to_csv(index=False, sep=";").encode("cp1252"))
    run = tmp_path / "run"
    proc = run_program(
        "finetune.py",
        "--dataset",
        path,
        "--target-cols",
        "hisco_1",
        "--save-path",
        run,
        "--encoding",
        "windows-1252",
        "--allow-codes-shorter-than-block-size",
        "--prepare-only",
    )
    assert "separator ';' (found in the header line" in proc.stdout
    assert "encoding cp1252" in proc.stdout
    prepared = pd.concat(
        [pd.read_parquet(run / "data_train.parquet"), pd.read_parquet(run / "data_val.parquet")]
    )
    assert "drängen" in set(prepared["text"])
    args = (run / "args.yaml").read_text()
    assert "encoding: cp1252" in args
    failed = run_program(
        "finetune.py",
        "--dataset",
        path,
        "--target-cols",
        "hisco_1",
        "--save-path",
        tmp_path / "run2",
        "--prepare-only",
        check=False,
    )
    assert (
        failed.returncode == 2
        and "row 1 (line 2)" in failed.stderr
        and "as cp1252: 'drängen;" in failed.stderr
    )


@pytest.mark.parametrize(
    "parser,required",
    [
        ("finetune_parser", ["--dataset", "x", "--target-cols", "a", "--save-path", "r"]),
        ("train_mixer_parser", ["--train-data", "x", "--val-data", "y", "--save-dir", "r"]),
        ("predict_parser", ["--checkpoint", "c", "--input", "x"]),
        ("evaluate_parser", ["--predictions", "x", "--truth-cols", "a"]),
    ],
)
def test_every_program_that_reads_a_table_has_the_reading_flags(parser, required):
    from mixer.cli import entrypoints

    args = getattr(entrypoints, parser)().parse_args(
        required + ["--encoding", "latin1", "--sep", ";", "--sheet", "1850"]
    )
    assert (args.encoding, args.sep, args.sheet) == ("iso8859-1", ";", "1850")


def test_encoding_and_separator_flags_are_checked(tmp_path):
    from mixer.cli.entrypoints import finetune_parser

    with pytest.raises(SystemExit):
        finetune_parser().parse_args(
            ["--dataset", "x", "--target-cols", "a", "--save-path", "r", "--encoding", "klingon"]
        )
    args = finetune_parser().parse_args(
        [
            "--dataset",
            "x",
            "--target-cols",
            "a",
            "--save-path",
            "r",
            "--sep",
            "tab",
            "--encoding",
            "UTF8",
        ]
    )
    assert (args.sep, args.encoding) == ("\t", "utf-8")


# ------------------------------------------------------------------ Excel in
def test_excel_cells_read_as_codes(tmp_path):
    path = write_xlsx(
        tmp_path / "t.xlsx",
        [
            ["occ1", "hisco_1", "hisco_2", "year", "when"],
            ["farmer", "01110", 61110, 1850, dt.datetime(1850, 3, 1)],
            ["fisher", "64100", 64100.0, None, None],
            [None, None, None, None, None],  # an empty row is no row
            ["smith", "83110", 1110, 1851.5, None],
        ],
        before="notes",
        formats_by_cell={(5, 3): "00000"},
    )
    said = []
    frame = read_table(path, options=TableOptions(sheet="data"), log=said.append)
    assert frame.values.tolist() == [
        ["farmer", "01110", "61110", "1850", "1850-03-01"],
        ["fisher", "64100", "64100", "", ""],
        ["smith", "83110", "01110", "1851.5", ""],
    ]
    assert frame.attrs[NUMERIC_COLUMNS] == ["hisco_2", "year"]  # fractions there are bad codes
    assert said == [f"--dataset {path}: Excel, sheet 'data' of 2 (--sheet chooses another)"]
    with pytest.raises(
        UserError, match=r"no sheet 'Data' \(--sheet\); the workbook has: 'notes', 'data'"
    ):
        read_table(path, options=TableOptions(sheet="Data"))
    with pytest.raises(UserError, match=r"sheet 'notes' is empty.*--sheet chooses another: 'data'"):
        read_table(path)
    chunks = list(iter_chunks(path, 2, options=TableOptions(sheet="data")))
    assert [len(c) for c in chunks] == [2, 1]
    assert list(pd.concat(chunks)["hisco_2"]) == ["61110", "64100", "01110"]


def test_a_bad_row_of_a_workbook_is_also_named_by_its_sheet_row(tmp_path):
    """Rows count from 1 under the header in every format (empty rows are no rows); in a
    workbook with a title above its header a bad row is also named as Excel numbers it."""
    from mixer.data.prepared.prepare import prepare

    rows = (
        [["Occupations, 1850"], [], ["occ1", "hisco_1"]]
        + [["farmer", "61110"]] * 6
        + [["smith", "8311"], [], ["", "83110"]]
    )
    path = write_xlsx(tmp_path / "t.xlsx", rows)
    with pytest.raises(UserError) as error:
        prepare(
            DataConfig(dataset=path, header_row=3, target_cols=["hisco_1"]), 0, log=lambda _: None
        )
    assert "empty text in 'occ1' (rows 8 (sheet row 12))" in str(error.value)
    assert "(row 7 (sheet row 10) hisco_1='8311'" in str(error.value)


def test_a_broken_workbook_and_an_old_xls_are_one_line_errors(tmp_path):
    broken = tmp_path / "broken.xlsx"
    broken.write_text("occ1,hisco_1\n")
    with pytest.raises(UserError, match="cannot read it as an Excel workbook"):
        read_table(str(broken))
    old = tmp_path / "old.xls"
    old.write_bytes(b"\xd0\xcf\x11\xe0")
    with pytest.raises(UserError, match=r"\.xls is not read; save the sheet as \.xlsx"):
        read_table(str(old))


# ------------------------------------------------------------------ Stata in
def test_stata_numbers_read_as_codes_and_chunks_keep_their_types(tmp_path):
    path = str(tmp_path / "t.dta")
    pd.DataFrame(
        {
            "occ1": ["farmer", "fisher", "smith", "miner"],
            "hisco_1": ["01110", "64100", "83110", "71110"],
            "hisco_2": [61110.0, np.nan, np.nan, 64100.0],
            "year": pd.array([1850, 1851, None, 1853], dtype="Int32"),
        }
    ).to_stata(path, write_index=False)
    frame = read_table(path)
    assert frame.values.tolist() == [
        ["farmer", "01110", "61110", "1850"],
        ["fisher", "64100", "", "1851"],
        ["smith", "83110", "", ""],
        ["miner", "71110", "64100", "1853"],
    ]
    assert set(frame.attrs[NUMERIC_COLUMNS]) == {"hisco_2", "year"}
    chunks = list(iter_chunks(path, 2))
    assert [str(c["year"].dtype) for c in chunks] == ["int64[pyarrow]"] * 2  # a blank is no float
    assert chunks[1]["year"].isna().tolist() == [True, False]


def test_parquet_is_read_alike_by_every_program(tmp_path):
    """Review of issue 27, items 9 and 13: a named pandas index is a column for the whole-file
    reader (finetune.py, evaluate.py) as for the streaming one (predict.py), and an int64
    column with nulls in a file without pandas metadata (pyarrow, polars, R) keeps its
    digits (as float64 12345678901234567 came back as ...568)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    indexed = tmp_path / "ix.parquet"
    pd.DataFrame({"parish": ["a", "b"], "occ1": ["farmer", "smith"]}).set_index(
        "parish"
    ).to_parquet(indexed)
    bare = tmp_path / "bare.parquet"
    pq.write_table(
        pa.table(
            {"id": pa.array([12345678901234567, None], pa.int64()), "occ1": ["farmer", "smith"]}
        ),
        bare,
    )
    for path, expected in (
        (indexed, [["a", "farmer"], ["b", "smith"]]),
        (bare, [["12345678901234567", "farmer"], ["", "smith"]]),
    ):
        whole = read_table(str(path))
        streamed = pd.concat(iter_chunks(str(path), 1, TableOptions()), ignore_index=True)
        assert whole.values.tolist() == expected
        assert list(streamed.columns) == list(whole.columns)
        assert [
            [str(v) if pd.notna(v) else "" for v in row] for row in streamed.values.tolist()
        ] == expected


def test_one_value_is_one_text_in_every_format(tmp_path):
    """Review of issue 27, item 12: the model's text of a date, a boolean or a float does
    not depend on the format it was read from (a run trained on Parquet and predicting
    from Excel rebuilds its input exactly): dates ISO without a midnight time, booleans
    TRUE/FALSE, floats by their shortest repr at their own precision (Stata's float 1.1 is
    '1.1'); the streaming reader (predict.py) gives what the whole-file reader gives."""
    from mixer.data.tables.reading import as_text

    when = [dt.datetime(1850, 3, 1), dt.datetime(1850, 3, 1, 12, 30)]
    frame = pd.DataFrame(
        {
            "occ1": ["farmer", "smith"],
            "when": when,
            "flag": [True, False],
            "x": np.array([1.1, 2.5], dtype=np.float32),
        }
    )
    frame.to_parquet(tmp_path / "v.parquet")
    frame.drop(columns="flag").to_stata(
        tmp_path / "v.dta", write_index=False, version=118, convert_dates={"when": "tc"}
    )
    write_xlsx(
        tmp_path / "v.xlsx",
        [list(frame.columns)] + [["farmer", when[0], True, 1.1], ["smith", when[1], False, 2.5]],
    )
    expected = {
        "occ1": ["farmer", "smith"],
        "when": ["1850-03-01", "1850-03-01 12:30:00"],
        "flag": ["TRUE", "FALSE"],
        "x": ["1.1", "2.5"],
    }
    for name in ("v.parquet", "v.dta", "v.xlsx"):
        path = str(tmp_path / name)
        whole = read_table(path)
        streamed = pd.concat(iter_chunks(path, 1, TableOptions()), ignore_index=True)
        for column in whole.columns:
            assert whole[column].tolist() == expected[column], (name, column)
            assert as_text(streamed[column]).tolist() == expected[column], (name, column)
    pd.DataFrame({"when": pd.to_datetime(["1850-03-01"]), "n": [1]}).to_stata(
        tmp_path / "td.dta", write_index=False, convert_dates={"when": "td"}
    )
    assert read_table(str(tmp_path / "td.dta"))["when"].tolist() == ["1850-03-01"]


def test_whole_numbers_past_int64_are_written_out_in_full():
    from mixer.data.tables.reading import as_text

    assert as_text(pd.Series([1e20, 64100.0, np.nan, -3.0])).tolist() == [
        "100000000000000000000",
        "64100",
        "",
        "-3",
    ]


# ------------------------------------------------------------------ writing
def test_a_stata_output_refuses_a_nul_character_it_would_cut_the_text_at(tmp_path):
    """A Stata text ends at a NUL: 'farm\\x00er' read back as 'farm', silently, in a str# or
    a strL. The writer refuses it in one line naming the row and column (a job's pass over
    its input finds it before any chunk: predict_job.check_rows), and writes nothing."""
    from mixer.core.errors import UserError

    for text in ("farm\x00er", "labourer " * 300 + "\x00"):  # a str#, a strL
        path = tmp_path / "out.dta"
        writer = OutputWriter(str(path))
        writer.write(pd.DataFrame({"occ1": ["smith", "miner"], "code_1": ["1", "2"]}))
        with pytest.raises(UserError, match="row 4 column 'occ1' holds a NUL character a Stata"):
            writer.write(pd.DataFrame({"occ1": ["baker", text], "code_1": ["3", "4"]}))
        writer.abort()
        assert not path.exists()


def test_stata_output_names_strls_and_chunks(tmp_path, capsys):
    long_text = "labourer " * 300  # 2,700 bytes: past str2045, a strL
    path = tmp_path / "out.dta"
    writer = OutputWriter(str(path), log=print)
    frame = pd.DataFrame(
        {
            "occupation title (as written)": ["drängen", long_text, ""],
            "code_1": ["01110", "61110", ""],
            "prob_1": [0.5, np.nan, 1.0],
            "1850": ["a", "b", "c"],
            "x" * 40: ["", "", ""],
            "int": [1, 2, 3],
            "in chunk": pd.array([True, False, None], dtype="boolean"),
        }
    )
    writer.write(frame)
    writer.write(frame.iloc[:2])
    writer.commit()
    back = pd.read_stata(path)
    assert list(back.columns) == [
        "occupation_title__as_written_",
        "code_1",
        "prob_1",
        "_1850",
        "x" * 32,
        "_int",
        "in_chunk",
    ]
    assert back["code_1"].tolist() == ["01110", "61110", "", "01110", "61110"]
    assert back["occupation_title__as_written_"].tolist() == [
        "drängen",
        long_text,
        "",
        "drängen",
        long_text,
    ]
    assert back["prob_1"].isna().tolist() == [False, True, False, False, True]
    assert back["in_chunk"].tolist()[:2] == [1.0, 0.0]
    with pd.io.stata.StataReader(path) as reader:
        labels = reader.variable_labels()
    assert labels["occupation_title__as_written_"] == "occupation title (as written)"
    assert labels["code_1"] == ""
    assert (
        "columns written under other names: 'occupation title (as written)' -> "
        "occupation_title__as_written_"
    ) in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["out.dta"]  # no temporary file left


def test_output_names_come_after_each_formats_own_renaming():
    """One naming step for every output (issue 27, item 2): the format's renaming first,
    then the code_1_input rule, so no input column takes a prediction's place in the file."""
    from mixer.data.tables.writing import output_names

    predicted = ["code_1", "prob_1", "code_2", "prob_2"]
    inputs = ["occ1", "code 1", "prob 2", "a b", "a_b", "x" * 40, "x" * 40 + "y"]
    assert output_names("stata", inputs, predicted) == [
        "occ1",
        "code_1_input",
        "prob_2_input",
        "a_b",
        "a_b_2",
        "x" * 32,
        "x" * 30 + "_2",
        *predicted,
    ]
    assert output_names("csv", inputs, predicted)[:3] == [
        "occ1",
        "code 1",
        "prob 2",
    ]  # CSV keeps them
    assert output_names("excel", [" code_2", "note", "note "], predicted)[:3] == [
        "code_2_input",
        "note",
        "note_2",
    ]  # a worksheet's header comes back stripped
    # several heads: all outputs prefixed, so a file's own code_1 stays (evaluate.py's truth)
    assert output_names("csv", ["code_1", "flat_code_1"], ["flat_code_1", "seq2seq_code_1"])[
        :2
    ] == ["code_1", "flat_code_1_input"]
    assert output_names("stata", [], ["1,1,0", "1.1.0"]) == [
        "_1_1_0",
        "_1_1_0_2",
    ]  # a matrix's codes


def test_excel_output_keeps_text_as_text(tmp_path):
    path = tmp_path / "out.xlsx"
    writer = OutputWriter(str(path))
    writer.write(
        pd.DataFrame(
            {"occ1": ["=1+1", "farmer"], "code_1": ["01110", ""], "prob_1": [0.25, np.nan]}
        )
    )
    writer.commit()
    assert xlsx_cells(path) == [
        ["occ1", "code_1", "prob_1"],
        ["=1+1", "01110", 0.25],
        ["farmer", None, None],
    ]
    assert read_table(str(path)).values.tolist() == [["=1+1", "01110", "0.25"], ["farmer", "", ""]]
    for bad, message in (
        ("a\x01b", "control character"),
        ("x" * 32_768, "more than an Excel cell holds"),
    ):
        broken = OutputWriter(str(tmp_path / "bad.xlsx"))
        with pytest.raises(UserError, match=message):
            broken.write(pd.DataFrame({"occ1": [bad]}))
        broken.abort()
    assert sorted(os.listdir(tmp_path)) == ["out.xlsx"]


# ------------------------------------------------------------------ the programs
@pytest.fixture(scope="module")
def excel_run(tmp_path_factory):
    """A tiny run trained from an .xlsx workbook whose codes start with 0 (text cells)."""
    frame = pd.read_csv(
        os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False
    )
    frame = frame[frame["hisco_1"].str.len() == 5].head(60)
    frame["hisco_1"] = "0" + frame["hisco_1"].str[1:]
    directory = tmp_path_factory.mktemp("excel")
    data = write_xlsx(directory / "train.xlsx", [list(frame.columns)] + frame.values.tolist())
    run = directory / "run"
    proc = run_program(
        "finetune.py",
        "--dataset",
        data,
        "--target-cols",
        "hisco_1",
        "--save-path",
        run,
        *TINY,
        "--max-steps",
        6,
        "--batch-size",
        16,
    )
    assert f"--dataset {data}: Excel, sheet 'data'" in proc.stdout
    return str(run), frame, data


def test_predict_and_evaluate_between_excel_stata_csv_and_parquet(excel_run, tmp_path):
    run, frame, data = excel_run
    source = tmp_path / "in.dta"
    frame.assign(year=1850.0).to_stata(source, write_index=False)
    out_xlsx, out_dta = tmp_path / "p.xlsx", tmp_path / "p.dta"
    run_program(
        "predict.py",
        "--checkpoint",
        run,
        "--input",
        source,
        "--output",
        out_xlsx,
        "--chunk-size",
        25,
    )
    cells = xlsx_cells(out_xlsx)
    header = cells[0]
    assert header[:3] == ["occ1", "hisco_1", "year"] and "code_1" in header and "prob_1" in header
    assert len(cells) == len(frame) + 1
    code_1 = [row[header.index("code_1")] for row in cells[1:]]
    assert all(isinstance(c, str) and c.startswith("0") for c in code_1)  # text, zero kept
    assert [row[1] for row in cells[1:]] == list(frame["hisco_1"])
    assert all(isinstance(row[header.index("prob_1")], float) for row in cells[1:])
    run_program("predict.py", "--checkpoint", run, "--input", out_xlsx, "--output", out_dta)
    back = pd.read_stata(out_dta)
    assert back["code_1"].tolist() == code_1 and back["code_1_input"].tolist() == code_1
    proc = run_program(
        "evaluate.py",
        "--predictions",
        out_dta,
        "--truth-cols",
        "hisco_1",
        "--output",
        tmp_path / "e.csv",
    )
    assert "accuracy" in proc.stdout.lower() or os.path.getsize(tmp_path / "e.csv") > 0


def test_prepared_data_from_a_workbook_is_identified_by_content_and_sheet(excel_run, tmp_path):
    _, frame, data = excel_run
    cfg = DataConfig(dataset=data, target_cols=["hisco_1"], share_val=0.2)
    run_dir = str(tmp_path / "run")
    prepare_run_data(cfg, 0, run_dir, log=lambda _: None)
    said = []
    prepare_run_data(cfg, 0, run_dir, log=said.append)
    assert said == [f"reusing prepared data in {run_dir}"]
    # --sheet naming the sheet read anyway is the same reading, so the same run (issue 27, item 9)
    said = []
    prepare_run_data(
        DataConfig(dataset=data, target_cols=["hisco_1"], share_val=0.2, sheet="data"),
        0,
        run_dir,
        log=said.append,
    )
    assert said == [f"reusing prepared data in {run_dir}"]
    assert not {"encoding", "sep", "sheet"} & set(
        fingerprint(cfg, 0)["settings"]
    )  # older runs resume
    two = write_xlsx(
        tmp_path / "two.xlsx", [list(frame.columns)] + frame.values.tolist(), sheet="b", before="a"
    )
    book = openpyxl.load_workbook(two)
    for row in [list(frame.columns)] + frame.values.tolist()[:-1]:
        book["a"].append(row)
    book.save(two)
    two_cfg = DataConfig(dataset=two, target_cols=["hisco_1"], share_val=0.2)
    prepare_run_data(two_cfg, 0, str(tmp_path / "two"), log=lambda _: None)
    with pytest.raises(UserError, match="--sheet was None, now 'b'"):  # another sheet: another run
        prepare_run_data(
            DataConfig(dataset=two, target_cols=["hisco_1"], share_val=0.2, sheet="b"),
            0,
            str(tmp_path / "two"),
            log=lambda _: None,
        )
    edited = write_xlsx(
        tmp_path / "edited.xlsx", [list(frame.columns)] + frame.values.tolist()[:-1]
    )
    with pytest.raises(UserError, match="--dataset differs"):
        prepare_run_data(
            DataConfig(dataset=edited, target_cols=["hisco_1"], share_val=0.2),
            0,
            run_dir,
            log=lambda _: None,
        )


def test_an_excel_output_longer_than_a_sheet_stops_before_any_work(excel_run, tmp_path):
    run, _, _ = excel_run
    rows = formats.EXCEL_MAX_ROWS  # one more than a sheet holds under its header
    big = tmp_path / "big.csv"
    big.write_text("occ1\n" + "farmer\n" * rows)
    parquet = tmp_path / "big.parquet"
    pd.DataFrame({"occ1": ["farmer"] * rows}).to_parquet(parquet)
    for source in (big, parquet):
        proc = run_program(
            "predict.py",
            "--checkpoint",
            run,
            "--input",
            source,
            "--output",
            tmp_path / "p.xlsx",
            check=False,
        )
        assert proc.returncode == 2
        assert (
            f"has {rows:,} rows, more than an Excel sheet holds (1,048,575 under the header); "
            "write .parquet or .dta instead" in proc.stderr
        )
        assert "loaded" not in proc.stderr.lower()  # before the model
    assert not os.path.exists(tmp_path / "p.xlsx")
    fits = tmp_path / "fits.csv"
    fits.write_text("occ1\n" + "farmer\n" * (rows - 1))
    from mixer.data.tables.writing import check_fits_excel

    check_fits_excel(str(tmp_path / "p.xlsx"), str(fits), TableOptions())


@pytest.mark.parametrize(
    "program,argv",
    [
        ("evaluate", ["--predictions", "{xlsx}", "--truth-cols", "hisco_1"]),
        ("predict", ["--checkpoint", "nowhere", "--input", "{csv}", "--output", "{out}"]),
        ("predict", ["--checkpoint", "nowhere", "--input", "{xlsx}", "--output", "{csv}"]),
    ],
)
def test_without_openpyxl_the_error_names_the_extra(tmp_path, program, argv):
    xlsx = write_xlsx(tmp_path / "p.xlsx", [["hisco_1", "code_1"], ["61110", "61110"]])
    csv = tmp_path / "in.csv"
    csv.write_text("occ1\nfarmer\n")
    argv = [a.format(xlsx=xlsx, csv=csv, out=tmp_path / "out.xlsx") for a in argv]
    code = (
        "import sys; sys.modules['openpyxl'] = None; from mixer.cli import entrypoints; "
        f"sys.argv = ['{program}.py'] + {argv!r}; entrypoints.{program}_cli()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env_for_subprocess(),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith(
        "[excel]'"
    )  # pip install 'mixer[excel]', or this clone's path
    assert "install it with: pip install '" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_training_and_validation_files_of_different_formats(excel_run, tmp_path):
    _, frame, data = excel_run
    val = tmp_path / "val.dta"
    frame.head(20).to_stata(val, write_index=False, version=118)
    cfg = DataConfig(train_data=[data], val_data=[str(val)], target_cols=["hisco_1"])
    prepared = prepare_run_data(cfg, 0, str(tmp_path / "run"), log=lambda _: None)
    assert len(prepared.train) == len(frame) and len(prepared.val) == 20
    assert set(prepared.val["code_1"].astype(str)) <= set(frame["hisco_1"])  # '0...' codes as text


def test_training_and_validation_files_are_read_with_their_own_flags(tmp_path):
    """Review of issue 27, item 3: train_mixer.py's validation files have their own reading
    flags (--val-encoding, ...), so the hint about a validation file never changes how the
    training files are read; a role's flags apply to each of its files, which an error about
    one of several says."""
    from mixer.cli import parsing as cli
    from mixer.cli.entrypoints import train_mixer_parser
    from mixer.data.prepared.prepare import prepare

    train, val = tmp_path / "tr_u8.csv", tmp_path / "va_cp.csv"
    train.write_bytes("occ1,hisco_1\ndrängare,61110\nfarmer,61110\nsmith,83110\n".encode("utf-8"))
    val.write_bytes("occ1,hisco_1\ndrängare,61110\nfarmer,61110\n".encode("cp1252"))
    argv = [
        "--train-data",
        str(train),
        "--val-data",
        str(val),
        "--target-cols",
        "hisco_1",
        "--save-dir",
        str(tmp_path / "run"),
    ]
    cfg = cli.build_config(cli.parse_args(train_mixer_parser(), argv)).data
    with pytest.raises(UserError) as error:
        prepare(cfg, 0, log=lambda _: None)
    assert str(error.value).startswith(f"--val-data {val}: not UTF-8 text")
    assert "(e.g. --val-encoding cp1252)" in str(error.value)
    cfg = cli.build_config(
        cli.parse_args(train_mixer_parser(), argv + ["--val-encoding", "cp1252"])
    ).data
    prepared = prepare(cfg, 0, log=lambda _: None)
    assert list(prepared.train["text"])[0] == list(prepared.val["text"])[0] == "drängare"
    both = DataConfig(
        train_data=[str(train), str(val)],
        val_data=[str(train)],
        formatter="hisco",
        target_cols=["hisco_1"],
    )
    with pytest.raises(
        UserError,
        match=r"--encoding cp1252\).*\(--encoding applies to each of the 2 "
        r"--train-data files",
    ):
        prepare(both, 0, log=lambda _: None)

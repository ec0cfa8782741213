"""Properties of the one way in (docs/tests.md, "Property tests"): the same logical table,
written the ways users' files are written, reads to the same prepared rows, key and
predictions; codes keep their text; one code is one class; a hint names a flag that
works for the file it is about; every output reads back with the input's columns and the
predictions in their documented places.

Tables are generated with hypothesis: separators, encodings (cp1252, utf-16, a UTF-8
byte-order mark), a 'sep=' line, codes with and without their leading zeros, as text or
as numbers, whitespace around text, non-ASCII text, column names that clash with the
outputs, empty cells. Everything runs through the programs' mains in this process, as a
user runs them; the files are written and read back here with pandas, pyarrow and
openpyxl, never with mixer's own reader, so a property cannot agree with itself.

CI runs a fixed, derandomised number of examples (the profile below);
MIXER_HYPOTHESIS_EXAMPLES=N runs a fresh random search of N examples per property.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from conftest import TINY
from mixer.cli.entrypoints import finetune_main, predict_main
from mixer.core.errors import UserError

SEARCH = int(os.environ.get("MIXER_HYPOTHESIS_EXAMPLES", "0"))
# CI: no shrinking (a failing table is shown as found; shrinking one takes minutes)
settings.register_profile(
    "mixer",
    deadline=None,
    database=None,
    derandomize=not SEARCH,
    phases=list(Phase) if SEARCH else [Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
settings.load_profile("mixer")


def examples(ci: int):
    """The number of examples of a property: fixed in CI, MIXER_HYPOTHESIS_EXAMPLES locally."""
    return settings(max_examples=SEARCH or ci)


# ------------------------------------------------------------------ logical tables
# HISCO-like codes, several led by a zero that a number cannot keep
CODES = ["01110", "06510", "02000", "00510", "61110", "64100", "83110", "99910"]
# titles every encoding here can write (cp1252 included), some of them past ASCII
TITLES = [
    "farmer",
    "fisher",
    "drängen",
    "skräddare",
    "wine merchant",
    "école teacher",
    "smith's wife",
    "tailor, master",
]
ENCODINGS = ["utf-8", "utf-8-sig", "cp1252", "utf-16"]
SEPARATORS = [",", ";", "\t", "|"]
KINDS = ["csv", "parquet", "xlsx", "dta"]
SUFFIX = {"csv": ".csv", "parquet": ".parquet", "xlsx": ".xlsx", "dta": ".dta"}


@st.composite
def code_tables(draw, min_rows=4, max_rows=9):
    """{column: [cells]}: occ1 (titles with spaces around some), hisco_1 (a code in every
    row), hisco_2 (a code in some rows, else empty)."""
    rows = draw(st.integers(min_rows, max_rows))
    pad = st.sampled_from(["", " ", "  "])
    titles = [draw(pad) + draw(st.sampled_from(TITLES)) + draw(pad) for _ in range(rows)]
    first = [draw(st.sampled_from(CODES)) for _ in range(rows)]
    second = [draw(st.sampled_from([""] * 3 + [c for c in CODES if c != a])) for a in first]
    return {"occ1": titles, "hisco_1": first, "hisco_2": second}


@st.composite
def spellings(draw, kind):
    """How one file is written: CSV's encoding, separator and 'sep=' line; whether the code
    columns are numbers (Parquet integers, Excel number cells, Stata doubles: their zeros
    gone) or text that lost the zero in some cells (as a spreadsheet round trip leaves it)."""
    spelling = {
        "kind": kind,
        "numbers": False,
        "lost": draw(st.lists(st.booleans(), min_size=20, max_size=20)),
    }
    if kind == "csv":
        spelling.update(
            encoding=draw(st.sampled_from(ENCODINGS)),
            sep=draw(st.sampled_from(SEPARATORS)),
            sep_line=draw(st.booleans()),
            say_sep=draw(st.booleans()),
        )
    else:
        spelling["numbers"] = draw(st.booleans())
    return spelling


def lost_zero(code: str) -> str:
    return code.lstrip("0") if code.isdigit() else code


def write_table(table: dict, path: str, spelling: dict, code_cols=("hisco_1", "hisco_2")) -> str:
    """Write a logical table the way `spelling` says; returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lost = spelling.get("lost") or [False]
    columns = {}
    for name, cells in table.items():
        if name in code_cols:
            if spelling["numbers"]:
                cells = [int(c) if c else None for c in cells]
            else:
                cells = [lost_zero(c) if lost[i % len(lost)] else c for i, c in enumerate(cells)]
        columns[name] = cells
    kind = spelling["kind"]
    if kind == "csv":
        out = io.StringIO()
        if spelling["sep_line"]:
            out.write(f"sep={spelling['sep']}\n")
        writer = csv.writer(out, delimiter=spelling["sep"], lineterminator="\n")
        writer.writerow(list(columns))
        writer.writerows(zip(*columns.values()))
        with open(path, "wb") as handle:
            handle.write(out.getvalue().encode(spelling["encoding"]))
    elif kind == "parquet":
        arrays = {
            name: pa.array(
                cells, type=pa.int64() if any(isinstance(c, int) for c in cells) else pa.string()
            )
            for name, cells in columns.items()
        }
        pq.write_table(pa.table(arrays), path)
    elif kind == "xlsx":
        import openpyxl

        book = openpyxl.Workbook()
        sheet = book.active
        sheet.append(list(columns))
        for row in zip(*columns.values()):
            sheet.append([None if c in ("", None) else c for c in row])
        book.save(path)
    else:
        frame = pd.DataFrame(
            {
                name: pd.Series(
                    [np.nan if c is None else c for c in cells],
                    dtype=float if any(isinstance(c, int) for c in cells) else object,
                )
                for name, cells in columns.items()
            }
        )
        frame.to_stata(path, write_index=False, version=118)
    return path


def reading_flags(spelling: dict, prefix: str = "") -> list:
    """The flags that say how a file is read (prefix: its role's, e.g. 'extra-train-')."""
    if spelling["kind"] != "csv":
        return []
    flags = [f"--{prefix}encoding", spelling["encoding"]]
    if spelling.get("say_sep"):  # typed, equal to the one the file names: the same reading
        flags += [f"--{prefix}sep", {"\t": "tab"}.get(spelling["sep"], spelling["sep"])]
    return flags


HINT = re.compile(r"pass (--[a-z][a-z-]*)")


def prepare_following_hints(argv: list, tries: int = 3) -> list:
    """finetune.py --prepare-only as a user runs it: on a refusal, pass the flag its
    message names, and again. Returns the flags added."""
    added = []
    for _ in range(tries):
        try:
            finetune_main(argv + added + ["--prepare-only", "--no-token-cache"])
            return added
        except UserError as exc:
            hints = [flag for flag in HINT.findall(str(exc)) if flag not in added]
            if not hints:
                raise
            added.append(hints[0])
    raise AssertionError(f"still refused after following the hints {added}")


def prepared_rows(run: str) -> pd.DataFrame:
    rows = pd.concat(
        [pd.read_parquet(os.path.join(run, f"data_{s}.parquet")) for s in ("train", "val")]
    )
    rows = rows.sort_values("row").reset_index(drop=True)
    return pd.DataFrame(
        {
            "text": rows["text"].astype(str),
            **{c: rows[c].astype(str) for c in rows.columns if c.startswith("code_")},
        }
    )


def read_key(run: str) -> pd.DataFrame:
    return pd.read_csv(os.path.join(run, "key.csv"), dtype=str, keep_default_na=False)


def expected_rows(table: dict) -> pd.DataFrame:
    first, second = table["hisco_1"], table["hisco_2"]
    return pd.DataFrame(
        {"text": [t.strip() for t in table["occ1"]], "code_1": first, "code_2": second}
    )


def one_number_one_code(codes) -> None:
    numbers = {}
    for code in codes:
        if code.isdigit():
            assert numbers.setdefault(int(code), code) == code, (
                f"{numbers[int(code)]!r} and {code!r}: two classes"
            )


# ------------------------------------------------------------------ 1, 6: one code, one class
TOY = {
    "occ1": ["cook", "farmer", " farmer", "weaver "],
    "hisco_1": ["06510", "61110", "61110", "75400"],
    "hisco_2": ["", "", "01110", ""],
}
CSV = {
    "kind": "csv",
    "encoding": "utf-8",
    "sep": ",",
    "sep_line": False,
    "say_sep": False,
    "numbers": False,
    "lost": [True] * 20,
}
AS_NUMBERS = [{"kind": kind, "numbers": True, "lost": [True]} for kind in KINDS[1:]]


@examples(8)
@given(
    table=code_tables(),
    spellings_=st.tuples(*(spellings(kind) for kind in KINDS)),
    key=st.sampled_from([None, "code", "hisco"]),
)
@example(
    table=TOY, spellings_=(CSV, *AS_NUMBERS), key=None
)  # issue 27, item 1: the quickstart's data
@example(table=TOY, spellings_=(CSV, *AS_NUMBERS), key="hisco")  # item 6: --key data/hisco_key.csv
# its review, item 1: -1 asks for --allow-codes-shorter-than-block-size, which kept 6510 of a number column
@example(
    table=TOY | {"hisco_1": ["06510", "61110", "-1", "75400"]},
    spellings_=(CSV, *AS_NUMBERS),
    key=None,
)
def test_one_logical_table_prepares_alike_in_every_format_following_the_hints(
    table, spellings_, key
):
    """The same table as CSV, Parquet, .xlsx and .dta, each written its own way: following
    the tool's hints, every one prepares to the logical rows, codes with their zeros, and a
    key of one class per code (with --key: the key file's codes, however it spells them)."""
    codes = sorted(set(table["hisco_1"]) | set(table["hisco_2"]) - {""})
    with tempfile.TemporaryDirectory() as directory:
        key_flags = []
        if key is not None:  # a fixed key, written as users have one: zeros lost
            listed = codes + ["79100"]
            frame = (
                pd.DataFrame({"code": [lost_zero(c) for c in listed], "description": "a title"})
                if key == "code"
                else pd.DataFrame(
                    {
                        "en_hisco_text": "a title",
                        "hisco": [lost_zero(c) for c in listed],
                        "code": range(len(listed)),
                    }
                )
            )
            frame.to_csv(os.path.join(directory, "key.csv"), index=False)
            key_flags = ["--key", os.path.join(directory, "key.csv")]
        for spelling in spellings_:
            path = write_table(
                table, os.path.join(directory, "data" + SUFFIX[spelling["kind"]]), spelling
            )
            run = os.path.join(directory, "run_" + spelling["kind"])
            prepare_following_hints(
                [
                    "--dataset",
                    path,
                    "--target-cols",
                    "hisco_1",
                    "hisco_2",
                    "--share-val",
                    "0.25",
                    "--save-path",
                    run,
                    *reading_flags(spelling),
                    *key_flags,
                ]
            )
            got = prepared_rows(run)
            pd.testing.assert_frame_equal(got, expected_rows(table), obj=f"{spelling['kind']} rows")
            key_codes = read_key(run)["code"].tolist()
            one_number_one_code(key_codes)
            if key is None:
                assert key_codes == codes
            else:
                assert key_codes == codes + ["79100"]  # the file's codes, in its order


@examples(10)
@given(table=code_tables(), lost=st.lists(st.booleans(), min_size=20, max_size=20))
@example(
    table=TOY | {"hisco_2": ["01110", "", "01110", ""]}, lost=[False, False, True] + [False] * 17
)  # item 1
def test_codes_shorter_than_the_block_are_never_two_spellings_of_one_code(table, lost):
    """--allow-codes-shorter-than-block-size keeps short codes as written; a short code whose
    zero-filled spelling is also in the data would be a second class of the same code: the
    run refuses that, naming a flag that reads them as one, or prepares one class per code."""
    spelling = {
        "kind": "csv",
        "encoding": "utf-8",
        "sep": ",",
        "sep_line": False,
        "numbers": False,
        "lost": lost,
    }
    with tempfile.TemporaryDirectory() as directory:
        path = write_table(table, os.path.join(directory, "data.csv"), spelling)
        argv = [
            "--dataset",
            path,
            "--target-cols",
            "hisco_1",
            "hisco_2",
            "--share-val",
            "0.25",
            "--save-path",
            os.path.join(directory, "run"),
            "--allow-codes-shorter-than-block-size",
            "--prepare-only",
            "--no-token-cache",
        ]
        try:
            finetune_main(argv)
        except UserError as exc:
            assert "--zero-padded-codes" in str(exc)
            finetune_main(argv + ["--zero-padded-codes"])
            pd.testing.assert_frame_equal(
                prepared_rows(os.path.join(directory, "run")), expected_rows(table)
            )
        one_number_one_code(read_key(os.path.join(directory, "run"))["code"])


# ------------------------------------------------------------------ 4, 5: each file its own reading
@st.composite
def text_files(draw):
    """A CSV file as Excel and other programs write it, or a workbook."""
    kind = draw(st.sampled_from(["csv", "csv", "csv", "xlsx"]))
    return draw(spellings(kind)) | {"numbers": False, "lost": [False]}


EXCEL_CSV = {
    "kind": "csv",
    "encoding": "cp1252",
    "sep": ";",
    "sep_line": False,
    "say_sep": False,
    "numbers": False,
    "lost": [False],
}  # Excel's "CSV" on Windows


@examples(12)
@given(
    role=st.sampled_from(["extra-train", "code-descriptions", "key"]),
    spelling=text_files(),
    dataset_encoding=st.sampled_from(["utf-8", "cp1252"]),
)
@example(role="extra-train", spelling=EXCEL_CSV, dataset_encoding="utf-8")  # item 4
@example(
    role="code-descriptions", spelling=EXCEL_CSV | {"encoding": "utf-8"}, dataset_encoding="utf-8"
)  # 5
def test_every_file_is_read_with_its_own_options_and_hints_name_its_flags(
    role, spelling, dataset_encoding
):
    """A run's other files (checked rows, descriptions, a key) each read with their own
    encoding and separator, never the dataset's: with its flags each gives its logical
    content; without them a refusal names that file's flags, not the dataset's."""
    titles = ["drängen", "école teacher", "farmer", "fisher"]
    codes = ["01110", "61110", "64100", "83110"]
    with tempfile.TemporaryDirectory() as directory:
        data = {"occ1": titles * 3, "hisco_1": codes * 3}
        dataset = os.path.join(directory, "data.csv")
        write_table(
            data,
            dataset,
            {
                "kind": "csv",
                "encoding": dataset_encoding,
                "sep": ",",
                "sep_line": False,
                "numbers": False,
            },
            code_cols=(),
        )
        if role == "extra-train":
            content = {
                "occ1": ["skräddare", "wine merchant"],
                "n_rows": ["3", "1"],
                "checked_1": ["79100", "01110"],
            }
        elif role == "code-descriptions":
            content = {
                "code": codes,
                "description": ["Chemist, général", "Farmer", "Fisher", "Smith"],
            }
        else:
            content = {
                "code": codes + ["79100"],
                "description": ["Chemist", "Farmer", "Fisher", "Smith", "Tailor"],
            }
        path = write_table(
            content,
            os.path.join(directory, "file" + SUFFIX[spelling["kind"]]),
            spelling,
            code_cols=(),
        )
        argv = [
            "--dataset",
            dataset,
            "--encoding",
            dataset_encoding,
            "--target-cols",
            "hisco_1",
            "--share-val",
            "0.25",
            f"--{role}",
            path,
            "--prepare-only",
            "--no-token-cache",
        ]
        try:
            finetune_main(argv + ["--save-path", os.path.join(directory, "plain")])
        except UserError as exc:
            named = set(re.findall(r"--[a-z][a-z-]*", str(exc)))
            reading = {f for f in named if f.endswith(("encoding", "-sep", "sheet", "header-row"))}
            assert reading and all(f.startswith(f"--{role}-") for f in reading), str(exc)
        run = os.path.join(directory, "run")
        finetune_main(argv + ["--save-path", run, *reading_flags(spelling, f"{role}-")])
        rows = prepared_rows(run)
        assert set(rows["text"]) >= set(titles)  # the dataset's own text, as its flags read it
        key = read_key(run)
        if role == "extra-train":
            added = pd.read_parquet(os.path.join(run, "data_train.parquet")).tail(2)
            assert added["text"].tolist() == content["occ1"]
            assert added["code_1"].astype(str).tolist() == content["checked_1"]
        elif role == "code-descriptions":
            assert dict(zip(key["code"], key["description"])) == dict(
                zip(codes, content["description"])
            )
        else:
            assert key["code"].tolist() == content["code"]
            assert key["description"].tolist() == content["description"]


# ------------------------------------------------------------------ 2, 3: predictions and outputs
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, small_csv) -> str:
    """A model of random weights trained one step: enough for 'the same predictions'."""
    run = str(tmp_path_factory.mktemp("properties") / "run")
    assert (
        finetune_main(
            [
                "--dataset",
                small_csv,
                "--target-cols",
                "hisco_1",
                "hisco_2",
                "--save-path",
                run,
                "--max-steps",
                "1",
                "--share-val",
                "0.09",
                "--no-eval-noise",
                *TINY,
            ]
        )
        == 0
    )
    return run


def read_output(path: str) -> tuple:
    """(frame of text, {column: Stata variable label}) of an output file, read here."""
    kind = os.path.splitext(path)[1][1:]
    if kind == "csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False), {}
    if kind == "parquet":
        return pd.read_parquet(path).astype(str), {}
    if kind == "xlsx":
        import openpyxl

        book = openpyxl.load_workbook(path, read_only=True)
        rows = [
            ["" if v is None else str(v) for v in row]
            for row in book.worksheets[0].iter_rows(values_only=True)
        ]
        book.close()
        width = len(rows[0])  # a row's empty cells at its end are not stored
        return pd.DataFrame(
            [row + [""] * (width - len(row)) for row in rows[1:]], columns=rows[0]
        ), {}
    with pd.io.stata.StataReader(path) as reader:
        labels = reader.variable_labels()
        frame = reader.read(convert_categoricals=False)
    return frame.astype(str), labels


CLASHING = [
    "code 1",
    "code_1",
    "prob_1",
    "Code_1",
    "desc_1",
    "code_1_input",
    "flat_code_1",
    "prob 2",
    "a column name longer than thirty-two characters",
    "ålder",
    "n",
]


@examples(10)
@given(
    names=st.lists(st.sampled_from(CLASHING), min_size=1, max_size=4, unique=True),
    spelling=st.sampled_from(KINDS[:3]).flatmap(spellings),
    output=st.sampled_from(KINDS),
    rows=st.integers(2, 5),
)
@example(names=["code 1"], spelling=CSV, output="dta", rows=3)  # item 2: Stata's renaming
def test_every_output_holds_the_input_columns_and_the_predictions_in_their_places(
    tiny_run, names, spelling, output, rows
):
    """predict.py from CSV, Parquet or a workbook (a .dta file cannot hold these names) to
    any output format: the predictions are the model's, in code_k / prob_k; every input
    column is there once, its values intact, under its own name or the documented rename,
    never in a prediction's place; in a .dta file a renamed column's label is its name."""
    import mixer

    titles = [TITLES[i % len(TITLES)] for i in range(rows)]
    table = {
        "occ1": titles,
        **{name: [f"{i}-{name[:3]}-{r}" for r in range(rows)] for i, name in enumerate(names)},
    }
    spelling = spelling | {"numbers": False}
    with tempfile.TemporaryDirectory() as directory:
        source = write_table(
            table, os.path.join(directory, "in" + SUFFIX[spelling["kind"]]), spelling, code_cols=()
        )
        target = os.path.join(directory, "out" + SUFFIX[output])
        assert (
            predict_main(
                [
                    "--checkpoint",
                    tiny_run,
                    "--input",
                    source,
                    "--output",
                    target,
                    *reading_flags(spelling),
                ]
            )
            == 0
        )
        got, labels = read_output(target)
        expected = mixer.load(tiny_run).predict(titles)
        assert len(got.columns) == len(table) + len(expected.columns)
        for column in expected.columns:  # the predictions where the documentation puts them
            # a workbook holds 16 significant digits (openpyxl), not a double's 17: its
            # confidence is compared as a number, every other kind's as written
            if column.startswith("prob_") or (output == "xlsx" and column.startswith("confidence")):
                values = pd.to_numeric(got[column].replace({"": np.nan, "nan": np.nan}))
                np.testing.assert_allclose(values, expected[column].astype(float), atol=1e-5)
            else:
                assert (
                    got[column].replace("nan", "").tolist() == expected[column].astype(str).tolist()
                ), column
        predicted = set(expected.columns)
        for name, cells in table.items():  # each input column once, never in a prediction's place
            holders = [c for c in got.columns if got[c].tolist() == cells]
            assert len(holders) == 1, (name, holders)
            assert holders[0] not in predicted and not re.fullmatch(
                r"(\w+_)?code_\d+", holders[0]
            ), (name, holders)
            if holders[0] != name and output == "dta":
                assert labels.get(holders[0]) == name  # the old name is the variable's label


@examples(10)
@given(
    texts=st.lists(
        st.tuples(
            st.sampled_from(["", " ", "  "]),
            st.sampled_from(TITLES[:4]),
            st.sampled_from(["", " "]),
        ),
        min_size=3,
        max_size=12,
    )
)
@example(texts=[("", "farmer", ""), ("", "farmer", " "), (" ", "farmer", "")])  # item 3
def test_the_check_list_counts_what_the_model_reads(tiny_run, texts):
    """--to-check: 'farmer', 'farmer ' and ' farmer' are one input to the model, so one row
    of the check list, with the rows of all three."""
    rows = ["".join(t) for t in texts]
    with tempfile.TemporaryDirectory() as directory:
        source = os.path.join(directory, "in.csv")
        pd.DataFrame({"occ1": rows}).to_csv(source, index=False)
        check = os.path.join(directory, "check.csv")
        assert (
            predict_main(["--checkpoint", tiny_run, "--input", source, "--to-check", "50", check])
            == 0
        )
        listed = pd.read_csv(check, dtype=str, keep_default_na=False)
        read = listed["occ1"].str.strip()
        assert read.is_unique, listed["occ1"].tolist()
        counts = pd.Series(rows).str.strip().value_counts()
        assert listed["n_rows"].astype(int).tolist() == counts.reindex(read).tolist()

"""A full-count file (issue 43): each distinct model input predicted once per file, the rows
as chunk-by-chunk prediction gives them (docs/predicting.md, "Repeated descriptions")."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import assert_floats_close, assert_same_predictions, predict_argv, zipf_census
from mixer.cli.entrypoints import predict_main


@pytest.fixture(scope="module")
def run(tiny_two_code_run):
    return tiny_two_code_run


@pytest.fixture(scope="module")
def census(tmp_path_factory, small_csv) -> str:
    """600 rows drawn from 121 descriptions (a few drawn often, as in a census), some rows
    without a description."""
    return zipf_census(tmp_path_factory, small_csv, 600, 3, 53)


def distinct_inputs(run, frame) -> int:
    import mixer

    inputs = mixer.load(run, device="cpu").model_inputs(frame["occ1"].tolist())
    return len(set(zip(inputs, frame["occ1"].str.strip().eq(""))))


def chunk_by_chunk(run, frame, chunk_size: int) -> tuple:
    """What predict.py gave before the store: each chunk predicted as it came."""
    import mixer

    model = mixer.load(run, device="cpu")
    tables, vectors = [], []
    for start in range(0, len(frame), chunk_size):
        texts = frame["occ1"].iloc[start : start + chunk_size].reset_index(drop=True)
        tables.append(model.predict(texts, batch_size=16))
        vectors.append(model.embeddings(texts, batch_size=16))
    return pd.concat(tables, ignore_index=True), np.concatenate(vectors)


@pytest.mark.floats
@pytest.mark.parametrize("chunk_size", [7, 64, 1000])
def test_each_distinct_input_is_predicted_once_per_file(
    run, census, tmp_path, model_rows, chunk_size
):
    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    out, vectors = tmp_path / "out.csv", tmp_path / "out.npy"
    assert (
        predict_main(
            [
                "--checkpoint",
                run,
                "--input",
                census,
                "--output",
                str(out),
                "--embeddings",
                str(vectors),
                "--chunk-size",
                str(chunk_size),
                "--batch-size",
                "16",
            ]
        )
        == 0
    )
    # once for the code table, once for the embeddings: each the file's distinct inputs
    assert sum(model_rows) == 2 * distinct_inputs(run, frame) < 2 * len(frame)
    expected, expected_vectors = chunk_by_chunk(run, frame, chunk_size)
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert written[list(frame.columns)].equals(frame)
    assert_same_predictions(
        written.drop(columns=list(frame.columns)),
        expected.astype(object).where(expected.notna(), "").astype(str),
    )
    # embeddings: a row's is its input's (bit for bit), and the inputs' are the model's; their
    # components near 0 carry the rounding of a batch's larger terms (2 ulps of 1 here), so
    # they are compared where the batches are the API's own: one chunk, the whole file
    got = np.load(vectors)
    keys = pd.Series(frame["occ1"]).factorize()[0]
    for key in np.unique(keys):
        rows = got[keys == key]
        assert (rows == rows[0]).all()
    if chunk_size >= len(frame):
        assert_floats_close(got, expected_vectors)


@pytest.mark.floats
def test_a_store_past_its_memory_spills_to_disk_and_gives_the_same_rows(
    run, census, tmp_path, monkeypatch
):
    from mixer.prediction import predict_job, store

    kept = tmp_path / "kept.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run,
                "--input",
                census,
                "--output",
                str(kept),
                "--chunk-size",
                "50",
                "--what",
                "probs",
            ]
        )
        == 0
    )
    spilled = []
    spill = store.DistinctStore._spill

    def counting(self, first, rows):
        spilled.append(len(rows))
        return spill(self, first, rows)

    monkeypatch.setattr(store.DistinctStore, "_spill", counting)
    monkeypatch.setattr(predict_job, "MEGABYTE", 1)  # --store-memory 2048: 2 KB, a block or two
    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run,
                "--input",
                census,
                "--output",
                str(out),
                "--chunk-size",
                "50",
                "--what",
                "probs",
            ]
        )
        == 0
    )
    assert sum(spilled) > 0
    assert out.read_bytes() == kept.read_bytes()
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")
    ] == []  # the spill file is gone
    table = pd.read_csv(tmp_path / "out.csv")
    assert len(table) == 600 and table.iloc[::53].isna().all(
        axis=None
    )  # rows without a description: empty


def test_store_reads_back_spilled_rows_in_their_types(tmp_path):
    from mixer.prediction.store import DistinctStore

    store = DistinctStore(200, str(tmp_path), "x")
    first = pd.DataFrame({"code_1": ["a", "b"], "prob_1": [0.25, np.nan], "level": [1, 2]})
    later = pd.DataFrame(
        {
            "code_1": ["c"] * 20,
            "prob_1": np.arange(20) / 3,
            "level": pd.array([None] + list(range(19)), dtype="Int64"),
        }
    )
    store.add(np.array(["k1", "k2"], dtype=object), first)
    store.add(np.array([f"n{i}" for i in range(20)], dtype=object), later)
    assert store.spilled == 20 and len(store) == 22
    got = store.take(np.array(["n0", "k2", "n19", "k1"], dtype=object))
    assert got["code_1"].tolist() == ["c", "b", "c", "a"]
    assert got["prob_1"].iloc[2] == 19 / 3 and np.isnan(got["prob_1"].iloc[1])
    assert got["level"].dtype == "Int64" and got["level"].isna().tolist() == [
        True,
        False,
        False,
        False,
    ]
    assert store.known(np.array(["k1", "zz"], dtype=object)).tolist() == [True, False]
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_store_s_blocks_of_many_chunks_are_merged_and_give_the_same_rows(tmp_path):
    """A window adds a block per chunk; a chunk's take then looks in a few merged blocks, not
    in one per chunk of the file so far. Blocks of other columns' types, arrays and spilled
    rows keep theirs."""
    from mixer.prediction.store import MERGE_AFTER, DistinctStore

    store = DistinctStore(10**9, str(tmp_path), "x")
    rng = np.random.default_rng(3)
    frames, keys = [], []
    for block in range(5 * MERGE_AFTER):
        n = int(rng.integers(1, 6))
        rows = pd.DataFrame(
            {"code_1": [f"c{block}-{i}" for i in range(n)], "prob_1": rng.random(n)}
        )
        if block == 7:  # another type: a block of its own
            rows["prob_1"] = rows["prob_1"].astype(np.float32)
        names = np.array([f"k{block}-{i}" for i in range(n)], dtype=object)
        store.add(names, rows)
        frames.append(rows)
        keys += list(names)
        asked = np.asarray(rng.permutation(keys)[: 2 * n], dtype=object)
        expected = pd.concat(frames, ignore_index=True).set_index(pd.Index(keys)).loc[asked]
        got = store.take(asked)
        assert got["code_1"].tolist() == expected["code_1"].tolist()
        assert got["prob_1"].tolist() == expected["prob_1"].astype(np.float64).tolist()
    assert len(store.blocks) <= MERGE_AFTER + 3  # a few, whatever the chunks added
    assert store.take(np.array(["k7-0"], dtype=object))["prob_1"].dtype == np.float32
    vectors = DistinctStore(10**9, str(tmp_path), "v")
    for block in range(3 * MERGE_AFTER):
        vectors.add(np.array([f"v{block}"], dtype=object), np.full((1, 3), block, np.float32))
    got = vectors.take(np.array(["v5", "v0", f"v{3 * MERGE_AFTER - 1}"], dtype=object))
    assert got[:, 0].tolist() == [5, 0, 3 * MERGE_AFTER - 1] and got.dtype == np.float32
    assert len(vectors.blocks) < MERGE_AFTER


# ------------------------------------------------------------------ a killed prediction resumes
FAULT = "MIXER_PREDICT_FAULT_AFTER_CHUNK"


def predict_cmd(run, census, out, *extra) -> list:
    return predict_argv(run, census, out, "--chunk-size", 90, "--head", "flat", "seq2seq", *extra)


@pytest.mark.parametrize("what", [[], ["--what", "probs"]])
def test_a_job_killed_at_a_chunk_boundary_resumes_to_the_same_bytes(run, census, tmp_path, what):
    from conftest import env_for_subprocess, run_program

    whole, cut = tmp_path / "whole.csv", tmp_path / "cut.csv"
    heads = [] if not what else ["--head", "flat"]
    run_program("predict.py", *predict_cmd(run, census, whole, *what), *heads)
    env = env_for_subprocess()
    env[FAULT] = "3"  # chunk 3 written, its journal entry not: as kill -9 between the two
    killed = run_program(
        "predict.py", *predict_cmd(run, census, cut, *what), *heads, env=env, check=False
    )
    assert killed.returncode == 9 and not cut.exists()
    again = run_program("predict.py", *predict_cmd(run, census, cut, *what), *heads)
    assert "continuing an unfinished run after its 3 chunk(s) (270 rows" in again.stdout
    assert cut.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["whole.csv", "whole.csv.provenance.json", "cut.csv", "cut.csv.provenance.json"]
    )


def test_a_preemption_signal_keeps_the_chunk_exits_0_and_the_same_command_continues(
    run, census, tmp_path
):
    from conftest import env_for_subprocess, run_program

    whole, cut = tmp_path / "whole.csv", tmp_path / "cut.csv"
    run_program("predict.py", *predict_cmd(run, census, whole))
    env = env_for_subprocess()
    env[FAULT] = "1:TERM"
    stopped = run_program("predict.py", *predict_cmd(run, census, cut), env=env)
    assert (
        "stopped after 2 chunk(s) (180 rows) on a signal: run the same command to continue"
        in stopped.stderr
    )
    run_program("predict.py", *predict_cmd(run, census, cut))
    assert cut.read_bytes() == whole.read_bytes()


def test_a_changed_option_is_refused_naming_it_and_restart_starts_over(run, census, tmp_path):
    from conftest import env_for_subprocess, run_program

    out = tmp_path / "out.csv"
    env = env_for_subprocess()
    env[FAULT] = "1"
    assert (
        run_program("predict.py", *predict_cmd(run, census, out), env=env, check=False).returncode
        == 9
    )
    refused = run_program(
        "predict.py", *predict_cmd(run, census, out, "--batch-size", "8"), check=False
    )
    assert refused.returncode == 2 and not out.exists()
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "were made with --batch-size 256 (now 8); run that command again to continue, or pass --restart to "
            "start over"
        )
    )
    restarted = run_program(
        "predict.py", *predict_cmd(run, census, out, "--batch-size", "8", "--restart")
    )
    assert "continuing" not in restarted.stdout
    assert len(pd.read_csv(out)) == 600


def test_a_changed_reading_option_file_or_calibration_is_refused_on_resume(run, census, tmp_path):
    """What makes the rows is compared, not only the flags: the input's reading options
    (--encoding, --sep, ...), the content of a file an option names (--code-descriptions) and
    the model's calibration (calibration.json, which --calibrate rewrites). A second review
    found each accepted, and a file made of two halves."""
    import json
    import shutil

    from conftest import env_for_subprocess, run_program

    model = tmp_path / "model"
    shutil.copytree(run, model)
    descriptions = tmp_path / "desc.csv"
    descriptions.write_text("hisco,en_hisco_text\n61110,farmer\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    cmd = predict_cmd(str(model), census, out, "--code-descriptions", descriptions)
    env = env_for_subprocess()
    env[FAULT] = "1"
    assert run_program("predict.py", *cmd, env=env, check=False).returncode == 9

    def refused(*extra) -> str:
        proc = run_program("predict.py", *cmd, *extra, check=False)
        assert proc.returncode == 2 and not out.exists(), proc.stderr
        return proc.stderr.strip().splitlines()[-1]

    assert "were made with --encoding utf-8 (now iso8859-1)" in refused("--encoding", "latin-1")
    descriptions.write_text("hisco,en_hisco_text\n61110,farmer (changed)\n", encoding="utf-8")
    assert f"were made with --code-descriptions {descriptions} as it was then" in refused()
    # the model's calibration, rewritten after the kill
    shutil.rmtree(out.parent / ".tmp-out.csv.parts")
    cmd = predict_cmd(str(model), census, out)
    assert run_program("predict.py", *cmd, env=env, check=False).returncode == 9
    calibration = model / "calibration.json"
    stored = (
        json.loads(calibration.read_text()) if calibration.exists() else {"version": 1, "heads": {}}
    )
    stored["heads"]["flat"] = dict(stored["heads"].get("flat", {}), temperature=2.0, bias=-1.0)
    calibration.write_text(json.dumps(stored))
    assert "were made with another calibration of the model" in refused()


def test_an_edit_to_the_model_directory_s_own_files_is_refused_on_resume(
    run, census, tmp_path, capsys
):
    """Issue 50, item 2: the model directory's own files that make the output (key.csv, its
    codes' descriptions; config.json; calibration.json) are in the journal, as a file an
    option names is: each edited (or added) between a kill and the rerun is refused in one
    line, the parts kept as they were; put back as it was, the job continues to an
    uninterrupted run's bytes."""
    import os
    import shutil

    from conftest import env_for_subprocess, fails, run_program

    model = tmp_path / "model"
    shutil.copytree(run, model)
    work = tmp_path / "work"
    work.mkdir()
    whole, out = tmp_path / "whole.csv", work / "out.csv"
    assert predict_main(predict_cmd(str(model), census, whole)) == 0
    cmd = predict_cmd(str(model), census, out)
    env = env_for_subprocess()
    env[FAULT] = "1"
    assert run_program("predict.py", *cmd, env=env, check=False).returncode == 9
    capsys.readouterr()

    def edit(path, content, *needles) -> None:
        before = path.read_bytes() if path.exists() else None
        times = os.stat(path) if before is not None else None
        path.write_bytes(content)
        fails(capsys, "predict", cmd, *needles, watch=work)
        assert not out.exists()
        if before is None:
            path.unlink()
            return
        path.write_bytes(before)  # put back, its time too: the same file
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))

    key = pd.read_csv(model / "key.csv", dtype=str, keep_default_na=False)
    edit(
        model / "key.csv",
        key.assign(description="EDITED DESCRIPTION").to_csv(index=False).encode(),
        f"were made with the model's key.csv {model / 'key.csv'} as it was then",
    )
    config = (model / "config.json").read_bytes()
    edit(
        model / "config.json",
        config.replace(b"\n", b"\n ", 1),
        f"were made with the model's config.json {model / 'config.json'} as it was then",
    )
    if not (model / "calibration.json").exists():  # no scaling: only the file is new
        edit(
            model / "calibration.json",
            b'{"version": 1, "heads": {}}',
            f"no calibration.json in the model's directory ({model / 'calibration.json'} added",
        )
    assert predict_main(cmd) == 0
    said = capsys.readouterr()
    assert "continuing an unfinished run after its 1 chunk(s)" in said.out + said.err
    assert out.read_bytes() == whole.read_bytes()


def test_a_model_directory_staged_again_with_new_times_continues(run, census, tmp_path, capsys):
    """A job that stages the model on a node's scratch disk (`cp -r`, new times) and is
    requeued after a kill finds its weights known by their content, and its own files
    (key.csv, config.json, calibration.json) were refused as copies with a new time: the
    first copy's time is gone with its node, so every chunk was lost to --restart. They are
    known by their whole content too: the job continues to an uninterrupted run's bytes,
    and a copy whose key.csv says otherwise is refused in one line."""
    import os
    import shutil

    from conftest import env_for_subprocess, fails, run_program

    def staged(name):  # a copy with the times of now, not the model's
        copy = tmp_path / name
        shutil.copytree(run, copy, copy_function=shutil.copyfile)
        for path in copy.iterdir():
            if path.is_file():
                os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
        return copy

    work = tmp_path / "work"
    work.mkdir()
    whole, out = tmp_path / "whole.csv", work / "out.csv"
    assert predict_main(predict_cmd(run, census, whole)) == 0
    env = env_for_subprocess()
    env[FAULT] = "1"
    first = predict_cmd(str(staged("scratch1")), census, out)
    assert run_program("predict.py", *first, env=env, check=False).returncode == 9
    capsys.readouterr()
    edited = staged("edited")
    key = pd.read_csv(edited / "key.csv", dtype=str, keep_default_na=False)
    key.assign(description="EDITED DESCRIPTION").to_csv(edited / "key.csv", index=False)
    fails(
        capsys,
        "predict",
        predict_cmd(str(edited), census, out),
        f"the model's key.csv with another content ({tmp_path / 'scratch1' / 'key.csv'}; now "
        f"{edited / 'key.csv'}",
        watch=work,
    )
    assert predict_main(predict_cmd(str(staged("scratch2")), census, out)) == 0
    said = capsys.readouterr()
    assert "continuing an unfinished run after its 1 chunk(s)" in said.out + said.err
    assert out.read_bytes() == whole.read_bytes()


def test_a_kind_that_does_not_resume_says_so_and_stale_temp_files_go(run, census, tmp_path):
    from conftest import env_for_subprocess, run_program

    out = tmp_path / "out.parquet"
    env = env_for_subprocess()
    env[FAULT] = "1"
    cut = run_program(
        "predict.py", *predict_cmd(run, census, tmp_path / "out.csv"), env=env, check=False
    )
    assert cut.returncode == 9
    stale = tmp_path / ".tmp-out.parquet.999999999"  # a killed job's, whose process is gone
    stale.write_bytes(b"PAR1")
    done = run_program("predict.py", *predict_cmd(run, census, out))
    assert (
        f"--output {out}: removed 1 temporary file(s) a killed run left\n" in done.stdout
    )  # Parquet resumes
    assert not stale.exists()
    # the CSV's parts, the same command with --embeddings: another output, refused naming it
    again = run_program(
        "predict.py",
        *predict_cmd(run, census, tmp_path / "out.csv", "--embeddings", tmp_path / "e.npy"),
        check=False,
    )
    assert again.returncode == 2
    assert f"were made with --embeddings unset (now {tmp_path / 'e.npy'})" in again.stderr


# every output a job writes, and the coding's counts: resumed to the same bytes
@pytest.fixture(scope="module")
def lookup_file(tmp_path_factory, census) -> str:
    frame = pd.read_csv(census, dtype=str, keep_default_na=False)
    titles = [t for t in frame["occ1"].value_counts().index if t.strip()][
        :3
    ]  # among the most frequent
    path = tmp_path_factory.mktemp("lookup") / "dictionary.csv"
    pd.DataFrame({"occ1": titles, "c1": ["61110", "99910", "61110"]}).to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory, toy_frame, run) -> str:
    """Rows the tiny model never trained on, labelled with its own flat codes: a target
    accuracy it reaches (the labels matter less than that a threshold is chosen; the tiny
    model's confidences lie too close together for a threshold between them)."""
    import mixer

    rows = toy_frame[toy_frame["hisco_1"].str.len() == 5].iloc[121:241].reset_index(drop=True)
    predicted = mixer.load(run, device="cpu").predict(rows["occ1"], head="flat", batch_size=16)
    labels = pd.DataFrame(
        {
            "occ1": rows["occ1"],
            "hisco_1": predicted["code_1"].fillna(""),
            "hisco_2": predicted["code_2"].fillna(""),
        }
    )
    path = tmp_path_factory.mktemp("labelled") / "labelled.csv"
    labels.to_csv(path, index=False)
    return str(path)


def every_output(folder, embeddings: str, *extra) -> list:
    return [
        "--embeddings",
        folder / embeddings,
        "--to-check",
        "15",
        folder / "check.csv",
        "--audit",
        "40",
        folder / "audit.csv",
        "--summary-plot",
        folder / "plot.png",
        *extra,
    ]


@pytest.mark.parametrize(
    "embeddings, coding, fault, said",
    [
        (
            "e.npy",
            ["--lookup", "LOOKUP", "--lookup-code-cols", "c1"],
            "2",
            "after its 2 chunk(s) (180 rows",
        ),
        (
            "e.parquet",
            [
                "--head",
                "flat",
                "--target-accuracy",
                "0.5",
                "--calibration-data",
                "LABELLED",
                "--calibration-truth-cols",
                "hisco_1",
                "hisco_2",
                "--audit-unit",
                "descriptions",
                "--audit-by",
                "hisco_2",
            ],
            "4:TERM",
            "after its 5 chunk(s) (450 rows",
        ),
    ],
)
def test_every_output_and_the_codings_counts_resume_to_the_same_bytes(
    run, census, labelled, lookup_file, tmp_path, embeddings, coding, fault, said
):
    """Issue 43, section 3: a job with every output (embeddings, a check list, an audit, a
    summary plot; a lookup's or a target's counts in the sidecar), killed after a chunk (kill
    -9, or a scheduler's signal) and run again, writes every file as an uninterrupted run does."""
    from conftest import env_for_subprocess, run_program

    coding = [{"LOOKUP": lookup_file, "LABELLED": labelled}.get(value, value) for value in coding]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    run_program(
        "predict.py",
        *predict_cmd(run, census, whole / "out.csv", *every_output(whole, embeddings, *coding)),
    )
    env = env_for_subprocess()
    env[FAULT] = fault
    killed = run_program(
        "predict.py",
        *predict_cmd(run, census, cut / "out.csv", *every_output(cut, embeddings, *coding)),
        env=env,
        check=False,
    )
    assert killed.returncode == (0 if ":" in fault else 9), killed.stderr
    # no output yet, the parts kept (and the lock file, which no job holds now)
    assert sorted(p.name for p in cut.iterdir()) == [
        ".tmp-out.csv.parts",
        ".tmp-out.csv.parts.lock",
    ]
    again = run_program(
        "predict.py",
        *predict_cmd(run, census, cut / "out.csv", *every_output(cut, embeddings, *coding)),
    )
    assert f"continuing an unfinished run {said}" in again.stdout
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(
        ["out.csv", "out.csv.provenance.json", embeddings, "check.csv", "audit.csv", "plot.png"]
    )
    assert sorted(p.name for p in cut.iterdir()) == names  # the parts gone
    for name in names:
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name
    result = json.loads((whole / "out.csv.provenance.json").read_text())["result"]
    assert result["distinct_inputs"] > 0 and ("source" in result) == ("--lookup" in coding)
    if "--target-accuracy" in coding:  # the rows coded automatically, counted over the kill
        assert result["coded"]["flat"]["auto"] == 600 - result["coded"]["flat"]["no_description"]


def test_a_job_without_output_resumes_beside_its_first_file(run, census, tmp_path):
    """--embeddings and --to-check alone: the parts beside the embeddings, the store of
    embeddings kept with each chunk (a resumed job reads earlier inputs' vectors back, never
    computes them again in other batches), the files an uninterrupted run's."""
    from conftest import env_for_subprocess, run_program

    def cmd(folder) -> list:
        return [
            "--checkpoint",
            run,
            "--input",
            census,
            "--chunk-size",
            "90",
            "--embeddings",
            folder / "e.npy",
            "--to-check",
            "15",
            folder / "check.parquet",
        ]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    run_program("predict.py", *cmd(whole))
    env = env_for_subprocess()
    env[FAULT] = "3"
    assert run_program("predict.py", *cmd(cut), env=env, check=False).returncode == 9
    assert sorted(p.name for p in cut.iterdir()) == [".tmp-e.npy.parts", ".tmp-e.npy.parts.lock"]
    again = run_program("predict.py", *cmd(cut))
    assert (
        f"--embeddings {cut / 'e.npy'}: continuing an unfinished run after its 3 chunk(s) (270 rows"
        in again.stdout
    )
    assert sorted(p.name for p in cut.iterdir()) == ["check.parquet", "e.npy"]
    for name in ("check.parquet", "e.npy"):
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name


@pytest.mark.parametrize("kind", ["text", "object", "numbers"])
@pytest.mark.parametrize("language_col", [None, "lang"])
def test_a_chunk_keyed_once_per_distinct_text_and_language_is_keyed_as_row_by_row(
    run, kind, language_col, monkeypatch
):
    """The job reads the model input of each distinct (text, language) of a chunk once and
    hands it to the rows (RowReader.keyed): the same inputs, blanks, keys, rows per key and
    first rows as reading every row, whatever the column's type, missing cells, blanks,
    languages that differ only in spaces, and the rows' order."""
    import mixer
    from mixer.prediction.predict_job import Distinct, RowReader

    model = mixer.load(run, device="cpu")
    rng = np.random.default_rng(7)
    texts = ["farmer", "Farmer ", "farmer", "", " ", "\u200b", None, "ag lab", "AG LAB", "x,y"]
    if kind == "numbers":
        texts = [61110.0, 61110.0, np.nan, 2.5, 0.0, -1.0, 61110.0, 3.0, np.nan, 7.0]
    langs = ["en", " en", "da", None, "en", "", "unk", "da ", "en", "en"]
    order = rng.permutation(200) % len(texts)
    chunk = pd.DataFrame(
        {
            "occ1": pd.Series(np.asarray(texts, dtype=object)[order]).astype(
                {"text": "str", "object": object, "numbers": float}[kind]
            ),
            "lang": pd.Series(np.asarray(langs, dtype=object)[order[::-1]], dtype="str"),
        }
    )
    reader = RowReader("occ1", language_col, "en", [])
    inputs, blank, distinct = reader.keyed(model, chunk)

    from mixer.data.tables.job_columns import blank_descriptions, text_column

    by_row = np.asarray(model.model_inputs(*reader.read(chunk)), dtype=object)
    blank_by_row = blank_descriptions(text_column(chunk, "occ1"))
    each = Distinct(by_row, blank_by_row)
    assert list(inputs) == list(by_row)
    assert list(blank) == list(blank_by_row) and blank.any()
    assert list(distinct.keys) == list(each.keys)
    assert list(distinct.row_key) == list(each.row_key)
    assert list(distinct.first) == list(each.first)
    assert list(reader.blank(chunk)) == list(blank_by_row)
    # the chunks after it: the pairs seen are remembered, up to SEEN_MOST, then read anew
    again = chunk.iloc[::-1].reset_index(drop=True)
    by_row = np.asarray(model.model_inputs(*reader.read(again)), dtype=object)
    for most in (3, 10_000):
        monkeypatch.setattr("mixer.prediction.predict_job.SEEN_MOST", most)
        inputs, blank, distinct = reader.keyed(model, again)
        assert list(inputs) == list(by_row)
        assert list(blank) == list(blank_descriptions(text_column(again, "occ1")))
        assert len(reader.seen) <= max(most, len(reader.pairs(again)[1]))


def test_texts_in_an_arrow_column_of_several_blocks_are_keyed_as_one_array():
    """A gzip'd CSV is read in blocks, so a chunk's description column can come as an
    Arrow-backed column of several blocks: the texts are remembered and found as from one."""
    import pyarrow as pa

    from mixer.prediction.predict_job import RowReader

    reader = RowReader("occ1", None, "unk", [])
    blocks = pa.chunked_array([["farmer", "smith"], ["farmer", "weaver"]])
    texts = pd.Series(blocks, dtype=pd.ArrowDtype(pa.string()))
    ids, keys = reader.numbers(texts, "unk")
    assert ids.tolist() == [-1, -1, -1, -1]
    reader.remember(keys, np.array([0, 1, 3]), np.arange(3))
    again, _ = reader.numbers(texts, "unk")
    assert again.tolist() == [0, 1, 0, 2]

"""predict.py's configuration in one place (issue 42 items 3 and 5, issue 43 section 1): the
provenance sidecar records every option that changes the file, generated from PredictConfig;
the Python API's keywords are PredictConfig's fields, checked by the flags' own checks, with
the program's defaults; which columns a job reads is decided once; messages name what the
user typed (keywords in the API, predict.py in its own hints, the input when it has no rows)."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pandas as pd
import pytest

from mixer.cli.entrypoints import predict_main
from mixer.core.errors import UserError
from mixer.core.options import flat_values, options_of
from mixer.core.programs import PredictCoding, PredictConfig
from conftest import TINY, write_scores

# every field of PredictConfig that the sidecar records; a new field must be added here or to
# provenance.UNRECORDED (with why it does not change the file), so that none is forgotten
RECORDED = {
    "input_col",
    "language",
    "language_col",
    "top_k",
    "threshold",
    "head",
    "what",
    "alternatives",
    "columns",
    "system",
    "code_descriptions",
    "target_accuracy",
    "target_confidence",
    "calibration_data",
    "calibration_truth_cols",
    "shorter_codes",
    "code_levels",
    "target_level",
    "lookup",
    "lookup_input_col",
    "lookup_code_cols",
    "precision",
    "force_precision",
    "quantize",
    "tf32",
    "tables",
    "crosswalk",
    "status",
    "relation",
    "product",
}


def sidecar(path) -> dict:
    return json.load(open(f"{path}.provenance.json"))


def test_every_field_of_the_configuration_is_recorded_or_said_why_not():
    from mixer.coding import provenance
    from mixer.prediction.sinks import default_sinks, unrecorded

    # UNRECORDED: the fields that are no output's; the outputs' own, from the sinks' declarations
    others = unrecorded(default_sinks())
    unrecorded_fields = {**provenance.UNRECORDED, **others}
    fields = {f.name for f in options_of(PredictConfig)} | {"tables"}  # every section's
    assert set(unrecorded_fields) <= fields  # no stale entry
    assert not RECORDED & set(unrecorded_fields)
    assert fields == RECORDED | set(unrecorded_fields), (
        "classify the new field: RECORDED or UNRECORDED"
    )
    assert (
        set(provenance.options_part(PredictConfig(), others)) == RECORDED
    )  # generated: each recorded field is there


# each section of predict.py's configuration and the fields it holds (issue 51, section 1)
SECTIONS = {
    "data": {"input", "input_col", "language", "language_col", "status", "relation", "product"},
    "model": {"checkpoint", "precision", "force_precision", "quantize", "tf32"},
    "outputs": {
        "output",
        "embeddings",
        "what",
        "columns",
        "system",
        "code_descriptions",
        "crosswalk",
        "to_check",
        "audit",
        "audit_margin",
        "audit_by",
        "audit_unit",
        "audit_seed",
        "summary_plot",
    },
    "coding": {
        "top_k",
        "threshold",
        "head",
        "alternatives",
        "target_accuracy",
        "target_confidence",
        "calibration_data",
        "calibration_truth_cols",
        "shorter_codes",
        "code_levels",
        "target_level",
        "lookup",
        "lookup_input_col",
        "lookup_code_cols",
        "calibrate",
    },
    "run": {"batch_size", "chunk_size", "store_memory", "restart", "distributed", "debug"},
}


def test_the_configuration_nests_by_concept():
    """PredictConfig has a section per concept (the input, the model, the outputs, the coding,
    the run), as RunConfig has for training; every option lies in one section."""
    config = PredictConfig()
    for section, names in SECTIONS.items():
        held = {f.name for f in dataclasses.fields(getattr(config, section))}
        assert held == names, section
    assert {f.name for f in dataclasses.fields(config)} == set(SECTIONS) | {"tables"}
    assert sum(map(len, SECTIONS.values())) == len(options_of(PredictConfig))


def test_a_parse_fills_the_sections_by_the_flags_own_names():
    """predict.py's flags land in their sections; read flat (the sidecar, the journal, the API's
    keywords) every field keeps its flag's name, in the flags' order, so that a journal or a
    sidecar written before the sections reads the same."""
    from mixer.cli.entrypoints import job_config, predict_parser
    from mixer.core.naming import FLAGS

    parser = predict_parser()
    argv = ["--checkpoint", "run", "--input", "in.csv", "--audit", "30", "a.csv"]
    argv += ["--audit-margin", "0.1", "--lookup-input-col", "text", "--status-col", "st"]
    argv += ["--chunk-size", "7", "--precision", "bf16", "--sep", ";"]
    job = job_config(PredictConfig, parser, parser.parse_args(argv))
    assert job.model.checkpoint == "run" and job.data.input == "in.csv"
    assert job.outputs.audit == ["30", "a.csv"] and job.outputs.audit_margin == 0.1
    assert job.coding.lookup_input_col == "text" and job.data.status == "st"
    assert job.run.chunk_size == 7 and job.model.precision == "bf16"
    assert job.table_options("input").sep == ";"
    flat = flat_values(job)
    assert list(flat) == [*PredictConfig.FLAG_ORDER, "tables"]
    assert list(flat)[:-1] == [spec.name for spec in parser.specs.values() if spec.name in flat]
    assert flat["audit_margin"] == 0.1 and flat["status"] == "st" and flat["chunk_size"] == 7
    # a message names a field of any section by its flag
    assert FLAGS("status") == "--status-col" and FLAGS("audit_margin", 0.1) == "--audit-margin 0.1"


def test_provenance_keeps_the_name_users_were_given():
    """docs/coding.md gave users `from mixer.prediction import provenance; provenance.read(path)`;
    the module moved into the coding feature (mixer.coding.provenance), and the old name reads
    sidecars as the new one does."""
    from mixer.coding import provenance as moved
    from mixer.prediction import provenance

    assert provenance.read is moved.read and provenance.UNRECORDED is moved.UNRECORDED


def test_the_sidecar_records_what_made_the_file(run_dir, common_csv, tmp_path):
    """Issue 42 item 3: --output a/out.csv and b/out.csv --input-col hisco_1 --language da
    wrote byte-identical sidecars; --what probs, --alternatives and --columns occcanine said
    rows 0."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "out.csv", tmp_path / "b" / "out.csv"
    assert predict_main(["--checkpoint", run_dir, "--input", common_csv, "--output", str(a)]) == 0
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(b),
                "--input-col",
                "hisco_1",
                "--language",
                "da",
                "--sep",
                ",",
                "--encoding",
                "latin-1",
            ]
        )
        == 0
    )
    first, second = sidecar(a), sidecar(b)
    assert first["id"] != second["id"]
    assert first["options"]["input_col"] is None and first["columns"]["input_col"] == "occ1"
    assert (
        second["options"]["input_col"] == "hisco_1" and second["columns"]["input_col"] == "hisco_1"
    )
    assert second["options"]["language"] == "da" and second["columns"]["language"] == "da"
    assert (
        second["options"]["tables"]["sep"] == ","
        and second["options"]["tables"]["encoding"] == "iso8859-1"
    )
    # the code descriptions and the calibration data by their bytes, the truth columns by name
    descriptions = tmp_path / "d.csv"
    pd.DataFrame({"code": ["99910"], "description": ["labourer"]}).to_csv(descriptions, index=False)
    c = tmp_path / "c.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                run_dir,
                "--input",
                common_csv,
                "--output",
                str(c),
                "--code-descriptions",
                str(descriptions),
            ]
        )
        == 0
    )
    recorded = sidecar(c)["options"]["code_descriptions"]
    assert recorded["name"] == "d.csv" and len(recorded["xxh3_128"]) == 32
    from mixer.coding.provenance import options_part

    labelled = options_part(
        PredictConfig(
            coding=PredictCoding(calibration_data=common_csv, calibration_truth_cols=["hisco_1"])
        ),
        {},
    )
    assert labelled["calibration_data"]["name"] == "common.csv" and labelled[
        "calibration_truth_cols"
    ] == ["hisco_1"]
    # every output shape has its sidecar, with its options and the rows written
    rows = len(pd.read_csv(common_csv))
    for flags, written in (
        (["--what", "probs"], rows),
        (["--alternatives", "3"], 3 * rows),
        (["--columns", "occcanine"], rows),
    ):
        out = tmp_path / f"shape{len(os.listdir(tmp_path))}.csv"
        assert (
            predict_main(
                ["--checkpoint", run_dir, "--input", common_csv, "--output", str(out), *flags]
            )
            == 0
        )
        made = sidecar(out)
        assert made["result"]["rows"] == written == len(pd.read_csv(out)), flags
        name = flags[0][2:]
        assert made["options"][name] == (int(flags[1]) if name == "alternatives" else flags[1])


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory, common_csv):
    """The tiny run trained twice as long: its most confident held-out rows are right, so a
    threshold can be chosen on them (the 60-step run's most confident rows may miss)."""
    run = tmp_path_factory.mktemp("learned") / "run"
    from mixer.cli.entrypoints import finetune_main

    assert (
        finetune_main(
            [
                "--dataset",
                common_csv,
                "--target-cols",
                "hisco_1",
                "hisco_2",
                "--save-path",
                str(run),
                "--share-val",
                "0.4",
                *TINY,
                "--max-steps",
                "120",
                "--batch-size",
                "16",
                "--learning-rate",
                "5e-3",
            ]
        )
        == 0
    )
    os.remove(run / "calibration.json")
    write_scores(run, chose=5)
    return str(run)


def test_the_api_chooses_the_threshold_predict_py_chooses(
    learned_run, common_csv, tmp_path, capsys
):
    """Issue 42 item 5: m.target(0.9) left the rows to code uncounted and chose another
    threshold than predict.py on the same rows. predict(target_accuracy=) counts them as
    predict.py does; target(rows_to_code=) takes the texts; a target chosen without them says so."""
    import mixer

    out = tmp_path / "out.csv"
    assert (
        predict_main(
            [
                "--checkpoint",
                learned_run,
                "--input",
                common_csv,
                "--output",
                str(out),
                "--target-accuracy",
                "0.3",
                "--target-confidence",
                "0.9",
            ]
        )
        == 0
    )
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    threshold = sidecar(out)["target"]["flat"]["threshold"]
    model = mixer.load(learned_run)
    texts = pd.read_csv(common_csv, dtype=str, keep_default_na=False)["occ1"]
    table = model.predict(texts, target_accuracy=0.3, target_confidence=0.9)
    assert table["coded"].tolist() == written["coded"].tolist()
    counted = model.target(0.3, 0.9, rows_to_code=texts)
    assert counted.threshold == threshold and counted.rows_to_code == len(texts)
    assert (
        model.target(target_accuracy=0.3, target_confidence=0.9, rows_to_code=len(texts)) == counted
    )
    assert (
        model.target(accuracy=0.3, confidence=0.9, rows_to_code=len(texts)) == counted
    )  # earlier names
    capsys.readouterr()
    model.predict(texts, target=counted)
    assert "rows_to_code" not in capsys.readouterr().err
    uncounted = model.target(0.3, 0.9)
    model.predict(texts, target=uncounted)
    model.predict(texts, target=uncounted)
    assert capsys.readouterr().err.count("note: target= was chosen without rows_to_code") == 1


def test_the_api_takes_predict_py_options_by_their_names_and_says_them(run_dir):
    """The keywords are PredictConfig's fields, checked by the flags' own checks; the API's
    errors name its keywords, never a command-line flag."""
    import mixer

    model = mixer.load(run_dir)
    for call, message in (
        (lambda: model.predict(["farmer"], top_k=0), "top_k=0: must be 1 or more"),
        (
            lambda: model.predict(["farmer"], batch_size=True),
            "batch_size=True: expected a whole number",
        ),
        (lambda: model.predict(["farmer"], threshold=2), "threshold=2: must be between 0 and 1"),
        (lambda: model.predict(["farmer"], head="beam"), "head='beam': invalid choice"),
        (lambda: model.predict(["farmer"], what="odds"), "what='odds': invalid choice"),
        (lambda: model.target(1.5), "target_accuracy=1.5: must be strictly between 0 and 1"),
        (lambda: model.target(0.5, shorter_codes=True), "shorter_codes=True: .* code_levels="),
        (lambda: model.target(0.5, head="full"), "target_accuracy=: the full head .* head='flat'"),
        (lambda: model.predict(["farmer"], shorter_codes=True), "works with target_accuracy="),
        (
            lambda: model.predict(["farmer"], lang="en", language="en"),
            "lang= and language= both given",
        ),
        (lambda: model.predict(["farmer"], topk=2), r"topk=: not a keyword of predict\(\)"),
        (lambda: model.predict(["farmer"], margin=0.1), r"margin=: not a keyword of predict\(\)"),
        (
            lambda: model.audit(pd.DataFrame({"occ1": ["farmer"] * 5}), 2, audit_unit="words"),
            "audit_unit='words': invalid choice",
        ),
        (
            lambda: model.audit(pd.DataFrame({"occ1": ["farmer"] * 5})),
            r"^audit\(\): give the number of rows \(n=\) or .* \(audit_margin=0.03\), one of them$",
        ),
        (
            lambda: model.audit(pd.DataFrame({"occ1": ["farmer"] * 5}), audit_margin=0.7),
            "^audit_margin=0.7: a half-width between 0 and 0.5",
        ),
    ):
        with pytest.raises(UserError, match=message) as raised:
            call()
        assert not re.search(r"--[a-z]", str(raised.value)), str(raised.value)
    # the program's defaults: what predict.py writes with no option
    assert model.predict(["farmer"], lang="unk").equals(model.predict(["farmer"], language=None))
    assert model.audit(pd.DataFrame({"occ1": ["farmer", "smith", "miner"]}), 2, seed=3).equals(
        model.audit(pd.DataFrame({"occ1": ["farmer", "smith", "miner"]}), 2, audit_seed=3)
    )


def test_a_target_of_the_model_s_own_top_k_and_threshold_is_accepted(run_dir):
    """predict(top_k=<the model's>, target=target()) was refused as 'another model or settings'."""
    import mixer

    model = mixer.load(run_dir)
    own = model._predictor.default_top_k()
    target = model.target(0.3, 0.9)
    model.predict(["farmer"], top_k=own, target=target)
    model.predict(["farmer"], threshold=0.5, target=target)  # the model's own threshold
    model.predict(["farmer"], target=model.target(0.3, 0.9, top_k=own))
    with pytest.raises(UserError, match="by another model or settings"):
        model.predict(["farmer"], top_k=1, target=target)


def test_the_columns_a_job_reads_are_decided_in_one_place():
    from mixer.data.tables.job_columns import job_columns

    config = {
        "input_col": "occ1",
        "language_col": "lang",
        "language": "unk",
        "context_cols": ["relation"],
    }
    assert job_columns(config) == ("occ1", "lang", "unk", ["relation"])
    assert job_columns(config, "title", "da") == ("title", None, "da", ["relation"])
    assert job_columns(config, language="") == ("occ1", "lang", "unk", ["relation"])
    assert job_columns({"input_col": "occ1"}, language_col="l") == ("occ1", "l", "unk", [])
    # nowhere else: the rule's own expression is written once
    root = os.path.join(os.path.dirname(__file__), "..", "mixer")
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                text = open(os.path.join(folder, name), encoding="utf-8").read()
                if re.search(
                    r"None if \w*(lang|language)\w* (is not None )?else config\.get\(\"language_col\"\)",
                    text,
                ):
                    found.append(name)
    assert found == ["job_columns.py"]


def test_predict_py_names_itself_and_its_input(run_dir, common_csv, tmp_path, monkeypatch):
    """--distributed without torchrun named finetune.py; a header-only input was '(the
    output): the input has no rows', after a threshold was chosen for no rows."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out.csv"
    with pytest.raises(UserError, match="torchrun --nproc_per_node=N predict.py --distributed"):
        predict_main(
            ["--checkpoint", run_dir, "--input", common_csv, "--output", str(out), "--distributed"]
        )
    empty = tmp_path / "empty.csv"
    empty.write_text("occ1,hisco_1\n")
    for extra in ([], ["--target-accuracy", "0.5", "--target-confidence", "0.9"]):
        with pytest.raises(
            UserError, match=f"^--input {re.escape(str(empty))}: no rows below its header"
        ):
            predict_main(
                ["--checkpoint", run_dir, "--input", str(empty), "--output", str(out), *extra]
            )
    assert sorted(os.listdir(tmp_path)) == ["empty.csv"]


def test_a_launched_predict_py_without_distributed_says_predicting(monkeypatch):
    from mixer.core.config import DistConfig
    from mixer.distributed import world

    said = []
    monkeypatch.setattr(world, "_store", lambda *a: None)
    monkeypatch.setattr(world, "_STARTED", world._STARTED)
    monkeypatch.setattr(world.dist, "init_process_group", lambda **kw: None)
    env = {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": "x",
    }
    world.setup(DistConfig(distributed=False), log=said.append, env=env, program="predict.py")
    world.setup(DistConfig(distributed=False), log=said.append, env=env)
    assert "predicting with --distributed" in said[0] and "training with --distributed" in said[1]


def test_the_api_keywords_are_the_configuration_s_fields_with_its_defaults():
    """A keyword of predict, target or audit is a field of PredictConfig by its name, and
    restates no default (None: the field's), so the API and predict.py cannot drift."""
    import inspect

    from mixer.prediction.api import RENAMED, Model

    fields = {f.name for f in options_of(PredictConfig)}  # every section's
    own = {
        "self",
        "texts",
        "context",
        "target",
        "rows_to_code",
        "options",
        "frame",
        "n",
        "path",
        "renamed",
    }
    for method in (Model.predict, Model.target, Model.audit):
        for name, parameter in inspect.signature(method).parameters.items():
            if name in own:
                continue
            assert name in fields, f"{method.__name__}({name}=): not a field of PredictConfig"
            assert parameter.default is None, f"{method.__name__}({name}=): restates a default"
    assert set(RENAMED.values()) <= fields


@pytest.mark.parametrize(
    "said, flag, keyword",
    [
        (lambda n: n("top_k", 0), "--top-k 0", "top_k=0"),
        (lambda n: f"use {n('head', 'flat')} or seq2seq", "use --head flat", "use head='flat'"),
        (
            lambda n: (
                f"pass {n.before('calibration_data')}FILE {n.before('calibration_truth_cols')}COL"
            ),
            "pass --calibration-data FILE --calibration-truth-cols COL",
            "pass calibration_data=FILE calibration_truth_cols=COL",
        ),
        (
            lambda n: n.with_own(lookup_code_cols="code_cols")("lookup_code_cols"),
            "--lookup-code-cols",
            "code_cols=",
        ),
        (lambda n: n("audit_by", "decade"), "--audit-by decade", "audit_by='decade'"),
        (lambda n: n.switch("shorter_codes"), "--shorter-codes", "shorter_codes=True"),
        (lambda n: n("lookup"), "--lookup", "lookup="),
    ],
)
def test_a_check_names_an_option_as_its_caller_typed_it(said, flag, keyword):
    """A check that predict.py and the API both reach builds its message with the caller's
    names: the flag, or the keyword (mixer.core.naming); nothing rewrites it afterwards."""
    from mixer.core.naming import FLAGS, KEYWORDS

    assert said(FLAGS).startswith(flag) and said(KEYWORDS).startswith(keyword)
    import mixer.prediction.api as api

    assert not hasattr(api, "keyword_message")  # the rewriting of messages is gone

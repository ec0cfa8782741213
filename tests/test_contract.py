"""The contract a reshaping of the options keeps (issue 36): every program's flags as
they are (tests/contract/parsers.json) and the args.yaml of every layout mixer has written
(tests/contract/args/), each still read by --config and by a run directory's reader."""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "contract"))

import snapshot  # noqa: E402

from mixer.cli import entrypoints, parsing  # noqa: E402
from mixer.core.config import RunConfig, config_for_file  # noqa: E402

LAYOUTS = sorted(glob.glob(os.path.join(HERE, "contract", "args", "*.yaml")))


def test_every_program_keeps_its_flags():
    with open(snapshot.SNAPSHOT) as f:
        committed = json.load(f)
    changes = snapshot.differences(committed, snapshot.snapshot())
    assert not changes, (
        "the programs' flags differ from tests/contract/parsers.json; if that is "
        "meant, run `python tests/contract/snapshot.py --write` and say why in the "
        "commit:\n" + "\n".join(changes)
    )


def test_the_snapshot_sees_a_changed_default():
    committed = snapshot.snapshot()
    changed = json.loads(json.dumps(committed))
    row = next(r for r in changed["finetune.py"] if r["dest"] == "batch_size")
    row["default"] = 65
    assert snapshot.differences(committed, changed) == [
        "finetune.py: changed batch_size --batch-size: {'default': (64, 65)}"
    ]


def test_there_is_a_layout_for_every_version_of_the_config_module():
    assert len(LAYOUTS) >= 20


@pytest.mark.parametrize("path", LAYOUTS, ids=os.path.basename)
def test_an_old_args_yaml_is_read_by_a_run_and_by_config(path, tmp_path):
    with open(path) as f:
        old = yaml.safe_load(f)
    config = RunConfig.from_dict(old)
    now = config_for_file(config)
    for section, values in old.items():
        if not isinstance(values, dict):
            assert now[section] == values
            continue
        for name, value in values.items():
            if name in now[section]:
                assert now[section][name] == value, (section, name)
    parser = (
        entrypoints.train_mixer_parser
        if old["data"].get("train_data")
        else entrypoints.finetune_parser
    )()
    namespace = parsing.parse_args(
        parser,
        [
            "--config",
            path,
            "--dataset",
            "x.csv",
            "--target-cols",
            "c",
            "--save-path",
            str(tmp_path / "r"),
        ],
    )
    rebuilt = parsing.build_config(namespace)
    assert rebuilt.train.batch_size == old["train"]["batch_size"]
    assert rebuilt.model.encoder == old["model"]["encoder"]

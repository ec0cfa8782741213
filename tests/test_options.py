"""Issue 36, section 1: every option is defined once, as a field of its program's
configuration (mixer.core.options.option), and its flag is generated from it
(mixer.cli.options). Read from the source with ast where it can be."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "contract"))

import snapshot  # noqa: E402

from mixer.cli import entrypoints, export_occcanine  # noqa: E402
from mixer.cli.options import CHECKS, add_flags  # noqa: E402
from mixer.core import config, programs  # noqa: E402
from mixer.core.options import options_of  # noqa: E402

GENERATOR = os.path.join(ROOT, "mixer", "cli", "options.py")
CLASSES = (
    config.DataConfig,
    config.TargetNaming,
    config.RunConfig,
    config.ModelConfig,
    config.TrainConfig,
    config.DistConfig,
    config.LogConfig,
    programs.PredictConfig,
    programs.EvaluateConfig,
    programs.ExportConfig,
    programs.PlotConfig,
)


def mixer_sources() -> list:
    found = []
    for path, dirs, files in os.walk(os.path.join(ROOT, "mixer")):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
        found += [os.path.join(path, f) for f in files if f.endswith(".py")]
    return sorted(found)


def parse(path: str) -> ast.AST:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read())


def test_no_flag_is_defined_outside_the_generator():
    outside = []
    for path in mixer_sources():
        if path == GENERATOR:
            continue
        for node in ast.walk(parse(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_argument", "add_mutually_exclusive_group")
            ):
                outside.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not outside, (
        "flags are made by mixer/cli/options.py from configuration fields: " + ", ".join(outside)
    )


def test_nothing_past_the_command_line_layer_imports_argparse():
    found = []
    for path in mixer_sources():
        if os.sep + os.path.join("mixer", "cli") + os.sep in path:
            continue
        for node in ast.walk(parse(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "argparse" in names:
                found.append(os.path.relpath(path, ROOT))
    assert not found


def test_the_prediction_jobs_read_a_configuration_not_a_namespace():
    for path in mixer_sources():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert "getattr(args" not in text, path


def every_parser() -> dict:
    found = snapshot.parsers()
    for name, classes in (("export", [programs.ExportConfig]), ("plot", [programs.PlotConfig])):
        parser = argparse.ArgumentParser(prog=name)
        add_flags(parser, classes)
        found[name] = parser
    return found


def written_default(text: str, default) -> bool:
    """Whether a help text spells out this default after the word 'default'."""
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
    return bool(re.search(r"default\b[^;)]*?(?<![\w.])" + re.escape(shown) + r"(?![\w.])", text))


@pytest.mark.parametrize("program", sorted(every_parser()))
def test_no_help_text_writes_a_default_out(program):
    """'%(default)s' is the field's own default; a number typed into the help is not."""
    for action in every_parser()[program]._actions:
        if not action.help or action.default in (None, False, True, [], "", argparse.SUPPRESS):
            continue
        text = action.help
        if isinstance(
            action.default, (list, tuple)
        ):  # the generator's own, a list as typed (help_text)
            text = text.removesuffix(" (default: %s)" % " ".join(map(str, action.default)))
        assert not written_default(text, action.default), (
            program,
            action.option_strings,
            action.help,
        )


def test_the_check_for_a_written_default_sees_one():
    assert written_default("rows per batch (default: 64)", 64)
    assert written_default("heads (default: flat)", ["flat"])
    assert not written_default("rows per batch (default: %(default)s)", 64)
    assert not written_default("codes (default: 640 rows)", 64)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_field_help_is_one_short_line_without_a_default(cls):
    for f in options_of(cls):
        text = f.metadata["help"]
        assert "\n" not in text and len(text) <= 110, (f.name, text)
        assert "default" not in text, (f.name, "the generator adds the default: " + text)
        assert f.metadata["type"] in (None, *CHECKS), f.name


def test_the_program_differences_name_real_fields_and_programs():
    names = {f.name for cls in CLASSES[:7] for f in dataclasses.fields(cls)}
    for name, per in config.PROGRAM_DIFFERENCES.items():
        assert name in names, name
        assert set(per) <= set(config.TRAINING_PROGRAMS), name


def test_the_code_systems_offered_are_the_formatters():
    from mixer.data.labels.formatter import FORMATTERS

    assert tuple(FORMATTERS) == config.FORMATTER_NAMES


def test_the_training_programs_differ_only_where_the_table_says():
    finetune, train = (entrypoints.finetune_parser(), entrypoints.train_mixer_parser())
    rows = {p.prog: {a.dest: a for a in p._actions} for p in (finetune, train)}
    differing = {
        config.TABLE_ROLES[r][1].replace("-", "_") + o
        for r in ("val_data",)
        for o in config.READ_OPTIONS
    }
    for dest in set(rows[finetune.prog]) ^ set(rows[train.prog]):
        assert dest in config.PROGRAM_DIFFERENCES or dest in differing, dest


def test_a_small_program_is_generated_too(tmp_path, capsys):
    with pytest.raises(SystemExit):
        export_occcanine.main(["--help"])
    assert "where to write the hub layout" in capsys.readouterr().out


def test_a_list_default_is_shown_as_its_flag_takes_it():
    """--head's default is a list: --help shows it as typed on the command line ('flat'),
    as before issue 36, not as Python writes a list ("['flat']")."""
    shown = entrypoints.predict_parser().format_help()
    assert "(default: flat)" in re.sub(r"\s+", " ", shown)
    assert "['" not in shown

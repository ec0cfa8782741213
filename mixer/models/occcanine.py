"""OccCANINE's published models: read into mixer's model, and written back.

OccCANINE (github.com/christianvedels/OccCANINE) publishes CANINE-s models
with a flat head over the pooler output and a seq2seq decoder, for HISCO and
other code systems. They come as:

- a hub directory: config.json (its `model_domain`, `num_classes`, ...),
  model.safetensors, and for systems other than HISCO key.json (code -> flat
  index) and possibly chars.json (the decoder's symbols).
- a training checkpoint (*.bin / *.pt written by torch.save): a dict with
  `model` (the state dict) and possibly `key` and `chars`, else a key.csv
  beside it (columns system_code, code).
- a hub id such as Christianvedel/OccCANINE_s2s_mix, fetched with
  huggingface_hub (its cache, HF_HUB_OFFLINE).

This module is the adapter between that layout and mixer's: a table of tensor
names (`NAME_MAP`) and the few facts around it (the CANINE configuration from
the tensors' shapes, the key, the decoder's symbols). The model itself
(mixer.models.model, family "occcanine") does not know where its weights came from.
Nothing here unpickles code: safetensors, or torch.load(weights_only=True).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from mixer.core.errors import UserError, first_line
from mixer.data.labels.formatter import OCCCANINE_HISCO_SYMBOLS, CodeFormatter
from mixer.data.labels.normalise import hisco_key
from mixer.data.inputs.tokens import OCCCANINE_MAX_LEN
from mixer.models.family import OCCCANINE

HUB_MODELS = (
    "Christianvedel/OccCANINE_s2s_mix",
    "Christianvedel/OccCANINE_OCC1950",
    "Christianvedel/OccCANINE_ISCO68",
    "Christianvedel/OccCANINE_OCCICEM",
)
# OccCANINE's flat thresholds per language (histocc/prediction_assets.py); other languages 0.31
LANGUAGE_THRESHOLDS = {
    "unk": 0.31,
    "ca": 0.3,
    "da": 0.24,
    "ge": 0.21,
    "en": 0.26,
    "es": 0.3,
    "fr": 0.21,
    "gr": 0.19,
    "is": 0.17,
    "it": 0.2,
    "nl": 0.22,
    "no": 0.34,
    "pt": 0.27,
    "se": 0.26,
}
DEFAULT_THRESHOLD = 0.31
MODEL_DOMAIN = "Multilingual_CANINE"
MAX_INPUT_LEN = OCCCANINE_MAX_LEN  # OccCANINE pads and cuts every input to 128 characters
DECODER_LAYERS, DECODER_HEADS = OCCCANINE.decoder_layers, OCCCANINE.decoder_heads
GENERAL_MAX_CODES = 4  # OccCANINE's default target columns for other systems: <system>_1 .. _4
POSITIONS = "decoder.positional_encoding.pos_embedding"

# OccCANINE's tensor names -> mixer's (the reverse is the same table read backwards)
NAME_MAP = [
    (r"encoder\.(.+)", r"encoder.\1"),
    (r"linear_decoder\.(weight|bias)", r"flat_head.\1"),
    (r"decoder\.token_emb\.embedding\.weight", r"decoder.embed.weight"),
    (r"decoder\.decoder\.layers\.(\d+)\.(.+)", r"decoder.layers.layers.\1.\2"),
    (r"decoder\.head\.(weight|bias)", r"decoder.out.\1"),
]
REVERSE_MAP = [
    (r"encoder\.(.+)", r"encoder.\1"),
    (r"flat_head\.(weight|bias)", r"linear_decoder.\1"),
    (r"decoder\.embed\.weight", r"decoder.token_emb.embedding.weight"),
    (r"decoder\.layers\.layers\.(\d+)\.(.+)", r"decoder.decoder.layers.\1.\2"),
    (r"decoder\.out\.(weight|bias)", r"decoder.head.\1"),
]


def rename(name: str, table) -> Optional[str]:
    for pattern, replacement in table:
        if re.fullmatch(pattern, name):
            return re.sub(f"^{pattern}$", replacement, name)
    return None


def system_name(predictor, system) -> str:
    """OccCANINE names its columns by the code system: hisco_1, hisco_<code>, ... (its
    training files' target columns and its outputs' columns alike)."""
    if system:
        return str(system)
    kind = predictor.formatter.kind
    return kind if kind != "general" else "code"


@dataclass
class OccSource:
    """An OccCANINE model as read, in OccCANINE's tensor names."""

    origin: str  # what the user passed
    kind: str  # "hub directory" | "training checkpoint"
    path: str  # the directory or file read
    state: dict
    key: list  # codes by flat index
    system: str  # "hisco" | "general"
    chars: Optional[list] = None
    use_within_block_sep: bool = False
    max_num_codes: int = 5
    config: dict = field(default_factory=dict)  # config.json, when there is one

    @property
    def has_heads(self) -> bool:
        return "linear_decoder.weight" in self.state and "decoder.head.weight" in self.state


# ------------------------------------------------------------------ where it is
def is_hub_directory(path: str) -> bool:
    config = os.path.join(path, "config.json")
    if not (os.path.isdir(path) and os.path.exists(config)):
        return False
    try:
        with open(config, encoding="utf-8") as handle:
            return "model_domain" in json.load(handle)
    except (OSError, ValueError):
        return False


def is_occcanine_checkpoint(path: str) -> bool:
    """A torch.save file whose model tensors have OccCANINE's names."""
    if not os.path.isfile(path) or path.endswith(".safetensors"):
        return False
    state = _load_checkpoint(path, "--checkpoint")
    model = state.get("model", state) if isinstance(state, dict) else {}
    return isinstance(model, dict) and any(
        k.startswith(("linear_decoder.", "decoder.token_emb.", "encoder.char_embeddings."))
        for k in model
    )


# ------------------------------------------------------------------ reading
def read(source: str, source_flag: str = "--checkpoint", log=None) -> OccSource:
    """An OccCANINE model from a hub directory, a training checkpoint or a hub id
    (mixer.models.hub: only a name that cannot be a local path)."""
    from mixer.models import hub

    hub.check_local(source, source_flag)
    path = hub.fetch(source, source_flag, log) if hub.is_hub_id(source) else source
    if os.path.isdir(path):
        if not is_hub_directory(path):
            raise UserError(
                f"{source_flag} {source}: not OccCANINE's hub layout (config.json with "
                "model_domain) nor a mixer run directory"
            )
        found = _read_hub_directory(source, path, source_flag)
    else:
        found = _read_checkpoint(source, path, source_flag)
    _check_architecture(found, source_flag)
    return found


def _read_hub_directory(origin: str, path: str, source_flag: str) -> OccSource:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    if config.get("model_domain") != MODEL_DOMAIN:
        raise UserError(
            f"{source_flag} {origin}: model_domain {config.get('model_domain')!r}; only "
            f"{MODEL_DOMAIN} (CANINE) models can be read"
        )
    weights = os.path.join(path, "model.safetensors")
    if not os.path.exists(weights):
        raise UserError(f"{source_flag} {origin}: no model.safetensors beside its config.json")
    try:
        state = load_file(weights)
    except (SafetensorError, OSError) as exc:
        raise UserError(
            f"{source_flag} {origin}: model.safetensors does not load ({str(exc)[:120]})"
        )
    key = chars = None
    key_path, chars_path = os.path.join(path, "key.json"), os.path.join(path, "chars.json")
    if os.path.exists(key_path):
        with open(key_path, encoding="utf-8") as handle:
            key = json.load(handle)
    if os.path.exists(chars_path):
        with open(chars_path, encoding="utf-8") as handle:
            chars = json.load(handle)
    return _source(origin, "hub directory", path, state, key, chars, config, source_flag)


def _load_checkpoint(path: str, source_flag: str):
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UserError(
            f"{source_flag} {path}: refused to load: it holds objects other than tensors "
            f"and plain values, so loading it could run code "
            f"({first_line(exc, 120)}); re-save it with only tensors and plain values"
        )
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise UserError(f"{source_flag} {path}: not a complete checkpoint ({first_line(exc, 120)})")


def _read_checkpoint(origin: str, path: str, source_flag: str) -> OccSource:
    loaded = _load_checkpoint(path, source_flag)
    if not isinstance(loaded, dict):
        raise UserError(f"{source_flag} {origin}: not a checkpoint (a dict with 'model')")
    state = loaded.get("model", loaded)
    key, chars = loaded.get("key"), loaded.get("chars")
    if key is None:
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), "key.csv")
        if os.path.exists(beside):
            import pandas as pd

            table = pd.read_csv(beside, dtype={"system_code": str}, keep_default_na=False)
            if not {"system_code", "code"} <= set(table.columns):
                raise UserError(
                    f"{source_flag} {origin}: {beside} needs columns system_code and code"
                )
            key = dict(zip(table["system_code"], table["code"].astype(int)))
    return _source(origin, "training checkpoint", path, state, key, chars, {}, source_flag)


def _source(origin, kind, path, state, key, chars, config, source_flag) -> OccSource:
    bad = [k for k in state if rename(k, NAME_MAP) is None and k != POSITIONS]
    if bad:
        raise UserError(
            f"{source_flag} {origin}: tensor {bad[0]!r} is not part of OccCANINE's mixer "
            "model (only its CANINE + flat head + decoder models are read; the older "
            "flat-only and seq2seq-only models are not)"
        )
    flat_rows = (
        state["linear_decoder.weight"].shape[0] if "linear_decoder.weight" in state else None
    )
    vocab = (
        state["decoder.token_emb.embedding.weight"].shape[0]
        if "decoder.token_emb.embedding.weight" in state
        else None
    )
    if key is None:
        hisco = hisco_key()
        if flat_rows not in (None, len(hisco)) or vocab not in (
            None,
            len(OCCCANINE_HISCO_SYMBOLS) + 6,
        ):
            raise UserError(
                f"{source_flag} {origin}: no key (key.json, a 'key' in the checkpoint, or "
                f"key.csv beside it) and the heads ({flat_rows} codes, {vocab} decoder "
                "tokens) are not HISCO's; put the key beside it"
            )
        return OccSource(
            origin, kind, path, state, list(hisco["code"]), "hisco", None, False, 5, config
        )
    codes = _key_list(key, origin, source_flag)
    within = any("," in c for c in codes)
    block = max(len(c.split(",")) if within else len(c) for c in codes)
    if not within:  # OccCANINE zero-fills shorter codes to the longest (prediction_assets.py)
        codes = [c.zfill(block) for c in codes]
    num_classes = config.get("num_classes")
    max_codes = (len(num_classes) - 2) // block if num_classes else GENERAL_MAX_CODES
    return OccSource(origin, kind, path, state, codes, "general", chars, within, max_codes, config)


def _key_list(key, origin, source_flag) -> list:
    """code -> index (key.json / a checkpoint's key) as codes by index."""
    try:
        pairs = sorted((int(index), str(code)) for code, index in key.items())
    except (AttributeError, TypeError, ValueError):
        raise UserError(f"{source_flag} {origin}: its key is not a mapping of code -> index")
    indices = [i for i, _ in pairs]
    if indices != list(range(len(indices))):
        raise UserError(
            f"{source_flag} {origin}: its key's indices are not 0 .. {len(indices) - 1}"
        )
    return [code for _, code in pairs]


# ------------------------------------------------------------------ the architecture
def canine_config(state: dict, overrides: Optional[dict] = None):
    """The CANINE configuration the encoder tensors were made with: read from their
    shapes (CANINE-s when they are its shapes); heads are not in the shapes, and are
    hidden size / 64 as in CANINE-s unless the source says otherwise."""
    from transformers import CanineConfig

    def shape(name):
        tensor = state.get(f"encoder.{name}")
        if tensor is None:
            raise UserError(f"the checkpoint lacks encoder.{name} (is it an OccCANINE model?)")
        return tuple(tensor.shape)

    hidden = shape("char_embeddings.LayerNorm.weight")[0]
    hashes = sorted(
        k
        for k in state
        if re.fullmatch(r"encoder\.char_embeddings\.HashBucketCodepointEmbedder_\d+\.weight", k)
    )
    layers = {
        int(m.group(1)) for k in state if (m := re.match(r"encoder\.encoder\.layer\.(\d+)\.", k))
    }
    values = dict(
        hidden_size=hidden,
        num_hidden_layers=len(layers),
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=shape("encoder.layer.0.intermediate.dense.weight")[0],
        num_hash_functions=len(hashes),
        num_hash_buckets=shape(hashes[0].split("encoder.", 1)[1])[0],
        downsampling_rate=shape("chars_to_molecules.conv.weight")[2],
        upsampling_kernel_size=shape("projection.conv.weight")[2],
        type_vocab_size=shape("char_embeddings.token_type_embeddings.weight")[0],
    )
    values.update(overrides or {})
    return CanineConfig(**values)


def formatter_of(source: OccSource) -> CodeFormatter:
    """The code layout of the source's decoder."""
    if source.system == "hisco":
        return CodeFormatter(
            kind="hisco",
            block_size=5,
            max_num_codes=5,
            tokens="occcanine",
            alphabet=list(OCCCANINE_HISCO_SYMBOLS),
            allow_short=True,
        )
    block = max(len(c.split(",")) if source.use_within_block_sep else len(c) for c in source.key)
    return CodeFormatter(
        kind="general",
        block_size=block,
        max_num_codes=source.max_num_codes,
        use_within_block_sep=source.use_within_block_sep,
        tokens="occcanine",
        alphabet=[str(c) for c in (source.chars or default_chars())],
        allow_short=True,
    )


def default_chars() -> list:
    """OccCANINE's general-purpose symbols when a model has no chars.json."""
    import string

    chars = (
        [str(i) for i in range(-999, 1000)] + list(string.ascii_letters) + list(string.punctuation)
    )
    return [c for c in chars if c not in ("&", ",")]


def heads_config(source: OccSource, formatter: CodeFormatter, hidden: int, dropout: float):
    from mixer.models.model import HeadsConfig

    state = source.state
    ff = (
        state["decoder.decoder.layers.0.linear1.weight"].shape[0]
        if "decoder.decoder.layers.0.linear1.weight" in state
        else int(source.config.get("decoder_dim_feedforward") or hidden)
    )
    return HeadsConfig(
        num_labels=len(source.key),
        vocab_size=formatter.vocab_size,
        target_len=formatter.target_len,
        decoder_dim=hidden,
        decoder_layers=DECODER_LAYERS,
        decoder_heads=DECODER_HEADS,
        dropout=dropout,
        family=OCCCANINE.name,
        bos_id=formatter.bos_id,
        decoder_ff=ff,
        max_positions=MAX_INPUT_LEN,
        decoder_reads_padding=True,
    )  # as OccCANINE's code runs it


def _check_architecture(source: OccSource, source_flag: str) -> None:
    state = source.state
    if not source.has_heads:
        return  # an encoder alone (e.g. OCCC-PST2's converted checkpoints): --only-encoder
    rows = state["linear_decoder.weight"].shape[0]
    if rows != len(source.key):
        raise UserError(
            f"{source_flag} {source.origin}: its key has {len(source.key)} codes but its flat "
            f"head has {rows} rows; the key does not belong to these weights"
        )
    vocab = state["decoder.token_emb.embedding.weight"].shape[0]
    expected = formatter_of(source).vocab_size
    if vocab != expected:
        raise UserError(
            f"{source_flag} {source.origin}: its decoder has {vocab} tokens, but "
            f"{'HISCO' if source.system == 'hisco' else 'its chars.json / key'} gives "
            f"{expected}; pass the chars.json it was trained with"
        )
    layers = {
        int(m.group(1)) for k in state if (m := re.match(r"decoder\.decoder\.layers\.(\d+)\.", k))
    }
    if layers != set(range(DECODER_LAYERS)):
        raise UserError(
            f"{source_flag} {source.origin}: its decoder has {len(layers)} layers; "
            f"OccCANINE's has {DECODER_LAYERS}"
        )


def to_mixer_state(
    source: OccSource,
    model_state: dict,
    only_encoder: bool = False,
    flat_rows_may_differ: bool = False,
) -> dict:
    """The source's tensors under mixer's names, checked against mixer's model
    (`model_state`): every tensor present, every shape the same (the flat head's rows
    may differ when the caller matches them by code)."""
    import torch

    from mixer.models.model import sinusoidal_positions

    out = {}
    for name, tensor in source.state.items():
        if name == POSITIONS:
            table = sinusoidal_positions(tensor.shape[0], tensor.shape[-1]).unsqueeze(1)
            if tensor.shape != table.shape or not torch.allclose(tensor.float(), table, atol=1e-5):
                raise UserError(
                    f"{source.origin}: its {POSITIONS} is not the sinusoidal table of "
                    "OccCANINE's decoder"
                )
            continue
        mixer_name = rename(name, NAME_MAP)
        if only_encoder and not mixer_name.startswith("encoder."):
            continue
        out[mixer_name] = tensor
    wanted = {k: v for k, v in model_state.items() if not only_encoder or k.startswith("encoder.")}
    missing = [k for k in wanted if k not in out]
    if missing:
        hint = " (it holds an encoder only: pass --only-encoder)" if not source.has_heads else ""
        raise UserError(
            f"{source.origin} lacks {len(missing)} tensor(s) the model needs, e.g. "
            f"{rename(missing[0], REVERSE_MAP) or missing[0]}{hint}"
        )
    differ = [
        f"{rename(k, REVERSE_MAP)} {tuple(v.shape)} vs {tuple(wanted[k].shape)}"
        for k, v in out.items()
        if k in wanted
        and tuple(v.shape) != tuple(wanted[k].shape)
        and not (flat_rows_may_differ and k.startswith("flat_head."))
    ]
    if differ:
        raise UserError(
            f"{source.origin}: shapes do not fit the architecture its tensors "
            f"declare ({'; '.join(differ[:3])})"
        )
    return {k: v for k, v in out.items() if k in wanted}


# ------------------------------------------------------------------ writing
def to_occcanine_state(model_state: dict, hidden: int) -> dict:
    """mixer's tensors of an occcanine-family model under OccCANINE's names."""
    from mixer.models.model import sinusoidal_positions

    out = {}
    for name, tensor in model_state.items():
        occ = rename(name, REVERSE_MAP)
        if occ is None:
            raise UserError(f"tensor {name} has no place in OccCANINE's layout")
        out[occ] = tensor.detach().cpu().contiguous()
    out[POSITIONS] = sinusoidal_positions(MAX_INPUT_LEN, hidden).unsqueeze(1).contiguous()
    return out


def hub_config(formatter: CodeFormatter, num_labels: int, feed_forward: int, hidden: int) -> dict:
    """config.json as OccCANINE's Seq2SeqMixerOccCANINE_hub reads it."""
    num_classes = [formatter.vocab_size - 1] * (formatter.target_len + 1)  # BOS + blocks + EOS
    config = {
        "model_domain": MODEL_DOMAIN,
        "model_type": "seq2seq_mixer",
        "n_classes": num_labels - 1,
        "num_classes_flat": num_labels,
        "num_classes": num_classes,
        "dropout_rate": 0,
    }
    if feed_forward != hidden:
        config["decoder_dim_feedforward"] = feed_forward
    return config

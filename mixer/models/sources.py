"""Where a model comes from: a fresh encoder (--encoder), an earlier run of this
tool, or one of OccCANINE's models (mixer.models.occcanine); for training
(--initial-checkpoint) and for prediction (--checkpoint, mixer.load) alike.

`resolve_start` says, before any model exists, what a training run starts from. That is its
model family, how rows become its input (the input recipe), and, when
the whole model is reused, the code layout and key the data must be prepared
with. `build_model` then makes the model and loads the starting weights. The
flat head's rows are matched by code: a key that gains codes keeps every known
code's row and starts new rows for the new codes.

Torch is imported only where weights are read, so that describing a fresh
encoder's run (--prepare-only) stays light.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Optional

from mixer.core.config import RunConfig
from mixer.core.errors import UserError
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.inputs.tokens import DESCRIPTION_WHOLE, InputRecipe
from mixer.models.family import family

MODEL_FILE, CONFIG_FILE = "model.safetensors", "config.json"
BEST_DIR = "best"  # a run's best model (--keep-best): a model directory (mixer.models.model_dir)
OCCCANINE_RECIPE = dict(language="literal", lowercase=True, ascii=True, strip=False)


def run_dir_of(path: str) -> str:
    """The run directory of a run directory, or of a file inside one."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def is_run_directory(path: str) -> bool:
    config = os.path.join(path, CONFIG_FILE)
    if not os.path.isdir(path) or not os.path.exists(config):
        return os.path.isdir(path) and os.path.exists(os.path.join(path, "last.pt"))
    try:
        with open(config, encoding="utf-8") as handle:
            return "heads" in json.load(handle)
    except (OSError, ValueError):
        return False


def model_of(source: str) -> tuple:
    """What a path to a run of this tool predicts with, and starts from: (the model's
    directory, its weights file, a line naming those weights), or (source, None, None)
    for anything else. A run that kept a best model (--keep-best) means its best/ (or,
    when a kill interrupted the swap of best/, the complete previous one it left aside
    as .best.old, which the run puts back when it continues: mixer.models.model_dir). its
    model.safetensors (or any .safetensors beside it, e.g. epoch_3.safetensors) means
    those weights with the run's configuration; a run without a best, its last step's.
    The line is read from the config.json read now: a reader of both the weights and
    the line uses read_model, which reads them as one."""
    source = run_of_best(source)
    model_dir, weights, _ = locate(source)
    if weights is None:
        return source, None, None
    return model_dir, weights, describe(source, model_dir, weights, run_config(model_dir))


def run_of_best(source: str) -> str:
    """The run directory where `source` names a run's best model itself (RUN/best, its
    model.safetensors, or the .best.old an interrupted swap left), as its model card's
    command does: read as the run's best, which a running run may replace. Else source."""
    path = os.path.normpath(source)
    if os.path.basename(path) == MODEL_FILE:
        path = os.path.dirname(path)
    if os.path.basename(path) in (BEST_DIR, f".{BEST_DIR}.old"):
        run = os.path.dirname(path) or "."
        kept = any(
            os.path.isdir(os.path.join(run, name)) for name in (BEST_DIR, f".{BEST_DIR}.old")
        )
        if kept and is_run_directory(run):  # a run without a best is not read as its last step
            return run
    return source


def locate(source: str) -> tuple:
    """(the model's directory, its weights file, whether that directory is a run's best
    model, which a running run may replace at any moment) for model_of; (source, None,
    False) for anything but a run of this tool. `source` as run_of_best gives it."""
    if os.path.isdir(source):
        best, aside = os.path.join(source, BEST_DIR), os.path.join(source, f".{BEST_DIR}.old")
        if is_run_directory(best):
            return best, MODEL_FILE, True
        if not os.path.exists(best) and is_run_directory(aside):
            return aside, MODEL_FILE, True
    if source.endswith(".safetensors") and os.path.isfile(source):
        run_dir, weights = os.path.split(source)
        run_dir = run_dir or "."
        if is_run_directory(run_dir):
            return run_dir, weights, False
    if is_run_directory(source):
        return source, MODEL_FILE, False
    return source, None, False


def describe(source: str, model_dir: str, weights: str, config: dict) -> str:
    """model_of's line for the weights `locate` found, from their config.json as read."""
    if os.path.basename(model_dir) == BEST_DIR and os.path.isdir(source):
        return (
            f"{weights_line(model_dir, weights, model_dir, config)}; the weights of its last step: "
            f"--checkpoint {os.path.join(source, MODEL_FILE)}"
        )
    if os.path.basename(model_dir) == f".{BEST_DIR}.old" and os.path.isdir(source):
        return (
            f"{weights_line(model_dir, weights, model_dir, config)} (the best model an interrupted "
            f"write left aside; the run puts it back as {os.path.join(source, BEST_DIR)} when it "
            f"continues); the weights of its last step: --checkpoint {os.path.join(source, MODEL_FILE)}"
        )
    line = weights_line(model_dir, weights, source, config)
    if source.endswith(".safetensors") and is_run_directory(os.path.join(model_dir, BEST_DIR)):
        line += f"; its best evaluation's: --checkpoint {model_dir}"
    return line


READ_ATTEMPTS = 6


def read_model(source: str, source_flag: str, read) -> tuple:
    """(model dir, weights file, line, config, read's result) of a run's model, read as
    one: `read(model_dir, weights, config)` reads what it needs (weights, key, encoder)
    after config.json was read, and config.json is read again after it. A best/ that a
    running run replaced meanwhile (a new config.json, or a directory gone between the
    two renames of its swap) is read again, so the line names the weights read. None
    for anything but a run of this tool."""
    import time

    source = run_of_best(source)
    for attempt in range(READ_ATTEMPTS):
        model_dir, weights, replaceable = locate(source)
        if weights is None:
            return None
        try:
            config = run_config(model_dir)
            result = read(model_dir, weights, config)
            if not replaceable or run_config(model_dir) == config:
                return (
                    model_dir,
                    weights,
                    describe(source, model_dir, weights, config),
                    config,
                    result,
                )
        except (OSError, ValueError, UserError):
            if not replaceable or attempt == READ_ATTEMPTS - 1:
                raise
        time.sleep(0.05 * 2**attempt)
    raise UserError(
        f"{source_flag} {source}: its best model was replaced {READ_ATTEMPTS} times while it was "
        "read (a run is writing it); run the command again"
    )


def weights_line(model_dir: str, weights: str, where: str, config: Optional[dict] = None) -> str:
    """'model: WHERE: which weights', from the record config.json keeps of its
    model.safetensors (mixer.training.trainer writes it); `config`: as already read."""
    config = run_config(model_dir) if config is None else config
    record = (config.get("weights") or {}) if weights == MODEL_FILE else {}
    if record.get("kind") == "best":
        return (
            f"model: {where}: the best evaluation of its run by {record['metric']} "
            f"({record['value']:.4f} at step {record['step']}, epoch {_epoch(record)})"
        )
    if record.get("kind") == "last":
        return f"model: {where}: the weights of its run's last step (step {record['step']}, epoch {_epoch(record)})"
    return f"model: {where}, with the configuration of {model_dir}"


def _epoch(record: dict) -> int:
    """The epoch of a weights record's step, from 1 (mixer.reporting.eta.epoch_number)."""
    from mixer.core.config import epoch_number

    return epoch_number(*(record.get("place") or (record["epoch"], 1)))


def occcanine_recipe() -> InputRecipe:
    from mixer.models.occcanine import MAX_INPUT_LEN

    return InputRecipe(max_len=MAX_INPUT_LEN, **OCCCANINE_RECIPE)


@dataclass
class Base:
    """What a whole-model start fixes for the data: the code layout and the key."""

    formatter: CodeFormatter
    codes: list  # the source's codes, in the order of its flat head
    descriptions: dict

    def fingerprint(self) -> dict:
        """What the prepared data's fingerprint keeps of this start: the code layout and a
        digest of the key."""
        import hashlib

        return {
            "formatter": self.formatter.to_dict(),
            "key": hashlib.sha256("\n".join(self.codes).encode()).hexdigest()[:16],
        }


@dataclass
class Start:
    """What a training run starts from."""

    kind: str  # "encoder" | "run" | "occcanine"
    family: str  # "mixer" | "occcanine"
    recipe: InputRecipe
    origin: Optional[str] = None  # --initial-checkpoint as given
    run_dir: Optional[str] = None  # kind "run"
    occ: object = None  # kind "occcanine": a mixer.models.occcanine.OccSource
    base: Optional[Base] = None  # whole model reused: the data keeps its layout and key

    @property
    def tokens(self) -> str:
        """How new heads number their decoder tokens: as the family does."""
        return family(self.family).tokens

    @property
    def heads_have_a_form(self) -> bool:
        """New heads on an encoder of OccCANINE's family: --new-heads chooses their form."""
        return family(self.family).new_heads_have_a_form and self.base is None

    def record(self) -> dict:
        """Where the starting weights came from (config.json, W&B)."""
        if self.kind == "encoder":
            return {"kind": "encoder"}
        out = {"kind": self.kind, "from": self.origin}
        if self.occ is not None:
            out.update(layout=self.occ.kind, path=os.path.abspath(self.occ.path))
        return out


def resolve_start(config: RunConfig) -> Start:
    """What the run starts from, checked before any data is prepared or model built."""
    model = config.model
    source = model.initial_checkpoint
    if not source:
        from mixer.models.encoders import check_encoder_name

        check_encoder_name(model.encoder)  # a mistyped path fails before any data is prepared
        return Start("encoder", "mixer", InputRecipe(max_len=config.data.max_len))
    from mixer.models.hub import check_local, is_hub_id
    from mixer.models.occcanine import is_hub_directory, is_occcanine_checkpoint

    check_local(source, "--initial-checkpoint", "file or run directory")
    if (
        is_hub_id(source)
        or is_hub_directory(source)
        or (
            os.path.isfile(source)
            and not source.endswith(".safetensors")
            and not is_run_directory(run_dir_of(source))
            and is_occcanine_checkpoint(source)
        )
    ):
        return _occcanine_start(config, source)
    if not os.path.exists(source):
        raise UserError(f"--initial-checkpoint {source}: no such file or run directory")
    if os.path.isfile(source) and not source.endswith(".safetensors"):
        from mixer.models.checkpoint import CheckpointError, load_file

        try:
            load_file(source)  # a torn or foreign file is named as such before anything else
        except CheckpointError as exc:
            raise UserError(f"--initial-checkpoint {exc}")
    run_dir = model_of(source)[0] if os.path.isdir(source) else run_dir_of(source)
    for needed in ("encoder", "tokenizer"):
        if not os.path.isdir(os.path.join(run_dir, needed)):
            raise UserError(
                f"--initial-checkpoint {source}: {run_dir} lacks {needed}/ (the encoder's "
                "config and tokenizer); pass the whole run directory of this tool"
            )
    previous = run_config(run_dir)
    name = previous.get("heads", {}).get("family", "mixer")
    # a new run fits context by today's rule, whatever its source was trained with
    recipe = (
        dataclasses.replace(
            InputRecipe.from_dict(previous["input_recipe"]), context_fit=DESCRIPTION_WHOLE
        )
        if family(name).keeps_input_recipe and previous.get("input_recipe")
        else InputRecipe(max_len=config.data.max_len)
    )
    start = Start("run", name, recipe, origin=source, run_dir=run_dir)
    if not model.only_encoder:
        if not previous:
            raise UserError(
                f"--initial-checkpoint {source}: {run_dir} has no {CONFIG_FILE} (the run "
                "did not finish); pass --only-encoder, or finish that run first"
            )
        from mixer.data.prepared.files import read_key

        key = read_key(run_dir)
        start.base = Base(
            CodeFormatter.from_dict(previous["formatter"]),
            list(key["code"]),
            dict(zip(key["code"], key["description"])),
        )
    return start


def _occcanine_start(config: RunConfig, source: str) -> Start:
    from mixer.models import occcanine
    from mixer.data.labels.normalise import hisco_key

    occ = occcanine.read(source, "--initial-checkpoint")
    start = Start("occcanine", "occcanine", occcanine_recipe(), origin=source, occ=occ)
    if not config.model.only_encoder:
        if not occ.has_heads:
            raise UserError(
                f"--initial-checkpoint {source} holds an encoder only; pass --only-encoder"
            )
        descriptions = (
            dict(zip(*hisco_key()[["code", "description"]].T.values))
            if occ.system == "hisco"
            else {}
        )
        start.base = Base(occcanine.formatter_of(occ), list(occ.key), descriptions)
    return start


NEW_HEADS_LINES = {
    "fast": "new heads (--new-heads fast): their decoder reads only the characters of each input, "
    "so batches are padded as far as their rows need; mixer.export_occcanine needs "
    "--new-heads occcanine",
    "occcanine": "new heads (--new-heads occcanine): in OccCANINE's form, their decoder reads all 128 "
    "positions, padding included, as OccCANINE's code runs it (for mixer.export_occcanine)",
}
# --new-heads: whether the new decoder reads the encoder's padding (HeadsConfig.decoder_reads_padding)
NEW_HEADS_READ_PADDING = {"fast": False, "occcanine": True}


def resolve_new_heads(config: RunConfig, start: Start, resumed: Optional[dict] = None) -> RunConfig:
    """The configuration with the form of its new heads filled (--new-heads): the flag's; a
    resumed run's own (OccCANINE's for a run from before the flag); else fast. The flag is
    refused where the heads have no form to choose (mixer's own, or heads kept)."""
    import dataclasses

    given = config.model.new_heads
    if not start.heads_have_a_form:
        if given is not None:
            why = (
                "the run keeps the heads of --initial-checkpoint, trained as they are; pass "
                "--only-encoder for new heads"
                if start.base is not None
                else "mixer's own heads always read only the characters of each input"
            )
            raise UserError(
                f"--new-heads {given}: only new heads on OccCANINE's encoder (--initial-checkpoint "
                f"an OccCANINE model or a run of its architecture, --only-encoder) have a form "
                f"to choose; {why}; leave the flag out"
            )
        return config
    form = given or "fast"
    if resumed is not None:
        before = (resumed.get("model") or {}).get(
            "new_heads"
        ) or "occcanine"  # before the flag: OccCANINE's
        if given not in (None, before):
            raise UserError(
                f"--new-heads {given}: the run in {config.save_dir} trains heads of the form "
                f"{before}; leave the flag out to continue it, or start a new run in another "
                "directory"
            )
        form = before
    return dataclasses.replace(config, model=dataclasses.replace(config.model, new_heads=form))


def run_config(run_dir: str) -> dict:
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# ------------------------------------------------------------------ the model of a run
def build_model(
    start: Start, config: RunConfig, formatter: CodeFormatter, key_codes: list, log=print
):
    """(model, encoder) for a training run, with the starting weights loaded."""
    from mixer.models.encoders import Encoder, build_encoder, encoder_from_run
    from mixer.models.model import HeadsConfig, MixerModel

    dropout = config.model.dropout
    if start.kind == "occcanine":
        from transformers import CanineModel

        from mixer.models import occcanine
        from mixer.models.encoders import CanineTokenizerFiles, set_dropout_in_config

        canine = occcanine.canine_config(start.occ.state)
        set_dropout_in_config(canine, dropout)
        encoder = Encoder(
            CanineModel(canine, add_pooling_layer=True),
            CanineTokenizerFiles(),
            f"OccCANINE {start.occ.kind} {start.origin}",
        )
        heads = occcanine.heads_config(start.occ, formatter, canine.hidden_size, dropout)
        heads.num_labels = len(key_codes)
        if start.heads_have_a_form:  # OccCANINE's own decoder (heads kept) reads the padding
            heads.decoder_reads_padding = NEW_HEADS_READ_PADDING.get(config.model.new_heads, False)
    else:
        encoder = (
            encoder_from_run(start.run_dir, dropout)
            if start.kind == "run"
            else build_encoder(config.model.encoder, dropout)
        )
        previous = run_config(start.run_dir).get("heads") if start.kind == "run" else None
        if previous and start.base is not None:  # the whole model: its own decoder shape
            heads = HeadsConfig.from_dict(
                dict(
                    previous,
                    num_labels=len(key_codes),
                    dropout=dropout,
                    vocab_size=formatter.vocab_size,
                    target_len=formatter.target_len,
                )
            )
        else:
            facts = family(start.family)
            at_encoder_width = facts.decoder_layers is not None  # the family's own decoder shape
            heads = HeadsConfig(
                num_labels=len(key_codes),
                vocab_size=formatter.vocab_size,
                target_len=formatter.target_len,
                decoder_dim=(
                    encoder.model.config.hidden_size
                    if at_encoder_width
                    else config.model.decoder_dim
                ),
                decoder_layers=facts.decoder_layers or config.model.decoder_layers,
                decoder_heads=facts.decoder_heads or config.model.decoder_heads,
                dropout=dropout,
                family=start.family,
                bos_id=formatter.bos_id,
                decoder_reads_padding=start.heads_have_a_form
                and NEW_HEADS_READ_PADDING.get(config.model.new_heads, False),
            )
    if start.heads_have_a_form:
        log(NEW_HEADS_LINES[config.model.new_heads or "fast"])
    model = MixerModel(encoder.model, heads)
    from mixer.core.recipe import head_dropout

    if head_dropout(config) is not None:  # the heads' own (the OccCANINE recipe: none)
        from mixer.models.model import set_dropout

        set_dropout(model.decoder, head_dropout(config))
        set_dropout(model.flat_dropout, head_dropout(config))
    if start.kind != "encoder":
        load_start_weights(model, start, key_codes, config.model.only_encoder, log)
    return model, encoder


def _start_state(start: Start, model) -> tuple:
    """(the starting tensors in mixer's names, the codes of their flat head, where from)."""
    if start.kind == "occcanine":
        from mixer.models import occcanine

        state = occcanine.to_mixer_state(
            start.occ,
            model.state_dict(),
            only_encoder=start.base is None,
            flat_rows_may_differ=True,
        )
        return state, list(start.occ.key), start.origin
    from mixer.models.checkpoint import CheckpointError, load_file

    path = start.origin
    if os.path.isdir(path):
        path = start.run_dir  # a run's best/ when it kept one (model_of)
        candidates = [os.path.join(path, MODEL_FILE), os.path.join(path, "last.pt")]
        path = next((c for c in candidates if os.path.exists(c)), None)
        if path is None:
            raise UserError(
                f"--initial-checkpoint: {start.origin} holds neither {MODEL_FILE} nor last.pt"
            )
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        from safetensors.torch import load_file as load_safetensors

        try:
            state = load_safetensors(path)
        except (SafetensorError, OSError) as exc:
            raise UserError(f"--initial-checkpoint {path}: not a complete safetensors file ({exc})")
    else:
        try:
            state = load_file(path)["model"]
        except CheckpointError as exc:
            raise UserError(f"--initial-checkpoint {exc}")
    codes = start.base.codes if start.base is not None else []
    return state, codes, path


def load_start_weights(model, start: Start, key_codes: list, only_encoder: bool, log=print) -> None:
    """The encoder's weights, and unless only_encoder the heads', the flat head's rows
    matched by code."""
    import torch

    state, source_codes, path = _start_state(start, model)
    own = model.state_dict()
    if only_encoder:
        state = {k: v for k, v in state.items() if k.startswith("encoder.")}
    flat = {k: state.pop(k) for k in ("flat_head.weight", "flat_head.bias") if k in state}
    differ = [
        f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and own[k].shape != v.shape
    ]
    if differ:
        hint = (
            "" if only_encoder else "; pass --only-encoder to start new heads for a new code system"
        )
        raise UserError(
            f"--initial-checkpoint {path} is incompatible: shapes differ "
            f"(checkpoint vs model): {'; '.join(differ[:3])}{hint}"
        )
    missing = [
        k
        for k in own
        if k not in state
        and not k.startswith("flat_head.")
        and (not only_encoder or k.startswith("encoder."))
    ]
    if missing:
        raise UserError(
            f"--initial-checkpoint {path} lacks {len(missing)} weight(s) of this model, "
            f"e.g. {missing[0]}"
        )
    model.load_state_dict(state, strict=False)
    if only_encoder:
        log(
            f"loaded encoder weights ({len(state)} tensors) from {path}; flat head and decoder start new"
        )
        return
    if set(flat) != {"flat_head.weight", "flat_head.bias"} or flat["flat_head.weight"].shape[
        0
    ] != len(source_codes):
        raise UserError(
            f"--initial-checkpoint {path}: its flat head does not fit its key "
            f"({len(source_codes)} codes)"
        )
    row_of = {code: i for i, code in enumerate(source_codes)}
    rows = torch.tensor([row_of.get(code, -1) for code in key_codes])
    known = rows >= 0
    with torch.no_grad():
        model.flat_head.weight[known] = flat["flat_head.weight"][rows[known]].to(
            model.flat_head.weight.dtype
        )
        model.flat_head.bias[known] = flat["flat_head.bias"][rows[known]].to(
            model.flat_head.bias.dtype
        )
    new = int((~known).sum())
    log(
        f"loaded all weights from {path}; flat head: {int(known.sum())} codes matched by code"
        + (f", {new} new code(s) start new" if new else "")
    )


# ------------------------------------------------------------------ a model to predict with
def load_for_prediction(
    source: str, source_flag: str = "--checkpoint", log=None, announce=None
) -> tuple:
    """(model, tokenizer, config dict, key frame) of a run directory of this tool or
    of an OccCANINE model (hub directory, training checkpoint, hub id: mixer.models.hub).
    A run's model, once loaded, is named to `announce` (model_of's line; default `log`)."""
    found = read_model(
        source,
        source_flag,
        lambda model_dir, weights, config: _load_run(model_dir, source_flag, weights, config),
    )
    if found is not None:
        _, _, line, _, loaded = found
        if (announce or log) is not None:
            (announce or log)(line)
        return loaded
    from mixer.models import occcanine
    from mixer.models.hub import check_local

    check_local(source, source_flag, "run directory or model file")
    if os.path.isdir(source) and not occcanine.is_hub_directory(source):
        raise UserError(
            f"{source_flag} {source}: not a run directory (no {CONFIG_FILE} with its heads; is "
            "training finished? model.safetensors is written at the end) nor an "
            "OccCANINE hub directory"
        )
    return _load_occcanine(source, source_flag, log)


RUN_FILES = (MODEL_FILE, CONFIG_FILE, "key.csv", "encoder", "tokenizer")
MODEL_DIR_KEY = "model_dir"  # a loaded model's config: the directory of its own files, or None


def _load_run(
    run_dir: str, source_flag: str, weights: str = MODEL_FILE, config: Optional[dict] = None
) -> tuple:
    from safetensors.torch import load_file

    from mixer.data.prepared.files import read_key
    from mixer.models.encoders import encoder_from_run
    from mixer.models.model import HeadsConfig, MixerModel

    missing = [
        f for f in (weights,) + RUN_FILES[1:] if not os.path.exists(os.path.join(run_dir, f))
    ]
    if missing:
        raise UserError(
            f"{source_flag} {run_dir}: lacks {', '.join(missing)}; is training finished? "
            "(model.safetensors is written at the end of a run)"
        )
    config = run_config(run_dir) if config is None else config
    encoder = encoder_from_run(run_dir)
    model = MixerModel(encoder.model, HeadsConfig.from_dict(config["heads"]))
    model.load_state_dict(load_file(os.path.join(run_dir, weights)))
    # the directory whose calibration.json and scores.parquet are of these weights (not an epoch_N's)
    config = {**config, MODEL_DIR_KEY: run_dir if weights == MODEL_FILE else None}
    return model, encoder.tokenizer, config, read_key(run_dir)


def _load_occcanine(source: str, source_flag: str, log=None) -> tuple:
    import pandas as pd
    from transformers import CanineModel

    from mixer.models import occcanine
    from mixer.data.labels.normalise import hisco_key
    from mixer.models.encoders import CanineTokenizerFiles
    from mixer.models.model import MixerModel

    occ = occcanine.read(source, source_flag, log)
    if not occ.has_heads:
        raise UserError(f"{source_flag} {source} holds an encoder only: nothing to predict with")
    formatter = occcanine.formatter_of(occ)
    canine = occcanine.canine_config(occ.state)
    model = MixerModel(
        CanineModel(canine), occcanine.heads_config(occ, formatter, canine.hidden_size, 0.0)
    )
    model.load_state_dict(occcanine.to_mixer_state(occ, model.state_dict()))
    if occ.system == "hisco":
        key = hisco_key()
    else:
        key = pd.DataFrame({"code": occ.key, "description": ""})
    key.insert(1, "index", range(len(key)))
    config = {
        "formatter": formatter.to_dict(),
        "input_recipe": occcanine_recipe().to_dict(),
        "max_len": occcanine.MAX_INPUT_LEN,
        "input_col": "occ1",
        "language": "unk",
        "language_col": None,
        "context_cols": [],
        "threshold": occcanine.DEFAULT_THRESHOLD,
        "thresholds": occcanine.LANGUAGE_THRESHOLDS,
        "source": {
            "kind": "occcanine",
            "layout": occ.kind,
            "from": source,
            "path": os.path.abspath(occ.path),
        },
        "heads": {"family": "occcanine"},
        MODEL_DIR_KEY: source if os.path.isdir(source) else None,
    }
    return model, CanineTokenizerFiles(), config, key


def light_tokeniser(start: Start, config: RunConfig):
    """The run's tokeniser before any model exists (--prepare-only); without torch for
    CANINE encoders and tokenizer.json files."""
    from mixer.models.encoders import light_token_ids
    from mixer.data.inputs.tokens import CanineIds

    if start.kind == "occcanine":
        return CanineIds(start.recipe)
    return light_token_ids(config.model.encoder, start.recipe, start.run_dir)

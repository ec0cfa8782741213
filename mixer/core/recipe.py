"""The training recipe of a run: the one place that answers "which learning rate,
warm-up, dropout and noise does this run use, and why".

Flags the user leaves out are None in the configuration. `resolve` fills them from
the recipe that fits the start:

- mixer's own (a fresh encoder or an earlier run of this tool): tuned on the
  quickstart, a small encoder whose heads start from random weights.
- OccCANINE's fine-tuning (the start is one of OccCANINE's models, whole): what
  OccCANINE's own fine-tuning scripts use, so a fine-tune does not wipe out what
  the published model knows. Learning rate 2e-5, no warm-up, one learning rate for
  encoder and heads (they arrive trained), CANINE's dropout 0.1 in the encoder and
  none in the heads (its models' dropout_rate 0), noise 0.3 x 3 edits, unknown
  language 0.25. With --only-encoder the heads are new and learn 5x faster.

Flags given on the command line (or in --config) always win; the setup block
prints the recipe, why, and which flags overrode it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

MIXER = {
    "learning_rate": 3e-4,
    "head_lr_scale": 5.0,
    "warmup_pct": 0.05,
    "dropout": 0.1,
    "head_dropout": None,
    "augmentation_prob": 0.3,
    "num_transformations": 3,
    "unk_lang_prob": 0.25,
    "eval_noise": 2,
}
OCCCANINE_FINETUNE = {
    "learning_rate": 2e-5,
    "head_lr_scale": 1.0,
    "warmup_pct": 0.0,
    "dropout": 0.1,
    "head_dropout": 0.0,
    "augmentation_prob": 0.3,
    "num_transformations": 3,
    "unk_lang_prob": 0.25,
    "eval_noise": 2,
}
SECTION = {"dropout": "model", "head_dropout": "model"}  # the rest are training settings
FLAG = {name: "--" + name.replace("_", "-") for name in MIXER}
RESUMED = "; settings as the run being resumed used them"  # the why of a resumed run's recipe


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    why: str
    values: dict
    overridden: tuple = ()

    def describe(self) -> str:
        v = self.values
        heads = (
            f"heads x{v['head_lr_scale']:g}"
            if v["head_lr_scale"] != 1
            else "one rate for encoder and heads"
        )
        dropout = (
            f"dropout {v['dropout']:g}"
            if v["head_dropout"] is None
            else f"dropout {v['dropout']:g} in the encoder, {v['head_dropout']:g} in the heads"
        )
        noise = (
            f"noise {v['augmentation_prob']:g} x {v['num_transformations']} edits"
            if v["augmentation_prob"] and v["num_transformations"]
            else "no noise"
        )
        line = (
            f"recipe: {self.name} ({self.why}): learning rate {v['learning_rate']:g}, {heads}, "
            f"warm-up {v['warmup_pct']:g}, {dropout}, {noise}, unknown language "
            f"{v['unk_lang_prob']:g}"
        )
        if self.overridden:
            line += "; from your flags: " + ", ".join(FLAG[n] for n in self.overridden)
        return line


NOISE_SETTINGS = ("augmentation_prob", "num_transformations", "unk_lang_prob", "eval_noise")


def choose(start, only_encoder: bool) -> tuple:
    """(name, why, defaults) of the recipe for a start (a mixer.models.sources.Start): OccCANINE's
    fine-tuning for its models and for runs of their architecture (an earlier fine-tune),
    mixer's for the rest."""
    if start.family == "occcanine":
        values = dict(OCCCANINE_FINETUNE)
        what = (
            "OccCANINE's model"
            if start.kind == "occcanine"
            else "a run of OccCANINE's architecture"
        )
        why = f"the run starts from {what} {start.origin}"
        if only_encoder:
            values["head_lr_scale"] = MIXER["head_lr_scale"]
            why += "; its heads are new (--only-encoder) and learn 5x faster"
        return "OccCANINE fine-tuning", why, values
    why = {"encoder": "a new model", "run": f"the run starts from {start.origin}"}[start.kind]
    return "mixer", why, dict(MIXER)


def resolve(config, start, resumed: Optional[dict] = None):
    """(the configuration with every recipe setting filled, the Recipe used).

    resumed: the args.yaml of the run this job continues (its directory holds a
    checkpoint). A setting left out then keeps the value the run has used so far, not
    the recipe's default, so a resumed run neither changes its learning rates nor
    switches noise on halfway. A run made before training noise existed continues
    without it."""
    name, why, values = choose(start, config.model.only_encoder)
    if resumed is not None:
        before = {**resumed.get("model", {}), **resumed.get("train", {})}
        for setting in values:
            if before.get(setting) is not None:
                values[setting] = before[setting]
            elif setting in NOISE_SETTINGS:
                values[setting] = 0 if setting in ("num_transformations", "eval_noise") else 0.0
        why += RESUMED
    overridden, model, train = [], {}, {}
    for setting, default in values.items():
        section = model if SECTION.get(setting) == "model" else train
        given = getattr(config.model if section is model else config.train, setting)
        if given is not None:
            overridden.append(setting)
            values[setting] = given
        else:
            section[setting] = default
    if "dropout" in overridden and "head_dropout" not in overridden:
        values["head_dropout"] = model["head_dropout"] = None  # --dropout alone: every dropout
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, **model),
        train=dataclasses.replace(config.train, **train),
    )
    return config, Recipe(name, why, values, tuple(overridden))


def previous_settings(run_dir: str) -> Optional[dict]:
    """The args.yaml of a run directory that holds a checkpoint to resume, else None."""
    import os

    import yaml

    args = os.path.join(run_dir, "args.yaml")
    if not (
        os.path.exists(args)
        and any(os.path.exists(os.path.join(run_dir, f)) for f in ("last.pt", "last.prev.pt"))
    ):
        return None
    with open(args, encoding="utf-8") as handle:
        values = yaml.safe_load(handle)
    return values if isinstance(values, dict) else None


def head_dropout(config) -> Optional[float]:
    """The heads' dropout when it differs from the encoder's, else None."""
    value = config.model.head_dropout
    return None if value is None or value == config.model.dropout else value

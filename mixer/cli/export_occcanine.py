"""Write a run of the OccCANINE architecture in OccCANINE's hub layout.

    python -m mixer.export_occcanine RUN_DIR OUT_DIR

RUN_DIR is a run that started from one of OccCANINE's models (its family is
"occcanine"; with --only-encoder, trained with --new-heads occcanine). Its weights are
those predict.py --checkpoint RUN_DIR uses (its best model when it kept one: RUN_DIR/best).
OUT_DIR gets config.json and model.safetensors as OccCANINE's
`Seq2SeqMixerOccCANINE_hub.from_pretrained` reads them, and for systems other than HISCO
key.json (code -> flat index) and chars.json (the decoder's symbols); predict.py and
mixer.load read it back too. HISCO runs whose key gained no codes write no key.json:
OccCANINE uses its own HISCO key. A model card
(README.md) goes with them, made from what the run's card was made from (card.json). It
describes the weights exported (the best's or the last step's), the thresholds this
directory is read with (OccCANINE's: its config.json carries none) and how to predict
from it, with a section on the layout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

from mixer.core.errors import UserError
from mixer.models import occcanine


def export(run_dir: str, out_dir: str) -> list:
    """Write the hub layout; returns the files written."""
    from safetensors.torch import load_file, save_file

    from mixer.data.prepared.files import read_key
    from mixer.data.labels.formatter import CodeFormatter
    from mixer.data.labels.normalise import hisco_key
    from mixer.core.io import atomic_write, write_text
    from mixer.models.sources import CONFIG_FILE, MODEL_FILE, is_run_directory, read_model

    unfinished = UserError(
        f"{run_dir}: not a finished run directory of this tool (no {MODEL_FILE} and {CONFIG_FILE})"
    )

    def read(
        model_dir: str, weights: str, config: dict
    ) -> tuple:  # the weights and key of that config
        if not config or not os.path.exists(os.path.join(model_dir, weights)):
            raise unfinished
        return load_file(os.path.join(model_dir, weights)), list(read_key(model_dir)["code"])

    found = read_model(run_dir, "export", read)  # as one, while a run may replace its best/
    if found is None:
        raise unfinished
    model_dir, weights, line, config, (state, key) = found
    heads = config["heads"]
    if heads.get("family") != "occcanine":
        raise UserError(
            f"{run_dir}: a {heads.get('family', 'mixer')}-family run; only runs of "
            "OccCANINE's architecture (started from an OccCANINE model) have its layout"
        )
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"{out_dir}: is a file; pass a directory")
    inside = os.path.realpath(out_dir) + os.sep
    if inside.startswith(os.path.realpath(run_dir) + os.sep) or is_run_directory(out_dir):
        raise UserError(
            f"{out_dir}: is (inside) a run directory, whose files the export would "
            "replace; pass a new directory"
        )
    if config.get("context_cols"):
        raise UserError(
            f"{run_dir}: trained with --context-cols {' '.join(config['context_cols'])}, which "
            "OccCANINE's code cannot pass to the model (it reads lang[SEP]text only); "
            "predict with mixer (predict.py, mixer.load) instead"
        )
    from mixer.models.model import HeadsConfig

    if not HeadsConfig.from_dict(
        heads
    ).reads_padding:  # runs from before the choice read it: exported
        raise UserError(
            f"{run_dir}: its new heads read only the characters of each input (--new-heads fast, "
            "the default), but OccCANINE's code runs the decoder over all 128 positions, so it "
            "would not predict as mixer does; train the run with --new-heads occcanine to export it"
        )
    formatter = CodeFormatter.from_dict(config["formatter"])
    own_key = formatter.kind != "hisco" or key != list(hisco_key()["code"])
    if own_key and formatter.kind == "hisco":  # checked before anything is written
        raise UserError(
            f"{run_dir}: its HISCO key differs from HISCO's list, which OccCANINE "
            "always uses for HISCO models"
        )
    hidden = state["encoder.char_embeddings.LayerNorm.weight"].shape[0]
    feed_forward = state["decoder.layers.layers.0.linear1.weight"].shape[0]
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for stale in (
        "key.json",
        "chars.json",
    ):  # an earlier export's key would be read as this model's
        if os.path.exists(os.path.join(out_dir, stale)):
            os.unlink(os.path.join(out_dir, stale))

    def write_json(name: str, values) -> None:
        write_text(os.path.join(out_dir, name), json.dumps(values, indent=2))
        written.append(name)

    hub = occcanine.hub_config(formatter, len(key), feed_forward, hidden)
    hub["exported_by"] = {
        "tool": "mixer",
        "run": os.path.abspath(run_dir),
        "source": config.get("source", {}).get("from"),
    }
    write_json("config.json", hub)
    tensors = occcanine.to_occcanine_state(state, hidden)
    atomic_write(os.path.join(out_dir, "model.safetensors"), lambda p: save_file(tensors, p))
    written.append("model.safetensors")
    if own_key:
        write_json("key.json", {code: i for i, code in enumerate(key)})
        write_json("chars.json", list(formatter.alphabet))
    text = export_card(run_dir, model_dir, weights, config, out_dir)
    if text is not None:
        write_text(os.path.join(out_dir, "README.md"), text + LAYOUT_NOTE.format(weights=line))
        written.append("README.md")
    elif os.path.exists(
        os.path.join(out_dir, "README.md")
    ):  # an earlier export's card is not this model's
        os.unlink(os.path.join(out_dir, "README.md"))
    return written


def export_card(
    run_dir: str, model_dir: str, weights: str, config: dict, out_dir: str
) -> Optional[str]:
    """The card of the exported weights, or None when the run recorded none for them
    (weights other than the best's and the last step's, a run from before card.json)."""
    from mixer.models.sources import BEST_DIR, MODEL_FILE
    from mixer.reporting import card
    from mixer.reporting.metrics import Thresholds

    record = (config.get("weights") or {}) if weights == MODEL_FILE else {}
    run = os.path.dirname(model_dir) if os.path.basename(model_dir) == BEST_DIR else model_dir
    data = card.read_data(model_dir) if record.get("kind") == "best" else card.read_data(run)
    if data is None or record.get("kind") not in ("best", "last"):
        return None
    table = None
    if os.path.exists(os.path.join(model_dir, "evaluation.csv")):
        with open(os.path.join(model_dir, "evaluation.csv"), encoding="utf-8") as handle:
            table = handle.read()
    best = (
        dict(data["best"], table=table) if record["kind"] == "best" and data.get("best") else None
    )
    last = dict(data["last"], table=table)
    if best is None and record["kind"] == "best" or record["step"] != (best or last)["step"]:
        return None  # the card data is of other weights than these
    stored = {
        "threshold": occcanine.DEFAULT_THRESHOLD,
        "thresholds": occcanine.LANGUAGE_THRESHOLDS,
        "thresholds_from": "OccCANINE's",
    }
    export = {
        "run": run,
        "measured_with": Thresholds.of(config.get("threshold", 0.5), config.get("thresholds")),
        "thresholds_where": "which OccCANINE's code, predict.py and `mixer.load` apply to this "
        "directory (its `config.json` carries none; give `--threshold` to use "
        "another)",
    }
    return card.model_card(data["facts"], out_dir, stored, data["progress"], best, last, export)


LAYOUT_NOTE = """
## OccCANINE's layout

This directory holds the model above in OccCANINE's hub layout, written by
`python -m mixer.export_occcanine` ({weights}). OccCANINE's own code loads it with
`Seq2SeqMixerOccCANINE_hub.from_pretrained`, and mixer's too: `predict.py --checkpoint`
and `mixer.load` take this directory.
"""


def main(argv=None) -> int:
    from mixer.cli.options import add_flags
    from mixer.core.programs import ExportConfig

    parser = argparse.ArgumentParser(
        prog="python -m mixer.export_occcanine", description=__doc__.splitlines()[0]
    )
    add_flags(parser, [ExportConfig])
    args = parser.parse_args(argv)
    files = export(args.run_dir, args.out_dir)
    print(f"wrote {', '.join(files)} to {args.out_dir} (OccCANINE's hub layout)")
    return 0


if __name__ == "__main__":
    from mixer.cli.parsing import run_main

    run_main(main, sys.argv[1:])

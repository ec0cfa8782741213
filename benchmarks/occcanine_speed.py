"""Prediction speed of OccCANINE's full-size architecture (CANINE-s, 1,919 HISCO codes).

    python benchmarks/occcanine_speed.py [--rows 500] [--keep DIR]

Builds a model of the architecture of Christianvedel/OccCANINE_s2s_mix with
random weights, writes it in OccCANINE's hub layout (the weights do not change the
speed), and times mixer's prediction on distinct descriptions from the example data,
the flat head and greedy decoding: in fp32 with every batch padded to 128 characters
(as OccCANINE pads, and mixer did before 0.3), in fp32 padded as far as each batch
needs (exact: mixer.data.inputs.padding; OccCANINE's decoder reads all 128 positions, so greedy
decoding keeps them), in int8 (--quantize int8, approximate), and in bf16 where the CPU
computes it natively. Prints the CPU model and capability, and the characters computed per
row. --keep DIR keeps the hub directory, e.g. to time OccCANINE's own predict() on the
same weights side by side (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.core.precision import cpu_model, native  # noqa: E402


def write_full_size_model(directory: str) -> None:
    from safetensors.torch import save_file
    from transformers import CanineConfig, CanineModel

    from mixer.models import occcanine
    from mixer.data.labels.formatter import OCCCANINE_HISCO_SYMBOLS, CodeFormatter
    from mixer.data.labels.normalise import hisco_key
    from mixer.models.model import MixerModel

    torch.manual_seed(0)
    formatter = CodeFormatter(
        kind="hisco",
        block_size=5,
        max_num_codes=5,
        tokens="occcanine",
        alphabet=list(OCCCANINE_HISCO_SYMBOLS),
    )
    codes = len(hisco_key())
    canine = CanineConfig()  # google/canine-s
    source = occcanine.OccSource(
        "",
        "",
        "",
        {"decoder.decoder.layers.0.linear1.weight": torch.zeros(768, 768)},
        [""] * codes,
        "hisco",
    )
    model = MixerModel(CanineModel(canine), occcanine.heads_config(source, formatter, 768, 0.0))
    os.makedirs(directory, exist_ok=True)
    save_file(
        occcanine.to_occcanine_state(model.state_dict(), 768),
        os.path.join(directory, "model.safetensors"),
    )
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump(occcanine.hub_config(formatter, codes, 768, 768), handle)


def rate(model, texts, head: str, batch_size: int) -> float:
    model.predict(texts[:8], lang="en", head=head, batch_size=batch_size)  # warm-up
    start = time.perf_counter()
    model.predict(texts, lang="en", head=head, batch_size=batch_size)
    return len(texts) / (time.perf_counter() - start)


def characters_per_row(model, texts, head: str, batch_size: int) -> float:
    """The input slots the encoder computes per row: its batches' padded lengths."""
    predictor = model.predictor
    _, lengths = predictor.token_ids.encode(
        np.asarray(texts, dtype=object), np.full(len(texts), "en", dtype=object)
    )
    padding = predictor.padding(states=head != "flat")
    ordered = np.sort(lengths, kind="stable")
    return float(
        np.mean(
            np.concatenate(
                [
                    np.full(len(part), padding.length(int(part.max())))
                    for part in np.split(ordered, range(batch_size, len(ordered), batch_size))
                ]
            )
        )
    )


class Padded128:
    """Every batch padded to 128 characters, as before mixer 0.3 (for the comparison)."""

    def __enter__(self):
        import dataclasses

        from mixer.data.inputs.padding import EVERY_POSITION
        from mixer.prediction.predict import Predictor

        self.original = Predictor.padding
        original = self.original

        def whole(predictor, states):
            padding = original(predictor, states)
            return dataclasses.replace(padding, reads=EVERY_POSITION)

        Predictor.padding = whole
        return self

    def __exit__(self, *_):
        from mixer.prediction.predict import Predictor

        Predictor.padding = self.original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--keep", default=None, help="write the hub directory here and keep it")
    args = parser.parse_args()
    import mixer

    texts = pd.unique(pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str)["occ1"])[
        : args.rows
    ]
    directory = args.keep or tempfile.mkdtemp(prefix="occcanine-s-")
    write_full_size_model(directory)
    bf16_native, detail = native("bf16", "cpu")
    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"bf16 {'native' if bf16_native else 'emulated'} on this CPU"
    )
    print(
        f"{len(texts)} distinct descriptions, batch {args.batch_size}, OccCANINE's architecture "
        f"(CANINE-s, 1,919 codes) from {directory}"
    )
    variants = [
        ("fp32, padded to 128", "fp32", None, True),
        ("fp32", "fp32", None, False),
        ("int8", "fp32", "int8", False),
    ]
    if bf16_native:
        variants.append(("bf16", "bf16", None, False))
    for name, precision, quantize, whole in variants:
        model = mixer.load(directory, device="cpu", precision=precision, quantize=quantize)
        for head in ("flat", "seq2seq"):
            if whole:
                with Padded128():
                    speed, chars = rate(model, np.asarray(texts), head, args.batch_size), 128.0
            else:
                speed = rate(model, np.asarray(texts), head, args.batch_size)
                chars = characters_per_row(model, texts, head, args.batch_size)
            print(
                f"mixer {name:20s} {head:8s}: {speed:6.1f} records/s, {chars:5.1f} characters per row",
                flush=True,
            )
    if not args.keep:
        import shutil

        shutil.rmtree(directory)


if __name__ == "__main__":
    main()

"""Training throughput of the CANINE-s architecture from each start a run can have, batches
padded to 128 characters (as OccCANINE pads them) against batches padded as far as their
rows need (mixer.data.inputs.padding), on the example data, one process.

    python benchmarks/canine_training_speed.py [--batch-size 32] [--steps 12] [--no-noise]
        [--occc-pst2 SAMPLES_PER_S]

The starts, each prepared and built as finetune.py prepares and builds it (random weights:
the weights do not change the speed):

- fresh: `--encoder canine-s-random --max-len 128`, mixer's own heads (they mask padding);
- occcanine-new-heads: `--initial-checkpoint HUB --only-encoder`, OccCANINE's encoder with
  new heads that mask padding (--new-heads fast, the default);
- occcanine-whole: `--initial-checkpoint HUB`, OccCANINE's model with its heads, whose
  decoder reads every one of the 128 positions, padding included: its batches keep them.

HUB is a hub directory of OccCANINE_s2s_mix's architecture (CANINE-s, 1,919 HISCO codes)
written by benchmarks/occcanine_speed.py's writer. Each start trains on the same rows, with
training noise (the recipe's) unless --no-noise; its variants (padded to 128, padded as
the run pads, whole and in 2 length groups) are taken in turn step after step, so a busy
machine slows them alike. Prints the median samples/s of a training step (forward,
backward, optimizer) and the characters computed per row (the padded input slots); with
--occc-pst2, the ratio to OCCC-PST2's own loop timed outside the project on the same rows
and batch (docs/occcanine.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import EXAMPLE_FLAGS  # noqa: E402
from noise_loading import NOISE, loader_of, timed_steps  # noqa: E402

from mixer.core.allocator import keep_freed_memory  # noqa: E402
from mixer.core.precision import cpu_model  # noqa: E402
from mixer.data.inputs.noise import NoiseConfig  # noqa: E402
from mixer.data.inputs.padding import EVERY_POSITION  # noqa: E402

MAX_LEN = 128
STARTS = {
    "fresh": (
        "a fresh CANINE-s, mixer's heads",
        ["--encoder", "canine-s-random", "--max-len", str(MAX_LEN)],
    ),
    "occcanine-new-heads": ("OccCANINE's encoder, new heads (--only-encoder)", ["--only-encoder"]),
    "occcanine-whole": ("OccCANINE's whole model (heads kept)", []),
}


def prepared_run(workdir: str, start: str, hub: str) -> str:
    """The example data prepared for a start by finetune.py --prepare-only (afresh: an
    earlier version's data would be refused)."""
    import shutil

    run_dir = os.path.join(workdir, start)
    shutil.rmtree(run_dir, ignore_errors=True)
    flags = STARTS[start][1] + ([] if start == "fresh" else ["--initial-checkpoint", hub])
    subprocess.run(
        [
            sys.executable,
            "finetune.py",
            *EXAMPLE_FLAGS,
            "--language",
            "en",
            "--save-path",
            run_dir,
            *flags,
            "--prepare-only",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return run_dir


def built(run_dir: str):
    """(model, encoder, input recipe) as the run would build them, from its args.yaml."""
    import yaml

    from mixer.core.config import RunConfig
    from mixer.core.recipe import resolve
    from mixer.data.prepared.files import load_prepared
    from mixer.models.sources import build_model, resolve_new_heads, resolve_start

    with open(os.path.join(run_dir, "args.yaml"), encoding="utf-8") as handle:
        config = RunConfig.from_dict(yaml.safe_load(handle))
    start = resolve_start(config)
    config, _ = resolve(config, start)
    config = resolve_new_heads(config, start)
    prepared = load_prepared(run_dir, with_text=False)
    torch.manual_seed(0)
    model, encoder = build_model(
        start, config, prepared.formatter, list(prepared.key["code"]), log=lambda line: None
    )
    return model, encoder, start.recipe, config.train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--starts", nargs="+", choices=list(STARTS), default=list(STARTS))
    parser.add_argument("--no-noise", action="store_true", help="train on the rows as written")
    parser.add_argument(
        "--occc-pst2",
        type=float,
        default=None,
        metavar="SAMPLES_PER_S",
        help="OCCC-PST2's own loop on the same rows and batch: print the ratio to it",
    )
    parser.add_argument("--workdir", default="/tmp/mixer-bench-canine-training")
    args = parser.parse_args()
    from occcanine_speed import write_full_size_model

    noise = NoiseConfig(0, 0, 0) if args.no_noise else NOISE
    print(keep_freed_memory() or "C allocator as it is")  # as finetune.py does
    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} "
        f"threads, torch {torch.__version__}; CANINE-s architecture, batch {args.batch_size}, "
        + (f"noise {noise.prob} x {noise.edits} edits" if noise.active else "no noise")
        + f", language 'en'; medians over {args.steps} steps after 2 warm-up steps"
    )
    hub = os.path.join(args.workdir, "occcanine-hub")
    if any(start != "fresh" for start in args.starts) and not os.path.exists(
        os.path.join(hub, "model.safetensors")
    ):
        write_full_size_model(hub)
    for start in args.starts:
        run_dir = prepared_run(args.workdir, start, hub)
        model, encoder, recipe, train = built(run_dir)
        reads = model.padding_reads(decoder=True)
        variants = {"padded to 128 characters": (EVERY_POSITION, 1)}
        if reads != EVERY_POSITION:  # the decoder masks padding: the rule applies
            variants.update(
                {
                    "padded as its rows need, whole": (reads, 1),
                    "padded as its rows need, 2 length groups": (reads, 2),
                }
            )
        loaders = {}
        for name, (what, groups) in variants.items():
            loaders[name], formatter, _, _ = loader_of(
                run_dir, encoder, noise, args.batch_size, recipe.max_len, groups, what, recipe
            )
        seconds, chars = timed_steps(
            model,
            formatter,
            loaders,
            args.steps,
            learning_rate=train.learning_rate,
            head_lr_scale=train.head_lr_scale,
        )
        base = seconds["padded to 128 characters"]
        print(f"{STARTS[start][0]} ({start}):")
        for name in loaders:
            rate = args.batch_size / seconds[name]
            against = f", {rate / args.occc_pst2:.2f}x OCCC-PST2's loop" if args.occc_pst2 else ""
            print(
                f"  {name}: {rate:6.2f} samples/s, {chars[name]:5.1f} characters computed per row, "
                f"{base / seconds[name]:.2f}x padded to 128{against}",
                flush=True,
            )
        del model, encoder, loaders


if __name__ == "__main__":
    main()

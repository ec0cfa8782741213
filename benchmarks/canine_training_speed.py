"""Training throughput of the CANINE-s architecture: batches padded to 128 characters (as
OccCANINE and mixer before 0.3 padded them) against batches padded as far as their rows need
(mixer.data.padding), on the example data, one process.

    python benchmarks/canine_training_speed.py [--batch-size 32] [--steps 12]

Both families on CANINE-s's architecture (random weights: the weights do not change the
speed): mixer's heads (its decoder masks padding, so batches follow the rule, cut into
--length-groups groups as on CPUs) and OccCANINE's (its decoder reads every one of the 128
positions, padding included: its training keeps them). Every variant trains the same
model on the same rows with training noise on (the default recipe), the variants taken in
turn step after step, so a busy machine slows them alike; prints the median samples/s of a
training step (forward, backward, optimizer) and the characters computed per row (the
padded input slots). OCCC-PST2's own loop is timed outside the project on the same rows
and batch (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
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
from mixer.data.padding import CHARACTERS, EVERY_POSITION  # noqa: E402
from mixer.models.encoders import build_encoder  # noqa: E402
from mixer.models.model import HeadsConfig, MixerModel  # noqa: E402

MAX_LEN = 128


def heads_of(family: str, formatter, key_codes) -> HeadsConfig:
    if family == "occcanine":  # OccCANINE_s2s_mix's heads: 1,919 codes, decoder at 768, 3 layers, 8 heads
        return HeadsConfig(num_labels=1919, vocab_size=19, target_len=formatter.target_len,
                           decoder_dim=768, decoder_layers=3, decoder_heads=8, dropout=0.0,
                           family="occcanine", bos_id=2)
    return HeadsConfig(num_labels=len(key_codes), vocab_size=formatter.vocab_size,
                       target_len=formatter.target_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--families", nargs="+", default=["mixer", "occcanine"])
    parser.add_argument("--workdir", default="/tmp/mixer-bench-canine-training")
    args = parser.parse_args()
    print(keep_freed_memory() or "C allocator as it is")  # as finetune.py does
    print(f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} "
          f"threads, torch {torch.__version__}; CANINE-s architecture, batch {args.batch_size}, noise "
          f"{NOISE.prob} x {NOISE.edits} edits, language 'en'; medians over {args.steps} steps")
    run_dir = os.path.join(args.workdir, "canine-s")
    shutil.rmtree(run_dir, ignore_errors=True)  # prepared afresh: an earlier version's data would be refused
    subprocess.run([sys.executable, "finetune.py", *EXAMPLE_FLAGS, "--language", "en", "--save-path", run_dir,
                    "--encoder", "canine-s-random", "--max-len", str(MAX_LEN), "--prepare-only"],
                   cwd=ROOT, check=True, capture_output=True)
    for family in args.families:
        torch.manual_seed(0)
        encoder = build_encoder("canine-s-random", dropout=0.1)
        variants = {"padded to 128 characters": EVERY_POSITION}
        if family == "mixer":  # its decoder masks padding: the rule applies
            variants.update({"padded as its rows need, whole": CHARACTERS,
                             "padded as its rows need, 2 length groups": CHARACTERS})
        loaders = {}
        for name, reads in variants.items():
            groups = 2 if "groups" in name else 1
            loaders[name], formatter, key_codes, _ = loader_of(run_dir, encoder, NOISE, args.batch_size,
                                                               MAX_LEN, groups, reads)
        model = MixerModel(encoder.model, heads_of(family, formatter, key_codes))
        seconds, chars = timed_steps(model, formatter, loaders, args.steps, learning_rate=2e-5, clip=1.0)
        base = seconds["padded to 128 characters"]
        print(f"{family}'s heads on CANINE-s:")
        for name in loaders:
            print(f"  {name}: {args.batch_size / seconds[name]:6.1f} samples/s, {chars[name]:5.1f} characters "
                  f"computed per row, {base / seconds[name]:.2f}x padded to 128")


if __name__ == "__main__":
    main()

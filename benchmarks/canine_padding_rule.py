"""The CANINE padding rule checked exhaustively: for every row length n and every padded
length L up to 128, a row's pooled output and character states against those at 128.

    python benchmarks/canine_padding_rule.py [--configs 4x4 2x2 2x3 3x2 4x4w16] [--width 64]

For each downsampling rate x upsampling kernel (4x4 is CANINE-s's, 2x2 canine-tiny's; a
suffix wN sets the local attention window, 128 otherwise, as in CANINE-s) a
CANINE with random weights (--width wide, 2 deep layers; the rule does not depend on the
widths) is run on one row of n random characters padded to each L from n to 128. Prints,
for the pooled output and for the real characters' states: the largest difference from
128 at or above the rule (mixer.data.inputs.padding), how many of those are bit-identical, and
the smallest difference below it (for rows whose rule is under 128: a rule of 128, the
reference itself, has nothing below it that must differ). The rule holds when the first
is float rounding and the last is not. tests/test_padding.py checks the boundaries on every test run; this is
the whole grid (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mixer.data.inputs.padding import CHARACTERS, POOLED, InputPadding  # noqa: E402

MAX_LEN = 128


def check(rate: int, kernel: int, width: int, step: int, window: int = 128) -> None:
    from transformers import CanineConfig, CanineModel

    torch.manual_seed(0)
    config = CanineConfig(
        hidden_size=width,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=2 * width,
        num_hash_buckets=1024,
        num_hash_functions=4,
        downsampling_rate=rate,
        upsampling_kernel_size=kernel,
        local_transformer_stride=window,
    )
    model = CanineModel(config).eval()
    rules = {what: InputPadding.for_encoder(config, MAX_LEN, what) for what in (POOLED, CHARACTERS)}
    ids = torch.randint(32, 5000, (MAX_LEN,))
    found = {
        what: {"above": 0.0, "identical": 0, "count": 0, "below": float("inf")} for what in rules
    }
    for n in range(5, MAX_LEN + 1, step):
        row = ids[:n]

        def run(length):
            x = torch.zeros(1, length, dtype=torch.long)
            mask = torch.zeros_like(x)
            x[0, :n], mask[0, :n] = row, 1
            with torch.no_grad():
                out = model(input_ids=x, attention_mask=mask)
            return {POOLED: out.pooler_output[0], CHARACTERS: out.last_hidden_state[0, :n]}

        full = run(MAX_LEN)
        for length in range(max(n, 2 * rate), MAX_LEN, step):
            out = run(length)
            for what, rule in rules.items():
                gap = float((out[what] - full[what]).abs().max())
                entry = found[what]
                if length >= rule.length(n):
                    entry["above"] = max(entry["above"], gap)
                    entry["identical"] += gap == 0
                    entry["count"] += 1
                elif (
                    rule.length(n) < MAX_LEN
                ):  # a rule of 128 is the reference itself: nothing is below it
                    entry["below"] = min(entry["below"], gap)
    for what, entry in found.items():
        print(
            f"rate {rate}, kernel {kernel}, window {window}, {what:10s}: at or above the rule largest difference "
            f"{entry['above']:.1e} ({entry['identical']} of {entry['count']} bit-identical); below it "
            f"smallest difference {entry['below']:.1e}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["4x4", "2x2", "2x3", "3x2", "4x4w16"])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--step", type=int, default=1, help="every step-th n and L (1: all)")
    args = parser.parse_args()
    for config in args.configs:
        shape, _, window = config.partition("w")
        rate, kernel = map(int, shape.split("x"))
        check(rate, kernel, args.width, args.step, int(window or 128))


if __name__ == "__main__":
    main()

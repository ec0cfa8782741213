"""One AdamW step over minilm-l6's parameters on one thread: the loop over
tensors, the multi-tensor (foreach) path and the fused kernel that training
uses (mixer.training.run.build_optimizer).

    python benchmarks/optimizer_step.py [--encoder minilm-l6] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mixer.models.encoders import build_encoder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    parameters = list(build_encoder(args.encoder, dropout=0.1).model.parameters())
    for parameter in parameters:
        parameter.grad = torch.randn_like(parameter) * 1e-3
    print(f"{args.encoder}: {sum(p.numel() for p in parameters) / 1e6:.1f}M parameters, 1 thread")
    times = {}
    for name, options in (
        ("loop", {"foreach": False}),
        ("foreach", {"foreach": True}),
        ("fused", {"fused": True}),
    ):
        optimizer = torch.optim.AdamW(parameters, lr=1e-4, **options)
        optimizer.step()  # state allocated outside the clock
        start = time.perf_counter()
        for _ in range(args.repeats):
            optimizer.step()
        times[name] = (time.perf_counter() - start) / args.repeats
        print(f"AdamW {name:8s} {times[name] * 1000:6.0f} ms per step")
    print(f"fused vs loop: {times['loop'] / times['fused']:.1f}x faster")


if __name__ == "__main__":
    main()

"""What keyed dropout (mixer.models.keyed_dropout) costs, and whether its masks are good
dropout. Prints:

- the masks' statistics at p 0.1 on a (32, 40, 768) batch: the share kept and its binomial
  error, and the largest correlation between neighbouring rows, positions, channels, draws
  and seeds;
- one call on that tensor, keyed against nn.functional.dropout (median of 50);
- a training step (forward, backward, AdamW) of a model with its framework dropout
  (nn.Dropout, transformers' own attention dropout) against the same model keyed, the two
  interleaved step by step, each the median of three timings of --steps steps.

    python benchmarks/keyed_dropout.py [--encoder canine-small] [--batch 32] [--length 48] [--device cuda]

On a GPU it also checks that the masks there equal the CPU's (integer arithmetic: exact).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.core.precision import cpu_model  # noqa: E402
from mixer.models import keyed_dropout as kd  # noqa: E402
from mixer.models.encoders import build_encoder  # noqa: E402
from mixer.models.model import HeadsConfig, MixerModel  # noqa: E402


def statistics_of_masks(p: float = 0.1) -> None:
    keys = kd.row_keys(42, [0] * 32, range(32))
    keep = kd.keep_mask(keys, kd.module_id("encoder.layer.0.output.dropout"), (40, 768), p).numpy()
    n = keep.size
    share = keep.mean()
    sigma = np.sqrt(p * (1 - p) / n)
    print(
        f"mask statistics, p {p}, (32, 40, 768): kept {share:.5f} (expected {1 - p:.5f}, "
        f"{abs(share - (1 - p)) / sigma:.2f} binomial sigma)"
    )

    def corr(a, b):
        return abs(float(np.corrcoef(a.ravel().astype(float), b.ravel().astype(float))[0, 1]))

    other_draw = kd.keep_mask(
        kd.row_keys(42, [1] * 32, range(32)),
        kd.module_id("encoder.layer.0.output.dropout"),
        (40, 768),
        p,
    ).numpy()
    other_seed = kd.keep_mask(
        kd.row_keys(43, [0] * 32, range(32)),
        kd.module_id("encoder.layer.0.output.dropout"),
        (40, 768),
        p,
    ).numpy()
    found = {
        "rows": corr(keep[:-1], keep[1:]),
        "positions": corr(keep[:, :-1], keep[:, 1:]),
        "channels": corr(keep[:, :, :-1], keep[:, :, 1:]),
        "draws (epochs)": corr(keep, other_draw),
        "seeds": corr(keep, other_seed),
    }
    print(
        "  |correlation| of neighbouring "
        + ", ".join(f"{k} {v:.4f}" for k, v in found.items())
        + f" (1/sqrt(n) = {1 / np.sqrt(n):.4f})"
    )


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def one_call(device: str, p: float = 0.1) -> None:
    x = torch.randn(32, 40, 768, device=device)
    keys = kd.row_keys(42, [0] * 32, range(32)).to(device)
    if device != "cpu":
        here = kd.keep_mask(keys, 7, (40, 768), p).cpu()
        print(
            f"masks on {device} equal the CPU's: {torch.equal(here, kd.keep_mask(keys.cpu(), 7, (40, 768), p))}"
        )

    def median(fn, repeats=50):
        times = []
        for _ in range(repeats):
            sync(device)
            began = time.perf_counter()
            fn()
            sync(device)
            times.append(time.perf_counter() - began)
        return statistics.median(times) * 1000

    framework = median(lambda: F.dropout(x, p, True))
    with kd.rows(keys):
        keyed = median(lambda: kd.keyed_dropout(x, p, 12345))
    print(
        f"one call on (32, 40, 768), {device}, {torch.get_num_threads()} thread(s): nn.functional.dropout "
        f"{framework:.2f} ms, keyed {keyed:.2f} ms"
    )


def build(encoder: str, p: float, device: str):
    torch.manual_seed(0)
    model = build_encoder(encoder, p).model
    heads = HeadsConfig(
        num_labels=1919,
        vocab_size=14,
        target_len=6,
        decoder_dim=256,
        decoder_layers=2,
        decoder_heads=4,
        dropout=p,
    )
    return MixerModel(model, heads).to(device)


def step_times(
    encoder: str, batch: int, length: int, steps: int, device: str, p: float = 0.1
) -> None:
    framework = build(encoder, p, device)
    keyed = copy.deepcopy(framework)
    kd.install(keyed)
    generator = torch.Generator().manual_seed(1)
    vocab = (
        framework.encoder.config.vocab_size
        if hasattr(framework.encoder.config, "vocab_size")
        else 1000
    )
    ids = torch.randint(5, min(vocab, 1000), (batch, length), generator=generator).to(device)
    attention = torch.ones(batch, length, dtype=torch.long, device=device)
    decoder = torch.randint(0, 14, (batch, 6), generator=generator).to(device)
    models = {"framework": framework, "keyed": keyed}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-5) for name, m in models.items()}
    drawn = [0]

    def one_step(name):
        model, optimizer = models[name], optimizers[name]
        model.train()
        keys = kd.row_keys(42, [0] * batch, range(drawn[0], drawn[0] + batch)).to(device)
        drawn[0] += batch
        context = kd.rows(keys, model) if name == "keyed" else torch.enable_grad()
        with context:
            flat, seq = model(ids, attention, decoder)
        (flat.float().logsumexp(-1).mean() + seq.float().logsumexp(-1).mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for name in models:  # warm-up
        for _ in range(2):
            one_step(name)
    times = {name: [] for name in models}
    for _ in range(3):  # three timings of each; their steps alternate, so that a shared
        spent = {name: 0.0 for name in models}  # machine's load falls on both alike
        for _ in range(steps):
            for name in models:
                sync(device)
                began = time.perf_counter()
                one_step(name)
                sync(device)
                spent[name] += time.perf_counter() - began
        for name in models:
            times[name].append(spent[name] / steps * 1000)
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"training step, {encoder}, batch {batch} x {length}, {device}, {torch.get_num_threads()} thread(s), "
        f"median of 3 x {steps} steps: framework dropout {medians['framework']:.1f} ms "
        f"({', '.join(f'{t:.1f}' for t in times['framework'])}), keyed {medians['keyed']:.1f} ms "
        f"({', '.join(f'{t:.1f}' for t in times['keyed'])}): "
        f"{100 * (medians['keyed'] / medians['framework'] - 1):+.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="canine-small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=48)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-steps", action="store_true", help="the masks and one call only")
    args = parser.parse_args()
    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), torch {torch.__version__}"
    )
    statistics_of_masks()
    one_call(args.device)
    if not args.no_steps:
        step_times(args.encoder, args.batch, args.length, args.steps, args.device)


if __name__ == "__main__":
    main()

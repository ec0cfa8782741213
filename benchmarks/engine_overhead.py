"""Does the training engine cost anything? Samples/s of finetune.py's loop
(real DataLoader, sampler, collation, logging) against a bare
forward/backward/step loop over the same model and pre-built batches, and the
share of step time spent waiting for data. Measured side by side, one run.

    python benchmarks/engine_overhead.py [--encoder minilm-l6] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.data.inputs.dataset import Collator, RowDataset, StepSampler  # noqa: E402
from mixer.data.labels.key import labels_of  # noqa: E402
from mixer.data.prepared.files import load_prepared  # noqa: E402
from mixer.data.inputs.tokens import InputRecipe  # noqa: E402
from mixer.data.inputs.training_inputs import RowInputs, split_caches  # noqa: E402
from mixer.models.encoders import build_encoder  # noqa: E402
from mixer.models.encoders import token_ids_of  # noqa: E402
from mixer.models.losses import row_losses, step_loss  # noqa: E402
from mixer.models.model import HeadsConfig, MixerModel  # noqa: E402
from mixer.training.run import build_optimizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EXAMPLE_FLAGS, timed_rate  # noqa: E402

FLAGS = EXAMPLE_FLAGS


def engine(run_dir: str, encoder: str, batch: int, warmup: int, steps: int) -> float:
    """samples/s of finetune.py over steps warmup+1 .. warmup+steps (from its log lines)."""
    proc = subprocess.run(
        [
            sys.executable,
            "finetune.py",
            *FLAGS,
            "--save-path",
            run_dir,
            "--encoder",
            encoder,
            "--batch-size",
            str(batch),
            "--max-steps",
            str(warmup + steps),
            "--log-interval",
            str(warmup),
            "--eval-interval",
            "100000",
            "--save-interval",
            "100000",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(proc.stderr)
    return timed_rate(proc.stdout)


def setup(run_dir: str, encoder_name: str, batch: int):
    prepared = load_prepared(run_dir)
    encoder = build_encoder(encoder_name, dropout=0.1)
    key_codes = list(prepared.key["code"])
    f = prepared.formatter
    model = MixerModel(
        encoder.model,
        HeadsConfig(num_labels=len(key_codes), vocab_size=f.vocab_size, target_len=f.target_len),
    )
    tokens = split_caches(run_dir, token_ids_of(encoder, InputRecipe(max_len=64)), prepared)[
        "train"
    ]
    dataset = RowDataset(RowInputs(tokens), labels_of(prepared.train, key_codes, f.max_num_codes))
    collate = Collator(encoder.tokenizer.pad_token_id or 0, f.encode_blocks(key_codes))
    sampler = StepSampler(len(dataset), batch, 1, 0, 1, seed=42)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
    return model, loader, f


def bare(model, loader, formatter, warmup: int, steps: int) -> float:
    batches = []
    for batch in loader:  # built before the clock starts
        batches.append(batch)
        if len(batches) == warmup + steps:
            break
    optimizer = build_optimizer(model, 3e-4, 5.0, 0.01)
    model.train()
    rows = 0
    for i, batch in enumerate(batches):
        if i == warmup:
            start, rows = time.perf_counter(), 0
        flat, seq = model(batch.input_ids, batch.attention_mask, batch.decoder_input)
        total, _, _ = row_losses(
            flat,
            seq,
            batch.labels,
            batch.targets,
            formatter.max_num_codes,
            formatter.block_size,
            0.1,
        )
        step_loss(total, batch.weights, batch.global_rows, 1).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rows += len(batch.labels)
    return rows / (time.perf_counter() - start)


def loading_only(loader, steps: int) -> float:
    start = time.perf_counter()
    for i, _ in enumerate(loader):
        if i + 1 == steps:
            break
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/mixer-bench-engine")
    args = parser.parse_args()
    run_dir = os.path.join(args.workdir, args.encoder)
    subprocess.run(
        [
            sys.executable,
            "finetune.py",
            *FLAGS,
            "--save-path",
            run_dir,
            "--encoder",
            args.encoder,
            "--max-steps",
            "1",
            "--eval-interval",
            "100000",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )  # prepares data and the token cache
    engine_rates, bare_rates = [], []
    for _ in range(args.rounds):  # interleaved, so drifting machine load hits both
        for name in os.listdir(run_dir):
            if name.startswith("last") or name == "logs.csv":
                os.unlink(os.path.join(run_dir, name))
        engine_rates.append(engine(run_dir, args.encoder, args.batch_size, args.warmup, args.steps))
        model, loader, formatter = setup(run_dir, args.encoder, args.batch_size)
        bare_rates.append(bare(model, loader, formatter, args.warmup, args.steps))
    model, loader, formatter = setup(run_dir, args.encoder, args.batch_size)
    load_seconds = loading_only(loader, args.steps)
    step_seconds = args.batch_size / statistics.median(engine_rates)
    print(
        f"encoder {args.encoder}, batch {args.batch_size}, {args.steps} timed steps, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"bare loop:  {', '.join(f'{r:.1f}' for r in bare_rates)} samples/s")
    print(f"engine:     {', '.join(f'{r:.1f}' for r in engine_rates)} samples/s")
    print(
        f"engine / bare (medians): {statistics.median(engine_rates) / statistics.median(bare_rates):.3f}"
    )
    print(
        f"data loading: {load_seconds * 1000:.1f} ms per batch = "
        f"{100 * load_seconds / step_seconds:.1f}% of an engine step ({step_seconds * 1000:.0f} ms)"
    )


if __name__ == "__main__":
    main()

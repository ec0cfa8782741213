"""A full-count census, predicted: rows/s, model inputs computed, distinct inputs, peak RSS.

    python benchmarks/full_count.py --checkpoint runs/quickstart [--rows 2000000] [--exponent 1.1]
        [--variants 9] [--chunk-size 100000] [--keep DIR] [--occcanine NAME]

Makes a census-like file from data/toy_hisco.csv: its distinct descriptions and --variants
typo variants of each (mixer.data.inputs.noise, one edit), ranked in a seeded random order and drawn
--rows times by a Zipf law of --exponent (rank r with probability proportional to
1/r^exponent), as a description repeats in a census. Prints the rows, the distinct
descriptions and the exponent; then predicts the file with predict.py (a process of its
own, the user's command) and prints rows/s, the inputs the model computed (counted on the
model's encoder calls), the file's distinct model inputs and predict.py's peak RSS.

Without --checkpoint it trains a tiny model first (seconds; the counts are the same for
any model, the speed is not). To time the code of another checkout on the same file, run
this script with PYTHONPATH=/that/checkout: predict.py and mixer come from there.

--occcanine NAME: where OccCANINE's package (histocc) is importable, also predicts the same
file with OccCANINE(NAME).predict(..., deduplicate=True) side by side; it is not installed
in this project's environment (a scratch environment of its own, as for the parity tests).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.append(ROOT)  # after PYTHONPATH: another checkout named there wins

# predict.py with the model's encoder calls counted: the inputs it computed, on stderr at exit
COUNTING = """
import atexit, os, runpy, sys
from mixer.prediction.predict import Predictor
computed = [0]
encoded = Predictor._encoded
def counting(self, texts, *args, **kwargs):
    computed[0] += len(texts)
    return encoded(self, texts, *args, **kwargs)
Predictor._encoded = counting
atexit.register(lambda: print(f"model inputs computed: {computed[0]}", file=sys.stderr))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
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
    subprocess.run([sys.executable, os.path.join(ROOT, "finetune.py"), "--dataset",
                    os.path.join(ROOT, "data", "toy_hisco.csv"), "--target-cols", "hisco_1", "--zero-padded-codes",
                    "--allow-codes-shorter-than-block-size", "--save-path", run, "--encoder", "canine-tiny",
                    "--decoder-dim", "32", "--decoder-layers", "1", "--decoder-heads", "2", "--max-len", "48",
                    "--max-steps", "30", "--batch-size", "16", "--language", "en"],
                   check=True, capture_output=True, cwd=ROOT)
    return run


def distinct_inputs(checkpoint: str, texts: pd.Series) -> int:
    import mixer

    model = mixer.load(checkpoint, device="cpu")
    unique = pd.unique(texts)
    inputs = model.model_inputs(list(unique))
    blank = pd.Series(unique).str.strip().eq("").to_numpy()
    return len(set(zip(inputs, blank)))


def predict(checkpoint: str, path: str, out: str, chunk_size: int) -> dict:
    predict_py = os.path.join(os.environ.get("PYTHONPATH", ROOT).split(os.pathsep)[0] or ROOT, "predict.py")
    if not os.path.exists(predict_py):
        predict_py = os.path.join(ROOT, "predict.py")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", COUNTING, predict_py, "--checkpoint", checkpoint, "--input", path,
                           "--output", out, "--chunk-size", str(chunk_size)],
                          capture_output=True, text=True, cwd=os.path.dirname(predict_py))
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"predict.py failed:\n{proc.stderr}")
    computed = int(proc.stderr.rsplit("model inputs computed: ", 1)[1].split()[0])
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child: predict.py
    return {"seconds": seconds, "computed": computed, "peak_rss_mb": peak_kb / 1024, "predict_py": predict_py}


def occcanine_side_by_side(name: str, texts: pd.Series) -> None:
    try:
        from histocc import OccCANINE
    except ImportError:
        print("OccCANINE: its package (histocc) is not importable here: side by side skipped")
        return
    model = OccCANINE(name)
    start = time.perf_counter()
    model.predict(texts.tolist(), lang="en", deduplicate=True)
    seconds = time.perf_counter() - start
    print(f"OccCANINE predict(deduplicate=True): {seconds:.1f} s, {len(texts) / seconds:,.0f} rows/s")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="a run directory (default: train a tiny one)")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--exponent", type=float, default=1.1)
    parser.add_argument("--variants", type=int, default=9, help="typo variants of each description")
    parser.add_argument("--chunk-size", type=int, default=100_000)
    parser.add_argument("--keep", help="a directory to keep the file and the predictions in")
    parser.add_argument("--occcanine", metavar="NAME", help="also time OccCANINE(NAME).predict(deduplicate=True)")
    args = parser.parse_args(argv)
    directory = args.keep or tempfile.mkdtemp(prefix="full_count-")
    os.makedirs(directory, exist_ok=True)
    frame, strings = census(args.rows, args.exponent, args.variants)
    path = os.path.join(directory, "census.csv")
    frame.to_csv(path, index=False)
    print(f"file: {len(frame):,} rows drawn from {strings:,} strings (descriptions and up to {args.variants} typo "
          f"variants of each), Zipf exponent {args.exponent}: {frame['occ1'].nunique():,} distinct descriptions")
    checkpoint = args.checkpoint or tiny_model(directory)
    result = predict(checkpoint, path, os.path.join(directory, "predicted.csv"), args.chunk_size)
    distinct = distinct_inputs(checkpoint, frame["occ1"])
    print(f"predict.py ({result['predict_py']}), --chunk-size {args.chunk_size:,}: {result['seconds']:.1f} s, "
          f"{len(frame) / result['seconds']:,.0f} rows/s, model inputs computed {result['computed']:,} "
          f"({result['computed'] / distinct:.2f} x the file's {distinct:,} distinct inputs), "
          f"peak RSS {result['peak_rss_mb']:,.0f} MB")
    if args.occcanine:
        occcanine_side_by_side(args.occcanine, frame["occ1"])


if __name__ == "__main__":
    main()

"""kill -9 at random moments of a multi-chunk prediction, the same command run again: is the
file byte-identical to an uninterrupted run's, and how much work was redone?

    python benchmarks/kill_resume.py [--checkpoint RUN] [--rows 40000] [--chunk-size 4000]
        [--kills 5] [--seed 0] [--keep DIR] [--input csv|gzip|fixed-width]

Makes a census-like file (benchmarks/full_count.py's `census`: a Zipf law over the example
data's descriptions and typo variants of them), then for each output kind (CSV, Parquet,
Excel, Stata and the .npy matrix of --what probs) runs predict.py through once. Then --kills
times, the kinds in turn (each of CSV, Parquet, Excel and Stata at least once in the default
five), it starts the same command, kills it with SIGKILL (kill -9, from this process) at a
moment drawn (seeded): once a drawn chunk has begun, after a drawn fraction of a chunk's time
(as the uninterrupted run timed them); then it runs the same command again and prints:

- byte-identical: the resumed file against the uninterrupted run's;
- the chunks the journal held at the kill (completed), and the chunk the killed run was in;
- the chunks the rerun computed: the total less N of its line "continuing an unfinished run
  after its N chunk(s)";
- chunks redone: the chunks the killed run had begun that the rerun computed again (at
  most one: the chunk in hand at the kill).

predict.py runs as the user runs it, with one addition: a hook that appends the number of
each chunk it begins to a log file (written at once, so it survives the kill). Without
--checkpoint a tiny model is trained first, as full_count.py does. Excel and Stata files
state a time (mixer.data.tables.writing.file_time); every run here has SOURCE_DATE_EPOCH set, so
that the uninterrupted and the resumed files can be compared byte for byte (a resumed job
states its first run's time in any case).

--input: the census as a CSV file (the default), gzip'd (census.csv.gz), or as an IPUMS
fixed-width extract, gzip'd, with its DDI codebook beside it (census.dat.gz and census.xml,
written as tests/conftest.py's write_ipums_extract writes one: the description in OCCSTR,
read with --input-col OCCSTR, beside a YEAR and a SERIAL column).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from full_count import census, tiny_model  # noqa: E402 - benchmarks/ is not a package

INPUTS = ("csv", "gzip", "fixed-width")

# predict.py with each chunk it begins logged: "<chunk> <seconds since start>" per line
LOGGED = """
import os, runpy, sys, time
START = time.monotonic()
log = os.open(os.environ["KILL_RESUME_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
from mixer.prediction import predict_job
read_chunk = predict_job.read_chunk
def logged(job, number, chunk):
    part = read_chunk(job, number, chunk)
    if part is not None:  # a chunk this run computes
        os.write(log, f"{number} {time.monotonic() - START:.3f}\\n".encode())
    return part
predict_job.read_chunk = logged
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

KINDS = {
    "csv": [],
    "parquet": [],
    "xlsx": [],
    "dta": [],
    "npy": ["--what", "probs", "--head", "flat"],
}
CONTINUING = re.compile(r"continuing an unfinished run after its ([\d,]+) chunk\(s\)")


def command(checkpoint: str, path, out: str, chunk_size: int, kind: str) -> list:
    path, *reading = [path] if isinstance(path, str) else path
    return [
        sys.executable,
        "-c",
        LOGGED,
        os.path.join(ROOT, "predict.py"),
        "--checkpoint",
        checkpoint,
        "--input",
        path,
        "--output",
        out,
        "--chunk-size",
        str(chunk_size),
        *reading,
        *KINDS[kind],
    ]


def write_input(frame, directory: str, kind: str) -> list:
    """The census as --input reads it: [path, reading options...]."""
    if kind == "csv":
        path = os.path.join(directory, "census.csv")
        frame.to_csv(path, index=False)
        return [path]
    if kind == "gzip":
        path = os.path.join(directory, "census.csv.gz")
        with gzip.open(path, "wb") as handle:
            handle.write(frame.to_csv(index=False).encode("utf-8"))
        return [path]
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import write_ipums_extract

    # one byte a letter, as the ISO-8859-1 of IPUMS USA's extracts
    texts = [text.encode("latin-1", "replace").decode("latin-1") for text in frame["occ1"]]
    width = max(len(text) for text in texts) + 2
    variables = [
        ("YEAR", 4, "numeric", 0, None),
        ("SERIAL", 8, "numeric", 0, None),
        ("OCCSTR", width, "character", 0, None),
    ]
    records = [(1900, i + 1, text.strip() or None) for i, text in enumerate(texts)]
    path = os.path.join(directory, "census.dat.gz")
    write_ipums_extract(path, variables, records, charset="ISO-8859-1")
    return [path, "--input-col", "OCCSTR"]


def environment(log: str) -> dict:
    env = dict(
        os.environ, KILL_RESUME_LOG=log, SOURCE_DATE_EPOCH="1700000000", PYTHONUNBUFFERED="1"
    )
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def begun(log: str) -> list:
    """[(chunk, seconds)] a run logged."""
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as handle:
        return [(int(a), float(b)) for a, b in (line.split() for line in handle if line.strip())]


def output(directory: str, folder: str, kind: str) -> str:
    """out.<kind> in a folder of its own: every run's output has one name (a Parquet or Stata
    file carries its provenance's id, which names the output)."""
    os.makedirs(os.path.join(directory, folder), exist_ok=True)
    return os.path.join(directory, folder, f"out.{kind}")


def run_through(cmd: list, log: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environment(log), cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"predict.py failed:\n{proc.stderr}")
    return time.perf_counter() - start


def kill_and_resume(
    cmd: list, out: str, log: str, total: int, chunk_seconds: float, rng: random.Random
) -> dict:
    """Start the command, kill -9 it once chunk k (drawn) has begun and a drawn fraction of a
    chunk's time has passed, run it again; what each run did."""
    target, fraction = rng.randrange(total), rng.random()
    if os.path.exists(log):
        os.unlink(log)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment(log), cwd=ROOT
    )
    while proc.poll() is None and target not in dict(begun(log)):  # the job's progress, polled
        time.sleep(0.005)
    time.sleep(fraction * chunk_seconds)
    if proc.poll() is not None:
        raise SystemExit("predict.py ended before the kill: give it more rows")
    os.kill(proc.pid, signal.SIGKILL)  # kill -9
    proc.wait()
    delay = time.perf_counter() - start
    killed_in = [chunk for chunk, _ in begun(log)]
    journal = os.path.join(
        os.path.dirname(out), f".tmp-{os.path.basename(out)}.parts", "journal.json"
    )
    completed = 0
    if os.path.exists(journal):
        with open(journal, encoding="utf-8") as handle:
            completed = json.load(handle)["chunks"]
    os.unlink(log)
    rerun = subprocess.run(cmd, capture_output=True, text=True, env=environment(log), cwd=ROOT)
    if rerun.returncode != 0:
        raise SystemExit(f"the rerun failed:\n{rerun.stderr}")
    found = CONTINUING.search(rerun.stdout)
    continued = int(found.group(1).replace(",", "")) if found else 0
    recomputed = [chunk for chunk, _ in begun(log)]
    return {
        "delay": delay,
        "target": target,
        "fraction": fraction,
        "completed": completed,
        "killed_in": killed_in,
        "continued": continued,
        "recomputed": recomputed,
        "redone": sorted(set(killed_in) & set(recomputed)),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="a run directory (default: train a tiny one)")
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--chunk-size", type=int, default=4_000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", help="a directory to keep the file and the outputs in")
    parser.add_argument("--input", choices=INPUTS, default="csv", help="the census's format")
    args = parser.parse_args(argv)
    directory = args.keep or tempfile.mkdtemp(prefix="kill_resume-")
    os.makedirs(directory, exist_ok=True)
    frame, strings = census(args.rows, 1.1, 9)
    path = write_input(frame, directory, args.input)
    total = math.ceil(len(frame) / args.chunk_size)
    print(
        f"file: {len(frame):,} rows drawn from {strings:,} strings, {frame['occ1'].nunique():,} distinct; "
        f"--chunk-size {args.chunk_size:,}: {total} chunks; --input {os.path.basename(path[0])}"
    )
    checkpoint = args.checkpoint or tiny_model(directory)
    log = os.path.join(directory, "chunks.log")
    chunk_seconds = {}
    for kind in KINDS:
        out = output(directory, "whole", kind)
        if os.path.exists(log):
            os.unlink(log)
        seconds = run_through(command(checkpoint, path, out, args.chunk_size, kind), log)
        starts = dict(begun(log))
        chunk_seconds[kind] = (starts[total - 1] - starts[0]) / max(total - 1, 1)
        print(
            f"uninterrupted {kind:7s}: {seconds:5.1f} s, chunk 0 began at {starts[0]:.1f} s, chunk {total - 1} "
            f"at {starts[total - 1]:.1f} s"
        )
    rng = random.Random(args.seed)
    order = list(KINDS)
    identical = 0
    for number in range(args.kills):
        kind = order[number % len(order)]
        out = output(directory, f"killed-{number}", kind)
        result = kill_and_resume(
            command(checkpoint, path, out, args.chunk_size, kind),
            out,
            log,
            total,
            chunk_seconds[kind],
            rng,
        )
        with open(out, "rb") as cut, open(output(directory, "whole", kind), "rb") as whole:
            same = cut.read() == whole.read()
        identical += same
        in_hand = max(result["killed_in"]) if result["killed_in"] else None
        print(
            f"kill {number + 1} ({kind}): kill -9 at {result['delay']:.1f} s ({result['fraction']:.2f} of a "
            f"chunk's time after chunk {result['target']} began), in chunk {in_hand}; "
            f"completed before the kill (journal): {result['completed']}; rerun continued after "
            f"{result['continued']} and computed {total - result['continued']} of {total} chunk(s) "
            f"(logged: {len(result['recomputed'])}); chunks redone: {len(result['redone'])} "
            f"{result['redone']}; byte-identical: {'yes' if same else 'NO'}"
        )
    print(f"byte-identical after {args.kills} kill(s): {identical} of {args.kills}")


if __name__ == "__main__":
    main()

"""kill -9 at random moments of a multi-chunk prediction, the same command run again: is the
file byte-identical to an uninterrupted run's, and how much work was redone?

    python benchmarks/kill_resume.py [--checkpoint RUN] [--rows 40000] [--chunk-size 4000]
        [--kills 5] [--seed 0] [--keep DIR] [--input csv|gzip|fixed-width]

Makes a census-like file (benchmarks/full_count.py's `census`: a Zipf law over the example
data's descriptions and typo variants of them), then for each output kind (CSV, Parquet,
Excel, Stata and the .npy matrix of --what probs) runs predict.py through once. Then --kills
times, the kinds in turn (each of CSV, Parquet, Excel and Stata at least once in the default
five), it starts the same command, kills it with SIGKILL (kill -9, from this process) at a
moment drawn (seeded) over the uninterrupted run's progress from its first chunk read to its
last chunk written (the chunks are read ahead into a window whose model call is most of that
time, so the moment is drawn over the job's time, not by chunk): once the run reaches the
event before it (a chunk read or written, a model call begun), after as long as the
uninterrupted run took from there; then it runs the same command again
and prints:

- byte-identical: the resumed file against the uninterrupted run's;
- the chunks the journal held at the kill (completed) and the last chunk the killed run had
  read;
- the chunks the rerun read again: those after the N of its line "continuing an unfinished
  run after its N chunk(s)" (the chunks a window held are read again into the same window);
- chunks written again: the chunks both runs handed to the output (at most one: the chunk
  being written at the kill);
- model work redone: the inputs (and batches) the encoder computed in both runs beyond
  what the uninterrupted run computed, beside one chunk's (the most inputs first seen in a
  chunk, as predicting chunk by chunk would compute them).

predict.py runs as the user runs it, with one addition: a hook that appends to a log file
(written at once, so it survives the kill) the number of each chunk it begins and writes,
the inputs first seen in each, and the inputs and batches of each encoder call. Without
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
import shutil
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
BATCH = 256  # predict.py's --batch-size, which the commands here leave as it is

# predict.py with its progress logged, a line each, with the seconds since its start: each
# chunk it begins, "r <chunk> <seconds>"; each chunk it writes (and journals), "w <chunk>
# <seconds>"; each call of the model's encoder, "m <inputs> <batches> <seconds>"; and each
# chunk's inputs first seen in it (what the chunk alone would compute), "n <chunk> <inputs>"
LOGGED = """
import math, os, runpy, sys, time
START = time.monotonic()
log = os.open(os.environ["KILL_RESUME_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def say(*fields):
    os.write(log, (" ".join(map(str, fields)) + f" {time.monotonic() - START:.3f}\\n").encode())
from mixer.prediction import predict_job
from mixer.prediction.predict import Predictor
read_chunk, write_part, model_inputs = (
    predict_job.read_chunk, predict_job.write_part, predict_job.model_inputs
)
def logged(job, number, chunk):
    part = read_chunk(job, number, chunk)
    if part is not None:  # a chunk this run computes
        say("r", number)
    return part
def written(job, part, news=None):
    write_part(job, part, news)
    say("w", part.number)
SEEN = set()
def keyed(job, part):
    model_inputs(job, part)
    new = set(part.distinct.keys) - SEEN
    SEEN.update(new)
    say("n", part.number, len(new))
encoded = Predictor._encoded
def counting(self, texts, langs, batch_size, *args, **kwargs):
    say("m", len(texts), math.ceil(len(texts) / batch_size))
    return encoded(self, texts, langs, batch_size, *args, **kwargs)
predict_job.read_chunk, predict_job.write_part, predict_job.model_inputs = logged, written, keyed
Predictor._encoded = counting
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


def logged(log: str) -> list:
    """The lines a run logged, split."""
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as handle:
        return [line.split() for line in handle if line.strip()]


def events(log: str) -> list:
    """[(tag, which, seconds)] of a run's progress: a chunk read ("r") or written ("w") and
    its number, a model call ("m") and which (0 the first)."""
    found, calls = [], 0
    for fields in logged(log):
        if fields[0] in ("r", "w"):
            found.append((fields[0], int(fields[1]), float(fields[-1])))
        elif fields[0] == "m":
            found.append(("m", calls, float(fields[-1])))
            calls += 1
    return found


def begun(log: str) -> list:
    """[(chunk, seconds)] a run logged."""
    return [(which, seconds) for tag, which, seconds in events(log) if tag == "r"]


def written(log: str) -> list:
    """The chunks a run wrote."""
    return [which for tag, which, _ in events(log) if tag == "w"]


def model_work(log: str) -> tuple:
    """(inputs, batches) a run's encoder computed."""
    calls = [fields[1:3] for fields in logged(log) if fields[0] == "m"]
    return sum(int(n) for n, _ in calls), sum(int(b) for _, b in calls)


def first_seen(log: str) -> dict:
    """{chunk: the inputs first seen in it}, from an uninterrupted run's log."""
    return {int(f[1]): int(f[2]) for f in logged(log) if f[0] == "n"}


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


def kill_and_resume(cmd: list, out: str, log: str, timeline: list, rng: random.Random) -> dict:
    """Start the command, kill -9 it at a moment drawn over the uninterrupted run's `timeline`
    (its events), from its first chunk read to its last written: once the run reaches the
    event before that moment, after as long as the uninterrupted run took from there (the
    runs' start-up and speed vary with the machine's load; their progress does not). Then
    run it again; what each run did."""
    first, last = timeline[0][2], timeline[-1][2]
    moment = first + rng.random() * (last - first)
    tag, which, at = [event for event in timeline if event[2] <= moment][-1]
    fraction = (moment - first) / max(last - first, 1e-9)
    if os.path.exists(log):
        os.unlink(log)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment(log), cwd=ROOT
    )
    while proc.poll() is None and (tag, which) not in {e[:2] for e in events(log)}:
        time.sleep(0.005)  # the job's progress, polled
    time.sleep(moment - at)
    if proc.poll() is not None:
        raise SystemExit("predict.py ended before the kill: give it more rows")
    os.kill(proc.pid, signal.SIGKILL)  # kill -9
    proc.wait()
    delay = time.perf_counter() - start
    finished = os.path.exists(out)  # the job had put its output in place: nothing to resume
    killed_in = [chunk for chunk, _ in begun(log)]
    killed_wrote, killed_work = written(log), model_work(log)
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
    rewrote = written(log)
    return {
        "finished": finished,
        "killed_work": killed_work,
        "rerun_work": model_work(log),
        "written_again": sorted(set(killed_wrote) & set(rewrote)),
        "delay": delay,
        "fraction": fraction,
        "after": f"{dict(r='chunk read', w='chunk written', m='model call')[tag]} {which}",
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
    try:
        run(args, directory)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


def run(args, directory: str) -> None:
    frame, strings = census(args.rows, 1.1, 9)
    path = write_input(frame, directory, args.input)
    total = math.ceil(len(frame) / args.chunk_size)
    print(
        f"file: {len(frame):,} rows drawn from {strings:,} strings, {frame['occ1'].nunique():,} distinct; "
        f"--chunk-size {args.chunk_size:,}: {total} chunks; --input {os.path.basename(path[0])}"
    )
    checkpoint = args.checkpoint or tiny_model(directory)
    log = os.path.join(directory, "chunks.log")
    timeline, work, news = {}, {}, {}
    for kind in KINDS:
        out = output(directory, "whole", kind)
        if os.path.exists(log):
            os.unlink(log)
        seconds = run_through(command(checkpoint, path, out, args.chunk_size, kind), log)
        starts = dict(begun(log))
        timeline[kind] = events(log)
        work[kind] = model_work(log)
        news = first_seen(log) if kind == "csv" else news
        print(
            f"uninterrupted {kind:7s}: {seconds:5.1f} s, chunk 0 began at {starts[0]:.1f} s, chunk {total - 1} "
            f"at {starts[total - 1]:.1f} s; the model computed {work[kind][0]:,} inputs in "
            f"{work[kind][1]} batches"
        )
    most = max(news, key=news.get)  # the chunk with the most inputs of its own
    one_chunk = (news[most], math.ceil(news[most] / BATCH))
    print(
        f"one chunk's model work: at most {one_chunk[0]:,} inputs in {one_chunk[1]} batches (chunk "
        f"{most}: the inputs first seen in it), {sum(news.values()) / total:,.0f} inputs a chunk "
        "on average"
    )
    redone_most = [0, 0, 0]  # chunks written again, model inputs and batches redone: the most
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
            timeline[kind],
            rng,
        )
        with open(out, "rb") as cut, open(output(directory, "whole", kind), "rb") as whole:
            same = cut.read() == whole.read()
        identical += same
        read = max(result["killed_in"]) if result["killed_in"] else None
        # the model's work both runs did beyond one uninterrupted run's
        inputs, batches = (
            result["killed_work"][i] + result["rerun_work"][i] - work[kind][i] for i in (0, 1)
        )
        again = result["written_again"]
        if result["finished"]:  # killed after its end: the rerun is a job of its own
            print(
                f"kill {number + 1} ({kind}): kill -9 at {result['delay']:.1f} s, after the job had "
                "put its output in place (the run was faster than the uninterrupted one): the "
                f"rerun predicted it anew; byte-identical: {'yes' if same else 'NO'}"
            )
            continue
        redone_most = [max(a, b) for a, b in zip(redone_most, (len(again), inputs, batches))]
        print(
            f"kill {number + 1} ({kind}): kill -9 at {result['delay']:.1f} s ({result['fraction']:.2f} of "
            f"the way from the first chunk read to the last written; after {result['after']}), "
            f"chunks read up to {read}; "
            f"completed before the kill (journal): {result['completed']}; rerun continued after "
            f"{result['continued']} and read {len(result['recomputed'])} of {total} chunk(s) again "
            f"({len(result['redone'])} the killed run had read); chunks written again: "
            f"{len(again)} {again}; model work redone: {inputs:,} inputs in {batches} batches "
            f"(one chunk's at most: {one_chunk[0]:,} in {one_chunk[1]}); "
            f"byte-identical: {'yes' if same else 'NO'}"
        )
    print(
        f"byte-identical after {args.kills} kill(s): {identical} of {args.kills}; at most "
        f"{redone_most[0]} chunk(s) written again and {redone_most[1]:,} model inputs in "
        f"{redone_most[2]} batches redone by a kill (one chunk's at most: {one_chunk[0]:,} in "
        f"{one_chunk[1]})"
    )


if __name__ == "__main__":
    main()

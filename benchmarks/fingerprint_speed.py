"""Cost of identifying a run's input by content: the xxh3-128 hash of a 1 GB CSV.

    python benchmarks/fingerprint_speed.py [--gigabytes 1]

A run directory's prepared data is reused only for the same bytes
(mixer.data.prepared.fingerprint), so every start hashes the input files once. This writes a CSV of
the given size from the example data, hashes it three times (the file is in the
page cache after writing, as it is on a second start) and prints the best time
and the rate; then the same with SHA-256 for scale.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mixer.data.prepared.fingerprint import HASH_BLOCK, content_hash  # noqa: E402


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def best_of(fn, path: str, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    args = parser.parse_args()
    example = open(os.path.join(ROOT, "data", "toy_hisco.csv"), "rb").read()
    header, body = example.split(b"\n", 1)
    target = int(args.gigabytes * (1 << 30))
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "big.csv")
        with open(path, "wb") as handle:
            handle.write(header + b"\n")
            written = len(header) + 1
            while written < target:
                handle.write(body)
                written += len(body)
        size = os.path.getsize(path) / (1 << 30)
        xxh = best_of(content_hash, path)
        sha = best_of(sha256, path)
    print(f"file: {size:.2f} GiB CSV (the example data repeated), in the page cache")
    print(f"xxh3-128 (mixer's fingerprint): {xxh:.2f} s  = {size / xxh:.1f} GiB/s")
    print(f"sha-256 (for scale):            {sha:.2f} s  = {size / sha:.1f} GiB/s")


if __name__ == "__main__":
    main()

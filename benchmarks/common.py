"""What the benchmark scripts share: the example-data flags and reading the
throughput finetune.py prints."""

import re
import statistics

# finetune.py on the shipped example data
EXAMPLE_FLAGS = [
    "--dataset",
    "data/toy_hisco.csv",
    "--target-cols",
    "hisco_1",
    "--zero-padded-codes",
    "--allow-codes-shorter-than-block-size",
]


def timed_rate(stdout: str) -> float:
    """Mean samples/s of finetune.py's progress lines, the first window
    (warm-up steps) left out."""
    rates = [float(m) for m in re.findall(r"^step \d+: .*samples_per_sec ([\d.e+]+)", stdout, re.M)]
    return statistics.mean(rates[1:])

"""What the benchmark scripts share: the example-data flags, reading the
throughput finetune.py prints, and a child process's own peak memory."""

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


# A child's peak resident memory, as its parent reads it. On Linux a process that exec's keeps
# in its ru_maxrss the peak of the image it replaced, and subprocess starts a child as a fork
# (or vfork) of this interpreter: a child reports at least this script's memory when it
# started (a benchmark holding a 20M-row table made predict.py read 7 GB where it used 1.5 GB).
# So the command runs under a small interpreter, and what it reports is that interpreter's
# child's peak: PEAK_RSS_KB on stdout after the command's own output.
PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(f'PEAK_RSS_KB {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', flush=True)\n"
    "sys.exit(code)\n"
)
# The same for code run in the measured process itself: its image's high-water mark
# (/proc/self/status VmHWM, KiB), which exec starts afresh; ru_maxrss where /proc lacks it.
OWN_PEAK_KB = (
    "def own_peak_kb():\n"
    "    import resource\n"
    "    try:\n"
    "        with open('/proc/self/status') as status:\n"
    "            return int(next(l for l in status if l.startswith('VmHWM:')).split()[1])\n"
    "    except (OSError, StopIteration):\n"
    "        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
)

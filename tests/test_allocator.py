"""CPU processes keep the memory they free (mixer.core.allocator), unless the user chose."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, env_for_subprocess

# 20 times: a 48 MB block allocated by malloc, written, freed (plain bytes: numpy asks
# for huge pages, which fault 512 times less); prints whether the thresholds were raised
# and the minor page faults of the loop (pages the kernel had to hand out afresh)
LOOP = """
import resource, sys
from mixer.core.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = b"\\x01" * 48_000_000
    del block
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str, **env) -> tuple:
    environ = {k: v for k, v in env_for_subprocess().items()
               if k != "LD_PRELOAD" and not k.startswith("MALLOC_")}
    proc = subprocess.run([sys.executable, "-c", LOOP, mode], capture_output=True, text=True, cwd=ROOT,
                          env=dict(environ, **env), check=True, timeout=120)
    kept, count = proc.stdout.split()
    return kept == "True", int(count)


def test_freed_memory_is_reused_not_faulted_in_again():
    """glibc gives a freed 48 MB block back to the kernel and faults it in again on the
    next allocation; with the thresholds raised, the second block reuses the first."""
    _, plain = faults("plain")
    kept, keeping = faults("keep")
    assert kept
    assert plain > 20 * 10_000  # each block's ~11,700 pages, every time
    assert keeping < plain / 5  # the first block's pages only


def test_an_allocator_the_user_chose_is_left_alone():
    for env in ({"MALLOC_ARENA_MAX": "2"}, {"MALLOC_TRIM_THRESHOLD_": "0"}):
        kept, count = faults("keep", **env)
        assert not kept and count > 20 * 10_000

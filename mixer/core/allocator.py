"""The C allocator of mixer's programs: keep the memory a process frees.

A training step on a CPU allocates and frees the same large buffers every step
(activations; the word-embedding gradient alone is 47 MB for minilm-l6). glibc's
malloc hands blocks above its mmap threshold (32 MiB at most, moved at run time)
out as fresh pages from the kernel and gives the free top of its heap back above
its trim threshold. So each step the kernel zero-fills the same memory again, and
a step whose groups have several shapes (`--length-groups`) does so more often.
5% of the quickstart's CPU time went to the kernel (67 s of 1,305 s, against 10 s
padded whole). `keep_freed_memory` raises both thresholds to 1 GiB, so a process
keeps what it freed and reuses it; its resident memory stays at its peak instead
of falling between steps.

A process-wide setting that cannot be undone (glibc has no getter), so only the
programs set it (finetune.py, train_mixer.py, predict.py and their console
scripts), never the Python API in someone's notebook. Nothing changes where the
user chose already (glibc's MALLOC_*_THRESHOLD_/TOP_PAD_/MMAP_MAX_ variables or
malloc tunables in GLIBC_TUNABLES, which glibc read at start, or an allocator such as
jemalloc, tcmalloc or mimalloc in LD_PRELOAD). Nor does it change with other C libraries
(macOS,
musl), or with glibc before 2.35, which refuses an mmap threshold above 32 MiB.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
KEEP = 1 << 30  # 1 GiB: blocks up to this size come from the heap, which keeps up to this much free
CHOSEN_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
CHOSEN_TUNABLES = (
    "glibc.malloc.mmap_threshold",
    "glibc.malloc.trim_threshold",
    "glibc.malloc.top_pad",
    "glibc.malloc.mmap_max",
)

_kept: Optional[str] = None  # what this process set, for the run's setup block


def user_chose_allocator(environ=None) -> bool:
    environ = os.environ if environ is None else environ
    tunables = environ.get("GLIBC_TUNABLES", "")
    return (
        any(environ.get(name) for name in CHOSEN_VARIABLES)
        or any(name in tunables for name in CHOSEN_TUNABLES)
        or "malloc" in environ.get("LD_PRELOAD", "")
    )  # jemalloc, tcmalloc, mimalloc


def keep_freed_memory() -> Optional[str]:
    """Raise glibc's mmap and trim thresholds for this process (and the DataLoader
    workers it forks later): a phrase for the setup block, or None where nothing was set."""
    global _kept
    if user_chose_allocator():
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc; absent on macOS, a stub on musl
    except (OSError, AttributeError, TypeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not mallopt(M_MMAP_THRESHOLD, KEEP):  # glibc < 2.35: 32 MiB at most, too little to matter
        return None
    mallopt(M_TRIM_THRESHOLD, KEEP)
    _kept = (
        "C allocator keeps freed memory for reuse (blocks up to 1 GiB; mixer.core.allocator: "
        "MALLOC_* variables or an LD_PRELOAD allocator leave it as set)"
    )
    return _kept


def kept() -> Optional[str]:
    """What keep_freed_memory set in this process, or None."""
    return _kept

"""The C allocator of a process that trains or predicts on CPUs: keep freed memory.

A training step on a CPU allocates and frees the same large buffers every step
(activations; the word-embedding gradient alone is 47 MB for minilm-l6). glibc's
malloc hands blocks above its mmap threshold (32 MB at most, moved at run time)
out as fresh pages from the kernel and gives the free top of its heap back above
its trim threshold, so each step the kernel zero-fills the same memory again, and
a step whose groups have several shapes (`--length-groups`) does so more often:
5% of the quickstart's CPU time went to the kernel (67 s of 1,305 s, against 10 s
padded whole). `keep_freed_memory` raises both thresholds, so a process keeps what
it freed and reuses it: the peak is the same, the resident memory stays at the
peak instead of falling between steps.

Only with glibc, and only where the user has not chosen the allocator already (an
LD_PRELOAD such as jemalloc or tcmalloc, or glibc's own MALLOC_*_ variables, which
it read at start): elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
KEEP = 1 << 30  # 1 GiB: blocks up to this size come from the heap, which keeps up to this much free


def user_chose_allocator(environ=None) -> bool:
    environ = os.environ if environ is None else environ
    return bool(environ.get("LD_PRELOAD")) or any(name.startswith("MALLOC_") for name in environ)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (and the DataLoader
    workers it forks later). True when they were raised."""
    if user_chose_allocator():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc; absent on macOS, a no-op stub on musl
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP))

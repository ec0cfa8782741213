"""The programs keep the memory they free (mixer.core.allocator), unless the user chose."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, env_for_subprocess
from mixer.core.allocator import user_chose_allocator

# 20 times: a 48 MB block allocated by malloc, written, freed (plain bytes: numpy asks
# for huge pages); prints whether the thresholds were raised and the minor page faults
# of the loop (pages the kernel had to hand out afresh)
LOOP = """
import resource, sys
from mixer.core.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = b"\\\\x01" * 48_000_000
    del block
print(kept is not None, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def clean_env(**env) -> dict:
    environ = {
        k: v
        for k, v in env_for_subprocess().items()
        if k not in ("LD_PRELOAD", "GLIBC_TUNABLES") and not k.startswith("MALLOC_")
    }
    return dict(environ, **env)


def faults(mode: str, **env) -> tuple:
    proc = subprocess.run(
        [sys.executable, "-c", LOOP, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(**env),
        check=True,
        timeout=120,
    )
    kept, count = proc.stdout.split()
    return kept == "True", int(count)


def test_freed_memory_is_reused_not_faulted_in_again():
    """glibc gives a freed 48 MB block back to the kernel and faults it in again on the
    next allocation; with the thresholds raised, the next block reuses the first."""
    _, plain = faults("plain")
    kept, keeping = faults(
        "keep", MALLOC_ARENA_MAX="2"
    )  # a site's arena limit is no choice of thresholds
    if not kept:
        pytest.skip(
            "this C library takes no 1 GiB mmap threshold (glibc before 2.35, musl): nothing is set"
        )
    assert keeping * 5 < plain  # the first block's pages only (small or huge pages alike)


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
        {"LD_PRELOAD": "libjemalloc.so.2"},
    ],
)
def test_an_allocator_the_user_chose_is_left_alone(env):
    assert user_chose_allocator(env)
    _, plain = faults("plain")
    kept, count = faults("keep", **env)
    assert not kept and count * 2 > plain


def test_only_the_programs_that_run_a_model_set_it():
    """A process-wide setting: finetune.py, train_mixer.py and predict.py set it (and
    say so in the setup block), never the Python API or evaluate.py."""
    code = (
        "from mixer.cli import entrypoints as e; from mixer.core import allocator\n"
        "e.cli.run_main = lambda main, argv=None: None\n"
        "for name in ('evaluate_cli', 'finetune_cli', 'train_mixer_cli', 'predict_cli'):\n"
        "    allocator._kept = None; getattr(e, name)(); print(name, allocator.kept() is not None)"
    )
    kept, _ = faults("keep")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(),
        check=True,
        timeout=120,
    )
    assert proc.stdout.split() == [
        "evaluate_cli",
        "False",
        "finetune_cli",
        str(kept),
        "train_mixer_cli",
        str(kept),
        "predict_cli",
        str(kept),
    ]
    assert not user_chose_allocator(
        {"MALLOC_ARENA_MAX": "2", "LD_PRELOAD": "/opt/xalt/libxalt_init.so"}
    )

"""Numeric precision that fits the hardware.

bf16 and fp16 pay off only where the device computes in them: CUDA GPUs of
compute capability 8.0 and newer for bf16 (any CUDA GPU for fp16), and CPUs
with AVX512-BF16 or AMX for bf16 (AVX512-FP16 or AMX-FP16 for fp16).
Elsewhere PyTorch emulates them, which made the quickstart 24x slower in
bf16 than in fp32 on an AVX2 CPU. So `resolve` runs fp32 there and says so in
one line, unless the user insists (--force-precision).

On CUDA, training's fp32 matrix products use TF32 (about fp32 accuracy, several
times faster on Ampere and newer). Prediction uses it for this tool's models
(they train with it) but not for OccCANINE's, whose predictions are meant to be
exact (`fp32_matmuls`; --tf32 / --no-tf32 choose). Batches are padded to a multiple of 8 tokens:
fewer distinct shapes for the attention kernels, which build a plan per shape
(bf16 prediction on an H100 ran 4x slower than fp32 without it).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

PRECISIONS = ("fp32", "bf16", "fp16")
CUDA_PAD_MULTIPLE = 8


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def native(precision: str, device: str, flags: Optional[set] = None) -> tuple[bool, str]:
    """(does the device compute in this precision, in words what it offers)."""
    if precision == "fp32":
        return True, "fp32"
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":")[1]) if ":" in device else 0
        major, minor = torch.cuda.get_device_capability(index)
        name = torch.cuda.get_device_name(index)
        ok = precision == "fp16" or major >= 8
        return ok, f"{name} (compute capability {major}.{minor})"
    flags = cpu_flags() if flags is None else flags
    wanted = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}[precision]
    found = [f for f in wanted if f in flags]
    simd = "AVX512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2")
    detail = f"{cpu_model()} ({simd}{', ' + ', '.join(found) if found else ''})"
    return bool(found), detail


def resolve(
    requested: str,
    device: str,
    force: bool = False,
    log: Callable[[str], None] = print,
    flags: Optional[set] = None,
) -> str:
    """The precision to run in: `requested` where the device computes in it, or when
    forced; otherwise fp32, with a one-line notice."""
    ok, detail = native(requested, device, flags)
    if ok:
        return requested
    if force:
        log(
            f"note: --precision {requested} is emulated on {detail}: expect it to be slower "
            "than fp32 (kept because of --force-precision)"
        )
        return requested
    log(
        f"note: {detail} has no {requested} arithmetic, so {requested} would be emulated and "
        f"slower: running fp32 (pass --force-precision to run {requested} anyway)"
    )
    return "fp32"


def pad_multiple(device: str) -> int:
    return CUDA_PAD_MULTIPLE if device.startswith("cuda") else 1


@contextlib.contextmanager
def fp32_matmuls(tf32: bool):
    """CUDA's fp32 matrix products and convolutions inside the block: TF32 (tf32=True;
    several times faster on Ampere and newer, about 1e-3 relative error) or true fp32
    (False); the caller's settings come back after it. Enter it around one batch's
    computation, never across a `yield`: a generator suspended inside it would leave
    its setting on whatever code runs meanwhile. (The flags are CUDA's own, so this
    changes nothing on the CPU; they are set there too, the same on every device.)"""
    import torch

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(tf32)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before

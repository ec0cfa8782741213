"""int8 prediction on CPUs: a model's linear layers quantized when it is loaded.

`predict.py --quantize int8` (and `mixer.load(..., quantize="int8")`) replaces every
`nn.Linear` of the encoder, where nearly all of the arithmetic is, by PyTorch's
dynamically quantized one: int8 weights, activations quantized per batch, int32 sums, so
predictions are approximate. The heads stay in fp32: quantizing them too moved more codes
(on a CANINE model trained on the example data; docs/performance.md). What int8 costs in
agreement and accuracy, and what it gains in speed on which CPUs:
benchmarks/int8_agreement.py, benchmarks/predict_speed.py --modes int8 and
benchmarks/occcanine_speed.py (docs/performance.md).

A quantized activation's scale is that of the whole tensor a layer gets, so a row batched
with others would get an int8 approximation that depends on them (and on their padding). The
predictor therefore runs a quantized encoder on one row at a time (mixer.prediction.predict):
each row's int8 approximation is its own, whatever the batch, the chunk or the number of
processes. The heads, in fp32, run on the batch as fp32 prediction's do, so their
probabilities round by its shape as fp32's do (docs/predicting.md). Running them one row at
a time too cost greedy decoding 2.8x its CPU time (one thread of an AVX2 CPU; issue 34), for a
difference of float rounding.

Why PyTorch's dynamic quantization (torch.ao.quantization.quantize_dynamic): it is the
one implementation that ran CANINE here. ONNX Runtime could not run transformers'
CanineModel as exported (a shape traced as a constant in its final character layer),
and torchao's int8 configuration ran 16x slower than fp32 on a CPU. PyTorch marks its
eager quantization as deprecated: where a torch no longer has it, --quantize says so.
Never used unless asked: OccCANINE's models and this tool's predict in fp32 by default.
"""

from __future__ import annotations

import warnings
from typing import Optional

from mixer.core.errors import UserError

QUANTIZE_MODES = ("int8",)
APPROXIMATE_NOTE = (
    "note: --quantize int8: the encoder's linear layers compute in int8, so probabilities are "
    "approximate and a few codes may differ from fp32's (agreement measured in "
    "docs/performance.md)"
)


def check_quantize(mode: Optional[str], device: str, precision: str) -> None:
    """Refuse, before the model loads, a quantization this device or precision cannot run."""
    if mode is None:
        return
    if mode not in QUANTIZE_MODES:
        raise UserError(
            f"quantize={mode!r}: choose {', '.join(QUANTIZE_MODES)} (or leave it out for fp32)"
        )
    if not str(device).startswith("cpu"):
        raise UserError(
            f"--quantize {mode} runs on CPUs (PyTorch's dynamic quantization); on a GPU "
            "leave it out (or pass --precision bf16), or hide the GPU to predict on the CPU "
            "(CUDA_VISIBLE_DEVICES= python predict.py ..., or mixer.load(..., device='cpu'))"
        )
    if precision != "fp32":
        raise UserError(f"--quantize {mode} computes in int8 and fp32; leave --precision at fp32")


def quantize(model, mode: Optional[str]):
    """The model with its encoder's linear layers in int8, changed in place (no second copy
    of the weights is held: the fp32 layers are freed as they are replaced)."""
    if mode is None:
        return model
    quantize_encoder(model.encoder, mode)
    return model


def quantize_encoder(
    encoder, mode: str = "int8", per_channel: bool = False, keep_fp32: Optional[str] = None
):
    """The encoder's linear layers in int8, in place. per_channel: one weight scale per output
    row instead of one per layer; keep_fp32: a regular expression of the layer names left in
    fp32. The defaults are --quantize's; the other choices are measured against them by
    benchmarks/int8_agreement.py --alternatives (docs/performance.md says why they are not
    the default)."""
    import re

    import torch

    try:
        from torch.ao.quantization import (
            default_dynamic_qconfig,
            per_channel_dynamic_qconfig,
            quantize_dynamic,
        )
    except ImportError:
        raise UserError(
            f"--quantize {mode}: this torch ({torch.__version__}) has no "
            "torch.ao.quantization.quantize_dynamic; predict in fp32"
        )
    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    layers = {
        name: qconfig
        for name, module in encoder.named_modules()
        if isinstance(module, torch.nn.Linear) and not (keep_fp32 and re.search(keep_fp32, name))
    }
    with (
        warnings.catch_warnings()
    ):  # its deprecation notices: the module docstring says why it is used
        warnings.simplefilter("ignore")
        quantize_dynamic(encoder, layers, dtype=torch.qint8, inplace=True)
    return encoder

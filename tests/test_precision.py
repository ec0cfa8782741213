"""Precision that fits the hardware, and the GPU padding rule."""

import numpy as np
import pytest
import torch

from conftest import FLOATS, run_program
from mixer.core.precision import native, resolve
from mixer.data.inputs.dataset import Collator

AVX2_ONLY = {"avx2", "fma"}
SAPPHIRE_RAPIDS = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


def test_emulated_precision_runs_fp32_and_says_so_unless_forced():
    said = []
    assert resolve("bf16", "cpu", log=said.append, flags=AVX2_ONLY) == "fp32"
    assert len(said) == 1 and "emulated" in said[0] and "--force-precision" in said[0]
    assert resolve("bf16", "cpu", force=True, log=said.append, flags=AVX2_ONLY) == "bf16"
    assert resolve("bf16", "cpu", log=said.append, flags=SAPPHIRE_RAPIDS) == "bf16"
    assert resolve("fp16", "cpu", log=said.append, flags=SAPPHIRE_RAPIDS) == "fp32"
    assert resolve("fp32", "cpu", log=said.append, flags=set()) == "fp32"
    assert len(said) == 3


def test_training_reports_the_precision_it_runs(small_csv, tmp_path):
    runs_native, _ = native("bf16", "cpu")
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--target-cols",
        "hisco_1",
        "--save-path",
        tmp_path / "run",
        "--max-steps",
        "1",
        "--precision",
        "bf16",
        "--encoder",
        "canine-tiny",
        "--decoder-dim",
        "32",
        "--decoder-layers",
        "1",
        "--decoder-heads",
        "2",
        "--max-len",
        "48",
    )
    expected = "bf16" if runs_native else "fp32"
    assert f"precision {expected}" in proc.stdout
    assert ("no bf16 arithmetic" in proc.stdout) != runs_native


@pytest.mark.floats
def test_padding_to_a_multiple_of_8_leaves_a_bert_encoder_unchanged(tiny_bert_dir):
    """On GPUs batches are padded to a multiple of 8 tokens; masked padding must not
    change what a BERT-like encoder gives the heads."""
    from transformers import AutoModel

    from mixer.data.inputs.padding import InputPadding
    from mixer.models.model import HeadsConfig, MixerModel

    torch.manual_seed(0)
    model = MixerModel(AutoModel.from_pretrained(tiny_bert_dir), HeadsConfig(5, 6, 3)).eval()
    rows = [
        (np.array([2, 7, 9, 11, 3]), np.array([0]), 1, 1.0),
        (np.array([2, 8, 3]), np.array([1]), 1, 1.0),
    ]
    key_blocks = np.array([[3, 4], [4, 5], [5, 3], [3, 3], [4, 4]])
    tight = Collator(0, key_blocks)(rows)
    padded = Collator(0, key_blocks, padding=InputPadding(multiple=8))(rows)
    assert tight.input_ids.shape[1] == 5 and padded.input_ids.shape[1] == 8
    with torch.no_grad():
        a = model.encode(tight.input_ids, tight.attention_mask)[1]
        b = model.encode(padded.input_ids, padded.attention_mask)[1]
    torch.testing.assert_close(a, b, **FLOATS)

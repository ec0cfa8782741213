#!/usr/bin/env bash
# GPU smoke: the checks only a GPU can answer (quickstart in fp32/TF32, bf16, fp16,
# --compile, torchrun with NCCL, prediction speed), in one command under 10 minutes.
# Without CUDA it says so, runs the CPU-runnable part and exits 0.
#   bash benchmarks/gpu_smoke.sh [--out DIR]
# On a machine without the quickstart encoder's package, first run here
#   python benchmarks/minilm_pack.py pack .carry/minilm-l6-fp16
# and carry .carry/ along (see docs/gpu.md). A machine without network that lacks the
# pure-Python packages of requirements.txt gets them the same way:
#   pip install --target .carry/pylib anyascii==0.3.3 Unidecode==1.4.0   (then PYTHONPATH=.carry/pylib there)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec python3 benchmarks/gpu_smoke.py --out "${OUT:-/tmp/mixer-gpu-smoke}" "$@"

#!/usr/bin/env bash
# Train on N GPUs (or N CPU processes) of this machine with a free port.
#   scripts/train_multi_gpu.sh N finetune.py --dataset data/toy_hisco.csv --target-cols hisco_1 ...
# Any entry point works (finetune.py, train_mixer.py, predict.py); --distributed is added.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N SCRIPT.py [flags...]" >&2
  exit 2
fi
nproc=$1; shift
script=$1; shift
port=$(python - <<'PY'
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
PY
)
cd "$(dirname "$0")/.."
exec torchrun --nnodes=1 --nproc_per_node="$nproc" --master_addr=127.0.0.1 --master_port="$port" \
  "$script" --distributed "$@"

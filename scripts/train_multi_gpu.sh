#!/usr/bin/env bash
# Train on N GPUs (or N CPU processes) of this machine.
#   scripts/train_multi_gpu.sh N finetune.py --dataset data/toy_hisco.csv --target-cols hisco_1 ...
# Any entry point works (finetune.py, train_mixer.py, predict.py); --distributed is added.
# torchrun --standalone holds its own rendezvous on a port it keeps open from the start, so
# jobs sharing a node never race for a port (a port found free and then closed can be taken
# by another job before torchrun binds it).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N SCRIPT.py [flags...]" >&2
  exit 2
fi
nproc=$1; shift
script=$1; shift
cd "$(dirname "$0")/.."
exec torchrun --standalone --nproc_per_node="$nproc" "$script" --distributed "$@"

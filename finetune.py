#!/usr/bin/env python
"""Fine-tune a classifier on ONE dataset with ANY code system.

Builds the label key from the data, splits train/validation, trains and
writes a run directory (see README). The same command runs everywhere:

  one process (cuda:0 if present, else CPU):
    python finetune.py --dataset data/toy_hisco.csv --target-cols hisco_1 \\
        --zero-padded-codes --allow-codes-shorter-than-block-size --save-path runs/toy

  one machine, N GPUs (or N CPU processes):
    torchrun --standalone --nproc_per_node=N finetune.py --distributed ...

  several machines (run on each, R = 0 .. M-1):
    torchrun --nnodes=M --node_rank=R --nproc_per_node=N \\
        --master_addr=HEAD --master_port=29500 finetune.py --distributed ...
"""

from mixer.cli.entrypoints import finetune_cli

if __name__ == "__main__":
    finetune_cli()

#!/usr/bin/env python
"""Train on lists of train/val files with a BUILT-IN code system
(--formatter hisco | occ1950), e.g. a base model for later fine-tuning.

  one process:
    python train_mixer.py --train-data a.csv b.csv --val-data v.csv \\
        --formatter hisco --save-dir runs/base

  one machine, N GPUs:
    torchrun --standalone --nproc_per_node=N train_mixer.py --distributed ...

  several machines (R = 0 .. M-1):
    torchrun --nnodes=M --node_rank=R --nproc_per_node=N \\
        --master_addr=HEAD --master_port=29500 train_mixer.py --distributed ...
"""

from mixer.cli.entrypoints import train_mixer_cli

if __name__ == "__main__":
    train_mixer_cli()

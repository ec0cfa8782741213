#!/usr/bin/env python
"""Codes for a CSV/Parquet file from a run directory.

python predict.py --checkpoint runs/toy --input data/toy_hisco.csv --output preds.csv

sharded over N processes (rank 0 writes one file in input order):
  torchrun --standalone --nproc_per_node=N predict.py --checkpoint runs/toy ...
"""

from mixer.cli.entrypoints import predict_cli

if __name__ == "__main__":
    predict_cli()

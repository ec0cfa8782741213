#!/usr/bin/env python
"""The OccCANINE paper's evaluation table for a predictions file: accuracy,
precision, recall and F1 at 1 to 5 leading digits, overall and per group.

  python evaluate.py --predictions preds.csv --truth-cols hisco_1 hisco_2 --by lang
"""

from mixer.cli.entrypoints import evaluate_cli

if __name__ == "__main__":
    evaluate_cli()

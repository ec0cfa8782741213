"""The model's batch plan over a whole file, counted without running the encoder.

    python benchmarks/batch_plan.py --checkpoint runs/quickstart --input census.csv
        [--chunk-size 100000] [--batch-size N]
    PYTHONPATH=/path/to/old/checkout python benchmarks/batch_plan.py ...

Runs predict.py on the file in this process with the encoder replaced by one that returns
zeros (the written codes are meaningless; the file goes to a temporary directory), and
counts what the encoder was asked: its calls (Predictor._encoded, one per group of new
inputs), batches, inputs, the tokens they hold and the padded tokens (each batch's rows
times its padded length: the encoder's work). Beside them, the plan of one call over the
same inputs (sorted by length and cut every --batch-size, as one call cuts them): the least
padded work the file's distinct inputs can have. The encoder is the cost of a full count
after the store; these counts are exact on any machine, where its time is not. With
PYTHONPATH=/that/checkout the job's code comes from there.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.append(ROOT)  # after PYTHONPATH: another checkout named there wins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--chunk-size", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, help="predict.py's --batch-size (its default)")
    args = parser.parse_args()

    import torch

    from mixer.models.model import MixerModel
    from mixer.prediction.predict import Predictor

    def zeros(self, input_ids, attention_mask):
        hidden = self.encoder.config.hidden_size
        return input_ids.new_zeros((*input_ids.shape, hidden), dtype=torch.float32)

    MixerModel.encode = lambda self, ids, mask: (
        zeros(self, ids, mask),
        zeros(self, ids, mask)[:, 0],
    )
    MixerModel.pooled = lambda self, ids, mask: zeros(self, ids, mask)[:, 0]

    calls, lengths, batches, padded = [0], [], [0], [0]
    plan = {}
    encoded = Predictor._encoded

    def counting(self, texts, langs, batch_size, states=True, desc_chars=None):
        calls[0] += 1
        plan["padding"], plan["batch_size"] = self.padding(states), batch_size
        for batch in encoded(self, texts, langs, batch_size, states, desc_chars):
            mask = batch[3]
            batches[0] += 1
            padded[0] += int(mask.numel())
            lengths.extend(mask.sum(1).tolist())
            yield batch

    Predictor._encoded = counting
    predict_py = os.path.join(
        os.environ.get("PYTHONPATH", ROOT).split(os.pathsep)[0] or ROOT, "predict.py"
    )
    if not os.path.exists(predict_py):
        predict_py = os.path.join(ROOT, "predict.py")
    with tempfile.TemporaryDirectory() as tmp:
        sys.argv = [
            predict_py,
            "--checkpoint",
            args.checkpoint,
            "--input",
            args.input,
            "--output",
            os.path.join(tmp, "out.csv"),
            "--chunk-size",
            str(args.chunk_size),
            *(["--batch-size", str(args.batch_size)] if args.batch_size else []),
        ]
        try:
            runpy.run_path(predict_py, run_name="__main__")
        except SystemExit as done:  # predict.py's own exit
            if done.code:
                raise

    found = np.sort(np.asarray(lengths, dtype=np.int64), kind="stable")
    size, padding = plan["batch_size"], plan["padding"]
    one = sum(
        padding.length(int(found[start : start + size].max())) * len(found[start : start + size])
        for start in range(0, len(found), size)
    )
    print(f"encoder calls: {calls[0]:,}; batches: {batches[0]:,}; inputs: {len(found):,}")
    print(f"tokens: {int(found.sum()):,}; padded tokens: {padded[0]:,}")
    print(
        f"one call over the same inputs: {-(-len(found) // size):,} batches, "
        f"{one:,} padded tokens; this plan: {padded[0] / one:.3f}x"
    )


if __name__ == "__main__":
    main()

"""What an evaluation computes in row order and shortest first (mixer.data.inputs.dataset.
eval_batches): the validation rows' tokens, the tokens padded in batches of 128 each way, and
the CPU seconds of one pass of the model over them each way (encoder, teacher-forced decoder,
greedy decoding, as an evaluation runs them):

    python benchmarks/eval_padding.py runs/quickstart
"""

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    from mixer.data.inputs.dataset import eval_batches
    from mixer.prediction.predict import Predictor

    predictor = Predictor.load(args.run_dir, device="cpu")
    model = predictor.model.eval()
    val = pd.read_parquet(os.path.join(args.run_dir, "data_val.parquet"))
    texts = val["text"].astype(str).to_numpy(dtype=object)
    langs = val["lang"].astype(str).to_numpy(dtype=object)
    ids, lengths = predictor.token_ids.encode(texts, langs, None)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    steps = predictor.formatter.max_num_codes * predictor.formatter.block_size
    rows = np.arange(len(texts))
    print(f"{len(texts):,} validation rows, {int(lengths.sum()):,} tokens")
    for name, batches in (
        ("row order", eval_batches(rows, args.batch_size)),
        ("shortest first", eval_batches(rows, args.batch_size, lengths)),
    ):
        padded, seconds = 0, time.process_time()
        with torch.no_grad():
            for batch in batches:
                longest = int(lengths[batch].max())
                padded += longest * len(batch)
                x = np.full((len(batch), longest), predictor.pad_id, dtype=np.int64)
                mask = np.zeros_like(x)
                for i, row in enumerate(batch):
                    x[i, : lengths[row]] = ids[offsets[row] : offsets[row + 1]]
                    mask[i, : lengths[row]] = 1
                x, mask = torch.from_numpy(x), torch.from_numpy(mask)
                states, pooled = model.encode(x, mask)
                model.flat_head(pooled)
                start = torch.full((len(batch), steps), 1, dtype=torch.long)
                model.decoder(start, states, mask == 0)
                model.generate(states, mask, steps)
        seconds = time.process_time() - seconds
        print(f"{name:15s}: {padded:,} tokens padded, {seconds:.1f} CPU seconds")


if __name__ == "__main__":
    main()

"""How prediction reads the model's heads: from scores and decoded blocks to codes and
probabilities, by the rules of the model's family (mixer.reporting.metrics
.PredictionRules).

- flat and full: the codes whose probability passes the row's threshold, at most
  top_k (mixer.reporting.metrics.flat_prediction).
- seq2seq: the decoder's greedy blocks. mixer's family ranks them by block
  probability, OccCANINE's lists them as decoded with one confidence per row, as
  OccCANINE's own predict does.

The Predictor (mixer.prediction.predict) batches texts, runs the encoder and hands the
outputs here.
"""

from __future__ import annotations

import numpy as np
import torch

from mixer.reporting.metrics import decoded_blocks, decoded_confidence, flat_prediction


class HeadReader:
    """Codes and probabilities from one model's head outputs, read the way its family
    reads them."""

    def __init__(self, model, formatter, rules, codes: np.ndarray):
        self.model = model  # the decoder's generate and first_block_probs (OccCANINE's confidence)
        self.formatter = formatter
        self.rules = rules
        self.codes = codes  # the key's codes, by flat-head index

    def thresholded(self, scores, limits, top_k, logits=None, levels=()):
        """The codes whose score passes the row's limit (by the family's rule), at most
        top_k, with their scores: the flat head, and the full scoring of the key. With
        the flat head's `logits`, also each row's confidence: the probability that its
        code set is exactly the one written (mixer.coding.confidence.flat_confidence), and
        at each prefix length of `levels`, that its codes cut to it are exactly right.
        Returns (codes, probs, confidence, level confidences (rows, levels))."""
        index, top_probs, chosen = flat_prediction(scores, limits, top_k, self.rules)
        confidence = np.full(len(index), np.nan)
        by_level = np.full((len(index), len(levels)), np.nan)
        if logits is not None:
            written = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
            written.scatter_(1, index, chosen)
            confidence = flat_confidence_on_device(logits, written)
            if levels:
                from mixer.coding.confidence import flat_level_confidence

                logits, written = logits.float().cpu().numpy(), written.cpu().numpy()
                for j, length in enumerate(levels):
                    by_level[:, j] = flat_level_confidence(logits, written, self.codes, length)
        index, top_probs, chosen = (
            index.cpu().numpy(),
            top_probs.cpu().numpy(),
            chosen.cpu().numpy(),
        )
        codes = np.where(chosen, self.codes[index], "")
        out_probs = np.where(chosen, top_probs, np.nan)
        return (*_pad_columns(codes, out_probs, top_k), confidence, by_level)

    def seq2seq(self, states, mask, top_k, levels=()):
        """The decoder's codes for encoder states: greedy blocks, ranked by block
        probability (mixer) or as decoded with one confidence per row (OccCANINE). and
        each row's confidence: mixer's, the probability that the decoder writes exactly
        these blocks (mixer.coding.confidence.sequence_confidence), and at each prefix
        length of `levels`, their first characters. OccCANINE's, its own (no levels).
        Returns (codes, probs, confidence, level confidences (rows, levels))."""
        f = self.formatter
        steps = (
            f.target_len
            if self.rules.seq2seq_order == "decoded"
            else f.max_num_codes * f.block_size
        )
        tokens, token_probs = self.model.generate(states, mask, steps)
        blocks = decoded_blocks(tokens.cpu(), f.max_num_codes, f.block_size)
        if self.rules.seq2seq_order == "decoded":
            return (
                *self._as_decoded(blocks, token_probs, states, mask, top_k),
                np.full((len(blocks), len(levels)), np.nan),
            )
        from mixer.coding.confidence import sequence_confidence, sequence_level_confidence

        written = token_probs[:, : f.max_num_codes * f.block_size].float()
        block_probs = (
            written.reshape(len(blocks), f.max_num_codes, f.block_size).prod(-1).cpu().numpy()
        )
        written = written.cpu().numpy()
        by_level = (
            np.stack(
                [
                    sequence_level_confidence(written, f.block_size, f.max_num_codes, length)
                    for length in levels
                ],
                axis=1,
            )
            if levels
            else np.zeros((len(blocks), 0))
        )
        return (
            *ranked_codes(blocks, block_probs, f, top_k),
            sequence_confidence(written),
            by_level,
        )

    def _as_decoded(self, blocks, token_probs, states, mask, top_k):
        """OccCANINE's greedy output: the codes as decoded, in order, and one confidence
        per row (mixer.reporting.metrics.decoded_confidence, which a run's scores use too)."""
        f = self.formatter
        rows = [
            [c for c in map(f.decode_block, row_blocks) if c is not None] for row_blocks in blocks
        ]
        confidence = decoded_confidence(self.model, states, mask, rows, token_probs, f)
        out_codes = np.full((len(blocks), top_k), "", dtype=object)
        out_probs = np.full((len(blocks), top_k), np.nan)
        for row, codes in enumerate(rows):
            for k, code in enumerate(codes[:top_k]):
                out_codes[row, k], out_probs[row, k] = code, float(confidence[row])
        return out_codes, out_probs, np.asarray(confidence, dtype=np.float64)


def ranked_codes(blocks: list, block_probs: np.ndarray, formatter, top_k: int) -> tuple:
    """mixer's reading of the decoder: each row's codes by falling block probability,
    each code once (the training metrics count the same set)."""
    out_codes = np.full((len(blocks), top_k), "", dtype=object)
    out_probs = np.full((len(blocks), top_k), np.nan)
    for row, row_blocks in enumerate(blocks):
        found = {}
        for b in np.argsort(-block_probs[row], kind="stable"):
            code = formatter.decode_block(row_blocks[b])
            if code is not None:
                found.setdefault(code, block_probs[row, b])
        for k, (code, p) in enumerate(list(found.items())[:top_k]):
            out_codes[row, k], out_probs[row, k] = code, p
    return out_codes, out_probs


def _pad_columns(codes, probs, top_k):
    if codes.shape[1] < top_k:  # fewer codes in the key than top_k
        extra = top_k - codes.shape[1]
        codes = np.hstack([codes, np.full((len(codes), extra), "", dtype=object)])
        probs = np.hstack([probs, np.full((len(probs), extra), np.nan)])
    return codes, probs


def flat_confidence_on_device(logits, written) -> np.ndarray:
    """mixer.coding.confidence.flat_confidence computed where the logits are (float64, log
    space; log(1 - sigmoid(x)) = log sigmoid(x) - x), so a GPU does not wait for the host
    to read every code's logit: the same numbers within float rounding (tested)."""
    x = logits.double()
    log_p = torch.nn.functional.logsigmoid(x) - x * (~written)
    return log_p.sum(dim=1).exp().cpu().numpy()

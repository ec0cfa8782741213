"""Evaluation metrics as sums, reduced across ranks, divided once.

Per head (flat, seq2seq) and over the validation rows:
  accuracy  = rows whose predicted code set equals the true set / rows
  precision = sum |pred & true| / sum |pred|        (micro, over codes)
  recall    = sum |pred & true| / sum |true|
  f1        = 2 * precision * recall / (precision + recall)
and for the seq2seq head token_accuracy = correct decoder labels / labels
(teacher forcing, every position of every row). The same prediction rules
(`flat_prediction`, `seq2seq_prediction`) are used by predict.py.
"""

from __future__ import annotations

import torch

from mixer.formatter import PAD

INVALID = -2  # a decoded block that is not a code of the key
SUM_NAMES = ("rows", "loss", "seq2seq_loss", "flat_loss", "token_correct", "token_count",
             "flat_exact", "flat_tp", "flat_pred", "flat_true",
             "seq2seq_exact", "seq2seq_tp", "seq2seq_pred", "seq2seq_true")


def flat_prediction(probs: torch.Tensor, threshold: float, top_k: int):
    """Codes with probability >= threshold, at most top_k, and at least the most
    probable one. Returns (indices, probs, chosen) each (rows, top_k), best first."""
    top_probs, top_index = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    chosen = top_probs >= threshold
    chosen[:, 0] = True
    return top_index, top_probs, chosen


def seq2seq_prediction(tokens: torch.Tensor, token_probs: torch.Tensor, key_blocks: torch.Tensor,
                       num_blocks: int, block_size: int):
    """Decoded blocks -> (key index per block, -1 empty, INVALID not a code; block probability)."""
    rows = tokens.size(0)
    blocks = tokens[:, : num_blocks * block_size].reshape(rows, num_blocks, block_size)
    block_probs = token_probs[:, : num_blocks * block_size].reshape(rows, num_blocks, block_size)
    block_probs = block_probs.prod(-1)
    matches = (blocks.unsqueeze(2) == key_blocks.view(1, 1, *key_blocks.shape)).all(-1)
    found = matches.any(-1)
    index = torch.where(found, matches.float().argmax(-1), torch.full_like(blocks[..., 0], INVALID))
    empty = (blocks == PAD).all(-1)
    index = torch.where(empty, torch.full_like(index, -1), index)
    return index, block_probs


def repeated_blocks(tokens: torch.Tensor, num_blocks: int, block_size: int) -> torch.Tensor:
    """(rows, blocks): True where a block spells the same tokens as an earlier block of
    its row. A predicted code SET holds each code once, and so each invalid block."""
    rows = tokens.size(0)
    blocks = tokens[:, : num_blocks * block_size].reshape(rows, num_blocks, block_size)
    same = (blocks.unsqueeze(2) == blocks.unsqueeze(1)).all(-1)  # (r, i, j)
    earlier = torch.ones(num_blocks, num_blocks, dtype=torch.bool, device=tokens.device).tril(-1)
    return (same & earlier).any(-1)


def _set_sums(pred_hot: torch.Tensor, invalid: torch.Tensor, true_hot: torch.Tensor):
    exact = ((pred_hot == true_hot).all(-1) & (invalid == 0)).sum()
    tp = (pred_hot * true_hot).sum()
    return exact, tp, pred_hot.sum() + invalid.sum(), true_hot.sum()


THRESHOLD_GRID = torch.arange(1, 100, dtype=torch.float64) / 100  # 0.01 .. 0.99


class MetricSums:
    """Running sums of one evaluation on one rank. With `tune_thresholds`, also the flat
    head's true positives and predictions at every threshold of THRESHOLD_GRID."""

    def __init__(self, device, tune_thresholds: bool = False):
        self.values = torch.zeros(len(SUM_NAMES), dtype=torch.float64, device=device)
        self.grid = (torch.zeros(2, len(THRESHOLD_GRID), dtype=torch.float64, device=device)
                     if tune_thresholds else None)

    def add(self, **sums) -> None:
        for name, value in sums.items():
            self.values[SUM_NAMES.index(name)] += value.double() if torch.is_tensor(value) else value

    def add_batch(self, *, row_total, row_seq, row_flat, seq_logits, targets, flat_probs,
                  labels, decoded_index, decoded_tokens, threshold, num_labels, top_k):
        from mixer.losses import multi_hot

        true_hot = multi_hot(labels, num_labels)
        index, _, chosen = flat_prediction(flat_probs, threshold, top_k)
        flat_hot = torch.zeros_like(true_hot).scatter_(1, index, chosen.float())
        seq_valid = torch.where(decoded_index >= 0, decoded_index, torch.full_like(decoded_index, -1))
        seq_hot = multi_hot(seq_valid, num_labels)
        repeated = repeated_blocks(decoded_tokens, decoded_index.size(1),
                                   decoded_tokens.size(1) // decoded_index.size(1))
        seq_invalid = ((decoded_index == INVALID) & ~repeated).sum(-1)
        f_exact, f_tp, f_pred, f_true = _set_sums(flat_hot, torch.zeros_like(seq_invalid), true_hot)
        if self.grid is not None:
            self._add_grid(flat_probs, true_hot, top_k)
        s_exact, s_tp, s_pred, s_true = _set_sums(seq_hot, seq_invalid, true_hot)
        correct = (seq_logits.argmax(-1) == targets)
        self.add(rows=labels.size(0), loss=row_total.sum(), seq2seq_loss=row_seq.sum(),
                 flat_loss=row_flat.sum(), token_correct=correct.sum(), token_count=correct.numel(),
                 flat_exact=f_exact, flat_tp=f_tp, flat_pred=f_pred, flat_true=f_true,
                 seq2seq_exact=s_exact, seq2seq_tp=s_tp, seq2seq_pred=s_pred, seq2seq_true=s_true)

    def _add_grid(self, flat_probs, true_hot, top_k) -> None:
        top_probs, top_index = flat_probs.topk(min(top_k, flat_probs.size(-1)), dim=-1)
        correct = true_hot.gather(1, top_index).bool()  # (rows, k)
        grid = THRESHOLD_GRID.to(top_probs.device)
        chosen = top_probs.double().unsqueeze(-1) >= grid  # (rows, k, thresholds)
        chosen[:, 0, :] = True  # the most probable code is always predicted
        self.grid[0] += (chosen & correct.unsqueeze(-1)).sum((0, 1)).double()
        self.grid[1] += chosen.sum((0, 1)).double()

    def best_threshold(self, current: float) -> tuple:
        """(threshold, its micro F1, F1 at `current`) from the summed grid (all-reduced)."""
        true = self.values[SUM_NAMES.index("flat_true")]
        tp, pred = self.grid[0], self.grid[1]
        f1 = torch.where(pred + true > 0, 2 * tp / (pred + true).clamp(min=1), torch.zeros_like(tp))
        # the best F1; among equals the threshold nearest the current one
        best = torch.isclose(f1, f1.max(), rtol=0, atol=1e-12)
        distance = torch.where(best, (THRESHOLD_GRID.to(f1.device) - current).abs(), torch.inf)
        index = int(distance.argmin())
        at_current = int((THRESHOLD_GRID - current).abs().argmin())
        return float(THRESHOLD_GRID[index]), float(f1[index]), float(f1[at_current])

    def result(self) -> dict:
        """Divide once (after the all-reduce)."""
        v = dict(zip(SUM_NAMES, self.values.tolist()))
        rows = max(v["rows"], 1.0)
        out = {"rows": int(v["rows"]), "loss": v["loss"] / rows,
               "seq2seq_loss": v["seq2seq_loss"] / rows, "flat_loss": v["flat_loss"] / rows,
               "token_accuracy": v["token_correct"] / max(v["token_count"], 1.0)}
        for head in ("flat", "seq2seq"):
            precision = v[f"{head}_tp"] / v[f"{head}_pred"] if v[f"{head}_pred"] else 0.0
            recall = v[f"{head}_tp"] / v[f"{head}_true"] if v[f"{head}_true"] else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            out.update({f"{head}_accuracy": v[f"{head}_exact"] / rows, f"{head}_precision": precision,
                        f"{head}_recall": recall, f"{head}_f1": f1})
        return out

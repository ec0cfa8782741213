"""Evaluation metrics as sums, reduced across ranks, divided once; and the
prediction rules they share with predict.py.

Per head (flat, seq2seq) and over the validation rows:
  accuracy  = rows whose predicted code set equals the true set / rows
  precision = sum |pred & true| / sum |pred|        (micro, over codes)
  recall    = sum |pred & true| / sum |true|
  f1        = 2 * precision * recall / (precision + recall)
and for the seq2seq head token_accuracy = correct decoder labels / labels
(teacher forcing, every position of every row).

The predicted sets follow the model family's rules (`PredictionRules`): the
flat head's threshold rule, and the formatter's reading of decoded blocks; a
decoded code that is not in the key counts as a wrong prediction, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from mixer.models.family import family

SUM_NAMES = (
    "rows",
    "loss",
    "seq2seq_loss",
    "flat_loss",
    "token_correct",
    "token_count",
    "flat_exact",
    "flat_tp",
    "flat_pred",
    "flat_true",
    "seq2seq_exact",
    "seq2seq_tp",
    "seq2seq_pred",
    "seq2seq_true",
)


@dataclass(frozen=True)
class PredictionRules:
    """How head outputs become predicted codes, per model family.

    mixer: the flat head predicts codes with probability >= threshold and always its
    most probable one; the decoder's codes are ranked by block probability, each once.
    occcanine (as OccCANINE's own predict): probability > threshold, no code forced;
    the decoder's codes in the order written, as written, with one confidence per row."""

    flat_keep_best: bool = True
    flat_strict: bool = False
    seq2seq_order: str = "ranked"  # ranked | decoded

    @classmethod
    def for_family(cls, name: str) -> "PredictionRules":
        facts = family(name)
        return cls(facts.flat_keep_best, facts.flat_strict, facts.seq2seq_order)


@dataclass(frozen=True)
class Thresholds:
    """The flat head's threshold for each row: by the row's language where the table
    has it, else the default. The one owner of the rule: training's evaluation,
    predict.py and the Python API all ask it, so a run's metrics use the thresholds
    its predictions will use. Stored in config.json as "threshold" and "thresholds"."""

    default: float = 0.5
    by_language: tuple = ()  # ((language, threshold), ...)

    @classmethod
    def of(cls, default: float, table: Optional[dict] = None) -> "Thresholds":
        return cls(
            float(default), tuple(sorted((str(k), float(v)) for k, v in (table or {}).items()))
        )

    @property
    def table(self) -> dict:
        return dict(self.by_language)

    def for_languages(self, langs) -> np.ndarray:
        table = self.table
        return np.asarray([table.get(lang, self.default) for lang in langs], dtype=np.float64)

    def describe(self) -> str:
        if not self.by_language:
            return f"{self.default:g}"
        return (
            f"{self.default:g} (by language: "
            + ", ".join(f"{k} {v:g}" for k, v in self.by_language)
            + ")"
        )


def flat_prediction(
    probs: torch.Tensor, threshold, top_k: int, rules: PredictionRules = PredictionRules()
):
    """The flat head's codes: (indices, probs, chosen), each (rows, top_k), best first.
    `threshold` is a number or a (rows, 1) tensor (one per row, e.g. by language)."""
    top_probs, top_index = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    chosen = top_probs > threshold if rules.flat_strict else top_probs >= threshold
    if rules.flat_keep_best:
        chosen[:, 0] = True
    return top_index, top_probs, chosen


def decoded_blocks(tokens: torch.Tensor, num_blocks: int, block_size: int) -> list:
    """Greedy decoder output -> per row, its blocks as lists of token ids."""
    rows = tokens.size(0)
    return tokens[:, : num_blocks * block_size].reshape(rows, num_blocks, block_size).tolist()


def decoded_codes(tokens: torch.Tensor, formatter) -> list:
    """Per row, the codes its blocks spell (formatter.decode_block), in block order."""
    blocks = decoded_blocks(tokens, formatter.max_num_codes, formatter.block_size)
    return [
        [code for code in map(formatter.decode_block, row) if code is not None] for row in blocks
    ]


def decoded_confidence(
    model, states, mask, codes_per_row: list, token_probs: torch.Tensor, formatter
) -> np.ndarray:
    """OccCANINE's confidence of each row's greedy output, as its own predict gives it. That
    is the product of every decoded step's probability (BOS counted as 1). For a row of
    several codes it is the "order-invariant" confidence: the sum, over the row's distinct
    codes, of the probability that the decoder writes that code first. (OccCANINE sums over the
    permutations of the codes, but its full-search decoder fills its result with
    torch.empty and sets one entry per distinct first code. So for rows of 3+ codes or
    repeated codes its sum adds uninitialised memory; this is its value whenever that
    memory holds zeros. See docs/occcanine.md.) Prediction and a run's scores both ask it."""
    confidence = token_probs.float().cpu().numpy().prod(axis=1)
    lookup = set(formatter.symbol_tokens())
    for row, codes in enumerate(codes_per_row):
        if len(codes) < 2:
            continue
        writable = sorted({c for c in codes if set(formatter.parts(c)) <= lookup})
        if writable:
            first = model.first_block_probs(
                states[row : row + 1],
                mask[row : row + 1],
                torch.from_numpy(formatter.encode_blocks(writable)).to(states.device),
            )[0]
            total = float(first.sum())
            if total > 0:
                confidence[row] = total
    return confidence


def multi_hot_and_unknown(codes_per_row: list, code_index: dict, num_labels: int, device) -> tuple:
    """(multi-hot of the key's codes, count of distinct codes not in the key) per row."""
    hot = torch.zeros(len(codes_per_row), num_labels, device=device)
    unknown = torch.zeros(len(codes_per_row), dtype=torch.long, device=device)
    for row, codes in enumerate(codes_per_row):
        distinct = set(codes)
        known = [code_index[c] for c in distinct if c in code_index]
        if known:
            hot[row, known] = 1.0
        unknown[row] = len(distinct) - len(known)
    return hot, unknown


def _set_sums(pred_hot: torch.Tensor, invalid: torch.Tensor, true_hot: torch.Tensor):
    exact = ((pred_hot == true_hot).all(-1) & (invalid == 0)).sum()
    tp = (pred_hot * true_hot).sum()
    return exact, tp, pred_hot.sum() + invalid.sum(), true_hot.sum()


THRESHOLD_GRID = torch.arange(1, 100, dtype=torch.float64) / 100  # 0.01 .. 0.99


MIN_TUNE_ROWS = 100  # a language with fewer validation rows takes the overall best threshold


class MetricSums:
    """Running sums of one evaluation on one rank. With `tune_groups` (the number of
    languages), also, per language, the flat head's true positives and predictions at
    every threshold of THRESHOLD_GRID, its true codes and its rows."""

    def __init__(self, device, tune_groups: int = 0):
        self.values = torch.zeros(len(SUM_NAMES), dtype=torch.float64, device=device)
        self.grid = (
            torch.zeros(
                tune_groups, 2 * len(THRESHOLD_GRID) + 2, dtype=torch.float64, device=device
            )
            if tune_groups
            else None
        )

    def add(self, **sums) -> None:
        for name, value in sums.items():
            self.values[SUM_NAMES.index(name)] += (
                value.double() if torch.is_tensor(value) else value
            )

    def add_batch(
        self,
        *,
        row_total,
        row_seq,
        row_flat,
        seq_logits,
        targets,
        flat_probs,
        labels,
        seq_codes,
        code_index,
        threshold,
        num_labels,
        top_k,
        rules: PredictionRules = PredictionRules(),
        groups=None,
    ):
        from mixer.models.losses import multi_hot

        true_hot = multi_hot(labels, num_labels)
        index, _, chosen = flat_prediction(flat_probs, threshold, top_k, rules)
        flat_hot = torch.zeros_like(true_hot).scatter_(1, index, chosen.float())
        seq_hot, seq_invalid = multi_hot_and_unknown(
            seq_codes, code_index, num_labels, true_hot.device
        )
        f_exact, f_tp, f_pred, f_true = _set_sums(flat_hot, torch.zeros_like(seq_invalid), true_hot)
        if self.grid is not None:
            self._add_grid(flat_probs, true_hot, top_k, rules, groups)
        s_exact, s_tp, s_pred, s_true = _set_sums(seq_hot, seq_invalid, true_hot)
        correct = seq_logits.argmax(-1) == targets
        self.add(
            rows=labels.size(0),
            loss=row_total.sum(),
            seq2seq_loss=row_seq.sum(),
            flat_loss=row_flat.sum(),
            token_correct=correct.sum(),
            token_count=correct.numel(),
            flat_exact=f_exact,
            flat_tp=f_tp,
            flat_pred=f_pred,
            flat_true=f_true,
            seq2seq_exact=s_exact,
            seq2seq_tp=s_tp,
            seq2seq_pred=s_pred,
            seq2seq_true=s_true,
        )

    def _add_grid(self, flat_probs, true_hot, top_k, rules: PredictionRules, groups) -> None:
        top_probs, top_index = flat_probs.topk(min(top_k, flat_probs.size(-1)), dim=-1)
        correct = true_hot.gather(1, top_index).bool()  # (rows, k)
        grid = THRESHOLD_GRID.to(top_probs.device)
        probs = top_probs.double().unsqueeze(-1)
        chosen = probs > grid if rules.flat_strict else probs >= grid  # (rows, k, thresholds)
        if rules.flat_keep_best:
            chosen[:, 0, :] = True
        per_row = torch.cat(
            [
                (chosen & correct.unsqueeze(-1)).sum(1).double(),
                chosen.sum(1).double(),
                true_hot.sum(1, keepdim=True).double(),
                torch.ones(len(true_hot), 1, dtype=torch.float64, device=true_hot.device),
            ],
            1,
        )
        self.grid.index_add_(0, groups.to(self.grid.device), per_row)

    def best_thresholds(self, names, current) -> tuple:
        """From the summed grid (all-reduced): (the tuned Thresholds, {name: (F1 at its
        threshold, F1 at the current one, rows)}). Each language with MIN_TUNE_ROWS rows
        gets its best threshold; the table's other languages (e.g. OccCANINE's) keep
        theirs. The default serves the languages outside that table, so it is tuned on
        their rows ("others" in the report) when they are enough. Otherwise, for a run that
        had no table, on all rows ("all"). Otherwise it stays as it was."""
        n = len(THRESHOLD_GRID)
        report, tuned = {}, {}
        for group, name in enumerate(names):
            row = self.grid[group]
            if row[-1] >= MIN_TUNE_ROWS:
                best, f1, before = _best(row, n, current.table.get(name, current.default))
                tuned[name] = best
                report[name] = (f1, before, int(row[-1]))
        table = {**current.table, **tuned}
        outside = [g for g, name in enumerate(names) if name not in table]
        others = self.grid[outside].sum(0) if outside else None
        default = current.default
        if others is not None and others[-1] >= MIN_TUNE_ROWS:
            default, f1, before = _best(others, n, current.default)
            report["others"] = (f1, before, int(others[-1]))
        elif not current.table:
            overall = self.grid.sum(0)
            default, f1, before = _best(overall, n, current.default)
            report["all"] = (f1, before, int(overall[-1]))
        return Thresholds.of(default, table), report

    def result(self) -> dict:
        """Divide once (after the all-reduce)."""
        v = dict(zip(SUM_NAMES, self.values.tolist()))
        rows = max(v["rows"], 1.0)
        out = {
            "rows": int(v["rows"]),
            "loss": v["loss"] / rows,
            "seq2seq_loss": v["seq2seq_loss"] / rows,
            "flat_loss": v["flat_loss"] / rows,
            "token_accuracy": v["token_correct"] / max(v["token_count"], 1.0),
        }
        for head in ("flat", "seq2seq"):
            precision = v[f"{head}_tp"] / v[f"{head}_pred"] if v[f"{head}_pred"] else 0.0
            recall = v[f"{head}_tp"] / v[f"{head}_true"] if v[f"{head}_true"] else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            out.update(
                {
                    f"{head}_accuracy": v[f"{head}_exact"] / rows,
                    f"{head}_precision": precision,
                    f"{head}_recall": recall,
                    f"{head}_f1": f1,
                }
            )
        return out


def _best(row: torch.Tensor, n: int, current: float) -> tuple:
    """(best threshold, its micro F1, F1 at `current`) of one group's grid row; among
    equal F1s the threshold nearest the current one."""
    tp, pred, true = row[:n], row[n : 2 * n], row[2 * n]
    f1 = torch.where(pred + true > 0, 2 * tp / (pred + true).clamp(min=1), torch.zeros_like(tp))
    best = torch.isclose(f1, f1.max(), rtol=0, atol=1e-12)
    distance = torch.where(best, (THRESHOLD_GRID.to(f1.device) - current).abs(), torch.inf)
    index = int(distance.argmin())
    at_current = int((THRESHOLD_GRID - current).abs().argmin())
    return float(THRESHOLD_GRID[index]), float(f1[index]), float(f1[at_current])

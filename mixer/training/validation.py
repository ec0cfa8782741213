"""The validation side of a training run, out of the loop: metrics over the validation
rows, each row's codes and confidences kept for evaluation.csv and scores.parquet, and
the flat thresholds tuned on them.

Every rank evaluates its shard of the validation rows with the unwrapped model and the
sums are all-reduced (every row counted once, on one rank); rank 0 writes
evaluation.csv. The Trainer decides when to evaluate and what to log (mixer.training
.trainer); this module does the evaluating.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from mixer.core.config import TrainConfig
from mixer.distributed import world as mdist
from mixer.distributed.world import World
from mixer.models.losses import row_losses
from mixer.models.model import unwrap_model
from mixer.reporting.metrics import (
    MIN_TUNE_ROWS,
    MetricSums,
    PredictionRules,
    Thresholds,
    decoded_codes,
    decoded_confidence,
    flat_prediction,
)
from mixer.reporting.tracking import logger


class Validator:
    """Evaluates a run's model on its validation loaders (the parts' `val_loader`, or
    one given: every row, a noised copy, or the calibration rows). After an evaluation
    with `collect`, each row's (row, true codes, flat codes, seq2seq codes, flat
    confidence, seq2seq confidence, {crosswalk name: (flat, seq2seq) confidence}) is in
    `collected` (`collected_noised` for a noised loader, `collected_cal` for the calibration rows); after one with `tune_threshold`,
    `tuned` is (thresholds, report)."""

    def __init__(
        self,
        cfg: TrainConfig,
        world: World,
        parts,
        run_dir: str,
        autocast: Callable,
        key_codes: list,
        stopping: Callable[[], bool],
    ):
        self.cfg = cfg
        self.world = world
        self.parts = parts  # the Trainer's TrainParts: thresholds change when they are tuned
        self.run_dir = run_dir
        self.device = world.device
        self.autocast = autocast
        self.key_codes = key_codes
        self.stopping = stopping  # a stop signal arrived (the Trainer's handler sets it)
        self.collected: Optional[list] = None
        self.collected_noised: Optional[list] = None
        self.collected_cal: Optional[list] = None
        self._languages: dict = {}
        self.tuned: Optional[tuple] = None
        self.table_rows = 0  # rows of the last evaluation table
        self._class_groups: Optional[dict] = None  # class_groups()
        # per split ("val", "noised": its noised copy, "cal"), a function of a batch's rows
        # (indices in the split) giving (rows, codes) float32 added to their flat logits: the
        # n-gram head's (mixer.training.hooks.NgramHead), computed batch by batch
        self.flat_offsets: dict = {}

    @torch.no_grad()
    def evaluate(
        self,
        loader=None,
        tune_threshold: bool = False,
        collect: bool = False,
        noised: bool = False,
        split: str = "val",
    ) -> Optional[dict]:
        """Every rank evaluates its shard with the unwrapped model (no DDP
        collectives inside, so shards may differ in size); sums are all-reduced.
        Each row's flat threshold is the one prediction will use (by its language).
        `split`: whose rows the loader reads ("val", or "cal": --share-calibration's).
        A stop signal ends it within a batch: None on every rank."""
        model = unwrap_model(self.parts.model)
        was_training = model.training
        model.eval()
        lang_ids, lang_names = self.validation_languages(split)
        sums = MetricSums(self.device, tune_groups=len(lang_names) if tune_threshold else 0)
        rules = PredictionRules.for_family(model.cfg.family)
        # OccCANINE's confidence reads its EOS step too, as its predict does
        blocks = self.parts.num_blocks * self.parts.block_size + (rules.seq2seq_order == "decoded")
        code_index = {code: i for i, code in enumerate(self.key_codes)}
        row_thresholds = self.parts.thresholds.for_languages(lang_names)[lang_ids]
        collected = [] if collect else None  # per row: (index, true, flat, seq2seq codes)
        interrupted = False
        for batch in loader or self.parts.val_loader:
            if self.stopping():
                interrupted = True
                break
            batch = batch.to(self.device, non_blocking=True)
            with self.autocast():
                states, pooled = model.encode(batch.input_ids, batch.attention_mask)
                flat_logits = self.offset(model.flat_head(pooled), batch.rows, noised, split)
                seq_logits = model.decoder(batch.decoder_input, states, batch.attention_mask == 0)
                tokens, token_probs = model.generate(states, batch.attention_mask, blocks)
            total, seq, flat = row_losses(
                flat_logits,
                seq_logits,
                batch.labels,
                batch.targets,
                self.parts.num_blocks,
                self.parts.block_size,
                self.cfg.seq2seq_weight,
                self.parts.formatter.pad_id,
            )
            seq_codes = decoded_codes(tokens.cpu(), self.parts.formatter)
            flat_probs = flat_logits.float().sigmoid()
            threshold = (
                torch.from_numpy(row_thresholds[batch.rows]).to(flat_probs.device).unsqueeze(1)
            )
            sums.add_batch(
                row_total=total,
                row_seq=seq,
                row_flat=flat,
                seq_logits=seq_logits,
                targets=batch.targets,
                flat_probs=flat_probs,
                labels=batch.labels,
                seq_codes=seq_codes,
                code_index=code_index,
                threshold=threshold,
                num_labels=flat_logits.size(-1),
                top_k=self.parts.num_blocks,
                rules=rules,
                groups=torch.from_numpy(lang_ids[batch.rows]).long(),
            )
            if collected is not None:
                confidence = self.row_confidence(
                    model,
                    rules,
                    flat_logits,
                    flat_probs,
                    threshold,
                    seq_codes,
                    token_probs,
                    states,
                    batch.attention_mask,
                )
                self.collect_rows(
                    collected, batch, flat_probs, threshold, seq_codes, rules, confidence
                )
        model.train(was_training)
        if mdist.any_rank(interrupted, self.world):  # all ranks
            return None
        mdist.all_reduce_sum(sums.values, self.world)  # all ranks
        result = sums.result()
        if collect:
            setattr(
                self,
                "collected_noised"
                if noised
                else "collected_cal"
                if split == "cal"
                else "collected",
                collected,
            )
        if tune_threshold:
            mdist.all_reduce_sum(sums.grid, self.world)  # all ranks
            self.tuned = sums.best_thresholds(list(lang_names), self.parts.thresholds)
        return result

    def offset(self, flat_logits, rows, noised: bool, split: str):
        """The flat logits of these rows with their split's flat_offsets added (none: as they are)."""
        offsets = self.flat_offsets.get("noised" if noised else split)
        if offsets is None:
            return flat_logits
        return flat_logits.float() + torch.from_numpy(offsets(np.asarray(rows))).to(
            flat_logits.device
        )

    @torch.no_grad()
    def encoder_flat_logits(self, rows: np.ndarray) -> np.ndarray:
        """The flat head's logits (the encoder's alone) of these validation rows as written,
        (rows, codes) float32 in their order: computed by this rank alone, on the same batches
        on every rank and in any layout (no collective), so every rank gets the same bits."""
        from mixer.data.inputs.dataset import eval_batches

        model = unwrap_model(self.parts.model)
        was_training = model.training
        model.eval()
        dataset = self.parts.val_loader.dataset
        size = self.cfg.eval_batch_size or 2 * self.cfg.batch_size
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_sampler=eval_batches(np.asarray(rows), size, dataset.lengths()),
            collate_fn=self.parts.val_loader.collate_fn,
        )
        place = {int(row): i for i, row in enumerate(rows)}
        out = np.zeros((len(rows), len(self.key_codes)), dtype=np.float32)
        for batch in loader:
            batch = batch.to(self.device)
            with self.autocast():
                pooled = model.pooled(batch.input_ids, batch.attention_mask)
                logits = model.flat_head(pooled)
            out[[place[int(r)] for r in np.asarray(batch.rows)]] = logits.float().cpu().numpy()
        model.train(was_training)
        return out

    def validation_languages(self, split: str = "val") -> tuple:
        """(language index of each row of the split, the languages): a language known to
        the thresholds table keeps its threshold; the rest share the default."""
        if split not in self._languages:
            langs, rows = (
                (self.parts.val_langs, self.parts.val_rows[1])
                if split == "val"
                else (self.parts.cal_langs, len(self.parts.cal_langs))
            )
            if langs is None:
                langs = np.full(rows, "unk", dtype=object)
            names, ids = np.unique(np.asarray(langs, dtype=str), return_inverse=True)
            self._languages[split] = (ids.astype(np.int64), names.astype(object))
        return self._languages[split]

    def row_confidence(
        self, model, rules, flat_logits, flat_probs, threshold, seq_codes, token_probs, states, mask
    ) -> tuple:
        """Each row's confidence in its predicted code set, per head, as prediction gives it
        (mixer.coding.confidence; OccCANINE's seq2seq rule for its family): (flat, seq2seq,
        {crosswalk name: (flat, seq2seq) at its class level}). The flat head's class confidence
        is grouped_confidence over the crosswalk's classes; the seq2seq head's is the confidence
        of its codes themselves (a lower bound of its classes')."""
        from mixer.coding.confidence import flat_confidence, grouped_confidence, sequence_confidence

        index, _, chosen = flat_prediction(flat_probs, threshold, self.parts.num_blocks, rules)
        in_set = torch.zeros_like(flat_probs, dtype=torch.bool).scatter_(1, index, chosen)
        logits, in_set = flat_logits.double().cpu().numpy(), in_set.cpu().numpy()
        flat = flat_confidence(logits, in_set)
        if rules.seq2seq_order == "decoded":
            seq = decoded_confidence(
                model, states, mask, seq_codes, token_probs, self.parts.formatter
            )
        else:
            seq = sequence_confidence(token_probs.double().cpu().numpy())
        levels = {
            name: (grouped_confidence(logits, in_set, groups), seq)
            for name, groups in self.class_groups().items()
        }
        return flat, seq, levels

    def class_groups(self) -> dict:
        """{crosswalk name: each key code's class (mixer.coding.levels.group_keys)}, read once."""
        if self._class_groups is None:
            from mixer.coding.levels import group_keys

            self._class_groups = {
                walk.name: group_keys(self.key_codes, walk) for walk in self.parts.crosswalks
            }
        return self._class_groups

    def collect_rows(
        self, collected, batch, flat_probs, threshold, seq_codes, rules, confidence
    ) -> None:
        """Keep each row's true and predicted codes and confidences (evaluation.csv, scores.parquet)."""
        index, _, chosen = flat_prediction(flat_probs, threshold, self.parts.num_blocks, rules)
        index, chosen = index.cpu().numpy(), chosen.cpu().numpy()
        labels = batch.labels.cpu().numpy()
        flat_conf, seq_conf, levels = confidence
        for i, row in enumerate(batch.rows):
            true = [self.key_codes[j] for j in labels[i] if j >= 0]
            flat = [self.key_codes[j] for j, keep in zip(index[i], chosen[i]) if keep]
            at_levels = {name: (float(f[i]), float(q[i])) for name, (f, q) in levels.items()}
            collected.append(
                (
                    int(row),
                    true,
                    flat,
                    seq_codes[i],
                    float(flat_conf[i]),
                    float(seq_conf[i]),
                    at_levels,
                )
            )

    def gather_rows(self) -> Optional[dict]:
        """The rows of the last collecting evaluations, gathered to rank 0: {"val": ...,
        "noised": ..., "cal": ...}, each sorted by row; None on the others (all ranks)."""
        pieces = mdist.gather_to_main(
            (self.collected or [], self.collected_noised or [], self.collected_cal or []),
            self.world,
        )  # all ranks
        if not self.world.is_main:
            return None
        return {
            name: sorted(item for piece in pieces for item in piece[k])
            for k, name in enumerate(("val", "noised", "cal"))
        }

    def evaluation_table(self) -> Optional[str]:
        """The evaluation table of the last collecting evaluation's rows (table_of), on rank
        0, None on the others (all ranks: the rows are gathered to rank 0)."""
        return self.table_of(self.gather_rows())  # all ranks

    def table_of(self, gathered: Optional[dict]) -> Optional[str]:
        """The evaluation table (mixer.reporting.evaluation) of gathered rows (gather_rows),
        overall and by language, and with --eval-noise the same rows noised (heads "flat
        noised", "seq2seq noised"), as CSV text; None without rows (every rank but 0)."""
        if gathered is None or not gathered["val"]:
            return None
        from mixer.reporting import evaluation

        rows = gathered["val"]
        truth = [set(true) for _, true, *_ in rows]
        predictions = {
            "flat": [set(flat) for _, _, flat, *_ in rows],
            "seq2seq": [set(seq) for _, _, _, seq, *_ in rows],
        }
        noised = {row: (flat, seq) for row, _, flat, seq, *_ in gathered["noised"]}
        if noised:
            predictions["flat noised"] = [
                set(noised[r][0]) if r in noised else set() for r, *_ in rows
            ]
            predictions["seq2seq noised"] = [
                set(noised[r][1]) if r in noised else set() for r, *_ in rows
            ]
        langs = self.parts.val_langs
        groups = np.asarray([langs[r] for r, *_ in rows]) if langs is not None else None
        if groups is not None and len(set(groups)) < 2:
            groups = None
        f = self.parts.formatter
        digits = [None] if f.use_within_block_sep else list(range(1, min(f.block_size, 5) + 1))
        table = evaluation.evaluation_table(truth, predictions, groups, digits, group_name="lang")
        self.table_rows = len(rows)
        return table.to_csv(index=False)

    def write_evaluation(self, which: str, gathered: Optional[dict]) -> Optional[str]:
        """RUN_DIR/evaluation.csv: the evaluation table of the final evaluation's rows
        (`gathered`: gather_rows' result; rank 0 writes and gets the table). `which`
        names the weights it scores."""
        table = self.table_of(gathered)
        if table is None:
            return None
        from mixer.core.io import write_text

        write_text(f"{self.run_dir}/evaluation.csv", table)
        logger.info(
            f"evaluation table of {self.table_rows} validation rows ({which}): "
            f"{self.run_dir}/evaluation.csv"
        )
        return table


def tuning_report(before: Thresholds, tuned: Thresholds, report: dict, run_dir: str) -> str:
    """The lines --tune-threshold prints: each tuned threshold, its F1 and the F1 the
    threshold before it gave, and the thresholds kept for want of rows."""
    lines = [
        f"tuned flat thresholds (best F1 on the validation rows; stored in {run_dir}/config.json):"
    ]
    for name, (f1, f1_before, rows) in report.items():
        is_default = name in ("all", "others")
        value = tuned.default if is_default else tuned.table[name]
        was = before.default if is_default else before.table.get(name, before.default)
        label = {
            "all": "default (all rows)",
            "others": "default (languages outside the table)",
        }.get(name, f"language {name}")
        lines.append(
            f"  {label}: {value:.2f}, F1 {f1:.4f} on {rows} rows ({was:.2f} gave {f1_before:.4f})"
        )
    if not any(name in ("all", "others") for name in report):
        lines.append(
            f"  default (languages outside the table): {tuned.default:.2f}, kept "
            f"(fewer than {MIN_TUNE_ROWS} validation rows outside the table)"
        )
    kept = sorted(set(before.table) - set(report))
    if kept:
        lines.append(
            f"  kept from the start: {', '.join(kept)} (fewer than {MIN_TUNE_ROWS} "
            "validation rows each)"
        )
    return "\n".join(lines)


def validation_sample(rows: int, max_rows: int, seed: int) -> np.ndarray:
    """The validation rows every evaluation uses: all of them, or a fixed seeded
    sample of max_rows (the same on every rank and after every restart)."""
    if not max_rows or rows <= max_rows:
        return np.arange(rows)
    return np.sort(np.random.default_rng([seed, 7]).choice(rows, size=max_rows, replace=False))

"""Prediction: codes (or embeddings) for texts, from a run directory of this tool
or one of OccCANINE's models (mixer.models.sources.load_for_prediction).

`Predictor` is the one path from texts to codes, used by the Python API
(mixer.prediction.api) and by predict.py: it batches distinct texts, runs the
encoder and the head asked for, and leaves reading the heads' outputs as codes to
mixer.prediction.heads. Heads:

- flat: the flat head's probabilities, thresholded by the family's rule
  (mixer.reporting.metrics.PredictionRules). OccCANINE's models default to its
  per-language thresholds.
- seq2seq (greedy): the decoder's codes. mixer's family ranks them by block
  probability, OccCANINE's lists them as decoded with one confidence per row,
  as OccCANINE's own predict does.
- full: the probability of every code of the key as the first code under the
  decoder, all codes from one encoder pass per row (mixer.models.model
  .first_block_probs), then thresholded like the flat head.

Each distinct (language, text) runs through the model once; batches are sorted
by length. Files in and out, chunked and under torchrun: mixer.prediction.predict_job.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Optional

import numpy as np
import pandas as pd
import torch

from mixer.coding.confidence import CONFIDENCE, LEVEL_CONFIDENCE  # the code table's columns
from mixer.coding.levels import level_name
from mixer.core.config import HEADS
from mixer.core.errors import UserError
from mixer.core.precision import fp32_matmuls, pad_multiple
from mixer.core.precision import resolve as resolve_precision
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.inputs.padding import InputPadding
from mixer.data.inputs.tokens import InputRecipe, token_ids_for
from mixer.data.inputs.transliterate import exactness_note
from mixer.models.family import OCCCANINE, family
from mixer.models.quantize import APPROXIMATE_NOTE, check_quantize
from mixer.models.quantize import quantize as quantize_model
from mixer.prediction.heads import HeadReader
from mixer.reporting.metrics import PredictionRules, Thresholds

OCCCANINE_TOP_K = OCCCANINE.top_k  # OccCANINE's k_pred
FULL_BATCH = 16  # rows per batch when every code of the key is scored (memory)
CONFIDENCE_HEADS = ("flat", "seq2seq")  # the heads that have one ('full' is not covered)


class Predictor:
    """Turns texts into codes with a model, its tokeniser, formatter and key."""

    def __init__(
        self,
        model,
        tokenizer,
        config: dict,
        key: pd.DataFrame,
        device: str = "cpu",
        precision: str = "fp32",
        tf32: Optional[bool] = None,
        quantize: Optional[str] = None,
    ):
        check_quantize(quantize, device, precision)
        if (
            quantize
        ):  # an audit's model fingerprint is of the fp32 weights, which quantizing replaces
            from mixer.audit.draw import weights_fingerprint

            self.fp32_fingerprint = weights_fingerprint(model, key["code"].to_numpy(dtype=object))
        self.model = quantize_model(model.to(device).eval(), quantize)
        self.quantize = quantize
        self.precision = precision
        self.config = config
        self.family = model.cfg.family
        self.facts = family(self.family)
        # TF32 on CUDA: this tool's models train with it; OccCANINE's predict exactly unless asked
        self.tf32 = self.facts.tf32 if tf32 is None else bool(tf32)
        self.rules = PredictionRules.for_family(self.family)
        self.formatter = CodeFormatter.from_dict(config["formatter"])
        self.recipe = InputRecipe.from_dict(
            config.get("input_recipe") or {"max_len": config["max_len"]}
        )
        model_type = getattr(model.encoder.config, "model_type", "")
        self.token_ids = token_ids_for(tokenizer, model_type, self.recipe)
        self.pad_id = self.token_ids.pad_id
        self.device = device
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.codes = key["code"].to_numpy(dtype=object)
        self.descriptions = key["description"].to_numpy(dtype=object)
        self.has_descriptions = bool((key["description"] != "").any())
        self.description_of = dict(zip(self.codes, self.descriptions))
        self.key_blocks = torch.from_numpy(self.formatter.encode_blocks(list(self.codes))).to(
            device
        )
        self.thresholds = Thresholds.of(config.get("threshold", 0.5), config.get("thresholds"))
        self.calibration = read_scalings(config.get("model_dir"))
        self.ngram = read_ngram(config.get("model_dir"))  # None: the encoder's flat head alone
        check_ngram(self.ngram, self.codes)
        self.heads = HeadReader(self.model, self.formatter, self.rules, self.codes)
        self.world = None  # under shared(world): the processes that share each call's batches

    @classmethod
    def load(
        cls,
        source: str,
        device=None,
        precision: str = "fp32",
        force_precision: bool = False,
        log=None,
        tf32: Optional[bool] = None,
        quantize: Optional[str] = None,
        announce=None,
    ) -> "Predictor":
        from mixer.models.sources import load_for_prediction

        log = log or (lambda m: print(m, file=sys.stderr))
        device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
        check_quantize(quantize, device, precision)  # before the model loads
        precision = resolve_precision(precision, device, force_precision, log)
        model, tokenizer, config, key = load_for_prediction(source, log=log, announce=announce)
        predictor = cls(model, tokenizer, config, key, device, precision, tf32, quantize)
        if quantize:
            log(APPROXIMATE_NOTE)
        if tf32 and not predictor.facts.tf32 and device.startswith("cuda") and precision == "fp32":
            log(
                "note: TF32 matrix products (--tf32): faster, but approximate: probabilities may "
                "differ from OccCANINE's exact ones by about 1e-3"
            )
        note = exactness_note(predictor.recipe)  # OccCANINE's inputs without unidecode
        if note:
            log(note)
        return predictor

    # ------------------------------------------------------------ public
    def default_top_k(self) -> int:
        return self.facts.top_k or self.formatter.max_num_codes

    def row_thresholds(self, langs: np.ndarray, threshold) -> np.ndarray:
        """The flat threshold of each row: the one given, else the model's (by language
        where its table has one: OccCANINE's models and runs with tuned thresholds)."""
        if threshold is not None:
            return np.full(len(langs), float(threshold))
        return self.thresholds.for_languages(langs)

    @torch.no_grad()
    def predict(
        self,
        texts,
        langs,
        head: str = "flat",
        top_k: int = None,
        threshold: float = None,
        batch_size: int = 256,
        levels=(),
        desc_chars=None,
    ) -> pd.DataFrame:
        """code_k, prob_k (and desc_k) for each row, k = 1 .. top_k, and the row's raw
        confidence (flat and seq2seq heads; docs/coding.md); with `levels` (prefix
        lengths or crosswalks: mixer.coding.levels), the raw confidence at each, in columns
        level_confidence_<length> or level_confidence_<crosswalk name>.
        desc_chars: per row, the characters of its text that are the description (the rest
        is context), or None."""
        if head not in HEADS:
            raise UserError(f"head {head!r}: choose one of {', '.join(HEADS)}")
        top_k = top_k or self.default_top_k()
        texts, langs, pair_ids, first_rows = _distinct(texts, langs, desc_chars)
        codes, probs, confidence, by_level = self._predict_distinct(
            texts[first_rows],
            langs[first_rows],
            head,
            top_k,
            threshold,
            batch_size,
            tuple(levels),
            _rows_of(desc_chars, first_rows),
        )
        codes, probs, confidence, by_level = (
            codes[pair_ids],
            probs[pair_ids],
            confidence[pair_ids],
            by_level[pair_ids],
        )
        out = {f"code_{k + 1}": codes[:, k] for k in range(top_k)}
        out.update({f"prob_{k + 1}": probs[:, k] for k in range(top_k)})
        if self.has_descriptions:
            for k in range(top_k):
                out[f"desc_{k + 1}"] = [self.description_of.get(c, "") for c in codes[:, k]]
        if head in CONFIDENCE_HEADS:
            out[CONFIDENCE] = confidence
        for j, level in enumerate(levels):
            out[LEVEL_CONFIDENCE.format(level_name(level))] = by_level[:, j]
        return pd.DataFrame(out)

    @torch.no_grad()
    def embeddings(self, texts, langs, batch_size: int = 256, desc_chars=None) -> np.ndarray:
        """The pooled encoder output the flat head reads, (rows, hidden), float32."""
        texts, langs, pair_ids, first_rows = _distinct(texts, langs, desc_chars)
        hidden = self.model.encoder.config.hidden_size
        out = np.zeros((len(first_rows), hidden), dtype=np.float32)
        computed = []
        for rows, _, pooled, _, _ in self._encoded(
            texts[first_rows],
            langs[first_rows],
            batch_size,
            states=False,
            desc_chars=_rows_of(desc_chars, first_rows),
        ):
            out[rows] = pooled.float().cpu().numpy()
            computed.append(rows)
        (out,) = self.gathered((out,), computed)
        return out[pair_ids]

    def flat_logits(self, pooled, texts):
        """The flat head's logits of a batch: the encoder's, plus the n-gram head's weighted
        scores of the batch's texts when the model directory has one (mixer.models.ngram;
        each text scored alone, so the batch beside it changes nothing)."""
        logits = self.model.flat_head(pooled)
        if self.ngram is None:
            return logits
        offsets = torch.from_numpy(self.ngram.offsets(list(texts))).to(logits.device)
        return logits.float() + offsets

    # ------------------------------------------------------------ batches
    @contextlib.contextmanager
    def shared(self, world):
        """Within it, every process of `world` makes the same call on the same rows; each
        computes every world_size-th batch of the one batch plan (rows sorted by length, cut
        every batch_size). A row is computed in the same
        batch beside the same rows whatever the number of processes, so one process and N
        give the same bits; rank 0 gets every row's result (gathered) (docs/predicting.md, "Under torchrun")."""
        self.world = world if world is not None and world.world_size > 1 else None
        try:
            yield
        finally:
            self.world = None

    def _mine(self, batch: int) -> bool:
        return self.world is None or batch % self.world.world_size == self.world.rank

    def gathered(self, arrays: tuple, computed: list) -> tuple:
        """Under shared(): every process's rows of `arrays` (each filled at the indices in its
        `computed`) on rank 0, which writes; the others keep their own rows alone (their
        results go unused; they neither receive nor hold every rank's data)."""
        if self.world is None:
            return arrays
        from mixer.distributed.world import gather_to_main

        rows = np.concatenate(computed) if computed else np.zeros(0, dtype=np.int64)
        for theirs, values in (
            gather_to_main((rows, tuple(a[rows] for a in arrays)), self.world) or ()
        ):
            for array, value in zip(arrays, values):
                array[theirs] = value
        return arrays

    @contextlib.contextmanager
    def _numerics(self):
        """One batch's arithmetic: autocast (bf16/fp16) and TF32 or true fp32 matrix
        products. Entered and left around each batch's computation, never across a
        yield, so the caller's settings hold whenever this code is suspended."""
        with (
            fp32_matmuls(self.tf32),
            torch.autocast(
                self.device.split(":")[0],
                dtype=self.autocast_dtype,
                enabled=self.autocast_dtype is not None,
            ),
        ):
            yield

    def padding(self, states: bool) -> InputPadding:
        """How far a batch is padded: what its longest row needs for what the pass reads
        (the decoder's states, or the pooled vector alone; mixer.data.inputs.padding)."""
        return InputPadding.for_encoder(
            self.model.encoder.config,
            self.recipe.max_len,
            self.model.padding_reads(decoder=states),
            pad_multiple(self.device),
        )

    def context_fit(self, texts, langs, desc_chars) -> np.ndarray:
        """Per row, whether its context fits the model's input (mixer.data.inputs.tokens.fitted)."""
        return self.token_ids.fitted(
            np.asarray(texts, dtype=object), np.asarray(langs, dtype=object), desc_chars
        )[2]

    def _encoded(self, texts, langs, batch_size, states: bool = True, desc_chars=None):
        """(row indices, encoder states or None, pooled, attention mask, langs) per batch,
        each batch rows of similar length padded as far as its longest needs."""
        ids, lengths = self.token_ids.encode(texts, langs, desc_chars)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        order = batch_order(lengths)
        padding = self.padding(states)
        for start in range(0, len(order), batch_size):
            if not self._mine(start // batch_size):  # another process's batch (shared)
                continue
            rows = order[start : start + batch_size]
            longest = padding.length(int(lengths[rows].max()))
            input_ids = np.full((len(rows), longest), self.pad_id, dtype=np.int64)
            mask = np.zeros_like(input_ids)
            for i, row in enumerate(rows):
                input_ids[i, : lengths[row]] = ids[offsets[row] : offsets[row + 1]]
                mask[i, : lengths[row]] = 1
            input_ids = torch.from_numpy(input_ids).to(self.device)
            mask = torch.from_numpy(mask).to(self.device)
            with self._numerics():
                if self.quantize:
                    hidden, pooled = self._encoded_row_by_row(
                        input_ids, mask, lengths[rows], padding, states
                    )
                elif states:
                    hidden, pooled = self.model.encode(input_ids, mask)
                else:
                    hidden, pooled = None, self.model.pooled(input_ids, mask)
            yield rows, hidden, pooled, mask, langs[rows]

    def plan(self, texts, langs, desc_chars=None) -> tuple:
        """The batch plan of one call on these rows (texts and languages as the model reads
        them, Model.read_inputs): (each row's distinct (language, text) pair, the pairs in the
        order the call batches them, sorted by length, cut every batch size). The rows of a
        run of that order given in that order, the run cut at batch boundaries, are batched
        as the whole call batches them: their pairs come first-seen in the plan's order, which
        the stable sort keeps (mixer.prediction.predict_job.Window's groups)."""
        texts, langs, pair_ids, first_rows = _distinct(texts, langs, desc_chars)
        _, lengths = self.token_ids.encode(
            texts[first_rows], langs[first_rows], _rows_of(desc_chars, first_rows)
        )
        return pair_ids, batch_order(lengths)

    def _encoded_row_by_row(self, input_ids, mask, lengths, padding: InputPadding, states: bool):
        """A quantized encoder on one row at a time, each padded as far as it alone needs. A
        quantized layer scales its activations by the whole tensor's range, so a row's result
        would otherwise depend on the rows (and the padding) beside it. The states are laid
        out as the batch's (zeros past a row's length, where its mask is 0)."""
        hidden = (
            torch.zeros(
                *input_ids.shape, self.model.encoder.config.hidden_size, device=input_ids.device
            )
            if states
            else None
        )
        pooled = []
        for i, length in enumerate(int(n) for n in lengths):
            width = padding.length(length)
            row_ids, row_mask = input_ids[i : i + 1, :width], mask[i : i + 1, :width]
            if states:
                row_states, row_pooled = self.model.encode(row_ids, row_mask)
                hidden[i, :width] = row_states[0]
            else:
                row_pooled = self.model.pooled(row_ids, row_mask)
            pooled.append(row_pooled)
        return hidden, torch.cat(pooled)

    def _predict_distinct(
        self, texts, langs, head, top_k, threshold, batch_size, levels=(), desc_chars=None
    ):
        codes = np.full((len(texts), top_k), "", dtype=object)
        probs = np.full((len(texts), top_k), np.nan)
        confidence = np.full(len(texts), np.nan)
        by_level = np.full((len(texts), len(levels)), np.nan)
        size = min(batch_size, FULL_BATCH) if head == "full" else batch_size
        computed = []
        for rows, states, pooled, mask, row_langs in self._encoded(
            texts, langs, size, states=head != "flat", desc_chars=desc_chars
        ):
            with self._numerics():  # the heads' arithmetic, as the encoder's
                if head == "seq2seq":
                    batch = self.heads.seq2seq(states, mask, top_k, levels)
                else:
                    logits = self.flat_logits(pooled, texts[rows]) if head == "flat" else None
                    scores = (
                        logits.float().sigmoid()
                        if head == "flat"
                        else self.model.first_block_probs(states, mask, self.key_blocks)
                    )
                    limits = torch.from_numpy(self.row_thresholds(row_langs, threshold)).to(scores)
                    batch = self.heads.thresholded(
                        scores, limits.unsqueeze(1), top_k, logits, levels
                    )
            codes[rows], probs[rows], confidence[rows], by_level[rows] = batch
            computed.append(rows)
        return self.gathered((codes, probs, confidence, by_level), computed)


def read_scalings(model_dir: Optional[str]) -> dict:
    """{head: (temperature, bias)} from a model directory's calibration.json, for the heads
    it moves (none: {})."""
    from mixer.coding.calibration import read_calibration, scaling_of

    stored = (read_calibration(model_dir) if model_dir else None) or {}
    scalings = {head: scaling_of(entry) for head, entry in (stored.get("heads") or {}).items()}
    return {head: scaling for head, scaling in scalings.items() if scaling != (1.0, 0.0)}


def read_ngram(model_dir: Optional[str]):
    """The model directory's n-gram head (mixer.models.ngram), or None without one."""
    from mixer.models.ngram import read

    return read(model_dir)


def check_ngram(head, codes) -> None:
    """A head fitted for another key (a file copied from another model) is refused."""
    if head is not None and head.num_codes != len(codes):
        raise UserError(
            f"ngram.npz: the n-gram head scores {head.num_codes} codes, this model's key has "
            f"{len(codes)} (it is another model's); delete it to predict with the encoder "
            "alone, or copy it again from the run"
        )


def batch_order(lengths: np.ndarray) -> np.ndarray:
    """The order a call batches its distinct rows in: by length, ties in their order (stable),
    so that a run of the order given again comes back as it was (Predictor.plan)."""
    return np.argsort(lengths, kind="stable")


def _distinct(texts, langs, desc_chars=None) -> tuple:
    """texts, langs as arrays; each row's distinct (language, text) pair (and where its
    description ends); the first row of each."""
    texts = np.asarray(texts, dtype=object)
    langs = np.asarray(langs, dtype=object)
    keys = pd.Series(langs) + "\x00" + pd.Series(texts)
    if desc_chars is not None:
        keys = keys + "\x00" + pd.Series(np.asarray(desc_chars)).astype(str)
    pair_ids, _ = pd.factorize(keys)
    first_rows = pd.Series(np.arange(len(texts))).groupby(pair_ids).first().to_numpy()
    return texts, langs, pair_ids, first_rows


def _rows_of(values, rows):
    """values[rows], or None for None."""
    return None if values is None else np.asarray(values)[rows]

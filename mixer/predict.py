"""Prediction from a run directory: needs nothing but the run directory.

Rows are read and written in chunks (10M rows never sit in memory), sorted by
length inside a chunk so batches carry little padding, and run without
autograd. Under torchrun each rank predicts a contiguous share of every
chunk and rank 0 writes one output in input order.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import torch

from mixer import distributed as mdist
from mixer.config import DistConfig
from mixer.data import read_key, with_context
from mixer.dataset import shard_indices
from mixer.encoders import encoder_from_run, fixed_input_length
from mixer.errors import UserError
from mixer.formatter import CodeFormatter
from mixer.metrics import INVALID, flat_prediction, seq2seq_prediction
from mixer.precision import fast_fp32_matmuls, pad_multiple, round_up
from mixer.precision import resolve as resolve_precision
from mixer.tables import OutputWriter, iter_chunks
from mixer.tokens import InputRecipe, token_ids_for
from mixer.model import CONFIG_FILE, MODEL_FILE, HeadsConfig, MixerModel, read_model_config

RUN_FILES = (MODEL_FILE, CONFIG_FILE, "key.csv", "encoder", "tokenizer")


class Predictor:
    """Turns texts into codes with a model, its tokenizer, formatter and key."""

    def __init__(self, model: MixerModel, tokenizer, config: dict, key: pd.DataFrame,
                 device: str = "cpu", precision: str = "fp32"):
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.config = config
        self.formatter = CodeFormatter.from_dict(config["formatter"])
        self.device = device
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.codes = key["code"].to_numpy(dtype=object)
        self.descriptions = key["description"].to_numpy(dtype=object)
        self.has_descriptions = bool((key["description"] != "").any())
        self.key_blocks = torch.from_numpy(self.formatter.encode_blocks(list(self.codes))).to(device)
        recipe = InputRecipe.from_dict(config.get("input_recipe") or {"max_len": config["max_len"]})
        self.recipe = recipe
        self.token_ids = token_ids_for(tokenizer, getattr(model.encoder.config, "model_type", ""), recipe)

    @classmethod
    def from_run_dir(cls, run_dir: str, device: str = "cpu", precision: str = "fp32") -> "Predictor":
        if not os.path.isdir(run_dir):
            raise UserError(f"--checkpoint {run_dir}: not a run directory")
        missing = [f for f in RUN_FILES if not os.path.exists(os.path.join(run_dir, f))]
        if missing:
            raise UserError(f"--checkpoint {run_dir}: lacks {', '.join(missing)}; is training "
                            "finished? (model.safetensors is written at the end of a run)")
        from safetensors.torch import load_file

        config = read_model_config(run_dir)
        encoder = encoder_from_run(run_dir)
        model = MixerModel(encoder.model, HeadsConfig(**config["heads"]))
        model.load_state_dict(load_file(os.path.join(run_dir, MODEL_FILE)))
        return cls(model, encoder.tokenizer, config, read_key(run_dir), device, precision)

    @torch.no_grad()
    def predict(self, texts, langs, head: str = "flat", top_k: int = None, threshold: float = None,
                batch_size: int = 256) -> pd.DataFrame:
        """code_k, prob_k (and desc_k) for each row, codes by falling probability.

        Historical sources repeat descriptions a lot; each distinct (language,
        text) is run through the model once and its answer copied."""
        top_k = top_k or self.formatter.max_num_codes
        threshold = self.config["threshold"] if threshold is None else threshold
        texts = np.asarray(texts, dtype=object)
        langs = np.asarray(langs, dtype=object)
        pair_ids, _ = pd.factorize(pd.Series(langs) + "\x00" + pd.Series(texts))
        first_rows = pd.Series(np.arange(len(texts))).groupby(pair_ids).first().to_numpy()
        with fast_fp32_matmuls(self.device):
            codes, probs = self._predict_distinct(texts[first_rows], langs[first_rows], head,
                                                  top_k, threshold, batch_size)
        codes, probs = codes[pair_ids], probs[pair_ids]
        out = {}
        for k in range(top_k):
            out[f"code_{k + 1}"] = codes[:, k]
        for k in range(top_k):
            out[f"prob_{k + 1}"] = probs[:, k]
        if self.has_descriptions:
            lookup = dict(zip(self.codes, self.descriptions))
            for k in range(top_k):
                out[f"desc_{k + 1}"] = [lookup.get(c, "") for c in codes[:, k]]
        return pd.DataFrame(out)

    def _predict_distinct(self, texts, langs, head, top_k, threshold, batch_size):
        ids, lengths = self.token_ids.encode(texts, langs)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        order = np.argsort(lengths, kind="stable")
        codes = np.full((len(lengths), top_k), "", dtype=object)
        probs = np.full((len(lengths), top_k), np.nan)
        pad = self.tokenizer.pad_token_id or 0
        fixed = fixed_input_length(self.model.encoder.config, self.recipe.max_len)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            longest = fixed or round_up(int(lengths[rows].max()), pad_multiple(self.device))
            input_ids = np.full((len(rows), longest), pad, dtype=np.int64)
            mask = np.zeros_like(input_ids)
            for i, row in enumerate(rows):
                input_ids[i, : lengths[row]] = ids[offsets[row]:offsets[row + 1]]
                mask[i, : lengths[row]] = 1
            input_ids = torch.from_numpy(input_ids).to(self.device)
            mask = torch.from_numpy(mask).to(self.device)
            with torch.autocast(self.device.split(":")[0], dtype=self.autocast_dtype,
                                enabled=self.autocast_dtype is not None):
                states, pooled = self.model.encode(input_ids, mask)
                if head == "flat":
                    batch_codes, batch_probs = self._flat(pooled, top_k, threshold)
                else:
                    batch_codes, batch_probs = self._seq2seq(states, mask, top_k)
            codes[rows], probs[rows] = batch_codes, batch_probs
        return codes, probs

    def _flat(self, pooled, top_k, threshold):
        probs = self.model.flat_head(pooled).float().sigmoid()
        index, top_probs, chosen = flat_prediction(probs, threshold, top_k)
        index, top_probs, chosen = index.cpu().numpy(), top_probs.cpu().numpy(), chosen.cpu().numpy()
        codes = np.where(chosen, self.codes[index], "")
        out_probs = np.where(chosen, top_probs, np.nan)
        return _pad_columns(codes, out_probs, top_k)

    def _seq2seq(self, states, mask, top_k):
        f = self.formatter
        tokens, token_probs = self.model.generate(states, mask, f.max_num_codes * f.block_size)
        return codes_of_blocks(tokens, token_probs, self.key_blocks, f, self.codes, top_k)


def codes_of_blocks(tokens, token_probs, key_blocks, formatter, codes, top_k):
    """Greedy decoder output -> (codes, probabilities), each (rows, top_k): the
    non-empty blocks by falling probability, each distinct code once (a block that
    spells no code of the key is kept as its text); the training metrics count the
    same set (mixer.metrics.repeated_blocks)."""
    f = formatter
    index, block_probs = seq2seq_prediction(tokens, token_probs, key_blocks,
                                            f.max_num_codes, f.block_size)
    index, block_probs = index.cpu().numpy(), block_probs.float().cpu().numpy()
    blocks = tokens[:, : f.max_num_codes * f.block_size].reshape(
        len(index), f.max_num_codes, f.block_size).cpu().numpy()
    out_codes = np.full((len(index), top_k), "", dtype=object)
    out_probs = np.full((len(index), top_k), np.nan)
    for row in range(len(index)):
        found = {}
        for b in np.argsort(-block_probs[row], kind="stable"):
            if index[row, b] == -1:
                continue
            code = codes[index[row, b]] if index[row, b] != INVALID else f.decode_block(blocks[row, b])
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


# ------------------------------------------------------------------ files
def text_column(chunk: pd.DataFrame, column: str) -> np.ndarray:
    """A column as stripped strings, as training reads it (missing -> '')."""
    return chunk[column].astype(object).where(chunk[column].notna(), "").astype(str).str.strip().to_numpy(dtype=object)


def predict_file(args) -> None:
    world = mdist.setup(DistConfig(distributed=args.distributed))
    writer = None
    try:
        precision = resolve_precision(args.precision, world.device, args.force_precision,
                                      log=lambda m: print(m, file=sys.stderr) if world.is_main else None)
        predictor = Predictor.from_run_dir(args.checkpoint, world.device, precision)
        config = predictor.config
        input_col = args.input_col or config["input_col"]
        language_col = args.language_col or (None if args.language else config.get("language_col"))
        language = args.language or config.get("language") or "unk"
        writer = mdist.main_only(lambda: OutputWriter(args.output), world)
        bar, summary = None, []
        if world.is_main and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(unit="row", desc="predict")
        for chunk in iter_chunks(args.input, args.chunk_size):
            context_cols = config.get("context_cols") or []
            needed = [(input_col, "--input-col"), (language_col, "--language-col")]
            needed += [(c, "a context column the model was trained with") for c in context_cols]
            for column, flag in needed:
                if column and column not in chunk.columns:
                    raise UserError(f"--input {args.input}: no column {column!r} ({flag}); "
                                    f"the file has: {', '.join(map(str, chunk.columns[:12]))}")
            mine = shard_indices(len(chunk), world.world_size, world.rank)
            part = chunk.iloc[mine]
            langs = text_column(part, language_col) if language_col else \
                np.full(len(part), language, dtype=object)
            texts = with_context(pd.Series(text_column(part, input_col)), part, context_cols)
            result = predictor.predict(texts.to_numpy(dtype=object), langs,
                                       args.head, args.top_k, args.threshold, args.batch_size)
            pieces = mdist.gather_objects(result, world)  # all ranks
            if world.is_main:
                predicted = pd.concat(pieces, ignore_index=True)
                predicted.index = chunk.index
                clash = {c: f"{c}_input" for c in chunk.columns if c in predicted.columns}
                writer.write(pd.concat([chunk.rename(columns=clash), predicted], axis=1))
                if args.summary_plot:
                    summary.append(predicted[["code_1", "prob_1"]])
                if bar is not None:
                    bar.update(len(chunk))
        if world.is_main:
            writer.commit()
            if args.summary_plot:
                from mixer.plot import plot_prediction_summary

                plot_prediction_summary(pd.concat(summary, ignore_index=True), args.summary_plot)
            if bar is not None:
                bar.close()
            print(f"wrote {writer.rows} rows to {args.output}", file=sys.stderr)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        mdist.teardown(world)

"""The shapes a prediction can take besides the code table (OccCANINE's outputs), and
code descriptions for a model of any code system.

- score matrices, one row per input row and one column per code of the key. `probs` is the
flat head's sigmoid, or with head 'full' the decoder's probability of each code as the first
code. `logits` is the flat head's. `bin` is 1 for each code the code table predicts, 0
elsewhere: the same rule as `--what codes`.
- greedy top-k alternatives: k different code sets written by the decoder, each with
  its confidence, as OccCANINE's greedy-topk: after each greedy pass the least confident
  step's token is blocked at that step, and the decoder writes again.
- OccCANINE's column names and order for the code table and the alternatives.

Everything reads the model through mixer.prediction.predict.Predictor (its batches, distinct rows
and rules), so these outputs agree with the code table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch

from mixer.core.errors import UserError
from mixer.models.occcanine import system_name  # noqa: F401 - the API names OccCANINE's columns by it


WHATS = ("codes", "probs", "bin", "logits")
NO_PRED = "No pred"  # OccCANINE's description of an empty slot


# ------------------------------------------------------------------ descriptions
def set_descriptions(predictor, descriptions, options=None) -> int:
    """Give the model's codes descriptions (desc_k): a table's path (columns code and
    description, or the HISCO key layout; any format, read with `options`, a
    mixer.core.config.TableOptions of the role code_descriptions), a dict code -> text or a
    DataFrame (code, description). Codes are spelled as the model spells its own
    (mixer.data.labels.normalise). Returns how many codes of the key got one; none is an error
    (wrong file or column)."""
    from mixer.core.config import TableOptions
    from mixer.data.labels.normalise import code_column
    from mixer.data.labels.key import Descriptions, read_descriptions
    from mixer.data.tables.reading import frame_as_text

    formatter = predictor.formatter
    if isinstance(descriptions, str):
        given = read_descriptions(
            descriptions, formatter, options or TableOptions(role="code_descriptions")
        )
        name = f"--code-descriptions {descriptions}"
    elif isinstance(descriptions, (pd.DataFrame, dict)):
        if isinstance(descriptions, dict):
            descriptions = pd.DataFrame(
                {"code": list(descriptions), "description": list(descriptions.values())}
            )
        if not {"code", "description"} <= set(descriptions.columns):
            raise UserError("code_descriptions: a DataFrame needs columns 'code' and 'description'")
        table = frame_as_text(descriptions[["code", "description"]], "code_descriptions")
        given = Descriptions(
            dict(zip(code_column(table, "code", formatter).text, table["description"])),
            formatter.zero_pad,
        )
        name = "code_descriptions"
    else:
        raise UserError(
            f"code_descriptions={descriptions!r}: pass a table's path, a dict or a DataFrame"
        )
    found = given.lookup(predictor.codes)
    if all(text is None for text in found):
        shown = ", ".join(list(predictor.codes[:3]))
        raise UserError(
            f"{name}: none of its codes is a code of the model (the model's codes are "
            f"like {shown}); check the file's code column"
        )
    predictor.descriptions = np.asarray(
        [d if text is None else text for text, d in zip(found, predictor.descriptions)],
        dtype=object,
    )
    predictor.description_of = dict(zip(predictor.codes, predictor.descriptions))
    predictor.has_descriptions = True
    return sum(text is not None for text in found)


# ------------------------------------------------------------------ matrices
def check_what(what: str, head: str) -> None:
    if what not in WHATS:
        raise UserError(f"what={what!r}: choose one of {', '.join(WHATS)}")
    if what == "probs" and head not in ("flat", "full"):
        raise UserError(
            "probabilities of every code come from the flat head or 'full' (the decoder "
            "scoring every code); greedy decoding gives no probability per code"
        )
    if what == "logits" and head != "flat":
        raise UserError("logits are the flat head's; use head 'flat' (or what='probs' with 'full')")


@torch.no_grad()
def score_matrix(
    predictor, texts, langs, what: str, head: str, batch_size: int, desc_chars=None
) -> np.ndarray:
    """(rows, codes) float32: the flat head's probabilities or logits, or with head 'full'
    the probability of each code as the first code the decoder writes."""
    from mixer.prediction.predict import FULL_BATCH, _distinct, _rows_of

    texts, langs, pair_ids, first_rows = _distinct(texts, langs, desc_chars)
    out = np.zeros((len(first_rows), len(predictor.codes)), dtype=np.float32)
    size = min(batch_size, FULL_BATCH) if head == "full" else batch_size
    computed = []
    for rows, states, pooled, mask, _ in predictor._encoded(
        texts[first_rows],
        langs[first_rows],
        size,
        states=head == "full",
        desc_chars=_rows_of(desc_chars, first_rows),
    ):
        if head == "full":
            values = predictor.model.first_block_probs(states, mask, predictor.key_blocks)
        else:
            values = predictor.flat_logits(pooled, texts[first_rows][rows]).float()
            values = values if what == "logits" else values.sigmoid()
        out[rows] = values.float().cpu().numpy()
        computed.append(rows)
    (out,) = predictor.gathered((out,), computed)  # under Predictor.shared: every process's batches
    return out[pair_ids]


def binary_matrix(table: pd.DataFrame, codes) -> np.ndarray:
    """(rows, codes) uint8: 1 where the code table (code_1..code_k) holds the code."""
    index = {code: i for i, code in enumerate(codes)}
    out = np.zeros((len(table), len(codes)), dtype=np.uint8)
    for column in [c for c in table.columns if c.startswith("code_")]:
        cols = table[column].map(index)
        rows = np.flatnonzero(cols.notna().to_numpy())
        out[rows, cols.iloc[rows].astype(int).to_numpy()] = 1
    return out


def matrix_columns(codes, style: str, system: str) -> list:
    """A column per code: the code itself, or OccCANINE's '<system>_<code>'."""
    return [STYLES[style].matrix_column(system, c) for c in codes]


# ------------------------------------------------------------------ alternatives
@torch.no_grad()
def greedy_alternatives(predictor, texts, langs, k: int, batch_size: int, desc_chars=None) -> tuple:
    """(codes (rows, k, max codes) object, confidence (rows, k)): k different code sets per
    row, the first the greedy one. Rows with fewer than k sets the decoder can be pushed
    to write (after 3k passes) have empty sets and NaN at the end."""
    from mixer.prediction.predict import _distinct, _rows_of

    f = predictor.formatter
    texts, langs, pair_ids, first_rows = _distinct(texts, langs, desc_chars)
    width = f.max_num_codes
    codes = np.full((len(first_rows), k, width), "", dtype=object)
    confidence = np.full((len(first_rows), k), np.nan)
    steps = (
        f.target_len
        if predictor.rules.seq2seq_order == "decoded"
        else f.max_num_codes * f.block_size
    )
    computed = []
    for rows, states, _, mask, _ in predictor._encoded(
        texts[first_rows],
        langs[first_rows],
        batch_size,
        desc_chars=_rows_of(desc_chars, first_rows),
    ):
        found = [dict() for _ in rows]
        blocked = None
        for _ in range(3 * k):
            tokens, probs = blocked_generate(predictor.model, states, mask, steps, blocked)
            sets = _code_sets(tokens.cpu(), f)
            row_conf = probs.double().prod(1).cpu().numpy()
            for i, codes_of_row in enumerate(sets):
                if len(found[i]) < k and codes_of_row not in found[i]:
                    found[i][codes_of_row] = float(row_conf[i])
            if all(len(d) >= k for d in found):
                break
            blocked = block_least_confident(
                tokens, probs, blocked, predictor.model.cfg.vocab_size, f.pad_id
            )
        for i, row in enumerate(rows):
            for j, (code_set, conf) in enumerate(found[i].items()):
                codes[row, j, : len(code_set[:width])] = code_set[:width]
                confidence[row, j] = conf
        computed.append(rows)
    codes, confidence = predictor.gathered((codes, confidence), computed)  # under Predictor.shared
    return codes[pair_ids], confidence[pair_ids]


def blocked_generate(model, states, mask, steps: int, blocked):
    """Greedy decoding where blocked[row, step, token] may not be chosen: (tokens, the
    probability of each chosen token before blocking), each (rows, steps)."""
    cache = model.decoder.start_cache(states, mask == 0)
    token = torch.full(
        (states.size(0), 1), model.cfg.bos_id, dtype=torch.long, device=states.device
    )
    tokens, probs = [], []
    for step in range(steps):
        logits = model.decoder.step(token, cache).float()
        p = logits.softmax(-1)
        if blocked is not None:
            logits = logits.masked_fill(blocked[:, step].to(logits.device), -torch.inf)
        token = logits.argmax(-1, keepdim=True)
        tokens.append(token)
        probs.append(p.gather(-1, token))
    return torch.cat(tokens, 1), torch.cat(probs, 1)


def block_least_confident(tokens, probs, blocked, vocab_size: int, pad_id: int):
    """Block, in each row, the chosen token of its least confident step among the steps
    up to its first PAD (after that the row writes no more codes)."""
    rows, steps = tokens.shape
    if blocked is None:
        blocked = torch.zeros(rows, steps, vocab_size, dtype=torch.bool)
    is_pad = tokens.cpu() == pad_id
    after_first_pad = (is_pad.cumsum(1) - is_pad.long()) > 0
    scores = probs.float().cpu().masked_fill(after_first_pad, torch.inf)
    step = scores.argmin(1)
    chosen = tokens.cpu().gather(1, step.unsqueeze(1)).squeeze(1)
    blocked[torch.arange(rows), step, chosen] = True
    return blocked


def _code_sets(tokens, formatter) -> list:
    """Per row, its codes as written (each once, in order), as a tuple."""
    from mixer.reporting.metrics import decoded_codes

    return [tuple(dict.fromkeys(row)) for row in decoded_codes(tokens, formatter)]


def alternatives_table(
    codes, confidence, description_of, style: str, system: str, with_descriptions: bool, texts
) -> pd.DataFrame:
    """The long table: k rows per input row, in input order, alternative by alternative."""
    rows, k, width = codes.shape
    return STYLES[style].alternatives(
        codes.reshape(rows * k, width),
        confidence.reshape(rows * k),
        np.tile(np.arange(k), rows),
        description_of,
        system,
        with_descriptions,
        np.repeat(texts, k),
    )


def _occcanine_alternatives(
    flat_codes, conf, position, description_of, system: str, _with_descriptions, texts
) -> pd.DataFrame:
    """OccCANINE's greedy-topk table: occ1, <system>_i, desc_i, top-k-pos, conf."""
    out = {}
    for i in range(flat_codes.shape[1]):
        out[f"{system}_{i + 1}"] = flat_codes[:, i]
        out[f"desc_{i + 1}"] = [
            description_of.get(c, NO_PRED) if c else NO_PRED for c in flat_codes[:, i]
        ]
    out["top-k-pos"] = position
    out["conf"] = conf
    table = pd.DataFrame(out)
    table.insert(0, "occ1", texts)
    return table


def _mixer_alternatives(
    flat_codes, conf, position, description_of, _system, with_descriptions, _texts
) -> pd.DataFrame:
    """alternative, code_i, prob, and desc_i when the model has descriptions."""
    width = flat_codes.shape[1]
    out = {"alternative": position + 1}
    for i in range(width):
        out[f"code_{i + 1}"] = flat_codes[:, i]
    out["prob"] = conf
    if with_descriptions:
        for i in range(width):
            out[f"desc_{i + 1}"] = [description_of.get(c, "") for c in flat_codes[:, i]]
    return pd.DataFrame(out)


# ------------------------------------------------------------------ OccCANINE's table
def occcanine_table(
    table: pd.DataFrame, texts, description_of, system: str, head: str
) -> pd.DataFrame:
    """The code table in OccCANINE's predict() layout: occ1, then <system>_k, prob_k,
    desc_k per slot (flat and full; an empty slot has no code, NaN and 'No pred'), or for
    greedy decoding <system>_k, desc_k per slot and one 'conf' per row."""
    top_k = sum(1 for c in table.columns if c.startswith("code_"))
    out = {"occ1": list(texts)}
    for k in range(1, top_k + 1):
        codes = table[f"code_{k}"].to_numpy(dtype=object)
        out[f"{system}_{k}"] = codes
        if head != "seq2seq":
            out[f"prob_{k}"] = table[f"prob_{k}"].to_numpy()
        out[f"desc_{k}"] = [description_of.get(c, "") if c else NO_PRED for c in codes]
    if head == "seq2seq":
        out["conf"] = table["prob_1"].to_numpy()  # one confidence per row, on every code of it
    return pd.DataFrame(out, index=table.index)


def _mixer_code_table(table: pd.DataFrame, _texts, _description_of, _system, _head) -> pd.DataFrame:
    return table


@dataclass(frozen=True)
class ColumnStyle:
    """How a prediction names and orders its columns (columns=, --columns)."""

    matrix_column: Callable  # (system, code) -> the column of a code in a score matrix
    code_table: (
        Callable  # (code table, texts, description_of, system, head) -> the table in this style
    )
    alternatives: (
        Callable  # (codes, conf, position, description_of, system, with_descriptions, texts)
    )


STYLES = {
    "mixer": ColumnStyle(lambda _system, code: str(code), _mixer_code_table, _mixer_alternatives),
    "occcanine": ColumnStyle(
        lambda system, code: f"{system}_{code}", occcanine_table, _occcanine_alternatives
    ),
}
COLUMN_STYLES = tuple(STYLES)


# ------------------------------------------------------------------ the API's shapes
def check_api(predictor, asked, head: str) -> None:
    """Model.predict's top_k=, what= and columns= (asked: its keywords as predict.py reads
    them), refused in one line where the model or the head cannot give them."""
    from mixer.prediction.keywords import require_choice

    if asked.top_k is not None:
        most = max(len(predictor.codes), predictor.default_top_k())
        if asked.top_k > most:
            raise UserError(
                f"top_k={asked.top_k}: the model has {len(predictor.codes)} codes; ask for at "
                f"most {most}"
            )
    check_what(asked.what, head)
    require_choice("columns", asked.columns, COLUMN_STYLES)


def api_table(model, texts, context, asked, head: str) -> pd.DataFrame:
    """Model.predict's other shapes: a matrix with a column per code (what= probs, logits or
    bin) or OccCANINE's code table (columns='occcanine'); a row without a description has
    nothing (NaN in a matrix)."""
    from mixer.coding.pipeline import without_codes
    from mixer.prediction.rows import blank_rows

    predictor, what, columns = model.predictor, asked.what, asked.columns
    name = system_name(predictor, asked.system)
    texts, blank = blank_rows(model, texts)
    index, texts, langs, desc_chars = model.read_inputs(texts, asked.language, context)
    if what in ("probs", "logits"):
        matrix = score_matrix(predictor, texts, langs, what, head, asked.batch_size, desc_chars)
        matrix[blank] = np.nan
        return pd.DataFrame(
            matrix, index=index, columns=matrix_columns(predictor.codes, columns, name)
        )
    table = predictor.predict(
        texts, langs, head, asked.top_k, asked.threshold, asked.batch_size, desc_chars=desc_chars
    )
    table = without_codes(table, blank).set_axis(index)
    if what == "bin":
        return pd.DataFrame(
            binary_matrix(table, predictor.codes),
            index=index,
            columns=matrix_columns(predictor.codes, columns, name),
        )
    return STYLES[columns].code_table(table, texts, predictor.description_of, name, head)


MAX_ALTERNATIVES = 50  # Model.alternatives' k: each costs up to 3 greedy decodings of a row


def api_alternatives(model, texts, lang, k, context, batch_size, columns, system) -> pd.DataFrame:
    """Model.alternatives: k code sets per text from the greedy decoder, k rows per text (the
    index of each text repeated k times)."""
    from mixer.prediction.keywords import require_choice, require_count
    from mixer.prediction.rows import blank_rows

    require_count("k", k)
    if k > MAX_ALTERNATIVES:
        raise UserError(
            f"k={k}: at most {MAX_ALTERNATIVES} alternatives (each costs up to 3 greedy "
            "decodings of every row)"
        )
    require_count("batch_size", batch_size)
    require_choice("columns", columns, COLUMN_STYLES)
    predictor = model.predictor
    texts, blank = blank_rows(model, texts)
    index, texts, langs, desc_chars = model.read_inputs(texts, lang, context)
    codes, confidence = greedy_alternatives(predictor, texts, langs, k, batch_size, desc_chars)
    codes[blank], confidence[blank] = "", np.nan
    table = alternatives_table(
        codes,
        confidence,
        predictor.description_of,
        columns,
        system_name(predictor, system),
        predictor.has_descriptions,
        texts,
    )
    table.index = np.repeat(np.asarray(index), k)
    return table

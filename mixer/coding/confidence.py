"""A row's confidence: the probability the model gives to the row's whole code set being
exactly the one predicted (docs/coding.md#definitions). numpy only, float64."""

from __future__ import annotations

import numpy as np

CONFIDENCE = "confidence"  # a row's confidence in its code set: the column of a code table
LEVEL_CONFIDENCE = "level_confidence_{}"  # at a prefix length or a crosswalk (levels.level_name)


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    # log(sigmoid(x)) without overflow for large |x|
    return -np.logaddexp(0.0, -x)


def flat_confidence(logits, chosen) -> np.ndarray:
    """Flat head: prod_{c in S} p_c * prod_{c not in S} (1 - p_c) under independent sigmoids,
    S the chosen codes; logits [n, K], chosen bool [n, K] -> [n]."""
    logits = np.asarray(logits, dtype=np.float64)
    chosen = np.asarray(chosen, dtype=bool)
    if logits.shape != chosen.shape or logits.ndim != 2:
        raise ValueError(
            f"logits {logits.shape} and chosen {chosen.shape} must both be [rows, codes]"
        )
    # log(1 - sigmoid(x)) = log(sigmoid(-x))
    log_p = np.where(chosen, _log_sigmoid(logits), _log_sigmoid(-logits))
    return np.exp(log_p.sum(axis=1))


def sequence_confidence(token_probs) -> np.ndarray:
    """Seq2seq head (mixer's family): the product of the decoded steps' probabilities, PAD
    blocks and EOS included; token_probs [n, steps] -> [n]."""
    token_probs = np.asarray(token_probs, dtype=np.float64)
    return np.exp(np.log(np.clip(token_probs, 1e-300, 1.0)).sum(axis=1))


def grouped_confidence(logits, chosen, groups) -> np.ndarray:
    """Flat head at any many-to-one mapping of its codes to groups (a prefix length, a
    crosswalk's classes: mixer.coding.levels.group_keys): the probability under independent
    sigmoids that the row's set of groups is exactly the groups of its chosen codes. A group
    is present when any code in it is (noisy-OR):
    prod_{G in S_G} (1 - prod_{c in G} (1 - p_c)) * prod_{G not in S_G} prod_{c in G} (1 - p_c).
    groups: per column of the logits, its code's group (any hashable key)."""
    logits = np.asarray(logits, dtype=np.float64)
    chosen = np.asarray(chosen, dtype=bool)
    keys, group_of = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    # log prod_{c in G} (1 - p_c) per row and group
    log_none = np.zeros((logits.shape[0], len(keys)))
    np.add.at(log_none.T, group_of, _log_sigmoid(-logits).T)
    chosen_group = np.zeros((logits.shape[0], len(keys)), dtype=bool)
    np.logical_or.at(chosen_group.T, group_of, chosen.T)
    # log(1 - exp(a)) for a <= 0, stable at both ends
    with np.errstate(divide="ignore"):
        log_any = np.where(
            log_none > -0.693,
            np.log(-np.expm1(np.minimum(log_none, -1e-300))),
            np.log1p(-np.exp(np.minimum(log_none, -0.693))),
        )
    return np.exp(np.where(chosen_group, log_any, log_none).sum(axis=1))


def flat_level_confidence(logits, chosen, codes, length) -> np.ndarray:
    """Flat head at a coarser level `length`: a prefix length (codes cut to their first
    `length` characters) or a crosswalk (codes to classes), the groups of grouped_confidence.
    codes: the label key's codes, in the logits' column order."""
    from mixer.coding.levels import group_keys

    return grouped_confidence(logits, chosen, group_keys(codes, length))


def sequence_level_confidence(
    token_probs, block_size: int, max_num_codes: int, length
) -> np.ndarray:
    """Seq2seq head at a coarser level. At a crosswalk's classes: the confidence of the codes
    themselves (sequence_confidence), a lower bound of the classes' probability, since the
    decoder gives the probability of the codes it writes and not the sum over every code of
    a class. At a prefix length `length`: the product of the probabilities of the first
    `length` steps of every block (a PAD block's first step says "no further code") and of
    any steps after the blocks (EOS). The later characters of each block are left out."""
    from mixer.coding.levels import is_prefix

    if not is_prefix(length):
        return sequence_confidence(token_probs)
    length = int(length)
    token_probs = np.asarray(token_probs, dtype=np.float64)
    blocks = block_size * max_num_codes
    keep = np.ones(token_probs.shape[1], dtype=bool)
    position = np.arange(min(blocks, token_probs.shape[1]))
    keep[: len(position)] = position % block_size < length
    return sequence_confidence(token_probs[:, keep])

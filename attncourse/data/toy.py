"""Small, deterministic example sentences and embeddings for the self-attention chapter.

The embeddings are random but reproducible: a word's vector depends only on the
word and the seed, so "the" has the same embedding in every sentence. They carry
no meaning; they let us watch the mechanics before any training happens.
"""

from __future__ import annotations

import zlib

import numpy as np

#: Example sentences used by the chapter and the :class:`SelfAttentionStepper`.
SENTENCES: tuple[str, ...] = (
    "time flies",
    "the robot dropped the glass because it was slippery",
    "attention lets every token look at every other token",
    "bank of the river",
)


def tokenize(sentence: str) -> list[str]:
    """Split a sentence into lower-case word tokens on whitespace.

    Raises
    ------
    ValueError
        If the sentence has no tokens.
    """
    tokens = sentence.lower().split()
    if not tokens:
        raise ValueError("the sentence is empty: give at least one word")
    return tokens


def embed(tokens: list[str], d_model: int = 4, seed: int = 0) -> np.ndarray:
    """Reproducible random embeddings, one row per token.

    Parameters
    ----------
    tokens : list of str
        Word tokens; equal words get equal rows.
    d_model : int
        Embedding width.
    seed : int
        Changes every word's vector.

    Returns
    -------
    (seq_len, d_model) float64
        Entries drawn from N(0, 1) by a generator seeded from (word, seed).
    """
    if d_model < 1:
        raise ValueError(f"d_model must be at least 1, got {d_model}")
    rows = [np.random.default_rng([zlib.crc32(t.encode()), seed]).standard_normal(d_model) for t in tokens]
    return np.stack(rows)


def projections(d_model: int = 4, d_k: int = 3, d_v: int | None = None, seed: int = 0):
    """Random projection matrices W^Q, W^K, W^V, scaled by 1/sqrt(d_model).

    The scaling keeps the entries of Q, K and V of order 1 when X has unit
    variance entries (the usual initialisation of a linear layer).

    Returns
    -------
    w_q, w_k : (d_model, d_k)
    w_v : (d_model, d_v), with ``d_v = d_k`` by default
    """
    d_v = d_k if d_v is None else d_v
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(d_model)
    return tuple(rng.standard_normal((d_model, d)) * scale for d in (d_k, d_k, d_v))

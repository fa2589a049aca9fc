"""Small, deterministic example sentences and embeddings for the self-attention chapter."""

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

    Raises ValueError if the sentence has no tokens.
    """
    tokens = sentence.lower().split()
    if not tokens:
        raise ValueError("the sentence is empty: give at least one word")
    return tokens


def embed(tokens: list[str], d_model: int = 4, seed: int = 0) -> np.ndarray:
    """Reproducible random embeddings ``(seq_len, d_model)``, one row per token."""
    if d_model < 1:
        raise ValueError(f"d_model must be at least 1, got {d_model}")
    rows = [np.random.default_rng([zlib.crc32(t.encode()), seed]).standard_normal(d_model) for t in tokens]
    return np.stack(rows)


def projections(d_model: int = 4, d_k: int = 3, d_v: int | None = None, seed: int = 0):
    """Random W^Q, W^K ``(d_model, d_k)``, W^V ``(d_model, d_v)``, scaled by 1/sqrt(d_model)."""
    d_v = d_k if d_v is None else d_v
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(d_model)
    return tuple(rng.standard_normal((d_model, d)) * scale for d in (d_k, d_k, d_v))

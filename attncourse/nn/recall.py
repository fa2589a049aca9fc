"""A one-layer attention model for associative recall, with softmax or linear attention.

The context's pairs are tokens ``x_j = E_key[a_j] + E_value[b_j]`` (a key symbol and the
value stored with it, as one token); the query token is ``E_key[a]``. One attention step,
query ``W_q x_q``, keys ``W_k x_j``, values ``W_v x_j``, reads the context, and a linear
layer turns the context vector into scores over the value symbols. Softmax attention
(Vaswani et al. 2017, eq. 1) can make the weight of the matching key close to 1; linear
attention (Katharopoulos et al. 2020, eqs. 5-7) reads everything through a
``d_k x d_model`` state, whatever the number of pairs.

:class:`MQARModel` is the same kind of model for multi-query recall
(:mod:`attncourse.data.mqar`), with any registered causal attention (softmax, linear
attention, DeltaNet, Gated DeltaNet) reading one token per pair and then one per query.

:func:`memory_recall` and :func:`recall_against_pairs` ask the same of the closed-form
memories of :mod:`attncourse.functional.memory_recall` on multi-query recall
(:mod:`attncourse.data.mqar`), with no training: the keys a fixed codebook of unit vectors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.data.mqar import MQARBatch, multi_query_recall
from attncourse.data.recall import RecallBatch
from attncourse.functional.linear_attention import batched_linear_attention
from attncourse.functional.memory_recall import (
    key_codebook,
    memory_reads,
    recall_accuracy,
)
from attncourse.nn.spec import AttentionSpec, PositionSpec
from attncourse.runtime import data_seed

#: The attention kinds :class:`RecallModel` knows.
RECALL_ATTENTIONS: tuple[str, ...] = ("softmax", "linear")


class RecallModel(nn.Module):
    """Embeddings, one attention step and a linear read-out over the value symbols.

    Parameters
    ----------
    n_keys, n_values : int
        Vocabulary sizes of the key and value symbols.
    d_model : int
        Width of the tokens and of the values.
    d_k : int
        Width of queries and keys (for linear attention, the state is d_k x d_model).
    attention : {"softmax", "linear"}

    Raises
    ------
    ValueError
        If ``attention`` is unknown.
    """

    def __init__(self, n_keys: int, n_values: int, d_model: int = 64, d_k: int = 16,
                 attention: str = "softmax") -> None:
        super().__init__()
        if attention not in RECALL_ATTENTIONS:
            raise ValueError(f"attention must be one of {RECALL_ATTENTIONS}, got {attention!r}")
        self.attention = attention
        self.key_embedding = nn.Embedding(n_keys, d_model)
        self.value_embedding = nn.Embedding(n_values, d_model)
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_model)
        self.readout = nn.Linear(d_model, n_values)

    def forward(self, batch: RecallBatch) -> torch.Tensor:
        """Scores over the value symbols, ``(batch, n_values)``."""
        tokens = self.key_embedding(batch.keys) + self.value_embedding(batch.values)  # (B, N, d_model)
        query = self.w_q(self.key_embedding(batch.query))[:, None, :]  # (B, 1, d_k)
        keys, values = self.w_k(tokens), self.w_v(tokens)
        if self.attention == "softmax":
            context = F.scaled_dot_product_attention(query, keys, values)
        else:
            context = batched_linear_attention(query, keys, values)
        return self.readout(context[:, 0])


class MQARModel(nn.Module):
    """Embeddings, one causal attention layer of a registered variant and a read-out, for MQAR.

    The context is one token per pair, ``E_key[a_j] + E_value[b_j]``, then one token per
    query, ``E_key[a]``; the layer reads them in order (causal, no positions: recall needs
    none) and the read-out turns its output at each query into scores over the value symbols.
    With a fixed-size memory (``"linear"``, ``"deltanet"``, ``"gated-deltanet"``) every query
    is answered from the state the pairs (and the queries before it) wrote; with ``"gqa"``
    (softmax attention) from all the tokens.

    Parameters
    ----------
    attention : str
        A registered variant (:data:`~attncourse.nn.spec.ATTENTION_VARIANTS`) that builds causal.
    n_keys, n_values : int
        Vocabulary sizes.
    d_model, num_heads : int
        Width of the tokens and heads; a memory's state per head is ``d_model / num_heads``
        square.

    Raises
    ------
    ValueError
        If ``attention`` is not registered or refuses these sizes.
    """

    def __init__(self, attention: str, n_keys: int, n_values: int, d_model: int = 32,
                 num_heads: int = 1) -> None:
        super().__init__()
        self.key_embedding = nn.Embedding(n_keys, d_model)
        self.value_embedding = nn.Embedding(n_values, d_model)
        self.attention = AttentionSpec(attention).build(d_model, num_heads, True, PositionSpec("none"))
        self.readout = nn.Linear(d_model, n_values)

    def forward(self, batch: MQARBatch) -> torch.Tensor:
        """Scores over the value symbols at each query, ``(batch, n_queries, n_values)``."""
        n_pairs = batch.keys.shape[1]
        pairs = self.key_embedding(batch.keys) + self.value_embedding(batch.values)
        tokens = torch.cat([pairs, self.key_embedding(batch.queries)], dim=1)
        out, _ = self.attention(tokens)
        return self.readout(out[:, n_pairs:])


def memory_recall(rule: str, batch: MQARBatch, codebook: torch.Tensor, **options) -> float:
    """Recall of one closed-form memory on an MQAR batch: the share of queries answered.

    Parameters
    ----------
    rule : str
        One of :data:`~attncourse.functional.memory_recall.MEMORY_RULES`.
    batch : MQARBatch
    codebook : (n_keys, d_k)
        The key symbols' vectors (:func:`~attncourse.functional.memory_recall.key_codebook`);
        values are one-hot over ``batch.n_values``.
    **options
        ``passes``, ``decay``, ``scale`` of :func:`~attncourse.functional.memory_recall.memory_reads`.

    Raises
    ------
    ValueError
        If the codebook has fewer rows than ``batch.n_keys``, or as ``memory_reads``.
    """
    if codebook.dim() != 2 or codebook.shape[0] < batch.n_keys:
        raise ValueError(f"codebook must be (n_keys >= {batch.n_keys}, d_k), got {tuple(codebook.shape)}")
    values = F.one_hot(batch.values, batch.n_values).to(codebook.dtype)
    reads = memory_reads(rule, codebook[batch.keys], values, codebook[batch.queries], **options)
    return recall_accuracy(reads, batch.answers)


def recall_against_pairs(rules: dict[str, dict], pair_counts: list[int], d_k: int, n_keys: int = 512,
                         n_values: int = 64, batch: int = 64, seed: int = 0) -> dict[str, list[float]]:
    """Each memory's MQAR recall at each number of pairs, every query of the context asked.

    Parameters
    ----------
    rules : dict
        Label -> ``{"rule": name, **options}`` (e.g. ``{"delta x4": {"rule": "delta", "passes": 4}}``).
    pair_counts : list of int
        N, each at most ``n_keys``.
    d_k : int
        The width of the keys, hence of every fixed-size state.
    n_keys, n_values, batch, seed : int
        The vocabularies, contexts per N, and the seed of the codebook (random unit keys) and data.

    Returns
    -------
    dict
        Label -> recall at each N, in ``pair_counts``' order.
    """
    generator = torch.Generator().manual_seed(data_seed(seed))
    codebook = key_codebook(n_keys, d_k, generator=generator)
    batches = [multi_query_recall(batch, n, n, n_keys, n_values, generator) for n in pair_counts]
    return {label: [memory_recall(spec["rule"], b, codebook, **{k: v for k, v in spec.items() if k != "rule"})
                    for b in batches] for label, spec in rules.items()}


__all__ = ["RECALL_ATTENTIONS", "MQARModel", "RecallModel", "memory_recall", "recall_against_pairs"]

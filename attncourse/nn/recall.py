"""One-layer attention models for associative recall (MQAR), softmax or linear."""

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
    """Embeddings, one attention step and a linear read-out.

    Raises ``ValueError`` if ``attention`` is unknown.
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
        """Scores over the value symbols, (batch, n_values)."""
        tokens = self.key_embedding(batch.keys) + self.value_embedding(batch.values)  # (B, N, d_model)
        query = self.w_q(self.key_embedding(batch.query))[:, None, :]  # (B, 1, d_k)
        keys, values = self.w_k(tokens), self.w_v(tokens)
        if self.attention == "softmax":
            context = F.scaled_dot_product_attention(query, keys, values)
        else:
            context = batched_linear_attention(query, keys, values)
        return self.readout(context[:, 0])


class MQARModel(nn.Module):
    """Embeddings, one causal attention layer of a registered variant and a read-out.

    Raises ``ValueError`` if ``attention`` is not registered or refuses these sizes.
    """

    def __init__(self, attention: str, n_keys: int, n_values: int, d_model: int = 32,
                 num_heads: int = 1) -> None:
        super().__init__()
        self.key_embedding = nn.Embedding(n_keys, d_model)
        self.value_embedding = nn.Embedding(n_values, d_model)
        self.attention = AttentionSpec(attention).build(d_model, num_heads, True, PositionSpec("none"))
        self.readout = nn.Linear(d_model, n_values)

    def forward(self, batch: MQARBatch) -> torch.Tensor:
        """Scores over the value symbols at each query, (batch, n_queries, n_values)."""
        n_pairs = batch.keys.shape[1]
        pairs = self.key_embedding(batch.keys) + self.value_embedding(batch.values)
        tokens = torch.cat([pairs, self.key_embedding(batch.queries)], dim=1)
        out, _ = self.attention(tokens)
        return self.readout(out[:, n_pairs:])


def memory_recall(rule: str, batch: MQARBatch, codebook: torch.Tensor, **options) -> float:
    """Share of an MQAR batch's queries that one closed-form memory answers.

    ``codebook`` is (n_keys, d_k). Raises ``ValueError`` if it has fewer rows than
    ``batch.n_keys``, or as ``memory_reads``.
    """
    if codebook.dim() != 2 or codebook.shape[0] < batch.n_keys:
        raise ValueError(f"codebook must be (n_keys >= {batch.n_keys}, d_k), got {tuple(codebook.shape)}")
    values = F.one_hot(batch.values, batch.n_values).to(codebook.dtype)
    reads = memory_reads(rule, codebook[batch.keys], values, codebook[batch.queries], **options)
    return recall_accuracy(reads, batch.answers)


def recall_against_pairs(rules: dict[str, dict], pair_counts: list[int], d_k: int, n_keys: int = 512,
                         n_values: int = 64, batch: int = 64, seed: int = 0) -> dict[str, list[float]]:
    """Each memory's MQAR recall at each number of pairs."""
    generator = torch.Generator().manual_seed(data_seed(seed))
    codebook = key_codebook(n_keys, d_k, generator=generator)
    batches = [multi_query_recall(batch, n, n, n_keys, n_values, generator) for n in pair_counts]
    return {label: [memory_recall(spec["rule"], b, codebook, **{k: v for k, v in spec.items() if k != "rule"})
                    for b in batches] for label, spec in rules.items()}


__all__ = ["RECALL_ATTENTIONS", "MQARModel", "RecallModel", "memory_recall", "recall_against_pairs"]

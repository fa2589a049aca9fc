"""A one-layer attention model for associative recall, with softmax or linear attention.

The context's pairs are tokens ``x_j = E_key[a_j] + E_value[b_j]`` (a key symbol and the
value stored with it, as one token); the query token is ``E_key[a]``. One attention step,
query ``W_q x_q``, keys ``W_k x_j``, values ``W_v x_j``, reads the context, and a linear
layer turns the context vector into scores over the value symbols. Softmax attention
(Vaswani et al. 2017, eq. 1) can make the weight of the matching key close to 1; linear
attention (Katharopoulos et al. 2020, eqs. 5-7) reads everything through a
``d_k x d_model`` state, whatever the number of pairs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.data.recall import RecallBatch
from attncourse.functional.linear_attention import batched_linear_attention

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


__all__ = ["RECALL_ATTENTIONS", "RecallModel"]

"""Attention modules (``torch.nn.Module``): encoders, decoders, attention variants and
the Transformer. Every module documents what plays the query, the keys and the values."""

from attncourse.nn.additive import AdditiveAttention
from attncourse.nn.rnn import (
    ATTENTION_KINDS,
    Encoder,
    EncoderState,
    Seq2Seq,
    Seq2SeqOutput,
    count_parameters,
    hidden_dim_for_budget,
    reorder_batch,
)

__all__ = [
    "ATTENTION_KINDS",
    "AdditiveAttention",
    "Encoder",
    "EncoderState",
    "Seq2Seq",
    "Seq2SeqOutput",
    "count_parameters",
    "hidden_dim_for_budget",
    "reorder_batch",
]

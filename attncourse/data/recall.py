"""Associative recall: find the value stored with a key, among N (key, value) pairs.

Each example is a context of ``n_pairs`` pairs (key symbol, value symbol), with distinct
keys drawn from ``n_keys`` symbols and values drawn with repetition from ``n_values``, and
a query that repeats one of the context's keys; the target is the value stored with it.
Answering needs exact retrieval of one item among N, the ability that separates softmax
attention from fixed-state approximations such as linear attention (Arora et al. 2023,
"Zoology", study a multi-query form of this task).

Batches come from a ``torch.Generator`` so that a seeded run sees the same examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RecallBatch:
    """A batch of associative-recall examples.

    Attributes
    ----------
    keys : (batch, n_pairs) long
        Key symbols of the context, distinct within an example.
    values : (batch, n_pairs) long
        Value symbols stored with them.
    query : (batch,) long
        The key asked for (one of the example's keys).
    target : (batch,) long
        The value stored with ``query``.
    """

    keys: torch.Tensor
    values: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor


def associative_recall(batch: int, n_pairs: int, n_keys: int, n_values: int,
                       generator: torch.Generator | None = None) -> RecallBatch:
    """Draw ``batch`` associative-recall examples of ``n_pairs`` pairs each.

    Parameters
    ----------
    batch : int
        Examples (>= 1).
    n_pairs : int
        N, pairs per context, 1..n_keys.
    n_keys, n_values : int
        Sizes of the key and value vocabularies (>= 1).
    generator : torch.Generator, optional
        Source of randomness (seed it for a reproducible batch).

    Returns
    -------
    RecallBatch

    Raises
    ------
    ValueError
        If a size is below 1 or ``n_pairs > n_keys`` (keys must be distinct).
    """
    if min(batch, n_pairs, n_keys, n_values) < 1:
        raise ValueError(f"batch, n_pairs, n_keys and n_values must be at least 1, got {batch}, {n_pairs}, "
                         f"{n_keys}, {n_values}")
    if n_pairs > n_keys:
        raise ValueError(f"n_pairs={n_pairs} distinct keys cannot be drawn from n_keys={n_keys} symbols")
    # Distinct keys per example: the first n_pairs of a random permutation of the key symbols.
    keys = torch.rand(batch, n_keys, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(0, n_values, (batch, n_pairs), generator=generator)
    asked = torch.randint(0, n_pairs, (batch,), generator=generator)
    rows = torch.arange(batch)
    return RecallBatch(keys, values, keys[rows, asked], values[rows, asked])


__all__ = ["RecallBatch", "associative_recall"]

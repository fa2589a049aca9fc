"""Associative recall: find the value stored with a key, among N (key, value) pairs."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RecallBatch:
    """Recall examples: keys, values (batch, n_pairs); query, target (batch,); all long."""

    keys: torch.Tensor
    values: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor


def associative_recall(batch: int, n_pairs: int, n_keys: int, n_values: int,
                       generator: torch.Generator | None = None) -> RecallBatch:
    """Draw ``batch`` associative-recall examples of ``n_pairs`` pairs each.

    Raises ValueError if a size is below 1 or ``n_pairs > n_keys`` (keys are distinct).
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

"""Multi-query associative recall (MQAR): many lookups in one context.

Source: Arora et al. (2023), "Zoology: Measuring and Improving Recall in Efficient
Language Models", section 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Cross-entropy's ``ignore_index``: no loss at a position that is not a query.
IGNORE = -100


@dataclass(frozen=True)
class MQARBatch:
    """MQAR contexts: keys, values (batch, n_pairs); asked (batch, n_queries); all long."""

    keys: torch.Tensor
    values: torch.Tensor
    asked: torch.Tensor
    n_keys: int
    n_values: int

    @property
    def queries(self) -> torch.Tensor:
        """(batch, n_queries) long: the key symbols asked."""
        return self.keys.gather(1, self.asked)

    @property
    def answers(self) -> torch.Tensor:
        """(batch, n_queries) long: the value symbols to recall."""
        return self.values.gather(1, self.asked)

    def tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets ``(batch, 2 n_pairs + n_queries)`` long, for a language model."""
        batch, n_pairs = self.keys.shape
        pairs = torch.stack([self.keys, self.values + self.n_keys], dim=2).reshape(batch, 2 * n_pairs)
        inputs = torch.cat([pairs, self.queries], dim=1)
        targets = torch.full_like(inputs, IGNORE)
        targets[:, 2 * n_pairs:] = self.answers + self.n_keys
        return inputs, targets


def multi_query_recall(batch: int, n_pairs: int, n_queries: int, n_keys: int, n_values: int,
                       generator: torch.Generator | None = None) -> MQARBatch:
    """Draw ``batch`` MQAR contexts of ``n_pairs`` pairs and ``n_queries`` queries each.

    Raises ValueError if a size is below 1, ``n_pairs > n_keys`` (keys are distinct) or
    ``n_queries > n_pairs``.
    """
    sizes = {"batch": batch, "n_pairs": n_pairs, "n_queries": n_queries, "n_keys": n_keys, "n_values": n_values}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if n_pairs > n_keys:
        raise ValueError(f"n_pairs={n_pairs} distinct keys cannot be drawn from n_keys={n_keys} symbols")
    if n_queries > n_pairs:
        raise ValueError(f"n_queries={n_queries} distinct keys cannot be asked of n_pairs={n_pairs} pairs")
    # Distinct draws as the first entries of random permutations (argsort of uniform noise).
    keys = torch.rand(batch, n_keys, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(0, n_values, (batch, n_pairs), generator=generator)
    asked = torch.rand(batch, n_pairs, generator=generator).argsort(dim=1)[:, :n_queries]
    return MQARBatch(keys, values, asked, n_keys, n_values)


__all__ = ["IGNORE", "MQARBatch", "multi_query_recall"]

"""Multi-query associative recall (MQAR, Arora et al. 2023): many lookups in one context.

A context stores ``n_pairs`` (key, value) pairs, then asks ``n_queries`` of its keys, each
once, in a random order; the answer to each is the value stored with it. Chapter 12's
associative recall asks one key per context; asking many makes the task a test of what a
fixed-size memory holds, since every query must be answered from the same state (Arora et
al. find that this gap, not perplexity on average, separates attention from the
efficient recurrent models of the same size, their section 3).

As tokens for a language model (:meth:`MQARBatch.tokens`), keys are ids ``0 .. n_keys - 1``
and values ``n_keys .. n_keys + n_values - 1``; the sequence is the pairs, key then value,
then the queried keys, and the target at each query is its value (``-100``, cross-entropy's
``ignore_index``, elsewhere)::

    k_1 v_1 k_2 v_2 ... k_N v_N  q_1 q_2 ... q_M
    -    -   -   -  ...  -   -   a_1 a_2 ... a_M

Zoology's own generator also spaces the queries out with noise tokens (gaps drawn from a
power law); these queries follow the pairs directly, which keeps the closed-form memories'
reading of :mod:`attncourse.nn.recall` and a model's task the same.

Batches come from a ``torch.Generator`` (seeded: the same examples every run; no file is read).

References
----------
Arora, Eyuboglu, Timalsina, Johnson, Poli, Zou, Rudra, Ré (2023), "Zoology: Measuring and
Improving Recall in Efficient Language Models", section 3 (MQAR) and its appendix (the data).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Cross-entropy's ``ignore_index``: no loss at a position that is not a query.
IGNORE = -100


@dataclass(frozen=True)
class MQARBatch:
    """A batch of multi-query associative-recall contexts.

    Attributes
    ----------
    keys : (batch, n_pairs) long
        Key symbols, distinct within a context, in ``[0, n_keys)``.
    values : (batch, n_pairs) long
        Value symbols stored with them, in ``[0, n_values)`` (repeats allowed).
    asked : (batch, n_queries) long
        Which pairs are asked, in the order asked (distinct, in ``[0, n_pairs)``).
    n_keys, n_values : int
        The vocabularies' sizes.
    """

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
        """The contexts as one token sequence each, for a language model.

        Returns
        -------
        inputs : (batch, 2 n_pairs + n_queries) long
            Ids in ``[0, n_keys + n_values)``: keys as themselves, values shifted by ``n_keys``.
        targets : (batch, 2 n_pairs + n_queries) long
            The answer's id at each query, :data:`IGNORE` elsewhere.
        """
        batch, n_pairs = self.keys.shape
        pairs = torch.stack([self.keys, self.values + self.n_keys], dim=2).reshape(batch, 2 * n_pairs)
        inputs = torch.cat([pairs, self.queries], dim=1)
        targets = torch.full_like(inputs, IGNORE)
        targets[:, 2 * n_pairs:] = self.answers + self.n_keys
        return inputs, targets


def multi_query_recall(batch: int, n_pairs: int, n_queries: int, n_keys: int, n_values: int,
                       generator: torch.Generator | None = None) -> MQARBatch:
    """Draw ``batch`` MQAR contexts of ``n_pairs`` pairs and ``n_queries`` queries each.

    Parameters
    ----------
    batch : int
        Contexts (>= 1).
    n_pairs : int
        N, pairs per context, ``1 .. n_keys``.
    n_queries : int
        M, keys asked per context, ``1 .. n_pairs`` (each asked once).
    n_keys, n_values : int
        Sizes of the key and value vocabularies (>= 1).
    generator : torch.Generator, optional
        Source of randomness; seed it for reproducible contexts.

    Returns
    -------
    MQARBatch

    Raises
    ------
    ValueError
        If a size is below 1, ``n_pairs > n_keys`` (keys are distinct) or ``n_queries > n_pairs``.
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

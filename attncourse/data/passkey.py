"""A passkey hidden in filler: retrieval at a chosen distance, generated, nothing downloaded.

Each example is a sequence of ``length`` tokens: filler symbols drawn at random, one
*passkey* symbol (one of ``n_keys``) at ``distance`` positions before the last token, and
the *query* token last; the target is the passkey. The model reads the sequence and must
name the passkey at the query, which takes attention to one token among ``length - 1``:
the barest form of the passkey tests of long-context models (Mohtashami and Jaggi 2023
hide a number in repeated filler sentences and ask for it at the end).

The vocabulary: ids ``0 .. n_filler - 1`` are filler, ``n_filler .. n_filler + n_keys - 1``
the passkeys, ``n_filler + n_keys`` the query (:func:`passkey_vocab_size`).

References
----------
Mohtashami, Jaggi (2023), "Landmark Attention: Random-Access Infinite Context Length for
Transformers", section 4.2 (the passkey retrieval task).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PasskeyBatch:
    """A batch of passkey examples.

    Attributes
    ----------
    tokens : (batch, length) long
        Filler, the passkey at ``length - 1 - distance``, and the query last.
    answer : (batch,) long
        The passkey's id (``n_filler .. n_filler + n_keys - 1``).
    distance : (batch,) long
        Positions from the passkey to the query, 1 .. length - 1.
    """

    tokens: torch.Tensor
    answer: torch.Tensor
    distance: torch.Tensor


def passkey_vocab_size(n_filler: int = 16, n_keys: int = 8) -> int:
    """Filler symbols, passkeys and the query token: ``n_filler + n_keys + 1``."""
    return n_filler + n_keys + 1


def passkey_batch(batch: int, length: int, distance: int | None = None, n_filler: int = 16, n_keys: int = 8,
                  generator: torch.Generator | None = None) -> PasskeyBatch:
    """Draw ``batch`` passkey examples of ``length`` tokens.

    Parameters
    ----------
    batch : int
    length : int
        Tokens per sequence, query included; at least 2.
    distance : int, optional
        Positions from the passkey to the query, 1 .. length - 1 (``length - 1``: the passkey
        is the first token). Default: drawn uniformly for each example.
    n_filler, n_keys : int
        Filler symbols and passkey symbols.
    generator : torch.Generator, optional
        For reproducible batches.

    Returns
    -------
    PasskeyBatch

    Raises
    ------
    ValueError
        If a size is not positive, ``length < 2``, or ``distance`` is outside 1 .. length - 1.
    """
    for name, value in (("batch", batch), ("n_filler", n_filler), ("n_keys", n_keys)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(length, bool) or int(length) != length or length < 2:
        raise ValueError(f"length must be an int >= 2 (filler and the query), got {length!r}")
    if distance is not None and not 1 <= distance <= length - 1:
        raise ValueError(f"distance must lie in 1 .. length - 1 = {length - 1}, got {distance!r}")
    tokens = torch.randint(0, n_filler, (batch, length), generator=generator)
    answer = torch.randint(n_filler, n_filler + n_keys, (batch,), generator=generator)
    if distance is None:
        dist = torch.randint(1, length, (batch,), generator=generator)
    else:
        dist = torch.full((batch,), int(distance), dtype=torch.long)
    rows = torch.arange(batch)
    tokens[rows, length - 1 - dist] = answer
    tokens[:, -1] = n_filler + n_keys
    return PasskeyBatch(tokens, answer, dist)


__all__ = ["PasskeyBatch", "passkey_batch", "passkey_vocab_size"]

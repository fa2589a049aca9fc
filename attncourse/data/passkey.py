"""A passkey hidden in filler: retrieval at a chosen distance.

Source: Mohtashami & Jaggi (2023), "Landmark Attention", section 4.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PasskeyBatch:
    """Passkey examples: tokens (batch, length); answer and distance (batch,); all long."""

    tokens: torch.Tensor
    answer: torch.Tensor
    distance: torch.Tensor


def passkey_vocab_size(n_filler: int = 16, n_keys: int = 8) -> int:
    """Filler symbols, passkeys and the query token: ``n_filler + n_keys + 1``."""
    return n_filler + n_keys + 1


def passkey_batch(batch: int, length: int, distance: int | None = None, n_filler: int = 16, n_keys: int = 8,
                  generator: torch.Generator | None = None) -> PasskeyBatch:
    """Draw ``batch`` passkey examples of ``length`` tokens.

    Raises ValueError if a size is not positive, ``length < 2``, or ``distance`` is
    outside 1 .. length - 1.
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

"""Sequences in which a random segment repeats: the task on which induction heads form.

Source: Olsson et al. (2022), "In-context Learning and Induction Heads", "Key Concepts".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RepeatBatch:
    """Repeated random segments for next-token prediction: inputs, targets and predictable
    (batch, context); segment_len (batch,).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    segment_len: torch.Tensor
    predictable: torch.Tensor


def repeated_segments(batch_size: int, context: int, vocab_size: int, min_segment: int = 4,
                      max_segment: int = 16, generator: torch.Generator | None = None) -> RepeatBatch:
    """``batch_size`` sequences, each a random segment repeated to fill ``context + 1`` tokens.

    Raises ValueError if a size is not positive, ``min_segment > max_segment``, or
    ``max_segment`` leaves no repeat.
    """
    for name, value in (("batch_size", batch_size), ("context", context), ("vocab_size", vocab_size),
                        ("min_segment", min_segment)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not min_segment <= max_segment <= context:
        raise ValueError(f"need min_segment <= max_segment <= context, got {min_segment}, {max_segment}, {context}")
    segment_len = torch.randint(min_segment, max_segment + 1, (batch_size,), generator=generator)
    segments = torch.randint(0, vocab_size, (batch_size, max_segment), generator=generator)
    positions = torch.arange(context + 1)[None] % segment_len[:, None]  # (batch, context + 1)
    tokens = torch.gather(segments, 1, positions)
    predictable = torch.arange(1, context + 1)[None] >= segment_len[:, None]
    return RepeatBatch(tokens[:, :-1], tokens[:, 1:], segment_len, predictable)


def repeated_probe(segment_len: int, repeats: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """One segment of ``segment_len`` *distinct* random tokens, repeated ``repeats`` times.

    Returns (segment_len * repeats,) int64. Raises ValueError if ``segment_len >
    vocab_size`` (no distinct tokens) or a size is not positive.
    """
    if segment_len < 1 or repeats < 1 or segment_len > vocab_size:
        raise ValueError(f"need 1 <= segment_len <= vocab_size and repeats >= 1, got "
                         f"segment_len={segment_len}, repeats={repeats}, vocab_size={vocab_size}")
    segment = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))[:segment_len]
    return segment.repeat(repeats)

"""Sequences in which a random segment repeats: the task on which induction heads form.

Each sequence is one segment of ``S`` random tokens, ``S`` drawn per sequence
between ``min_segment`` and ``max_segment``, repeated until the context is full.
The first ``S`` tokens cannot be predicted (they are uniform random); every later
token equals the token ``S`` places before it. A model that finds the earlier
occurrence of the current token and copies the token after it (an induction head,
Olsson et al. 2022, "Key Concepts") predicts it exactly when the current token
occurs once in the segment. The segment's tokens are drawn *with replacement*, so a
segment may hold a token twice, followed by two different tokens: there the earlier
occurrences disagree, and only the one ``S`` places back is right (with a
vocabulary of 64 and 4 <= S <= 16, chapter 9 measures about half of the sequences
with a repeated token in the segment and about 12% of the predictable targets with
two or more different successors). :func:`repeated_probe`, on which heads are
scored, draws distinct tokens instead.

Because ``S`` varies from sequence to sequence, no fixed relative position holds
the answer: a one-layer model that reads "the token k places back" cannot solve
the task, which is what makes it a test of induction (with the copy at a fixed
offset, one layer is enough).

References
----------
Olsson et al. (2022), "In-context Learning and Induction Heads", "Key Concepts"
and the repeated random tokens of its figures; Elhage et al. (2021), "A Mathematical
Framework for Transformer Circuits", section "Induction heads".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RepeatBatch:
    """A batch of repeated random segments, ready for next-token prediction.

    Attributes
    ----------
    inputs, targets : (batch, context) int64
        ``targets[:, t]`` is the token after ``inputs[:, t]``.
    segment_len : (batch,) int64
        The segment length S of each sequence.
    predictable : (batch, context) bool
        True where the target repeats an earlier token (target position ``t + 1 >= S``).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    segment_len: torch.Tensor
    predictable: torch.Tensor


def repeated_segments(batch_size: int, context: int, vocab_size: int, min_segment: int = 4,
                      max_segment: int = 16, generator: torch.Generator | None = None) -> RepeatBatch:
    """``batch_size`` sequences, each a random segment repeated to fill ``context + 1`` tokens.

    Parameters
    ----------
    batch_size, context, vocab_size : int
        Tokens are drawn uniformly from ``0 .. vocab_size - 1``.
    min_segment, max_segment : int
        Bounds (inclusive) of the segment length S, drawn uniformly per sequence.
    generator : torch.Generator, optional

    Returns
    -------
    RepeatBatch

    Raises
    ------
    ValueError
        If a size is not positive, or ``min_segment > max_segment``, or ``max_segment``
        leaves no repeat within ``context + 1`` tokens.

    Examples
    --------
    >>> b = repeated_segments(1, 7, 10, 3, 3, torch.Generator().manual_seed(0))
    >>> torch.equal(b.inputs[0, 3:], b.inputs[0, :4])
    True
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

    The probe on which heads are scored (Olsson et al. 2022 use repeated random tokens):
    with distinct tokens, each token of a repeat has exactly one earlier occurrence per
    earlier repeat.

    Returns
    -------
    (segment_len * repeats,) int64

    Raises
    ------
    ValueError
        If ``segment_len > vocab_size`` (no distinct tokens) or a size is not positive.
    """
    if segment_len < 1 or repeats < 1 or segment_len > vocab_size:
        raise ValueError(f"need 1 <= segment_len <= vocab_size and repeats >= 1, got "
                         f"segment_len={segment_len}, repeats={repeats}, vocab_size={vocab_size}")
    segment = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))[:segment_len]
    return segment.repeat(repeats)

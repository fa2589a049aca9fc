"""Positional encodings as ``torch.nn.Module``: fixed sinusoids or a learned table.

Both add a vector that depends on the position to each embedded token,
x_pos + PE(pos), because self-attention on its own cannot tell positions apart
(Vaswani et al. 2017, section 3.5). Both take an ``offset`` so that an
incremental decoder can embed the token at step t without re-embedding the prefix.

The paper found the two choices give nearly identical results (Table 3, row E)
and kept the sinusoids, which may extrapolate to lengths longer than those seen
in training; a learned table cannot represent a position it has no row for.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.5 and Table 3 (E).
Gehring et al. (2017), "Convolutional Sequence to Sequence Learning" (learned positions).
"""

from __future__ import annotations

import torch
from torch import nn

from attncourse.functional.positional import sinusoidal_encoding


def _validate_input(x: torch.Tensor, offset: int, max_len: int, d_model: int) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (batch, seq_len, d_model={d_model}), got {tuple(x.shape)}")
    if offset < 0 or offset + x.shape[1] > max_len:
        raise ValueError(
            f"positions {offset}..{offset + x.shape[1] - 1} do not fit max_len={max_len}; "
            f"build the model with a larger max_len (x has shape {tuple(x.shape)})"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encodings PE(pos) of section 3.5 to embedded tokens.

    The table comes from :func:`attncourse.functional.positional.sinusoidal_encoding`
    (the formula lives there only). It is a non-persistent buffer: it follows the
    module's device and dtype (``.to``, ``.double()``) but is not saved in the
    state dict, since it is a function of ``max_len`` and ``d_model``.

    Parameters
    ----------
    max_len : int
        Number of positions in the table.
    d_model : int
        Model width; must be even.

    Attributes
    ----------
    pe : (max_len, d_model) buffer
        PE(pos) in row pos.

    Raises
    ------
    ValueError
        If ``max_len < 1`` or ``d_model`` is not a positive even number.

    References
    ----------
    Vaswani et al. (2017), section 3.5.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len, self.d_model = int(max_len), int(d_model)
        table = torch.from_numpy(sinusoidal_encoding(max_len, d_model)).to(torch.get_default_dtype())
        self.register_buffer("pe", table, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return x + PE for positions ``offset .. offset + seq_len - 1``.

        Parameters
        ----------
        x : (batch, seq_len, d_model)
            Embedded tokens.
        offset : int
            Position of the first token (the decoding step, for one token at a time).

        Returns
        -------
        (batch, seq_len, d_model)

        Raises
        ------
        ValueError
            If ``x`` is not ``(batch, seq_len, d_model)`` or a position is outside
            ``[0, max_len)``; the message names both.
        """
        _validate_input(x, offset, self.max_len, self.d_model)
        return x + self.pe[offset : offset + x.shape[1]]


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned vector P[pos], one trainable row per position, to embedded tokens.

    The alternative the paper tried in Table 3 (E) (after Gehring et al. 2017).
    Rows are initialised N(0, 1), like ``nn.Embedding``: the same scale as the
    token embeddings after their sqrt(d_model) scaling in
    :class:`~attncourse.nn.transformer.Transformer`.

    Parameters
    ----------
    max_len : int
        Number of positions (rows); longer inputs are an error.
    d_model : int
        Model width.

    Attributes
    ----------
    embedding : nn.Embedding (max_len, d_model)
        The table P.

    Raises
    ------
    ValueError
        If ``max_len`` or ``d_model`` is not positive.

    References
    ----------
    Vaswani et al. (2017), section 3.5 and Table 3 (E).
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        if int(max_len) < 1 or int(d_model) < 1:
            raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
        self.max_len, self.d_model = int(max_len), int(d_model)
        self.embedding = nn.Embedding(self.max_len, self.d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return x + P[pos] for positions ``offset .. offset + seq_len - 1``.

        Takes and returns what :meth:`SinusoidalPositionalEncoding.forward` does
        (``x (batch, seq_len, d_model)``, the first position ``offset``), and raises
        the same ValueError for a wrong shape or a position outside ``[0, max_len)``.
        """
        _validate_input(x, offset, self.max_len, self.d_model)
        return x + self.embedding.weight[offset : offset + x.shape[1]]

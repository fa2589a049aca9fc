"""Q and K rows for RoPE: interleaved pairs (GGUF) or split halves (HF).

Source: llama.cpp's ``convert_hf_to_gguf.py``, ``LlamaModel.permute``.
"""

from __future__ import annotations

import torch


def half_split_order(d_k: int) -> torch.Tensor:
    """(d_k,) int64 [0, 2, .., 1, 3, ..]: half-split = interleaved[order].

    Raises ``ValueError`` if ``d_k`` is not a positive even number.
    """
    if int(d_k) != d_k or d_k < 2 or d_k % 2:
        raise ValueError(f"RoPE pairs need an even d_k >= 2, got d_k={d_k}")
    return torch.cat((torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)))


def _heads(rows: torch.Tensor, num_heads: int) -> int:
    """d_k of ``rows`` (num_heads * d_k, ...), checked."""
    if rows.dim() < 1 or num_heads < 1 or rows.shape[0] % (2 * num_heads):
        raise ValueError(
            f"rows of shape {tuple(rows.shape)} do not split into num_heads={num_heads} heads "
            "of an even width"
        )
    return rows.shape[0] // num_heads


def interleaved_to_half_split(rows: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Reorder rows of W^Q or W^K from interleaved pairs to halves.

    ``rows`` is (num_heads * d_k, ...). Raises ``ValueError`` unless the rows split into
    ``num_heads`` heads of even width.
    """
    d_k = _heads(rows, num_heads)
    return (
        rows.reshape(num_heads, d_k // 2, 2, *rows.shape[1:])
        .transpose(1, 2)
        .reshape(rows.shape)
    )


def half_split_to_interleaved(rows: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half_split` (llama.cpp's ``permute``)."""
    d_k = _heads(rows, num_heads)
    return (
        rows.reshape(num_heads, 2, d_k // 2, *rows.shape[1:])
        .transpose(1, 2)
        .reshape(rows.shape)
    )

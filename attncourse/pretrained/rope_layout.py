"""The two row orders of Q and K for RoPE: interleaved pairs (GGUF, Meta) and split halves (Hugging Face).

RoPE rotates the features of each query and key in pairs (Su et al. 2021,
section 3.4.2; :mod:`attncourse.nn.rope`). Which features form a pair is a
convention, and two are in use:

- **interleaved pairs** (x_{2i}, x_{2i+1}), i = 0 .. d_k/2 - 1, features side by
  side (GPT-J's layout; flash-attn calls it ``interleaved=True``): the paper's equation
  (34), chapter 7's :func:`~attncourse.nn.rope.apply_rope`, Meta's Llama code
  (complex numbers over consecutive features) and llama.cpp;
- **split halves** (x_i, x_{i + d_k/2}): GPT-NeoX's and Hugging Face's
  ``rotate_half``, which rotates the first half of a head against the second.

Both turn pair i by the same angle m * theta_i; they differ only in where pair i's
two features sit. A model trained with one is the *same* model with the other once
the output rows of W^Q and W^K are reordered within each head: put feature 2i of the
interleaved layout at position i, and feature 2i + 1 at position i + d_k/2.
Nothing else changes: the scores q . k are sums over a head's features, which do
not depend on their order when queries and keys are reordered alike, and W^V, W^O
are never rotated.

llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``) writes a
Hugging Face checkpoint's Q and K rows in the interleaved order, so a GGUF file
runs with interleaved RoPE; ``transformers`` undoes that permutation when it
loads a GGUF file (``LlamaTensorProcessor._reverse_permute_weights``).
"""

from __future__ import annotations

import torch


def half_split_order(d_k: int) -> torch.Tensor:
    """For each feature of the split-halves layout, its index in the interleaved layout.

    Parameters
    ----------
    d_k : int
        Width of one head; must be even.

    Returns
    -------
    (d_k,) int64 tensor
        ``[0, 2, 4, ..., d_k - 2, 1, 3, ..., d_k - 1]``: ``x_half_split = x_interleaved[..., order]``.

    Raises
    ------
    ValueError
        If ``d_k`` is not a positive even number.
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
    """Reorder the output rows of W^Q or W^K from interleaved RoPE pairs (GGUF) to split halves (Hugging Face).

    Parameters
    ----------
    rows : (num_heads * d_k, ...) tensor
        A weight ``(num_heads * d_k, d_model)`` or a bias ``(num_heads * d_k,)``, in GGUF's order.
    num_heads : int
        The heads these rows belong to: ``num_heads`` for W^Q, ``num_kv_heads`` for W^K.

    Returns
    -------
    Tensor, same shape
        Within each head, row ``i`` is the former row ``2i`` and row ``i + d_k/2`` the
        former row ``2i + 1`` (what ``transformers`` does when it loads a GGUF file).

    Raises
    ------
    ValueError
        If the rows do not split into ``num_heads`` heads of an even width.
    """
    d_k = _heads(rows, num_heads)
    return (
        rows.reshape(num_heads, d_k // 2, 2, *rows.shape[1:])
        .transpose(1, 2)
        .reshape(rows.shape)
    )


def half_split_to_interleaved(rows: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half_split`: split halves (Hugging Face) to interleaved pairs (GGUF).

    This is llama.cpp's ``LlamaModel.permute`` in ``convert_hf_to_gguf.py``.

    Parameters
    ----------
    rows : (num_heads * d_k, ...) tensor
    num_heads : int

    Returns
    -------
    Tensor, same shape

    Raises
    ------
    ValueError
        If the rows do not split into ``num_heads`` heads of an even width.
    """
    d_k = _heads(rows, num_heads)
    return (
        rows.reshape(num_heads, 2, d_k // 2, *rows.shape[1:])
        .transpose(1, 2)
        .reshape(rows.shape)
    )

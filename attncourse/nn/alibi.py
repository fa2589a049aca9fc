"""ALiBi, attention with linear biases (Press, Smith, Lewis 2022): positions as a penalty on distance.

ALiBi adds no position vector at all. Each head h subtracts from every
alignment score a penalty proportional to how far back the key lies
(Press et al. 2022, section 3):

    softmax(q_i K^T / sqrt(d_k) + m_h * [-(i-1), ..., -2, -1, 0])

The slopes m_h form a geometric sequence fixed before training: for n heads
(n a power of two) it starts at 2^(-8/n) and has that same ratio, so for 8 heads
m = 1/2, 1/4, ..., 1/256. That is the paper's rule, stated for powers of two. A
head with a large slope looks at its neighbours only; one with a small slope sees
far. For n not a power of two, the slopes here follow the authors' code
(``get_slopes`` in their repository, ofirpress/attention_with_linear_biases):
the slopes of the nearest smaller power of two, filled up with every other slope
of the next one. Since the penalty grows with distance and never sees an absolute
position, a model trained on short contexts can be run on longer ones.

References
----------
Press, Smith, Lewis (2022), "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation", ICLR, section 3 and figure 3; the authors' code
for head counts that are not powers of two.
"""

from __future__ import annotations

import math

import torch


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The heads' slopes m_1 .. m_n (Press et al. 2022, section 3, and the authors' code).

    Parameters
    ----------
    num_heads : int
        n; for a power of two the slopes are 2^(-8k/n), k = 1 .. n (the paper's rule);
        otherwise those of the nearest smaller power of two, then every other slope of
        the next power of two (the rule of the authors' ``get_slopes``).

    Returns
    -------
    (num_heads,) float64 tensor

    Raises
    ------
    ValueError
        If ``num_heads < 1``.
    """
    if int(num_heads) != num_heads or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (k + 1) for k in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(num_heads: int, tgt_len: int, src_len: int, offset: int | None = None,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """The biases -m_h * |i - j| added to the scores of query i and key j.

    Parameters
    ----------
    num_heads : int
    tgt_len, src_len : int
        Numbers of queries and keys; the queries are ``tgt_len`` consecutive positions
        among the keys, so ``tgt_len <= src_len``.
    offset : int, optional
        Position of the first query among the keys, ``0 <= offset <= src_len - tgt_len``;
        default ``src_len - tgt_len`` (the queries are the last positions, as when decoding
        over a KV cache).
    dtype : torch.dtype, optional
        Of the result, e.g. the model's; default ``torch.get_default_dtype()``. The
        biases are computed in float64 and rounded once.

    Returns
    -------
    (num_heads, tgt_len, src_len) tensor of ``dtype``
        0 on the diagonal, -m_h per step of distance; causal attention uses the part
        j <= i, where the bias is -m_h (i - j) as in the paper.

    Raises
    ------
    ValueError
        If a size is negative, ``num_heads < 1``, there are more queries than keys, or
        ``offset`` puts a query outside the keys.
    """
    for name, value in (("tgt_len", tgt_len), ("src_len", src_len)):
        if isinstance(value, bool) or int(value) != value or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if tgt_len > src_len:
        raise ValueError(f"alibi_bias needs at most as many queries as keys (the queries are "
                         f"positions among the keys), got tgt_len={tgt_len} > src_len={src_len}")
    offset = src_len - tgt_len if offset is None else int(offset)
    if not 0 <= offset <= src_len - tgt_len:
        raise ValueError(f"offset must lie in 0..src_len - tgt_len = 0..{src_len - tgt_len}, got {offset}")
    query_pos = torch.arange(tgt_len, dtype=torch.float64)[:, None] + offset
    key_pos = torch.arange(src_len, dtype=torch.float64)[None, :]
    distance = (query_pos - key_pos).abs()
    bias = -alibi_slopes(num_heads)[:, None, None] * distance
    return bias.to(torch.get_default_dtype() if dtype is None else dtype)

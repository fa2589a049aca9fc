"""ALiBi: a linear penalty on query-key distance instead of position vectors.

Source: Press, Smith, Lewis (2022), "Train Short, Test Long", section 3; the authors'
``get_slopes`` for head counts that are not powers of two.
"""

from __future__ import annotations

import math

import torch


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The slopes m_1 .. m_n as a (num_heads,) float64 tensor.

    For n a power of two, 2^(-8k/n), k = 1 .. n. Other n: the nearest smaller power of
    two's slopes, then every other slope of the next one (the authors' code). Raises
    ``ValueError`` if ``num_heads < 1``.
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
    """The biases -m_h |i - j|, (num_heads, tgt_len, src_len), in ``dtype``.

    The queries sit at ``offset .. offset + tgt_len - 1`` among the keys (default: the
    last). Raises ``ValueError`` for a negative size, ``num_heads < 1``, more queries
    than keys, or an ``offset`` outside the keys.
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

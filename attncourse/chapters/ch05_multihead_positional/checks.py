"""Checks for the exercises of the chapter "Multi-head attention and positional encoding".

Multi-head attention computes all heads' queries with one (d_model, h * d_k)
projection, then cuts the feature axis into h heads (``split_heads``) and, after
attention, glues the heads back together (``merge_heads``, the Concat of
section 3.2.2). Both are one reshape and one transpose, and both are easy to get
subtly wrong: a reshape alone gives a tensor of the right shape holding the
wrong numbers. When a case fails, the learner's output is compared with the
outputs of those typical wrong versions, so that the hint names the bug.

The reference is :func:`attncourse.nn.attention.split_heads` and
:func:`attncourse.nn.attention.merge_heads`.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.checks.guard import ATTENTION, allowing
from attncourse.nn.attention import merge_heads, split_heads

# --------------------------------------------------------------------------- split_heads

SPLIT_EXPLAIN = (
    "Head i owns the i-th contiguous block of d_k features of each token. Reshape "
    "(batch, seq_len, d_model) to (batch, seq_len, num_heads, d_k), then swap the seq_len and "
    "num_heads axes (a transpose), giving (batch, num_heads, seq_len, d_k)."
)
SPLIT_NO_TRANSPOSE_HINT = (
    "Right shape, wrong numbers: you reshaped straight to (batch, num_heads, seq_len, d_k). A reshape "
    "keeps the memory order, so that cuts the sequence into pieces instead of cutting each token's "
    "features. Reshape to (batch, seq_len, num_heads, d_k) first, then swap two axes."
)
SPLIT_SEQ_HEADS_HINT = (
    "The seq_len and num_heads axes are swapped: you returned (batch, seq_len, num_heads, d_k). "
    "Finish by swapping those two axes, so that the heads come before the positions."
)
SPLIT_STRIDED_HINT = (
    "Each head got every num_heads-th feature instead of a "
    "contiguous block: you reshaped the features to (d_k, num_heads) rather than (num_heads, d_k). "
    "Reshape to (batch, seq_len, num_heads, d_k), then swap the positions' and heads' axes."
)
SPLIT_DK_SEQ_HINT = (
    "The last two axes are swapped: you returned (batch, num_heads, d_k, seq_len). Transpose "
    "axes 1 and 2 of the (batch, seq_len, num_heads, d_k) tensor, not axes 1 and 3."
)

# --------------------------------------------------------------------------- merge_heads

MERGE_EXPLAIN = (
    "The paper's Concat puts the heads' outputs side by side for each position: swap the "
    "num_heads and seq_len axes back (a transpose), giving (batch, seq_len, num_heads, d_v), "
    "then join the last two axes into one. After a transpose the tensor is not contiguous "
    "in memory, so .view needs .contiguous() first; .reshape copies when it must."
)
MERGE_NO_TRANSPOSE_HINT = (
    'Right shape, wrong numbers: you reshaped (batch, num_heads, seq_len, d_v) straight to '
    "(batch, seq_len, num_heads * d_v). That reads head 1's rows first and glues positions of the"
    " same head together. A reshape keeps memory order: bring the positions' axis before the "
    "heads' axis first."
)
MERGE_STRIDED_HINT = (
    "The features are interleaved (head 1's first feature, head 2's first feature, ...) instead of "
    "head 1's block, then head 2's block: you moved num_heads after d_v. Swap only the heads' and "
    "positions' axes, which gives (batch, seq_len, num_heads, d_v), then reshape."
)
MERGE_SEQ_HINT = (
    "The result has the heads' axis where the positions should be: merge_heads returns "
    "(batch, seq_len, num_heads * d_v), one row per position."
)

_ATOL = 1e-6
_RTOL = 1e-5


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _diagnose_split(got: Any, case: Case) -> str | None:
    x, h = case.args["x"], int(case.args["num_heads"])
    batch, seq_len, width = x.shape
    d_k = width // h
    wrong = [
        (SPLIT_NO_TRANSPOSE_HINT, x.reshape(batch, h, seq_len, d_k)),
        (SPLIT_SEQ_HEADS_HINT, x.reshape(batch, seq_len, h, d_k)),
        (SPLIT_STRIDED_HINT, x.reshape(batch, seq_len, d_k, h).permute(0, 3, 1, 2)),
        (SPLIT_DK_SEQ_HINT, x.reshape(batch, seq_len, h, d_k).permute(0, 2, 3, 1)),
    ]
    expected = np.asarray(case.expected)
    for hint, variant in wrong:
        v = _numpy(variant)
        if not np.array_equal(v, expected) and same_values(got, v, case):
            return hint
    if isinstance(got, np.ndarray) and got.shape == (batch, seq_len, h, d_k) != expected.shape:
        return SPLIT_SEQ_HEADS_HINT
    return None


def _diagnose_merge(got: Any, case: Case) -> str | None:
    x = case.args["x"]
    batch, h, seq_len, d_v = x.shape
    wrong = [
        (MERGE_NO_TRANSPOSE_HINT, x.reshape(batch, seq_len, h * d_v)),
        (MERGE_STRIDED_HINT, x.permute(0, 2, 3, 1).reshape(batch, seq_len, h * d_v)),
        (MERGE_SEQ_HINT, x.reshape(batch, h, seq_len * d_v)),
    ]
    expected = np.asarray(case.expected)
    for hint, variant in wrong:
        v = _numpy(variant)
        if not np.array_equal(v, expected) and same_values(got, v, case):
            return hint
    return None


def _input(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    # Distinct, easily told apart entries: a wrong layout can never equal the right one by chance.
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _drawn_sizes(seed: int) -> list[tuple[int, int, int, int, int]]:
    """Two ``(batch, seq_len, num_heads, d_k, tensor_seed)`` drawn from the grading seed."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 6)),
             int(rng.integers(1, 5)), int(rng.integers(2**31))) for _ in range(2)]


def split_heads_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_split_heads`; with ``seed`` (the grade of record's),
    two more whose sizes and values are drawn from it."""
    def case(description: str, shape: tuple[int, int, int], num_heads: int, seed: int) -> Case:
        x = _input(shape, seed)
        return Case(
            description=description,
            args={"x": x, "num_heads": num_heads},
            expected=_numpy(split_heads(x, num_heads)),
            atol=_ATOL, rtol=_RTOL, hint=SPLIT_EXPLAIN, diagnose=_diagnose_split,
        )

    counting = Case(
        description="counting numbers, batch=1, seq_len=3, d_model=4, num_heads=2",
        args={"x": torch.arange(12, dtype=torch.float64).reshape(1, 3, 4), "num_heads": 2},
        expected=np.array([[[[0.0, 1.0], [4.0, 5.0], [8.0, 9.0]], [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]]]]),
        atol=0.0, rtol=0.0, hint=SPLIT_EXPLAIN, diagnose=_diagnose_split,
    )
    return [
        counting,
        case("batch=2, seq_len=5, d_model=12, num_heads=3", (2, 5, 12), 3, 1),
        case("one head: nothing to cut, batch=2, seq_len=3, d_model=4", (2, 3, 4), 1, 2),
        case("seq_len equal to num_heads, batch=1, seq_len=4, d_model=8", (1, 4, 8), 4, 3),
        case("d_k = 1, batch=3, seq_len=2, d_model=6, num_heads=6", (3, 2, 6), 6, 4),
    ] + ([] if seed is None else [
        case(f"drawn when graded: batch={b}, seq_len={n}, d_model={h * d}, num_heads={h}", (b, n, h * d), h, g)
        for b, n, h, d, g in _drawn_sizes(seed)])


def merge_heads_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_merge_heads`; with ``seed``, two more drawn from it."""
    def case(description: str, shape: tuple[int, int, int, int], seed: int) -> Case:
        x = _input(shape, seed)
        return Case(
            description=description,
            args={"x": x},
            expected=_numpy(merge_heads(x)),
            atol=_ATOL, rtol=_RTOL, hint=MERGE_EXPLAIN, diagnose=_diagnose_merge,
        )

    counting = Case(
        description="counting numbers, batch=1, num_heads=2, seq_len=3, d_v=2",
        args={"x": torch.arange(12, dtype=torch.float64).reshape(1, 2, 3, 2)},
        expected=np.array([[[0.0, 1.0, 6.0, 7.0], [2.0, 3.0, 8.0, 9.0], [4.0, 5.0, 10.0, 11.0]]]),
        atol=0.0, rtol=0.0, hint=MERGE_EXPLAIN, diagnose=_diagnose_merge,
    )
    return [
        counting,
        case("batch=2, num_heads=3, seq_len=5, d_v=4", (2, 3, 5, 4), 1),
        case("one head, batch=2, num_heads=1, seq_len=3, d_v=4", (2, 1, 3, 4), 2),
        case("seq_len equal to num_heads, batch=1, num_heads=4, seq_len=4, d_v=2", (1, 4, 4, 2), 3),
    ] + ([] if seed is None else [
        case(f"drawn when graded: batch={b}, num_heads={h}, seq_len={n}, d_v={d}", (b, h, n, d), g)
        for b, n, h, d, g in _drawn_sizes(seed)])


@allowing("Tensor reshapes and transposes (view, reshape, transpose, permute).",
          library=("einops:rearrange",) + ATTENTION)
def check_split_heads(fn: Callable[[torch.Tensor, int], Any]) -> CheckResult:
    """Check a learner's ``split_heads(x, num_heads)``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(x, num_heads)``:

        - ``x`` : (batch, seq_len, d_model) float64 torch tensor, e.g. Q W^Q for
          all heads at once;
        - ``num_heads`` : int h, a divisor of d_model; d_k = d_model / h;
        - returns (batch, num_heads, seq_len, d_k), head i holding features
          ``i * d_k`` to ``(i + 1) * d_k - 1`` of every position. A torch tensor
          (or a NumPy array).

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case
        and a hint naming the likely bug: a reshape without the transpose,
        seq_len and num_heads left in the wrong order, heads taking every h-th
        feature instead of a block, or the last two axes swapped.

    Notes
    -----
    The first case uses the numbers 0..11, so the right answer can be worked
    out by hand; one case has seq_len equal to num_heads, where a swapped
    layout has the right shape.

    References
    ----------
    Vaswani et al. (2017), section 3.2.2.

    Examples
    --------
    >>> def my_split_heads(x, num_heads):
    ...     batch, seq_len, d_model = x.shape
    ...     return x.reshape(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)
    >>> check_split_heads(my_split_heads)
    ✔ check_split_heads: all 5 hidden cases pass
    """
    return run_cases("check_split_heads", fn, split_heads_cases(), references=(split_heads,))


@allowing("Tensor reshapes and transposes (view, reshape, transpose, permute).",
          library=("einops:rearrange",) + ATTENTION)
def check_merge_heads(fn: Callable[[torch.Tensor], Any]) -> CheckResult:
    """Check a learner's ``merge_heads(x)``, the Concat of the heads and the inverse of ``split_heads``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(x)``:

        - ``x`` : (batch, num_heads, seq_len, d_v) float64 torch tensor, every
          head's attention output;
        - returns (batch, seq_len, num_heads * d_v): for each position, head 1's
          d_v features, then head 2's, and so on. A torch tensor (or a NumPy array).

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case
        and a hint naming the likely bug: a reshape without the transpose
        (right shape, wrong numbers), interleaved heads, or a ``.view`` on a
        transposed, non-contiguous tensor (an exception; the hint explains
        ``.contiguous()`` and ``.reshape``).

    References
    ----------
    Vaswani et al. (2017), section 3.2.2.

    Examples
    --------
    >>> def my_merge_heads(x):
    ...     batch, num_heads, seq_len, d_v = x.shape
    ...     return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_v)
    >>> check_merge_heads(my_merge_heads)
    ✔ check_merge_heads: all 4 hidden cases pass
    """
    return run_cases("check_merge_heads", fn, merge_heads_cases(), references=(merge_heads,))


__all__ = [
    "check_merge_heads",
    "check_split_heads",
    "merge_heads_cases",
    "split_heads_cases",
]

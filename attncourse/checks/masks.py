"""The mask checks several chapters share: the causal mask (chapters 4 and 6), and the
lengths drawn for graded cases (chapters 1 and 7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.checks.core import Case, CheckResult, run_cases
from attncourse.checks.guard import allowing
from attncourse.functional import causal_mask


def draw_lengths(seed: int | None, max_len: tuple[int, int] = (1, 11), shortest: int = 0,
                 batch: tuple[int, int] = (1, 5)) -> list[tuple[list[int], int]]:
    """Two ``(lengths, max_len)`` drawn from the grading ``seed`` (none when it is None):
    ``max_len`` and the batch size within the inclusive ranges given, each length in
    ``[shortest, max_len]``."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(2):
        n = int(rng.integers(max_len[0], max_len[1] + 1))
        size = int(rng.integers(batch[0], batch[1] + 1))
        drawn.append(([int(v) for v in rng.integers(shortest, n + 1, size=size)], n))
    return drawn



# --------------------------------------------------------------------------- causal mask

MASK_UPPER_HINT = (
    "You built the upper triangle. Row i is query position i and column j key position j; "
    "position i may attend to every j up to i, which is the lower triangle: `np.tril`, not "
    "`np.triu`."
)
MASK_DIAGONAL_HINT = (
    "The diagonal is missing: a position may attend to itself. `np.tril` keeps the main "
    "diagonal by default; an offset below it drops the diagonal too."
)
MASK_INVERTED_HINT = (
    "True and False are swapped. In this course True means *may attend*, so the lower "
    "triangle with its diagonal is True (torch's `key_padding_mask` uses the opposite)."
)
MASK_DTYPE_HINT = (
    "The pattern is right but the dtype is {dtype}; masks must be boolean. Used as an index, "
    "an integer array is read as positions and a float one is rejected; only a bool array "
    "selects entries. Build the mask as booleans, or convert it at the end."
)
MASK_ALL_TRUE_HINT = (
    "Every position may attend to every other one here; a causal mask lets position i see only "
    "the keys up to i, so the entries above the diagonal must be False."
)
MASK_SHAPE_HINT = (
    "Return a square (seq_len, seq_len) array: row i is query position i, column j key "
    "position j."
)
MASK_SINGLE_HINT = (
    "With a single position, it may still attend to itself: the mask is [[True]], of shape "
    "(1, 1). Watch out for squeezing axes away, ranges that start at 1, and special cases for "
    "length 1."
)


def _diagnose_causal_mask(got: Any, case: Case) -> str | None:
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        return MASK_SINGLE_HINT if expected.shape == (1, 1) else MASK_SHAPE_HINT
    pattern = got.astype(bool) if got.dtype.kind in "biuf" else got
    if not np.isin(got, (0, 1)).all():
        return None
    if np.array_equal(pattern, expected.T) and expected.size > 1:
        return MASK_UPPER_HINT
    if np.array_equal(pattern, np.tril(expected, k=-1)):
        return MASK_DIAGONAL_HINT
    if np.array_equal(pattern, ~expected):
        return MASK_INVERTED_HINT
    if np.array_equal(pattern, np.ones_like(expected)) and expected.size > 1:
        return MASK_ALL_TRUE_HINT
    if np.array_equal(pattern, expected) and got.dtype != bool:
        return MASK_DTYPE_HINT.format(dtype=got.dtype)
    return None


def causal_mask_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_causal_mask`; with ``seed`` (the grade of record's),
    two more lengths drawn from it."""
    def case(description: str, seq_len: int, hint: str) -> Case:
        return Case(
            description=description,
            args={"seq_len": seq_len},
            expected=causal_mask(seq_len),
            atol=0.0,
            rtol=0.0,
            hint=hint,
            dtype=bool,
            diagnose=_diagnose_causal_mask,
        )

    lower = "Position i may attend to every position up to i: True on and below the diagonal."
    return [
        case("seq_len=4", 4, lower),
        case("a single position, seq_len=1", 1, MASK_SINGLE_HINT),
        case("seq_len=7", 7, lower),
    ] + ([] if seed is None else [case(f"drawn when graded: seq_len={int(n)}", int(n), lower)
                                  for n in np.random.default_rng(seed).integers(2, 40, size=2)])


@allowing("NumPy operations such as np.tril, np.ones, np.arange, comparisons and broadcasting.",
          library=("torch:generate_square_subsequent_mask",))
def check_causal_mask(fn: Callable[[int], Any]) -> CheckResult:
    """Check a learner's causal mask ``fn(seq_len) -> (seq_len, seq_len)`` bool, True where
    query i may attend to key j (j <= i); 0/1 integers are not accepted.

    Vaswani et al. (2017), section 3.2.3 (masking in the decoder).

    Examples
    --------
    >>> import numpy as np
    >>> def my_causal_mask(seq_len):
    ...     return np.tril(np.ones((seq_len, seq_len), dtype=bool))
    >>> check_causal_mask(my_causal_mask)
    ✔ check_causal_mask: all 3 hidden cases pass
    """
    return run_cases("check_causal_mask", fn, causal_mask_cases(), references=(causal_mask,))


__all__ = [
    "causal_mask_cases",
    "check_causal_mask",
    "draw_lengths",
]

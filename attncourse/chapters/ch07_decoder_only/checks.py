"""Checks for the exercises of the chapter "Decoder-only Transformers".

Three pieces of a modern decoder-only model that are short to write and easy
to get subtly wrong: the causal mask of a batch with *left* padding (prompts of
different lengths aligned on their last token, as batched generation needs), the
RoPE rotation of a query or key (Su et al. 2021, equation (34)), and the
expansion of grouped-query attention's key/value heads to the query heads
(Ainslie et al. 2023). When a case fails, the learner's output is compared with
the typical wrong versions so that the hint names the bug.

References are :func:`attncourse.nn.attend.allowed_keys`,
:func:`attncourse.nn.rope.apply_rope` and :func:`attncourse.nn.attend.repeat_kv`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.checks.guard import allowing
from attncourse.checks.masks import draw_lengths
from attncourse.nn.attend import allowed_keys, repeat_kv
from attncourse.nn.rope import apply_rope

# --------------------------------------------------------------------------- left-padded causal mask

MASK_EXPLAIN = (
    "Query i may attend to key j when j comes no later than i (causal) AND key j is a real "
    "token of that sentence (is_real). Combine the two masks with a logical and, the causal "
    "triangle shared by every sentence and is_real laid along the keys (the last axis). "
    "Rows of padding queries then come out all False, which attention turns into zero outputs."
)
MASK_NO_PADDING_HINT = (
    'That is the plain causal mask for every sentence: the padding keys at the left are still '
    "attended to. Combine it with each sentence's is_real, laid along the keys (the last axis)."
)
MASK_NO_CAUSAL_HINT = (
    "That is only the padding mask: every query sees the future. AND it with the lower "
    "triangle (np.tril)."
)
MASK_QUERY_AXIS_HINT = (
    'The padding is applied to the queries (rows) instead of the keys (columns): is_real must '
    'broadcast along the last axis, the keys.'
)
MASK_UPPER_HINT = "The triangle is the upper one: a query must see the keys *before* it and itself, np.tril."

# --------------------------------------------------------------------------- RoPE

ROPE_EXPLAIN = (
    "Take the features in neighbouring pairs (features 0 and 1, 2 and 3, ...) and turn pair i "
    "of the row at position m, as a point in the plane, by m times the pair's frequency "
    "theta_i, which falls geometrically from 1 for the first pair towards 1/10000 (Su et al. "
    "2021, eq. (34))."
)
ROPE_HALVES_HINT = (
    "You paired each feature of the first half with its counterpart in the second half (the "
    "'rotate half' layout of some libraries, e.g. GPT-NeoX). It works as well in a model "
    "trained that way, but the paper pairs neighbours: features 0 and 1, 2 and 3, ..."
)
ROPE_SIGN_HINT = (
    "The rotation goes the wrong way (the negative angle): check the signs of the sine terms; "
    "a counter-clockwise turn of a point lowers its first coordinate."
)
ROPE_FREQ_HINT = (
    "The frequencies are off: pair i has frequency 10000 raised to minus 2i over d, for the "
    "pairs 0 .. d/2 - 1 (the first pair turns fastest, with frequency 1)."
)

# --------------------------------------------------------------------------- repeat_kv

REPEAT_EXPLAIN = (
    "The query heads come in equal groups of consecutive heads, one group per key/value head, "
    "and each group shares its kv head: repeat each kv head group-size times *in a row* along the "
    "head axis (repeat_interleave), giving (batch, num_heads, seq_len, d)."
)
REPEAT_TILE_HINT = (
    'You tiled the kv heads (0, 1, 0, 1, ...): consecutive query heads then use different kv heads. '
    'Grouped-query attention gives each kv head a *contiguous* group of query heads (0, 0, 1, 1, '
    '...): each kv head must appear group times in a row.'
)
REPEAT_AXIS_HINT = "You repeated along the wrong axis: the heads are axis 1 of (batch, num_kv_heads, seq_len, d)."


def _padding(lengths: list[int], seq_len: int) -> np.ndarray:
    return np.array([[j >= seq_len - n for j in range(seq_len)] for n in lengths])


def _mask_reference(is_real: np.ndarray) -> np.ndarray:
    causal = allowed_keys(is_real.shape[1], is_real.shape[1]).numpy()
    return causal[None] & is_real[:, None, :]


def _diagnose_mask(got: Any, case: Case) -> str | None:
    is_real = case.args["is_real"]
    n = is_real.shape[1]
    tril = np.tril(np.ones((n, n), dtype=bool))
    variants = [
        (MASK_NO_PADDING_HINT, np.broadcast_to(tril, (len(is_real), n, n))),
        (MASK_NO_CAUSAL_HINT, np.broadcast_to(is_real[:, None, :], (len(is_real), n, n))),
        (MASK_QUERY_AXIS_HINT, tril[None] & is_real[:, :, None]),
        (MASK_UPPER_HINT, np.triu(np.ones((n, n), dtype=bool))[None] & is_real[:, None, :]),
    ]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def left_padded_mask_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_left_padded_causal_mask`; with ``seed`` (the grade of
    record's), two more batches of prompt lengths drawn from it."""
    def case(description: str, lengths: list[int], seq_len: int) -> Case:
        is_real = _padding(lengths, seq_len)
        return Case(description=description, args={"is_real": is_real}, expected=_mask_reference(is_real),
                    atol=0.0, rtol=0.0, dtype=bool, hint=MASK_EXPLAIN, diagnose=_diagnose_mask)

    return [
        case("two prompts of lengths 2 and 4, seq_len=4", [2, 4], 4),
        case("no padding: the plain causal mask, batch=1, seq_len=5", [5], 5),
        case("three prompts of lengths 1, 3, 6, seq_len=6", [1, 3, 6], 6),
        case("one real token, seq_len=3", [1], 3),
    ] + [case(f"drawn when graded: prompts of lengths {lengths}, seq_len={n}", lengths, n)
         for lengths, n in draw_lengths(seed, max_len=(2, 8), shortest=1, batch=(1, 4))]


@allowing("NumPy operations such as np.tril, np.ones, np.arange, comparisons and broadcasting.")
def check_left_padded_causal_mask(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``left_padded_causal_mask(is_real)``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(is_real)`` with ``is_real: (batch, seq_len)`` bool NumPy array,
        ``True`` at real tokens (the padding is on the left); returns
        ``(batch, seq_len, seq_len)`` bool, ``True`` where query i may attend to key j.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case and a
        hint naming the likely bug (padding or causality forgotten, padding on the
        query axis, the upper triangle).
    """
    return run_cases("check_left_padded_causal_mask", fn, left_padded_mask_cases(),
                     references=(allowed_keys,))


def _rope_variants(x: torch.Tensor, positions: torch.Tensor) -> list[tuple[str, np.ndarray]]:
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions[:, None].double() * theta
    even, odd = x[..., 0::2], x[..., 1::2]
    first, second = x[..., : d // 2], x[..., d // 2:]
    halves = torch.cat([first * angle.cos() - second * angle.sin(), first * angle.sin() + second * angle.cos()], -1)
    flipped = torch.stack([even * angle.cos() + odd * angle.sin(), -even * angle.sin() + odd * angle.cos()], -1)
    slow = positions[:, None].double() * 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)
    wrong_freq = torch.stack([even * slow.cos() - odd * slow.sin(), even * slow.sin() + odd * slow.cos()], -1)
    return [(ROPE_HALVES_HINT, halves.numpy()), (ROPE_SIGN_HINT, flipped.flatten(-2).numpy()),
            (ROPE_FREQ_HINT, wrong_freq.flatten(-2).numpy())]


def _diagnose_rope(got: Any, case: Case) -> str | None:
    variants = _rope_variants(case.args["x"], case.args["positions"])
    return variant_hint(got, variants, np.asarray(case.expected), case)


def rope_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_rope`; with ``seed`` (the grade of record's), two more
    whose width, positions and values are drawn from it."""
    def case(description: str, seq_len: int, d: int, positions: list[int], seed: int) -> Case:
        x = torch.randn(seq_len, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        pos = torch.tensor(positions)
        return Case(description=description, args={"x": x, "positions": pos},
                    expected=apply_rope(x, pos).numpy(), atol=1e-9, rtol=1e-7, hint=ROPE_EXPLAIN,
                    diagnose=_diagnose_rope)

    return [
        case("one pair (d=2) at positions 0, 1, 2", 3, 2, [0, 1, 2], 0),
        case("d=8, positions 0..4", 5, 8, [0, 1, 2, 3, 4], 1),
        case("a query at position 7 and a key at position 3 (d=4)", 2, 4, [7, 3], 2),
        case("far positions 100, 1000 (d=16)", 2, 16, [100, 1000], 3),
    ] + [case(f"drawn when graded: d={d}, positions {positions}", len(positions), d, positions, g)
         for d, positions, g in _drawn_positions(seed)]


def _drawn_positions(seed: int | None) -> list[tuple[int, list[int], int]]:
    """Two ``(d, positions, tensor_seed)`` drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [(2 * int(rng.integers(1, 9)), [int(p) for p in rng.integers(0, 2048, size=int(rng.integers(1, 6)))],
             int(rng.integers(2**31))) for _ in range(2)]


@allowing("torch operations: arange, powers, cos, sin, stack, indexing and reshapes (real "
          "arithmetic).",
          library=("torch:view_as_complex", "torch:view_as_real", "torch:polar", "torch:complex"))
def check_rope(fn: Callable[[torch.Tensor, torch.Tensor], Any]) -> CheckResult:
    """Check a learner's ``rope(x, positions)``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(x, positions)``: ``x (seq_len, d)`` float64 torch tensor (d even),
        ``positions (seq_len,)`` int64 tensor; returns ``(seq_len, d)``: row m rotated pair by
        pair by the angles ``positions[m] * theta_i`` (Su et al. 2021, eq. (34)).

    Returns
    -------
    CheckResult
        With a hint for the 'rotate half' pairing, a rotation the wrong way, wrong frequencies.
    """
    return run_cases("check_rope", fn, rope_cases(), references=(apply_rope,))


def _diagnose_repeat(got: Any, case: Case) -> str | None:
    x, h = case.args["x"], int(case.args["num_heads"])
    group = h // x.shape[1]
    variants = [(REPEAT_TILE_HINT, x.repeat(1, group, 1, 1).numpy()),
                (REPEAT_AXIS_HINT, x.repeat_interleave(group, dim=2).numpy())]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def repeat_kv_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_repeat_kv`; with ``seed`` (the grade of record's), two
    more whose head counts and sizes are drawn from it."""
    def case(description: str, shape: tuple[int, int, int, int], num_heads: int, seed: int) -> Case:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        return Case(description=description, args={"x": x, "num_heads": num_heads},
                    expected=repeat_kv(x, num_heads).numpy(), atol=0.0, rtol=0.0, hint=REPEAT_EXPLAIN,
                    diagnose=_diagnose_repeat)

    return [
        case("2 kv heads for 4 query heads, batch=1, seq_len=3, d=2", (1, 2, 3, 2), 4, 0),
        case("1 kv head (multi-query) for 8 query heads, batch=2, seq_len=2, d=4", (2, 1, 2, 4), 8, 1),
        case("as many kv heads as query heads: nothing to repeat", (1, 4, 3, 2), 4, 2),
        case("3 kv heads for 6 query heads, batch=2, seq_len=4, d=3", (2, 3, 4, 3), 6, 3),
    ] + [case(f"drawn when graded: {kv} kv heads for {kv * group} query heads, batch={b}, seq_len={n}, d={d}",
              (b, kv, n, d), kv * group, g) for b, kv, group, n, d, g in _drawn_heads(seed)]


def _drawn_heads(seed: int | None) -> list[tuple[int, ...]]:
    """Two ``(batch, kv_heads, group, seq_len, d, tensor_seed)`` drawn from the grading seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [tuple(int(v) for v in (*rng.integers(1, 5, size=5), rng.integers(2**31))) for _ in range(2)]


@allowing("torch operations such as repeat_interleave, expand and reshape.")
def check_repeat_kv(fn: Callable[[torch.Tensor, int], Any]) -> CheckResult:
    """Check a learner's ``repeat_kv(x, num_heads)``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(x, num_heads)``: ``x (batch, num_kv_heads, seq_len, d)`` float64 torch
        tensor, ``num_heads`` a multiple of ``num_kv_heads``; returns
        ``(batch, num_heads, seq_len, d)`` where query head i gets kv head ``i // group``.

    Returns
    -------
    CheckResult
        With a hint for tiling (``.repeat``) instead of ``repeat_interleave`` and for the wrong axis.
    """
    return run_cases("check_repeat_kv", fn, repeat_kv_cases(), references=(repeat_kv,))

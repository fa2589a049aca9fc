"""Checks for the exercises of the chapter "Long context".

Three formulas that decide how a model behaves past its training length: RoPE's
frequencies stretched by position interpolation and by "NTK-aware" scaling (Chen et al.
2023; Peng et al. 2023, section 3.1), YaRN's frequencies by band (Peng et al. 2023,
section 3.2), and ALiBi's bias at a distance never seen in training (Press et al. 2022,
section 3). When a case fails, the learner's answer is compared with the typical wrong
versions so that the hint names the bug.

References are :class:`attncourse.nn.rope.RopeScaling` and :func:`attncourse.nn.alibi.alibi_slopes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.checks.guard import allowing
from attncourse.nn.alibi import alibi_bias, alibi_slopes
from attncourse.nn.rope import RopeScaling, apply_rope, rope_frequencies, yarn_ramp

# --------------------------------------------------------------------------- PI and NTK

STRETCH_EXPLAIN = (
    "RoPE gives each pair of features a frequency that falls geometrically with the pair's index. "
    "Position interpolation slows every pair by the same factor s; NTK-aware scaling keeps the "
    "formula and enlarges the base instead, by the power of s that makes the slowest pair turn "
    "exactly s times slower."
)
STRETCH_SWAPPED_HINT = (
    "That is the other method's answer: position interpolation rescales the frequencies "
    "themselves, NTK-aware scaling changes the base."
)
STRETCH_MULTIPLIED_HINT = (
    "The frequencies grew: stretching a model to longer contexts must make the rotations slower "
    "(divide by the factor, or use a larger base)."
)
STRETCH_NTK_EXPONENT_HINT = (
    "The base was enlarged by the factor itself: NTK-aware scaling raises the factor to a power "
    "a little above one, which depends on the width, so that the slowest pair turns exactly s "
    "times slower."
)


def _theta(d: int, base: float) -> np.ndarray:
    return base ** (-np.arange(0, d, 2) / d)


def _stretch_variants(method: str, d: int, base: float, factor: float) -> list[tuple[str, np.ndarray]]:
    other = "ntk" if method == "pi" else "pi"
    return [(STRETCH_SWAPPED_HINT, RopeScaling(other, factor).frequencies(d, base).numpy()),
            (STRETCH_MULTIPLIED_HINT, _theta(d, base) * factor),
            (STRETCH_NTK_EXPONENT_HINT, _theta(d, base * factor))]


def _diagnose_stretch(got: Any, case: Case) -> str | None:
    method, d, base, factor = case.args.values()
    return variant_hint(got, _stretch_variants(method, d, base, factor), np.asarray(case.expected), case)


def _drawn_rope(seed: int | None) -> list[tuple[int, float, float, int]]:
    """Two ``(d, base, factor, original_len)`` drawn from the grade of record's seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [(2 * int(rng.integers(2, 65)), float(rng.choice([10000.0, 500000.0])),
             round(float(rng.uniform(1.5, 16.0)), 2), int(2 ** rng.integers(5, 14))) for _ in range(2)]


def stretched_frequencies_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_stretched_frequencies`; with ``seed`` (the grade of
    record's), one more of each method with width, base and factor drawn from it."""
    def case(description: str, method: str, d: int, base: float, factor: float) -> Case:
        expected = RopeScaling(method, factor).frequencies(d, base).numpy()
        return Case(description=description, args={"method": method, "d": d, "base": base, "factor": factor},
                    expected=expected, atol=0, rtol=1e-9, hint=STRETCH_EXPLAIN, diagnose=_diagnose_stretch)

    return [
        case("PI, d=8, s=4", "pi", 8, 10000.0, 4.0),
        case("NTK, d=8, s=4", "ntk", 8, 10000.0, 4.0),
        case("PI, d=64, base 500000, s=8", "pi", 64, 500000.0, 8.0),
        case("NTK, d=64, s=8", "ntk", 64, 10000.0, 8.0),
        case("NTK, s=1 changes nothing (d=16)", "ntk", 16, 10000.0, 1.0),
        case("NTK, d=128, s=2.5", "ntk", 128, 10000.0, 2.5),
    ] + [case(f"drawn when graded: {method.upper()}, d={d}, base {base:g}, s={factor:g}", method, d, base, factor)
         for method, (d, base, factor, _) in zip(("pi", "ntk"), _drawn_rope(seed), strict=False)]


@allowing("NumPy operations: np.arange, powers and division.")
def check_stretched_frequencies(fn: Callable[[str, int, float, float], Any]) -> CheckResult:
    """Check a learner's ``stretched_frequencies(method, d, base, factor)``.

    Parameters
    ----------
    fn : callable
        Called with ``method`` (``"pi"`` or ``"ntk"``), the even width ``d``, RoPE's ``base``
        and the scale factor s; returns the ``(d // 2,)`` frequencies theta'_i.
    """
    return run_cases("check_stretched_frequencies", fn, stretched_frequencies_cases(),
                     references=(RopeScaling.frequencies, rope_frequencies, apply_rope))


# --------------------------------------------------------------------------- YaRN

YARN_EXPLAIN = (
    "For each pair, count the turns it makes within the training length (that length over the "
    "pair's wavelength). Pairs that turn less than once are interpolated (slowed by the factor), "
    "pairs that turn more than 32 times are kept, and those in between blend the two with a ramp "
    "that rises linearly with the count (Peng et al. 2023, section 3.2)."
)
YARN_SWAPPED_HINT = (
    "The ramp runs the wrong way: pairs that turn many times within the training length keep "
    "their frequency; pairs that turn less than once are the ones slowed by the factor."
)
YARN_RATIO_HINT = (
    "The count must be turns within the training length: the length over the pair's wavelength "
    "(a full turn is 2 pi radians), not the angle it turns through."
)


def _yarn_variants(d: int, base: float, factor: float, original_len: int) -> list[tuple[str, np.ndarray]]:
    theta = _theta(d, base)
    gamma = np.clip((original_len * theta / (2 * math.pi) - 1) / 31, 0, 1)
    no_pi = np.clip((original_len * theta - 1) / 31, 0, 1)
    return [(YARN_SWAPPED_HINT, gamma * theta / factor + (1 - gamma) * theta),
            (YARN_RATIO_HINT, (1 - no_pi) * theta / factor + no_pi * theta),
            (STRETCH_SWAPPED_HINT, theta / factor)]


def _diagnose_yarn(got: Any, case: Case) -> str | None:
    return variant_hint(got, _yarn_variants(*case.args.values()), np.asarray(case.expected), case)


def yarn_frequencies_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_yarn_frequencies`; with ``seed`` (the grade of
    record's), two more drawn from it."""
    def case(description: str, d: int, base: float, factor: float, original_len: int) -> Case:
        expected = RopeScaling("yarn", factor, original_len).frequencies(d, base).numpy()
        return Case(description=description,
                    args={"d": d, "base": base, "factor": factor, "original_len": original_len},
                    expected=expected, atol=0, rtol=1e-9, hint=YARN_EXPLAIN, diagnose=_diagnose_yarn)

    return [
        case("the chapter's model: d=8, L=64, s=4", 8, 10000.0, 4.0, 64),
        case("d=64, L=4096, s=8 (a Llama-like head)", 64, 10000.0, 8.0, 4096),
        case("d=128, base 500000, L=8192, s=4", 128, 500000.0, 4.0, 8192),
        case("s=1 changes nothing (d=16, L=256)", 16, 10000.0, 1.0, 256),
    ] + [case(f"drawn when graded: d={d}, base {base:g}, L={length}, s={factor:g}", d, base, factor, length)
         for d, base, factor, length in _drawn_rope(seed)]


@allowing("NumPy operations: np.arange, powers, np.pi, np.clip and arithmetic.")
def check_yarn_frequencies(fn: Callable[[int, float, float, int], Any]) -> CheckResult:
    """Check a learner's ``yarn_frequencies(d, base, factor, original_len)`` (alpha = 1, beta = 32).

    Parameters
    ----------
    fn : callable
        Returns the ``(d // 2,)`` frequencies theta'_i of YaRN's interpolation by parts (the
        temperature apart).
    """
    return run_cases("check_yarn_frequencies", fn, yarn_frequencies_cases(),
                     references=(RopeScaling.frequencies, yarn_ramp, rope_frequencies, apply_rope))


# --------------------------------------------------------------------------- ALiBi far away

ALIBI_EXPLAIN = (
    "Each head has its own slope, a geometric sequence from 1/2 down to 1/256 for 8 heads. The "
    "bias is the slope times the distance, negative; nothing in it stops at the training length."
)
ALIBI_SIGN_HINT = (
    "The bias must lower the scores of far keys: it is negative, and its size grows with the "
    "distance."
)
ALIBI_ZERO_BASED_HINT = (
    "Count the heads from 1: the first slope is 1/2 for 8 heads, not 1."
)


def _diagnose_alibi(got: Any, case: Case) -> str | None:
    num_heads, distance = case.args.values()
    h = np.arange(num_heads)
    variants = [(ALIBI_SIGN_HINT, -np.asarray(case.expected)),
                (ALIBI_ZERO_BASED_HINT, -(2.0 ** (-8 * h / num_heads)) * distance)]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def alibi_far_bias_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_alibi_far_bias`; with ``seed`` (the grade of record's),
    two more head counts (powers of two) and distances drawn from it."""
    def case(description: str, num_heads: int, distance: int) -> Case:
        expected = (-alibi_slopes(num_heads) * distance).numpy()
        return Case(description=description, args={"num_heads": num_heads, "distance": distance},
                    expected=expected, atol=1e-12, rtol=1e-9, hint=ALIBI_EXPLAIN, diagnose=_diagnose_alibi)

    return [
        case("8 heads, distance 1", 8, 1),
        case("8 heads, distance 500 (past the training length)", 8, 500),
        case("4 heads, distance 100", 4, 100),
        case("16 heads, distance 0", 16, 0),
        case("2 heads, distance 4096", 2, 4096),
    ] + [case(f"drawn when graded: {heads} heads, distance {distance}", heads, distance)
         for heads, distance in _drawn_alibi(seed)]


def _drawn_alibi(seed: int | None) -> list[tuple[int, int]]:
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [(int(2 ** rng.integers(1, 6)), int(rng.integers(1, 100_000))) for _ in range(2)]


@allowing("NumPy operations: np.arange, powers and products.")
def check_alibi_far_bias(fn: Callable[[int, int], Any]) -> CheckResult:
    """Check a learner's ``alibi_far_bias(num_heads, distance)`` (``num_heads`` a power of two).

    Parameters
    ----------
    fn : callable
        Returns the ``(num_heads,)`` biases ALiBi adds to the score of a key ``distance``
        positions before the query (Press et al. 2022, section 3).
    """
    return run_cases("check_alibi_far_bias", fn, alibi_far_bias_cases(), references=(alibi_slopes, alibi_bias))


__all__ = ["check_alibi_far_bias", "check_stretched_frequencies", "check_yarn_frequencies"]

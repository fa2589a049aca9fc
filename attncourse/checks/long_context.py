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
from attncourse.nn.alibi import alibi_bias, alibi_slopes
from attncourse.nn.rope import RopeScaling, apply_rope, rope_frequencies, yarn_ramp

# --------------------------------------------------------------------------- PI and NTK

STRETCH_EXPLAIN = (
    "theta_i = base ** (-2i / d) for pair i = 0 .. d/2 - 1. Position interpolation divides every "
    "theta_i by the factor s; NTK-aware scaling keeps the formula but with the base "
    "base * s ** (d / (d - 2))."
)
STRETCH_SWAPPED_HINT = "That is the other method's answer: 'pi' divides theta by s, 'ntk' changes the base."
STRETCH_MULTIPLIED_HINT = (
    "The frequencies grew: stretching a model to longer contexts must make the rotations *slower* "
    "(divide by s, or a larger base)."
)
STRETCH_NTK_EXPONENT_HINT = (
    "The base is scaled by s itself: NTK-aware scaling uses base * s ** (d / (d - 2)), the "
    "exponent that makes the slowest pair turn exactly s times slower."
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


def stretched_frequencies_cases() -> list[Case]:
    """The hidden cases of :func:`check_stretched_frequencies`."""
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
    ]


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
    "For pair i: theta_i = base ** (-2i / d), its wavelength 2 pi / theta_i, the ratio "
    "r = original_len / wavelength, the ramp gamma = clip((r - 1) / (32 - 1), 0, 1), and "
    "theta'_i = (1 - gamma) * theta_i / s + gamma * theta_i (Peng et al. 2023, section 3.2)."
)
YARN_SWAPPED_HINT = (
    "The ramp runs the wrong way: pairs that turn many times within the training length (large r, "
    "gamma = 1) keep theta_i; pairs that turn less than once (gamma = 0) are divided by s."
)
YARN_RATIO_HINT = (
    "r must count the turns a pair makes within the training length: the training length "
    "divided by the pair's wavelength (2 pi / theta_i), not the angle it turns through."
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


def yarn_frequencies_cases() -> list[Case]:
    """The hidden cases of :func:`check_yarn_frequencies`."""
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
    ]


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
    "Head h (1-based) of H has the slope m_h = 2 ** (-8h / H): 1/2, 1/4, ..., 1/256 for 8 heads. "
    "The bias of a key at distance i - j is -m_h * (i - j), whatever the distance: nothing in "
    "the formula stops at the training length."
)
ALIBI_SIGN_HINT = "The bias must *lower* the scores of far keys: -m_h * distance, negative."
ALIBI_ZERO_BASED_HINT = (
    "The heads are counted from 1: m_h = 2 ** (-8h / H) for h = 1 .. H (the first slope is "
    "1/2 for 8 heads, not 1)."
)


def _diagnose_alibi(got: Any, case: Case) -> str | None:
    num_heads, distance = case.args.values()
    h = np.arange(num_heads)
    variants = [(ALIBI_SIGN_HINT, -np.asarray(case.expected)),
                (ALIBI_ZERO_BASED_HINT, -(2.0 ** (-8 * h / num_heads)) * distance)]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def alibi_far_bias_cases() -> list[Case]:
    """The hidden cases of :func:`check_alibi_far_bias`."""
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
    ]


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

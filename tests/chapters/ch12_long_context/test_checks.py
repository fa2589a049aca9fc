"""Chapter 12's checks: right answers pass, the typical wrong ones get their hint."""

import numpy as np

from attncourse.chapters.ch12_long_context.checks import (
    ALIBI_SIGN_HINT,
    ALIBI_ZERO_BASED_HINT,
    STRETCH_NTK_EXPONENT_HINT,
    STRETCH_SWAPPED_HINT,
    YARN_RATIO_HINT,
    YARN_SWAPPED_HINT,
    check_alibi_far_bias,
    check_stretched_frequencies,
    check_yarn_frequencies,
)


def theta(d, base):
    return base ** (-2 * np.arange(d // 2) / d)


def stretched(method, d, base, factor):
    if method == "ntk":
        return theta(d, base * factor ** (d / (d - 2)))
    return theta(d, base) / factor


def yarn(d, base, factor, original_len, swap=False, ratio=False):
    t = theta(d, base)
    r = original_len * t if ratio else original_len * t / (2 * np.pi)
    g = np.clip((r - 1) / 31, 0, 1)
    if swap:
        g = 1 - g
    return (1 - g) * t / factor + g * t


def test_right_answers_pass():
    assert check_stretched_frequencies(stretched).passed
    assert check_yarn_frequencies(yarn).passed
    assert check_alibi_far_bias(lambda h, dist: -(2.0 ** (-8 * np.arange(1, h + 1) / h)) * dist).passed


def _hint(result):
    return result.hint


def test_wrong_answers_get_their_hint():
    swapped = check_stretched_frequencies(lambda m, d, b, s: stretched("ntk" if m == "pi" else "pi", d, b, s))
    assert not swapped.passed and STRETCH_SWAPPED_HINT in _hint(swapped)
    base_only = check_stretched_frequencies(
        lambda m, d, b, s: theta(d, b * s) if m == "ntk" else theta(d, b) / s)
    assert STRETCH_NTK_EXPONENT_HINT in _hint(base_only)
    for wrong, hint in ((lambda *a: yarn(*a, swap=True), YARN_SWAPPED_HINT),
                        (lambda *a: yarn(*a, ratio=True), YARN_RATIO_HINT)):
        result = check_yarn_frequencies(wrong)
        assert not result.passed and hint in _hint(result)
    sign = check_alibi_far_bias(lambda h, dist: (2.0 ** (-8 * np.arange(1, h + 1) / h)) * dist)
    assert ALIBI_SIGN_HINT in _hint(sign)
    zero = check_alibi_far_bias(lambda h, dist: -(2.0 ** (-8 * np.arange(h) / h)) * dist)
    assert ALIBI_ZERO_BASED_HINT in _hint(zero)

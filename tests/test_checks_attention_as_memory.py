"""Chapter 14's checks: right answers pass, stubs do not, the typical wrong ones get their
hint, and the package's own functions are refused."""

import numpy as np

from attncourse.chapters.ch14_attention_as_memory import checks
from attncourse.chapters.ch14_attention_as_memory.checks import (
    CACHE_NO_CONV_HINT,
    DECAY_INCLUSIVE_HINT,
    DECAY_UPPER_HINT,
    DELTA_LINEAR_HINT,
    DELTA_SIGN_HINT,
    GATED_DECAY_WRITE_HINT,
    RECALL_LINEAR_HINT,
    WY_FULL_TRIANGLE_HINT,
    check_decay_matrix,
    check_delta_recall,
    check_delta_step,
    check_gated_delta_step,
    check_state_bytes,
    check_wy_factors,
)
from attncourse.checks.core import reset_attempts
from attncourse.functional.fast_weights import decay_matrix


def delta_step(S, k, v, beta):
    return S + beta * np.outer(k, v - k @ S)


def gated_step(S, k, v, beta, a):
    return a * (np.eye(len(k)) - beta * np.outer(k, k)) @ S + beta * np.outer(k, v)


def looped_decay(a):
    n = len(a)
    L = np.zeros((n, n))
    for t in range(n):
        for j in range(t + 1):
            L[t, j] = np.prod(a[j + 1:t + 1])
    return L


def wy(k, v, beta, diagonal=False):
    A = np.eye(len(beta)) + beta[:, None] * np.tril(k @ k.T, 0 if diagonal else -1)
    return np.linalg.solve(A, beta[:, None] * k), np.linalg.solve(A, beta[:, None] * v)


def recall(keys, values, queries):
    S = np.zeros((keys.shape[1], values.shape[1]))
    for k, v in zip(keys, values):
        S = delta_step(S, k, v, 1.0)
    return queries @ S


def state_bytes(layers, heads, d_head, conv, size, tail=True):
    return layers * (heads * d_head ** 2 + tail * max(conv - 1, 0) * 3 * heads * d_head) * size


def test_right_answers_pass():
    assert check_delta_step(delta_step).passed
    assert check_gated_delta_step(gated_step).passed
    assert check_decay_matrix(looped_decay).passed
    assert check_wy_factors(wy).passed
    assert check_delta_recall(recall).passed
    assert check_state_bytes(state_bytes).passed


def test_stubs_are_not_passed_yet():
    for check, stub in ((check_delta_step, lambda S, k, v, beta: None),
                        (check_decay_matrix, lambda a: None)):
        result = check(stub)
        assert not result.passed and result.cases_passed == 0


def _second_attempt(check, fn):
    reset_attempts()
    check(fn)  # the first failed attempt gets a nudge, the second the named hint
    return check(fn)


def test_wrong_answers_get_their_hint():
    wrong = {
        DELTA_SIGN_HINT: (check_delta_step, lambda S, k, v, b: S + b * np.outer(k, v + k @ S)),
        DELTA_LINEAR_HINT: (check_delta_step, lambda S, k, v, b: S + b * np.outer(k, v)),
        GATED_DECAY_WRITE_HINT: (check_gated_delta_step,
                                 lambda S, k, v, b, a: a * delta_step(S, k, v, b)),
        DECAY_INCLUSIVE_HINT: (check_decay_matrix, lambda a: looped_decay(a) * a[None, :]),
        DECAY_UPPER_HINT: (check_decay_matrix, lambda a: looped_decay(a).T),
        WY_FULL_TRIANGLE_HINT: (check_wy_factors, lambda k, v, b: wy(k, v, b, diagonal=True)),
        RECALL_LINEAR_HINT: (check_delta_recall, lambda keys, values, q: q @ (keys.T @ values)),
        CACHE_NO_CONV_HINT: (check_state_bytes, lambda *a: state_bytes(*a, tail=False)),
    }
    for hint, (check, fn) in wrong.items():
        result = _second_attempt(check, fn)
        assert not result.passed and hint in result.hint, (hint, result)


def test_the_package_is_refused():
    result = check_decay_matrix(lambda a: decay_matrix(__import__("torch").as_tensor(a)).numpy())
    assert not result.passed and "not accepted" in result.message


def test_random_cases_follow_the_seed():
    for cases in (checks.delta_step_cases, checks.decay_matrix_cases, checks.wy_cases,
                  checks.delta_recall_cases, checks.gated_step_cases):
        same = [np.asarray(c.expected[0] if isinstance(c.expected, tuple) else c.expected)
                for c in cases(seed=5)]
        again = [np.asarray(c.expected[0] if isinstance(c.expected, tuple) else c.expected)
                 for c in cases(seed=5)]
        other = [np.asarray(c.expected[0] if isinstance(c.expected, tuple) else c.expected)
                 for c in cases(seed=6)]
        assert all(np.array_equal(a, b) for a, b in zip(same, again))
        assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(same, other))

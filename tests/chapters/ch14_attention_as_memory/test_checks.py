"""Chapter 14's checks: right answers pass, stubs do not, the typical wrong ones get their
hint, and the package's own functions are refused."""

import numpy as np
import torch

from attncourse.chapters.ch14_attention_as_memory import checks
from attncourse.chapters.ch14_attention_as_memory.checks import (
    CACHE_NO_CONV_HINT,
    DECAY_INCLUSIVE_HINT,
    DECAY_UPPER_HINT,
    RETENTION_DECAY_ONLY_HINT,
    RETENTION_ERASE_ONLY_HINT,
    RETENTION_INCLUSIVE_HINT,
    RETENTION_NO_BETA_HINT,
    SQUARE_ELEMENTWISE_HINT,
    SQUARE_NORMALISED_HINT,
    SQUARE_PLAIN_HINT,
    TRANSITION_NO_BETA_HINT,
    TRANSITION_ORDER_HINT,
    TRANSITION_SIGN_HINT,
    TRANSITION_SUM_HINT,
    WY_FULL_TRIANGLE_HINT,
    check_decay_matrix,
    check_delta_transition,
    check_gated_retention,
    check_square_map_reads,
    check_state_bytes,
    check_wy_factors,
)
from attncourse.checks.core import reset_attempts
from attncourse.functional.delta_rule import delta_rule_recurrent
from attncourse.functional.fast_weights import decay_matrix


def erasure(k, beta):
    return np.eye(len(k)) - beta * np.outer(k, k)


def transition(k, beta, order="newest left", strength=True, sign=-1.0):
    out = np.eye(k.shape[1])
    for kt, bt in zip(k, beta):
        factor = np.eye(len(kt)) + sign * (bt if strength else 1.0) * np.outer(kt, kt)
        out = factor @ out if order == "newest left" else out @ factor
    return out


def retention(k, beta, a, first=1, decay=True, erase=True, strength=True):
    out = []
    for j in range(len(k)):
        span = np.eye(k.shape[1])
        for t in range(j + first, len(k)):
            step = erasure(k[t], beta[t] if strength else 1.0) if erase else np.eye(k.shape[1])
            span = (a[t] if decay else 1.0) * step @ span
        out.append(k[j] @ span @ k[j])
    return np.array(out)


def looped_decay(a):
    n = len(a)
    D = np.zeros((n, n))
    for t in range(n):
        for j in range(t + 1):
            D[t, j] = np.prod(a[j + 1:t + 1])
    return D


def wy(k, v, beta, diagonal=False):
    A = np.eye(len(beta)) + beta[:, None] * np.tril(k @ k.T, 0 if diagonal else -1)
    return np.linalg.solve(A, beta[:, None] * k), np.linalg.solve(A, beta[:, None] * v)


def phi(x):
    return np.stack([np.outer(row, row).ravel() for row in x])


def square_reads(keys, values, queries):
    return phi(queries) @ (phi(keys).T @ values)


def state_bytes(layers, heads, d_k, conv, size, tail=True):
    return layers * (heads * d_k ** 2 + tail * max(conv - 1, 0) * 3 * heads * d_k) * size


def test_right_answers_pass():
    assert check_delta_transition(transition).passed
    assert check_gated_retention(retention).passed
    assert check_decay_matrix(looped_decay).passed
    assert check_wy_factors(wy).passed
    assert check_square_map_reads(square_reads).passed
    assert check_state_bytes(state_bytes).passed


def t(x):
    return torch.as_tensor(x)[None, None]


def test_the_references_say_what_the_statements_say():
    rng = np.random.default_rng(0)
    k = rng.normal(size=(6, 4))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v, beta, a, start = rng.normal(size=(6, 3)), rng.random(6), 0.5 + 0.5 * rng.random(6), rng.normal(size=(4, 3))
    _, from_start = delta_rule_recurrent(t(k), t(k), t(v), t(beta), initial_state=t(start))
    _, from_empty = delta_rule_recurrent(t(k), t(k), t(v), t(beta))
    split = transition(k, beta) @ start + from_empty[0, 0].numpy()     # linear in the start
    assert np.allclose(split, from_start[0, 0].numpy(), rtol=0, atol=1e-12)
    # r_j: the read at k_j, at the end, of write j alone (beta_j = 1, value 1, nothing else)
    for j in range(6):
        only = np.zeros((6, 1))
        only[j] = 1.0
        b = beta.copy()
        b[j] = 1.0
        _, s = delta_rule_recurrent(t(k[j:]), t(k[j:]), t(only[j:]), t(b[j:]), t(a[j:]))
        assert np.isclose(k[j] @ s[0, 0].numpy()[:, 0], retention(k, b, a)[j], rtol=0, atol=1e-12)
    assert np.all(np.abs(retention(k, beta, a)) <= looped_decay(a)[-1] + 1e-12)
    q = rng.normal(size=(3, 4))
    assert np.allclose(square_reads(k, v, q), (q @ k.T) ** 2 @ v, rtol=0, atol=1e-12)


def test_stubs_are_not_passed_yet():
    for check, stub in ((check_delta_transition, lambda k, beta: None),
                        (check_decay_matrix, lambda a: None)):
        result = check(stub)
        assert not result.passed and result.cases_passed == 0


def _second_attempt(check, fn):
    reset_attempts()
    check(fn)  # the first failed attempt gets a nudge, the second the named hint
    return check(fn)


def test_wrong_answers_get_their_hint():
    wrong = {
        TRANSITION_ORDER_HINT: (check_delta_transition, lambda k, b: transition(k, b, order="newest right")),
        TRANSITION_NO_BETA_HINT: (check_delta_transition, lambda k, b: transition(k, b, strength=False)),
        TRANSITION_SIGN_HINT: (check_delta_transition, lambda k, b: transition(k, b, sign=1.0)),
        TRANSITION_SUM_HINT: (check_delta_transition,
                              lambda k, b: np.eye(k.shape[1]) - sum(bt * np.outer(kt, kt) for kt, bt in zip(k, b))),
        RETENTION_DECAY_ONLY_HINT: (check_gated_retention, lambda k, b, a: retention(k, b, a, erase=False)),
        RETENTION_ERASE_ONLY_HINT: (check_gated_retention, lambda k, b, a: retention(k, b, a, decay=False)),
        RETENTION_INCLUSIVE_HINT: (check_gated_retention, lambda k, b, a: retention(k, b, a, first=0)),
        RETENTION_NO_BETA_HINT: (check_gated_retention, lambda k, b, a: retention(k, b, a, strength=False)),
        DECAY_INCLUSIVE_HINT: (check_decay_matrix, lambda a: looped_decay(a) * a[None, :]),
        DECAY_UPPER_HINT: (check_decay_matrix, lambda a: looped_decay(a).T),
        WY_FULL_TRIANGLE_HINT: (check_wy_factors, lambda k, v, b: wy(k, v, b, diagonal=True)),
        SQUARE_PLAIN_HINT: (check_square_map_reads, lambda keys, values, q: q @ (keys.T @ values)),
        SQUARE_ELEMENTWISE_HINT: (check_square_map_reads,
                                  lambda keys, values, q: (q ** 2) @ ((keys ** 2).T @ values)),
        SQUARE_NORMALISED_HINT: (check_square_map_reads,
                                 lambda keys, values, q: square_reads(keys, values, q)
                                 / (phi(q) @ phi(keys).sum(0))[:, None]),
        CACHE_NO_CONV_HINT: (check_state_bytes, lambda *a: state_bytes(*a, tail=False)),
    }
    for hint, (check, fn) in wrong.items():
        result = _second_attempt(check, fn)
        assert not result.passed and hint in result.hint, (hint, result)


def test_the_package_is_refused():
    result = check_decay_matrix(lambda a: decay_matrix(__import__("torch").as_tensor(a)).numpy())
    assert not result.passed and "not accepted" in result.message


def test_random_cases_follow_the_seed():
    for cases in (checks.transition_cases, checks.decay_matrix_cases, checks.wy_cases,
                  checks.square_map_cases, checks.retention_cases):
        same = [np.asarray(c.expected[0] if isinstance(c.expected, tuple) else c.expected)
                for c in cases(seed=5)]
        again = [np.asarray(c.expected[0] if isinstance(c.expected, tuple) else c.expected)
                 for c in cases(seed=5)]
        other = [np.asarray(c.expected[0] if isinstance(c.expected, tuple) else c.expected)
                 for c in cases(seed=6)]
        assert all(np.array_equal(a, b) for a, b in zip(same, again))
        assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(same, other))

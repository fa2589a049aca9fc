"""Tests of attncourse.chapters.ch09_what_heads_learn.checks: right answers pass,
typical bugs fail with the hint naming them."""

import numpy as np

from attncourse.chapters.ch09_what_heads_learn.checks import (
    COPY_ABS_REAL_HINT,
    COPY_TRACE_HINT,
    PREFIX_ALL_QUERIES_HINT,
    PREFIX_SAME_TOKEN_HINT,
    check_copying_score,
    check_prefix_matching_score,
)
from tests.check_helpers import assert_failed


def prefix_right(weights, tokens):
    scores = []
    for i in range(len(tokens)):
        keys = [j for j in range(1, i + 1) if tokens[j - 1] == tokens[i]]
        if keys:
            scores.append(sum(weights[i, j] for j in keys))
    return float(np.mean(scores))


def prefix_same_token(weights, tokens):
    scores = []
    for i in range(len(tokens)):
        keys = [j for j in range(i) if tokens[j] == tokens[i]]
        if keys:
            scores.append(sum(weights[i, j] for j in keys))
    return float(np.mean(scores))


def prefix_all_queries(weights, tokens):
    return float(np.mean([sum(weights[i, j] for j in range(1, i + 1) if tokens[j - 1] == tokens[i])
                          for i in range(len(tokens))]))


def test_prefix_matching():
    assert check_prefix_matching_score(prefix_right).passed
    assert_failed(check_prefix_matching_score(prefix_same_token), 1, PREFIX_SAME_TOKEN_HINT)
    assert_failed(check_prefix_matching_score(prefix_all_queries), 1, PREFIX_ALL_QUERIES_HINT)
    stub = check_prefix_matching_score(lambda w, t: None)
    assert not stub.passed and "None" in stub.message


def copy_right(ov):
    eig = np.linalg.eigvals(ov)
    return float(eig.real.sum() / np.abs(eig).sum())


def test_copying():
    assert check_copying_score(copy_right).passed
    assert_failed(check_copying_score(lambda ov: float(np.linalg.eigvals(ov).real.sum())), 1, COPY_TRACE_HINT)
    assert_failed(check_copying_score(
        lambda ov: float(np.linalg.eigvals(ov).real.sum() / np.abs(np.linalg.eigvals(ov).real).sum())),
        3, COPY_ABS_REAL_HINT)
    assert not check_copying_score(lambda ov: None).passed

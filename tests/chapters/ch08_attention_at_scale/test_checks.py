"""Checks of the attention-at-scale exercises: right answers pass, stubs and typical bugs get hints."""

import numpy as np
import pytest

from attncourse.chapters.ch08_attention_at_scale.checks import (
    check_causal_linear_attention,
    check_online_softmax_update,
    check_rescale_output,
)
from attncourse.functional import elu_feature_map as phi
from attncourse.functional import linear_attention
from tests.check_helpers import (
    lenient_hand_offs,  # noqa: F401  (a fixture)
    own_copy,
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")

own_linear_attention = own_copy(linear_attention)  # the checks refuse the package's own


def good_update(m, l, scores):
    m_new = np.maximum(m, scores.max(axis=-1))
    shift = np.where(np.isfinite(m_new), m_new, 0.0)
    return m_new, np.exp(m - shift) * l + np.exp(scores - shift[:, None]).sum(axis=-1)


def test_online_update_right_answer_stub_and_bugs():
    assert check_online_softmax_update(good_update).passed
    stub = check_online_softmax_update(lambda m, l, scores: ...)
    assert not stub.passed and stub.cases_passed == 0 and stub.hint

    def no_rescale(m, l, scores):
        m_new, _ = good_update(m, l, scores)
        shift = np.where(np.isfinite(m_new), m_new, 0.0)
        return m_new, l + np.exp(scores - shift[:, None]).sum(axis=-1)

    result = check_online_softmax_update(no_rescale)
    assert not result.passed and "carry it over to the new maximum" in result.hint

    def nan_prone(m, l, scores):
        m_new = np.maximum(m, scores.max(axis=-1))
        return m_new, np.exp(m - m_new) * l + np.exp(scores - m_new[:, None]).sum(axis=-1)

    result = check_online_softmax_update(nan_prone)
    assert not result.passed and "NaN" in result.hint


def test_rescale_right_answer_stub_and_bugs():
    def good(acc, m, m_new, scores, v_block):
        return np.exp(m - m_new)[:, None] * acc + np.exp(scores - m_new[:, None]) @ v_block

    assert check_rescale_output(good).passed
    assert not check_rescale_output(lambda *args: ...).passed
    none = check_rescale_output(lambda acc, m, m_new, s, v: acc + np.exp(s - m_new[:, None]) @ v)
    assert not none.passed and none.hint.startswith("You added the new block without rescaling")
    flipped = check_rescale_output(
        lambda acc, m, m_new, s, v: np.exp(m_new - m)[:, None] * acc + np.exp(s - m_new[:, None]) @ v)
    assert not flipped.passed and "Your factor grows" in flipped.hint


def test_causal_linear_right_answers_stub_and_bugs():
    def loop(q, k, v):
        S, z, out = np.zeros((k.shape[1], v.shape[1])), np.zeros(k.shape[1]), []
        for qi, ki, vi in zip(phi(q), phi(k), v):
            S, z = S + np.outer(ki, vi), z + ki
            out.append(qi @ S / (qi @ z))
        return np.array(out)

    assert check_causal_linear_attention(loop).passed
    assert check_causal_linear_attention(lambda q, k, v: own_linear_attention(q, k, v, causal=True)).passed
    stub = check_causal_linear_attention(lambda q, k, v: None)
    assert not stub.passed and "return" in stub.message
    leaky = check_causal_linear_attention(lambda q, k, v: own_linear_attention(q, k, v))
    assert not leaky.passed and "the keys up to i" in leaky.hint

"""Tests of attncourse.functional against independent references.

References used here, none of them taken from the package:
- ``torch.nn.functional.scaled_dot_product_attention`` (SDPA) for outputs; the
  weights come from SDPA with identity values (``weights @ I = weights``);
- the plain formula ``exp(s) / sum(exp(s))`` written out in the test;
- small cases worked out by hand in closed form.
All comparisons run in float64 with ``atol=1e-10``.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attncourse.functional import (
    STEPS,
    SelfAttentionTrace,
    attention,
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
    self_attention,
    self_attention_trace,
    softmax,
)

ATOL = 1e-10
PROPERTY = settings(max_examples=40, deadline=None)

TRACE_FIELDS = (
    "x", "w_q", "w_k", "w_v", "q", "k", "v", "scores", "scaled_scores",
    "weights", "weighted_values", "output",
)


# ----------------------------------------------------------------------------- helpers


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def t64(a) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.detach().to(torch.float64)
    return torch.from_numpy(np.array(a, dtype=np.float64))  # a copy: broadcast views are read-only


def sdpa(q, k, v, mask=None, is_causal: bool = False) -> np.ndarray:
    """Output of torch's SDPA; boolean ``attn_mask`` there also means True = take part."""
    attn_mask = None if mask is None else torch.from_numpy(np.array(mask, dtype=bool))
    out = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=attn_mask, is_causal=is_causal)
    return out.numpy()


def sdpa_weights(q, k, mask=None, is_causal: bool = False) -> np.ndarray:
    """Attention weights from SDPA: with V = I the output *is* the weight matrix."""
    k = np.asarray(k)
    src_len = k.shape[-2]
    eye = np.broadcast_to(np.eye(src_len), (*k.shape[:-2], src_len, src_len))
    return sdpa(q, k, eye, mask, is_causal)


def formula_weights(q, k, mask=None) -> np.ndarray:
    """softmax(Q K^T / sqrt(d_k)) straight from the definition (inputs are O(1), no shift needed)."""
    q, k = np.asarray(q), np.asarray(k)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(k.shape[-1])
    e = np.exp(scores)
    if mask is not None:
        e = e * np.asarray(mask, dtype=float)
    return e / e.sum(axis=-1, keepdims=True)


def make_mask(kind: str, batch_shape: tuple[int, ...], tgt_len: int, src_len: int) -> np.ndarray | None:
    """Boolean masks (True = may attend), none of them with a fully masked row."""
    if kind == "none":
        return None
    causal = np.tril(np.ones((tgt_len, src_len), dtype=bool))
    # Lengths >= 1 keep key 0 visible to every query; batch item 0 is unpadded.
    lengths = [src_len, 2, 1, 3][: batch_shape[0]] if batch_shape else [2]
    pad = np.arange(src_len)[None, :] < np.asarray(lengths)[:, None]  # (batch, src_len)
    if batch_shape:
        # (batch, src_len) -> (batch, 1, ..., 1, src_len): broadcast over later batch dims and queries
        pad = pad.reshape((batch_shape[0],) + (1,) * len(batch_shape) + (src_len,))
    else:
        pad = pad[0]  # one unbatched sequence: (src_len,)
    if kind == "causal":
        return causal
    if kind == "padding":
        return pad
    if kind == "causal+padding":
        return causal & pad
    raise AssertionError(kind)


# ----------------------------------------------------- 1. comparisons with torch SDPA, numpy path


@pytest.mark.parametrize("mask_kind", ["none", "random", "keys"])
def test_numpy_sdpa_matches_torch_sdpa_cross_attention(mask_kind):
    tgt_len, src_len, d_k, d_v = 3, 5, 4, 6
    q, k, v = randn(tgt_len, d_k, seed=1), randn(src_len, d_k, seed=2), randn(src_len, d_v, seed=3)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "random":
        mask = np.random.default_rng(4).random((tgt_len, src_len)) < 0.5
        mask[:, 0] = True  # no fully masked row: SDPA's behaviour there is not the reference
    else:
        mask = np.array([True, True, False, True, False])  # (src_len,), broadcast over queries

    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)

    assert out.shape == (tgt_len, d_v) and weights.shape == (tgt_len, src_len)
    np.testing.assert_allclose(out, sdpa(q, k, v, mask), rtol=0, atol=ATOL)
    np.testing.assert_allclose(weights, sdpa_weights(q, k, mask), rtol=0, atol=ATOL)
    full = None if mask is None else np.broadcast_to(mask, (tgt_len, src_len))
    np.testing.assert_allclose(weights, formula_weights(q, k, full), rtol=0, atol=ATOL)


def test_numpy_sdpa_single_query_is_a_row_of_the_matrix_form():
    q, k, v = randn(3, 4, seed=1), randn(5, 4, seed=2), randn(5, 6, seed=3)
    reference = sdpa(q, k, v)
    for i in range(3):
        out, weights = scaled_dot_product_attention(q[i], k, v)
        assert out.shape == (6,) and weights.shape == (5,)
        np.testing.assert_allclose(out, reference[i], rtol=0, atol=ATOL)
        np.testing.assert_allclose(weights, formula_weights(q[i:i + 1], k)[0], rtol=0, atol=ATOL)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_trace_matrix_form_matches_sdpa(causal):
    seq_len, d_model, d_k, d_v = 5, 6, 4, 3
    x = randn(seq_len, d_model, seed=10)
    w_q, w_k, w_v = randn(d_model, d_k, seed=11), randn(d_model, d_k, seed=12), randn(d_model, d_v, seed=13)
    mask = causal_mask(seq_len) if causal else None

    trace = self_attention_trace(x, w_q, w_k, w_v, mask=mask)

    # against SDPA on the trace's own projections ...
    np.testing.assert_allclose(trace.output, sdpa(trace.q, trace.k, trace.v, is_causal=causal), rtol=0, atol=ATOL)
    # ... and on projections computed here, independently of the trace
    q_ref = np.einsum("nd,dk->nk", x, w_q)
    k_ref = np.einsum("nd,dk->nk", x, w_k)
    v_ref = np.einsum("nd,dk->nk", x, w_v)
    np.testing.assert_allclose(trace.output, sdpa(q_ref, k_ref, v_ref, is_causal=causal), rtol=0, atol=ATOL)
    np.testing.assert_allclose(trace.weights, sdpa_weights(q_ref, k_ref, is_causal=causal), rtol=0, atol=ATOL)
    np.testing.assert_allclose(trace.weights, formula_weights(q_ref, k_ref, mask), rtol=0, atol=ATOL)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("i", [0, 2, 4, -1, -5])
def test_self_attention_trace_vector_form_is_row_i_of_matrix_form(i, causal):
    seq_len, d_model, d_k, d_v = 5, 6, 4, 3
    x = randn(seq_len, d_model, seed=20)
    w_q, w_k, w_v = randn(d_model, d_k, seed=21), randn(d_model, d_k, seed=22), randn(d_model, d_v, seed=23)
    mask = causal_mask(seq_len) if causal else None

    matrix = self_attention_trace(x, w_q, w_k, w_v, mask=mask)
    vector = self_attention_trace(x, w_q, w_k, w_v, mask=mask, query_index=i)

    assert vector.query_index == i % seq_len and matrix.query_index is None
    assert vector.q.shape == (d_k,) and vector.scores.shape == (seq_len,)
    assert vector.weighted_values.shape == (seq_len, d_v) and vector.output.shape == (d_v,)
    for name in ("q", "scores", "scaled_scores", "weights", "weighted_values", "output"):
        np.testing.assert_allclose(getattr(vector, name), getattr(matrix, name)[i], rtol=0, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(vector.output, sdpa(x @ w_q, x @ w_k, x @ w_v, is_causal=causal)[i], rtol=0, atol=ATOL)
    if causal:
        np.testing.assert_array_equal(vector.mask, causal_mask(seq_len)[i])


def test_hand_computed_two_token_case():
    # d_k = 4, so sqrt(d_k) = 2. Query (1,0,0,0) scores keys (2,0,0,0) and 0 as [2, 0] -> scaled [1, 0].
    q = np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]])
    k = np.array([[2.0, 0, 0, 0], [0, 0, 0, 0]])
    v = np.array([[1.0, 0], [0, 1.0]])  # identity values: the output equals the weights
    e = math.e
    expected = np.array([[e / (e + 1), 1 / (e + 1)], [0.5, 0.5]])

    out, weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(weights, expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-15)

    out_t, weights_t = attention(t64(q), t64(k), t64(v))
    np.testing.assert_allclose(weights_t.numpy(), expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(out_t.numpy(), expected, rtol=0, atol=1e-15)


def test_hand_computed_self_attention_trace():
    # X = I (2 tokens, d_model = 2); Q = [[2,0,0,0],[0,2,0,0]], K = [[1,0,0,0],[0,0,0,0]], V = I.
    x = np.eye(2)
    w_q = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0]])
    w_k = np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]])
    w_v = np.eye(2)
    e = math.e

    trace = self_attention_trace(x, w_q, w_k, w_v)
    np.testing.assert_array_equal(trace.scores, [[2.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(trace.scaled_scores, [[1.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(trace.weights, [[e / (e + 1), 1 / (e + 1)], [0.5, 0.5]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(trace.output, trace.weights, rtol=0, atol=1e-15)

    causal = self_attention_trace(x, w_q, w_k, w_v, mask=causal_mask(2))
    np.testing.assert_array_equal(causal.weights, [[1.0, 0.0], [0.5, 0.5]])
    np.testing.assert_array_equal(causal.output, [[1.0, 0.0], [0.5, 0.5]])


# ----------------------------------------------------- 1. comparisons with torch SDPA, torch path

BATCH_SHAPES = [(), (2,), (2, 3)]
MASK_KINDS = ["none", "causal", "padding", "causal+padding"]


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=str)
def test_torch_attention_matches_sdpa(batch_shape, mask_kind):
    d_k, d_v = 4, 6
    src_len = 5
    tgt_len = src_len if "causal" in mask_kind else 3  # causal_mask is square
    q = randn(*batch_shape, tgt_len, d_k, seed=30)
    k = randn(*batch_shape, src_len, d_k, seed=31)
    v = randn(*batch_shape, src_len, d_v, seed=32)
    mask = make_mask(mask_kind, batch_shape, tgt_len, src_len)

    out, weights = attention(t64(q), t64(k), t64(v), None if mask is None else torch.from_numpy(mask))

    assert out.shape == (*batch_shape, tgt_len, d_v) and weights.shape == (*batch_shape, tgt_len, src_len)
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), sdpa(q, k, v, mask), rtol=0, atol=ATOL)
    np.testing.assert_allclose(weights.numpy(), sdpa_weights(q, k, mask), rtol=0, atol=ATOL)
    full = None if mask is None else np.broadcast_to(mask, weights.shape)
    np.testing.assert_allclose(weights.numpy(), formula_weights(q, k, full), rtol=0, atol=ATOL)
    if mask is not None:
        assert np.all(weights.numpy()[~full] == 0.0)


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=str)
def test_torch_attention_is_causal_equals_sdpa_is_causal(batch_shape):
    n, d_k, d_v = 4, 3, 2
    q, k = randn(*batch_shape, n, d_k, seed=33), randn(*batch_shape, n, d_k, seed=34)
    v = randn(*batch_shape, n, d_v, seed=35)
    out, _ = attention(t64(q), t64(k), t64(v), torch.from_numpy(causal_mask(n)))
    np.testing.assert_allclose(out.numpy(), sdpa(q, k, v, is_causal=True), rtol=0, atol=ATOL)


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=str)
def test_torch_self_attention_matches_sdpa(batch_shape, mask_kind):
    seq_len, d_model, d_k, d_v = 5, 6, 4, 3
    x = randn(*batch_shape, seq_len, d_model, seed=40)
    w_q, w_k, w_v = randn(d_model, d_k, seed=41), randn(d_model, d_k, seed=42), randn(d_model, d_v, seed=43)
    mask = make_mask(mask_kind, batch_shape, seq_len, seq_len)

    trace = self_attention(t64(x), t64(w_q), t64(w_k), t64(w_v), None if mask is None else torch.from_numpy(mask))

    q_ref = np.einsum("...nd,dk->...nk", x, w_q)
    k_ref = np.einsum("...nd,dk->...nk", x, w_k)
    v_ref = np.einsum("...nd,dk->...nk", x, w_v)
    assert trace.output.shape == (*batch_shape, seq_len, d_v)
    assert trace.weighted_values.shape == (*batch_shape, seq_len, seq_len, d_v)
    np.testing.assert_allclose(trace.output.numpy(), sdpa(q_ref, k_ref, v_ref, mask), rtol=0, atol=ATOL)
    np.testing.assert_allclose(trace.output.numpy(), sdpa(trace.q, trace.k, trace.v, mask), rtol=0, atol=ATOL)
    np.testing.assert_allclose(trace.weights.numpy(), sdpa_weights(q_ref, k_ref, mask), rtol=0, atol=ATOL)
    full = None if mask is None else np.broadcast_to(mask, trace.weights.shape)
    np.testing.assert_allclose(trace.weights.numpy(), formula_weights(q_ref, k_ref, full), rtol=0, atol=ATOL)


def test_numpy_and_torch_attention_agree():
    q, k, v = randn(3, 4, seed=50), randn(7, 4, seed=51), randn(7, 2, seed=52)
    mask = np.random.default_rng(53).random((3, 7)) < 0.6
    out_np, w_np = scaled_dot_product_attention(q, k, v, mask)
    out_t, w_t = attention(t64(q), t64(k), t64(v), torch.from_numpy(mask))
    np.testing.assert_allclose(out_t.numpy(), out_np, rtol=0, atol=ATOL)
    np.testing.assert_allclose(w_t.numpy(), w_np, rtol=0, atol=ATOL)


# ---------------------------------------------------------------- 2. fully masked rows


def test_numpy_softmax_fully_masked_row_is_zero():
    logits = randn(3, 4, seed=60)
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False
    w = softmax(logits, mask=mask)
    assert np.all(np.isfinite(w))
    assert np.all(w[1] == 0.0)
    np.testing.assert_allclose(w[[0, 2]].sum(axis=-1), 1.0, rtol=0, atol=ATOL)


def test_numpy_sdpa_fully_masked_row_gives_zero_output_and_weights():
    q, k, v = randn(3, 4, seed=61), randn(5, 4, seed=62), randn(5, 2, seed=63)
    mask = np.ones((3, 5), dtype=bool)
    mask[2] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(w))
    assert np.all(out[2] == 0.0) and np.all(w[2] == 0.0)
    np.testing.assert_allclose(out[:2], sdpa(q[:2], k, v), rtol=0, atol=ATOL)


def test_numpy_trace_fully_masked_row_gives_zeros():
    x = randn(4, 3, seed=64)
    w = randn(3, 2, seed=65)
    mask = causal_mask(4).copy()
    mask[0] = False
    trace = self_attention_trace(x, w, w, w, mask=mask)
    assert np.all(trace.weights[0] == 0.0) and np.all(trace.output[0] == 0.0)
    assert np.all(np.isfinite(trace.weights)) and np.all(np.isfinite(trace.output))
    vector = self_attention_trace(x, w, w, w, mask=mask, query_index=0)
    assert np.all(vector.weights == 0.0) and np.all(vector.output == 0.0)


def test_torch_masked_softmax_fully_masked_row_is_zero_with_finite_gradient():
    logits = t64(randn(2, 3, 4, seed=66)).requires_grad_()
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    w = masked_softmax(logits, mask)
    assert torch.all(w[0, 1] == 0.0) and torch.isfinite(w).all()
    (w * t64(randn(2, 3, 4, seed=67))).sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert torch.all(logits.grad[0, 1] == 0.0)


def test_torch_attention_fully_masked_row_zero_output_and_finite_gradients():
    q = t64(randn(2, 3, 4, seed=68)).requires_grad_()
    k = t64(randn(2, 5, 4, seed=69)).requires_grad_()
    v = t64(randn(2, 5, 2, seed=70)).requires_grad_()
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 0] = False  # one fully masked query row
    out, w = attention(q, k, v, mask)
    assert torch.all(out[1, 0] == 0.0) and torch.all(w[1, 0] == 0.0)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    (out * t64(randn(2, 3, 2, seed=71))).sum().add((w * t64(randn(2, 3, 5, seed=72))).sum()).backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert torch.isfinite(t.grad).all(), name
    assert torch.all(q.grad[1, 0] == 0.0)


def test_torch_attention_zero_length_sequence_in_batch():
    lengths = [3, 0]
    pad = padding_mask(lengths, max_len=4)[:, None, :]  # (batch, 1, src_len)
    q = t64(randn(2, 2, 3, seed=73)).requires_grad_()
    k, v = t64(randn(2, 4, 3, seed=74)), t64(randn(2, 4, 5, seed=75)).requires_grad_()
    out, w = attention(q, k, v, pad)
    assert torch.all(out[1] == 0.0) and torch.all(w[1] == 0.0)
    expected = sdpa(q[0].detach(), k[0, :3], v[0, :3].detach())
    np.testing.assert_allclose(out[0].detach().numpy(), expected, rtol=0, atol=ATOL)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(v.grad).all()


def test_torch_self_attention_fully_masked_row_gradient_is_finite():
    x = t64(randn(2, 4, 3, seed=76)).requires_grad_()
    w = t64(randn(3, 3, seed=77)).requires_grad_()
    mask = torch.from_numpy(causal_mask(4).copy())
    mask[2] = False
    trace = self_attention(x, w, w, w, mask)
    assert torch.all(trace.output[:, 2] == 0.0)
    trace.output.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()


# ---------------------------------------------------------------- 3. numerically stable softmax


@pytest.mark.parametrize(
    "logits, shifted",
    [
        ([1000.0, 1001.0, 1002.0], [-2.0, -1.0, 0.0]),
        ([-1000.0, -1001.0, -1002.0], [0.0, -1.0, -2.0]),
        ([1e308, 1e308, 1e308], [0.0, 0.0, 0.0]),
        ([-1e308, -1e308], [0.0, 0.0]),
        ([1.7e308, 1e308, 0.0], [0.0, -7e307, -1.7e308]),
        ([1e308, -1e308], [0.0, -np.inf]),
    ],
    ids=["+1000", "-1000", "1e308 equal", "-1e308 equal", "1e308 spread", "+-1e308"],
)
def test_softmax_is_stable_at_extreme_logits(logits, shifted):
    expected = np.exp(shifted) / np.exp(shifted).sum()
    w = softmax(np.array(logits))
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-15)
    w_t = masked_softmax(t64(logits))
    np.testing.assert_allclose(w_t.numpy(), expected, rtol=0, atol=1e-15)


def test_softmax_stable_with_mask_at_large_logits():
    logits = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]])
    mask = np.array([[True, True, False], [False, True, True]])
    shifted = np.array([[-1.0, 0.0], [0.0, -1.0]])
    e = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    expected = np.array([[e[0, 0], e[0, 1], 0.0], [0.0, e[1, 0], e[1, 1]]])
    np.testing.assert_allclose(softmax(logits, mask=mask), expected, rtol=0, atol=1e-15)
    got = masked_softmax(t64(logits), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)


def test_softmax_single_allowed_entry_gets_all_weight_at_any_scale():
    # The one unmasked logit is far below the masked one: masking must not rely on a finite "very negative" fill.
    logits = np.array([[-1e300, 5.0, 0.0], [-1e12, -1e12, 1e12]])
    mask = np.array([[True, False, False], [False, True, False]])
    expected = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    np.testing.assert_array_equal(softmax(logits, mask=mask), expected)
    np.testing.assert_array_equal(masked_softmax(t64(logits), torch.from_numpy(mask)).numpy(), expected)


def test_softmax_other_axis():
    logits = np.array([[1000.0, 0.0], [1001.0, 0.0]])
    e = math.e
    np.testing.assert_allclose(softmax(logits, axis=0), [[1 / (1 + e), 0.5], [e / (1 + e), 0.5]], rtol=0, atol=1e-15)


def test_softmax_float32_stays_float32_and_finite():
    logits = np.array([1000.0, 1001.0, 1002.0], dtype=np.float32)
    w = softmax(logits)
    assert w.dtype == np.float32
    assert np.all(np.isfinite(w))
    e = np.exp([-2.0, -1.0, 0.0])
    np.testing.assert_allclose(w, e / e.sum(), rtol=1e-6)
    w_t = masked_softmax(torch.tensor([1000.0, 1001.0, 1002.0]), torch.tensor([True, True, True]))
    assert w_t.dtype == torch.float32 and torch.isfinite(w_t).all()
    np.testing.assert_allclose(w_t.numpy(), e / e.sum(), rtol=1e-6)


def test_softmax_accepts_python_lists():
    # BUG: softmax calls np.result_type(x, np.float32) before np.asarray(x), and NumPy reads a
    # list as a structured dtype spec -> "TypeError: Field elements must be 2- or 3-tuples".
    e = math.e
    np.testing.assert_allclose(softmax([1.0, 0.0]), [e / (e + 1), 1 / (e + 1)], rtol=0, atol=1e-15)
    np.testing.assert_allclose(softmax([[0, 0], [1, 1]]), [[0.5, 0.5], [0.5, 0.5]], rtol=0, atol=1e-15)


# ---------------------------------------------------------------- 4. trace consistency


def _check_trace_definitions(tr: SelfAttentionTrace) -> None:
    """Each field of a (NumPy) trace against its one-line definition."""
    x, w_q, w_k, w_v = (np.asarray(a) for a in (tr.x, tr.w_q, tr.w_k, tr.w_v))
    q_all = x @ w_q
    np.testing.assert_allclose(tr.q, q_all if tr.query_index is None else q_all[tr.query_index], rtol=0, atol=ATOL)
    np.testing.assert_allclose(tr.k, x @ w_k, rtol=0, atol=ATOL)
    np.testing.assert_allclose(tr.v, x @ w_v, rtol=0, atol=ATOL)
    q, k, v = np.asarray(tr.q), np.asarray(tr.k), np.asarray(tr.v)
    np.testing.assert_allclose(tr.scores, q @ np.swapaxes(k, -1, -2), rtol=0, atol=ATOL)
    np.testing.assert_allclose(tr.scaled_scores, np.asarray(tr.scores) / math.sqrt(k.shape[-1]), rtol=0, atol=ATOL)
    w = np.asarray(tr.weights)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=0, atol=ATOL)
    wv = np.asarray(tr.weighted_values)
    for j in range(k.shape[-2]):
        if tr.query_index is None:  # wv: (..., n_q, src_len, d_v)
            expected = w[..., :, j, None] * v[..., None, j, :]
        else:  # wv: (src_len, d_v)
            expected = w[j] * v[j]
        np.testing.assert_allclose(wv[..., j, :], expected, rtol=0, atol=ATOL)
    np.testing.assert_allclose(tr.output, wv.sum(axis=-2), rtol=0, atol=ATOL)
    assert tr.d_k == k.shape[-1]


def test_trace_fields_equal_their_definitions_matrix_and_vector_form():
    x = randn(5, 4, seed=80)
    w_q, w_k, w_v = randn(4, 3, seed=81), randn(4, 3, seed=82), randn(4, 2, seed=83)
    matrix = self_attention_trace(x, w_q, w_k, w_v)
    _check_trace_definitions(matrix)
    assert matrix.weighted_values.shape == (5, 5, 2)
    for i in range(5):
        vector = self_attention_trace(x, w_q, w_k, w_v, query_index=i)
        _check_trace_definitions(vector)
        # weighted_values[i, j] = weights[i, j] * v[j], element by element
        for j in range(5):
            np.testing.assert_allclose(matrix.weighted_values[i, j], matrix.weights[i, j] * matrix.v[j],
                                       rtol=0, atol=ATOL)


def test_torch_trace_fields_equal_their_definitions():
    x = t64(randn(2, 3, 5, 4, seed=84))
    w_q, w_k, w_v = t64(randn(4, 3, seed=85)), t64(randn(4, 3, seed=86)), t64(randn(4, 2, seed=87))
    trace = self_attention(x, w_q, w_k, w_v)
    _check_trace_definitions(dataclasses.replace(trace, **{f: getattr(trace, f).numpy() for f in TRACE_FIELDS}))


def test_trace_is_frozen():
    x = randn(3, 2, seed=88)
    w = randn(2, 2, seed=89)
    trace = self_attention_trace(x, w, w, w)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.output = np.zeros(2)
    torch_trace = self_attention(t64(x), t64(w), t64(w), t64(w))
    with pytest.raises(dataclasses.FrozenInstanceError):
        torch_trace.weights = None


def test_steps_name_the_six_steps_in_order():
    assert STEPS == ("project", "score", "scale", "softmax", "weight", "sum")


@pytest.mark.parametrize("with_mask", [False, True])
def test_torch_trace_equals_numpy_trace_field_by_field(with_mask):
    x = randn(5, 4, seed=90)
    w_q, w_k, w_v = randn(4, 3, seed=91), randn(4, 3, seed=92), randn(4, 2, seed=93)
    mask = causal_mask(5) if with_mask else None
    ref = self_attention_trace(x, w_q, w_k, w_v, mask=mask)
    got = self_attention(t64(x), t64(w_q), t64(w_k), t64(w_v), None if mask is None else torch.from_numpy(mask))
    for name in TRACE_FIELDS:
        value = getattr(got, name)
        assert isinstance(value, torch.Tensor), name
        np.testing.assert_allclose(value.numpy(), getattr(ref, name), rtol=0, atol=ATOL, err_msg=name)
    assert got.query_index is None and ref.query_index is None
    if with_mask:
        np.testing.assert_array_equal(np.asarray(got.mask), ref.mask)
    else:
        assert got.mask is None and ref.mask is None


def test_batched_torch_trace_equals_numpy_trace_per_batch_item():
    x = randn(2, 3, 4, 5, seed=94)
    w_q, w_k, w_v = randn(5, 3, seed=95), randn(5, 3, seed=96), randn(5, 6, seed=97)
    got = self_attention(t64(x), t64(w_q), t64(w_k), t64(w_v), torch.from_numpy(causal_mask(4)))
    for b in np.ndindex(2, 3):
        ref = self_attention_trace(x[b], w_q, w_k, w_v, mask=causal_mask(4))
        for name in TRACE_FIELDS[4:]:
            np.testing.assert_allclose(getattr(got, name)[b].numpy(), getattr(ref, name), rtol=0, atol=ATOL,
                                       err_msg=name)


# ---------------------------------------------------------------- 5. properties (hypothesis)

logit_arrays = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
    elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
)


@st.composite
def logits_and_mask(draw):
    logits = draw(logit_arrays)
    mask = draw(hnp.arrays(np.bool_, logits.shape))
    return logits, mask


@PROPERTY
@given(logits_and_mask())
def test_property_softmax_rows_sum_to_one_or_zero_and_masked_entries_exactly_zero(data):
    logits, mask = data
    any_allowed = mask.any(axis=-1)
    for w in (softmax(logits, mask=mask), masked_softmax(t64(logits), torch.from_numpy(mask)).numpy()):
        assert np.all(np.isfinite(w))
        assert np.all(w[~mask] == 0.0)
        assert np.all((w >= 0.0) & (w <= 1.0))
        np.testing.assert_allclose(w.sum(axis=-1), np.where(any_allowed, 1.0, 0.0), rtol=0, atol=1e-12)
        assert np.all(w[~any_allowed] == 0.0)


@PROPERTY
@given(logit_arrays, st.floats(-1e3, 1e3))
def test_property_softmax_invariant_to_adding_a_constant_per_row(logits, c):
    # a different constant per row: c, 2c, 3c, ...
    shifts = c * np.arange(1, logits[..., :1].size + 1).reshape(logits[..., :1].shape)
    np.testing.assert_allclose(softmax(logits + shifts), softmax(logits), rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        masked_softmax(t64(logits + shifts)).numpy(), masked_softmax(t64(logits)).numpy(), rtol=0, atol=1e-9
    )


@st.composite
def self_attention_inputs(draw):
    n = draw(st.integers(1, 6))
    d_model, d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d_model))
    w_q, w_k, w_v = (rng.standard_normal((d_model, d)) for d in (d_k, d_k, d_v))
    mask = draw(hnp.arrays(np.bool_, (n, n)))
    perm = np.array(draw(st.permutations(range(n))), dtype=int)
    return x, w_q, w_k, w_v, mask, perm


@PROPERTY
@given(self_attention_inputs())
def test_property_self_attention_is_permutation_equivariant(inputs):
    x, w_q, w_k, w_v, _, perm = inputs
    base = self_attention_trace(x, w_q, w_k, w_v)
    permuted = self_attention_trace(x[perm], w_q, w_k, w_v)
    np.testing.assert_allclose(permuted.output, base.output[perm], rtol=0, atol=ATOL)
    np.testing.assert_allclose(permuted.weights, base.weights[perm][:, perm], rtol=0, atol=ATOL)
    torch_permuted = self_attention(t64(x[perm]), t64(w_q), t64(w_k), t64(w_v))
    np.testing.assert_allclose(torch_permuted.output.numpy(), base.output[perm], rtol=0, atol=ATOL)


@PROPERTY
@given(self_attention_inputs())
def test_property_masked_self_attention_weights(inputs):
    x, w_q, w_k, w_v, mask, _ = inputs
    any_allowed = mask.any(axis=-1)
    for w in (
        self_attention_trace(x, w_q, w_k, w_v, mask=mask).weights,
        self_attention(t64(x), t64(w_q), t64(w_k), t64(w_v), torch.from_numpy(mask)).weights.numpy(),
    ):
        assert np.all(w[~mask] == 0.0)
        assert np.all((w >= 0.0) & (w <= 1.0))
        np.testing.assert_allclose(w.sum(axis=-1), np.where(any_allowed, 1.0, 0.0), rtol=0, atol=1e-12)


@PROPERTY
@given(self_attention_inputs())
def test_property_numpy_sdpa_equals_torch_attention(inputs):
    x, w_q, w_k, w_v, mask, _ = inputs
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    out_np, w_np = scaled_dot_product_attention(q, k, v, mask)
    out_t, w_t = attention(t64(q), t64(k), t64(v), torch.from_numpy(mask))
    np.testing.assert_allclose(out_t.numpy(), out_np, rtol=0, atol=ATOL)
    np.testing.assert_allclose(w_t.numpy(), w_np, rtol=0, atol=ATOL)
    assert np.all(out_np[~mask.any(axis=-1)] == 0.0)


# ---------------------------------------------------------------- 6. bad input


def _raises_naming(exc, *parts):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(p)})" for p in parts))


def test_dk_mismatch_names_both_shapes():
    q, k, v = np.zeros((5, 64)), np.zeros((7, 32)), np.zeros((7, 16))
    with _raises_naming(ValueError, "64", "32", "(5, 64)", "(7, 32)"):
        scaled_dot_product_attention(q, k, v)
    with _raises_naming(ValueError, "64", "32", "(5, 64)", "(7, 32)"):
        attention(t64(q), t64(k), t64(v))


def test_keys_values_length_mismatch_names_both_shapes():
    q, k, v = np.zeros((5, 32)), np.zeros((7, 32)), np.zeros((6, 16))
    with _raises_naming(ValueError, "(7, 32)", "(6, 16)"):
        scaled_dot_product_attention(q, k, v)
    with _raises_naming(ValueError, "(7, 32)", "(6, 16)"):
        attention(t64(q), t64(k), t64(v))


def test_mask_of_wrong_shape():
    q, k, v = np.zeros((3, 4)), np.zeros((5, 4)), np.zeros((5, 2))
    bad = np.ones((3, 4), dtype=bool)
    with _raises_naming(ValueError, "(3, 4)", "(3, 5)"):
        scaled_dot_product_attention(q, k, v, bad)
    with _raises_naming(ValueError, "(3, 4)", "(3, 5)"):
        attention(t64(q), t64(k), t64(v), torch.from_numpy(bad))
    x, w = np.zeros((4, 3)), np.zeros((3, 2))
    with _raises_naming(ValueError, "(3, 3)", "(4, 4)"):
        self_attention_trace(x, w, w, w, mask=causal_mask(3))
    with _raises_naming(ValueError, "(3, 3)", "(4, 4)"):
        self_attention(t64(x), t64(w), t64(w), t64(w), torch.from_numpy(causal_mask(3)))
    with pytest.raises(ValueError, match=re.escape("(2, 3)")):
        softmax(np.zeros((2, 4)), mask=np.ones((2, 3), dtype=bool))


def test_key_padding_mask_without_query_axis_is_rejected_with_a_hint():
    q, k, v = t64(np.zeros((2, 3, 4))), t64(np.zeros((2, 5, 4))), t64(np.zeros((2, 5, 4)))
    pad = torch.from_numpy(padding_mask([5, 2]))  # (batch, src_len), not broadcast over queries
    with _raises_naming(ValueError, "(2, 5)", "(2, 3, 5)", "mask[:, None, :]"):
        attention(q, k, v, pad)


def test_projection_with_wrong_d_model():
    x = np.zeros((4, 3))
    good, bad = np.zeros((3, 2)), np.zeros((5, 2))
    for args in ((bad, good, good), (good, bad, good), (good, good, bad)):
        with _raises_naming(ValueError, "(4, 3)", "(5, 2)"):
            self_attention_trace(x, *args)
        with _raises_naming(ValueError, "(4, 3)", "(5, 2)"):
            self_attention(t64(x), *map(t64, args))


def test_w_q_and_w_k_must_share_d_k():
    x, w_q, w_k = np.zeros((4, 3)), np.zeros((3, 2)), np.zeros((3, 4))
    with _raises_naming(ValueError, "(3, 2)", "(3, 4)"):
        self_attention_trace(x, w_q, w_k, w_q)
    with _raises_naming(ValueError, "(3, 2)", "(3, 4)"):
        self_attention(t64(x), t64(w_q), t64(w_k), t64(w_q))


@pytest.mark.parametrize("i", [4, 5, -5, 100])
def test_query_index_out_of_range(i):
    x, w = np.zeros((4, 3)), np.zeros((3, 2))
    with pytest.raises(ValueError, match=re.escape(str(i))):
        self_attention_trace(x, w, w, w, query_index=i)


@pytest.mark.parametrize(
    "bad_mask",
    [torch.ones(3, 5), torch.ones(3, 5, dtype=torch.int64), np.ones((3, 5)), np.ones((3, 5), dtype=np.uint8)],
    ids=["float tensor", "int tensor", "float ndarray", "uint8 ndarray"],
)
def test_non_boolean_torch_mask_is_a_type_error(bad_mask):
    q, k, v = t64(randn(3, 4)), t64(randn(5, 4)), t64(randn(5, 2))
    with pytest.raises(TypeError, match="bool"):
        attention(q, k, v, bad_mask)
    with pytest.raises(TypeError, match="bool"):
        masked_softmax(t64(randn(3, 5)), bad_mask)
    x, w = t64(randn(3, 4)), t64(randn(4, 2))
    with pytest.raises(TypeError, match="bool"):
        self_attention(x, w, w, w, bad_mask[:, :3])


@pytest.mark.parametrize("lengths, max_len", [([2, 5], 4), ([-1, 2], None), ([3], 2)])
def test_padding_mask_rejects_lengths_outside_range(lengths, max_len):
    with pytest.raises(ValueError, match="max_len"):
        padding_mask(lengths, max_len=max_len)


@pytest.mark.parametrize("n", [0, -1])
def test_causal_mask_rejects_empty(n):
    with pytest.raises(ValueError, match=str(n)):
        causal_mask(n)


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape",
    [((3, 3, 3), (3, 3, 3), (3, 3, 3)), ((2, 3, 4), (2, 5, 4), (2, 5, 6))],
    ids=["all dims 3", "batch 2"],
)
def test_numpy_sdpa_batched_input_is_correct_or_rejected_at_the_boundary(q_shape, k_shape, v_shape):
    # BUG: validate_attention_shapes accepts (..., src_len, d_k), but the NumPy path computes
    # q @ k.T, which reverses *all* axes of a 3-D k. Square shapes give silently wrong numbers,
    # others a bare matmul error. Either batch correctly or raise a ValueError naming the shape.
    q, k, v = randn(*q_shape, seed=1), randn(*k_shape, seed=2), randn(*v_shape, seed=3)
    try:
        out, _ = scaled_dot_product_attention(q, k, v)
    except ValueError as err:
        assert str(k_shape) in str(err) or str(q_shape) in str(err), f"error does not name the shapes: {err}"
    else:
        np.testing.assert_allclose(out, sdpa(q, k, v), rtol=0, atol=ATOL)


def test_numpy_trace_batched_input_is_correct_or_rejected_at_the_boundary():
    # BUG: validate_projection_shapes accepts x (..., seq_len, d_model), but self_attention_trace
    # takes n = x.shape[0] and uses k.T; a batched x gives wrong numbers without an error.
    x, w = randn(2, 2, 2, seed=4), randn(2, 2, seed=5)
    try:
        trace = self_attention_trace(x, w, w, w)
    except ValueError as err:
        assert "(2, 2, 2)" in str(err), f"error does not name the shape: {err}"
    else:
        ref = self_attention(t64(x), t64(w), t64(w), t64(w))
        np.testing.assert_allclose(trace.output, ref.output.numpy(), rtol=0, atol=ATOL)


# ---------------------------------------------------------------- 7. mask builders


def test_causal_mask_values():
    np.testing.assert_array_equal(causal_mask(1), [[True]])
    expected = np.array(
        [
            [True, False, False],
            [True, True, False],
            [True, True, True],
        ]
    )
    got = causal_mask(3)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected)


def test_padding_mask_values():
    got = padding_mask([2, 0, 3])
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(
        got,
        [
            [True, True, False],
            [False, False, False],
            [True, True, True],
        ],
    )
    np.testing.assert_array_equal(padding_mask([1, 3], max_len=4),
                                  [[True, False, False, False], [True, True, True, False]])
    np.testing.assert_array_equal(padding_mask(np.array([2])), [[True, True]])


def test_numpy_masks_accepted_by_torch_functions():
    q, k, v = t64(randn(2, 4, 3, seed=100)), t64(randn(2, 4, 3, seed=101)), t64(randn(2, 4, 2, seed=102))
    np_mask = causal_mask(4) & padding_mask([4, 2])[:, None, :]
    out_np, w_np = attention(q, k, v, np_mask)
    out_t, w_t = attention(q, k, v, torch.from_numpy(np_mask))
    assert torch.equal(out_np, out_t) and torch.equal(w_np, w_t)
    np.testing.assert_allclose(out_np.numpy(), sdpa(q, k, v, np_mask), rtol=0, atol=ATOL)

    scores = q @ k.transpose(-1, -2)
    assert torch.equal(masked_softmax(scores, np_mask), masked_softmax(scores, torch.from_numpy(np_mask)))

    x, w = t64(randn(2, 4, 3, seed=103)), t64(randn(3, 3, seed=104))
    tr_np = self_attention(x, w, w, w, causal_mask(4))
    tr_t = self_attention(x, w, w, w, torch.from_numpy(causal_mask(4)))
    assert torch.equal(tr_np.output, tr_t.output)
    np.testing.assert_allclose(tr_np.output.numpy(), sdpa(x @ w, x @ w, x @ w, is_causal=True), rtol=0, atol=ATOL)

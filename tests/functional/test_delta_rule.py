"""Fast-weight memories (functional/fast_weights.py, functional/delta_rule.py) against references
written differently here: sums over earlier positions, per-head 2-D loops with explicit
matrices, hand-computed two-step cases, chapter 8's NumPy linear attention, torch's FLOP counter
and autograd's gradcheck, all in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attncourse.functional.delta_rule import (
    delta_rule_chunkwise,
    delta_rule_flops,
    delta_rule_recurrent,
    delta_rule_weights,
    wy_representation,
)
from attncourse.functional.fast_weights import (
    decay_matrix,
    linear_attention_parallel,
    linear_attention_recurrent,
)
from attncourse.functional.linear_attention import linear_attention

B, H, N, DK, DV = 2, 3, 9, 4, 5


def _inputs(seed=0, n=N, unit_keys=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n, DK, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, n, DK, generator=g, dtype=torch.float64)
    k = F.normalize(k, dim=-1) if unit_keys else k
    v = torch.randn(B, H, n, DV, generator=g, dtype=torch.float64)
    beta = torch.rand(B, H, n, generator=g, dtype=torch.float64)
    decay = 0.5 + 0.5 * torch.rand(B, H, n, generator=g, dtype=torch.float64)
    state = torch.randn(B, H, DK, DV, generator=g, dtype=torch.float64)
    return q, k, v, beta, decay, state


# ---- references, written as sums and per-head matrices -------------------------------------------

def _linear_reference(q, k, v, decay=None):
    """o_t = sum_{j <= t} (a_{j+1} ... a_t) (q_t . k_j) v_j, one position pair at a time."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for t in range(q.shape[2]):
                for j in range(t + 1):
                    kept = 1.0
                    for step in range(j + 1, t + 1):
                        kept *= 1.0 if decay is None else float(decay[b, h, step])
                    out[b, h, t] += kept * float(q[b, h, t] @ k[b, h, j]) * v[b, h, j]
    return out


def _delta_reference(q, k, v, beta, decay=None, state=None):
    """S_t = a_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t, as explicit 2-D matrices."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype)
    final = torch.zeros(*q.shape[:2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    eye = torch.eye(q.shape[-1], dtype=q.dtype)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = torch.zeros(q.shape[-1], v.shape[-1], dtype=q.dtype) if state is None else state[b, h].clone()
            for t in range(q.shape[2]):
                a = 1.0 if decay is None else decay[b, h, t]
                kt, bt = k[b, h, t], beta[b, h, t]
                s = a * (eye - bt * torch.outer(kt, kt)) @ s + bt * torch.outer(kt, v[b, h, t])
                out[b, h, t] = q[b, h, t] @ s
            final[b, h] = s
    return out, final


# ---- linear attention and SSD -------------------------------------------------------------------

@pytest.mark.parametrize("decayed", [False, True])
def test_linear_attention_recurrent_and_parallel_equal_the_sum_over_earlier_positions(decayed):
    q, k, v, _, decay, state = _inputs()
    decay = decay if decayed else None
    expected = _linear_reference(q, k, v, decay)
    rec, rec_state = linear_attention_recurrent(q, k, v, decay)
    par, par_state = linear_attention_parallel(q, k, v, decay)
    torch.testing.assert_close(rec, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(par, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(par_state, rec_state, rtol=0, atol=1e-12)
    # from a non-zero state, the two forms still agree, and split sequences chain
    rec, rec_state = linear_attention_recurrent(q, k, v, decay, state)
    first, mid = linear_attention_parallel(q[:, :, :4], k[:, :, :4], v[:, :, :4],
                                           None if decay is None else decay[:, :, :4], state)
    second, end = linear_attention_parallel(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:],
                                            None if decay is None else decay[:, :, 4:], mid)
    torch.testing.assert_close(torch.cat([first, second], 2), rec, rtol=0, atol=1e-12)
    torch.testing.assert_close(end, rec_state, rtol=0, atol=1e-12)


def test_a_decay_of_one_is_no_decay_and_the_decay_matrix_by_hand():
    q, k, v, _, _, _ = _inputs()
    ones = torch.ones(B, H, N, dtype=torch.float64)
    torch.testing.assert_close(linear_attention_parallel(q, k, v, ones)[0], linear_attention_parallel(q, k, v)[0],
                               rtol=0, atol=1e-13)
    a = torch.tensor([0.5, 0.25, 0.8], dtype=torch.float64)
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.25, 1.0, 0.0], [0.2, 0.8, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(decay_matrix(a), expected, rtol=0, atol=1e-15)


def test_two_steps_of_ssd_by_hand():
    # S_1 = v_1 k_1^T, S_2 = a_2 S_1 + v_2 k_2^T: o_2 = a_2 (q_2.k_1) v_1 + (q_2.k_2) v_2
    q = torch.tensor([[1.0, 0.0], [2.0, 1.0]], dtype=torch.float64)[None, None]
    k = torch.tensor([[1.0, 1.0], [0.0, 3.0]], dtype=torch.float64)[None, None]
    v = torch.tensor([[4.0], [-1.0]], dtype=torch.float64)[None, None]
    a = torch.tensor([0.9, 0.5], dtype=torch.float64)[None, None]
    expected = torch.tensor([[1.0 * 4.0], [0.5 * 3.0 * 4.0 + 3.0 * -1.0]], dtype=torch.float64)
    for form in (linear_attention_recurrent, linear_attention_parallel):
        torch.testing.assert_close(form(q, k, v, a)[0][0, 0], expected, rtol=0, atol=1e-14)


def test_normalised_by_a_memory_of_ones_it_is_chapter_8s_causal_linear_attention():
    q, k, v, _, _, _ = _inputs(unit_keys=False)
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    out, _ = linear_attention_parallel(phi_q, phi_k, torch.cat([v, torch.ones_like(v[..., :1])], -1))
    normalised = out[..., :-1] / out[..., -1:]
    for b in range(B):
        for h in range(H):
            expected = linear_attention(q[b, h].numpy(), k[b, h].numpy(), v[b, h].numpy(), causal=True)
            np.testing.assert_allclose(normalised[b, h].numpy(), expected, rtol=0, atol=1e-12)


# ---- the delta rule -------------------------------------------------------------------------------

@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 2, 4, 9, 64])
def test_delta_rule_recurrent_and_chunkwise_equal_the_matrix_reference(gated, chunk_size):
    q, k, v, beta, decay, state = _inputs(seed=chunk_size)
    decay = decay if gated else None
    for initial in (None, state):
        expected, expected_state = _delta_reference(q, k, v, beta, decay, initial)
        rec, rec_state = delta_rule_recurrent(q, k, v, beta, decay, initial)
        chunked, chunked_state = delta_rule_chunkwise(q, k, v, beta, decay, chunk_size, initial)
        torch.testing.assert_close(rec, expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(chunked, expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(rec_state, expected_state, rtol=0, atol=1e-12)
        torch.testing.assert_close(chunked_state, expected_state, rtol=0, atol=1e-12)


def test_two_steps_of_the_delta_rule_by_hand():
    # d_k = 2, d_v = 1; address e_1 is written twice, with 3 then 7.
    k = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)[None, None]
    v = torch.tensor([[3.0], [7.0]], dtype=torch.float64)[None, None]
    q = k.clone()
    for beta, second in ((1.0, 7.0), (0.5, 0.5 * 3.0 + 0.5 * (7.0 - 0.5 * 3.0))):  # 1.5 + 2.75 = 4.25
        b = torch.full((1, 1, 2), beta, dtype=torch.float64)
        for form in (delta_rule_recurrent, delta_rule_chunkwise):
            out, _ = form(q, k, v, b)
            torch.testing.assert_close(out[0, 0, :, 0], torch.tensor([3.0 * beta, second], dtype=torch.float64),
                                       rtol=0, atol=1e-15)
    # linear attention returns the sum of the two values written at e_1
    torch.testing.assert_close(linear_attention_recurrent(q, k, v)[0][0, 0, 1, 0],
                               torch.tensor(10.0, dtype=torch.float64))


def test_the_gated_delta_rule_with_no_forgetting_is_the_delta_rule_and_with_beta_zero_ssd_decay():
    q, k, v, beta, decay, state = _inputs()
    ones = torch.ones_like(decay)
    torch.testing.assert_close(delta_rule_chunkwise(q, k, v, beta, ones, 4)[0],
                               delta_rule_chunkwise(q, k, v, beta, None, 4)[0], rtol=0, atol=1e-13)
    # beta = 0 writes nothing: the state only decays, S_n = (a_1 ... a_n) S_0
    out, final = delta_rule_chunkwise(q, k, v, torch.zeros_like(beta), decay, 4, state)
    torch.testing.assert_close(final, decay.prod(-1)[..., None, None] * state, rtol=0, atol=1e-13)


@pytest.mark.parametrize("gated", [False, True])
def test_the_delta_rules_attention_matrix_applied_to_the_values(gated):
    q, k, v, beta, decay, _ = _inputs()
    decay = decay if gated else None
    weights = delta_rule_weights(q, k, beta, decay)
    torch.testing.assert_close(weights @ v, _delta_reference(q, k, v, beta, decay)[0], rtol=0, atol=1e-12)
    assert (weights.triu(1) == 0).all()


def test_the_wy_factors_rebuild_the_chunks_state():
    # S_C = S_0 + K^T (U - W S_0) for the plain delta rule (Yang et al. 2024, eq. (8), transposed)
    q, k, v, beta, _, state = _inputs()
    w, u = wy_representation(k, v, beta)
    rebuilt = state + k.transpose(-2, -1) @ (u - w @ state)
    torch.testing.assert_close(rebuilt, _delta_reference(q, k, v, beta, None, state)[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("gated", [False, True])
def test_gradients_of_the_parallel_forms(gated):
    q, k, v, beta, decay, state = (t[:1, :1, :5, ...].clone().requires_grad_() for t in _inputs())
    state = state.detach()[:, :, :, :].clone().requires_grad_()
    decay = decay if gated else None
    assert torch.autograd.gradcheck(
        lambda *t: delta_rule_chunkwise(*t[:4], t[4] if gated else None, 2, t[5]), (q, k, v, beta, decay, state))
    assert torch.autograd.gradcheck(
        lambda *t: linear_attention_parallel(t[0], t[1], t[2], t[4] if gated else None, t[5]),
        (q, k, v, beta, decay, state))


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_the_chunkwise_forms_gradients_are_the_loops(gated, chunk_size):
    # training uses the chunkwise form: its gradients must be the recurrent loop's, in float64
    inputs = [t.clone().requires_grad_() for t in _inputs(seed=3, n=11)]
    weights = torch.randn(B, H, 11, DV, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    grads = []
    for form in (delta_rule_recurrent, lambda *t: delta_rule_chunkwise(*t[:5], chunk_size, t[5])):
        q, k, v, beta, decay, state = inputs
        out, final = form(q, k, v, beta, decay if gated else None, state)
        used = inputs if gated else inputs[:4] + inputs[5:]
        grads.append(torch.autograd.grad((out * weights).sum() + final.square().sum(), used))
    for loop, chunked in zip(*grads):
        torch.testing.assert_close(chunked, loop, rtol=0, atol=1e-12)


def test_flops_are_what_torch_counts_plus_the_triangular_solve():
    q, k, v, beta, _, _ = (t[:1, :1] for t in _inputs(n=10))
    for chunk_size in (None, 3, 4, 10):
        with FlopCounterMode(display=False) as counter:
            if chunk_size is None:
                delta_rule_recurrent(q, k, v, beta)
            else:
                delta_rule_chunkwise(q, k, v, beta, chunk_size=chunk_size)
        sizes = [] if chunk_size is None else [min(chunk_size, 10 - s) for s in range(0, 10, chunk_size)]
        solve = sum(c * (c - 1) * (DK + DV) for c in sizes)  # forward substitution, not counted by torch
        assert counter.get_total_flops() + solve == delta_rule_flops(10, DK, DV, chunk_size)
    assert delta_rule_flops(10, DK, DV) == 6 * 10 * DK * DV
    # linear in the length at a fixed chunk size
    assert delta_rule_flops(4096, 64, 64, 64) == 2 * delta_rule_flops(2048, 64, 64, 64)


def test_bad_inputs_are_refused_with_the_shapes_named():
    q, k, v, beta, decay, state = _inputs()
    with pytest.raises(ValueError, match=r"q \(2, 3, 9, 4\), k \(2, 3, 8, 4\)"):
        delta_rule_recurrent(q, k[:, :, :8], v, beta)
    with pytest.raises(ValueError, match=r"beta must be \(batch, heads, seq_len\)"):
        delta_rule_chunkwise(q, k, v, beta[..., :3])
    with pytest.raises(ValueError, match=r"decay must lie in \(0.0, 1.0\]"):
        linear_attention_parallel(q, k, v, torch.zeros_like(decay))
    with pytest.raises(ValueError, match=r"beta must lie in \[0.0, 2.0\]"):
        delta_rule_recurrent(q, k, v, beta - 1.0)
    with pytest.raises(ValueError, match="initial_state must be"):
        linear_attention_recurrent(q, k, v, initial_state=state[..., :2])
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        delta_rule_chunkwise(q, k, v, beta, chunk_size=0)
    with pytest.raises(ValueError, match="d_k must be a positive int"):
        delta_rule_flops(10, 0, 4)

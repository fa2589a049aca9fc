"""The Triton FlashAttention kernels compiled on a CUDA GPU, against SDPA: ``pytest -m cuda``.

Skipped without a GPU (and under TRITON_INTERPRET=1). This module imports only torch,
pytest and attncourse, so that it runs on a bare GPU machine:
``PYTHONPATH=. python -m pytest -m cuda tests/kernels/test_flash_attention_cuda.py``.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attncourse.kernels import (
    INTERPRETED,
    TRITON_AVAILABLE,
    default_precision,
    triton_flash_attention,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (torch.cuda.is_available() and TRITON_AVAILABLE and not INTERPRETED),
                       reason="needs a CUDA GPU and triton, kernels compiled (TRITON_INTERPRET unset)"),
]

# Tolerances against SDPA computed in float32 from the same (rounded) inputs: a few
# epsilons of the format the products use (TF32 has float16's 10-bit mantissa).
EPS = {"ieee": 2.0 ** -23, "tf32": 2.0 ** -10, torch.float16: 2.0 ** -10,
       torch.bfloat16: 2.0 ** -7}


def tolerance(dtype, precision, grad=False):
    eps = EPS[precision if dtype == torch.float32 else dtype]
    return max(eps * (16 if grad else 4), 1e-4)


def make_inputs(batch, heads, n_q, n_k, d, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(batch, heads, n_q, d), (batch, heads, n_k, d), (batch, heads, n_k, d)]
    return [torch.randn(s, generator=generator, device="cuda", dtype=dtype).requires_grad_()
            for s in shapes]


def check_against_sdpa(n_q, n_k, d, block_q, block_k, causal, dtype, precision):
    q, k, v = make_inputs(2, 3, n_q, n_k, d, dtype)
    out, lse = triton_flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k,
                                      return_lse=True, precision=precision)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal)
    assert out.dtype == dtype
    tol = tolerance(dtype, precision)
    torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
    scores = q32 @ k32.transpose(-2, -1) / math.sqrt(d)
    if causal:
        future = torch.ones(n_q, n_k, dtype=torch.bool, device="cuda").triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), rtol=tol, atol=tol)
    grad_out = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), grad_out)
    theirs = torch.autograd.grad(ref, (q32, k32, v32), grad_out.float())
    for name, a, b in zip("qkv", ours, theirs):
        tol = tolerance(dtype, precision, grad=True) * max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.float(), b, rtol=0, atol=tol, msg=f"d{name}, {dtype}")


@pytest.mark.parametrize("dtype, precision", [(torch.float32, "tf32"), (torch.float16, None),
                                              (torch.bfloat16, None)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, d, block_q, block_k", [
    (1000, 1000, 64, 64, 64),
    (300, 517, 128, 64, 32),
    (1024, 1024, 16, 128, 64),
    (77, 77, 32, 32, 16),
])
def test_compiled_forward_backward_and_lse_equal_sdpa(n_q, n_k, d, block_q, block_k, causal,
                                                      dtype, precision):
    check_against_sdpa(n_q, n_k, d, block_q, block_k, causal, dtype, precision)


@pytest.mark.parametrize("dtype, precision, blocks", [
    (torch.float32, "ieee", (64, 32)),     # exact float32 products
    (torch.bfloat16, None, (None, None)),  # autotuned blocks, warps and stages
])
def test_exact_float32_and_autotuned_kernels_equal_sdpa(dtype, precision, blocks):
    check_against_sdpa(1000, 1000, 64, *blocks, True, dtype, precision)


def test_float32_uses_tf32_where_the_gpu_has_it():
    has_tf32 = torch.cuda.get_device_capability() >= (8, 0)
    assert default_precision(torch.float32) == ("tf32" if has_tf32 else "ieee")
    assert default_precision(torch.bfloat16) == "ieee"


def test_compiled_kernel_refuses_cpu_tensors_and_float64():
    q, k, v = (torch.randn(1, 1, 8, 16) for _ in range(3))
    with pytest.raises(ValueError, match="takes CUDA tensors"):
        triton_flash_attention(q, k, v)
    q, k, v = (t.cuda().double() for t in (q, k, v))
    with pytest.raises(TypeError, match="float64 not supported compiled"):
        triton_flash_attention(q, k, v)


def test_compiled_kernel_refuses_a_non_bool_mask_flag_and_double_backward():
    q, k, v = make_inputs(1, 1, 40, 40, 16, torch.float32)
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        triton_flash_attention(q, k, v, is_causal="no")
    out = triton_flash_attention(q, k, v, is_causal=True)
    with pytest.raises(RuntimeError, match="no double backward"):
        torch.autograd.grad(out.sum(), (q, k, v), create_graph=True)

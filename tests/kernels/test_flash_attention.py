"""The Triton FlashAttention kernels under Triton's interpreter, on the CPU, against SDPA.

Sizes are small: the interpreter runs each program of the grid in Python, a few tens of
milliseconds per launch. The same checks compiled on a GPU are in tests/kernels/test_flash_attention_cuda.py.
"""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from attncourse.functional import attention_bytes, saved_tensor_bytes
from attncourse.kernels import (
    INTERPRETED,
    PRECISIONS,
    SEARCH,
    TRITON_AVAILABLE,
    autotune_configs,
    default_precision,
    forward_hbm_bytes,
    keys_visited,
    triton_flash_attention,
)

needs_interpreter = pytest.mark.skipif(
    not (TRITON_AVAILABLE and INTERPRETED),
    reason="triton missing (Linux x86_64 only) or a GPU here: see tests/kernels/test_flash_attention_cuda.py")


def make_inputs(n_q, n_k, d, dtype=torch.float32, batch=2, heads=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n_q, d, generator=generator, dtype=dtype)
    k = torch.randn(batch, heads, n_k, d, generator=generator, dtype=dtype)
    v = torch.randn(batch, heads, n_k, d, generator=generator, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v)]


def reference_lse(q, k, causal):
    """log sum_j exp(q_i . k_j / sqrt(d)) of each row, by torch.logsumexp on the full scores."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.logsumexp(scores, dim=-1)


# Lengths that are not multiples of the blocks, tgt_len != src_len both ways, B_r != B_c.
CASES = [  # n_q, n_k, d, block_q, block_k
    (100, 100, 32, 32, 32),
    (70, 130, 16, 16, 32),
    (45, 45, 64, 64, 16),
    (130, 70, 16, 16, 64),   # more queries than keys: the last rows see every key
]


@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, d, block_q, block_k", CASES)
def test_forward_backward_and_lse_equal_sdpa(n_q, n_k, d, block_q, block_k, causal):
    q, k, v = make_inputs(n_q, n_k, d, batch=1)
    out, lse = triton_flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k,
                                      return_lse=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, rtol=0, atol=5e-6)
    assert lse.shape == (1, 2, n_q) and lse.dtype == torch.float32 and not lse.requires_grad
    torch.testing.assert_close(lse, reference_lse(q, k, causal), rtol=0, atol=5e-6)
    grad_out = torch.randn_like(ref)
    ours = torch.autograd.grad(out, (q, k, v), grad_out)
    theirs = torch.autograd.grad(ref, (q, k, v), grad_out)
    for name, a, b in zip("qkv", ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5, msg=f"d{name}")


@needs_interpreter
def test_float64_gradients_equal_sdpa_to_rounding_and_pass_gradcheck():
    q, k, v = make_inputs(40, 40, 16, dtype=torch.float64, heads=1)
    out = triton_flash_attention(q, k, v, is_causal=True, block_q=16, block_k=32)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-13)
    grad_out = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad_out),
                    torch.autograd.grad(ref, (q, k, v), grad_out)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    # Finite differences in float64, along random directions (fast mode: a few launches;
    # the full Jacobian would take a launch per input entry). Padded blocks, causal.
    small = make_inputs(20, 27, 16, dtype=torch.float64, batch=1, seed=1)
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda q, k, v: triton_flash_attention(q, k, v, is_causal=causal, block_q=16,
                                                   block_k=16), small, fast_mode=True)


@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, block_q, block_k", [(50, 50, 16, 32), (77, 45, 32, 16)])
def test_float16_forward_and_gradients_are_close_to_sdpa_in_float32(n_q, n_k, block_q,
                                                                      block_k, causal):
    # 16-bit inputs, float32 accumulation, P and dS rounded to float16 before their
    # products: errors of a few float16 epsilons of the largest entry, no more.
    q, k, v = (t.detach().half().requires_grad_() for t in make_inputs(n_q, n_k, 32, heads=1))
    out = triton_flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    assert out.dtype == torch.float16
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal)
    eps = torch.finfo(torch.float16).eps
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=4 * eps * ref.abs().max().item())
    grad_out = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    ours = torch.autograd.grad(out, (q, k, v), grad_out.half())
    theirs = torch.autograd.grad(ref, (q32, k32, v32), grad_out)
    for name, a, b in zip("qkv", ours, theirs):
        assert a.dtype == torch.float16
        torch.testing.assert_close(a.float(), b, rtol=0, atol=4 * eps * b.abs().max().item(),
                                   msg=f"d{name}")
    # The check can fail: a kernel without the rescaling is off by far more.
    assert (out.float() - ref.roll(1, dims=-2)).abs().max() > 100 * eps


@needs_interpreter
@pytest.mark.parametrize("block_q, block_k", [(16, 64), (64, 16), (32, 32), (128, 128)])
def test_causal_stages_give_the_same_output_and_gradients_for_any_tiles(block_q, block_k):
    # The unmasked stage ends on a whole key tile, the masked one covers the diagonal: with
    # B_c > B_r, B_c < B_r, and one tile longer than the sequence, the result is the same.
    q, k, v = make_inputs(70, 70, 16, batch=1, heads=1, seed=2)
    out = triton_flash_attention(q, k, v, is_causal=True, block_q=block_q, block_k=block_k)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=5e-6)
    for name, a, b in zip("qkv", torch.autograd.grad(out.sum(), (q, k, v)),
                          torch.autograd.grad(ref.sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5, msg=f"d{name}")


@needs_interpreter
def test_precision_is_exact_here_and_tf32_only_for_float32():
    assert default_precision(torch.float32) == "ieee"    # no TF32 under the interpreter
    assert default_precision(torch.float16) == "ieee"
    q, k, v = (t.detach() for t in make_inputs(40, 40, 16, batch=1, heads=1))
    ref = F.scaled_dot_product_attention(q, k, v)
    for precision in PRECISIONS:   # the interpreter multiplies exactly either way
        out = triton_flash_attention(q, k, v, block_q=16, block_k=16, precision=precision)
        torch.testing.assert_close(out, ref, rtol=0, atol=5e-6)


def test_autotuning_configurations_follow_the_tutorials_rules():
    if not TRITON_AVAILABLE:
        pytest.skip("triton is not installed here")
    for kernel, (blocks_m, blocks_n, streamed, big_tile, stages) in SEARCH.items():
        options = blocks_n if streamed == "BLOCK_N" else blocks_m
        for d in (16, 32, 64, 128):
            configs = autotune_configs(kernel, d, 4096, 4096)
            assert configs and {c["num_stages"] for c in configs} == set(stages)
            assert len(configs) <= 16   # each compiles on a fresh machine
            assert all(min(32, d) <= c[streamed] <= d for c in configs)
            assert max(c[streamed] for c in configs) == min(d, max(options))
            assert all(c["num_warps"] == 4 or c["BLOCK_M"] * c["BLOCK_N"] >= big_tile
                       for c in configs)
    forward = autotune_configs("forward", 128, 4096, 4096)
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in forward if c["num_warps"] == 8} == {(128, 128)}
    short = autotune_configs("forward", 64, 40, 40)   # no block fits 40 rows: the smallest
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in short} == {(64, 32)}
    with pytest.raises(KeyError):
        autotune_configs("backward", 64, 40, 40)


@needs_interpreter
@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_causal_kernel_never_reads_the_key_blocks_after_the_diagonal():
    # Keys 64..127 are in the future of every query (n_q = 64, top-left alignment): NaN
    # there poisons the output as soon as a tile of them is loaded (0 * NaN = NaN in P V).
    q, k, v = (t.detach() for t in make_inputs(64, 128, 16, batch=1, heads=1))
    k[..., 64:, :], v[..., 64:, :] = float("nan"), float("nan")
    out = triton_flash_attention(q, k, v, is_causal=True, block_q=32, block_k=32)
    ref = F.scaled_dot_product_attention(q, k[..., :64, :], v[..., :64, :], is_causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=5e-6)
    # Nor does the backward pass: dQ is exact, and the keys no query sees get zero gradients.
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    grad_out = torch.randn_like(ref)
    out = triton_flash_attention(q, k, v, is_causal=True, block_q=32, block_k=32)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
    ref = F.scaled_dot_product_attention(q, k[..., :64, :], v[..., :64, :], is_causal=True)
    theirs = torch.autograd.grad(ref, q, grad_out)[0]
    torch.testing.assert_close(dq, theirs, rtol=0, atol=2e-5)
    assert (dk[..., 64:, :] == 0).all() and (dv[..., 64:, :] == 0).all()
    # Without the causal mask the same keys are read, and seen.
    with torch.no_grad():
        assert triton_flash_attention(q, k, v, block_q=32, block_k=32).isnan().all()


@needs_interpreter
def test_autograd_saves_inputs_output_and_lse_only():
    q, k, v = make_inputs(64, 64, 32, batch=1, heads=1)
    saved = saved_tensor_bytes(lambda *t: triton_flash_attention(*t, block_q=32, block_k=32), q, k, v)
    assert saved == (4 * 64 * 32 + 64) * 4   # q, k, v, O and L, float32; no 64 x 64 weights


@needs_interpreter
@pytest.mark.parametrize("call, error, words", [
    (lambda q, k, v: triton_flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()),
     TypeError, "bfloat16 not supported under Triton's interpreter"),
    (lambda q, k, v: triton_flash_attention(q, k.double(), v), TypeError, "one dtype"),
    (lambda q, k, v: triton_flash_attention(q.int(), k.int(), v.int()), TypeError, "int32"),
    (lambda q, k, v: triton_flash_attention(q[..., :24], k[..., :24], v[..., :24]),
     ValueError, "d = 24"),
    (lambda q, k, v: triton_flash_attention(q, k, v, block_q=48), ValueError, "block_q = 48"),
    (lambda q, k, v: triton_flash_attention(q, k, v, block_k=256), ValueError, "block_k = 256"),
    (lambda q, k, v: triton_flash_attention(q[0], k, v), ValueError, "(batch, heads, n, d)"),
    (lambda q, k, v: triton_flash_attention(q, k[:, :1], v), ValueError, "key (2, 1, 10, 32)"),
    (lambda q, k, v: triton_flash_attention(q, k, v[..., :5, :]), ValueError, "same length"),
    (lambda q, k, v: triton_flash_attention(q, k, v[..., :16]), ValueError, "head width"),
    (lambda q, k, v: triton_flash_attention(q[..., :0, :], k, v), ValueError, "empty"),
    (lambda q, k, v: triton_flash_attention(q, k, v, is_causal="no"), TypeError,
     "is_causal must be True or False, got 'no'"),
    (lambda q, k, v: triton_flash_attention(q, k, v, is_causal=1), TypeError, "got 1"),
])
def test_unsupported_inputs_get_one_line_errors(call, error, words):
    q, k, v = (t.detach() for t in make_inputs(10, 10, 32))
    with pytest.raises(error) as info:
        call(q, k, v)
    assert words in str(info.value) and "\n" not in str(info.value)


@needs_interpreter
def test_double_backward_is_refused_with_one_line_error():
    q, k, v = make_inputs(20, 20, 16, batch=1, heads=1)
    out = triton_flash_attention(q, k, v, is_causal=True, block_q=16, block_k=16)
    with pytest.raises(RuntimeError, match="no double backward") as info:
        torch.autograd.grad(out.sum(), (q, k, v), create_graph=True)
    assert "\n" not in str(info.value)
    first = torch.autograd.grad(out.sum(), (q, k, v))  # a plain backward still works
    assert all(g.shape == t.shape and not g.requires_grad for g, t in zip(first, (q, k, v)))


def test_hbm_traffic_count():
    # Without a causal mask the tiled count of functional.cost plus L (float32), for any B_c.
    for n, d, block_q in ((1024, 64, 64), (1000, 128, 128), (50, 16, 64)):
        expected = attention_bytes(n, d, block_q=block_q, bytes_per_element=2) + 4 * n
        for block_k in (16, 64, 128):
            assert forward_hbm_bytes(n, n, d, block_q, block_k, bytes_per_element=2) == expected
    # By hand: n = 100, d = 16, B_r = 32: 4 query blocks each read 100 keys and 100 values.
    assert forward_hbm_bytes(100, 100, 16, 32, 32) == (2 * 100 * 16 + 2 * 4 * 100 * 16) * 4 + 4 * 100
    # Causal early exit: query block i reads keys up to the end of its diagonal block.
    assert [keys_visited(i, 100, 32, 32, True) for i in range(4)] == [32, 64, 96, 100]
    assert [keys_visited(i, 100, 32, 64, True) for i in range(4)] == [64, 64, 100, 100]
    causal = forward_hbm_bytes(100, 100, 16, 32, 32, causal=True)
    assert causal == (2 * 100 * 16 + 2 * (32 + 64 + 96 + 100) * 16) * 4 + 4 * 100
    with pytest.raises(ValueError, match="block_q=0"):
        forward_hbm_bytes(10, 10, 16, 0, 16)


COMPILE_SCRIPT = """
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attncourse.kernels import flash_attention as fa
kernels = {
    "_attention_forward": "Q K V O L N_Q N_K qk_scale",
    "_attention_backward_dkdv": "Q K V DO L DELTA DK DV N_Q N_K qk_scale scale",
    "_attention_backward_dq": "Q K V DO L DELTA DQ N_Q N_K qk_scale scale",
}
types = {"L": "*fp32", "DELTA": "*fp32", "N_Q": "i32", "N_K": "i32", "qk_scale": "fp32",
         "scale": "fp32"}
constants = {"HEAD_DIM": 32, "BLOCK_M": 32, "BLOCK_N": 32, "CAUSAL": True,
             "ACC": tl.float32, "PRECISION": "ieee"}
for name, args in kernels.items():
    signature = {a: types.get(a, "*bf16") for a in args.split()}
    signature.update({c: "constexpr" for c in constants})
    source = ASTSource(getattr(fa, name), signature, constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
    print(name, "cubin" in compiled.asm)
"""


def test_kernels_compile_for_a_hopper_gpu_without_one():
    # The interpreter never compiles: this builds the bfloat16 (which it cannot run), causal
    # kernels down to an H100's machine code (sm_90 cubin), so a kernel that only a GPU
    # would refuse fails here. No GPU is needed to compile.
    if not TRITON_AVAILABLE:
        pytest.skip("triton is not installed here")
    environment = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["_attention_forward", "True", "_attention_backward_dkdv",
                                   "True", "_attention_backward_dq", "True"]


RULE_SCRIPT = """
import os, sys
if sys.argv[1] == "no-triton":
    sys.modules["triton"] = None   # import triton fails, as where it does not install
if sys.argv[1] == "triton-first":
    import triton.language  # before the package could choose the interpreter
import torch
import attncourse.kernels as kernels
print(os.environ.get("TRITON_INTERPRET"), kernels.INTERPRETED, kernels.TRITON_AVAILABLE,
      torch.cuda.is_available())
try:
    kernels.triton_flash_attention(*(torch.randn(1, 1, 4, 16) for _ in range(3)))
    print("ran")
except RuntimeError as error:
    print("RuntimeError:", error)
"""


def run_rule(argument, **env):
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    environment.update(env)
    done = subprocess.run([sys.executable, "-c", RULE_SCRIPT, argument], env=environment,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.splitlines()


def test_interpreter_rule_and_missing_triton_in_fresh_processes():
    if not TRITON_AVAILABLE:
        pytest.skip("triton is not installed here")
    state, outcome = run_rule("default")
    if state.endswith("False"):  # no GPU: the package set TRITON_INTERPRET=1, the kernel ran
        assert state == "1 True True False" and outcome == "ran"
    else:  # a GPU: left unset, compiled (CPU tensors are refused there with a ValueError)
        assert state.startswith("None False True")
    # Without triton the package imports, and a launch says why it cannot run, in one line.
    state, outcome = run_rule("no-triton")
    assert state.split()[2] == "False"
    assert outcome.startswith("RuntimeError: triton is not installed here")
    # triton imported first, without a GPU: one line saying so, not the interpreter's error.
    state, outcome = run_rule("triton-first")
    if state.endswith("False"):
        assert outcome.startswith("RuntimeError: triton was imported before attncourse.kernels")

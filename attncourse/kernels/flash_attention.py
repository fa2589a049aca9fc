"""FlashAttention-2 as a Triton kernel: forward (Dao 2023, algorithm 1) and backward (algorithm 2).

The same algorithm as the course's NumPy and torch tiled passes
(:mod:`attncourse.functional.tiled_attention`, :mod:`attncourse.functional.flash_attention`),
written the way fused attention kernels are written: one *program* per block of rows,
which loads its tiles from the GPU's main memory (HBM) into on-chip memory once, runs the
online softmax over them, and writes its result once. On a CUDA GPU the kernels compile;
on a machine without one they run under Triton's interpreter on CPU tensors, a slow and
exact emulation (see :mod:`attncourse.kernels.triton_setup`).

Each line of the kernels is tied in a comment to the line of the paper's algorithm it
implements ("line 8" is line 8 of algorithm 1 in the forward, of algorithm 2 in the
backward). Accumulators are float32 (float64 for float64 inputs, which only the
interpreter takes: that is what makes ``torch.autograd.gradcheck`` possible on the CPU).

References
----------
Dao (2023), "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning", algorithm 1 (forward) and algorithm 2 (backward).
Dao, Fu, Ermon, Rudra, Ré (2022), "FlashAttention", appendix B.2 (the gradients).
Tillet, Kung, Cox (2019), "Triton: an intermediate language and compiler for tiled neural
network computations".
"""

from __future__ import annotations

import math

import torch

from attncourse.kernels.triton_setup import INTERPRETED, jit, require_triton, tl, triton

#: Head widths d the kernels take: ``tl.arange`` needs a power of two, ``tl.dot`` at least 16.
HEAD_DIMS = (16, 32, 64, 128)
#: Block sizes (rows of queries B_r, rows of keys B_c) the kernels take.
BLOCK_SIZES = (16, 32, 64, 128)
#: Dtypes per mode. bfloat16 is wrong under the interpreter (NumPy has no bfloat16);
#: float64 runs only there (for gradcheck).
INTERPRETED_DTYPES = (torch.float32, torch.float16, torch.float64)
COMPILED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def default_blocks(d: int, dtype: torch.dtype) -> tuple[int, int]:
    """``(block_q, block_k)`` used when none are given: 64 x 64, or 32 x 32 for rows of 512 bytes.

    A program holds a few ``block x d`` tiles in SRAM (more in the backward pass, with its
    two accumulators): float32 rows of d = 128 are 512 bytes, and 64-row tiles of them
    would not fit well on the chip. Not tuned beyond that (see benchmarks/flash_attention.py).
    """
    row_bytes = d * torch.finfo(dtype).bits // 8 if dtype.is_floating_point else d
    return (32, 32) if row_bytes >= 512 else (64, 64)


@jit
def _flash_forward(Q, K, V, O, L, N_Q, N_K, scale,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Forward pass: program (i, bh) computes query block i of (batch, head) bh."""
    start_m = tl.program_id(0)                       # line 3: one program per query block i
    bh = tl.program_id(1)                            # ... and per (batch, head)
    Q += bh * N_Q * D                                # this head's rows, (n, d) row-major
    K += bh * N_K * D
    V += bh * N_K * D
    O += bh * N_Q * D
    L += bh * N_Q
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    row_ok = rows < N_Q                              # padding: the last block may be short
    q = tl.load(Q + rows[:, None] * D + dims[None, :], mask=row_ok[:, None], other=0.0)  # line 4
    m = tl.full([BLOCK_M], float("-inf"), ACC)       # line 5: m = -inf, l = 0, acc = 0
    l = tl.zeros([BLOCK_M], ACC)
    acc = tl.zeros([BLOCK_M, D], ACC)
    hi = N_K
    if CAUSAL:                                       # causal: stop at the diagonal block,
        hi = tl.minimum(N_K, (start_m + 1) * BLOCK_M)  # the tiles after it are all masked
    for start_n in range(0, hi, BLOCK_N):            # line 6: loop over key blocks j
        key = start_n + cols
        col_ok = key < N_K
        kv_offsets = key[:, None] * D + dims[None, :]
        k = tl.load(K + kv_offsets, mask=col_ok[:, None], other=0.0)  # line 7: K_j, V_j
        v = tl.load(V + kv_offsets, mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale  # line 8
        allowed = col_ok[None, :]
        if CAUSAL:
            allowed = allowed & (key[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))          # line 9: running max,
        p = tl.exp(s - m_new[:, None])               # unnormalised weights P~,
        alpha = tl.exp(m - m_new)                    # and the rescaling e^(m - m_new)
        l = alpha * l + tl.sum(p, 1)                 # running normaliser
        acc = acc * alpha[:, None] + tl.dot(         # line 10: rescaled O~ + P~ V_j
            p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
        m = m_new
    out = acc / l[:, None]                           # line 12: O_i = diag(l)^-1 O~
    tl.store(O + rows[:, None] * D + dims[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None])                   # line 14: write O_i once
    tl.store(L + rows, m + tl.log(l), mask=row_ok)   # lines 13, 15: L_i = m + log(l)


@jit
def _flash_backward(Q, K, V, DO, L, DELTA, DQ, DK, DV, N_Q, N_K, scale,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Backward pass: program (j, bh) computes dK_j and dV_j of key block j, and adds to dQ."""
    start_n = tl.program_id(0)                       # line 5: one program per key block j
    bh = tl.program_id(1)
    Q += bh * N_Q * D
    DO += bh * N_Q * D
    DQ += bh * N_Q * D
    K += bh * N_K * D
    V += bh * N_K * D
    DK += bh * N_K * D
    DV += bh * N_K * D
    L += bh * N_Q
    DELTA += bh * N_Q
    key = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    col_ok = key < N_K
    kv_offsets = key[:, None] * D + dims[None, :]
    k = tl.load(K + kv_offsets, mask=col_ok[:, None], other=0.0)  # line 6: load K_j, V_j
    v = tl.load(V + kv_offsets, mask=col_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], ACC)                 # line 7: dK_j = dV_j = 0
    dv = tl.zeros([BLOCK_N, D], ACC)
    lo = 0
    if CAUSAL:                                       # query blocks wholly before key block j
        lo = (start_n * BLOCK_N // BLOCK_M) * BLOCK_M  # see none of it: skip them
    for start_m in range(lo, N_Q, BLOCK_M):          # line 8: loop over query blocks i
        rows = start_m + offs_m
        row_ok = rows < N_Q
        q_offsets = rows[:, None] * D + dims[None, :]
        q = tl.load(Q + q_offsets, mask=row_ok[:, None], other=0.0)    # line 9: Q_i, dO_i,
        do = tl.load(DO + q_offsets, mask=row_ok[:, None], other=0.0)
        lse = tl.load(L + rows, mask=row_ok, other=0.0)                # L_i, D_i
        delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale  # line 10
        allowed = row_ok[:, None] & col_ok[None, :]
        if CAUSAL:
            allowed = allowed & (key[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)  # line 11: P = exp(S - L), recomputed
        dv += tl.dot(tl.trans(p).to(do.dtype), do,              # line 12: dV_j += P^T dO_i
                     input_precision=PRECISION, out_dtype=ACC)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)  # line 13
        ds = p * (dp - delta[:, None])               # line 14: dS = P o (dP - D_i)
        dq = tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC) * scale
        tl.atomic_add(DQ + q_offsets, dq, mask=row_ok[:, None])  # line 15: dQ_i += dS K_j
        dk += tl.dot(tl.trans(ds).to(q.dtype), q,     # line 16: dK_j += dS^T Q_i
                     input_precision=PRECISION, out_dtype=ACC)
    tl.store(DK + kv_offsets, (dk * scale).to(DK.dtype.element_ty), mask=col_ok[:, None])  # 18
    tl.store(DV + kv_offsets, dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


def _accumulator(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _launch_options(d: int) -> dict:
    # Under the interpreter the launch options mean nothing; on a GPU, 8 warps share the
    # register-hungry accumulators of d = 128 (not tuned: see benchmarks/flash_attention.py).
    return {} if INTERPRETED else {"num_warps": 8 if d >= 128 else 4, "num_stages": 2}


def _forward(q, k, v, causal: bool, block_q: int, block_k: int):
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    out = torch.empty_like(q)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = torch.empty(batch, heads, n_q, dtype=lse_dtype, device=q.device)
    grid = (triton.cdiv(n_q, block_q), batch * heads)
    _flash_forward[grid](q, k, v, out, lse, n_q, n_k, 1.0 / math.sqrt(d), D=d, BLOCK_M=block_q,
                         BLOCK_N=block_k, CAUSAL=causal, ACC=_accumulator(q.dtype),
                         PRECISION="ieee", **_launch_options(d))
    return out, lse


def _backward(q, k, v, out, lse, grad_out, causal: bool, block_q: int, block_k: int):
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    acc_dtype = lse.dtype
    # Algorithm 2, line 4: D_i = dO_i^T O_i, one number per query row, before the loops.
    delta = (grad_out.to(acc_dtype) * out.to(acc_dtype)).sum(dim=-1)
    dq = torch.zeros(q.shape, dtype=acc_dtype, device=q.device)  # atomically added to
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = (triton.cdiv(n_k, block_k), batch * heads)
    _flash_backward[grid](q, k, v, grad_out, lse, delta, dq, dk, dv, n_q, n_k, 1.0 / math.sqrt(d),
                          D=d, BLOCK_M=block_q, BLOCK_N=block_k, CAUSAL=causal,
                          ACC=_accumulator(q.dtype), PRECISION="ieee", **_launch_options(d))
    return dq.to(q.dtype), dk, dv


class FlashAttentionTriton(torch.autograd.Function):
    """The Triton kernels as an autograd function: saves Q, K, V, O and L, never the weights.

    ``FlashAttentionTriton.apply(q, k, v, causal, block_q, block_k)`` takes contiguous,
    validated ``(batch, heads, n, d)`` tensors (use :func:`triton_flash_attention`, which
    checks them) and returns the output and ``L (batch, heads, tgt_len)`` (no gradient).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k):
        out, lse = _forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, block_q, block_k)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        # Under create_graph=True autograd runs this with grad mode on; the kernel's
        # gradients carry no graph, so a second derivative would silently be missing.
        if torch.is_grad_enabled():
            raise RuntimeError("triton_flash_attention has no double backward (create_graph=True): "
                               "use scaled_dot_product_attention for higher-order gradients")
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, lse, grad_out.contiguous(), *ctx.settings)
        return dq, dk, dv, None, None, None


def _validate_inputs(query, key, value, block_q, block_k) -> None:
    """One-line errors for anything the kernels do not take."""
    tensors = {"query": query, "key": key, "value": value}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor) or t.ndim != 4:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a (batch, heads, n, d) tensor, got {shape}")
    shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in tensors.items())
    if not (query.shape[:2] == key.shape[:2] == value.shape[:2]):
        raise ValueError(f"query, key and value must have the same batch and heads: {shapes}")
    if key.shape[2] != value.shape[2]:
        raise ValueError(f"key and value must have the same length: {shapes}")
    if not (query.shape[3] == key.shape[3] == value.shape[3]):
        raise ValueError(f"query, key and value must have the same head width d: {shapes}")
    if query.shape[2] == 0 or key.shape[2] == 0:
        raise ValueError(f"sequences must not be empty: {shapes}")
    d = query.shape[3]
    if d not in HEAD_DIMS:
        raise ValueError(f"head width d = {d} not supported: the kernel takes d in {HEAD_DIMS}")
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if block is not None and block not in BLOCK_SIZES:
            raise ValueError(f"{name} = {block!r} not supported: use one of {BLOCK_SIZES}")
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) > 1:
        raise TypeError(f"query, key and value must have one dtype, got {sorted(map(str, dtypes))}")
    dtype = query.dtype
    allowed = INTERPRETED_DTYPES if INTERPRETED else COMPILED_DTYPES
    if dtype not in allowed:
        where = "under Triton's interpreter" if INTERPRETED else "compiled for the GPU"
        why = " (NumPy has no bfloat16: run bfloat16 on a GPU)" if dtype == torch.bfloat16 else ""
        names = ", ".join(str(t).replace("torch.", "") for t in allowed)
        raise TypeError(f"dtype {str(dtype).replace('torch.', '')} not supported {where}{why}; "
                        f"use {names}")
    devices = {t.device for t in tensors.values()}
    expected = "cpu" if INTERPRETED else "cuda"
    if len(devices) > 1 or next(iter(devices)).type != expected:
        mode = ("Triton's interpreter (TRITON_INTERPRET=1) takes CPU tensors" if INTERPRETED
                else "the compiled kernel takes CUDA tensors")
        raise ValueError(f"{mode}, got query, key, value on {[str(t.device) for t in tensors.values()]}")


def triton_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    block_q: int | None = None,
    block_k: int | None = None,
    return_lse: bool = False,
):
    """Exact attention softmax(QK^T / sqrt(d)) V by the FlashAttention-2 Triton kernels.

    Parameters
    ----------
    query : (batch, heads, tgt_len, d)
    key, value : (batch, heads, src_len, d)
        One dtype and one device for the three; ``d`` in 16, 32, 64, 128. On a CUDA GPU:
        CUDA tensors, float32, float16 or bfloat16. Without one (Triton's interpreter):
        CPU tensors, float32, float16 or float64 (for ``gradcheck``).
    is_causal : bool
        Query i sees keys j <= i (top-left alignment, as ``is_causal`` of
        ``torch.nn.functional.scaled_dot_product_attention``); key blocks after a query
        block's diagonal are never loaded.
    block_q, block_k : int, optional
        B_r and B_c, rows of queries and of keys per tile, in 16, 32, 64, 128 (default:
        :func:`default_blocks`). Lengths need not be multiples of them: the last tile is
        masked.
    return_lse : bool
        Also return ``L (batch, heads, tgt_len)``, the natural log-sum-exp of each row of
        scaled scores, in float32 (float64 for float64 inputs); it carries no gradient.

    Returns
    -------
    output : (batch, heads, tgt_len, d)
        Differentiable (:class:`FlashAttentionTriton`: the backward recomputes the weights
        from ``L``, algorithm 2).
    lse : (batch, heads, tgt_len), only with ``return_lse``

    Raises
    ------
    RuntimeError
        If triton is not installed (Linux x86_64 only), or was imported before
        :mod:`attncourse.kernels` on a machine without a GPU.
    ValueError
        If a tensor is not 4-D, the shapes do not fit (the message names all three), ``d``
        or a block size is not supported, or the tensors are on the wrong device.
    TypeError
        If the dtypes differ or one is not supported here (bfloat16 under the interpreter),
        or ``is_causal`` is not a bool.
    RuntimeError
        From the backward pass, if it is asked for a graph (``create_graph=True``): the
        kernel has no double backward.

    References
    ----------
    Dao (2023), "FlashAttention-2", algorithms 1 and 2.
    """
    require_triton()
    if not isinstance(is_causal, bool):  # bool("no") is True: a typo would silently mask
        raise TypeError(f"is_causal must be True or False, got {is_causal!r}")
    _validate_inputs(query, key, value, block_q, block_k)
    default_q, default_k = default_blocks(query.shape[-1], query.dtype)
    block_q = default_q if block_q is None else block_q
    block_k = default_k if block_k is None else block_k
    q, k, v = (t.contiguous() for t in (query, key, value))
    out, lse = FlashAttentionTriton.apply(q, k, v, is_causal, int(block_q), int(block_k))
    return (out, lse) if return_lse else out


__all__ = [
    "BLOCK_SIZES",
    "COMPILED_DTYPES",
    "HEAD_DIMS",
    "INTERPRETED_DTYPES",
    "FlashAttentionTriton",
    "default_blocks",
    "triton_flash_attention",
]

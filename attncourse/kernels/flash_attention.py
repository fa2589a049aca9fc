"""FlashAttention-2 as Triton kernels: a forward kernel and a backward pass of three kernels.

One *program* per block of rows loads its tiles from HBM once, runs the online softmax over
them on the chip, and writes its result once. On a CUDA GPU the kernels compile (and are
autotuned); without one they run under Triton's interpreter on CPU tensors, a slow and
exact emulation (:mod:`attncourse.kernels.triton_setup`).

The forms of a production kernel:

- 16-bit inputs (float16, bfloat16) multiply on the tensor cores with float32 accumulation;
  the weights P are cast to the inputs' 16-bit type before the second product, P V.
- float32 inputs multiply in TF32 on a GPU that has it (``input_precision="tf32"``), or
  exactly (``"ieee"``: the interpreter's default, and float64 there for gradcheck).
- ``exp2`` instead of ``exp``: scores are scaled by ``log2(e) / sqrt(d)`` once, so
  ``exp2(s - m)`` equals ``exp`` of the natural-unit difference.
- Two stages per program: an unmasked loop over the tiles that need no mask, then a masked
  stage over the tiles that cross the causal diagonal or the end of the sequence. No tile
  that is wholly masked is visited.
- The backward pass writes every gradient once, without atomics: ``D = rowsum(dO * O)``
  first, then one program per key block for dK, dV and one per query block for dQ.

References
----------
Dao (2023), "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning", algorithm 1 (forward) and algorithm 2 (backward), section 3.1.
"""

from __future__ import annotations

import math

import torch

from attncourse.kernels.triton_setup import INTERPRETED, jit, require_triton, tl, triton

#: Head widths d the kernels take: ``tl.arange`` needs a power of two, ``tl.dot`` at least 16.
HEAD_DIMS = (16, 32, 64, 128)
#: Block sizes (rows of queries B_r, rows of keys B_c) that may be given by hand.
BLOCK_SIZES = (16, 32, 64, 128)
#: Dtypes per mode. bfloat16 is wrong under the interpreter (NumPy has no bfloat16);
#: float64 runs only there (for gradcheck).
INTERPRETED_DTYPES = (torch.float32, torch.float16, torch.float64)
COMPILED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: ``input_precision`` of ``tl.dot`` for float32 inputs: exact, or TF32 on the tensor cores.
PRECISIONS = ("ieee", "tf32")
#: log2(e): exp(x) = exp2(x log2(e)).
LOG2E = 1.4426950408889634


def default_blocks(d: int, dtype: torch.dtype) -> tuple[int, int]:
    """Rows of queries and of keys per tile where none are given and nothing is tuned.

    Parameters
    ----------
    d : int
        Head width.
    dtype : torch.dtype
        Dtype of Q, K and V.

    Returns
    -------
    (block_q, block_k) : tuple of int
        64 x 64, or 32 x 32 for rows of 512 bytes or more (float32 at d = 128), whose
        tiles would crowd a program's on-chip memory. Used under the interpreter, and on a
        GPU for the block not given when the other is.

    References
    ----------
    Dao (2023), "FlashAttention-2", section 3.3 (block sizes and on-chip memory).
    """
    row_bytes = d * torch.finfo(dtype).bits // 8 if dtype.is_floating_point else d
    return (32, 32) if row_bytes >= 512 else (64, 64)


def default_precision(dtype: torch.dtype) -> str:
    """The ``input_precision`` of the kernels' products for inputs of ``dtype``.

    Returns
    -------
    str
        ``"tf32"`` for float32 compiled on a GPU with TF32 tensor cores (compute
        capability 8.0 or above: a 10-bit mantissa, products summed in float32);
        ``"ieee"`` (exact) otherwise, and always under the interpreter. 16-bit inputs use
        the tensor cores whatever it says.

    References
    ----------
    NVIDIA (2020), "NVIDIA A100 Tensor Core GPU Architecture", section "TF32".
    """
    if dtype != torch.float32 or INTERPRETED or not torch.cuda.is_available():
        return "ieee"
    return "tf32" if torch.cuda.get_device_capability() >= (8, 0) else "ieee"


# --------------------------------------------------------------------------- forward


@jit
def _forward_tiles(acc, l, m, q, K, V, rows, start, stop, N_K, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                   CAUSAL: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Online softmax of one query block over the key tiles [start, stop) (algorithm 1,
    lines 6-11). Scores are in log2 units: m is their running maximum, l the sum."""
    dims = tl.arange(0, HEAD_DIM)
    for begin in range(start, stop, BLOCK_N):
        cols = begin + tl.arange(0, BLOCK_N)
        kv_at = cols[:, None] * HEAD_DIM + dims[None, :]
        if MASKED:   # the last tile may run past N_K
            k = tl.load(K + kv_at, mask=cols[:, None] < N_K, other=0.0)
            v = tl.load(V + kv_at, mask=cols[:, None] < N_K, other=0.0)
        else:
            k = tl.load(K + kv_at)
            v = tl.load(V + kv_at)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * qk_scale
        if MASKED:
            allowed = cols[None, :] < N_K
            if CAUSAL:
                allowed = allowed & (cols[None, :] <= rows[:, None])
            s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = alpha * l + tl.sum(p, 1)
        acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v, input_precision=PRECISION,
                                            out_dtype=ACC)
        m = m_new
    return acc, l, m


@jit
def _attention_forward(Q, K, V, O, L, N_Q, N_K, qk_scale, HEAD_DIM: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                       ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Program (i, head) computes O and L of query block i of one (batch, head)."""
    i, head = tl.program_id(0), tl.program_id(1)
    Q += head * N_Q * HEAD_DIM
    O += head * N_Q * HEAD_DIM
    K += head * N_K * HEAD_DIM
    V += head * N_K * HEAD_DIM
    rows = i * BLOCK_M + tl.arange(0, BLOCK_M)
    q_at = rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    q = tl.load(Q + q_at, mask=rows[:, None] < N_Q, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), ACC)
    l = tl.zeros([BLOCK_M], ACC)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], ACC)
    if CAUSAL:   # keys before row i * BLOCK_M are seen by every row of the block
        masked_from = tl.minimum(i * BLOCK_M, N_K)
        stop = tl.minimum((i + 1) * BLOCK_M, N_K)
    else:
        masked_from = N_K
        stop = N_K
    unmasked_stop = masked_from // BLOCK_N * BLOCK_N   # whole tiles only
    acc, l, m = _forward_tiles(acc, l, m, q, K, V, rows, 0, unmasked_stop, N_K, qk_scale,
                               HEAD_DIM, BLOCK_N, False, CAUSAL, ACC, PRECISION)
    acc, l, m = _forward_tiles(acc, l, m, q, K, V, rows, unmasked_stop, stop, N_K, qk_scale,
                               HEAD_DIM, BLOCK_N, True, CAUSAL, ACC, PRECISION)
    tl.store(O + q_at, (acc / l[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < N_Q)
    lse = (m + tl.log2(l)) / 1.4426950408889634       # L = m + log l, in natural units
    tl.store(L + head * N_Q + rows, lse, mask=rows < N_Q)


# --------------------------------------------------------------------------- backward


@jit
def _backward_delta(O, DO, DELTA, N_Q, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                    ACC: tl.constexpr):
    """D_i = rowsum(dO_i * O_i) of one query block (algorithm 2, line 4)."""
    i, head = tl.program_id(0), tl.program_id(1)
    rows = i * BLOCK_M + tl.arange(0, BLOCK_M)
    at = head * N_Q * HEAD_DIM + rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(O + at, mask=rows[:, None] < N_Q, other=0.0).to(ACC)
    do = tl.load(DO + at, mask=rows[:, None] < N_Q, other=0.0).to(ACC)
    tl.store(DELTA + head * N_Q + rows, tl.sum(o * do, 1), mask=rows < N_Q)


@jit
def _dkdv_tiles(dk, dv, k, v, Q, DO, L, DELTA, cols, start, stop, N_Q, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr,
                ACC: tl.constexpr, PRECISION: tl.constexpr):
    """dK_j and dV_j of one key block, summed over the query tiles [start, stop).

    Works on transposed tiles (key rows first), so P^T and dS^T need no transpose. Query
    rows past N_Q load as zeros and add exactly zero (their dO is zero).
    """
    dims = tl.arange(0, HEAD_DIM)
    for begin in range(start, stop, BLOCK_M):
        rows = begin + tl.arange(0, BLOCK_M)
        q_at = rows[:, None] * HEAD_DIM + dims[None, :]
        q = tl.load(Q + q_at, mask=rows[:, None] < N_Q, other=0.0)
        do = tl.load(DO + q_at, mask=rows[:, None] < N_Q, other=0.0)
        lse = tl.load(L + rows, mask=rows < N_Q, other=0.0) * 1.4426950408889634
        delta = tl.load(DELTA + rows, mask=rows < N_Q, other=0.0)
        s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION, out_dtype=ACC) * qk_scale
        p_t = tl.exp2(s_t - lse[None, :])             # P^T, recomputed from L
        if MASKED:
            p_t = tl.where(cols[:, None] <= rows[None, :], p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION, out_dtype=ACC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION, out_dtype=ACC)
        ds_t = p_t * (dp_t - delta[None, :])          # dS^T = P^T o (dP^T - D)
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION, out_dtype=ACC)
    return dk, dv


@jit
def _attention_backward_dkdv(Q, K, V, DO, L, DELTA, DK, DV, N_Q, N_K, qk_scale, scale,
                             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                             ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Program (j, head) computes dK_j and dV_j of key block j (algorithm 2, lines 5-18)."""
    j, head = tl.program_id(0), tl.program_id(1)
    Q += head * N_Q * HEAD_DIM
    DO += head * N_Q * HEAD_DIM
    L += head * N_Q
    DELTA += head * N_Q
    cols = j * BLOCK_N + tl.arange(0, BLOCK_N)
    kv_at = head * N_K * HEAD_DIM + cols[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    k = tl.load(K + kv_at, mask=cols[:, None] < N_K, other=0.0)
    v = tl.load(V + kv_at, mask=cols[:, None] < N_K, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], ACC)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], ACC)
    unmasked_start = 0
    if CAUSAL:   # rows before j * BLOCK_N see none of these keys, rows after the block all
        masked_stop = tl.minimum(j * BLOCK_N + (BLOCK_N + BLOCK_M - 1) // BLOCK_M * BLOCK_M, N_Q)
        dk, dv = _dkdv_tiles(dk, dv, k, v, Q, DO, L, DELTA, cols, j * BLOCK_N, masked_stop,
                             N_Q, qk_scale, HEAD_DIM, BLOCK_M, True, ACC, PRECISION)
        unmasked_start = masked_stop
    dk, dv = _dkdv_tiles(dk, dv, k, v, Q, DO, L, DELTA, cols, unmasked_start, N_Q, N_Q,
                         qk_scale, HEAD_DIM, BLOCK_M, False, ACC, PRECISION)
    tl.store(DK + kv_at, (dk * scale).to(DK.dtype.element_ty), mask=cols[:, None] < N_K)
    tl.store(DV + kv_at, dv.to(DV.dtype.element_ty), mask=cols[:, None] < N_K)


@jit
def _dq_tiles(dq, q, do, lse, delta, K, V, rows, start, stop, N_K, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
              CAUSAL: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """dQ_i of one query block, summed over the key tiles [start, stop)."""
    dims = tl.arange(0, HEAD_DIM)
    for begin in range(start, stop, BLOCK_N):
        cols = begin + tl.arange(0, BLOCK_N)
        kv_at = cols[:, None] * HEAD_DIM + dims[None, :]
        if MASKED:
            k = tl.load(K + kv_at, mask=cols[:, None] < N_K, other=0.0)
            v = tl.load(V + kv_at, mask=cols[:, None] < N_K, other=0.0)
        else:
            k = tl.load(K + kv_at)
            v = tl.load(V + kv_at)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * qk_scale
        p = tl.exp2(s - lse[:, None])
        if MASKED:
            allowed = cols[None, :] < N_K
            if CAUSAL:
                allowed = allowed & (cols[None, :] <= rows[:, None])
            p = tl.where(allowed, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
    return dq


@jit
def _attention_backward_dq(Q, K, V, DO, L, DELTA, DQ, N_Q, N_K, qk_scale, scale,
                           HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ACC: tl.constexpr,
                           PRECISION: tl.constexpr):
    """Program (i, head) computes dQ_i of query block i, the two stages of the forward."""
    i, head = tl.program_id(0), tl.program_id(1)
    K += head * N_K * HEAD_DIM
    V += head * N_K * HEAD_DIM
    rows = i * BLOCK_M + tl.arange(0, BLOCK_M)
    q_at = head * N_Q * HEAD_DIM + rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    q = tl.load(Q + q_at, mask=rows[:, None] < N_Q, other=0.0)
    do = tl.load(DO + q_at, mask=rows[:, None] < N_Q, other=0.0)
    lse = tl.load(L + head * N_Q + rows, mask=rows < N_Q, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + head * N_Q + rows, mask=rows < N_Q, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], ACC)
    if CAUSAL:
        masked_from = tl.minimum(i * BLOCK_M, N_K)
        stop = tl.minimum((i + 1) * BLOCK_M, N_K)
    else:
        masked_from = N_K
        stop = N_K
    unmasked_stop = masked_from // BLOCK_N * BLOCK_N
    dq = _dq_tiles(dq, q, do, lse, delta, K, V, rows, 0, unmasked_stop, N_K, qk_scale,
                   HEAD_DIM, BLOCK_N, False, CAUSAL, ACC, PRECISION)
    dq = _dq_tiles(dq, q, do, lse, delta, K, V, rows, unmasked_stop, stop, N_K, qk_scale,
                   HEAD_DIM, BLOCK_N, True, CAUSAL, ACC, PRECISION)
    tl.store(DQ + q_at, (dq * scale).to(DQ.dtype.element_ty), mask=rows[:, None] < N_Q)


# --------------------------------------------------------------------------- autotuning


#: What the autotuner searches, per kernel: the options of BLOCK_M and of BLOCK_N, the
#: block streamed by the kernel's loop (at most HEAD_DIM rows), the tile size (entries)
#: from which 8 warps are tried, and the numbers of pipeline stages. Kept small: every
#: configuration compiles once per head width and dtype on a fresh machine.
SEARCH = {
    "forward": ((64, 128), (16, 32, 64, 128), "BLOCK_N", 128 * 128, (3, 4)),
    "dkdv": ((16, 32, 64), (64, 128), "BLOCK_M", 64 * 128, (2, 3)),
    "dq": ((64, 128), (16, 32, 64), "BLOCK_N", 64 * 128, (2, 3)),
}


def _configs(blocks_m, blocks_n, big_tile: int, stages):
    """Configurations as in Triton's fused-attention tutorial: 8 warps only for tiles of at
    least ``big_tile`` entries."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=n, num_warps=warps)
            for bm in blocks_m for bn in blocks_n for n in stages for warps in (4, 8)
            if warps == 4 or bm * bn >= big_tile]


def _prune(streamed: str):
    """Keep the configurations whose streamed block has at most HEAD_DIM rows (at least
    min(32, HEAD_DIM)) and no block longer than the longer sequence (else the smallest)."""
    def prune(configs, named_args, **kwargs):
        d = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        longest = max(named_args["N_Q"], named_args["N_K"])
        fits = [c for c in configs if min(32, d) <= c.kwargs[streamed] <= d]
        kept = [c for c in fits if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= longest]
        return kept or [min(fits, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return prune


def autotune_configs(kernel: str, d: int, n_q: int, n_k: int) -> list[dict]:
    """The configurations the autotuner times for one kernel and shape, on a GPU.

    Parameters
    ----------
    kernel : {"forward", "dkdv", "dq"}
        The forward kernel, or the backward's kernel for dK and dV or for dQ.
    d : int
        Head width.
    n_q, n_k : int
        Rows of queries and of keys.

    Returns
    -------
    list of dict
        ``{"BLOCK_M", "BLOCK_N", "num_stages", "num_warps"}`` per configuration. Triton's
        autotuner times each on the first call for a key ``(n_q, n_k, d, causal, dtype)``
        and keeps the fastest (cached on disk, in triton's cache); under the interpreter
        nothing is tuned.

    Raises
    ------
    KeyError
        If ``kernel`` is not one of the three.
    RuntimeError
        If triton is not installed.

    References
    ----------
    Tillet, Kung, Cox (2019), "Triton", section 5.3 (the auto-tuner).
    """
    require_triton()
    blocks_m, blocks_n, streamed, big_tile, stages = SEARCH[kernel]
    kept = _prune(streamed)(_configs(blocks_m, blocks_n, big_tile, stages),
                            {"N_Q": n_q, "N_K": n_k}, HEAD_DIM=d)
    return [{**c.kwargs, "num_stages": c.num_stages, "num_warps": c.num_warps} for c in kept]


_KERNELS = {"forward": _attention_forward, "dkdv": _attention_backward_dkdv,
            "dq": _attention_backward_dq}
def _tuning_bench(kernel_call, quantiles):
    # Shorter than do_bench's default 25 + 100 ms: a kernel of a few ms is timed to a few
    # percent, and a sweep over many shapes tunes in seconds per shape.
    from triton.testing import do_bench

    return do_bench(kernel_call, warmup=10, rep=40, quantiles=quantiles)


_TUNED = {}
if triton is not None and not INTERPRETED:
    for _name, (_blocks_m, _blocks_n, _streamed, _big_tile, _stages) in SEARCH.items():
        _TUNED[_name] = triton.autotune(   # the dtypes are added to the key by triton
            _configs(_blocks_m, _blocks_n, _big_tile, _stages),
            key=["N_Q", "N_K", "HEAD_DIM", "CAUSAL"], do_bench=_tuning_bench,
            cache_results=True, prune_configs_by={"early_config_prune": _prune(_streamed)},
        )(_KERNELS[_name])


def _launch(name: str, grid_rows: int, heads: int, blocks, args, **constants):
    """Launch kernel ``name`` of :data:`SEARCH` with ``blocks = (block_m, block_n)``, or
    autotuned when None: one program per block of ``grid_rows`` rows and per head."""
    grid_block = "BLOCK_N" if name == "dkdv" else "BLOCK_M"   # what a program owns
    if blocks is None:
        _TUNED[name][lambda meta: (triton.cdiv(grid_rows, meta[grid_block]), heads)](
            *args, **constants)
        return
    sizes = {"BLOCK_M": blocks[0], "BLOCK_N": blocks[1]}
    options = {} if INTERPRETED else {"num_stages": 2,
                                      "num_warps": 8 if blocks[0] * blocks[1] >= 128 * 128 else 4}
    _KERNELS[name][(triton.cdiv(grid_rows, sizes[grid_block]), heads)](
        *args, **sizes, **constants, **options)


def _accumulator(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _forward(q, k, v, causal: bool, blocks, precision: str):
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    out = torch.empty_like(q)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = torch.empty(batch, heads, n_q, dtype=lse_dtype, device=q.device)
    scale = 1.0 / math.sqrt(d)
    _launch("forward", n_q, batch * heads, blocks,
            (q, k, v, out, lse, n_q, n_k, scale * LOG2E), HEAD_DIM=d, CAUSAL=causal,
            ACC=_accumulator(q.dtype), PRECISION=precision)
    return out, lse


def _backward(q, k, v, out, lse, grad_out, causal: bool, blocks, precision: str):
    batch, heads, n_q, d = q.shape
    n_k = k.shape[2]
    acc = _accumulator(q.dtype)
    delta = torch.empty_like(lse)
    block_rows = 64 if blocks is None else blocks[0]
    _backward_delta[(triton.cdiv(n_q, block_rows), batch * heads)](
        out, grad_out, delta, n_q, HEAD_DIM=d, BLOCK_M=block_rows, ACC=acc)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    scale = 1.0 / math.sqrt(d)
    constants = {"HEAD_DIM": d, "CAUSAL": causal, "ACC": acc, "PRECISION": precision}
    _launch("dkdv", n_k, batch * heads, blocks,
            (q, k, v, grad_out, lse, delta, dk, dv, n_q, n_k, scale * LOG2E, scale),
            **constants)
    _launch("dq", n_q, batch * heads, blocks,
            (q, k, v, grad_out, lse, delta, dq, n_q, n_k, scale * LOG2E, scale), **constants)
    return dq, dk, dv


class FlashAttentionTriton(torch.autograd.Function):
    """The Triton kernels as an autograd function: saves Q, K, V, O and L, never the weights.

    ``FlashAttentionTriton.apply(q, k, v, causal, blocks, precision)`` takes contiguous,
    validated ``(batch, heads, n, d)`` tensors (use :func:`triton_flash_attention`, which
    checks them), ``blocks`` ``(block_q, block_k)`` or None (autotuned), and returns the
    output and ``L (batch, heads, tgt_len)`` (no gradient).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, blocks, precision):
        out, lse = _forward(q, k, v, causal, blocks, precision)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, blocks, precision)
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


def _validate_inputs(query, key, value, block_q, block_k, precision) -> None:
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
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision = {precision!r} not supported: use one of {PRECISIONS}")
    if precision == "tf32" and dtype != torch.float32:
        raise ValueError(f"precision 'tf32' is for float32 inputs, got {str(dtype).replace('torch.', '')}")
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
    precision: str | None = None,
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
        ``torch.nn.functional.scaled_dot_product_attention``); key tiles after a query
        block's diagonal are never loaded.
    block_q, block_k : int, optional
        B_r and B_c, rows of queries and of keys per tile, in 16, 32, 64, 128, used by all
        the kernels. Default: autotuned on a GPU (both None), :func:`default_blocks` under
        the interpreter. Lengths need not be multiples of them.
    return_lse : bool
        Also return ``L (batch, heads, tgt_len)``, the natural log-sum-exp of each row of
        scaled scores, in float32 (float64 for float64 inputs); it carries no gradient.
    precision : {"ieee", "tf32"}, optional
        ``input_precision`` of the products for float32 inputs. Default:
        :func:`default_precision` (TF32 on a GPU that has it, else exact).

    Returns
    -------
    output : (batch, heads, tgt_len, d)
        Differentiable (:class:`FlashAttentionTriton`: the backward recomputes the weights
        from ``L``).
    lse : (batch, heads, tgt_len), only with ``return_lse``

    Raises
    ------
    RuntimeError
        If triton is not installed (Linux x86_64 only), or was imported before
        :mod:`attncourse.kernels` on a machine without a GPU; from the backward pass, if it
        is asked for a graph (``create_graph=True``).
    ValueError
        If a tensor is not 4-D, the shapes do not fit (the message names all three), ``d``,
        a block size or ``precision`` is not supported, or the tensors are on the wrong
        device.
    TypeError
        If the dtypes differ or one is not supported here (bfloat16 under the interpreter),
        or ``is_causal`` is not a bool.

    References
    ----------
    Dao (2023), "FlashAttention-2", algorithms 1 and 2.
    """
    require_triton()
    if not isinstance(is_causal, bool):  # bool("no") is True: a typo would silently mask
        raise TypeError(f"is_causal must be True or False, got {is_causal!r}")
    _validate_inputs(query, key, value, block_q, block_k, precision)
    blocks = None
    if INTERPRETED or block_q is not None or block_k is not None:
        default_q, default_k = default_blocks(query.shape[-1], query.dtype)
        blocks = (int(block_q or default_q), int(block_k or default_k))
    precision = precision or default_precision(query.dtype)
    q, k, v = (t.contiguous() for t in (query, key, value))
    out, lse = FlashAttentionTriton.apply(q, k, v, is_causal, blocks, precision)
    return (out, lse) if return_lse else out


__all__ = [
    "BLOCK_SIZES",
    "COMPILED_DTYPES",
    "HEAD_DIMS",
    "INTERPRETED_DTYPES",
    "LOG2E",
    "PRECISIONS",
    "SEARCH",
    "FlashAttentionTriton",
    "autotune_configs",
    "default_blocks",
    "default_precision",
    "triton_flash_attention",
]

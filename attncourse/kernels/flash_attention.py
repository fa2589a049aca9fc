"""FlashAttention-2 as Triton kernels: one forward kernel, a backward pass of three.

Compiled and autotuned on a CUDA GPU, interpreted on CPU tensors without one
(:mod:`attncourse.kernels.triton_setup`). Chapter 8 teaches its steps: 16-bit inputs,
TF32, exp2, the two causal stages, autotuning, the atomic-free backward.
Source: Dao (2023), "FlashAttention-2", algorithms 1 and 2, section 3.1.
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
    """``(block_q, block_k)`` rows per tile for head width ``d`` where none are tuned.

    64 x 64, or 32 x 32 for rows of 512 bytes or more (float32 at d = 128), whose tiles
    would crowd on-chip memory. Source: Dao (2023), "FlashAttention-2", section 3.3.
    """
    row_bytes = d * torch.finfo(dtype).bits // 8 if dtype.is_floating_point else d
    return (32, 32) if row_bytes >= 512 else (64, 64)


def default_precision(dtype: torch.dtype) -> str:
    """The ``input_precision`` of the kernels' products for inputs of ``dtype``.

    ``"tf32"`` for float32 compiled on compute capability 8.0 or above, else ``"ieee"``
    (exact). Source: NVIDIA (2020), "NVIDIA A100 Tensor Core GPU Architecture", "TF32".
    """
    if dtype != torch.float32 or INTERPRETED or not torch.cuda.is_available():
        return "ieee"
    return "tf32" if torch.cuda.get_device_capability() >= (8, 0) else "ieee"


# --------------------------------------------------------------------------- forward


@jit
def _kv_tile(K, V, begin, N_K, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """Key positions ``begin .. begin + BLOCK_N`` and their K, V rows ``(BLOCK_N, HEAD_DIM)``;
    ``MASKED``: the tile may run past ``N_K`` (zeros there)."""
    cols = begin + tl.arange(0, BLOCK_N)
    kv_at = cols[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    if MASKED:
        k = tl.load(K + kv_at, mask=cols[:, None] < N_K, other=0.0)
        v = tl.load(V + kv_at, mask=cols[:, None] < N_K, other=0.0)
    else:
        k = tl.load(K + kv_at)
        v = tl.load(V + kv_at)
    return cols, k, v


@jit
def _forward_tiles(acc, l, m, q, K, V, rows, start, stop, N_K, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                   CAUSAL: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Online softmax of a query block, key tiles [start, stop) (alg. 1, lines 6-11)."""
    for begin in range(start, stop, BLOCK_N):
        cols, k, v = _kv_tile(K, V, begin, N_K, HEAD_DIM, BLOCK_N, MASKED)
        # log2 units: m is the running maximum of s, l the running sum of exp2(s - m)
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
    """dK_j and dV_j of one key block, summed over the query tiles [start, stop)."""
    # Transposed tiles (key rows first): P^T and dS^T need no transpose. Query rows past
    # N_Q load as zeros and add exactly zero (their dO is zero).
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
    for begin in range(start, stop, BLOCK_N):
        cols, k, v = _kv_tile(K, V, begin, N_K, HEAD_DIM, BLOCK_N, MASKED)
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
    """Configs as in Triton's fused-attention tutorial; 8 warps from ``big_tile``."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=n, num_warps=warps)
            for bm in blocks_m for bn in blocks_n for n in stages for warps in (4, 8)
            if warps == 4 or bm * bn >= big_tile]


def _prune(streamed: str):
    """Pruner: streamed block of min(32, d) to d rows, none past the longer sequence."""
    def prune(configs, named_args, **kwargs):
        d = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        longest = max(named_args["N_Q"], named_args["N_K"])
        fits = [c for c in configs if min(32, d) <= c.kwargs[streamed] <= d]
        kept = [c for c in fits if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= longest]
        return kept or [min(fits, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return prune


def autotune_configs(kernel: str, d: int, n_q: int, n_k: int) -> list[dict]:
    """The configurations the autotuner times for one kernel and shape, on a GPU.

    ``kernel``: ``"forward"``, ``"dkdv"`` or ``"dq"``; ``d``: head width; ``n_q``,
    ``n_k``: rows. Returns ``{"BLOCK_M", "BLOCK_N", "num_stages", "num_warps"}`` dicts;
    Triton times each on the first call per ``(n_q, n_k, d, causal, dtype)`` and caches
    the fastest. Raises KeyError for another ``kernel``, RuntimeError without triton.
    Source: Tillet, Kung, Cox (2019), "Triton", section 5.3.
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
    """Launch kernel ``name``, a program per row block and head; None blocks: tuned."""
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
    """The kernels as an autograd function: saves Q, K, V, O and L, never the weights.

    ``apply(q, k, v, causal, blocks, precision)`` takes ``(batch, heads, n, d)`` tensors
    checked by :func:`triton_flash_attention`; returns the output and L (no gradient).
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

    Shapes: query ``(batch, heads, tgt_len, d)``, key and value ``(batch, heads,
    src_len, d)``; one dtype and device, ``d`` in :data:`HEAD_DIMS`. On a GPU: CUDA
    float32, float16 or bfloat16; interpreted: CPU float32, float16 or float64.
    ``is_causal``: query i sees keys j <= i (top-left, as SDPA). ``block_q``,
    ``block_k``: rows per tile in :data:`BLOCK_SIZES`; both None: autotuned on a GPU,
    else :func:`default_blocks`. ``precision``: ``"ieee"`` or ``"tf32"`` for float32,
    default :func:`default_precision`.
    Returns the output ``(batch, heads, tgt_len, d)``, differentiable; with
    ``return_lse`` also ``L (batch, heads, tgt_len)``, each row's natural log-sum-exp in
    float32 (float64 for float64), no gradient.
    Raises ValueError for a shape, ``d``, block size, ``precision`` or device the
    kernels do not take; TypeError for mixed or unsupported dtypes (bfloat16
    interpreted) or a non-bool ``is_causal``; RuntimeError without triton, or for
    ``create_graph=True``.
    Source: Dao (2023), "FlashAttention-2", algorithms 1 and 2.
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

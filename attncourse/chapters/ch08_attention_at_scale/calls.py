"""How chapter 8's kernel check launches the learner's Triton kernel.

The launcher holds nothing of the check (no case, no expected value): in the grade of
record it runs in the answer's process, beside the kernel
(:func:`attncourse.checks.core.calling`).
"""

from __future__ import annotations

import torch


def launch_forward_kernel(kernel, q, k, v, block_m: int = 32, block_n: int = 32) -> torch.Tensor:
    """Run a forward kernel with the chapter's signature, causal; return the output O.

    The kernel is called as ``kernel[grid](Q, K, V, O, L, N_Q, N_K, scale, D=d,
    BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=True)`` on contiguous float32
    ``(batch, heads, n, d)`` tensors, with one program per (query block, batch x head).
    """
    batch, heads, n_q, d = q.shape
    out = torch.zeros_like(q)
    lse = torch.zeros(batch, heads, n_q, device=q.device)
    grid = (-(-n_q // block_m), batch * heads)
    kernel[grid](q.contiguous(), k.contiguous(), v.contiguous(), out, lse, n_q, k.shape[2],
                 1 / d ** 0.5, D=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=True)
    return out


__all__ = ["launch_forward_kernel"]

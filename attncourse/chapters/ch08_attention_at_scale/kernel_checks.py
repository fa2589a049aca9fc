"""Checks for the Triton kernel exercises of the attention-at-scale chapter.

- :func:`check_flash_hbm_bytes`: the learner predicts the bytes the chapter's forward kernel
  moves between HBM and the chip for given block sizes;
- :func:`check_causal_early_exit`: the learner's causal kernel must stop its loop over key
  blocks at the diagonal. A tile that is loaded, even if fully masked, shows: the keys and
  values no query may see are NaN in one hidden case, and 0 * NaN = NaN in P V.

References
----------
Dao (2023), "FlashAttention-2", algorithm 1; Dao et al. (2022), section 3.2 (HBM accesses).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attncourse.chapters.ch08_attention_at_scale.calls import launch_forward_kernel
from attncourse.checks.core import (
    Case,
    CheckResult,
    buggy_variants,
    calling,
    remote_answer,
    run_cases,
    variant_hint,
)
from attncourse.checks.guard import ATTENTION, SOFTMAX, allowing

#: Launchers of a Triton kernel: compiled (``JITFunction.run``) or interpreted on the CPU.
TRITON_LAUNCH = ("triton.runtime.jit.JITFunction.run", "triton.runtime.interpreter.GridExecutor.__call__",
                 "triton.runtime.interpreter.InterpretedFunction.run")

# attncourse.kernels is imported inside the functions: importing it imports triton and sets
# TRITON_INTERPRET on a CPU-only machine, which `import attncourse.checks` should not do.

# --------------------------------------------------------------------------- HBM traffic

BYTES_HINT = (
    "Follow the kernel's loads and stores: each program, one per query block (a last, shorter "
    "block counts), reads its "
    "block of Q once and all n rows of K and of V; O is written once; L (float32, 4 bytes) "
    "once per row. Masked rows of a short last block are not loaded."
)
BYTES_TEXTBOOK_HINT = (
    "That is the textbook count (4nd + 4n^2 elements, the n x n scores written and read): the "
    "kernel never writes the scores. Count its tl.load and tl.store instead."
)
BYTES_KV_ONCE_HINT = (
    "K and V are not read once: every query block's program reads all of them, so they are "
    "read once per query block."
)
BYTES_BLOCK_K_HINT = (
    "The number of passes over K and V is the number of *query* blocks, a last partial one "
    "included: "
    "block_k only sets how many key rows each step loads, not how many are loaded in all."
)
BYTES_NO_CEIL_HINT = (
    "A last, shorter query block is a whole program that reads all of K and V: round the "
    "number of query blocks up (math.ceil), never down and never to a fraction."
)
BYTES_NO_LSE_HINT = "Do not forget L: the kernel writes one float32 (4 bytes) per query row."
BYTES_LSE_SIZE_HINT = "L is stored in float32 whatever the inputs: 4 bytes per row, not bytes_per_element."
BYTES_PADDED_HINT = (
    "Masked lanes are not loaded: count the n real rows, not the rows of whole padded blocks."
)


def _diagnose_bytes(got: Any, case: Case) -> str | None:
    n, d, block_q, block_k, size = (case.args[key] for key in
                                    ("n", "d", "block_q", "block_k", "bytes_per_element"))
    blocks = -(-n // block_q)
    variants = buggy_variants([
        (BYTES_TEXTBOOK_HINT, lambda: (4 * n * d + 4 * n * n) * size),
        (BYTES_TEXTBOOK_HINT, lambda: (4 * n * d + 4 * n * n) * size + 4 * n),
        (BYTES_KV_ONCE_HINT, lambda: 4 * n * d * size + 4 * n),
        (BYTES_BLOCK_K_HINT, lambda: (2 * n * d + 2 * n * d * -(-n // block_k)) * size + 4 * n),
        (BYTES_NO_CEIL_HINT, lambda: (2 * n * d + 2 * n * d * n / block_q) * size + 4 * n),
        (BYTES_NO_LSE_HINT, lambda: (2 * n * d + 2 * n * d * blocks) * size),
        (BYTES_LSE_SIZE_HINT, lambda: (2 * n * d + 2 * n * d * blocks) * size + size * n),
        (BYTES_PADDED_HINT, lambda: (2 * blocks * block_q * d + 2 * blocks * -(-n // block_k) * block_k * d)
         * size + 4 * blocks * block_q),
    ])
    return variant_hint(got, variants, case.expected, case)


def hbm_bytes_cases(seed: int | None = None) -> list[Case]:
    """Hidden cases of :func:`check_flash_hbm_bytes`; with ``seed`` (the grade of record's), two
    more sizes and tiles drawn from it."""
    from attncourse.kernels import forward_hbm_bytes

    settings = [
        ("n = 1024, tiles of 64 x 64, bfloat16", 1024, 64, 64, 64, 2),
        ("query blocks twice as large (128)", 1024, 64, 128, 64, 2),
        ("key blocks twice as large (128)", 1024, 64, 64, 128, 2),
        ("n = 1000, not a multiple of block_q = 128", 1000, 128, 128, 32, 2),
        ("float32, n = 200, tiles of 32 x 32", 200, 32, 32, 32, 4),
        ("one query block longer than the sequence", 50, 16, 64, 16, 4),
    ]
    if seed is not None:
        rng = np.random.default_rng(seed)
        for _ in range(2):
            n, d = int(rng.integers(1, 5000)), int(rng.choice([16, 32, 64, 128]))
            block_q, block_k, size = (int(rng.choice([16, 32, 64, 128])), int(rng.choice([16, 32, 64, 128])),
                                      int(rng.choice([2, 4])))
            settings.append((f"drawn when graded: n = {n}, d = {d}, tiles of {block_q} x {block_k}, "
                             f"{size} bytes an element", n, d, block_q, block_k, size))
    cases = []
    for description, n, d, block_q, block_k, size in settings:
        args = {"n": n, "d": d, "block_q": block_q, "block_k": block_k, "bytes_per_element": size}
        expected = forward_hbm_bytes(n, n, d, block_q, block_k, causal=False, bytes_per_element=size)
        cases.append(Case(description, args, np.asarray(float(expected)), atol=0.5, rtol=0,
                          hint=BYTES_HINT, diagnose=_diagnose_bytes))
    return cases


@allowing("Python arithmetic (math.ceil).")
def check_flash_hbm_bytes(fn) -> CheckResult:
    """Check a learner's count of the bytes the chapter's forward kernel moves to and from HBM.

    The learner's function is called as ``fn(n, d, block_q, block_k, bytes_per_element)``
    for one (batch, head) of self-attention without a causal mask (``n`` queries and keys,
    head width ``d``, tiles of ``block_q x block_k``, ``bytes_per_element`` of Q, K, V, O)
    and returns the number of bytes: Q read once, K and V read by each of the
    ``ceil(n / block_q)`` programs, O written once, and L written once in float32.
    Reference: :func:`attncourse.kernels.forward_hbm_bytes`.

    Examples
    --------
    >>> import math
    >>> def count(n, d, block_q, block_k, bytes_per_element):
    ...     return (2 * n * d + 2 * n * d * math.ceil(n / block_q)) * bytes_per_element + 4 * n
    >>> check_flash_hbm_bytes(count).passed
    True
    """
    return run_cases("check_flash_hbm_bytes", fn, hbm_bytes_cases())


# --------------------------------------------------------------------------- causal early exit

EXIT_HINT = (
    "Keep the kernel's arithmetic and masks as they were, and end the loop over key blocks once "
    "it has covered the diagonal block of this program's query rows: with CAUSAL, the loop's end "
    'is computed in the kernel from the program id and the block size of the queries, never past '
    'N_K.'
)
EXIT_NAN_HINT = (
    'Your output has NaN: your kernel still loads key blocks after the diagonal. This case puts '
    'NaN in the keys and values no query may see, and a loaded tile multiplies them by 0 (0 * NaN'
    " = NaN). With CAUSAL, end the loop at the last key of this program's query block."
)
EXIT_NOT_KERNEL_HINT = (
    "Pass your kernel itself, decorated with triton.jit: "
    "check_causal_early_exit(my_causal_kernel)."
)


def _causal_reference(q, k, v):
    n_q = q.shape[-2]
    return torch.nn.functional.scaled_dot_product_attention(q, k[..., :n_q, :], v[..., :n_q, :],
                                                            is_causal=True)


def _diagnose_exit(got: Any, case: Case) -> str | None:
    poisoned = bool(torch.isnan(case.args["k"]).any())
    if poisoned and isinstance(got, np.ndarray) and got.dtype.kind == "f" and np.isnan(got).any():
        return EXIT_NAN_HINT
    return EXIT_HINT


def early_exit_cases(seed: int = 0) -> list[Case]:
    """Hidden cases of :func:`check_causal_early_exit`: float32 tensors on the kernels' device."""
    from attncourse.kernels import kernel_device

    generator = torch.Generator().manual_seed(seed)
    device = kernel_device()
    cases = []
    for description, n_q, n_k, blocks, poison in [
        ("n = 64, blocks of 32 x 32", 64, 64, (32, 32), False),
        ("n = 50, a short last block", 50, 50, (32, 32), False),
        ("query blocks of 32, key blocks of 16", 64, 64, (32, 16), False),
        ("64 queries, 128 keys: keys 64..127 (NaN) are seen by no query", 64, 128, (32, 32), True),
    ]:
        q = torch.randn(1, 2, n_q, 16, generator=generator)
        k, v = (torch.randn(1, 2, n_k, 16, generator=generator) for _ in range(2))
        expected = _causal_reference(q, k, v).numpy()
        if poison:
            k[..., n_q:, :], v[..., n_q:, :] = float("nan"), float("nan")
        args = {"q": q.to(device), "k": k.to(device), "v": v.to(device)}
        kwargs = {"block_m": blocks[0], "block_n": blocks[1]}
        cases.append(Case(description, args, expected, kwargs=kwargs,
                          atol=2e-5 if device.type == "cpu" else 2e-3, rtol=0, hint=EXIT_HINT,
                          diagnose=_diagnose_exit))
    return cases


@allowing("a kernel decorated with triton.jit, written with triton.language (tl.load, tl.dot, "
          "tl.store...).",
          library=SOFTMAX + ATTENTION + ("torch:matmul", "torch:bmm", "torch:einsum"),
          must_call=TRITON_LAUNCH,
          must_call_message="no Triton kernel ran: the check launches your kernel as "
          "kernel[grid](...), and that launch must run a @jit kernel",
          calls=("attncourse.chapters.ch08_attention_at_scale.calls:launch_forward_kernel",))
def check_causal_early_exit(kernel) -> CheckResult:
    """Check a learner's causal Triton kernel: right output, and no key block after the diagonal read.

    ``kernel`` is a ``@triton.jit`` function with the signature of the chapter's
    ``flash_forward_kernel`` ``(Q, K, V, O, L, N_Q, N_K, scale, D, BLOCK_M, BLOCK_N,
    CAUSAL)``; it is launched with ``CAUSAL=True`` (:func:`launch_forward_kernel`) on float32
    ``(1, 2, n_q, 16)`` queries and ``(1, 2, n_k, 16)`` keys and values on the kernels'
    device (CPU under Triton's interpreter), and its output must equal SDPA's with
    ``is_causal`` (top-left aligned). In the last case the keys and values after position
    ``n_q`` are NaN: no query may see them, so a kernel that never loads their tiles returns
    finite values, and one that loads and masks them returns NaN.

    Without triton (Linux x86_64 only) the check does not run and says so.
    """
    from attncourse.kernels.triton_setup import MISSING_MESSAGE, TRITON_AVAILABLE

    name = "check_causal_early_exit"
    if not TRITON_AVAILABLE:
        return CheckResult(name=name, passed=False, cases_passed=0, cases_total=4,
                           message=f"not run: {MISSING_MESSAGE}")
    # A Triton kernel is an object of triton's own classes (JITFunction, or the
    # interpreter's InterpretedFunction); anything else with `.fn` and `[grid]` is not one.
    # (An answer graded in its own process is checked there: its launch must run a kernel.)
    if remote_answer(kernel) is None and not (hasattr(kernel, "__getitem__") and hasattr(kernel, "fn")
                                              and type(kernel).__module__.startswith("triton.")):
        return CheckResult(name=name, passed=False, cases_passed=0, cases_total=4,
                           message=f"expected a @jit kernel, got {type(kernel).__name__}",
                           hint=EXIT_NOT_KERNEL_HINT)

    # The hand-off rules (``@allowing`` above) also require that a Triton launcher
    # ran, and look at the cells of the kernel's own function.
    return run_cases(name, calling(kernel, launch_forward_kernel), early_exit_cases(),
                     learner=getattr(kernel, "fn", kernel))


__all__ = ["TRITON_LAUNCH", "check_causal_early_exit", "check_flash_hbm_bytes", "early_exit_cases",
           "hbm_bytes_cases", "launch_forward_kernel"]

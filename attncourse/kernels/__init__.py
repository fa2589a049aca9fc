"""Attention kernels written in Triton, as they run on GPUs: FlashAttention-2, forward and backward.

This is the maths layer, like :mod:`attncourse.functional`: it imports torch and triton
only. Importing it sets ``TRITON_INTERPRET=1`` on a machine without a CUDA GPU (unless the
variable is already set), *before* it imports triton, so that the kernels run on the CPU
under Triton's interpreter; on a GPU they compile. See :mod:`attncourse.kernels.triton_setup`
for the rule, and import this package before anything that imports triton.

>>> from attncourse.kernels import triton_flash_attention, describe
>>> print(describe())  # doctest: +SKIP
triton 3.9.0: TRITON_INTERPRET=1, kernels run on the CPU under Triton's interpreter (exact, slow)

Without triton (it installs on Linux x86_64 only) the package still imports; calling a
kernel raises a one-line ``RuntimeError``, and :data:`TRITON_AVAILABLE` is False.
"""

# Eager, unlike the names below: it sets TRITON_INTERPRET before anything defines a kernel (see above).
from attncourse.kernels import triton_setup as _triton_setup  # noqa: F401
from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "flash_attention": ("BLOCK_SIZES", "HEAD_DIMS", "PRECISIONS", "SEARCH", "FlashAttentionTriton",
        "autotune_configs", "default_blocks", "default_precision", "triton_flash_attention"),
    "triton_setup": ("INTERPRETED", "TRITON_AVAILABLE", "describe", "kernel_device", "require_triton"),
    "traffic": ("LSE_BYTES", "forward_hbm_bytes", "keys_visited"),
})

__all__ = [
    "BLOCK_SIZES",
    "HEAD_DIMS",
    "INTERPRETED",
    "LSE_BYTES",
    "PRECISIONS",
    "SEARCH",
    "TRITON_AVAILABLE",
    "FlashAttentionTriton",
    "autotune_configs",
    "default_blocks",
    "default_precision",
    "describe",
    "forward_hbm_bytes",
    "kernel_device",
    "keys_visited",
    "require_triton",
    "triton_flash_attention",
]

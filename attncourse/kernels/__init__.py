"""Attention kernels in Triton: FlashAttention-2, forward and backward (chapter 8).

The maths layer, like :mod:`attncourse.functional`. Import it before triton: without a
CUDA GPU it sets ``TRITON_INTERPRET=1`` (see :mod:`attncourse.kernels.triton_setup`).
Without triton it imports; :data:`TRITON_AVAILABLE` is False, calling a kernel raises.
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

"""Dequantisation of llama.cpp's Q4_1 and Q8_0 blocks: integer codes back to float32 weights.

A GGUF file stores most weight matrices *block-quantised*: each row is cut into
blocks of 32 consecutive weights, and each block keeps a few float16 numbers plus
one small integer code per weight (the layouts are ggml's ``block_q4_1`` and
``block_q8_0`` in ``ggml/src/ggml-common.h``; the reference dequantisers are
``dequantize_row_q4_1`` and ``dequantize_row_q8_0`` in ``ggml/src/ggml-quants.c``
of llama.cpp, https://github.com/ggml-org/llama.cpp):

=====  =====  ===============================================  ==================
type   bytes  one block of 32 weights                           weight j
=====  =====  ===============================================  ==================
Q4_1   20     float16 scale d, float16 minimum m,               w_j = d * q_j + m
              16 bytes holding 32 codes q_j of 4 bits (0..15)
Q8_0   34     float16 scale d, 32 signed bytes q_j (-128..127)  w_j = d * q_j
=====  =====  ===============================================  ==================

Q4_1 spends 20 bytes on 32 weights, 5 bits per weight (float32: 32 bits); Q8_0
8.5 bits. In a Q4_1 block byte i (i = 0..15) holds two codes: its low four bits
are weight i, its high four bits weight i + 16 (not weights 2i and 2i + 1).
Q4_1's minimum m lets a block whose weights are all positive (or all negative) use
its 16 levels on the range it spans, [m, m + 15 d], where Q4_0 and Q8_0 are
symmetric around zero. It is the same min-max ("asymmetric") scheme as chapter
10's int8 cache, with one scale and minimum per 32 weights instead of per token.

The functions take the raw bytes as a ``uint8`` tensor and compute in float32,
exactly as ``gguf.quants.dequantize`` (llama.cpp's Python package) does: the tests
check the results bit for bit against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Weights per block (ggml's QK4_1 and QK8_0).
BLOCK_SIZE = 32
#: Bytes of one block of each type; F32 and F16 are plain arrays (one "block" is one weight).
BYTES_PER_BLOCK = {"Q4_1": 2 + 2 + BLOCK_SIZE // 2, "Q8_0": 2 + BLOCK_SIZE}
#: Weights per block of each type.
WEIGHTS_PER_BLOCK = {"F32": 1, "F16": 1, "Q4_1": BLOCK_SIZE, "Q8_0": BLOCK_SIZE}
#: Bytes per block, for every type this module reads.
TYPE_BYTES = {"F32": 4, "F16": 2, **BYTES_PER_BLOCK}
#: The types :func:`dequantize` reads.
SUPPORTED_TYPES = tuple(TYPE_BYTES)


def bits_per_weight(type_name: str) -> float:
    """Storage per weight in bits: 32 (F32), 16 (F16), 5 (Q4_1), 8.5 (Q8_0)."""
    _validate_type(type_name)
    return 8 * TYPE_BYTES[type_name] / WEIGHTS_PER_BLOCK[type_name]


@dataclass(frozen=True)
class BlockParts:
    """What a block-quantised tensor stores, block by block (``n_blocks`` blocks of 32 weights).

    Attributes
    ----------
    scale : (n_blocks, 1) float32
        The float16 scale d of each block.
    minimum : (n_blocks, 1) float32 or None
        The float16 minimum m of each block (Q4_1); None for Q8_0, which has none.
    codes : (n_blocks, 32) float32
        The integer code q_j of each weight, in the order of the weights: 0..15 for
        Q4_1, -128..127 for Q8_0.
    """

    scale: torch.Tensor
    minimum: torch.Tensor | None
    codes: torch.Tensor

    def weights(self) -> torch.Tensor:
        """``(n_blocks, 32)`` float32: d * q (+ m), in that order of float32 operations."""
        scaled = self.scale * self.codes
        return scaled if self.minimum is None else scaled + self.minimum


def _validate_type(type_name: str) -> None:
    if type_name not in TYPE_BYTES:
        raise ValueError(
            f"tensor type {type_name!r} is not read here: supported types are "
            f"{', '.join(SUPPORTED_TYPES)}"
        )


def _blocks(raw: torch.Tensor, type_name: str) -> torch.Tensor:
    """The bytes as ``(n_blocks, bytes_per_block)``, after checking their dtype and length."""
    if raw.dtype != torch.uint8:
        raise TypeError(
            f"{type_name} data must be raw bytes (torch.uint8), got {raw.dtype}"
        )
    size = TYPE_BYTES[type_name]
    if raw.dim() == 0 or raw.shape[-1] % size:
        raise ValueError(
            f"{type_name} rows must be whole blocks of {size} bytes, got raw shape {tuple(raw.shape)}"
        )
    return raw.reshape(-1, size)


def _float16(two_bytes: torch.Tensor) -> torch.Tensor:
    """``(n, 2)`` little-endian bytes -> ``(n, 1)`` float32 (the float16 value, exactly)."""
    return two_bytes.contiguous().view(torch.float16).float()


def q4_1_parts(raw: torch.Tensor) -> BlockParts:
    """Split Q4_1 bytes into each block's scale, minimum and 32 four-bit codes.

    Parameters
    ----------
    raw : (..., n_bytes) uint8
        Whole ``block_q4_1`` blocks of 20 bytes: float16 d, float16 m, 16 bytes of codes.

    Returns
    -------
    BlockParts
        ``codes[:, i]`` is the low nibble of byte i and ``codes[:, i + 16]`` its high nibble.

    Raises
    ------
    TypeError, ValueError
        If ``raw`` is not uint8 or its last dimension is not a whole number of blocks.
    """
    blocks = _blocks(raw, "Q4_1")
    packed = blocks[:, 4:]
    codes = torch.cat((packed & 0x0F, packed >> 4), dim=1).float()
    return BlockParts(
        scale=_float16(blocks[:, 0:2]), minimum=_float16(blocks[:, 2:4]), codes=codes
    )


def q8_0_parts(raw: torch.Tensor) -> BlockParts:
    """Split Q8_0 bytes into each block's scale and 32 signed eight-bit codes.

    Parameters
    ----------
    raw : (..., n_bytes) uint8
        Whole ``block_q8_0`` blocks of 34 bytes: float16 d, 32 int8 codes.

    Returns
    -------
    BlockParts
        ``minimum`` is None.

    Raises
    ------
    TypeError, ValueError
        If ``raw`` is not uint8 or its last dimension is not a whole number of blocks.
    """
    blocks = _blocks(raw, "Q8_0")
    codes = blocks[:, 2:].contiguous().view(torch.int8).float()
    return BlockParts(scale=_float16(blocks[:, 0:2]), minimum=None, codes=codes)


def dequantize(raw: torch.Tensor, type_name: str) -> torch.Tensor:
    """Weights in float32 from a tensor's stored bytes.

    Parameters
    ----------
    raw : (..., n_bytes) uint8
        The stored bytes, one row of the tensor per leading index (as ``gguf.GGUFReader``
        gives a quantised tensor's ``data``).
    type_name : str
        The GGML type: ``"F32"``, ``"F16"``, ``"Q4_1"`` or ``"Q8_0"``.

    Returns
    -------
    (..., n_weights) float32
        ``n_weights = n_bytes / bytes_per_block * weights_per_block`` (e.g. 20 bytes ->
        32 weights for Q4_1).

    Raises
    ------
    ValueError
        If ``type_name`` is not one of those, or the rows are not whole blocks.
    TypeError
        If ``raw`` is not uint8.

    References
    ----------
    llama.cpp, ``ggml/src/ggml-quants.c``: ``dequantize_row_q4_1``, ``dequantize_row_q8_0``;
    ``gguf-py/gguf/quants.py``: ``Q4_1.dequantize_blocks``, ``Q8_0.dequantize_blocks``.
    """
    _validate_type(type_name)
    if type_name in ("F32", "F16"):
        _blocks(raw, type_name)
        return (
            raw.contiguous()
            .view(torch.float32 if type_name == "F32" else torch.float16)
            .float()
        )
    parts = q4_1_parts(raw) if type_name == "Q4_1" else q8_0_parts(raw)
    n_weights = raw.shape[-1] // BYTES_PER_BLOCK[type_name] * BLOCK_SIZE
    return parts.weights().reshape(*raw.shape[:-1], n_weights)

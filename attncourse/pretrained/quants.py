"""Dequantisation of llama.cpp's Q4_1 and Q8_0 blocks of 32 weights to float32.

Q4_1: w_j = d q_j + m, 4-bit codes (5 bits per weight); Q8_0: w_j = d q_j (8.5 bits).
Source: llama.cpp, ``ggml/src/ggml-quants.c``, ``dequantize_row_q4_1`` and ``_q8_0``.
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
    """d and m (n_blocks, 1; m None in Q8_0) and codes q (n_blocks, 32), per block."""

    scale: torch.Tensor
    minimum: torch.Tensor | None
    codes: torch.Tensor

    def weights(self) -> torch.Tensor:
        """(n_blocks, 32) float32: d * q (+ m), in that order of float32 operations."""
        scaled = self.scale * self.codes
        return scaled if self.minimum is None else scaled + self.minimum


def _validate_type(type_name: str) -> None:
    if type_name not in TYPE_BYTES:
        raise ValueError(
            f"tensor type {type_name!r} is not read here: supported types are "
            f"{', '.join(SUPPORTED_TYPES)}"
        )


def _blocks(raw: torch.Tensor, type_name: str) -> torch.Tensor:
    """The bytes as (n_blocks, bytes_per_block), dtype and length checked."""
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
    """(n, 2) little-endian bytes -> (n, 1) float32, the float16 value exactly."""
    return two_bytes.contiguous().view(torch.float16).float()


def q4_1_parts(raw: torch.Tensor) -> BlockParts:
    """Scale, minimum and 32 four-bit codes of each 20-byte Q4_1 block.

    ``raw`` is (..., n_bytes) uint8. Byte i holds codes i (low nibble) and i + 16
    (high). Raises ``TypeError`` unless uint8, ``ValueError`` unless whole blocks.
    """
    blocks = _blocks(raw, "Q4_1")
    packed = blocks[:, 4:]
    codes = torch.cat((packed & 0x0F, packed >> 4), dim=1).float()
    return BlockParts(
        scale=_float16(blocks[:, 0:2]), minimum=_float16(blocks[:, 2:4]), codes=codes
    )


def q8_0_parts(raw: torch.Tensor) -> BlockParts:
    """Scale and 32 signed codes of each 34-byte Q8_0 block of ``raw`` (..., n_bytes).

    Raises ``TypeError`` unless uint8, ``ValueError`` unless whole blocks.
    """
    blocks = _blocks(raw, "Q8_0")
    codes = blocks[:, 2:].contiguous().view(torch.int8).float()
    return BlockParts(scale=_float16(blocks[:, 0:2]), minimum=None, codes=codes)


def dequantize(raw: torch.Tensor, type_name: str) -> torch.Tensor:
    """Weights (..., n_weights) float32 from stored bytes ``raw`` (..., n_bytes) uint8.

    ``type_name`` is F32, F16, Q4_1 or Q8_0. Raises ``ValueError`` for another type or
    rows that are not whole blocks, ``TypeError`` unless uint8.
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

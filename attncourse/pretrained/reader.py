"""Reading a GGUF file: metadata as a LlamaConfig, tensors as float32.

Shapes are torch's (GGUF's reversed), names GGUF's. Source: ggml's ``docs/gguf.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attncourse.pretrained.config import GGUFError, LlamaConfig, expected_shapes
from attncourse.pretrained.quants import (
    SUPPORTED_TYPES,
    TYPE_BYTES,
    WEIGHTS_PER_BLOCK,
    dequantize,
)
from attncourse.runtime import quiet_progress

MAGIC = b"GGUF"
#: The pinned gguf package, for the message when it is missing.
GGUF_PIN = "gguf==0.19.0"


def _gguf():
    """The ``gguf`` package, or a ModuleNotFoundError saying how to install it."""
    try:
        import gguf
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"reading GGUF files needs llama.cpp's gguf package: pip install {GGUF_PIN}",
            name="gguf",
        ) from error
    return gguf


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: name, GGML type, torch shape, bytes stored."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    n_bytes: int

    @property
    def n_weights(self) -> int:
        return int(np.prod(self.shape))


class GGUFFile:
    """An opened GGUF file: ``metadata``, ``config``, ``tensors_info``."""

    def __init__(self, path: Path, reader) -> None:
        self.path = path
        self.metadata = {
            name: field.contents()
            for name, field in reader.fields.items()
            if not name.startswith("GGUF.")
        }
        self.tensors_info = {
            t.name: TensorInfo(
                t.name,
                t.tensor_type.name,
                tuple(int(n) for n in reversed(t.shape.tolist())),
                int(t.n_bytes),
            )
            for t in reader.tensors
        }
        self._offsets = {t.name: int(t.data_offset) for t in reader.tensors}
        # Only the memory map is kept: the reader's tables hold one numpy array per
        # token of the vocabulary (about 170 MB for a vocabulary of 49,152).
        self._data = reader.data
        self.config = LlamaConfig.from_metadata(
            self.metadata, frozenset(self.tensors_info)
        )

    def raw(self, name: str) -> torch.Tensor:
        """A tensor's stored bytes, (rows, bytes_per_row) uint8 (else KeyError)."""
        info = self._info(name)
        start = self._offsets[name]
        data = np.array(self._data[start : start + info.n_bytes], dtype=np.uint8)
        rows = info.n_weights // info.shape[-1]
        return torch.from_numpy(data).reshape(rows, -1)

    def tensor(self, name: str) -> torch.Tensor:
        """A tensor as float32 in torch's shape (``KeyError`` if absent)."""
        info = self._info(name)
        return dequantize(self.raw(name), info.type_name).reshape(info.shape)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor (GGUF name -> float32), checked against :func:`expected_shapes`.

        Raises ``GGUFError`` if a tensor is missing or has another shape.
        """
        shapes = expected_shapes(self.config)
        for name, shape in shapes.items():
            if name not in self.tensors_info:
                raise GGUFError(
                    f"{self.path.name} has no tensor {name}, which its configuration implies"
                )
            if self.tensors_info[name].shape != shape:
                raise GGUFError(
                    f"{self.path.name}: tensor {name} has shape {self.tensors_info[name].shape}, "
                    f"its configuration implies {shape}"
                )
        names = quiet_progress(shapes, desc="reading the model", unit="tensor")
        return {name: self.tensor(name) for name in names}

    def _info(self, name: str) -> TensorInfo:
        if name not in self.tensors_info:
            some = ", ".join(list(self.tensors_info)[:3])
            raise KeyError(
                f"{self.path.name} has no tensor {name!r} (it has {some}, ...)"
            )
        return self.tensors_info[name]

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, {len(self.tensors_info)} tensors, {self.config})"


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    """Open a GGUF Llama file; tensors are read on demand via a memory map.

    Raises ``FileNotFoundError``; ``GGUFError`` naming the file if it is not GGUF, is
    damaged, has a type other than F32/F16/Q4_1/Q8_0 or is not Llama;
    ``ModuleNotFoundError`` without ``gguf``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    size = path.stat().st_size
    with path.open("rb") as stream:
        head = stream.read(len(MAGIC))
    if head != MAGIC:
        raise GGUFError(
            f"{path.name} is not a GGUF file (it starts with {head!r}, not {MAGIC!r})"
        )
    gguf = _gguf()
    try:
        reader = gguf.GGUFReader(path)
    except (
        ValueError,
        IndexError,
        KeyError,
        OverflowError,
        UnicodeDecodeError,
    ) as error:
        raise GGUFError(
            f"{path.name} is truncated or damaged ({size:,} bytes; the gguf reader says: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__})"
        ) from None
    if reader.byte_order != "I":
        raise GGUFError(f"{path.name} is written in the byte order opposite to this machine's; "
                        "convert it with gguf-convert-endian")
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if size < end:
        raise GGUFError(
            f"{path.name} is truncated: {size:,} bytes, its tensors end at byte {end:,}"
        )
    for t in reader.tensors:
        if t.tensor_type.name not in SUPPORTED_TYPES:
            raise GGUFError(
                f"{path.name}: tensor {t.name} is stored as {t.tensor_type.name}; "
                f"only {', '.join(SUPPORTED_TYPES)} are read here"
            )
        if int(t.shape[0]) % WEIGHTS_PER_BLOCK[t.tensor_type.name]:
            raise GGUFError(
                f"{path.name}: tensor {t.name}'s rows are not whole blocks of "
                f"{t.tensor_type.name} ({TYPE_BYTES[t.tensor_type.name]} bytes)"
            )
    return GGUFFile(path, reader)

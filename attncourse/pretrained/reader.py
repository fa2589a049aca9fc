"""Reading a GGUF file: its metadata as a :class:`LlamaConfig`, its tensors as float32 torch tensors.

GGUF is llama.cpp's single-file format for a model (specification:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): the magic bytes ``GGUF``,
a version, typed key/value metadata (hyper-parameters, the tokenizer's vocabulary and
merges, a chat template), a table of tensors (name, shape, type, offset) and the
tensors' bytes, aligned. The parsing is done by ``gguf.GGUFReader``, the reader that
llama.cpp itself ships in Python, which maps the file into memory without reading
it; the dequantisation is ours (:mod:`~attncourse.pretrained.quants`).

Two conventions of the file are turned into torch's here:

- GGUF lists a shape innermost dimension first: the embedding of a 49,152-token
  vocabulary of width 576 is ``[576, 49152]``; torch's is ``(49152, 576)``. A
  matrix therefore comes out as ``(out_features, in_features)``, the orientation of
  ``torch.nn.Linear.weight``, with no transpose: the bytes are the same.
- Tensors keep GGUF's names (``token_embd.weight``, ``blk.{i}.attn_q.weight``, ...,
  :func:`~attncourse.pretrained.config.expected_shapes`) and GGUF's row order, in
  which the rows of Q and K are arranged for RoPE on adjacent pairs
  (:mod:`~attncourse.pretrained.rope_layout`).
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
    """The ``gguf`` package, or a one-line ModuleNotFoundError saying how to install it."""
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
    """One entry of a GGUF file's tensor table.

    Attributes
    ----------
    name : str
        GGUF's name, e.g. ``blk.0.attn_q.weight``.
    type_name : str
        The GGML type: ``F32``, ``F16``, ``Q4_1``, ``Q8_0``, ...
    shape : tuple of int
        Torch's shape (GGUF's reversed): ``(out_features, in_features)`` for a matrix.
    n_bytes : int
        Bytes stored in the file.
    """

    name: str
    type_name: str
    shape: tuple[int, ...]
    n_bytes: int

    @property
    def n_weights(self) -> int:
        return int(np.prod(self.shape))


class GGUFFile:
    """An opened GGUF file of a Llama model; build it with :func:`open_gguf`.

    Attributes
    ----------
    path : Path
    metadata : dict
        Key -> value (lists for arrays), e.g. ``"llama.block_count": 30``.
    config : LlamaConfig
        The model's hyper-parameters, from the metadata.
    tensors_info : dict
        Name -> :class:`TensorInfo`, in the file's order.
    """

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
        """A tensor's stored bytes, one row of the tensor per row: ``(rows, bytes_per_row)`` uint8.

        ``rows`` is the product of torch's shape but the last dimension (1 for a vector).

        Raises
        ------
        KeyError
            If the file has no tensor ``name`` (the message lists a few it has).
        """
        info = self._info(name)
        start = self._offsets[name]
        data = np.array(self._data[start : start + info.n_bytes], dtype=np.uint8)
        rows = info.n_weights // info.shape[-1]
        return torch.from_numpy(data).reshape(rows, -1)

    def tensor(self, name: str) -> torch.Tensor:
        """A tensor dequantised to float32, in torch's shape (``(out_features, in_features)`` for a matrix).

        Raises
        ------
        KeyError
            If the file has no tensor ``name``.
        """
        info = self._info(name)
        return dequantize(self.raw(name), info.type_name).reshape(info.shape)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the model, float32, checked against the shapes the configuration implies.

        Returns
        -------
        dict
            GGUF name -> tensor, for the names of
            :func:`~attncourse.pretrained.config.expected_shapes`.

        Raises
        ------
        GGUFError
            If a tensor is missing or has another shape than the configuration implies.
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
    """Open a GGUF file of a Llama model, checking that it is whole and of a kind read here.

    Nothing but the header and the tables is read: tensors are read when asked for
    (:meth:`GGUFFile.tensor`), through a memory map.

    Parameters
    ----------
    path : str or PathLike
        The file, e.g. :func:`~attncourse.pretrained.locate.gguf_path`'s.

    Returns
    -------
    GGUFFile

    Raises
    ------
    FileNotFoundError
        If there is no file at ``path``.
    GGUFError
        One line naming the file, if it is not a GGUF file (its first bytes are not
        ``GGUF``), is truncated or damaged, holds a tensor type other than
        F32/F16/Q4_1/Q8_0, or does not describe a Llama model.
    ModuleNotFoundError
        If the ``gguf`` package is not installed (the message gives the command).
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

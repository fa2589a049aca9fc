"""The only data that crosses the grading boundary: numbers, strings, arrays and tensors.

Never :mod:`pickle` (unpickling runs the writer's code). A message is an 8-byte
little-endian header length, a JSON header ``{"tree": NODE, ...}``, then the arrays'
bytes; a NODE is ``null``, a bool/int/str/float/complex (floats as ``float.hex``), a
tuple/list/dict of NODEs, or an ndarray/tensor (dtype, shape, offset, nbytes). Only exact
types are written (:func:`encode` refuses subclasses and objects that compute their value
when converted); :func:`decode` checks every field and raises :class:`WireError` on
anything else, so a forged message is "crashed", never a value.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

#: Largest message read or written (header and data), bytes.
MAX_BYTES = 512 * 2**20
#: Deepest nesting of tuples, lists and dicts.
MAX_DEPTH = 32
#: Most nodes in one message.
MAX_NODES = 200_000
#: Longest string.
MAX_STR = 100_000
#: NumPy dtypes an array may have (numbers and booleans; no objects, no records).
NUMPY_DTYPES = frozenset({"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
                          "<f2", "<f4", "<f8", "<c8", "<c16"})
#: torch dtypes a tensor may have, by name.
TORCH_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "float16",
                          "bfloat16", "float32", "float64", "complex64", "complex128"})


class WireError(ValueError):
    """A value that cannot be sent, or a message that is not one of ours."""


def _float(value: float) -> str:
    return float.hex(float(value))


def _unfloat(text: Any) -> float:
    if not isinstance(text, str) or len(text) > 40:
        raise WireError("a float is not a hex string")
    try:
        return float.fromhex(text)
    except ValueError:
        raise WireError("a float is not a hex string") from None


class _Writer:
    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self.chunks: list[bytes] = []
        self.size = 0
        self.nodes = 0

    def blob(self, data: bytes) -> int:
        offset = self.size
        self.chunks.append(data)
        self.size += len(data)
        if self.size > MAX_BYTES:
            raise WireError(f"the result is larger than {MAX_BYTES // 2**20} MiB")
        return offset

    def node(self, value: Any, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise WireError("the result is nested too deeply or holds too many items")
        kind = type(value)
        if not self.strict:  # the grader's own inputs: a check's dict subclass is a dict
            kind = next((k for k in (dict, list, tuple) if isinstance(value, k)), kind)
        if value is None:
            return None
        if kind is bool:
            return {"t": "bool", "v": value}
        if kind is int:
            if value.bit_length() > 64:
                raise WireError("an integer of more than 64 bits")
            return {"t": "int", "v": value}
        if kind is float:
            return {"t": "float", "v": _float(value)}
        if kind is complex:
            return {"t": "complex", "v": [_float(value.real), _float(value.imag)]}
        if kind is str:
            if len(value) > MAX_STR:
                raise WireError("a string longer than 100,000 characters")
            return {"t": "str", "v": value}
        if kind in (tuple, list):
            return {"t": kind.__name__, "items": [self.node(v, depth + 1) for v in value]}
        if kind is dict:
            if not all(type(k) is str for k in value):
                raise WireError("a dict's keys must be names (str)")
            return {"t": "dict", "items": [[k, self.node(v, depth + 1)] for k, v in value.items()]}
        if kind is np.ndarray or (isinstance(value, np.generic) and kind.__module__ == "numpy"):
            array = np.array(value, order="C", copy=True)
            dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
            array = array.astype(dtype, copy=False)
            if array.dtype.str not in NUMPY_DTYPES:
                raise WireError(f"an array of dtype {value.dtype} (numbers or booleans only)")
            data = array.tobytes()
            scalar = kind is not np.ndarray
            return {"t": "ndarray", "dtype": array.dtype.str, "shape": list(array.shape),
                    "scalar": scalar, "offset": self.blob(data), "nbytes": len(data)}
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
            name = str(value.dtype).removeprefix("torch.")
            if name not in TORCH_DTYPES:
                raise WireError(f"a tensor of dtype {name}")
            if value.layout != torch.strided or value.is_quantized or value.is_meta:
                raise WireError("a tensor that is not a plain dense tensor")
            flat = value.detach().to("cpu").contiguous().reshape(-1)
            data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
            return {"t": "tensor", "dtype": name, "shape": list(value.shape),
                    "requires_grad": bool(value.requires_grad), "device": value.device.type,
                    "offset": self.blob(data), "nbytes": len(data)}
        raise WireError(f"numbers, arrays or tensors (or tuples, lists and dicts of them) only, "
                        f"not {kind.__name__}")


def encode(value: Any, strict: bool = True, **fields: Any) -> bytes:
    """``value`` (and JSON ``fields`` beside it) as one message.

    Raises
    ------
    WireError
        If ``value`` holds anything but ``None``, exact bool/int/float/complex/str, NumPy
        arrays and scalars, tensors, and tuples, lists and str-keyed dicts of these, or is
        too large or deep (``strict=False``, for the grader's own inputs, takes subclasses
        of dict, list and tuple).
    """
    writer = _Writer(strict)
    header = json.dumps({**fields, "tree": writer.node(value, 0)}, allow_nan=False).encode()
    out = struct.pack("<Q", len(header)) + header + b"".join(writer.chunks)
    if len(out) > MAX_BYTES:
        raise WireError(f"the result is larger than {MAX_BYTES // 2**20} MiB")
    return out


def _int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise WireError(f"{what} is not a count")
    return value


class _Reader:
    def __init__(self, data: memoryview, torch: bool) -> None:
        self.data = data
        self.torch = torch
        self.nodes = 0

    def array(self, node: dict) -> Any:
        shape = node.get("shape")
        if type(shape) is not list or len(shape) > 32:
            raise WireError("an array without a shape")
        shape = [_int(s, "a dimension") for s in shape]
        offset, nbytes = _int(node.get("offset"), "an offset"), _int(node.get("nbytes"), "a size")
        if offset + nbytes > len(self.data):
            raise WireError("an array's bytes lie outside the message")
        raw = bytes(self.data[offset:offset + nbytes])
        count = math.prod(shape)
        if node["t"] == "ndarray":
            dtype = node.get("dtype")
            if dtype not in NUMPY_DTYPES:
                raise WireError(f"an array of dtype {dtype!r}")
            if count * np.dtype(dtype).itemsize != nbytes:
                raise WireError("an array's shape does not match its bytes")
            array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
            if node.get("scalar") is True and array.ndim == 0:
                return array[()]
            return array
        if not self.torch:
            raise WireError("a tensor where none is expected")
        import torch

        dtype = node.get("dtype")
        if dtype not in TORCH_DTYPES:
            raise WireError(f"a tensor of dtype {dtype!r}")
        torch_dtype = getattr(torch, dtype)
        if count * torch.empty((), dtype=torch_dtype).element_size() != nbytes:
            raise WireError("a tensor's shape does not match its bytes")
        tensor = (torch.frombuffer(bytearray(raw), dtype=torch_dtype) if nbytes
                  else torch.empty(0, dtype=torch_dtype)).reshape(shape)
        device = node.get("device", "cpu")
        if device not in ("cpu", "cuda"):
            raise WireError(f"a tensor on device {str(device)[:20]!r}")
        if device == "cuda" and torch.cuda.is_available():
            tensor = tensor.to(device)
        if node.get("requires_grad") is True and tensor.is_floating_point():
            tensor.requires_grad_(True)
        return tensor

    def node(self, node: Any, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise WireError("a message nested too deeply or holding too many items")
        if node is None:
            return None
        if type(node) is not dict:
            raise WireError("a node that is not an object")
        kind, value = node.get("t"), node.get("v")
        if kind == "bool" and type(value) is bool:
            return value
        if kind == "int" and type(value) is int and value.bit_length() <= 64:
            return value
        if kind == "float":
            return _unfloat(value)
        if kind == "complex" and type(value) is list and len(value) == 2:
            return complex(_unfloat(value[0]), _unfloat(value[1]))
        if kind == "str" and type(value) is str and len(value) <= MAX_STR:
            return value
        items = node.get("items")
        if kind in ("tuple", "list") and type(items) is list:
            out = [self.node(v, depth + 1) for v in items]
            return tuple(out) if kind == "tuple" else out
        if kind == "dict" and type(items) is list:
            pairs = {}
            for pair in items:
                if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
                    raise WireError("a dict entry that is not a (name, value) pair")
                pairs[pair[0]] = self.node(pair[1], depth + 1)
            return pairs
        if kind in ("ndarray", "tensor"):
            return self.array(node)
        raise WireError(f"a node of unknown type {str(kind)[:20]!r}")


def decode(message: bytes, torch: bool = True) -> tuple[Any, dict]:
    """``(value, fields)`` of a message written by :func:`encode`.

    ``torch=False`` refuses tensors (and never imports torch). Raises :class:`WireError`
    on anything that is not such a message.
    """
    if len(message) < 8 or len(message) > MAX_BYTES:
        raise WireError("a message of the wrong size")
    (length,) = struct.unpack("<Q", message[:8])
    if length > len(message) - 8:
        raise WireError("a header longer than the message")
    try:
        header = json.loads(message[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise WireError("a header that is not JSON") from None
    if type(header) is not dict or "tree" not in header:
        raise WireError("a header without its value")
    reader = _Reader(memoryview(message)[8 + length:], torch)
    try:
        value = reader.node(header.pop("tree"), 0)
    except (RecursionError, MemoryError, OverflowError, ValueError, TypeError) as err:
        if isinstance(err, WireError):
            raise
        raise WireError(f"a malformed value ({type(err).__name__})") from None
    return value, header


def write_message(fd: int, message: bytes) -> None:
    """Send ``message`` on ``fd``, preceded by its length (8 bytes)."""
    import os

    view = memoryview(struct.pack("<Q", len(message)) + message)
    while view:
        view = view[os.write(fd, view):]


__all__ = ["MAX_BYTES", "WireError", "decode", "encode", "write_message"]

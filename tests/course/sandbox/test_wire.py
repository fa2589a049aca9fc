"""The grade of record's data format: what an answer's process may send, read back exactly,
and anything else refused (:mod:`attncourse.course.sandbox.wire`)."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import torch

from attncourse.course.sandbox.wire import MAX_DEPTH, WireError, decode, encode


def _roundtrip(value):
    back, fields = decode(encode(value, note="x"))
    assert fields == {"note": "x"}
    return back


def test_numbers_strings_and_containers_come_back_exactly():
    value = (None, True, -(2**63), 2**64 - 1, 0.1, math.inf, -0.0, 1 + 2j, "mot", [1, [2.5]], {"a": (3,)})
    back = _roundtrip(value)
    assert back == value and type(back) is tuple and type(back[9]) is list and type(back[10]["a"]) is tuple
    assert math.copysign(1, back[6]) == -1 and math.isnan(_roundtrip(math.nan))


@pytest.mark.parametrize("array", [np.arange(6, dtype=np.int8).reshape(2, 3), np.array([[1.5, np.nan]]),
                                   np.array([True, False]), np.zeros((0, 3), np.float32),
                                   np.arange(4, dtype=">f8"), np.float64(2.5), np.asfortranarray(np.eye(3))])
def test_arrays_keep_dtype_shape_and_values(array):
    back = _roundtrip(array)
    assert type(back) is type(array) if isinstance(array, np.generic) else isinstance(back, np.ndarray)
    expected = np.asarray(array)
    assert back.shape == expected.shape and back.dtype == expected.dtype.newbyteorder("<")
    np.testing.assert_array_equal(back, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float64])
def test_tensors_keep_dtype_shape_values_and_requires_grad(dtype):
    tensor = torch.arange(6).reshape(2, 3).to(dtype)
    back = _roundtrip(tensor)
    assert back.dtype == dtype and back.shape == tensor.shape and torch.equal(back, tensor)
    leaf = torch.ones(3, requires_grad=True)
    assert _roundtrip(leaf).requires_grad and _roundtrip(torch.nn.Parameter(torch.ones(2))).shape == (2,)


class _Tuple(tuple):
    pass


class _Array(np.ndarray):
    pass


class _Lazy:
    def __array__(self, dtype=None, copy=None):
        return np.zeros(3)


@pytest.mark.parametrize("value", [_Tuple([1]), np.zeros(3).view(_Array), _Lazy(), np.array([object()]),
                                   torch.zeros(2).as_subclass(type("T", (torch.Tensor,), {})), {1: 2},
                                   np.zeros(2, dtype=[("a", "i4")]), 2**70, "x" * 100_001, b"bytes"])
def test_an_answer_that_lies_about_its_type_is_refused(value):
    with pytest.raises(WireError):
        encode(value)


def test_the_graders_own_inputs_may_be_subclasses_of_containers():
    back, _ = decode(encode({"w": _Tuple([1, 2])}, strict=False))
    assert back == {"w": (1, 2)} and type(back["w"]) is tuple


def test_too_deep_is_refused_before_the_interpreter_overflows():
    value: object = 0.0
    for _ in range(MAX_DEPTH + 2):
        value = [value]
    with pytest.raises(WireError, match="too deeply"):
        encode(value)


def _message(tree, data=b""):
    header = json.dumps({"tree": tree}).encode()
    return struct.pack("<Q", len(header)) + header + data


@pytest.mark.parametrize("message", [
    b"", b"\x00" * 7, struct.pack("<Q", 10**9) + b"{}", struct.pack("<Q", 2) + b"{}",
    struct.pack("<Q", 3) + b"\xff\xfe{", _message({"t": "pickle", "v": "..."}),
    _message({"t": "float", "v": 1.0}), _message({"t": "int", "v": 2**80}),
    _message({"t": "ndarray", "dtype": "|O", "shape": [1], "offset": 0, "nbytes": 8}, b"\x00" * 8),
    _message({"t": "ndarray", "dtype": "<f8", "shape": [2], "offset": 0, "nbytes": 8}, b"\x00" * 8),
    _message({"t": "ndarray", "dtype": "<f8", "shape": [1], "offset": 4, "nbytes": 8}, b"\x00" * 8),
    _message({"t": "ndarray", "dtype": "<f8", "shape": [-1], "offset": 0, "nbytes": 8}, b"\x00" * 8),
    _message({"t": "tensor", "dtype": "qint8", "shape": [1], "offset": 0, "nbytes": 1}, b"\x00"),
    _message({"t": "tensor", "dtype": "float32", "shape": [1], "offset": 0, "nbytes": 4,
              "device": "mps"}, b"\x00" * 4),
    _message({"t": "dict", "items": [[1, None]]}), _message({"t": "list", "items": "abc"}),
    _message(json.loads("[" * 40 + "]" * 40)),
], ids=lambda m: repr(m[8:60]))
def test_a_forged_message_is_refused(message):
    with pytest.raises(WireError):
        decode(message)

"""Tests of attncourse.chapters.ch05_multihead_positional.checks: each typical learner
bug fails with the hint that names it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncourse.chapters.ch05_multihead_positional.checks import (
    MERGE_EXPLAIN,
    MERGE_NO_TRANSPOSE_HINT,
    MERGE_STRIDED_HINT,
    SPLIT_DK_SEQ_HINT,
    SPLIT_NO_TRANSPOSE_HINT,
    SPLIT_SEQ_HEADS_HINT,
    SPLIT_STRIDED_HINT,
    check_merge_heads,
    check_split_heads,
    merge_heads_cases,
    split_heads_cases,
)
from attncourse.checks.core import CheckResult
from attncourse.nn.attention import merge_heads, split_heads

# ----------------------------------------------------------------------------- learners' split_heads


def split_right(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.reshape(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def split_numpy(x, num_heads):
    a = np.asarray(x)
    b, n, d = a.shape
    return a.reshape(b, n, num_heads, d // num_heads).transpose(0, 2, 1, 3)


def split_loop(x, num_heads):
    d_k = x.shape[-1] // num_heads
    return torch.stack([x[..., i * d_k:(i + 1) * d_k] for i in range(num_heads)], dim=1)


def split_no_transpose(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.reshape(batch, num_heads, seq_len, d_model // num_heads)


def split_seq_heads(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.reshape(batch, seq_len, num_heads, d_model // num_heads)


def split_strided(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.reshape(batch, seq_len, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


def split_dk_seq(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.reshape(batch, seq_len, num_heads, d_model // num_heads).permute(0, 2, 3, 1)


def split_returns_nothing(x, num_heads):
    split_right(x, num_heads)


# ----------------------------------------------------------------------------- learners' merge_heads


def merge_right(x):
    batch, num_heads, seq_len, d_v = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_v)


def merge_contiguous_view(x):
    batch, num_heads, seq_len, d_v = x.shape
    return x.transpose(1, 2).contiguous().view(batch, seq_len, num_heads * d_v)


def merge_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_no_transpose(x):
    batch, num_heads, seq_len, d_v = x.shape
    return x.reshape(batch, seq_len, num_heads * d_v)


def merge_view_without_contiguous(x):
    batch, num_heads, seq_len, d_v = x.shape
    return x.transpose(1, 2).view(batch, seq_len, num_heads * d_v)


def merge_strided(x):
    batch, num_heads, seq_len, d_v = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, seq_len, num_heads * d_v)


# ----------------------------------------------------------------------------- tests


def test_cases_match_the_library_reference():
    for case in split_heads_cases():
        np.testing.assert_array_equal(case.expected, split_heads(case.args["x"], case.args["num_heads"]).numpy())
    for case in merge_heads_cases():
        np.testing.assert_array_equal(case.expected, merge_heads(case.args["x"]).numpy())
        # merge_heads is the inverse of split_heads.
        h = case.args["x"].shape[1]
        np.testing.assert_array_equal(split_heads(torch.as_tensor(case.expected), h).numpy(),
                                      case.args["x"].numpy())


@pytest.mark.parametrize("fn", [split_right, split_numpy, split_loop])
def test_split_heads_passes_correct_versions(fn):
    result = check_split_heads(fn)
    assert isinstance(result, CheckResult)
    assert result.passed and bool(result), str(result)
    assert result.cases_passed == result.cases_total == 5


@pytest.mark.parametrize("fn", [merge_right, merge_contiguous_view, merge_cat])
def test_merge_heads_passes_correct_versions(fn):
    result = check_merge_heads(fn)
    assert result.passed, str(result)
    assert result.cases_total == 4


@pytest.mark.parametrize(
    "fn, hint",
    [
        (split_no_transpose, SPLIT_NO_TRANSPOSE_HINT),
        (split_seq_heads, SPLIT_SEQ_HEADS_HINT),
        (split_strided, SPLIT_STRIDED_HINT),
        (split_dk_seq, SPLIT_DK_SEQ_HINT),
    ],
)
def test_split_heads_names_the_bug(fn, hint):
    result = check_split_heads(fn)
    assert not result.passed
    assert result.hint == hint
    assert "case 1 of 5" in result.message  # caught on the hand-checkable case already
    # The failing inputs reproduce the failure.
    got = fn(*result.args)
    assert not (got.shape == (1, 2, 3, 2) and np.array_equal(np.asarray(got), split_heads(*result.args).numpy()))


def test_split_heads_missing_return():
    result = check_split_heads(split_returns_nothing)
    assert not result.passed and "None" in result.message


@pytest.mark.parametrize("fn, hint", [(merge_no_transpose, MERGE_NO_TRANSPOSE_HINT),
                                      (merge_strided, MERGE_STRIDED_HINT)])
def test_merge_heads_names_the_bug(fn, hint):
    result = check_merge_heads(fn)
    assert not result.passed and result.hint == hint
    assert "expected row [0, 1, 6, 7]" in result.message


def test_merge_heads_view_on_a_transposed_tensor_explains_contiguous():
    result = check_merge_heads(merge_view_without_contiguous)
    assert not result.passed
    assert "RuntimeError" in result.message and result.hint == MERGE_EXPLAIN
    assert ".contiguous()" in result.hint


def test_checks_never_raise_for_odd_functions():
    for check in (check_split_heads, check_merge_heads):
        assert not check(lambda *a: "heads").passed
        assert not check(lambda *a: 1 / 0).passed
        assert "without calling it" in check(None).hint

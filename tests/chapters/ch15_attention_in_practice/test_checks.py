"""Chapter 15's checks: right answers pass, stubs do not, the typical wrong ones get their
hint, and the references agree with independent computations (FlexAttention, SDPA, T5's
own bucket function in transformers)."""

import math
import warnings

import numpy as np
import pytest
import torch

from attncourse.chapters.ch15_attention_in_practice import checks
from attncourse.chapters.ch15_attention_in_practice.checks import (
    MERGE_MEAN_HINT,
    MERGE_OVERFLOW_HINT,
    PADDING_GLOBAL_HINT,
    PADDING_LAST_HINT,
    POSITIONS_GLOBAL_HINT,
    POSITIONS_ONE_HINT,
    POSITIONS_PAD_HINT,
    SINK_NO_SINKS_HINT,
    SINK_REACH_HINT,
    T5_CLAMP_HINT,
    T5_HALVE_HINT,
    T5_SIGN_HINT,
    WINDOW_CAUSAL_HINT,
    WINDOW_PARTIAL_HINT,
    WINDOW_REACH_HINT,
    check_merge_attention,
    check_packed_positions,
    check_padding_fraction,
    check_sink_window,
    check_t5_bucket,
    check_window_tiles,
)
from attncourse.checks.core import reset_attempts


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance, sign=-1, halve=True, clamp=True):
    n = sign * np.asarray(relative_position)
    out = np.zeros(n.shape, dtype=int)
    if bidirectional:
        num_buckets = num_buckets // 2 if halve else num_buckets
        out += (n < 0) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    exact = num_buckets // 2
    far = exact + (np.log(np.maximum(n, 1) / exact) / np.log(max_distance / exact)
                   * (num_buckets - exact)).astype(int)
    return out + np.where(n < exact, n, np.minimum(far, num_buckets - 1) if clamp else far)


def packed_positions(doc_ids, start=0, whole_row=False, pad=False):
    out = np.zeros(len(doc_ids), dtype=int)
    for i, d in enumerate(doc_ids):
        if d < 0 and not pad:
            continue
        out[i] = i + start if whole_row else (start if i == 0 or doc_ids[i - 1] != d else out[i - 1] + 1)
    return out


def window_tiles(n, window, block, extra=0, ceil=True, causal_only=False):
    tiles = -(-n // block) if ceil else n // block
    count = 0
    for a in range(tiles):
        for b in range(a + 1):  # key tiles at or before the query tile
            q_last, k_first = min(n, (a + 1) * block) - 1, b * block
            if causal_only or q_last - min(n - 1, (b + 1) * block - 1) <= window - 1 + extra or \
                    (a * block) - ((b + 1) * block - 1) <= window - 1 + extra:
                # the closest pair of the two tiles: the earliest query and the latest key
                closest = max(0, a * block - min(n - 1, (b + 1) * block - 1))
                count += causal_only or closest <= window - 1 + extra and k_first < n
    return count


def sink_window(window, sinks, with_sinks=True, extra=0):
    def mask_mod(b, h, q_idx, kv_idx):
        near = q_idx - kv_idx < window + extra
        return (kv_idx <= q_idx) & ((near | (kv_idx < sinks)) if with_sinks else near)
    return mask_mod


def padding_fraction(lengths, batch_size, whole=False, full_last=False):
    lengths = np.asarray(lengths)
    slots = sum((lengths.max() if whole else lengths[i:i + batch_size].max())
                * (batch_size if full_last else len(lengths[i:i + batch_size]))
                for i in range(0, len(lengths), batch_size))
    return 1 - lengths.sum() / slots


def merge_attention(out_a, lse_a, out_b, lse_b, mode="right"):
    lse = np.logaddexp(lse_a, lse_b)
    if mode == "mean":
        return (out_a + out_b) / 2, lse
    if mode == "unshifted":
        wa, wb = np.exp(lse_a), np.exp(lse_b)
        return (wa[:, None] * out_a + wb[:, None] * out_b) / (wa + wb)[:, None], lse
    wa, wb = np.exp(lse_a - lse), np.exp(lse_b - lse)
    return wa[:, None] * out_a + wb[:, None] * out_b, lse


def test_right_answers_pass():
    assert check_t5_bucket(t5_bucket).passed
    assert check_packed_positions(packed_positions).passed
    assert check_window_tiles(window_tiles).passed
    assert check_sink_window(sink_window).passed
    assert check_padding_fraction(padding_fraction).passed
    assert check_merge_attention(merge_attention).passed


def test_stubs_are_not_passed_yet():
    for check, stub in ((check_t5_bucket, lambda *a: None), (check_padding_fraction, lambda *a: None),
                        (check_merge_attention, lambda *a: None), (check_sink_window, lambda *a: None)):
        result = check(stub)
        assert not result.passed and result.cases_passed == 0


def _second_attempt(check, fn):
    reset_attempts()
    check(fn)
    return check(fn)


@pytest.mark.parametrize("hint, check, fn", [
    (T5_SIGN_HINT, check_t5_bucket, lambda r, b, n, m: t5_bucket(r, b, n, m, sign=1)),
    (T5_HALVE_HINT, check_t5_bucket, lambda r, b, n, m: t5_bucket(r, b, n, m, halve=False)),
    (T5_CLAMP_HINT, check_t5_bucket, lambda r, b, n, m: t5_bucket(r, b, n, m, clamp=False)),
    (POSITIONS_GLOBAL_HINT, check_packed_positions, lambda d: packed_positions(d, whole_row=True)),
    (POSITIONS_ONE_HINT, check_packed_positions, lambda d: packed_positions(d, start=1)),
    (POSITIONS_PAD_HINT, check_packed_positions, lambda d: packed_positions(d, pad=True)),
    (WINDOW_REACH_HINT, check_window_tiles, lambda n, w, b: window_tiles(n, w, b, extra=1)),
    (WINDOW_PARTIAL_HINT, check_window_tiles, lambda n, w, b: window_tiles(n, w, b, ceil=False)),
    (WINDOW_CAUSAL_HINT, check_window_tiles, lambda n, w, b: window_tiles(n, w, b, causal_only=True)),
    (SINK_NO_SINKS_HINT, check_sink_window, lambda w, s: sink_window(w, s, with_sinks=False)),
    (SINK_REACH_HINT, check_sink_window, lambda w, s: sink_window(w, s, extra=1)),
    (PADDING_GLOBAL_HINT, check_padding_fraction, lambda x, b: padding_fraction(x, b, whole=True)),
    (PADDING_LAST_HINT, check_padding_fraction, lambda x, b: padding_fraction(x, b, full_last=True)),
    (MERGE_MEAN_HINT, check_merge_attention, lambda *a: merge_attention(*a, mode="mean")),
    (MERGE_OVERFLOW_HINT, check_merge_attention, lambda *a: merge_attention(*a, mode="unshifted")),
])
def test_wrong_answers_get_their_hint(hint, check, fn):
    with np.errstate(all="ignore"):
        result = _second_attempt(check, fn)
    assert not result.passed and result.hint == hint, (result.message, result.hint)


def test_python_and_in_a_mask_mod_fails_with_the_tensor_rule_in_its_hint():
    def wrong(window, sinks):
        return lambda b, h, q, k: (k <= q) and (q - k < window)
    result = check_sink_window(wrong)
    assert not result.passed and "& and |" in result.hint


def test_t5_buckets_equal_transformers_own_function():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    for bidirectional in (True, False):
        rel = torch.arange(-300, 301)
        theirs = t5.T5Attention._relative_position_bucket(rel, bidirectional, 32, 128).numpy()
        assert np.array_equal(checks._t5_bucket(rel.numpy(), bidirectional, 32, 128), theirs)


def test_window_tiles_equal_flexattentions_block_mask():
    from torch.nn.attention.flex_attention import create_block_mask

    for n, window, block in ((1024, 256, 64), (200, 30, 32), (300, 512, 128)):
        def mask_mod(b, h, q, k, window=window):
            return (k <= q) & (q - k < window)
        blocks = create_block_mask(mask_mod, None, None, n, n, device="cpu", BLOCK_SIZE=block)
        computed = int(blocks.kv_num_blocks.sum() + blocks.full_kv_num_blocks.sum())
        assert checks._window_tiles(n, window, block) == computed


def test_the_merged_partial_attentions_equal_sdpa_over_all_keys():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 3))
    out, lse = checks._merged(*checks._partial(q, k[:4], v[:4]), *checks._partial(q, k[4:], v[4:]))
    t = torch.from_numpy
    sdpa = torch.nn.functional.scaled_dot_product_attention(t(q)[None], t(k)[None], t(v)[None])[0]
    assert np.allclose(out, sdpa.numpy(), rtol=0, atol=1e-12)
    assert np.allclose(lse, np.log(np.exp(q @ k.T / 2).sum(1)), rtol=0, atol=1e-12)


def test_the_sink_window_reference_equals_flex_with_the_solution():
    from torch.nn.attention.flex_attention import create_mask

    mask = create_mask(sink_window(4, 2), None, None, 12, 12, device="cpu")[0, 0].numpy()
    assert np.array_equal(mask, checks._sink_window(12, 4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isclose(checks._padding([3, 5, 2, 2], 2), 1 - 12 / 14)

"""Tests of attncourse.chapters.ch11_real_model.checks: right answers pass, typical bugs fail with the hint naming them,
and the package's own functions are refused."""

import numpy as np
from check_helpers import assert_failed

from attncourse.chapters.ch11_real_model.checks import (
    Q4_1_HIGH_FIRST_HINT,
    Q4_1_NEIGHBOURS_HINT,
    RMS_CENTRED_HINT,
    RMS_EPS_OUTSIDE_HINT,
    TOP_P_CROSSING_HINT,
    TOP_P_UNNORMALISED_HINT,
    check_q4_1_block,
    check_rms_norm,
    check_top_p,
    reference_q4_1_block,
    reference_rms_norm,
    reference_top_p,
)


def test_rms_norm():
    def right(x, g, eps):
        return g * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)

    assert check_rms_norm(right).passed

    def centred(x, g, eps):
        return right(x - x.mean(-1, keepdims=True), g, eps)

    assert_failed(check_rms_norm(centred), 1, RMS_CENTRED_HINT)

    def eps_outside(x, g, eps):
        return g * x / (np.sqrt((x ** 2).mean(-1, keepdims=True)) + eps)

    assert_failed(check_rms_norm(eps_outside), 1, RMS_EPS_OUTSIDE_HINT)
    assert not check_rms_norm(reference_rms_norm).passed


def dequantize_q4_1(block, order="low_first"):
    d = block[0:2].view(np.float16)[0].astype(np.float32)
    m = block[2:4].view(np.float16)[0].astype(np.float32)
    low, high = block[4:20] & 0x0F, block[4:20] >> 4
    if order == "neighbours":
        codes = np.stack([low, high], 1).reshape(-1)
    else:
        codes = np.concatenate([low, high] if order == "low_first" else [high, low])
    return d * codes.astype(np.float32) + m


def test_q4_1_block():
    assert check_q4_1_block(dequantize_q4_1).passed
    assert_failed(check_q4_1_block(lambda b: dequantize_q4_1(b, "neighbours")), 1, Q4_1_NEIGHBOURS_HINT)
    assert_failed(check_q4_1_block(lambda b: dequantize_q4_1(b, "high_first")), 2, Q4_1_HIGH_FIRST_HINT)
    assert not check_q4_1_block(reference_q4_1_block).passed
    assert not check_q4_1_block(lambda b: reference_q4_1_block(b)).passed


def test_top_p():
    def right(probs, p):
        order = np.argsort(-probs, kind="stable")
        before = np.cumsum(probs[order]) - probs[order]
        kept = np.zeros_like(probs)
        kept[order[before < p]] = probs[order[before < p]]
        return kept / kept.sum()

    assert check_top_p(right).passed

    def strict(probs, p):
        order = np.argsort(-probs, kind="stable")
        kept = np.zeros_like(probs)
        keep = order[np.cumsum(probs[order]) <= p]
        kept[keep] = probs[keep]
        return kept / kept.sum()

    assert_failed(check_top_p(strict), 1, TOP_P_CROSSING_HINT)

    def unnormalised(probs, p):
        out = right(probs, p)
        return out * probs[out > 0].sum()

    assert_failed(check_top_p(unnormalised), 1, TOP_P_UNNORMALISED_HINT)
    assert not check_top_p(reference_top_p).passed

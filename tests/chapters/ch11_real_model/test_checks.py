"""Tests of attncourse.chapters.ch11_real_model.checks: right answers pass, typical bugs
fail with the hint naming them, a case worked by hand holds, and the package's own
functions are refused."""

import numpy as np
import pytest
from gguf.quants import Q4_1

from attncourse.chapters.ch11_real_model import checks
from attncourse.chapters.ch11_real_model.checks import (
    FOLD_COLUMNS_HINT,
    FOLD_DIVIDED_HINT,
    FOLD_TRANSPOSED_HINT,
    MIN_P_ABSOLUTE_HINT,
    MIN_P_LOGITS_HINT,
    MIN_P_NO_TEMPERATURE_HINT,
    MIN_P_OVERFLOW_HINT,
    MIN_P_STRICT_HINT,
    MIN_P_TEMPERATURE_AFTER_HINT,
    MIN_P_TEMPERATURE_TIMES_HINT,
    MIN_P_UNNORMALISED_HINT,
    Q4_1_CONSTANT_HINT,
    Q4_1_HALF_EVEN_HINT,
    Q4_1_HIGH_FIRST_HINT,
    Q4_1_NEIGHBOURS_HINT,
    Q4_1_SIXTEEN_HINT,
    Q4_1_SIZE_HINT,
    Q4_1_SPILL_HINT,
    Q4_1_SWAPPED_HINT,
    Q4_1_TRUNCATED_HINT,
    check_fold_gain,
    check_min_p,
    check_quantize_q4_1,
    fold_gain_cases,
    min_p_cases,
    q4_1_encode_cases,
    reference_fold_gain,
    reference_min_p,
    reference_quantize_q4_1,
)
from attncourse.checks.core import reset_attempts
from tests.check_helpers import assert_failed


@pytest.fixture(autouse=True)
def _full_hints():
    reset_attempts()
    yield
    reset_attempts()


# --------------------------------------------------------------------------- fold_gain

def rms(x, gamma, eps=1e-5):
    return gamma * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)


def test_fold_gain_by_hand_and_its_defining_property():
    hand = fold_gain_cases()[0]
    np.testing.assert_array_equal(hand.expected, [[2.0, 4.0], [1.5, 2.0]])
    rng = np.random.default_rng(0)
    gamma, W, x = rng.normal(1, 0.3, 6), rng.normal(size=(6, 5)), rng.normal(size=(4, 6))
    np.testing.assert_allclose(rms(x, gamma) @ W,
                               rms(x, np.ones(6)) @ reference_fold_gain(gamma, W))


def test_fold_gain():
    def right(gamma, W):
        return gamma[:, None] * W

    def with_diag(gamma, W):
        return np.diag(gamma) @ W

    assert check_fold_gain(right).passed and check_fold_gain(with_diag).passed
    assert_failed(check_fold_gain(lambda gamma, W: W * gamma), 1, FOLD_COLUMNS_HINT)
    assert_failed(check_fold_gain(lambda gamma, W: W / gamma[:, None]), 1, FOLD_DIVIDED_HINT)
    assert_failed(check_fold_gain(lambda gamma, W: (gamma[:, None] * W).T), 1,
                  FOLD_TRANSPOSED_HINT)
    assert not check_fold_gain(reference_fold_gain).passed


# --------------------------------------------------------------------------- Q4_1 encoder

def quantize(weights, levels=15, clip=True, rounding="up", order="low_first", header="f16"):
    """A learner's encoder, right or with one typical bug."""
    low, high = weights.min(), weights.max()
    scale = (high - low) / np.float32(levels)
    steps = (weights - low) / scale if scale else np.zeros_like(weights)
    codes = {"up": np.floor(steps + np.float32(0.5)), "even": np.round(steps),
             "truncated": steps}[rounding].astype(np.int64)
    codes = np.minimum(codes, 15) if clip else codes
    if order == "neighbours":
        packed = codes[0::2] | (codes[1::2] << 4)
    elif order == "high_first":
        packed = codes[16:] | (codes[:16] << 4)
    else:
        packed = codes[:16] | (codes[16:] << 4)
    kind = np.float32 if header == "f32" else np.float16
    pair = [low, scale] if header == "swapped" else [scale, low]
    head = np.array(pair, dtype=kind).view(np.uint8)
    return np.concatenate([head, (packed & 0xFF).astype(np.uint8)])


def test_the_reference_is_llama_cpps_quantizer_byte_for_byte():
    rng = np.random.default_rng(1)
    for i in range(300):
        w = (rng.normal(0, rng.uniform(1e-3, 2), 32) + rng.normal()).astype(np.float32)
        if i % 5 == 0:
            w = np.round(w * 4) / 4           # many weights half way between codes
        np.testing.assert_array_equal(reference_quantize_q4_1(w),
                                      Q4_1.quantize_blocks(w[None])[0])
    for case in q4_1_encode_cases():
        np.testing.assert_array_equal(case.expected,
                                      Q4_1.quantize_blocks(case.args["weights"][None])[0])


def test_q4_1_by_hand_and_the_round_trip():
    hand = q4_1_encode_cases()[0].expected
    assert hand.tolist() == [0x00, 0x3C, 0, 0] + [0x11 * j for j in range(16)]
    for case in q4_1_encode_cases()[1:4]:
        w, block = case.args["weights"].astype(np.float64), case.expected
        scale, low = (block[i:i + 2].view(np.float16)[0].astype(np.float64) for i in (0, 2))
        back = scale * np.concatenate([block[4:] & 15, block[4:] >> 4]) + low
        step = (w.max() - w.min()) / 15
        slack = (15 * abs(scale - step) + abs(low - w.min())) / step
        assert np.abs(back - w).max() / step <= 0.5 + slack + 1e-6


def test_quantize_q4_1():
    assert check_quantize_q4_1(quantize).passed
    # in float64 and dividing by the scale: the same bytes on every hidden case
    assert check_quantize_q4_1(lambda w: quantize(w.astype(np.float64))).passed
    bugs = [(dict(order="neighbours"), 1, Q4_1_NEIGHBOURS_HINT),
            (dict(order="high_first"), 2, Q4_1_HIGH_FIRST_HINT),
            (dict(levels=16), 1, Q4_1_SIXTEEN_HINT),
            (dict(levels=16, clip=False), 1, Q4_1_SPILL_HINT),
            (dict(rounding="truncated"), 2, Q4_1_TRUNCATED_HINT),
            (dict(rounding="even"), 3, Q4_1_HALF_EVEN_HINT),
            (dict(header="f32"), 1, Q4_1_SIZE_HINT),
            (dict(header="swapped"), 1, Q4_1_SWAPPED_HINT)]
    for options, case, hint in bugs:
        assert_failed(check_quantize_q4_1(lambda w, o=options: quantize(w, **o)), case, hint)
    assert not check_quantize_q4_1(reference_quantize_q4_1).passed


def test_quantize_q4_1_constant_block_and_round_trip_hints():
    def divides_by_zero(w):
        block = quantize(w)
        if w.min() == w.max():
            block[4:] = 0x88                   # codes 8: a NaN cast, not 0
        return block

    assert_failed(check_quantize_q4_1(divides_by_zero), 5, Q4_1_CONSTANT_HINT)

    def off_by_one_code(w):
        block = quantize(w)
        block[4] ^= 1                          # code 0 one step away from its weight
        return block

    assert_failed(check_quantize_q4_1(off_by_one_code), 1, "steps from the inputs")


def test_quantize_q4_1_round_trip_hint_when_no_bug_is_named():
    halves = q4_1_encode_cases()[2].args["weights"]

    def ties_down(w):
        block = quantize(w)
        if np.array_equal(w, halves):         # 2.5 (weight 4) rounded down to code 2
            block[4 + 4] = (block[4 + 4] & 0xF0) | 2
        return block

    result = check_quantize_q4_1(ties_down)
    assert_failed(result, 3, "within half a step of every weight")


# --------------------------------------------------------------------------- min-p

def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def min_p(logits, temperature, p_min, order="first", threshold="relative", renormalise=True,
          strict=False, stable=True, scale="divide"):
    """A learner's min-p, right or with one typical bug."""
    z = logits / temperature if scale == "divide" else (
        logits * temperature if scale == "times" else logits)
    probs = softmax(z) if stable else np.exp(z) / np.exp(z).sum()
    judged = softmax(logits) if order == "after" else probs
    bar = p_min if threshold == "absolute" else p_min * judged.max()
    keep = judged > bar if strict else judged >= bar
    if threshold == "logits":
        keep = z >= p_min * z.max()
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum() if renormalise else kept


def test_min_p_by_hand():
    hand = min_p_cases()[0]
    np.testing.assert_allclose(hand.expected, np.array([0.5, 0.3, 0.15, 0.0]) / 0.95)
    np.testing.assert_allclose(min_p_cases()[3].expected, [0, 0.5, 0.5, 0, 0])


def test_min_p():
    assert check_min_p(min_p).passed
    bugs = [(dict(threshold="absolute"), 1, MIN_P_ABSOLUTE_HINT),
            (dict(renormalise=False), 1, MIN_P_UNNORMALISED_HINT),
            (dict(order="after"), 2, MIN_P_TEMPERATURE_AFTER_HINT),
            (dict(scale="none"), 2, MIN_P_NO_TEMPERATURE_HINT),
            (dict(scale="times"), 2, MIN_P_TEMPERATURE_TIMES_HINT),
            (dict(threshold="logits"), 1, MIN_P_LOGITS_HINT),
            (dict(strict=True), 4, MIN_P_STRICT_HINT),
            (dict(stable=False), 5, MIN_P_OVERFLOW_HINT)]
    for options, case, hint in bugs:
        assert_failed(check_min_p(lambda l, t, p, o=options: min_p(l, t, p, **o)), case, hint)
    assert not check_min_p(reference_min_p).passed


def test_the_reference_agrees_with_transformers_min_p():
    torch = pytest.importorskip("torch")
    logits_process = pytest.importorskip("transformers.generation.logits_process")
    for case in min_p_cases():
        logits, temperature, p_min = case.args.values()
        scores = torch.from_numpy(logits / temperature)[None]
        warped = logits_process.MinPLogitsWarper(p_min)(None, scores)
        np.testing.assert_allclose(torch.softmax(warped, -1)[0].numpy(), case.expected,
                                   atol=1e-12)


def test_every_hint_of_the_module_is_used_by_a_test():
    hints = {name for name in dir(checks) if name.endswith("_HINT")}
    tested = {name for name in globals() if name.endswith("_HINT")}
    generic = {"FOLD_HINT", "Q4_1_ENCODE_HINT", "MIN_P_HINT"}
    assert hints - generic <= tested, hints - generic - tested

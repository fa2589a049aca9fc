"""Checks for the exercises of chapter 11 (a real language model, opened): RMSNorm, one Q4_1
block of a GGUF file, and top-p (nucleus) sampling's renormalised distribution.

Each check runs the learner's function on hidden cases; where a typical bug is recognised
(the mean subtracted as in LayerNorm, epsilon outside the root, the two nibbles of a byte
read as neighbours or high first, the token that crosses p dropped, the kept mass not
renormalised) the hint names it.

References
----------
Zhang and Sennrich (2019), "Root Mean Square Layer Normalization", eq. (4).
GGUF / ggml, ``block_q4_1`` and ``dequantize_row_q4_1`` (ggml-quants.c).
Holtzman et al. (2020), "The Curious Case of Neural Text Degeneration", section 3.1 (eq. 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.pretrained.quants import dequantize, q4_1_parts

# --------------------------------------------------------------------------- RMSNorm

RMS_HINT = ("RMSNorm divides x by the root of (the mean of its squares over the last axis, plus eps) "
            "and multiplies by the gain g; it does not subtract the mean.")
RMS_CENTRED_HINT = "You subtracted the mean, as LayerNorm does: RMSNorm keeps it and divides by the root mean square."
RMS_EPS_OUTSIDE_HINT = "eps goes inside the square root, added to the mean square, not to its root."


def reference_rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    """g * x / sqrt(mean(x^2, last axis) + eps) (Zhang and Sennrich 2019, eq. (4))."""
    return g * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)


def _rms_diagnose(got: Any, case: Case) -> str | None:
    x, g, eps = case.args["x"], case.args["g"], case.args["eps"]
    centred = x - x.mean(-1, keepdims=True)
    if same_values(got, g * centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps), case):
        return RMS_CENTRED_HINT
    if same_values(got, g * x / (np.sqrt((x ** 2).mean(-1, keepdims=True)) + eps), case):
        return RMS_EPS_OUTSIDE_HINT
    return None


def rms_norm_cases() -> list[Case]:
    """The hidden cases of :func:`check_rms_norm`."""
    rng = np.random.default_rng(11)

    def case(description: str, x: np.ndarray, g: np.ndarray, eps: float) -> Case:
        return Case(description=description, args={"x": x, "g": g, "eps": eps},
                    expected=reference_rms_norm(x, g, eps), atol=1e-10, rtol=1e-8, hint=RMS_HINT,
                    diagnose=_rms_diagnose)

    return [
        case("one vector of 4 with mean 3, unit gain", np.array([1.0, 2.0, 4.0, 5.0]), np.ones(4), 1e-5),
        case("a (2, 5, 8) batch with a learned gain", rng.normal(1.0, 2.0, (2, 5, 8)),
             rng.normal(1.0, 0.2, 8), 1e-5),
        case("small entries, where eps matters", 1e-3 * rng.normal(size=(3, 6)), np.ones(6), 1e-4),
    ]


def check_rms_norm(fn: Callable[[np.ndarray, np.ndarray, float], Any]) -> CheckResult:
    """Check a learner's ``rms_norm(x, g, eps)``.

    Parameters
    ----------
    fn : callable
        ``x: (..., d)``, ``g: (d,)`` (float64 NumPy arrays) and ``eps: float`` -> ``(..., d)``.
    """
    return run_cases("check_rms_norm", fn, rms_norm_cases(), references=(reference_rms_norm,))


# --------------------------------------------------------------------------- Q4_1

Q4_1_HINT = ("A block is 20 bytes: float16 scale d (bytes 0-1), float16 minimum m (bytes 2-3), then 16 "
             "bytes; byte i holds code i in its low 4 bits and code i + 16 in its high 4 bits; a weight is its "
             "code scaled by d, plus m.")
Q4_1_NEIGHBOURS_HINT = ("You read the two nibbles of byte i as codes 2i and 2i + 1: in Q4_1 the low nibbles are "
                        "codes 0-15 and the high nibbles codes 16-31.")
Q4_1_HIGH_FIRST_HINT = "You put the high nibbles first: the low nibbles are codes 0-15, the high ones 16-31."


def reference_q4_1_block(block: np.ndarray) -> np.ndarray:
    """The 32 float32 weights of one 20-byte Q4_1 block: d * q + m."""
    return dequantize(torch.from_numpy(np.ascontiguousarray(block))[None], "Q4_1")[0].numpy()


def _q4_1_variant(block: np.ndarray, order: str) -> np.ndarray:
    d = block[0:2].view(np.float16)[0].astype(np.float32)
    m = block[2:4].view(np.float16)[0].astype(np.float32)
    low, high = block[4:] & 0x0F, block[4:] >> 4
    codes = np.stack([low, high], 1).reshape(-1) if order == "neighbours" else np.concatenate([high, low])
    return d * codes.astype(np.float32) + m


def _q4_1_diagnose(got: Any, case: Case) -> str | None:
    block = case.args["block"]
    if same_values(got, _q4_1_variant(block, "neighbours"), case):
        return Q4_1_NEIGHBOURS_HINT
    if same_values(got, _q4_1_variant(block, "high_first"), case):
        return Q4_1_HIGH_FIRST_HINT
    return None


def _q4_1_block(scale: float, minimum: float, codes: np.ndarray) -> np.ndarray:
    packed = (codes[:16] | (codes[16:] << 4)).astype(np.uint8)
    head = np.array([scale, minimum], dtype="<f2").view(np.uint8)
    return np.concatenate([head, packed])


def q4_1_cases() -> list[Case]:
    """The hidden cases of :func:`check_q4_1_block`."""
    rng = np.random.default_rng(41)

    def case(description: str, block: np.ndarray) -> Case:
        return Case(description=description, args={"block": block}, expected=reference_q4_1_block(block),
                    atol=0, rtol=0, hint=Q4_1_HINT, diagnose=_q4_1_diagnose)

    return [
        case("codes 0..31 mod 16, d = 0.5, m = -1", _q4_1_block(0.5, -1.0, np.arange(32) % 16)),
        case("random codes, d = 0.0123, m = -0.1", _q4_1_block(0.0123, -0.1, rng.integers(0, 16, 32))),
        case("all codes 15 in the high nibbles, d = 2, m = 0.25",
             _q4_1_block(2.0, 0.25, np.r_[np.zeros(16, int), np.full(16, 15)])),
    ]


def check_q4_1_block(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``dequantize_q4_1(block)``: one 20-byte Q4_1 block -> 32 float32 weights.

    Parameters
    ----------
    fn : callable
        ``block: (20,) np.uint8`` -> ``(32,)`` floats.
    """
    return run_cases("check_q4_1_block", fn, q4_1_cases(),
                     references=(reference_q4_1_block, dequantize, q4_1_parts))


# --------------------------------------------------------------------------- top-p

TOP_P_HINT = ("Sort the probabilities in decreasing order and keep each token while the mass of the tokens "
              "before it is below p (the token that crosses p is kept); zero the rest and divide by the kept mass.")
TOP_P_CROSSING_HINT = "You dropped the token that crosses p: keep a token while the mass *before* it is below p."
TOP_P_UNNORMALISED_HINT = "The kept probabilities must be renormalised to sum to 1."


def reference_top_p(probs: np.ndarray, p: float) -> np.ndarray:
    """The nucleus distribution: the smallest most-probable set with mass >= p, renormalised."""
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]
    kept = np.zeros_like(probs)
    kept[order[before < p]] = probs[order[before < p]]
    return kept / kept.sum()


def _top_p_diagnose(got: Any, case: Case) -> str | None:
    probs, p = case.args["probs"], case.args["p"]
    order = np.argsort(-probs, kind="stable")
    upto = np.cumsum(probs[order])
    strict = np.zeros_like(probs)
    strict[order[upto <= p]] = probs[order[upto <= p]]
    if strict.sum() > 0 and same_values(got, strict / strict.sum(), case):
        return TOP_P_CROSSING_HINT
    kept = reference_top_p(probs, p) * probs[reference_top_p(probs, p) > 0].sum()
    if same_values(got, kept, case):
        return TOP_P_UNNORMALISED_HINT
    return None


def top_p_cases() -> list[Case]:
    """The hidden cases of :func:`check_top_p`."""
    rng = np.random.default_rng(7)
    peaked = np.exp(rng.normal(0, 2, 50))

    def case(description: str, probs: np.ndarray, p: float) -> Case:
        return Case(description=description, args={"probs": probs, "p": p}, expected=reference_top_p(probs, p),
                    atol=1e-12, rtol=1e-9, hint=TOP_P_HINT, diagnose=_top_p_diagnose)

    return [
        case("5 tokens, p = 0.8", np.array([0.1, 0.5, 0.05, 0.25, 0.1]), 0.8),
        case("a peaked vocabulary of 50, p = 0.9", peaked / peaked.sum(), 0.9),
        case("p = 0.3, below the largest probability", np.array([0.2, 0.35, 0.15, 0.3]), 0.3),
        case("p = 1 keeps every token", np.array([0.4, 0.3, 0.2, 0.1]), 1.0),
    ]


def check_top_p(fn: Callable[[np.ndarray, float], Any]) -> CheckResult:
    """Check a learner's ``top_p(probs, p)``: the renormalised nucleus of a probability vector.

    Parameters
    ----------
    fn : callable
        ``probs: (vocab_size,)`` float64 NumPy array summing to 1, ``p`` in (0, 1] -> ``(vocab_size,)``.
    """
    return run_cases("check_top_p", fn, top_p_cases(), references=(reference_top_p,))


__all__ = ["check_q4_1_block", "check_rms_norm", "check_top_p", "q4_1_cases", "reference_q4_1_block",
           "reference_rms_norm", "reference_top_p", "rms_norm_cases", "top_p_cases"]

"""Checks for the exercises of chapter 11 (a real language model, opened): folding
RMSNorm's gain into the next matrix, encoding one Q4_1 block as llama.cpp does, and
min-p sampling.

The page writes ``rms_norm``, decodes a Q4_1 block and writes top-p; each exercise asks
for what it does not: the gain moved into the weights that follow the norm, the encoder
of the block (checked by its bytes, and by how far its round trip lands from the weights
when the bytes differ), and a threshold relative to the most probable token. Where a
typical bug is recognised the hint names it: the gain on the columns of ``W`` (the
column-vector convention) or divided out, ``W'`` in PyTorch's ``(out, in)`` layout; the
nibbles of a byte as neighbours or high first, 16 levels instead of 15 (and a code of 16
spilling into the next nibble), codes truncated or rounded half to even, a float32
header, the header's two numbers swapped; an absolute threshold, the kept mass not
renormalised, the temperature applied after the threshold, missing or multiplied, a
threshold on the logits, a strict comparison, a softmax that overflows.

References
----------
Zhang and Sennrich (2019), "Root Mean Square Layer Normalization", eq. (4); Ashkboos et
al. (2024), "QuaRot" (the gains of the norms folded into the next linear layers).
GGUF / ggml, ``block_q4_1``, ``quantize_row_q4_1_ref`` and ``dequantize_row_q4_1``
(``ggml/src/ggml-quants.c``); ``gguf-py``, ``Q4_1.quantize_blocks``.
Nguyen et al. (2024), "Turning Up the Heat: Min-p Sampling for Creative and Coherent
LLM Outputs".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.checks.guard import allowing

# ------------------------------------------------------------------ folding the gain

FOLD_HINT = (
    "With row vectors, feature i of the normalised x multiplies row i of W: "
    "the gain's entry i must scale row i of W, every column of it."
)
FOLD_COLUMNS_HINT = (
    "You scaled the columns of W, as for column vectors (W times x): "
    "here x multiplies W from the left, so the gain's entry i scales "
    "row i of W."
)
FOLD_DIVIDED_HINT = (
    "You divided W by the gain: the norm multiplies x by the gain, "
    "and W' must multiply by it too, so that the plain norm followed "
    "by W' gives the same."
)
FOLD_TRANSPOSED_HINT = (
    "You returned W' transposed, in the (out, in) layout of "
    "PyTorch's nn.Linear weight: return it as W is given, of shape"
    " (d, n)."
)


def reference_fold_gain(gamma: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``diag(gamma) W``: row i of ``W`` times ``gamma[i]``, so that
    ``rms_norm(x, gamma) @ W == rms_norm(x, 1) @ W'`` for every ``x``."""
    return gamma[:, None] * W


def _fold_diagnose(got: Any, case: Case) -> str | None:
    gamma, W = case.args["gamma"], case.args["W"]
    expected = reference_fold_gain(gamma, W)
    if (
        isinstance(got, np.ndarray)
        and got.shape == expected.T.shape
        and same_values(got, expected.T, case)
    ):
        return FOLD_TRANSPOSED_HINT
    if W.shape[0] == W.shape[1] and same_values(got, W * gamma[None, :], case):
        return FOLD_COLUMNS_HINT
    if same_values(got, W / gamma[:, None], case):
        return FOLD_DIVIDED_HINT
    return None


def fold_gain_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_fold_gain`; with ``seed`` (the grade of record's), two
    more gains and matrices of sizes drawn from it."""
    rng = np.random.default_rng(11)

    def case(description: str, gamma: np.ndarray, W: np.ndarray) -> Case:
        return Case(
            description=description,
            args={"gamma": gamma, "W": W},
            expected=reference_fold_gain(gamma, W),
            atol=1e-12,
            rtol=1e-10,
            hint=FOLD_HINT,
            diagnose=_fold_diagnose,
        )

    return [
        case(
            "gamma = [2, 0.5], W = [[1, 2], [3, 4]], by hand",
            np.array([2.0, 0.5]),
            np.array([[1.0, 2.0], [3.0, 4.0]]),
        ),
        case(
            "d = 6 into n = 3, fewer columns than rows",
            rng.normal(1.0, 0.3, 6),
            rng.normal(size=(6, 3)),
        ),
        case(
            "d = 16 into n = 48 (three matrices side by side, as W^Q, W^K, W^V)",
            rng.normal(1.0, 0.3, 16),
            rng.normal(size=(16, 48)),
        ),
    ] + [case(f"drawn when graded: d = {len(gamma)} into n = {W.shape[1]}", gamma, W)
         for gamma, W in _drawn_gains(seed)]


def _drawn_gains(seed: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two ``(gamma (d,), W (d, n))`` drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(2):
        d, n = (int(v) for v in rng.integers(1, 40, size=2))
        drawn.append((rng.normal(1.0, 0.3, d), rng.normal(size=(d, n))))
    return drawn


@allowing("NumPy operations: indexing with None (a new axis), products and broadcasting, or "
          "np.diag and a matrix product.")
def check_fold_gain(fn: Callable[[np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``fold_gain(gamma, W)``: RMSNorm's gain folded into the next
    matrix.

    ``W'`` must satisfy ``rms_norm(x, gamma, eps) @ W == rms_norm(x, 1, eps) @ W'`` for
    every ``x`` (row vectors, ``x W``), which fixes it: ``diag(gamma) W``.

    Parameters
    ----------
    fn : callable
        ``gamma: (d,)`` and ``W: (d, n)`` (float64 NumPy arrays) -> ``W': (d, n)``.

    Returns
    -------
    CheckResult
        Passed when ``W'`` matches on every hidden case; otherwise the first failing
        case and a hint (the gain on the columns, divided out, or ``W'`` transposed).

    References
    ----------
    Zhang and Sennrich (2019), eq. (4); Ashkboos et al. (2024), "QuaRot".
    """
    return run_cases(
        "check_fold_gain", fn, fold_gain_cases(), references=(reference_fold_gain,)
    )


# ---------------------------------------------------------------------- Q4_1 encoder

Q4_1_ENCODE_HINT = (
    "A block is 20 bytes: the float16 scale (bytes 0-1), the float16 "
    "minimum (bytes 2-3), then byte i holding code i in its low 4 bits"
    " and code i + 16 in its high 4 bits. The scale is the range over "
    "15 steps; a code is the number of steps from the minimum, rounded"
    " to the nearest, halves up, at most 15."
)
Q4_1_NEIGHBOURS_HINT = (
    "You packed codes 2i and 2i + 1 into byte i: in Q4_1 byte i "
    "holds code i (low nibble) and code i + 16 (high nibble)."
)
Q4_1_HIGH_FIRST_HINT = (
    "You put codes 0-15 in the high nibbles: they go in the low 4 "
    "bits of each byte, codes 16-31 in the high 4 bits."
)
Q4_1_SIXTEEN_HINT = (
    "Your scale divides the range by 16: 16 levels are 15 steps "
    "apart, so the scale is the range over 15 and the largest weight "
    "gets code 15."
)
Q4_1_SPILL_HINT = (
    "Your scale divides the range by 16 and the codes are not kept to "
    "15: the largest weight gets code 16, which needs a fifth bit and "
    "spills into the next nibble. 16 levels are 15 steps apart: divide "
    "the range by 15."
)
Q4_1_TRUNCATED_HINT = (
    "Your codes are truncated (a cast to an integer type drops the "
    "fraction): round to the nearest code instead, a half step up, "
    "or every weight lands up to a whole step low."
)
Q4_1_HALF_EVEN_HINT = (
    "A weight exactly half way between two codes must go to the "
    "upper one, as llama.cpp does (add one half, then drop the "
    "fraction); np.round sends halves to the even code."
)
Q4_1_SWAPPED_HINT = (
    "The header holds the scale first (bytes 0-1), then the minimum (bytes 2-3)."
)
Q4_1_SIZE_HINT = (
    "A Q4_1 block is 20 bytes: the scale and the minimum take 2 bytes "
    "each, as float16, then 16 bytes of codes. Did you store them as "
    "float32 or float64?"
)
Q4_1_CONSTANT_HINT = (
    "Every weight of this block is equal: the scale is 0, and "
    "llama.cpp then takes 0 as its reciprocal, so every code is 0."
)


def _quantize(
    weights: np.ndarray,
    *,
    levels: int = 15,
    clip: bool = True,
    rounding: str = "up",
    order: str = "low_first",
    swapped: bool = False,
) -> np.ndarray:
    """A Q4_1 block as ``quantize_row_q4_1_ref`` writes it, or a typical bug's."""
    w = np.asarray(weights, dtype=np.float32)
    low, high = w.min(), w.max()
    scale = (high - low) / np.float32(levels)
    header = np.array([low, scale] if swapped else [scale, low], dtype=np.float16)
    inverse = np.float32(1) / scale if scale else np.float32(0)
    steps = (w - low) * inverse
    if rounding == "up":
        codes = np.floor(steps + np.float32(0.5))
    elif rounding == "even":
        codes = np.round(steps)
    else:  # truncated
        codes = np.floor(steps)
    codes = (np.minimum(codes, 15) if clip else codes).astype(np.int64)
    if order == "neighbours":
        first, second = codes[0::2], codes[1::2]
    elif order == "high_first":
        first, second = codes[16:], codes[:16]
    else:
        first, second = codes[:16], codes[16:]
    packed = ((first | (second << 4)) & 0xFF).astype(np.uint8)
    return np.concatenate([header.view(np.uint8), packed])


def reference_quantize_q4_1(weights: np.ndarray) -> np.ndarray:
    """One 20-byte Q4_1 block of 32 weights, byte for byte as llama.cpp's reference
    quantizer.

    scale = (max - min) / 15 and minimum = min (float32, stored as float16); code =
    floor((w - min) * (1 / scale) + 1/2), at most 15 (all codes 0 when scale = 0); byte
    i = code i | code (i + 16) << 4.
    """
    return _quantize(weights)


def _decode(block: np.ndarray) -> np.ndarray:
    scale = block[0:2].view(np.float16)[0].astype(np.float64)
    low = block[2:4].view(np.float16)[0].astype(np.float64)
    codes = np.concatenate([block[4:] & 0x0F, block[4:] >> 4]).astype(np.float64)
    return scale * codes + low


def _round_trip_hint(got: Any, case: Case) -> str | None:
    """How far the learner's block decodes from the weights, in steps of the scale."""
    if not (
        isinstance(got, np.ndarray)
        and got.shape == (20,)
        and got.dtype.kind in "iu"
        and got.min() >= 0
        and got.max() <= 255
    ):
        return None
    w = case.args["weights"].astype(np.float64)
    step = (w.max() - w.min()) / 15
    if step == 0:
        return None
    header = np.array([step, w.min()], dtype=np.float16).astype(np.float64)
    # a right block is within half a step, plus what the float16 header moves
    bound = 0.5 + (15 * abs(header[0] - step) + abs(header[1] - w.min())) / step + 1e-6
    with np.errstate(all="ignore"):
        error = np.abs(_decode(got.astype(np.uint8)) - w).max() / step
    if not np.isfinite(error):
        return None
    if error <= bound:
        return (
            "Your block decodes to within half a step of every weight, but its "
            "bytes are not llama.cpp's: check the rounding (to the nearest code, "
            "halves up) and that the codes use the float32 scale and minimum."
        )
    return (
        f"Your block decodes to weights up to {error:.2g} steps from the inputs, "
        "where a right block stays within half a step (plus the float16 rounding "
        "of the header). " + Q4_1_ENCODE_HINT
    )


def _q4_1_diagnose(got: Any, case: Case) -> str | None:
    weights = case.args["weights"]
    if isinstance(got, np.ndarray) and got.ndim == 1 and got.size in (24, 36):
        return Q4_1_SIZE_HINT
    expected = reference_quantize_q4_1(weights)
    variants = [
        (Q4_1_NEIGHBOURS_HINT, dict(order="neighbours")),
        (Q4_1_HIGH_FIRST_HINT, dict(order="high_first")),
        (Q4_1_SPILL_HINT, dict(levels=16, clip=False)),
        (Q4_1_SIXTEEN_HINT, dict(levels=16)),
        (Q4_1_TRUNCATED_HINT, dict(rounding="truncated")),
        (Q4_1_HALF_EVEN_HINT, dict(rounding="even")),
        (Q4_1_SWAPPED_HINT, dict(swapped=True)),
    ]
    for hint, options in variants:
        variant = _quantize(weights, **options)
        if not np.array_equal(variant, expected) and same_values(got, variant, case):
            return hint
    return _round_trip_hint(got, case)


def _q4_1_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "trained": rng.normal(0.0, 0.02, 32).astype(np.float32),
        "positive": rng.uniform(0.9, 1.1, 32).astype(np.float32),
    }


def q4_1_encode_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_quantize_q4_1`; with ``seed`` (the grade of record's),
    two more blocks of 32 weights drawn from it."""
    drawn = _q4_1_weights(41)
    halves = np.r_[0.0, 15.0, 0.5, 1.5, 2.5, 7.5, 14.5, np.arange(25) % 15].astype(
        np.float32
    )

    def case(
        description: str, weights: np.ndarray, hint: str = Q4_1_ENCODE_HINT
    ) -> Case:
        return Case(
            description=description,
            args={"weights": weights},
            expected=reference_quantize_q4_1(weights),
            atol=0,
            rtol=0,
            hint=hint,
            dtype=np.uint8,
            diagnose=_q4_1_diagnose,
        )

    return [
        case(
            "weights i mod 16: scale 1, minimum 0, codes 0-15 twice, by hand",
            (np.arange(32) % 16).astype(np.float32),
        ),
        case("32 weights of a trained matrix (spread 0.02)", drawn["trained"]),
        case("weights half way between two codes (scale 1)", halves),
        case("all weights positive, between 0.9 and 1.1", drawn["positive"]),
        case(
            "every weight equal: a scale of 0",
            np.full(32, 0.375, np.float32),
            hint=Q4_1_CONSTANT_HINT,
        ),
    ] + ([] if seed is None else [
        case(f"drawn when graded: {name} weights", weights)
        for name, weights in _q4_1_weights(seed).items()])


@allowing("NumPy operations: min and max, arithmetic in np.float32, np.floor, np.minimum, "
          "astype, viewing float16 values as bytes (`.view`), shifts (<<), bitwise or (|) and "
          "np.concatenate.",
          library=("gguf:quantize", "gguf:quantize_blocks", "gguf:Q4_1"))
def check_quantize_q4_1(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``quantize_q4_1(weights)``: 32 weights -> one 20-byte Q4_1
    block.

    The bytes must be those of llama.cpp's reference quantizer
    (``quantize_row_q4_1_ref``): float16 scale ``(max - min) / 15`` and minimum ``min``;
    codes rounded to the nearest (halves up) from the float32 scale and minimum, at most
    15, all 0 for a scale of 0; byte ``i`` holding code ``i`` in its low nibble and code
    ``i + 16`` in its high nibble. When the bytes differ and no typical bug is
    recognised, the hint says how far the block decodes from the weights (a right one
    within half a step, plus float16 rounding).

    Parameters
    ----------
    fn : callable
        ``weights: (32,) np.float32`` -> ``(20,) np.uint8``.

    Returns
    -------
    CheckResult
        Passed when every hidden case gives the reference's bytes.

    References
    ----------
    ggml, ``quantize_row_q4_1_ref`` (``ggml/src/ggml-quants.c``); ``gguf-py``,
    ``Q4_1.quantize_blocks``.
    """
    return run_cases(
        "check_quantize_q4_1",
        fn,
        q4_1_encode_cases(),
        references=(reference_quantize_q4_1, _quantize),
    )


# --------------------------------------------------------------------------- min-p

MIN_P_HINT = (
    "Divide the logits by the temperature, take their softmax, keep the "
    "tokens whose probability is at least p_min times the largest "
    "probability, set the others to 0 and divide the kept ones by their sum."
)
MIN_P_ABSOLUTE_HINT = (
    "Your threshold is p_min itself: min-p keeps a token when its "
    "probability is at least p_min times the largest one, so the "
    "threshold follows the model's confidence."
)
MIN_P_UNNORMALISED_HINT = "The kept probabilities must be renormalised to sum to 1."
MIN_P_TEMPERATURE_AFTER_HINT = (
    "You chose the kept tokens before applying the "
    "temperature: here the threshold is taken on the "
    "tempered distribution (temperature first, as on the "
    "page's top-p)."
)
MIN_P_NO_TEMPERATURE_HINT = (
    "The temperature is missing: divide the logits by it before the softmax."
)
MIN_P_TEMPERATURE_TIMES_HINT = (
    "You multiplied the logits by the temperature: divide "
    "them, so that a temperature above 1 flattens the "
    "distribution."
)
MIN_P_LOGITS_HINT = (
    "You compared logits with the threshold: the rule is on "
    "probabilities, after the softmax."
)
MIN_P_STRICT_HINT = (
    "A token whose probability equals p_min times the largest is kept"
    " (at least, not more than): with p_min = 1 the most probable "
    "tokens themselves stay."
)
MIN_P_OVERFLOW_HINT = (
    "Your result holds NaN or inf: with logits near 1000 the "
    "exponential overflows. Subtract the largest logit before "
    "np.exp (the softmax does not change)."
)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def reference_min_p(logits: np.ndarray, temperature: float, p_min: float) -> np.ndarray:
    """Min-p's distribution: the softmax of ``logits / temperature``, tokens below
    ``p_min`` times its largest probability set to 0, the rest renormalised (Nguyen et
    al. 2024)."""
    probs = _softmax(logits / temperature)
    kept = np.where(probs >= p_min * probs.max(), probs, 0.0)
    return kept / kept.sum()


def _min_p_variants(
    logits: np.ndarray, temperature: float, p_min: float
) -> list[tuple[str, Any]]:
    probs = _softmax(logits / temperature)
    absolute = np.where(probs >= p_min, probs, 0.0)
    mask_at_1 = (lambda p: p >= p_min * p.max())(_softmax(logits))
    after = np.where(mask_at_1, probs, 0.0)
    untempered = reference_min_p(logits, 1.0, p_min)
    times = reference_min_p(logits * temperature, 1.0, p_min)
    z = logits / temperature
    on_logits = np.where(z >= p_min * z.max(), probs, 0.0)
    return [
        (MIN_P_UNNORMALISED_HINT, np.where(probs >= p_min * probs.max(), probs, 0.0)),
        (
            MIN_P_ABSOLUTE_HINT,
            absolute / absolute.sum() if absolute.sum() > 0 else absolute,
        ),
        (MIN_P_ABSOLUTE_HINT, absolute),
        (MIN_P_TEMPERATURE_AFTER_HINT, after / after.sum()),
        (MIN_P_NO_TEMPERATURE_HINT, untempered),
        (MIN_P_TEMPERATURE_TIMES_HINT, times),
        (
            MIN_P_LOGITS_HINT,
            on_logits / on_logits.sum() if on_logits.sum() > 0 else on_logits,
        ),
    ]


def _min_p_diagnose(got: Any, case: Case) -> str | None:
    logits, temperature, p_min = (
        case.args[k] for k in ("logits", "temperature", "p_min")
    )
    if (
        isinstance(got, np.ndarray)
        and got.dtype.kind == "f"
        and not np.isfinite(got).all()
    ):
        if np.abs(logits / temperature).max() > 500:
            return MIN_P_OVERFLOW_HINT
        if p_min == 1:
            return MIN_P_STRICT_HINT
        z = logits / temperature
        if not (z >= p_min * z.max()).any():  # nothing kept: the rule read on logits
            return MIN_P_LOGITS_HINT
        return None
    expected = reference_min_p(logits, temperature, p_min)
    for hint, variant in _min_p_variants(logits, temperature, p_min):
        if not same_values(variant, expected, case) and same_values(got, variant, case):
            return hint
    return None


def min_p_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_min_p`; with ``seed`` (the grade of record's), two more
    vocabularies, temperatures and thresholds drawn from it."""
    rng = np.random.default_rng(7)
    vocabulary = rng.normal(0.0, 2.0, 50)

    def case(
        description: str, logits: np.ndarray, temperature: float, p_min: float
    ) -> Case:
        return Case(
            description=description,
            args={"logits": logits, "temperature": temperature, "p_min": p_min},
            expected=reference_min_p(logits, temperature, p_min),
            atol=1e-12,
            rtol=1e-9,
            hint=MIN_P_HINT,
            diagnose=_min_p_diagnose,
        )

    return [
        case(
            "probabilities [0.5, 0.3, 0.15, 0.05] as logits, T = 1, p_min = 0.2, "
            "by hand",
            np.log([0.5, 0.3, 0.15, 0.05]),
            1.0,
            0.2,
        ),
        case("50 tokens, T = 0.7, p_min = 0.1", vocabulary, 0.7, 0.1),
        case(
            "50 tokens, T = 1.5, p_min = 0.05: hot, more tokens kept",
            vocabulary,
            1.5,
            0.05,
        ),
        case(
            "p_min = 1 keeps only the two tied most probable tokens",
            np.array([1.0, 3.0, 3.0, 0.0, 2.5]),
            0.8,
            1.0,
        ),
        case("logits near 1000, T = 0.8", 1000.0 + rng.normal(0.0, 1.0, 20), 0.8, 0.3),
    ] + [case(f"drawn when graded: {len(logits)} tokens, T = {t:g}, p_min = {p:g}", logits, t, p)
         for logits, t, p in _drawn_logits(seed)]


def _drawn_logits(seed: int | None) -> list[tuple[np.ndarray, float, float]]:
    """Two ``(logits, temperature, p_min)`` drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [(rng.normal(0.0, 2.0, int(rng.integers(2, 80))), round(float(rng.uniform(0.3, 2.0)), 2),
             round(float(rng.uniform(0.01, 0.9)), 2)) for _ in range(2)]


@allowing("NumPy operations: np.exp, max, sums, comparisons and np.where.",
          library=("transformers:MinPLogitsWarper",))
def check_min_p(fn: Callable[[np.ndarray, float, float], Any]) -> CheckResult:
    """Check a learner's ``min_p_probs(logits, temperature, p_min)``: min-p's
    distribution.

    The softmax of ``logits / temperature``; every token whose probability is below
    ``p_min`` times the largest set to 0 (one equal to it kept); the kept ones
    renormalised to sum to 1.

    Parameters
    ----------
    fn : callable
        ``logits: (vocab_size,)`` float64 NumPy array, ``temperature > 0``, ``p_min`` in
        [0, 1] -> ``(vocab_size,)`` probabilities.

    Returns
    -------
    CheckResult
        Passed when every hidden case matches; otherwise the first failing case and a
        hint (an absolute threshold, no renormalisation, the temperature after the
        threshold, missing or multiplied, a threshold on logits, a strict comparison, an
        overflow).

    References
    ----------
    Nguyen et al. (2024), "Turning Up the Heat: Min-p Sampling for Creative and Coherent
    LLM Outputs".
    """
    return run_cases("check_min_p", fn, min_p_cases(), references=(reference_min_p,))


__all__ = [
    "check_fold_gain",
    "check_min_p",
    "check_quantize_q4_1",
    "fold_gain_cases",
    "min_p_cases",
    "q4_1_encode_cases",
    "reference_fold_gain",
    "reference_min_p",
    "reference_quantize_q4_1",
]

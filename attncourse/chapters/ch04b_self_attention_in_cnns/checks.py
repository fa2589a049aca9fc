"""Checks for the exercises of the chapter "Self-attention inside a CNN".

Two exercises:

- ``pixel_attention(x, w_q, w_k, w_v)``: the inner part of a non-local block
  (Wang et al. 2018), the self-attention layer of SAGAN (Zhang et al. 2019), in
  NumPy. A feature map x of shape (C, H, W) is read as N = H W position
  vectors x_i; the 1x1 convolutions are the matrices W_q, W_k (d_k, C) and W_v
  (d_v, C), so q_i = W_q x_i, k_j = W_k x_j, v_j = W_v x_j, and
  alpha_ij = softmax_j(q_i . k_j / sqrt(d_k)), o_i = sum_j alpha_ij v_j.
  No biases, no output projection W_o, no gate gamma.
- ``receptive_field(layers)``: the side, in input pixels, of the window one
  unit of the last layer of a stack of convolutions and poolings sees.

Each check runs the learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`; on a failure the answer is
compared with typical buggy versions (positions numbered column by column,
the 1/sqrt(d_k) left out, the softmax over the queries, the output left as
(H W, d_v), the strides ignored, ...) so that the hint names the likely bug.
The references are the library's own functions
(:func:`attncourse.functional.scaled_dot_product_attention` on the flattened
map, equal to the weights of :class:`attncourse.nn.SelfAttention2d`, and
:func:`attncourse.nn.receptive_field`), so check and library agree.

Conventions: positions are numbered row by row, i = r * W + c for the pixel in
row r and column c (0-based), as NumPy's ``x.reshape(C, H * W)`` and torch's
``x.flatten(-2)`` do. ``weights[i, j]`` = alpha_ij, how much query position i
reads key position j; each row sums to 1. ``output`` has the layout of x,
channels first: (d_v, H, W). As in the course's ``attention``, the scores are
divided by sqrt(d_k) (Vaswani et al. 2017); the two papers leave it out.

References
----------
Wang, Girshick, Gupta, He (2018), "Non-local Neural Networks", CVPR, sections
3.1-3.3 (the non-local operation, the embedded Gaussian, the non-local block).
Zhang, Goodfellow, Metaxas, Odena (2019), "Self-Attention Generative
Adversarial Networks", ICML, section 3.
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, eq. (1).
Araujo, Norris, Sim (2019), "Computing Receptive Fields of Convolutional
Neural Networks", Distill (single-path networks: the receptive field size).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from attncourse.checks.core import (
    Case,
    CheckResult,
    buggy_variants,
    fmt_shape,
    run_cases,
    same_values,
    variant_hint,
)
from attncourse.checks.guard import ATTENTION, SOFTMAX, allowing
from attncourse.functional.numpy_attention import scaled_dot_product_attention, softmax
from attncourse.nn.conv_attention import PlainCNN, receptive_field

# Loose enough for a learner who computes in float32 torch, tight enough to
# tell every buggy variant apart.
_ATOL = 1e-5
_RTOL = 1e-4


# --------------------------------------------------------------------- attention over pixels

PA_RULE = (
    "Number the positions row by row (the whole first row of pixels, then the second, ...) and "
    "make a matrix X of shape (H*W, C), one row per position. The 1x1 convolutions are matrices "
    "acting on each pixel's channels, w_q of shape (d_k, C), and the same for keys and values. "
    "The weights are the softmax over each row (the keys) of the dot products of queries and "
    "keys scaled by the square root of d_k, (H*W, H*W); the output puts each position's "
    "weighted sum of the values back on the (d_v, H, W) grid. Return the output, then the "
    "weights."
)
PA_PAIR_HINT = "Return both arrays, in this order: the output, then the weights."
PA_ORDER_HINT = (
    "Your two results are swapped: the (d_v, H, W) output comes first, then "
    "the (H*W, H*W) weights."
)
PA_FLATTEN_HINT = (
    "Your positions are numbered column by column, as a transpose before the reshape or a "
    "Fortran-order reshape does. Number them row by row: the order in which a C-order reshape "
    "of the (H, W) grid reads the pixels."
)
PA_NO_SCALE_HINT = (
    "The scores are not scaled: divide them by the square root of d_k (the rows of w_q) before "
    "the softmax "
    "(eq. (1) of Vaswani et al. 2017; the course's attention does it, the two CNN papers do not)."
)
PA_DK_HINT = (
    "You divided the scores by d_k; divide them by its square root."
)
PA_QUERY_AXIS_HINT = (
    "Your softmax runs over the queries (axis 0), so each column sums to 1. Each query position's "
    "weights over all key positions must sum to 1: softmax along the last axis."
)
PA_SCORES_T_HINT = (
    "Your scores are transposed: row j holds key j against every query. Row i must hold query "
    "i against every key (queries on the left), and the softmax runs along each row."
)
PA_WEIGHTS_T_HINT = (
    "Your weights are transposed: row i must be query position i's weights over the keys "
    "(summing to 1), column j the key. Return the softmax of the scaled scores as it is."
)
PA_PROJECTION_T_HINT = (
    "A projection is used transposed. w_q is (d_k, C) like the weight of a 1x1 convolution, and "
    "it acts on each pixel's channel vector; with the positions as the rows of X (H*W, C) it "
    "acts from the right, transposed (the same for w_k and w_v). Here w_q, w_k and w_v are "
    "square, so the untransposed product runs but gives other numbers."
)
PA_NO_PROJECTION_HINT = (
    "Your scores compare the pixels themselves: the projections are missing. Score each "
    "position's query, W_q applied to its pixel, against each position's key, W_k applied to "
    "its pixel."
)
PA_X_VALUES_HINT = (
    "Your output averages the pixels themselves: the values are W_v applied to each pixel, "
    "(H*W, d_v), so the output has d_v channels: each position's weighted sum of the values."
)
PA_LAYOUT_HINT = (
    "`output` must be on the grid, channels first like x: shape (d_v, H, W) = {shape}. The "
    "weighted sums are (H*W, d_v), one row per position: move the channel axis first, then "
    "regroup the positions into the grid."
)
PA_RESHAPE_HINT = (
    "Your output was reshaped from (H*W, d_v) to (d_v, H, W) without a transpose: reshape only "
    "regroups the numbers in memory order, it does not move the channel axis. Transpose first."
)
PA_OUTPUT_T_HINT = (
    "Your weights are right, but the output sums over the wrong index: output i sums the "
    "values over the keys j, weighted by row i of the weights."
)
PA_OUTPUT_HINT = (
    "Your weights are right but the output is not: output i is the weighted sum of the values "
    "(W_v applied to each pixel) with row i of the weights, put back on the (d_v, H, W) grid."
)
PA_WEIGHTS_SHAPE_HINT = (
    "`weights` must be one matrix {shape}: one row per query position and one column per key "
    "position, both numbered row by row, no batch dimension."
)
PA_OVERFLOW_HINT = (
    "NaN or inf with large scores: exp() of a score near 1000 overflows. Subtract each row's largest "
    "score before exponentiating (the softmax does not change), or use a stable softmax."
)
PA_SINGLE_HINT = (
    'With a single position (H = W = 1) the only weight is alpha_00 = 1, and the output is that '
    "position's value, of shape (d_v, 1, 1). " + PA_RULE
)


def _positions(x: np.ndarray) -> np.ndarray:
    """(C, H, W) -> (H W, C), one row per position, numbered row by row."""
    return x.reshape(x.shape[0], -1).T


def _pixel_attention_reference(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray,
                               w_v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The library's scaled dot-product attention over the positions of the map."""
    _, height, width = x.shape
    positions = _positions(x)
    read, weights = scaled_dot_product_attention(positions @ w_q.T, positions @ w_k.T, positions @ w_v.T)
    return read.T.reshape(w_v.shape[0], height, width), weights


def _column_major(height: int, width: int) -> np.ndarray:
    """Entry m: the row-major index of the m-th position counted column by column."""
    return np.arange(height * width).reshape(height, width).T.ravel()


def _weight_variants(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray,
                     right: np.ndarray) -> list[tuple[str, np.ndarray]]:
    _, height, width = x.shape
    d_k = w_q.shape[0]
    positions = _positions(x)
    scores = (positions @ w_q.T) @ (positions @ w_k.T).T
    order = _column_major(height, width)
    gram = positions @ positions.T
    return buggy_variants([
        (PA_FLATTEN_HINT, lambda: right[np.ix_(order, order)]),
        (PA_NO_SCALE_HINT, lambda: softmax(scores)),
        (PA_DK_HINT, lambda: softmax(scores / d_k)),
        (PA_QUERY_AXIS_HINT, lambda: softmax(scores / math.sqrt(d_k), axis=0)),
        (PA_SCORES_T_HINT, lambda: softmax(scores.T / math.sqrt(d_k))),
        (PA_WEIGHTS_T_HINT, lambda: right.T),
        (PA_PROJECTION_T_HINT, lambda: softmax((positions @ w_q) @ (positions @ w_k).T / math.sqrt(d_k))),
        (PA_NO_PROJECTION_HINT, lambda: softmax(gram / math.sqrt(d_k))),
        (PA_NO_PROJECTION_HINT, lambda: softmax(gram / math.sqrt(x.shape[0]))),
        (PA_NO_PROJECTION_HINT, lambda: softmax(gram)),
    ])


def _output_variants(x: np.ndarray, w_v: np.ndarray, right: np.ndarray) -> list[tuple[str, np.ndarray]]:
    channels, height, width = x.shape
    d_v = w_v.shape[0]
    positions = _positions(x)
    v = positions @ w_v.T
    order = _column_major(height, width)
    return buggy_variants([
        (PA_X_VALUES_HINT, lambda: (right @ positions).T.reshape(channels, height, width)),
        (PA_RESHAPE_HINT, lambda: (right @ v).reshape(d_v, height, width)),
        (PA_OUTPUT_T_HINT, lambda: (right.T @ v).T.reshape(d_v, height, width)),
        (PA_PROJECTION_T_HINT, lambda: (right @ (positions @ w_v)).T.reshape(d_v, height, width)),
        # Positions counted column by column on the way in, put back row by row on the way out.
        (PA_FLATTEN_HINT, lambda: (right @ v).T[:, order].reshape(d_v, height, width)),
    ])


def _diagnose_weights(w: np.ndarray, case: Case) -> str | None:
    x, w_q, w_k = case.args["x"], case.args["w_q"], case.args["w_k"]
    expected = np.asarray(case.expected[1], dtype=np.float64)
    n = expected.shape[0]
    if w.shape != expected.shape:
        return PA_WEIGHTS_SHAPE_HINT.format(shape=fmt_shape(expected.shape)) if w.size in (n * n, n) else None
    hint = variant_hint(w.astype(np.float64), _weight_variants(x, w_q, w_k, expected), expected, case)
    if hint:
        return hint
    if not np.isfinite(w.astype(np.float64)).all():
        return PA_OVERFLOW_HINT
    return None


def _diagnose_output(out: np.ndarray, case: Case) -> str | None:
    x, w_v = case.args["x"], case.args["w_v"]
    channels, height, width = x.shape
    expected = np.asarray(case.expected[0], dtype=np.float64)
    right = np.asarray(case.expected[1], dtype=np.float64)
    for hint, variant in _output_variants(x, w_v, right):
        # A variant of another shape (x's C channels) still names its bug when it matches.
        if not same_values(variant, expected, case) and same_values(out, variant, case):
            return hint
    if out.shape != expected.shape:
        if out.shape == (channels, height, width):
            return PA_X_VALUES_HINT
        if out.size == expected.size:
            return PA_LAYOUT_HINT.format(shape=fmt_shape(expected.shape))
        return None
    if not np.isfinite(out.astype(np.float64)).all():
        return PA_OVERFLOW_HINT
    return PA_OUTPUT_HINT


def _diagnose_pixel_attention(got: Any, case: Case) -> str | None:
    exp_out, exp_w = (np.asarray(a) for a in case.expected)
    if not isinstance(got, tuple):
        if isinstance(got, np.ndarray) and got.shape in (exp_out.shape, exp_w.shape):
            return PA_PAIR_HINT
        return None
    if len(got) != 2:
        return PA_PAIR_HINT
    out, w = got
    if not (isinstance(out, np.ndarray) and isinstance(w, np.ndarray)):
        return None
    if (out.ndim, w.ndim) == (2, 3) or (same_values(out, exp_w, case) and same_values(w, exp_out, case)):
        return PA_ORDER_HINT
    if not same_values(w, exp_w, case):
        return _diagnose_weights(w, case)
    return _diagnose_output(out, case)


def _pixel_case(description: str, rng: np.random.Generator, channels: int, height: int, width: int,
                d_k: int, d_v: int, *, scale: float = 1.0, hint: str = PA_RULE) -> Case:
    args = {
        "x": scale * rng.normal(size=(channels, height, width)),
        "w_q": rng.normal(size=(d_k, channels)) / math.sqrt(channels),
        "w_k": rng.normal(size=(d_k, channels)) / math.sqrt(channels),
        "w_v": rng.normal(size=(d_v, channels)) / math.sqrt(channels),
    }
    return _finish_pixel_case(description, args, hint)


def _finish_pixel_case(description: str, args: dict[str, np.ndarray], hint: str) -> Case:
    return Case(description=description, args=args, expected=_pixel_attention_reference(*args.values()),
                atol=_ATOL, rtol=_RTOL, hint=hint, output_names=("output", "weights"),
                diagnose=_diagnose_pixel_attention)


def _large_scores_case(rng: np.random.Generator) -> Case:
    # Channel 0 is a large constant that the keys read and the queries do not: each row of scores
    # then shares a big offset, q_i . (W_k x_j) for the constant part, which the softmax ignores.
    # The weights stay spread out, but an exp() without the row's maximum subtracted overflows.
    channels, height, width, d_k, d_v = 4, 3, 4, 2, 3
    x = rng.normal(size=(channels, height, width))
    x[0] = 300.0
    w_q = rng.normal(size=(d_k, channels))
    w_q[:, 0] = 0.0
    args = {"x": x, "w_q": w_q, "w_k": rng.normal(size=(d_k, channels)), "w_v": rng.normal(size=(d_v, channels))}
    return _finish_pixel_case(
        "large scores, up to about 1000: channel 0 is the constant 300, read by the keys; C=4, H=3, W=4, "
        "d_k=2, d_v=3", args, PA_OVERFLOW_HINT + " " + PA_RULE)


def pixel_attention_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_pixel_attention`, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        _pixel_case("a 2x3 map (H != W): C=3, H=2, W=3, d_k=2, d_v=4", rng, 3, 2, 3, 2, 4,
                    hint="Here H and W differ, so numbering the positions column by column, or putting the "
                         "output back as (d_v, W, H), gives other numbers or another shape. " + PA_RULE),
        _pixel_case("a 3x2 map with as many value channels as input channels: C=4, H=3, W=2, d_k=2, d_v=4",
                    rng, 4, 3, 2, 2, 4,
                    hint="d_v = C here, so averaging the pixels instead of the values still has the right "
                         "shape. " + PA_RULE),
        _pixel_case("a square 3x3 map with square projections: C = d_k = d_v = 4", rng, 4, 3, 3, 4, 4,
                    hint="w_q, w_k and w_v are square here, so a projection used untransposed runs "
                         "as well; only the transposed one applies W_q to each pixel. " + PA_RULE),
        _pixel_case("a single row of pixels: C=3, H=1, W=5, d_k=2, d_v=3", rng, 3, 1, 5, 2, 3,
                    hint="With H = 1 the map is a sequence of W positions; the output is still "
                         "(d_v, 1, W). " + PA_RULE),
        _pixel_case("a single position (H = W = 1): C=3, d_k=2, d_v=2", rng, 3, 1, 1, 2, 2, hint=PA_SINGLE_HINT),
        _pixel_case("larger values (x about 3 times larger, peaked weights): C=5, H=2, W=4, d_k=3, d_v=2",
                    rng, 5, 2, 4, 3, 2, scale=3.0),
        _large_scores_case(rng),
    ]


@allowing("NumPy operations: reshape, transpose, matrix products, np.exp, np.max and np.sum.",
          library=SOFTMAX + ATTENTION)
def check_pixel_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's self-attention over the H W positions of one feature map, in NumPy.

    Parameters
    ----------
    fn : callable
        The learner's ``pixel_attention(x, w_q, w_k, w_v)``, called with float64
        ndarrays in that order:

        - ``x`` : (C, H, W), the feature map of one image, channels first;
        - ``w_q``, ``w_k`` : (d_k, C), the 1x1 convolutions that give the
          queries and keys, as matrices (a conv weight (d_k, C, 1, 1) without
          its last two axes): q_i = W_q x_i, k_j = W_k x_j;
        - ``w_v`` : (d_v, C), the values' 1x1 convolution: v_j = W_v x_j;
        - returns a pair ``(output, weights)``:

          - ``output`` : (d_v, H, W), o_i = sum_j alpha_ij v_j put back on the
            grid;
          - ``weights`` : (H W, H W), ``weights[i, j]`` = alpha_ij =
            softmax_j(q_i . k_j / sqrt(d_k)), row i for query position i; each
            row sums to 1. Positions are numbered row by row, i = r * W + c.

          NumPy arrays, torch tensors or nested lists.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry (or the exception and the learner's line that
        raised it) and a hint naming the likely bug: positions numbered column
        by column, the 1/sqrt(d_k) missing (or 1/d_k), the softmax over the
        queries, scores k @ q.T, weights transposed, a projection transposed or
        missing, x averaged instead of the values, the output left as
        (H W, d_v) or reshaped without a transpose, the two results swapped,
        overflow at large scores.

    Notes
    -----
    The hidden cases: a 2x3 map (H != W), a 3x2 map with d_v = C, a square
    3x3 map with square projections, a single row (H = 1), a single position
    (its weight is 1), larger values, and scores near 1000. The reference is
    :func:`attncourse.functional.scaled_dot_product_attention` on the
    flattened map; it equals the ``weights`` returned by
    :class:`attncourse.nn.SelfAttention2d` with these 1x1 convolution weights
    and zero biases, and its output before W_o.

    References
    ----------
    Wang et al. (2018), sections 3.1-3.2; Zhang et al. (2019), section 3;
    Vaswani et al. (2017), section 3.2.1, eq. (1).

    Examples
    --------
    >>> import numpy as np
    >>> def my_pixel_attention(x, w_q, w_k, w_v):
    ...     C, H, W = x.shape
    ...     X = x.reshape(C, H * W).T
    ...     q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
    ...     scores = q @ k.T / np.sqrt(k.shape[1])
    ...     e = np.exp(scores - scores.max(axis=1, keepdims=True))
    ...     weights = e / e.sum(axis=1, keepdims=True)
    ...     return (weights @ v).T.reshape(-1, H, W), weights
    >>> check_pixel_attention(my_pixel_attention)
    ✔ check_pixel_attention: all 7 hidden cases pass
    """
    return run_cases("check_pixel_attention", fn, pixel_attention_cases())


# --------------------------------------------------------------------- receptive field

RF_RULE = (
    "Walk the layers from the input with r = 1 (one pixel) and jump = 1. For each (k, s): first "
    "r += (k - 1) * jump, then jump *= s. jump is how many input pixels apart neighbouring units "
    "of the current layer are, the product of the strides so far."
)
RF_NO_JUMP_HINT = (
    "Your result is 1 + the sum of (k - 1): the strides are ignored. After a layer of stride s, "
    "neighbouring units lie s times farther apart in the input, so a later kernel of size k spans "
    "(k - 1) * jump more pixels, jump being the product of the strides of the layers before it."
)
RF_CURRENT_STRIDE_HINT = (
    "You multiplied jump by the layer's own stride before adding its kernel. A layer's stride "
    "spaces out its outputs, not its kernel's taps, so it only matters for the layers after it: "
    "first r += (k - 1) * jump, then jump *= s."
)
RF_SUM_K_HINT = (
    "Your result is the sum of the kernel sizes. A kernel of size k adds k - 1 pixels to the window "
    "(its centre is already counted), times jump, and the window starts at r = 1: two 3x3 "
    "convolutions see 5 pixels, not 6."
)
RF_START_ZERO_HINT = (
    "Your result is one pixel short: start from r = 1, the one pixel that an input unit sees; then "
    "each layer adds (k - 1) * jump."
)
RF_REVERSED_HINT = (
    "You walked the layers from the last one. The list runs from the input, and a layer's jump is "
    "the product of the strides of the layers before it, those closer to the input."
)


def _receptive_field_variants(layers: Sequence[tuple[int, int]]) -> list[tuple[str, float]]:
    def forward(stack, own_stride_first: bool = False, start: int = 1) -> int:
        r, jump = start, 1
        for k, s in stack:
            if own_stride_first:
                jump *= s
            r += (k - 1) * jump
            if not own_stride_first:
                jump *= s
        return r

    return [
        (RF_NO_JUMP_HINT, 1 + sum(k - 1 for k, _ in layers)),
        (RF_CURRENT_STRIDE_HINT, forward(layers, own_stride_first=True)),
        (RF_SUM_K_HINT, sum(k for k, _ in layers)),
        (RF_START_ZERO_HINT, forward(layers, start=0)),
        (RF_REVERSED_HINT, forward(layers[::-1])),
    ]


def _diagnose_receptive_field(got: Any, case: Case) -> str | None:
    if not isinstance(got, np.ndarray) or got.size != 1:
        return None
    value = float(got.reshape(()))
    expected = float(case.expected)
    # Two slips can give the same number on a short stack: name every one that fits.
    hints = [hint for hint, variant in _receptive_field_variants(case.args["layers"])
             if variant != expected and math.isclose(value, variant)]
    hints = list(dict.fromkeys(hints))
    if hints:
        return " Or: ".join(hints)
    return None


def _rf_case(description: str, layers: list[tuple[int, int]], hint: str = RF_RULE) -> Case:
    return Case(description=f"{description}: {layers}", args={"layers": layers},
                expected=receptive_field(layers), hint=hint, diagnose=_diagnose_receptive_field)


def _drawn_stack(seed: int | None) -> list[list[tuple[int, int]]]:
    """Two stacks of ``(kernel, stride)`` layers drawn from the grade of record's seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [[(int(rng.choice([1, 2, 3, 5, 7])), int(rng.choice([1, 1, 2]))) for _ in range(int(rng.integers(1, 9)))]
            for _ in range(2)]


def receptive_field_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_receptive_field`; with ``seed``, two more stacks drawn from it."""
    vgg16_conv5_3 = [(3, 1)] * 2 + [(2, 2)] + [(3, 1)] * 2 + [(2, 2)] + ([(3, 1)] * 3 + [(2, 2)]) * 2 + [(3, 1)] * 3
    return [
        _rf_case("one 3x3 convolution", [(3, 1)],
                 "One layer: a unit sees its kernel, k pixels wide. " + RF_RULE),
        _rf_case("PlainCNN up to its last feature map (the chapter's 18)", list(PlainCNN.spatial_layers)),
        _rf_case("a 3x3 convolution then a 2x2 pooling", [(3, 1), (2, 2)],
                 "The last layer's stride widens nothing: it spaces out the units of that layer, "
                 "and no kernel comes after it. " + RF_RULE),
        _rf_case("strided convolutions, as at the start of a ResNet", [(7, 2), (3, 2), (3, 1)]),
        _rf_case("1x1 layers among 3x3 ones, one of them with stride 2",
                 [(1, 1), (3, 2), (1, 1), (3, 1), (1, 2), (3, 1)],
                 "A 1x1 kernel adds nothing to the window, but its stride still spaces out the "
                 "units after it. " + RF_RULE),
        _rf_case("a deeper stack, VGG-16 up to conv5_3", vgg16_conv5_3),
    ] + [_rf_case("drawn when graded", layers) for layers in _drawn_stack(seed)]


@allowing("Python arithmetic and a loop over the layers.")
def check_receptive_field(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's receptive field of a stack of convolutions and poolings.

    Parameters
    ----------
    fn : callable
        The learner's ``receptive_field(layers)``, called as ``fn(layers)``:

        - ``layers`` : list of (kernel_size, stride) pairs of ints, in order
          from the input; a 3x3 convolution with stride 1 is ``(3, 1)``, a 2x2
          max pooling with stride 2 is ``(2, 2)``;
        - returns an int, the side in input pixels of the window one unit of
          the last layer sees: r = 1, jump = 1; for each layer
          r += (k - 1) * jump, then jump *= s.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case
        and a hint naming the likely bug: the strides ignored (no jump), the
        layer's own stride applied before its kernel, the sum of the kernel
        sizes, a start at 0 instead of 1, the layers walked from the last.

    Notes
    -----
    The hidden cases: one 3x3 convolution (3), :class:`~attncourse.nn.PlainCNN`'s
    layers (18), a 3x3 convolution and a 2x2 pooling (4), strided
    convolutions, 1x1 layers with a stride, and VGG-16 up to conv5_3 (196).
    The reference is :func:`attncourse.nn.receptive_field`.

    References
    ----------
    Araujo, Norris, Sim (2019), "Computing Receptive Fields of Convolutional
    Neural Networks", Distill, section "Single-path networks".

    Examples
    --------
    >>> def my_receptive_field(layers):
    ...     r, jump = 1, 1
    ...     for k, s in layers:
    ...         r += (k - 1) * jump
    ...         jump *= s
    ...     return r
    >>> check_receptive_field(my_receptive_field)
    ✔ check_receptive_field: all 6 hidden cases pass
    """
    return run_cases("check_receptive_field", fn, receptive_field_cases(),
                     references=(receptive_field,))


__all__ = [
    "check_pixel_attention",
    "check_receptive_field",
    "pixel_attention_cases",
    "receptive_field_cases",
]

"""Checks for the exercises of the chapters "The bottleneck" and "Bahdanau attention".

The first chapter builds an RNN encoder-decoder out of GRU steps and pads
sentences of different lengths into one batch; the second adds Bahdanau's
alignment model and a softmax that gives padding no weight. Each check runs the
learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`. When a case fails, the learner's
output is compared with the outputs of typical buggy versions (z and 1 - z
swapped, the tanh left out, the mask inverted, ...) so that the hint names the
likely bug rather than only the symptom.

References
----------
Cho et al. (2014), "Learning Phrase Representations using RNN Encoder-Decoder for
Statistical Machine Translation", EMNLP, section 2.3, equations (5)-(8).
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, section 3.1, equations (5)-(6), appendix A.1.2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.functional import (
    additive_attention_step,
    masked_softmax,
    padding_mask,
    softmax,
)

# Loose enough for a learner who computes in float32 torch, tight enough to
# tell every buggy variant apart.
_ATOL = 1e-5
_RTOL = 1e-4

# --------------------------------------------------------------------------- GRU cell

GRU_EQUATIONS = (
    "In torch's GRUCell the reset gate r and the update gate z are sigmoids of the input's "
    "and the state's gate parts, biases included; the candidate n is the tanh of the input's "
    "part plus r times the state's part (its bias included); the new state takes the share "
    "1 minus z of n and the share z of the old state h."
)
GRU_LAYOUT_HINT = (
    "The weights are in torch's layout: w_ih is (3*hidden_dim, input_dim), w_hh is (3*hidden_dim,"
    ' hidden_dim), their rows stacked as [r; z; n]. One product of the input with all of w_ih '
    '(and one of the state with all of w_hh), biases added, gives the pre-activations of the '
    "three gates side by side; cut each into three equal parts. " + GRU_EQUATIONS
)
GRU_Z_SWAP_HINT = (
    "z and 1 - z are swapped. In torch's GRUCell, as in Cho et al. (2014) eq. (7), the update "
    "gate z is the share of the old state that is kept, and 1 minus z the candidate's share. "
    "(Bahdanau et al. 2015, appendix A.1.1, write the same unit with z on the new state; "
    "with torch's weights z must multiply h.)"
)
GRU_RESET_BIAS_HINT = (
    "The reset gate must multiply the bias b_hn too: you added b_hn after scaling the state's "
    "candidate part by r, but that part, bias included, is what r scales."
)
GRU_RESET_NO_BIAS_HINT = (
    "The bias b_hn is missing from the candidate. The state's candidate part includes its "
    "bias, and r scales all of it."
)
GRU_RESET_BEFORE_HINT = (
    "You reset the state before the matrix product, as Cho et al. (2014) write in eq. (8). "
    "torch's GRUCell, whose weights this exercise uses, resets after it: r scales the product "
    "of the state with its weights, bias included. The two are different functions of the weights."
)
GRU_ORDER_HINT = (
    "The gates are read in the wrong order: torch stacks the rows of w_ih, w_hh, b_ih and b_hh "
    "as [r; z; n] (reset, update, new), hidden_dim rows each. You took z from the first chunk "
    "and r from the second."
)
GRU_ACTIVATION_HINT = (
    "sigmoid and tanh are mixed up: the gates r and z use the sigmoid (values in (0, 1): how "
    "much of the old state to use and to keep); the candidate n uses tanh (values in (-1, 1))."
)
GRU_NO_BIAS_HINT = (
    "The biases are missing: add b_ih to the input's product with its weights and b_hh to the "
    "state's (torch's GRUCell has both)."
)
GRU_CANDIDATE_HINT = (
    "You returned the candidate n; the new state mixes it with the old state, with the update "
    "gate z as the old state's share."
)
GRU_OVERFLOW_HINT = (
    "NaN where the gates saturate: the exponential of a pre-activation above 709 overflows, "
    "and infinity over infinity is NaN. Write the sigmoid so that nothing overflows, for "
    "example through np.tanh of half its input, which gives the same function."
)
GRU_TRANSPOSED_HINT = (
    "Your result is transposed: h_new must be (batch, hidden_dim), one row per sequence of the "
    "batch, like h."
)
GRU_STACKED_HINT = (
    "Your result has 3 * hidden_dim columns: the pre-activations of r, z and n side by side. "
    "Split them into three chunks of hidden_dim columns along the last axis (np.split), and "
    "combine them into h_new (batch, hidden_dim)."
)
GRU_SHAPE_HINT = "h_new has the shape of h: (batch, hidden_dim)."


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def _torch_gru_cell(
    x: np.ndarray, h: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray
) -> np.ndarray:
    """h_new from ``torch.nn.GRUCell`` in float64 with the given weights: the reference."""
    input_dim, hidden_dim = w_ih.shape[1], w_hh.shape[1]
    # Building a cell draws initial weights; fork_rng leaves the learner's torch seed untouched.
    with torch.random.fork_rng(devices=[]):
        cell = torch.nn.GRUCell(input_dim, hidden_dim, dtype=torch.float64)
    with torch.no_grad():
        for param, value in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh),
                                (w_ih, w_hh, b_ih, b_hh)):
            param.copy_(torch.from_numpy(value))
        return cell(torch.from_numpy(x), torch.from_numpy(h)).numpy()


def _gru_variants(x, h, w_ih, w_hh, b_ih, b_hh) -> list[tuple[str, np.ndarray]]:
    """Outputs of typical buggy GRU steps, each with the hint that names its bug."""
    hidden_dim = h.shape[-1]
    w_hn, b_hn = w_hh[2 * hidden_dim:], b_hh[2 * hidden_dim:]
    i_r, i_z, i_n = np.split(x @ w_ih.T + b_ih, 3, axis=-1)
    h_r, h_z, h_n = np.split(h @ w_hh.T + b_hh, 3, axis=-1)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * h_n)

    def mix(new: np.ndarray, keep: np.ndarray = z) -> np.ndarray:
        return (1 - keep) * new + keep * h

    j_r, j_z, j_n = np.split(x @ w_ih.T, 3, axis=-1)
    k_r, k_z, k_n = np.split(h @ w_hh.T, 3, axis=-1)
    r0, z0 = _sigmoid(j_r + k_r), _sigmoid(j_z + k_z)
    r_zrn, z_zrn = _sigmoid(i_z + h_z), _sigmoid(i_r + h_r)
    t_r, t_z = np.tanh(i_r + h_r), np.tanh(i_z + h_z)
    return [
        (GRU_Z_SWAP_HINT, z * n + (1 - z) * h),
        (GRU_RESET_BIAS_HINT, mix(np.tanh(i_n + r * (h @ w_hn.T) + b_hn))),
        (GRU_RESET_NO_BIAS_HINT, mix(np.tanh(i_n + r * (h @ w_hn.T)))),
        (GRU_RESET_BEFORE_HINT, mix(np.tanh(i_n + (r * h) @ w_hn.T + b_hn))),
        (GRU_ORDER_HINT, mix(np.tanh(i_n + r_zrn * h_n), z_zrn)),
        (GRU_ACTIVATION_HINT, mix(_sigmoid(i_n + t_r * h_n), t_z)),
        (GRU_ACTIVATION_HINT, mix(_sigmoid(i_n + r * h_n))),
        (GRU_ACTIVATION_HINT, mix(np.tanh(i_n + t_r * h_n), t_z)),
        (GRU_NO_BIAS_HINT, mix(np.tanh(j_n + r0 * k_n), z0)),
        (GRU_CANDIDATE_HINT, n),
    ]


def _diagnose_gru_cell(got: Any, case: Case) -> str | None:
    x, h, w_ih, w_hh, b_ih, b_hh = (case.args[name] for name in ("x", "h", "w_ih", "w_hh", "b_ih", "b_hh"))
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.shape == expected.T.shape:
            return GRU_TRANSPOSED_HINT
        if got.shape == (expected.shape[0], 3 * expected.shape[1]):
            return GRU_STACKED_HINT
        return GRU_SHAPE_HINT
    for hint, variant in _gru_variants(x, h, w_ih, w_hh, b_ih, b_hh):
        if not same_values(variant, expected, case) and same_values(got, variant, case):
            return hint
    if np.isnan(got.astype(np.float64)).any():
        return GRU_OVERFLOW_HINT
    return None


def _gru_case(description: str, rng: np.random.Generator, batch: int, input_dim: int, hidden_dim: int,
              *, x_scale: float = 1.0, zero_state: bool = False, hint: str = GRU_LAYOUT_HINT) -> Case:
    x = x_scale * rng.normal(size=(batch, input_dim))
    # tanh keeps the state in (-1, 1), where a GRU's states live.
    h = np.zeros((batch, hidden_dim)) if zero_state else np.tanh(rng.normal(size=(batch, hidden_dim)))
    w_ih = rng.normal(scale=0.5, size=(3 * hidden_dim, input_dim))
    w_hh = rng.normal(scale=0.5, size=(3 * hidden_dim, hidden_dim))
    b_ih = rng.normal(scale=0.5, size=3 * hidden_dim)
    b_hh = rng.normal(scale=0.5, size=3 * hidden_dim)
    args = {"x": x, "h": h, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh}
    return Case(
        description=description,
        args=args,
        expected=_torch_gru_cell(*args.values()),
        atol=_ATOL,
        rtol=_RTOL,
        hint=hint,
        diagnose=_diagnose_gru_cell,
    )


def gru_cell_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_gru_cell`, drawn with ``seed``.

    batch, input_dim and hidden_dim differ in every case, so a transposed
    weight or result raises or shows in the shape.
    """
    rng = np.random.default_rng(seed)
    return [
        _gru_case("batch=2, input_dim=3, hidden_dim=4", rng, 2, 3, 4),
        _gru_case(
            "first step from the zero state h = 0, batch=1, input_dim=2, hidden_dim=3", rng, 1, 2, 3,
            zero_state=True,
            hint="With h = 0 the recurrent terms are the biases b_hh alone; the step must still "
                 "work, and h_new = (1 - z) * n. " + GRU_EQUATIONS,
        ),
        _gru_case("batch=5, input_dim=4, hidden_dim=6", rng, 5, 4, 6),
        _gru_case(
            "saturated gates: inputs of size ~1000, batch=3, input_dim=4, hidden_dim=2", rng, 3, 4, 2,
            x_scale=1000.0,
            hint="Gate pre-activations here reach the thousands: the gates are 0 or 1 and n is -1 "
                 "or 1. " + GRU_OVERFLOW_HINT,
        ),
    ]


def check_gru_cell(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's GRU step in NumPy against ``torch.nn.GRUCell``.

    Parameters
    ----------
    fn : callable
        The learner's ``gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)``, called with
        float64 ndarrays in that order, weights in ``torch.nn.GRUCell``'s layout:

        - ``x`` : (batch, input_dim), the inputs of this step;
        - ``h`` : (batch, hidden_dim), the previous state;
        - ``w_ih`` : (3 * hidden_dim, input_dim), rows stacked as [W_ir; W_iz; W_in];
        - ``w_hh`` : (3 * hidden_dim, hidden_dim), rows stacked as [W_hr; W_hz; W_hn];
        - ``b_ih``, ``b_hh`` : (3 * hidden_dim,), stacked the same way;
        - returns ``h_new`` : (batch, hidden_dim), with
          r = sigmoid(W_ir x + b_ir + W_hr h + b_hr),
          z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
          n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
          h_new = (1 - z) * n + z * h.
          A NumPy array, a torch tensor or a nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry and a hint naming the likely bug: z and 1 - z
        swapped, the reset gate applied to W_hn h without b_hn or before the
        product, gates read in the order z, r, n, sigmoid and tanh mixed up,
        missing biases, the candidate n returned, a sigmoid that overflows, a
        transposed result.

    Notes
    -----
    The hidden cases are a small batch, a first step from the zero state, a
    larger batch, and inputs of size ~1000 that saturate every gate (a sigmoid
    written as exp(a) / (1 + exp(a)) gives NaN there). The reference is
    ``torch.nn.GRUCell`` in float64 with the case's weights copied in, not a
    NumPy formula of ours.

    Two conventions differ between papers and torch. Cho et al. (2014), eq. (7),
    keep the old state with z, h_new = z * h + (1 - z) * h~, as torch does;
    Bahdanau et al. (2015), appendix A.1.1, put z on the new state instead,
    (1 - z) * s + z * s~, the same unit with z read as 1 - z. And Cho's eq. (8)
    resets the state before the product, U (r * h), while torch resets after it,
    r * (W_hn h + b_hn). The exercise follows torch, so that its weights can be
    loaded into ``nn.GRUCell``.

    References
    ----------
    Cho et al. (2014), section 2.3, equations (5)-(8); PyTorch documentation of
    ``torch.nn.GRUCell``.

    Examples
    --------
    >>> import numpy as np
    >>> def my_gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    ...     i_r, i_z, i_n = np.split(x @ w_ih.T + b_ih, 3, axis=-1)
    ...     h_r, h_z, h_n = np.split(h @ w_hh.T + b_hh, 3, axis=-1)
    ...     r = 1 / (1 + np.exp(-(i_r + h_r)))
    ...     z = 1 / (1 + np.exp(-(i_z + h_z)))
    ...     n = np.tanh(i_n + r * h_n)
    ...     return (1 - z) * n + z * h
    >>> check_gru_cell(my_gru_cell)
    ✔ check_gru_cell: all 4 hidden cases pass
    """
    return run_cases("check_gru_cell", fn, gru_cell_cases())


# ----------------------------------------------------------------------- padding mask

PAD_RULE = (
    "Sequences are padded at the end: in row b, a position is a real token (True) when it "
    "comes before that sequence's length, and padding (False) otherwise."
)
PAD_INVERTED_HINT = (
    "True and False are swapped. In this course True marks a real token, a position that may "
    "be attended, and False marks padding (torch's key_padding_mask uses the opposite)."
)
PAD_OFF_BY_ONE_HINT = (
    "One position too many is True: a sequence of length L has its real tokens at positions "
    "0 .. L-1, so position L itself is already padding."
)
PAD_ONE_SHORT_HINT = (
    "One real token is missing: positions 0 .. L-1 are all real, the last one (L-1) included; "
    "compare positions with L, not with L - 1."
)
PAD_LEFT_HINT = (
    "Your padding is at the start of each row. In this course sequences are padded at the end: "
    "the first length positions are real."
)
PAD_DTYPE_HINT = (
    "The pattern is right but the dtype is {dtype}; masks must be boolean. Used as an index, "
    "an integer array is read as positions and a float one is rejected; only a bool array "
    "selects entries. A comparison gives booleans directly; otherwise convert at the end."
)
PAD_MAX_LEN_HINT = (
    "Your mask has as many columns as the longest sequence; it must have max_len columns, which can be more than the "
    "longest sequence (a batch padded to a fixed length). Use the max_len argument."
)
PAD_TRANSPOSED_HINT = "Your mask is transposed: it must be (batch, max_len), one row per sequence."
PAD_SHAPE_HINT = (
    "Return a (batch, max_len) array, one row per sequence, even when batch or max_len is 1: "
    "watch out for squeezing axes away."
)


def _diagnose_padding_mask(got: Any, case: Case) -> str | None:
    lengths, max_len = case.args["lengths"], case.args["max_len"]
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.shape == expected.T.shape:
            return PAD_TRANSPOSED_HINT
        if got.shape == (lengths.size, int(lengths.max())):
            return PAD_MAX_LEN_HINT
        return PAD_SHAPE_HINT
    if not np.isin(got, (0, 1)).all():
        return None
    pattern = got.astype(bool)
    positions, column = np.arange(max_len)[None, :], lengths[:, None]
    variants = [
        (PAD_INVERTED_HINT, ~expected),
        (PAD_OFF_BY_ONE_HINT, positions <= column),
        (PAD_ONE_SHORT_HINT, positions < column - 1),
        (PAD_LEFT_HINT, positions >= max_len - column),
    ]
    for hint, variant in variants:
        if not np.array_equal(variant, expected) and np.array_equal(pattern, variant):
            return hint
    if np.array_equal(pattern, expected) and got.dtype != bool:
        return PAD_DTYPE_HINT.format(dtype=got.dtype)
    return None


def padding_mask_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_padding_mask`; with ``seed`` (the grade of record's),
    two more batches of lengths drawn from it."""
    def case(description: str, lengths: list[int], max_len: int, hint: str = PAD_RULE) -> Case:
        lengths_array = np.asarray(lengths, dtype=np.int64)
        return Case(
            description=description,
            args={"lengths": lengths_array, "max_len": max_len},
            expected=padding_mask(lengths_array, max_len),
            atol=0.0,
            rtol=0.0,
            hint=hint,
            dtype=bool,
            diagnose=_diagnose_padding_mask,
        )

    return [
        case("lengths [3, 1, 4], max_len=4", [3, 1, 4], 4),
        case(
            "max_len longer than every sequence: lengths [2, 3], max_len=5", [2, 3], 5,
            "The mask has max_len columns even when every sequence is shorter. " + PAD_RULE,
        ),
        case(
            "an empty sequence and a full one: lengths [0, 5, 2], max_len=5", [0, 5, 2], 5,
            "A sequence of length 0 is all padding (a row of False); one of length max_len is all "
            "real tokens (a row of True). " + PAD_RULE,
        ),
        case("one sequence of one token: lengths [1], max_len=1", [1], 1, PAD_SHAPE_HINT),
    ] + [case(f"drawn when graded: lengths {lengths}, max_len={max_len}", lengths, max_len)
         for lengths, max_len in _drawn_lengths(seed)]


def _drawn_lengths(seed: int | None) -> list[tuple[list[int], int]]:
    """Two ``(lengths, max_len)`` drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(2):
        max_len = int(rng.integers(1, 12))
        drawn.append(([int(v) for v in rng.integers(0, max_len + 1, size=int(rng.integers(1, 6)))], max_len))
    return drawn


def check_padding_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's padding mask, built from sequence lengths.

    Parameters
    ----------
    fn : callable
        The learner's ``padding_mask(lengths, max_len)``, called as
        ``fn(lengths, max_len)``:

        - ``lengths`` : (batch,) int64 ndarray, the number of real tokens of
          each sequence, each in [0, max_len];
        - ``max_len`` : int, the padded length (it may exceed ``max(lengths)``);
        - returns a (batch, max_len) array of dtype bool, ``True`` at real tokens
          (position j < lengths[b]) and ``False`` at padding. 0/1 integers are
          not accepted: masks are boolean throughout the course. NumPy array,
          torch tensor or nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case
        and a hint for the likely bug: True/False swapped, ``<=`` instead of
        ``<``, padding at the start, ``max(lengths)`` columns instead of
        ``max_len``, a non-boolean dtype, a squeezed or transposed shape.

    Notes
    -----
    The hidden cases are a plain batch, a ``max_len`` longer than every
    sequence, an empty sequence next to a full one, and a batch of one sequence
    of one token. The reference is :func:`attncourse.functional.padding_mask`.

    References
    ----------
    Bahdanau et al. (2015), section 3.1: the weights alpha_ij range over the
    source positions j = 1..T_x of each sentence, so padding gets none.

    Examples
    --------
    >>> import numpy as np
    >>> def my_padding_mask(lengths, max_len):
    ...     return np.arange(max_len)[None, :] < np.asarray(lengths)[:, None]
    >>> check_padding_mask(my_padding_mask)
    ✔ check_padding_mask: all 4 hidden cases pass
    """
    return run_cases("check_padding_mask", fn, padding_mask_cases(), references=(padding_mask,))


# ------------------------------------------------------------- Bahdanau alignment score

SCORE_LAYOUT_HINT = (
    "Follow the paper's score, v_a applied to the tanh of W_a on the decoder state plus U_a "
    "on each annotation, in the paper's layout, w_a (attn_dim, query_dim) and u_a (attn_dim, "
    "key_dim): W_a on the state is one vector of attn_dim; U_a on every annotation at once is "
    "(src_len, attn_dim), one row per source position; add them (the vector broadcasts over "
    "the rows), take tanh, then reduce each row to one number with v_a."
)
SCORE_NO_TANH_HINT = (
    "The tanh is missing: it goes between the sum of the two projections and v_a. Without it the score is linear "
    "in s_prev and h_j, a one-layer network with no hidden nonlinearity."
)
SCORE_TANH_OUTSIDE_HINT = (
    "tanh goes inside, on the attn_dim-vector that sums the two projections, before the "
    "product with v_a; you applied it to the score after it."
)
SCORE_SWAPPED_HINT = (
    "W_a and U_a are swapped: W_a acts on the decoder state, U_a on each annotation."
)
SCORE_TRANSPOSED_HINT = (
    "A weight matrix is used transposed. In the paper's layout w_a is (attn_dim, query_dim) "
    "and u_a is (attn_dim, key_dim), acting on column vectors; the annotations are the rows "
    "of h, so applying U_a to all of them at once takes u_a transposed, on the right."
)
SCORE_WEIGHTS_HINT = (
    "Your result sums to 1: those are the attention weights alpha_j, the softmax of the scores. "
    "This exercise asks for the scores e_j themselves; the softmax is the next step."
)
SCORE_HIDDEN_HINT = (
    "You returned the hidden vectors after the tanh, shape (src_len, attn_dim); reduce each "
    "to one score with v_a."
)
SCORE_1D_HINT = (
    "Return a 1-D array of scores, shape (src_len,), one per source position, not a row or a "
    "column vector."
)


def _score_variants(s_prev, h, w_a, u_a, v_a) -> list[tuple[str, np.ndarray]]:
    """Outputs of typical buggy alignment models whose shapes fit, each with its hint."""
    recipes = [
        (SCORE_NO_TANH_HINT, lambda: (w_a @ s_prev + h @ u_a.T) @ v_a),
        (SCORE_TANH_OUTSIDE_HINT, lambda: np.tanh((w_a @ s_prev + h @ u_a.T) @ v_a)),
        (SCORE_SWAPPED_HINT, lambda: np.tanh(u_a @ s_prev + h @ w_a.T) @ v_a),
        (SCORE_TRANSPOSED_HINT, lambda: np.tanh(w_a.T @ s_prev + h @ u_a) @ v_a),
        (SCORE_TRANSPOSED_HINT, lambda: np.tanh(s_prev @ w_a + h @ u_a.T) @ v_a),
        (SCORE_TRANSPOSED_HINT, lambda: np.tanh(w_a @ s_prev + h @ u_a) @ v_a),
        (SCORE_WEIGHTS_HINT, lambda: softmax(np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a)),
    ]
    variants = []
    for hint, recipe in recipes:
        try:
            variants.append((hint, recipe()))
        except ValueError:
            pass  # the shapes do not fit, so this bug raises instead
    return variants


def _diagnose_additive_score(got: Any, case: Case) -> str | None:
    s_prev, h, w_a, u_a, v_a = (case.args[name] for name in ("s_prev", "h", "w_a", "u_a", "v_a"))
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.shape == (h.shape[0], v_a.shape[0]):
            return SCORE_HIDDEN_HINT
        if got.size == expected.size:
            return SCORE_1D_HINT
        return None
    for hint, variant in _score_variants(s_prev, h, w_a, u_a, v_a):
        if (variant.shape == expected.shape and not same_values(variant, expected, case)
                and same_values(got, variant, case)):
            return hint
    got = got.astype(np.float64)
    if (got >= 0).all() and np.isclose(got.sum(), 1.0, atol=1e-4) and not np.isclose(expected.sum(), 1.0):
        return SCORE_WEIGHTS_HINT
    return None


def _score_case(description: str, rng: np.random.Generator, src_len: int, query_dim: int, key_dim: int,
                attn_dim: int, *, scale: float = 1.0, zero_v: bool = False,
                hint: str = SCORE_LAYOUT_HINT) -> Case:
    args = {
        "s_prev": scale * rng.normal(size=query_dim),
        "h": scale * rng.normal(size=(src_len, key_dim)),
        "w_a": rng.normal(size=(attn_dim, query_dim)),
        "u_a": rng.normal(size=(attn_dim, key_dim)),
        "v_a": np.zeros(attn_dim) if zero_v else rng.normal(size=attn_dim),
    }
    return Case(
        description=description,
        args=args,
        expected=additive_attention_step(*args.values()).scores,
        atol=_ATOL,
        rtol=_RTOL,
        hint=hint,
        diagnose=_diagnose_additive_score,
    )


def additive_score_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_additive_score`, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        _score_case(
            "square weights: query_dim = key_dim = attn_dim = 3, src_len=4", rng, 4, 3, 3, 3,
            hint="Here w_a and u_a are square, so a swapped or transposed one still runs, giving wrong scores. "
                 + SCORE_LAYOUT_HINT,
        ),
        _score_case(
            "Bahdanau's shapes in miniature: query_dim=2, key_dim=4 (a bidirectional encoder, "
            "2 * 2), attn_dim=3, src_len=5", rng, 5, 2, 4, 3,
        ),
        _score_case(
            "v_a = 0, the paper's initialisation: every score is 0, query_dim=3, key_dim=2, "
            "attn_dim=4, src_len=3", rng, 3, 3, 2, 4, zero_v=True,
            hint="With v_a = 0 every score is 0, whatever the tanh gives; the weights (the next step) "
                 "would be uniform. " + SCORE_LAYOUT_HINT,
        ),
        _score_case(
            "a single source position, src_len=1, query_dim=2, key_dim=4, attn_dim=3", rng, 1, 2, 4, 3,
            hint="With one source position the result is still an array of shape (1,). "
                 + SCORE_LAYOUT_HINT,
        ),
        _score_case(
            "large states, tanh saturates: query_dim=5, key_dim=6, attn_dim=4, src_len=7",
            rng, 7, 5, 6, 4, scale=3.0,
        ),
    ]


def check_additive_score(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's Bahdanau alignment model, the scores of one decoding step.

    Parameters
    ----------
    fn : callable
        The learner's ``additive_score(s_prev, h, w_a, u_a, v_a)``, called with
        float64 ndarrays in that order, matrices in the paper's layout (they act
        on column vectors, as in :mod:`attncourse.functional.additive`):

        - ``s_prev`` : (query_dim,), the previous decoder state s_{i-1};
        - ``h`` : (src_len, key_dim), the annotations h_j, one row per source position;
        - ``w_a`` : (attn_dim, query_dim), W_a;
        - ``u_a`` : (attn_dim, key_dim), U_a;
        - ``v_a`` : (attn_dim,), v_a;
        - returns ``scores`` : (src_len,), e_j = v_a^T tanh(W_a s_prev + U_a h_j),
          the scores before the softmax. A NumPy array, a torch tensor or a
          nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry (or the exception and the learner's line that
        raised it, e.g. a matrix product whose shapes do not fit) and a hint
        naming the likely bug: tanh missing or applied after v_a, W_a and U_a
        swapped or transposed, the weights (softmax) returned instead of the
        scores, the hidden vectors returned without v_a.

    Notes
    -----
    The hidden cases are square matrices (where a swapped or transposed matrix
    still runs and gets a specific hint), the paper's shapes in miniature with
    key_dim = 2 * query_dim, v_a = 0 (every score 0), a single source position,
    and large states that saturate the tanh. The reference is the ``scores``
    field of :func:`attncourse.functional.additive_attention_step`.

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equation (6), and appendix A.1.2.

    Examples
    --------
    >>> import numpy as np
    >>> def my_additive_score(s_prev, h, w_a, u_a, v_a):
    ...     return np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a
    >>> check_additive_score(my_additive_score)
    ✔ check_additive_score: all 5 hidden cases pass
    """
    return run_cases("check_additive_score", fn, additive_score_cases(),
                     references=(additive_attention_step,))


# ---------------------------------------------------------------------- masked softmax

MSM_RULE = (
    "Softmax over the source positions of each row (the last axis), with padded positions "
    "(mask False) getting weight exactly 0 and the real ones summing to 1."
)
MSM_INVERTED_HINT = (
    "The mask is used the wrong way round: True marks a real source token, which gets weight; "
    "False marks padding, which gets exactly 0."
)
MSM_AFTER_HINT = (
    "You zeroed the padded weights after the softmax without renormalising, so rows with padding "
    "sum to less than 1. Mask the scores before the softmax (padded scores -> -inf), so that the "
    "real positions share all the weight."
)
MSM_PRODUCT_HINT = (
    'Multiplying the scores by the mask gives padded positions a score of 0, not a weight of 0: '
    "an exponential of 1 still takes weight. A padded position's score must be one whose exponential is "
    'exactly 0, set before the softmax.'
)
MSM_NO_MASK_HINT = (
    "The mask is ignored: padded positions (mask False) got weight. Set their scores to -inf "
    "before the softmax, so that exp gives exactly 0."
)
MSM_AXIS_HINT = (
    "Your softmax runs over the batch axis (axis 0). Each row, one sentence's scores over its "
    "source positions, must sum to 1: normalise along the last axis."
)
MSM_GLOBAL_MAX_HINT = (
    "NaN where the padded positions hold the largest scores: you subtract the row max over all "
    "positions, padding included, so every real position's exponential underflows to 0 and "
    "the row is 0 over 0. Take the max over the real positions only: fill the padded scores with -inf "
    "first, then subtract the row max."
)
MSM_NO_MAX_HINT = (
    "The exponential of a large score overflows to infinity, and infinity over infinity is "
    "NaN. Subtract each row's max (over "
    "its real positions) before exponentiating; the softmax does not change."
)
MSM_NAN_ROW_HINT = (
    "A fully padded row (a source sentence of length 0) has no position to attend to, and dividing "
    "by its total weight of 0 gives 0 / 0 = NaN (as happens after filling every score with -inf). "
    "Give such rows zero weights, for example by zeroing the rows whose mask holds no True."
)
MSM_UNIFORM_ROW_HINT = (
    "A fully padded row got uniform weights 1/src_len: filling all its scores with the same large "
    "negative number leaves them equal, and softmax spreads the weight evenly. A row with no real "
    "token must get all-zero weights."
)
MSM_LEAK_HINT = (
    "Padded positions (mask False) got nonzero weight, up to {largest}. Set their scores to -inf "
    "(or a number so negative that exp gives exactly 0) before the softmax."
)
MSM_SUM_HINT = "Each row with at least one real token must sum to 1 over its real positions."
MSM_TRANSPOSED_HINT = "Your result is transposed: the weights have the shape of the scores, (batch, src_len)."
MSM_SHAPE_HINT = "Return weights of the same shape as the scores, (batch, src_len)."


def _masked_softmax_variants(scores: np.ndarray, mask: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Outputs of typical buggy masked softmaxes, each with the hint that names its bug."""
    filled = np.where(mask, scores, -np.inf)
    e_all_max = np.where(mask, np.exp(filled - scores.max(axis=-1, keepdims=True)), 0.0)
    e_no_max = np.where(mask, np.exp(scores), 0.0)
    return [
        (MSM_INVERTED_HINT, softmax(scores, mask=~mask)),
        (MSM_AFTER_HINT, softmax(scores) * mask),
        (MSM_PRODUCT_HINT, softmax(scores * mask)),
        (MSM_NO_MASK_HINT, softmax(scores)),
        (MSM_AXIS_HINT, softmax(scores, axis=0, mask=mask)),
        (MSM_GLOBAL_MAX_HINT, e_all_max / e_all_max.sum(axis=-1, keepdims=True)),
        (MSM_NO_MAX_HINT, e_no_max / e_no_max.sum(axis=-1, keepdims=True)),
    ]


def _diagnose_masked_softmax(got: Any, case: Case) -> str | None:
    scores, mask = case.args["scores"], case.args["mask"]
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        return MSM_TRANSPOSED_HINT if got.shape == expected.T.shape else MSM_SHAPE_HINT
    got = got.astype(np.float64)
    empty = ~mask.any(axis=-1)
    if empty.any() and same_values(got[~empty], expected[~empty], case):
        if np.isnan(got[empty]).any():
            return MSM_NAN_ROW_HINT
        if np.allclose(got[empty], 1.0 / mask.shape[-1], atol=case.atol):
            return MSM_UNIFORM_ROW_HINT
        return None
    variants = [(hint, v) for hint, v in _masked_softmax_variants(scores, mask) if not same_values(v, expected, case)]
    # A bug that empties a row (an inverted mask on a row without padding) also gives
    # NaN there, which the variants, built on the course's softmax, write as zeros.
    candidates = [got, np.nan_to_num(got, nan=0.0)] if np.isnan(got).any() else [got]
    for candidate in candidates:
        for hint, variant in variants:
            if same_values(candidate, variant, case):
                return hint
    if np.isnan(got[~empty]).any():
        return MSM_NO_MAX_HINT
    padded = ~empty[:, None] & ~mask
    leaked = np.abs(np.where(padded, got, 0.0))
    if leaked.max() > case.atol:
        return MSM_LEAK_HINT.format(largest=f"{leaked.max():.3g}")
    if not np.allclose(got[~empty].sum(axis=-1), 1.0, atol=1e-4):
        return MSM_SUM_HINT
    return None


def _masked_softmax_case(description: str, scores: Any, lengths: list[int], hint: str = MSM_RULE) -> Case:
    scores = np.asarray(scores, dtype=np.float64)
    mask = padding_mask(lengths, scores.shape[-1])
    return Case(
        description=description,
        args={"scores": scores, "mask": mask},
        expected=softmax(scores, mask=mask),
        atol=_ATOL,
        rtol=_RTOL,
        hint=hint,
        diagnose=_diagnose_masked_softmax,
    )


def masked_softmax_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_masked_softmax`, random ones drawn with ``seed``.

    ``batch != src_len`` in every case with more than one row, so a softmax over
    the wrong axis shows.
    """
    rng = np.random.default_rng(seed)
    large = 1000.0 + rng.normal(size=(2, 4))
    high_padding = rng.normal(size=(2, 5))
    high_padding[0, 3:] = [900.0, 1000.0]
    high_padding[1, 2:] = [950.0, 800.0, 1000.0]
    return [
        _masked_softmax_case("two sentences of lengths 4 and 2, src_len=4", rng.normal(size=(2, 4)), [4, 2]),
        _masked_softmax_case(
            "a sentence with a single real token: lengths [1, 5], src_len=5", rng.normal(size=(2, 5)), [1, 5],
            "A row with one real token puts all its weight, exactly 1, on that token. " + MSM_RULE,
        ),
        _masked_softmax_case(
            "batch=4, src_len=6, lengths [6, 3, 1, 4]", 2 * rng.normal(size=(4, 6)), [6, 3, 1, 4],
        ),
        _masked_softmax_case(
            "large scores around 1000: lengths [3, 2], src_len=4", large, [3, 2], MSM_NO_MAX_HINT,
        ),
        _masked_softmax_case(
            "padded positions hold the largest scores (up to 1000): lengths [3, 2], src_len=5",
            high_padding, [3, 2],
            "The scores at padded positions can be anything, even the largest of the row; they must "
            "still get weight 0 and not change the other weights. " + MSM_RULE,
        ),
        _masked_softmax_case(
            "a fully padded row (a source of length 0): lengths [3, 0, 1], src_len=4",
            rng.normal(size=(3, 4)), [3, 0, 1], MSM_NAN_ROW_HINT,
        ),
    ]


def check_masked_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's softmax over source positions that gives padding no weight.

    Parameters
    ----------
    fn : callable
        The learner's ``masked_softmax(scores, mask)``, called as ``fn(scores, mask)``:

        - ``scores`` : (batch, src_len) float64 ndarray, the alignment scores
          e_j of one decoding step for each sentence of the batch;
        - ``mask`` : (batch, src_len) bool ndarray, ``True`` at real source
          tokens (may be attended) and ``False`` at padding, as made by
          :func:`attncourse.functional.padding_mask`;
        - returns ``weights`` : (batch, src_len), the softmax of each row over
          its real positions: padded positions get weight 0, and the real ones
          sum to 1. A row with no real token (every mask entry False) gets all
          zeros, never NaN. A NumPy array, a torch tensor or a nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry and a hint naming the likely bug: the mask
        inverted or ignored, padded weights zeroed after the softmax without
        renormalising, scores multiplied by the mask, the softmax over the batch
        axis, no max subtraction, a max taken over padded scores too, NaN or
        uniform weights in a fully padded row.

    Notes
    -----
    The hidden cases are two plain batches, a sentence with a single real token,
    large scores (~1000), padded positions holding the largest scores of their
    row, and last a fully padded row. That last case is tested on purpose: an
    empty source can occur in a batch, and one NaN row would make the whole
    batch's loss NaN; the course's softmax and attention functions return zeros
    there, and so must this one. Filling padded scores with a large negative
    number such as -1e9 instead of -inf is accepted wherever a row has a real
    token (exp underflows to exactly 0 in float64), but gives uniform weights in
    the fully padded row, which fails. Weights are compared with a tolerance of
    1e-5, so float32 results pass. The reference is
    :func:`attncourse.functional.softmax` with ``mask=mask``.

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equation (6): alpha_ij is a softmax of
    e_ij over the source positions j = 1..T_x, the real tokens of sentence i.

    Examples
    --------
    >>> import numpy as np
    >>> def my_masked_softmax(scores, mask):
    ...     filled = np.where(mask, scores, -np.inf)
    ...     row_max = filled.max(axis=-1, keepdims=True)
    ...     row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    ...     e = np.where(mask, np.exp(filled - row_max), 0.0)
    ...     total = e.sum(axis=-1, keepdims=True)
    ...     return e / np.where(total > 0, total, 1.0)
    >>> check_masked_softmax(my_masked_softmax)
    ✔ check_masked_softmax: all 6 hidden cases pass
    """
    return run_cases("check_masked_softmax", fn, masked_softmax_cases(),
                     references=(softmax, masked_softmax))


__all__ = [
    "additive_score_cases",
    "check_additive_score",
    "check_gru_cell",
    "check_masked_softmax",
    "check_padding_mask",
    "gru_cell_cases",
    "masked_softmax_cases",
    "padding_mask_cases",
]

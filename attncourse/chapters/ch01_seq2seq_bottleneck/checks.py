"""Checks of chapter 1's exercises: a GRU step and the padding mask.

Each check runs the learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`; a failure is compared with typical buggy
versions (z and 1 - z swapped, the mask inverted or off by one, ...) so that the hint
names the likely bug.

References
----------
Cho et al. (2014), "Learning Phrase Representations using RNN Encoder-Decoder for
Statistical Machine Translation", EMNLP, section 2.3, equations (5)-(8).
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, appendix A.1.2 (padding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.checks.guard import allowing
from attncourse.checks.masks import draw_lengths
from attncourse.functional import padding_mask

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


@allowing("NumPy operations: matrix products (@), np.split, np.exp and np.tanh.",
          library=("torch:gru_cell", "torch:GRUCell", "torch:gru", "torch:GRU",
                   "torch:_thnn_fused_gru_cell"))
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
         for lengths, max_len in draw_lengths(seed)]


@allowing("NumPy operations such as np.arange and comparisons.",
          library=("torch:pad_sequence", "torch:pack_padded_sequence"))
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



__all__ = [
    "check_gru_cell",
    "check_padding_mask",
    "gru_cell_cases",
    "padding_mask_cases",
]

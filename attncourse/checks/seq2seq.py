"""Checks for the recurrent exercises of the chapters "The bottleneck" and "Bahdanau attention".

The first chapter builds an RNN encoder-decoder out of GRU steps; the second adds
Bahdanau's alignment model. Each check runs the learner's function on hidden cases and
returns a :class:`~attncourse.checks.core.CheckResult`. When a case fails, the learner's
output is compared with the outputs of typical buggy versions (z and 1 - z swapped, the
tanh left out, ...) so that the hint names the likely bug rather than only the symptom.
The two chapters' mask exercises are in :mod:`attncourse.checks.masks`.

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


__all__ = [
    "additive_score_cases",
    "check_additive_score",
    "check_gru_cell",
    "gru_cell_cases",
]

"""One static figure per step of self-attention, drawn from a :class:`SelfAttentionTrace`.

The six steps of :data:`attncourse.functional.STEPS` each get a figure function
with the same signature, ``(trace, tokens) -> Figure``:

1. ``project``  X, Q = X W^Q, K = X W^K, V = X W^V
2. ``score``    Q K^T, one score per (query, key) pair
3. ``scale``    the scores divided by sqrt(d_k)
4. ``softmax``  the attention weights; each query's row sums to 1
5. ``weight``   every value vector multiplied by its weight, alpha_j v_j
6. ``sum``      the output z = sum_j alpha_j v_j

Every function draws only what is stored in the trace; nothing is recomputed,
so the figure shows exactly the numbers the code produced. Traces in matrix
form (``trace.query_index is None``, all queries) and in vector form (one query)
are both accepted. The static figures are the companions of the interactive
:class:`attncourse.widgets.SelfAttentionStepper`.

Signed quantities use a diverging colour map centred on 0 (red positive, blue
negative); weights use a sequential map on [0, 1].

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attncourse.functional import STEPS, SelfAttentionTrace
from attncourse.viz.heatmap import heatmap, to_numpy

_SIGNED = "RdBu_r"
_WEIGHTS = "Blues"
# Inches per heatmap cell and per panel's labels; keeps figures of different
# sentences at the same visual scale.
_CELL = 0.48
_PANEL_W, _EXTRA_H = 1.1, 2.3


@dataclass(frozen=True)
class _View:
    """The trace's arrays as NumPy, with the labels that go with them."""

    trace: SelfAttentionTrace
    tokens: list[str]
    query_index: int | None

    @property
    def matrix_form(self) -> bool:
        return self.query_index is None

    @property
    def query_labels(self) -> list[str]:
        """Row labels of every per-query array: all tokens, or the one query token."""
        return list(self.tokens) if self.matrix_form else [self.tokens[self.query_index]]

    @property
    def query_token(self) -> str:
        return self.tokens[self.query_index]

    def get(self, name: str) -> np.ndarray:
        return to_numpy(getattr(self.trace, name))


def _view(trace: SelfAttentionTrace, tokens: Sequence[str]) -> _View:
    x_shape = tuple(np.shape(trace.x))
    if len(x_shape) != 2:
        raise ValueError(
            f"expected an unbatched trace with x of shape (seq_len, d_model), got x of shape {x_shape}; "
            "use attncourse.functional.self_attention_trace, or select one sequence of a batched trace"
        )
    tokens = [str(t) for t in tokens]
    if len(tokens) != x_shape[0]:
        raise ValueError(
            f"{len(tokens)} tokens were given for a trace of seq_len {x_shape[0]} (x has shape {x_shape}); "
            "pass one token per row of x"
        )
    expected_q_ndim = 2 if trace.query_index is None else 1
    if np.ndim(trace.q) != expected_q_ndim:
        raise ValueError(
            f"trace.query_index is {trace.query_index} but q has shape {tuple(np.shape(trace.q))}; "
            "the trace is inconsistent, rebuild it with self_attention_trace"
        )
    return _View(trace=trace, tokens=tokens, query_index=trace.query_index)


def _dims(prefix: str, width: int) -> list[str]:
    return [f"{prefix}{j + 1}" for j in range(width)]


def _limit(*arrays: np.ndarray) -> float:
    """Half-width of a colour scale centred on 0 that holds every array."""
    largest = max(float(np.max(np.abs(a))) if a.size else 0.0 for a in arrays)
    return largest if largest > 0 else 1.0


def _wrap(text: str, width: int) -> str:
    """Break ``text`` into lines of about ``width`` visible characters, never inside ``$...$``."""
    words, current, in_math = [], "", False
    for char in text:
        if char == "$":
            in_math = not in_math
        if char == " " and not in_math:
            words.append(current)
            current = ""
        else:
            current += char
    words.append(current)

    def visible(word: str) -> int:
        # Mathtext source is roughly twice as long as what it draws.
        return len(word) // 2 if word.startswith("$") else len(word)

    lines, line, used = [], [], 0
    for word in words:
        if line and used + 1 + visible(word) > width:
            lines.append(" ".join(line))
            line, used = [], 0
        used += visible(word) + (1 if line else 0)
        line.append(word)
    lines.append(" ".join(line))
    return "\n".join(lines)


def _set_step_title(fig: Figure, step: str, detail: str) -> None:
    """Suptitle "Step k of 6: name" over a line saying what the step does, wrapped to the figure."""
    # About 8 characters of the 12 pt suptitle fit in an inch.
    width = max(20, int(fig.get_figwidth() * 8))
    fig.suptitle(f"Step {STEPS.index(step) + 1} of {len(STEPS)}: {step}\n{_wrap(detail, width)}")


def _panels(widths: Sequence[int], rows: int) -> tuple[Figure, np.ndarray]:
    """A row of panels whose widths follow their number of heatmap columns."""
    fig_w = max(4.5, _CELL * sum(widths) + _PANEL_W * len(widths) + 0.4)
    fig_h = _CELL * rows + _EXTRA_H
    fig, axes = plt.subplots(
        1, len(widths), figsize=(fig_w, fig_h), layout="constrained", squeeze=False,
        gridspec_kw={"width_ratios": list(widths)},
    )
    return fig, axes[0]


def _query_row(ax, row: np.ndarray, view: _View, col_labels: list[str], **kwargs) -> None:
    """Draw one query's vector on the row of its token in a seq_len-row panel.

    Drawn this way, a lone vector has cells of the same size as its neighbours'
    and sits level with its token in them. The other rows are left blank, and
    the only row tick is the query token.
    """
    n = len(view.tokens)
    padded = np.full((n, row.shape[-1]), np.nan)
    padded[view.query_index] = row
    heatmap(padded, None, col_labels, ax=ax, **kwargs)
    ax.set_yticks([view.query_index], labels=[view.query_token])


def plot_project(trace: SelfAttentionTrace, tokens: Sequence[str]) -> Figure:
    """Step 1, project: the embeddings X and the queries, keys and values made from them.

    Four heatmaps side by side: X, Q = X W^Q, K = X W^K and V = X W^V, one row
    per token and one column per dimension (labelled ``x1.., q1.., k1.., v1..``).
    In vector form the Q panel holds only the chosen token's query, drawn level
    with that token's row; its only row label is the query token.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Uses ``x`` (seq_len, d_model), ``q`` (seq_len, d_k) or (d_k,),
        ``k`` (seq_len, d_k), ``v`` (seq_len, d_v) and ``query_index``.
    tokens : sequence of str, length seq_len
        Token of each position; used as row labels.

    Returns
    -------
    matplotlib.figure.Figure
        Axes in order X, Q, K, V.

    Raises
    ------
    ValueError
        If the number of tokens differs from seq_len, or the trace is batched.
    """
    view = _view(trace, tokens)
    x, q, k, v = (view.get(name) for name in ("x", "q", "k", "v"))
    fig, axes = _panels([x.shape[1], q.shape[-1], k.shape[1], v.shape[1]], len(view.tokens))
    if view.matrix_form:
        q_title = r"queries $Q = XW^Q$"
    else:
        q_number = view.query_index + 1
        q_title = rf"query $q_{{{q_number}}} = x_{{{q_number}}}W^Q$"
    panels = [
        (x, view.tokens, "x", r"embeddings $X$", "token"),
        (q, view.query_labels, "q", q_title, "query token"),
        (k, view.tokens, "k", r"keys $K = XW^K$", "token"),
        (v, view.tokens, "v", r"values $V = XW^V$", "token"),
    ]
    for ax, (values, rows, prefix, title, ylabel) in zip(axes, panels):
        lim = _limit(values)
        style = dict(title=title, xlabel="dimension", ylabel=ylabel, cmap=_SIGNED, vmin=-lim, vmax=lim)
        if values.ndim == 1:
            _query_row(ax, values, view, _dims(prefix, values.shape[-1]), **style)
        else:
            heatmap(values, rows, _dims(prefix, values.shape[-1]), ax=ax, **style)
    _set_step_title(fig, "project", r"every embedding $x_i$ is multiplied by $W^Q$, $W^K$ and $W^V$")
    return fig


def plot_score(trace: SelfAttentionTrace, tokens: Sequence[str]) -> Figure:
    """Step 2, score: the dot product of each query with each key.

    Matrix form: the (seq_len, seq_len) matrix Q K^T with query tokens as rows
    and key tokens as columns. Vector form: one row, q_i . k_j for every key j.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Uses ``scores`` (seq_len, seq_len) or (seq_len,) and ``query_index``.
    tokens : sequence of str, length seq_len
        Token of each position.

    Returns
    -------
    matplotlib.figure.Figure
        One axes.

    Raises
    ------
    ValueError
        If the number of tokens differs from seq_len, or the trace is batched.
    """
    view = _view(trace, tokens)
    scores = view.get("scores")
    fig, axes = _panels([len(view.tokens)], len(view.query_labels))
    lim = _limit(scores)
    if view.matrix_form:
        title, detail = r"scores $QK^T$", r"score of query $i$ with key $j$ is the dot product $q_i \cdot k_j$"
    else:
        i = view.query_index + 1
        title = rf"scores $q_{{{i}}} \cdot k_j$"
        detail = f"the query of '{view.query_token}' is compared with every key by a dot product"
    heatmap(scores, view.query_labels, view.tokens, ax=axes[0], title=title,
            xlabel="key token", ylabel="query token", cmap=_SIGNED, vmin=-lim, vmax=lim)
    _set_step_title(fig, "score", detail)
    return fig


def plot_scale(trace: SelfAttentionTrace, tokens: Sequence[str]) -> Figure:
    """Step 3, scale: the scores before and after division by sqrt(d_k).

    Two heatmaps on one colour scale, so the shrinking is visible: the scores
    and the scaled scores. The value of sqrt(d_k) is in the title.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Uses ``scores`` and ``scaled_scores`` (seq_len, seq_len) or (seq_len,),
        ``d_k`` (the width of ``k``) and ``query_index``.
    tokens : sequence of str, length seq_len
        Token of each position.

    Returns
    -------
    matplotlib.figure.Figure
        Axes in order: scores, scaled scores.

    Raises
    ------
    ValueError
        If the number of tokens differs from seq_len, or the trace is batched.
    """
    view = _view(trace, tokens)
    scores, scaled = view.get("scores"), view.get("scaled_scores")
    d_k = int(trace.d_k)
    n = len(view.tokens)
    fig, axes = _panels([n, n], len(view.query_labels))
    lim = _limit(scores, scaled)
    for ax, values, title in zip(axes, (scores, scaled), (r"scores", r"scaled scores $/\sqrt{d_k}$")):
        heatmap(values, view.query_labels, view.tokens, ax=ax, title=title,
                xlabel="key token", ylabel="query token", cmap=_SIGNED, vmin=-lim, vmax=lim)
    detail = rf"divide every score by $\sqrt{{d_k}} = \sqrt{{{d_k}}} = {np.sqrt(d_k):.2f}$"
    _set_step_title(fig, "scale", detail)
    return fig


def plot_softmax(trace: SelfAttentionTrace, tokens: Sequence[str]) -> Figure:
    """Step 4, softmax: the attention weights, each query's row summing to 1.

    Query tokens are rows and key tokens columns (one row in vector form); the
    colour scale is fixed to [0, 1] so figures of different sentences compare.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Uses ``weights`` (seq_len, seq_len) or (seq_len,) and ``query_index``.
    tokens : sequence of str, length seq_len
        Token of each position.

    Returns
    -------
    matplotlib.figure.Figure
        One axes; its cell texts are the weights with two decimals.

    Raises
    ------
    ValueError
        If the number of tokens differs from seq_len, or the trace is batched.
    """
    view = _view(trace, tokens)
    weights = view.get("weights")
    fig, axes = _panels([len(view.tokens)], len(view.query_labels))
    heatmap(weights, view.query_labels, view.tokens, ax=axes[0], title=r"weights $\alpha$",
            xlabel="key token", ylabel="query token", cmap=_WEIGHTS, vmin=0.0, vmax=1.0)
    _set_step_title(fig, "softmax", "softmax over the keys turns scaled scores into weights; each row sums to 1")
    return fig


def plot_weight(trace: SelfAttentionTrace, tokens: Sequence[str]) -> Figure:
    """Step 5, weight: every value vector multiplied by its attention weight.

    Vector form: three panels with key tokens as rows, the weights alpha_j as a
    column, the values v_j, and the products alpha_j v_j (values and products
    share one colour scale, so small weights visibly fade a row). Matrix form:
    one small panel per query, each holding that query's alpha_ij v_j with key
    tokens as rows; row labels are written on the first panel of each row of
    panels.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Vector form uses ``weights`` (seq_len,), ``v`` (seq_len, d_v) and
        ``weighted_values`` (seq_len, d_v); matrix form uses ``weighted_values``
        (seq_len, seq_len, d_v). Both use ``query_index``.
    tokens : sequence of str, length seq_len
        Token of each position.

    Returns
    -------
    matplotlib.figure.Figure
        Vector form: axes in order weights, values, weighted values. Matrix form:
        one axes per query in reading order (unused grid cells are hidden).

    Raises
    ------
    ValueError
        If the number of tokens differs from seq_len, or the trace is batched.
    """
    view = _view(trace, tokens)
    weighted = view.get("weighted_values")
    d_v = weighted.shape[-1]
    n = len(view.tokens)
    if not view.matrix_form:
        weights, v = view.get("weights"), view.get("v")
        fig, axes = _panels([1, d_v, d_v], n)
        lim = _limit(v, weighted)
        heatmap(weights[:, None], view.tokens, [r"$\alpha_j$"], ax=axes[0], title="weights",
                xlabel="weight", ylabel="key token", cmap=_WEIGHTS, vmin=0.0, vmax=1.0)
        heatmap(v, view.tokens, _dims("v", d_v), ax=axes[1], title=r"values $v_j$",
                xlabel="dimension", ylabel="key token", cmap=_SIGNED, vmin=-lim, vmax=lim)
        heatmap(weighted, view.tokens, _dims("v", d_v), ax=axes[2], title=r"weighted $\alpha_j v_j$",
                xlabel="dimension", ylabel="key token", cmap=_SIGNED, vmin=-lim, vmax=lim)
        detail = f"each value vector is multiplied by its weight for the query '{view.query_token}'"
        _set_step_title(fig, "weight", detail)
        return fig

    n_cols = min(n, 5)
    n_rows = -(-n // n_cols)
    cell = 0.4
    fig_w = max(4.5, n_cols * (cell * d_v + 0.5) + 1.0)
    fig_h = n_rows * (cell * n + 1.0) + 0.9
    fig, grid = plt.subplots(n_rows, n_cols, figsize=(fig_w, fig_h), layout="constrained", squeeze=False)
    lim = _limit(weighted)
    axes = grid.ravel()
    for i, ax in enumerate(axes):
        if i >= n:
            ax.set_visible(False)
            continue
        first_in_row = i % n_cols == 0
        heatmap(weighted[i], view.tokens, _dims("v", d_v), ax=ax, title=f"query '{view.tokens[i]}'",
                xlabel="dimension", ylabel="key token" if first_in_row else None,
                cmap=_SIGNED, vmin=-lim, vmax=lim, fontsize=7)
        if not first_in_row:
            ax.tick_params(labelleft=False)
    _set_step_title(fig, "weight", r"for each query $i$, every value $v_j$ is multiplied by its weight $\alpha_{ij}$")
    return fig


def plot_sum(trace: SelfAttentionTrace, tokens: Sequence[str]) -> Figure:
    """Step 6, sum: the output vector(s) z, the weighted values added up over the keys.

    Vector form: the weighted values alpha_j v_j (key tokens as rows) next to
    their sum z_i, drawn level with the query token's row and labelled with it
    (its only row label). Matrix form: the values V
    (key tokens as rows) next to the outputs Z (query tokens as rows), so each
    output can be compared with the values it mixes. Both panels share one
    colour scale.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Uses ``output`` (seq_len, d_v) or (d_v,), ``query_index``, and in vector
        form ``weighted_values`` (seq_len, d_v), in matrix form ``v`` (seq_len, d_v).
    tokens : sequence of str, length seq_len
        Token of each position.

    Returns
    -------
    matplotlib.figure.Figure
        Axes in order: weighted values (vector form) or values (matrix form),
        then the output.

    Raises
    ------
    ValueError
        If the number of tokens differs from seq_len, or the trace is batched.
    """
    view = _view(trace, tokens)
    output = view.get("output")
    d_v = output.shape[-1]
    if view.matrix_form:
        left, left_title = view.get("v"), r"values $V$"
        out_title = r"outputs $Z = AV$"
        detail = r"each output $z_i = \Sigma_j\,\alpha_{ij} v_j$ mixes the values of all tokens"
    else:
        i = view.query_index + 1
        left, left_title = view.get("weighted_values"), r"weighted $\alpha_j v_j$"
        out_title = rf"output $z_{{{i}}} = \Sigma_j\,\alpha_j v_j$"
        detail = f"adding the weighted values over the keys gives the new vector of '{view.query_token}'"
    fig, axes = _panels([d_v, d_v], len(view.tokens))
    lim = _limit(left, output)
    heatmap(left, view.tokens, _dims("v", d_v), ax=axes[0], title=left_title,
            xlabel="dimension", ylabel="key token", cmap=_SIGNED, vmin=-lim, vmax=lim)
    style = dict(title=out_title, xlabel="dimension", ylabel="query token", cmap=_SIGNED, vmin=-lim, vmax=lim)
    if view.matrix_form:
        heatmap(output, view.tokens, _dims("z", d_v), ax=axes[1], **style)
    else:
        _query_row(axes[1], output, view, _dims("z", d_v), **style)
    _set_step_title(fig, "sum", detail)
    return fig


#: Figure function of each step, keyed by the names in :data:`attncourse.functional.STEPS`.
STEP_FIGURES: dict[str, Callable[[SelfAttentionTrace, Sequence[str]], Figure]] = {
    "project": plot_project,
    "score": plot_score,
    "scale": plot_scale,
    "softmax": plot_softmax,
    "weight": plot_weight,
    "sum": plot_sum,
}


def step_name(step: str | int) -> str:
    """The name of a step given by name or by its 1-based number.

    Parameters
    ----------
    step : str or int
        A name in :data:`attncourse.functional.STEPS`, or a number from 1 to 6.

    Returns
    -------
    str
        The step's name.

    Raises
    ------
    ValueError
        If ``step`` is neither a known name nor a number in range; the message
        lists the valid names and numbers.
    """
    valid = ", ".join(f"{i}={name!r}" for i, name in enumerate(STEPS, start=1))
    if isinstance(step, str):
        if step in STEP_FIGURES:
            return step
    elif isinstance(step, (int, np.integer)) and not isinstance(step, bool):
        if 1 <= step <= len(STEPS):
            return STEPS[int(step) - 1]
    raise ValueError(f"unknown step {step!r}; valid steps are {valid}")


def plot_step(trace: SelfAttentionTrace, tokens: Sequence[str], step: str | int) -> Figure:
    """Draw the figure of one step of self-attention, chosen by name or number.

    Parameters
    ----------
    trace : SelfAttentionTrace
        Matrix or vector form, from :func:`attncourse.functional.self_attention_trace`.
    tokens : sequence of str, length seq_len
        Token of each position.
    step : str or int
        A name in :data:`attncourse.functional.STEPS` (``"project"``, ``"score"``,
        ``"scale"``, ``"softmax"``, ``"weight"``, ``"sum"``) or its 1-based number.

    Returns
    -------
    matplotlib.figure.Figure
        The figure of that step; see :data:`STEP_FIGURES` for each function.

    Raises
    ------
    ValueError
        If ``step`` is unknown (the message lists the valid steps), the number
        of tokens differs from seq_len, or the trace is batched.
    """
    return STEP_FIGURES[step_name(step)](trace, tokens)

"""Shape checks shared by the NumPy and torch attention functions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Shape = Sequence[int]


def _fmt(shape: Shape) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def validate_positive_ints(**sizes: int) -> None:
    """Raise ValueError naming the first size that is not a positive integer."""
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def validate_attention_shapes(q: Shape, k: Shape, v: Shape, mask: Shape | None = None) -> tuple[int, ...]:
    """Check q ``(..., tgt_len, d_k)``, k ``(..., src_len, d_k)``, v ``(..., src_len, d_v)``.

    Raises ValueError naming both shapes when they disagree.
    """
    q, k, v = tuple(q), tuple(k), tuple(v)
    if len(q) < 1 or len(k) < 2 or len(v) < 2:
        raise ValueError(
            f"expected queries (..., tgt_len, d_k), keys (..., src_len, d_k), values (..., src_len, d_v); "
            f"got queries {_fmt(q)}, keys {_fmt(k)}, values {_fmt(v)}"
        )
    if q[-1] != k[-1]:
        raise ValueError(
            f"queries have d_k={q[-1]} but keys have d_k={k[-1]}: queries {_fmt(q)} vs keys {_fmt(k)}"
        )
    if k[-2] != v[-2]:
        raise ValueError(
            f"keys and values must come in pairs, but there are {k[-2]} keys and {v[-2]} values: "
            f"keys {_fmt(k)} vs values {_fmt(v)}"
        )
    if k[:-2] != v[:-2]:
        raise ValueError(f"keys {_fmt(k)} and values {_fmt(v)} have different batch dimensions")
    try:
        batch = np.broadcast_shapes(q[:-2], k[:-2]) if len(q) > 1 else k[:-2]
    except ValueError:
        raise ValueError(
            f"batch dimensions of queries {_fmt(q)} and keys {_fmt(k)} do not broadcast"
        ) from None
    scores = (*batch, q[-2], k[-2]) if len(q) > 1 else (*batch, k[-2])
    if mask is not None:
        mask = tuple(mask)
        try:
            fits = np.broadcast_shapes(mask, scores) == scores
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {_fmt(mask)} does not broadcast to the scores' shape {_fmt(scores)} "
                f"(..., tgt_len, src_len); a key padding mask (batch, src_len) needs mask[:, None, :]"
            )
    return scores


def validate_projection_shapes(x: Shape, w_q: Shape, w_k: Shape, w_v: Shape) -> None:
    """Check x ``(..., seq_len, d_model)``, W^Q, W^K ``(d_model, d_k)``, W^V ``(d_model, d_v)``.

    Raises ValueError naming both shapes when they disagree.
    """
    x = tuple(x)
    if len(x) < 2:
        raise ValueError(f"embeddings must be (..., seq_len, d_model), got {_fmt(x)}")
    for name, w in (("w_q", tuple(w_q)), ("w_k", tuple(w_k)), ("w_v", tuple(w_v))):
        if len(w) != 2 or w[0] != x[-1]:
            raise ValueError(
                f"{name} must be (d_model, d) with d_model={x[-1]} to fit embeddings {_fmt(x)}, got {_fmt(w)}"
            )
    if tuple(w_q)[1] != tuple(w_k)[1]:
        raise ValueError(
            f"w_q and w_k must project to the same d_k: w_q {_fmt(w_q)} vs w_k {_fmt(w_k)}"
        )

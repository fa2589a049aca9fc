"""Bahdanau's additive attention as a batched ``torch.nn.Module``.

The alignment model of Bahdanau et al. (2015) is a one-hidden-layer MLP that
scores how well the decoder state s_{i-1} matches each encoder annotation h_j:

    e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)          (eq. (6), appendix A.1.2)
    alpha_ij = exp(e_ij) / sum_k exp(e_ik)             (eq. (6))
    c_i = sum_j alpha_ij h_j                           (eq. (5))

It is called *additive* because the query and the key meet by addition inside
the tanh, not by a dot product. U_a h_j does not depend on the target step i,
so :meth:`AdditiveAttention.project_keys` computes it once per sentence and the
decoder passes it back in at every step.

The stepwise NumPy version is
:func:`attncourse.functional.additive.additive_attention_step`; the two are
tested equal.

References
----------
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, section 3.1, equations (5)-(6), appendices A.1.2 and B.1.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attncourse.functional.torch_attention import masked_softmax


def validate_key_mask(mask: torch.Tensor, name: str, keys: torch.Tensor, keys_name: str) -> None:
    """Refuse a mask of the source positions that does not fit ``keys``.

    Parameters
    ----------
    mask : (batch, src_len) bool
        True at real tokens.
    name, keys_name : str
        The two arguments' names, for the messages.
    keys : (batch, src_len, ...)

    Raises
    ------
    TypeError
        If ``mask`` is not boolean.
    ValueError
        If its shape is not (batch, src_len) of ``keys`` (the message names both shapes).
    """
    batch, src_len = keys.shape[0], keys.shape[1]
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be boolean (True = real token), got dtype {mask.dtype}")
    if tuple(mask.shape) != (batch, src_len):
        raise ValueError(
            f"{name} must be (batch, src_len) = {(batch, src_len)} to fit {keys_name} {tuple(keys.shape)}, "
            f"got {tuple(mask.shape)}"
        )


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: one query against a sequence of keys.

    Parameters
    ----------
    query_dim : int
        Width n of the decoder state s_{i-1}.
    key_dim : int
        Width of each annotation h_j (2n for a bidirectional encoder).
    attn_dim : int
        Width n' of the alignment MLP's hidden layer.
    bias : bool
        Add a learned bias ``b_a`` inside the tanh. The paper has none, so the
        default is ``False``.

    Attributes
    ----------
    w_a : Parameter (attn_dim, query_dim)
        W_a, in the paper's layout (it multiplies a column vector).
    u_a : Parameter (attn_dim, key_dim)
        U_a.
    v_a : Parameter (attn_dim,)
        v_a, **initialised to zero** as in the paper (appendix B.1): every score
        starts at 0, so attention starts uniform over the real source tokens and
        the model learns to sharpen it. One consequence: at initialisation the
        gradients of W_a and U_a are exactly zero (they reach the loss only
        through v_a); after the first update of v_a they are not.
    b_a : Parameter (attn_dim,) or None
        Optional bias, initialised to zero.

    Notes
    -----
    The paper draws W_a and U_a from N(0, 0.001^2) (appendix B.1). With so
    small a scale the tanh is almost linear and learning starts slowly on small
    models, so we use PyTorch's ``nn.Linear`` default, U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), for them instead.

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equations (5)-(6); appendix A.1.2 (the
    alignment model) and B.1 (initialisation).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, bias: bool = False) -> None:
        super().__init__()
        for name, value in (("query_dim", query_dim), ("key_dim", key_dim), ("attn_dim", attn_dim)):
            if int(value) < 1:
                raise ValueError(f"{name} must be a positive int, got {value}")
        self.query_dim, self.key_dim, self.attn_dim = int(query_dim), int(key_dim), int(attn_dim)
        self.w_a = nn.Parameter(torch.empty(attn_dim, query_dim))
        self.u_a = nn.Parameter(torch.empty(attn_dim, key_dim))
        self.v_a = nn.Parameter(torch.zeros(attn_dim))
        self.b_a = nn.Parameter(torch.zeros(attn_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """W_a, U_a ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); v_a and b_a = 0 (attention starts uniform)."""
        for w in (self.w_a, self.u_a):
            bound = 1.0 / math.sqrt(w.shape[1])
            nn.init.uniform_(w, -bound, bound)
        nn.init.zeros_(self.v_a)
        if self.b_a is not None:
            nn.init.zeros_(self.b_a)

    def extra_repr(self) -> str:
        return (f"query_dim={self.query_dim}, key_dim={self.key_dim}, attn_dim={self.attn_dim}, "
                f"bias={self.b_a is not None}")

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """U_a h_j (plus ``b_a`` if present) for every source position, once per sentence.

        Parameters
        ----------
        keys : (batch, src_len, key_dim)
            Encoder annotations h_j.

        Returns
        -------
        (batch, src_len, attn_dim)
            The key half of the tanh's argument; pass it to :meth:`forward` as
            ``projected_keys`` at every decoding step.

        Raises
        ------
        ValueError
            If ``keys`` is not ``(batch, src_len, key_dim)`` with this module's key_dim.
        """
        if keys.dim() != 3 or keys.shape[-1] != self.key_dim:
            raise ValueError(
                f"keys must be (batch, src_len, key_dim={self.key_dim}), got {tuple(keys.shape)}"
            )
        projected = keys @ self.u_a.T
        return projected if self.b_a is None else projected + self.b_a

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        mask: torch.Tensor | None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Context vector and attention weights for one decoding step of a batch.

        Parameters
        ----------
        query : (batch, query_dim)
            Previous decoder states s_{i-1}.
        keys : (batch, src_len, key_dim)
            Encoder annotations h_j; they are also the values.
        mask : (batch, src_len) bool or None
            ``True`` where position j may be attended (a real token). Padded
            positions get weight exactly 0.0; a row with no ``True`` gets all-zero
            weights and a zero context.
        projected_keys : (batch, src_len, attn_dim), optional
            ``project_keys(keys)`` computed earlier; computed here if omitted.

        Returns
        -------
        context : (batch, key_dim)
            c_i = sum_j alpha_ij h_j (eq. (5)).
        weights : (batch, src_len)
            alpha_ij, the softmax over j of e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)
            (eq. (6)); each unmasked row sums to 1.

        Raises
        ------
        ValueError
            If query, keys, mask or projected_keys do not fit each other; the
            message names both shapes.
        TypeError
            If ``mask`` is not boolean.

        References
        ----------
        Bahdanau et al. (2015), section 3.1, equations (5)-(6); appendix A.1.2.
        """
        if query.dim() != 2 or query.shape[-1] != self.query_dim:
            raise ValueError(f"query must be (batch, query_dim={self.query_dim}), got {tuple(query.shape)}")
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        elif keys.dim() != 3 or keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys must be (batch, src_len, key_dim={self.key_dim}), got {tuple(keys.shape)}")
        batch, src_len = keys.shape[0], keys.shape[1]
        if query.shape[0] != batch:
            raise ValueError(
                f"query {tuple(query.shape)} and keys {tuple(keys.shape)} have different batch sizes"
            )
        if tuple(projected_keys.shape) != (batch, src_len, self.attn_dim):
            raise ValueError(
                f"projected_keys must be (batch, src_len, attn_dim) = {(batch, src_len, self.attn_dim)} "
                f"to fit keys {tuple(keys.shape)}, got {tuple(projected_keys.shape)}"
            )
        if mask is not None:
            validate_key_mask(mask, "mask", keys, "keys")
        hidden = torch.tanh((query @ self.w_a.T).unsqueeze(1) + projected_keys)  # (batch, src_len, attn_dim)
        scores = hidden @ self.v_a  # e_ij: (batch, src_len)
        weights = masked_softmax(scores, mask, dim=-1)  # alpha_ij
        context = (weights.unsqueeze(1) @ keys).squeeze(1)  # c_i = sum_j alpha_ij h_j
        return context, weights

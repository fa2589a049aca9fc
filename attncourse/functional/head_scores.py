"""Scores that say what an attention head does, read from its weights or its circuit.

Chapter 9 opens trained attention-only Transformers and measures each head:

* :func:`prefix_matching_score` -- how much a head attends to the token *after* an
  earlier occurrence of the current token (Olsson et al. 2022, "Key Concepts",
  "prefix matching"), the first half of an induction head;
* :func:`previous_token_score` -- how much it attends to the position just before
  (the previous-token head an induction head composes with);
* :func:`copying_score` -- whether its OV circuit raises the logit of the token it
  attends to: the share of the circuit's eigenvalues that are positive, weighted by
  size (Elhage et al. 2021, "Detecting copying behavior"; Olsson et al. 2022, "Key
  Concepts", "copying"), the second half of an induction head;
* :func:`first_position_attention` -- how much attention lands on position 0, the
  "attention sink" of Xiao et al. (2023, section 3.1);
* :func:`in_context_learning_score` -- the loss late in the context minus the loss
  early in it (Olsson et al. 2022, "Key Concepts"): negative when the model uses its
  context.

Attention weights follow the course's layout ``(..., seq_len, seq_len)``: row i is
query i, column j key j, each row sums to 1 (causal rows are zero above the diagonal).

References
----------
Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits".
Olsson et al. (2022), "In-context Learning and Induction Heads", "Key Concepts"
(definitions; the paper's headings are unnumbered).
Xiao et al. (2023), "Efficient Streaming Language Models with Attention Sinks", section 3.1.
"""

from __future__ import annotations

import torch


def _square_weights(weights: torch.Tensor, name: str = "weights", needs_two: str = "") -> int:
    """seq_len of ``(..., seq_len, seq_len)`` weights; ``needs_two``: the caller that needs seq_len >= 2."""
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"{name} must be (..., seq_len, seq_len), got {tuple(weights.shape)}")
    if needs_two and weights.shape[-1] < 2:
        raise ValueError(f"{needs_two} needs at least two positions")
    return weights.shape[-1]


def prefix_match_mask(tokens: torch.Tensor) -> torch.Tensor:
    """Where query i may find its prefix match: key j (1 <= j <= i) with ``tokens[j - 1] == tokens[i]``.

    Parameters
    ----------
    tokens : (..., seq_len) int

    Returns
    -------
    (..., seq_len, seq_len) bool
        Row i, column j: key j follows an earlier occurrence of the query's token.

    Examples
    --------
    >>> prefix_match_mask(torch.tensor([5, 7, 5])).int()
    tensor([[0, 0, 0],
            [0, 0, 0],
            [0, 1, 0]], dtype=torch.int32)
    """
    n = tokens.shape[-1]
    same = tokens[..., :, None] == tokens[..., None, :]        # (.., i, j - 1)
    mask = torch.zeros(*tokens.shape, n, dtype=torch.bool, device=tokens.device)
    mask[..., :, 1:] = same[..., :, :-1]                       # key j = (j - 1) + 1
    return mask & torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()


def prefix_matching_score(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean attention a head gives to the tokens that followed earlier copies of the query's token.

    For every query i whose token occurred before (at some j - 1 < i), the score sums
    the attention weights on all such keys j; the result is the mean over those
    queries (queries without an earlier occurrence are left out). On a segment of
    distinct random tokens repeated twice this is Olsson et al.'s prefix-matching score:
    the attention from each token of the second copy to the token after its first copy.

    Parameters
    ----------
    weights : (..., seq_len, seq_len)
        E.g. ``(num_heads, seq_len, seq_len)`` or ``(batch, num_heads, seq_len, seq_len)``.
    tokens : (seq_len,) or (batch, seq_len) int
        The input sequence(s); with a batch, ``weights`` must be
        ``(batch, num_heads, seq_len, seq_len)``.

    Returns
    -------
    (...,) tensor, between 0 and 1
        The weights' leading dimensions, e.g. ``(num_heads,)`` or ``(batch, num_heads)``.

    Raises
    ------
    ValueError
        If the shapes do not match, or no token of ``tokens`` occurs twice.

    References
    ----------
    Olsson et al. (2022), "Key Concepts", "prefix matching".
    """
    n = _square_weights(weights)
    if tokens.shape[-1] != n or tokens.dim() not in (1, 2):
        raise ValueError(f"tokens must be (seq_len,) or (batch, seq_len) with seq_len={n}, "
                         f"got {tuple(tokens.shape)}")
    mask = prefix_match_mask(tokens.to(weights.device))
    if tokens.dim() == 2:
        if weights.dim() != 4 or weights.shape[0] != tokens.shape[0]:
            raise ValueError(f"with tokens {tuple(tokens.shape)}, weights must be "
                             f"(batch, num_heads, seq_len, seq_len), got {tuple(weights.shape)}")
        mask = mask[:, None]
    has_match = mask.any(-1)                                   # (..., seq_len)
    if not has_match.any():
        raise ValueError("no token occurs twice in tokens: the prefix-matching score is undefined")
    per_query = (weights * mask).sum(-1)
    count = has_match.sum(-1).clamp(min=1)
    return (per_query * has_match).sum(-1) / count


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention from each query i >= 1 to key i - 1.

    Parameters
    ----------
    weights : (..., seq_len, seq_len), seq_len >= 2

    Returns
    -------
    (...,) tensor, between 0 and 1

    Raises
    ------
    ValueError
        If the weights are not square or have fewer than two positions.
    """
    _square_weights(weights, needs_two="previous_token_score")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def first_position_attention(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention that queries 1 .. n - 1 give to key 0 (query 0 can see nothing else).

    Compare with :func:`uniform_first_position`, the value of a head that spreads its
    attention evenly over the causal prefix.

    Parameters
    ----------
    weights : (..., seq_len, seq_len), seq_len >= 2

    Returns
    -------
    (...,) tensor, between 0 and 1

    Raises
    ------
    ValueError
        If the weights are not square or have fewer than two positions.

    References
    ----------
    Xiao et al. (2023), section 3.1 and figure 2 (attention on the initial tokens).
    """
    _square_weights(weights, needs_two="first_position_attention")
    return weights[..., 1:, 0].mean(-1)


def uniform_first_position(seq_len: int) -> float:
    """What :func:`first_position_attention` gives for uniform causal attention: mean of 1 / (i + 1), i = 1 .. n - 1."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2, got {seq_len}")
    return float(sum(1.0 / (i + 1) for i in range(1, seq_len)) / (seq_len - 1))


def copying_score(ov: torch.Tensor) -> torch.Tensor:
    """Eigenvalue copying score of an OV circuit: ``sum(lambda) / sum(|lambda|)``, in [-1, 1].

    ``ov[a, b]`` is how much attending to token ``a`` raises the logit of token ``b``
    (e.g. :func:`attncourse.nn.circuits.ov_circuit`). A head that copies raises the
    logit of the token it attends to: the matrix acts like a positive multiple of the
    identity, its eigenvalues are mostly positive and the score is near 1 (identity: 1,
    minus the identity: -1, a rotation by 90 degrees: 0). The sum of the eigenvalues is
    the trace, so the score is real.

    Parameters
    ----------
    ov : (..., vocab_size, vocab_size)

    Returns
    -------
    (...,) tensor

    Raises
    ------
    ValueError
        If ``ov`` is not square.

    References
    ----------
    Elhage et al. (2021), "Detecting copying behavior" (positive eigenvalues of the OV
    circuit); Olsson et al. (2022), "Key Concepts", "copying".
    """
    _square_weights(ov, "ov")
    eigenvalues = torch.linalg.eigvals(ov.double())
    total = eigenvalues.abs().sum(-1)
    return (eigenvalues.real.sum(-1) / total.clamp(min=torch.finfo(total.dtype).tiny)).to(ov.dtype)


def in_context_learning_score(losses: torch.Tensor, early: int, late: int) -> torch.Tensor:
    """Loss at position ``late`` minus loss at position ``early``, averaged over sequences.

    Olsson et al. (2022) take the 500th and the 50th token of 512-token contexts;
    scaled to a context of n tokens that is positions ``49 * n // 512`` and
    ``499 * n // 512`` (6 and 62 for n = 64, the positions chapter 9 passes).
    Negative means later tokens are predicted better: the model learns in context.

    Parameters
    ----------
    losses : (..., seq_len)
        Per-token losses (nats), e.g. ``(batch, seq_len)``.
    early, late : int
        0-based positions (negative counts from the end).

    Returns
    -------
    scalar tensor

    Raises
    ------
    ValueError
        If a position is outside ``losses``.

    References
    ----------
    Olsson et al. (2022), "Key Concepts", "In-context Learning".
    """
    n = losses.shape[-1]
    for name, value in (("early", early), ("late", late)):
        if not -n <= value < n:
            raise ValueError(f"{name}={value} is outside seq_len={n}")
    return (losses[..., late] - losses[..., early]).mean()

"""Open a trained :class:`~attncourse.nn.gpt.GPT` head by head: OV circuits and ablations.

Elhage et al. (2021) write each head's contribution to the residual stream as two
independent parts: the *QK circuit* decides where the head looks, the *OV circuit*
what it writes once it looks there. For a token ``a`` attended to, the head adds
``x_a W_V^h W_O^h`` to the stream; through the unembedding that changes the logits
by ``W_E[a] W_V^h W_O^h W_U``, one row of the vocabulary-by-vocabulary matrix
:func:`ov_circuit` returns. Its eigenvalues say whether the head copies
(:func:`attncourse.functional.head_scores.copying_score`).

An ablation removes one head and measures what is lost (Olsson et al. 2022,
"Argument 3", direct ablation): :func:`ablate_heads` replaces the chosen heads'
outputs (before ``W_O``) with zeros, or with their mean over a reference batch
(:func:`head_output_means`), for the duration of a ``with`` block.

References
----------
Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits",
sections "Attention heads are independent and additive" and "OV and QK circuits".
Olsson et al. (2022), "In-context Learning and Induction Heads", heading "Argument 3"
(direct ablation; the paper's headings are unnumbered).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

#: Values of ``ablate_heads(mode=...)``.
ABLATIONS: tuple[str, ...] = ("zero", "mean")


def _validate_head(model: nn.Module, layer: int, head: int) -> None:
    num_layers, num_heads = len(model.blocks), model.blocks[0].attn.num_heads
    if not (0 <= layer < num_layers and 0 <= head < num_heads):
        raise ValueError(f"(layer, head) = ({layer}, {head}) is outside the model's "
                         f"{num_layers} layers x {num_heads} heads (0-based)")


@torch.no_grad()
def ov_circuit(model: nn.Module, layer: int, head: int) -> torch.Tensor:
    """The OV circuit of one head through the embedding and the unembedding.

    ``W_E diag(g) W_V^h W_O^h diag(g_f) W_U``: the token embedding, the gain of the
    layer's LayerNorm (if any), the head's value and output maps, the gain of the final
    LayerNorm (if any), and the unembedding. The LayerNorms'
    centring, scaling by the standard deviation and biases are left out, as Elhage et
    al. do (a linear approximation); the copying score does not depend on the overall
    scale. With RoPE the values are not rotated, so this holds for every positional scheme.

    Parameters
    ----------
    model : GPT
    layer, head : int
        0-based.

    Returns
    -------
    (vocab_size, vocab_size) float tensor
        Row ``a``: the change of every logit per unit of attention on token ``a``.

    Raises
    ------
    ValueError
        If ``(layer, head)`` is not in the model.
    """
    _validate_head(model, layer, head)
    block = model.blocks[layer]
    attn = block.attn
    group = attn.num_heads // attn.num_kv_heads
    kv, d_k = head // group, attn.d_k
    w_v = attn.w_v.weight[kv * d_k:(kv + 1) * d_k]              # (d_k, d_model)
    w_o = attn.w_o.weight[:, head * d_k:(head + 1) * d_k]      # (d_model, d_k)
    embed = model.embedding.weight                             # (vocab, d_model)
    values = (embed * _gain(block.attn_norm)) @ w_v.T          # (vocab, d_k)
    written = (values @ w_o.T) * _gain(model.final_norm)       # (vocab, d_model)
    return written @ model.output_proj.weight.T


def _gain(norm: nn.Module) -> torch.Tensor | float:
    """A LayerNorm's gain, or 1 for the identity (the attention-only GPT has no LayerNorm)."""
    return getattr(norm, "weight", 1.0)


def _head_slices(model: nn.Module, heads: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        _validate_head(model, int(layer), int(head))
        by_layer.setdefault(int(layer), []).append(int(head))
    return by_layer


@torch.no_grad()
def head_output_means(model: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every head's output (before ``W_O``), averaged over the sequences and positions of ``tokens``.

    Parameters
    ----------
    model : GPT
    tokens : (batch, seq_len) int
        A reference batch from the data the model is evaluated on.

    Returns
    -------
    list over layers of (num_heads, d_k) tensors
        What :func:`ablate_heads` puts in place of a head in ``mode="mean"``.
    """
    means: list[torch.Tensor] = []
    hooks = []
    for block in model.blocks:
        attn = block.attn

        def record(module, args, attn=attn):
            heads = args[0].unflatten(-1, (attn.num_heads, attn.d_k))  # (batch, seq, h, d_k)
            means.append(heads.mean(dim=(0, 1)))

        hooks.append(attn.w_o.register_forward_pre_hook(record))
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    return means


@contextmanager
def ablate_heads(model: nn.Module, heads: Sequence[tuple[int, int]], mode: str = "zero",
                 means: Sequence[torch.Tensor] | None = None) -> Iterator[nn.Module]:
    """Within the ``with`` block, the chosen heads' outputs are replaced (zero or mean ablation).

    The replacement happens at the input of each layer's output projection ``W_O``,
    where the heads' outputs sit side by side, ``(batch, seq_len, num_heads * d_k)``;
    the other heads and the residual stream are untouched. The hooks are removed on
    leaving the block, even after an error.

    Parameters
    ----------
    model : GPT
    heads : sequence of (layer, head)
        0-based; empty ablates nothing.
    mode : {"zero", "mean"}
        ``"zero"``: the head writes nothing. ``"mean"``: it writes its mean output from
        ``means`` (the same vector at every position), which removes what depends on the
        input but keeps the head's constant contribution.
    means : list over layers of (num_heads, d_k), optional
        From :func:`head_output_means`; required with ``mode="mean"``.

    Yields
    ------
    model

    Raises
    ------
    ValueError
        If ``mode`` is unknown, ``means`` is missing for mean ablation, or a head is
        not in the model.

    Examples
    --------
    >>> with ablate_heads(gpt, [(1, 2)]):            # doctest: +SKIP
    ...     logits, _ = gpt(tokens)

    References
    ----------
    Olsson et al. (2022), "Argument 3" (direct ablation); Elhage et al. (2021).
    """
    if mode not in ABLATIONS:
        raise ValueError(f"mode must be one of {ABLATIONS}, got {mode!r}")
    if mode == "mean" and means is None:
        raise ValueError("mode='mean' needs means=head_output_means(model, tokens)")
    by_layer = _head_slices(model, heads)
    hooks = []
    for layer, chosen in by_layer.items():
        attn = model.blocks[layer].attn

        def replace(module, args, attn=attn, chosen=tuple(chosen), layer=layer):
            x = args[0].unflatten(-1, (attn.num_heads, attn.d_k)).clone()
            for h in chosen:
                x[..., h, :] = 0.0 if mode == "zero" else means[layer][h].to(x)
            return (x.flatten(-2),)

        hooks.append(attn.w_o.register_forward_pre_hook(replace))
    try:
        yield model
    finally:
        for hook in hooks:
            hook.remove()

"""Open a trained GPT head by head: OV circuits and ablations (chapter 9).

Source: Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits",
section "OV and QK circuits".
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
    """W_E diag(g) W_V^h W_O^h diag(g_f) W_U, (vocab_size, vocab_size).

    Row a: the logits' change per unit of attention on token a. LayerNorm centring and
    biases are left out, as in Elhage et al. (2021). Raises ``ValueError`` if ``(layer,
    head)`` (0-based) is not in the model.
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
    """A LayerNorm's gain, or 1 for the identity."""
    return getattr(norm, "weight", 1.0)


def _head_slices(model: nn.Module, heads: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        _validate_head(model, int(layer), int(head))
        by_layer.setdefault(int(layer), []).append(int(head))
    return by_layer


@torch.no_grad()
def head_output_means(model: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each head's mean output before W_O over ``tokens``, (num_heads, d_k)."""
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
    """Context manager: zero or mean ablation of ``heads`` [(layer, head), ...].

    ``means`` comes from :func:`head_output_means` (required with ``mode="mean"``).
    Raises ``ValueError`` for an unknown mode, missing means or a head not in the model.
    Source: Olsson et al. (2022), "In-context Learning and Induction Heads", "Argument
    3".
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

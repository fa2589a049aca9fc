"""The Vision Transformer (Dosovitskiy et al. 2021) at the size of scikit-learn's 8 x 8 digits.

An image is cut into non-overlapping p x p patches (:func:`patchify`), each patch is
flattened and projected linearly to d_model numbers (a "token"), a learned ``[CLS]``
vector is put in front, a learned position embedding is added to every token, and the
sequence goes through the encoder blocks of chapter 13: chapter 7's pre-norm blocks
without the causal mask (:class:`~attncourse.nn.gpt.DecoderOnlyBlock` with
``causal=False``). The class scores are a linear map of ``[CLS]``'s final state
(after the final LayerNorm), as in the paper's equations (1)-(4).

``num_registers`` adds the register tokens of Darcet et al. (2024): learned vectors
after ``[CLS]``, with no position embedding, that take part in attention and are then
thrown away. :func:`attention_rollout` (Abnar and Zuidema 2020) and
:func:`position_similarity` (ViT, figure 7) read what a trained model attends to.

References
----------
Dosovitskiy et al. (2021), "An Image is Worth 16x16 Words", section 3.1, equations (1)-(4),
figure 7. Abnar, Zuidema (2020), "Quantifying Attention Flow in Transformers", section 3.
Darcet, Oquab, Mairal, Bojanowski (2024), "Vision Transformers Need Registers", sections 2-3.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attncourse.nn.gpt import DecoderOnlyBlock
from attncourse.nn.spec import DecoderSpec, FFNSpec, PositionSpec


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images into non-overlapping square patches, each flattened row by row.

    Parameters
    ----------
    images : (batch, height, width) or (batch, channels, height, width)
    patch_size : int
        p; must divide the height and the width.

    Returns
    -------
    (batch, (height / p) * (width / p), channels * p * p)
        Patches in row-major order of the grid (patch ``r * (width / p) + c`` is grid row r,
        column c); inside a patch, channel first, then pixel rows, then pixel columns.

    Raises
    ------
    ValueError
        If ``images`` is not 3-D or 4-D, or p does not divide both sides.

    References
    ----------
    Dosovitskiy et al. (2021), section 3.1: x in R^{H x W x C} -> x_p in R^{N x (P^2 C)}.
    """
    if images.dim() == 3:
        images = images[:, None]
    if images.dim() != 4:
        raise ValueError(f"images must be (batch, height, width) or (batch, channels, height, width), "
                         f"got {tuple(images.shape)}")
    batch, channels, height, width = images.shape
    if patch_size < 1 or height % patch_size or width % patch_size:
        raise ValueError(f"patch_size={patch_size} must divide the images' height {height} and width {width}")
    p = patch_size
    grid = images.reshape(batch, channels, height // p, p, width // p, p)
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(batch, (height // p) * (width // p), channels * p * p)


def encoder_spec(d_model: int, num_heads: int, num_layers: int, d_ff: int) -> DecoderSpec:
    """Chapter 7's block without the causal mask and without positions of its own (they are
    added to the tokens): the encoder block of this chapter."""
    return DecoderSpec(vocab_size=1, d_model=d_model, num_heads=num_heads, num_layers=num_layers,
                       causal=False, positions=PositionSpec("none"), ffn=FFNSpec("relu", d_ff))


class VisionTransformer(nn.Module):
    """A ViT classifier: patches as tokens, a learned position embedding, ``[CLS]``, optional registers.

    Parameters
    ----------
    image_size : int
        Height = width of the (square) images.
    patch_size : int
        p; must divide ``image_size``.
    num_classes : int
    d_model, num_heads, num_layers, d_ff : int
        The encoder's sizes (``num_heads`` divides ``d_model``).
    num_registers : int
        Register tokens (Darcet et al. 2024), 0 for the plain ViT.
    in_channels : int

    Attributes
    ----------
    patch_embedding : nn.Linear(in_channels * p * p, d_model)
        E of equation (1).
    cls_token : (1, 1, d_model) parameter
        x_class.
    position_embedding : (1, 1 + N, d_model) parameter
        E_pos, one row for ``[CLS]`` and one per patch, N = (image_size / p)^2.
    registers : (1, num_registers, d_model) parameter or None
    blocks : nn.ModuleList of DecoderOnlyBlock (``causal=False``)
    final_norm : nn.LayerNorm
    head : nn.Linear(d_model, num_classes)

    Raises
    ------
    ValueError
        If a size is not a positive int, p does not divide ``image_size``, or
        ``num_registers`` is negative.

    References
    ----------
    Dosovitskiy et al. (2021), equations (1)-(4); Darcet et al. (2024), section 2.2.
    """

    def __init__(self, image_size: int = 8, patch_size: int = 2, num_classes: int = 10, d_model: int = 32,
                 num_heads: int = 4, num_layers: int = 2, d_ff: int = 64, num_registers: int = 0,
                 in_channels: int = 1) -> None:
        super().__init__()
        for name, value in (("image_size", image_size), ("patch_size", patch_size),
                            ("num_classes", num_classes), ("in_channels", in_channels)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if image_size % patch_size:
            raise ValueError(f"patch_size={patch_size} must divide image_size={image_size}")
        if isinstance(num_registers, bool) or int(num_registers) != num_registers or num_registers < 0:
            raise ValueError(f"num_registers must be an int >= 0, got {num_registers!r}")
        self.image_size, self.patch_size, self.in_channels = int(image_size), int(patch_size), int(in_channels)
        self.num_patches = (image_size // patch_size) ** 2
        self.num_registers = int(num_registers)
        spec = encoder_spec(d_model, num_heads, num_layers, d_ff)
        self.patch_embedding = nn.Linear(in_channels * patch_size**2, d_model)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d_model))
        self.position_embedding = nn.Parameter(0.02 * torch.randn(1, 1 + self.num_patches, d_model))
        self.registers = (nn.Parameter(0.02 * torch.randn(1, self.num_registers, d_model))
                          if self.num_registers else None)
        self.blocks = nn.ModuleList(DecoderOnlyBlock(spec) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The encoder's input z_0, ``(batch, 1 + num_registers + N, d_model)``: ``[CLS]``, the
        registers (no position), then the N embedded patches, positions added (equation (1))."""
        if images.dim() not in (3, 4) or images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"images must be (batch, [channels,] {self.image_size}, {self.image_size}), "
                             f"got {tuple(images.shape)}")
        patches = self.patch_embedding(patchify(images, self.patch_size))
        batch = patches.shape[0]
        z = torch.cat([self.cls_token.expand(batch, -1, -1), patches], dim=1) + self.position_embedding
        if self.registers is None:
            return z
        return torch.cat([z[:, :1], self.registers.expand(batch, -1, -1), z[:, 1:]], dim=1)

    def forward(self, images: torch.Tensor, need_weights: bool = False,
                return_states: bool = False):
        """Class scores, and on request every layer's attention weights and the last block's states.

        Parameters
        ----------
        images : (batch, image_size, image_size) or (batch, in_channels, image_size, image_size)
        need_weights : bool
            Also return the weights, a list over layers of ``(batch, num_heads, T, T)``,
            T = 1 + num_registers + N (token 0 is ``[CLS]``).
        return_states : bool
            Also return the last block's output before the final norm, ``(batch, T, d_model)``
            (where Darcet et al. measure the tokens' norms).

        Returns
        -------
        logits : (batch, num_classes)
        weights : list of tensors, only if ``need_weights``
        states : tensor, only if ``return_states``

        Raises
        ------
        ValueError
            If the images' shape does not fit.
        """
        x = self.tokens(images)
        weights = []
        for block in self.blocks:
            x, w = block(x, need_weights=need_weights)
            weights.append(w)
        logits = self.head(self.final_norm(x[:, 0]))
        out = (logits,) + ((weights,) if need_weights else ()) + ((x,) if return_states else ())
        return out[0] if len(out) == 1 else out


def attention_rollout(weights: list[torch.Tensor] | tuple[torch.Tensor, ...],
                      residual: bool = True) -> torch.Tensor:
    """Attention rollout: how much each token's input reaches each token's output through the layers.

    Each layer's weights are averaged over the heads, W̄_l; with ``residual`` the identity is
    mixed in for the skip connection, 0.5 W̄_l + 0.5 I; each row is then divided by its sum,
    as Abnar and Zuidema re-normalise, giving A_l (a no-op for softmax maps, whose rows sum
    to 1 already, and what keeps any other non-negative map a share per row); the rollout is
    the product A_L ... A_2 A_1.

    Parameters
    ----------
    weights : list over layers (first layer first) of (batch, num_heads, T, T)
        Attention weights, non-negative (a softmax's rows sum to 1; other maps are
        re-normalised row by row).
    residual : bool
        Mix in the identity (Abnar and Zuidema's choice); ``False`` multiplies the raw
        averages, each row re-normalised.

    Returns
    -------
    (batch, T, T)
        Row i: the share of each input token in token i's output; rows sum to 1.

    Raises
    ------
    ValueError
        If ``weights`` is empty or the layers' shapes differ or are not (batch, h, T, T), or if
        a weight is negative, or (``residual=False``) a row of a layer sums to 0.

    References
    ----------
    Abnar, Zuidema (2020), "Quantifying Attention Flow in Transformers", section 3, equation (1).
    """
    if len(weights) == 0:
        raise ValueError("attention_rollout needs the weights of at least one layer")
    shape = tuple(weights[0].shape)
    for w in weights:
        if w.dim() != 4 or w.shape[-1] != w.shape[-2] or tuple(w.shape) != shape:
            raise ValueError(f"every layer's weights must be (batch, heads, T, T) of one shape, got "
                             f"{[tuple(x.shape) for x in weights]}")
    eye = torch.eye(shape[-1], dtype=weights[0].dtype, device=weights[0].device)
    rollout = eye.expand(shape[0], -1, -1)
    for layer, w in enumerate(weights):
        if bool((w < 0).any()):
            raise ValueError(f"attention weights must be non-negative; layer {layer} has "
                             f"{float(w.min()):.3g}")
        a = w.mean(dim=1)
        if residual:
            a = 0.5 * a + 0.5 * eye
        sums = a.sum(dim=-1, keepdim=True)
        if bool((sums == 0).any()):
            raise ValueError(f"a row of layer {layer}'s head-averaged weights sums to 0: no "
                             "share to re-normalise (use residual=True)")
        rollout = (a / sums) @ rollout
    return rollout


def position_similarity(position_embedding: torch.Tensor) -> torch.Tensor:
    """Cosine similarity between every pair of position embeddings (ViT, figure 7).

    Parameters
    ----------
    position_embedding : (N, d_model)
        One row per patch (``[CLS]``'s row left out).

    Returns
    -------
    (N, N)
        ``cos(E_i, E_j)``; 1 on the diagonal.

    Raises
    ------
    ValueError
        If the input is not 2-D.
    """
    if position_embedding.dim() != 2:
        raise ValueError(f"position_embedding must be (N, d_model), got {tuple(position_embedding.shape)}")
    unit = F.normalize(position_embedding, dim=-1)
    return unit @ unit.T


@torch.no_grad()
def occlusion_importance(model: VisionTransformer, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How much the true class's probability drops when each patch is blanked (set to 0).

    An attribution that does not read the attention, against which raw attention and
    rollout are compared (Abnar and Zuidema 2020 compare with input ablation, section 4).

    Parameters
    ----------
    model : VisionTransformer
    images : (n, image_size, image_size)
    labels : (n,) int

    Returns
    -------
    (n, N)
        p(true class | image) minus p(true class | image with patch j blanked), per patch j.
    """
    model.eval()
    p = model.patch_size
    per_row = model.image_size // p
    base = model(images).softmax(-1).gather(1, labels[:, None])[:, 0]
    drops = []
    for j in range(model.num_patches):
        blanked = images.clone()
        r, c = divmod(j, per_row)
        blanked[..., r * p:(r + 1) * p, c * p:(c + 1) * p] = 0
        drops.append(base - model(blanked).softmax(-1).gather(1, labels[:, None])[:, 0])
    return torch.stack(drops, dim=1)


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0 .. m-1 within each row of ``x (n, m)``, tied values sharing their mean rank.

    As ``scipy.stats.rankdata(x, axis=1) - 1``: ranking ties by position instead (an argsort
    of an argsort) would give equal values different ranks in the order of their columns.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"average_ranks takes an (n, m) array, got shape {x.shape}")
    order = np.argsort(x, axis=1, kind="stable")
    ranks = np.empty_like(x)
    for row, (values, by_value) in enumerate(zip(x, order)):
        ordered = values[by_value]
        starts = np.r_[0, np.flatnonzero(np.diff(ordered) != 0) + 1]
        ends = np.r_[starts[1:], len(ordered)]
        ranks[row, by_value] = np.repeat((starts + ends - 1) / 2, ends - starts)
    return ranks


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho between the rows of ``a`` and ``b`` (n, m), averaged over the rows.

    Each row's rho is the Pearson correlation of its average ranks (ties share a rank, as
    in ``scipy.stats.spearmanr``). A row that is constant in ``a`` or ``b`` has no rank
    order, hence no correlation, and is left out of the mean.

    Raises
    ------
    ValueError
        If the shapes differ or are not (n, m), or if every row is constant.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"rank_correlation takes two (n, m) arrays of one shape, got "
                         f"{a.shape} and {b.shape}")
    ra, rb = average_ranks(a), average_ranks(b)
    ra -= ra.mean(1, keepdims=True)
    rb -= rb.mean(1, keepdims=True)
    norm = np.sqrt((ra**2).sum(1) * (rb**2).sum(1))
    defined = norm > 0
    if not defined.any():
        raise ValueError("every row is constant in a or b: no rank correlation")
    return float(((ra * rb).sum(1)[defined] / norm[defined]).mean())


def high_norm_share(states: torch.Tensor, factor: float = 2.0) -> float:
    """Share of tokens whose Euclidean norm exceeds ``factor`` times the median norm.

    Darcet et al. (2024, section 2) find, in large ViTs, a few patch tokens with norms
    about ten times the others'; ``states (..., d_model)`` are counted over every leading axis.
    The median, not the mean, sets the threshold, so that the outliers do not move it.
    """
    norms = (states if states.is_floating_point() else states.float()).norm(dim=-1).flatten()
    median = norms.quantile(0.5)  # the mean of the middle two for an even count, as np.median
    return int((norms > factor * median).sum()) / norms.numel()


__all__ = ["VisionTransformer", "attention_rollout", "average_ranks", "encoder_spec", "high_norm_share",
           "occlusion_importance", "patchify", "position_similarity", "rank_correlation"]

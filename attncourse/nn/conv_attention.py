"""Self-attention inside a CNN: every position of a feature map looks at every other.

A convolution mixes a pixel with its neighbours only; to relate two things far
apart, a plain CNN stacks many layers until one unit's receptive field covers
both. A *non-local* block (Wang et al. 2018), the self-attention layer of SAGAN
(Zhang et al. 2019), relates any two positions in one step. On a feature map
x of shape (C, H, W), treated as N = H W position vectors x_1..x_N:

    q_i = W_q x_i,   k_j = W_k x_j,   v_j = W_v x_j        (1x1 convolutions)
    alpha_ij = softmax_j(q_i . k_j / sqrt(d_k))             (weights over all positions j)
    o_i = W_o sum_j alpha_ij v_j
    y_i = x_i + gamma o_i                                   (gamma learned, starts at 0)

Query, keys, values: the **query** is the projection W_q x_i of the position
being updated; the **keys** W_k x_j and the **values** W_v x_j come from every
position of the *same* map, which is what makes it self-attention.

A 1x1 convolution is the same linear map applied at every position, so it
plays the role of W^Q, W^K, W^V of the Transformer. The residual gate gamma
starts at zero, so a freshly added block is the identity and the network first
learns from local cues, then lets in the non-local ones (Zhang et al. 2019,
section 3). Wang et al. (2018) instead start the output projection W_o at
zero (section 3.3), which also makes the block the identity at first.

One difference from both papers: the course's :func:`~attncourse.functional.attention`
divides the scores by sqrt(d_k), as the Transformer does; the papers do not.
It only rescales the scores (the same as rescaling W_q), and keeps the
softmax from saturating when d_k is large.

:class:`PlainCNN` and :class:`AttentionCNN` are two small classifiers of about
the same size, identical except for one block: a 3x3 convolution in the first,
a :class:`SelfAttention2d` in the second. On
:func:`~attncourse.data.canvases.digit_relation_task` the two digits are
farther apart than the plain CNN's receptive field, which :func:`receptive_field`
computes from the kernel sizes and strides of its layers.

References
----------
Wang, Girshick, Gupta, He (2018), "Non-local Neural Networks", CVPR, sections 3.1-3.3
(equation (1), the embedded Gaussian, and the residual non-local block, eq. (6)).
Zhang, Goodfellow, Metaxas, Odena (2019), "Self-Attention Generative Adversarial
Networks", ICML, section 3 (1x1 convolutions f, g, h, v and y = gamma o + x).
Vaswani et al. (2017), section 3.2.1 (scaled dot-product attention).
Araujo, Norris, Sim (2019), "Computing Receptive Fields of Convolutional Neural
Networks", Distill (single-path networks: the receptive field size).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import nn

from attncourse.functional.torch_attention import attention
from attncourse.functional.validation import validate_positive_ints
from attncourse.nn.pooling import MaxPool2d


def receptive_field(layers: Sequence[tuple[int, int]]) -> int:
    """Side, in input pixels, of the window that one unit of the last layer sees.

    Walk the layers from the input. A unit of layer l covers k_l neighbouring
    units of layer l - 1, and neighbouring units of layer l - 1 lie ``jump``
    input pixels apart, the product of the strides below it. So each layer
    widens the window by (k_l - 1) * jump::

        r = 1, jump = 1
        for each layer (k, s):  r = r + (k - 1) * jump;  jump = jump * s

    which is r_0 = 1 + sum_l (k_l - 1) prod_{i<l} s_i. The stride of the last
    layer does not widen its own units' window, only those of layers above it.

    Parameters
    ----------
    layers : sequence of (kernel_size, stride) pairs
        The spatial layers in order from the input, positive ints: a 3x3
        convolution with stride 1 is ``(3, 1)``, a 2x2 max pooling with
        stride 2 is ``(2, 2)``. Layers that act on each position alone (ReLU,
        a 1x1 convolution with stride 1) are ``(1, 1)`` and may be left out.
        Padding does not change the window's size; a dilated kernel counts as
        its span, dilation * (k - 1) + 1.

    Returns
    -------
    int
        r, the side of the square window in input pixels (the same along the
        height and the width for square kernels and strides). Near the border
        part of the window may fall on padding.

    Raises
    ------
    ValueError
        If ``layers`` is empty, an entry is not a (kernel_size, stride) pair,
        or a size is not a positive int; the message names the layer.

    References
    ----------
    Araujo, Norris, Sim (2019), "Computing Receptive Fields of Convolutional
    Neural Networks", Distill, section "Single-path networks" (the closed form
    of the receptive field size r_0).

    Examples
    --------
    >>> receptive_field([(3, 1), (3, 1)])  # two 3x3 convolutions see 5x5
    5
    >>> receptive_field([(3, 1), (2, 2), (3, 1), (2, 2), (3, 1)])  # PlainCNN
    18
    """
    layers = list(layers)
    if not layers:
        raise ValueError("layers is empty: give at least one (kernel_size, stride) pair, e.g. [(3, 1)]")
    r, jump = 1, 1
    for index, layer in enumerate(layers):
        try:
            kernel_size, stride = layer
        except (TypeError, ValueError):
            raise ValueError(f"layer {index} must be a (kernel_size, stride) pair, got {layer!r}") from None
        for name, value in (("kernel_size", kernel_size), ("stride", stride)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(
                    f"layer {index} {(kernel_size, stride)!r}: {name} must be a positive int, got {value!r}"
                )
        r += (int(kernel_size) - 1) * jump
        jump *= int(stride)
    return r


class SelfAttention2d(nn.Module):
    """Self-attention among all H W positions of a feature map, with a zero-initialised gate.

    Parameters
    ----------
    channels : int
        C, channels of the input and of the output.
    key_channels : int, optional
        d_k, width of queries and keys; default ``max(1, channels // 8)``, the
        reduction SAGAN uses.
    value_channels : int, optional
        d_v, width of the values; default ``channels``.
    gamma_init : float
        Starting value of the gate gamma. 0 (the default, as in both papers)
        makes a new block the identity. A block that must learn a relation
        no local feature predicts can stall there: while gamma = 0 nothing
        behind it gets a gradient, and gamma's own gradient averages to
        nothing until the block reads something useful.

    Attributes
    ----------
    w_q, w_k : Conv2d (channels -> key_channels, 1x1)
        Query and key projections.
    w_v : Conv2d (channels -> value_channels, 1x1)
        Value projection.
    w_o : Conv2d (value_channels -> channels, 1x1)
        Output projection (W_z of Wang et al., v of Zhang et al.).
    gamma : Parameter (1,)
        The residual gate, initialised to ``gamma_init`` (0 by default): y =
        x + gamma o, so at gamma = 0 the block returns its input exactly.

    Raises
    ------
    ValueError
        If a size is not positive.

    References
    ----------
    Wang et al. (2018), section 3; Zhang et al. (2019), section 3.
    """

    def __init__(
        self, channels: int, key_channels: int | None = None, value_channels: int | None = None,
        gamma_init: float = 0.0,
    ) -> None:
        super().__init__()
        key_channels = max(1, channels // 8) if key_channels is None else key_channels
        value_channels = channels if value_channels is None else value_channels
        validate_positive_ints(channels=channels, key_channels=key_channels, value_channels=value_channels)
        self.channels, self.key_channels, self.value_channels = int(channels), int(key_channels), int(value_channels)
        self.w_q = nn.Conv2d(self.channels, self.key_channels, 1)
        self.w_k = nn.Conv2d(self.channels, self.key_channels, 1)
        self.w_v = nn.Conv2d(self.channels, self.value_channels, 1)
        self.w_o = nn.Conv2d(self.value_channels, self.channels, 1)
        self.gamma = nn.Parameter(torch.full((1,), float(gamma_init)))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, key_channels={self.key_channels}, value_channels={self.value_channels}"

    def _check(self, x: torch.Tensor) -> None:
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(
                f"x must be (batch, channels={self.channels}, height, width), got {tuple(x.shape)}"
            )

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        """y = x + gamma o, o the attention output at every position.

        Parameters
        ----------
        x : (batch, channels, height, width)
        return_weights : bool
            Also return the attention weights.

        Returns
        -------
        y : (batch, channels, height, width)
            Equal to ``x`` exactly while ``gamma == 0``.
        weights : (batch, height * width, height * width), only if ``return_weights``
            ``weights[b, i, j]`` = alpha_ij, how much query position i reads key
            position j; positions are flattened row by row (``i = row * width + col``);
            every row sums to 1.

        Raises
        ------
        ValueError
            If ``x`` is not 4-D with ``channels`` channels; the message names the shape.
        """
        self._check(x)
        batch, _, height, width = x.shape
        # (batch, C', H, W) -> (batch, H W, C'): one row per position, the layout attention() expects.
        q = self.w_q(x).flatten(2).transpose(1, 2)
        k = self.w_k(x).flatten(2).transpose(1, 2)
        v = self.w_v(x).flatten(2).transpose(1, 2)
        read, weights = attention(q, k, v)  # (batch, H W, d_v), (batch, H W, H W)
        o = self.w_o(read.transpose(1, 2).reshape(batch, self.value_channels, height, width))
        y = x + self.gamma * o
        return (y, weights) if return_weights else y

    def attention_map(self, x: torch.Tensor, query_position: tuple[int, int]) -> torch.Tensor:
        """Where one position looks: its row of the weights, as an image.

        Parameters
        ----------
        x : (batch, channels, height, width)
        query_position : (row, col)
            The query position, 0-based.

        Returns
        -------
        (batch, height, width)
            alpha_{i, j} for the query i = ``row * width + col`` and every key
            position j; sums to 1 over the map.

        Raises
        ------
        ValueError
            If ``x`` has the wrong shape or the position is outside the map.
        """
        self._check(x)
        height, width = x.shape[2], x.shape[3]
        row, col = query_position
        if not (0 <= row < height and 0 <= col < width):
            raise ValueError(f"query_position {query_position} is outside the (height, width) = {(height, width)} map")
        _, weights = self.forward(x, return_weights=True)
        return weights[:, row * width + col].reshape(-1, height, width)


def conv_stem(in_channels: int, channels: int) -> list[nn.Module]:
    """The classifiers' stem: two blocks of [3x3 convolution, ReLU, 2x2 max pooling].

    An image ``(batch, in_channels, H, W)`` becomes ``(batch, channels, H/4, W/4)`` once the
    layers are chained (``nn.Sequential(*conv_stem(...))``); the relation recipe
    pretrains one and shares it between the two classifiers.
    """
    return [
        nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU(), MaxPool2d(2),
        nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), MaxPool2d(2),
    ]


class _Classifier(nn.Module):
    """Shared layout: stem, a mixing block, 1x1 convolution + ReLU, global average pooling, linear."""

    def __init__(self, mixer: nn.Module, in_channels: int, channels: int, num_classes: int) -> None:
        super().__init__()
        self.in_channels, self.channels, self.num_classes = in_channels, channels, num_classes
        self.stem = nn.Sequential(*conv_stem(in_channels, channels))
        self.mixer = mixer
        self.head = nn.Sequential(nn.Conv2d(channels, channels, 1), nn.ReLU())
        self.classifier = nn.Linear(channels, num_classes)

    def validate_images(self, images: torch.Tensor) -> None:
        """Raise ``ValueError`` unless ``images`` is (batch, in_channels, height >= 4, width >= 4)."""
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"images must be (batch, channels={self.in_channels}, height, width), got {tuple(images.shape)}"
            )
        if images.shape[2] < 4 or images.shape[3] < 4:
            raise ValueError(f"images {tuple(images.shape)} are too small: two pooling blocks need "
                             "height and width >= 4")

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """The feature map after the mixing block, (batch, channels, height // 4, width // 4)."""
        self.validate_images(images)
        return self.mixer(self.stem(images))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class scores.

        Parameters
        ----------
        images : (batch, in_channels, height, width), height and width >= 4

        Returns
        -------
        logits : (batch, num_classes)

        Raises
        ------
        ValueError
            If the images have the wrong channel count or are smaller than 4x4.
        """
        pooled = self.head(self.features(images)).mean(dim=(2, 3))  # global average pooling
        return self.classifier(pooled)


class PlainCNN(_Classifier):
    """A small CNN whose mixing block is a 3x3 convolution: local mixing only.

    Layout: conv3x3-ReLU-pool, conv3x3-ReLU-pool, **conv3x3-ReLU**, conv1x1-ReLU,
    global average pooling, linear. Each output unit before the pooling sees
    a window of ``receptive_field = 18`` pixels (3, then 4 after the first
    pooling, 8, 10, 18: :func:`receptive_field` of ``spatial_layers``). The
    only path between two digits farther apart than that is the final
    average, which adds up what each digit's neighbourhood detected separately.

    Parameters
    ----------
    num_classes : int
    channels : int
        Width of every hidden layer. The default 32 gives about as many
        parameters as ``AttentionCNN()`` (40 channels).
    in_channels : int

    Raises
    ------
    ValueError
        If a size is not positive.
    """

    #: (kernel_size, stride) of the layers that widen the window, from the input:
    #: conv3x3, pool 2x2, conv3x3, pool 2x2, conv3x3 (ReLUs and the 1x1 head do not).
    spatial_layers: tuple[tuple[int, int], ...] = ((3, 1), (2, 2), (3, 1), (2, 2), (3, 1))
    #: Side, in pixels, of the input window each unit of the last feature map sees: 18.
    # On the right is the module's function: the class attribute is not bound yet when it runs.
    receptive_field: int = receptive_field(spatial_layers)

    def __init__(self, num_classes: int = 2, channels: int = 32, in_channels: int = 1) -> None:
        validate_positive_ints(num_classes=num_classes, channels=channels, in_channels=in_channels)
        mixer = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU())
        super().__init__(mixer, int(in_channels), int(channels), int(num_classes))


class AttentionCNN(_Classifier):
    """The same CNN with a :class:`SelfAttention2d` block where :class:`PlainCNN` has its third convolution.

    Layout: conv3x3-ReLU-pool, conv3x3-ReLU-pool, **SelfAttention2d**,
    conv1x1-ReLU, global average pooling, linear. After the attention block
    every position has read from every other, so the 1x1 convolution can
    compare what is *here* with what was read from *there* before anything is
    averaged away.

    Parameters
    ----------
    num_classes : int
    channels : int
        Width of every hidden layer; the default 40 matches ``PlainCNN()``'s
        parameter count within 10% (self-attention has fewer weights than a
        3x3 convolution of the same width).
    key_channels : int, optional
        d_k of the attention block (default ``channels // 8``).
    in_channels : int
    gamma_init : float
        Starting gate of the attention block (see :class:`SelfAttention2d`).

    Attributes
    ----------
    attention : SelfAttention2d
        The mixing block (also reachable as ``mixer``).

    Raises
    ------
    ValueError
        If a size is not positive.
    """

    def __init__(
        self, num_classes: int = 2, channels: int = 40, key_channels: int | None = None, in_channels: int = 1,
        gamma_init: float = 0.0,
    ) -> None:
        validate_positive_ints(num_classes=num_classes, channels=channels, in_channels=in_channels)
        block = SelfAttention2d(int(channels), key_channels, gamma_init=gamma_init)
        super().__init__(block, int(in_channels), int(channels), int(num_classes))
        self.attention = block

    def attention_map(self, images: torch.Tensor, query_position: tuple[int, int]) -> torch.Tensor:
        """Where one grid position looks, (batch, height // 4, width // 4).

        See :meth:`SelfAttention2d.attention_map`.
        """
        self.validate_images(images)
        return self.attention.attention_map(self.stem(images), query_position)

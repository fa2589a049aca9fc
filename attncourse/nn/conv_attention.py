"""Self-attention inside a CNN: every position of a feature map looks at every other.

Source: Wang et al. (2018), "Non-local Neural Networks", sections 3.1-3.3; Zhang et al.
(2019), "Self-Attention Generative Adversarial Networks", section 3.
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
    """Side, in input pixels, of what one unit of the last layer sees.

    ``layers`` is a sequence of (kernel_size, stride) pairs. Raises ``ValueError`` for
    an empty sequence, a malformed pair or a non-positive size. Source: Araujo et al.
    (2019), "Computing Receptive Fields of Convolutional Neural Networks", Distill.
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
    """Self-attention among all H W positions of a feature map, y = x + gamma o.

    Raises ``ValueError`` if a size is not positive. Source: Zhang et al. (2019),
    section 3.
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
        """y = x + gamma o: (batch, channels, height, width) -> the same shape.

        Also returns the weights (batch, height * width, height * width) if
        ``return_weights``. Raises ``ValueError`` if ``x`` is not 4-D with ``channels``
        channels.
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
        """Where position (row, col) looks: its weights, (batch, height, width).

        Raises ``ValueError`` for a wrong shape or a position outside the map.
        """
        self._check(x)
        height, width = x.shape[2], x.shape[3]
        row, col = query_position
        if not (0 <= row < height and 0 <= col < width):
            raise ValueError(f"query_position {query_position} is outside the (height, width) = {(height, width)} map")
        _, weights = self.forward(x, return_weights=True)
        return weights[:, row * width + col].reshape(-1, height, width)


def conv_stem(in_channels: int, channels: int) -> list[nn.Module]:
    """Two blocks of [3x3 convolution, ReLU, 2x2 max pooling]."""
    return [
        nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU(), MaxPool2d(2),
        nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), MaxPool2d(2),
    ]


class _Classifier(nn.Module):
    """Stem, mixing block, 1x1 convolution + ReLU, global average pooling, linear."""

    def __init__(self, mixer: nn.Module, in_channels: int, channels: int, num_classes: int) -> None:
        super().__init__()
        self.in_channels, self.channels, self.num_classes = in_channels, channels, num_classes
        self.stem = nn.Sequential(*conv_stem(in_channels, channels))
        self.mixer = mixer
        self.head = nn.Sequential(nn.Conv2d(channels, channels, 1), nn.ReLU())
        self.classifier = nn.Linear(channels, num_classes)

    def validate_images(self, images: torch.Tensor) -> None:
        """Raise ``ValueError`` unless ``images`` is (batch, in_channels, >=4, >=4)."""
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"images must be (batch, channels={self.in_channels}, height, width), got {tuple(images.shape)}"
            )
        if images.shape[2] < 4 or images.shape[3] < 4:
            raise ValueError(f"images {tuple(images.shape)} are too small: two pooling blocks need "
                             "height and width >= 4")

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Feature map after the mixing block, (batch, channels, H // 4, W // 4)."""
        self.validate_images(images)
        return self.mixer(self.stem(images))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (batch, num_classes) of ``images`` (batch, in_channels, H, W).

        Raises ``ValueError`` for a wrong channel count or images smaller than 4x4.
        """
        pooled = self.head(self.features(images)).mean(dim=(2, 3))  # global average pooling
        return self.classifier(pooled)


class PlainCNN(_Classifier):
    """The classifier with a 3x3 convolution as mixing block.

    Raises ``ValueError`` if a size is not positive.
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
    """The classifier with :class:`SelfAttention2d` as mixing block.

    Raises ``ValueError`` if a size is not positive.
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
        """Where one grid position looks, (batch, height // 4, width // 4)."""
        self.validate_images(images)
        return self.attention.attention_map(self.stem(images), query_position)

"""Max pooling for the course's small CNNs, computed where PyTorch's CPU kernels are fast.

On a CPU, PyTorch's forward kernel of max pooling is several times slower on
contiguous ``(batch, channels, height, width)`` tensors than on channels-last ones,
and its backward kernel the other way round. For chapter 3b's first block,
``(50, 16, 16, 48)`` on one thread, forward and backward took 3.7 ms with
``nn.MaxPool2d`` and 1.5 ms with :class:`MaxPool2d` (``benchmarks/max_pool_layout.py``);
pooling was the largest single operation in training chapter 3b's captioners.
:class:`MaxPool2d` takes the forward pass in channels-last memory and the backward
pass in contiguous memory, each with PyTorch's own kernel. Its output is contiguous,
so the next convolution reads the same layout as after ``nn.MaxPool2d`` and computes
the same numbers: the maximum is exact, and the gradient goes to the same element of
each window (the first maximum in the window's row-major order, the indices being the
same in both layouts), so a training run is bit-identical to one with ``nn.MaxPool2d``
(``tests/test_pooling.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules.utils import _pair


class _ChannelsLastForward(torch.autograd.Function):
    """Max pooling: forward on a channels-last copy, backward on the contiguous input."""

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, dilation, ceil_mode):
        out, indices = F.max_pool2d(x.contiguous(memory_format=torch.channels_last), kernel_size, stride,
                                    padding, dilation, ceil_mode, return_indices=True)
        ctx.save_for_backward(x, indices)
        ctx.options = (kernel_size, stride, padding, dilation, ceil_mode)
        return out.contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, indices = ctx.saved_tensors
        grad = torch.ops.aten.max_pool2d_with_indices_backward(
            grad_out.contiguous(), x.contiguous(), *ctx.options, indices.contiguous())
        return grad, None, None, None, None, None


class MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` with PyTorch's faster CPU kernel for each pass.

    Same arguments, same output and gradients as :class:`torch.nn.MaxPool2d`;
    input ``(batch, channels, height, width)``, output
    ``(batch, channels, height_out, width_out)``, contiguous. On other devices,
    for unbatched input, with ``return_indices=True`` and inside ``torch.func``
    transforms it is ``nn.MaxPool2d`` unchanged; no second derivative. No parameters, so state dicts are the same.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Under torch.func transforms (vmap, grad; benchmarks/ensemble_vmap.py) a channels-last
        # copy of a batched tensor is not implemented: torch's own layer runs there.
        if (x.device.type != "cpu" or x.dim() != 4 or self.return_indices
                or torch._C._are_functorch_transforms_active()):
            return super().forward(x)
        stride = self.stride if self.stride is not None else self.kernel_size
        return _ChannelsLastForward.apply(x, _pair(self.kernel_size), _pair(stride), _pair(self.padding),
                                          _pair(self.dilation), self.ceil_mode)

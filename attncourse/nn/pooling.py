"""Max pooling for the course's small CNNs, on PyTorch's fast CPU kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules.utils import _pair


class _ChannelsLastForward(torch.autograd.Function):
    """Forward on a channels-last copy, backward on the contiguous input."""

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
    """``nn.MaxPool2d`` with PyTorch's faster CPU kernel for each pass."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Under torch.func transforms (vmap, grad; benchmarks/ensemble_vmap.py) a channels-last
        # copy of a batched tensor is not implemented: torch's own layer runs there.
        if (x.device.type != "cpu" or x.dim() != 4 or self.return_indices
                or torch._C._are_functorch_transforms_active()):
            return super().forward(x)
        stride = self.stride if self.stride is not None else self.kernel_size
        return _ChannelsLastForward.apply(x, _pair(self.kernel_size), _pair(stride), _pair(self.padding),
                                          _pair(self.dilation), self.ceil_mode)

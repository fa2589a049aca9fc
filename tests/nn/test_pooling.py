"""attncourse.nn.pooling.MaxPool2d against torch.nn.MaxPool2d: the same numbers, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attncourse.nn.pooling import MaxPool2d


@pytest.mark.parametrize("options", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                     dict(kernel_size=2, ceil_mode=True), dict(kernel_size=(2, 3))])
@pytest.mark.parametrize("relu", [False, True])
def test_output_and_gradient_equal_torch_max_pool(options, relu):
    torch.manual_seed(0)
    x = torch.randn(4, 5, 9, 14)
    if relu:  # a ReLU's output, as in the course's CNNs: whole windows of tied zeros
        x = torch.relu(x)
    # rounded values: ties between positive entries of a window too
    x = (x * 4).round().requires_grad_()
    ours, reference = MaxPool2d(**options), nn.MaxPool2d(**options)
    out = ours(x)
    grad_out = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, grad_out)
    expected = reference(x)
    (expected_grad,) = torch.autograd.grad(expected, x, grad_out)
    assert out.is_contiguous() and out.shape == expected.shape
    assert torch.equal(out, expected) and torch.equal(grad, expected_grad)


def test_returns_indices_and_unbatched_input_as_torch_does():
    x = torch.randn(3, 6, 8)  # (channels, height, width): torch's own path
    out, indices = MaxPool2d(2, return_indices=True)(x.unsqueeze(0))
    expected, expected_indices = nn.MaxPool2d(2, return_indices=True)(x.unsqueeze(0))
    assert torch.equal(out, expected) and torch.equal(indices, expected_indices)
    assert torch.equal(MaxPool2d(2)(x), nn.MaxPool2d(2)(x))


def test_is_a_max_pool_without_state():
    layer = MaxPool2d(2)
    assert isinstance(layer, nn.MaxPool2d) and layer.state_dict() == {}
    assert repr(layer) == repr(nn.MaxPool2d(2))


def test_torch_func_transforms_run_through_it():
    """vmap over grad, as benchmarks/ensemble_vmap.py trains K captioners at once."""
    x = torch.relu(torch.randn(3, 2, 4, 6, 8))

    def loss(layer, image):
        return layer(image).square().sum()

    ours = torch.func.vmap(torch.func.grad(lambda image: loss(MaxPool2d(2), image)))(x)
    expected = torch.func.vmap(torch.func.grad(lambda image: loss(nn.MaxPool2d(2), image)))(x)
    assert torch.equal(ours, expected)

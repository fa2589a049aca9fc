"""Self-attention over the positions of a feature map, and the two relation classifiers."""

import pytest
import torch
from torch import nn

from attncourse.nn.conv_attention import (
    AttentionCNN,
    PlainCNN,
    SelfAttention2d,
    receptive_field,
)
from attncourse.nn.rnn import count_parameters


def _block(channels=8, gamma=0.0, seed=0, **kwargs):
    torch.manual_seed(seed)
    block = SelfAttention2d(channels, **kwargs)
    with torch.no_grad():
        block.gamma.fill_(gamma)
    return block


def test_shapes_and_weights_sum_to_one():
    x = torch.randn(2, 8, 3, 5)
    y, weights = _block(gamma=0.7)(x, return_weights=True)
    assert y.shape == x.shape
    assert weights.shape == (2, 15, 15)
    assert (weights >= 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(2, 15), atol=1e-6)


def test_default_widths():
    block = SelfAttention2d(16)
    assert (block.key_channels, block.value_channels) == (2, 16)
    assert block.gamma.item() == 0.0
    assert AttentionCNN(gamma_init=0.5).attention.gamma.item() == 0.5


def test_zero_gamma_returns_input_exactly():
    x = torch.randn(2, 8, 4, 4)
    block = SelfAttention2d(8)
    assert torch.equal(block(x), x)


def test_matches_hand_written_attention():
    x = torch.randn(2, 8, 3, 4)
    block = _block(gamma=0.5, key_channels=3, value_channels=5)

    def project(conv, x):
        return torch.einsum("oc,bcn->bno", conv.weight[:, :, 0, 0], x.flatten(2)) + conv.bias

    q, k, v = project(block.w_q, x), project(block.w_k, x), project(block.w_v, x)  # (batch, N, d)
    alpha = torch.softmax(q @ k.transpose(1, 2) / 3**0.5, dim=-1)
    o = project(block.w_o, (alpha @ v).transpose(1, 2))  # (batch, N, channels)
    expected = x + 0.5 * o.transpose(1, 2).reshape(x.shape)
    assert torch.allclose(block(x), expected, atol=1e-5)


def test_permuting_positions_permutes_the_output():
    # No positional information: a mirrored map gives the mirrored output.
    x = torch.randn(1, 8, 3, 6)
    block = _block(gamma=1.0)
    assert torch.allclose(block(x.flip(-1)), block(x).flip(-1), atol=1e-5)


def test_attention_map_is_a_row_of_the_weights():
    x = torch.randn(2, 8, 3, 5)
    block = _block(gamma=0.3)
    _, weights = block(x, return_weights=True)
    heat = block.attention_map(x, (1, 2))
    assert heat.shape == (2, 3, 5)
    assert torch.allclose(heat.reshape(2, -1), weights[:, 1 * 5 + 2])
    assert torch.allclose(heat.sum((1, 2)), torch.ones(2), atol=1e-6)
    with pytest.raises(ValueError, match=r"\(3, 5\)"):
        block.attention_map(x, (3, 0))


def test_bad_channel_count_names_shapes():
    with pytest.raises(ValueError, match=r"channels=8.*\(2, 4, 3, 3\)"):
        SelfAttention2d(8)(torch.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="channels"):
        SelfAttention2d(0)


def test_classifiers_have_about_the_same_size_and_shapes():
    plain, attn = PlainCNN(), AttentionCNN()
    n_plain, n_attn = count_parameters(plain), count_parameters(attn)
    assert abs(n_plain - n_attn) / n_plain < 0.10
    x = torch.rand(3, 1, 16, 48)
    assert plain(x).shape == attn(x).shape == (3, 2)
    assert attn.attention_map(x, (0, 0)).shape == (3, 4, 12)


def _input_columns_seen(model, row, col):
    x = torch.rand(1, 1, 16, 48, requires_grad=True)
    model.features(x)[0, :, row, col].sum().backward()
    seen = x.grad[0, 0].abs().sum(0).nonzero().flatten()
    return int(seen.max() - seen.min() + 1)


def test_plain_cnn_sees_a_local_window_and_attention_sees_everything():
    torch.manual_seed(0)
    assert _input_columns_seen(PlainCNN(), 2, 6) <= PlainCNN.receptive_field
    attn = AttentionCNN()
    with torch.no_grad():
        attn.attention.gamma.fill_(1.0)
    assert _input_columns_seen(attn, 2, 6) == 48


def test_classifier_bad_inputs():
    with pytest.raises(ValueError, match=r"channels=1.*\(2, 3, 16, 48\)"):
        PlainCNN()(torch.rand(2, 3, 16, 48))
    with pytest.raises(ValueError, match=r"\(2, 1, 2, 48\) are too small"):
        AttentionCNN()(torch.rand(2, 1, 2, 48))


# ------------------------------------------------------------------ receptive field


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ([(3, 1)], 3),
        ([(3, 1), (3, 1)], 5),
        ([(3, 1), (2, 2)], 4),  # the last layer's stride widens nothing
        ([(2, 2), (3, 1)], 6),  # 2, then the 3x3 kernel's taps are 2 pixels apart: 2 + 2 * 2
        ([(3, 1), (2, 2), (3, 1), (2, 2), (3, 1)], 18),  # PlainCNN, as its docstring counts: 3, 4, 8, 10, 18
        ([(7, 2), (3, 2), (3, 1)], 19),  # 7, 7 + 2 * 2, 11 + 2 * 4
        ([(1, 1)], 1),
        ([(1, 2), (1, 2), (3, 1)], 9),  # 1x1 subsampling: taps 4 pixels apart
        # The values usually quoted for two classic networks: AlexNet up to its last pooling,
        # VGG-16 up to conv5_3 and up to pool5.
        ([(11, 4), (3, 2), (5, 1), (3, 2), (3, 1), (3, 1), (3, 1), (3, 2)], 195),
        ([(3, 1)] * 2 + [(2, 2)] + [(3, 1)] * 2 + [(2, 2)] + ([(3, 1)] * 3 + [(2, 2)]) * 2 + [(3, 1)] * 3, 196),
        ([(3, 1)] * 2 + [(2, 2)] + [(3, 1)] * 2 + [(2, 2)] + ([(3, 1)] * 3 + [(2, 2)]) * 3, 212),
    ],
)
def test_receptive_field_hand_computed(layers, expected):
    assert receptive_field(layers) == expected
    assert type(receptive_field(layers)) is int


def _geometry(modules):
    """(kernel_size, stride) of each Conv2d / MaxPool2d, square ones only, in order."""
    out = []
    for module in modules:
        if isinstance(module, (nn.Conv2d, nn.MaxPool2d)):
            k, s = (v if isinstance(v, tuple) else (v, v) for v in (module.kernel_size, module.stride))
            assert k[0] == k[1] and s[0] == s[1]
            out.append((k[0], s[0]))
    return out


def _measured_span(stack, size):
    """Rows and columns of the input that reach one central output unit, through gradients.

    Max pooling passes the gradient to one input per window only, so a batch of
    random inputs is used and the pixels reached by any of them are counted.
    """
    torch.manual_seed(0)
    x = torch.randn(64, 1, size, size, requires_grad=True)
    out = stack(x)
    centre_row, centre_col = out.shape[2] // 2, out.shape[3] // 2
    out[:, :, centre_row, centre_col].sum().backward()
    reached = x.grad.abs().sum(dim=(0, 1)) > 0
    rows = reached.any(dim=1).nonzero().flatten()
    cols = reached.any(dim=0).nonzero().flatten()
    assert 0 < rows.min() and rows.max() < size - 1, "the window must not touch the border"
    return int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)


@pytest.mark.parametrize(
    "build",
    [
        lambda: [nn.Conv2d(1, 2, 3)],
        lambda: [nn.Conv2d(1, 2, 3), nn.MaxPool2d(2)],
        lambda: [nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(2, 2, 3, padding=1),
                 nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(2, 2, 3, padding=1)],
        lambda: [nn.Conv2d(1, 2, 5, stride=2), nn.Conv2d(2, 2, 3, stride=2), nn.Conv2d(2, 1, 3)],
        lambda: [nn.Conv2d(1, 2, 2), nn.MaxPool2d(3, stride=2), nn.Conv2d(2, 2, 3)],
        lambda: [nn.Conv2d(1, 2, 3), nn.Conv2d(2, 2, 1, stride=2), nn.Conv2d(2, 2, 3), nn.MaxPool2d(2)],
    ],
    ids=["conv3", "conv3-pool2", "plain-cnn", "strided-convs", "conv2-pool3s2-conv3", "1x1-stride-2"],
)
def test_receptive_field_equals_the_span_of_the_input_gradient(build):
    modules = build()
    torch.manual_seed(1)
    stack = nn.Sequential(*modules)
    expected = receptive_field(_geometry(modules))
    assert _measured_span(stack, 40) == (expected, expected)


def test_plain_cnn_receptive_field_comes_from_its_own_layers():
    model = PlainCNN()
    assert _geometry([*model.stem, *model.mixer]) == list(PlainCNN.spatial_layers)
    assert PlainCNN.receptive_field == receptive_field(PlainCNN.spatial_layers) == 18


@pytest.mark.parametrize(
    ("layers", "match"),
    [
        ([], "empty"),
        ([(3, 1), (0, 1)], r"layer 1 \(0, 1\): kernel_size must be a positive int, got 0"),
        ([(3, -2)], "stride must be a positive int, got -2"),
        ([(3, 0)], "stride must be a positive int, got 0"),
        ([(2.5, 1)], "kernel_size must be a positive int, got 2.5"),
        ([(3,)], r"layer 0 must be a \(kernel_size, stride\) pair, got \(3,\)"),
        ([3], "pair, got 3"),
    ],
)
def test_receptive_field_errors(layers, match):
    with pytest.raises(ValueError, match=match):
        receptive_field(layers)

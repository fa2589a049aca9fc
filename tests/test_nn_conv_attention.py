"""Self-attention over the positions of a feature map, and the two relation classifiers."""

import pytest
import torch

from attncourse.nn.conv_attention import AttentionCNN, PlainCNN, SelfAttention2d
from attncourse.nn.rnn import count_parameters


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


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

"""The RoPE-scaling explorer: its states, its cache of losses, its book rendering, its errors."""

import numpy as np
import pytest
import torch

from attncourse.chapters.ch12_long_context.explorer import RopeScalingExplorer, smooth
from attncourse.nn.gpt import GPT
from attncourse.nn.rope import RopeScaling


def make(**kwargs):
    torch.manual_seed(0)
    model = GPT(20, d_model=16, num_heads=2, num_layers=1, positional="rope").eval()
    calls = []

    def score(m):  # a stand-in for the held-out loss: reads the model's frequencies
        calls.append(m)
        theta = m.blocks[0].attn.rope_scaling
        return np.full(32, 1.0 if theta is None else theta.factor)

    return RopeScalingExplorer(model, score, original_len=8, eval_len=32, factors=(1.0, 2.0, 4.0), **kwargs), calls


def test_states_show_the_scaled_frequencies_and_the_loss():
    explorer, calls = make()
    assert explorer.shown["method"] == "yarn" and explorer.shown["factor"] == 4.0
    np.testing.assert_allclose(explorer.shown["scaled_theta"], RopeScaling("yarn", 4.0, 8).frequencies(8).numpy())
    assert explorer.shown["far_bits"] == 4.0 and explorer.shown["unscaled_far_bits"] == 1.0
    explorer.method.value = "pi"
    np.testing.assert_allclose(explorer.shown["scaled_theta"], explorer.shown["theta"] / 4)
    n = len(calls)
    explorer.method.value = "yarn"  # cached: no new scoring
    assert len(calls) == n


def test_factor_one_is_the_unscaled_model_for_every_method():
    explorer, calls = make()
    explorer.factor.value = 1.0
    for method in ("pi", "ntk", "yarn"):
        explorer.method.value = method
        np.testing.assert_allclose(explorer.shown["scaled_theta"], explorer.shown["theta"])
        assert explorer.shown["far_bits"] == 1.0


def test_the_book_has_every_method_at_every_factor():
    explorer, _ = make()
    html = explorer.to_html()
    assert "RoPE scaling explorer" in html and html.count("data:image/png") >= 3
    assert "9 states" in html


@pytest.mark.parametrize(("changes", "match"), [
    ({"factors": (0.5, 2.0)}, ">= 1"),
    ({"eval_len": 8}, "eval_len"),
])
def test_bad_arguments_are_refused(changes, match):
    model = GPT(20, d_model=16, num_heads=2, num_layers=1)
    args = {"original_len": 8, "eval_len": 32, "factors": (1.0, 2.0), **changes}
    with pytest.raises(ValueError, match=match):
        RopeScalingExplorer(model, lambda m: np.zeros(32), **args)
    with pytest.raises(ValueError, match="unscaled RoPE"):
        RopeScalingExplorer(GPT(20, d_model=16, num_heads=2, positional="alibi"), lambda m: np.zeros(32))


def test_smooth_averages_blocks():
    np.testing.assert_allclose(smooth(np.arange(10.0), 4), [1.5, 5.5, 8.5])

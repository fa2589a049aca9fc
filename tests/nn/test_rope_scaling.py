"""RoPE stretched past its training length: PI, NTK-aware and YaRN against the papers' formulas
worked by hand, in the model and in its spec (chapter 12)."""

import math

import pytest
import torch

from attncourse.nn.gpt import GPT
from attncourse.nn.rope import (
    ROPE_SCALINGS,
    RopeScaling,
    apply_rope,
    rope_frequencies,
    yarn_ramp,
)
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec

THETA = [1.0, 0.1, 0.01, 0.001]  # 10000^(-2i/8), i = 0..3: d_k = 8


def test_pi_divides_every_frequency_by_the_factor():
    # Chen et al. (2023): position m is read as m / s, i.e. theta_i / s
    expected = torch.tensor([t / 4 for t in THETA], dtype=torch.float64)
    torch.testing.assert_close(RopeScaling("pi", 4).frequencies(8), expected, rtol=1e-12, atol=0)


def test_ntk_is_a_larger_base_keeping_the_fastest_pair_and_dividing_the_slowest():
    # b' = b s^(d/(d-2)) = 10000 * 4^(4/3); theta'_i = b'^(-2i/8)
    new_base = 10000 * 4 ** (8 / 6)
    expected = torch.tensor([new_base ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    got = RopeScaling("ntk", 4).frequencies(8)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    assert got[0] == 1.0 and math.isclose(got[-1], THETA[-1] / 4, rel_tol=1e-12)


def test_yarn_ramps_by_frequency_band_as_worked_by_hand():
    # L = 64: r_i = 64 theta_i / (2 pi) = 10.19, 1.019, 0.102, 0.0102; gamma = (r - 1) / 31 in [0, 1]
    expected = []
    for theta in THETA:
        r = 64 * theta / (2 * math.pi)
        gamma = min(max((r - 1) / 31, 0.0), 1.0)
        expected.append((1 - gamma) * theta / 4 + gamma * theta)
    got = RopeScaling("yarn", 4, original_len=64).frequencies(8)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0)
    assert math.isclose(got[0], 0.25 + 0.75 * (64 / (2 * math.pi) - 1) / 31, rel_tol=1e-12)  # 0.4722
    assert torch.equal(got[2:], torch.tensor(THETA[2:], dtype=torch.float64) / 4)  # interpolated as PI


def test_yarn_keeps_the_fast_pairs_when_they_turn_more_than_beta_times():
    got = RopeScaling("yarn", 8, original_len=4096).frequencies(64)
    theta = rope_frequencies(64)
    r = 4096 * theta / (2 * math.pi)
    assert torch.equal(got[r > 32], theta[r > 32]) and torch.equal(got[r < 1], theta[r < 1] / 8)


def test_yarn_ramp_and_temperature():
    torch.testing.assert_close(yarn_ramp(torch.tensor([0.0, 1.0, 16.5, 32.0, 50.0])),
                               torch.tensor([0.0, 0.0, 0.5, 1.0, 1.0]))
    assert math.isclose(RopeScaling("yarn", 4, 64).attention_factor, 0.1 * math.log(4) + 1)
    assert RopeScaling("pi", 4).attention_factor == RopeScaling("ntk", 4).attention_factor == 1.0


@pytest.mark.parametrize("method", ROPE_SCALINGS)
def test_factor_one_changes_nothing(method):
    torch.testing.assert_close(RopeScaling(method, 1.0, 64).frequencies(16), rope_frequencies(16))


def test_apply_rope_with_scaling_rotates_by_the_new_frequencies():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    positions = torch.tensor([0, 3, 64, 200, 511])
    torch.testing.assert_close(apply_rope(x, positions, scaling=RopeScaling("ntk", 4)),
                               apply_rope(x, positions, base=10000 * 4 ** (8 / 6)), rtol=1e-12, atol=1e-12)
    # PI at s = 4: position 4m turned as position m without scaling
    torch.testing.assert_close(apply_rope(x, positions * 4, scaling=RopeScaling("pi", 4)),
                               apply_rope(x, positions), rtol=1e-9, atol=1e-9)
    yarn = RopeScaling("yarn", 4, 64)
    out = apply_rope(x, positions, scaling=yarn)
    torch.testing.assert_close(out.norm(dim=-1), yarn.attention_factor * x.norm(dim=-1))


@pytest.mark.parametrize(("make", "match"), [
    (lambda: RopeScaling("linear", 2), "rope_scaling must be one of"),
    (lambda: RopeScaling("pi", 0.5), "rope_factor"),
    (lambda: RopeScaling("yarn", 2), "original_len"),
    (lambda: RopeScaling("yarn", 2, 64, alpha=3, beta=2), "alpha < beta"),
    (lambda: PositionSpec("alibi", rope_scaling="pi", rope_factor=2), "stretches RoPE"),
    (lambda: PositionSpec("rope", rope_factor=2), "needs rope_scaling"),
    (lambda: PositionSpec("rope", rope_scaling="yarn", rope_factor=2), "original_len"),
    (lambda: GPT(spec=DecoderSpec(10, attention=AttentionSpec("mla"),
                                  positions=PositionSpec("rope", rope_scaling="pi", rope_factor=2))),
     "does not support rope_scaling"),
])
def test_bad_scalings_are_refused_with_one_line(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_the_spec_carries_the_scaling_into_every_layer_and_back():
    positions = PositionSpec("rope", rope_scaling="yarn", rope_factor=4, original_len=64)
    model = GPT(spec=DecoderSpec(20, d_model=16, num_heads=2, positions=positions)).double()
    assert all(b.attn.rope_scaling == positions.scaling for b in model.blocks)
    again = GPT.from_config(model.config)
    assert again.spec == model.spec
    tokens = torch.randint(0, 20, (2, 9))
    caches = model.init_cache(2)
    steps = [model(tokens[:, :4], caches)[0]] + [model(tokens[:, t:t + 1], caches)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), model(tokens)[0], rtol=0, atol=1e-12)


def test_the_positions_dict_rebuilds_the_positions():
    unscaled = {"kind": "rope", "base": 10000.0, "rope_scaling": None, "rope_factor": 1.0, "original_len": None}
    assert PositionSpec("rope").to_dict() == unscaled == DecoderSpec(10).to_dict()["positions"]
    yarn = PositionSpec("rope", rope_scaling="yarn", rope_factor=4.0, original_len=64)
    assert PositionSpec(**yarn.to_dict()) == yarn


def test_nope_has_no_positions_anywhere():
    model = GPT(10, d_model=16, num_heads=2, positional="none")
    assert model.positional_encoding is None and all(b.attn.positional is None for b in model.blocks)
    # Without the causal mask it would be permutation-equivariant; with it, order matters
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert not torch.allclose(model(tokens)[0][0, -1], model(tokens.flip(1))[0][0, -1])

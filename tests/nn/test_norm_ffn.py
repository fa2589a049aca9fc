"""RMSNorm and the FFNs against torch's RMSNorm and the papers' formulas written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from attncourse.nn.ffn import FFNS, SwiGLU
from attncourse.nn.norm import NORMS, RMSNorm
from attncourse.nn.spec import FFNSpec, NormSpec
from attncourse.nn.transformer import PositionwiseFeedForward


def _x(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed)) * 3 + 0.5


def test_rmsnorm_equals_torch_and_the_formula():
    norm = RMSNorm(12, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    x = _x(2, 5, 12)
    by_hand = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5) * norm.weight  # Zhang and Sennrich, eq. (4)
    torch.testing.assert_close(norm(x), by_hand, rtol=0, atol=1e-13)
    theirs = torch.nn.RMSNorm(12, eps=1e-5).double()
    with torch.no_grad():
        theirs.weight.copy_(norm.weight)
    torch.testing.assert_close(norm(x), theirs(x), rtol=0, atol=1e-13)
    # no centring: a shifted input is not normalised like the original, unlike LayerNorm
    assert not torch.allclose(norm(x + 1.0), norm(x))
    assert [n for n, _ in norm.named_parameters()] == ["weight"]


def test_rmsnorm_normalises_half_precision_in_float32():
    norm = RMSNorm(64).half()
    x = _x(3, 64, dtype=torch.float32) * 300  # squares over float16's largest number, 65504
    expected = (x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5)).half()
    out = norm(x.half())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    torch.testing.assert_close(out, expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(("kwargs", "match"), [({"d_model": 0}, "d_model"), ({"d_model": 4, "eps": 0.0}, "eps")])
def test_rmsnorm_refuses_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RMSNorm(**kwargs)
    with pytest.raises(ValueError, match="d_model=4"):
        RMSNorm(4)(torch.zeros(2, 5))


def test_swiglu_equals_the_formula():
    ffn = SwiGLU(6, 10, bias=True).double()
    x = _x(2, 3, 6)
    gate = x @ ffn.w_gate.weight.T + ffn.w_gate.bias
    up = x @ ffn.w_up.weight.T + ffn.w_up.bias
    by_hand = (gate * torch.sigmoid(gate) * up) @ ffn.w_down.weight.T + ffn.w_down.bias  # Shazeer (2020), eq. (6)
    torch.testing.assert_close(ffn(x), by_hand, rtol=0, atol=1e-13)
    plain = SwiGLU(6, 10)
    assert sum(p.numel() for p in plain.parameters()) == 3 * 6 * 10  # no biases by default
    with pytest.raises(ValueError, match="d_ff"):
        SwiGLU(6, 0)


def test_the_gelu_ffn_equals_the_formula_and_relu_stays_the_transformers():
    x = _x(2, 3, 6)
    gelu = PositionwiseFeedForward(6, 8, "gelu").double()
    h = x @ gelu.w_1.weight.T + gelu.w_1.bias
    by_hand = (0.5 * h * (1 + torch.erf(h / math.sqrt(2)))) @ gelu.w_2.weight.T + gelu.w_2.bias
    torch.testing.assert_close(gelu(x), by_hand, rtol=0, atol=1e-13)
    relu = PositionwiseFeedForward(6, 8).double()
    by_hand = (x @ relu.w_1.weight.T + relu.w_1.bias).clamp_min(0) @ relu.w_2.weight.T + relu.w_2.bias
    torch.testing.assert_close(relu(x), by_hand, rtol=0, atol=1e-13)
    assert [n for n, _ in PositionwiseFeedForward(6, 8, bias=False).named_parameters()] == ["w_1.weight", "w_2.weight"]
    with pytest.raises(ValueError, match="activation"):
        PositionwiseFeedForward(6, 8, "tanh")


def test_the_specs_build_by_name_and_name_the_choices():
    assert set(NORMS) == {"layernorm", "rmsnorm", "none"} and set(FFNS) == {"relu", "gelu", "swiglu", "none"}
    assert isinstance(NormSpec("rmsnorm").build(8), RMSNorm)
    assert isinstance(NormSpec("none").build(8), torch.nn.Identity)
    layer_norm = NormSpec("layernorm", 1e-6).build(8)
    assert isinstance(layer_norm, torch.nn.LayerNorm) and layer_norm.eps == 1e-6
    assert FFNSpec("none", 16).build(8) is None
    swiglu = FFNSpec("swiglu", 16, bias=False).build(8)
    assert isinstance(swiglu, SwiGLU) and swiglu.w_up.bias is None
    gelu = FFNSpec("gelu", 16).build(8)
    assert gelu.activation is torch.nn.functional.gelu and gelu.w_1.bias is not None
    with pytest.raises(ValueError, match="norm must be one of"):
        NormSpec("batchnorm")
    with pytest.raises(ValueError, match="ffn must be one of"):
        FFNSpec("moe")

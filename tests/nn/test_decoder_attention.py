"""Every registered decoder attention against the one contract of nn/protocol.py's DecoderAttention.

The cases are each registered variant with its default options under every
position scheme it accepts, plus the options the chapters use (grouped and
multi-query heads, windows, ALiBi, MLA with and without its rotary part). A toy
variant is defined and registered here, in one line, as a new contributor
would add one: nothing outside this file is edited for it, and it passes the
same contract and runs inside GPT.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest
import torch
from torch import nn

from attncourse.nn.causal_attention import GQAOptions, allowed_keys, validate_call
from attncourse.nn.gpt import GPT
from attncourse.nn.memory_attention import MemoryOptions
from attncourse.nn.mla import MLAOptions
from attncourse.nn.protocol import DecoderAttention, DecoderCache
from attncourse.nn.spec import (
    ATTENTION_VARIANTS,
    AttentionSpec,
    DecoderSpec,
    PositionSpec,
    register_attention,
)
from attncourse.train.checkpoint import load_model, save_checkpoint

D_MODEL, HEADS = 16, 4


# ---- a toy variant, written as an exercise of the design -------------------------------------

@dataclass(frozen=True)
class MeanOptions:
    """Options of the toy variant: biases on its two projections."""

    bias: bool = False


@dataclass
class ValueCache:
    """The toy's cache: projected values ``(batch, cache_len, d_model)``."""

    kind = "values"

    v: torch.Tensor

    def __len__(self) -> int:
        return int(self.v.shape[1])

    def append(self, v: torch.Tensor) -> None:
        self.v = torch.cat([self.v, v], dim=1)


class MeanAttention(nn.Module, DecoderAttention):
    """Every allowed key weighs the same: the output is the mean of the allowed values."""

    def __init__(self, d_model: int, num_heads: int, causal: bool, bias: bool) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.causal = d_model, num_heads, causal
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    @classmethod
    def from_options(cls, options: MeanOptions, *, d_model, num_heads, causal, positional, rope_base):
        if positional is not None:
            raise ValueError(f"mean attention has no position scheme inside, got {positional!r}")
        return cls(d_model, num_heads, causal, options.bias)

    def empty_cache(self, batch, dtype=None, device=None) -> ValueCache:
        weight = self.w_v.weight
        return ValueCache(torch.zeros(batch, 0, self.d_model, dtype=dtype or weight.dtype,
                                      device=device or weight.device))

    def cache_numbers_per_token(self) -> int:
        return self.d_model

    def forward(self, x, mask=None, kv_cache=None, need_weights=False, fast=True, positions=None):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, seq_len, d_model={self.d_model}), got {tuple(x.shape)}")
        batch, n, _ = x.shape
        offset = 0 if kv_cache is None else len(kv_cache)
        validate_call(mask, positions, batch, self.num_heads, n, offset, x.device)
        v = self.w_v(x)
        if kv_cache is not None:
            kv_cache.append(v)
            v = kv_cache.v
        allowed = allowed_keys(n, v.shape[1], self.causal, device=x.device)
        allowed = torch.ones(n, v.shape[1], dtype=torch.bool) if allowed is None else allowed
        allowed = allowed if mask is None else allowed & mask
        weights = allowed.to(v.dtype).expand(batch, self.num_heads, n, v.shape[1])
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1)
        out = self.w_o(weights.mean(1) @ v)
        return out, (weights if need_weights else None)


register_attention("toy-mean", MeanOptions, MeanAttention.from_options)  # the one registry line


# ---- the cases --------------------------------------------------------------------------------

SCHEMES = ("learned", "rope", "alibi")  # learned: no position inside attention


def _builds(name: str, options, scheme: str) -> bool:
    try:
        AttentionSpec(name, options).build(D_MODEL, HEADS, True, PositionSpec(scheme))
    except ValueError:
        return False
    return True


CASES = [(name, None, scheme) for name in ATTENTION_VARIANTS for scheme in SCHEMES
         if _builds(name, None, scheme)] + [
    ("gqa", GQAOptions(num_kv_heads=2), "rope"),
    ("gqa", GQAOptions(num_kv_heads=1), "alibi"),
    ("gqa", GQAOptions(num_kv_heads=2, window=3), "rope"),
    ("gqa", GQAOptions(window=2), "learned"),
    ("gqa", GQAOptions(bias=True), "rope"),
    ("mla", MLAOptions(latent_dim=6, rope_dim=2), "rope"),
    ("deltanet", MemoryOptions(chunk_size=2), "learned"),  # several chunks, one cut inside a call
    ("gated-deltanet", MemoryOptions(chunk_size=3, bias=True), "none"),
    ("deltanet", MemoryOptions(chunk_size=4, conv_size=3), "learned"),  # the tail crosses calls
    ("linear", MemoryOptions(conv_size=2), "learned"),
]


def _case_id(name, options, scheme) -> str:
    changed = [] if options is None else [f"{f.name}={getattr(options, f.name)}" for f in fields(options)
                                          if getattr(options, f.name) != f.default]
    return "-".join([name, *changed, scheme])


IDS = [_case_id(*case) for case in CASES]


def build(name, options, scheme, causal=True, seed=0):
    torch.manual_seed(seed)
    attn = AttentionSpec(name, options).build(D_MODEL, HEADS, causal, PositionSpec(scheme)).double()
    for p in attn.parameters():  # biases away from 0, so that they are seen too
        nn.init.normal_(p, std=0.3)
    return attn


def inputs(batch=2, n=7, seed=1):
    return torch.randn(batch, n, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def cache_numbers(cache) -> int:
    return sum(t.numel() for t in vars(cache).values() if isinstance(t, torch.Tensor))


def fixed_state(attn) -> bool:
    """A memory attention (nn/protocol.py): its cache is a state of fixed size."""
    return getattr(attn, "fixed_state", False)


def test_every_variant_of_the_package_has_cases():
    # Compared with the package's own variants, not the whole registry: a variant that
    # another test file registers when it is imported (the CLI test's toy) may come after
    # CASES were built, in whichever order the files are collected.
    ours = {name for name, variant in ATTENTION_VARIANTS.items()
            if variant.options.__module__.startswith("attncourse.")}
    assert ours >= {"gqa", "mla", "linear", "deltanet", "gated-deltanet"}
    assert {name for name, _, _ in CASES} >= ours | {"toy-mean"}
    assert len(CASES) >= 10


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
def test_shapes_weights_and_the_causal_mask(name, options, scheme):
    attn = build(name, options, scheme)
    assert isinstance(attn, DecoderAttention) and attn.d_model == D_MODEL and attn.num_heads == HEADS
    x = inputs()
    out, weights = attn(x, need_weights=True)
    assert out.shape == x.shape and weights.shape == (2, HEADS, 7, 7)
    assert attn(x)[1] is None  # no weights unless asked
    if not fixed_state(attn) or name == "linear":  # the delta rules' rows need not sum to 1
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 7, dtype=torch.float64), rtol=0,
                                   atol=1e-12)
    assert (weights.triu(1) == 0).all()  # no query sees a later key
    later = x.clone()
    later[:, 4:] += 1.0
    torch.testing.assert_close(attn(later)[0][:, :4], out[:, :4], rtol=0, atol=1e-12)
    assert not torch.allclose(attn(later)[0][:, 4:], out[:, 4:])


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
@pytest.mark.parametrize("fast", [True, False])
def test_cached_decoding_equals_the_full_forward(name, options, scheme, fast):
    attn = build(name, options, scheme)
    x = inputs()
    full, full_weights = attn(x, need_weights=True)
    cache = attn.empty_cache(2)
    assert isinstance(cache, DecoderCache) and len(cache) == 0
    outs = []
    weighs = not fast and not fixed_state(attn)  # a memory keeps no keys to weigh
    for a, b in ((0, 3), (3, 4), (4, 5), (5, 7)):
        out, weights = attn(x[:, a:b], kv_cache=cache, need_weights=weighs, fast=fast)
        outs.append(out)
        assert len(cache) == b
        if weighs:
            torch.testing.assert_close(weights, full_weights[:, :, a:b, :b], rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-12)
    if fixed_state(attn):
        assert attn.cache_numbers_per_token() == 0 and cache_numbers(cache) == 2 * attn.state_numbers()
        with pytest.raises(ValueError, match="keeps no keys"):
            attn(x[:, :1], kv_cache=cache, need_weights=True)
    else:
        assert cache_numbers(cache) == 2 * 7 * attn.cache_numbers_per_token()


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
def test_fast_and_written_out_paths_agree(name, options, scheme):
    attn = build(name, options, scheme)
    x = inputs()
    torch.testing.assert_close(attn(x, fast=True)[0], attn(x, fast=False)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
def test_a_padding_mask_hides_its_keys(name, options, scheme):
    attn = build(name, options, scheme)
    x = inputs()
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., :2] = False  # row 0 is left-padded by two tokens
    out, weights = attn(x, mask=mask, need_weights=True)
    assert (weights[0, ..., :2] == 0).all()
    assert (weights[0, :, :2] == 0).all()  # a query with no allowed key attends to nothing
    other = x.clone()
    other[0, :2] = torch.randn(2, D_MODEL, dtype=torch.float64)
    torch.testing.assert_close(attn(other, mask=mask)[0][0, 2:], out[0, 2:], rtol=0, atol=1e-12)
    torch.testing.assert_close(out[1], attn(x)[0][1], rtol=0, atol=1e-12)  # row 1 unmasked
    with pytest.raises(ValueError, match="mask"):
        attn(x, mask=torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        attn(x, mask=torch.ones(2, 1, 1, 7))


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
def test_positions_are_relative_and_checked(name, options, scheme):
    attn = build(name, options, scheme)
    x = inputs()
    out = attn(x)[0]
    torch.testing.assert_close(attn(x, positions=torch.arange(7))[0], out, rtol=0, atol=1e-12)
    # RoPE's scores depend on m - n only; schemes without rotation ignore positions
    torch.testing.assert_close(attn(x, positions=torch.arange(7) + 5)[0], out, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="positions"):
        attn(x, positions=torch.arange(6))
    with pytest.raises(ValueError, match=r"d_model"):
        attn(x[..., :-1])


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
def test_gradients_reach_the_input_and_every_weight(name, options, scheme):
    attn = build(name, options, scheme)
    x = inputs(batch=1, n=4).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: attn(t)[0], (x,))
    target = torch.randn(1, 4, D_MODEL, dtype=torch.float64)
    (attn(x)[0] * target).sum().backward()
    for pname, p in attn.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize(("name", "options", "scheme"), CASES, ids=IDS)
def test_inside_a_model_cached_generation_equals_the_full_forward(name, options, scheme):
    torch.manual_seed(0)
    spec = DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=2, max_len=16,
                       attention=AttentionSpec(name, options), positions=PositionSpec(scheme),
                       ffn={"kind": "swiglu", "d_ff": 24, "bias": False}, norm={"kind": "rmsnorm"})
    model = GPT(spec=spec).double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    full, _ = model(tokens)
    caches = model.init_cache(2)
    steps = [model(tokens[:, :4], caches)[0]] + [model(tokens[:, t:t + 1], caches)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    assert model.cache_bytes_per_token() == 2 * model.blocks[0].attn.cache_numbers_per_token() * 8


def test_the_toy_variant_trains_saves_and_loads_with_no_edit_elsewhere(tmp_path):
    torch.manual_seed(0)
    spec = DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=1, max_len=16,
                       attention=AttentionSpec("toy-mean", MeanOptions(bias=True)), positions=PositionSpec("learned"))
    model = GPT.from_spec(spec)
    assert type(model.blocks[0].attn) is MeanAttention
    assert model.config == {"spec": spec.to_dict()} and model.config["spec"]["attention"] == {
        "name": "toy-mean", "bias": True}
    tokens = torch.randint(0, 11, (2, 8))
    loss = nn.functional.cross_entropy(model(tokens)[0].flatten(0, 1), tokens.flatten())
    loss.backward()
    assert model.blocks[0].attn.w_v.weight.grad.abs().sum() > 0
    save_checkpoint(tmp_path / "toy.pt", model=model)
    loaded, _ = load_model(tmp_path / "toy.pt")
    assert type(loaded.blocks[0].attn) is MeanAttention and loaded.spec == spec
    torch.testing.assert_close(loaded(tokens)[0], model.eval()(tokens)[0], rtol=0, atol=0)


def test_registering_another_variant_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_attention("gqa", MeanOptions, MeanAttention.from_options)
    with pytest.raises(TypeError, match="dataclass"):
        register_attention("plain", dict, MeanAttention.from_options)
    assert register_attention("toy-mean", MeanOptions, MeanAttention.from_options).name == "toy-mean"
    with pytest.raises(ValueError, match="attention must be one of"):
        AttentionSpec("flash-something")
    with pytest.raises(TypeError, match="GQAOptions"):
        AttentionSpec("gqa", MLAOptions())
    with pytest.raises(ValueError, match="no option 'window'"):
        AttentionSpec("mla", {"window": 3})


def test_each_variant_registers_itself_and_the_registry_imports_none():
    # nn/registry.py holds the table and imports no variant; each variant's module has its own
    # register line, nn/variants imports the package's, and nn/spec imports nn/variants: no cycle.
    import ast
    from pathlib import Path

    import attncourse.nn.registry as registry

    def imports(module):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert not {m for m in imports(registry) if m.startswith("attncourse")}
    for name in ("gqa", "mla", "gated", "linear", "deltanet", "gated-deltanet"):
        module = __import__(ATTENTION_VARIANTS[name].build.__self__.__module__, fromlist=["x"])
        assert f'register_attention("{name}",' in Path(module.__file__).read_text()
        assert "attncourse.nn.spec" not in imports(module)
    assert registry.VARIANTS_VARIABLE == "ATTNCOURSE_VARIANTS"

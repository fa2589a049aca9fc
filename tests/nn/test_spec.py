"""GPT built from a DecoderSpec: the seeded initialisation is pinned, a keyword-config file is
refused, a Llama-style spec.

tests/fixtures/gpt/ (written by tests/fixtures/write_gpt_fixture.py) holds the parameters'
digests in creation order, the state_dict's keys and the logits of a fixed batch for seven
keyword configurations: the chapters' swept claims rest on these seeded weights, so a change
of creation order must show here first. It also holds one checkpoint whose config is GPT's
keywords, a form no longer read.

The fixture was computed on another CPU (x86 with AVX2 or AVX-512), so its computed
numbers are compared within a tolerance derived from float32 rounding
(assert_close_across_cpus), and its parameter digests only where this CPU's torch
turns seeded draws into the same values (draws_become_the_fixture_cpus_values).
Bits are compared exactly only between two things computed here, in one run.
"""

from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.ffn import SwiGLU
from attncourse.nn.gpt import GPT
from attncourse.nn.mla import MLAOptions
from attncourse.nn.norm import RMSNorm
from attncourse.nn.rope import apply_rope
from attncourse.nn.spec import (
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    NormSpec,
    PositionSpec,
)
from attncourse.train.checkpoint import load_model

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpt"
SEEDED = torch.load(FIXTURES / "gpt_seeded.pt", weights_only=True)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


EPS = torch.finfo(torch.float32).eps  # 2**-23: float32's spacing at 1.0


def assert_close_across_cpus(actual: torch.Tensor, expected: torch.Tensor,
                             num_layers: int) -> None:
    """``actual``, computed here, against ``expected``, computed by the fixture's CPU.

    Other SIMD kernels (AVX-512, AVX2, scalar) sum the matrix products, norms and
    softmaxes in other orders, so the last bits of the logits differ between CPUs.
    Each dependent float32 stage of the forward pass can move a value by about
    eps/2 of its scale. A block has 11 stages (norm, q/k/v projections, scores,
    softmax, weights times values, output projection, residual add, norm, FFN in,
    FFN out, residual add) and the model adds two (final norm, output projection),
    so the tolerance is (11 * num_layers + 2) * eps/2 of the logits' largest
    magnitude: 12 eps for two blocks, 6.5 eps for one. It is absolute, not
    relative: a logit near 0 is a cancellation of terms of the logits' scale and
    carries their rounding. Measured: at most 1 eps between an AVX-512 CPU and the
    fixture, 2.6 eps with ATEN_CPU_CAPABILITY=default (where the seeded parameters
    themselves differ in their last bits), while nudging any one parameter by 1e-3
    moves the logits by 20 eps or more (test_the_tolerance_tells_a_nudged_parameter).
    """
    stages = 11 * num_layers + 2
    atol = stages * EPS / 2 * expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


@functools.cache
def draws_become_the_fixture_cpus_values() -> bool:
    """Whether torch on this CPU turns seeded draws into the fixture CPU's values.

    The generator's stream is the same on every CPU, but the values are made by SIMD
    kernels: normal_ (the embeddings) runs Box-Muller with vectorised log/cos/sin on
    x86 with AVX2 or AVX-512 and with the C library's on an x86 without AVX2
    (ATEN_CPU_CAPABILITY=default; ARM has kernels of its own), and uniform_
    (nn.Linear's initialisation) computes low + (high - low) * u with or without a
    fused multiply-add. With the other kernels about half of the values of such a
    tensor differ in their last bits (measured: up to 11 eps of its scale), so the
    fixture's parameter digests can hold only where this probe gives the bits the
    fixture's CPU gives. The kernels work element by element, without sums: where
    they are the same, the same bits follow whatever the threads or BLAS.
    """
    generator = torch.Generator().manual_seed(0)
    bound = 24**-0.5  # not a power of 2, so low + (high - low) * u rounds
    draws = torch.cat([torch.empty(208).normal_(std=0.25, generator=generator),
                       torch.empty(384).uniform_(-bound, bound, generator=generator)])
    return digest(draws) == "cc009f0991944f67"  # x86 AVX2 and AVX-512, torch 2.13


@pytest.mark.parametrize("name", list(SEEDED["record"]))
def test_the_seeded_initialisation_is_pinned(name):
    record = SEEDED["record"][name]
    torch.manual_seed(0)
    model = GPT(SEEDED["vocab"], **SEEDED["small"], **record["kwargs"]).eval()
    parameters = [(n, tuple(p.shape), digest(p)) for n, p in model.named_parameters()]
    expected = [(n, tuple(shape), d) for n, shape, d in record["parameters"]]
    if draws_become_the_fixture_cpus_values():
        assert parameters == expected  # the same bits as 7417608's, in creation order
    else:  # names, shapes and order; the values are held by the logits below
        assert [p[:2] for p in parameters] == [e[:2] for e in expected]
    assert list(model.state_dict()) == record["state_keys"]
    with torch.no_grad():
        logits, _ = model(SEEDED["tokens"])
    assert_close_across_cpus(logits, torch.tensor(record["logits"]),
                             SEEDED["small"]["num_layers"])


@pytest.mark.parametrize("name", list(SEEDED["record"]))
def test_the_tolerance_tells_a_nudged_parameter(name):
    """A model off by 1e-3 in any one parameter fails the check of the logits."""
    record = SEEDED["record"][name]
    expected = torch.tensor(record["logits"])
    torch.manual_seed(0)
    names = [n for n, _ in GPT(SEEDED["vocab"], **SEEDED["small"],
                               **record["kwargs"]).named_parameters()]
    for nudged in names:
        torch.manual_seed(0)
        model = GPT(SEEDED["vocab"], **SEEDED["small"], **record["kwargs"]).eval()
        with torch.no_grad():
            model.get_parameter(nudged).view(-1)[0] += 1e-3
            logits, _ = model(SEEDED["tokens"])
        with pytest.raises(AssertionError, match="not close"):
            assert_close_across_cpus(logits, expected, SEEDED["small"]["num_layers"])


def test_the_fixture_can_tell_a_different_model():
    record = SEEDED["record"]["rope"]
    torch.manual_seed(1)  # another seed: every randomly initialised tensor differs (the norms' do not)
    model = GPT(SEEDED["vocab"], **SEEDED["small"])
    same = [n for (n, p), (_, _, d) in zip(model.named_parameters(), record["parameters"], strict=True)
            if digest(p) == d]
    assert same and all("norm" in n for n in same)


def test_a_checkpoint_of_keywords_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"must be \{'spec': \.\.\.\}.*train the model again") as err:
        load_model(FIXTURES / "gpt_checkpoint.pt")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", list(SEEDED["record"]))
def test_the_keywords_and_their_spec_build_the_same_model(name):
    kwargs = {**SEEDED["small"], **SEEDED["record"][name]["kwargs"]}
    torch.manual_seed(0)
    by_keywords = GPT(SEEDED["vocab"], **kwargs).eval()
    torch.manual_seed(0)
    by_spec = GPT.from_spec(by_keywords.spec).eval()
    assert by_spec.config == {"spec": by_keywords.spec.to_dict()}
    for (n, a), (m, b) in zip(by_keywords.state_dict().items(), by_spec.state_dict().items(), strict=True):
        assert n == m and torch.equal(a, b)
    rebuilt = GPT.from_config(by_spec.config)  # what load_model does
    assert rebuilt.spec == by_keywords.spec and DecoderSpec(**by_spec.spec.to_dict()) == by_spec.spec


def test_the_keywords_translate_to_the_parts():
    spec = GPT(10, positional="alibi", num_kv_heads=2, window=4, d_ff=32).spec
    assert spec.attention == AttentionSpec("gqa", GQAOptions(num_kv_heads=2, window=4))
    assert (spec.positions, spec.norm, spec.ffn) == (PositionSpec("alibi"), NormSpec("layernorm"), FFNSpec("relu", 32))
    assert spec.tie_output and spec.scale_embedding
    mla = GPT(10, d_model=32, num_heads=4, latent_dim=12).spec
    assert mla.attention == AttentionSpec("mla", MLAOptions(latent_dim=12))
    only = GPT(10, attention_only=True).spec
    assert (only.norm.kind, only.ffn.kind, only.tie_output) == ("none", "none", False)


def smollm2_spec(num_layers: int = 30, vocab_size: int = 49152, d_model: int = 576, num_heads: int = 9,
                 num_kv_heads: int = 3, d_ff: int = 1536) -> DecoderSpec:
    """SmolLM2-135M's choices (shared/notes/real-model.md), with sizes that may be shrunk."""
    return DecoderSpec(vocab_size, d_model, num_heads, num_layers, max_len=8192,
                       attention=AttentionSpec("gqa", GQAOptions(num_kv_heads=num_kv_heads)),
                       positions=PositionSpec("rope", base=100000.0), norm=NormSpec("rmsnorm", eps=1e-5),
                       ffn=FFNSpec("swiglu", d_ff, bias=False), tie_output=True, scale_embedding=False)


def test_a_llama_style_spec_has_smollm2_135ms_shapes():
    with torch.device("meta"):  # shapes only: 135M float32 parameters are not allocated
        model = GPT(spec=smollm2_spec())
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M's count
    block = model.blocks[0]
    assert isinstance(block.attn, CausalSelfAttention) and block.attn.rope_base == 100000.0
    assert (block.attn.w_q.weight.shape, block.attn.w_k.weight.shape) == ((576, 576), (192, 576))
    assert isinstance(block.ffn, SwiGLU) and block.ffn.w_gate.weight.shape == (1536, 576)
    assert isinstance(block.attn_norm, RMSNorm) and block.attn_norm.eps == 1e-5
    assert isinstance(model.final_norm, RMSNorm)
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    assert model.output_proj.weight is model.embedding.weight
    assert model.positional_encoding is None


def test_a_llama_style_model_equals_its_forward_written_out():
    torch.manual_seed(0)
    spec = smollm2_spec(num_layers=2, vocab_size=50, d_model=24, num_heads=6, num_kv_heads=2, d_ff=40)
    model = GPT(spec=spec).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    tokens = torch.randint(0, 50, (2, 7))

    def rms(x, g):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    x = model.embedding.weight[tokens]  # no sqrt(d_model) scaling
    pos = torch.arange(7)
    for block in model.blocks:
        a = block.attn
        h = rms(x, block.attn_norm.weight)
        q = (h @ a.w_q.weight.T).view(2, 7, 6, 4).transpose(1, 2)
        k = (h @ a.w_k.weight.T).view(2, 7, 2, 4).transpose(1, 2)
        v = (h @ a.w_v.weight.T).view(2, 7, 2, 4).transpose(1, 2)
        q, k = apply_rope(q, pos, 100000.0), apply_rope(k, pos, 100000.0)
        k, v = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(4) + torch.full((7, 7), float("-inf")).triu(1)
        heads = scores.softmax(-1) @ v
        x = x + heads.transpose(1, 2).reshape(2, 7, 24) @ a.w_o.weight.T
        h = rms(x, block.ffn_norm.weight)
        f = block.ffn
        x = x + (F.silu(h @ f.w_gate.weight.T) * (h @ f.w_up.weight.T)) @ f.w_down.weight.T
    expected = rms(x, model.final_norm.weight) @ model.embedding.weight.T
    torch.testing.assert_close(model(tokens)[0], expected, rtol=0, atol=1e-12)
    caches = model.init_cache(2)
    steps = [model(tokens[:, :3], caches)[0]] + [model(tokens[:, t:t + 1], caches)[0] for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: GPT(spec=DecoderSpec(10), d_model=32), TypeError, r"not both \(got \['d_model'\]\)"),
    (lambda: GPT(), TypeError, "vocab_size"),
    (lambda: DecoderSpec(10, d_model=30, num_heads=4), ValueError, "divisible"),
    (lambda: DecoderSpec(0), ValueError, "vocab_size"),
    (lambda: DecoderSpec(10, dropout=1.0), ValueError, "dropout"),
    (lambda: DecoderSpec(10, norm="rms"), TypeError, "NormSpec"),
    (lambda: NormSpec("batchnorm"), ValueError, "norm must be one of"),
    (lambda: FFNSpec("moe"), ValueError, "ffn must be one of"),
    (lambda: PositionSpec("rope", base=1.0), ValueError, "base"),
    (lambda: PositionSpec("nope"), ValueError, "positions must be one of"),
    (lambda: GPT(spec=DecoderSpec(10, attention=AttentionSpec("mla"), positions=PositionSpec("alibi"))),
     ValueError, "ALiBi|alibi"),
    (lambda: GPT(spec=DecoderSpec(10, attention=AttentionSpec("mla", {"rope_dim": 4}),
                                  positions=PositionSpec("learned"))), ValueError, "rope_dim=4"),
    (lambda: GPT(spec=DecoderSpec(10, attention={"name": "gqa", "num_kv_heads": 3})), ValueError, "multiple"),
])
def test_bad_specs_are_refused_with_one_line(make, error, match):
    with pytest.raises(error, match=match):
        make()

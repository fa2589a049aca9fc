"""Checks for the exercises of the chapter "Build a GPT yourself".

The learner writes a decoder-only language model as plain functions of its parameters,
held in dicts of tensors, and the loop that trains it:

- ``my_causal_attention(x, w_q, w_k, w_v, w_o, num_heads)``: multi-head causal
  self-attention with scaled scores;
- ``my_block(x, p, num_heads)``: a pre-norm block, attention and a ReLU feed-forward
  network, each in a residual connection;
- ``my_gpt(tokens, params, num_heads)``: token embedding scaled by sqrt(d_model), learned
  positions, the blocks, a final LayerNorm and the output tied to the embedding;
- ``my_train(data, vocab_size, steps, seed)``: AdamW on random windows, cross-entropy.

The first three are compared with the course package's :class:`~attncourse.nn.gpt.GPT`
(``positional="learned"``) given the same weights: the package's matrices, stored
``(out, in)`` for ``nn.Linear``, are handed to the learner transposed, ``(in, out)``, so
that a row vector ``x`` is projected as ``x @ w`` (the book's notation). The training
check runs the learner's loop for :data:`STEPS` steps on the chapter-7 corpus and scores
the returned parameters on held-out text; it passes at :data:`TRAIN_BOUND` bits per
character or better.

When a case fails, the learner's output is compared with typical wrong versions (no
causal mask, unscaled scores, post-norm, a missing scale or table) so that the hint names
the bug.

References
----------
Vaswani et al. (2017), sections 3.2-3.5; Radford et al. (2019), section 2.3 (pre-norm).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.checks.guard import TRANSFORMER_LAYERS, allowing, is_stub
from attncourse.data.text import CharCorpus, char_corpus, course_text
from attncourse.nn.gpt import GPT

#: The model of the chapter (chapter 7's sizes, learned positions over the context).
D_MODEL, NUM_HEADS, NUM_LAYERS, D_FF, CONTEXT = 64, 8, 2, 256, 64
#: The training recipe the chapter states: steps, windows per step, AdamW's rate.
STEPS, BATCH_SIZE, LR = 300, 32, 1e-2
#: Held-out bits per character the learner's loop must reach in :data:`STEPS` steps
#: (the chapter's solution reached 3.26, 3.41, 3.36 bits/char for seeds 0, 1, 2 with the
#: native CPU kernels and 3.27, 3.41, 3.37 with ATEN_CPU_CAPABILITY=default, one thread;
#: the bigram baseline is 4.01). ``tests/chapters/ch07b_build_gpt/test_checks.py`` trains it.
TRAIN_BOUND = 3.55
#: Tolerances of the float32 comparisons with the package.
ATOL, RTOL = 1e-5, 1e-5
LN_EPS = 1e-5

# --------------------------------------------------------------------------- hints

ATTENTION_EXPLAIN = (
    "Project x to queries, keys and values with the three matrices; cut the last axis into "
    "num_heads heads of d_k features each (d_model divided by the number of heads), heads "
    "before positions; score every query against every key, divide by the square root of "
    "d_k, hide the keys that come after each query with minus infinity, softmax over the "
    "keys, average the values, put the heads back side by side and apply the output matrix.")
NO_MASK_HINT = (
    "There is no causal mask: every position attends to the positions after it too, so the "
    "model can read the character it is asked to predict. Give the scores of the keys that "
    "come after the query minus infinity before the softmax.")
UNSCALED_HINT = (
    "The scores are not scaled: divide the query-key products by the square root of d_k, the "
    "width of one head, before the softmax (chapter 4 showed why).")
SCALE_D_MODEL_HINT = (
    "The scores are divided by the square root of d_model; divide by the square root of d_k, "
    "the width of one head (d_model divided by the number of heads).")
QUERY_AXIS_HINT = (
    "The softmax runs over the queries (the second-to-last axis): each query's weights over "
    "the keys must sum to 1, so normalise along the last axis.")
NO_OUTPUT_PROJECTION_HINT = (
    "The heads are merged but not projected: the layer ends with the output matrix w_o.")
HEAD_SPLIT_HINT = (
    "The heads are cut wrongly: first split the last axis into (heads, d_k), then swap the "
    "positions axis and the heads axis; reshaping straight to (batch, heads, n, d_k) mixes "
    "positions into the heads.")
UPPER_MASK_HINT = (
    "The mask keeps the wrong triangle: a query may see the keys up to and including its own "
    "position, and none after it.")

BLOCK_EXPLAIN = (
    "Pre-norm: add to x the attention of LayerNorm 1 of x; then add to that the FFN of "
    "LayerNorm 2 of it. The FFN is a ReLU between two affine maps (w_1 and b_1, then w_2 and "
    "b_2); LayerNorm subtracts the mean over the last axis, divides by the square root of the "
    "biased variance plus 1e-5, then scales by the gain and adds the bias.")
POST_NORM_HINT = (
    "That is a post-norm block (the original Transformer's: the LayerNorm applied to the sum "
    "of x and the sublayer's output). This chapter asks for pre-norm, as in GPT-2: normalise "
    "the sublayer's *input* and add its output to the un-normalised x.")
NO_RESIDUAL_HINT = (
    "The residual connections are missing: each sublayer's output is added to its own input, "
    "the un-normalised x.")
SWAPPED_NORMS_HINT = (
    "The two LayerNorms are swapped: ln1 (gain and bias) goes before the attention, ln2 "
    "before the feed-forward network.")
GELU_HINT = "The feed-forward network uses GELU; this model uses ReLU, as chapter 6's did."
BLOCK_ATTENTION_HINT = (
    "The block's structure is right but its attention is not: pass check_causal_attention "
    "first (its output here matches attention {what}).")
LN_VARIANCE_HINT = (
    "The LayerNorm uses the unbiased variance (dividing by n minus 1); LayerNorm divides by "
    "n, the biased variance.")

GPT_EXPLAIN = (
    "Embed: look up each token's row of the embedding, multiply it by the square root of "
    "d_model, add the position table's row of its position; run the blocks in order; apply "
    "the final LayerNorm (lnf_gain, lnf_bias); score every token of the vocabulary with the "
    "embedding matrix itself, transposed (the output layer is tied to the embedding).")
NO_EMBED_SCALE_HINT = (
    "The token embeddings are not scaled: multiply them by the square root of d_model before "
    "adding the positions (the package's GPT does, as the Transformer did).")
SCALED_POSITIONS_HINT = (
    "The positions are scaled too: multiply the token embeddings by the square root of "
    "d_model, then add the position rows as they are.")
NO_POSITIONS_HINT = (
    "The position table is never used: add its first n rows (row t for the token at position "
    "t) to the embedded tokens.")
NO_FINAL_NORM_HINT = (
    "The final LayerNorm is missing: normalise the last block's output with lnf_gain and "
    "lnf_bias before the output layer.")
GPT_BLOCK_HINT = (
    "The embedding and output are right but the blocks are not: pass check_block first (the "
    "logits match a model whose blocks are {what}).")

TARGETS_NOT_SHIFTED_HINT = (
    "Your training loss fell to almost nothing while the held-out text is not predicted: "
    "the targets are the inputs themselves, which the model can read. The target of each "
    "position is the character after it: take windows one character longer than the "
    "context, the inputs without the last character, the targets without the first.")
NOT_LEARNING_HINT = (
    "The training loss hardly fell: check that the parameters require gradients and are the "
    "ones given to the optimiser, and that each step clears the gradients, back-propagates "
    "and steps.")
TRAIN_SHORT_HINT = (
    "The loop learns, but not far enough: use AdamW with the chapter's learning rate LR, "
    "batches of BATCH_SIZE random windows of CONTEXT characters, the mean cross-entropy over "
    "every position of every window, and the initialisation the exercise states (gains 1, "
    "biases 0).")
TRAIN_RETURN_HINT = (
    "my_train returns a pair: the dict of trained parameters (as my_gpt takes it) and the "
    "list of the training losses, one per step.")


class Weights(dict):
    """A dict of named tensors, shown in check reports by its keys and shapes only."""

    def __repr__(self) -> str:
        def shape(value: Any) -> str:
            if isinstance(value, list):
                return f"[{len(value)} blocks]"
            return "x".join(str(s) for s in value.shape) if hasattr(value, "shape") else "?"
        return "{" + ", ".join(f"{k}: {shape(v)}" for k, v in self.items()) + "}"


# --------------------------------------------------------------------------- the package's model

def package_gpt(vocab_size: int, seed: int = 0, d_model: int = D_MODEL, num_heads: int = NUM_HEADS,
                num_layers: int = NUM_LAYERS, d_ff: int = D_FF, max_len: int = CONTEXT) -> GPT:
    """The package's GPT of the chapter: learned positions, pre-norm, tied output, seeded."""
    torch.manual_seed(seed)
    return GPT(vocab_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers, d_ff=d_ff,
               max_len=max_len, positional="learned")


def _t(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().T.clone().contiguous()


def attention_weights(attn: torch.nn.Module) -> Weights:
    """``w_q, w_k, w_v, w_o`` of a package attention layer, each ``(in, out)``."""
    return Weights(w_q=_t(attn.w_q.weight), w_k=_t(attn.w_k.weight), w_v=_t(attn.w_v.weight),
                   w_o=_t(attn.w_o.weight))


def block_params(block: torch.nn.Module) -> Weights:
    """A package block's parameters under the chapter's names (matrices ``(in, out)``)."""
    p = attention_weights(block.attn)
    p.update(w_1=_t(block.ffn.w_1.weight), b_1=block.ffn.w_1.bias.detach().clone(),
             w_2=_t(block.ffn.w_2.weight), b_2=block.ffn.w_2.bias.detach().clone(),
             ln1_gain=block.attn_norm.weight.detach().clone(), ln1_bias=block.attn_norm.bias.detach().clone(),
             ln2_gain=block.ffn_norm.weight.detach().clone(), ln2_bias=block.ffn_norm.bias.detach().clone())
    return p


def gpt_params(model: GPT) -> Weights:
    """A package GPT's (learned positions) parameters as the chapter's ``params`` dict."""
    return Weights(embedding=model.embedding.weight.detach().clone(),
                   positions=model.positional_encoding.embedding.weight.detach().clone(),
                   blocks=[block_params(b) for b in model.blocks],
                   lnf_gain=model.final_norm.weight.detach().clone(),
                   lnf_bias=model.final_norm.bias.detach().clone())


@torch.no_grad()
def load_params(model: GPT, params: dict[str, Any]) -> GPT:
    """Copy the chapter's ``params`` (as ``my_gpt`` takes them) into a package GPT; returns it."""
    device = model.embedding.weight.device
    model.embedding.weight.copy_(params["embedding"].to(device))
    model.positional_encoding.embedding.weight.copy_(params["positions"].to(device))
    for block, p in zip(model.blocks, params["blocks"], strict=True):
        for name in ("w_q", "w_k", "w_v", "w_o"):
            getattr(block.attn, name).weight.copy_(p[name].T.to(device))
        block.ffn.w_1.weight.copy_(p["w_1"].T.to(device))
        block.ffn.w_1.bias.copy_(p["b_1"].to(device))
        block.ffn.w_2.weight.copy_(p["w_2"].T.to(device))
        block.ffn.w_2.bias.copy_(p["b_2"].to(device))
        block.attn_norm.weight.copy_(p["ln1_gain"].to(device))
        block.attn_norm.bias.copy_(p["ln1_bias"].to(device))
        block.ffn_norm.weight.copy_(p["ln2_gain"].to(device))
        block.ffn_norm.bias.copy_(p["ln2_bias"].to(device))
    model.final_norm.weight.copy_(params["lnf_gain"].to(device))
    model.final_norm.bias.copy_(params["lnf_bias"].to(device))
    return model


@torch.no_grad()
def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Give every parameter random values of a visible size (norm gains around 1), so
    that each typical mistake changes the output far beyond the tolerance."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
        elif p.dim() == 1:
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
        else:
            p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5 * 1.5)


# --------------------------------------------------------------------------- reference, with bugs

def _attention(x, w_q, w_k, w_v, w_o, num_heads, *, causal=True, scale="d_k", softmax_dim=-1,
               split="right", project=True, upper=False):
    b, n, d = x.shape
    d_k = d // num_heads

    def heads(t):
        if split == "wrong":
            return t.reshape(b, num_heads, n, d_k)
        return t.reshape(b, n, num_heads, d_k).transpose(1, 2)

    q, k, v = heads(x @ w_q), heads(x @ w_k), heads(x @ w_v)
    scores = q @ k.transpose(-2, -1)
    if scale == "d_k":
        scores = scores / math.sqrt(d_k)
    elif scale == "d_model":
        scores = scores / math.sqrt(d)
    if causal:
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future.T if upper else future, float("-inf"))
    weights = scores.softmax(dim=softmax_dim)
    out = (weights @ v).transpose(1, 2).reshape(b, n, d)
    return out @ w_o if project else out


def _layer_norm(x, gain, bias, unbiased=False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    return (x - mean) / torch.sqrt(var + LN_EPS) * gain + bias


def _block(x, p, num_heads, *, pre_norm=True, residual=True, swap=False, gelu=False, unbiased=False,
           attention=None):
    attention = attention or {}
    ln1 = (p["ln2_gain"], p["ln2_bias"]) if swap else (p["ln1_gain"], p["ln1_bias"])
    ln2 = (p["ln1_gain"], p["ln1_bias"]) if swap else (p["ln2_gain"], p["ln2_bias"])
    act = F.gelu if gelu else F.relu

    def attn(h):
        return _attention(h, p["w_q"], p["w_k"], p["w_v"], p["w_o"], num_heads, **attention)

    def ffn(h):
        return act(h @ p["w_1"] + p["b_1"]) @ p["w_2"] + p["b_2"]

    def norm(h, gb):
        return _layer_norm(h, *gb, unbiased=unbiased)

    if not pre_norm:
        x = norm(x + attn(x), ln1)
        return norm(x + ffn(x), ln2)
    if not residual:
        x = attn(norm(x, ln1))
        return ffn(norm(x, ln2))
    x = x + attn(norm(x, ln1))
    return x + ffn(norm(x, ln2))


def reference_gpt(tokens, params, num_heads, *, scale=True, positions=True, final_norm=True,
                  scale_positions=False, block=None):
    """The chapter's model as functions of ``params``; the keywords make the typical bugs."""
    block = block or {}
    emb = params["embedding"]
    n = tokens.shape[1]
    x = emb[tokens]
    pos = params["positions"][:n] if positions else 0
    if scale_positions:
        x = (x + pos) * math.sqrt(emb.shape[1])
    else:
        x = x * (math.sqrt(emb.shape[1]) if scale else 1.0) + pos
    for p in params["blocks"]:
        x = _block(x, p, num_heads, **block)
    if final_norm:
        x = _layer_norm(x, params["lnf_gain"], params["lnf_bias"])
    return x @ emb.T


def _variants(recipes):
    out = []
    for hint, recipe in recipes:
        try:
            with torch.no_grad():
                out.append((hint, recipe().double().numpy()))
        except (RuntimeError, ValueError, ZeroDivisionError):
            pass
    return out


# --------------------------------------------------------------------------- 1. attention

_ATTENTION_BUGS = [
    (NO_MASK_HINT, dict(causal=False)),
    (UNSCALED_HINT, dict(scale=None)),
    (SCALE_D_MODEL_HINT, dict(scale="d_model")),
    (QUERY_AXIS_HINT, dict(softmax_dim=-2)),
    (NO_OUTPUT_PROJECTION_HINT, dict(project=False)),
    (HEAD_SPLIT_HINT, dict(split="wrong")),
]


def _diagnose_attention(got: Any, case: Case) -> str | None:
    a = case.args
    args = (a["x"], a["w_q"], a["w_k"], a["w_v"], a["w_o"], a["num_heads"])
    recipes = [(hint, lambda kw=kw: _attention(*args, **kw)) for hint, kw in _ATTENTION_BUGS]
    recipes.append((UPPER_MASK_HINT, lambda: _attention(*args, upper=True)))
    return variant_hint(got, _variants(recipes), np.asarray(case.expected), case)


def _drawn(seed: int | None) -> list[dict[str, int]]:
    """With the grade of record's ``seed``, one layer's sizes and weights' seed drawn from it."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    # d_model >= 4: a LayerNorm over 2 features divides by the gap between them, and a draw
    # where the two nearly tie turned float32 rounding into a failed case for the reference
    heads, d_k = int(rng.choice([1, 2, 4])), int(rng.choice([4, 8]))
    return [{"batch": int(rng.integers(1, 3)), "n": int(rng.integers(1, 17)), "d_model": heads * d_k,
             "heads": heads, "d_ff": int(rng.integers(4, 33)), "layers": int(rng.integers(1, 3)),
             "vocab": int(rng.integers(5, 41)), "seed": int(rng.integers(10, 2**20))}]


def attention_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_causal_attention`: package attention layers (with
    ``seed``, one more of sizes and weights drawn from it)."""
    def case(description: str, batch: int, n: int, d_model: int, heads: int, seed: int) -> Case:
        model = package_gpt(11, seed, d_model=d_model, num_heads=heads, num_layers=1, d_ff=4)
        _randomise(model, seed)
        attn = model.blocks[0].attn
        x = torch.randn(batch, n, d_model, generator=torch.Generator().manual_seed(100 + seed))
        with torch.no_grad():
            expected = attn(x)[0].numpy()
        w = attention_weights(attn)
        return Case(description, args={"x": x, **w, "num_heads": heads}, expected=expected,
                    atol=ATOL, rtol=RTOL, hint=ATTENTION_EXPLAIN, diagnose=_diagnose_attention)

    return [
        case("one head, d_model=4, 3 positions", 1, 3, 4, 1, 0),
        case("2 heads of d_k=8, batch 2, 6 positions", 2, 6, 16, 2, 1),
        case("the chapter's layer: 8 heads of d_k=8, 16 positions", 2, 16, D_MODEL, NUM_HEADS, 2),
        case("a single position (it attends to itself only)", 1, 1, 16, 4, 3),
    ] + [case(f"drawn when graded: {d['heads']} head(s), d_model={d['d_model']}, batch {d['batch']}, "
              f"{d['n']} positions", d["batch"], d["n"], d["d_model"], d["heads"], d["seed"])
         for d in _drawn(seed)]


@allowing("torch operations: matrix products (@), reshape/view, transpose, masked_fill, softmax.",
          library=TRANSFORMER_LAYERS)
def check_causal_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``my_causal_attention(x, w_q, w_k, w_v, w_o, num_heads)``.

    ``x (batch, n, d_model)`` float32, the four matrices ``(d_model, d_model)`` (``(in,
    out)``: ``x @ w_q``), ``num_heads`` dividing ``d_model``; returns ``(batch, n,
    d_model)``, compared with the package's attention layer given the same weights.
    Hints name a missing causal mask, unscaled scores (or scaled by sqrt(d_model)), a
    softmax over the queries, a missing output projection and a wrong split into heads.
    """
    return run_cases("check_causal_attention", fn, attention_cases())


# --------------------------------------------------------------------------- 2. block

_BLOCK_BUGS = [
    (POST_NORM_HINT, dict(pre_norm=False)),
    (NO_RESIDUAL_HINT, dict(residual=False)),
    (SWAPPED_NORMS_HINT, dict(swap=True)),
    (GELU_HINT, dict(gelu=True)),
    (LN_VARIANCE_HINT, dict(unbiased=True)),
    (BLOCK_ATTENTION_HINT.format(what="without the causal mask"), dict(attention=dict(causal=False))),
    (BLOCK_ATTENTION_HINT.format(what="with unscaled scores"), dict(attention=dict(scale=None))),
]


def _diagnose_block(got: Any, case: Case) -> str | None:
    x, p, h = case.args["x"], case.args["p"], case.args["num_heads"]
    recipes = [(hint, lambda kw=kw: _block(x, p, h, **kw)) for hint, kw in _BLOCK_BUGS]
    return variant_hint(got, _variants(recipes), np.asarray(case.expected), case)


def block_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_block`: package pre-norm blocks (with ``seed``, one
    more drawn from it)."""
    def case(description: str, batch: int, n: int, d_model: int, heads: int, d_ff: int, seed: int) -> Case:
        model = package_gpt(11, seed, d_model=d_model, num_heads=heads, num_layers=1, d_ff=d_ff)
        _randomise(model, seed)
        block = model.blocks[0]
        x = torch.randn(batch, n, d_model, generator=torch.Generator().manual_seed(200 + seed))
        with torch.no_grad():
            expected = block(x)[0].numpy()
        return Case(description, args={"x": x, "p": block_params(block), "num_heads": heads},
                    expected=expected, atol=ATOL, rtol=RTOL, hint=BLOCK_EXPLAIN, diagnose=_diagnose_block)

    return [
        case("2 heads, d_model=8, d_ff=16, 4 positions", 1, 4, 8, 2, 16, 0),
        case("the chapter's block: 8 heads, d_model=64, d_ff=256, batch 2, 12 positions",
             2, 12, D_MODEL, NUM_HEADS, D_FF, 1),
        case("one head, d_model=16, d_ff=8, 7 positions", 3, 7, 16, 1, 8, 2),
    ] + [case(f"drawn when graded: {d['heads']} head(s), d_model={d['d_model']}, d_ff={d['d_ff']}, "
              f"{d['n']} positions", d["batch"], d["n"], d["d_model"], d["heads"], d["d_ff"], d["seed"])
         for d in _drawn(seed)]


@allowing("torch operations, your my_causal_attention, a LayerNorm (your own, or F.layer_norm) "
          "and relu.",
          library=TRANSFORMER_LAYERS)
def check_block(fn: Callable[..., Any]) -> CheckResult:
    """Check ``my_block(x, p, num_heads)``: a pre-norm block, against the package's.

    ``p`` holds ``w_q, w_k, w_v, w_o, w_1, b_1, w_2, b_2, ln1_gain, ln1_bias, ln2_gain,
    ln2_bias`` (matrices ``(in, out)``). Hints name post-norm, missing residuals, swapped
    norms, GELU, the unbiased variance, and an attention without mask or scaling.
    """
    return run_cases("check_block", fn, block_cases())


# --------------------------------------------------------------------------- 3. the model

_GPT_BUGS = [
    (NO_EMBED_SCALE_HINT, dict(scale=False)),
    (SCALED_POSITIONS_HINT, dict(scale_positions=True)),
    (NO_POSITIONS_HINT, dict(positions=False)),
    (NO_FINAL_NORM_HINT, dict(final_norm=False)),
    (GPT_BLOCK_HINT.format(what="post-norm"), dict(block=dict(pre_norm=False))),
    (GPT_BLOCK_HINT.format(what="without the causal mask"), dict(block=dict(attention=dict(causal=False)))),
    (GPT_BLOCK_HINT.format(what="with unscaled scores"), dict(block=dict(attention=dict(scale=None)))),
]


def _diagnose_gpt(got: Any, case: Case) -> str | None:
    tokens, params, h = case.args["tokens"], case.args["params"], case.args["num_heads"]
    recipes = [(hint, lambda kw=kw: reference_gpt(tokens, params, h, **kw)) for hint, kw in _GPT_BUGS]
    return variant_hint(got, _variants(recipes), np.asarray(case.expected), case)


def gpt_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_gpt`: package GPTs with learned positions (with
    ``seed``, one more drawn from it)."""
    def case(description: str, batch: int, n: int, vocab: int, d_model: int, heads: int, layers: int,
             d_ff: int, seed: int) -> Case:
        model = package_gpt(vocab, seed, d_model=d_model, num_heads=heads, num_layers=layers, d_ff=d_ff)
        _randomise(model, seed)
        tokens = torch.randint(vocab, (batch, n), generator=torch.Generator().manual_seed(300 + seed))
        with torch.no_grad():
            expected = model(tokens)[0].numpy()
        return Case(description, args={"tokens": tokens, "params": gpt_params(model), "num_heads": heads},
                    expected=expected, atol=1e-4, rtol=RTOL, hint=GPT_EXPLAIN, diagnose=_diagnose_gpt)

    return [
        case("vocabulary 7, one block of 2 heads, d_model=8, 5 positions", 1, 5, 7, 8, 2, 1, 16, 0),
        case("the chapter's model: 2 blocks of 8 heads, d_model=64, batch 2, 64 positions",
             2, CONTEXT, 100, D_MODEL, NUM_HEADS, NUM_LAYERS, D_FF, 1),
        case("3 blocks of 4 heads, d_model=16, fewer positions than the table", 2, 9, 20, 16, 4, 3, 32, 2),
    ] + [case(f"drawn when graded: vocabulary {d['vocab']}, {d['layers']} block(s) of {d['heads']} head(s), "
              f"d_model={d['d_model']}, {d['n']} positions", d["batch"], d["n"], d["vocab"], d["d_model"],
              d["heads"], d["layers"], d["d_ff"], d["seed"]) for d in _drawn(seed)]


@allowing("torch operations (indexing, @, F.layer_norm) and your my_block.",
          library=TRANSFORMER_LAYERS)
def check_gpt(fn: Callable[..., Any]) -> CheckResult:
    """Check ``my_gpt(tokens, params, num_heads)``: its logits equal the package GPT's.

    ``params`` holds ``embedding (vocab, d_model)``, ``positions (max_len, d_model)``,
    ``blocks`` (a list of :func:`check_block`'s dicts), ``lnf_gain`` and ``lnf_bias``.
    Hints name a missing sqrt(d_model) scale, scaled or missing positions, a missing final
    norm, and blocks that are post-norm or whose attention lacks its mask or scaling.
    """
    return run_cases("check_gpt", fn, gpt_cases())


# --------------------------------------------------------------------------- 4. training

@torch.no_grad()
def heldout_bits(params: dict[str, Any], ids: torch.Tensor, num_heads: int = NUM_HEADS,
                 context: int = CONTEXT, batch_size: int = 64) -> float:
    """Held-out bits per character of ``params`` (the reference model, on the CPU): every
    character of non-overlapping windows of ``context``, each predicted from those before
    it in its window (as :func:`attncourse.recipes.lm.heldout_loss` scores)."""
    params = _detached(params)
    n_windows = (ids.numel() - 1) // context
    starts = torch.arange(n_windows) * context
    total = 0.0
    for first in range(0, n_windows, batch_size):
        windows = ids[starts[first:first + batch_size, None] + torch.arange(context + 1)]
        logits = reference_gpt(windows[:, :-1], params, num_heads)
        total += float(F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="sum"))
    return total / (n_windows * context) / math.log(2)


def _detached(params: dict[str, Any]) -> dict[str, Any]:
    def one(v):
        return v.detach().float().cpu() if isinstance(v, torch.Tensor) else v
    out = {k: one(v) for k, v in params.items()}
    out["blocks"] = [{k: one(v) for k, v in p.items()} for p in params["blocks"]]
    return out


@functools.lru_cache(maxsize=1)
def chapter_corpus() -> CharCorpus:
    """Chapter 7's corpus: the course's text, the last 10 % held out."""
    return char_corpus(course_text(), valid_fraction=0.1)


def training_cases() -> list[Case]:
    """The one case of :func:`check_training`: :data:`STEPS` steps from seed 0 on chapter 7's
    training text (the held-out text scores the result)."""
    corpus = chapter_corpus()
    train, vocab_size = corpus.train, len(corpus.vocab)
    return [Case(f"{STEPS} steps from seed 0, scored on the held-out text; passes at "
                 f"{TRAIN_BOUND} bits/char or less",
                 args={"data": train, "vocab_size": vocab_size, "steps": STEPS, "seed": 0},
                 expected=np.float64(TRAIN_BOUND), atol=1e-9, rtol=0.0, hint=TRAIN_SHORT_HINT,
                 diagnose=None)]


#: The learner's loop and what it returned in :func:`check_training`'s last run.
_LAST_TRAINING: dict[str, Any] = {}


def last_training(fn: Callable[..., Any]) -> tuple[dict, list[float]] | None:
    """The ``(params, losses)`` that :func:`check_training`'s last run got from ``fn``.

    That run is ``fn(data, vocab_size, STEPS, 0)`` on chapter 7's training text, on the
    CPU: on a CPU the chapter's own cell would train exactly the same model again, so it
    takes these instead. ``None`` if the last check ran another function (a learner who
    rewrote ``my_train`` since) or got no ``(params, losses)`` pair from it.
    """
    if _LAST_TRAINING.get("fn") is not fn:
        return None
    return _LAST_TRAINING["value"]


@allowing("torch: randn, zeros, ones, randint, torch.optim.AdamW, F.cross_entropy; your "
          "my_gpt; a progress bar (tqdm, or the course's progress_bar).",
          library=TRANSFORMER_LAYERS, allow=("attncourse.runtime.progress_bar",))
def check_training(fn: Callable[..., Any]) -> CheckResult:
    """Check ``my_train(data, vocab_size, steps, seed)`` -> ``(params, losses)``.

    Runs the learner's loop for :data:`STEPS` steps on chapter 7's training text (on the
    CPU, seed 0) and scores the parameters it returns on the held-out text with the
    reference model (:func:`heldout_bits`); passes at :data:`TRAIN_BOUND` bits/char or
    better. A failure says the held-out bits/char reached, and the hint tells targets
    equal to the inputs (the loss collapses) from a loop that does not learn. What the loop
    returned is kept for :func:`last_training`, so that the chapter need not train the same
    model twice.
    """
    _LAST_TRAINING.clear()
    valid = chapter_corpus().valid
    if is_stub(fn):  # "not passed yet", without training anything
        return run_cases("check_training", fn, training_cases())
    seen: dict[str, Any] = {}

    def scored(data, vocab_size, steps, seed):
        out = fn(data, vocab_size, steps, seed)
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], dict)):
            seen["shape"] = True
            return out
        params, losses = out
        _LAST_TRAINING.update(fn=fn, value=out)
        seen["losses"] = [float(v) for v in losses]
        bits = heldout_bits(params, valid)
        seen["bits"] = bits
        return np.float64(max(bits, TRAIN_BOUND))   # equal to the expected value when it passes

    def diagnose(got: Any, case: Case) -> str | None:
        if seen.get("shape"):
            return TRAIN_RETURN_HINT
        losses = seen.get("losses") or []
        if losses and min(losses[-10:]) / math.log(2) < 0.5:
            return TARGETS_NOT_SHIFTED_HINT
        if len(losses) >= 20 and np.mean(losses[-10:]) > 0.9 * np.mean(losses[:3]):
            return NOT_LEARNING_HINT
        return None

    cases = [Case(c.description, c.args, c.expected, atol=c.atol, rtol=c.rtol, hint=c.hint,
                  diagnose=diagnose) for c in training_cases()]
    result = run_cases("check_training", scored, cases, learner=fn)
    if "bits" in seen and result.passed:
        return replace(result, message=f"held-out {seen['bits']:.3f} bits/char after {STEPS} steps "
                                       f"(passes at {TRAIN_BOUND} or less)")
    if "bits" in seen and result.message.startswith("case 1"):
        return replace(result, message=f"case 1 of 1 failed: held-out {seen['bits']:.3f} bits/char after "
                                       f"{STEPS} steps from seed 0; passes at {TRAIN_BOUND} or less")
    return result


__all__ = [
    "BATCH_SIZE", "CONTEXT", "D_FF", "D_MODEL", "LR", "NUM_HEADS", "NUM_LAYERS", "STEPS", "TRAIN_BOUND",
    "Weights", "attention_weights", "block_params", "chapter_corpus", "check_block",
    "check_causal_attention", "check_gpt", "check_training", "gpt_params", "heldout_bits",
    "last_training", "load_params", "package_gpt", "reference_gpt", "training_cases",
]

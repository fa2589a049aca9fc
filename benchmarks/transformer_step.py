"""Training-step throughput of the course's Transformer against torch.nn.Transformer.

One step = forward (teacher forcing), label-smoothed cross-entropy, backward,
AdamW step (fused), on the same random batch every time. The reference is
``torch.nn.Transformer`` (batch_first, post-norm, ReLU) wrapped with the same
embeddings as ours: source and target embeddings scaled by sqrt(d_model),
sinusoidal positions, dropout on their sum, and a pre-softmax linear layer tied
to the target embedding. Our weights are copied into it and the logits are
asserted equal (dropout off) before timing, so both compute the same function.
To that end torch's two dropouts that the paper does not have (on the
attention weights and inside the feed-forward network) are switched off, as
are its final LayerNorms after each stack (a post-norm stack ends in one
already); dropout stays on embeddings and sublayer outputs (section 5.4).

Reported: target tokens per second (batch * tgt_len / step time) for both and
their ratio, ours-speed / torch-speed (>= 1: ours faster); on a device with a
known peak (or ``--peak-tflops``), the model FLOPs utilisation

    MFU = model FLOP/s / peak FLOP/s,

with the model FLOPs per step counted as in PaLM (Chowdhery et al. 2022,
appendix B): 6 per parameter per token that passes through it (2 forward,
4 backward) plus 12 * layers * d_model * context per token for the attention
scores and the weighted sums. The encoder's parameters see the source tokens,
the decoder's (and the output layer's) the target tokens; cross-attention has
the source as context. Embedding lookups are not counted. With
src_len = tgt_len = T this is 6 * N + 12 * (L_enc + 2 * L_dec) * d_model * T per
target token, N the parameters outside the source embedding.

The step is written as the fast training repositories write it (nanoGPT,
modded-nanogpt, nanochat): bfloat16 autocast (``--amp bf16``), fused AdamW
(weight decay 0: Adam's algorithm, Loshchilov and Hutter 2019), the output
layer's rows padded to a multiple of 64 (``--pad-vocab``; the logits are cut
back to the vocabulary before the loss, so the loss is the unpadded model's),
no read-back of the loss inside the step (the losses are summed on the device
and read once, after timing), the largest batch that fits (``--probe-batch``,
CUDA), and ``torch.compile(dynamic=False)`` with a persistent cache
(``--compile-cache DIR``: Inductor's FX graph cache and AOTAutograd's cache in
DIR, so a second run compiles in seconds). Which SDPA backend ran (flash,
efficient, cuDNN, math) is read from the profiler's operator names.

``--compile`` adds compiled rows (``ours+compile``, ``nanogpt+compile``) beside
the eager ones; ``nanogpt`` is a decoder-only model written as nanoGPT's
``model.py`` (Karpathy 2022: pre-norm blocks, fused QKV projection, causal
SDPA, GELU MLP, tied output layer) with encoder + decoder layers and a context
of src_len + tgt_len tokens, compared on model FLOP/s. If compiling fails (no
C compiler on a CPU, an Inductor error), one line says so and the eager rows
are still timed.

Usage: ``python benchmarks/transformer_step.py [--config small|base] [--device cuda] [--amp bf16] [--compile]
[--compile-cache DIR] [--json OUT]``
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import (  # noqa: E402  (sibling script)
    machine_info,
    print_machine,
    time_median,
    write_json,
)

from attncourse.nn import Transformer  # noqa: E402
from attncourse.nn.positional import SinusoidalPositionalEncoding  # noqa: E402
from attncourse.nn.rnn import PAD_ID  # noqa: E402
from attncourse.runtime import describe_device, pick_device  # noqa: E402

#: Architecture and batch presets; every entry can be overridden on the command line.
CONFIGS: dict[str, dict[str, int]] = {
    "small": {"d_model": 128, "num_heads": 4, "encoder_layers": 2, "decoder_layers": 2, "d_ff": 512,
              "batch": 32, "src_len": 32, "tgt_len": 32, "vocab": 1000},
    "base": {"d_model": 512, "num_heads": 8, "encoder_layers": 6, "decoder_layers": 6, "d_ff": 2048,
             "batch": 64, "src_len": 128, "tgt_len": 128, "vocab": 32000},
}

#: Dense bf16 peak TFLOP/s of SXM boards, by a substring of the GPU's name ("NVIDIA H100 80GB HBM3"
#: is the SXM H100). PCIe and NVL boards have lower peaks and need --peak-tflops.
PEAK_BF16_TFLOPS: dict[str, float] = {"H100 80GB HBM3": 989.0, "H100 SXM": 989.0, "H200": 989.0, "A100": 312.0}


class TorchSeq2Seq(nn.Module):
    """torch.nn.Transformer between the same embeddings and output layer as our Transformer.

    ``forward(src, src_mask, tgt_in) -> logits (batch, tgt_len, vocab)``, masks
    ``True`` at real tokens as in the course (inverted here for torch).
    """

    def __init__(self, vocab: int, d_model: int, num_heads: int, encoder_layers: int, decoder_layers: int,
                 d_ff: int, dropout: float, max_len: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.src_embedding = nn.Embedding(vocab, d_model, padding_idx=PAD_ID)
        self.tgt_embedding = nn.Embedding(vocab, d_model, padding_idx=PAD_ID)
        self.positional = SinusoidalPositionalEncoding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nested-tensor notices about the fast inference path
            self.transformer = nn.Transformer(
                d_model=d_model, nhead=num_heads, num_encoder_layers=encoder_layers,
                num_decoder_layers=decoder_layers, dim_feedforward=d_ff, dropout=dropout,
                activation="relu", batch_first=True, norm_first=False,
            )
        self.transformer.encoder.norm = None
        self.transformer.decoder.norm = None
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout = nn.Identity()  # torch's dropout between the two FFN linears
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = 0.0  # torch's dropout on the attention weights
        self.output_proj = nn.Linear(d_model, vocab, bias=False)
        self.output_proj.weight = self.tgt_embedding.weight

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        x = self.dropout(self.positional(self.src_embedding(src) * scale))
        y = self.dropout(self.positional(self.tgt_embedding(tgt_in) * scale))
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device, dtype=x.dtype)
        hidden = self.transformer(x, y, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=~src_mask,
                                  memory_key_padding_mask=~src_mask)
        return self.output_proj(hidden)


def copy_weights(ours: Transformer, theirs: TorchSeq2Seq) -> None:
    """Load our parameters into the reference (torch packs W^Q, W^K, W^V into one in_proj)."""

    def attention(a, b):
        b.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        b.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        b.out_proj.weight.copy_(a.w_o.weight)
        b.out_proj.bias.copy_(a.w_o.bias)

    def same(a, b):
        b.weight.copy_(a.weight)
        if getattr(a, "bias", None) is not None:
            b.bias.copy_(a.bias)

    with torch.no_grad():
        same(ours.src_embedding, theirs.src_embedding)
        same(ours.tgt_embedding, theirs.tgt_embedding)
        for a, b in zip(ours.encoder_layers, theirs.transformer.encoder.layers):
            attention(a.self_attn, b.self_attn)
            for x, y in ((a.ffn.w_1, b.linear1), (a.ffn.w_2, b.linear2), (a.self_attn_norm, b.norm1),
                         (a.ffn_norm, b.norm2)):
                same(x, y)
        for a, b in zip(ours.decoder_layers, theirs.transformer.decoder.layers):
            attention(a.self_attn, b.self_attn)
            attention(a.cross_attn, b.multihead_attn)
            for x, y in ((a.ffn.w_1, b.linear1), (a.ffn.w_2, b.linear2), (a.self_attn_norm, b.norm1),
                         (a.cross_attn_norm, b.norm2), (a.ffn_norm, b.norm3)):
                same(x, y)


def count_params(module: nn.Module) -> int:
    """Distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


def model_flops_per_step(model: Transformer, batch: int, src_len: int, tgt_len: int,
                         vocab_padding: int = 0) -> float:
    """PaLM-style model FLOPs of one training step (see the module docstring); padded vocabulary rows uncounted."""
    n_enc = sum(count_params(layer) for layer in model.encoder_layers)
    n_dec = count_params(model) - n_enc - model.src_embedding.weight.numel()  # decoder layers + tied output
    n_dec -= vocab_padding * model.d_model
    d, l_enc, l_dec = model.d_model, len(model.encoder_layers), len(model.decoder_layers)
    per_src_token = 6 * n_enc + 12 * l_enc * d * src_len
    per_tgt_token = 6 * n_dec + 12 * l_dec * d * (tgt_len + src_len)
    return float(batch * (src_len * per_src_token + tgt_len * per_tgt_token))


def peak_tflops(device: torch.device, given: float | None) -> tuple[float | None, str]:
    """Peak TFLOP/s to divide by, and where it came from."""
    if given is not None:
        return given, "--peak-tflops"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in PEAK_BF16_TFLOPS.items():
            if key in name and "PCIe" not in name and "NVL" not in name:
                return value, f"{key} bf16 dense"
    return None, "unknown (pass --peak-tflops)"


class NanoGPT(nn.Module):
    """A decoder-only model written as nanoGPT's ``model.py`` (Karpathy 2022; GPT-2, Radford et al. 2019).

    Pre-norm blocks: LayerNorm, causal self-attention with one fused QKV
    projection and :func:`torch.nn.functional.scaled_dot_product_attention`
    (``is_causal=True``), LayerNorm, MLP with GELU; learned positions; a final
    LayerNorm and an output layer tied to the token embedding.
    ``forward(idx (batch, seq)) -> logits (batch, seq, vocab)``.
    """

    def __init__(self, vocab: int, d_model: int, num_heads: int, layers: int, d_ff: int, dropout: float,
                 max_len: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln_1": nn.LayerNorm(d_model), "c_attn": nn.Linear(d_model, 3 * d_model),
            "c_proj": nn.Linear(d_model, d_model), "ln_2": nn.LayerNorm(d_model),
            "c_fc": nn.Linear(d_model, d_ff), "mlp_proj": nn.Linear(d_ff, d_model),
        }) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for module in self.modules():  # nanoGPT's initialisation: N(0, 0.02), zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(t, device=idx.device)))
        for blk in self.blocks:
            q, k, v = blk["c_attn"](blk["ln_1"](x)).split(x.shape[-1], dim=2)
            q, k, v = (z.view(b, t, self.num_heads, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.drop(blk["c_proj"](y.transpose(1, 2).reshape(b, t, -1)))
            x = x + self.drop(blk["mlp_proj"](F.gelu(blk["c_fc"](blk["ln_2"](x)))))
        return self.lm_head(self.ln_f(x))


def nanogpt_flops_per_step(model: NanoGPT, batch: int, seq_len: int, vocab_padding: int = 0) -> float:
    """PaLM-style model FLOPs of one step of :class:`NanoGPT` (6 N + 12 L d T per token, N without positions)."""
    d = model.wte.weight.shape[1]
    n = count_params(model) - model.wpe.weight.numel() - vocab_padding * d
    return float(batch * seq_len * (6 * n + 12 * len(model.blocks) * d * seq_len))


def padded_vocab(vocab: int, multiple: int) -> int:
    """``vocab`` rounded up to a multiple of ``multiple`` (output-layer rows that tile the GPU's matmuls)."""
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    return -(-vocab // multiple) * multiple


def step_loss(logits: torch.Tensor, targets: torch.Tensor, vocab: int) -> torch.Tensor:
    """Label-smoothed cross-entropy over the first ``vocab`` logits (the padded rows are cut off).

    ``logits (batch, len, padded_vocab)``, ``targets (batch, len)``; the padded
    rows get no probability, so the loss equals the unpadded model's.
    """
    return F.cross_entropy(logits[..., :vocab].float().flatten(0, 1), targets.flatten(), ignore_index=PAD_ID,
                           label_smoothing=0.1)


#: Profiler operator name -> SDPA backend (CPU and CUDA).
SDPA_OPS: dict[str, str] = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "aten::_scaled_dot_product_attention_math": "math",
}


def sdpa_backends(fn: Callable[[], object]) -> dict[str, int]:
    """Which SDPA backends one call of ``fn`` ran, counted by the profiler's operator names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    counts: dict[str, int] = {}
    for event in prof.key_averages():
        if event.key in SDPA_OPS:
            counts[SDPA_OPS[event.key]] = counts.get(SDPA_OPS[event.key], 0) + event.count
    return counts


def largest_batch(fits: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest of start, 2 start, 4 start, ... <= ``limit`` for which ``fits(batch)`` is true.

    ``fits`` runs one training step and returns False when it runs out of memory.
    Returns ``start`` if even it does not fit (the timing then says so).
    """
    best, batch = start, start
    while batch <= limit:
        if not fits(batch):
            break
        best, batch = batch, batch * 2
    return best


def make_step(model: nn.Module, forward: Callable[[], torch.Tensor], targets: torch.Tensor, vocab: int,
              device: torch.device, amp: str | None) -> tuple[Callable[[], None], Callable[[], float]]:
    """One training step on a fixed batch, and the mean loss of the steps so far (read once, after timing).

    Forward under bf16 autocast (``amp="bf16"``), label-smoothed loss, backward,
    AdamW without weight decay (fused on CUDA and the CPU). The loss is summed on
    the device: the step reads nothing back (only CUDA's synchronize, for the timer).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                                  fused=device.type in ("cuda", "cpu"))
    total = torch.zeros((), dtype=torch.float32, device=device)
    count = [0]

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if amp == "bf16"
                    else contextlib.nullcontext())
        with autocast:
            logits = forward()
        loss = step_loss(logits, targets, vocab)
        loss.backward()
        optimizer.step()
        total.add_(loss.detach())
        count[0] += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def mean_loss() -> float:
        return float(total) / max(count[0], 1)

    return step, mean_loss


def use_compile_cache(folder: str | Path) -> None:
    """Point Inductor's caches at ``folder`` (FX graph cache and AOTAutograd cache on), before compiling."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(folder).resolve())
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = True
    except (ImportError, AttributeError):  # older torch: the FX graph cache alone
        pass


def cache_counters() -> dict[str, int]:
    """Inductor's FX graph cache hits and misses (and AOTAutograd's) so far in this process."""
    from torch._dynamo.utils import counters

    return {key: int(counters[group][key]) for group, keys in
            (("inductor", ("fxgraph_cache_hit", "fxgraph_cache_miss")),
             ("aot_autograd", ("autograd_cache_hit", "autograd_cache_miss"))) for key in keys}


MODEL_NAMES = ("torch", "ours", "nanogpt", "ours+compile", "nanogpt+compile")


def run(device: torch.device, cfg: dict, dropout: float, amp: str | None, min_run_time: float, warmup: int,
        given_peak: float | None, seed: int = 0, compile: bool = False, pad_vocab: int = 64,
        models: tuple[str, ...] | None = None, warm_only: bool = False, probe_limit: int | None = None) -> dict:
    """Build the models with the same weights, check ours against torch's, time their training steps.

    ``models`` picks rows of :data:`MODEL_NAMES` (default: the eager three, plus the
    compiled two with ``compile``); ``warm_only`` compiles and runs the warm-up steps
    but times nothing (it fills the compile cache); ``probe_limit`` (CUDA) doubles the
    batch while a step of ours fits, up to that many pairs.
    """
    if models is None:
        models = ("torch", "ours", "nanogpt") + (("ours+compile", "nanogpt+compile") if compile else ())
    torch.manual_seed(seed)
    vocab = cfg["vocab"]
    vp = padded_vocab(vocab, pad_vocab)
    if probe_limit is not None:
        if device.type == "cuda":
            cfg = {**cfg, "batch": probe_largest_batch(device, cfg, dropout, amp, vp, probe_limit)}
            print(f"batch probe: {cfg['batch']} pairs is the largest of the doublings up to {probe_limit} that fit")
        else:
            print(f"batch probe: CUDA only; batch {cfg['batch']}")
    batch, src_len, tgt_len = cfg["batch"], cfg["src_len"], cfg["tgt_len"]
    arch = dict(d_model=cfg["d_model"], num_heads=cfg["num_heads"], d_ff=cfg["d_ff"], dropout=dropout,
                max_len=max(src_len, tgt_len))
    ours = Transformer(vp, vp, num_encoder_layers=cfg["encoder_layers"],
                       num_decoder_layers=cfg["decoder_layers"], **arch).to(device)
    theirs = TorchSeq2Seq(vp, encoder_layers=cfg["encoder_layers"], decoder_layers=cfg["decoder_layers"],
                          **arch).to(device)
    copy_weights(ours, theirs)
    n_ours, n_theirs = count_params(ours), count_params(theirs)
    assert n_ours == n_theirs, f"parameter counts differ: ours {n_ours}, torch {n_theirs}"
    gpt_len = src_len + tgt_len
    gpt = NanoGPT(vp, cfg["d_model"], cfg["num_heads"], cfg["encoder_layers"] + cfg["decoder_layers"], cfg["d_ff"],
                  dropout, gpt_len).to(device)

    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, src_len), generator=gen).to(device)
    tgt = torch.randint(4, vocab, (batch, tgt_len + 1), generator=gen).to(device)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    seq = torch.randint(4, vocab, (batch, gpt_len + 1), generator=gen).to(device)
    src_mask = torch.ones(batch, src_len, dtype=torch.bool, device=device)

    ours.eval()
    theirs.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's nested-tensor notice on its inference path
        tol = 1e-4 if device.type == "cpu" else 2e-3
        torch.testing.assert_close(ours(src, src_mask, tgt_in).logits, theirs(src, src_mask, tgt_in),
                                   atol=tol, rtol=tol)
    ours.train()
    theirs.train()

    flops = model_flops_per_step(ours, batch, src_len, tgt_len, vocab_padding=vp - vocab)
    gpt_flops = nanogpt_flops_per_step(gpt, batch, gpt_len, vocab_padding=vp - vocab)
    with (torch.autocast(device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext()), \
            torch.no_grad():
        backends = sdpa_backends(lambda: ours(src, src_mask, tgt_in))
        backends_gpt = sdpa_backends(lambda: gpt(seq[:, :-1]))

    def build(name: str) -> tuple[Callable[[], None], Callable[[], float], float]:
        base = name.split("+")[0]
        module = {"torch": theirs, "ours": ours, "nanogpt": gpt}[base]
        call = torch.compile(module, dynamic=False) if name.endswith("+compile") else module
        if base == "ours":
            step, loss = make_step(module, lambda: call(src, src_mask, tgt_in).logits, tgt_out, vocab, device, amp)
        elif base == "torch":
            step, loss = make_step(module, lambda: call(src, src_mask, tgt_in), tgt_out, vocab, device, amp)
        else:
            step, loss = make_step(module, lambda: call(seq[:, :-1]), seq[:, 1:], vocab, device, amp)
        return step, loss, gpt_flops if base == "nanogpt" else flops

    peak, peak_source = peak_tflops(device, given_peak)
    result = {"device": describe_device(device), "precision": "bf16" if amp else "float32", "config": cfg,
              "compile": any(name.endswith("+compile") for name in models), "dropout": dropout,
              "n_params": n_ours, "vocab_padded": vp,
              "flops_per_step": flops, "nanogpt_flops_per_step": gpt_flops, "peak_tflops": peak,
              "peak_source": peak_source, "sdpa_backends": {"ours": backends, "nanogpt": backends_gpt},
              "models": {}, "failed": {}}
    tokens = batch * tgt_len
    print(f"device: {describe_device(device)}; precision: {'bf16 autocast' if amp else 'float32'}; "
          f"fused AdamW; vocabulary {vocab} padded to {vp}")
    print(f"d_model={cfg['d_model']}, heads={cfg['num_heads']}, layers={cfg['encoder_layers']}+"
          f"{cfg['decoder_layers']}, d_ff={cfg['d_ff']}, dropout={dropout}, vocab={vocab}, batch={batch}, "
          f"src_len={src_len}, tgt_len={tgt_len}; {n_ours:,} parameters each; "
          f"{flops / tokens / 1e6:.1f} MFLOP per target token (PaLM count)")
    print(f"nanoGPT: {cfg['encoder_layers'] + cfg['decoder_layers']} layers, context {gpt_len}; "
          f"{gpt_flops / (batch * gpt_len) / 1e6:.1f} MFLOP per token")
    print(f"SDPA backends that ran (calls per forward): ours {backends or 'none'}, nanoGPT {backends_gpt or 'none'}")
    for name in models:
        step, loss, step_flops = build(name)
        counters_before = cache_counters() if name.endswith("+compile") else {}
        start = time.perf_counter()
        try:
            for _ in range(warmup):
                step()
        except Exception as err:  # noqa: BLE001  (a compiler or driver error: say so in one line, carry on)
            first = (str(err).strip().splitlines() or [""])[0][:200]
            print(f"{name}: failed in its first steps ({type(err).__name__}: {first}); carrying on without it")
            result["failed"][name] = f"{type(err).__name__}: {first}"
            continue
        warm_seconds = time.perf_counter() - start
        row: dict[str, Any] = {"warmup_seconds": warm_seconds}
        if name.endswith("+compile"):
            after = cache_counters()
            row["cache"] = {key: after[key] - counters_before.get(key, 0) for key in after}
            print(f"{name}: compiled and {warmup} warm-up steps in {warm_seconds:.1f} s; cache {row['cache']}")
        if not warm_only:
            seconds = time_median(step, min_run_time)
            achieved = step_flops / seconds
            row.update({"step_ms": seconds * 1e3, "tokens_per_s": batch * (gpt_len if name.startswith("nano")
                                                                              else tgt_len) / seconds,
                        "tflops": achieved / 1e12, "mfu": achieved / (peak * 1e12) if peak else None,
                        "mean_loss": loss()})
        result["models"][name] = row
    if warm_only:
        return result
    peak_text = f"{peak:g} TFLOP/s ({peak_source})" if peak else peak_source
    print(f"median step time; tokens/s counts target tokens (nanoGPT: every token); MFU against peak {peak_text}")
    print(f"{'model':>16} {'step ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>7} {'loss':>7}")
    for name, row in result["models"].items():
        mfu_text = f"{row['mfu'] * 100:6.2f}%" if row["mfu"] is not None else f"{'-':>7}"
        print(f"{name:>16} {row['step_ms']:9.2f} {row['tokens_per_s']:10.0f} {row['tflops']:8.4f} {mfu_text} "
              f"{row['mean_loss']:7.3f}")
    timed = result["models"]

    def ratio(a: str, b: str) -> float | None:  # model FLOP/s of a over b (speed, where both do the same work)
        return timed[a]["tflops"] / timed[b]["tflops"] if a in timed and b in timed else None

    result["ratios"] = {"ours_vs_torch": ratio("ours", "torch"), "compiled_vs_eager": ratio("ours+compile", "ours"),
                        "ours_vs_nanogpt": ratio("ours", "nanogpt"),
                        "ours_compiled_vs_nanogpt_compiled": ratio("ours+compile", "nanogpt+compile"),
                        "nanogpt_compiled_vs_eager": ratio("nanogpt+compile", "nanogpt")}
    result["ratio"] = result["ratios"]["ours_vs_torch"]
    shown = ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items() if v is not None)
    print(f"ratios of model FLOP/s (>= 1: the first faster): {shown}")
    return result


def probe_largest_batch(device: torch.device, cfg: dict, dropout: float, amp: str | None, vp: int,
                        limit: int) -> int:
    """CUDA: the largest doubling of ``cfg['batch']`` (up to ``limit``) at which one step of ours fits."""

    def fits(batch: int) -> bool:
        model = None
        try:
            model = Transformer(vp, vp, num_encoder_layers=cfg["encoder_layers"],
                                num_decoder_layers=cfg["decoder_layers"], d_model=cfg["d_model"],
                                num_heads=cfg["num_heads"], d_ff=cfg["d_ff"], dropout=dropout,
                                max_len=max(cfg["src_len"], cfg["tgt_len"])).to(device)
            src = torch.randint(4, cfg["vocab"], (batch, cfg["src_len"]), device=device)
            tgt = torch.randint(4, cfg["vocab"], (batch, cfg["tgt_len"] + 1), device=device)
            mask = torch.ones_like(src, dtype=torch.bool)
            step, _ = make_step(model, lambda: model(src, mask, tgt[:, :-1]).logits, tgt[:, 1:], cfg["vocab"],
                                device, amp)
            step()
            step()  # the optimizer's state exists from the first step on
            return True
        except torch.cuda.OutOfMemoryError:
            return False
        finally:
            model = None  # noqa: F841  (frees the weights before empty_cache)
            torch.cuda.empty_cache()

    return largest_batch(fits, cfg["batch"], limit)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small",
                        help="preset: small (CPU-sized, default) or base (Vaswani et al. 2017, Table 3)")
    for key in CONFIGS["small"]:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, help="overrides the preset")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: best available)")
    parser.add_argument("--amp", choices=["bf16"], default=None, help="bf16 autocast (CUDA)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak TFLOP/s for MFU (default: bf16 dense peak of a known GPU)")
    parser.add_argument("--compile", action="store_true",
                        help="also time ours and nanoGPT under torch.compile(dynamic=False); compile time is "
                             "reported apart, not timed")
    parser.add_argument("--compile-cache", metavar="DIR", default=None,
                        help="Inductor's persistent cache folder (TORCHINDUCTOR_CACHE_DIR; FX graph and "
                             "AOTAutograd caches on): a second run with the same folder compiles in seconds")
    parser.add_argument("--models", nargs="+", choices=MODEL_NAMES, default=None,
                        help="rows to time (default: torch ours nanogpt, plus the compiled two with --compile)")
    parser.add_argument("--warm-only", action="store_true",
                        help="compile and run the warm-up steps, time nothing (fills --compile-cache)")
    parser.add_argument("--pad-vocab", type=int, default=64,
                        help="output-layer rows padded to a multiple of this (1: none); the loss ignores them")
    parser.add_argument("--probe-batch", type=int, default=None, metavar="MAX",
                        help="CUDA: double --batch while a step fits, up to MAX pairs, and time the largest")
    parser.add_argument("--min-run-time", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="also write the table and machine info to this file")
    args = parser.parse_args(argv)
    cfg = {key: (getattr(args, key) if getattr(args, key) is not None else value)
           for key, value in CONFIGS[args.config].items()}
    device = pick_device(args.device)
    if args.amp and device.type != "cuda":
        parser.error("--amp bf16 is for CUDA devices")
    if args.compile_cache:
        use_compile_cache(args.compile_cache)
    info = machine_info([device])
    print_machine(info)
    result = run(device, cfg, args.dropout, args.amp, args.min_run_time, args.warmup, args.peak_tflops, args.seed,
                 args.compile, pad_vocab=args.pad_vocab, models=tuple(args.models) if args.models else None,
                 warm_only=args.warm_only, probe_limit=args.probe_batch)
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"} | {"resolved": cfg}
        write_json(args.json, "transformer_step", info, settings, [result])
    return result


if __name__ == "__main__":
    main()

"""Training-step throughput of the course's Transformer against torch.nn.Transformer.

One step = forward (teacher forcing), label-smoothed cross-entropy, backward,
Adam step, on the same random batch every time. The reference is
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

Usage: ``python benchmarks/transformer_step.py [--config small|base] [--device cuda] [--amp bf16] [--json OUT]``
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

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


def model_flops_per_step(model: Transformer, batch: int, src_len: int, tgt_len: int) -> float:
    """PaLM-style model FLOPs of one training step (see the module docstring)."""
    n_enc = sum(count_params(layer) for layer in model.encoder_layers)
    n_dec = count_params(model) - n_enc - model.src_embedding.weight.numel()  # decoder layers + tied output
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


def make_step(model: nn.Module, forward: Callable[[], torch.Tensor], targets: torch.Tensor,
              device: torch.device, amp: str | None) -> Callable[[], float]:
    """One training step on a fixed batch: forward, label-smoothed loss, backward, Adam (fused on CUDA)."""
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **fused)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if amp == "bf16"
                    else contextlib.nullcontext())
        with autocast:
            logits = forward()
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=PAD_ID,
                               label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def run(device: torch.device, cfg: dict, dropout: float, amp: str | None, min_run_time: float, warmup: int,
        given_peak: float | None, seed: int = 0, compile: bool = False) -> dict:
    """Build both models with the same weights, check they agree, time their training steps."""
    torch.manual_seed(seed)
    batch, src_len, tgt_len, vocab = cfg["batch"], cfg["src_len"], cfg["tgt_len"], cfg["vocab"]
    arch = dict(d_model=cfg["d_model"], num_heads=cfg["num_heads"], d_ff=cfg["d_ff"], dropout=dropout,
                max_len=max(src_len, tgt_len))
    ours = Transformer(vocab, vocab, num_encoder_layers=cfg["encoder_layers"],
                       num_decoder_layers=cfg["decoder_layers"], **arch).to(device)
    theirs = TorchSeq2Seq(vocab, encoder_layers=cfg["encoder_layers"], decoder_layers=cfg["decoder_layers"],
                          **arch).to(device)
    copy_weights(ours, theirs)
    n_ours, n_theirs = count_params(ours), count_params(theirs)
    assert n_ours == n_theirs, f"parameter counts differ: ours {n_ours}, torch {n_theirs}"

    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, src_len), generator=gen).to(device)
    tgt = torch.randint(4, vocab, (batch, tgt_len + 1), generator=gen).to(device)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
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

    run_theirs = torch.compile(theirs) if compile else theirs
    run_ours = torch.compile(ours) if compile else ours
    steps = {
        "torch": make_step(theirs, lambda: run_theirs(src, src_mask, tgt_in), tgt_out, device, amp),
        "ours": make_step(ours, lambda: run_ours(src, src_mask, tgt_in).logits, tgt_out, device, amp),
    }
    for step in steps.values():
        for _ in range(warmup):
            step()
    seconds = {name: time_median(step, min_run_time) for name, step in steps.items()}

    tokens = batch * tgt_len
    flops = model_flops_per_step(ours, batch, src_len, tgt_len)
    peak, peak_source = peak_tflops(device, given_peak)
    print(f"device: {describe_device(device)}; precision: {'bf16 autocast' if amp else 'float32'}")
    print(f"d_model={cfg['d_model']}, heads={cfg['num_heads']}, layers={cfg['encoder_layers']}+"
          f"{cfg['decoder_layers']}, d_ff={cfg['d_ff']}, dropout={dropout}, vocab={vocab}, batch={batch}, "
          f"src_len={src_len}, tgt_len={tgt_len}; {n_ours:,} parameters each; "
          f"{flops / tokens / 1e6:.1f} MFLOP per target token (PaLM count)")
    peak_text = f"{peak:g} TFLOP/s ({peak_source})" if peak else peak_source
    print(f"median step time; ratio = ours-speed / torch-speed (>= 1: ours faster); MFU against peak {peak_text}")
    print(f"{'model':>6} {'step ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>7} {'ratio':>6}")
    result = {"device": describe_device(device), "precision": "bf16" if amp else "float32", "config": cfg,
              "compile": compile,
              "dropout": dropout, "n_params": n_ours, "flops_per_step": flops, "peak_tflops": peak,
              "peak_source": peak_source, "models": {}}
    for name in ("torch", "ours"):
        achieved = flops / seconds[name]
        mfu = achieved / (peak * 1e12) if peak else None
        ratio = seconds["torch"] / seconds[name]
        mfu_text = f"{mfu * 100:6.2f}%" if mfu is not None else f"{'-':>7}"
        print(f"{name:>6} {seconds[name] * 1e3:9.2f} {tokens / seconds[name]:10.0f} {achieved / 1e12:8.4f} "
              f"{mfu_text} {ratio:6.2f}")
        result["models"][name] = {"step_ms": seconds[name] * 1e3, "tokens_per_s": tokens / seconds[name],
                                  "tflops": achieved / 1e12, "mfu": mfu}
    result["ratio"] = seconds["torch"] / seconds["ours"]
    return result


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
                        help="torch.compile both models (Inductor) before timing; compile time is not timed")
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
    info = machine_info([device])
    print_machine(info)
    result = run(device, cfg, args.dropout, args.amp, args.min_run_time, args.warmup, args.peak_tflops, args.seed,
                 args.compile)
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"} | {"resolved": cfg}
        write_json(args.json, "transformer_step", info, settings, [result])
    return result


if __name__ == "__main__":
    main()

"""Time and memory of textbook attention, the course's tiled FlashAttention and PyTorch's SDPA.

Causal self-attention on ``(batch, heads, n, d_k)``, float32 on the CPU (float16 on CUDA
with ``--half``), side by side in one run for each length n:

- ``textbook``: ``attncourse.functional.attention``, softmax(QK^T / sqrt(d_k)) V with the
  n x n weights materialised (autograd keeps them for the backward pass);
- ``tiled``: ``attncourse.functional.flash_attention``, the course's FlashAttention (online
  softmax over tiles in Python loops, backward recomputing the weights from the saved
  log-sum-exp);
- ``SDPA``: ``torch.nn.functional.scaled_dot_product_attention`` with PyTorch's default
  backend choice (the fused CPU flash kernel on a CPU, FlashAttention-2 or the
  memory-efficient kernel on CUDA).

The three outputs are checked equal first. Columns: each path's time as a ratio **time /
SDPA time** (above 1: slower than SDPA), for the forward pass and for forward + backward;
``saved MiB``: bytes autograd keeps for the backward pass (counted with
``torch.autograd.graph.saved_tensors_hooks``: exact, the same on every run); on CUDA also
``peak MiB``: ``torch.cuda.max_memory_allocated`` during forward + backward, beyond the inputs.

Usage: ``python benchmarks/flash_attention.py [--device all|cpu|cuda] [--lengths 256 1024 4096]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import run_on_devices, time_median  # noqa: E402

from attncourse.functional import (  # noqa: E402
    attention,
    flash_attention,
    saved_tensor_bytes,
)
from attncourse.runtime import describe_device  # noqa: E402

PATHS = ("textbook", "tiled", "sdpa")


def peak_bytes(fn, device: torch.device) -> int | None:
    """Peak CUDA memory allocated while ``fn()`` runs, beyond what was allocated before; None on a CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def run(device: torch.device, lengths, batch: int, heads: int, d_k: int, block: int, half: bool,
        min_run_time: float, seed: int) -> list[dict]:
    dtype = torch.float16 if half and device.type == "cuda" else torch.float32
    print(f"\ndevice: {describe_device(device)}; batch={batch}, heads={heads}, d_k={d_k}, causal, "
          f"{str(dtype).replace('torch.', '')}, tiles {block} x {block}; ratios are time / SDPA time (medians)")
    print(f"{'n':>6} {'pass':>8} {'SDPA':>10} {'textbook':>9} {'tiled':>8} {'saved MiB: textbook':>20} "
          f"{'tiled':>7} {'SDPA':>7} {'peak MiB: textbook':>19} {'tiled':>7} {'SDPA':>7}")
    torch.manual_seed(seed)
    fns = {
        "textbook": lambda q, k, v: attention(q, k, v, mask=causal[: q.shape[-2], : k.shape[-2]])[0],
        "tiled": lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_q=block, block_k=block),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    rows = []
    for n in lengths:
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        q, k, v = (torch.randn(batch, heads, n, d_k, device=device, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        with torch.no_grad():
            ref = fns["sdpa"](q, k, v)
            tol = 2e-3 if dtype == torch.float16 else 1e-4
            for name in ("textbook", "tiled"):
                torch.testing.assert_close(fns[name](q, k, v), ref, rtol=tol, atol=tol)
        saved = {name: saved_tensor_bytes(fn, q, k, v) for name, fn in fns.items()}
        for label, backward in (("forward", False), ("fwd+bwd", True)):
            def step(fn):
                def go():
                    if backward:
                        fn(q, k, v).sum().backward()
                    else:
                        with torch.no_grad():
                            fn(q, k, v)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                return go

            times = {name: time_median(step(fn), min_run_time) for name, fn in fns.items()}
            peaks = {name: peak_bytes(step(fn), device) for name, fn in fns.items()}
            row = {"device": str(device), "n": n, "pass": label, "sdpa_ms": times["sdpa"] * 1e3}
            for name in PATHS:
                row[f"{name}_ms"] = times[name] * 1e3
                row[f"{name}_ratio"] = times[name] / times["sdpa"]
                row[f"{name}_saved_mib"] = saved[name] / 2**20
                row[f"{name}_peak_mib"] = None if peaks[name] is None else peaks[name] / 2**20
            rows.append(row)
            peak_text = " ".join(f"{'-' if row[f'{p}_peak_mib'] is None else format(row[f'{p}_peak_mib'], '.1f'):>{w}}"
                                 for p, w in zip(PATHS, (19, 7, 7)))
            print(f"{n:>6} {label:>8} {row['sdpa_ms']:8.3f}ms {row['textbook_ratio']:9.2f} "
                  f"{row['tiled_ratio']:8.2f} {row['textbook_saved_mib']:20.1f} {row['tiled_saved_mib']:7.1f} "
                  f"{row['sdpa_saved_mib']:7.1f} {peak_text}")
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="all",
                        help="all (the CPU, and CUDA when available; default), cpu, cuda, cuda:1, ...")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-k", type=int, default=64)
    parser.add_argument("--block", type=int, default=128, help="block_q = block_k of the tiled path")
    parser.add_argument("--half", action="store_true", help="float16 on CUDA (the CPU stays float32)")
    parser.add_argument("--min-run-time", type=float, default=0.5, help="seconds per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="also write the table and machine info to this file")
    args = parser.parse_args(argv)
    return run_on_devices(args, "flash_attention", lambda device: run(
        device, args.lengths, args.batch, args.heads, args.d_k, args.block, args.half, args.min_run_time,
        args.seed))


if __name__ == "__main__":
    main()

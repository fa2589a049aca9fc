"""Speed of the course's self-attention paths against PyTorch's fused kernel.

Compares, side by side in one run and reported as ratios to
``torch.nn.functional.scaled_dot_product_attention``:

- ``attncourse.functional.attention`` (torch, explicit softmax(QK^T/sqrt(d_k))V),
- ``attncourse.functional.scaled_dot_product_attention`` (NumPy, one head at a
  time: the teaching path, forward only, not meant to be fast).

Usage: ``python benchmarks/self_attention.py [--device cpu|cuda] [--lengths 32 128 512] [--json OUT]``
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import machine_info, write_json  # noqa: E402  (sibling script)

from attncourse.functional import attention, scaled_dot_product_attention  # noqa: E402
from attncourse.runtime import describe_device, pick_device  # noqa: E402


def _time(fn, min_run_time: float) -> float:
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median


def run(device: torch.device, lengths, batch: int, num_heads: int, d_k: int, min_run_time: float) -> list[dict]:
    """Time the three paths at every length; the printed table's rows (times in ms)."""
    rows = []
    print(f"device: {describe_device(device)}; torch {torch.__version__}; {platform.processor() or platform.machine()}")
    print(f"shape: (batch={batch}, num_heads={num_heads}, seq_len, d_k={d_k}), float32; times are medians")
    print(f"{'seq_len':>7} {'pass':>9} {'torch SDPA':>11} {'ours/SDPA':>10} {'numpy/SDPA':>11}")
    for n in lengths:
        q, k, v = (torch.randn(batch, num_heads, n, d_k, device=device, requires_grad=True) for _ in range(3))
        qn, kn, vn = (t.detach().cpu().numpy()[0, 0] for t in (q, k, v))

        def numpy_path():
            for _ in range(batch * num_heads):
                scaled_dot_product_attention(qn, kn, vn)

        for label, backward in (("forward", False), ("fwd+bwd", True)):
            def step(f):
                def go():
                    out = f(q, k, v)
                    out = out[0] if isinstance(out, tuple) else out
                    if backward:
                        out.sum().backward()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                return go

            t_ref = _time(step(F.scaled_dot_product_attention), min_run_time)
            t_ours = _time(step(attention), min_run_time)
            t_numpy = _time(numpy_path, min_run_time) if not backward else None
            numpy_ratio = f"{t_numpy / t_ref:11.2f}" if t_numpy is not None else f"{'-':>11}"
            print(f"{n:>7} {label:>9} {t_ref * 1e3:9.3f}ms {t_ours / t_ref:10.2f} {numpy_ratio}")
            rows.append({"seq_len": n, "pass": label, "sdpa_ms": t_ref * 1e3, "ours_over_sdpa": t_ours / t_ref,
                         "numpy_over_sdpa": None if t_numpy is None else t_numpy / t_ref})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: best available)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512, 1024])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--d-k", type=int, default=64)
    parser.add_argument("--min-run-time", type=float, default=0.5, help="seconds per measurement")
    parser.add_argument("--json", metavar="OUT", help="also write the table and machine info to this file")
    args = parser.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)
    device = pick_device(args.device)
    rows = run(device, args.lengths, args.batch, args.num_heads, args.d_k, args.min_run_time)
    if args.json:
        write_json(args.json, "self_attention", machine_info([device]), vars(args), rows)


if __name__ == "__main__":
    main()

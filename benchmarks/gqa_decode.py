"""Speed of one decoding step with a KV cache, for 1 to h key/value heads (MQA, GQA, MHA).

One new token per sequence attends over a cache of S earlier positions, as in
generation with :class:`attncourse.nn.causal_attention.CausalSelfAttention` (chapter 7):
project the token, append its key and value to the cache (chapter 6's
``KVCache``), attend, mix the heads with W^O. Timed side by side in one run:

- ``ours``: ``CausalSelfAttention(d_model, h, num_kv_heads)`` with its cache;
- ``torch``: the same projections, ``torch.cat`` onto the cache and
  ``F.scaled_dot_product_attention(..., enable_gqa=True)``, which shares the
  key/value heads without expanding them.

Both are checked equal before timing. For each S and number of key/value heads
the table gives our time, the ratio **torch time / our time** (1.00: as fast;
ours calls SDPA with ``enable_gqa`` too, so the ratio measures our module's
overhead: the cache append, the mask logic) and the cache's bytes for the batch.
With fewer key/value heads there is less cache to read: the time per step falls
once S is large (on CPU it did so only with ``enable_gqa``: expanding the heads
with ``repeat_interleave`` first copied the cache h/g times and made grouped-query
steps 2-10 times slower than multi-head ones).

Usage: ``python benchmarks/gqa_decode.py [--device cpu|cuda] [--lengths 256 1024 4096] [--kv-heads 1 2 4 8]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import (  # noqa: E402
    add_timing_options,
    benchmark_parser,
    run_on_devices,
    time_median,
)

from attncourse.nn import KVCache  # noqa: E402
from attncourse.nn.causal_attention import CausalSelfAttention  # noqa: E402
from attncourse.runtime import describe_device  # noqa: E402


def run(device: torch.device, lengths, kv_heads, batch: int, d_model: int, num_heads: int,
        min_run_time: float, seed: int) -> list[dict]:
    print(f"\ndevice: {describe_device(device)}; batch={batch}, d_model={d_model}, h={num_heads}, "
          f"float32; one decoding step over a cache of S positions; ratio = torch time / our time")
    print(f"{'S':>6} {'kv heads':>8} {'ours':>10} {'torch':>10} {'ratio':>6} {'cache MB':>9}")
    rows = []
    for cache_len in lengths:
        for g in kv_heads:
            torch.manual_seed(seed)
            attn = CausalSelfAttention(d_model, num_heads, g).to(device).eval()
            d_k = attn.d_k
            x = torch.randn(batch, 1, d_model, device=device)
            k0 = torch.randn(batch, g, cache_len, d_k, device=device)
            v0 = torch.randn(batch, g, cache_len, d_k, device=device)

            @torch.no_grad()
            def ours():
                return attn(x, kv_cache=KVCache(k=k0, v=v0))[0]

            @torch.no_grad()
            def theirs():
                q = attn.w_q(x).view(batch, 1, num_heads, d_k).transpose(1, 2)
                k = torch.cat([k0, attn.w_k(x).view(batch, 1, g, d_k).transpose(1, 2)], dim=2)
                v = torch.cat([v0, attn.w_v(x).view(batch, 1, g, d_k).transpose(1, 2)], dim=2)
                out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                return attn.w_o(out.transpose(1, 2).reshape(batch, 1, d_model))

            torch.testing.assert_close(ours(), theirs(), rtol=1e-4, atol=1e-5)

            def timed(fn):
                def go():
                    fn()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                return go

            t_ours, t_torch = time_median(timed(ours), min_run_time), time_median(timed(theirs), min_run_time)
            cache_bytes = 2 * batch * g * (cache_len + 1) * d_k * 4
            row = {"device": str(device), "cache_len": cache_len, "kv_heads": g, "ours_ms": t_ours * 1e3,
                   "torch_ms": t_torch * 1e3, "ratio": t_torch / t_ours, "cache_bytes": cache_bytes}
            rows.append(row)
            print(f"{cache_len:>6} {g:>8} {row['ours_ms']:8.3f}ms {row['torch_ms']:8.3f}ms {row['ratio']:6.2f} "
                  f"{cache_bytes / 1e6:9.2f}")
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--kv-heads", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    add_timing_options(parser, min_run_time=0.3)
    args = parser.parse_args(argv)
    return run_on_devices(args, "gqa_decode", lambda device: run(
        device, args.lengths, args.kv_heads, args.batch, args.d_model, args.num_heads, args.min_run_time,
        args.seed))


if __name__ == "__main__":
    main()

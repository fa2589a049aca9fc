"""Speed of local attention: scoring the window only against scoring every source position.

One decoder step of Luong attention (general score) for a batch of sentences of
length S, timed side by side in one run, forward and forward+backward:

- ``global``: ``LuongAttention(mode="global")``, S scores per query;
- ``masked local-p``: ``LuongAttention(mode="local-p")``, the course's teaching
  module: it scores all S positions, then zeroes those outside [p_t - D, p_t + D];
- ``windowed local-p``: the same p_t, then ``functional.windowed_attention``, which
  gathers the 2D + 1 window positions and scores only those.

The two local-p paths are checked equal before timing. Reported as ratios
**time / windowed time** (above 1: the windowed path is that many times faster),
so the cost O(2D + 1) against O(S) per step shows as S grows. The keys W_a h_s
are projected once per sentence, outside the step, as in the decoder.

Usage: ``python benchmarks/local_attention.py [--device cpu|cuda] [--lengths 64 256 1024 4096]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import (  # noqa: E402
    add_timing_options,
    benchmark_parser,
    run_on_devices,
    time_median,
)

from attncourse.functional import windowed_attention  # noqa: E402
from attncourse.nn import LuongAttention  # noqa: E402
from attncourse.runtime import describe_device  # noqa: E402


def run(device: torch.device, lengths, batch: int, hidden: int, window: int, min_run_time: float,
        seed: int) -> list[dict]:
    print(f"\ndevice: {describe_device(device)}; batch={batch}, hidden_dim={hidden}, D={window}, float32; "
          f"ratios are time / windowed time (medians)")
    print(f"{'S':>6} {'pass':>8} {'windowed':>10} {'global':>8} {'masked local-p':>15}")
    torch.manual_seed(seed)
    global_attn = LuongAttention(hidden, score="general", mode="global").to(device)
    local_attn = LuongAttention(hidden, score="general", mode="local-p", window=window).to(device)
    with torch.no_grad():
        global_attn.w_a.copy_(local_attn.w_a)
    rows = []
    for src_len in lengths:
        h_t = torch.randn(batch, hidden, device=device, requires_grad=True)
        h_s = torch.randn(batch, src_len, hidden, device=device, requires_grad=True)
        lengths_t = torch.full((batch,), src_len, device=device)

        def masked():
            return local_attn(h_t, h_s, projected_keys=keys)[0]

        def windowed():
            p_t = local_attn.aligned_positions(h_t, lengths_t)
            return windowed_attention(h_t, keys, h_s, p_t, window, src_lengths=lengths_t).context

        def full():
            return global_attn(h_t, h_s, projected_keys=keys)[0]

        keys = local_attn.project_keys(h_s).detach()
        torch.testing.assert_close(windowed(), masked(), rtol=1e-4, atol=1e-5)
        for label, backward in (("forward", False), ("fwd+bwd", True)):
            def step(fn):
                def go():
                    out = fn()
                    if backward:
                        out.sum().backward()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                return go

            times = {name: time_median(step(fn), min_run_time)
                     for name, fn in (("windowed", windowed), ("global", full), ("masked", masked))}
            row = {"device": str(device), "src_len": src_len, "pass": label,
                   "windowed_ms": times["windowed"] * 1e3, "global_ms": times["global"] * 1e3,
                   "masked_ms": times["masked"] * 1e3,
                   "global_ratio": times["global"] / times["windowed"],
                   "masked_ratio": times["masked"] / times["windowed"]}
            rows.append(row)
            print(f"{src_len:>6} {label:>8} {row['windowed_ms']:8.3f}ms {row['global_ratio']:8.2f} "
                  f"{row['masked_ratio']:15.2f}")
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512, 2048, 8192])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--window", type=int, default=10, help="D, the paper's value by default")
    add_timing_options(parser)
    args = parser.parse_args(argv)
    return run_on_devices(args, "local_attention", lambda device: run(
        device, args.lengths, args.batch, args.hidden, args.window, args.min_run_time, args.seed))


if __name__ == "__main__":
    main()

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

On CUDA a second table follows, the **Triton sweep** (the sweep of Stanford CS336's
FlashAttention-2 assignment): ``attncourse.kernels.triton_flash_attention``, the course's
Triton kernel compiled for the GPU and autotuned (float32 in TF32 where the GPU has it),
beside SDPA with its default choice of backend, named as it ran (``flash``, ``efficient``,
``cuDNN`` or ``math``, read from the ATen operator it dispatched to), and the textbook
path, causal, batch 1, one head, for lengths 128 to 16,384, d = 16 to 128, float32 and
bfloat16, forward and forward + backward: median milliseconds by
``triton.testing.do_bench``, after a first call that compiles and autotunes (never timed),
and achieved TFLOP/s. The FLOPs are the useful ones: ``4 n^2 d`` per forward, halved by
the causal mask, times 3.5 for forward + backward (the backward's five matrix products
against the forward's two; the recomputation of the weights is not counted), as in Dao
(2023), section 4.1. Each path's output is compared with the kernel's first; a mismatch is
reported, written to the JSON, and makes the script exit with status 1 at the end. A path
that fails (out of memory, a backend that refuses the inputs) gets ``-`` and its error in
the JSON. On the CPU the sweep runs only when asked (``--sweep yes``), under Triton's
interpreter, timed by ``torch.utils.benchmark``: a test of the code, not a timing
(bfloat16 is skipped there).

Usage: ``python benchmarks/flash_attention.py [--device all|cpu|cuda] [--lengths 256 1024 4096]``
``[--sweep auto|yes|no|only] [--json OUT]``. The GPU report runs
``python benchmarks/flash_attention.py --device cuda --json OUT.json``. On a fresh GPU machine
the first call for each head width and dtype compiles every configuration the autotuner
tries (``attncourse.kernels.autotune_configs``: 12 to 34 for the three kernels, a second or
two each): ``--sweep-dims 64 128`` shortens the sweep.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import (  # noqa: E402
    add_json_option,
    add_timing_options,
    benchmark_parser,
    run_on_devices,
    time_median,
)

from attncourse.functional import (  # noqa: E402
    attention,
    attention_flops,
    flash_attention,
    saved_tensor_bytes,
)
from attncourse.kernels import (  # noqa: E402
    INTERPRETED,
    TRITON_AVAILABLE,
    default_precision,
    describe,
    triton_flash_attention,
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


def one_pass(fn, q, k, v, backward: bool, device: torch.device, grad=None, wait: bool = True):
    """A call to time: ``fn(q, k, v)`` under no_grad, or with its backward pass (of ``grad``,
    or of the sum of the output); waits for the GPU unless ``wait`` is false (``do_bench``
    waits itself), and sets the inputs' gradients to None first."""
    def go():
        if backward:
            for t in (q, k, v):
                t.grad = None
            out = fn(q, k, v)
            out.backward(torch.ones_like(out) if grad is None else grad)
        else:
            with torch.no_grad():
                fn(q, k, v)
        if wait and device.type == "cuda":
            torch.cuda.synchronize()
    return go


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
                return one_pass(fn, q, k, v, backward, device)

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


SWEEP_LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
SWEEP_DIMS = [16, 32, 64, 128]
SWEEP_DTYPES = ["float32", "bfloat16"]
SWEEP_PATHS = ("triton", "sdpa", "textbook")
#: Largest |difference| from the Triton kernel's output accepted, per dtype (inputs ~ N(0, 1)).
#: float32 products run in TF32 on the GPU: a 10-bit mantissa, as float16.
SWEEP_TOLERANCE = {"float32": 1e-2, "float16": 1e-2, "bfloat16": 5e-2}
#: SDPA's backends by the ATen operator each dispatches to (the CPU's flash kernel included).
SDPA_OPERATORS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cuDNN",
}


def sweep_flops(n: int, d: int, causal: bool, backward: bool) -> float:
    """Useful FLOPs of one head: 4 n^2 d forward, half with a causal mask, x 3.5 with the backward."""
    flops = attention_flops(n, d) * (0.5 if causal else 1.0)
    return flops * (3.5 if backward else 1.0)


class _OperatorLog(TorchDispatchMode):
    """The names of the ATen operators called inside the ``with`` block."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def sdpa_backend(q, k, v) -> str:
    """The backend SDPA's default choice runs for these inputs: flash, efficient, cuDNN or math."""
    with torch.no_grad(), _OperatorLog() as log:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for name in log.names:
        for operator, backend in SDPA_OPERATORS.items():
            if name.startswith(operator):
                return backend
    return "math"


def time_ms(fn, device: torch.device, min_run_time: float) -> float:
    """Median milliseconds per call of ``fn``: on CUDA by ``triton.testing.do_bench`` after one
    call that compiles and autotunes; on the CPU by ``torch.utils.benchmark``."""
    if device.type != "cuda":
        return time_median(fn, min_run_time) * 1e3
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize(device)
    return do_bench(fn, warmup=25, rep=max(100, int(min_run_time * 1e3)), return_mode="median")


def run_sweep(device: torch.device, lengths, dims, dtypes, batch: int, heads: int,
              min_run_time: float, seed: int) -> tuple[list[dict], list[str]]:
    """The Triton sweep on one device: rows, and the mismatches found (empty when all agree)."""
    print(f"\nTriton sweep on {device}: {describe()}")
    if not TRITON_AVAILABLE:
        return [], []
    if INTERPRETED:
        print("(under the interpreter: a test of the code, the times mean nothing)")
    timer = "triton.testing.do_bench" if device.type == "cuda" else "torch.utils.benchmark"
    print(f"batch={batch}, heads={heads}, causal; median ms ({timer}, after a warm-up call) "
          "and achieved TFLOP/s (useful FLOPs); SDPA = its default choice, backend named")
    print(f"{'dtype':>8} {'d':>4} {'n':>6} {'pass':>8} | {'triton ms':>10} {'TFLOP/s':>8} | "
          f"{'SDPA ms':>10} {'TFLOP/s':>8} {'backend':>9} | {'textbook ms':>11} {'TFLOP/s':>8} | "
          f"{'SDPA/triton':>11}")
    torch.manual_seed(seed)
    fns = {
        "triton": lambda q, k, v: triton_flash_attention(q, k, v, is_causal=True),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "textbook": lambda q, k, v: attention(q, k, v, mask=torch.ones(
            q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril())[0],
    }
    rows, mismatches = [], []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        if INTERPRETED and dtype == torch.bfloat16:
            print(f"{dtype_name:>8}: skipped (Triton's interpreter computes bfloat16 wrongly)")
            continue
        for d in dims:
            for n in lengths:
                q, k, v = (torch.randn(batch, heads, n, d, device=device, dtype=dtype, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn(batch, heads, n, d, device=device, dtype=dtype)
                backend = None
                with torch.no_grad():
                    outputs, errors = {}, {}
                    for name, fn in fns.items():
                        try:
                            outputs[name] = fn(q, k, v).float()
                        except (RuntimeError, ValueError, TypeError) as error:  # OOM, refused inputs
                            errors[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                    if "sdpa" in outputs:
                        backend = sdpa_backend(q, k, v)
                diffs = {}
                if "triton" in outputs:
                    for name in ("sdpa", "textbook"):
                        if name in outputs:
                            diffs[name] = (outputs[name] - outputs["triton"]).abs().max().item()
                            if not diffs[name] <= SWEEP_TOLERANCE[dtype_name]:
                                mismatches.append(f"{dtype_name} d={d} n={n}: {name} differs from triton "
                                                  f"by {diffs[name]:.2e}")
                del outputs
                for label, backward in (("forward", False), ("fwd+bwd", True)):
                    def step(fn):
                        return one_pass(fn, q, k, v, backward, device, grad, wait=False)

                    flops = batch * heads * sweep_flops(n, d, True, backward)
                    row = {"device": str(device), "dtype": dtype_name, "d": d, "n": n, "pass": label,
                           "sdpa_backend": backend, "triton_precision": default_precision(dtype),
                           "flops": flops}
                    for name, fn in fns.items():
                        seconds = None
                        if name not in errors:
                            try:
                                seconds = time_ms(step(fn), device, min_run_time) / 1e3
                            except (RuntimeError, ValueError, TypeError) as error:
                                errors[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                            if device.type == "cuda":
                                torch.cuda.empty_cache()
                        row[f"{name}_ms"] = None if seconds is None else seconds * 1e3
                        row[f"{name}_tflops"] = None if seconds is None else flops / seconds / 1e12
                        row[f"{name}_max_diff"] = diffs.get(name)
                        row[f"{name}_error"] = errors.get(name)
                    row["sdpa_over_triton"] = (row["sdpa_ms"] / row["triton_ms"]
                                               if row["sdpa_ms"] and row["triton_ms"] else None)
                    rows.append(row)

                    def cell(name, width):
                        if row[f"{name}_ms"] is None:
                            return f"{'-':>{width}} {'-':>8}"
                        return f"{row[f'{name}_ms']:{width}.3f} {row[f'{name}_tflops']:8.3g}"

                    ratio = "-" if row["sdpa_over_triton"] is None else f"{row['sdpa_over_triton']:.2f}"
                    print(f"{dtype_name:>8} {d:>4} {n:>6} {label:>8} | {cell('triton', 10)} | "
                          f"{cell('sdpa', 10)} {backend or '-':>9} | {cell('textbook', 11)} | "
                          f"{ratio:>11}")
    for line in mismatches:
        print("MISMATCH:", line)
    return rows, mismatches


def main(argv: list[str] | None = None) -> list[dict]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-k", type=int, default=64)
    parser.add_argument("--block", type=int, default=128, help="block_q = block_k of the tiled path")
    parser.add_argument("--half", action="store_true", help="float16 on CUDA (the CPU stays float32)")
    add_timing_options(parser, json=False)
    parser.add_argument("--sweep", choices=["auto", "yes", "no", "only"], default="auto",
                        help="the Triton sweep: auto (on CUDA devices only; default), yes (also on the "
                             "CPU, under the interpreter), no, only (the sweep without the first table)")
    parser.add_argument("--sweep-lengths", type=int, nargs="+", default=SWEEP_LENGTHS)
    parser.add_argument("--sweep-dims", type=int, nargs="+", default=SWEEP_DIMS)
    parser.add_argument("--sweep-dtypes", nargs="+", default=SWEEP_DTYPES, choices=sorted(SWEEP_TOLERANCE))
    parser.add_argument("--sweep-batch", type=int, default=1)
    parser.add_argument("--sweep-heads", type=int, default=1)
    parser.add_argument("--sweep-min-run-time", type=float, default=0.1, help="seconds per sweep measurement")
    add_json_option(parser)
    args = parser.parse_args(argv)
    mismatches = []

    def run_one(device):
        rows = []
        if args.sweep != "only":
            rows += run(device, args.lengths, args.batch, args.heads, args.d_k, args.block, args.half,
                        args.min_run_time, args.seed)
        if args.sweep in ("yes", "only") or (args.sweep == "auto" and device.type == "cuda"):
            sweep_rows, found = run_sweep(device, args.sweep_lengths, args.sweep_dims, args.sweep_dtypes,
                                          args.sweep_batch, args.sweep_heads, args.sweep_min_run_time,
                                          args.seed)
            rows += [{"table": "triton_sweep", **row} for row in sweep_rows]
            mismatches.extend(found)
        return rows

    rows = run_on_devices(args, "flash_attention", run_one)
    if mismatches:  # after the JSON is written: the measurements are kept, the run still fails
        raise SystemExit(f"{len(mismatches)} mismatches between the Triton kernel and the other paths")
    return rows


if __name__ == "__main__":
    main()

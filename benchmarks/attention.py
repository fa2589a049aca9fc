"""Speed of the course's MultiHeadAttention against torch.nn.MultiheadAttention.

Both modules get the same d_model, num_heads and weights (ours copied into
torch's packed ``in_proj_weight``), and the outputs (and, for the backward
pass, the input gradients) are asserted equal before anything is timed. Each
row times self-attention on ``x (batch, seq_len, d_model)``, float32:

- ``forward``: evaluation mode under ``torch.no_grad()`` (inference; here
  ``torch.nn.MultiheadAttention`` may take its fused native fast path),
- ``fwd+bwd``: training mode (dropout 0), forward then ``out.sum().backward()``.

The ratio is ours-speed / torch-speed = torch time / our time: 1.0 means as
fast, above 1 ours is faster, 0.5 ours takes twice as long.

Usage: ``python benchmarks/attention.py [--device all|cpu|cuda] [--lengths 64 256 1024] [--json OUT]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import benchmark

from attncourse.nn import MultiHeadAttention
from attncourse.runtime import describe_device, pick_device


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(devices: list[torch.device]) -> dict:
    """What a timing depends on: CPU model and threads, GPU names, torch and Python versions, date."""
    gpus = sorted({torch.cuda.get_device_name(d) for d in devices if d.type == "cuda"})
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpus": gpus,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def print_machine(info: dict) -> None:
    gpus = ", ".join(info["gpus"]) or "none used"
    print(f"machine: {info['cpu']}, {info['cpu_count']} CPUs, torch threads {info['torch_threads']}; "
          f"GPU: {gpus}; torch {info['torch']}; {info['date_utc']}")


def write_json(path: str, benchmark_name: str, info: dict, settings: dict, rows: list[dict]) -> None:
    """Write ``{"benchmark", "machine", "settings", "rows"}`` to ``path``."""
    record = {"benchmark": benchmark_name, "machine": info, "settings": settings, "rows": rows}
    Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def time_median(fn: Callable[[], object], min_run_time: float) -> float:
    """Median seconds per call of ``fn`` (``torch.utils.benchmark``, blocked autorange)."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn})
    return timer.blocked_autorange(min_run_time=min_run_time).median


def devices_for(name: str) -> list[torch.device]:
    """``"all"``: the CPU, and CUDA when available; otherwise the one device named."""
    if name == "all":
        return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    return [pick_device(name)]


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser (described by the first line of ``doc``), with ``--device``: every device by default."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--device", default="all",
                        help="all (the CPU, and CUDA when available; default), cpu, cuda, cuda:1, ...")
    return parser


def add_timing_options(parser: argparse.ArgumentParser, min_run_time: float = 0.5, json: bool = True) -> None:
    """``--min-run-time`` (seconds per measurement), ``--seed`` and, unless ``json`` is false, ``--json``."""
    parser.add_argument("--min-run-time", type=float, default=min_run_time, help="seconds per measurement")
    parser.add_argument("--seed", type=int, default=0)
    if json:
        add_json_option(parser)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json OUT``: the file :func:`run_on_devices` writes the rows and the machine to."""
    parser.add_argument("--json", metavar="OUT", help="also write the table and machine info to this file")


def run_on_devices(args: argparse.Namespace, name: str, run_one: Callable[[torch.device], list[dict]]) -> list[dict]:
    """Print the machine, run ``run_one`` on each device of ``args.device``, write ``args.json`` if given."""
    devices = devices_for(args.device)
    info = machine_info(devices)
    print_machine(info)
    rows = [row for device in devices for row in run_one(device)]
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        write_json(args.json, name, info, settings, rows)
    return rows


def run(device: torch.device, lengths, batch: int, d_model: int, num_heads: int, min_run_time: float,
        seed: int = 0) -> list[dict]:
    """Time both modules on one device; print and return one row per (seq_len, pass)."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, num_heads).to(device)
    theirs = ours.to_torch()
    tol = 1e-4 if device.type == "cpu" else 1e-3
    print(f"device: {describe_device(device)}")
    print(f"self-attention on x (batch={batch}, seq_len, d_model={d_model}), num_heads={num_heads}, float32; "
          f"median times; ratio = ours-speed / torch-speed (>= 1: ours faster)")
    print(f"{'seq_len':>7} {'pass':>8} {'torch ms':>10} {'ours ms':>10} {'ratio':>7}")
    rows = []
    for n in lengths:
        x = torch.randn(batch, n, d_model, device=device)
        x_grad = x.clone().requires_grad_(True)

        def call_ours(inp):
            return ours(inp, inp, inp)[0]

        def call_theirs(inp):
            return theirs(inp, inp, inp, need_weights=False)[0]

        for label, backward in (("forward", False), ("fwd+bwd", True)):
            ours.train(backward)
            theirs.train(backward)
            if backward:
                out_ours, out_theirs = call_ours(x_grad), call_theirs(x_grad)
                (grad_ours,) = torch.autograd.grad(out_ours.sum(), x_grad)
                (grad_theirs,) = torch.autograd.grad(out_theirs.sum(), x_grad)
                torch.testing.assert_close(grad_ours, grad_theirs, atol=tol, rtol=tol)
            else:
                with torch.no_grad():
                    out_ours, out_theirs = call_ours(x), call_theirs(x)
            torch.testing.assert_close(out_ours, out_theirs, atol=tol, rtol=tol)

            def step(call):
                def go():
                    if backward:
                        call(x_grad).sum().backward()
                    else:
                        with torch.no_grad():
                            call(x)
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                go()  # warm-up: allocations, kernel selection
                return go

            t_theirs = time_median(step(call_theirs), min_run_time)
            t_ours = time_median(step(call_ours), min_run_time)
            ratio = t_theirs / t_ours
            print(f"{n:>7} {label:>8} {t_theirs * 1e3:10.3f} {t_ours * 1e3:10.3f} {ratio:7.2f}")
            rows.append({"device": describe_device(device), "seq_len": n, "pass": label,
                         "torch_ms": t_theirs * 1e3, "ours_ms": t_ours * 1e3, "ratio": ratio})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--num-heads", type=int, default=4)
    add_timing_options(parser)
    args = parser.parse_args(argv)
    return run_on_devices(args, "attention", lambda device: run(
        device, args.lengths, args.batch, args.d_model, args.num_heads, args.min_run_time, args.seed))


if __name__ == "__main__":
    main()

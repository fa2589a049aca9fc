"""2x2 max pooling on the CPU: ``torch.nn.MaxPool2d`` against ``attncourse.nn.pooling.MaxPool2d``.

The course's pooling layer pools a channels-last copy of its input and gives the
result back contiguous (see :mod:`attncourse.nn.pooling`). This times both, side by
side in one run, on the shapes of chapter 3b's captioner encoder and chapter 4b's
classifier stem (a ReLU's output, as in the models, so windows of zeros tie), for
the forward pass and for forward and backward. Before timing, outputs and input
gradients are asserted equal, bit for bit. A row gives the milliseconds of each
(median of ``torch.utils.benchmark``'s blocked autorange) and the **ratio
torch / ours** (above 1: ours is faster). Run it with ``OMP_NUM_THREADS=1`` to
measure what a chapter gets in the book build (one core per chapter).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/max_pool_layout.py [--min-run-time 0.2] [--json OUT]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import (  # noqa: E402  (sibling script)
    machine_info,
    print_machine,
    write_json,
)

from attncourse.nn.pooling import MaxPool2d  # noqa: E402

#: (name, (batch, channels, height, width)) of the chapters' pooled activations.
SHAPES = (
    ("3b captioner, block 1", (50, 16, 16, 48)),
    ("3b captioner, block 2", (50, 32, 8, 24)),
    ("4b classifier stem, block 1", (64, 16, 32, 32)),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu"], default="cpu", help="the CPU only (the layer's subject)")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds per measurement")
    parser.add_argument("--json", help="also write the rows to this file")
    return parser.parse_args(argv)


def _time(fn, min_run_time: float) -> float:
    """Median milliseconds of ``fn()``."""
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(
        min_run_time=min_run_time).median * 1e3


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    info = machine_info([torch.device("cpu")])
    print_machine(info)
    torch.manual_seed(0)
    rows = []
    for name, shape in SHAPES:
        x = torch.relu(torch.randn(shape)).requires_grad_()
        grad_out = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2)
        layers = {"torch": nn.MaxPool2d(2), "ours": MaxPool2d(2)}
        outputs, grads = {}, {}
        for key, layer in layers.items():
            x.grad = None
            outputs[key] = layer(x)
            outputs[key].backward(grad_out)
            grads[key] = x.grad.clone()
        assert torch.equal(outputs["torch"], outputs["ours"]) and torch.equal(grads["torch"], grads["ours"])
        assert outputs["ours"].is_contiguous()
        with torch.no_grad():
            forward = {k: _time(lambda layer=layer: layer(x), args.min_run_time) for k, layer in layers.items()}
        both = {k: _time(lambda layer=layer: layer(x).backward(grad_out), args.min_run_time)
                for k, layer in layers.items()}
        for pass_name, ms in (("forward", forward), ("fwd+bwd", both)):
            rows.append({"shape": name, "size": list(shape), "pass": pass_name, "torch_ms": ms["torch"],
                         "ours_ms": ms["ours"], "ratio": ms["torch"] / ms["ours"]})
    print(f"{'activations':>28} {'pass':>8} {'torch ms':>9} {'ours ms':>8} {'ratio torch / ours':>19}")
    for r in rows:
        print(f"{r['shape']:>28} {r['pass']:>8} {r['torch_ms']:>9.3f} {r['ours_ms']:>8.3f} {r['ratio']:>19.2f}")
    if args.json:
        write_json(args.json, "max_pool_layout", info, {"min_run_time": args.min_run_time}, rows)
    return rows


if __name__ == "__main__":
    main()

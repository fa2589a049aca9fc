"""How long the host spends per training step of the gpu preset's loop, and how often it waits.

A GPU trains fast only while the Python process queues work faster than the
GPU runs it. This benchmark measures that host side on any machine, the CPU
included, by training a *tiny* Transformer (so the arithmetic costs next to
nothing and what is left is the loop's own work) with the gpu preset's recipe
(label smoothing, the warm-up schedule of eq. (3), AdamW, no clipping) through
:func:`attncourse.train.fit.fit`, for a few epochs. It reports

* **host ms per step**: CPU seconds of this process while training
  (validation excluded), per optimizer step: the host's work, which a shared
  machine's load does not inflate (the wall-clock time per step is reported
  too, as ``wall_ms_per_step``);
* **syncs per step**: inside the epoch's training loop, the reads of a
  tensor's value into Python (``item``, ``float()``, ``int()``, ``bool()``,
  ``tolist``, ``numpy``, ``nonzero``) and the copies to a device
  (``Tensor.to(device)``). On a GPU each one makes the host wait (a read until
  the GPU has caught up, a copy from pageable memory until it is done), so the
  next step cannot be queued in the meantime; on the CPU they cost little, but
  they are the same calls, so they are counted here. Not counted: the reads
  that ``torch.optim`` makes of its step counters, which it keeps on the host
  by design (the fused CUDA optimizers keep them on the device). Reads of
  tensors that would stay on the host on a GPU (the old loop's token count of a
  CPU batch) cannot be told apart on a CPU and are counted. The count is the
  last epoch's (the steady state: a loop may move its data once, at the start);
* **graphs per epoch** with ``--compile``: the graphs TorchDynamo captured
  (``torch._dynamo.utils.counters["stats"]["unique_graphs"]``) divided by the
  epochs. Dynamo compiles with the ``eager`` backend here (``--backend``):
  the graphs are the same as Inductor's, without minutes of C++ compilation.

Usage: ``python benchmarks/train_overhead.py [--epochs 2] [--compile] [--json OUT]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import importlib  # noqa: E402

from attention import (  # noqa: E402  (sibling script)
    machine_info,
    print_machine,
    write_json,
)

from attncourse.data.batching import build_vocabs, make_batches  # noqa: E402
from attncourse.recipes.experiment import (  # noqa: E402
    build_model,
    load_task,
    transformer_preset,
)

# the module, not the function of the same name that attncourse.train exports
fit_module = importlib.import_module("attncourse.train.fit")

#: Tensor methods that copy a value to the host, i.e. wait for the device.
READS = frozenset({"item", "tolist", "numpy", "nonzero", "__bool__", "__float__", "__int__", "__index__"})


class SyncCounter(TorchFunctionMode):
    """Counts the calls of :data:`READS` on tensors while active and not paused."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.paused = True
        self.by_name: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if not self.paused and (name in READS or name == "to" and _names_device(args, kwargs)) \
                and not _from_optimizer():
            self.count += 1
            self.by_name[name] = self.by_name.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def paused_as(self, paused: bool) -> Iterator[None]:
        before, self.paused = self.paused, paused
        try:
            yield
        finally:
            self.paused = before


def _names_device(args: tuple, kwargs: dict | None) -> bool:
    """Whether a ``Tensor.to`` call names a device (a copy), not only a dtype."""
    values = [*args[1:], *(kwargs or {}).values()]
    return any(isinstance(v, (torch.device, str)) for v in values)


def _from_optimizer() -> bool:
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if "torch/optim" in frame.f_code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


def measure(epochs: int = 2, n_train: int = 2000, batch_size: int = 64, compile: bool = False,
            backend: str = "eager", device: str = "cpu", seed: int = 0) -> dict:
    """Train the tiny model for ``epochs`` epochs; host ms/step, syncs/step and graphs/epoch.

    Returns
    -------
    dict
        ``steps``, ``host_ms_per_step``, ``syncs_per_step``, ``graphs_per_epoch``
        (None without ``compile``), ``batch_shapes`` (distinct training batch shapes).
    """
    experiment = transformer_preset("gpu", task="numbers-en-de", d_model=16, num_heads=2, num_layers=1,
                                    d_ff=32, n_train=n_train, n_valid=64, batch_size=batch_size,
                                    epochs=epochs, amp=None, compile=compile)
    splits = load_task(experiment.task, n_train=n_train, n_valid=64, n_test=0, seed=seed)
    src_vocab, tgt_vocab = build_vocabs(splits.train)
    torch.manual_seed(seed)
    model = build_model(experiment, src_vocab, tgt_vocab)
    train = make_batches(splits.train, src_vocab, tgt_vocab, batch_size, shuffle=True, seed=seed)
    valid = make_batches(splits.valid, src_vocab, tgt_vocab, 64, shuffle=False)
    config = experiment.fit_config(device=device, num_threads=1)

    counter = SyncCounter()
    plain_validate = fit_module.validate

    validation_cpu = [0.0]
    plain_epoch = fit_module.seq2seq_epoch

    def validate(*args, **kwargs):  # validation is not part of a training step
        start = time.process_time()
        try:
            return plain_validate(*args, **kwargs)
        finally:
            validation_cpu[0] += time.process_time() - start

    def seq2seq_epoch(*args, **kwargs):  # count inside the epochs' training loops only
        train_epoch = plain_epoch(*args, **kwargs)

        def counted(epoch):
            counter.count, counter.by_name = 0, {}  # what the last epoch counts: the steady state
            with counter.paused_as(False):
                return train_epoch(epoch)

        return counted

    real_compile = torch.compile
    graphs_before = 0
    if compile:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
    try:
        fit_module.validate, fit_module.seq2seq_epoch = validate, seq2seq_epoch
        torch.compile = lambda model, **kw: real_compile(model, **{**kw, "backend": backend})
        with counter, contextlib.redirect_stderr(io.StringIO()):
            start, cpu_start = time.perf_counter(), time.process_time()
            result = fit_module.fit(model, train, valid, config, progress=True)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        fit_module.validate, fit_module.seq2seq_epoch = plain_validate, plain_epoch
        torch.compile = real_compile
    steps = len(train) * epochs
    last_epoch_steps = len(train)
    train_seconds = sum(row["train_seconds"] for row in result.history)
    graphs = None
    if compile:
        graphs = (torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before) / epochs
    return {"steps": steps, "epochs": epochs, "batch_size": batch_size, "compile": compile,
            "host_ms_per_step": (cpu - validation_cpu[0]) / steps * 1e3,
            "wall_ms_per_step": train_seconds / steps * 1e3, "syncs_per_step": counter.count / last_epoch_steps,
            "syncs_by_call": counter.by_name,
            "graphs_per_epoch": graphs, "batch_shapes": len({tuple(b.src.shape) + tuple(b.tgt.shape)
                                                             for b in train}),
            "wall_seconds": wall}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--compile", action="store_true", help="also count torch.compile's graphs")
    parser.add_argument("--backend", default="eager", help="torch.compile backend for --compile")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", metavar="OUT", help="also write the rows and machine info to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    info = machine_info([torch.device(args.device)])
    print_machine(info)
    rows = [measure(args.epochs, args.n_train, args.batch_size, False, args.backend, args.device)]
    if args.compile:
        rows.append(measure(args.epochs, args.n_train, args.batch_size, True, args.backend, args.device))
    print(f"{'compile':>8} {'steps':>6} {'host ms/step':>13} {'wall ms/step':>13} {'syncs/step':>11} "
          f"{'graphs/epoch':>13}")
    for row in rows:
        graphs = "-" if row["graphs_per_epoch"] is None else f"{row['graphs_per_epoch']:.1f}"
        print(f"{str(row['compile']):>8} {row['steps']:6d} {row['host_ms_per_step']:13.2f} "
              f"{row['wall_ms_per_step']:13.2f} {row['syncs_per_step']:11.2f} {graphs:>13}  {row['syncs_by_call']}")
    if args.json:
        write_json(args.json, "train_overhead", info, vars(args), rows)
    return rows


if __name__ == "__main__":
    main()

"""How long the host spends per training step of the gpu preset's loop, and how often it waits.

A GPU trains fast only while the Python process queues work faster than the
GPU runs it. This benchmark measures that host side on any machine, the CPU
included, by training a *tiny* Transformer (so the arithmetic costs next to
nothing and what is left is the loop's own work) with the gpu preset's recipe
(label smoothing, the warm-up schedule of eq. (3), AdamW, no clipping) through
:func:`attncourse.train.fit.fit`, for a few epochs. It reports

* **host ms per step**: CPU seconds of this process per optimizer step, in
  the steady state (neither the first epoch, which moves the data and
  compiles, nor validation): the host's work, which a shared machine's load
  does not inflate (the wall-clock time per step is reported too). Rows with
  and without the fused AdamW kernel show the optimizer's share;
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
* **graphs compiled** with ``--compile``, in the first epoch and in all later
  ones (TorchDynamo's ``counters["stats"]["unique_graphs"]``), beside the
  number of batch shapes (length buckets): at most one graph per bucket, and
  none after the first epoch (the epoch that counts syncs is left out: the
  counting mode is a guard of dynamo's, and it recompiles every graph there).
  Dynamo compiles with the ``eager`` backend here (``--backend``): the graphs
  are the same as Inductor's, without minutes of C++ compilation.

Usage: ``python benchmarks/train_overhead.py [--epochs 4] [--compile] [--json OUT]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
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

from attncourse.data.batching import (  # noqa: E402
    build_vocabs,
    make_batches,
    pad_to_buckets,
)
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


def measure(epochs: int = 4, n_train: int = 2000, batch_size: int = 64, compile: bool = False,
            backend: str = "eager", device: str = "cpu", seed: int = 0, fused: bool = True) -> dict:
    """Train the tiny model for ``epochs`` epochs; host ms/step, syncs/step and graphs compiled.

    The epochs play three parts. The first moves the data to the device and
    compiles (with ``compile``), so it is timed apart. The middle ones are the
    steady state whose host time is reported. The last one counts the syncs:
    the counting mode intercepts every torch call, which costs far more host
    time than the calls themselves, so it never runs in a timed epoch.

    Returns
    -------
    dict
        ``steps`` (per epoch), ``host_ms_per_step`` and ``wall_ms_per_step`` (medians
        over the middle epochs, validation excluded), ``first_epoch_host_ms_per_step``,
        ``syncs_per_step`` (last epoch), ``graphs_first_epoch`` and
        ``graphs_later_epochs`` (None without ``compile``), ``batch_shapes``
        (distinct training batch shapes, i.e. length buckets).

    Raises
    ------
    ValueError
        If ``epochs`` < 3: one epoch each to warm up and to count, at least one timed.
    """
    if epochs < 3:
        raise ValueError(f"--epochs must be at least 3 (warm-up, timed, counted), got {epochs}")
    experiment = transformer_preset("gpu", task="numbers-en-de", d_model=16, num_heads=2, num_layers=1,
                                    d_ff=32, n_train=n_train, n_valid=64, batch_size=batch_size,
                                    epochs=epochs, amp=None, compile=compile, fused=fused)
    splits = load_task(experiment.task, n_train=n_train, n_valid=64, n_test=0, seed=seed)
    src_vocab, tgt_vocab = build_vocabs(splits.train)
    torch.manual_seed(seed)
    model = build_model(experiment, src_vocab, tgt_vocab)
    train = make_batches(splits.train, src_vocab, tgt_vocab, batch_size, shuffle=True, seed=seed)
    valid = make_batches(splits.valid, src_vocab, tgt_vocab, 64, shuffle=False)
    config = experiment.fit_config(device=device, num_threads=1)
    padded = pad_to_buckets(list(train), config.length_buckets, batch_size)  # as fit pads them

    counter = SyncCounter()
    plain_epoch = fit_module.seq2seq_epoch
    epochs_seen: list[dict] = []  # per epoch: host seconds, wall seconds, graphs compiled

    def graphs() -> int:
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    def seq2seq_epoch(*args, **kwargs):  # time or count inside the epochs' training loops only
        train_epoch = plain_epoch(*args, **kwargs)

        def instrumented(epoch):
            last = len(epochs_seen) == epochs - 1
            counter.count, counter.by_name = 0, {}
            graphs_before, cpu, wall = graphs(), time.process_time(), time.perf_counter()
            with counter.paused_as(not last):
                row = train_epoch(epoch)
            epochs_seen.append({"host": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                                "graphs": graphs() - graphs_before, "steps": row["train_steps"]})
            return row

        return instrumented

    real_compile = torch.compile
    if compile:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
    try:
        fit_module.seq2seq_epoch = seq2seq_epoch
        torch.compile = lambda model, **kw: real_compile(model, **{**kw, "backend": backend})
        with counter, contextlib.redirect_stderr(io.StringIO()):
            fit_module.fit(model, train, valid, config, progress=True)
    finally:
        fit_module.seq2seq_epoch = plain_epoch
        torch.compile = real_compile
    first, timed, counted = epochs_seen[0], epochs_seen[1:-1], epochs_seen[-1]
    # the first eight keys are the columns of the book's table (gpu_results.benchmark_markdown)
    return {"compile": compile, "fused": fused,
            # medians over the timed epochs: a shared machine's hiccups fall in a few of them
            "host_ms_per_step": statistics.median(e["host"] / e["steps"] for e in timed) * 1e3,
            "wall_ms_per_step": statistics.median(e["wall"] / e["steps"] for e in timed) * 1e3,
            "syncs_per_step": counter.count / counted["steps"],
            "graphs_first_epoch": first["graphs"] if compile else None,
            # the timed epochs only: the counting mode is itself a guard of dynamo's, so the
            # counted epoch recompiles every graph once (an artefact of counting, not of the loop)
            "graphs_later_epochs": sum(e["graphs"] for e in timed) if compile else None,
            "batch_shapes": len({tuple(b.src.shape) + tuple(b.tgt.shape) for b in padded}),
            "first_epoch_host_ms_per_step": first["host"] / first["steps"] * 1e3,
            "steps": len(train), "epochs": epochs, "batch_size": batch_size,
            "syncs_by_call": counter.by_name}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4, help="at least 3: warm-up, timed, counted")
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
    rows = [measure(args.epochs, args.n_train, args.batch_size, False, args.backend, args.device,
                    fused=False),
            measure(args.epochs, args.n_train, args.batch_size, False, args.backend, args.device)]
    if args.compile:
        rows.append(measure(args.epochs, args.n_train, args.batch_size, True, args.backend, args.device))
    print(f"{'compile':>8} {'fused':>6} {'steps':>6} {'host ms/step':>13} {'wall ms/step':>13} "
          f"{'syncs/step':>11} {'graphs 1st/later':>17} {'buckets':>8}")
    for row in rows:
        graphs = ("-" if row["graphs_first_epoch"] is None
                  else f"{row['graphs_first_epoch']}/{row['graphs_later_epochs']}")
        print(f"{str(row['compile']):>8} {str(row['fused']):>6} {row['steps']:6d} "
              f"{row['host_ms_per_step']:13.2f} {row['wall_ms_per_step']:13.2f} "
              f"{row['syncs_per_step']:11.2f} {graphs:>17} {row['batch_shapes']:>8}  {row['syncs_by_call']}")
    if args.json:
        write_json(args.json, "train_overhead", info, vars(args), rows)
    return rows


if __name__ == "__main__":
    main()

"""Data parallelism over several processes (``torchrun``) with DistributedDataParallel.

Each rank trains on its share of the batch indices, shuffled alike on every rank by a
:class:`~torch.utils.data.DistributedSampler` (:func:`rank_batch_order`), and DDP
averages the gradients; rank 0 validates, writes and sends the scores to the others
(:func:`broadcast_object`). ``gloo`` on CPUs, ``nccl`` with one GPU per process.

References
----------
Li et al. (2020), "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB 13(12).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands in a multi-process run.

    Attributes
    ----------
    rank : int
        0 .. world_size - 1; rank 0 writes files and prints.
    world_size : int
        Number of processes; 1 means an ordinary single-process run.
    local_rank : int
        Rank among the processes of this machine: the GPU index it uses.
    backend : str or None
        ``"nccl"`` (GPUs), ``"gloo"`` (CPU) or None when not distributed.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that writes checkpoints, prints and validates."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when there are two or more processes."""
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not a whole number") from None


def env_world_size() -> int:
    """``WORLD_SIZE`` from the environment (set by ``torchrun``), 1 when unset."""
    return _env_int("WORLD_SIZE", 1)


def current() -> DistInfo:
    """This process's rank and world size: from the initialised process group, else a single process."""
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", dist.get_rank()),
                        str(dist.get_backend()))
    return DistInfo()


def init_distributed(device: str | None = None, backend: str | None = None) -> DistInfo:
    """Join the process group described by torchrun's environment variables, if there is one.

    Parameters
    ----------
    device : str, optional
        The device asked for (``--device``): ``"cpu"`` forces the ``gloo``
        backend; otherwise ``nccl`` when CUDA is available, ``gloo`` when not.
    backend : str, optional
        Force a backend (``"gloo"``, ``"nccl"``).

    Returns
    -------
    DistInfo
        ``DistInfo()`` (rank 0 of 1) when ``WORLD_SIZE`` is unset or 1; nothing
        is initialised then. If a group is already initialised, it is described.

    Raises
    ------
    ValueError
        If ``WORLD_SIZE`` > 1 but ``RANK``, ``MASTER_ADDR`` or ``MASTER_PORT`` is
        missing (launch with ``torchrun``), or ``nccl`` is asked for without CUDA.
    """
    if dist.is_available() and dist.is_initialized():
        return current()
    world_size = env_world_size()
    if world_size <= 1:
        return DistInfo()
    missing = [name for name in _ENV if name != "LOCAL_RANK" and not os.environ.get(name)]
    if missing:
        raise ValueError(f"WORLD_SIZE={world_size} but {', '.join(missing)} unset; launch with torchrun")
    if not dist.is_available():
        raise ValueError("this torch was built without torch.distributed")
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    wants_cpu = device is not None and torch.device(device).type == "cpu"
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and not wants_cpu else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend 'nccl' needs CUDA; use 'gloo' on CPUs")
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend, init_method="env://", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group(backend, init_method="env://")
    return DistInfo(rank, world_size, local_rank, backend)


def teardown_distributed() -> None:
    """Leave the process group (a no-op when none is initialised)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed(device: str | None = None, backend: str | None = None) -> Iterator[DistInfo]:
    """``with distributed() as info:`` :func:`init_distributed`, then :func:`teardown_distributed` on exit.

    Only a group this call initialised is torn down.
    """
    was_initialised = dist.is_available() and dist.is_initialized()
    info = init_distributed(device, backend)
    try:
        yield info
    finally:
        if not was_initialised:
            teardown_distributed()


def rank_batch_order(n_batches: int, epoch: int, seed: int, rank: int, world_size: int) -> list[int]:
    """The batch indices rank ``rank`` trains on in epoch ``epoch``, in order.

    All ranks draw the same permutation of ``range(n_batches)`` (``seed``, ``epoch``) and
    rank r takes positions r, r + N, ...; it is padded with its first indices up to a
    multiple of N, so every rank gets ``ceil(n_batches / world_size)`` indices.

    Raises
    ------
    ValueError
        If ``rank`` is not in ``[0, world_size)`` or ``n_batches < 1``.
    """
    if n_batches < 1:
        raise ValueError(f"n_batches must be at least 1, got {n_batches}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size={world_size}), got {rank}")
    sampler = DistributedSampler(range(n_batches), num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=False)
    sampler.set_epoch(epoch)
    return list(sampler)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (any picklable value); ``obj`` itself when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_reduce_sums(values: list[float], device: torch.device | str) -> list[float]:
    """The sums over all ranks of ``values`` (in float64); ``values`` itself when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(summed)
    return summed.tolist()


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank; ``[obj]`` when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawned(rank: int, fn: Callable[..., Any], world_size: int, port: int, args: tuple) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    with distributed(device="cpu", backend="gloo"):
        fn(rank, world_size, *args)


def spawn_cpu_processes(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` CPU processes joined by ``gloo``.

    :func:`torch.multiprocessing.spawn` starts fresh processes: ``fn`` must be defined at
    a module's top level, ``args`` picklable, and a script must call this under
    ``if __name__ == "__main__":``.

    Raises
    ------
    ValueError
        If ``world_size < 1``.
    torch.multiprocessing.ProcessRaisedException
        If a process raised; the message holds its traceback.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    import torch.multiprocessing as mp

    mp.spawn(_spawned, args=(fn, world_size, free_port(), args), nprocs=world_size, join=True)


__all__ = [
    "DistInfo",
    "broadcast_object",
    "current",
    "distributed",
    "env_world_size",
    "free_port",
    "gather_objects",
    "init_distributed",
    "rank_batch_order",
    "spawn_cpu_processes",
    "teardown_distributed",
]

"""Data parallelism with DDP over ``torchrun`` processes (Li et al. 2020, VLDB)."""

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
    """This process's ``rank``, ``world_size``, ``local_rank`` (GPU) and ``backend``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """True on rank 0, which writes, prints and validates."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True with two or more processes."""
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
    """``WORLD_SIZE`` (set by ``torchrun``), 1 when unset."""
    return _env_int("WORLD_SIZE", 1)


def current() -> DistInfo:
    """The initialised process group's :class:`DistInfo`, else a single process's."""
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", dist.get_rank()),
                        str(dist.get_backend()))
    return DistInfo()


def init_distributed(device: str | None = None, backend: str | None = None) -> DistInfo:
    """Join torchrun's process group if any (``nccl`` with CUDA, else ``gloo``).

    Raises ``ValueError`` if ``RANK`` or ``MASTER_*`` is unset or ``nccl`` lacks CUDA.
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
    """Leave the process group, if one is initialised."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed(device: str | None = None, backend: str | None = None) -> Iterator[DistInfo]:
    """Context of :func:`init_distributed`; tears down only a group it initialised."""
    was_initialised = dist.is_available() and dist.is_initialized()
    info = init_distributed(device, backend)
    try:
        yield info
    finally:
        if not was_initialised:
            teardown_distributed()


def rank_batch_order(n_batches: int, epoch: int, seed: int, rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s ``ceil(n_batches / world_size)`` batch indices in ``epoch``.

    Raises ``ValueError`` if ``n_batches`` < 1 or ``rank`` is not in [0, world_size).
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
    """Rank ``src``'s picklable ``obj`` on every rank; ``obj`` when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_reduce_sums(values: list[float], device: torch.device | str) -> list[float]:
    """``values`` summed over ranks (float64); ``values`` when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(summed)
    return summed.tolist()


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` in rank order; ``[obj]`` when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def free_port() -> int:
    """A TCP port of 127.0.0.1 free a moment ago (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawned(rank: int, fn: Callable[..., Any], world_size: int, port: int, args: tuple) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    with distributed(device="cpu", backend="gloo"):
        fn(rank, world_size, *args)


def spawn_cpu_processes(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """Run top-level ``fn(rank, world_size, *args)`` in ``world_size`` CPU processes.

    Raises ``ValueError`` if ``world_size`` < 1, ``ProcessRaisedException`` if one
    raised.
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

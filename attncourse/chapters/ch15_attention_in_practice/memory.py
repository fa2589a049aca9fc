"""The most memory a CPU call holds at once, from PyTorch's profiler.

Python's ``tracemalloc`` does not see torch's buffers, and the CPU has no counter like
``torch.cuda.max_memory_allocated``; the profiler records each operator's allocations
(``profile_memory=True``), nested as the operators call each other. Walking that tree
in time order gives the peak of the bytes held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.profiler import ProfilerActivity, profile


def _walk(events: Sequence[Any]) -> tuple[int, int]:
    """(peak, held at the end) of sibling events run in time order, in bytes."""
    held = peak = 0
    for event in sorted(events, key=lambda e: e.time_range.start):
        inner_peak, inner_held = _walk(event.cpu_children)
        # what the operator allocated itself, outside its children (its output, say)
        own = event.cpu_memory_usage - inner_held
        peak = max(peak, held + inner_peak, held + inner_held + max(own, 0))
        held += event.cpu_memory_usage
    return max(peak, held), held


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Bytes of torch CPU memory ``fn()`` holds at its peak, beyond what it started with.

    Measured with ``torch.profiler`` (operators' allocations and frees, nested). Tensors
    that ``fn`` returns count as held. Units: bytes.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return _walk([e for e in prof.events() if e.cpu_parent is None])[0]


__all__ = ["peak_bytes"]

"""How the sink-window check calls the learner's ``mask_mod`` factory: on index tensors.

The caller holds nothing of the check (no case, no expected value): in the grade of record
it runs in the answer's process, beside the answer
(:func:`attncourse.checks.core.calling`), since a ``mask_mod`` cannot leave that process.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def sink_window_grid(fn: Callable[[int, int], Callable], n: int, window: int, sinks: int) -> np.ndarray:
    """``fn(window, sinks)``'s mask_mod on every (query, key) pair of ``n`` positions.

    The mask_mod is called as FlexAttention calls it, on tensors: batch and head 0 and the
    broadcast indices ``q_idx (n, 1)``, ``kv_idx (1, n)``. Returns its bool ``(n, n)``
    answer as an array (a scalar answer is broadcast, so that the check can name it).
    """
    mask_mod = fn(window, sinks)
    zero = torch.tensor(0)
    out = mask_mod(zero, zero, torch.arange(n)[:, None], torch.arange(n)[None, :])
    return torch.as_tensor(out).broadcast_to(n, n).numpy()

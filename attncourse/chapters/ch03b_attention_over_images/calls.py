"""How the REINFORCE check calls the learner's loss: fresh leaves, then ``backward()``.

The caller holds nothing of the check (no case, no expected value): in the grade of record
it runs in the answer's process, beside the answer
(:func:`attncourse.checks.core.calling`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def reinforce_outputs(fn: Callable[..., Any], log_probs: torch.Tensor, rewards: torch.Tensor,
                      baseline: float) -> tuple[Any, torch.Tensor, torch.Tensor, str, str]:
    """Call ``fn(log_probs, rewards, baseline)`` on fresh leaf tensors and backpropagate.

    Parameters
    ----------
    log_probs : (batch, steps) tensor, rewards : (batch,) tensor, baseline : float
        The case's inputs; copied into new leaves with ``requires_grad=True``, so that the
        gradients read are this call's alone.

    Returns
    -------
    loss, grad_log_probs, grad_rewards, problem, detail
        The loss (detached) and the gradients that ``backward()`` left on the two inputs
        (zeros where none); ``problem`` is ``""``, or why the result could not be
        backpropagated: ``"none"`` (``fn`` returned None), ``"not a tensor"`` (``detail``:
        its type and value), ``"no grad_fn"``, ``"backward"`` (``detail``: the error's first line).
        A non-scalar loss is returned as it is, with zero gradients (the check names its
        shape).
    """
    log_probs = log_probs.detach().clone().requires_grad_(True)
    rewards = rewards.detach().clone().requires_grad_(True)
    zeros_lp, zeros_r = torch.zeros_like(log_probs), torch.zeros_like(rewards)
    loss = fn(log_probs, rewards, baseline)
    if loss is None:
        return None, zeros_lp, zeros_r, "none", ""
    if type(loss) is not torch.Tensor:
        return None, zeros_lp, zeros_r, "not a tensor", f"{type(loss).__name__} ({loss!r:.40})"
    if loss.dim() != 0:
        return loss.detach(), zeros_lp, zeros_r, "", ""
    if loss.grad_fn is None:
        return None, zeros_lp, zeros_r, "no grad_fn", ""
    try:
        loss.backward()
    except RuntimeError as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, zeros_lp, zeros_r, "backward", text
    return (loss.detach(), zeros_lp if log_probs.grad is None else log_probs.grad,
            zeros_r if rewards.grad is None else rewards.grad, "", "")


__all__ = ["reinforce_outputs"]

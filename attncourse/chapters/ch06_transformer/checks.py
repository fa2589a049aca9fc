"""Checks for the Transformer chapter's training exercises: the learning-rate
schedule and the label-smoothed loss.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 5.3, equation (3)
(the warm-up schedule) and section 5.4 (label smoothing, epsilon = 0.1).
Szegedy et al. (2016), "Rethinking the Inception Architecture", section 7.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attncourse.checks.core import Case, CheckResult, run_cases
from attncourse.checks.guard import SOFTMAX, allowing
from attncourse.train.schedule import warmup_inverse_sqrt

SCHEDULE_HINT = (
    "The rate (Vaswani et al. eq. 3) is d_model to the power -0.5 times the smaller of two "
    "terms: it rises linearly for `warmup` steps, peaks at the end of the warm-up, then decays "
    "as one over the square root of the step."
)
SMOOTHING_HINT = (
    "With label smoothing epsilon the target puts 1 - epsilon on the gold token and spreads "
    "epsilon evenly over all V tokens (the gold one included); the loss is the cross-entropy "
    "between that target and the model's predicted distribution, averaged over the positions "
    "whose target is not padding."
)


def _schedule_diagnose(got: Any, case: Case) -> str | None:
    steps = np.asarray(case.args["steps"], dtype=float)
    d_model, warmup = case.args["d_model"], case.args["warmup"]
    got = np.asarray(got, dtype=float)
    if got.shape != steps.shape:
        return None
    no_scale = np.minimum(steps**-0.5, steps * warmup**-1.5)
    if np.allclose(got, no_scale, rtol=1e-6):
        return "You left out the factor d_model^-0.5 in front of the smaller of the two terms."
    if np.allclose(got, d_model**-0.5 * np.maximum(steps**-0.5, steps * warmup**-1.5), rtol=1e-6):
        return "Take the smaller of the two terms, not the larger: it is the rate at each step."
    if np.allclose(got, d_model**-0.5 * np.minimum(steps**-0.5, steps * warmup**-0.5), rtol=1e-6):
        return ("The warm-up term grows linearly with the step, scaled so that both terms meet at "
                "the last warm-up step.")
    return None


def schedule_cases(seed: int | None = None) -> list[Case]:
    """Hidden cases of :func:`check_noam_schedule`; with ``seed`` (the grade of record's), one
    more width, warm-up and steps drawn from it."""
    settings = [(512, 4000, [1, 100, 4000, 4001, 20000]), (128, 400, [1, 2, 399, 400, 401, 5000])]
    if seed is not None:
        rng = np.random.default_rng(seed)
        warmup = int(rng.integers(2, 10_000))
        drawn = sorted({1, warmup, warmup + 1, *(int(s) for s in rng.integers(1, 50_000, size=5))})
        settings.append((int(rng.choice([64, 128, 256, 512, 768, 1024])), warmup, drawn))
    cases = []
    for d_model, warmup, steps in settings:
        expected = np.array([warmup_inverse_sqrt(s, d_model, warmup) for s in steps])
        cases.append(Case(f"d_model={d_model}, warmup={warmup}", {"steps": np.array(steps), "d_model": d_model,
                          "warmup": warmup}, expected, rtol=1e-6, atol=0.0, hint=SCHEDULE_HINT,
                          diagnose=_schedule_diagnose))
    return cases


@allowing("NumPy operations: powers and np.minimum.", library=("torch:LambdaLR",))
def check_noam_schedule(fn) -> CheckResult:
    """Check a learner's warm-up / inverse-square-root learning-rate schedule.

    The learner's function is called as ``fn(steps, d_model, warmup)`` with
    ``steps`` a 1-D integer array of optimizer steps (from 1), and must return
    the learning rates, an array of the same shape, following Vaswani et al.
    (2017) eq. (3). Reference: :func:`attncourse.train.schedule.warmup_inverse_sqrt`.

    Examples
    --------
    >>> def lrate(steps, d_model, warmup):
    ...     return d_model ** -0.5 * np.minimum(steps ** -0.5, steps * warmup ** -1.5)
    >>> check_noam_schedule(lrate).passed
    True
    """
    return run_cases("check_noam_schedule", fn, schedule_cases(), references=(warmup_inverse_sqrt,))


def _smoothed_reference(logits: np.ndarray, target: np.ndarray, epsilon: float, pad_id: int) -> float:
    return float(F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(target), ignore_index=pad_id,
                                 label_smoothing=epsilon))


def _smoothing_diagnose(got: Any, case: Case) -> str | None:
    logits, target, epsilon, pad_id = (case.args[k] for k in ("logits", "target", "epsilon", "pad_id"))
    try:
        value = float(np.asarray(got))
    except (TypeError, ValueError):
        return None
    plain = _smoothed_reference(logits, target, 0.0, pad_id)
    if np.isclose(value, plain, rtol=1e-6):
        return "That is the plain cross-entropy: the epsilon part of the target is missing."
    with_pad = float(F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(target), label_smoothing=epsilon))
    if (target == pad_id).any() and np.isclose(value, with_pad, rtol=1e-6):
        return "Padding positions must not count: average only over positions whose target is not pad_id."
    vocab = logits.shape[-1]
    log_p = torch.log_softmax(torch.from_numpy(logits), -1).numpy()
    keep = target != pad_id
    others = (1 - epsilon) * -log_p[keep, target[keep]] + epsilon / (vocab - 1) * -(
        log_p[keep].sum(-1) - log_p[keep, target[keep]])
    if np.isclose(value, others.mean(), rtol=1e-6):
        return "Spread epsilon over all V tokens, the gold one included (an equal share each), as torch does."
    return None


def label_smoothing_cases(seed: int = 0) -> list[Case]:
    """Hidden cases of :func:`check_label_smoothing`."""
    rng = np.random.default_rng(seed)
    cases = []
    for description, n, vocab, epsilon, n_pad in (("5 positions, V=7, epsilon=0.1", 5, 7, 0.1, 0),
                                                  ("8 positions (2 padding), V=11, epsilon=0.2", 8, 11, 0.2, 2),
                                                  ("large logits, V=5, epsilon=0.1", 4, 5, 0.1, 0)):
        logits = rng.standard_normal((n, vocab)) * (50.0 if "large" in description else 2.0)
        target = rng.integers(1, vocab, size=n)
        target[:n_pad] = 0
        args = {"logits": logits, "target": target, "epsilon": epsilon, "pad_id": 0}
        cases.append(Case(description, args, np.float64(_smoothed_reference(logits, target, epsilon, 0)),
                          rtol=1e-6, atol=1e-9, hint=SMOOTHING_HINT, diagnose=_smoothing_diagnose))
    return cases


@allowing("NumPy operations: np.max, np.exp, np.log, np.sum, indexing and np.mean.",
          library=SOFTMAX + ("torch:cross_entropy", "torch:cross_entropy_loss", "torch:nll_loss",
                             "torch:CrossEntropyLoss", "torch:NLLLoss", "torch:kl_div", "torch:KLDivLoss"))
def check_label_smoothing(fn) -> CheckResult:
    """Check a learner's label-smoothed cross-entropy.

    The learner's function is called as ``fn(logits, target, epsilon, pad_id)``
    with ``logits: (n, vocab)`` floats, ``target: (n,)`` ints and returns the
    mean loss (a number) over the positions whose target is not ``pad_id``.
    The smoothed target puts ``1 - epsilon`` on the gold token and ``epsilon / vocab``
    on every token. Reference: ``torch.nn.functional.cross_entropy(...,
    label_smoothing=epsilon, ignore_index=pad_id)``.

    Examples
    --------
    >>> def loss(logits, target, epsilon, pad_id):
    ...     log_p = logits - logits.max(-1, keepdims=True)
    ...     log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    ...     q = np.full(logits.shape, epsilon / logits.shape[-1])
    ...     q[np.arange(len(target)), target] += 1 - epsilon
    ...     keep = target != pad_id
    ...     return -(q * log_p).sum(-1)[keep].mean()
    >>> check_label_smoothing(loss).passed
    True
    """
    return run_cases("check_label_smoothing", fn, label_smoothing_cases())

"""Checks for the exercises of the chapter "Soft and hard attention over images".

Two exercises on the losses of Show, Attend and Tell (Xu et al. 2015):

* the **doubly stochastic penalty** of soft attention, sum_i (tau - sum_t
  alpha_ti)^2, which asks every location of the image to receive a total
  attention of tau over the steps (section 4.2.1, eq. (14));
* the **REINFORCE loss** of hard attention, -(1/B) sum_b (R_b - b) sum_t log
  alpha_{t, s_t}, whose gradient raises the probability of the sampled
  locations when their reward R beats the baseline b (section 4.1, eqs.
  (10)-(12); Williams 1992).

Each check runs the learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`. On a failure the output is
compared with typical buggy versions (the sum over the wrong axis, the square
left out, tau ignored, the sign flipped, the baseline ignored, the rewards not
detached, ...) so that the hint names the likely bug.

Conventions. ``weights`` are alpha_ti of one image, shape (steps, L): row t is
the softmax over the L locations at step t, so every row sums to 1; the
coverage of location i is c_i = sum_t alpha_ti. Here ``tau`` is the target
coverage of eq. (14), not a softmax temperature. In the REINFORCE loss R - b is
a constant (detached): only the log-probabilities of the sampled locations
carry a gradient, so the check compares the gradients that ``backward()``
leaves on ``log_probs`` and ``rewards`` as well as the loss itself.

The references are the library's own losses:
:func:`attncourse.nn.image_attention.doubly_stochastic_penalty`, and the
REINFORCE term of :func:`attncourse.nn.image_attention.hard_attention_loss`
(with ``reward_weight=1``), so check and library agree.

References
----------
Xu et al. (2015), "Show, Attend and Tell: Neural Image Caption Generation with
Visual Attention", ICML, sections 4.1-4.2, equations (10)-(14).
Williams (1992), "Simple statistical gradient-following algorithms for
connectionist reinforcement learning", Machine Learning 8, section 4 (REINFORCE).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

import numpy as np
import torch

from attncourse.chapters.ch03b_attention_over_images.calls import reinforce_outputs
from attncourse.checks.core import (
    Case,
    CheckResult,
    calling,
    run_cases,
    same_values,
    variant_hint,
)
from attncourse.checks.guard import allowing
from attncourse.functional.numpy_attention import softmax
from attncourse.nn.image_attention import doubly_stochastic_penalty

# Loose enough for a learner who computes in float32 torch, tight enough to
# tell every buggy variant apart.
_ATOL = 1e-5
_RTOL = 1e-4
#: Longest error message of backward() shown, in characters, as the engine does for exceptions.
_MESSAGE_LIMIT = 160


# --------------------------------------------------------------------- doubly stochastic penalty (eq. (14))

DS_RULE = (
    "The penalty adds up, over the locations, the square of each location's gap between tau "
    "and its coverage (Xu et al. 2015, eq. (14)). First the coverage of each location c_i: add "
    "the weights down the steps, one number per location (shape (L,)). Then the squared gap of "
    "each location, added up over the L locations into a single number."
)
DS_WRONG_AXIS_HINT = (
    'You summed over the wrong axis: you added up each row, the weights of one step, and '
    'every row sums to 1, so this number is the same whatever the weights. The '
    'coverage of location i adds its weights over the steps (the rows), one number per location, '
    'shape (L,).'
)
DS_ABS_HINT = (
    "The square is missing: you added up the gaps' sizes. The penalty squares each gap, "
    "so one location far from tau costs more than several slightly off."
)
DS_PLAIN_HINT = (
    "The square is missing: without it the gaps add up to L times tau minus the number of "
    "steps for any weights (the coverages always add up to the number of steps), so it cannot "
    "tell even attention from uneven. Square each gap before adding."
)
DS_GAPS_CANCEL_HINT = (
    "Your penalty is 0 although these weights are not even. Here tau is the number of steps "
    "over L, so the gaps add up to exactly 0, and adding them up before squaring (or not "
    "squaring at all) gives 0 for any weights. Square each gap, then add."
)
DS_NORM_HINT = (
    "You returned the length of the vector of gaps, with a square root (np.linalg.norm or "
    "torch.norm do that). The penalty is the squared length: no square root."
)
DS_SQUARE_OF_SUM_HINT = (
    "You squared the total gap. Square each location's gap first, then add them up."
)
DS_TAU_ONE_HINT = (
    "tau is ignored: you used tau = 1, the paper's value, instead of the argument. Each location "
    "should receive the coverage passed in as tau."
)
DS_TAU_UNIFORM_HINT = (
    "tau is ignored: you used the even coverage, the number of steps over L, instead of the "
    "argument. Each location should receive the coverage passed in as tau."
)
DS_MEAN_HINT = (
    "You averaged the squared gaps over the locations (divided by L). The penalty adds them up: "
    "a sum, not a mean."
)
DS_MEAN_STEPS_HINT = (
    "Your coverage is the mean weight over the steps. It is the total: all the attention "
    "location i received over the steps."
)
DS_PER_ENTRY_HINT = (
    "You compared tau with every single weight. First add up each location's weights over the "
    "steps, its coverage; then square each location's gap to tau and add up over the locations."
)
DS_VECTOR_HINT = (
    "You returned one number per location, its squared gap. Add them up: the penalty of the "
    "image is a single number."
)
DS_PER_STEP_HINT = (
    "You returned one number per step: you added up along the rows (axis 1, the locations). The "
    "coverage adds the weights down the steps (axis 0), and the penalty is a single number."
)
DS_SCALAR_HINT = (
    "Return a single number: a float, a 0-d array or a 0-d tensor (a Python `float`, or a "
    "`.sum()` that drops its axes), not an array that holds one entry."
)
DS_SHAPE_HINT = (
    "Return a single number for the image. " + DS_RULE
)


def _penalty_reference(weights: np.ndarray, tau: float) -> np.ndarray:
    """The library's penalty of one image, as a 0-d float64 array."""
    return doubly_stochastic_penalty(torch.from_numpy(weights)[None], float(tau))[0].numpy()


def _penalty_variants(weights: np.ndarray, tau: float) -> list[tuple[str, np.ndarray]]:
    steps, locations = weights.shape
    coverage = weights.sum(axis=0)
    gap = tau - coverage
    # With tau = steps / L the gaps cancel: several bugs give 0, and one hint must cover them all.
    cancel = [(DS_GAPS_CANCEL_HINT, 0.0)] if np.isclose(locations * tau, steps) else []
    return cancel + [
        (DS_WRONG_AXIS_HINT, ((tau - weights.sum(axis=1)) ** 2).sum()),
        (DS_ABS_HINT, np.abs(gap).sum()),
        (DS_PLAIN_HINT, gap.sum()),
        (DS_PLAIN_HINT, -gap.sum()),
        (DS_NORM_HINT, np.sqrt((gap**2).sum())),
        (DS_SQUARE_OF_SUM_HINT, gap.sum() ** 2),
        (DS_TAU_ONE_HINT, ((1.0 - coverage) ** 2).sum()),
        (DS_TAU_UNIFORM_HINT, ((steps / locations - coverage) ** 2).sum()),
        (DS_MEAN_HINT, (gap**2).mean()),
        (DS_MEAN_STEPS_HINT, ((tau - weights.mean(axis=0)) ** 2).sum()),
        (DS_PER_ENTRY_HINT, ((tau - weights) ** 2).sum()),
    ]


def _diagnose_penalty(got: Any, case: Case) -> str | None:
    weights, tau = case.args["weights"], case.args["tau"]
    steps, locations = weights.shape
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    variants = _penalty_variants(weights, tau)
    if got.shape != expected.shape:
        if got.size == 1:
            # A scalar wrapped in an array: name the value's bug too, if it has one.
            value = got.reshape(())
            hint = None if same_values(value, expected, case) else variant_hint(value, variants, expected, case)
            return DS_SCALAR_HINT + (f" Its value is wrong too. {hint}" if hint else "")
        if got.shape == (locations,):
            return DS_VECTOR_HINT
        if got.shape == (steps,):
            return DS_PER_STEP_HINT
        return DS_SHAPE_HINT
    return variant_hint(got, variants, expected, case)


def _penalty_case(description: str, weights: np.ndarray, tau: float, hint: str = DS_RULE) -> Case:
    weights = np.asarray(weights, dtype=np.float64)
    return Case(description=description, args={"weights": weights, "tau": float(tau)},
                expected=_penalty_reference(weights, tau), atol=_ATOL, rtol=_RTOL, hint=hint,
                diagnose=_diagnose_penalty)


def doubly_stochastic_penalty_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_doubly_stochastic_penalty`, drawn with ``seed``.

    The number of steps never equals the number of locations, so a result
    with one entry per step or per location shows in its shape.
    """
    rng = np.random.default_rng(seed)
    one_hot = np.eye(5)[[1, 3, 1]]  # location 1 is read at two steps
    return [
        _penalty_case("three steps over a 2 x 3 grid: steps=3, L=6, tau=0.8",
                      softmax(3.0 * rng.normal(size=(3, 6))), 0.8),
        _penalty_case("the paper's tau = 1: steps=4, L=8", softmax(3.0 * rng.normal(size=(4, 8))), 1.0,
                      "tau = 1 is the paper's value. With fewer steps than locations the coverages add up "
                      "to fewer than L, so the penalty cannot reach 0 here. " + DS_RULE),
        _penalty_case("the chapter's 4 x 12 grid with tau = steps / L, the coverage of perfectly even "
                      "attention (which would give 0): steps=3, L=48, tau=0.0625",
                      softmax(2.0 * rng.normal(size=(3, 48))), 3 / 48,
                      "The number of steps over L is what every location receives when the attention is spread "
                      "perfectly evenly; these weights are not even, so the penalty is positive. " + DS_RULE),
        _penalty_case("a single step: steps=1, L=5, tau=0.5", softmax(rng.normal(size=(1, 5))), 0.5,
                      "With one step the weights still have two axes, (1, L), and the coverage of "
                      "location i is its single weight alpha_1i. " + DS_RULE),
        _penalty_case("one-hot weights, as hard attention reads them, location 1 read at two steps: "
                      "steps=3, L=5, tau=0.75", one_hot, 0.75,
                      "Each row is one-hot: the coverages are 2 for location 1, 1 for location 3 and 0 "
                      "elsewhere. " + DS_RULE),
        _penalty_case("more steps than locations: steps=6, L=4, tau=2.5",
                      softmax(rng.normal(size=(6, 4))), 2.5),
    ]


@allowing("NumPy or PyTorch sums, differences and squares.")
def check_doubly_stochastic_penalty(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's doubly stochastic penalty, sum_i (tau - sum_t alpha_ti)^2.

    Parameters
    ----------
    fn : callable
        The learner's ``doubly_stochastic_penalty(weights, tau)``, called as
        ``fn(weights, tau)``:

        - ``weights`` : (steps, L) float64 ndarray, alpha_ti of one image: row t
          holds the weights of the L locations at step t and sums to 1;
        - ``tau`` : float, the coverage each location should receive over all
          steps (1 in the paper; steps / L when attention is spread evenly);
        - returns the penalty, a scalar: sum_i (tau - c_i)^2 with the coverage
          c_i = sum_t alpha_ti. A float, a 0-d array or a 0-d tensor.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        what was expected against what came back (or the exception and the
        learner's line that raised it) and a hint naming the likely bug: the
        sum over the wrong axis (each step's weights instead of each
        location's), the square left out (absolute values, a plain sum, a
        square root, the square of the total), tau ignored (1 or steps / L
        used instead), a mean over locations or steps instead of a sum, tau
        compared with every weight, or one number per location returned.

    Notes
    -----
    The hidden cases: steps=3 over L=6; the paper's tau = 1; the chapter's
    grid (L=48) with tau = steps / L; a single step; one-hot weights (hard
    attention's reading) with a location read twice; more steps than
    locations. Every case tells each buggy variant from the right answer,
    except where the bug happens to be harmless: ignoring tau when tau is 1
    or steps / L; with a single step, a mean over the steps or tau compared
    with every weight.

    The reference is
    :func:`attncourse.nn.image_attention.doubly_stochastic_penalty` with
    ``target=tau``.

    References
    ----------
    Xu et al. (2015), section 4.2.1, equation (14).

    Examples
    --------
    >>> import numpy as np
    >>> def my_penalty(weights, tau):
    ...     coverage = weights.sum(axis=0)
    ...     return ((tau - coverage) ** 2).sum()
    >>> check_doubly_stochastic_penalty(my_penalty)
    ✔ check_doubly_stochastic_penalty: all 6 hidden cases pass
    """
    return run_cases("check_doubly_stochastic_penalty", fn, doubly_stochastic_penalty_cases(),
                     references=(doubly_stochastic_penalty,))


# --------------------------------------------------------------------- REINFORCE loss (eqs. (10)-(12))

RF_NAME = "check_reinforce_loss"
RF_OUTPUTS = ("loss", "gradient wrt log_probs", "gradient wrt rewards")

RF_RULE = (
    'For each image the advantage, its reward minus the baseline, held constant (no gradient '
    'may flow through it), times the log-probability of its whole '
    'sequence of sampled locations; then the mean over the batch, with a minus sign because the '
    'optimiser minimises the loss (Xu et al. 2015, eqs. (11)-(12); Williams 1992).'
)
RF_SIGN_HINT = (
    "The sign is flipped. The optimiser minimises the loss, so the loss is minus the REINFORCE "
    "objective. A gradient step then raises the probability of the sampled locations when the "
    "reward beats the baseline and lowers it otherwise; with your sign it does the opposite."
)
RF_NO_BASELINE_HINT = (
    "The baseline is ignored: you weighted the log-probabilities by the reward itself. Subtract "
    "the baseline from every reward: the advantage says whether this sample did better (> 0) "
    "or worse (< 0) than usual."
)
RF_BASELINE_ADDED_HINT = "You added the baseline to the reward: the advantage subtracts it."
RF_BATCH_BASELINE_HINT = (
    "You used the batch's mean reward as the baseline. Use the argument `baseline`, b (the chapter "
    "keeps it as a moving average across batches): the advantage is the reward minus it."
)
RF_SUM_BATCH_HINT = (
    "You summed over the batch. Take the mean over the images, so that the size of a "
    "gradient step does not grow with the batch size."
)
RF_MEAN_STEPS_HINT = (
    'You averaged the log-probabilities over the steps. What REINFORCE weights is the '
    'log-probability of the whole sequence of locations, the product of the alpha_{t, s_t}: its log adds the steps '
    'up.'
)
RF_DETACH_HINT = (
    'The gradient reaches the rewards: the loss changes with them. In REINFORCE the advantage'
    ' is a constant weight: cut it from the graph, so that backward() reaches log_probs '
    'only. (In the model R is the log-likelihood of the labels: with the gradient flowing into '
    'it, backward() would also push the decoder to raise R, weighted by the negative log-probability, which is not '
    'part of REINFORCE.)'
)
RF_LOG_PROBS_CUT_HINT = (
    "No gradient reached log_probs: did you detach them? Detach only the advantage; the "
    "log-probabilities must keep their gradient, it is what trains the attention."
)
RF_PER_IMAGE_HINT = (
    "You returned one loss per image, shape (batch,). Average them over the batch into one scalar: "
    "the mean."
)
RF_PER_STEP_HINT = (
    "You returned one loss per image and step, shape (batch, steps). Sum over the steps, then "
    "average over the batch, into one scalar."
)
RF_SCALAR_HINT = (
    "Return a scalar tensor, shape (): the mean over the batch of each image's minus advantage "
    "times its sequence's log-probability."
)
RF_GRAPH_HINT = (
    'Return the loss as a torch tensor computed from log_probs with torch operations: converting '
    'to a Python number or a NumPy array on the way (or building a new tensor from one) cuts it '
    'off from log_probs, and backward() would have nothing to reach. ' + RF_RULE
)
RF_CUT_HINT = (
    'Hold only the advantage constant, not log_probs nor the whole loss, and do not compute'
    ' the loss with gradients switched off: backward() must reach log_probs. ' + RF_RULE
)
RF_BACKWARD_HINT = (
    'Build the loss out of log_probs with ordinary torch operations, do not change log_probs in '
    'place, and do not call backward() yourself: the check calls it on the loss you return. '
    + RF_RULE
)


def _reinforce_reference(log_probs: np.ndarray, rewards: np.ndarray,
                         baseline: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(loss, d loss / d log_probs, d loss / d rewards) of the REINFORCE term, in float64.

    loss = -(1/B) sum_b (R_b - b) sum_t log_probs[b, t] with R - b held
    constant, so its gradient is -(R_b - b) / B at every step of image b, and
    zero for the rewards.
    """
    log_probs, rewards = np.asarray(log_probs, dtype=np.float64), np.asarray(rewards, dtype=np.float64)
    batch, steps = log_probs.shape
    advantage = rewards - baseline
    loss = -np.mean(advantage * log_probs.sum(axis=1))
    grad = np.repeat(-advantage[:, None] / batch, steps, axis=1)
    return np.asarray(loss), grad, np.zeros_like(rewards)


def _reinforce_variants(log_probs: np.ndarray, rewards: np.ndarray,
                        baseline: float) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(hint, loss, gradient wrt log_probs) of typical buggy losses."""
    batch, steps = log_probs.shape

    def weighted(advantage: np.ndarray, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        loss, grad, _ = _reinforce_reference(log_probs, advantage, 0.0)
        return np.asarray(scale * loss), scale * grad

    right = rewards - baseline
    return [
        (RF_SIGN_HINT, *weighted(-right)),
        (RF_NO_BASELINE_HINT, *weighted(rewards)),
        (RF_BASELINE_ADDED_HINT, *weighted(rewards + baseline)),
        (RF_BATCH_BASELINE_HINT, *weighted(rewards - rewards.mean())),
        (RF_SUM_BATCH_HINT, *weighted(right, batch)),
        (RF_MEAN_STEPS_HINT, *weighted(right, 1.0 / steps)),
    ]


def _diagnose_reinforce(got: Any, case: Case) -> str | None:
    log_probs, rewards, baseline = (case.args[name] for name in ("log_probs", "rewards", "baseline"))
    log_probs, rewards = log_probs.detach().numpy(), rewards.detach().numpy()
    if not (isinstance(got, tuple) and len(got) == 3):
        return None
    loss, grad, reward_grad = got
    expected_loss, expected_grad, _ = case.expected
    if isinstance(loss, np.ndarray) and loss.shape != ():
        if loss.shape == rewards.shape:
            return RF_PER_IMAGE_HINT
        if loss.shape == log_probs.shape:
            return RF_PER_STEP_HINT
        return RF_SCALAR_HINT
    for hint, variant_loss, variant_grad in _reinforce_variants(log_probs, rewards, baseline):
        differs = not (same_values(variant_loss, expected_loss, case)
                       and same_values(variant_grad, expected_grad, case))
        if differs and same_values(loss, variant_loss, case) and same_values(grad, variant_grad, case):
            return hint
    if same_values(loss, expected_loss, case) and same_values(grad, np.zeros_like(expected_grad), case):
        return RF_LOG_PROBS_CUT_HINT
    if isinstance(reward_grad, np.ndarray) and reward_grad.shape == rewards.shape and (
        np.abs(reward_grad.astype(np.float64)) > case.atol
    ).any():
        return RF_DETACH_HINT
    return None


class _NotALoss(Exception):
    """Raised by :class:`_Graded` when the learner's result cannot be backpropagated."""


class _Graded:
    """Run the learner's loss on fresh leaf tensors and return (loss, gradients).

    :func:`~attncourse.chapters.ch03b_attention_over_images.calls.reinforce_outputs` calls
    it (in the answer's own process under the grade of record); what cannot be
    backpropagated is described in words (kept in :attr:`problem` as message and hint)
    rather than as the error that ``backward()`` would raise.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.call = calling(fn, reinforce_outputs)
        self.__wrapped__ = fn  # the learner's function, for the guards (stubs, references)
        self.problem: tuple[str, str] | None = None

    def __call__(self, log_probs: torch.Tensor, rewards: torch.Tensor,
                 baseline: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.problem = None
        loss, grad_log_probs, grad_rewards, problem, detail = self.call(log_probs, rewards, baseline)
        if problem == "none":
            self._fail("your function returned None; expected a scalar tensor. Did you forget `return`?",
                       RF_RULE)
        if problem == "not a tensor":
            self._fail(f"your function returned a {detail}, not a torch tensor: "
                       "loss.backward() needs the tensor built from log_probs", RF_GRAPH_HINT)
        if problem == "no grad_fn":
            self._fail("your function returned a tensor with no gradient history (no grad_fn), so "
                       "loss.backward() cannot reach log_probs", RF_CUT_HINT)
        if problem == "backward":
            text = detail if len(detail) <= _MESSAGE_LIMIT else detail[: _MESSAGE_LIMIT - 3] + "..."
            self._fail(f"loss.backward() on your result raised RuntimeError: {text}", RF_BACKWARD_HINT)
        return loss, grad_log_probs, grad_rewards

    def _fail(self, message: str, hint: str) -> NoReturn:
        self.problem = (message, hint)
        raise _NotALoss(message)


def _reinforce_case(description: str, log_probs: np.ndarray, rewards: np.ndarray, baseline: float,
                    hint: str = RF_RULE) -> Case:
    log_probs, rewards = np.asarray(log_probs, dtype=np.float64), np.asarray(rewards, dtype=np.float64)
    args = {
        "log_probs": torch.tensor(log_probs, dtype=torch.float64, requires_grad=True),
        # As if the reward came out of the model: it carries a gradient the loss must not follow.
        "rewards": torch.tensor(rewards, dtype=torch.float64, requires_grad=True),
        "baseline": float(baseline),
    }
    return Case(description=description, args=args,
                expected=_reinforce_reference(log_probs, rewards, baseline), atol=_ATOL, rtol=_RTOL,
                hint=hint, output_names=RF_OUTPUTS, diagnose=_diagnose_reinforce)


def _sampled_log_probs(rng: np.random.Generator, batch: int, steps: int) -> np.ndarray:
    """log alpha_{t, s_t} of sampled locations: probabilities between 0.01 and 0.6."""
    return np.log(rng.uniform(0.01, 0.6, size=(batch, steps)))


def reinforce_loss_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_reinforce_loss`, drawn with ``seed``.

    Every case has at least two steps, so a mean over the steps shows.
    """
    rng = np.random.default_rng(seed)
    return [
        _reinforce_case("two images, one reward above the baseline and one below: batch=2, steps=3, b=-4.0",
                        _sampled_log_probs(rng, 2, 3), [-2.5, -5.1], -4.0),
        _reinforce_case("a single image whose reward beats the baseline: batch=1, steps=3, b=-3.0",
                        _sampled_log_probs(rng, 1, 3), [-1.2], -3.0,
                        "With one image the mean over the batch is that image's loss. " + RF_RULE),
        _reinforce_case("baseline b = 0: batch=3, steps=2", _sampled_log_probs(rng, 3, 2), [-0.7, -2.1, -4.4], 0.0,
                        "With b = 0 the advantage is the reward itself, and it must still be detached. "
                        + RF_RULE),
        _reinforce_case("log-likelihood rewards of a few nats, R = log p(y | s, a) < 0, and a moving-average "
                        "baseline: batch=4, steps=3, b=-3.2", _sampled_log_probs(rng, 4, 3),
                        -rng.uniform(1.0, 6.0, size=4), -3.2),
        _reinforce_case("every reward below the baseline: batch=3, steps=4, b=-1.0",
                        _sampled_log_probs(rng, 3, 4), [-1.8, -3.5, -2.6], -1.0,
                        "When every reward falls short of b, every advantage is negative and the loss "
                        "lowers the probability of every sampled location. " + RF_RULE),
        _reinforce_case("0/1 rewards (all labels right or not) and b=0.5: batch=5, steps=2",
                        _sampled_log_probs(rng, 5, 2), [1.0, 0.0, 1.0, 1.0, 0.0], 0.5),
    ]


@allowing("PyTorch operations on the tensors: sums, means, products, .detach().",
          calls=("attncourse.chapters.ch03b_attention_over_images.calls:reinforce_outputs",))
def check_reinforce_loss(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's REINFORCE loss for hard attention, its value and its gradients.

    Parameters
    ----------
    fn : callable
        The learner's ``reinforce_loss(log_probs, rewards, baseline)``, called
        as ``fn(log_probs, rewards, baseline)`` with fresh tensors:

        - ``log_probs`` : (batch, steps) float64 tensor with
          ``requires_grad=True``, log alpha_{t, s_t}, the log-probability of
          the location s_t sampled at step t;
        - ``rewards`` : (batch,) float64 tensor, the reward R_b of each image
          (e.g. log p(y | s, a)). It has ``requires_grad=True`` too, as if it
          came out of the model: the loss must treat R - b as a constant;
        - ``baseline`` : float, b;
        - returns the loss to minimise, a scalar tensor (shape ()) connected
          to ``log_probs``:
          -(1/batch) sum_b (R_b - b).detach() * sum_t log_probs[b, t].

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes. The check calls ``backward()``
        on the returned loss and compares three things, in order: the loss,
        its gradient with respect to ``log_probs`` (-(R_b - b) / batch at
        every step of image b) and with respect to ``rewards`` (zero). On a
        failure: the first failing case and what differs (or the exception
        and the learner's line that raised it, or why the result cannot be
        backpropagated: not a tensor, no ``grad_fn``), and a hint naming the
        likely bug: the sign flipped, the baseline ignored or added, the
        batch's mean reward used as baseline, a sum over the batch, a mean
        over the steps, the rewards not detached (the gradient reaches them),
        log_probs detached, one loss per image returned.

    Notes
    -----
    The hidden cases: one image above and one below the baseline; a single
    image; b = 0; log-likelihood rewards of a few nats below zero; every
    reward below the baseline; 0/1 rewards. Every case tells each buggy
    variant from the right answer, except where the bug happens to be
    harmless: ignoring (or adding) b when b = 0, and a sum over a batch of
    one.

    The reference is the REINFORCE term of
    :func:`attncourse.nn.image_attention.hard_attention_loss` with
    ``reward_weight=1``: ``-(advantage * out.log_probs.sum(1)).mean()``,
    where the advantage R - b is detached.

    References
    ----------
    Xu et al. (2015), section 4.1, equations (10)-(12); Williams (1992).

    Examples
    --------
    >>> def my_reinforce_loss(log_probs, rewards, baseline):
    ...     advantage = (rewards - baseline).detach()
    ...     return -(advantage * log_probs.sum(dim=1)).mean()
    >>> check_reinforce_loss(my_reinforce_loss)
    ✔ check_reinforce_loss: all 6 hidden cases pass
    """
    return _run_reinforce(fn, reinforce_loss_cases())


def _run_reinforce(fn: Callable[..., Any], cases: list[Case]) -> CheckResult:
    """:func:`check_reinforce_loss` on the given cases."""
    if not callable(fn):
        return run_cases(RF_NAME, fn, cases)
    graded = _Graded(fn)
    result = run_cases(RF_NAME, graded, cases)
    if result.passed or graded.problem is None:
        return result
    # The runner reported the internal exception; say what was wrong with the result instead.
    message, hint = graded.problem
    header = "\n".join(result.message.splitlines()[:2])
    return replace(result, message=f"{header}\n  {message}", hint=hint, nudge="", recognised=True)


__all__ = [
    "check_doubly_stochastic_penalty",
    "check_reinforce_loss",
    "doubly_stochastic_penalty_cases",
    "reinforce_loss_cases",
]

"""Tests of attncourse.chapters.ch03b_attention_over_images.checks: the doubly stochastic penalty of soft attention
and the REINFORCE loss of hard attention.

Each typical learner bug is written out as a small function, and the check must
fail on it with the hint that names that bug, on every hidden case where the bug
changes the answer.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from attncourse.chapters.ch03b_attention_over_images.checks import (
    DS_RULE,
    RF_RULE,
    _penalty_reference,
    _reinforce_reference,
    _run_reinforce,
    check_doubly_stochastic_penalty,
    check_reinforce_loss,
    doubly_stochastic_penalty_cases,
    reinforce_loss_cases,
)
from attncourse.checks import run_cases
from attncourse.nn.image_attention import (
    ImageCaptioner,
    doubly_stochastic_penalty,
    hard_attention_loss,
)
from tests.check_helpers import (
    assert_failed,
    assert_raised,
    lenient_hand_offs,  # noqa: F401  (a fixture)
    own_copy,
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")

# ------------------------------------------------------------------ learners' penalties


def ds_numpy(weights, tau):
    coverage = weights.sum(axis=0)
    return ((tau - coverage) ** 2).sum()


def ds_torch(weights, tau):
    alpha = torch.tensor(weights, dtype=torch.float32)
    return ((tau - alpha.sum(dim=0)) ** 2).sum()


def ds_loop(weights, tau):
    total = 0.0
    for i in range(weights.shape[1]):
        total += (tau - sum(weights[t, i] for t in range(weights.shape[0]))) ** 2
    return total


def ds_expanded(weights, tau):
    # sum_i (tau - c_i)^2 = L tau^2 - 2 tau T + sum_i c_i^2, since the c_i add up to T.
    steps, locations = weights.shape
    return locations * tau**2 - 2 * tau * steps + (weights.sum(axis=0) ** 2).sum()


own_penalty = own_copy(doubly_stochastic_penalty)  # the checks refuse the package's own


def ds_library(weights, tau):
    return own_penalty(torch.from_numpy(weights)[None], tau)[0]


def ds_wrong_axis(weights, tau):
    return ((tau - weights.sum(axis=1)) ** 2).sum()


def ds_abs(weights, tau):
    return np.abs(tau - weights.sum(axis=0)).sum()


def ds_plain(weights, tau):
    return (tau - weights.sum(axis=0)).sum()


def ds_norm(weights, tau):
    return np.linalg.norm(tau - weights.sum(axis=0))


def ds_square_of_sum(weights, tau):
    return (tau - weights.sum(axis=0)).sum() ** 2


def ds_tau_one(weights, tau):
    return ((1.0 - weights.sum(axis=0)) ** 2).sum()


def ds_tau_uniform(weights, tau):
    return ((weights.shape[0] / weights.shape[1] - weights.sum(axis=0)) ** 2).sum()


def ds_mean(weights, tau):
    return ((tau - weights.sum(axis=0)) ** 2).mean()


def ds_mean_steps(weights, tau):
    return ((tau - weights.mean(axis=0)) ** 2).sum()


def ds_per_entry(weights, tau):
    return ((tau - weights) ** 2).sum()


def ds_vector(weights, tau):
    return (tau - weights.sum(axis=0)) ** 2


def ds_per_step(weights, tau):
    return (tau - weights.sum(axis=1)) ** 2


def ds_keepdims(weights, tau):
    return ((tau - weights.sum(axis=0)) ** 2).sum(keepdims=True)


def ds_raises(weights, tau):
    return ((tau - weights.sum(axis=2)) ** 2).sum()


# ------------------------------------------------------------------ learners' REINFORCE losses


def rf_torch(log_probs, rewards, baseline):
    advantage = (rewards - baseline).detach()
    return -(advantage * log_probs.sum(dim=1)).mean()


def rf_no_grad(log_probs, rewards, baseline):
    with torch.no_grad():
        advantage = rewards - baseline
    return -(advantage[:, None] * log_probs).sum(dim=1).mean()


def rf_loop_float32(log_probs, rewards, baseline):
    total = 0
    for b in range(len(rewards)):
        total = total - (rewards[b].item() - baseline) * log_probs[b].float().sum()
    return total / len(rewards)


def rf_sign(log_probs, rewards, baseline):
    return ((rewards - baseline).detach() * log_probs.sum(dim=1)).mean()


def rf_no_baseline(log_probs, rewards, baseline):
    return -(rewards.detach() * log_probs.sum(dim=1)).mean()


def rf_baseline_added(log_probs, rewards, baseline):
    return -((rewards + baseline).detach() * log_probs.sum(dim=1)).mean()


def rf_batch_baseline(log_probs, rewards, baseline):
    return -((rewards - rewards.mean()).detach() * log_probs.sum(dim=1)).mean()


def rf_sum_batch(log_probs, rewards, baseline):
    return -((rewards - baseline).detach() * log_probs.sum(dim=1)).sum()


def rf_mean_steps(log_probs, rewards, baseline):
    return -((rewards - baseline).detach() * log_probs.mean(dim=1)).mean()


def rf_mean_all(log_probs, rewards, baseline):
    return -((rewards - baseline).detach()[:, None] * log_probs).mean()


def rf_not_detached(log_probs, rewards, baseline):
    return -((rewards - baseline) * log_probs.sum(dim=1)).mean()


def rf_log_probs_detached(log_probs, rewards, baseline):
    return -((rewards - baseline) * log_probs.detach().sum(dim=1)).mean()


def rf_all_detached(log_probs, rewards, baseline):
    return rf_torch(log_probs, rewards, baseline).detach()


def rf_item(log_probs, rewards, baseline):
    return rf_torch(log_probs, rewards, baseline).item()


def rf_copied(log_probs, rewards, baseline):
    return torch.tensor(rf_torch(log_probs, rewards, baseline))


def rf_per_image(log_probs, rewards, baseline):
    return -(rewards - baseline).detach() * log_probs.sum(dim=1)


def rf_per_step(log_probs, rewards, baseline):
    return -(rewards - baseline).detach()[:, None] * log_probs


def rf_no_return(log_probs, rewards, baseline):
    -((rewards - baseline).detach() * log_probs.sum(dim=1)).mean()


def rf_own_backward(log_probs, rewards, baseline):
    loss = rf_torch(log_probs, rewards, baseline)
    loss.backward()
    return loss


def rf_raises(log_probs, rewards, baseline):
    return -((rewards - baseline).detach() * log_probs.sum(dim=2)).mean()


# ------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (check_doubly_stochastic_penalty, ds_numpy),
        (check_doubly_stochastic_penalty, ds_torch),
        (check_doubly_stochastic_penalty, ds_loop),
        (check_doubly_stochastic_penalty, ds_expanded),
        (check_doubly_stochastic_penalty, ds_library),
        (check_reinforce_loss, rf_torch),
        (check_reinforce_loss, rf_no_grad),
        (check_reinforce_loss, rf_loop_float32),
    ],
)
def test_correct_functions_pass(check, fn):
    result = check(fn)
    assert result.passed and bool(result), str(result)
    assert result.cases_passed == result.cases_total == 6
    assert result.hint == ""
    assert str(result) == f"✔ {check.__name__}: all 6 hidden cases pass"


# -------------------------------------------------------------------------- doubly stochastic penalty

# Cases (0-based) where a bug happens to give the right answer: tau is 1 or steps / L, one step.
DS_HARMLESS = {ds_tau_one: {1}, ds_tau_uniform: {2}, ds_mean_steps: {3}, ds_per_entry: {3}}
# Cases where a bug is named by another hint: with tau = steps / L the gaps cancel and several
# bugs give 0; with one step, one number per step is one number, the wrong axis's.
DS_OTHER_HINT = {
    (ds_plain, 2): "so the gaps add up to exactly 0",
    (ds_square_of_sum, 2): "so the gaps add up to exactly 0",
    (ds_per_step, 3): "Its value is wrong too. You summed over the wrong axis",
}

DS_BUGS = [
    (ds_wrong_axis, "summed over the wrong axis"),
    (ds_abs, "the gaps' sizes"),
    (ds_plain, "L times tau minus the number of steps"),
    (ds_norm, "square root"),
    (ds_square_of_sum, "squared the total gap"),
    (ds_tau_one, "you used tau = 1"),
    (ds_tau_uniform, "you used the even coverage"),
    (ds_mean, "averaged the squared gaps over the locations"),
    (ds_mean_steps, "mean weight over the steps"),
    (ds_per_entry, "compared tau with every single weight"),
    (ds_vector, "one number per location"),
    (ds_per_step, "one number per step"),
    (ds_keepdims, "not an array that holds one entry"),
]


@pytest.mark.parametrize(("fn", "hint"), DS_BUGS)
def test_penalty_bugs_get_targeted_hints_on_every_case(fn, hint):
    assert_failed(check_doubly_stochastic_penalty(fn), 1, hint)
    for index, case in enumerate(doubly_stochastic_penalty_cases()):
        result = run_cases("check_doubly_stochastic_penalty", fn, [case])
        if index in DS_HARMLESS.get(fn, ()):
            assert result.passed, (index, str(result))
        else:
            assert not result.passed and DS_OTHER_HINT.get((fn, index), hint) in result.hint, (index, str(result))


def test_penalty_reference_is_a_hand_computation():
    weights = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    # coverage c = [0.5, 1.0, 0.5]: with tau = 1, 0.25 + 0 + 0.25; with tau = 2/3 (even), 1/36 + 1/9 + 1/36.
    np.testing.assert_allclose(_penalty_reference(weights, 1.0), 0.5, atol=1e-15)
    np.testing.assert_allclose(_penalty_reference(weights, 2 / 3), 1 / 6, atol=1e-15)
    np.testing.assert_allclose(_penalty_reference(np.full((2, 3), 1 / 3), 2 / 3), 0.0, atol=1e-15)
    assert _penalty_reference(weights, 1.0).shape == ()


def test_penalty_cases_are_stochastic_and_cover_the_chapter():
    cases = doubly_stochastic_penalty_cases()
    for case in cases:
        weights, tau = case.args["weights"], case.args["tau"]
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-12)
        assert weights.shape[0] != weights.shape[1]
        np.testing.assert_allclose(case.expected, ((tau - weights.sum(axis=0)) ** 2).sum(), atol=1e-12)
    shapes_taus = [(c.args["weights"].shape, c.args["tau"]) for c in cases]
    assert ((4, 8), 1.0) in shapes_taus  # the paper's tau
    assert ((3, 48), 3 / 48) in shapes_taus  # the chapter's grid, even coverage
    assert any(shape[0] == 1 for shape, _ in shapes_taus)
    one_hot = cases[4].args["weights"]
    assert set(np.unique(one_hot)) == {0.0, 1.0}


def test_penalty_wrong_shape_is_named():
    result = check_doubly_stochastic_penalty(ds_vector)
    assert "your function returned shape (6,); expected shape ()" in result.message
    assert "inputs: weights (3, 6) float64, tau=0.8" in result.message


def test_penalty_raising_function_gives_one_line():
    result = check_doubly_stochastic_penalty(ds_raises)
    assert_failed(result, 1, "add the weights down the steps")
    assert_raised(result, "AxisError", "ds_raises: `return ((tau - weights.sum(axis=2)) ** 2).sum()`")


# -------------------------------------------------------------------------- REINFORCE loss

# Cases (0-based) where a bug happens to give the right answer: b = 0, a batch of one.
RF_HARMLESS = {rf_no_baseline: {2}, rf_baseline_added: {2}, rf_sum_batch: {1}}

RF_BUGS = [
    (rf_sign, "The sign is flipped"),
    (rf_no_baseline, "The baseline is ignored"),
    (rf_baseline_added, "You added the baseline"),
    (rf_batch_baseline, "batch's mean reward as the baseline"),
    (rf_sum_batch, "You summed over the batch"),
    (rf_mean_steps, "averaged the log-probabilities over the steps"),
    (rf_mean_all, "averaged the log-probabilities over the steps"),
    (rf_not_detached, "The gradient reaches the rewards"),
    (rf_log_probs_detached, "No gradient reached log_probs"),
    (rf_per_image, "one loss per image"),
    (rf_per_step, "one loss per image and step"),
]


@pytest.mark.parametrize(("fn", "hint"), RF_BUGS)
def test_reinforce_bugs_get_targeted_hints_on_every_case(fn, hint):
    assert_failed(check_reinforce_loss(fn), 1, hint)
    for index, case in enumerate(reinforce_loss_cases()):
        result = _run_reinforce(fn, [case])
        if index in RF_HARMLESS.get(fn, ()):
            assert result.passed, (index, str(result))
        else:
            assert not result.passed and hint in result.hint, (index, str(result))


@pytest.mark.parametrize(
    ("fn", "said", "hint"),
    [
        (rf_item, "your function returned a float (", "Python number"),
        (rf_copied, "no gradient history (no grad_fn)", "Hold only the advantage"),
        (rf_all_detached, "no gradient history (no grad_fn)", "gradients switched off"),
        (rf_no_return, "your function returned None", RF_RULE),
        (rf_own_backward, "loss.backward() on your result raised RuntimeError", "do not call backward() yourself"),
    ],
)
def test_reinforce_result_that_cannot_be_backpropagated_is_described(fn, said, hint):
    result = check_reinforce_loss(fn)
    assert_failed(result, 1, hint)
    lines = result.message.splitlines()
    assert len(lines) == 3 and said in lines[-1], result.message
    assert "_NotALoss" not in result.message
    assert lines[1] == "  inputs: log_probs (2, 3) float64, rewards (2,) float64, baseline=-4.0"


def test_reinforce_raising_function_names_the_learners_line():
    result = check_reinforce_loss(rf_raises)
    assert_failed(result, 1, "whole sequence of sampled locations")
    assert_raised(result, "IndexError",
                  "rf_raises: `return -((rewards - baseline).detach() * log_probs.sum(dim=2)).mean()`")


def test_reinforce_signature_and_non_function_are_named():
    result = check_reinforce_loss(lambda log_probs, rewards: log_probs.sum())
    assert_failed(result, 1, "fn(log_probs, rewards, baseline)")
    not_called = check_reinforce_loss(rf_torch(*reinforce_loss_cases()[0].args.values()))
    assert not not_called and "check_reinforce_loss(my_function)" in not_called.hint


def test_reinforce_wrong_shape_is_named():
    result = check_reinforce_loss(rf_per_image)
    assert "`loss` has shape (2,); expected shape ()" in result.message


def test_reinforce_cases_cover_the_advantage_signs():
    cases = reinforce_loss_cases()
    advantages = [c.args["rewards"].detach().numpy() - c.args["baseline"] for c in cases]
    assert (advantages[0] > 0).any() and (advantages[0] < 0).any()
    assert cases[1].args["log_probs"].shape[0] == 1 and (advantages[1] > 0).all()
    assert cases[2].args["baseline"] == 0.0
    assert (cases[3].args["rewards"].detach() < -1).all()
    assert (advantages[4] < 0).all()
    for case in cases:
        assert case.args["log_probs"].requires_grad and case.args["rewards"].requires_grad
        assert case.args["log_probs"].shape[1] >= 2 and (case.args["log_probs"].detach() < 0).all()
        loss, grad, reward_grad = case.expected
        assert loss.shape == () and grad.shape == case.args["log_probs"].shape
        assert not reward_grad.any()


def test_reinforce_reference_is_the_reinforce_term_of_hard_attention_loss():
    torch.manual_seed(0)
    model = ImageCaptioner(attention="hard", feature_dim=10, hidden_dim=16, emb_dim=8, channels=8).train()
    with torch.no_grad():
        model.attention.v_a.normal_(0.0, 1.0)  # v_a starts at 0: uniform attention
    g = torch.Generator().manual_seed(0)
    images, targets = torch.rand(3, 1, 16, 48, generator=g), torch.randint(0, 10, (3, 3), generator=g)
    out = model(images, targets)
    assert out.expected is None  # expectation_prob = 0: every image reads its sampled locations
    baseline = -6.9  # about 3 labels at log(1/10) each: some rewards above it, some below
    parts = hard_attention_loss(out, targets, baseline=baseline, entropy_weight=0.0)
    reinforce = parts.loss - parts.nll
    loss, grad, _ = _reinforce_reference(out.log_probs.detach().double().numpy(),
                                         parts.reward.double().numpy(), baseline)
    assert (parts.advantage > 0).any() and (parts.advantage < 0).any()
    np.testing.assert_allclose(reinforce.item(), loss, rtol=1e-5, atol=1e-6)
    # The NLL does not depend on log alpha of the sampled locations, so this is the REINFORCE gradient.
    library_grad = torch.autograd.grad(parts.loss, out.log_probs)[0]
    np.testing.assert_allclose(library_grad.double().numpy(), grad, rtol=1e-5, atol=1e-7)
    # A learner's correct loss on the model's tensors gives the same value.
    rewards = parts.reward.clone().requires_grad_(True)
    np.testing.assert_allclose(rf_torch(out.log_probs, rewards, baseline).item(), loss, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------- both checks


def test_checks_emit_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_doubly_stochastic_penalty(ds_torch)
        assert not check_doubly_stochastic_penalty(ds_raises)
        assert check_reinforce_loss(rf_torch)
        assert not check_reinforce_loss(rf_copied)  # torch.tensor(tensor) warns inside the learner's code
        assert not check_reinforce_loss(rf_not_detached)
        assert not check_reinforce_loss(rf_own_backward)
    assert "the square of each location's gap" in DS_RULE and "Williams 1992" in RF_RULE


def test_failing_result_reproduces_with_its_args():
    result = check_doubly_stochastic_penalty(ds_mean)
    expected = doubly_stochastic_penalty_cases()[0].expected
    assert not np.isclose(ds_mean(*result.args, **result.kwargs), expected)
    np.testing.assert_allclose(ds_numpy(*result.args, **result.kwargs), expected, atol=1e-12)

    result = check_reinforce_loss(rf_sign)
    expected_loss = reinforce_loss_cases()[0].expected[0]
    got = rf_sign(*result.args, **result.kwargs)
    np.testing.assert_allclose(got.item(), -expected_loss, atol=1e-12)
    np.testing.assert_allclose(rf_torch(*result.args, **result.kwargs).item(), expected_loss, atol=1e-12)

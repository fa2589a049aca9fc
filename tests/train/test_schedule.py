"""Tests for the Transformer's learning-rate schedule (attncourse.train.schedule), Vaswani et al. eq. (3)."""

from __future__ import annotations

import math

import pytest
import torch

from attncourse.train.schedule import noam_lambda, peak_lr, warmup_inverse_sqrt


def eq3(step: int, d_model: int, warmup: int) -> float:
    """The paper's formula, written out independently."""
    return d_model ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5))


@pytest.mark.parametrize("d_model, warmup", [(512, 4000), (128, 400), (16, 10)])
def test_values_follow_equation_3(d_model, warmup):
    for step in (1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 3 * warmup, 100_000):
        assert warmup_inverse_sqrt(step, d_model, warmup) == pytest.approx(eq3(step, d_model, warmup), rel=1e-12)
        assert warmup_inverse_sqrt(step, d_model, warmup, scale=2.5) == pytest.approx(
            2.5 * eq3(step, d_model, warmup), rel=1e-12)
    assert warmup_inverse_sqrt(0, d_model, warmup) == 0.0


def test_peak_is_at_warmup_and_the_shape_is_linear_then_inverse_sqrt():
    d_model, warmup = 512, 4000
    rates = [warmup_inverse_sqrt(s, d_model, warmup) for s in range(1, 3 * warmup)]
    assert rates.index(max(rates)) + 1 == warmup
    assert max(rates) == pytest.approx(peak_lr(d_model, warmup)) == pytest.approx(1 / math.sqrt(512 * 4000))
    assert max(rates) == pytest.approx(6.9877e-4, rel=1e-4)  # the base model's peak
    assert rates[99] == pytest.approx(100 * rates[0])  # linear warmup
    later = warmup_inverse_sqrt(4 * warmup, d_model, warmup)
    assert later == pytest.approx(max(rates) / 2)  # 1/sqrt(step) decay


def test_lambda_lr_steps_once_per_batch_and_starts_at_step_one():
    d_model, warmup = 64, 5
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(d_model, warmup))
    seen = []
    for _ in range(12):
        seen.append(optimizer.param_groups[0]["lr"])  # the rate this optimizer step uses
        optimizer.step()
        scheduler.step()
    expected = [eq3(step, d_model, warmup) for step in range(1, 13)]
    assert seen == pytest.approx(expected, rel=1e-12)
    assert seen[0] > 0  # never a wasted step at rate 0
    assert seen.index(max(seen)) == warmup - 1  # the warmup-th optimizer step has the peak


def test_scheduler_state_round_trips_and_records_the_settings():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(32, 7, scale=0.5))
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    assert state["lr_lambdas"] == [{"d_model": 32, "warmup": 7, "scale": 0.5}]
    other_opt = torch.optim.Adam(model.parameters(), lr=1.0)
    other = torch.optim.lr_scheduler.LambdaLR(other_opt, noam_lambda(32, 7, scale=0.5))
    other.load_state_dict(state)
    assert other.get_last_lr() == scheduler.get_last_lr()
    assert other.get_last_lr()[0] == pytest.approx(0.5 * eq3(5, 32, 7))


@pytest.mark.parametrize(
    "kw, message",
    [({"step": -1}, "step"), ({"d_model": 0}, "d_model"), ({"warmup": 0}, "warmup"), ({"scale": 0.0}, "scale"),
     ({"scale": math.inf}, "scale")],
)
def test_bad_arguments_are_rejected(kw, message):
    args = {"step": 1, "d_model": 8, "warmup": 4, "scale": 1.0, **kw}
    with pytest.raises(ValueError, match=message):
        warmup_inverse_sqrt(**args)
    if "step" not in kw:
        with pytest.raises(ValueError, match=message):
            noam_lambda(args["d_model"], args["warmup"], args["scale"])

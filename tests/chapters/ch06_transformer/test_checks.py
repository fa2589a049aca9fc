"""Checks of the Transformer chapter's training exercises: right answers pass, typical bugs get their hint."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attncourse.chapters.ch06_transformer.checks import (
    check_label_smoothing,
    check_noam_schedule,
)
from tests.check_helpers import lenient_hand_offs  # noqa: F401  (a fixture)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")


def good_schedule(steps, d_model, warmup):
    return d_model**-0.5 * np.minimum(steps**-0.5, steps * warmup**-1.5)


def test_schedule_right_answer_and_typical_bugs():
    assert check_noam_schedule(good_schedule).passed
    no_scale = check_noam_schedule(lambda s, d, w: np.minimum(s**-0.5, s * w**-1.5))
    assert not no_scale.passed and "d_model^-0.5" in no_scale.hint
    with_max = check_noam_schedule(lambda s, d, w: d**-0.5 * np.maximum(s**-0.5, s * w**-1.5))
    assert not with_max.passed and "not the larger" in with_max.hint
    wrong_power = check_noam_schedule(lambda s, d, w: d**-0.5 * np.minimum(s**-0.5, s * w**-0.5))
    assert not wrong_power.passed and "grows linearly" in wrong_power.hint


def smoothed(logits, target, epsilon, pad_id, spread_over_others=False, keep_pad=False):
    log_p = torch.log_softmax(torch.from_numpy(logits), -1).numpy()
    vocab = logits.shape[-1]
    if spread_over_others:
        q = np.full(logits.shape, epsilon / (vocab - 1))
        q[np.arange(len(target)), target] = 1 - epsilon
    else:
        q = np.full(logits.shape, epsilon / vocab)
        q[np.arange(len(target)), target] += 1 - epsilon
    loss = -(q * log_p).sum(-1)
    return loss.mean() if keep_pad else loss[target != pad_id].mean()


def test_label_smoothing_right_answers_pass():
    assert check_label_smoothing(smoothed).passed
    def torch_version(lg, t, e, p):
        return F.cross_entropy(torch.from_numpy(lg), torch.from_numpy(t), ignore_index=p, label_smoothing=e)

    assert check_label_smoothing(torch_version).passed


def test_label_smoothing_typical_bugs_get_their_hint():
    plain = check_label_smoothing(lambda lg, t, e, p: smoothed(lg, t, 0.0, p))
    assert not plain.passed and "plain cross-entropy" in plain.hint
    padded = check_label_smoothing(lambda lg, t, e, p: smoothed(lg, t, e, p, keep_pad=True))
    assert not padded.passed and "Padding" in padded.hint
    others = check_label_smoothing(lambda lg, t, e, p: smoothed(lg, t, e, p, spread_over_others=True))
    assert not others.passed and "gold one included" in others.hint


def test_a_raising_function_gives_a_report_not_a_traceback():
    def broken(logits, target, epsilon, pad_id):
        raise RuntimeError("not yet")
    result = check_label_smoothing(broken)
    assert not result.passed and "RuntimeError" in result.message and "Traceback" not in str(result)

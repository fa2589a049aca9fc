"""The checks refuse the package's own implementation of what their exercise asks for.

Handing the work to the reference, as the function itself, through a wrapper, under an
alias or from inside a ``try``, fails with a message naming it; the same maths written
by the learner passes. Unwritten stubs read "not passed yet"; hints start as a nudge.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import attncourse.chapters as chapters
from attncourse.checks import check_causal_mask, check_softmax
from attncourse.checks.core import GENERAL_NUDGE, NOT_YET, reset_attempts
from attncourse.functional import (
    additive_attention_step,
    causal_mask,
    linear_attention,
    masked_softmax,
    online_softmax_step,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
)
from attncourse.functional.luong import gaussian_weights, score_general
from attncourse.functional.temperature import softmax_with_temperature
from attncourse.nn.attention import merge_heads, split_heads
from attncourse.nn.causal_attention import allowed_keys, repeat_kv
from attncourse.nn.conv_attention import receptive_field
from attncourse.nn.image_attention import doubly_stochastic_penalty
from attncourse.nn.rope import apply_rope
from attncourse.train.schedule import warmup_inverse_sqrt

#: (check, the reference it must refuse): every reference a check names.
REFUSED = [
    ("check_softmax", softmax),
    ("check_scaled_dot_product", scaled_dot_product_attention),
    ("check_causal_mask", causal_mask),
    ("check_padding_mask", padding_mask),
    ("check_additive_score", additive_attention_step),
    ("check_masked_softmax", softmax),
    ("check_masked_softmax", masked_softmax),
    ("check_general_score", score_general),
    ("check_local_p_weights", gaussian_weights),
    ("check_temperature_softmax", softmax_with_temperature),
    ("check_split_heads", split_heads),
    ("check_merge_heads", merge_heads),
    ("check_noam_schedule", warmup_inverse_sqrt),
    ("check_receptive_field", receptive_field),
    ("check_doubly_stochastic_penalty", doubly_stochastic_penalty),
    ("check_rope", apply_rope),
    ("check_repeat_kv", repeat_kv),
    ("check_left_padded_causal_mask", allowed_keys),
    ("check_causal_linear_attention", linear_attention),
    ("check_online_softmax_update", online_softmax_step),
    ("check_rescale_output", online_softmax_step),
]


@pytest.mark.parametrize(("check", "ref"), REFUSED, ids=[f"{c}-{r.__name__}" for c, r in REFUSED])
def test_the_reference_itself_and_a_call_to_it_are_refused(check, ref):
    result = chapters.check(check)(ref)
    assert not result.passed and result.message.startswith("not accepted: your function is `")
    assert ref.__name__ in result.message and "package's own" in result.message

    def calls_it(*args, **kwargs):
        return ref(*args, **kwargs)

    result = chapters.check(check)(calls_it)
    assert not result.passed, str(result)
    assert result.message.startswith("not accepted: your function calls `"), result.message
    assert ref.__name__ in result.message
    assert chapters.check(check)(functools.partial(ref)).message.startswith("not accepted")


def test_an_alias_an_import_inside_and_a_swallowed_refusal_are_refused():
    alias = softmax

    def aliased(x, axis=-1):
        return alias(x, axis)

    def imports_it(x, axis=-1):
        from attncourse.functional.numpy_attention import softmax as mine
        return mine(x, axis)

    def swallows(x, axis=-1):
        try:
            return softmax(x, axis)
        except Exception:  # the refusal is a BaseException: it is not caught here
            return np.zeros_like(x)

    def swallows_all(x, axis=-1):
        try:
            return softmax(x, axis)
        except BaseException:
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)

    for fn in (aliased, imports_it, swallows, swallows_all):
        result = check_softmax(fn)
        assert result.message.startswith("not accepted: your function calls"), (fn.__name__, str(result))
    # Everything is put back: the package's softmax works again.
    np.testing.assert_allclose(softmax(np.array([0.0, 0.0])), [0.5, 0.5])


def test_own_code_passes_and_the_references_are_put_back():
    def my_softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    assert check_softmax(my_softmax).passed
    assert check_causal_mask(lambda n: np.tril(np.ones((n, n), dtype=bool))).passed
    import attncourse.functional as F
    assert F.softmax is softmax and F.causal_mask is causal_mask


def test_stubs_read_not_passed_yet():
    def stub(x, axis=-1):
        ...   # your code here

    def released(x, axis=-1):
        raise NotImplementedError()

    for fn in (stub, released):
        result = check_softmax(fn)
        assert not result.passed and result.message.startswith(NOT_YET), str(result)
        assert fn.__name__ in result.message and "..." in result.hint

    def forgot_return(x, axis=-1):
        np.exp(x)

    assert not check_softmax(forgot_return).message.startswith(NOT_YET)


def test_the_first_failure_shows_a_nudge_the_next_the_full_hint(monkeypatch):
    from attncourse.checks import core

    monkeypatch.setattr(core, "NUDGE_ATTEMPTS", 1)  # as in a notebook (conftest sets 0)

    def overflowing(x, axis=-1):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)

    reset_attempts()
    first = check_softmax(overflowing)
    assert first.nudge and "np.exp return for 1000" in str(first) and "keepdims" not in str(first)
    assert "largest exponential into 1" in first.hint  # the full hint, for whoever asks for it
    second = check_softmax(overflowing)
    assert not second.nudge and second.hint in str(second) and "largest exponential into 1" in str(second)
    reset_attempts()
    # A case without a nudge of its own gets the general one, for a mistake not recognised ...
    result = check_causal_mask(lambda n: np.zeros((n, n), dtype=bool))
    assert result.nudge == GENERAL_NUDGE and not result.recognised
    reset_attempts()
    # ... but a mistake the check recognises is named at once (issue 64: the upper triangle).
    result = check_causal_mask(lambda n: np.triu(np.ones((n, n), dtype=bool)))
    assert result.recognised and not result.nudge and "upper triangle" in str(result)
    reset_attempts()
    # A wrong signature is recognised too.
    result = check_causal_mask(lambda n, m: np.tril(np.ones((n, n), dtype=bool)))
    assert result.recognised and not result.nudge and "signature" in str(result)
    reset_attempts()


def test_a_stub_hit_inside_a_written_function_is_named():
    # Issue 64: re-running exercise 1's stub made exercise 2's check blame exercise 2.
    def my_softmax_stub(x, axis=-1):
        raise NotImplementedError()

    def written(x, axis=-1):
        return my_softmax_stub(x, axis)

    result = check_softmax(written)
    assert result.message == f"{NOT_YET}: `my_softmax_stub` is not written yet", result.message

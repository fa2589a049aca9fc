"""Tests of attncourse.widgets, driven programmatically as a learner would click."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncourse.chapters.ch04_self_attention.explorer import (  # noqa: E402
    SelfAttentionStepper,
)
from attncourse.data import SENTENCES, embed, projections, tokenize  # noqa: E402
from attncourse.functional import STEPS  # noqa: E402


def reference_weights(sentence, d_model=4, d_k=3, seed=0):
    """softmax(Q K^T / sqrt(d_k)) written out in NumPy, without the traced path."""
    x = embed(tokenize(sentence), d_model, seed=seed)
    w_q, w_k, _ = projections(d_model, d_k, seed=seed)
    logits = (x @ w_q) @ (x @ w_k).T / np.sqrt(d_k)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def stepper():
    """One stepper for the module (each test puts the controls where it needs them)."""
    s = SelfAttentionStepper()
    yield s
    plt.close("all")


def reset(s, sentence=SENTENCES[0], query=0, step=1, matrix_form=False):
    s.sentence.value = sentence
    s.query.value = query
    s.step.value = step
    s.matrix_form.value = matrix_form


def labels(dropdown):
    return [label for label, _ in dropdown.options]


def test_starts_on_step_one_of_the_first_sentence(stepper):
    fresh = SelfAttentionStepper()
    assert fresh.tokens == tokenize(SENTENCES[0])
    assert fresh.step.value == 1 and fresh.shown["step"] == "project"
    assert fresh.previous.disabled and not fresh.next.disabled
    assert isinstance(fresh.figure, Figure)
    assert fresh.figure.get_suptitle().startswith("Step 1 of 6: project")
    assert "project" in fresh.caption.value
    assert isinstance(fresh.widget, widgets.VBox)
    assert isinstance(fresh.out, widgets.Output) and isinstance(fresh.caption, widgets.HTML)


def test_query_options_follow_the_sentence(stepper):
    reset(stepper)
    assert labels(stepper.query) == ["1: time", "2: flies"]
    stepper.sentence.value = SENTENCES[1]
    tokens = tokenize(SENTENCES[1])
    assert labels(stepper.query) == [f"{i + 1}: {t}" for i, t in enumerate(tokens)]
    assert "2: robot" in labels(stepper.query)
    assert [value for _, value in stepper.query.options] == list(range(len(tokens)))
    assert stepper.tokens == tokens and stepper.trace.x.shape == (len(tokens), 4)
    # A position that exists in the new sentence is kept, one that does not falls back to 0.
    stepper.query.value = 1
    stepper.sentence.value = SENTENCES[2]
    assert stepper.query.value == 1
    stepper.query.value = 8
    stepper.sentence.value = SENTENCES[0]
    assert stepper.query.value == 0 and stepper.trace.query_index == 0


def test_next_and_previous_move_one_step_and_stop_at_the_ends(stepper):
    reset(stepper)
    for expected in range(2, 7):
        stepper.next.click()
        assert stepper.step.value == expected
        assert stepper.shown["step"] == STEPS[expected - 1]
    assert stepper.next.disabled
    stepper.next.click()
    assert stepper.step.value == 6
    for expected in range(5, 0, -1):
        stepper.previous.click()
        assert stepper.step.value == expected
    stepper.previous.click()
    assert stepper.step.value == 1 and stepper.previous.disabled


@pytest.mark.parametrize("sentence, query", [(SENTENCES[1], 1), (SENTENCES[3], 3)])
def test_softmax_step_shows_the_independent_weights(stepper, sentence, query):
    reset(stepper, sentence=sentence, query=query, step=4)
    expected = reference_weights(sentence)
    assert stepper.shown["step"] == "softmax"
    np.testing.assert_allclose(stepper.shown["matrix"], expected[query], rtol=0, atol=1e-12)
    caption = stepper.caption.value
    assert "softmax" in caption
    assert all(f"{w:.2f}" in caption for w in expected[query])
    assert stepper.figure.get_suptitle().startswith("Step 4 of 6: softmax")

    stepper.matrix_form.value = True
    np.testing.assert_allclose(stepper.shown["matrix"], expected, rtol=0, atol=1e-12)
    # The caption still quotes the chosen query's row.
    assert all(f"{w:.2f}" in stepper.caption.value for w in expected[query])


def test_scale_caption_gives_sqrt_d_k(stepper):
    reset(stepper, step=3)
    assert "scale" in stepper.caption.value and "1.73" in stepper.caption.value
    other = SelfAttentionStepper(sentences=["a b c"], d_model=6, d_k=4, seed=2)
    other.step.value = 3
    assert "2.00" in other.caption.value
    assert other.trace.q.shape == (4,) and other.trace.x.shape == (3, 6)


def test_matrix_form_changes_the_shown_shape(stepper):
    reset(stepper, sentence=SENTENCES[3], query=2)
    n, d = len(tokenize(SENTENCES[3])), 3
    vector = {"project": (d,), "score": (n,), "scale": (n,), "softmax": (n,), "weight": (n, d), "sum": (d,)}
    matrix = {"project": (n, d), "score": (n, n), "scale": (n, n), "softmax": (n, n),
              "weight": (n, n, d), "sum": (n, d)}
    for number, name in enumerate(STEPS, start=1):
        stepper.step.value = number
        assert stepper.shown["matrix"].shape == vector[name]
        assert stepper.trace.query_index == 2 and not stepper.shown["matrix_form"]
    stepper.matrix_form.value = True
    for number, name in reversed(list(enumerate(STEPS, start=1))):
        stepper.step.value = number
        assert stepper.shown["matrix"].shape == matrix[name]
        assert stepper.shown["matrix_form"] and stepper.trace.query_index is None
        assert stepper.figure.get_suptitle().startswith(f"Step {number} of 6: {name}")


def test_shown_matrix_is_the_trace_field_of_the_step(stepper):
    reset(stepper, sentence=SENTENCES[3], query=3)
    for number, name in enumerate(STEPS, start=1):
        stepper.step.value = number
        field = stepper.shown["field"]
        np.testing.assert_array_equal(stepper.shown["matrix"], getattr(stepper.trace, field))
        assert name in stepper.caption.value


def test_figures_do_not_accumulate(stepper):
    reset(stepper)
    before = len(plt.get_fignums())
    for _ in range(6):
        stepper.next.click()
    stepper.matrix_form.value = True
    stepper.sentence.value = SENTENCES[3]
    for _ in range(3):
        stepper.previous.click()
    stepper.query.value = 2
    assert len(plt.get_fignums()) <= before + 1


def test_displays_as_its_vbox(stepper):
    bundle = stepper._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == stepper.widget.model_id
    stepper._ipython_display_()  # outside a kernel this must not raise


@pytest.mark.parametrize("kwargs", [{"sentences": []}, {"sentences": ["  "]}, {"d_k": 0}, {"d_model": 0}])
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        SelfAttentionStepper(**kwargs)

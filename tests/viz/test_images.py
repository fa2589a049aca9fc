"""Tests of attncourse.viz.images: attention overlays on canvases and seed learning curves."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attncourse.viz.images import plot_attention_overlay, plot_seed_curves  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _maps(steps=3, rows=4, cols=12):
    maps = np.zeros((steps, rows, cols))
    for t in range(steps):
        maps[t, 1, 3 * t + 1] = 1.0  # one-hot, as hard attention reads
    return maps


def test_overlay_one_panel_per_step_with_predicted_labels():
    image = torch.rand(1, 16, 48)
    fig = plot_attention_overlay(image, torch.as_tensor(_maps()), [7, 2, 9], target=[7, 3, 9], title="canvas")
    assert len(fig.axes) == 3
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "step 1: 7"
    assert titles[1] == "step 2: 2 (true 3)"
    assert fig.axes[1].title.get_color() == "tab:red"
    # The weights cover the whole canvas: same extent as the image underneath.
    canvas, weights = fig.axes[0].get_images()
    assert weights.get_extent() == canvas.get_extent() == [-0.5, 47.5, 15.5, -0.5]
    assert fig._suptitle.get_text() == "canvas"


def test_overlay_marks_the_most_probable_location():
    fig = plot_attention_overlay(np.zeros((16, 48)), _maps(), "123", mark_argmax=True)
    rects = [p for p in fig.axes[2].patches if isinstance(p, Rectangle)]
    assert len(rects) == 1
    # Step 3 peaks at grid cell (1, 7); each cell is 4 x 4 pixels.
    assert rects[0].get_xy() == pytest.approx((7 * 4 - 0.5, 1 * 4 - 0.5))
    assert rects[0].get_width() == pytest.approx(4.0)


def test_overlay_draws_into_given_axes():
    fig, axes = plt.subplots(2, 3)
    out = plot_attention_overlay(np.zeros((16, 48)), _maps(), [1, 2, 3], title="soft", ax_row=axes[1])
    assert out is fig
    assert axes[1, 0].get_ylabel() == "soft"
    assert len(axes[1, 2].get_images()) == 2 and len(axes[0, 0].get_images()) == 0


@pytest.mark.parametrize(
    "image, maps, predicted, match",
    [
        (np.zeros((2, 16, 48)), _maps(), [1, 2, 3], r"\(2, 16, 48\)"),
        (np.zeros((16, 48)), _maps()[0], [1, 2, 3], r"\(4, 12\)"),
        (np.zeros((16, 48)), _maps(), [1, 2], r"2 labels.*\(3, 4, 12\)"),
    ],
)
def test_overlay_bad_shapes_raise(image, maps, predicted, match):
    with pytest.raises(ValueError, match=match):
        plot_attention_overlay(image, maps, predicted)


def test_overlay_wrong_number_of_axes_raises():
    _, axes = plt.subplots(1, 2)
    with pytest.raises(ValueError, match=r"2 axes.*\(3, 4, 12\)"):
        plot_attention_overlay(np.zeros((16, 48)), _maps(), [1, 2, 3], ax_row=axes)


def _history(values):
    return [{"epoch": i + 1, "seconds": 2.0 * (i + 1), "valid_exact_match": v} for i, v in enumerate(values)]


def test_seed_curves_thin_line_per_seed_and_mean():
    histories = {"soft": [_history([0.1, 0.5, 0.9]), _history([0.3, 0.7, 0.9])],
                 "hard": [_history([0.0, 0.2]), _history([0.0, 0.4, 0.6]), _history([0.2, 0.2, 0.2])]}
    fig = plot_seed_curves(histories)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2 + 1 + 3 + 1
    soft_mean, hard_mean = lines[2], lines[6]
    np.testing.assert_allclose(soft_mean.get_ydata(), [0.2, 0.6, 0.9])
    np.testing.assert_allclose(hard_mean.get_ydata(), [0.2 / 3, 0.8 / 3])  # common epochs only
    assert soft_mean.get_linewidth() > lines[0].get_linewidth()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["soft (mean of 2 seeds)", "hard (mean of 3 seeds)"]


def test_seed_curves_on_given_axes_and_seconds():
    fig, (left, right) = plt.subplots(1, 2)
    out = plot_seed_curves({"soft": [_history([0.1, 0.5])]}, x="seconds", ax=right)
    assert out is fig and len(left.get_lines()) == 0
    np.testing.assert_allclose(right.get_lines()[0].get_xdata(), [2.0, 4.0])
    assert right.get_xlabel() == "seconds"


def test_seed_curves_bad_input_raises():
    with pytest.raises(ValueError, match="empty"):
        plot_seed_curves({})
    with pytest.raises(ValueError, match="no histories"):
        plot_seed_curves({"soft": []})
    with pytest.raises(ValueError, match="train_loss.*valid_exact_match"):
        plot_seed_curves({"soft": [_history([0.1])]}, key="train_loss")

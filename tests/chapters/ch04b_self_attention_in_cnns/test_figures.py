"""Figures of where one position of a CNN feature map attends."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attncourse.chapters.ch04b_self_attention_in_cnns.figures import (
    plot_pixel_attention,
    plot_pixel_attention_row,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _canvas_and_map(height=16, width=48, stride=4):
    image = np.zeros((1, height, width), dtype=np.float32)
    image[0, 4:12, 2:10] = 1.0
    weights = np.zeros((height // stride, width // stride))
    weights[1, 9] = 0.75
    weights[2, 1] = 0.25
    return image, weights


def test_figure_layers_and_marker_position():
    image, weights = _canvas_and_map()
    fig = plot_pixel_attention(image, torch.tensor(weights), (2, 9))
    ax = fig.axes[0]
    assert len(ax.images) == 2  # canvas, then the weights over it
    # the weights are stretched over the whole 16 x 48 canvas
    assert ax.images[1].get_extent() == [-0.5, 47.5, 15.5, -0.5]
    np.testing.assert_allclose(ax.images[1].get_array(), weights)
    marker = ax.lines[0]
    # grid cell (2, 9) covers pixels rows 8..11, columns 36..39: its centre is x = 37.5, y = 9.5
    assert marker.get_xdata()[0] == pytest.approx(37.5)
    assert marker.get_ydata()[0] == pytest.approx(9.5)
    frame = ax.patches[0]
    assert frame.get_xy() == (35.5, 7.5)
    assert frame.get_width() == 4 and frame.get_height() == 4
    assert "(2, 9)" in ax.get_title() and "0.75" in ax.get_title()


def test_draws_on_given_axes():
    image = np.zeros((8, 8))
    weights = np.full((4, 4), 1 / 16)
    fig, ax = plt.subplots()
    assert plot_pixel_attention(image, weights, (0, 0), grid_stride=2, ax=ax) is fig
    assert ax.lines[0].get_xdata()[0] == pytest.approx(0.5)


def test_row_has_one_panel_per_query():
    image, weights = _canvas_and_map()
    maps = np.stack([weights, weights[::-1]])
    fig = plot_pixel_attention_row(image, maps, [(0, 0), (3, 11)], titles=["left", "right"])
    assert len(fig.axes) == 2
    assert fig.axes[1].get_title() == "right"
    assert fig.axes[1].lines[0].get_xdata()[0] == pytest.approx(45.5)


def test_bad_shapes_raise_naming_both():
    image, weights = _canvas_and_map()
    with pytest.raises(ValueError, match=r"\(4, 11\).*\(16, 48\)"):
        plot_pixel_attention(image, weights[:, :11], (0, 0))
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        plot_pixel_attention(np.zeros((2, 3, 4)), weights, (0, 0))
    with pytest.raises(ValueError, match="outside"):
        plot_pixel_attention(image, weights, (4, 0))
    with pytest.raises(ValueError, match=r"2 query positions.*\(1, 4, 12\)"):
        plot_pixel_attention_row(image, weights[None], [(0, 0), (1, 1)])

"""Tests of attncourse.viz: the heatmap, the curves and the six self-attention step figures."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from attncourse.chapters.ch04_self_attention.figures import (  # noqa: E402
    STEP_FIGURES,
    plot_project,
    plot_scale,
    plot_score,
    plot_softmax,
    plot_step,
    plot_sum,
    plot_weight,
    step_name,
)
from attncourse.data import SENTENCES, embed, projections, tokenize  # noqa: E402
from attncourse.functional import STEPS, self_attention_trace  # noqa: E402
from attncourse.viz import heatmap, plot_curves  # noqa: E402

# Nine tokens with "the" twice: labels must follow positions, not unique words.
TOKENS = tokenize(SENTENCES[1])
QUERY = 4


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def make_trace(query_index=None, tokens=TOKENS, d_model=4, d_k=3):
    w_q, w_k, w_v = projections(d_model, d_k, seed=0)
    return self_attention_trace(embed(tokens, d_model, seed=0), w_q, w_k, w_v, query_index=query_index)


@pytest.fixture(params=[None, QUERY], ids=["matrix", "vector"])
def trace(request):
    return make_trace(request.param)


def panels(fig):
    """The visible heatmap axes of a figure, in creation order."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.images]


def texts(ax):
    return [t.get_text() for t in ax.texts]


def fmt(values):
    return [f"{v:.2f}" for v in np.ravel(values)]


def xticks(ax):
    return [t.get_text() for t in ax.get_xticklabels()]


def yticks(ax):
    return [t.get_text() for t in ax.get_yticklabels()]


def query_rows(trace):
    return TOKENS if trace.query_index is None else [TOKENS[trace.query_index]]


# ----------------------------------------------------------------------------- step figures


@pytest.mark.parametrize("number, name", list(enumerate(STEPS, start=1)))
def test_every_step_figure_builds_titled_and_labelled(trace, number, name):
    fig = plot_step(trace, TOKENS, name)
    assert f"Step {number} of 6: {name}" in fig.get_suptitle()
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    axes = panels(fig)
    assert axes
    for ax in axes:
        assert ax.get_title() and ax.get_xlabel()
    assert axes[0].get_ylabel()


def test_step_figures_follow_steps_and_accept_numbers():
    assert tuple(STEP_FIGURES) == STEPS
    for number, name in enumerate(STEPS, start=1):
        assert step_name(number) == step_name(name) == name
    trace = make_trace(QUERY)
    assert plot_step(trace, TOKENS, np.int64(4)).get_suptitle().startswith("Step 4 of 6: softmax")
    assert plot_step(trace, TOKENS, "scale").get_suptitle().startswith("Step 3 of 6: scale")


@pytest.mark.parametrize("bad", [0, 7, -1, "soft", "Softmax", True, 2.0, None])
def test_plot_step_rejects_unknown_steps_and_lists_valid_ones(bad):
    with pytest.raises(ValueError) as info:
        plot_step(make_trace(), TOKENS, bad)
    message = str(info.value)
    assert all(name in message for name in STEPS) and "1=" in message and "6=" in message


def test_softmax_figure_shows_weights_with_token_labels(trace):
    (ax,) = panels(plot_softmax(trace, TOKENS))
    assert texts(ax) == fmt(trace.weights)
    assert xticks(ax) == TOKENS
    assert yticks(ax) == query_rows(trace)
    assert ax.images[0].get_clim() == (0.0, 1.0)


def test_score_figure_shows_scores(trace):
    (ax,) = panels(plot_score(trace, TOKENS))
    assert texts(ax) == fmt(trace.scores)
    assert xticks(ax) == TOKENS
    assert yticks(ax) == query_rows(trace)


def test_scale_figure_shows_both_and_names_sqrt_dk(trace):
    fig = plot_scale(trace, TOKENS)
    raw, scaled = panels(fig)
    assert texts(raw) == fmt(trace.scores)
    assert texts(scaled) == fmt(trace.scaled_scores)
    for ax in (raw, scaled):
        assert xticks(ax) == TOKENS and yticks(ax) == query_rows(trace)
    # One colour scale for both, so the shrinking shows.
    assert raw.images[0].get_clim() == scaled.images[0].get_clim()
    assert r"\sqrt{3}" in fig.get_suptitle() and "1.73" in fig.get_suptitle()


def test_scale_title_follows_d_k():
    fig = plot_scale(make_trace(d_k=4), TOKENS)
    assert r"\sqrt{4}" in fig.get_suptitle() and "2.00" in fig.get_suptitle()


def test_project_figure_shows_x_q_k_v(trace):
    x_ax, q_ax, k_ax, v_ax = panels(plot_project(trace, TOKENS))
    assert texts(x_ax) == fmt(trace.x) and texts(k_ax) == fmt(trace.k) and texts(v_ax) == fmt(trace.v)
    assert texts(q_ax) == fmt(trace.q)
    assert xticks(x_ax) == ["x1", "x2", "x3", "x4"]
    assert xticks(q_ax) == ["q1", "q2", "q3"] and xticks(k_ax) == ["k1", "k2", "k3"]
    assert xticks(v_ax) == ["v1", "v2", "v3"]
    for ax in (x_ax, k_ax, v_ax):
        assert yticks(ax) == TOKENS
    assert yticks(q_ax) == query_rows(trace)


def test_vector_form_query_sits_on_its_tokens_row():
    trace = make_trace(QUERY)
    _, q_ax, _, _ = panels(plot_project(trace, TOKENS))
    assert list(q_ax.get_yticks()) == [QUERY]
    drawn = q_ax.images[0].get_array()
    np.testing.assert_array_equal(drawn[QUERY], trace.q)
    assert np.ma.getmaskarray(drawn).sum() + np.isnan(np.ma.filled(drawn, 0.0)).sum() > 0


def test_weight_figure_vector_form_shows_weights_values_and_products():
    trace = make_trace(QUERY)
    w_ax, v_ax, wv_ax = panels(plot_weight(trace, TOKENS))
    assert texts(w_ax) == fmt(trace.weights)
    assert texts(v_ax) == fmt(trace.v)
    assert texts(wv_ax) == fmt(trace.weighted_values)
    for ax in (w_ax, v_ax, wv_ax):
        assert yticks(ax) == TOKENS
    assert v_ax.images[0].get_clim() == wv_ax.images[0].get_clim()


def test_weight_figure_matrix_form_has_one_panel_per_query():
    trace = make_trace()
    axes = panels(plot_weight(trace, TOKENS))
    assert len(axes) == len(TOKENS)
    for i, ax in enumerate(axes):
        assert texts(ax) == fmt(trace.weighted_values[i])
        # Row labels are written on the first panel of each row of panels only.
        assert yticks(ax) == (TOKENS if i % 5 == 0 else [])
        assert repr(TOKENS[i]) in ax.get_title()


def test_sum_figure_shows_output_with_token_labels(trace):
    left, out_ax = panels(plot_sum(trace, TOKENS))
    assert texts(out_ax) == fmt(trace.output)
    assert xticks(out_ax) == ["z1", "z2", "z3"]
    assert yticks(out_ax) == query_rows(trace)
    expected_left = trace.v if trace.query_index is None else trace.weighted_values
    assert texts(left) == fmt(expected_left)
    assert yticks(left) == TOKENS


@pytest.mark.parametrize("plot", list(STEP_FIGURES.values()))
def test_token_count_mismatch_names_both_numbers(plot):
    with pytest.raises(ValueError, match=r"8 tokens.*seq_len 9"):
        plot(make_trace(), TOKENS[:-1])


def test_torch_traces_unbatched_plot_and_batched_are_rejected():
    from attncourse.functional import self_attention

    numpy_trace = make_trace()
    as_tensors = [torch.from_numpy(a) for a in (numpy_trace.x, numpy_trace.w_q, numpy_trace.w_k, numpy_trace.w_v)]
    (ax,) = panels(plot_softmax(self_attention(*as_tensors), TOKENS))
    assert texts(ax) == fmt(numpy_trace.weights)
    batched = self_attention(torch.randn(2, 3, 4), *(torch.randn(4, 3) for _ in range(3)))
    with pytest.raises(ValueError, match=r"unbatched.*\(2, 3, 4\)"):
        plot_softmax(batched, ["a", "b", "c"])


def test_step_figure_texts_render_for_a_two_token_sentence():
    # Mathtext errors only surface when a text is laid out; measuring every
    # text finds them without the cost of drawing each whole figure.
    tokens = tokenize(SENTENCES[0])
    for query in (None, -1):
        trace = make_trace(query, tokens=tokens)
        for name in STEPS:
            fig = plot_step(trace, tokens, name)
            renderer = fig.canvas.get_renderer()
            for text in fig.findobj(Text):
                if text.get_visible() and text.get_text():
                    text.get_window_extent(renderer)
            plt.close(fig)
    fig = plot_sum(make_trace(-1, tokens=tokens), tokens)
    fig.set_dpi(30)
    fig.canvas.draw()


# ----------------------------------------------------------------------------- heatmap


def test_heatmap_labels_and_cell_texts():
    matrix = np.array([[0.125, 0.875], [0.5, 0.5], [1.0, 0.0]])
    ax = heatmap(matrix, ["a", "b", "c"], ["x", "y"], title="t", xlabel="key", ylabel="query")
    assert yticks(ax) == ["a", "b", "c"] and xticks(ax) == ["x", "y"]
    assert texts(ax) == ["0.12", "0.88", "0.50", "0.50", "1.00", "0.00"]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("t", "key", "query")
    assert ax.texts[0].get_position() == (0, 0) and ax.texts[1].get_position() == (1, 0)


def test_heatmap_draws_1d_input_as_one_row():
    ax = heatmap([0.1, 0.2, 0.7], ["q"], ["a", "b", "c"], fmt=".1f")
    assert ax.images[0].get_array().shape == (1, 3)
    assert texts(ax) == ["0.1", "0.2", "0.7"] and yticks(ax) == ["q"]


def test_heatmap_text_colour_is_readable_on_dark_and_light_cells():
    ax = heatmap([[0.0, 1.0]], cmap="Greys", vmin=0.0, vmax=1.0)
    light, dark = ax.texts
    assert light.get_color() == "black" and dark.get_color() == "white"


@pytest.mark.parametrize(
    "rows, cols, numbers",
    [(["a", "b"], None, ("2", "3")), (None, ["x"] * 5, ("5", "4")), (["a"] * 4, ["x"], ("1", "4"))],
)
def test_heatmap_label_mismatch_names_both_numbers(rows, cols, numbers):
    with pytest.raises(ValueError) as info:
        heatmap(np.zeros((3, 4)) if cols is None or len(cols) == 5 else np.zeros((4, 4)), rows, cols)
    message = str(info.value)
    assert all(n in message for n in numbers)


def test_heatmap_mismatch_message_counts():
    with pytest.raises(ValueError, match=r"2 row labels .* 3 rows"):
        heatmap(np.zeros((3, 4)), ["a", "b"])
    with pytest.raises(ValueError, match=r"5 column labels .* 4 columns"):
        heatmap(np.zeros((3, 4)), None, list("abcde"))


def test_heatmap_rejects_3d_input():
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        heatmap(np.zeros((2, 3, 4)))


def test_heatmap_defaults_number_rows_and_columns_and_skips_nan():
    ax = heatmap(np.array([[1.0, np.nan]]), annotate=True)
    assert xticks(ax) == ["0", "1"] and yticks(ax) == ["0"]
    assert texts(ax) == ["1.00"]
    assert len(heatmap(np.eye(2), annotate=False).texts) == 0


def test_heatmap_accepts_torch_tensors_and_existing_axes():
    fig, ax = plt.subplots()
    returned = heatmap(torch.ones(2, 2, requires_grad=True), ax=ax, colorbar=True)
    assert returned is ax
    assert len(fig.axes) == 2  # the heatmap and its colour bar


# ----------------------------------------------------------------------------- curves


def test_plot_curves_draws_one_labelled_line_per_series():
    x = np.arange(1, 6)
    ax = plot_curves(x, {"train": x * 0.1, "test": x * 0.2}, title="Loss", xlabel="epoch", ylabel="loss")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["train", "test"]
    np.testing.assert_allclose(lines[1].get_ydata(), x * 0.2)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train", "test"]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("Loss", "epoch", "loss")
    assert lines[0].get_marker() != lines[1].get_marker()


def test_plot_curves_log_axes_and_no_markers():
    ax = plot_curves([1, 10, 100], {"a": [1, 2, 3]}, title="t", xlabel="x", ylabel="y",
                     logx=True, logy=True, markers=False)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_lines()[0].get_marker() in (None, "None", "")


def test_plot_curves_rejects_bad_input():
    with pytest.raises(ValueError, match=r"'b'.*\(2,\).*3 points"):
        plot_curves([1, 2, 3], {"a": [1, 2, 3], "b": [1, 2]}, title="t", xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="empty"):
        plot_curves([1, 2], {}, title="t", xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="positive"):
        plot_curves([0, 1], {"a": [1, 2]}, title="t", xlabel="x", ylabel="y", logx=True)
    with pytest.raises(ValueError, match="positive"):
        plot_curves([1, 2], {"a": [0, 2]}, title="t", xlabel="x", ylabel="y", logy=True)
    with pytest.raises(TypeError):
        plot_curves([1, 2], {"a": [1, 2]})  # title and axis labels are required

"""Tests of attncourse.viz.seq2seq: the encoder-decoder schematic, alignments, scores by length,
learning curves and the one-step Bahdanau figure."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attncourse.functional import additive_attention_step  # noqa: E402
from attncourse.viz.seq2seq import (  # noqa: E402
    MAX_CONTEXT_ENTRIES,
    plot_alignment,
    plot_bahdanau_step,
    plot_by_length,
    plot_encoder_decoder,
    plot_history,
)

SRC = ["soixante", "et", "onze", "mille"]
TGT = ["seventy", "one", "thousand"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def weights(tgt_len=len(TGT), src_len=len(SRC), seed=0):
    return np.random.default_rng(seed).dirichlet(np.ones(src_len), size=tgt_len)


def texts(ax):
    return [t.get_text() for t in ax.texts]


def xticks(ax):
    return [t.get_text() for t in ax.get_xticklabels()]


def yticks(ax):
    return [t.get_text() for t in ax.get_yticklabels()]


def step_trace(src_len=len(SRC), key_dim=6, query_dim=5, attn_dim=4, seed=0, mask=None):
    rng = np.random.default_rng(seed)
    return additive_attention_step(
        rng.normal(size=query_dim), rng.normal(size=(src_len, key_dim)), rng.normal(size=(attn_dim, query_dim)),
        rng.normal(size=(attn_dim, key_dim)), rng.normal(size=attn_dim), mask=mask,
    )


# ----------------------------------------------------------------------------- plot_encoder_decoder


def test_bottleneck_schematic_shows_tokens_states_and_one_context():
    ax = plot_encoder_decoder(SRC, TGT)
    shown = texts(ax)
    for token in SRC + TGT:
        assert token in shown
    for j in range(1, len(SRC) + 1):
        assert f"$h_{{{j}}}$" in shown
    for t in range(1, len(TGT) + 1):
        assert f"$s_{{{t}}}$" in shown
    assert "$c$" in shown
    assert any("fixed-size context c" in s for s in shown)
    assert not [line for line in ax.lines if line.get_gid() == "attention"]
    assert not ax.axison
    assert ax.get_title()
    # Arrows: S source->h, S-1 between h, T s->y, T-1 between s, h_S->c, c->every s_t.
    arrows = [p for p in ax.patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == len(SRC) + len(SRC) - 1 + len(TGT) + len(TGT) - 1 + 1 + len(TGT)


def test_attention_schematic_draws_one_line_per_source_token_scaled_by_weight():
    w = weights()
    step = 2
    ax = plot_encoder_decoder(SRC, TGT, weights=torch.tensor(w), step=step)
    lines = [line for line in ax.lines if line.get_gid() == "attention"]
    assert len(lines) == len(SRC)
    widths = np.array([line.get_linewidth() for line in lines])
    order = np.argsort(w[step - 1])
    assert np.all(np.diff(widths[order]) >= 0)
    shown = texts(ax)
    for a in w[step - 1]:
        assert f"{a:.2f}" in shown
    assert f"$c_{{{step}}}$" in shown
    assert not any("fixed-size context" in s for s in shown)
    assert str(step) in ax.get_title()


@pytest.mark.parametrize("kwargs, words", [
    (dict(weights=weights(3, 5), step=1), ["(3, 5)", "3 target", "4 source"]),
    (dict(weights=weights()), ["step"]),
    (dict(step=1), ["weights"]),
    (dict(weights=weights(), step=4), ["1..3", "4"]),
    (dict(weights=weights(), step=0), ["1..3", "0"]),
])
def test_schematic_rejects_inconsistent_arguments(kwargs, words):
    with pytest.raises(ValueError) as err:
        plot_encoder_decoder(SRC, TGT, **kwargs)
    for word in words:
        assert word in str(err.value)


def test_schematic_fits_a_given_axes_and_a_long_character_sentence():
    fig, ax = plt.subplots(figsize=(10, 4))
    chars = list("12 march 2024")
    out = plot_encoder_decoder(chars, list("2024-03-12"), weights=weights(10, 13), step=5, ax=ax,
                               bidirectional=True)
    assert out is ax
    assert "␣" in texts(ax)  # a space token stays visible
    fig.canvas.draw()


# ----------------------------------------------------------------------------- plot_alignment


def test_alignment_labels_and_cell_texts():
    w = weights()
    ax = plot_alignment(w, SRC, TGT)
    assert xticks(ax) == SRC
    assert yticks(ax) == TGT
    assert texts(ax) == [f"{v:.2f}" for v in w.ravel()]
    assert ax.get_xlabel() == "input (source) token"
    assert ax.get_ylabel() == "output (target) token"
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert ax.get_title()


def test_alignment_without_annotation_and_with_a_highlighted_row():
    ax = plot_alignment(torch.tensor(weights()), SRC, TGT, annotate=False, highlight=2)
    assert texts(ax) == []
    frames = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(frames) == 1
    assert frames[0].get_y() == pytest.approx(0.5) and frames[0].get_width() == len(SRC)
    with pytest.raises(ValueError, match="1..3"):
        plot_alignment(weights(), SRC, TGT, highlight=4)


@pytest.mark.parametrize("src, tgt", [(SRC[:3], TGT), (SRC, TGT[:2]), (SRC + ["x"], TGT)])
def test_alignment_mismatched_labels_name_both_numbers(src, tgt):
    with pytest.raises(ValueError) as err:
        plot_alignment(weights(), src, tgt)
    message = str(err.value)
    assert "(3, 4)" in message
    assert f"{len(tgt)} target" in message and f"{len(src)} source" in message


def test_alignment_rejects_a_batch():
    with pytest.raises(ValueError, match="tgt_len, src_len"):
        plot_alignment(np.ones((2, 3, 4)) / 4, SRC, TGT)


# ----------------------------------------------------------------------------- plot_by_length


def bucket_result(scale, counts=(120, 100, 80)):
    rows = {"overall": {"count": sum(counts), "exact_match": 0.5 * scale, "token_accuracy": 0.7,
                        "bleu": 40.0, "chrf": 50.0}}
    for (label, n), em in zip(zip(["1-4", "5-9", "10+"], counts), [0.9, 0.5, 0.1]):
        rows[label] = {"count": n, "exact_match": em * scale, "token_accuracy": 0.8, "bleu": 60.0 * scale,
                       "chrf": 70.0}
    return rows


def test_by_length_draws_one_bar_group_per_model_with_counts():
    results = {"no attention": bucket_result(0.5), "Bahdanau": bucket_result(1.0)}
    ax = plot_by_length(results)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 2 and all(len(c) == 3 for c in bars)
    assert xticks(ax) == ["1-4\n(n=120)", "5-9\n(n=100)", "10+\n(n=80)"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["no attention", "Bahdanau"]
    heights = [p.get_height() for p in bars[1]]
    assert heights == pytest.approx([90.0, 50.0, 10.0])  # fractions drawn in percent
    assert "%" in ax.get_ylabel()


def test_by_length_draws_bleu_raw_and_different_counts_joined():
    results = {"a": bucket_result(1.0), "b": bucket_result(0.5, counts=(120, 99, 80))}
    ax = plot_by_length(results, "bleu")
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_height() for p in bars[0]] == pytest.approx([60.0, 60.0, 60.0])
    assert xticks(ax)[1] == "5-9\n(n=100/99)"
    assert ax.get_ylabel() == "BLEU"


def test_by_length_rejects_bad_input():
    with pytest.raises(ValueError, match="metric"):
        plot_by_length({"a": bucket_result(1.0)}, "rouge")
    with pytest.raises(ValueError, match="empty"):
        plot_by_length({})
    other = bucket_result(1.0)
    del other["10+"]
    with pytest.raises(ValueError, match="different buckets"):
        plot_by_length({"a": bucket_result(1.0), "b": other})


# ----------------------------------------------------------------------------- plot_history


def histories():
    return {
        "plain": [{"epoch": i, "valid_exact_match": 1 - 1 / i, "valid_loss": 2.0 / i, "seconds": 2.0}
                  for i in range(1, 6)],
        "attention": [{"epoch": i, "valid_exact_match": 1 - 0.5 / i, "valid_loss": 1.0 / i, "seconds": 3.0}
                      for i in range(1, 4)],
    }


def test_history_one_line_per_run_in_percent_by_epoch():
    ax = plot_history(histories())
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["plain", "attention"]
    assert list(lines[0].get_xdata()) == [1, 2, 3, 4, 5]
    assert lines[1].get_ydata() == pytest.approx([50.0, 75.0, 100 * (1 - 0.5 / 3)])
    assert ax.get_xlabel() == "epoch" and "%" in ax.get_ylabel()


def test_history_against_cumulative_seconds_and_raw_loss():
    ax = plot_history(histories(), key="valid_loss", xaxis="seconds", ylabel="cross-entropy")
    lines = ax.get_lines()
    assert list(lines[1].get_xdata()) == pytest.approx([3.0, 6.0, 9.0])
    assert lines[0].get_ydata() == pytest.approx([2.0 / i for i in range(1, 6)])
    assert ax.get_ylabel() == "cross-entropy"
    assert "s" in ax.get_xlabel()


def test_history_rejects_missing_keys():
    with pytest.raises(ValueError, match="'bleu'"):
        plot_history(histories(), key="bleu")
    with pytest.raises(ValueError, match="xaxis"):
        plot_history(histories(), xaxis="step")
    with pytest.raises(ValueError, match="empty"):
        plot_history({})


# ----------------------------------------------------------------------------- plot_bahdanau_step


def test_bahdanau_step_panels_show_the_trace():
    trace = step_trace()
    fig = plot_bahdanau_step(trace, SRC, step_label=3, out_token="onze")
    assert isinstance(fig, Figure)
    scores_ax, weights_ax, context_ax = fig.axes
    assert xticks(scores_ax) == SRC and xticks(weights_ax) == SRC
    assert texts(scores_ax) == [f"{v:.2f}" for v in trace.scores]
    assert texts(weights_ax) == [f"{v:.2f}" for v in trace.weights]
    assert texts(context_ax) == [f"{v:.2f}" for v in trace.context]
    assert xticks(context_ax) == [str(k) for k in range(1, 7)]
    assert fig.get_suptitle() == "Decoding step 3: next output 'onze'"
    assert "sum = 1.00" in weights_ax.get_title()
    fig.canvas.draw()


def test_bahdanau_step_shows_at_most_24_context_entries():
    trace = step_trace(key_dim=40)
    fig = plot_bahdanau_step(trace, SRC)
    context_ax = fig.axes[2]
    assert len(texts(context_ax)) == MAX_CONTEXT_ENTRIES
    assert f"first {MAX_CONTEXT_ENTRIES} of 40" in context_ax.get_title()
    assert fig.get_suptitle() == "One decoding step"


def test_bahdanau_step_leaves_masked_scores_blank():
    trace = step_trace(mask=np.array([True, True, True, False]))
    fig = plot_bahdanau_step(trace, SRC)
    assert len(texts(fig.axes[0])) == 3
    assert texts(fig.axes[1])[-1] == "0.00"


def test_bahdanau_step_rejects_a_wrong_number_of_tokens():
    with pytest.raises(ValueError) as err:
        plot_bahdanau_step(step_trace(), SRC[:3])
    assert "3 source tokens" in str(err.value) and "src_len 4" in str(err.value)

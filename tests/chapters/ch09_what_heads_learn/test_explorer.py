"""The induction explorer: states follow the checkpoints and heads, book walk, from a run."""

import numpy as np
import pytest

from attncourse.chapters.ch09_what_heads_learn.explorer import (
    ALL_HEADS,
    InductionExplorer,
)
from attncourse.chapters.ch09_what_heads_learn.recipe import (
    InductionConfig,
    snapshot_model,
    train_induction,
)
from attncourse.data.induction import repeated_probe


def fake_weights(n=6, layers=2, heads=2):
    rng = np.random.default_rng(0)
    out = {}
    for step in (0, 10):
        w = np.tril(rng.random((layers, heads, n, n)))
        out[step] = list(w / w.sum(-1, keepdims=True))
    return out


def test_states_follow_checkpoint_and_head():
    weights = fake_weights()
    scores = {10: {"loss_repeated": 1.25, "prefix_L2H1": 0.9, "previous_L2H1": 0.1, "copying_L2H1": 0.8}}
    ex = InductionExplorer(weights, [1, 2, 3, 1, 2, 3], 3, scores)
    assert ex.shown["step"] == 0 and ex.shown["weights"].shape == (2, 2, 6, 6)
    ex.checkpoint.value = 1
    ex.head.value = 2                                   # layer 2, head 1
    np.testing.assert_allclose(ex.shown["weights"], weights[10][1][0])
    assert "step 10" in ex.caption.value and "1.25" in ex.caption.value and "L2H1: prefix 0.90" in ex.caption.value
    assert ex.head_label(3) == "L2H2"


def test_book_walk_and_errors():
    ex = InductionExplorer(fake_weights(), [1, 2, 3, 1, 2, 3], 3)
    states = ex.book_states()
    assert len(states) == 2 * (1 + 4)
    assert ex.head.value == ALL_HEADS
    with pytest.raises(ValueError, match="at least one"):
        InductionExplorer({}, [1, 2], 1)
    with pytest.raises(ValueError, match="expected"):
        InductionExplorer(fake_weights(n=5), [1, 2, 3, 1, 2, 3], 3)
    with pytest.raises(ValueError, match="L3H1"):
        InductionExplorer(fake_weights(), [1, 2, 3, 1, 2, 3], 3, book_heads=["L3H1"])


def test_book_heads_limit_the_book_not_the_live_menu():
    ex = InductionExplorer(fake_weights(), [1, 2, 3, 1, 2, 3], 3, book_heads=["L2H2"])
    states = ex.book_states()
    assert len(states) == 2 * (1 + 1)
    assert [o for _, o in ex.head.options] == [ALL_HEADS, 0, 1, 2, 3]   # live: every head
    html = ex.to_html()
    assert "L2H2" in html and "L1H1</option>" not in html and "all heads" in html


def test_from_models(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    config = InductionConfig(num_layers=1, d_model=16, num_heads=2, vocab_size=12, context=16, max_segment=6,
                             batch_size=8, steps=4, steps_per_epoch=2, eval_size=8)
    run = train_induction(config, progress=False, device="cpu")
    probe = repeated_probe(4, 4, 12)
    rows = {int(row["step"]): row for row in run.history}
    ex = InductionExplorer.from_models({s: snapshot_model(run, s) for s in (0, 4)}, probe, 4,
                                       {4: rows[4]})
    assert ex.steps == [0, 4]
    _, weights = run.model(probe[None], need_weights=True)
    np.testing.assert_allclose(ex.weights[4][0], weights[0][0].detach().numpy(), atol=1e-6)
    _, initial = snapshot_model(run, 0)(probe[None], need_weights=True)
    np.testing.assert_allclose(ex.weights[0][0], initial[0][0].detach().numpy(), atol=1e-6)
    assert "loss on the repeated tokens" not in ex.caption.value      # step 0 has no history row
    ex.checkpoint.value = 1
    assert f"{rows[4]['loss_repeated']:.2f} nats" in ex.caption.value

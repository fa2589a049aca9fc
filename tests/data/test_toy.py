"""Tests of attncourse.data.toy: tokens, reproducible embeddings and projections."""

from __future__ import annotations

import numpy as np
import pytest

from attncourse.data.toy import SENTENCES, embed, projections, tokenize
from attncourse.functional import self_attention_trace

# ----------------------------------------------------------------------------- tokenize


def test_tokenize_lower_cases_and_splits_on_any_whitespace():
    assert tokenize("The Robot  dropped\tthe\nGLASS") == ["the", "robot", "dropped", "the", "glass"]
    assert tokenize("  time flies  ") == ["time", "flies"]
    assert tokenize("word") == ["word"]


@pytest.mark.parametrize("sentence", ["", " ", "\t\n  "])
def test_tokenize_rejects_empty_sentence(sentence):
    with pytest.raises(ValueError, match="empty"):
        tokenize(sentence)


def test_example_sentences_tokenize():
    assert len(SENTENCES) >= 1
    for sentence in SENTENCES:
        tokens = tokenize(sentence)
        assert tokens and all(t == t.lower() for t in tokens)


# ----------------------------------------------------------------------------- embed


@pytest.mark.parametrize("d_model", [1, 4, 7])
def test_embed_shape_and_dtype(d_model):
    tokens = tokenize(SENTENCES[1])
    x = embed(tokens, d_model=d_model)
    assert x.shape == (len(tokens), d_model)
    assert x.dtype == np.float64
    assert np.all(np.isfinite(x))


def test_embed_is_deterministic():
    tokens = tokenize(SENTENCES[2])
    np.testing.assert_array_equal(embed(tokens, d_model=5, seed=3), embed(tokens, d_model=5, seed=3))


def test_embed_is_per_word_across_sentences():
    s1 = tokenize("the robot dropped the glass")
    s2 = tokenize("bank of the river")
    x1, x2 = embed(s1), embed(s2)
    the = embed(["the"])[0]
    # same word, same row: twice in one sentence and across sentences
    np.testing.assert_array_equal(x1[0], the)
    np.testing.assert_array_equal(x1[3], the)
    np.testing.assert_array_equal(x2[2], the)
    # a row does not depend on its position or neighbours
    for i, token in enumerate(s1):
        np.testing.assert_array_equal(x1[i], embed([token])[0])


def test_embed_different_words_differ():
    tokens = sorted(set(tokenize(" ".join(SENTENCES))))
    x = embed(tokens, d_model=4)
    for i in range(len(tokens)):
        for j in range(i + 1, len(tokens)):
            assert not np.array_equal(x[i], x[j]), (tokens[i], tokens[j])


def test_embed_different_seeds_differ():
    tokens = tokenize(SENTENCES[1])
    x0, x1 = embed(tokens, seed=0), embed(tokens, seed=1)
    for i in range(len(tokens)):
        assert not np.array_equal(x0[i], x1[i])


def test_embed_rejects_non_positive_width():
    with pytest.raises(ValueError, match="d_model"):
        embed(["a"], d_model=0)


def test_embed_entries_look_standard_normal():
    x = embed([f"word{i}" for i in range(500)], d_model=20)
    assert abs(x.mean()) < 0.05
    assert abs(x.std() - 1.0) < 0.05


# ----------------------------------------------------------------------------- projections


def test_projection_shapes():
    w_q, w_k, w_v = projections()
    assert w_q.shape == (4, 3) and w_k.shape == (4, 3) and w_v.shape == (4, 3)
    w_q, w_k, w_v = projections(d_model=6, d_k=2, d_v=5)
    assert w_q.shape == (6, 2) and w_k.shape == (6, 2) and w_v.shape == (6, 5)


def test_projections_are_deterministic_and_seeded():
    a, b, c = (projections(d_model=5, d_k=3, d_v=2, seed=s) for s in (7, 7, 8))
    for wa, wb, wc in zip(a, b, c):
        np.testing.assert_array_equal(wa, wb)
        assert not np.array_equal(wa, wc)


def test_projections_are_three_different_matrices():
    w_q, w_k, w_v = projections()
    assert not np.array_equal(w_q, w_k)
    assert not np.array_equal(w_q, w_v)
    assert not np.array_equal(w_k, w_v)


def test_projection_scale_is_one_over_sqrt_d_model():
    w_q, w_k, w_v = projections(d_model=400, d_k=50)
    entries = np.concatenate([w.ravel() for w in (w_q, w_k, w_v)])
    assert abs(entries.std() * np.sqrt(400) - 1.0) < 0.05


def test_toy_data_feeds_self_attention():
    tokens = tokenize(SENTENCES[1])
    x = embed(tokens, d_model=4)
    trace = self_attention_trace(x, *projections(d_model=4, d_k=3))
    assert trace.weights.shape == (len(tokens), len(tokens))
    np.testing.assert_allclose(trace.weights.sum(axis=-1), 1.0, rtol=0, atol=1e-12)

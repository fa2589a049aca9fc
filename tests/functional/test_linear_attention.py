"""Linear attention against its quadratic form and hand-computed cases."""

import numpy as np
import pytest
import torch

from attncourse.functional import (
    elu_feature_map,
    linear_attention,
    linear_attention_weights,
)


def test_feature_map_is_elu_plus_one():
    x = np.linspace(-3, 3, 13)
    np.testing.assert_allclose(elu_feature_map(x), torch.nn.functional.elu(torch.from_numpy(x)).numpy() + 1)
    assert (elu_feature_map(np.array([-50.0])) > 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_linear_equals_its_quadratic_form(causal):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(9, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 3))
    weights = linear_attention_weights(q, k, causal=causal)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)
    if causal:
        assert (np.triu(weights, 1) == 0).all()
    np.testing.assert_allclose(linear_attention(q, k, v, causal=causal), weights @ v, rtol=1e-12)


def test_causal_first_row_is_the_first_value_and_rows_use_only_the_past():
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(6, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    out = linear_attention(q, k, v, causal=True)
    np.testing.assert_allclose(out[0], v[0])
    v2 = v.copy()
    v2[4:] += 10.0  # changing the future does not change the past
    np.testing.assert_allclose(linear_attention(q, k, v2, causal=True)[:4], out[:4])


def test_equal_keys_give_the_mean_of_values():
    q = np.ones((2, 3))
    k = np.zeros((4, 3))
    v = np.arange(8.0).reshape(4, 2)
    np.testing.assert_allclose(linear_attention(q, k, v), np.tile(v.mean(axis=0), (2, 1)))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="d_k"):
        linear_attention(np.ones((2, 3)), np.ones((4, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="as many queries as keys"):
        linear_attention(np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)), causal=True)

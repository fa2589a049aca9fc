"""The passkey task: layout of the sequences, reproducibility, errors."""

import pytest
import torch

from attncourse.data.passkey import passkey_batch, passkey_vocab_size


def test_layout_filler_one_passkey_and_the_query_last():
    batch = passkey_batch(50, 20, n_filler=5, n_keys=3, generator=torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (50, 20) and batch.answer.shape == batch.distance.shape == (50,)
    assert (batch.tokens[:, -1] == 8).all() and passkey_vocab_size(5, 3) == 9
    for row, answer, distance in zip(batch.tokens, batch.answer, batch.distance):
        keys = ((row >= 5) & (row < 8)).nonzero().flatten()
        assert keys.tolist() == [19 - int(distance)] and row[keys[0]] == answer
    assert 1 <= int(batch.distance.min()) and int(batch.distance.max()) <= 19


def test_a_fixed_distance_and_a_seed_reproduce():
    a = passkey_batch(4, 10, distance=9, generator=torch.Generator().manual_seed(1))
    b = passkey_batch(4, 10, distance=9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.tokens, b.tokens) and (a.tokens[:, 0] == a.answer).all()
    assert (a.distance == 9).all()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"batch": 0, "length": 5}, "batch"),
    ({"batch": 2, "length": 1}, "length"),
    ({"batch": 2, "length": 5, "distance": 5}, "distance"),
    ({"batch": 2, "length": 5, "distance": 0}, "distance"),
    ({"batch": 2, "length": 5, "n_keys": 0}, "n_keys"),
])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        passkey_batch(**kwargs)

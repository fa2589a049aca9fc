"""Digit canvases: shapes, ranges, disjoint splits, target order, balance, errors."""

import numpy as np
import pytest

from attncourse.data.canvases import (
    DIGIT_SIZE,
    NUM_SOURCE_IMAGES,
    digit_canvas_task,
    digit_relation_task,
    load_digit_images,
    source_pools,
)


@pytest.fixture(scope="module")
def canvases():
    return digit_canvas_task(40, 10, 10, k=3, height=16, width=48, seed=0)


@pytest.fixture(scope="module")
def relations():
    return digit_relation_task(40, 10, 11, seed=0)


def _splits(s):
    return {"train": s.train, "valid": s.valid, "test": s.test}


def test_shapes_and_range(canvases):
    for name, n in (("train", 40), ("valid", 10), ("test", 10)):
        d = getattr(canvases, name)
        assert len(d) == n and d.k == 3
        assert d.images.shape == (n, 1, 16, 48) and d.images.dtype == np.float32
        assert d.targets.shape == d.digits.shape == d.sources.shape == (n, 3)
        assert d.positions.shape == (n, 3, 2)
        assert d.images.min() >= 0.0 and d.images.max() <= 1.0
        assert set(np.unique(d.targets)) <= set(range(10))
        assert not d.images.flags.writeable


def test_pools_partition_all_images_and_splits_are_disjoint(canvases):
    pools = canvases.pools
    together = np.concatenate(list(pools.values()))
    assert len(together) == NUM_SOURCE_IMAGES and len(np.unique(together)) == NUM_SOURCE_IMAGES
    for name, d in _splits(canvases).items():
        assert np.isin(d.sources, pools[name]).all()
    used = [set(d.sources.ravel()) for d in _splits(canvases).values()]
    assert not (used[0] & used[1]) and not (used[0] & used[2]) and not (used[1] & used[2])


def test_pools_are_stratified():
    _, labels = load_digit_images()
    pools = source_pools(seed=3)
    for pool in pools.values():
        assert set(labels[pool]) == set(range(10))
    assert abs(len(pools["train"]) / NUM_SOURCE_IMAGES - 0.6) < 0.01


def test_targets_read_left_to_right_and_digits_are_where_positions_say(canvases):
    images, labels = load_digit_images()
    d = canvases.train
    cols = d.positions[:, :, 1]
    assert (np.diff(cols, axis=1) >= DIGIT_SIZE).all()  # no overlap, left-to-right order
    assert np.array_equal(d.targets, labels[d.sources])
    for i in range(5):
        for j in range(3):
            r, c = d.positions[i, j]
            assert np.array_equal(d.images[i, 0, r:r + 8, c:c + 8], images[d.sources[i, j]])


def test_spacing_and_rows_vary():
    d = digit_canvas_task(200, 0, 0, seed=1).train
    assert len(np.unique(np.diff(d.positions[:, :, 1], axis=1))) > 5
    assert len(np.unique(d.positions[:, :, 0])) == 16 - 8 + 1


def test_deterministic_and_splits_independent_of_other_counts():
    a = digit_canvas_task(20, 5, 5, seed=7)
    b = digit_canvas_task(20, 5, 5, seed=7)
    c = digit_canvas_task(30, 5, 5, seed=7)
    d = digit_canvas_task(20, 5, 5, seed=8)
    assert np.array_equal(a.train.images, b.train.images) and np.array_equal(a.test.targets, b.test.targets)
    assert np.array_equal(a.valid.images, c.valid.images)
    assert not np.array_equal(a.train.images, d.train.images)


def test_clutter_adds_fragments_only():
    plain = digit_canvas_task(10, 0, 0, seed=2).train
    cluttered = digit_canvas_task(10, 0, 0, clutter=4, seed=2).train
    assert np.array_equal(plain.targets, cluttered.targets)
    assert cluttered.images.sum() > plain.images.sum()
    assert cluttered.images.max() <= 1.0


def test_relation_balanced_disjoint_and_correct(relations):
    for name, d in _splits(relations).items():
        n = len(d)
        assert d.images.shape == (n, 1, 16, 48) and d.targets.shape == (n,)
        assert d.targets.sum() == n // 2
        assert np.array_equal(d.targets, (d.digits[:, 0] == d.digits[:, 1]).astype(np.int64))
        assert (d.sources[:, 0] != d.sources[:, 1]).all()
        assert np.isin(d.sources, relations.pools[name]).all()
        gap = d.positions[:, 1, 1] - (d.positions[:, 0, 1] + DIGIT_SIZE)
        assert (gap >= 16).all()


def test_relation_less():
    d = digit_relation_task(30, 0, 0, relation="less", seed=1).train
    assert (d.digits[:, 0] != d.digits[:, 1]).all()
    assert np.array_equal(d.targets, (d.digits[:, 0] < d.digits[:, 1]).astype(np.int64))
    assert d.targets.sum() == 15


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_train": -1}, "n_train"),
        ({"k": 0}, "k"),
        ({"width": 20}, r"too small for k=3.*width >= 24"),
        ({"height": 7}, r"\(7, 48\)"),
        ({"clutter": -2}, "clutter"),
        ({"pool_fractions": (0.5, 0.5)}, "pool_fractions"),
    ],
)
def test_canvas_bad_inputs(kwargs, match):
    args = {"n_train": 2, "n_valid": 1, "n_test": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        digit_canvas_task(**args)


def test_relation_bad_inputs():
    with pytest.raises(ValueError, match="relation"):
        digit_relation_task(2, 1, 1, relation="bigger")
    with pytest.raises(ValueError, match="too small"):
        digit_relation_task(2, 1, 1, width=30, min_gap=16)
    with pytest.raises(ValueError, match="n_test"):
        digit_relation_task(2, 1, -3)

"""Tests of attncourse.chapters.ch10_serving_attention.checks: right answers pass,
typical bugs fail with the hint naming them."""

import torch

from attncourse.chapters.ch10_serving_attention.checks import (
    BYTES_NO_VALUES_HINT,
    BYTES_ROPE_PER_HEAD_HINT,
    CHANNEL_PER_TOKEN_HINT,
    LOOKUP_LOGICAL_HINT,
    RESIDUAL_UNNORMALISED_HINT,
    check_block_lookup,
    check_cache_bytes,
    check_per_channel_int8,
    check_residual_distribution,
)
from tests.check_helpers import assert_failed


def cache_bytes(config):
    if config["latent_dim"]:
        per_layer = config["latent_dim"] + config["rope_dim"]
    else:
        per_layer = 2 * config["num_kv_heads"] * config["d_head"]
    return config["num_layers"] * per_layer * config["bytes"]


def test_cache_bytes():
    assert check_cache_bytes(cache_bytes).passed
    def keys_only(c):
        return cache_bytes(c) // 2

    assert_failed(check_cache_bytes(keys_only), 1, BYTES_NO_VALUES_HINT)
    def rope_per_head(c):
        if not c["latent_dim"]:
            return cache_bytes(c)
        return c["num_layers"] * (c["latent_dim"] + c["num_heads"] * c["rope_dim"]) * c["bytes"]

    assert_failed(check_cache_bytes(rope_per_head), 3, BYTES_ROPE_PER_HEAD_HINT)


def test_block_lookup():
    assert check_block_lookup(lambda table, t, size: (table[t // size], t % size)).passed
    assert_failed(check_block_lookup(lambda table, t, size: (t // size, t % size)), 1, LOOKUP_LOGICAL_HINT)


def test_per_channel_int8():
    def right(x):
        scale = x.abs().amax(0, keepdim=True) / 127
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        return (x / scale).round().clamp(-127, 127) * scale

    assert check_per_channel_int8(right).passed
    def per_token(x):
        return right(x.T).T

    assert_failed(check_per_channel_int8(per_token), 1, CHANNEL_PER_TOKEN_HINT)


def test_residual_distribution():
    def right(p, q):
        r = (p - q).clamp(min=0)
        return r / r.sum() if r.sum() > 0 else r

    assert check_residual_distribution(right).passed
    assert_failed(check_residual_distribution(lambda p, q: (p - q).clamp(min=0)), 1, RESIDUAL_UNNORMALISED_HINT)

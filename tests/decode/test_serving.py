"""Chapter 10's caches and decoding: paged = contiguous, int8 within its bound, speculative = target."""

import pytest
import torch
from scipy.stats import chisquare

from attncourse.decode.generation import generate
from attncourse.decode.paged import (
    BlockPool,
    PagedSequence,
    block_lookup,
    greedy_with_logits,
    serve_greedy,
)
from attncourse.decode.quantized import QuantizedKVCache, quantized_caches
from attncourse.decode.speculative import (
    emitted_distribution,
    residual_distribution,
    speculative_generate,
    speculative_token,
)
from attncourse.functional.quantize import dequantize_int8, quantize_int8
from attncourse.nn.gpt import GPT


def _gpt(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(24, **{"d_model": 32, "num_heads": 4, "num_layers": 2, "d_ff": 64, **kw})


def test_block_lookup_by_hand():
    table = [7, 2, 9]
    assert [block_lookup(table, t, 4) for t in (0, 3, 4, 9)] == [(7, 0), (7, 3), (2, 0), (9, 1)]


def test_paged_serving_gives_the_contiguous_cache_tokens_and_logits_exactly():
    model = _gpt(num_kv_heads=2)
    pool = BlockPool.for_model(model, num_blocks=32, block_size=4)
    prompts = [torch.tensor(p) for p in ([5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [4])]
    served = serve_greedy(model, prompts, [6, 2, 9], pool)
    for prompt, n, tokens, logits in zip(prompts, [6, 2, 9], served.tokens, served.logits):
        ref_tokens, ref_logits = greedy_with_logits(model, prompt, n)
        assert torch.equal(tokens, ref_tokens) and torch.equal(logits, ref_logits)
    # a request caches prompt + new - 1 tokens (the last is never fed). Step 1 is the fullest:
    # 4 tokens (1 block), 8 (2 blocks, finishing), 2 (1 block); all freed at the end
    assert served.peak_blocks == 4 and pool.used == 0
    assert [len(t) for t in served.states[8].tables] == [0, 0, 3]
    assert served.states[0].tables[1] == [1, 2] and served.states[0].lengths == [3, 7, 1]


def test_prefix_sharing_copies_only_the_partly_filled_block():
    model = _gpt()
    pool = BlockPool.for_model(model, 16, 4)
    prompt = torch.arange(4, 10)  # 6 tokens: one full block, one half full
    served = serve_greedy(model, [prompt] * 3, [3, 3, 3], pool, share_prefix=True)
    ref_tokens, ref_logits = greedy_with_logits(model, prompt, 3)
    assert all(torch.equal(t, ref_tokens) and torch.equal(lg, ref_logits)
               for t, lg in zip(served.tokens, served.logits))
    first, second = served.states[0], served.states[1]
    assert first.ref_counts[:2] == [3, 3] and sum(map(bool, first.ref_counts)) == 2
    assert all(t[0] == 0 for t in second.tables)  # the full block stays shared
    assert len({t[1] for t in second.tables}) == 3  # the half-full one: two copies + the original
    assert served.peak_blocks == 1 + 3


def test_pool_errors_and_exhaustion():
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        BlockPool(4, 0, 1, 1, 2)
    pool = BlockPool(1, 2, 1, 1, 2)
    seq = PagedSequence(pool)
    with pytest.raises(MemoryError, match="1 blocks of 2 tokens"):
        seq.write(0, torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))


def test_block_ids_outside_the_pool_and_double_release_are_refused():
    pool = BlockPool(4, 2, 1, 1, 2)
    a, b = pool.allocate(), pool.allocate()
    for bad, words in ((-1, "blocks are 0 .. 3"), (4, "blocks are 0 .. 3"), (True, "ints"),
                       (1.0, "ints"), (3, "it is free")):
        for method in (pool.share, pool.release, pool.copy):
            with pytest.raises(ValueError, match=words) as info:
                method(bad)
            assert "\n" not in str(info.value)
    assert pool.ref_counts == [1, 1, 0, 0]  # nothing changed by the refused calls
    pool.release(a)
    with pytest.raises(ValueError, match="cannot release block 0: it is free"):
        pool.release(a)  # twice: the count would go to -1 and the block be handed out twice
    assert pool.ref_counts == [0, 1, 0, 0] and pool.allocate() == a and pool.allocate() == 2
    assert b == 1


def test_block_tables_are_checked_before_reading_or_writing():
    pool = BlockPool(4, 2, 1, 1, 2)
    victim, seq = PagedSequence(pool), PagedSequence(pool)
    kv = torch.ones(1, 1, 2, 2)
    victim.write(0, kv, kv)  # holds block 0
    before = pool.k.clone()
    for table, words in (([-1], "cannot read or write through block -1"),
                         ([4], "blocks are 0 .. 3"), ([2], "block 2: it is free")):
        seq.block_table = table
        with pytest.raises(ValueError, match=words):
            seq.write(0, 2 * kv, 2 * kv)  # -1 would wrap around onto another block
        with pytest.raises(ValueError, match=words):
            seq.read(0)
    assert torch.equal(pool.k, before) and pool.ref_counts == [1, 0, 0, 0]
    seq.block_table = []
    seq.write(0, kv, kv)
    seq.block_table = seq.block_table * 2
    with pytest.raises(ValueError, match="holds a block twice"):
        seq.read(0)
    with pytest.raises(ValueError, match="position -1 is outside a block table of 3 blocks"):
        block_lookup([7, 2, 9], -1, 4)
    with pytest.raises(ValueError, match="position 12 is outside"):
        block_lookup([7, 2, 9], 12, 4)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        block_lookup([7, 2, 9], 1, 0)


def test_a_failed_batch_gives_every_block_back():
    model = _gpt()
    pool = BlockPool.for_model(model, num_blocks=5, block_size=4)
    prompts = [torch.tensor([5, 6, 7, 8, 9]), torch.tensor([4, 5, 6])]
    with pytest.raises(MemoryError, match="5 blocks of 4 tokens are all in use"):
        serve_greedy(model, prompts, [20, 20], pool)
    assert pool.used == 0 and sorted(pool._free) == list(range(5))
    served = serve_greedy(model, prompts, [3, 3], pool)  # the pool serves again
    assert torch.equal(served.tokens[0], greedy_with_logits(model, prompts[0], 3)[0])
    with pytest.raises(MemoryError):  # with a shared prompt too
        serve_greedy(model, [prompts[0]] * 3, [20] * 3, pool, share_prefix=True)
    assert pool.used == 0 and all(c == 0 for c in pool.ref_counts)


def test_int8_quantisation_error_is_at_most_half_a_step():
    torch.manual_seed(0)
    x = torch.randn(3, 16, 8, dtype=torch.float64) * torch.tensor([1.0] * 7 + [30.0], dtype=torch.float64)
    for dim in (-1, -2):
        q, s = quantize_int8(x, dim)
        assert q.dtype == torch.int8 and q.abs().max() == 127
        assert ((dequantize_int8(q, s) - x).abs() <= s / 2 + 1e-12).all()
    assert quantize_int8(torch.zeros(2, 3), -1)[0].abs().sum() == 0
    # an outlier channel: per-channel scales keep the other channels fine, per-token ones do not
    per_token = (dequantize_int8(*quantize_int8(x, -1)) - x)[..., :7].abs().mean()
    per_channel = (dequantize_int8(*quantize_int8(x, -2)) - x)[..., :7].abs().mean()
    assert per_channel < per_token / 5


@pytest.mark.parametrize("keys", ["token", "channel"])
def test_quantised_cache_reads_close_to_the_float_cache(keys):
    model = _gpt().double()
    tokens = torch.randint(4, 24, (2, 21))
    ref, _ = model(tokens)
    caches = quantized_caches(model, 2, keys=keys, group=8)
    first, _ = model(tokens[:, :13], caches)
    rest = [model(tokens[:, t:t + 1], caches)[0] for t in range(13, 21)]
    out = torch.cat([first] + rest, 1)
    assert 0 < (out - ref).abs().max() < 0.05
    if keys == "channel":
        assert caches[0].residual.shape[2] == 21 % 8 and caches[0].k_q.shape[2] == 16
    with pytest.raises(ValueError, match="keys must be one of"):
        QuantizedKVCache(1, 1, 4, keys="head")


def test_emitted_distribution_is_the_targets_to_float_precision():
    torch.manual_seed(3)
    for _ in range(20):
        p = torch.softmax(3 * torch.randn(40, dtype=torch.float64), 0)
        q = torch.softmax(3 * torch.randn(40, dtype=torch.float64), 0)
        q[:5] = 0  # tokens the draft never proposes
        q /= q.sum()
        assert (emitted_distribution(p, q) - p).abs().max() < 1e-15
    assert residual_distribution(p, p).sum() == 0


def test_the_rule_sampled_passes_a_chi_square_test():
    torch.manual_seed(4)
    p = torch.softmax(torch.randn(6, dtype=torch.float64), 0)
    q = torch.softmax(torch.randn(6, dtype=torch.float64), 0)
    generator = torch.Generator().manual_seed(0)
    n = 4000
    counts = torch.bincount(torch.tensor([speculative_token(p, q, generator)[0] for _ in range(n)]),
                            minlength=6)
    assert chisquare(counts.numpy(), (n * p).numpy()).pvalue > 0.01
    wrong = chisquare(counts.numpy(), (n * q).numpy()).pvalue  # the draft's distribution is rejected
    assert wrong < 1e-6


def test_speculative_generation_counts_and_a_perfect_draft():
    target, draft = _gpt(0), _gpt(1, d_model=16, num_heads=2, num_layers=1)
    prompt = torch.tensor([4, 5, 6])
    tokens, stats = speculative_generate(target, draft, prompt, 25, k=3, seed=1)
    assert tokens.shape == (25,) and stats.emitted == 25
    assert stats.rounds <= 25 and stats.accepted <= stats.examined <= stats.drafted == 3 * stats.rounds
    assert 0 <= stats.acceptance_rate < 1
    # every round examines up to its first rejection: rejections = rounds not fully accepted
    assert stats.examined - stats.accepted <= stats.rounds
    assert stats.emitted <= stats.accepted + stats.rounds
    same, stats = speculative_generate(target, target, prompt, 24, k=3, seed=1)
    assert stats.acceptance_rate == 1.0 and stats.rounds == 6  # 4 tokens per target pass
    # with a draft equal to the target, only proposals are drawn: tokens are the target's samples
    assert torch.equal(same[:3], generate(target, prompt, 3, seed=1))


def test_speculative_generation_with_an_mla_target_and_errors():
    target, draft = _gpt(0, latent_dim=8), _gpt(1, d_model=16, num_heads=2, num_layers=1)
    tokens, stats = speculative_generate(target, draft, torch.tensor([4, 5]), 12, k=2)
    assert tokens.shape == (12,) and stats.rounds >= 4
    with pytest.raises(ValueError, match="k .*>= 1, got 0"):
        speculative_generate(target, draft, torch.tensor([4]), 5, k=0)
    other = GPT(30, d_model=16, num_heads=2, num_layers=1)
    with pytest.raises(ValueError, match="draft model has 30 tokens, the target 24"):
        speculative_generate(target, other, torch.tensor([4]), 5)

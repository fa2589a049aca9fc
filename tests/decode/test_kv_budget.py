"""attncourse.decode.kv_budget (selection rules) and kv_harness (prefill, cut, go on).

The rules are checked on cases worked by hand; the harness against the uncached full
forward of a tiny random GPT (and, when its wheel is installed, SmolLM2), with masks
written out for the evicted positions.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attncourse.decode.kv_budget import (
    check_budget,
    h2o,
    keep_mask,
    page_min_max,
    pool_heads,
    quest,
    quest_bound,
    sink_window,
    snapkv,
    snapkv_votes,
)
from attncourse.decode.kv_harness import (
    PASSKEY_FILLER,
    QuestCache,
    attach_quest,
    bytes_per_token,
    cache_nbytes,
    cut,
    gather_positions,
    passkey_context,
    prefill,
    run_budget,
    select,
)
from attncourse.nn import GPT
from attncourse.nn.attention import KVCache
from attncourse.nn.rope import apply_rope
from tests.pretrained_helpers import needs_wheel

# A causal weight matrix (rows sum to 1), worked by hand below.
WEIGHTS_6x6 = torch.tensor(
    [
        [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [0.5, 0.5, 0.0, 0.0, 0.0, 0.0],
        [0.6, 0.1, 0.3, 0.0, 0.0, 0.0],
        [0.4, 0.1, 0.4, 0.1, 0.0, 0.0],
        [0.5, 0.2, 0.1, 0.1, 0.1, 0.0],
        [0.3, 0.3, 0.1, 0.1, 0.1, 0.1],
    ]
)


# --- the rules, by hand -----------------------------------------------------------


def test_sink_window_keeps_the_first_sinks_and_the_last_positions():
    assert sink_window(10, 5, num_sinks=2).tolist() == [[[0, 1, 7, 8, 9]]]
    assert sink_window(10, 5, num_sinks=0).tolist() == [[[5, 6, 7, 8, 9]]]
    assert sink_window(10, 5, num_sinks=5).tolist() == [[[0, 1, 2, 3, 4]]]
    assert sink_window(10, 10, num_sinks=4)[0, 0].tolist() == list(range(10))
    both = sink_window(10, 6, num_sinks=4, batch=2, num_kv_heads=3)
    assert both.shape == (2, 3, 6) and (both == torch.tensor([0, 1, 2, 3, 8, 9])).all()


def test_h2o_on_a_6x6_matrix_worked_by_hand():
    accumulated = WEIGHTS_6x6.sum(0)[
        None, None
    ]  # column sums: 3.3, 1.2, 0.9, 0.3, 0.2, 0.1
    torch.testing.assert_close(
        accumulated[0, 0], torch.tensor([3.3, 1.2, 0.9, 0.3, 0.2, 0.1])
    )
    # budget 4, half recent: the recent {4, 5}, then the two heaviest of 0..3: {0, 1}
    assert h2o(accumulated, 4).tolist() == [[[0, 1, 4, 5]]]
    # budget 3: recent {5}; heavy: the two heaviest of 0..4
    assert h2o(accumulated, 3).tolist() == [[[0, 1, 5]]]
    assert h2o(accumulated, 4, recent=1).tolist() == [[[0, 1, 2, 5]]]
    assert h2o(accumulated, 4, recent=0).tolist() == [[[0, 1, 2, 3]]]
    # a heavy hitter late in the text is kept over earlier light ones
    late = torch.tensor([[[0.1, 0.2, 0.1, 5.0, 0.1, 0.0, 0.0, 0.1]]])
    assert h2o(late, 4).tolist() == [[[1, 3, 6, 7]]]
    assert h2o(accumulated, 6)[0, 0].tolist() == list(range(6))


def test_pool_heads_sums_each_kv_heads_group():
    scores = torch.arange(8.0).reshape(
        1, 4, 2
    )  # heads 0, 1 -> kv head 0; 2, 3 -> kv head 1
    assert pool_heads(scores, 2).tolist() == [[[2.0, 4.0], [10.0, 12.0]]]
    assert pool_heads(scores, 4).tolist() == scores.tolist()
    with pytest.raises(ValueError, match="num_kv_heads"):
        pool_heads(scores, 3)


def test_snapkv_votes_by_hand():
    weights = torch.tensor(
        [[[[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], [[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]]]]
    )  # (1, 2 heads, window 2, 3 keys)
    torch.testing.assert_close(
        snapkv_votes(weights, 1), torch.tensor([[[0.8, 1.9, 1.3]]])
    )
    torch.testing.assert_close(
        snapkv_votes(weights, 2), torch.tensor([[[0.3, 0.4, 1.3], [0.5, 1.5, 0.0]]])
    )


def test_snapkv_pooling_keeps_a_strong_keys_neighbours():
    votes = torch.tensor(
        [[[0.05, 0.0, 0.9, 0.0, 0.0, 0.3, 0.0, 0.0, 0.25, 0.0, 0.7, 0.8]]]
    )
    # window 2: positions 10, 11 kept; 3 picks from the prefix 0..9.
    # max pool, kernel 3: .05, .9, .9, .9, .3, .3, .3, .25, .25, .25 -> {1, 2, 3}
    assert snapkv(votes, 5, window=2, kernel_size=3).tolist() == [[[1, 2, 3, 10, 11]]]
    # no pooling: the three largest votes {2, 5, 8}
    assert snapkv(votes, 5, window=2, kernel_size=1).tolist() == [[[2, 5, 8, 10, 11]]]
    # avg pool, kernel 3 (zero padding counted):
    # .017, .317, .3, .3, .1, .1, .1, .083, .083, .083
    assert snapkv(votes, 5, window=2, kernel_size=3, pool="avg").tolist() == [
        [[1, 2, 3, 10, 11]]
    ]
    assert snapkv(votes, 4, window=2, kernel_size=3, pool="avg").tolist() == [
        [[1, 2, 10, 11]]
    ]
    assert snapkv(votes, 2, window=2).tolist() == [[[10, 11]]]


def test_quest_bound_is_at_least_every_keys_score_and_exact_on_one_key_pages():
    torch.manual_seed(0)
    keys = torch.randn(2, 3, 64, 8)
    query = torch.randn(2, 3, 8)
    for page_size in (1, 4, 16):
        minimum, maximum = page_min_max(keys, page_size)
        bound = quest_bound(query, minimum, maximum)
        scores = (keys @ query[..., None])[..., 0].unflatten(
            -1, (64 // page_size, page_size)
        )
        true_max = scores.amax(-1)
        assert bound.shape == (2, 3, 64 // page_size)
        assert (bound >= true_max - 1e-6).all()
        if page_size == 1:
            torch.testing.assert_close(bound, true_max)
        else:
            assert (
                bound > true_max + 1e-3
            ).any()  # a bound, not the maximum, on pages of several keys


def test_quest_picks_the_page_of_highest_bound_by_hand():
    # pages of 2 keys, d_k = 2; query (sum over the group of 2 heads) = (1, 1)
    keys = torch.tensor(
        [
            [1.0, 0.0],
            [0.0, 1.0],  # page 0: min (0, 0), max (1, 1): bound 2
            [-1.0, 0.0],
            [0.0, -1.0],  # page 1: min (-1, -1), max (0, 0): bound 0
            [2.0, 2.0],
            [-2.0, -2.0],  # page 2: min (-2, -2), max (2, 2): bound 4
            [0.0, 0.0],
        ]
    )[None, None]  # position 6: the unfinished page, always kept
    queries = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]])
    minimum, maximum = page_min_max(keys[..., :6, :], 2)
    assert quest_bound(queries.sum(1, keepdim=True), minimum, maximum).tolist() == [
        [[2.0, 0.0, 4.0]]
    ]
    assert quest(queries, keys, 2, page_size=2).tolist() == [[[4, 5, 6]]]
    assert quest(queries, keys, 4, page_size=2).tolist() == [[[0, 1, 4, 5, 6]]]
    assert quest(queries, keys, 6, page_size=2)[0, 0].tolist() == list(range(7))
    # the opposite query: bounds 0, 2, 4 for pages 0, 1, 2
    assert quest(-queries, keys, 4, page_size=2).tolist() == [[[2, 3, 4, 5, 6]]]


def test_keep_mask_marks_the_kept_positions():
    mask = keep_mask(torch.tensor([[[0, 2], [1, 3]]]), 4)
    assert mask.tolist() == [[[True, False, True, False], [False, True, False, True]]]


def test_bad_options_raise_value_errors_naming_them():
    votes = torch.rand(1, 2, 16)
    keys = torch.randn(1, 2, 16, 4)
    cases = [
        (lambda: check_budget(0, 8), "budget"),
        (lambda: check_budget(9, 8), "budget"),
        (lambda: check_budget(2.0, 8), "budget"),
        (lambda: sink_window(8, 4, num_sinks=5), "num_sinks"),
        (lambda: sink_window(8, -1), "budget"),
        (lambda: h2o(votes, 0), "budget"),
        (lambda: h2o(votes, 17), "budget"),
        (lambda: h2o(votes, 4, recent=5), "recent"),
        (lambda: snapkv(votes, 4, window=8), "window"),
        (lambda: snapkv(votes, 8, window=4, kernel_size=4), "kernel_size"),
        (lambda: snapkv(votes, 8, window=4, pool="median"), "pool"),
        (lambda: page_min_max(keys, 5), "page_size"),
        (lambda: quest(torch.randn(1, 2, 4), keys, 6, page_size=4), "page_size"),
        (lambda: quest(torch.randn(1, 2, 4), keys, 20, page_size=4), "budget"),
        (lambda: quest(torch.randn(1, 2, 4), keys, 4, page_size=0), "page_size"),
    ]
    for call, option in cases:
        with pytest.raises(ValueError, match=option):
            call()


# --- the harness on a tiny random GPT ---------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = GPT(
        vocab_size=40,
        d_model=32,
        num_heads=4,
        num_kv_heads=2,
        num_layers=2,
        max_len=128,
    ).eval()
    ids = torch.randint(0, 40, (1, 56))
    return model, ids[:, :48], ids[:, 48:]


def full_loss(model, context, continuation, mask=None):
    """The continuation's loss from the uncached forward over context + continuation."""
    with torch.no_grad():
        logits = model(torch.cat([context, continuation], 1), mask=mask)[0]
    n = context.shape[1]
    return float(F.cross_entropy(logits[0, n - 1 : -1], continuation[0]))


def test_the_full_budget_equals_the_uncached_forward(tiny):
    model, context, continuation = tiny
    record = prefill(model, context, window=8)
    reference = full_loss(model, context, continuation)
    for rule in ("full", "sink_window", "h2o", "snapkv", "quest"):
        run = run_budget(model, record, continuation, rule, context.shape[1])
        assert abs(run.loss - reference) < 1e-5, rule
    # a budget below the context changes the loss
    assert (
        abs(run_budget(model, record, continuation, "h2o", 8).loss - reference) > 1e-4
    )


def test_prefill_reduces_each_layers_weights(tiny):
    model, context, _ = tiny
    record = prefill(model, context, window=8)
    with torch.no_grad():
        weights = model(context, need_weights=True)[1]
    for layer, w in enumerate(weights):  # (1, 4 heads, 48, 48); heads 0, 1 -> kv head 0
        torch.testing.assert_close(
            record.accumulated[layer], w.sum(2).reshape(1, 2, 2, 48).sum(2)
        )
        torch.testing.assert_close(
            record.votes[layer], w[:, :, -8:].sum(2).reshape(1, 2, 2, 48).sum(2)
        )
        assert record.caches[layer].k.shape == (1, 2, 48, 8)
    assert record.length == 48 and record.last_logits.shape == (1, 40)


def test_sink_window_cut_equals_the_full_forward_with_the_evicted_keys_masked(tiny):
    model, context, continuation = tiny
    record = prefill(model, context, window=8)
    n, m = context.shape[1], continuation.shape[1]
    kept = sink_window(n, 12, num_sinks=4)[0, 0]
    mask = torch.ones(n + m, n + m, dtype=torch.bool).tril()
    seen = torch.zeros(n, dtype=torch.bool)
    seen[kept] = True
    mask[n:, :n] &= seen  # the continuation's queries see only the kept context
    run = run_budget(model, record, continuation, "sink_window", 12, num_sinks=4)
    assert abs(run.loss - full_loss(model, context, continuation, mask)) < 1e-5
    assert (
        run.nbytes == 2 * 2 * (2 * 12 * 8) * 4
    )  # layers x (k, v) x (kv heads x positions x d_k) x fp32


def test_a_cut_cache_holds_the_prefills_keys_at_the_kept_positions(tiny):
    model, context, _ = tiny
    record = prefill(model, context, window=8)
    for rule in ("h2o", "snapkv"):
        caches = cut(record, rule, 16)
        for layer, cache in enumerate(caches):
            kept = select(record, layer, rule, 16)
            assert kept.shape == (1, 2, 16) and (kept.diff(dim=-1) > 0).all()
            for head in range(2):
                torch.testing.assert_close(
                    cache.k[0, head], record.caches[layer].k[0, head, kept[0, head]]
                )
                torch.testing.assert_close(
                    cache.v[0, head], record.caches[layer].v[0, head, kept[0, head]]
                )
    with pytest.raises(ValueError, match="rule"):
        cut(record, "random", 16)
    with pytest.raises(ValueError, match="budget"):
        cut(record, "h2o", 49)
    with pytest.raises(ValueError, match="window"):
        prefill(model, context, window=49)
    mla = GPT(vocab_size=40, d_model=32, num_heads=4, num_layers=1, latent_dim=8)
    with pytest.raises(ValueError, match="model"):
        prefill(mla, context, window=8)


def test_int8_cut_stays_close_and_is_smaller(tiny):
    model, context, continuation = tiny
    record = prefill(model, context, window=8)
    plain = run_budget(model, record, continuation, "snapkv", 24)
    int8 = run_budget(model, record, continuation, "snapkv", 24, int8=True)
    assert abs(int8.loss - plain.loss) < 0.02 and int8.loss != plain.loss
    # per layer and kv head: int8 codes of 24 values and of the 16 keys of one full
    # group; in float32, 24 value scales, the group's 8 key scales (one per channel)
    # and the 8 keys still waiting for a group (8 x 8)
    assert int8.nbytes == 2 * 2 * ((24 + 16) * 8 + 4 * (24 + 8 + 64))


def test_quest_reads_the_pages_its_query_picks(tiny):
    model, context, continuation = tiny
    record = prefill(model, context, window=8)
    caches = cut(record, "quest", 16, page_size=8)
    hooks = attach_quest(model)
    try:
        with torch.no_grad():
            out = model(continuation[:, :1], caches, positions=torch.tensor([48]))[0]
    finally:
        for hook in hooks:
            hook.remove()
    # layer 0's query, written out: W^Q on the normed (scaled) embedding, RoPE at 48
    attn = model.blocks[0].attn
    assert model.spec.scale_embedding
    x = model.blocks[0].attn_norm(model.embedding(continuation[:, :1]) * 32**0.5)
    q = apply_rope(
        attn.w_q(x).reshape(1, 1, 4, 8).transpose(1, 2),
        torch.tensor([48]),
        attn.rope_base,
    )
    torch.testing.assert_close(caches[0].query, q[:, :, -1])
    assert caches[0].kept.shape == (1, 2, 17) and caches[0].kept[0, 0, -1] == 48
    assert torch.equal(caches[0].kept, quest(q[:, :, -1], caches[0].all_k, 16, 8))
    assert len(caches[0]) == 49 and caches[0].k.shape == (1, 2, 17, 8)
    assert torch.equal(caches[1].kept, quest(caches[1].query, caches[1].all_k, 16, 8))
    # the same step through plain caches holding each layer's selected context positions
    plain = [
        KVCache(
            gather_positions(c.k, q.kept[..., :-1]),
            gather_positions(c.v, q.kept[..., :-1]),
        )
        for c, q in zip(record.caches, caches)
    ]
    with torch.no_grad():
        torch.testing.assert_close(
            model(continuation[:, :1], plain, positions=torch.tensor([48]))[0], out
        )
    # later steps page the context only: the decoded keys are all read
    hooks = attach_quest(model)
    try:
        with torch.no_grad():
            for i in range(1, 8):
                model(
                    continuation[:, i : i + 1], caches, positions=torch.tensor([48 + i])
                )
    finally:
        for hook in hooks:
            hook.remove()
    for cache in caches:
        assert cache.kept.shape == (1, 2, 24) and len(cache) == 56
        assert (cache.kept[..., 16:] == torch.arange(48, 56)).all()
        assert torch.equal(
            cache.kept[..., :16], quest(cache.query, cache.all_k[:, :, :48], 16, 8)
        )
    with pytest.raises(ValueError, match="one token"):
        QuestCache(record.caches[0].k, record.caches[0].v, 16).append(
            *(record.caches[0].k[:, :, :2],) * 2
        )
    assert torch.isfinite(out).all()


def test_quest_caches_hold_everything_and_the_page_metadata(tiny):
    model, context, continuation = tiny
    record = prefill(model, context, window=8)
    run = run_budget(model, record, continuation, "quest", 16, page_size=8)
    assert run.nbytes == 2 * 4 * (
        2 * 2 * 48 * 8 + 2 * 6 * 8 * 2
    )  # full k, v + min, max per page, fp32
    assert run.loss != run_budget(model, record, continuation, "full", 48).loss
    with pytest.raises(ValueError, match="int8"):
        cut(record, "quest", 16, int8=True)


def test_greedy_continuation_with_the_full_budget_equals_uncached_argmax(tiny):
    model, context, _ = tiny
    record = prefill(model, context, window=8)
    run = run_budget(model, record, context[:, :2], "full", 48, greedy_steps=5)
    tokens = context
    with torch.no_grad():
        for _ in range(5):
            tokens = torch.cat([tokens, model(tokens)[0][:, -1:].argmax(-1)], 1)
    assert torch.equal(run.greedy, tokens[:, 48:])


def test_bytes_per_token_by_hand(tiny):
    model = tiny[0]
    assert (
        bytes_per_token(model) == 2 * 2 * 2 * 8 * 4
    )  # layers, k and v, kv heads, d_k, fp32
    assert bytes_per_token(model, dtype=torch.bfloat16) == 2 * 2 * 2 * 8 * 2
    # int8: per layer and kv head, 2 d_k codes, a value scale, d_k key scales per 16
    assert bytes_per_token(model, int8=True) == 2 * 2 * (2 * 8 + 4 + 8 * 4 / 16)
    assert cache_nbytes(model.init_cache(1)) == 0


def test_passkey_context_places_the_needle():
    def encode(text):
        return [ord(c) for c in text]

    ids = passkey_context(encode, "4321", 200, depth=0.5, filler="abcdefghij" * 30)
    text = "".join(map(chr, ids))
    assert len(ids) == 200
    assert text.endswith("What is the pass key? The pass key is")
    # the needle takes 57 characters, the question 38: 105 of filler, the needle
    # after round(52.5) = 52 (Python rounds halves to even)
    needle = " The pass key is 4321. Remember it. 4321 is the pass key."
    assert text.index(needle) == 52
    assert text[:52] == ("abcdefghij" * 6)[:52]
    default = "".join(map(chr, passkey_context(encode, "4321", 400, depth=1.0)))
    assert default.startswith(PASSKEY_FILLER[0] + PASSKEY_FILLER[1])
    assert default[400 - 95 :] == needle + " What is the pass key? The pass key is"
    with pytest.raises(ValueError, match="filler"):
        passkey_context(encode, "1", 200, filler="ab")
    with pytest.raises(ValueError, match="depth"):
        passkey_context(encode, "1", 200, depth=1.5)


# --- SmolLM2 -------------------------------------------------------------------------


@needs_wheel
def test_smollm2_full_budget_equals_its_uncached_forward():
    pytest.importorskip(
        "tokenizers",
        reason="tokenizers is not installed (pip install tokenizers==0.23.3)",
    )
    from attncourse.data.text import course_text
    from attncourse.pretrained.model import load_smollm2

    model, tokenizer = load_smollm2()
    ids = torch.tensor([tokenizer.encode(course_text()[:2000])[:80]])
    context, continuation = ids[:, :64], ids[:, 64:]
    record = prefill(model, context, window=16)
    reference = full_loss(model, context, continuation)
    assert (
        abs(run_budget(model, record, continuation, "full", 64).loss - reference) < 1e-4
    )
    assert (
        abs(run_budget(model, record, continuation, "quest", 64).loss - reference)
        < 1e-4
    )
    assert bytes_per_token(model) == 46_080 and bytes_per_token(
        model, int8=True
    ) == 30 * 3 * (128 + 4 + 16)
    # a quarter of the context changes every rule's loss (on 16 tokens of Markdown it
    # may fall as well as rise: the report's measurement is on 512 tokens)
    for rule in ("sink_window", "h2o", "snapkv", "quest"):
        loss = run_budget(model, record, continuation, rule, 16).loss
        assert 1e-3 < abs(loss - reference) < 3.0, rule

"""Static and continuous batching: each request's own greedy tokens, the pool's bound and reuse."""

import pytest
import torch

from attncourse.decode.batching import (
    Request,
    _paged_forward,
    _Running,
    continuous_batching,
    request_stream,
    static_batching,
)
from attncourse.decode.fast import rope_table
from attncourse.decode.generation import generate
from attncourse.decode.paged import BlockPool
from attncourse.nn.gpt import GPT


def _gpt(seed=0, **kw):
    """A tiny untrained GPT in float64 (argmax ties between two orders of sums out of reach).

    Its projections and FFN are scaled x4: at the default initialisation the tied output
    layer mostly echoes the last token, and a wrong mask would not change one token.
    """
    torch.manual_seed(seed)
    model = GPT(24, **{"d_model": 32, "num_heads": 4, "num_layers": 2, "d_ff": 64, **kw}).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and not name.startswith(("embedding", "positional")):
                p.mul_(4.0)
    return model


def _alone(model, request, use_cache=False):
    """The request's greedy tokens, served alone (no id suppressed)."""
    return generate(model, request.prompt, request.max_new_tokens, temperature=0, suppress_ids=(),
                    use_cache=use_cache)


def _hand_requests():
    # prompts of 2, 3, 1 tokens; 3, 1, 2 new tokens; all at step 0
    return [Request(0, torch.tensor([5, 6]), 3), Request(1, torch.tensor([7, 8, 9]), 1),
            Request(2, torch.tensor([4]), 2)]


@pytest.mark.parametrize("kw", [{}, {"num_kv_heads": 2}, {"num_kv_heads": 1}, {"positional": "learned"},
                                {"positional": "sinusoidal"}, {"positional": "none"}])
def test_every_request_gets_the_tokens_it_would_get_alone(kw):
    model = _gpt(**kw)
    stream = request_stream(10, 24, (1, 12), (1, 9), mean_gap=1.5, seed=1)
    served = [static_batching(model, stream, 3), continuous_batching(model, stream, 3, 4, 20)]
    for r in stream:
        reference = _alone(model, r)
        assert torch.equal(_alone(model, r, use_cache=True), reference)
        for s in served:
            assert torch.equal(s.tokens[r.id], reference), (kw, r.id)
    # requests joined while others decoded: prefill and decoding shared forwards
    assert any(len(step.running) > len(prev.running) > 0
               for prev, step in zip(served[1].trace, served[1].trace[1:]))


def test_a_schedule_by_hand():
    model, requests = _gpt(), _hand_requests()
    per_token = model.cache_bytes_per_token()
    static = static_batching(model, requests, 2)
    # group (0, 1) runs 3 forwards on 2 rows, request 1 done after the first; then (2) runs 2
    assert static.forwards == 5 and static.steps == 5 and static.finish_step == {1: 0, 0: 2, 2: 4}
    assert [s.rows for s in static.trace] == [2, 2, 2, 1, 1]
    assert [s.running for s in static.trace] == [(0, 1), (0,), (0,), (2,), (2,)]
    # the idle row keeps its cache: 2 rows x (3, 4, 5) positions, then 1 x (1, 2)
    assert [s.cache_bytes // per_token for s in static.trace] == [6, 8, 10, 1, 2]
    assert static.peak_bytes == 10 * per_token and static.peak_blocks is None
    cont = continuous_batching(model, requests, max_batch=2, block_size=2, num_blocks=8)
    # request 2 takes request 1's place at step 1: three forwards
    assert cont.forwards == 3 and cont.finish_step == {1: 0, 0: 2, 2: 2}
    assert [s.running for s in cont.trace] == [(0, 1), (0, 2), (0, 2)]
    # step 0: 0 holds block 0, 1 blocks 1, 2 (3 tokens), freed at once; pop() hands out the
    # last one freed first: 0 grows into block 2, 2 gets block 1
    assert cont.trace[0].tables == {0: [0], 1: [1, 2]}
    assert cont.trace[1].tables == {0: [0, 2], 2: [1]} == cont.trace[2].tables
    assert cont.peak_blocks == 3 and cont.peak_bytes == 3 * 2 * per_token
    for r in requests:
        assert torch.equal(cont.tokens[r.id], static.tokens[r.id])
        assert torch.equal(cont.tokens[r.id], _alone(model, r))


def test_the_pool_bounds_the_batch_and_finished_blocks_are_reused():
    model = _gpt(num_kv_heads=2)
    stream = request_stream(12, 24, (4, 14), (2, 10), seed=3)
    block_size = 4
    need = max(-(-r.cached_tokens // block_size) for r in stream)
    tight = continuous_batching(model, stream, max_batch=6, block_size=block_size, num_blocks=need + 2)
    roomy = continuous_batching(model, stream, max_batch=6, block_size=block_size, num_blocks=200)
    block_bytes = block_size * model.cache_bytes_per_token()
    holders = {}
    for step in tight.trace:
        held = [b for table in step.tables.values() for b in table]
        assert len(held) == len(set(held)) <= need + 2  # no block twice, never past the pool
        assert step.cache_bytes == len(held) * block_bytes
        for rid, table in step.tables.items():
            for b in table:
                holders.setdefault(b, set()).add(rid)
    assert tight.peak_blocks <= need + 2 < roomy.peak_blocks
    assert any(len(ids) > 1 for ids in holders.values())  # a block served two requests
    assert min(s.rows for s in tight.trace[:4]) < 6 and tight.forwards > roomy.forwards
    for r in stream:
        assert torch.equal(tight.tokens[r.id], roomy.tokens[r.id])


def test_equal_requests_cost_static_and_continuous_the_same():
    model = _gpt()
    stream = request_stream(6, 24, (5, 5), (4, 4), seed=2)  # 5 + 4 - 1 = 8 cached tokens each
    static = static_batching(model, stream, 3)
    cont = continuous_batching(model, stream, max_batch=3, block_size=4, num_blocks=6)
    assert static.forwards == cont.forwards == 8 and static.generated == cont.generated == 24
    assert static.peak_bytes == cont.peak_bytes == 3 * 8 * model.cache_bytes_per_token()
    assert all(torch.equal(static.tokens[r.id], cont.tokens[r.id]) for r in stream)


def test_the_clock_waits_for_arrivals():
    model = _gpt()
    requests = [Request(0, torch.tensor([3, 4]), 2, arrival=5), Request(1, torch.tensor([5]), 2, arrival=20)]
    cont = continuous_batching(model, requests, 4, 4, 4)
    assert [s.step for s in cont.trace] == [5, 6, 20, 21] and cont.steps == 22
    static = static_batching(model, requests, 2)  # the group waits for its last request
    assert [s.step for s in static.trace] == [20, 21]


def test_request_stream_is_seeded_and_in_range():
    a, b = request_stream(50, 30, (2, 7), (3, 9), mean_gap=2.0, seed=4), request_stream(
        50, 30, (2, 7), (3, 9), mean_gap=2.0, seed=4)
    assert all(torch.equal(x.prompt, y.prompt) and x.max_new_tokens == y.max_new_tokens
               and x.arrival == y.arrival for x, y in zip(a, b))
    assert {len(r.prompt) for r in a} == set(range(2, 8)) and {r.max_new_tokens for r in a} == set(range(3, 10))
    assert all(0 <= int(r.prompt.min()) and int(r.prompt.max()) < 30 for r in a)
    assert [r.id for r in a] == list(range(50))
    assert all(p.arrival <= q.arrival for p, q in zip(a, a[1:]))
    assert all(r.arrival == 0 for r in request_stream(5, 30))
    many = request_stream(4000, 30, mean_gap=3.0, seed=5)
    assert many[-1].arrival / 3999 == pytest.approx(3.0, rel=0.06)  # the exponential gaps' mean


@pytest.mark.parametrize("call, match", [
    (lambda m, rs: continuous_batching(m, rs, 0, 4, 8), "max_batch must be a positive int, got 0"),
    (lambda m, rs: continuous_batching(m, rs, 2, 0, 8), "block_size must be a positive int"),
    (lambda m, rs: continuous_batching(m, rs, 2, 2, 1), "num_blocks=1: request 0 needs 2 blocks of 2"),
    (lambda m, rs: static_batching(m, rs, 0), "batch_size must be a positive int"),
    (lambda m, rs: static_batching(m, rs + rs[:1], 2), "distinct ids"),
    (lambda m, rs: static_batching(m, [Request(9, torch.tensor([99]), 1)], 2), "token ids must lie in"),
    (lambda m, rs: continuous_batching(_gpt(window=2), rs, 2, 4, 8), "model: continuous_batching"),
    (lambda m, rs: continuous_batching(_gpt(positional="alibi"), rs, 2, 4, 8), "model: continuous"),
    (lambda m, rs: static_batching(_gpt(positional="learned", max_len=3), rs, 2), "pass max_len=3"),
    (lambda m, rs: Request(0, torch.tensor([1]), 0), "max_new_tokens must be >= 1"),
    (lambda m, rs: Request(0, torch.tensor([[1]]), 1), "prompt must be a non-empty 1-D"),
    (lambda m, rs: request_stream(3, 10, (0, 4)), "prompt_lengths must be"),
])
def test_bad_options_raise_one_line(call, match):
    with pytest.raises(ValueError, match=match) as error:
        call(_gpt(), _hand_requests())
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kw", [{"num_kv_heads": 2}, {"positional": "learned"}])
def test_one_paged_forward_gives_each_request_its_own_logits(kw):
    model = _gpt(**kw).eval()
    pool = BlockPool.for_model(model, 16, 3)
    rope = [rope_table(b.attn, 32, torch.float64, None) if b.attn.positional == "rope" else None
            for b in model.blocks]
    prompts = [torch.tensor(p) for p in ([5, 6, 7, 8, 9, 10, 11], [3, 4], [12, 13, 14, 15])]
    running = [_Running(Request(i, p, 9), 4) for i, p in enumerate(prompts)]
    # requests 0 and 1 prefill alone; then 0, 1 decode (tables of 3 and 1 blocks) beside 2's prefill
    for s in running[:2]:
        s.tokens.append(int(_paged_forward(model, pool, rope, [], [s])[0].argmax()))
    logits = _paged_forward(model, pool, rope, running[:2], running[2:])
    for s, row in zip(running, logits):
        sequence = torch.cat([s.request.prompt, torch.tensor(s.tokens[-1:], dtype=torch.long)])[None]
        expected = model(sequence if s.tokens else s.request.prompt[None])[0][0, -1]
        torch.testing.assert_close(row, expected, rtol=0, atol=1e-12)
    assert [len(s.table) for s in running] == [3, 1, 2] and pool.used == 6


def test_static_batching_left_pads_an_alibi_model_too():
    model = _gpt(positional="alibi")  # relative distances: one row of positions serves all
    stream = request_stream(8, 24, (1, 12), (1, 6), seed=6)
    served = static_batching(model, stream, 4)
    assert all(torch.equal(served.tokens[r.id], _alone(model, r)) for r in stream)

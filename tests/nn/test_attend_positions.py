"""The attend step receives the queries' and keys' positions: a variant whose scores depend on
positions is its attend alone. ALiBi written that way equals the built-in ALiBi, with and without
the cache (Press et al. 2022, section 3: bias -m_h (i - j))."""

import torch

from attncourse.nn.alibi import alibi_slopes
from attncourse.nn.attend import softmax_attend
from attncourse.nn.attention import KVCache
from attncourse.nn.causal_attention import CausalSelfAttention


class DistanceAttention(CausalSelfAttention):
    """ALiBi from the positions attend receives: bias -m_h (i - j) for key j of query i."""

    def attend(self, q, k, v, allowed, bias, *, query_positions, key_positions, **_):
        distance = (query_positions[:, None] - key_positions[None, :]).abs().to(q.dtype)
        return softmax_attend(q, k, v, allowed, -alibi_slopes(self.num_heads).to(q.dtype)[:, None, None] * distance)


def _pair():
    torch.manual_seed(0)
    builtin = CausalSelfAttention(32, 4, num_kv_heads=2, positional="alibi").double()
    mine = DistanceAttention(32, 4, num_kv_heads=2).double()
    mine.load_state_dict(builtin.state_dict())
    return builtin, mine


def test_alibi_from_the_positions_equals_the_builtin_alibi():
    builtin, mine = _pair()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    torch.testing.assert_close(mine(x)[0], builtin(x)[0], rtol=0, atol=1e-12)


def test_the_key_positions_count_the_cached_keys():
    builtin, mine = _pair()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    seen = []
    original = DistanceAttention.attend

    def spy(self, q, k, v, allowed, bias, **kw):
        seen.append((kw["query_positions"].tolist(), kw["key_positions"].tolist()))
        return original(self, q, k, v, allowed, bias, **kw)

    DistanceAttention.attend = spy
    try:
        cache = mine.empty_cache(2)
        steps = [mine(x[:, :5], kv_cache=cache)[0]] + [mine(x[:, t:t + 1], kv_cache=cache)[0] for t in range(5, 9)]
    finally:
        DistanceAttention.attend = original
    torch.testing.assert_close(torch.cat(steps, 1), builtin(x)[0], rtol=0, atol=1e-12)
    assert seen[0] == (list(range(5)), list(range(5)))
    assert seen[-1] == ([8], list(range(9)))
    assert isinstance(cache, KVCache) and len(cache) == 9

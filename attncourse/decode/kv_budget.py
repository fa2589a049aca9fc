"""What to keep of a KV cache: four selection rules under a budget of positions.

Each rule is a pure function returning, for every sequence of the batch and every
key/value head, the sorted positions it keeps: a LongTensor
``(batch, num_kv_heads, kept)``; :func:`keep_mask` turns it into a bool mask
``(batch, num_kv_heads, src_len)``.

Grouped-query attention (GQA): a KV head serves a group of query heads (query head
``i`` reads KV head ``i // group``, as :func:`~attncourse.nn.attend.repeat_kv`). Every
rule here pools the group's scores by **summing** them (:func:`pool_heads`): for H2O
and SnapKV the score of a key is then the attention mass it receives from its whole
group; for Quest, the group's summed logit ``sum_h q_h . k`` is ``(sum_h q_h) . k``, so
Quest bounds the logit of the group's summed query.

Sources: Xiao et al. (2024), "Efficient Streaming Language Models with Attention Sinks",
ICLR, section 3.2; Zhang et al. (2023), "H2O: Heavy-Hitter Oracle", NeurIPS, section 4
and Algorithm 1; Li et al. (2024), "SnapKV", NeurIPS, section 4 and Listing 1; Tang et
al. (2024), "Quest: Query-Aware Sparsity", ICML, section 3 and Figure 5.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: How the query heads of a GQA group are pooled per KV head (:func:`pool_heads`).
GROUP_POOLING = "sum"

#: What ``snapkv(pool=...)`` accepts.
POOLS = ("max", "avg")


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_budget(budget: int, src_len: int) -> int:
    """``budget`` checked against a cache of ``src_len`` positions.

    Raises
    ------
    ValueError
        If ``budget`` is not an int in ``1 .. src_len``.
    """
    budget = _positive_int(budget, "budget")
    if budget > src_len:
        raise ValueError(
            f"budget={budget} is larger than the cache's {src_len} positions"
        )
    return budget


def pool_heads(scores: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """Sum the scores of each KV head's group of query heads.

    Parameters
    ----------
    scores : torch.Tensor
        ``(batch, num_heads, ...)``, query head ``i`` in KV head ``i // group``'s group.
    num_kv_heads : int
        ``g``, a divisor of ``num_heads``.

    Returns
    -------
    torch.Tensor
        ``(batch, num_kv_heads, ...)``.

    Raises
    ------
    ValueError
        If ``num_kv_heads`` does not divide ``num_heads``.

    Notes
    -----
    Source: Ainslie et al. (2023), "GQA", section 2.2 (the grouping of query heads).
    """
    num_kv_heads = _positive_int(num_kv_heads, "num_kv_heads")
    if scores.dim() < 2 or scores.shape[1] % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide the scores' num_heads "
            f"(dim 1 of {tuple(scores.shape)})"
        )
    batch, heads = scores.shape[:2]
    return scores.reshape(
        batch, num_kv_heads, heads // num_kv_heads, *scores.shape[2:]
    ).sum(2)


def keep_mask(indices: torch.Tensor, src_len: int) -> torch.Tensor:
    """Bool mask ``(batch, num_kv_heads, src_len)``, True at the kept ``indices``.

    ``indices`` is ``(batch, num_kv_heads, kept)``. Source: as the rule that chose them.
    """
    mask = torch.zeros(
        *indices.shape[:2], src_len, dtype=torch.bool, device=indices.device
    )
    return mask.scatter(-1, indices, True)


def _top_sorted(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Sorted positions of the ``k`` top scores on the last axis (ties: lower first)."""
    if k == 0:
        return scores.new_zeros(*scores.shape[:-1], 0, dtype=torch.long)
    # a stable descending sort breaks ties towards the earlier position, on any machine
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return order[..., :k].sort(-1).values


def _tail(shape: tuple[int, ...], start: int, stop: int, device) -> torch.Tensor:
    return torch.arange(start, stop, device=device).expand(*shape, stop - start)


def sink_window(
    src_len: int,
    budget: int,
    num_sinks: int = 4,
    batch: int = 1,
    num_kv_heads: int = 1,
    device=None,
) -> torch.Tensor:
    """StreamingLLM: the first ``num_sinks`` positions, the last ``budget - num_sinks``.

    Parameters
    ----------
    src_len : int
        Positions in the cache.
    budget : int
        Positions kept, ``1 .. src_len``.
    num_sinks : int
        Attention sinks kept at the start (the paper's default: 4), ``0 .. budget``.
    batch, num_kv_heads : int
        The leading sizes of the result (every head keeps the same positions).
    device : torch.device or str, optional

    Returns
    -------
    torch.Tensor
        Long ``(batch, num_kv_heads, budget)``, sorted positions.

    Raises
    ------
    ValueError
        If ``budget`` is not in ``1 .. src_len``, ``num_sinks`` not in ``0 .. budget``.

    Notes
    -----
    Xiao et al. (2024), section 3.2 ("Rolling KV cache with attention sinks", Figure 4).
    """
    budget = check_budget(budget, _positive_int(src_len, "src_len"))
    if (
        isinstance(num_sinks, bool)
        or not isinstance(num_sinks, int)
        or not 0 <= num_sinks <= budget
    ):
        raise ValueError(
            f"num_sinks must be an int in 0 .. budget={budget}, got {num_sinks!r}"
        )
    kept = torch.cat(
        [torch.arange(num_sinks), torch.arange(src_len - budget + num_sinks, src_len)]
    )
    return kept.to(device).expand(batch, num_kv_heads, budget).clone()


def h2o(
    accumulated: torch.Tensor, budget: int, recent: int | None = None
) -> torch.Tensor:
    """H2O: the ``recent`` last positions, then the heaviest hitters among the others.

    Parameters
    ----------
    accumulated : torch.Tensor
        ``(batch, num_kv_heads, src_len)``: each key's attention weight summed over
        every query so far (the column sums of the causal weights), pooled per KV head.
    budget : int
        Positions kept, ``1 .. src_len``.
    recent : int, optional
        Recent positions kept whatever their score; default ``budget // 2`` (the paper's
        half heavy hitters, half recent tokens).

    Returns
    -------
    torch.Tensor
        Long ``(batch, num_kv_heads, budget)``, sorted positions.

    Raises
    ------
    ValueError
        If ``budget`` is not in ``1 .. src_len`` or ``recent`` not in ``0 .. budget``.

    Notes
    -----
    Zhang et al. (2023), section 4 (Algorithm 1, the greedy eviction by accumulated
    attention score) and section 5 (budget split equally between heavy hitters and
    recent tokens).
    """
    src_len = accumulated.shape[-1]
    budget = check_budget(budget, src_len)
    recent = budget // 2 if recent is None else recent
    if (
        isinstance(recent, bool)
        or not isinstance(recent, int)
        or not 0 <= recent <= budget
    ):
        raise ValueError(
            f"recent must be an int in 0 .. budget={budget}, got {recent!r}"
        )
    older = src_len - recent
    heavy = _top_sorted(accumulated[..., :older], budget - recent)
    return torch.cat(
        [heavy, _tail(accumulated.shape[:-1], older, src_len, accumulated.device)], -1
    )


def snapkv_votes(window_weights: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """SnapKV's votes: the observation window's attention weights, summed over it.

    Parameters
    ----------
    window_weights : torch.Tensor
        ``(batch, num_heads, window, src_len)``: the softmax weights of the prompt's
        last ``window`` queries over every key.
    num_kv_heads : int
        ``g``; the group's query heads are summed (:func:`pool_heads`).

    Returns
    -------
    torch.Tensor
        ``(batch, num_kv_heads, src_len)``.

    Raises
    ------
    ValueError
        If ``num_kv_heads`` does not divide ``num_heads``.

    Notes
    -----
    Li et al. (2024), section 4.1 ("voting" by the observation window) and
    Listing 1 (``attn_weights[..., -window:, :-window].sum(dim=-2)``).
    """
    return pool_heads(window_weights.sum(-2), num_kv_heads)


def snapkv(
    votes: torch.Tensor,
    budget: int,
    window: int = 32,
    kernel_size: int = 7,
    pool: str = "max",
) -> torch.Tensor:
    """SnapKV: the top prefix positions by pooled votes, plus the observation window.

    Parameters
    ----------
    votes : torch.Tensor
        ``(batch, num_kv_heads, src_len)`` from :func:`snapkv_votes`.
    budget : int
        Positions kept, ``window .. src_len``.
    window : int
        The observation window: the prompt's last ``window`` positions, always kept.
    kernel_size : int
        Odd width of the 1-D pooling along the keys (stride 1, padding
        ``kernel_size // 2``), which keeps a chosen key's neighbours.
    pool : str
        ``"max"`` or ``"avg"`` (``avg`` counts the zero padding, as ``avg_pool1d``).

    Returns
    -------
    torch.Tensor
        Long ``(batch, num_kv_heads, budget)``, sorted positions.

    Raises
    ------
    ValueError
        If ``budget`` is not in ``window .. src_len``, ``window`` not in
        ``1 .. src_len``, ``kernel_size`` not a positive odd int, or ``pool`` unknown.

    Notes
    -----
    Li et al. (2024), section 4.1 (observation window, voting), 4.2 (pooling)
    and Listing 1 (window 32, pooling kernel 7 in its experiments).
    """
    src_len = votes.shape[-1]
    budget = check_budget(budget, src_len)
    window = _positive_int(window, "window")
    if window > budget:
        raise ValueError(
            f"window={window} must not exceed budget={budget} (it is always kept)"
        )
    if _positive_int(kernel_size, "kernel_size") % 2 == 0:
        raise ValueError(f"kernel_size must be odd (a centred pool), got {kernel_size}")
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
    prefix = votes[..., : src_len - window]
    flat = prefix.reshape(-1, 1, prefix.shape[-1])
    pooling = F.max_pool1d if pool == "max" else F.avg_pool1d
    pooled = pooling(flat, kernel_size, stride=1, padding=kernel_size // 2).reshape(
        prefix.shape
    )
    chosen = _top_sorted(pooled, budget - window)
    return torch.cat(
        [chosen, _tail(votes.shape[:-1], src_len - window, src_len, votes.device)], -1
    )


def page_min_max(
    keys: torch.Tensor, page_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quest's page metadata: each page's elementwise minimum and maximum key.

    Parameters
    ----------
    keys : torch.Tensor
        ``(batch, num_kv_heads, src_len, d_k)``, ``src_len`` a multiple of
        ``page_size``.
    page_size : int

    Returns
    -------
    tuple of torch.Tensor
        ``(minimum, maximum)``, each ``(batch, num_kv_heads, num_pages, d_k)`` with
        ``num_pages = src_len / page_size``.

    Raises
    ------
    ValueError
        If ``page_size`` is not a positive int dividing ``src_len``.

    Notes
    -----
    Tang et al. (2024), section 3 (Figure 5: each page's "Min Key" and "Max Key").
    """
    page_size = _positive_int(page_size, "page_size")
    if keys.shape[-2] % page_size:
        raise ValueError(f"page_size={page_size} must divide the {keys.shape[-2]} keys")
    pages = keys.unflatten(-2, (keys.shape[-2] // page_size, page_size))
    return pages.amin(-2), pages.amax(-2)


def quest_bound(
    query: torch.Tensor, minimum: torch.Tensor, maximum: torch.Tensor
) -> torch.Tensor:
    """Quest's upper bound of ``query . k`` on a page, ``sum_i max(q_i m_i, q_i M_i)``.

    Parameters
    ----------
    query : torch.Tensor
        ``(batch, num_kv_heads, d_k)``.
    minimum, maximum : torch.Tensor
        ``(batch, num_kv_heads, num_pages, d_k)`` from :func:`page_min_max`.

    Returns
    -------
    torch.Tensor
        ``(batch, num_kv_heads, num_pages)``, at least ``max_{k in page} query . k``
        (each term bounds ``q_i k_i`` for ``m_i <= k_i <= M_i``), equal to it on a page
        of one key.

    Notes
    -----
    Tang et al. (2024), section 3 (Figure 5, stage 1: the page's criticality).
    """
    q = query[..., None, :]
    return torch.maximum(q * minimum, q * maximum).sum(-1)


def quest(
    queries: torch.Tensor, keys: torch.Tensor, budget: int, page_size: int = 16
) -> torch.Tensor:
    """Quest: the pages of highest bound for the current query, and the unfinished one.

    Parameters
    ----------
    queries : torch.Tensor
        ``(batch, num_heads, d_k)``: the current step's query heads (after RoPE), summed
        per KV head's group (:func:`pool_heads`).
    keys : torch.Tensor
        ``(batch, num_kv_heads, src_len, d_k)``: every cached key (Quest evicts
        nothing). The full pages are ``0 .. page_size - 1``, ...; the trailing
        ``src_len % page_size`` positions (the page being filled, with the current
        token) are always kept.
    budget : int
        Positions kept among the full pages, a multiple of ``page_size`` up to their
        length.
    page_size : int
        Keys per page (the paper's default: 16).

    Returns
    -------
    torch.Tensor
        Long ``(batch, num_kv_heads, budget + src_len % page_size)``, sorted positions.

    Raises
    ------
    ValueError
        If ``page_size`` is not a positive int, ``budget`` not a positive multiple of
        it, or larger than the full pages.

    Notes
    -----
    Tang et al. (2024), section 3 and Figure 5: the selection is redone at every
    decoding step, for that step's query.
    """
    page_size = _positive_int(page_size, "page_size")
    src_len = keys.shape[-2]
    full = src_len // page_size * page_size
    budget = check_budget(budget, full)
    if budget % page_size:
        raise ValueError(
            f"page_size={page_size} must divide budget={budget} (whole pages are kept)"
        )
    query = pool_heads(queries, keys.shape[1])
    minimum, maximum = page_min_max(keys[..., :full, :], page_size)
    pages = _top_sorted(quest_bound(query, minimum, maximum), budget // page_size)
    kept = (
        pages[..., None] * page_size + torch.arange(page_size, device=keys.device)
    ).flatten(-2)
    return torch.cat([kept, _tail(keys.shape[:2], full, src_len, keys.device)], -1)


__all__ = [
    "GROUP_POOLING",
    "POOLS",
    "check_budget",
    "h2o",
    "keep_mask",
    "page_min_max",
    "pool_heads",
    "quest",
    "quest_bound",
    "sink_window",
    "snapkv",
    "snapkv_votes",
]

"""Measure a KV-cache budget on a model: prefill, cut the cache by a rule, continue.

The context is prefilled once with full attention through the course's ``GPT`` and its
KV cache; forward hooks on the attention layers reduce each layer's weights, as soon as
the layer has computed them, to what the rules of :mod:`attncourse.decode.kv_budget`
read (H2O's column sums, SnapKV's window votes), so only one layer's ``(batch,
num_heads, src_len, src_len)`` weights exist at a time. The cache is then cut once to
``budget`` positions per KV head (SnapKV's regime: the continuation's own keys are all
kept; H2O and StreamingLLM, which also evict while decoding, get up to
``len(continuation)`` more positions here), or, for Quest, kept whole and read through
the pages each decoding step selects. Each kept key keeps the RoPE rotation of its
original position, and new tokens take their positions in the text, not in the cache
(StreamingLLM, section 3.2, numbers positions inside the cache instead, which matters
only once the text outruns the trained context).

Sources: Li et al. (2024), "SnapKV", NeurIPS, section 4 (compress once after the
prompt); Tang et al. (2024), "Quest", ICML, section 3 (select at every step); Liu et
al. (2024), "KIVI", section 3 (the int8 cache of chapter 10).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attncourse.decode.kv_budget import (
    check_budget,
    h2o,
    pool_heads,
    quest,
    sink_window,
    snapkv,
    snapkv_votes,
)
from attncourse.decode.quantized import QuantizedKVCache
from attncourse.nn.attend import validate_positions
from attncourse.nn.attention import KVCache, split_heads
from attncourse.nn.causal_attention import CausalSelfAttention
from attncourse.nn.rope import apply_rope

#: The rules :func:`cut` knows; ``"full"`` keeps every position.
RULES = ("full", "sink_window", "h2o", "snapkv", "quest")


@dataclass
class Prefill:
    """What one full-attention prefill leaves for the rules.

    ``caches``: one :class:`KVCache` per layer, ``k, v (batch, num_kv_heads, length,
    d_k)``; ``accumulated``, ``votes``: per layer ``(batch, num_kv_heads, length)``, the
    column sums of the weights and the last ``window`` rows' sums, each summed over the
    KV head's query heads; ``last_logits``: ``(batch, vocab_size)``, the prediction of
    the token after the context. Source: Zhang et al. (2023), "H2O", section 4; Li et
    al. (2024), "SnapKV", section 4.1.
    """

    caches: list[KVCache]
    accumulated: list[torch.Tensor]
    votes: list[torch.Tensor]
    window: int
    last_logits: torch.Tensor

    @property
    def length(self) -> int:
        """Positions of the context."""
        return len(self.caches[0])


def prefill(model, context: torch.Tensor, window: int = 32) -> Prefill:
    """Run ``context (batch, length)`` through ``model``: full attention, its cache.

    Parameters
    ----------
    model : GPT
        A course GPT with ``"gqa"`` attention (MHA, GQA or MQA) in every block.
    context : torch.Tensor
        Long ``(batch, length)`` token ids.
    window : int
        SnapKV's observation window, ``1 .. length``.

    Returns
    -------
    Prefill

    Raises
    ------
    ValueError
        If ``window`` is not in ``1 .. length``, or a block's attention is not
        :class:`~attncourse.nn.causal_attention.CausalSelfAttention` (e.g. MLA).

    Notes
    -----
    Zhang et al. (2023), "H2O", section 4 (accumulated attention); Li et al. (2024),
    "SnapKV", section 4.1 (observation window).
    """
    if (
        isinstance(window, bool)
        or not isinstance(window, int)
        or not 0 < window <= context.shape[1]
    ):
        raise ValueError(
            f"window must be an int in 1 .. {context.shape[1]}, got {window!r}"
        )
    if not all(isinstance(block.attn, CausalSelfAttention) for block in model.blocks):
        raise ValueError(
            "model must have 'gqa' attention (CausalSelfAttention) in every block"
        )
    accumulated, votes = [], []

    def reduce(attn, args, output):
        out, weights = output  # weights (batch, num_heads, length, length): one layer's
        accumulated.append(pool_heads(weights.sum(-2), attn.num_kv_heads))
        votes.append(snapkv_votes(weights[:, :, -window:], attn.num_kv_heads))
        return out, None

    hooks = [block.attn.register_forward_hook(reduce) for block in model.blocks]
    caches = model.init_cache(context.shape[0])
    try:
        with torch.no_grad():
            logits = model(context, caches, need_weights=True)[0]
    finally:
        for hook in hooks:
            hook.remove()
    return Prefill(caches, accumulated, votes, window, logits[:, -1])


def select(
    record: Prefill, layer: int, rule: str, budget: int, **options
) -> torch.Tensor:
    """Positions ``rule`` keeps of layer ``layer``, ``(batch, num_kv_heads, budget)``.

    ``options`` go to the rule (``num_sinks``; ``recent``; ``kernel_size``, ``pool``).
    Raises ``ValueError`` for an unknown or per-step rule (``"quest"``) or a bad budget.
    Source: the rule's paper (:mod:`attncourse.decode.kv_budget`).
    """
    cache = record.caches[layer]
    batch, heads, length = cache.k.shape[:3]
    if rule == "full":
        if check_budget(budget, length) != length:
            raise ValueError(
                f"budget={budget}: rule 'full' keeps all {length} positions"
            )
        return torch.arange(length, device=cache.k.device).expand(batch, heads, length)
    if rule == "sink_window":
        return sink_window(
            length,
            budget,
            batch=batch,
            num_kv_heads=heads,
            device=cache.k.device,
            **options,
        )
    if rule == "h2o":
        return h2o(record.accumulated[layer], budget, **options)
    if rule == "snapkv":
        return snapkv(record.votes[layer], budget, window=record.window, **options)
    raise ValueError(
        f"rule must be one of {RULES[:-1]} ('quest': per step), got {rule!r}"
    )


def gather_positions(x: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """``x (batch, num_kv_heads, length, d)`` at ``kept (batch, num_kv_heads, n)``.

    Returns ``(batch, num_kv_heads, n, d)``. Source: Li et al. (2024), "SnapKV",
    Listing 1 (the gather of the kept keys and values).
    """
    return x.gather(2, kept[..., None].expand(*kept.shape, x.shape[-1]))


class QuestCache:
    """One layer's whole cache, read through the pages Quest picks for each query.

    :func:`attach_quest` sets :attr:`query` before each step; ``append`` then selects,
    and ``k, v`` are the selected keys and values. Only the prefilled context is paged:
    the keys decoded after it are all read, as :func:`cut` keeps them for the eviction
    rules, so a budget means the same number of context positions for every rule
    (Quest itself pages those keys too). Source: Tang et al. (2024), section 3.
    Raises ``ValueError`` (at ``append``) for a bad budget or page size.
    """

    kind = "keys and values"

    def __init__(
        self, k: torch.Tensor, v: torch.Tensor, budget: int, page_size: int = 16
    ) -> None:
        self.all_k, self.all_v, self.budget, self.page_size = k, v, budget, page_size
        self.context = int(k.shape[2])
        self.query: torch.Tensor | None = None
        self.kept: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.all_k.shape[2])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k, v (batch, num_kv_heads, 1, d_k)`` and select for :attr:`query`."""
        if k.shape[2] != 1 or self.query is None:
            raise ValueError(
                "QuestCache takes one token per step, after attach_quest set its query"
            )
        self.all_k, self.all_v = (
            torch.cat([self.all_k, k], 2),
            torch.cat([self.all_v, v], 2),
        )
        context = self.all_k[:, :, : self.context]
        kept = quest(self.query, context, self.budget, self.page_size)
        after = torch.arange(self.context, len(self), device=k.device)
        self.kept = torch.cat([kept, after.expand(*kept.shape[:2], -1)], -1)

    @property
    def k(self) -> torch.Tensor:
        """Selected keys ``(batch, num_kv_heads, kept, d_k)`` (all before a step)."""
        return (
            self.all_k if self.kept is None else gather_positions(self.all_k, self.kept)
        )

    @property
    def v(self) -> torch.Tensor:
        """The selected values, like :attr:`k`."""
        return (
            self.all_v if self.kept is None else gather_positions(self.all_v, self.kept)
        )

    def nbytes(self) -> int:
        """Bytes held: every key and value, and each context page's min and max key."""
        pages = self.context // self.page_size * self.all_k.shape[:2].numel()
        numbers = (
            self.all_k.numel() + self.all_v.numel() + pages * 2 * self.all_k.shape[-1]
        )
        return numbers * self.all_k.element_size()


def attach_quest(model) -> list:
    """Hooks handing each attention layer's query (after RoPE) to its QuestCache.

    The course's attention computes its queries inside ``forward``; the hook computes
    them again from the layer's input (``W^Q``, then RoPE at the step's positions).
    Returns the hook handles (call ``remove()`` on each). Source: Tang et al. (2024),
    section 3 (the current query vector).
    """

    def set_query(attn, args, kwargs):
        x, cache = args[0], args[2] if len(args) > 2 else kwargs.get("kv_cache")
        if isinstance(cache, QuestCache):
            q = split_heads(attn.w_q(x), attn.num_heads)
            if attn.positional == "rope":
                positions = validate_positions(
                    kwargs.get("positions"), x.shape[1], len(cache), x.device
                )
                q = apply_rope(q, positions, attn.rope_base, attn.rope_scaling)
            cache.query = q[:, :, -1]

    return [
        block.attn.register_forward_pre_hook(set_query, with_kwargs=True)
        for block in model.blocks
    ]


def cut(
    record: Prefill,
    rule: str,
    budget: int,
    int8: bool = False,
    page_size: int = 16,
    **options,
) -> list:
    """New caches holding what ``rule`` keeps of the prefill's, one per layer.

    Parameters
    ----------
    record : Prefill
    rule : str
        One of :data:`RULES`.
    budget : int
        Positions kept per KV head, ``1 .. record.length``.
    int8 : bool
        Store the kept keys and values in chapter 10's :class:`QuantizedKVCache`
        (keys per channel over groups of 16 positions, values per position).
    page_size : int
        Quest's page size.
    **options
        The rule's own options (:func:`select`).

    Returns
    -------
    list
        :class:`KVCache`, :class:`QuantizedKVCache` or :class:`QuestCache` per layer.

    Raises
    ------
    ValueError
        For an unknown rule, a bad budget, or ``int8`` with ``"quest"``.

    Notes
    -----
    Li et al. (2024), "SnapKV", section 4 (compress once, after the prompt); Liu et al.
    (2024), "KIVI", section 3.2.
    """
    if rule == "quest":
        if int8:
            raise ValueError(
                "int8 is not offered with rule 'quest' (its pages need the float keys)"
            )
        check_budget(budget, record.length)
        return [QuestCache(c.k, c.v, budget, page_size) for c in record.caches]
    caches = []
    for layer, cache in enumerate(record.caches):
        kept = select(record, layer, rule, budget, **options)
        k, v = gather_positions(cache.k, kept), gather_positions(cache.v, kept)
        if int8:
            caches.append(
                QuantizedKVCache(
                    k.shape[0], k.shape[1], k.shape[3], dtype=k.dtype, device=k.device
                )
            )
            caches[-1].append(k, v)
        else:
            caches.append(KVCache(k, v))
    return caches


def cache_nbytes(caches: list) -> int:
    """Bytes the caches hold, one per layer (codes, scales and page metadata included).

    ``caches``: :class:`KVCache`, :class:`QuantizedKVCache` or :class:`QuestCache`.
    Source: Kwon et al. (2023), "PagedAttention", section 2.3 (the KV cache's memory).
    """
    return sum(
        c.nbytes()
        if hasattr(c, "nbytes")
        else (c.k.numel() + c.v.numel()) * c.k.element_size()
        for c in caches
    )


def bytes_per_token(
    model, int8: bool = False, dtype: torch.dtype = torch.float32
) -> float:
    """Cache bytes per position, all layers: ``2 L g d_k`` numbers, or int8 + scales.

    int8 measures chapter 10's :class:`QuantizedKVCache` (its default: keys scaled per
    channel over groups of 16 positions, values per position, scales in ``dtype``) on
    one full group. Source: Liu et al. (2024), "KIVI", section 3.2.
    """
    if not int8:
        return (
            model.cache_bytes_per_token()
            / model.embedding.weight.element_size()
            * (torch.finfo(dtype).bits // 8)
        )
    total = 0.0
    for block in model.blocks:
        cache = QuantizedKVCache(
            1, block.attn.num_kv_heads, block.attn.d_k, dtype=dtype
        )
        x = torch.ones(
            1, block.attn.num_kv_heads, cache.group, block.attn.d_k, dtype=dtype
        )
        cache.append(x, x)
        total += cache.nbytes() / cache.group
    return total


def _step_logits(
    model, caches: list, tokens: torch.Tensor, start: int, one_by_one: bool
) -> torch.Tensor:
    """Logits ``(batch, n, vocab)`` of ``tokens (batch, n)`` at ``start ..``."""
    if not tokens.shape[1]:
        return tokens.new_zeros(tokens.shape[0], 0, model.vocab_size, dtype=torch.float)
    if not one_by_one:
        return model(
            tokens, caches, positions=torch.arange(start, start + tokens.shape[1])
        )[0]
    return torch.cat(
        [
            model(tokens[:, i : i + 1], caches, positions=torch.tensor([start + i]))[0]
            for i in range(tokens.shape[1])
        ],
        1,
    )


@dataclass
class BudgetRun:
    """One measurement of :func:`run_budget`.

    ``loss`` (nats/token over the continuation), ``seconds`` (cut and continuation:
    one forward pass for the eviction rules, one per token for ``"quest"``),
    ``nbytes`` (the cut cache), ``greedy`` (long ``(batch, greedy_steps)`` or None).
    Source: Li et al. (2024), "SnapKV", section 5 (quality under a budget).
    """

    rule: str
    budget: int
    int8: bool
    loss: float
    seconds: float
    nbytes: int
    greedy: torch.Tensor | None = None


def run_budget(
    model,
    record: Prefill,
    continuation: torch.Tensor,
    rule: str,
    budget: int,
    int8: bool = False,
    greedy_steps: int = 0,
    **options,
) -> BudgetRun:
    """Cut the prefill's cache by ``rule``, then teacher-force ``continuation``.

    Parameters
    ----------
    model : GPT
        The model that made ``record``.
    record : Prefill
    continuation : torch.Tensor
        Long ``(batch, m)``, the tokens after the context. Token 0 is predicted by the
        prefill (full attention, as every rule decodes its first token), tokens
        ``1 .. m - 1`` through the cut cache.
    rule, budget, int8, **options
        As :func:`cut`.
    greedy_steps : int
        If positive, also decode this many tokens greedily from a fresh cut (the
        passkey check), the first from the prefill's last logits.

    Returns
    -------
    BudgetRun

    Raises
    ------
    ValueError
        As :func:`cut`.

    Notes
    -----
    Li et al. (2024), "SnapKV", section 5 (quality under a budget of kept positions);
    Tang et al. (2024), "Quest", section 4.
    """
    start, one_by_one = time.perf_counter(), rule == "quest"
    caches = cut(record, rule, budget, int8, **options)
    nbytes = cache_nbytes(caches)
    hooks = attach_quest(model) if one_by_one else []
    try:
        with torch.no_grad():
            logits = _step_logits(
                model, caches, continuation[:, :-1], record.length, one_by_one
            )
            logits = torch.cat([record.last_logits[:, None], logits], 1).float()
            loss = float(F.cross_entropy(logits.flatten(0, 1), continuation.flatten()))
            seconds = time.perf_counter() - start
            tokens = None
            if greedy_steps > 0:
                caches, tokens = (
                    cut(record, rule, budget, int8, **options),
                    [record.last_logits.argmax(-1)],
                )
                for i in range(greedy_steps - 1):
                    step = model(
                        tokens[-1][:, None],
                        caches,
                        positions=torch.tensor([record.length + i]),
                    )[0]
                    tokens.append(step[:, -1].argmax(-1))
                tokens = torch.stack(tokens, 1)
    finally:
        for hook in hooks:
            hook.remove()
    return BudgetRun(rule, budget, int8, loss, seconds, nbytes, tokens)


#: The passkey task's filler (Mohtashami and Jaggi 2023): an instruction, then one
#: sentence repeated.
PASSKEY_FILLER = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and "
    "memorize it. I will quiz you about the important information there. ",
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
    "back again. ",
)


def passkey_context(
    encode, passkey: str, length: int, depth: float = 0.5, filler: str | None = None
) -> list[int]:
    """``length`` token ids: ``filler``, a pass key stated at ``depth``, the question.

    ``encode``: text -> token ids; ``filler``: default :data:`PASSKEY_FILLER`'s
    instruction and enough of its sentence. The context ends with "The pass key is",
    so a model that retrieves it continues with the key. Raises ``ValueError`` if
    ``depth`` is not in [0, 1] or ``filler`` is too short. Source: Mohtashami and
    Jaggi (2023), "Landmark Attention", section 4.2 and appendix (passkey retrieval).
    """
    if filler is None:
        filler = PASSKEY_FILLER[0] + PASSKEY_FILLER[1] * (length // 10 + 1)
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must lie in [0, 1], got {depth}")
    needle = encode(
        f" The pass key is {passkey}. Remember it. {passkey} is the pass key."
    )
    question = encode(" What is the pass key? The pass key is")
    room = length - len(needle) - len(question)
    text = encode(filler)
    if room < 1 or len(text) < room:
        raise ValueError(
            f"filler gives {len(text)} tokens; the length={length} needs {max(room, 1)}"
        )
    at = round(depth * room)
    return text[:at] + needle + text[at:room] + question


__all__ = [
    "PASSKEY_FILLER",
    "RULES",
    "BudgetRun",
    "Prefill",
    "QuestCache",
    "attach_quest",
    "bytes_per_token",
    "cache_nbytes",
    "cut",
    "gather_positions",
    "passkey_context",
    "prefill",
    "run_budget",
    "select",
]

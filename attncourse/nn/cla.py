"""Cross-layer attention (CLA): adjacent layers share one layer's keys and values.

In a group of ``kv_share`` adjacent layers the first computes and caches its keys and
values (with ``num_kv_heads`` heads, as GQA); the others have only ``W^Q`` and ``W^O``
and attend to the first layer's keys and values. The KV cache then holds one layer in
``kv_share``: CLA2 (``kv_share=2``) halves it.

The layers are built one by one from the same
:class:`~attncourse.nn.spec.AttentionSpec`; :class:`~attncourse.nn.gpt.GPT` then
calls :meth:`CrossLayerAttention.link_layers` on each, which makes layer ``i`` read
the keys of layer ``i - i % kv_share`` and drops its own ``W^K, W^V``. In a forward
pass the first layer of a group hands its keys and values (the whole cache, in cached
decoding) to the others, which run after it.

Source: Brandon et al. (2024), "Reducing Transformer Key-Value Cache Size with
Cross-Layer Attention", NeurIPS, section 2 (CLA, its sharing factor, CLA with MQA/GQA).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from attncourse.nn.alibi import alibi_bias
from attncourse.nn.attend import allowed_keys, validate_call
from attncourse.nn.attention import KVCache, split_heads
from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.registry import register_attention
from attncourse.nn.rope import apply_rope


@dataclass(frozen=True)
class CLAOptions(GQAOptions):
    """Options of variant ``"cla"``: those of ``"gqa"`` and the sharing factor.

    Raises ``ValueError`` unless ``kv_share`` is a positive int.
    """

    kv_share: int = field(
        default=1,
        metadata={
            "help": "with --attention cla: adjacent layers sharing the first one's "
            "keys and values "
            "(Brandon et al.'s CLA2: 2; default 1: each layer its own, as gqa)",
            "check": "positive_int",
            "limit": (1, 64, "at most the number of layers"),
            "metavar": "N",
        },
    )

    def __post_init__(self) -> None:
        if (
            isinstance(self.kv_share, bool)
            or not isinstance(self.kv_share, int)
            or self.kv_share < 1
        ):
            raise ValueError(f"kv_share must be a positive int, got {self.kv_share!r}")


@dataclass
class SharedKVCache:
    """The cache of a layer that reads an earlier layer's keys: only its length.

    The keys and values are in the cache of the first layer of the group; this one
    counts the positions, so that the layer checks its calls as any other.
    """

    kind = "shared keys and values"

    length: int = 0

    def __len__(self) -> int:
        return self.length

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens)."""
        self.length = min(self.length, int(length))


class CrossLayerAttention(CausalSelfAttention):
    """GQA whose keys and values may come from the first layer of its group.

    Built as :class:`CausalSelfAttention` (``options.kv_share`` in
    :class:`CLAOptions`); alone, or first in its group, it is exactly that layer. After
    :meth:`link_layers` makes it a reader, it has ``w_q`` and ``w_o`` only, caches
    nothing (:class:`SharedKVCache`) and attends to the keys and values that the first
    layer of its group computed in the same forward pass.

    Source: Brandon et al. (2024), section 2.
    """

    options: CLAOptions

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.source: list[
            CrossLayerAttention
        ] = []  # a list: the source is not a submodule
        self.readers = 0  # layers that read this one's keys and values
        self.reader_index = 0  # 1 .. kv_share - 1 for a reader
        self._handoff: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_options(cls, options: CLAOptions, **kwargs) -> CrossLayerAttention:
        """Build ``"cla"`` from ``options`` (kept as :attr:`options`), unlinked."""
        return super().from_options(options, **kwargs)

    @property
    def reads_shared(self) -> bool:
        """Whether this layer reads an earlier layer's keys and values."""
        return bool(self.source)

    def link_layers(self, index: int, layers: Sequence[torch.nn.Module]) -> None:
        """Make layer ``index`` of ``layers`` read layer ``index - index % kv_share``.

        Called by :class:`~attncourse.nn.gpt.GPT` once per layer, in order. A reader
        loses ``w_k`` and ``w_v``; a first layer counts its readers.

        Parameters
        ----------
        index : int
            This layer's position in ``layers`` (0-based).
        layers : sequence of nn.Module
            Every layer's attention, in order; ``layers[index]`` is ``self``.

        Raises
        ------
        ValueError
            If ``layers[index]`` is not this module, or the first layer of the group is
            not a ``"cla"`` layer with the same ``kv_share``, heads and positions.
        """
        if layers[index] is not self:
            raise ValueError(f"layers[{index}] is not this layer")
        share = self.options.kv_share
        first = index - index % share
        if first == index:
            return
        source = layers[first]
        same = (
            isinstance(source, CrossLayerAttention)
            and source.options.kv_share == share
            and source.num_kv_heads == self.num_kv_heads
            and source.d_k == self.d_k
            and source.positional == self.positional
            and source.rope_base == self.rope_base
            and source.rope_scaling == self.rope_scaling
        )
        if not same or source.reads_shared:
            raise ValueError(
                f"layer {index} shares the keys and values of layer {first} "
                f"(kv_share={share}), which must be a 'cla' layer with the same "
                f"kv_share, num_kv_heads, head size "
                f"and positions"
            )
        self.source = [source]
        source.readers += 1
        self.reader_index = index - first
        del (
            self.w_k,
            self.w_v,
        )  # a reader has W^Q and W^O only (Brandon et al., section 2)

    def cache_numbers_per_token(self) -> int:
        """Numbers cached per token: ``2 g d_k``, 0 for a layer reading shared ones."""
        return 0 if self.reads_shared else super().cache_numbers_per_token()

    def empty_cache(
        self, batch: int, dtype: torch.dtype | None = None, device=None
    ) -> KVCache | SharedKVCache:
        """An empty :class:`KVCache`, or a :class:`SharedKVCache` for a reader."""
        if self.reads_shared:
            return SharedKVCache()
        return super().empty_cache(batch, dtype, device)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        allowed: torch.Tensor | None,
        bias: torch.Tensor | None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`CausalSelfAttention.attend`; a first layer keeps ``k, v`` for readers.

        ``k, v (batch, g, src_len, d_k)``: every key of the call, cached ones included.
        """
        if self.readers and not self.reads_shared:
            self._handoff = (k, v)
        return super().attend(q, k, v, allowed, bias, **kwargs)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | SharedKVCache | None = None,
        need_weights: bool = False,
        fast: bool = True,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As :meth:`CausalSelfAttention.forward`; a reader uses the first layer's keys.

        ``x (batch, seq_len, d_model)`` -> output like ``x`` and the weights ``(batch,
        h, seq_len, cache_len + seq_len)`` or None. A reader runs after the first
        layer of its group in the same forward pass (as the blocks of a GPT do).

        Raises
        ------
        ValueError
            For a bad shape, mask, positions or cache.
        RuntimeError
            If a reader runs without the keys of the first layer of this forward pass.
        """
        if not self.reads_shared:
            return super().forward(
                x, mask, kv_cache, need_weights=need_weights, fast=fast,
                positions=positions,
            )
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must be (batch, seq_len, d_model={self.d_model}), "
                f"got {tuple(x.shape)}"
            )
        if kv_cache is not None and not isinstance(kv_cache, SharedKVCache):
            raise ValueError(
                f"a layer that reads shared keys takes a SharedKVCache, got "
                f"{type(kv_cache).__name__}"
            )
        batch, seq_len, _ = x.shape
        offset = 0 if kv_cache is None else len(kv_cache)
        source = self.source[0]
        if source._handoff is None:
            raise RuntimeError(
                "this layer reads the keys and values of an earlier layer: "
                "run that layer first, in the same forward pass"
            )
        k, v = source._handoff
        if self.reader_index == source.readers:  # the last reader lets them go
            source._handoff = None
        if k.shape[0] != batch or k.shape[2] != offset + seq_len:
            raise ValueError(
                f"the shared keys hold {k.shape[2]} positions of {k.shape[0]} "
                f"sequences, this call needs {offset + seq_len} of {batch}"
            )
        positions = validate_call(
            mask, positions, batch, self.num_heads, seq_len, offset, x.device
        )
        q = split_heads(self.w_q(x), self.num_heads)  # (batch, h, seq_len, d_k)
        if self.positional == "rope":  # the shared keys were rotated by the first layer
            q = apply_rope(q, positions, self.rope_base, self.rope_scaling)
        if kv_cache is not None:
            kv_cache.length += seq_len
        src_len = k.shape[2]
        allowed = allowed_keys(
            seq_len, src_len, self.causal, self.window, device=x.device
        )
        if mask is not None:
            allowed = mask if allowed is None else mask & allowed
        bias = None
        if self.positional == "alibi":
            bias = alibi_bias(self.num_heads, seq_len, src_len, dtype=q.dtype).to(
                x.device
            )
        key_positions = (
            positions
            if offset == 0
            else torch.cat([torch.arange(offset, device=x.device), positions])
        )
        is_causal = self.causal and self.window is None and mask is None and offset == 0
        heads, weights = CausalSelfAttention.attend(  # not self.attend: no hand-off
            self, q, k, v, allowed, bias, need_weights=need_weights, fast=fast,
            is_causal=is_causal, query_positions=positions, key_positions=key_positions,
        )
        return self.output(x, heads), (weights if need_weights or not fast else None)


register_attention("cla", CLAOptions, CrossLayerAttention.from_options)

__all__ = ["CLAOptions", "CrossLayerAttention", "SharedKVCache"]

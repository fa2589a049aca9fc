"""Decoding without host overhead: a static KV cache, an unchecked step, compiled.

:meth:`GPT.forward <attncourse.nn.gpt.GPT.forward>` is written for any caller: it checks
the token ids (reading their minimum and maximum back to the host), the positions and
the caches, and each attention layer builds its positions, RoPE's angles and masks again
at every step, while :class:`~attncourse.nn.attention.KVCache` grows by concatenation (a
copy of the whole cache per token). Profiled on SmolLM2-135M's shape (one CPU thread, 32
greedy tokens), the matrix products took about 60 % of the time; RoPE's angles
recomputed in every layer about 13 %, the module calls, norms and ``arange`` calls most
of the rest.

A generation loop already guarantees what those checks test, so :class:`Decoder` walks
the model's own modules without them:

- the caches are :class:`~attncourse.nn.attention.StaticKVCache`\\ s, preallocated to
  the final length (prompt + new tokens), written in place;
- RoPE's cosines and sines are computed once per length, with
  :func:`~attncourse.nn.rope.apply_rope`'s formula, so the rotated numbers are the same;
- with ``compile=True`` the one-token step is :func:`torch.compile`\\ d (on a GPU with
  ``mode="reduce-overhead"``: CUDA graphs) over the *whole* preallocated cache, its
  position a tensor on the device and the keys past it masked, so that every step has
  the same shapes; the prefill is compiled separately.

Without compile the step attends over the cache's filled part, as the model's own
forward does, and gives bit-identical logits (tests/decode/test_fast.py). The fast path
applies to models whose attention layers are
:class:`~attncourse.nn.causal_attention.CausalSelfAttention` (``"gqa"``, or a subclass
that only changes :meth:`output`), causal, without a window, with RoPE, no positions or
a position table; for any other model :class:`Decoder` calls the model itself with its
own caches (checks included), and ``compile`` is then not applied.

References
----------
Kwon et al. (2023), "Efficient Memory Management for Large Language Model Serving with
PagedAttention", section 3.1 (a cache preallocated to the final length).
PyTorch Labs, gpt-fast (2023): static cache, ``torch.compile(mode="reduce-overhead")``,
sampling without a host synchronisation.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from attncourse.nn.attend import allowed_keys, sdpa_attend
from attncourse.nn.attention import StaticKVCache
from attncourse.nn.causal_attention import CausalSelfAttention
from attncourse.nn.gpt import GPT
from attncourse.nn.rope import rope_frequencies


def fast_path_supported(model: GPT) -> bool:
    """Whether :class:`Decoder` can run ``model`` without its forward (see the module's
    notes).

    True for a model in eval mode whose every attention layer is a causal
    :class:`~attncourse.nn.causal_attention.CausalSelfAttention` (``forward`` and
    ``attend`` not overridden) without a window, with RoPE or no positions inside
    attention. Source: Ainslie et al. (2023), "GQA", section 2.2 (the attention the fast
    step computes).
    """
    for block in model.blocks:
        attn = block.attn
        if not isinstance(attn, CausalSelfAttention):
            return False
        cls = type(attn)
        if (
            cls.forward is not CausalSelfAttention.forward
            or cls.attend is not CausalSelfAttention.attend
        ):
            return False
        if (
            not attn.causal
            or attn.window is not None
            or attn.positional not in (None, "rope")
        ):
            return False
    return not model.training


def rope_table(
    attn: CausalSelfAttention, capacity: int, dtype: torch.dtype, device
) -> tuple[torch.Tensor, ...]:
    """cos and sin ``(capacity, d_k / 2)`` of positions ``0 .. capacity - 1`` for ``attn``'s
    RoPE (its base and scaling), as ``apply_rope`` computes them. Source: Su et al. (2021),
    RoFormer (each feature pair rotated by its angle)."""
    if attn.rope_scaling is None:
        theta, factor = rope_frequencies(attn.d_k, attn.rope_base), 1.0
    else:
        theta, factor = (
            attn.rope_scaling.frequencies(attn.d_k, attn.rope_base),
            attn.rope_scaling.attention_factor,
        )
    positions = torch.arange(capacity, device=device, dtype=torch.float64)
    angles = positions[:, None] * theta.to(device)
    return (factor * angles.cos()).to(dtype), (factor * angles.sin()).to(dtype)


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on adjacent feature pairs of ``x (..., seq_len, d_k)`` with ``cos, sin
    (seq_len, d_k / 2)``, as :func:`~attncourse.nn.rope.apply_rope`; same shape as ``x``."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        (even * cos - odd * sin, even * sin + odd * cos), dim=-1
    ).flatten(-2)


def project_heads(linear: torch.nn.Linear, x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``linear(x)`` split into heads: ``(batch, seq_len, d_model)`` -> ``(batch, num_heads,
    seq_len, d_k)``, as ``split_heads`` after the projection."""
    y = F.linear(x, linear.weight, linear.bias)
    batch, seq_len, width = y.shape
    return y.view(batch, seq_len, num_heads, width // num_heads).transpose(1, 2)


class Decoder:
    """Prefill and one-token steps of a :class:`~attncourse.nn.gpt.GPT` over static
    caches.

    Parameters
    ----------
    model : GPT
        Put in eval mode.
    capacity : int
        Positions the caches hold: prompt + new tokens.
    batch : int
        Sequences decoded together.
    compile : bool
        Compile the step and the prefill with :func:`torch.compile` (a GPU: the step
        with ``mode="reduce-overhead"``, CUDA graphs); the first call of each pays the
        compile, whose seconds :attr:`compile_seconds` sums apart from the decoding's.

    Attributes
    ----------
    fast : bool
        Whether the fast path runs (:func:`fast_path_supported`); else the model's
        forward.
    compiled : bool
        Whether the step is compiled (``compile`` and ``fast``).
    caches : list of StaticKVCache (the model's own caches when not ``fast``)
    compile_seconds : float
        Seconds spent in the compiled functions' first calls (tracing and code
        generation).

    Raises
    ------
    ValueError
        If ``capacity`` or ``batch`` is not a positive int, or ``capacity`` passes a
        position table's ``max_len``.

    References
    ----------
    Kwon et al. (2023), section 3.1 (a cache preallocated to the final length); PyTorch
    Labs, gpt-fast (2023), ``generate.py`` (the compiled one-token step over a static
    cache).
    """

    def __init__(
        self, model: GPT, capacity: int, batch: int = 1, compile: bool = False
    ) -> None:
        for name, value in (("capacity", capacity), ("batch", batch)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if model.positional_encoding is not None and capacity > model.max_len:
            raise ValueError(
                f"capacity {capacity} passes the position table's max_len={model.max_len}"
            )
        self.model = model.eval()
        self.capacity, self.batch = int(capacity), int(batch)
        weight = model.embedding.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.fast = fast_path_supported(model)
        self.compiled = bool(compile) and self.fast
        self.compile_seconds = 0.0
        if not self.fast:
            self.caches = model.init_cache(batch)
            return
        self.caches = [
            StaticKVCache(
                batch,
                b.attn.num_kv_heads,
                capacity,
                b.attn.d_k,
                self.dtype,
                self.device,
            )
            for b in model.blocks
        ]
        # one table per distinct RoPE (base, scaling, d_k), shared by its layers
        tables: dict[tuple, tuple[torch.Tensor, ...]] = {}
        self.rope = []
        for block in model.blocks:
            attn = block.attn
            if attn.positional != "rope":
                self.rope.append(None)
                continue
            key = (attn.d_k, attn.rope_base, attn.rope_scaling)
            if key not in tables:
                tables[key] = rope_table(attn, capacity, self.dtype, self.device)
            self.rope.append(tables[key])
        encoding = model.positional_encoding
        self.table = None if encoding is None else getattr(encoding, "pe", None)
        if encoding is not None and self.table is None:
            self.table = encoding.embedding.weight
        self.key_index = torch.arange(capacity, device=self.device)
        # the compiled step's position: one tensor filled in place, not a new view
        # (a view's other storage offset could make torch.compile specialise again)
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)
        self._calls = {"prefill": 0, "step": 0}
        if self.compiled:
            for cache in self.caches:  # CUDA graphs need the buffers at fixed addresses
                torch._dynamo.mark_static_address(cache.keys)
                torch._dynamo.mark_static_address(cache.values)
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            self._prefill_fn = torch.compile(self._prefill_core, dynamic=False)
            self._step_fn = torch.compile(
                self._step_static, mode=mode, dynamic=False, fullgraph=True
            )
        else:
            self._prefill_fn, self._step_fn = self._prefill_core, None

    def __len__(self) -> int:
        """Positions cached so far."""
        return len(self.caches[0])

    # ---- the public calls -----------------------------------------------------------

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed the prompt ``tokens`` (batch, prompt_len) into empty caches; the last
        position's logits.

        Returns
        -------
        (batch, vocab_size) logits of the token after the prompt.

        Raises
        ------
        ValueError
            If ``tokens`` is not (batch, prompt_len) integers, an id lies outside the
            vocabulary, the caches are not empty, or the prompt does not fit
            ``capacity``.
        """
        if (
            tokens.dim() != 2
            or tokens.shape[0] != self.batch
            or tokens.is_floating_point()
        ):
            raise ValueError(
                f"tokens must be (batch={self.batch}, prompt_len) integers, got "
                f"{tuple(tokens.shape)} {tokens.dtype}"
            )
        if len(self) != 0:
            raise ValueError(
                "prefill needs empty caches: make a new Decoder for a new prompt"
            )
        if not 1 <= tokens.shape[1] <= self.capacity:
            raise ValueError(
                f"a prompt of {tokens.shape[1]} tokens does not fit the capacity {self.capacity}"
            )
        low, high = (
            int(tokens.min()),
            int(tokens.max()),
        )  # once per prompt, as the forward checks
        if not 0 <= low <= high < self.model.vocab_size:
            raise ValueError(
                f"token ids must lie in 0..vocab_size - 1 = 0..{self.model.vocab_size - 1}, "
                f"got ids from {low} to {high}"
            )
        tokens = tokens.to(self.device)
        if not self.fast:
            return self.model(tokens, self.caches)[0][:, -1]
        logits = self._timed("prefill", self._prefill_fn, tokens)
        for cache in self.caches:
            cache.length = tokens.shape[1]
        return logits

    @torch.no_grad()
    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Feed one token per sequence, ``token`` (batch, 1) on the device; its logits
        (batch, vocab_size).

        No check reads the token's value (no host synchronisation); the caller
        guarantees it is a token id, as :func:`~attncourse.decode.generation.generate`
        does.

        Raises
        ------
        ValueError
            If the caches are full.
        """
        start = len(self)
        if start >= self.capacity:
            raise ValueError(
                f"the caches hold their capacity of {self.capacity} positions"
            )
        if not self.fast:
            return self.model(token, self.caches)[0][:, -1]
        if self.compiled:
            # the position as a tensor: the compiled step's shapes do not change with it
            self.position.fill_(start)  # a write on the device, no read back
            logits = self._timed("step", self._step_fn, token, self.position)
            logits = (
                logits.clone()
            )  # a CUDA graph's output is overwritten by its next replay
        else:
            logits = self._step_eager(token, start)
        for cache in self.caches:
            cache.length = start + 1
        return logits

    def _timed(self, name: str, fn, *args) -> torch.Tensor:
        """``fn(*args)``; its first calls (two for CUDA graphs: warm-up, then recording)
        count as compile time."""
        first = self._calls[name] < (
            2 if self.compiled and self.device.type == "cuda" else 1
        )
        self._calls[name] += 1
        if not (self.compiled and first):
            return fn(*args)
        start = time.perf_counter()
        out = fn(*args)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.compile_seconds += time.perf_counter() - start
        return out

    # ---- what runs (eager, or traced by torch.compile) -------------------------------

    def _embed(self, tokens: torch.Tensor, rows) -> torch.Tensor:
        model = self.model
        x = F.embedding(tokens, model.embedding.weight)
        if model.spec.scale_embedding:
            x = x * math.sqrt(model.d_model)
        if self.table is not None:
            x = x + self.table[rows]
        return x

    def _layers(self, x: torch.Tensor, rows, attend) -> torch.Tensor:
        """Every block, pre-norm: ``x + attn(norm(x))``, ``x + ffn(norm(x))``;
        ``attend(i, q, k, v)`` is the attention of layer i."""
        for i, block in enumerate(self.model.blocks):
            attn = block.attn
            h = block.attn_norm(x)
            q = project_heads(attn.w_q, h, attn.num_heads)
            k = project_heads(attn.w_k, h, attn.num_kv_heads)
            v = project_heads(attn.w_v, h, attn.num_kv_heads)
            if self.rope[i] is not None:
                cos, sin = self.rope[i][0][rows], self.rope[i][1][rows]
                q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
            x = x + attn.output(h, attend(i, q, k, v))
            if block.ffn is not None:
                x = x + block.ffn(block.ffn_norm(x))
        return x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """The last position's logits (batch, vocab_size), computed with the others' in
        a prefill.

        The output layer's product over the prompt's every position costs one prefill's
        (batch, prompt_len, vocab_size) logits, but its last row is then bit-identical
        to the forward's: the product of one row alone is rounded differently (about
        1e-6 apart).
        """
        model = self.model
        return model.output_proj(model.final_norm(x))[:, -1]

    def _prefill_core(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        allowed = allowed_keys(n, n, True, None, device=tokens.device)

        def attend(i, q, k, v):
            cache = self.caches[i]
            cache.keys[:, :, :n].copy_(k)
            cache.values[:, :, :n].copy_(v)
            return sdpa_attend(q, k, v, allowed, None, is_causal=True)

        rows = slice(0, n)
        return self._logits(self._layers(self._embed(tokens, rows), rows, attend))

    def _step_eager(self, token: torch.Tensor, start: int) -> torch.Tensor:
        """One token at position ``start``, attending over the cache's filled part (the
        forward's numbers)."""

        def attend(i, q, k, v):
            cache = self.caches[i]
            cache.keys[:, :, start : start + 1].copy_(k)
            cache.values[:, :, start : start + 1].copy_(v)
            return sdpa_attend(
                q, cache.keys[:, :, : start + 1], cache.values[:, :, : start + 1], None
            )

        rows = slice(start, start + 1)
        return self._logits(self._layers(self._embed(token, rows), rows, attend))

    def _step_static(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """One token at ``position`` (1,), attending over the whole cache, the keys past
        it masked."""
        visible = (self.key_index <= position)[None, :]  # (1, capacity): one query row

        def attend(i, q, k, v):
            cache = self.caches[i]
            cache.keys.index_copy_(2, position, k)
            cache.values.index_copy_(2, position, v)
            return F.scaled_dot_product_attention(
                q,
                cache.keys,
                cache.values,
                attn_mask=visible,
                enable_gqa=cache.keys.shape[1] != q.shape[1],
            )

        return self._logits(
            self._layers(self._embed(token, position), position, attend)
        )


__all__ = ["Decoder", "fast_path_supported", "project_heads", "rope_table", "rotate_pairs"]

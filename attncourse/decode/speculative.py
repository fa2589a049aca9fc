"""Speculative decoding: a small draft model proposes, the target verifies in one pass.

Source: Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via
Speculative Decoding", algorithm 1, appendix A.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attncourse.decode.generation import (
    SUPPRESSED_IDS,
    _suppress,
    _validate_prompt,
    next_token_probs,
)
from attncourse.nn.gpt import GPT
from attncourse.runtime import quiet_progress


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last axis, (..., vocab_size); zeros where p <= q."""
    excess = (p - q).clamp(min=0)
    total = excess.sum(-1, keepdim=True)
    return torch.where(total > 0, excess / total.clamp(min=torch.finfo(p.dtype).tiny), excess)


def emitted_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The emitted token's distribution, term by term (equals ``p``; appendix A.1).

    ``p, q`` (..., vocab_size): target and draft probabilities at one position.
    """
    ratio = torch.where(q > 0, p / q.clamp(min=torch.finfo(q.dtype).tiny), torch.ones_like(p))
    accepted = q * ratio.clamp(max=1.0)
    rejected = 1.0 - accepted.sum(-1, keepdim=True)
    return accepted + rejected * residual_distribution(p, q)


def speculative_token(p: torch.Tensor, q: torch.Tensor, generator: torch.Generator) -> tuple[int, bool]:
    """One position: propose from q, accept with min(1, p/q), else redraw."""
    proposed = int(torch.multinomial(q, 1, generator=generator))
    if float(torch.rand((), generator=generator)) * float(q[proposed]) < float(p[proposed]):
        return proposed, True
    return int(torch.multinomial(residual_distribution(p, q), 1, generator=generator)), False


@dataclass
class SpeculativeStats:
    """Counts of one run: rounds, drafted, examined, accepted and emitted tokens."""

    rounds: int = 0
    drafted: int = 0
    examined: int = 0
    accepted: int = 0
    emitted: int = 0

    @property
    def acceptance_rate(self) -> float:
        """accepted / examined: the estimated acceptance probability alpha."""
        return self.accepted / max(1, self.examined)

    @property
    def target_passes_per_token(self) -> float:
        """Target passes per emitted token (1 without a draft model)."""
        return self.rounds / max(1, self.emitted)


def validate_draft(target: GPT, draft: GPT, k: int) -> None:
    """``ValueError`` unless ``draft`` can propose for ``target``.

    Same vocabulary size, ``k >= 1``, and caches that can be cut back after a rejection
    (not a memory attention's fixed-size state).
    """
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k (draft tokens per round) must be an int >= 1, got {k!r}")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"the draft model has {draft.vocab_size} tokens, the target {target.vocab_size}: "
                         "speculative decoding needs one vocabulary")
    target_vocab, draft_vocab = getattr(target, "vocab", None), getattr(draft, "vocab", None)
    if target_vocab is not None and draft_vocab is not None and target_vocab != draft_vocab:
        raise ValueError("the draft and target models have different vocabularies (same size, other "
                         "characters): speculative decoding needs one vocabulary")
    for role, model in (("target", target), ("draft", draft)):
        if not all(_can_cut_back(cache) for cache in model.init_cache(1)):
            raise ValueError(f"the {role} model keeps a fixed-size memory (linear attention or DeltaNet), "
                             "which cannot be cut back to the accepted tokens after a rejected draft: "
                             "speculative decoding needs models with a KV cache")


def _can_cut_back(cache) -> bool:
    """Whether a layer's cache can drop its last tokens."""
    return cache.kind != "state"


def _truncate(caches, length: int) -> None:
    for cache in caches:
        cache.truncate(length)


@torch.no_grad()
def speculative_generate(target: GPT, draft: GPT, prompt: torch.Tensor, max_new_tokens: int, k: int = 4,
                         temperature: float = 1.0, top_k: int | None = None, seed: int = 0,
                         suppress_ids=SUPPRESSED_IDS) -> tuple[torch.Tensor, SpeculativeStats]:
    """Sample from ``target``, ``draft`` proposing ``k`` tokens per round.

    ``temperature``, ``top_k`` and ``suppress_ids`` apply to both models
    (:func:`~attncourse.decode.generation.next_token_probs`). Returns tokens
    (max_new_tokens,) int64 and :class:`SpeculativeStats`. Raises ``ValueError`` if ``k
    < 1``, the vocabularies differ or the prompt does not fit.
    """
    validate_draft(target, draft, k)
    _validate_prompt(target, prompt, max_new_tokens + k)
    _validate_prompt(draft, prompt, max_new_tokens + k)
    target.eval()
    draft.eval()
    device = next(target.parameters()).device
    draft_device = next(draft.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    committed = prompt.tolist()
    n_prompt = len(committed)
    target_caches, draft_caches = target.init_cache(1), draft.init_cache(1)
    stats = SpeculativeStats()

    def probs(logits: torch.Tensor) -> torch.Tensor:
        return next_token_probs(_suppress(logits.float().cpu(), suppress_ids), temperature, top_k)

    bar = quiet_progress(total=max_new_tokens, desc="speculative decoding", unit="token")
    while len(committed) - n_prompt < max_new_tokens:
        # the draft proposes k tokens, one pass each, starting from what it has not seen
        drafted, q_rows = [], []
        feed = committed[len(draft_caches[0]):]
        for _ in range(k):
            logits, _ = draft(torch.tensor([feed], device=draft_device), draft_caches)
            q = probs(logits[0, -1])
            token = int(torch.multinomial(q, 1, generator=generator))
            drafted.append(token)
            q_rows.append(q)
            feed = [token]
        # the target scores the unseen committed tokens and the k drafts in one pass
        start = len(target_caches[0])
        feed = committed[start:] + drafted
        logits, _ = target(torch.tensor([feed], device=device), target_caches)
        p_rows = probs(logits[0, -(k + 1):])  # p_1 .. p_{k+1}
        stats.rounds += 1
        stats.drafted += k
        new = []
        for i, token in enumerate(drafted):
            p, q = p_rows[i], q_rows[i]
            if float(torch.rand((), generator=generator)) * float(q[token]) < float(p[token]):
                new.append(token)
                continue
            new.append(int(torch.multinomial(residual_distribution(p, q), 1, generator=generator)))
            break
        else:
            new.append(int(torch.multinomial(p_rows[k], 1, generator=generator)))
        stats.accepted += len(new) - 1  # the last is the redrawn or the free token
        stats.examined += min(len(new), k)
        committed += new
        bar.update(min(len(new), max_new_tokens - bar.n))
        # keep in each cache only the committed tokens it holds (the last new token is unseen)
        kept = len(committed) - 1
        _truncate(target_caches, min(len(target_caches[0]), kept))
        _truncate(draft_caches, min(len(draft_caches[0]), kept))
    bar.close()
    out = committed[n_prompt:n_prompt + max_new_tokens]
    stats.emitted = len(out)
    return torch.tensor(out, dtype=torch.long), stats


__all__ = ["SpeculativeStats", "validate_draft", "emitted_distribution", "residual_distribution",
           "speculative_generate", "speculative_token"]

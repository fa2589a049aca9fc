"""Greedy decoding and beam search over the encoder-decoder protocol.

Source: Wu et al. (2016), "Google's Neural Machine Translation System", section 7.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from attncourse.nn.protocol import EncoderDecoder

Tokens = list[list[int]]
Attention = list[np.ndarray | None]


@contextmanager
def _inference(model: torch.nn.Module):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _validate_inputs(src: torch.Tensor, src_mask: torch.Tensor, max_len: int) -> None:
    if src.dim() != 2 or src_mask.shape != src.shape:
        raise ValueError(
            f"src (batch, src_len) and src_mask must have the same 2-D shape, "
            f"got src {tuple(src.shape)} and src_mask {tuple(src_mask.shape)}"
        )
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


def _model_device(model: torch.nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def wu_length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, section 7)."""
    return ((5.0 + length) / 6.0) ** alpha


def greedy_decode(
    model: EncoderDecoder,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len: int = 50,
    bos_id: int = 1,
    eos_id: int = 2,
) -> tuple[Tokens, Attention]:
    """Greedy decoding, y_i = argmax p(y | y_<i, x), until eos or ``max_len``.

    Shapes: ``src`` (batch, src_len) long, right-padded, ``src_mask`` (batch, src_len)
    bool -> tokens per sentence (no bos/eos), attention (out_len, src_len_b) or None.
    Raises ``ValueError`` if the shapes differ or ``max_len < 1``.
    """
    _validate_inputs(src, src_mask, max_len)
    device = _model_device(model)
    src, src_mask = src.to(device), src_mask.to(device)
    batch = src.shape[0]
    with _inference(model):
        enc = model.encode(src, src_mask)
        state = model.init_state(enc)
        prev = torch.full((batch,), bos_id, dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        steps, step_weights = [], []
        for _ in range(max_len):
            logits, state, weights = model.decode_step(prev, state, enc)
            prev = logits.argmax(dim=-1)
            steps.append(prev)
            step_weights.append(weights)
            finished |= prev == eos_id
            if bool(finished.all()):
                break
    out = torch.stack(steps, dim=1).tolist()
    has_attention = step_weights[0] is not None
    weights_all = torch.stack(step_weights, dim=1).cpu().numpy() if has_attention else None
    src_lengths = src_mask.sum(dim=1).tolist()
    tokens, attention = [], []
    for b, row in enumerate(out):
        n = row.index(eos_id) if eos_id in row else len(row)
        tokens.append(row[:n])
        attention.append(weights_all[b, :n, : src_lengths[b]] if has_attention else None)
    return tokens, attention


def beam_search(
    model: EncoderDecoder,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    beam_size: int = 4,
    max_len: int = 50,
    length_penalty: float = 0.6,
    bos_id: int = 1,
    eos_id: int = 2,
) -> tuple[Tokens, Attention]:
    """Beam search per sentence, ranked by log p(y | x) / lp(y).

    ``beam_size=1`` is greedy. Shapes as :func:`greedy_decode`. Raises ``ValueError`` if
    shapes disagree, ``beam_size < 1``, ``max_len < 1`` or ``length_penalty < 0``.
    Source: Vaswani et al. (2017), section 6.1 (beam 4, alpha 0.6).
    """
    _validate_inputs(src, src_mask, max_len)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty (alpha) must be >= 0, got {length_penalty}")
    device = _model_device(model)
    src, src_mask = src.to(device), src_mask.to(device)
    with _inference(model):
        # The sentences are searched side by side, each exactly as alone: one decoder call per
        # step for the live hypotheses of every sentence (one call per sentence and step spent
        # most of its time in per-call overhead at these sizes), then each sentence's own top-k.
        enc = model.encode(src, src_mask)
        state = model.init_state(enc)
        beams = [_Beam(beam_size, length_penalty, bos_id, eos_id, device) for _ in range(src.shape[0])]
        searching = list(range(src.shape[0]))  # the sentences still searching, in row order
        for _ in range(max_len if searching else 0):
            prev = torch.tensor([t[-1] if t else bos_id for b in searching for t in beams[b].live_tokens],
                                device=device)
            logits, state, weights = model.decode_step(prev, state, enc)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            rows, still, start = [], [], 0
            for b in searching:
                n = len(beams[b].live_tokens)
                step_weights = None if weights is None else weights[start:start + n]
                kept = beams[b].extend(log_probs[start:start + n], step_weights)
                if kept:
                    rows += [start + k for k in kept]
                    still.append(b)
                start += n
            if not rows:
                break
            index = torch.tensor(rows, device=device)
            state, enc = model.reorder(state, index), model.reorder(enc, index)
            searching = still
    tokens, attention = [], []
    for b, beam in enumerate(beams):
        best_tokens, best_weights = beam.best()
        tokens.append(best_tokens)
        attention.append(None if best_weights is None else best_weights[:, : int(src_mask[b].sum())])
    return tokens, attention


class _Beam:
    """One sentence's beam: live and finished hypotheses."""

    def __init__(self, beam_size: int, alpha: float, bos_id: int, eos_id: int, device: torch.device) -> None:
        self.beam_size, self.alpha, self.bos_id, self.eos_id = beam_size, alpha, bos_id, eos_id
        self.live_tokens: list[list[int]] = [[]]
        self.live_weights: list[list[np.ndarray]] = [[]]
        self.live_scores = torch.zeros(1, device=device)
        self.finished: list = []  # (ranking score, tokens without eos, attention rows)
        self.width: int | None = None  # source columns of the attention rows; None without attention

    def extend(self, log_probs: torch.Tensor, weights: torch.Tensor | None) -> list[int]:
        """Extend every live hypothesis by every token; keep the best."""
        vocab = log_probs.shape[-1]
        self.width = None if weights is None else weights.shape[-1]
        totals = (self.live_scores[:, None] + log_probs).flatten()
        k = min(self.beam_size - len(self.finished), totals.numel())
        top_scores, top_index = totals.topk(k)
        parents = (top_index // vocab).tolist()
        words = (top_index % vocab).tolist()
        keep, next_tokens, next_weights, next_scores = [], [], [], []
        for score, parent, word in zip(top_scores.tolist(), parents, words):
            rows = self.live_weights[parent] + ([] if weights is None else [weights[parent].cpu().numpy()])
            if word == self.eos_id:
                length = len(self.live_tokens[parent]) + 1
                self.finished.append((score / wu_length_penalty(length, self.alpha), self.live_tokens[parent], rows))
            else:
                keep.append(parent)
                next_tokens.append(self.live_tokens[parent] + [word])
                next_weights.append(rows)
                next_scores.append(score)
        if keep:
            self.live_tokens, self.live_weights = next_tokens, next_weights
            self.live_scores = torch.tensor(next_scores, device=self.live_scores.device)
        return keep

    def best(self) -> tuple[list[int], np.ndarray | None]:
        """The best finished hypothesis by log p / lp (else live), with weights."""
        finished = self.finished
        if not finished:  # nothing reached eos within max_len: rank the live hypotheses
            finished = [
                (s / wu_length_penalty(len(t), self.alpha), t, w)
                for s, t, w in zip(self.live_scores.tolist(), self.live_tokens, self.live_weights)
            ]
        _, best_tokens, best_rows = max(finished, key=lambda f: f[0])
        if self.width is None:
            return best_tokens, None
        rows = best_rows[: len(best_tokens)]
        best = np.stack(rows) if rows else np.zeros((0, self.width), dtype=np.float32)
        return best_tokens, best


def sequence_log_probs(
    model: EncoderDecoder,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    hyps: Tokens,
    bos_id: int = 1,
    eos_id: int = 2,
    append_eos: bool = True,
) -> list[float]:
    """log p(y | x) of each output in ``hyps`` (no bos/eos), scored step by step.

    Raises ``ValueError`` if ``len(hyps)`` differs from the batch size.
    """
    _validate_inputs(src, src_mask, 1)
    if len(hyps) != src.shape[0]:
        raise ValueError(f"got {len(hyps)} hypotheses for a batch of {src.shape[0]} sources {tuple(src.shape)}")
    device = _model_device(model)
    src, src_mask = src.to(device), src_mask.to(device)
    targets = [list(h) + ([eos_id] if append_eos else []) for h in hyps]
    steps = max(1, max(len(t) for t in targets))
    gold = torch.full((len(targets), steps), -1, dtype=torch.long, device=device)
    for b, t in enumerate(targets):
        gold[b, : len(t)] = torch.tensor(t, dtype=torch.long)
    with _inference(model):
        enc = model.encode(src, src_mask)
        state = model.init_state(enc)
        prev = torch.full((len(targets),), bos_id, dtype=torch.long, device=device)
        total = torch.zeros(len(targets), dtype=torch.float64, device=device)
        for i in range(steps):
            logits, state, _ = model.decode_step(prev, state, enc)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            real = gold[:, i] >= 0
            picked = log_probs.gather(1, gold[:, i].clamp(min=0)[:, None]).squeeze(1)
            total += torch.where(real, picked.double(), torch.zeros_like(total))
            prev = gold[:, i].clamp(min=0)
    return total.tolist()


def translate(model: EncoderDecoder, src_vocab: Any, tgt_vocab: Any, text: str, level: str = "word",
              max_len: int = 50) -> tuple[list[str], np.ndarray | None]:
    """Greedy translation of ``text``: tokens, attention (out_len, src_len + 1)."""
    from attncourse.data.pairs import tokenize

    src = torch.tensor([src_vocab.encode(tokenize(text, level), add_eos=True)])
    tokens, attention = greedy_decode(model, src, torch.ones_like(src, dtype=torch.bool), max_len=max_len)
    return tgt_vocab.decode(tokens[0]), attention[0]

"""Training epoch, validation and test scoring of an encoder-decoder.

Source: Bahdanau et al. (2015), "Neural Machine Translation by Jointly Learning to Align
and Translate", section 2 (the log-likelihood maximised).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from attncourse.data.batching import Batch, make_batches
from attncourse.data.pairs import PairDataset, detokenize
from attncourse.data.vocab import Vocabulary
from attncourse.decode.search import beam_search, greedy_decode
from attncourse.runtime import progress_bar
from attncourse.train.distributed import all_reduce_sums, rank_batch_order
from attncourse.train.loop import Epoch
from attncourse.train.metrics import evaluate_by_bucket

PAD_ID = Vocabulary.pad_id
#: Training steps between two reads of the running loss (each read waits for the GPU).
LOG_EVERY = 50

#: Below this, relative to the row's largest logit, logits are floored in the smoothed loss
#: (exp(-1e4) is 0 in float32 already, so no probability changes).
_LOGIT_FLOOR = 1e4


def _loss_terms(
    logits: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = PAD_ID, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(objective, detached plain cross-entropy, n_correct, n_tokens), 0-dim tensors."""
    if logits.dim() != 3 or logits.shape[:2] != tgt_out.shape:
        raise ValueError(
            f"logits (batch, tgt_len, tgt_vocab) {tuple(logits.shape)} do not fit "
            f"tgt_out (batch, tgt_len) {tuple(tgt_out.shape)}"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
    # float32 even under bf16 autocast: log-softmax over a large vocabulary needs the precision.
    flat = logits.float().reshape(-1, logits.shape[-1])
    gold = tgt_out.reshape(-1)
    if label_smoothing > 0:
        # Smoothing gives every token eps / V of the target, so one logit of -inf (or any row whose
        # range overflows float32) would make the loss infinite. Shift each row to a maximum of 0
        # (softmax does not change; the max is detached because the loss is shift-invariant) and
        # floor at -1e4, where exp() is already 0 in float32.
        flat = (flat - flat.amax(dim=-1, keepdim=True).detach()).clamp(min=-_LOGIT_FLOOR)
        loss = F.cross_entropy(flat, gold, ignore_index=pad_id, label_smoothing=label_smoothing)
        with torch.no_grad():
            plain = F.cross_entropy(flat, gold, ignore_index=pad_id)
    else:
        loss = F.cross_entropy(flat, gold, ignore_index=pad_id)
        plain = loss.detach()
    real = tgt_out != pad_id
    n_correct = ((logits.argmax(dim=-1) == tgt_out) & real).sum()
    return loss, plain, n_correct, real.sum()


def sequence_loss(
    logits: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = PAD_ID, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, int, int]:
    """(mean cross-entropy in nats per real token, n_correct, n_tokens) of ``logits``.

    ``logits`` is (batch, tgt_len, vocab); ``tgt_out`` (batch, tgt_len) holds ``pad_id``
    at padding (ignored). ``label_smoothing`` eps gives ``(1 - eps) * -log p(y) + eps *
    mean_k -log p(k)``, finite for any logits. Raises ``ValueError`` if the shapes do
    not fit or eps is not in [0, 1). Source: Vaswani et al. (2017), "Attention Is All
    You Need", section 5.4 (smoothing).
    """
    loss, _, n_correct, n_tokens = _loss_terms(logits, tgt_out, pad_id, label_smoothing)
    return loss, int(n_correct), int(n_tokens)


def _scheduled_sampling_logits(
    model: Any, batch: Batch, teacher_forcing: float, generator: torch.Generator
) -> torch.Tensor:
    """Decoder logits (batch, tgt_len, vocab), each input gold with probability p."""
    for name in ("encode", "init_state", "decode_step"):
        if not hasattr(model, name):
            raise TypeError(f"teacher_forcing < 1 needs a model with encode, init_state and decode_step; "
                            f"{type(model).__name__} has no {name}")
    tgt_in = batch.tgt_in
    enc = model.encode(batch.src, batch.src_mask)
    state = model.init_state(enc)
    prev = tgt_in[:, 0]  # <bos>
    steps = []
    for i in range(tgt_in.shape[1]):
        if i > 0:
            # Coin flips on the CPU generator, so they replay identically on resume and on any device.
            gold = torch.rand(tgt_in.shape[0], generator=generator) < teacher_forcing
            prev = torch.where(gold.to(tgt_in.device), tgt_in[:, i], steps[-1].argmax(dim=-1))
        logits, state, _ = model.decode_step(prev, state, enc)
        steps.append(logits)
    return torch.stack(steps, dim=1)


def _training_logits(epoch: Epoch, batch: Batch, teacher_forcing: float,
                      generator: torch.Generator) -> torch.Tensor:
    with epoch.autocast():
        if teacher_forcing >= 1.0:
            return epoch.forward(batch.src, batch.src_mask, batch.tgt_in).logits
        return _scheduled_sampling_logits(epoch.model, batch, teacher_forcing, generator)


def seq2seq_epoch(batches: Sequence[Batch], generator: torch.Generator, teacher_forcing: float = 1.0,
                  label_smoothing: float = 0.0, seed: int = 0, log_every: int = LOG_EVERY) -> Any:
    """The ``train_epoch`` of an encoder-decoder (see :mod:`~attncourse.train.loop`).

    Batches are visited in an order drawn from ``generator`` (or, distributed, from
    ``seed``); the epoch returns ``train_loss`` (nats per target token), ``train_acc``,
    ``train_tokens`` and ``train_steps``, summed over ranks. One process stops once
    ``Epoch.budget`` runs out. Source: Bengio et al. (2015), "Scheduled Sampling for
    Sequence Prediction with Recurrent Neural Networks", section 2.4
    (``teacher_forcing``).
    """
    counts = [batch.n_tgt_tokens for batch in batches]  # on the CPU, once
    placed: dict[str, list[Batch]] = {}

    def on_device(device: torch.device) -> list[Batch]:
        if str(device) not in placed:
            placed.clear()
            placed[str(device)] = [batch.to(device) for batch in batches]
        return placed[str(device)]

    def train_epoch(epoch: Epoch) -> dict[str, float]:
        world, device = epoch.world, epoch.device
        if world.distributed:
            order = rank_batch_order(len(batches), epoch.number, seed, world.rank, world.world_size)
        else:
            order = torch.randperm(len(batches), generator=generator).tolist()
        resident = on_device(device)
        # float64 sums of the epoch's losses (MPS has no float64)
        sum_dtype = torch.float32 if device.type == "mps" else torch.float64
        loss_sum = torch.zeros((), dtype=sum_dtype, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        tokens = steps = 0
        with progress_bar(total=len(order), desc=f"epoch {epoch.number}", unit="batch", leave=False,
                          progress=epoch.progress, dynamic_ncols=True) as bar:
            for step, index in enumerate(order):
                batch, n_tokens = resident[index], counts[index]
                logits = _training_logits(epoch, batch, teacher_forcing, generator)
                loss, plain, n_correct, _ = _loss_terms(logits, batch.tgt_out, label_smoothing=label_smoothing)
                epoch.step(loss)
                loss_sum += plain.to(sum_dtype) * n_tokens
                correct += n_correct
                tokens += n_tokens
                steps += 1
                bar.update()
                # reading the sums waits for the GPU: only every log_every steps
                if epoch.progress and (step % log_every == log_every - 1 or step == len(order) - 1):
                    bar.set_postfix(loss=f"{float(loss_sum) / tokens:.3f}", acc=f"{int(correct) / tokens:.3f}",
                                    refresh=False)
                # one process only: under DDP every rank must take the same number of steps
                if not world.distributed and epoch.out_of_time():
                    break
        total_loss, total_correct, total_tokens, total_steps = all_reduce_sums(
            [float(loss_sum), int(correct), tokens, steps], device)
        return {"train_loss": total_loss / total_tokens, "train_acc": total_correct / total_tokens,
                "train_tokens": int(total_tokens), "train_steps": int(total_steps)}

    return train_epoch


def validate(model: Any, batches: Sequence[Batch], device: torch.device | str | None = None) -> dict[str, float]:
    """``valid_loss`` (nats per token), ``valid_acc`` and greedy ``valid_exact_match``.

    Raises ``ValueError`` if ``batches`` is empty.
    """
    if len(batches) == 0:
        raise ValueError("no validation batches: give at least one")
    if device is None:
        device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum = 0.0
    correct = tokens = exact = sentences = 0
    try:
        with torch.no_grad():
            for batch in batches:
                batch = batch.to(device)
                logits = model(batch.src, batch.src_mask, batch.tgt_in).logits
                loss, n_correct, n_tokens = sequence_loss(logits, batch.tgt_out)
                loss_sum += float(loss) * n_tokens
                correct += n_correct
                tokens += n_tokens
                # max_len = T_max + 2 > T + 1 tokens (eos included) of any gold target: an output
                # cut at max_len is longer than every reference, so it is never counted as exact.
                # A model with P positions trains on targets of T <= P - 1 tokens, so the cap P
                # still exceeds every reference.
                max_len = decoding_limit(model, batch.tgt.shape[1])
                hyps, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=max_len)
                lengths = batch.tgt_mask.sum(dim=1).tolist()
                gold_rows = batch.tgt.tolist()
                for hyp, row, length in zip(hyps, gold_rows, lengths):
                    exact += hyp == row[1 : length - 1]  # strip <bos> and <eos>
                sentences += len(hyps)
    finally:
        model.train(was_training)
    return {
        "valid_loss": loss_sum / max(tokens, 1),
        "valid_acc": correct / max(tokens, 1),
        "valid_exact_match": exact / max(sentences, 1),
    }


def max_positions(model: Any) -> int | None:
    """``model.max_len`` (positions incl. ``<bos>``/``<eos>``), None if unlimited."""
    value = getattr(model, "max_len", None)
    return None if value is None else int(value)


def decoding_limit(model: Any, max_len: int) -> int:
    """``max_len`` capped at the model's positions, where a decoder step would fail."""
    positions = max_positions(model)
    return max_len if positions is None else min(max_len, positions)


def _default_edges(lengths: Sequence[int], n_buckets: int = 5) -> list[int]:
    lo, hi = int(min(lengths)), int(max(lengths))
    step = max(1, math.ceil((hi - lo + 1) / n_buckets))
    return list(range(lo, hi + 1, step))


def evaluate(
    model: Any,
    dataset: PairDataset,
    src_vocab: Vocabulary,
    tgt_vocab: Vocabulary,
    *,
    beam_size: int = 1,
    batch_size: int = 256,
    edges: Sequence[int] | None = None,
    max_len: int | None = None,
    length_penalty: float = 0.6,
) -> dict[str, Any]:
    """Decode ``dataset`` (greedy or beam) and score it overall and by source length.

    Returns ``metrics`` (:func:`~attncourse.train.metrics.evaluate_by_bucket`), the
    texts ``sources``, ``references``, ``hypotheses`` and the bucket ``edges`` (default:
    five equal widths). ``max_len`` defaults to twice the longest reference + 5, capped
    by :func:`decoding_limit`. Raises ``ValueError`` if ``beam_size`` < 1, the dataset
    is empty or a source is shorter than ``edges[0]``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if len(dataset) == 0:
        raise ValueError(f"dataset {dataset.name!r} is empty")
    lengths = dataset.src_lengths().tolist()
    edges = _default_edges(lengths) if edges is None else [int(e) for e in edges]
    if max_len is None:
        max_len = 2 * int(dataset.tgt_lengths().max()) + 5
    max_len = decoding_limit(model, max_len)
    outputs: list[list[str] | None] = [None] * len(dataset)
    for batch in make_batches(dataset, src_vocab, tgt_vocab, batch_size, shuffle=False):
        if beam_size == 1:
            ids, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=max_len)
        else:
            ids, _ = beam_search(model, batch.src, batch.src_mask, beam_size=beam_size, max_len=max_len,
                                 length_penalty=length_penalty)
        for i, hyp in zip(batch.index.tolist(), ids):
            outputs[i] = tgt_vocab.decode(hyp)
    refs = [list(tgt) for _, tgt in dataset.pairs]
    metrics = evaluate_by_bucket(lengths, outputs, refs, edges)
    level = dataset.level
    return {
        "metrics": metrics,
        "sources": [detokenize(src, level) for src, _ in dataset.pairs],
        "references": [detokenize(tgt, level) for tgt in refs],
        "hypotheses": [detokenize(hyp, level) for hyp in outputs],
        "edges": edges,
    }


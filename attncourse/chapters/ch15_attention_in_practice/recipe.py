"""Train chapter 7's model on documents, padded or packed with a document mask.

The documents are the paragraphs of the course's own text (each cut to ``max_doc``
characters; every tenth one held out). Each epoch shuffles them once, then

- ``padded``: takes ``batch_docs`` documents per step and pads each to the batch's
  longest; the padding's positions are computed and thrown away;
- ``packed``: lays the same documents end to end into rows of ``max_doc`` characters
  (first fit decreasing: no document is cut), shuffles the rows and splits them into as
  many steps as ``padded`` takes. A document mask (causal, and only within the document)
  keeps every document apart.

Both see the same tokens with the same targets (a document's last character predicts
nothing, in particular not the next document's first) in the same number of steps, so
their losses differ by what the batching changes: which documents share a step.

With rotary positions the packed rows need no positions restarted per document: RoPE's
score depends on the distance between query and key only, and the mask keeps every pair
inside one document (chapter 15 checks it).

References
----------
Krell et al. (2021), "Efficient Sequence Packing without Cross-contamination"
(padding's cost, packing with a block-diagonal mask); Su et al. (2021), RoFormer, eq. (16).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attncourse.data.text import CharCorpus
from attncourse.nn.gpt import GPT
from attncourse.recipes.lm import build_lm, decoupled_adamw
from attncourse.recipes.lm_config import LMConfig, lm_spec
from attncourse.runtime import data_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs
from attncourse.train.store import tensor_digest

#: The two ways of batching the documents.
LAYOUTS: tuple[str, ...] = ("padded", "packed")
#: The target of a position that predicts nothing (padding, a document's last character).
IGNORE = -100


@dataclass(frozen=True)
class PackingConfig:
    """Everything a packing run depends on; the model and optimiser are chapter 7's.

    Attributes
    ----------
    layout : str
        ``"padded"`` or ``"packed"`` (:data:`LAYOUTS`).
    seed : int
        Initial weights and the documents' order (plus ``$ATTNCOURSE_SEED_OFFSET``).
    max_doc : int
        Characters kept of each paragraph, and the length of a packed row.
    batch_docs : int
        Documents per padded step.
    epochs : int
        Passes over the training documents.
    lr, warmup : float, int
        AdamW's rate (chapter 7's) and its linear warmup in steps.
    """

    layout: str = "packed"
    seed: int = 0
    max_doc: int = 256
    batch_docs: int = 16
    epochs: int = 2
    lr: float = 3e-3
    warmup: int = 30

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.max_doc < 2 or self.batch_docs < 1 or self.epochs < 1:
            raise ValueError(f"max_doc must be at least 2 and batch_docs, epochs positive, got "
                             f"{self.max_doc}, {self.batch_docs}, {self.epochs}")

    @property
    def lm(self) -> LMConfig:
        """Chapter 7's model and optimiser settings, with this run's seed and length."""
        return LMConfig(positional="rope", seed=self.seed, lr=self.lr, warmup=self.warmup,
                        context=self.max_doc - 1, max_len=max(256, self.max_doc))


def split_documents(text: str, corpus: CharCorpus, max_doc: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The paragraphs of ``text`` as character ids, each cut to ``max_doc``: (train, held out).

    Paragraphs are separated by blank lines; those under 2 characters are dropped; every
    tenth one is held out.
    """
    paragraphs = [p.strip() for p in text.split("\n\n")]
    docs = [corpus.encode(p[:max_doc]) for p in paragraphs if len(p) >= 2]
    return ([d for i, d in enumerate(docs) if i % 10 != 9], [d for i, d in enumerate(docs) if i % 10 == 9])


@dataclass(frozen=True)
class Batch:
    """One step's rows: ``inputs`` and ``targets`` ``(rows, length)`` (``IGNORE`` where
    nothing is predicted) and ``doc_ids`` ``(rows, length)`` (-1 on padding)."""

    inputs: torch.Tensor
    targets: torch.Tensor
    doc_ids: torch.Tensor

    @property
    def tokens(self) -> int:
        """Targets predicted: the real tokens of the step."""
        return int((self.targets != IGNORE).sum())

    @property
    def slots(self) -> int:
        """Positions computed, padding included."""
        return self.inputs.numel()


def padded_batch(docs: list[torch.Tensor]) -> Batch:
    """One row per document, right-padded to the longest input: ``(len(docs), max_len - 1)``."""
    width = max(len(d) for d in docs) - 1
    inputs = torch.zeros(len(docs), width, dtype=torch.long)
    targets = torch.full((len(docs), width), IGNORE, dtype=torch.long)
    doc_ids = torch.full((len(docs), width), -1, dtype=torch.long)
    for row, doc in enumerate(docs):
        inputs[row, :len(doc) - 1], targets[row, :len(doc) - 1] = doc[:-1], doc[1:]
        doc_ids[row, :len(doc) - 1] = row
    return Batch(inputs, targets, doc_ids)


def pack_rows(docs: list[torch.Tensor], length: int) -> list[list[torch.Tensor]]:
    """Documents in rows of at most ``length`` inputs, first fit decreasing: longest first,
    each into the first row with room. Raises ``ValueError`` if a document has more than
    ``length + 1`` characters (``length`` inputs)."""
    rows: list[list[torch.Tensor]] = []
    room: list[int] = []
    for doc in sorted(docs, key=len, reverse=True):  # stable: equal lengths keep their order
        need = len(doc) - 1
        if need > length:
            raise ValueError(f"a document of {len(doc)} characters does not fit rows of {length} inputs")
        row = next((r for r, free in enumerate(room) if free >= need), None)
        if row is None:
            rows.append([])
            room.append(length)
            row = len(rows) - 1
        rows[row].append(doc)
        room[row] -= need
    return rows


def packed_batch(rows: list[list[torch.Tensor]], length: int) -> Batch:
    """Packed rows ``(len(rows), length)``; ``doc_ids`` numbers the documents of each row."""
    inputs = torch.zeros(len(rows), length, dtype=torch.long)
    targets = torch.full((len(rows), length), IGNORE, dtype=torch.long)
    doc_ids = torch.full((len(rows), length), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for i, doc in enumerate(row):
            n = len(doc) - 1
            inputs[r, at:at + n], targets[r, at:at + n], doc_ids[r, at:at + n] = doc[:-1], doc[1:], i
            at += n
    return Batch(inputs, targets, doc_ids)


def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """Bool ``(rows, 1, length, length)``: query i may see key j if j <= i in the same document.

    ``doc_ids (rows, length)``, -1 on padding (a padding query sees nothing).
    """
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.ones(doc_ids.shape[1], doc_ids.shape[1], dtype=torch.bool).tril()
    return (same & causal & (doc_ids[:, :, None] >= 0))[:, None]


def epoch_batches(docs: list[torch.Tensor], config: PackingConfig, epoch: int) -> list[Batch]:
    """The steps of one epoch: the documents shuffled (seeded by run and epoch), batched by
    ``config.layout``; both layouts take the same number of steps."""
    generator = torch.Generator().manual_seed(data_seed(config.seed) * 1000 + epoch)
    order = [docs[i] for i in torch.randperm(len(docs), generator=generator).tolist()]
    groups = [order[i:i + config.batch_docs] for i in range(0, len(order), config.batch_docs)]
    if config.layout == "padded":
        return [padded_batch(g) for g in groups]
    rows = pack_rows(order, config.max_doc - 1)
    rows = [rows[i] for i in torch.randperm(len(rows), generator=generator).tolist()]
    steps = len(groups)
    cuts = [round(i * len(rows) / steps) for i in range(steps + 1)]
    return [packed_batch(rows[a:b], config.max_doc - 1) for a, b in zip(cuts, cuts[1:]) if b > a]


def batch_loss(model: GPT, batch: Batch, forward=None) -> torch.Tensor:
    """Mean cross-entropy (nats) over the batch's real targets; packed rows get their
    document mask, padded ones the causal mask alone (right padding follows every real key)."""
    dev = next(model.parameters()).device
    packed = bool((batch.doc_ids > 0).any())
    mask = document_mask(batch.doc_ids).to(dev) if packed else None
    logits, _ = (forward or model)(batch.inputs.to(dev), mask=mask)
    return F.cross_entropy(logits.float().flatten(0, 1), batch.targets.to(dev).flatten(), ignore_index=IGNORE)


@torch.no_grad()
def heldout_document_loss(model: GPT, docs: list[torch.Tensor], batch_docs: int = 32) -> float:
    """Mean cross-entropy (nats/char) of ``model`` over every target of the held-out documents,
    each read alone (padded batches)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(docs), batch_docs):
        batch = padded_batch(docs[i:i + batch_docs])
        total += float(batch_loss(model, batch)) * batch.tokens
        count += batch.tokens
    return total / count


def train_packing(config: PackingConfig, corpus: CharCorpus, train_docs: list[torch.Tensor],
                  valid_docs: list[torch.Tensor], progress: bool = True,
                  device: str | torch.device | None = None) -> EpochRun:
    """Train (or load) the run of ``config``; cached under ``packing/{layout}-seed{seed}``.

    Returns
    -------
    EpochRun
        ``history`` rows hold ``seconds`` (training), ``tokens`` and ``slots`` of the
        epoch, ``train_loss`` and ``valid_loss`` (nats/char, :func:`heldout_document_loss`).
    """
    spec = lm_spec(config.lm, len(corpus.vocab))
    steps_per_epoch = len(epoch_batches(train_docs, dataclasses.replace(config, layout="padded"), 1))

    def build(dev: torch.device):
        model = build_lm(config.lm, len(corpus.vocab), spec).to(dev)
        return model, decoupled_adamw(model, config.lr, config.lm.weight_decay)

    def train_epoch(epoch: Epoch):
        total, tokens, slots = 0.0, 0, 0
        for i, batch in enumerate(epoch_batches(train_docs, config, epoch.number)):
            step = (epoch.number - 1) * steps_per_epoch + i + 1
            for group in epoch.optimizer.param_groups:
                group["lr"] = config.lr * min(1.0, step / config.warmup)
            with epoch.autocast():
                loss = batch_loss(epoch.model, batch, epoch.forward)
            epoch.step(loss)
            total += float(loss.detach())
            tokens, slots = tokens + batch.tokens, slots + batch.slots
        return {"train_loss": total / steps_per_epoch, "tokens": tokens, "slots": slots}

    settings = {**dataclasses.asdict(config), "spec": spec.to_dict(), "corpus": corpus_digest(train_docs)}
    return train_epochs(f"packing/{config.layout}-seed{config.seed}", settings, build, train_epoch,
                        lambda model: {"valid_loss": heldout_document_loss(model, valid_docs)},
                        config.epochs, seed=config.seed, progress=progress, device=device,
                        clip_norm=config.lm.clip_norm, steps_per_epoch=steps_per_epoch)


def corpus_digest(docs: list[torch.Tensor]) -> str:
    """The documents' digest (their lengths and characters), for the run's key."""
    return tensor_digest([torch.tensor([len(d) for d in docs]), *docs])


__all__ = ["IGNORE", "LAYOUTS", "Batch", "PackingConfig", "batch_loss", "document_mask", "epoch_batches",
           "heldout_document_loss", "pack_rows", "packed_batch", "padded_batch", "split_documents",
           "train_packing"]

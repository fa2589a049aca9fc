"""From token pairs to padded tensor batches for encoder-decoder models.

Source: Bahdanau et al. (2015), "Neural Machine Translation by Jointly Learning to Align
and Translate", section 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attncourse.data.pairs import PairDataset
from attncourse.data.vocab import Vocabulary

Example = tuple[list[int], list[int]]


@dataclass
class Batch:
    """A padded batch: src (batch, src_len) and tgt (batch, tgt_len) int64 ids, their bool
    masks, src_lengths (batch,) and the examples' index (batch,) or None.
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    src_lengths: torch.Tensor
    tgt: torch.Tensor
    tgt_mask: torch.Tensor
    index: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> Batch:
        """A copy with every tensor on ``device``."""
        return Batch(
            src=self.src.to(device),
            src_mask=self.src_mask.to(device),
            src_lengths=self.src_lengths.to(device),
            tgt=self.tgt.to(device),
            tgt_mask=self.tgt_mask.to(device),
            index=None if self.index is None else self.index.to(device),
        )

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def tgt_in(self) -> torch.Tensor:
        """Decoder inputs for teacher forcing, ``<bos>`` y_1..y_T: (batch, tgt_len - 1)."""
        return self.tgt[:, :-1]

    @property
    def tgt_out(self) -> torch.Tensor:
        """What the decoder should predict, y_1..y_T ``<eos>``: (batch, tgt_len - 1)."""
        return self.tgt[:, 1:]

    @property
    def tgt_out_mask(self) -> torch.Tensor:
        """True where :attr:`tgt_out` is a real token: (batch, tgt_len - 1) bool."""
        return self.tgt_mask[:, 1:]

    @property
    def n_tgt_tokens(self) -> int:
        """Number of real tokens in :attr:`tgt_out` (y_1..y_T and ``<eos>`` of every row)."""
        return int(self.tgt_out_mask.sum())


def encode_pairs(dataset: PairDataset, src_vocab: Vocabulary, tgt_vocab: Vocabulary) -> list[Example]:
    """Token pairs as ``(src_ids, tgt_ids)`` lists, with the special tokens added."""
    return [
        (src_vocab.encode(src, add_eos=True), tgt_vocab.encode(tgt, add_bos=True, add_eos=True))
        for src, tgt in dataset.pairs
    ]


def _pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    out = torch.full((len(seqs), int(lengths.max())), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    mask = torch.arange(out.shape[1]) < lengths[:, None]
    return out, mask, lengths


def collate(examples: list[Example], pad_id: int = 0, index: list[int] | None = None) -> Batch:
    """Pad a list of encoded examples into one :class:`Batch`.

    Shapes: examples list of (src_ids, tgt_ids). Raises ValueError if ``examples`` is
    empty, a sequence is empty, or ``index`` has a different length.
    """
    if not examples:
        raise ValueError("cannot collate an empty list of examples")
    if any(not s or not t for s, t in examples):
        raise ValueError("every example needs a non-empty source and target (encode with encode_pairs)")
    if index is not None and len(index) != len(examples):
        raise ValueError(f"index has {len(index)} entries for {len(examples)} examples")
    src, src_mask, src_lengths = _pad([s for s, _ in examples], pad_id)
    tgt, tgt_mask, _ = _pad([t for _, t in examples], pad_id)
    return Batch(
        src=src,
        src_mask=src_mask,
        src_lengths=src_lengths,
        tgt=tgt,
        tgt_mask=tgt_mask,
        index=None if index is None else torch.tensor(index, dtype=torch.long),
    )


def make_batches(
    dataset: PairDataset,
    src_vocab: Vocabulary,
    tgt_vocab: Vocabulary,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    bucket: bool = True,
) -> list[Batch]:
    """Encode, group and pad a whole dataset; every example lands in exactly one batch.

    Raises ValueError if ``batch_size < 1`` or the dataset is empty.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if len(dataset) == 0:
        raise ValueError(f"dataset {dataset.name!r} is empty")
    examples = encode_pairs(dataset, src_vocab, tgt_vocab)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(examples)) if shuffle else np.arange(len(examples))
    groups: list[np.ndarray] = []
    if bucket:
        src_len = dataset.src_lengths()
        tgt_len = dataset.tgt_lengths()
        chunk = 50 * batch_size
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            part = part[np.lexsort((tgt_len[part], src_len[part]))]  # by source length, then target length
            groups += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
        if shuffle:
            groups = [groups[i] for i in rng.permutation(len(groups))]
    else:
        groups = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    pad_id = src_vocab.pad_id
    return [collate([examples[i] for i in g], pad_id=pad_id, index=g.tolist()) for g in groups]


def build_vocabs(dataset: PairDataset, min_freq: int = 1) -> tuple[Vocabulary, Vocabulary]:
    """``(src_vocab, tgt_vocab)`` of a (training) dataset."""
    return (
        Vocabulary.build((s for s, _ in dataset.pairs), min_freq=min_freq),
        Vocabulary.build((t for _, t in dataset.pairs), min_freq=min_freq),
    )


def pad_to_buckets(batches: list[Batch], n_buckets: int, batch_size: int) -> list[Batch]:
    """The same batches, padded to a few fixed shapes: at most ``n_buckets`` distinct
    shapes in all.

    Raises ValueError if ``n_buckets < 1``, ``batches`` is empty, or a batch holds more
    than ``batch_size`` rows.
    """
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be at least 1, got {n_buckets}")
    if not batches:
        raise ValueError("no batches to pad")
    largest = max(len(b) for b in batches)
    if largest > batch_size:
        raise ValueError(f"a batch holds {largest} rows, more than batch_size {batch_size}")
    order = sorted(range(len(batches)), key=lambda i: (batches[i].src.shape[1], batches[i].tgt.shape[1]))
    bucket_of = [0] * len(batches)
    for rank, i in enumerate(order):
        bucket_of[i] = rank * n_buckets // len(batches)
    shape: dict[int, tuple[int, int]] = {}
    for i, b in enumerate(batches):
        s, t = shape.get(bucket_of[i], (0, 0))
        shape[bucket_of[i]] = (max(s, b.src.shape[1]), max(t, b.tgt.shape[1]))
    return [_pad_batch(b, *shape[bucket_of[i]], batch_size) for i, b in enumerate(batches)]


def _pad_batch(batch: Batch, src_len: int, tgt_len: int, rows: int) -> Batch:
    def grow(t: torch.Tensor, length: int, fill: int | bool) -> torch.Tensor:
        out = torch.full((rows, length), fill, dtype=t.dtype)
        out[: t.shape[0], : t.shape[1]] = t
        return out

    n, fill = len(batch), rows - len(batch)
    pad = Vocabulary.pad_id
    src, src_mask = grow(batch.src, src_len, pad), grow(batch.src_mask, src_len, False)
    tgt, tgt_mask = grow(batch.tgt, tgt_len, pad), grow(batch.tgt_mask, tgt_len, False)
    src[n:], src_mask[n:] = src[0], src_mask[0]
    tgt[n:, 0], tgt_mask[n:, 0] = Vocabulary.bos_id, True
    lengths = torch.cat([batch.src_lengths, batch.src_lengths[:1].expand(fill)])
    index = None if batch.index is None else torch.cat([batch.index, torch.full((fill,), -1, dtype=torch.long)])
    return Batch(src=src, src_mask=src_mask, src_lengths=lengths, tgt=tgt, tgt_mask=tgt_mask, index=index)

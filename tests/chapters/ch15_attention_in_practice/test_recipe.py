"""Chapter 15's packing recipe and memory probe, against hand-built cases and references."""

import dataclasses

import pytest
import torch

from attncourse.chapters.ch15_attention_in_practice.memory import peak_bytes
from attncourse.chapters.ch15_attention_in_practice.recipe import (
    IGNORE,
    PackingConfig,
    batch_loss,
    document_mask,
    epoch_batches,
    heldout_document_loss,
    pack_rows,
    packed_batch,
    padded_batch,
    split_documents,
)
from attncourse.data.text import char_corpus
from attncourse.recipes.lm import build_lm

TEXT = "\n\n".join(f"paragraph {i}: " + "the cat sat on the mat. " * (1 + i % 7) for i in range(40))


def _docs(lengths):
    return [torch.arange(n) % 11 for n in lengths]


def test_split_documents_cuts_paragraphs_and_holds_out_every_tenth():
    corpus = char_corpus(TEXT, valid_fraction=0.1)
    train, valid = split_documents(TEXT, corpus, max_doc=50)
    assert len(train) == 36 and len(valid) == 4 and max(len(d) for d in train + valid) == 50
    assert corpus.decode(valid[0].tolist()) == TEXT.split("\n\n")[9][:50]


def test_padded_and_packed_batches_hold_the_same_targets():
    docs = _docs([5, 3, 7, 2])
    padded = padded_batch(docs)
    assert padded.inputs.shape == (4, 6) and padded.tokens == 4 + 2 + 6 + 1 and padded.slots == 24
    assert padded.targets[1].tolist() == [1, 2, IGNORE, IGNORE, IGNORE, IGNORE]
    rows = pack_rows(docs, 7)           # first fit decreasing, in inputs: 6 + 1, then 4 + 2
    assert [[len(d) for d in row] for row in rows] == [[7, 2], [5, 3]]
    packed = packed_batch(rows, 7)
    assert packed.tokens == padded.tokens and packed.doc_ids[1].tolist() == [0, 0, 0, 0, 1, 1, -1]
    assert packed.targets[1].tolist() == [1, 2, 3, 4, 1, 2, IGNORE]   # no target across documents
    with pytest.raises(ValueError, match="does not fit rows of 3 inputs"):
        pack_rows(_docs([5]), 3)


def test_document_mask_is_causal_within_documents_and_padding_sees_nothing():
    ids = torch.tensor([[0, 0, 1, 1, 1, -1]])
    want = torch.zeros(6, 6, dtype=torch.bool)
    for i in range(6):
        for j in range(i + 1):
            want[i, j] = ids[0, i] == ids[0, j] and ids[0, i] >= 0
    assert torch.equal(document_mask(ids)[0, 0], want)


def test_both_layouts_take_the_same_steps_and_targets_each_epoch():
    docs = _docs([3 + (7 * i) % 40 for i in range(50)])
    config = PackingConfig(max_doc=48, batch_docs=8)
    padded = epoch_batches(docs, dataclasses.replace(config, layout="padded"), 1)
    packed = epoch_batches(docs, config, 1)
    assert len(padded) == len(packed) == 7
    assert sum(b.tokens for b in padded) == sum(b.tokens for b in packed) == sum(len(d) - 1 for d in docs)
    assert sum(b.slots for b in packed) < sum(b.slots for b in padded)
    assert epoch_batches(docs, config, 2)[0].inputs.tolist() != packed[0].inputs.tolist()
    with pytest.raises(ValueError, match="layout must be one of"):
        PackingConfig(layout="sorted")


def test_a_packed_rows_loss_equals_each_document_alone_with_rope():
    torch.manual_seed(0)
    model = build_lm(PackingConfig(max_doc=32).lm, 11).double().eval()
    docs = _docs([9, 6, 12])
    packed = packed_batch(pack_rows(docs, 31), 31)
    with torch.no_grad():
        together = batch_loss(model, packed)
        alone = heldout_document_loss(model, docs)
    # the loss is taken in float32 (as in training): equal to its rounding
    assert abs(float(together) - alone) < 1e-6 * alone


def test_peak_bytes_follows_allocations_and_frees():
    def allocate():
        a = torch.empty(2**20, dtype=torch.uint8)
        b = torch.empty(2**21, dtype=torch.uint8)
        del a
        c = torch.empty(2**20, dtype=torch.uint8)
        return b, c
    assert peak_bytes(allocate) == 3 * 2**20
    assert peak_bytes(lambda: None) == 0

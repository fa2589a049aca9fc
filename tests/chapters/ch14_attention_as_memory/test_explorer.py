"""Chapter 14's explorer of a memory written and overwritten: its reads, its counts, its
book rendering and its errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attncourse.chapters.ch14_attention_as_memory.explorer import MemoryWriteExplorer
from attncourse.functional.memory_recall import key_codebook


def test_the_reads_are_the_written_out_memories():
    explorer = MemoryWriteExplorer(writes=[(0, 1), (1, 2), (0, 3)], n_keys=3, d_k=4, n_values=4,
                                   orthogonal=False, seed=3)
    keys = key_codebook(3, 4, False, generator=torch.Generator().manual_seed(3)).numpy()
    values = F.one_hot(torch.tensor([1, 2, 3]), 4).double().numpy()
    delta, linear = np.zeros((4, 4)), np.zeros((4, 4))
    for t, key in enumerate([0, 1, 0]):
        k = keys[key]
        delta = delta + np.outer(k, values[t] - k @ delta)
        linear = linear + np.outer(k, values[t])
        np.testing.assert_allclose(explorer.reads["delta rule"][t], keys @ delta, atol=1e-12)
        np.testing.assert_allclose(explorer.reads["linear attention"][t], keys @ linear, atol=1e-12)


def test_orthogonal_keys_the_delta_rule_replaces_linear_attention_adds():
    explorer = MemoryWriteExplorer()
    counts = []
    for t in range(1, explorer.t.max + 1):
        explorer.t.value = t
        counts.append((explorer.shown["delta rule recalled"], explorer.shown["linear attention recalled"]))
        assert explorer.shown["delta rule recalled"] == len(explorer.shown["stored"])
    assert [c[1] for c in counts] == [1, 2, 3, 4, 5, 6, 5, 4, 3, 3]
    assert explorer.previous.disabled is False and explorer.next.disabled is True


def test_the_book_rendering_has_every_write(monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_STATIC_EXPLORERS", "1")
    explorer = MemoryWriteExplorer(writes=[(0, 0), (0, 1)], n_keys=2, d_k=2, n_values=2)
    page = explorer.to_html()
    assert page.count("data:image/png;base64,") >= 2 and "Write 2 of 2" in page


def test_bad_writes_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        MemoryWriteExplorer(writes=[])
    with pytest.raises(ValueError, match="out of range"):
        MemoryWriteExplorer(writes=[(9, 0)])

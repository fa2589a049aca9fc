"""The paged-cache explorer: its numbers follow the recorded pool, and the book gets every step."""

import pytest
import torch

from attncourse.chapters.ch10_serving_attention.explorer import PagedCacheExplorer
from attncourse.decode.paged import BlockPool, Served, serve_greedy
from attncourse.nn.gpt import GPT
from attncourse.runtime import BOOK_ENV


def _served():
    torch.manual_seed(0)
    model = GPT(20, d_model=16, num_heads=2, num_layers=1, d_ff=32)
    pool = BlockPool.for_model(model, 16, 4)
    return serve_greedy(model, [torch.arange(4, 10)] * 2, [3, 5], pool, share_prefix=True)


def test_explorer_counts_blocks_sharing_and_waste(monkeypatch):
    monkeypatch.delenv(BOOK_ENV, raising=False)
    explorer = PagedCacheExplorer(_served(), 4, ["a", "b"])
    assert explorer.step.max == 4
    # after the 6-token prompt: two blocks, both shared, 2 empty slots in the second
    assert explorer.shown["used"] == 2 and explorer.shown["shared"] == 2 and explorer.shown["wasted"] == 2
    explorer.step.value = 1   # 7 tokens each: the half block copied for the first sample
    assert explorer.shown["used"] == 3 and explorer.shown["shared"] == 1 and explorer.shown["wasted"] == 2
    assert "3 blocks (1 shared): 14 tokens in the requests, 10 stored" in explorer.caption.value
    explorer.step.value = 4   # the first request is gone
    assert explorer.shown["tables"][0] == [] and explorer.next.disabled


def test_book_rendering_holds_every_step():
    explorer = PagedCacheExplorer(_served(), 4)
    assert len(explorer.book_states()) == 5
    assert 'class="attncourse-explorer' in explorer.to_html()


def test_an_empty_run_is_refused():
    with pytest.raises(ValueError, match="no recorded step"):
        PagedCacheExplorer(Served([], []), 4)

"""Tests of attncourse.data.toy_tasks: copy, reverse and sort pairs, split by source."""

from __future__ import annotations

from collections import Counter

import pytest

from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import PairDataset, Splits
from attncourse.data.toy_tasks import (
    SYMBOLS,
    TOY_KINDS,
    draw_sequences,
    toy_symbols,
    toy_target,
    toy_task,
)


def all_sources(splits: Splits) -> list[tuple[str, ...]]:
    return [src for part in (splits.train, splits.valid, splits.test) for src, _ in part]


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_splits_have_the_asked_sizes_names_and_level(kind):
    splits = toy_task(kind, n_train=300, n_valid=40, n_test=50, seed=1)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (300, 40, 50)
    for part, split in ((splits.train, "train"), (splits.valid, "valid"), (splits.test, "test")):
        assert isinstance(part, PairDataset)
        assert part.name == f"{kind}-{split}" and part.level == "word"


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_splits_are_disjoint_by_source(kind):
    splits = toy_task(kind, n_train=500, n_valid=100, n_test=100, max_len=4, seed=0)
    train = {s for s, _ in splits.train}
    valid = {s for s, _ in splits.valid}
    test = {s for s, _ in splits.test}
    assert len(train) == 500 and len(valid) == 100 and len(test) == 100  # no repeats within a split
    assert not train & valid and not train & test and not valid & test


def test_targets_match_python_reference():
    for kind, rule in (("copy", lambda s: list(s)), ("reverse", lambda s: list(reversed(s))),
                       ("sort", lambda s: sorted(s, key=int))):
        splits = toy_task(kind, n_train=200, n_valid=20, n_test=20, seed=3)
        for part in (splits.train, splits.valid, splits.test):
            for src, tgt in part:
                assert list(tgt) == rule(src)


def test_sort_uses_symbol_order_digits_before_letters():
    assert toy_target("sort", ("b", "9", "a", "0", "b")) == ("0", "9", "a", "b", "b")
    splits = toy_task("sort", n_train=100, n_valid=10, n_test=10, vocab_size=16, seed=0)
    for src, tgt in splits.train:
        assert Counter(tgt) == Counter(src)
        assert [SYMBOLS.index(t) for t in tgt] == sorted(SYMBOLS.index(t) for t in src)


def test_deterministic_given_seed_and_different_across_seeds():
    a = toy_task("reverse", n_train=100, n_valid=10, n_test=10, seed=5)
    b = toy_task("reverse", n_train=100, n_valid=10, n_test=10, seed=5)
    c = toy_task("reverse", n_train=100, n_valid=10, n_test=10, seed=6)
    assert a == b
    assert a.train.pairs != c.train.pairs


@pytest.mark.parametrize("vocab_size, expected", [(2, {"0", "1"}), (10, set("0123456789")),
                                                  (12, set("0123456789ab"))])
def test_tokens_come_from_the_first_vocab_size_symbols(vocab_size, expected):
    splits = toy_task("copy", n_train=400, n_valid=10, n_test=10, vocab_size=vocab_size, max_len=12, seed=0)
    used = {t for src in all_sources(splits) for t in src}
    assert used == expected


def test_lengths_lie_in_range_and_are_spread_evenly():
    splits = toy_task("copy", n_train=3000, n_valid=0, n_test=0, min_len=3, max_len=8, seed=0)
    lengths = Counter(len(s) for s, _ in splits.train)
    assert set(lengths) == set(range(3, 9))
    assert max(lengths.values()) < 1.3 * min(lengths.values())


def test_short_lengths_run_out_and_the_others_share_their_draws():
    # Only 10 sequences of length 1 and 100 of length 2 exist; all of them get drawn.
    seqs = draw_sequences(500, vocab_size=10, min_len=1, max_len=3, seed=0)
    lengths = Counter(len(s) for s in seqs)
    assert lengths[1] == 10 and lengths[2] == 100 and lengths[3] == 390
    assert len(set(seqs)) == 500


def test_can_draw_every_sequence_that_exists():
    seqs = draw_sequences(2 + 4 + 8, vocab_size=2, min_len=1, max_len=3, seed=0)
    assert len(set(seqs)) == 14


def test_first_draws_do_not_depend_on_count():
    assert draw_sequences(50, seed=2) == draw_sequences(80, seed=2)[:50]


def test_long_sequences_are_sampled_without_repeats():
    seqs = draw_sequences(2000, vocab_size=10, min_len=6, max_len=6, seed=0)  # 10^6 > enumeration threshold
    assert len(set(seqs)) == 2000 and all(len(s) == 6 for s in seqs)


def test_pairs_feed_the_batching_pipeline():
    splits = toy_task("reverse", n_train=64, n_valid=8, n_test=8, seed=0)
    src_vocab, tgt_vocab = build_vocabs(splits.train)
    assert set(src_vocab.tokens[4:]) == set("0123456789")
    batches = make_batches(splits.train, src_vocab, tgt_vocab, 16, shuffle=True)
    assert sum(len(b) for b in batches) == 64


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "rotate"}, "kind"),
        ({"kind": "copy", "n_train": -1}, "n_train"),
        ({"kind": "copy", "vocab_size": 1}, "vocab_size"),
        ({"kind": "copy", "vocab_size": 37}, "vocab_size"),
        ({"kind": "copy", "min_len": 0}, "min_len"),
        ({"kind": "copy", "min_len": 5, "max_len": 4}, "min_len"),
        ({"kind": "copy", "n_train": 10, "n_valid": 0, "n_test": 0, "vocab_size": 2, "max_len": 2}, "distinct"),
    ],
)
def test_bad_arguments_raise_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        toy_task(**kwargs)


def test_toy_symbols_and_target_errors():
    assert toy_symbols(3) == ("0", "1", "2")
    with pytest.raises(ValueError, match="kind"):
        toy_target("shuffle", ("1",))
    with pytest.raises(ValueError, match="outside"):
        toy_target("sort", ("1", "A"))

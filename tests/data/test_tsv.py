"""Property-based tests of the TSV reader (attncourse.data.pairs.read_tsv / load_tsv).

Whatever the bytes of a file, the reader either loads pairs or raises its own
TSVError naming the line; never another exception, never a pair it should not hold.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attncourse.data.pairs import PairDataset, TSVError, load_tsv, read_tsv, tokenize

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = st.one_of(st.none(), st.integers(min_value=1, max_value=6))


def read(data: bytes, **kwargs):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pairs.tsv"
        path.write_bytes(data)
        return read_tsv(path, **kwargs)


def check_outcome(data: bytes, level: str, max_src: int | None, max_tgt: int | None, skip_long: bool):
    """Load ``data``; assert the result is pairs within the limits or a TSVError with a line number."""
    n_lines = data.count(b"\n") + 1
    try:
        dataset, skipped = read(data, level=level, max_src_tokens=max_src, max_tgt_tokens=max_tgt,
                                skip_long=skip_long)
    except TSVError as err:
        message = str(err)
        assert "\n" not in message
        if err.lineno is None:
            assert "no source<TAB>target pairs found" in message
        else:
            assert 1 <= err.lineno <= n_lines
            assert re.search(rf"pairs\.tsv, line {err.lineno}: ", message)
        return None
    assert isinstance(dataset, PairDataset) and len(dataset) >= 1 and dataset.level == level
    for src, tgt in dataset:
        assert src and tgt
        assert max_src is None or len(src) <= max_src
        assert max_tgt is None or len(tgt) <= max_tgt
        assert not any("\t" in t or "\r" in t or "\n" in t for t in src + tgt)
    assert all(1 <= n <= n_lines for n in skipped) and skipped == sorted(set(skipped))
    assert skip_long or not skipped
    return dataset


@SETTINGS
@given(data=st.binary(max_size=300), level=st.sampled_from(["word", "char"]), max_src=LIMITS, max_tgt=LIMITS,
       skip_long=st.booleans())
def test_any_bytes_load_or_raise_tsv_error(data, level, max_src, max_tgt, skip_long):
    check_outcome(data, level, max_src, max_tgt, skip_long)


SIDE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@SETTINGS
@given(lines=st.lists(st.tuples(SIDE, SIDE, st.sampled_from(["\t", "\t\t", " ", "\t \t"])), max_size=8),
       ending=st.sampled_from(["\n", "\r\n", "\r"]), level=st.sampled_from(["word", "char"]),
       max_src=LIMITS, max_tgt=LIMITS, skip_long=st.booleans())
def test_any_tsv_lines_load_or_raise_tsv_error(lines, ending, level, max_src, max_tgt, skip_long):
    text = ending.join(src + sep + tgt for src, sep, tgt in lines) + ending
    check_outcome(text.encode("utf-8"), level, max_src, max_tgt, skip_long)


WORD = st.text(st.sampled_from("abcxyzé0-"), min_size=1, max_size=5)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.lists(WORD, min_size=1, max_size=4), st.lists(WORD, min_size=1, max_size=4)),
                      min_size=1, max_size=10),
       limit=st.integers(min_value=1, max_value=4))
def test_well_formed_lines_load_exactly_and_long_ones_are_counted(pairs, limit):
    text = "".join(" ".join(src) + "\t" + " ".join(tgt) + "\n" for src, tgt in pairs)
    expected = [(tuple(s), tuple(t)) for s, t in pairs]
    assert list(read(text.encode(), level="word")[0]) == expected
    fits = [i for i, (s, t) in enumerate(expected) if len(s) <= limit and len(t) <= limit]
    try:
        dataset, skipped = read(text.encode(), max_src_tokens=limit, max_tgt_tokens=limit, skip_long=True)
    except TSVError as err:
        assert not fits and "left out for their length" in str(err)
        return
    assert list(dataset) == [expected[i] for i in fits]
    assert skipped == [i + 1 for i in range(len(expected)) if i not in fits]
    with tempfile.TemporaryDirectory() as tmp:  # without skip_long the first long line is named
        path = Path(tmp) / "pairs.tsv"
        path.write_text(text, encoding="utf-8")
        if skipped:
            with pytest.raises(TSVError, match=rf"line {skipped[0]}: the (source|target) has \d+ word tokens, "
                                               rf"more than the limit of {limit}"):
                read_tsv(path, max_src_tokens=limit, max_tgt_tokens=limit)
        else:
            assert list(load_tsv(path)) == expected


def test_tokens_match_the_tokenizer():
    dataset, _ = read(b"  un deux \tone two\n", level="char")
    assert dataset[0] == (tuple(tokenize("un deux", "char")), tuple(tokenize("one two", "char")))

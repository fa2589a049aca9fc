"""Tests for the sequence-to-sequence data layer: vocabularies, TSV files, tasks, batches."""

from __future__ import annotations

import datetime as dt
import json
import random
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from num2words import num2words

from attncourse.data.batching import (
    Batch,
    build_vocabs,
    collate,
    encode_pairs,
    make_batches,
)
from attncourse.data.dates import (
    END,
    EXCLUDED,
    FORMATS,
    LOCALES,
    START,
    date_pattern,
    date_source,
    date_task,
    date_variants,
    find_ambiguous,
)
from attncourse.data.numbers import (
    draw_numbers,
    number_pairs,
    number_task,
    number_text,
    number_words,
    split_german,
)
from attncourse.data.pairs import PairDataset, detokenize, load_tsv, save_tsv, tokenize
from attncourse.data.vocab import Vocabulary


@pytest.fixture(scope="module")
def fr_task():
    return number_task("fr", n_train=3000, n_valid=500, n_test=1000, seed=0)


@pytest.fixture(scope="module")
def dates():
    return date_task(n_train=3000, n_valid=300, n_test=600, seed=0)


# --- vocabulary -------------------------------------------------------------


def test_vocab_specials_and_order():
    v = Vocabulary.build([["b", "a", "b"], ["c", "a", "b"]])
    assert v.tokens == ["<pad>", "<bos>", "<eos>", "<unk>", "b", "a", "c"]  # by count, then string
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.PAD, v.BOS, v.EOS, v.UNK] == v.tokens[:4]
    assert len(v) == 7
    assert Vocabulary.build([["c", "a", "b"], ["b", "a", "b"]]) == v  # order of examples does not matter
    assert Vocabulary.build([["a", "b", "b"]], min_freq=2).tokens[4:] == ["b"]


def test_vocab_round_trip_and_unknown():
    tokens = ["soixante", "et", "onze"]
    v = Vocabulary.build([tokens])
    ids = v.encode(tokens, add_bos=True, add_eos=True)
    assert ids[0] == v.bos_id and ids[-1] == v.eos_id
    assert v.decode(ids) == tokens
    assert v.encode(["onze", "zzz"]) == [v.id_of("onze"), v.unk_id]
    assert v.decode(v.encode(["onze", "zzz"])) == ["onze", "<unk>"]
    # decode reads model output: stops at the first <eos>, drops <pad>/<bos>
    assert v.decode([v.bos_id, v.id_of("et"), v.pad_id, v.eos_id, v.id_of("onze")]) == ["et"]
    assert v.decode(torch.tensor([v.id_of("et"), v.eos_id, v.pad_id])) == ["et"]
    assert v.decode([v.eos_id, v.pad_id], strip_special=False) == ["<eos>", "<pad>"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        v.decode([len(v)])
    with pytest.raises(TypeError, match="tokenize"):
        v.encode("onze")


def test_vocab_to_dict_from_dict():
    v = Vocabulary.build([list("hello world"), ["é", "ß"]])
    data = json.loads(json.dumps(v.to_dict()))
    w = Vocabulary.from_dict(data)
    assert w == v and w.tokens == v.tokens
    assert v != Vocabulary.build([["x"]])
    with pytest.raises(ValueError, match="start with"):
        Vocabulary.from_dict({"tokens": ["a", "b"]})
    with pytest.raises(ValueError, match="twice"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="special"):
        Vocabulary(["<eos>"])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=8), min_size=1, max_size=5))
def test_vocab_round_trip_property(token_lists):
    v = Vocabulary.build(token_lists)
    assert len(v) == 4 + len({t for tokens in token_lists for t in tokens} - set(v.tokens[:4]))
    for tokens in token_lists:
        assert v.encode(tokens) == [v.tokens.index(t) for t in tokens]
        if not {"<pad>", "<bos>", "<eos>"} & set(tokens):  # those are dropped by decode, by design
            assert v.decode(v.encode(tokens, add_bos=True, add_eos=True)) == tokens


# --- pairs and TSV files ----------------------------------------------------


def test_tokenize_detokenize():
    assert tokenize("soixante  et onze", "word") == ["soixante", "et", "onze"]
    assert tokenize("30 déc.", "char") == ["3", "0", " ", "d", "é", "c", "."]
    assert detokenize(["a", "b"], "word") == "a b"
    assert detokenize(list("2024-12-30"), "char") == "2024-12-30"
    with pytest.raises(ValueError, match="level"):
        tokenize("x", "sentence")


def test_load_tsv_good_file(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes("\ufeffseventy-one\tsoixante et onze\r\n\n  two \t deux\n\n".encode())
    data = load_tsv(path)
    assert data.name == "pairs" and data.level == "word" and len(data) == 2
    assert data[0] == (("seventy-one",), ("soixante", "et", "onze"))
    assert data[1] == (("two",), ("deux",))
    assert list(data.src_lengths()) == [1, 1]
    chars = load_tsv(path, level="char", name="mine")
    assert chars.name == "mine" and chars[1] == (("t", "w", "o"), ("d", "e", "u", "x"))


def test_save_tsv_round_trip(tmp_path, fr_task):
    for data in (fr_task.valid, PairDataset(((tuple("30 déc."), tuple("2024-12-30")),), level="char")):
        path = tmp_path / "out.tsv"
        save_tsv(data, path)
        back = load_tsv(path, level=data.level, name=data.name)
        assert back == data
    with pytest.raises(ValueError, match="read back"):
        save_tsv(PairDataset(((("a b",), ("c",)),)), tmp_path / "bad.tsv")


@pytest.mark.parametrize(
    "line, problem",
    [
        ("seventy-one soixante et onze", "no TAB"),
        ("one\ttwo\tthree", "2 TABs"),
        ("\tdeux", "empty source"),
        ("two\t   ", "empty target"),
    ],
)
def test_load_tsv_malformed_line_names_file_and_line(tmp_path, line, problem):
    path = tmp_path / "pairs.tsv"
    path.write_text("one\tun\n\ntwo\tdeux\n" + line + "\nthree\ttrois\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_tsv(path)
    message = str(info.value)
    assert "pairs.tsv" in message and "line 4" in message and problem in message


def test_load_tsv_missing_file_and_bad_utf8(tmp_path):
    missing = tmp_path / "nope.tsv"
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        load_tsv(missing)
    bad = tmp_path / "latin1.tsv"
    bad.write_bytes(b"one\tun\n" + "déc\tdec\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.tsv, line 2: not valid UTF-8"):
        load_tsv(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no source"):
        load_tsv(empty)


# --- number words -----------------------------------------------------------


def test_number_words_examples():
    assert number_words(71, "en") == ["seventy", "one"]
    assert number_words(71, "fr") == ["soixante", "et", "onze"]
    assert number_words(80, "fr") == ["quatre", "vingts"]
    assert number_words(24, "de") == ["vier", "und", "zwanzig"]
    assert number_words(423, "de") == ["vier", "hundert", "drei", "und", "zwanzig"]
    assert number_words(1_234_567, "en") == (
        "one million two hundred and thirty four thousand five hundred and sixty seven".split()
    )
    assert number_words(2_000_001, "de") == ["zwei", "Millionen", "eins"]
    assert number_words(0, "fr") == ["zéro"]
    with pytest.raises(ValueError, match="non-negative"):
        number_words(-1, "fr")
    with pytest.raises(ValueError, match="lang"):
        number_words(1, "it")
    with pytest.raises(TypeError):
        number_words(1.5, "fr")


def test_number_text_equals_num2words():
    rng = random.Random(0)
    numbers = [0, 1, 80, 100, 1000, 1001, 1005, 80_000, 101_000, 1_000_001, 80_000_000, 200_000_100, 10**9]
    numbers += [rng.randrange(10 ** rng.randint(1, 12)) for _ in range(600)]
    for lang in ("en", "fr", "de"):
        for n in numbers:
            assert number_text(n, lang) == num2words(n, lang=lang), (n, lang)


def test_german_split_rejoins_for_all_numbers_below_1e5():
    for n in range(10**5):
        for word in number_text(n, "de").split():
            assert "".join(split_german(word)) == word, n
    assert number_words(99_999, "de") == split_german("neunundneunzigtausendneunhundertneunundneunzig")


def test_german_split_rejects_unknown_parts():
    assert split_german("Milliarden") == ["Milliarden"]
    assert split_german("einhunderteins") == ["ein", "hundert", "eins"]
    with pytest.raises(ValueError, match="'xzig'.*position 4"):
        split_german("vierxzig")


def test_draw_numbers():
    xs = draw_numbers(500, max_value=10**9, seed=3)
    assert len(set(xs)) == 500 and all(0 <= x < 10**9 for x in xs)
    digits = np.bincount([len(str(x)) for x in xs])
    assert digits[1] == 10  # only ten one-digit numbers exist
    assert digits[4:].min() > 30  # the other sizes share the draws about equally
    assert sorted(draw_numbers(100, max_value=100)) == list(range(100))
    assert draw_numbers(20, seed=3) == xs[:20]
    with pytest.raises(ValueError, match="only 10"):
        draw_numbers(11, min_value=5, max_value=15)


def test_number_splits_disjoint_and_deterministic(fr_task):
    numbers = {}
    for split in ("train", "valid", "test"):
        data = getattr(fr_task, split)
        assert data.level == "word" and data.name == f"numbers-en-fr-{split}"
        numbers[split] = {" ".join(src) for src, _ in data}
        assert len(numbers[split]) == len(data)  # no repeats
    assert len(fr_task.train) == 3000 and len(fr_task.valid) == 500 and len(fr_task.test) == 1000
    assert not numbers["train"] & numbers["test"]
    assert not numbers["train"] & numbers["valid"]
    assert not numbers["valid"] & numbers["test"]
    again = number_task("fr", n_train=3000, n_valid=500, n_test=1000, seed=0)
    assert again == fr_task
    other = number_task("fr", n_train=3000, n_valid=500, n_test=1000, seed=1)
    assert other.train != fr_task.train and other.test != fr_task.test
    # The scarce short numbers are shared between the splits, not all taken by the test set.
    one_word = [sum(len(src) == 1 for src, _ in split.pairs) for split in (fr_task.train, fr_task.test)]
    assert one_word[0] >= 10 and one_word[1] >= 1


def test_number_source_lengths_cover_short_and_long(fr_task):
    lengths = np.concatenate([d.src_lengths() for d in (fr_task.train, fr_task.valid, fr_task.test)])
    assert lengths.min() == 1
    # English words for 9-digit numbers are at most 17 tokens ("nine hundred and ninety nine million ...")
    assert lengths.max() == 17
    assert (lengths <= 5).mean() > 0.1 and (lengths >= 13).mean() > 0.2


def test_number_pairs_order():
    data = number_pairs("de", [24, 71])
    assert data.pairs == (
        (("twenty", "four"), ("vier", "und", "zwanzig")),
        (("seventy", "one"), ("ein", "und", "siebzig")),
    )


# --- dates ------------------------------------------------------------------

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def test_dates_targets_valid_and_match_source(dates):
    assert len(LOCALES) >= 10
    languages_seen = set()
    for data in (dates.train, dates.valid, dates.test):
        assert data.level == "char"
        for src, tgt in data.pairs[:60]:
            target = "".join(tgt)
            assert ISO.match(target)
            date = dt.date.fromisoformat(target)
            assert START <= date <= END
            source = "".join(src)
            matches = [(loc, fmt) for loc, fmt, text in date_variants(date) if text == source]
            assert matches, (source, target)  # the source is that very date, formatted
            languages = {loc.split("_")[0] for loc, _ in matches}
            if len(languages) == 1:
                languages_seen |= languages
    assert len(languages_seen) >= 10


def test_dates_splits_disjoint_and_deterministic(dates):
    targets = {split: {"".join(t) for _, t in getattr(dates, split)} for split in ("train", "valid", "test")}
    assert len(targets["train"]) == 3000  # each date once
    assert not targets["train"] & targets["test"]
    assert not targets["train"] & targets["valid"]
    assert not targets["valid"] & targets["test"]
    assert date_task(n_train=3000, n_valid=300, n_test=600, seed=0) == dates
    assert date_task(n_train=3000, n_valid=300, n_test=600, seed=1).train != dates.train


def test_dates_four_digit_year_is_calendar_year(dates):
    for data in (dates.train, dates.valid, dates.test):
        for src, tgt in data:
            source, target = "".join(src), "".join(tgt)
            years = re.findall(r"\d{4}", source)
            if years:
                assert years == [target[:4]], (source, target)
            else:  # two-digit year, unambiguous in 1950-2049
                assert target[2:4] in source


WEEK_YEAR_TRAPS = [dt.date(2024, 12, 30), dt.date(2024, 12, 31), dt.date(2021, 1, 1), dt.date(2027, 1, 2)]


@pytest.mark.parametrize("date", WEEK_YEAR_TRAPS)
def test_week_year_trap(date):
    # These dates belong to an ISO week of the neighbouring year: 'YYYY' would print the wrong year.
    assert date.isocalendar()[0] != date.year
    for loc in LOCALES:
        for fmt in FORMATS:
            source = date_source(date, loc, fmt)
            for year in re.findall(r"\d{4}", source):
                assert year == str(date.year), (loc, fmt, source)
    assert "Y" not in "".join(date_pattern(loc, fmt) for loc in LOCALES for fmt in FORMATS)
    with pytest.raises(ValueError, match="week-based year"):
        date_source(date, "en_GB", "d MMM YYYY")


def test_date_patterns_need_all_fields():
    with pytest.raises(ValueError, match="no day"):
        date_source(dt.date(2024, 1, 1), "fr_FR", "MMMM y")
    assert date_source(dt.date(2024, 1, 5), "es_ES", "d 'de' MMMM 'de' y") == "5 de enero de 2024"
    with pytest.raises(ValueError, match="unknown locale"):
        date_source(dt.date(2024, 1, 1), "xx_YY", "short")


def test_dates_unambiguous():
    assert find_ambiguous() == []
    assert ("en_US", "short") in EXCLUDED
    clashes = find_ambiguous(["en_US", "es_ES"], ["short"])
    assert clashes and any(text == "1/2/00" for text, _ in clashes)
    with pytest.raises(ValueError, match="two different dates"):
        date_task(n_train=10, n_valid=1, n_test=1, locales=["en_US", "it_IT"], formats=["short"])


# --- batches ----------------------------------------------------------------


@pytest.fixture(scope="module")
def vocabs(fr_task):
    return build_vocabs(fr_task.train)


def test_collate_shapes_and_masks():
    examples = [([5, 6, 2], [1, 7, 2]), ([5, 2], [1, 7, 8, 9, 2])]
    b = collate(examples, index=[10, 11])
    assert b.src.shape == (2, 3) and b.tgt.shape == (2, 5)
    assert b.src.dtype == torch.long and b.src_mask.dtype == torch.bool
    assert b.src.tolist() == [[5, 6, 2], [5, 2, 0]]
    assert b.src_mask.tolist() == [[True, True, True], [True, True, False]]
    assert b.src_lengths.tolist() == [3, 2]
    assert b.tgt.tolist() == [[1, 7, 2, 0, 0], [1, 7, 8, 9, 2]]
    assert b.tgt_in.tolist() == [[1, 7, 2, 0], [1, 7, 8, 9]]
    assert b.tgt_out.tolist() == [[7, 2, 0, 0], [7, 8, 9, 2]]
    assert b.n_tgt_tokens == 2 + 4
    assert b.index.tolist() == [10, 11] and len(b) == 2
    moved = b.to("cpu")
    assert isinstance(moved, Batch) and torch.equal(moved.tgt, b.tgt)
    with pytest.raises(ValueError, match="empty"):
        collate([])


def test_make_batches_invariants(fr_task, vocabs):
    src_vocab, tgt_vocab = vocabs
    data = fr_task.valid
    batches = make_batches(data, src_vocab, tgt_vocab, batch_size=32, shuffle=True, seed=0)
    seen = torch.cat([b.index for b in batches]).tolist()
    assert sorted(seen) == list(range(len(data)))  # every example exactly once
    encoded = encode_pairs(data, src_vocab, tgt_vocab)
    for b in batches:
        assert b.src.shape[0] == b.tgt.shape[0] <= 32
        assert torch.equal(b.src_mask, b.src != src_vocab.pad_id)
        assert torch.equal(b.tgt_mask, b.tgt != tgt_vocab.pad_id)
        assert torch.equal(b.src_lengths, b.src_mask.sum(1))
        assert (b.tgt[:, 0] == tgt_vocab.bos_id).all()
        rows = torch.arange(len(b))
        assert (b.src[rows, b.src_lengths - 1] == src_vocab.eos_id).all()  # source ends with <eos>
        assert (b.src == src_vocab.bos_id).sum() == 0  # and has no <bos>
        tgt_lengths = b.tgt_mask.sum(1)
        assert (b.tgt[rows, tgt_lengths - 1] == tgt_vocab.eos_id).all()
        assert b.n_tgt_tokens == int((tgt_lengths - 1).sum())
        for row, i in enumerate(b.index.tolist()):
            src_ids, tgt_ids = encoded[i]
            assert b.src[row, : len(src_ids)].tolist() == src_ids
            assert b.tgt[row, : len(tgt_ids)].tolist() == tgt_ids
            assert src_vocab.decode(src_ids) == list(data[i][0])
    again = make_batches(data, src_vocab, tgt_vocab, batch_size=32, shuffle=True, seed=0)
    assert [b.index.tolist() for b in again] == [b.index.tolist() for b in batches]
    other = make_batches(data, src_vocab, tgt_vocab, batch_size=32, shuffle=True, seed=1)
    assert [b.index.tolist() for b in other] != [b.index.tolist() for b in batches]
    plain = make_batches(data, src_vocab, tgt_vocab, batch_size=32, shuffle=False, bucket=False)
    assert torch.cat([b.index for b in plain]).tolist() == list(range(len(data)))


def test_bucketing_reduces_padding(fr_task, vocabs):
    def padding(batches):
        return sum(int((~b.src_mask).sum() + (~b.tgt_mask).sum()) for b in batches)

    args = (fr_task.train, *vocabs)
    bucketed = padding(make_batches(*args, batch_size=64, shuffle=True, seed=0, bucket=True))
    unbucketed = padding(make_batches(*args, batch_size=64, shuffle=True, seed=0, bucket=False))
    assert bucketed < 0.25 * unbucketed


def test_build_vocabs_from_training_data(fr_task, vocabs):
    src_vocab, tgt_vocab = vocabs
    assert "seventy" in src_vocab and "soixante" in tgt_vocab
    assert "soixante" not in src_vocab
    assert src_vocab == build_vocabs(fr_task.train)[0]
    with pytest.raises(ValueError, match="batch_size"):
        make_batches(fr_task.valid, src_vocab, tgt_vocab, batch_size=0, shuffle=False)

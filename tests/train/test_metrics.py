"""Tests for the evaluation metrics, against hand-computed values and sacrebleu itself."""

from __future__ import annotations

import math

import pytest
import sacrebleu

from attncourse.train.metrics import (
    bucket_labels,
    corpus_bleu,
    corpus_chrf,
    evaluate_by_bucket,
    exact_match,
    format_table,
    length_buckets,
    token_accuracy,
)

REFS = ["soixante et onze", "vingt et un", "cent", "quatre vingt dix sept"]
HYPS = ["soixante et onze", "vingt deux", "cent", "quatre vingt dix huit"]


def test_exact_match_hand_computed():
    assert exact_match(HYPS, REFS) == 0.5
    assert exact_match(REFS, REFS) == 1.0
    assert exact_match(["a  b"], [["a", "b"]]) == 1.0  # tokens, not spacing, are compared
    assert exact_match([[5, 6]], [[5, 7]]) == 0.0


def test_token_accuracy_hand_computed():
    # per reference: 3/3, 1/3 ("vingt"), 1/1, 3/4 ("quatre vingt dix"); pooled: 8 / 11
    assert token_accuracy(HYPS, REFS) == pytest.approx(8 / 11)
    assert token_accuracy(["a b c d"], ["a b"]) == 1.0  # extra tokens are not penalised
    assert token_accuracy(["a"], ["a b"]) == 0.5  # missing tokens are wrong


def test_bleu_and_chrf_against_sacrebleu():
    assert corpus_bleu(REFS, REFS) == pytest.approx(100.0)
    assert corpus_chrf(REFS, REFS) == pytest.approx(100.0)
    expected = sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="none").score
    assert corpus_bleu(HYPS, REFS) == pytest.approx(expected)
    assert corpus_chrf(HYPS, REFS) == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    tokenised = [h.split() for h in HYPS]
    assert corpus_bleu(tokenised, REFS) == pytest.approx(expected)
    assert 0 < corpus_bleu(HYPS, REFS) < 100
    # Short outputs only: standard BLEU is 0 for want of 4-grams; effective order scores them.
    short = ["soixante et onze", "cent"]
    assert sacrebleu.corpus_bleu(short, [short], tokenize="none").score == 0.0
    assert corpus_bleu(short, short) == pytest.approx(100.0)
    assert corpus_bleu(short, short, effective_order=False) == 0.0
    # "none" keeps each token whole; 13a splits a dash after a digit, so a date becomes 5 tokens.
    hyp, ref = ["2024-01-05"], ["2024-01-06"]
    assert corpus_bleu(hyp, ref) == 0.0
    assert corpus_bleu(hyp, ref, tokenize="13a") > 0


def test_metrics_reject_mismatched_or_empty_lists():
    for fn in (exact_match, token_accuracy, corpus_bleu, corpus_chrf):
        with pytest.raises(ValueError, match="2 hypotheses but 1"):
            fn(["a", "b"], ["a"])
        with pytest.raises(ValueError, match="at least one"):
            fn([], [])


def test_length_buckets():
    assert bucket_labels([1, 5, 10]) == ["1-4", "5-9", "10+"]
    assert bucket_labels([1, 2, 4]) == ["1", "2-3", "4+"]
    assert length_buckets([1, 4, 5, 9, 10, 30], [1, 5, 10]) == ["1-4", "1-4", "5-9", "5-9", "10+", "10+"]
    with pytest.raises(ValueError, match="below the first edge"):
        length_buckets([0], [1, 5])
    with pytest.raises(ValueError, match="increasing"):
        length_buckets([3], [5, 1])


def test_evaluate_by_bucket():
    src_lengths = [2, 3, 1, 7]
    result = evaluate_by_bucket(src_lengths, HYPS, REFS, edges=[1, 3, 6, 20])
    assert list(result) == ["overall", "1-2", "3-5", "6-19", "20+"]
    assert result["overall"]["count"] == 4
    assert result["overall"]["exact_match"] == 0.5
    assert result["1-2"]["count"] == 2 and result["1-2"]["exact_match"] == 1.0
    assert result["1-2"]["bleu"] == pytest.approx(100.0)
    assert result["3-5"]["token_accuracy"] == pytest.approx(1 / 3)
    assert result["6-19"]["bleu"] == pytest.approx(corpus_bleu([HYPS[3]], [REFS[3]]))
    assert result["20+"]["count"] == 0 and math.isnan(result["20+"]["bleu"])
    table = format_table(result)
    assert "overall" in table and "20+" in table
    with pytest.raises(ValueError, match="3 source lengths for 4"):
        evaluate_by_bucket(src_lengths[:3], HYPS, REFS, edges=[1])

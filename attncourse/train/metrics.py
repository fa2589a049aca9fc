"""Exact match, token accuracy, BLEU and chrF, overall and by source length.

A hypothesis or reference is a string of space-separated tokens or a sequence of
tokens. ``exact_match`` and ``token_accuracy`` are in [0, 1]; ``bleu`` and ``chrf``
on sacrebleu's 0-100 scale. BLEU counts the tokens as given (``tokenize="none"``);
pass ``tokenize="13a"`` for raw text.

References
----------
Post (2018), "A Call for Clarity in Reporting BLEU Scores" (sacrebleu).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sacrebleu

Text = str | Sequence[Any]


def _tokens(x: Text) -> list:
    return x.split() if isinstance(x, str) else list(x)


def _text(x: Text) -> str:
    return " ".join(x.split()) if isinstance(x, str) else " ".join(str(t) for t in x)


def _validate_pair(hyps: Sequence[Text], refs: Sequence[Text]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"got {len(hyps)} hypotheses but {len(refs)} references; they must pair up")
    if len(hyps) == 0:
        raise ValueError("no hypotheses: give at least one (hypothesis, reference) pair")


def exact_match(hyps: Sequence[Text], refs: Sequence[Text]) -> float:
    """Fraction of outputs whose token sequence equals the reference exactly.

    Parameters
    ----------
    hyps, refs : sequences of str or token sequences, same length N
        Strings are compared token by token (so spacing does not matter).

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        If the two lists differ in length or are empty.
    """
    _validate_pair(hyps, refs)
    return sum(_tokens(h) == _tokens(r) for h, r in zip(hyps, refs)) / len(refs)


def token_accuracy(hyps: Sequence[Text], refs: Sequence[Text]) -> float:
    """Position-wise token accuracy over the reference length, pooled over the corpus.

    accuracy = sum_n #{t < |ref_n| : hyp_n[t] == ref_n[t]} / sum_n |ref_n|.
    Positions past the end of a short hypothesis count as wrong. Extra tokens
    after the reference's end are *not* penalised (exact match catches them);
    a dropped or inserted token shifts every later position, so this metric is
    harsh on such errors, which is what teacher-forced training accuracy
    measures too.

    Parameters
    ----------
    hyps, refs : sequences of str or token sequences, same length N

    Returns
    -------
    float in [0, 1]
        1.0 if every reference is empty (nothing to get wrong).

    Raises
    ------
    ValueError
        If the two lists differ in length or are empty.
    """
    _validate_pair(hyps, refs)
    correct = total = 0
    for h, r in zip(hyps, refs):
        h, r = _tokens(h), _tokens(r)
        correct += sum(a == b for a, b in zip(h, r))
        total += len(r)
    return correct / total if total else 1.0


def corpus_bleu(
    hyps: Sequence[Text], refs: Sequence[Text], tokenize: str = "none", effective_order: bool = True
) -> float:
    """Corpus BLEU (0-100) with sacrebleu, one reference per sentence.

    Parameters
    ----------
    hyps, refs : sequences of str or token sequences, same length N
    tokenize : str
        sacrebleu tokeniser; ``"none"`` (default) counts the space-separated
        tokens as given, ``"13a"`` is sacrebleu's default for raw text.
    effective_order : bool
        If no hypothesis in the whole corpus has n tokens, average only the
        n-gram orders below n instead of scoring 0. Whenever some hypothesis
        has 4 or more tokens this changes nothing, so on ordinary corpora the
        score is sacrebleu's standard corpus BLEU; it matters for a length
        bucket of one- to three-word outputs (short numbers), which standard
        BLEU scores 0 for want of 4-grams even when every output is right.

    Returns
    -------
    float in [0, 100]
        BLEU with up to 4-grams, sacrebleu's default ``exp`` smoothing and the
        brevity penalty (Papineni et al. 2002). Identical corpora score 100.
        n-gram counts are pooled over the corpus, so short sentences still count.

    Raises
    ------
    ValueError
        If the two lists differ in length or are empty.
    """
    _validate_pair(hyps, refs)
    bleu = sacrebleu.BLEU(tokenize=tokenize, effective_order=effective_order)
    return float(bleu.corpus_score([_text(h) for h in hyps], [[_text(r) for r in refs]]).score)


def corpus_chrf(hyps: Sequence[Text], refs: Sequence[Text]) -> float:
    """Corpus chrF (0-100) with sacrebleu: character 6-gram F-score with beta = 2.

    Whitespace is ignored, so for character-level tasks it does not matter
    whether the characters are space-separated tokens or one string.

    Parameters
    ----------
    hyps, refs : sequences of str or token sequences, same length N

    Returns
    -------
    float in [0, 100]

    Raises
    ------
    ValueError
        If the two lists differ in length or are empty.

    References
    ----------
    Popović (2015).
    """
    _validate_pair(hyps, refs)
    return float(sacrebleu.corpus_chrf([_text(h) for h in hyps], [[_text(r) for r in refs]]).score)


def _validate_edges(edges: Sequence[int]) -> list[int]:
    edges = [int(e) for e in edges]
    if not edges or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be a non-empty, strictly increasing list of ints, got {edges}")
    return edges


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """Labels of the buckets that :func:`length_buckets` uses, in order.

    ``edges=[1, 5, 10]`` gives ``["1-4", "5-9", "10+"]``: bucket k holds
    lengths in [edges[k], edges[k+1]), the last is open-ended. A bucket of one
    length is labelled by that length alone (``"7"``).
    """
    edges = _validate_edges(edges)
    labels = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in zip(edges, edges[1:])]
    return labels + [f"{edges[-1]}+"]


def length_buckets(lengths: Sequence[int], edges: Sequence[int]) -> list[str]:
    """The bucket label of every length.

    Parameters
    ----------
    lengths : sequence of int, length N
        E.g. source lengths in tokens.
    edges : strictly increasing ints
        Left edges of the buckets; see :func:`bucket_labels`.

    Returns
    -------
    list of str, length N

    Raises
    ------
    ValueError
        If ``edges`` is not strictly increasing or a length lies below ``edges[0]``.
    """
    edges = _validate_edges(edges)
    labels = bucket_labels(edges)
    lengths = np.asarray(lengths, dtype=int).reshape(-1)
    if lengths.size and lengths.min() < edges[0]:
        raise ValueError(f"length {int(lengths.min())} lies below the first edge {edges[0]}")
    index = np.searchsorted(edges, lengths, side="right") - 1
    return [labels[i] for i in index]


METRICS: tuple[str, ...] = ("count", "exact_match", "token_accuracy", "bleu", "chrf")


def _scores(hyps: list, refs: list, tokenize: str) -> dict[str, float]:
    if not hyps:
        return {"count": 0, "exact_match": math.nan, "token_accuracy": math.nan, "bleu": math.nan, "chrf": math.nan}
    return {
        "count": len(hyps),
        "exact_match": exact_match(hyps, refs),
        "token_accuracy": token_accuracy(hyps, refs),
        "bleu": corpus_bleu(hyps, refs, tokenize=tokenize),
        "chrf": corpus_chrf(hyps, refs),
    }


def evaluate_by_bucket(
    src_lengths: Sequence[int],
    hyps: Sequence[Text],
    refs: Sequence[Text],
    edges: Sequence[int],
    tokenize: str = "none",
) -> dict[str, dict[str, float]]:
    """All metrics overall and per source-length bucket (Bahdanau et al. 2015, fig. 2).

    Parameters
    ----------
    src_lengths : sequence of int, length N
        Length of each source sentence.
    hyps, refs : sequences of str or token sequences, length N
    edges : strictly increasing ints
        Left edges of the length buckets (see :func:`bucket_labels`).
    tokenize : str
        Passed to :func:`corpus_bleu`.

    Returns
    -------
    dict
        ``{"overall": row, label_1: row, ...}`` with every bucket in order, each
        row ``{"count", "exact_match", "token_accuracy", "bleu", "chrf"}``; an
        empty bucket has count 0 and NaN scores. ``pandas.DataFrame(result).T``
        makes it a table; :func:`format_table` prints one.

    Raises
    ------
    ValueError
        If the three lists differ in length, are empty, or a length lies below ``edges[0]``.
    """
    _validate_pair(hyps, refs)
    if len(src_lengths) != len(hyps):
        raise ValueError(f"got {len(src_lengths)} source lengths for {len(hyps)} hypotheses")
    labels = length_buckets(src_lengths, edges)
    result = {"overall": _scores(list(hyps), list(refs), tokenize)}
    for label in bucket_labels(edges):
        members = [i for i, lab in enumerate(labels) if lab == label]
        result[label] = _scores([hyps[i] for i in members], [refs[i] for i in members], tokenize)
    return result


def format_table(result: dict[str, dict[str, float]]) -> str:
    """A plain-text table of :func:`evaluate_by_bucket`'s result, one row per bucket."""
    header = f"{'bucket':>10} {'count':>6} {'exact':>7} {'tok acc':>7} {'BLEU':>6} {'chrF':>6}"
    lines = [header, "-" * len(header)]
    for label, row in result.items():
        lines.append(
            f"{label:>10} {row['count']:>6d} {row['exact_match']:>7.3f} {row['token_accuracy']:>7.3f} "
            f"{row['bleu']:>6.1f} {row['chrf']:>6.1f}"
        )
    return "\n".join(lines)

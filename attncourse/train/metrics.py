"""Exact match, token accuracy, BLEU and chrF (sacrebleu; Post 2018), by length.

A text is a string of space-separated tokens or a token sequence; every metric raises
``ValueError`` if ``hyps`` and ``refs`` differ in length or are empty.
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
    """Fraction in [0, 1] of hypotheses whose tokens equal their reference's."""
    _validate_pair(hyps, refs)
    return sum(_tokens(h) == _tokens(r) for h, r in zip(hyps, refs)) / len(refs)


def token_accuracy(hyps: Sequence[Text], refs: Sequence[Text]) -> float:
    """Matching positions / reference tokens, in [0, 1]; extra tokens ignored."""
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
    """Corpus BLEU in [0, 100], 4-grams (Papineni et al. 2002, section 2).

    ``effective_order`` skips n-gram orders no hypothesis has (1-3 token outputs).
    """
    _validate_pair(hyps, refs)
    bleu = sacrebleu.BLEU(tokenize=tokenize, effective_order=effective_order)
    return float(bleu.corpus_score([_text(h) for h in hyps], [[_text(r) for r in refs]]).score)


def corpus_chrf(hyps: Sequence[Text], refs: Sequence[Text]) -> float:
    """Corpus chrF in [0, 100]: character 6-gram F-score, beta = 2 (Popović 2015)."""
    _validate_pair(hyps, refs)
    return float(sacrebleu.corpus_chrf([_text(h) for h in hyps], [[_text(r) for r in refs]]).score)


def _validate_edges(edges: Sequence[int]) -> list[int]:
    edges = [int(e) for e in edges]
    if not edges or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be a non-empty, strictly increasing list of ints, got {edges}")
    return edges


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """Bucket labels of left ``edges``: ``[1, 5, 10]`` -> ``1-4``, ``5-9``, ``10+``."""
    edges = _validate_edges(edges)
    labels = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in zip(edges, edges[1:])]
    return labels + [f"{edges[-1]}+"]


def length_buckets(lengths: Sequence[int], edges: Sequence[int]) -> list[str]:
    """Each length's :func:`bucket_labels` label; ``ValueError`` if out of range."""
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
    """``{"overall": row, label: row}``, :data:`METRICS` rows (Bahdanau et al. 2015).

    An empty bucket has count 0 and NaN scores. Raises ``ValueError`` as the metrics.
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

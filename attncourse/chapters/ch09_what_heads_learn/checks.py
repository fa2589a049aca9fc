"""Checks for the exercises of the chapter "What attention heads learn".

Two scores from Olsson et al. (2022, heading "Key Concepts") that are short to write and easy to
get subtly wrong: the prefix-matching score of a head (attention on the token
*after* an earlier occurrence of the query's token, not on the occurrence itself)
and the eigenvalue copying score of an OV circuit (Elhage et al. 2021). When a case
fails, the learner's output is compared with the typical wrong versions so that the
hint names the bug.

References are :func:`attncourse.functional.head_scores.prefix_matching_score` and
:func:`attncourse.functional.head_scores.copying_score`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.checks.guard import allowing
from attncourse.functional.head_scores import copying_score, prefix_matching_score

PREFIX_EXPLAIN = (
    "For each query whose token occurred before, add up the attention on every key (up to the "
    "query) whose previous token is the query's token: the token right AFTER an earlier "
    "occurrence; "
    "then average over those queries only (queries whose token is new are left out)."
)
PREFIX_SAME_TOKEN_HINT = (
    "You measured attention on the earlier occurrence itself. An induction head looks one "
    "position further, at the token that followed it."
)
PREFIX_ALL_QUERIES_HINT = (
    "You averaged over every query, including those whose token never occurred before (they can "
    "have no prefix match). Average over the queries that have at least one match."
)
COPY_EXPLAIN = (
    "Take the eigenvalues of the (vocab x vocab) matrix (np.linalg.eigvals) and return the sum "
    "of their real parts over the sum of their sizes: +1 for a pure copier, -1 for an "
    "anti-copier."
)
COPY_ABS_REAL_HINT = (
    "You divided by the sum of |real parts|: complex eigenvalues count with their full size "
    "(the modulus, np.abs of the complex eigenvalues)."
)
COPY_TRACE_HINT = (
    "You returned the trace (the sum of the eigenvalues) without dividing it by the sum of the "
    "eigenvalues' absolute values, so the score depends on the circuit's scale."
)


def _same_token_variant(weights: np.ndarray, tokens: np.ndarray) -> float:
    n = len(tokens)
    mask = (tokens[:, None] == tokens[None, :]) & np.tri(n, k=-1, dtype=bool)
    has = mask.any(-1)
    return float(((weights * mask).sum(-1)[has]).mean()) if has.any() else 0.0


def _all_queries_variant(weights: np.ndarray, tokens: np.ndarray) -> float:
    w, t = torch.as_tensor(weights), torch.as_tensor(tokens)
    from attncourse.functional.head_scores import prefix_match_mask

    return float((w * prefix_match_mask(t)).sum(-1).mean())


def _diagnose_prefix(got: Any, case: Case) -> str | None:
    w, t = np.asarray(case.args["weights"]), np.asarray(case.args["tokens"])
    variants = [(PREFIX_SAME_TOKEN_HINT, np.asarray(_same_token_variant(w, t))),
                (PREFIX_ALL_QUERIES_HINT, np.asarray(_all_queries_variant(w, t)))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def _causal_weights(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = np.tril(rng.random((n, n)) ** 3)
    return w / w.sum(-1, keepdims=True)


def prefix_matching_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_prefix_matching_score`; with ``seed`` (the grade of
    record's), two more sequences of few distinct tokens (so that some repeat) and weights
    drawn from it."""
    def case(description: str, tokens: list[int], weights: np.ndarray) -> Case:
        t = np.array(tokens)
        expected = float(prefix_matching_score(torch.as_tensor(weights), torch.as_tensor(t)))
        return Case(description=description, args={"weights": weights, "tokens": t}, expected=expected,
                    atol=1e-9, rtol=1e-7, hint=PREFIX_EXPLAIN, diagnose=_diagnose_prefix)

    induction = np.zeros((6, 6))
    induction[:3, 0] = 1.0
    for i in range(3, 6):
        induction[i, i - 2] = 1.0          # token i repeats token i - 3: look at i - 3 + 1
    return [
        case("tokens [7, 8, 7, 8], random causal weights", [7, 8, 7, 8], _causal_weights(4, 0)),
        case("a perfect induction head on [1, 2, 3, 1, 2, 3] (score 1)", [1, 2, 3, 1, 2, 3], induction),
        case("uniform causal weights on [4, 5, 6, 4, 5, 6, 4]", [4, 5, 6, 4, 5, 6, 4],
             np.tril(np.ones((7, 7))) / np.arange(1, 8)[:, None]),
        case("a token repeated three times among others, 8 positions", [2, 9, 2, 5, 2, 9, 1, 5],
             _causal_weights(8, 1)),
    ] + [case(f"drawn when graded: tokens {tokens}, random causal weights", tokens,
              _causal_weights(len(tokens), weights_seed)) for tokens, weights_seed in _drawn_tokens(seed)]


def _drawn_tokens(seed: int | None) -> list[tuple[list[int], int]]:
    """Two ``(tokens, weights_seed)`` drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [([int(t) for t in rng.integers(0, int(rng.integers(2, 5)), size=int(rng.integers(4, 13)))],
             int(rng.integers(10, 2**31))) for _ in range(2)]


@allowing("NumPy operations: comparisons, np.tri or np.tril, sums, any and means.")
def check_prefix_matching_score(fn: Callable[[np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``my_prefix_matching_score(weights, tokens)``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(weights, tokens)``: ``weights (n, n)`` float NumPy array, one head's
        causal attention (rows = queries); ``tokens (n,)`` int array; returns a float: the
        mean, over the queries whose token occurred before, of the attention on the keys
        that follow an earlier occurrence (Olsson et al. 2022, "Key Concepts").

    Returns
    -------
    CheckResult
        With a hint for scoring the occurrence itself, and for averaging over every query.
    """
    return run_cases("check_prefix_matching_score", fn, prefix_matching_cases())


def _diagnose_copy(got: Any, case: Case) -> str | None:
    eig = np.linalg.eigvals(np.asarray(case.args["ov"]))
    variants = [(COPY_ABS_REAL_HINT, np.asarray(eig.real.sum() / np.abs(eig.real).sum())),
                (COPY_TRACE_HINT, np.asarray(eig.real.sum()))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def copying_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_copying_score`; with ``seed`` (the grade of record's),
    two more OV matrices drawn from it."""
    def case(description: str, ov: np.ndarray) -> Case:
        return Case(description=description, args={"ov": ov}, expected=float(copying_score(torch.as_tensor(ov))),
                    atol=1e-9, rtol=1e-7, hint=COPY_EXPLAIN, diagnose=_diagnose_copy)

    rng = np.random.default_rng(3)
    low_rank = rng.normal(size=(6, 2)) @ rng.normal(size=(2, 6)) + 2 * np.eye(6)
    return [
        case("3 x the identity (a pure copier)", 3.0 * np.eye(4)),
        case("diag(2, -1, -1)", np.diag([2.0, -1.0, -1.0])),
        case("a rotation by 60 degrees and a copy", np.array([[0.5, -0.866, 0], [0.866, 0.5, 0], [0, 0, 1.0]])),
        case("2 x identity plus a random rank-2 matrix, 6 x 6", low_rank),
    ] + [case(f"drawn when graded: a random {len(ov)} x {len(ov)} matrix", ov) for ov in _drawn_ov(seed)]


def _drawn_ov(seed: int | None) -> list[np.ndarray]:
    """Two OV matrices, random plus a random multiple of the identity, drawn from the grading seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 9, size=2)
    return [rng.normal(size=(n, n)) + rng.uniform(-2, 2) * np.eye(n) for n in sizes]


@allowing("np.linalg.eigvals, sums and absolute values.")
def check_copying_score(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``copying_score(ov)``.

    Parameters
    ----------
    fn : callable
        Called as ``fn(ov)`` with ``ov (vocab, vocab)`` float NumPy array (an OV circuit);
        returns a float: ``sum(eigenvalues) / sum(|eigenvalues|)`` (Elhage et al. 2021).

    Returns
    -------
    CheckResult
        With a hint for absolute values of real parts only, and for a missing normalisation.
    """
    return run_cases("check_copying_score", fn, copying_cases())

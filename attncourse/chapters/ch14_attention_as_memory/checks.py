"""Checks for the exercises of the chapter "Attention as a memory".

Six pieces of a fixed-size memory, each in NumPy: one step of the delta rule (Schlag et
al. 2021), one step of the gated delta rule (Yang et al. 2025), SSD's decay matrix (Dao &
Gu 2024), the WY factors of one chunk (Yang et al. 2024, section 3), the reads of a memory
written with the delta rule, and the size of a DeltaNet model's cache. When a case fails,
the learner's answer is compared with the typical wrong versions so that the hint names the
bug. Cases with random inputs draw them from ``seed`` (the grading seed in the grade of
record).

References are :mod:`attncourse.functional.delta_rule`,
:func:`attncourse.functional.fast_weights.decay_matrix`,
:func:`attncourse.functional.memory_recall.memory_reads` and
:meth:`attncourse.nn.memory_attention.MemoryAttention.state_numbers`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.functional.delta_rule import (
    delta_rule_chunkwise,
    delta_rule_recurrent,
    wy_representation,
)
from attncourse.functional.fast_weights import decay_matrix, linear_attention_parallel
from attncourse.functional.memory_recall import memory_reads
from attncourse.nn.memory_attention import DeltaNetAttention

REFERENCES = (delta_rule_recurrent, delta_rule_chunkwise, wy_representation, decay_matrix,
              linear_attention_parallel, memory_reads)


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _t(x: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float64))[None, None]


def _recurrent_state(S: np.ndarray, k: np.ndarray, v: np.ndarray, beta: float,
                     a: float | None = None) -> np.ndarray:
    """The package's state after one (gated) delta-rule step from ``S``."""
    decay = None if a is None else _t([a])
    _, state = delta_rule_recurrent(_t(k[None]), _t(k[None]), _t(v[None]), _t([beta]), decay,
                                    initial_state=_t(S))
    return state[0, 0].numpy()


# --------------------------------------------------------------------------- the delta step

DELTA_EXPLAIN = (
    "Read the memory at the key first (the key times the state: a row of d_v numbers), "
    "subtract that read from the new value, and add the difference back at the key, as the outer "
    "product of the key and the difference, scaled by beta."
)
DELTA_SIGN_HINT = (
    "The correction has the wrong sign: the delta rule writes the new value minus what "
    "the memory reads at the key (what is missing), not the two added."
)
DELTA_NO_BETA_HINT = "beta is missing: the difference is written with strength beta, not 1."
DELTA_LINEAR_HINT = (
    "That is linear attention's write, the outer product of the key and the value itself: "
    "the delta rule first subtracts what the memory already holds at the key."
)
DELTA_TRANSPOSED_HINT = (
    "The outer product is the wrong way round: the state is d_k x d_v, so the write is "
    "the key as a column times the difference as a row."
)


def _delta_variants(S, k, v, beta) -> list[tuple[str, np.ndarray]]:
    out = [(DELTA_SIGN_HINT, S + beta * np.outer(k, v + k @ S)),
           (DELTA_NO_BETA_HINT, S + np.outer(k, v - k @ S)),
           (DELTA_LINEAR_HINT, S + beta * np.outer(k, v)),
           (DELTA_LINEAR_HINT, S + np.outer(k, v))]
    if S.shape[0] == S.shape[1]:
        out.append((DELTA_TRANSPOSED_HINT, S + beta * np.outer(v - k @ S, k)))
    return out


def _diagnose_delta(got: Any, case: Case) -> str | None:
    return variant_hint(got, _delta_variants(*case.args.values()), np.asarray(case.expected), case)


def delta_step_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_delta_step`."""
    rng = np.random.default_rng(seed)
    cases = []
    for description, d_k, d_v, beta in (("d_k=4, d_v=3, beta=0.5", 4, 3, 0.5),
                                        ("d_k=d_v=5, beta=1", 5, 5, 1.0),
                                        ("d_k=8, d_v=2, beta=0.25", 8, 2, 0.25),
                                        ("beta=0 leaves S as it is", 3, 3, 0.0)):
        S, k, v = rng.normal(size=(d_k, d_v)), _unit(rng, 1, d_k)[0], rng.normal(size=d_v)
        cases.append(Case(description, {"S": S, "k": k, "v": v, "beta": beta},
                          _recurrent_state(S, k, v, beta), atol=1e-10, rtol=1e-9, hint=DELTA_EXPLAIN,
                          diagnose=_diagnose_delta))
    return cases


def check_delta_step(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, float], Any]) -> CheckResult:
    """Check a learner's ``delta_step(S, k, v, beta)``: ``S + beta k^T (v - k S)``.

    Parameters
    ----------
    fn : callable
        Called with the state ``S (d_k, d_v)``, a unit key ``k (d_k,)``, a value ``v (d_v,)``
        and ``beta`` in [0, 1]; returns the new ``(d_k, d_v)`` state.
    """
    return run_cases("check_delta_step", fn, delta_step_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- the gated step

GATED_EXPLAIN = (
    "Decay the whole state first (multiply it by a), then apply the delta rule to the "
    "decayed state: read it at the key, and write the difference with strength beta. The decay "
    "multiplies what is read back too."
)
GATED_DECAY_WRITE_HINT = (
    "The decay also shrank the new write: a multiplies the old state (and so what the delta rule "
    "reads from it), not beta k^T v."
)
GATED_NO_DECAY_READ_HINT = (
    "The delta rule read the state before the decay: it must correct the decayed state, "
    "a S, so the read is k (a S)."
)


def _diagnose_gated(got: Any, case: Case) -> str | None:
    S, k, v, beta, a = case.args.values()
    variants = [(GATED_DECAY_WRITE_HINT, a * (S + beta * np.outer(k, v - k @ S))),
                (GATED_NO_DECAY_READ_HINT, a * S + beta * np.outer(k, v - k @ S)),
                (DELTA_SIGN_HINT, a * S + beta * np.outer(k, v + a * k @ S))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def gated_step_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_gated_delta_step`."""
    rng = np.random.default_rng(seed + 1)
    cases = []
    for description, d_k, d_v, beta, a in (("d_k=4, d_v=3, beta=0.5, a=0.9", 4, 3, 0.5, 0.9),
                                           ("a=1 is the delta rule (d_k=d_v=4)", 4, 4, 0.75, 1.0),
                                           ("d_k=6, d_v=2, beta=1, a=0.5", 6, 2, 1.0, 0.5),
                                           ("beta=0: only the decay (d_k=3)", 3, 5, 0.0, 0.8)):
        S, k, v = rng.normal(size=(d_k, d_v)), _unit(rng, 1, d_k)[0], rng.normal(size=d_v)
        cases.append(Case(description, {"S": S, "k": k, "v": v, "beta": beta, "a": a},
                          _recurrent_state(S, k, v, beta, a), atol=1e-10, rtol=1e-9, hint=GATED_EXPLAIN,
                          diagnose=_diagnose_gated))
    return cases


def check_gated_delta_step(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's ``gated_delta_step(S, k, v, beta, a)``: ``a (I - beta k^T k) S + beta k^T v``.

    Parameters
    ----------
    fn : callable
        As :func:`check_delta_step`'s, with the decay ``a`` in (0, 1] last.
    """
    return run_cases("check_gated_delta_step", fn, gated_step_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- the decay matrix

DECAY_EXPLAIN = (
    "Entry (t, j) is the product of the decays of the steps after j up to t included: "
    "1 on the diagonal (an empty product) and 0 above it (the future)."
)
DECAY_INCLUSIVE_HINT = (
    "The product includes the decay of step j itself: the write of step j is not "
    "decayed at step j, so the product starts at the step after j, and the diagonal is 1."
)
DECAY_UPPER_HINT = (
    "The matrix is transposed: a query at step t reads the writes of steps up to t, so "
    "the matrix is lower triangular."
)
DECAY_NO_MASK_HINT = "The entries above the diagonal must be 0: a step does not read later writes."


def _diagnose_decay(got: Any, case: Case) -> str | None:
    a = np.asarray(case.args["a"])
    expected = np.asarray(case.expected)
    cum = np.cumsum(np.log(a))
    full = np.exp(cum[:, None] - cum[None, :])
    variants = [(DECAY_INCLUSIVE_HINT, expected * a[None, :]),
                (DECAY_UPPER_HINT, expected.T),
                (DECAY_NO_MASK_HINT, full)]
    return variant_hint(got, variants, expected, case)


def decay_matrix_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_decay_matrix`."""
    rng = np.random.default_rng(seed + 2)
    cases = []
    for description, a in (("5 steps, a in [0.5, 1]", 0.5 + 0.5 * rng.random(5)),
                           ("one step", np.array([0.7])),
                           ("no decay: the causal mask", np.ones(6)),
                           ("12 steps, strong decay", 0.1 + 0.4 * rng.random(12))):
        expected = decay_matrix(torch.as_tensor(a)).numpy()
        cases.append(Case(description, {"a": a}, expected, atol=1e-12, rtol=1e-9, hint=DECAY_EXPLAIN,
                          diagnose=_diagnose_decay))
    return cases


def check_decay_matrix(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``my_decay_matrix(a)``: ``L[t, j] = a_{j+1} ... a_t`` for ``j <= t``, else 0.

    Parameters
    ----------
    fn : callable
        Called with the decays ``a (n,)`` in (0, 1]; returns the ``(n, n)`` matrix.
    """
    return run_cases("check_decay_matrix", fn, decay_matrix_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- the WY factors

WY_EXPLAIN = (
    "Build the C x C matrix A: the identity plus, below the diagonal only, the keys' dot "
    "products scaled row by row by beta (unit lower triangular). Then solve two systems with A: "
    "for W the keys scaled by beta, for U the values scaled by beta, by forward substitution or "
    "np.linalg.solve."
)
WY_FULL_TRIANGLE_HINT = (
    "The system used the diagonal (or the whole) of K K^T: only the strictly lower triangle "
    "couples a position to the earlier ones; the diagonal of A is 1."
)
WY_NO_BETA_HINT = (
    "beta is missing on the right-hand side: both systems solve for the keys and the "
    "values scaled row by row by beta."
)


def _wy_solve(k, v, beta, system) -> tuple[np.ndarray, np.ndarray]:
    return np.linalg.solve(system, beta[:, None] * k), np.linalg.solve(system, beta[:, None] * v)


def _diagnose_wy(got: Any, case: Case) -> str | None:
    k, v, beta = (np.asarray(x) for x in case.args.values())
    eye, gram = np.eye(len(beta)), k @ k.T
    with_diagonal = eye + beta[:, None] * np.tril(gram)
    good = eye + beta[:, None] * np.tril(gram, -1)
    variants = [(WY_FULL_TRIANGLE_HINT, _wy_solve(k, v, beta, with_diagonal)),
                (WY_NO_BETA_HINT, (np.linalg.solve(good, k), np.linalg.solve(good, v)))]
    if not (isinstance(got, tuple) and len(got) == 2):
        return None
    try:  # w and u side by side: one array to compare, whatever d_k and d_v
        joined = np.concatenate([np.asarray(g, dtype=np.float64) for g in got], axis=-1)
    except ValueError:
        return None
    return variant_hint(joined, [(hint, np.concatenate(pair, axis=-1)) for hint, pair in variants],
                        np.concatenate(case.expected, axis=-1), case)


def wy_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_wy_factors`."""
    rng = np.random.default_rng(seed + 3)
    cases = []
    for description, c, d_k, d_v in (("a chunk of 4, d_k=3, d_v=2", 4, 3, 2), ("a chunk of 1", 1, 4, 4),
                                      ("a chunk of 8, d_k=d_v=5", 8, 5, 5)):
        k, v, beta = _unit(rng, c, d_k), rng.normal(size=(c, d_v)), rng.random(c)
        w, u = wy_representation(_t(k), _t(v), _t(beta[None])[0])
        cases.append(Case(description, {"k": k, "v": v, "beta": beta}, (w[0, 0].numpy(), u[0, 0].numpy()),
                          atol=1e-10, rtol=1e-8, hint=WY_EXPLAIN, output_names=("w", "u"),
                          diagnose=_diagnose_wy))
    return cases


def check_wy_factors(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``wy_factors(k, v, beta)`` for one chunk without decay.

    Parameters
    ----------
    fn : callable
        Called with ``k (C, d_k)`` (unit rows), ``v (C, d_v)`` and ``beta (C,)``; returns
        ``(w, u)`` of shapes ``(C, d_k)`` and ``(C, d_v)`` such that the chunk adds
        ``k^T (u - w S_0)`` to the state ``S_0`` it starts from (Yang et al. 2024, section 3).
    """
    return run_cases("check_wy_factors", fn, wy_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- recall of a memory

RECALL_EXPLAIN = (
    "Start from a zero state (d_k x d_v), write every pair in order with the delta rule "
    "and beta = 1, then read every query from the final state with one matrix product."
)
RECALL_LINEAR_HINT = (
    "That is linear attention's memory (a sum of outer products): write with the delta rule, "
    "which replaces the value already stored at a key."
)
RECALL_REVERSED_HINT = "The pairs were written in the wrong order: the last pair written must win."


def _diagnose_recall(got: Any, case: Case) -> str | None:
    keys, values, queries = case.args.values()
    variants = [(RECALL_LINEAR_HINT, queries @ (keys.T @ values)),
                (RECALL_REVERSED_HINT, _delta_reads(keys[::-1].copy(), values[::-1].copy(), queries))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def _delta_reads(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    return memory_reads("delta", *(torch.as_tensor(x)[None] for x in (keys, values, queries)))[0].numpy()


def delta_recall_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_delta_recall`."""
    rng = np.random.default_rng(seed + 4)
    cases = []
    for description, n, d_k, d_v, again in (("4 pairs, d_k=6", 4, 6, 3, False),
                                            ("a key written twice", 5, 4, 4, True),
                                            ("12 pairs, more than d_k=5", 12, 5, 2, False)):
        keys, values = _unit(rng, n, d_k), rng.normal(size=(n, d_v))
        if again:
            keys[-1] = keys[0]
        queries = np.concatenate([keys[rng.permutation(n)], _unit(rng, 2, d_k)])
        cases.append(Case(description, {"keys": keys, "values": values, "queries": queries},
                          _delta_reads(keys, values, queries), atol=1e-10, rtol=1e-8, hint=RECALL_EXPLAIN,
                          diagnose=_diagnose_recall))
    return cases


def check_delta_recall(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``delta_recall(keys, values, queries)``: write, then read.

    Parameters
    ----------
    fn : callable
        Called with ``keys (n, d_k)`` (unit rows), ``values (n, d_v)`` and ``queries (m, d_k)``;
        returns the ``(m, d_v)`` reads of a memory written with the delta rule, beta = 1.
    """
    return run_cases("check_delta_recall", fn, delta_recall_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- the cache's size

CACHE_EXPLAIN = (
    "Each layer keeps, per head, one d_head x d_head state, and the convolution's last "
    "conv_size - 1 inputs of its queries, keys and values (3 num_heads d_head numbers each; "
    "none when conv_size is 0, no convolution, or 1); times the layers and the bytes per "
    "number. No term grows with the tokens."
)
CACHE_NO_CONV_HINT = "The convolution's tail is missing: conv_size - 1 earlier inputs of q, k and v."
CACHE_CONV_SIZE_HINT = (
    "The tail holds conv_size - 1 inputs, not conv_size: the newest one is the current token's."
)


def _state_bytes(num_layers: int, num_heads: int, d_head: int, conv_size: int, bytes_per_number: int) -> int:
    module = DeltaNetAttention(num_heads * d_head, num_heads, conv_size=conv_size)
    return num_layers * module.state_numbers() * bytes_per_number


def _diagnose_cache(got: Any, case: Case) -> str | None:
    layers, heads, d_head, conv, size = case.args.values()
    tail = 3 * heads * d_head * layers * size
    expected = float(case.expected)
    variants = [(CACHE_NO_CONV_HINT, np.asarray(expected - max(conv - 1, 0) * tail)),
                (CACHE_CONV_SIZE_HINT, np.asarray(expected + tail))]
    return variant_hint(got, variants, np.asarray(expected), case) if conv > 1 else None


def state_bytes_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_state_bytes`; with ``seed`` (the grade of record's),
    two more drawn from it."""
    def case(description: str, layers: int, heads: int, d_head: int, conv: int, size: int) -> Case:
        return Case(description, {"num_layers": layers, "num_heads": heads, "d_head": d_head,
                                  "conv_size": conv, "bytes_per_number": size},
                    np.asarray(float(_state_bytes(layers, heads, d_head, conv, size))), atol=0, rtol=0,
                    hint=CACHE_EXPLAIN, diagnose=_diagnose_cache)

    return [case("the chapter's size: 2 layers, 1 head of 32, no convolution (conv_size = 0: no inputs "
                 "kept), float32", 2, 1, 32, 0, 4),
            case("4 layers, 4 heads of 16, conv 4, float32", 4, 4, 16, 4, 4),
            case("48 layers, 16 heads of 128, conv 4, bfloat16", 48, 16, 128, 4, 2),
            case("1 layer, conv 1 (no tail)", 1, 2, 8, 1, 4)] + [
        case(f"drawn when graded: {layers} layers, {heads} heads of {d_head}, conv {conv}, {size} bytes",
             layers, heads, d_head, conv, size) for layers, heads, d_head, conv, size in _drawn_shapes(seed)]


def _drawn_shapes(seed: int | None) -> list[tuple[int, int, int, int, int]]:
    """Two ``(layers, heads, d_head, conv_size, bytes_per_number)`` drawn from the grading seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 33)), int(rng.integers(1, 17)), int(rng.choice([8, 16, 32, 64, 128])),
             int(rng.integers(0, 5)), int(rng.choice([1, 2, 4]))) for _ in range(2)]


def check_state_bytes(fn: Callable[[int, int, int, int, int], Any]) -> CheckResult:
    """Check a learner's ``state_bytes(num_layers, num_heads, d_head, conv_size, bytes_per_number)``.

    Parameters
    ----------
    fn : callable
        Returns the bytes of a DeltaNet model's cache for one sequence, whatever its length
        (as :meth:`~attncourse.nn.memory_attention.MemoryAttention.state_numbers` counts it).
    """
    return run_cases("check_state_bytes", fn, state_bytes_cases(),
                     references=(DeltaNetAttention.state_numbers,))


__all__ = ["check_decay_matrix", "check_delta_recall", "check_delta_step", "check_gated_delta_step",
           "check_state_bytes", "check_wy_factors", "decay_matrix_cases", "delta_recall_cases",
           "delta_step_cases", "gated_step_cases", "state_bytes_cases", "wy_cases"]

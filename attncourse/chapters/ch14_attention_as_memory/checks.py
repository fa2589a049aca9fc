"""Checks for the exercises of the chapter "Attention as a memory".

Six pieces of a fixed-size memory, each in NumPy: the delta rule's erasures over a chunk as
one product of matrices (Schlag et al. 2021; Yang et al. 2024), what the gated delta rule
(Yang et al. 2025) leaves of a write after a span of later steps, SSD's decay matrix (Dao &
Gu 2024), the WY factors of one chunk (Yang et al. 2024, section 3), the reads of a linear
memory through the squared feature map, and the size of a DeltaNet model's cache. When a case
fails, the learner's answer is compared with the typical wrong versions so that the hint
names the bug. Cases with random inputs draw them from ``seed`` (the grading seed in the
grade of record).

References are :mod:`attncourse.functional.delta_rule`,
:func:`attncourse.functional.fast_weights.decay_matrix`,
:func:`attncourse.functional.fast_weights.linear_attention_parallel`,
:func:`attncourse.functional.memory_recall.memory_reads` and
:meth:`attncourse.nn.memory_attention.MemoryAttention.state_numbers`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.checks.guard import allowing
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


def _span_state(k: np.ndarray, beta: np.ndarray, a: np.ndarray | None, start: np.ndarray) -> np.ndarray:
    """The state the package's recurrent (gated) delta rule leaves after writing zero values at
    the keys ``k (C, d_k)`` from ``start (d_k, d_v)``: the steps' erasures (and decays) alone."""
    values = np.zeros((len(k), start.shape[1]))
    decay = None if a is None else _t(a)
    _, state = delta_rule_recurrent(_t(k), _t(k), _t(values), _t(beta), decay, initial_state=_t(start))
    return state[0, 0].numpy()


# --------------------------------------------------------------------------- the chunk's transition

TRANSITION_EXPLAIN = (
    "With zero values a step of the delta rule only erases: it multiplies the state by the identity "
    "minus beta_t times the outer product of the key with itself (d_k x d_k). Start from the identity "
    "and multiply by each step's factor in turn, the newest factor on the left, since it acts last."
)
TRANSITION_ORDER_HINT = (
    "The factors are multiplied in the wrong order: the first write's factor acts first, so it "
    "stands on the right, and the newest write's factor on the left."
)
TRANSITION_NO_BETA_HINT = ("beta is missing: each factor is the identity minus beta_t times the key's outer "
                           "product with itself, not minus the outer product alone.")
TRANSITION_SUM_HINT = (
    "That is the identity minus the sum of the beta_t k_t^T k_t: only the first-order part of the product. "
    "The factors multiply, and with keys that are not orthogonal their products matter."
)
TRANSITION_SIGN_HINT = "Each factor erases: the identity minus beta_t k_t^T k_t, not plus."


def _transition_variants(k: np.ndarray, beta: np.ndarray) -> list[tuple[str, np.ndarray]]:
    eye = np.eye(k.shape[1])
    reversed_, no_beta, plus = eye, eye, eye
    for kt, bt in zip(k, beta):
        reversed_ = reversed_ @ (eye - bt * np.outer(kt, kt))
        no_beta = (eye - np.outer(kt, kt)) @ no_beta
        plus = (eye + bt * np.outer(kt, kt)) @ plus
    summed = eye - np.einsum("c,ci,cj->ij", beta, k, k)
    return [(TRANSITION_ORDER_HINT, reversed_), (TRANSITION_NO_BETA_HINT, no_beta),
            (TRANSITION_SUM_HINT, summed), (TRANSITION_SIGN_HINT, plus)]


def _diagnose_transition(got: Any, case: Case) -> str | None:
    k, beta = (np.asarray(x) for x in case.args.values())
    return variant_hint(got, _transition_variants(k, beta), np.asarray(case.expected), case)


def transition_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_delta_transition`."""
    rng = np.random.default_rng(seed)
    cases = []
    for description, c, d_k, low in (("a chunk of 4, d_k=3, beta in [0.2, 1]", 4, 3, 0.2),
                                      ("a chunk of 1, d_k=4", 1, 4, 0.2),
                                      ("a chunk of 6, d_k=5, beta in [0.5, 1]", 6, 5, 0.5),
                                      ("a chunk of 8 longer than d_k=2", 8, 2, 0.2)):
        k, beta = _unit(rng, c, d_k), low + (1 - low) * rng.random(c)
        cases.append(Case(description, {"k": k, "beta": beta}, _span_state(k, beta, None, np.eye(d_k)),
                          atol=1e-10, rtol=1e-9, hint=TRANSITION_EXPLAIN, diagnose=_diagnose_transition))
    k = _unit(rng, 3, 4)
    cases.append(Case("beta = 1, one key written three times among two others (d_k=4)",
                      {"k": np.stack([k[0], k[1], k[0], k[2], k[0]]), "beta": np.ones(5)},
                      _span_state(np.stack([k[0], k[1], k[0], k[2], k[0]]), np.ones(5), None, np.eye(4)),
                      atol=1e-10, rtol=1e-9, hint=TRANSITION_EXPLAIN, diagnose=_diagnose_transition))
    return cases


@allowing("NumPy operations: np.eye, np.outer, matrix products (@) and a loop over the writes.")
def check_delta_transition(fn: Callable[[np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``delta_transition(k, beta)``: the product of a chunk's erasures.

    Parameters
    ----------
    fn : callable
        Called with the keys ``k (C, d_k)`` (unit rows) and ``beta (C,)`` in [0, 1]; returns
        the ``(d_k, d_k)`` matrix ``(I - beta_C k_C^T k_C) ... (I - beta_1 k_1^T k_1)`` that the
        delta rule applies to the state a chunk starts from.
    """
    return run_cases("check_delta_transition", fn, transition_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- what a span leaves

RETENTION_EXPLAIN = (
    "Write j leaves beta_j k_j^T v_j in the state; each later step t multiplies the state by G_t, "
    "a_t times the identity minus beta_t k_t^T k_t. So at the end the read at k_j of what write j left is scaled by "
    "r_j = k_j G_C ... G_{j+1} k_j^T: the later steps only (none for the last write, r = 1), each "
    "with its decay and its erasure."
)
RETENTION_DECAY_ONLY_HINT = (
    "Only the decays are there (the decay matrix's last row): the later writes also erase along "
    "their keys, and a later key that overlaps k_j erases part of write j."
)
RETENTION_ERASE_ONLY_HINT = "The decays are missing: each later step also multiplies the state by a_t."
RETENTION_INCLUSIVE_HINT = (
    "The product includes step j's own decay and erasure: they act on the state before write j "
    "is added, so only the steps after j count (the last write keeps r = 1)."
)
RETENTION_NO_BETA_HINT = "beta is missing from the erasures: each later step erases beta_t k_t^T k_t, not k_t^T k_t."


def _retention(k: np.ndarray, beta: np.ndarray, a: np.ndarray, first: int = 1, erase: bool = True,
               decay: bool = True, strength: bool = True) -> np.ndarray:
    """A wrong version: the factors of steps ``j + first`` on, with or without each part."""
    eye = np.eye(k.shape[1])
    out = []
    for j in range(len(k)):
        span = eye
        for t in range(j + first, len(k)):
            step = eye - (beta[t] if strength else 1.0) * np.outer(k[t], k[t]) if erase else eye
            span = (a[t] if decay else 1.0) * step @ span
        out.append(k[j] @ span @ k[j])
    return np.array(out)


def _diagnose_retention(got: Any, case: Case) -> str | None:
    k, beta, a = (np.asarray(x) for x in case.args.values())
    variants = [(RETENTION_DECAY_ONLY_HINT, _retention(k, beta, a, erase=False)),
                (RETENTION_ERASE_ONLY_HINT, _retention(k, beta, a, decay=False)),
                (RETENTION_INCLUSIVE_HINT, _retention(k, beta, a, first=0)),
                (RETENTION_NO_BETA_HINT, _retention(k, beta, a, strength=False))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def _span_retention(k: np.ndarray, beta: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Each r_j from the package's recurrent gated rule: start from k_j^T, run the later steps with
    zero values, read at k_j."""
    return np.array([k[j] @ _span_state(k[j + 1:], beta[j + 1:], a[j + 1:], k[j][:, None])[:, 0]
                     if j + 1 < len(k) else 1.0 for j in range(len(k))])


def retention_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_gated_retention`."""
    rng = np.random.default_rng(seed + 1)
    cases = []
    for description, c, d_k, orthogonal in (("6 writes, d_k=4", 6, 4, False),
                                            ("orthogonal keys: only the decays (d_k=5)", 5, 5, True),
                                            ("one write", 1, 3, False),
                                            ("10 writes, d_k=3", 10, 3, False)):
        k = np.linalg.qr(rng.normal(size=(d_k, d_k)))[0][:c] if orthogonal else _unit(rng, c, d_k)
        beta, a = rng.random(c), 0.5 + 0.5 * rng.random(c)
        cases.append(Case(description, {"k": k, "beta": beta, "a": a}, _span_retention(k, beta, a),
                          atol=1e-10, rtol=1e-9, hint=RETENTION_EXPLAIN, diagnose=_diagnose_retention))
    return cases


@allowing("NumPy operations: np.eye, np.outer, matrix products (@) and loops over the writes.")
def check_gated_retention(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``gated_retention(k, beta, a)``: what the later steps leave of each write.

    Parameters
    ----------
    fn : callable
        Called with the keys ``k (C, d_k)`` (unit rows), ``beta (C,)`` in [0, 1] and the decays
        ``a (C,)`` in (0, 1]; returns ``r (C,)``, ``r_j = k_j G_C ... G_{j+1} k_j^T`` with
        ``G_t = a_t (I - beta_t k_t^T k_t)`` (Yang et al. 2025's step without its write).
    """
    return run_cases("check_gated_retention", fn, retention_cases(), references=REFERENCES)


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


@allowing("NumPy operations such as np.cumsum, np.log, np.exp, np.prod, np.tril and loops.")
def check_decay_matrix(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``my_decay_matrix(a)``: ``D[t, j] = a_{j+1} ... a_t`` for ``j <= t``, else 0.

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


@allowing("NumPy operations: matrix products, np.tril, np.eye, np.linalg.solve or a loop.")
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


# --------------------------------------------------------------------------- a larger feature map

SQUARE_EXPLAIN = (
    "Map every key and query to its d_k^2 pairwise products: the outer product of the vector with "
    "itself, flattened. Write the memory as linear attention does, the sum over the pairs of each "
    "mapped key's outer product with its value (d_k^2 x d_v, no normaliser), and read each query by "
    "multiplying its mapped vector with that memory."
)
SQUARE_PLAIN_HINT = (
    "That is the plain memory, without the feature map: map keys and queries to their pairwise "
    "products first."
)
SQUARE_ELEMENTWISE_HINT = (
    "The feature map squared each entry (d_k features): it holds every product of two entries, "
    "d_k^2 features, the outer product of the vector with itself."
)
SQUARE_NORMALISED_HINT = (
    "The reads were divided by a normaliser (the mapped query times the sum of the mapped keys): "
    "this memory reads the mapped query times the state and nothing more."
)


def _square_variants(keys, values, queries) -> list[tuple[str, np.ndarray]]:
    scores = (queries @ keys.T) ** 2
    return [(SQUARE_PLAIN_HINT, queries @ keys.T @ values),
            (SQUARE_ELEMENTWISE_HINT, (queries**2) @ (keys**2).T @ values),
            (SQUARE_NORMALISED_HINT, scores @ values / scores.sum(-1, keepdims=True))]


def _diagnose_square(got: Any, case: Case) -> str | None:
    return variant_hint(got, _square_variants(*case.args.values()), np.asarray(case.expected), case)


def _square_reads(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The reference in its attention form: scores (q . k_j)^2, no softmax, no normaliser."""
    k, v, q = (torch.as_tensor(x, dtype=torch.float64) for x in (keys, values, queries))
    return ((q @ k.T).square() @ v).numpy()


def square_map_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_square_map_reads`."""
    rng = np.random.default_rng(seed + 4)
    cases = []
    for description, n, d_k, d_v, kind in (("4 pairs, d_k=3", 4, 3, 2, ""),
                                           ("a key written twice: its values add", 5, 4, 4, "again"),
                                           ("12 pairs, d_k=2, one-hot values", 12, 2, 6, "one-hot"),
                                           ("keys that are not unit vectors", 6, 5, 3, "lengths")):
        keys = _unit(rng, n, d_k) * (rng.uniform(0.5, 2.0, (n, 1)) if kind == "lengths" else 1.0)
        if kind == "again":
            keys[-1] = keys[0]
        values = np.eye(d_v)[rng.integers(d_v, size=n)] if kind == "one-hot" else rng.normal(size=(n, d_v))
        queries = np.concatenate([keys[rng.permutation(n)], _unit(rng, 2, d_k)])
        cases.append(Case(description, {"keys": keys, "values": values, "queries": queries},
                          _square_reads(keys, values, queries), atol=1e-10, rtol=1e-8, hint=SQUARE_EXPLAIN,
                          diagnose=_diagnose_square))
    return cases


@allowing("NumPy operations: np.einsum or np.outer, reshape, matrix products (@) and sums.")
def check_square_map_reads(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``square_map_reads(keys, values, queries)``: write, then read.

    Parameters
    ----------
    fn : callable
        Called with ``keys (n, d_k)``, ``values (n, d_v)`` and ``queries (m, d_k)``; returns the
        ``(m, d_v)`` reads of a linear-attention memory (a sum, no normaliser) whose keys and
        queries go through the feature map phi(x) = x outer x, flattened to d_k^2 features.
    """
    return run_cases("check_square_map_reads", fn, square_map_cases(), references=REFERENCES)


# --------------------------------------------------------------------------- the cache's size

CACHE_EXPLAIN = (
    "Each layer keeps, per head, one d_k x d_k state, and the convolution's last "
    "conv_size - 1 inputs of its queries, keys and values (3 num_heads d_k numbers each; "
    "none when conv_size is 0, no convolution, or 1); times the layers and the bytes per "
    "number. No term grows with the tokens."
)
CACHE_NO_CONV_HINT = "The convolution's tail is missing: conv_size - 1 earlier inputs of q, k and v."
CACHE_CONV_SIZE_HINT = (
    "The tail holds conv_size - 1 inputs, not conv_size: the newest one is the current token's."
)


def _state_bytes(num_layers: int, num_heads: int, d_k: int, conv_size: int, bytes_per_number: int) -> int:
    module = DeltaNetAttention(num_heads * d_k, num_heads, conv_size=conv_size)
    return num_layers * module.state_numbers() * bytes_per_number


def _diagnose_cache(got: Any, case: Case) -> str | None:
    layers, heads, d_k, conv, size = case.args.values()
    tail = 3 * heads * d_k * layers * size
    expected = float(case.expected)
    variants = [(CACHE_NO_CONV_HINT, np.asarray(expected - max(conv - 1, 0) * tail)),
                (CACHE_CONV_SIZE_HINT, np.asarray(expected + tail))]
    return variant_hint(got, variants, np.asarray(expected), case) if conv > 1 else None


def state_bytes_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_state_bytes`; with ``seed`` (the grade of record's),
    two more drawn from it."""
    def case(description: str, layers: int, heads: int, d_k: int, conv: int, size: int) -> Case:
        return Case(description, {"num_layers": layers, "num_heads": heads, "d_k": d_k,
                                  "conv_size": conv, "bytes_per_number": size},
                    np.asarray(float(_state_bytes(layers, heads, d_k, conv, size))), atol=0, rtol=0,
                    hint=CACHE_EXPLAIN, diagnose=_diagnose_cache)

    return [case("the chapter's size: 2 layers, 1 head of 32, no convolution (conv_size = 0: no inputs "
                 "kept), float32", 2, 1, 32, 0, 4),
            case("4 layers, 4 heads of 16, conv 4, float32", 4, 4, 16, 4, 4),
            case("48 layers, 16 heads of 128, conv 4, bfloat16", 48, 16, 128, 4, 2),
            case("1 layer, conv 1 (no tail)", 1, 2, 8, 1, 4)] + [
        case(f"drawn when graded: {layers} layers, {heads} heads of {d_k}, conv {conv}, {size} bytes",
             layers, heads, d_k, conv, size) for layers, heads, d_k, conv, size in _drawn_shapes(seed)]


def _drawn_shapes(seed: int | None) -> list[tuple[int, int, int, int, int]]:
    """Two ``(layers, heads, d_k, conv_size, bytes_per_number)`` drawn from the grading seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 33)), int(rng.integers(1, 17)), int(rng.choice([8, 16, 32, 64, 128])),
             int(rng.integers(0, 5)), int(rng.choice([1, 2, 4]))) for _ in range(2)]


@allowing("Python arithmetic.")
def check_state_bytes(fn: Callable[[int, int, int, int, int], Any]) -> CheckResult:
    """Check a learner's ``state_bytes(num_layers, num_heads, d_k, conv_size, bytes_per_number)``.

    Parameters
    ----------
    fn : callable
        Returns the bytes of a DeltaNet model's cache for one sequence, whatever its length
        (as :meth:`~attncourse.nn.memory_attention.MemoryAttention.state_numbers` counts it).
    """
    return run_cases("check_state_bytes", fn, state_bytes_cases(),
                     references=(DeltaNetAttention.state_numbers,))


__all__ = ["check_decay_matrix", "check_delta_transition", "check_gated_retention", "check_square_map_reads",
           "check_state_bytes", "check_wy_factors", "decay_matrix_cases", "retention_cases",
           "square_map_cases", "state_bytes_cases", "transition_cases", "wy_cases"]

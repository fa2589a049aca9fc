"""Checks for the exercises of the chapter "Attention as practitioners write it".

Six pieces a practitioner writes around SDPA and FlexAttention: T5's bucketed relative
positions (Raffel et al. 2020, section 2.1), positions restarted per packed document, the
tiles a causal sliding window touches, a window with attention sinks as a ``mask_mod``
(Xiao et al. 2024), what padding costs, and the merge of two partial attentions by their
log-sum-exp (Milakov and Gimelshein 2018; the split-KV step of FlashAttention-style
kernels). When a case fails, the learner's answer is compared with the typical wrong
versions so that the hint names the bug. Cases with random inputs draw them from ``seed``
(the grading seed in the grade of record).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.chapters.ch15_attention_in_practice.calls import sink_window_grid
from attncourse.checks.core import Case, CheckResult, calling, run_cases, variant_hint
from attncourse.checks.guard import allowing

# --------------------------------------------------------------------------- T5's buckets


def _t5_bucket(relative_position: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int,
               flip: bool = False, halve: bool = True, clamp: bool = True) -> np.ndarray:
    """T5's bucket of each ``key - query`` distance; the keywords make the wrong versions."""
    n = np.asarray(relative_position) if flip else -np.asarray(relative_position)
    buckets = np.zeros(n.shape, dtype=np.int64)
    if bidirectional:
        if halve:
            num_buckets //= 2
        buckets += (n < 0) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        far = exact + (np.log(np.maximum(n, 1) / exact) / math.log(max_distance / exact)
                       * (num_buckets - exact)).astype(np.int64)
    if clamp:
        far = np.minimum(far, num_buckets - 1)
    return buckets + np.where(n < exact, n, far)


T5_EXPLAIN = (
    "The distance n is the query's position minus the key's, the negative of the relative position. "
    "Bidirectional attention gives half of the buckets to each direction (keys after the query, where "
    "n is negative, take the upper half) and goes on with the absolute distance; causal attention "
    "treats every key after the query as distance zero. Distances below half of the remaining buckets "
    "get a bucket each; a farther distance gets that half plus the integer part of the logarithm of "
    "its ratio to the half, divided by the logarithm of the ratio of the largest distance to the "
    "half, times the buckets left; no bucket past the last one."
)
T5_SIGN_HINT = ("The direction is flipped: the relative position counts from the query to the key, so "
                "the distance n is its negative, positive for a key in the past.")
T5_HALVE_HINT = "Bidirectional buckets are split between the two directions: halve the number of buckets first."
T5_CLAMP_HINT = ("Distances past the largest one must share the last bucket: cap the far buckets at the "
                 "number of buckets minus one.")


def _diagnose_t5(got: Any, case: Case) -> str | None:
    args = case.args
    variants = [(hint, _t5_bucket(args["relative_position"], args["bidirectional"], args["num_buckets"],
                                  args["max_distance"], **kw))
                for hint, kw in ((T5_SIGN_HINT, {"flip": True}), (T5_HALVE_HINT, {"halve": False}),
                                 (T5_CLAMP_HINT, {"clamp": False}))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def t5_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_t5_bucket`."""
    rng = np.random.default_rng(seed)
    cases = []
    for description, rel, bidirectional, buckets, distance in (
            ("a causal row of distances 0..-40, 32 buckets, max_distance 128", -np.arange(41), False, 32, 128),
            ("bidirectional, -300..300 every 7, T5's 32 buckets and 128", np.arange(-300, 301, 7), True, 32, 128),
            ("causal, keys after the query get bucket 0", np.arange(-5, 6), False, 16, 64),
            ("a drawn (6, 9) grid of distances, bidirectional, 16 buckets, 50",
             rng.integers(-120, 121, size=(6, 9)), True, 16, 50),
            ("a drawn row past max_distance, causal, 8 buckets, 20", -rng.integers(0, 400, size=30), False, 8, 20)):
        expected = _t5_bucket(rel, bidirectional, buckets, distance)
        cases.append(Case(description, {"relative_position": rel, "bidirectional": bidirectional,
                                        "num_buckets": buckets, "max_distance": distance},
                          expected, atol=0, rtol=0, hint=T5_EXPLAIN, diagnose=_diagnose_t5))
    return cases


@allowing("NumPy operations (np.log, np.where, np.minimum, astype) on the distances.",
          library=("transformers:T5Attention._relative_position_bucket",))
def check_t5_bucket(fn: Callable[[np.ndarray, bool, int, int], Any]) -> CheckResult:
    """Check a learner's ``t5_bucket(relative_position, bidirectional, num_buckets, max_distance)``.

    Parameters
    ----------
    fn : callable
        Called with integer ``key - query`` distances of any shape, whether attention is
        bidirectional, the number of buckets and ``max_distance``; returns T5's bucket of
        each distance, same shape, integers (Raffel et al. 2020, section 2.1).
    """
    return run_cases("check_t5_bucket", fn, t5_cases())


# --------------------------------------------------------------------------- packed positions


def _positions(doc_ids: np.ndarray, start: int = 0, global_: bool = False, pad_counts: bool = False) -> np.ndarray:
    out = np.zeros(len(doc_ids), dtype=np.int64)
    for i in range(len(doc_ids)):
        if doc_ids[i] < 0 and not pad_counts:
            continue
        new = i == 0 or doc_ids[i] != doc_ids[i - 1]
        out[i] = i + start if global_ else (start if new else out[i - 1] + 1)
    return out


POSITIONS_EXPLAIN = ("Each document counts its own positions from 0: a position is 0 where the document id "
                     "changes and one more than its left neighbour's otherwise; padding (-1) gets 0.")
POSITIONS_GLOBAL_HINT = "Those are the row's positions: each packed document starts again at 0."
POSITIONS_ONE_HINT = "Positions start at 0, as the model's table is indexed: the first character is position 0."
POSITIONS_PAD_HINT = "Padding (id -1) is no document: its positions are all 0."


def _diagnose_positions(got: Any, case: Case) -> str | None:
    ids = np.asarray(case.args["doc_ids"])
    variants = [(POSITIONS_GLOBAL_HINT, _positions(ids, global_=True)), (POSITIONS_ONE_HINT, _positions(ids, 1)),
                (POSITIONS_PAD_HINT, _positions(ids, pad_counts=True))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def positions_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_packed_positions`."""
    rng = np.random.default_rng(seed + 1)
    rows = [np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, -1, -1]), np.array([0] * 7), np.array([3, 3, 5, 5, 5, 6]),
            np.array([0, 1, 2, 3])]
    lengths = rng.integers(1, 12, size=6)
    rows.append(np.concatenate([np.full(n, i) for i, n in enumerate(lengths)] + [np.full(5, -1)]))
    names = ("three documents and padding", "one document", "ids that skip numbers", "one character each",
             "six drawn lengths and padding")
    return [Case(name, {"doc_ids": ids}, _positions(ids), atol=0, rtol=0, hint=POSITIONS_EXPLAIN,
                 diagnose=_diagnose_positions) for name, ids in zip(names, rows)]


@allowing("NumPy operations and a loop over the positions.")
def check_packed_positions(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``packed_positions(doc_ids)``: positions restarted per document.

    Parameters
    ----------
    fn : callable
        Called with a packed row's document ids ``(length,)`` (a document is a run of equal
        ids; -1 marks padding); returns each position's index in its document, ``(length,)``
        integers, 0 on padding.
    """
    return run_cases("check_packed_positions", fn, positions_cases())


# --------------------------------------------------------------------------- a window's tiles


def _window_tiles(n: int, window: int, block: int, reach: int | None = None, whole_only: bool = False) -> int:
    reach = window - 1 if reach is None else reach
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = (j <= i) & (i - j <= reach)
    tiles = -(-n // block) if not whole_only else n // block
    padded = np.zeros((tiles * block, tiles * block), dtype=bool)
    size = min(n, tiles * block)
    padded[:size, :size] = allowed[:size, :size]
    return int(padded.reshape(tiles, block, tiles, block).any(axis=(1, 3)).sum())


WINDOW_EXPLAIN = (
    "A query sees the window's keys: itself and the window minus one positions before it, none after. "
    "Cut the scores into square tiles of the block size, as many along each side as it takes to cover "
    "the sequence (the last ones partial), and count the tiles that hold at least one allowed pair."
)
WINDOW_REACH_HINT = "The window is one key too wide: it holds exactly window keys, the query itself included."
WINDOW_PARTIAL_HINT = ("The last, partial tiles are missing: round the number of tiles along a side up, "
                       "not down.")
WINDOW_CAUSAL_HINT = "That is every causal tile: the window leaves out the tiles wholly older than it."


def _diagnose_window(got: Any, case: Case) -> str | None:
    n, window, block = (case.args[k] for k in ("n", "window", "block"))
    causal = _window_tiles(n, n, block)
    variants = [(WINDOW_REACH_HINT, _window_tiles(n, window, block, reach=window)),
                (WINDOW_PARTIAL_HINT, _window_tiles(n, window, block, whole_only=True)),
                (WINDOW_CAUSAL_HINT, causal)]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def window_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_window_tiles`."""
    rng = np.random.default_rng(seed + 2)
    drawn = [(int(rng.integers(100, 400)), int(rng.integers(8, 90)), int(rng.choice([16, 32]))) for _ in range(2)]
    cases = []
    for n, window, block in [(1024, 256, 64), (1024, 64, 64), (200, 30, 32), (256, 1, 64), (300, 512, 128), *drawn]:
        cases.append(Case(f"n={n}, window={window}, block={block}", {"n": n, "window": window, "block": block},
                          np.asarray(_window_tiles(n, window, block)), atol=0, rtol=0, hint=WINDOW_EXPLAIN,
                          diagnose=_diagnose_window))
    return cases


@allowing("Python or NumPy: integer arithmetic, or a loop over the tiles.",
          library=("torch:create_block_mask", "torch:create_mask"))
def check_window_tiles(fn: Callable[[int, int, int], Any]) -> CheckResult:
    """Check a learner's ``window_tiles(n, window, block)``: tiles a causal window touches.

    Parameters
    ----------
    fn : callable
        Called with the sequence length ``n``, the window (keys a query sees, itself
        included) and the tile size; returns how many of the ``ceil(n / block)^2`` tiles
        hold at least one allowed score (an int).
    """
    return run_cases("check_window_tiles", fn, window_cases())


# --------------------------------------------------------------------------- sinks and a window


def _sink_window(n: int, window: int, sinks: int, with_sinks: bool = True, causal: bool = True,
                 reach: int | None = None) -> np.ndarray:
    reach = window - 1 if reach is None else reach
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    near = i - j <= reach
    keep = (near | (j < sinks)) if with_sinks else near
    return keep & (j <= i) if causal else keep


SINK_EXPLAIN = (
    "A key is visible if it is not after the query and either lies within the window (the query and "
    "the window minus one positions before it) or is one of the first sinks positions. Combine the "
    "index tensors with the elementwise operators & and |, never the words and/or: FlexAttention "
    "calls the mask_mod on tensors."
)
SINK_NO_SINKS_HINT = "The sinks are missing: the first `sinks` keys stay visible to every later query."
SINK_FUTURE_HINT = "The sinks let a query see the future: a sink is visible only at or after its position."
SINK_REACH_HINT = "The window is one key too wide: it holds window keys, itself included."


def _diagnose_sinks(got: Any, case: Case) -> str | None:
    n, window, sinks = case.args["n"], case.args["window"], case.args["sinks"]
    variants = [(SINK_NO_SINKS_HINT, _sink_window(n, window, sinks, with_sinks=False)),
                (SINK_FUTURE_HINT, _sink_window(n, window, sinks, causal=False) & ~(
                    (np.arange(n)[None, :] > np.arange(n)[:, None]) & (np.arange(n)[None, :] >= sinks))),
                (SINK_REACH_HINT, _sink_window(n, window, sinks, reach=window))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def sink_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_sink_window`."""
    rng = np.random.default_rng(seed + 3)
    drawn = (int(rng.integers(20, 60)), int(rng.integers(2, 9)), int(rng.integers(1, 5)))
    cases = []
    for n, window, sinks in [(12, 4, 1), (16, 3, 4), (10, 20, 2), (9, 1, 0), drawn]:
        cases.append(Case(f"{n} positions, window {window}, {sinks} sinks", {"n": n, "window": window, "sinks": sinks},
                          _sink_window(n, window, sinks), atol=0, rtol=0, hint=SINK_EXPLAIN,
                          diagnose=_diagnose_sinks))
    return cases


@allowing("torch operations on the index tensors (<=, <, -, &, |) in the mask_mod you return.",
          calls=("attncourse.chapters.ch15_attention_in_practice.calls:sink_window_grid",))
def check_sink_window(fn: Callable[[int, int], Callable]) -> CheckResult:
    """Check a learner's ``sink_window(window, sinks)``, which returns a FlexAttention ``mask_mod``.

    Parameters
    ----------
    fn : callable
        Called with the window (keys a query sees, itself included) and the number of sink
        positions; returns ``mask_mod(b, h, q_idx, kv_idx)``, which the check calls on
        broadcast index tensors ``(n, 1)`` and ``(1, n)`` and which must return the bool
        ``(n, n)`` mask (Xiao et al. 2024, section 3.2: sinks and a rolling window).
    """
    if not callable(fn):
        return run_cases("check_sink_window", fn, sink_cases())
    return run_cases("check_sink_window", calling(fn, sink_window_grid), sink_cases(), learner=fn)


# --------------------------------------------------------------------------- padding's cost


def _padding(lengths: np.ndarray, batch_size: int, global_max: bool = False, full_last: bool = False) -> float:
    lengths = np.asarray(lengths)
    slots = 0
    for start in range(0, len(lengths), batch_size):
        group = lengths[start:start + batch_size]
        width = lengths.max() if global_max else group.max()
        slots += width * (batch_size if full_last else len(group))
    return float(1 - lengths.sum() / slots)


PADDING_EXPLAIN = ("Cut the sequences, in order, into groups of the batch size (the last may be smaller); "
                   "each group is padded to its longest. The fraction is one minus the real positions "
                   "(the sum of the lengths) over all computed ones (for each group, its longest length "
                   "times its number of sequences).")
PADDING_GLOBAL_HINT = "Each batch is padded to its own longest sequence, not to the longest of all."
PADDING_LAST_HINT = "The last batch holds only the sequences that are left: do not count missing rows."


def _diagnose_padding(got: Any, case: Case) -> str | None:
    lengths, size = case.args["lengths"], case.args["batch_size"]
    variants = [(PADDING_GLOBAL_HINT, _padding(lengths, size, global_max=True)),
                (PADDING_LAST_HINT, _padding(lengths, size, full_last=True))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def padding_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_padding_fraction`."""
    rng = np.random.default_rng(seed + 4)
    cases = []
    for description, lengths, size in (("4 sequences, batches of 2", np.array([3, 5, 2, 2]), 2),
                                       ("equal lengths: no padding", np.full(8, 7), 4),
                                       ("a last, smaller batch", np.array([10, 1, 4, 6, 3]), 2),
                                       ("40 drawn lengths 1-256, batches of 16", rng.integers(1, 257, size=40), 16),
                                       ("one batch holds all", np.array([5, 9, 1]), 8)):
        cases.append(Case(description, {"lengths": lengths, "batch_size": size},
                          np.asarray(_padding(lengths, size)), atol=1e-12, rtol=1e-9, hint=PADDING_EXPLAIN,
                          diagnose=_diagnose_padding))
    return cases


@allowing("Python or NumPy arithmetic over the groups.")
def check_padding_fraction(fn: Callable[[np.ndarray, int], Any]) -> CheckResult:
    """Check a learner's ``padding_fraction(lengths, batch_size)``.

    Parameters
    ----------
    fn : callable
        Called with the sequences' lengths ``(num_sequences,)`` in batch order and the batch
        size; returns the fraction (a float in [0, 1)) of computed positions that are
        padding when each batch is padded to its longest sequence.
    """
    return run_cases("check_padding_fraction", fn, padding_cases())


# --------------------------------------------------------------------------- merging by log-sum-exp


def _partial(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Softmax attention of ``q (n, d)`` over ``k, v (m, d)``: its output and log-sum-exp of the
    scaled scores; no key: zeros and -inf."""
    if len(k) == 0:
        return np.zeros((len(q), v.shape[1])), np.full(len(q), -np.inf)
    scores = q @ k.T / math.sqrt(q.shape[1])
    top = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=1, keepdims=True)
    return weights @ v / total, (top + np.log(total))[:, 0]


def _merged(out_a, lse_a, out_b, lse_b, mode: str = "right") -> tuple[np.ndarray, np.ndarray]:
    if mode == "mean":
        return (out_a + out_b) / 2, np.logaddexp(lse_a, lse_b)
    lse = np.logaddexp(lse_a, lse_b)
    with np.errstate(invalid="ignore", over="ignore"):
        if mode == "unshifted":
            wa, wb = np.exp(lse_a), np.exp(lse_b)
            return (wa[:, None] * out_a + wb[:, None] * out_b) / (wa + wb)[:, None], lse
        wa = np.where(np.isneginf(lse_a), 0.0, np.exp(lse_a - np.where(np.isneginf(lse), 0, lse)))
        wb = np.where(np.isneginf(lse_b), 0.0, np.exp(lse_b - np.where(np.isneginf(lse), 0, lse)))
    return wa[:, None] * out_a + wb[:, None] * out_b, lse


MERGE_EXPLAIN = (
    "Each part is normalised over its own keys. The whole's log-sum-exp is the log of the sum of the "
    "parts' exponentials (NumPy's logaddexp), and each part counts by the exponential of its own "
    "log-sum-exp minus the whole's. A part with no key has a log-sum-exp of minus infinity and weight 0."
)
MERGE_MEAN_HINT = ("The two outputs are averaged: each part must count by its share of the softmax's "
                   "denominator, the exponential of its log-sum-exp minus the whole's, not one half.")
MERGE_OVERFLOW_HINT = ("The exponential of a log-sum-exp overflows for large scores (infinity over infinity "
                       "is NaN): subtract the merged log-sum-exp before exponentiating.")


def _diagnose_merge(got: Any, case: Case) -> str | None:
    args = [np.asarray(a) for a in case.args.values()]
    out = got[0] if isinstance(got, tuple) else got
    for hint, mode in ((MERGE_MEAN_HINT, "mean"), (MERGE_OVERFLOW_HINT, "unshifted")):
        variant = _merged(*args, mode=mode)[0]
        if isinstance(out, np.ndarray) and out.shape == variant.shape and (
                np.allclose(out, variant, equal_nan=True) or (mode == "unshifted" and np.isnan(out).any())):
            if not np.allclose(variant, case.expected[0], equal_nan=True):
                return hint
    return None


def merge_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_merge_attention`."""
    rng = np.random.default_rng(seed + 5)
    cases = []
    for description, n, m_a, m_b, d, scale in (("8 queries, 5 + 7 keys, d=4", 8, 5, 7, 4, 1.0),
                                               ("one key on each side", 3, 1, 1, 6, 1.0),
                                               ("large scores (lse ~ 1000)", 4, 6, 6, 4, 40.0),
                                               ("the second part has no key", 5, 9, 0, 3, 1.0),
                                               ("a drawn split of 20 keys", 6, int(rng.integers(1, 20)), 0, 5, 2.0)):
        if description.startswith("a drawn"):
            m_b = 20 - m_a
        q = rng.normal(size=(n, d)) * scale
        k, v = rng.normal(size=(m_a + m_b, d)) * scale, rng.normal(size=(m_a + m_b, d))
        (out_a, lse_a), (out_b, lse_b) = _partial(q, k[:m_a], v[:m_a]), _partial(q, k[m_a:], v[m_a:])
        whole = _partial(q, k, v)
        cases.append(Case(description, {"out_a": out_a, "lse_a": lse_a, "out_b": out_b, "lse_b": lse_b},
                          whole, atol=1e-9, rtol=1e-9, hint=MERGE_EXPLAIN, output_names=("out", "lse"),
                          diagnose=_diagnose_merge))
    return cases


@allowing("NumPy operations (np.logaddexp, np.exp, np.maximum, np.where).")
def check_merge_attention(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``merge_attention(out_a, lse_a, out_b, lse_b)``.

    Parameters
    ----------
    fn : callable
        Called with the outputs ``(n, d_v)`` and log-sum-exps ``(n,)`` of softmax attention
        over two disjoint sets of keys (``-inf`` where a set is empty); returns ``(out,
        lse)``: the attention over all the keys and its log-sum-exp (Milakov and
        Gimelshein 2018, the merge of partial (max, sum) pairs; FlashAttention-2's
        split-KV merge).
    """
    return run_cases("check_merge_attention", fn, merge_cases())


__all__ = ["check_merge_attention", "check_packed_positions", "check_padding_fraction", "check_sink_window",
           "check_t5_bucket", "check_window_tiles", "merge_cases", "padding_cases", "positions_cases",
           "sink_cases", "t5_cases", "window_cases"]

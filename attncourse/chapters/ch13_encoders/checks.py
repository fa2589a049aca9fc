"""Checks for the exercises of the chapter "Attention that sees both ways".

Six small pieces of encoder-only models: multi-head self-attention with a padding mask, BERT's
80/10/10 corruption (Devlin et al. 2019, section 3.1), cutting an image into the ViT's
patches (Dosovitskiy et al. 2021, section 3.1), attention rollout (Abnar and Zuidema
2020), mean pooling over the real positions, and the share of high-norm tokens that
Darcet et al. (2024) measure. When a case fails, the learner's answer is compared with
the typical wrong versions so that the hint names the bug.

References are :mod:`attncourse.chapters.ch13_encoders.vit` and
:mod:`attncourse.chapters.ch13_encoders.recipe`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.chapters.ch13_encoders.recipe import IGNORE, bert_mask, mean_pool
from attncourse.chapters.ch13_encoders.vit import (
    attention_rollout,
    high_norm_share,
    patchify,
)
from attncourse.checks.core import Case, CheckResult, run_cases, variant_hint
from attncourse.checks.guard import ATTENTION, SOFTMAX, TRANSFORMER_LAYERS, allowing
from attncourse.functional.torch_attention import attention, masked_softmax

# --------------------------------------------------------------------------- attention, both ways, padded

ATTENTION_EXPLAIN = (
    "Project x to queries, keys and values and split the width into num_heads equal slices. In each "
    "head, score every query against every key (dot products scaled by the square root of a head's "
    "width). A padded key gets no weight: its score is minus infinity before the softmax, which runs "
    "over the keys (the last axis), so that each row of weights sums to 1 over the real keys. Every "
    "query keeps its row, padded or not. A sequence with no real token has no key to weigh: its "
    "weights and its output are zeros. Put the heads side by side again and apply the output "
    "projection."
)
CAUSAL_HINT = ("Your output is the causal one: an encoder masks nothing but the padding, position i also "
               "reads the later positions.")
UNSCALED_HINT = "The scores are not scaled: divide them by the square root of the width of one head."
D_MODEL_SCALE_HINT = ("The scores are scaled by the square root of the model's whole width: use the width of "
                      "one head, the width divided by the number of heads.")
QUERY_AXIS_HINT = ("The softmax ran over the queries (the rows' axis): it runs over the keys, the last axis, "
                   "so that each query's weights sum to 1.")
QUERY_MASK_HINT = ("The mask was applied to the queries (the rows) instead of the keys (the columns): a padded "
                   "key gets no weight from any query, and a padded query still reads the real keys.")
NO_MASK_HINT = "The padding was not masked: the padded keys got weight. Give them a score of minus infinity."
AFTER_SOFTMAX_HINT = ("The padded keys' weights were set to zero after the softmax, so the rows no longer sum to "
                      "1: mask the scores before the softmax.")
EMPTY_HINT = ("A sequence with no real token gave NaN or non-zero weights: with no key to weigh, its weights "
              "and its output are zeros, as the package's attention returns for a fully masked row.")
ROW_SUM_HINT = ("Some rows of your weights do not sum to 1 (0 for a sequence with no real token): each query's "
                "weights over the real keys sum to 1.")


def _padded_attention(x, w_q, w_k, w_v, w_o, num_heads, key_mask, *, scale=None, axis=-1, where="keys",
                      after=False) -> tuple[np.ndarray, np.ndarray]:
    """The reference, through the package's torch ``attention`` (a fully masked row is zeros);
    with keyword arguments, the typical wrong versions."""
    x, w_q, w_k, w_v, w_o = (torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in (x, w_q, w_k, w_v, w_o))
    keep = torch.as_tensor(np.asarray(key_mask, dtype=bool))
    batch, seq_len, d = x.shape
    q, k, v = [(x @ w).reshape(batch, seq_len, num_heads, d // num_heads).transpose(1, 2) for w in (w_q, w_k, w_v)]
    if where == "keys":
        mask = keep[:, None, None, :].expand(batch, num_heads, seq_len, seq_len)
    elif where == "queries":
        mask = keep[:, None, :, None].expand(batch, num_heads, seq_len, seq_len)
    else:
        mask = torch.ones(batch, num_heads, seq_len, seq_len, dtype=torch.bool)
    if where == "causal":
        mask = mask & keep[:, None, None, :] & torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    if scale is None and axis == -1 and not after:
        out, weights = attention(q, k, v, mask)
    else:
        scores = q @ k.transpose(-2, -1) * ((d // num_heads) ** -0.5 if scale is None else scale)
        if after:
            weights = scores.softmax(-1) * mask
        else:
            weights = masked_softmax(scores, mask, dim=axis)
        out = weights @ v
    out = out.transpose(1, 2).reshape(batch, seq_len, d) @ w_o
    return out.numpy(), weights.numpy()


def _diagnose_attention(got: Any, case: Case) -> str | None:
    if not isinstance(got, tuple) or len(got) != 2:
        return None
    weights = np.asarray(got[1], dtype=np.float64)
    expected = np.asarray(case.expected[1])
    if weights.shape != expected.shape:
        return None
    args = case.args
    empty = ~np.asarray(args["key_mask"]).any(-1)
    if empty.any() and not (np.all(np.isfinite(weights[empty])) and np.allclose(weights[empty], 0)):
        right_elsewhere = np.allclose(weights[~empty], expected[~empty], rtol=case.rtol, atol=case.atol)
        if right_elsewhere or not np.all(np.isfinite(weights[empty])):
            return EMPTY_HINT
    variants = [(NO_MASK_HINT, {"where": "none"}), (QUERY_MASK_HINT, {"where": "queries"}),
                (QUERY_AXIS_HINT, {"axis": -2}), (AFTER_SOFTMAX_HINT, {"after": True}),
                (UNSCALED_HINT, {"scale": 1.0}), (CAUSAL_HINT, {"where": "causal"}),
                (D_MODEL_SCALE_HINT, {"scale": args["x"].shape[-1] ** -0.5})]
    hint = variant_hint(weights, [(h, _padded_attention(*args.values(), **kw)[1]) for h, kw in variants],
                        expected, case)
    if hint is None and np.all(np.isfinite(weights)):
        sums = weights.sum(-1)
        if not np.allclose(sums, expected.sum(-1), atol=1e-6):
            return ROW_SUM_HINT
    return hint


def _drawing(seed: int | None) -> np.random.Generator | None:
    """The generator of the cases drawn when graded: None (no drawn case) without a seed."""
    return None if seed is None else np.random.default_rng(seed)


def _inner_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(10**6))


def padded_attention_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_padded_attention`; with ``seed`` (the grade of
    record's), two more drawn from it."""
    def case(description: str, real: list[list[bool]], d: int, h: int, seed: int) -> Case:
        rng = np.random.default_rng(seed)
        key_mask = np.array(real, dtype=bool)
        batch, seq_len = key_mask.shape
        args = {"x": rng.normal(size=(batch, seq_len, d)),
                **{name: rng.normal(size=(d, d)) / np.sqrt(d) for name in ("w_q", "w_k", "w_v", "w_o")},
                "num_heads": h, "key_mask": key_mask}
        return Case(description=description, args=args, expected=_padded_attention(*args.values()), atol=1e-9,
                    rtol=1e-7, hint=ATTENTION_EXPLAIN, output_names=("output", "weights"),
                    diagnose=_diagnose_attention)

    def lengths(*ns: int, seq_len: int) -> list[list[bool]]:
        return [[j < n for j in range(seq_len)] for n in ns]

    return [case("2 sequences of 5 positions, 3 and 5 real, d=8, 2 heads", lengths(3, 5, seq_len=5), 8, 2, 0),
            case("one head, d=4, 3 sequences of 6 positions, 6, 2 and 4 real", lengths(6, 2, 4, seq_len=6),
                 4, 1, 1),
            case("padding first: 4 heads, d=16, the first 3 of 7 positions padded",
                 [[False] * 3 + [True] * 4, [True] * 7], 16, 4, 2),
            case("a sequence of padding only (its weights and output: zeros) and one of 3 real of 4",
                 lengths(3, 0, seq_len=4), 8, 2, 3),
            case("no padding, a single position", [[True]], 8, 2, 4)] + _drawn_attention(_drawing(seed), case)


def _drawn_attention(rng: np.random.Generator | None, case: Callable[..., Case]) -> list[Case]:
    drawn = []
    for _ in range(2 if rng is not None else 0):
        batch, n = int(rng.integers(1, 4)), int(rng.integers(2, 9))
        h, d_k = int(rng.choice([1, 2, 4])), int(rng.integers(2, 5))
        real = (rng.random((batch, n)) < 0.7).tolist()
        real[0][int(rng.integers(n))] = True                    # one real key at least in the first
        drawn.append(case(f"drawn when graded: batch {batch}, {n} positions, d={h * d_k}, heads {h}",
                          real, h * d_k, h, _inner_seed(rng)))
    return drawn


@allowing("NumPy operations: matrix products (@), reshape, transpose, np.where, np.exp, np.max "
          "and np.sum.",
          library=SOFTMAX + ATTENTION + TRANSFORMER_LAYERS)
def check_padded_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's ``my_padded_attention(x, w_q, w_k, w_v, w_o, num_heads, key_mask)``.

    Parameters
    ----------
    fn : callable
        ``x (batch, seq_len, d)``, the four ``(d, d)`` projections, the number of heads h and
        ``key_mask (batch, seq_len)``, True at the real positions; returns ``(output,
        weights)``, ``(batch, seq_len, d)`` and ``(batch, h, seq_len, seq_len)``: multi-head
        self-attention with no causal mask in which no query gives weight to a padded key
        (a sequence with no real position: zero weights and zero output).
    """
    return run_cases("check_padded_attention", fn, padded_attention_cases(),
                     references=(attention, masked_softmax))


# --------------------------------------------------------------------------- BERT's corruption

MASK_EXPLAIN = (
    "A position is chosen when its first draw is below 0.15. A chosen position becomes the mask id "
    "when its second draw is below 0.8, its random id when that draw lies from 0.8 up to 0.9, and "
    "stays itself otherwise. The targets are the clean ids at chosen positions and -100 (ignored by "
    "the loss) elsewhere."
)
ALL_TARGETS_HINT = ("The targets keep every position: only the chosen positions are predicted; the others must "
                    "be -100, which the loss ignores.")
SWAPPED_HINT = ("The random and the unchanged cases are swapped: second draws from 0.8 up to 0.9 take the "
                "random id, those from 0.9 up keep the token.")
ALL_MASKED_HINT = "Every chosen position became mask_id: 10 % get a random id and 10 % keep their token."


def _corrupt(ids, chosen_u, action_u, random_ids, mask_id, swap=False, all_mask=False):
    chosen = chosen_u < 0.15
    masked = chosen & ((action_u < 0.8) | all_mask)
    randomised = chosen & ~masked & ((action_u >= 0.9) if swap else (action_u < 0.9))
    inputs = np.where(masked, mask_id, np.where(randomised, random_ids, ids))
    return inputs, np.where(chosen, ids, IGNORE)


def _diagnose_mask(got: Any, case: Case) -> str | None:
    args = list(case.args.values())
    expected_inputs, expected_targets = case.expected
    if not isinstance(got, tuple) or len(got) != 2:
        return None
    if np.array_equal(np.asarray(got[0]), expected_inputs) and np.array_equal(np.asarray(got[1]), args[0]):
        return ALL_TARGETS_HINT
    for hint, kwargs in ((SWAPPED_HINT, {"swap": True}), (ALL_MASKED_HINT, {"all_mask": True})):
        variant = _corrupt(*args, **kwargs)[0]
        if not np.array_equal(variant, expected_inputs) and np.array_equal(np.asarray(got[0]), variant):
            return hint
    return None


def bert_mask_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_bert_mask`; with ``seed``, two more drawn from it."""
    def case(description: str, n: int, seed: int, mask_id: int = 0) -> Case:
        rng = np.random.default_rng(seed)
        ids = rng.integers(4, 60, n)
        chosen_u, action_u = rng.random(n), rng.random(n)
        chosen_u[:12] = [0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.11, 0.12, 0.5, 0.9, 0.149, 0.15]
        action_u[:12] = [0.1, 0.85, 0.95, 0.8, 0.9, 0.79, 0.899, 0.5, 0.85, 0.95, 0.999, 0.1]
        random_ids = rng.integers(4, 60, n)
        args = {"ids": ids, "chosen_u": chosen_u, "action_u": action_u, "random_ids": random_ids,
                "mask_id": mask_id}
        return Case(description=description, args=args, expected=_corrupt(*args.values()), atol=0, rtol=0,
                    output_names=("inputs", "targets"), hint=MASK_EXPLAIN, diagnose=_diagnose_mask)

    return [case("20 positions, every case at its edges", 20, 0),
            case("200 positions", 200, 1),
            case("mask_id 1", 40, 2, mask_id=1)] + [
        case(f"drawn when graded: {n} positions, mask_id {mask_id}", n, inner, mask_id=mask_id)
        for n, inner, mask_id in _drawn_sizes(_drawing(seed), 12, 100, 4)]


def _drawn_sizes(rng: np.random.Generator | None, low: int, high: int, ids: int) -> list[tuple[int, int, int]]:
    """Two ``(size in [low, high], inner seed, id in [0, ids))`` (none without a generator)."""
    if rng is None:
        return []
    return [(int(rng.integers(low, high + 1)), _inner_seed(rng), int(rng.integers(ids))) for _ in range(2)]


@allowing("NumPy operations: comparisons, & and |, and np.where.")
def check_bert_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's ``my_bert_mask(ids, chosen_u, action_u, random_ids, mask_id)``.

    Parameters
    ----------
    fn : callable
        ``ids``, ``chosen_u``, ``action_u``, ``random_ids``: ``(n,)`` arrays (two uniform draws
        in [0, 1) and the random replacements); returns ``(inputs, targets)``, both ``(n,)``.
    """
    return run_cases("check_bert_mask", fn, bert_mask_cases(), references=(bert_mask,))


# --------------------------------------------------------------------------- patches

PATCH_EXPLAIN = (
    "Cut the image into a grid of squares of side p; number them row by row (left to right, then "
    "down); "
    "flatten each square row by row."
)
NO_PERMUTE_HINT = ("A plain reshape cuts each pixel row into pieces, not the image into squares: split each "
                   "side into (grid index, index within the patch) first, then bring the two grid axes "
                   "together.")
COLUMN_ORDER_HINT = "The patches are numbered column by column: number them row by row, as the text is read."


def _diagnose_patches(got: Any, case: Case) -> str | None:
    images, p = case.args.values()
    b, h, w = images.shape
    plain = images.reshape(b, (h // p) * (w // p), p * p)
    grid = images.reshape(b, h // p, p, w // p, p)
    by_column = grid.transpose(0, 3, 1, 2, 4).reshape(b, -1, p * p)
    return variant_hint(got, [(NO_PERMUTE_HINT, plain), (COLUMN_ORDER_HINT, by_column)],
                        np.asarray(case.expected), case)


def patchify_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_patchify`; with ``seed``, two more drawn from it."""
    def case(description: str, b: int, h: int, w: int, p: int) -> Case:
        images = np.arange(b * h * w, dtype=float).reshape(b, h, w)
        expected = patchify(torch.as_tensor(images), p).numpy()
        return Case(description=description, args={"images": images, "patch_size": p}, expected=expected,
                    atol=0, rtol=0, hint=PATCH_EXPLAIN, diagnose=_diagnose_patches)

    return [case("one 4x4 image, p=2", 1, 4, 4, 2),
            case("two 8x8 digits, p=2 (the chapter's)", 2, 8, 8, 2),
            case("6x4 images, p=2 (not square)", 3, 6, 4, 2),
            case("8x8, p=4", 1, 8, 8, 4),
            case("p=1: every pixel a patch", 1, 3, 3, 1)] + _drawn_images(_drawing(seed), case)


def _drawn_images(rng: np.random.Generator | None, case: Callable[..., Case]) -> list[Case]:
    drawn = []
    for _ in range(2 if rng is not None else 0):
        b, p = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        rows, columns = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        drawn.append(case(f"drawn when graded: {b} images of {rows * p}x{columns * p}, p={p}", b, rows * p,
                          columns * p, p))
    return drawn


@allowing("NumPy reshape and transpose.",
          library=("einops:rearrange", "torch:unfold", "torch:Unfold"))
def check_patchify(fn: Callable[[np.ndarray, int], Any]) -> CheckResult:
    """Check a learner's ``my_patchify(images, patch_size)``: ``(batch, H, W)`` -> ``(batch, N, p * p)``."""
    return run_cases("check_patchify", fn, patchify_cases(), references=(patchify,))


# --------------------------------------------------------------------------- rollout

ROLLOUT_EXPLAIN = (
    "Average each layer's weights over the heads, mix in the skip connection (half the averaged "
    "weights plus half the identity), and multiply the layers' matrices with the last layer on the "
    "left."
)
NO_IDENTITY_HINT = "The skip connection is missing: mix in the identity, half and half, in every layer."
ORDER_HINT = "The product runs the wrong way: the last layer's matrix goes on the left."
UNNORMALISED_HINT = ("Adding the identity to the weights gives rows that sum to 2: take half of each, so that "
                     "every row still sums to 1.")


def _rollout_variants(weights: np.ndarray) -> list[tuple[str, np.ndarray]]:
    mean = weights.mean(axis=1)
    eye = np.eye(weights.shape[-1])
    raw, reversed_, unnormalised = eye, eye, eye
    for a in mean:
        raw = a @ raw
        reversed_ = reversed_ @ (0.5 * a + 0.5 * eye)
        unnormalised = (a + eye) @ unnormalised
    return [(NO_IDENTITY_HINT, raw), (ORDER_HINT, reversed_), (UNNORMALISED_HINT, unnormalised)]


def _diagnose_rollout(got: Any, case: Case) -> str | None:
    return variant_hint(got, _rollout_variants(case.args["weights"]), np.asarray(case.expected), case)


def rollout_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_rollout`; with ``seed``, two more drawn from it."""
    def case(description: str, layers: int, h: int, n: int, seed: int) -> Case:
        logits = torch.randn(layers, h, n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        weights = logits.softmax(-1)
        expected = attention_rollout([w[None] for w in weights])[0].numpy()
        return Case(description=description, args={"weights": weights.numpy()}, expected=expected, atol=1e-12,
                    rtol=1e-9, hint=ROLLOUT_EXPLAIN, diagnose=_diagnose_rollout)

    return [case("2 layers, 1 head, 3 tokens", 2, 1, 3, 0),
            case("2 layers, 4 heads, 5 tokens", 2, 4, 5, 1),
            case("3 layers, 2 heads, 4 tokens", 3, 2, 4, 2),
            case("one layer", 1, 2, 4, 3)] + _drawn_rollouts(_drawing(seed), case)


def _drawn_rollouts(rng: np.random.Generator | None, case: Callable[..., Case]) -> list[Case]:
    drawn = []
    for _ in range(2 if rng is not None else 0):
        layers, h, n = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(2, 7))
        drawn.append(case(f"drawn when graded: {layers} layers, {h} heads, {n} tokens", layers, h, n,
                          _inner_seed(rng)))
    return drawn


@allowing("NumPy operations: means, np.eye and matrix products (@).")
def check_rollout(fn: Callable[[np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``my_rollout(weights)``: ``(layers, heads, T, T)`` -> the ``(T, T)`` rollout."""
    return run_cases("check_rollout", fn, rollout_cases(), references=(attention_rollout,))


# --------------------------------------------------------------------------- mean pooling

POOL_EXPLAIN = "Average each sequence's states over its real positions only (mask True), not over the padding."
PADDING_HINT = "The padding was averaged in: divide the sum over the real positions by how many there are."
SUM_HINT = "That is a sum: divide by the number of real positions."


def _diagnose_pool(got: Any, case: Case) -> str | None:
    states, mask = case.args.values()
    summed = (states * mask[..., None]).sum(1)
    return variant_hint(got, [(PADDING_HINT, states.mean(1)), (SUM_HINT, summed)], np.asarray(case.expected),
                        case)


def mean_pool_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_mean_pool`; with ``seed``, two more drawn from it."""
    def case(description: str, lengths: list[int], t: int, d: int, seed: int) -> Case:
        rng = np.random.default_rng(seed)
        states = rng.normal(size=(len(lengths), t, d))
        mask = np.arange(t)[None] < np.array(lengths)[:, None]
        expected = np.stack([s[:n].mean(0) for s, n in zip(states, lengths)])
        return Case(description=description, args={"states": states, "mask": mask}, expected=expected,
                    atol=1e-12, rtol=1e-9, hint=POOL_EXPLAIN, diagnose=_diagnose_pool)

    return [case("two sequences, lengths 3 and 5", [3, 5], 5, 4, 0),
            case("no padding", [4, 4], 4, 2, 1),
            case("a sequence of one real position", [1, 6, 2], 6, 3, 2)] + _drawn_pools(_drawing(seed), case)


def _drawn_pools(rng: np.random.Generator | None, case: Callable[..., Case]) -> list[Case]:
    drawn = []
    for _ in range(2 if rng is not None else 0):
        t, d = int(rng.integers(1, 8)), int(rng.integers(1, 6))
        lengths = [int(v) for v in rng.integers(1, t + 1, size=int(rng.integers(1, 5)))]
        drawn.append(case(f"drawn when graded: lengths {lengths}, T={t}", lengths, t, d, _inner_seed(rng)))
    return drawn


@allowing("NumPy operations: products, sums and division.")
def check_mean_pool(fn: Callable[[np.ndarray, np.ndarray], Any]) -> CheckResult:
    """Check a learner's ``my_mean_pool(states, mask)``: ``(batch, T, d)`` and ``(batch, T)`` bool -> ``(batch, d)``."""
    return run_cases("check_mean_pool", fn, mean_pool_cases(), references=(mean_pool,))


# --------------------------------------------------------------------------- high-norm tokens

NORM_EXPLAIN = ("Take each token's Euclidean norm (over the d_model features), and count the tokens whose norm "
                "exceeds factor times the median of the norms; return that count over the number of tokens.")
MEAN_HINT = "The threshold uses the mean norm: use the median, which a few huge tokens do not move."
SQUARED_HINT = "Those are squared norms compared with factor times their median: take the square root first."


def _share(states: np.ndarray, factor: float, centre=np.mean, power: float = 1.0) -> float:
    """A wrong version: the threshold from another centre, or squared norms."""
    norms = np.linalg.norm(states, axis=-1) ** power
    return float((norms > factor * centre(norms)).mean())


def _diagnose_share(got: Any, case: Case) -> str | None:
    states, factor = case.args.values()
    variants = [(MEAN_HINT, _share(states, factor)),
                (SQUARED_HINT, _share(states, factor, np.median, power=2.0))]
    return variant_hint(got, variants, np.asarray(case.expected), case)


def high_norm_share_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_high_norm_share`; with ``seed``, two more drawn from it."""
    def case(description: str, n: int, d: int, outliers: list[float], factor: float, seed: int) -> Case:
        rng = np.random.default_rng(seed)
        states = rng.normal(size=(n, d))
        for k, scale in enumerate(outliers):
            states[k] *= scale
        return Case(description=description, args={"states": states, "factor": factor},
                    expected=high_norm_share(torch.as_tensor(states), factor), atol=1e-12, rtol=0, hint=NORM_EXPLAIN,
                    diagnose=_diagnose_share)

    return [case("40 tokens, 3 of them 10 times larger", 40, 16, [10, 12, 9], 2.0, 0),
            case("no outlier", 30, 8, [], 2.0, 1),
            case("one huge token among 17, factor 1.2", 17, 32, [25], 1.2, 2),
            case("half of the tokens 3 times larger, factor 1.5", 20, 8, [3] * 10, 1.5, 3)] + _drawn_norms(
                _drawing(seed), case)


def _drawn_norms(rng: np.random.Generator | None, case: Callable[..., Case]) -> list[Case]:
    drawn = []
    for _ in range(2 if rng is not None else 0):
        n, d = int(rng.integers(10, 41)), int(rng.integers(4, 17))
        outliers = [float(v) for v in rng.uniform(4, 15, size=int(rng.integers(0, 4)))]
        factor = float(rng.choice([1.5, 2.0, 3.0]))
        drawn.append(case(f"drawn when graded: {n} tokens, {len(outliers)} large, factor {factor}", n, d,
                          outliers, factor, _inner_seed(rng)))
    return drawn


@allowing("NumPy operations: np.linalg.norm (or squares and np.sqrt), np.median, comparisons "
          "and means.")
def check_high_norm_share(fn: Callable[[np.ndarray, float], Any]) -> CheckResult:
    """Check a learner's ``my_high_norm_share(states, factor)``: ``(n, d)`` -> the share (a float) of rows
    whose norm exceeds ``factor`` times the median norm."""
    return run_cases("check_high_norm_share", fn, high_norm_share_cases(), references=(high_norm_share,))


__all__ = ["check_bert_mask", "check_high_norm_share", "check_mean_pool", "check_padded_attention",
           "check_patchify", "check_rollout"]

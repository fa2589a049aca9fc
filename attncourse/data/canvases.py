"""Canvases of handwritten digits: data for attention over images (chapter 6).

Source: Alpaydin & Kaynak (1998), "Optical Recognition of Handwritten Digits", UCI.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Side of one digit image, in pixels.
DIGIT_SIZE = 8

#: Number of images in ``sklearn.datasets.load_digits``.
NUM_SOURCE_IMAGES = 1797

#: The relations :func:`digit_relation_task` knows.
RELATIONS: tuple[str, ...] = ("equal", "less")

#: Side of a clutter fragment, in pixels.
FRAGMENT_SIZE = 4

_SPLIT_NAMES = ("train", "valid", "test")


@lru_cache(maxsize=1)
def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 digits as float32 images (1797, 8, 8) in [0, 1], and labels (1797,)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the digit canvases need scikit-learn (it ships the 8x8 digits): pip install scikit-learn"
        ) from err
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_digit_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits, scaled to [0, 1].

    Returns images (1797, 8, 8) float32, read-only; labels (1797,) int64, read-only.
    Raises ImportError if scikit-learn is not installed.
    """
    return _load_digits()


@dataclass(frozen=True)
class CanvasDataset:
    """Canvases with their labels and where each digit was pasted: images (n, 1, height,
    width) float32; targets (n, k) or (n,); digits, sources (n, k); positions (n, k, 2).
    """

    images: np.ndarray
    targets: np.ndarray
    digits: np.ndarray
    sources: np.ndarray
    positions: np.ndarray
    name: str = "canvases"

    def __post_init__(self) -> None:
        n = self.images.shape[0]
        for field in ("targets", "digits", "sources", "positions"):
            array = getattr(self, field)
            if array.shape[0] != n:
                raise ValueError(f"{self.name}: {field} has {array.shape[0]} rows, images {self.images.shape} has {n}")
        for array in (self.images, self.targets, self.digits, self.sources, self.positions):
            array.setflags(write=False)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def k(self) -> int:
        """Digits per canvas."""
        return int(self.digits.shape[1])

    def tensors(self):
        """``(images, targets)`` as torch tensors: float32 (n, 1, height, width) and int64."""
        import torch

        return torch.from_numpy(self.images.copy()), torch.from_numpy(self.targets.copy())


@dataclass(frozen=True)
class CanvasSplits:
    """Train, validation and test canvases drawn from disjoint ``pools`` of source images."""

    train: CanvasDataset
    valid: CanvasDataset
    test: CanvasDataset
    pools: dict


def _validate_counts(n_train: int, n_valid: int, n_test: int) -> tuple[int, int, int]:
    counts = []
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if int(value) != value or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        counts.append(int(value))
    return counts[0], counts[1], counts[2]


def _validate_fractions(pool_fractions) -> np.ndarray:
    fractions = np.asarray(pool_fractions, dtype=np.float64)
    if fractions.shape != (3,) or not np.all(fractions > 0):
        raise ValueError(
            f"pool_fractions must be three positive numbers (train, valid, test), got {pool_fractions!r}"
        )
    return fractions / fractions.sum()


def source_pools(seed: int = 0, pool_fractions=(0.6, 0.2, 0.2)) -> dict[str, np.ndarray]:
    """Divide the 1797 source images into disjoint train / valid / test pools.

    Raises ValueError if ``pool_fractions`` is not three positive numbers.
    """
    fractions = _validate_fractions(pool_fractions)
    _, labels = _load_digits()
    rng = np.random.default_rng([int(seed), 1797])
    parts: dict[str, list[np.ndarray]] = {name: [] for name in _SPLIT_NAMES}
    for label in range(10):
        ids = rng.permutation(np.flatnonzero(labels == label))
        cuts = np.round(np.cumsum(fractions)[:2] * len(ids)).astype(int)
        for name, part in zip(_SPLIT_NAMES, np.split(ids, cuts)):
            parts[name].append(part)
    return {name: np.sort(np.concatenate(p)).astype(np.int64) for name, p in parts.items()}


def _paste(canvas: np.ndarray, patch: np.ndarray, row: int, col: int) -> None:
    """Draw ``patch`` onto ``canvas`` at (row, col), keeping the brighter pixel."""
    h, w = patch.shape
    np.maximum(canvas[row:row + h, col:col + w], patch, out=canvas[row:row + h, col:col + w])


def _add_clutter(canvas: np.ndarray, boxes: list[tuple[int, int]], pool: np.ndarray,
                 clutter: int, rng: np.random.Generator) -> None:
    """Paste ``clutter`` random 4x4 pieces of pool digits, away from ``boxes`` if possible."""
    images, _ = _load_digits()
    height, width = canvas.shape
    f = FRAGMENT_SIZE
    for _ in range(clutter):
        source = images[pool[rng.integers(len(pool))]]
        r0, c0 = rng.integers(0, DIGIT_SIZE - f + 1, size=2)
        piece = source[r0:r0 + f, c0:c0 + f]
        for _attempt in range(20):
            row, col = int(rng.integers(0, height - f + 1)), int(rng.integers(0, width - f + 1))
            free = all(
                row + f <= r or r + DIGIT_SIZE <= row or col + f <= c or c + DIGIT_SIZE <= col
                for r, c in boxes
            )
            if free:
                break
        _paste(canvas, piece, row, col)


def _draw_sources(pool: np.ndarray, labels_wanted: np.ndarray, rng: np.random.Generator,
                  distinct: bool) -> np.ndarray:
    """A random pool source per wanted label, distinct within a row."""
    _, labels = _load_digits()
    by_label = {c: pool[labels[pool] == c] for c in range(10)}
    out = np.empty(labels_wanted.shape, dtype=np.int64)
    for i, row in enumerate(labels_wanted):
        used: set[int] = set()
        for j, c in enumerate(row):
            candidates = by_label[int(c)]
            if distinct and len(candidates) > 1:
                candidates = candidates[~np.isin(candidates, list(used))]
            out[i, j] = candidates[rng.integers(len(candidates))]
            used.add(int(out[i, j]))
    return out


def _render(sources: np.ndarray, positions: np.ndarray, height: int, width: int,
            clutter: int, pool: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    images, _ = _load_digits()
    n = sources.shape[0]
    canvases = np.zeros((n, 1, height, width), dtype=np.float32)
    for i in range(n):
        boxes = [(int(r), int(c)) for r, c in positions[i]]
        for s, (r, c) in zip(sources[i], boxes):
            _paste(canvases[i, 0], images[s], r, c)
        if clutter:
            _add_clutter(canvases[i, 0], boxes, pool, clutter, rng)
    return canvases


def _validate_canvas(height: int, width: int, min_width: int, what: str) -> None:
    if int(height) != height or int(width) != width:
        raise ValueError(f"height and width must be ints, got ({height!r}, {width!r})")
    if height < DIGIT_SIZE or width < min_width:
        raise ValueError(
            f"a canvas of (height, width) = ({height}, {width}) is too small for {what}: "
            f"need height >= {DIGIT_SIZE} and width >= {min_width}"
        )


def _canvas_split(n: int, k: int, height: int, width: int, clutter: int,
                  pool: np.ndarray, rng: np.random.Generator, name: str) -> CanvasDataset:
    _, labels = _load_digits()
    sources = pool[rng.integers(len(pool), size=(n, k))]
    # Random spacing without overlap: the `slack` free columns are cut into
    # k + 1 gaps at k sorted uniform points, so digit j starts at
    # point_j + 8 j and ends before digit j + 1 starts.
    slack = width - k * DIGIT_SIZE
    cols = np.sort(rng.integers(0, slack + 1, size=(n, k)), axis=1) + DIGIT_SIZE * np.arange(k)
    rows = rng.integers(0, height - DIGIT_SIZE + 1, size=(n, k))
    positions = np.stack([rows, cols], axis=-1).astype(np.int64)
    images = _render(sources, positions, height, width, clutter, pool, rng)
    digits = labels[sources]
    return CanvasDataset(images=images, targets=digits.copy(), digits=digits, sources=sources,
                         positions=positions, name=name)


def digit_canvas_task(
    n_train: int,
    n_valid: int,
    n_test: int,
    k: int = 3,
    height: int = 16,
    width: int = 48,
    clutter: int = 0,
    seed: int = 0,
    pool_fractions=(0.6, 0.2, 0.2),
) -> CanvasSplits:
    """Canvases with ``k`` digits; the target is the digits read left to right.

    Raises ValueError if a count or ``clutter`` is negative, ``k < 1``, or the canvas is
    too small (``height < 8`` or ``width < 8 k``). Source: Mnih et al. (2014), section 4.1.
    """
    counts = _validate_counts(n_train, n_valid, n_test)
    if int(k) != k or k < 1:
        raise ValueError(f"k (digits per canvas) must be a positive int, got {k!r}")
    if int(clutter) != clutter or clutter < 0:
        raise ValueError(f"clutter must be a non-negative int, got {clutter!r}")
    _validate_canvas(height, width, k * DIGIT_SIZE, f"k={k} digits of {DIGIT_SIZE}x{DIGIT_SIZE}")
    pools = source_pools(seed, pool_fractions)
    splits = {}
    for index, (name, n) in enumerate(zip(_SPLIT_NAMES, counts)):
        rng = np.random.default_rng([int(seed), index, 1])
        splits[name] = _canvas_split(n, int(k), int(height), int(width), int(clutter), pools[name],
                                     rng, f"digits{k}-{name}")
    return CanvasSplits(pools=pools, **splits)


def _relation_holds(relation: str, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    if relation == "equal":
        return left == right
    return left < right


def _relation_pairs(relation: str, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Digit pairs (n, 2) whose relation value is ``labels`` (0/1), uniform among such pairs."""
    all_pairs = np.array([(a, b) for a in range(10) for b in range(10)], dtype=np.int64)
    holds = _relation_holds(relation, all_pairs[:, 0], all_pairs[:, 1])
    if relation == "less":
        # Equal digits would be negatives no model can tell apart from the
        # mirrored pair by content alone; keep only a != b so that the label
        # is decided by the order of two different digits.
        different = all_pairs[:, 0] != all_pairs[:, 1]
        all_pairs, holds = all_pairs[different], holds[different]
    positives, negatives = all_pairs[holds], all_pairs[~holds]
    pick_pos = positives[rng.integers(len(positives), size=len(labels))]
    pick_neg = negatives[rng.integers(len(negatives), size=len(labels))]
    return np.where(labels[:, None] == 1, pick_pos, pick_neg)


def digit_relation_task(
    n_train: int,
    n_valid: int,
    n_test: int,
    height: int = 16,
    width: int = 48,
    seed: int = 0,
    relation: str = "equal",
    min_gap: int | None = None,
    pool_fractions=(0.6, 0.2, 0.2),
) -> CanvasSplits:
    """Canvases with two far-apart digits; the target says whether a relation holds.

    Raises ValueError if a count or ``min_gap`` is negative, ``relation`` is unknown, or
    the canvas cannot hold two digits ``min_gap`` apart. Source: Wang et al. (2018), sec. 1.
    """
    counts = _validate_counts(n_train, n_valid, n_test)
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if min_gap is None:
        min_gap = max(0, int(width) // 2 - DIGIT_SIZE)
    if int(min_gap) != min_gap or min_gap < 0:
        raise ValueError(f"min_gap must be a non-negative int, got {min_gap!r}")
    min_gap = int(min_gap)
    _validate_canvas(height, width, 2 * DIGIT_SIZE + min_gap, f"two digits {min_gap} columns apart")
    height, width = int(height), int(width)
    pools = source_pools(seed, pool_fractions)
    splits = {}
    for index, (name, n) in enumerate(zip(_SPLIT_NAMES, counts)):
        rng = np.random.default_rng([int(seed), index, 2])
        targets = rng.permutation(np.arange(n) < n // 2).astype(np.int64)
        digits = _relation_pairs(relation, targets, rng)
        sources = _draw_sources(pools[name], digits, rng, distinct=True)
        left = rng.integers(0, width - 2 * DIGIT_SIZE - min_gap + 1, size=n)
        right = left + DIGIT_SIZE + min_gap + rng.integers(0, width - 2 * DIGIT_SIZE - min_gap - left + 1)
        rows = rng.integers(0, height - DIGIT_SIZE + 1, size=(n, 2))
        positions = np.stack([rows, np.stack([left, right], axis=1)], axis=-1).astype(np.int64)
        images = _render(sources, positions, height, width, 0, pools[name], rng)
        splits[name] = CanvasDataset(images=images, targets=targets, digits=digits, sources=sources,
                                     positions=positions, name=f"{relation}-{name}")
    return CanvasSplits(pools=pools, **splits)

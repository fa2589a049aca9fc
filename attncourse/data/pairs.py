"""Sequence-to-sequence data: (source, target) token pairs, splits, and TSV files.

Every task of the sequence-to-sequence chapter (numbers, dates, your own data)
produces the same objects: a :class:`PairDataset` of token pairs, and a
:class:`Splits` with train / valid / test datasets. Tokens are words
(``level="word"``) or characters (``level="char"``).

Your own data is a UTF-8 text file with one pair per line, source and target
separated by a single TAB::

    seventy-one<TAB>soixante et onze
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

LEVELS = ("word", "char")

Tokens = tuple[str, ...]
Pair = tuple[Tokens, Tokens]


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")


def tokenize(text: str, level: str) -> list[str]:
    """Split text into tokens.

    Parameters
    ----------
    text : str
    level : {"word", "char"}
        ``"word"``: split on runs of whitespace. ``"char"``: every character
        (spaces included) is a token.

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        If ``level`` is not ``"word"`` or ``"char"``.
    """
    _check_level(level)
    return text.split() if level == "word" else list(text)


def detokenize(tokens: list[str] | tuple[str, ...], level: str) -> str:
    """Join tokens back into text: the inverse of :func:`tokenize`.

    ``"word"`` joins with single spaces, ``"char"`` with nothing.

    Raises
    ------
    ValueError
        If ``level`` is not ``"word"`` or ``"char"``.
    """
    _check_level(level)
    return (" " if level == "word" else "").join(tokens)


@dataclass(frozen=True)
class PairDataset:
    """An immutable list of (source tokens, target tokens) pairs.

    Attributes
    ----------
    pairs : tuple of (tuple of str, tuple of str)
        ``pairs[i] = (x_1..x_S, y_1..y_T)``, without special tokens.
    level : {"word", "char"}
        How the text was split into tokens; :func:`detokenize` undoes it.
    name : str
        For messages and figure titles, e.g. ``"numbers-fr-train"``.

    Raises
    ------
    ValueError
        If ``level`` is unknown or a source or target is empty.
    """

    pairs: tuple[Pair, ...]
    level: str = "word"
    name: str = "pairs"

    def __post_init__(self) -> None:
        _check_level(self.level)
        # Store tuples whatever sequences came in, so the dataset stays hashable and immutable.
        pairs = tuple((tuple(src), tuple(tgt)) for src, tgt in self.pairs)
        for i, (src, tgt) in enumerate(pairs):
            if not src or not tgt:
                side = "source" if not src else "target"
                raise ValueError(f"{self.name}: pair {i} has an empty {side}")
        object.__setattr__(self, "pairs", pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> Pair:
        return self.pairs[i]

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs)

    def src_lengths(self) -> np.ndarray:
        """Source lengths S in tokens, shape (n_pairs,), int64 (no special tokens)."""
        return np.fromiter((len(s) for s, _ in self.pairs), dtype=np.int64, count=len(self.pairs))

    def tgt_lengths(self) -> np.ndarray:
        """Target lengths T in tokens, shape (n_pairs,), int64 (no special tokens)."""
        return np.fromiter((len(t) for _, t in self.pairs), dtype=np.int64, count=len(self.pairs))

    def texts(self, i: int) -> tuple[str, str]:
        """Pair ``i`` as (source text, target text), joined with :func:`detokenize`."""
        src, tgt = self.pairs[i]
        return detokenize(src, self.level), detokenize(tgt, self.level)


@dataclass(frozen=True)
class Splits:
    """Train, validation and test datasets of one task."""

    train: PairDataset
    valid: PairDataset
    test: PairDataset


def load_tsv(path: str | PathLike, level: str = "word", name: str | None = None) -> PairDataset:
    """Read ``source<TAB>target`` lines from a UTF-8 file.

    Blank lines are skipped; spaces around each side are stripped; a UTF-8 byte
    order mark at the start is ignored.

    Parameters
    ----------
    path : str or path-like
    level : {"word", "char"}
        How to split each side into tokens (see :func:`tokenize`).
    name : str, optional
        Dataset name; defaults to the file name without extension.

    Returns
    -------
    PairDataset

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a line has no TAB, more than one TAB, an empty source or target,
        or is not valid UTF-8; the message names the file and the 1-based line
        number. Also if the file holds no pairs at all.
    """
    _check_level(level)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    pairs = []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}, line {lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{where}: not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                    "save the file as UTF-8"
                ) from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            n_tabs = line.count("\t")
            if n_tabs == 0:
                raise ValueError(f"{where}: no TAB between source and target")
            if n_tabs > 1:
                raise ValueError(f"{where}: {n_tabs} TABs, expected exactly one between source and target")
            src, tgt = (side.strip() for side in line.split("\t"))
            if not src:
                raise ValueError(f"{where}: empty source (nothing before the TAB)")
            if not tgt:
                raise ValueError(f"{where}: empty target (nothing after the TAB)")
            pairs.append((tuple(tokenize(src, level)), tuple(tokenize(tgt, level))))
    if not pairs:
        raise ValueError(f"{path}: no source<TAB>target pairs found")
    return PairDataset(tuple(pairs), level=level, name=path.stem if name is None else name)


def save_tsv(dataset: PairDataset, path: str | PathLike) -> None:
    """Write a dataset as UTF-8 ``source<TAB>target`` lines, readable by :func:`load_tsv`.

    Raises
    ------
    ValueError
        If a token contains a TAB or a line break, or (word level) a space, or
        a side would start or end with whitespace (char level): such a file
        would not read back to the same tokens.
    """
    lines = []
    for i, (src, tgt) in enumerate(dataset.pairs):
        texts = []
        for side, tokens in (("source", src), ("target", tgt)):
            text = detokenize(tokens, dataset.level)
            reads_back = tuple(tokenize(text.strip(), dataset.level)) == tuple(tokens)
            if not reads_back or any(c in text for c in "\t\r\n"):
                raise ValueError(
                    f"{dataset.name}: pair {i} {side} {tokens!r} would not read back from a TSV file "
                    "(a token holds a TAB, a line break or, at word level, a space; "
                    "or, at char level, the text starts or ends with whitespace)"
                )
            texts.append(text)
        lines.append("\t".join(texts) + "\n")
    Path(path).write_text("".join(lines), encoding="utf-8", newline="\n")

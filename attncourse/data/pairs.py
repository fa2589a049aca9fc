"""Sequence-to-sequence data: (source, target) token pairs, splits, and TSV files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

LEVELS = ("word", "char")

Tokens = tuple[str, ...]
Pair = tuple[Tokens, Tokens]


def _validate_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")


def tokenize(text: str, level: str) -> list[str]:
    """Split text into tokens.

    Raises ValueError if ``level`` is not ``"word"`` or ``"char"``.
    """
    _validate_level(level)
    return text.split() if level == "word" else list(text)


def detokenize(tokens: list[str] | tuple[str, ...], level: str) -> str:
    """Join tokens back into text: the inverse of :func:`tokenize`.

    Raises ValueError if ``level`` is not ``"word"`` or ``"char"``.
    """
    _validate_level(level)
    return (" " if level == "word" else "").join(tokens)


@dataclass(frozen=True)
class PairDataset:
    """An immutable list of (source tokens, target tokens) pairs.

    Raises ValueError if ``level`` is unknown or a source or target is empty.
    """

    pairs: tuple[Pair, ...]
    level: str = "word"
    name: str = "pairs"

    def __post_init__(self) -> None:
        _validate_level(self.level)
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
        """Source lengths ``(n_pairs,)`` int64, in tokens, without special tokens."""
        return np.fromiter((len(s) for s, _ in self.pairs), dtype=np.int64, count=len(self.pairs))

    def tgt_lengths(self) -> np.ndarray:
        """Target lengths ``(n_pairs,)`` int64, in tokens, without special tokens."""
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


class TSVError(ValueError):
    """A TSV file that cannot be read as ``source<TAB>target`` pairs."""

    def __init__(self, path: Path, lineno: int | None, problem: str) -> None:
        where = f"{path}, line {lineno}" if lineno is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path, self.lineno = path, lineno


def _parse_line(raw: bytes, path: Path, lineno: int) -> tuple[str, str] | None:
    """(source, target) of one raw line, None if blank; TSVError if malformed."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TSVError(path, lineno, f"not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                                     "save the file as UTF-8") from None
    if lineno == 1:
        line = line.removeprefix("\ufeff")
    line = line.rstrip("\r\n")
    if "\r" in line:  # a file with CR-only line ends reads as one line full of CRs
        raise TSVError(path, lineno, "a carriage return (CR) inside the line: the file seems to end its lines "
                                     "with CR alone (old Mac style); save it with LF or CRLF line ends")
    if not line.strip():
        return None
    n_tabs = line.count("\t")
    if n_tabs == 0:
        raise TSVError(path, lineno, "no TAB between source and target")
    if n_tabs > 1:
        raise TSVError(path, lineno, f"{n_tabs} TABs, expected exactly one between source and target")
    src, tgt = (side.strip() for side in line.split("\t"))
    if not src:
        raise TSVError(path, lineno, "empty source (nothing before the TAB)")
    if not tgt:
        raise TSVError(path, lineno, "empty target (nothing after the TAB)")
    return src, tgt


def read_tsv(
    path: str | PathLike,
    level: str = "word",
    name: str | None = None,
    *,
    max_src_tokens: int | None = None,
    max_tgt_tokens: int | None = None,
    skip_long: bool = False,
    hint: str = "",
) -> tuple[PairDataset, list[int]]:
    """Read ``source<TAB>target`` lines from a UTF-8 file, with limits on their lengths.

    Raises FileNotFoundError, IsADirectoryError; TSVError (a ValueError naming the file
    and 1-based line) for a malformed or (without ``skip_long``) too long line.
    """
    _validate_level(level)
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a directory, not a TSV file")
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    limits = {"source": max_src_tokens, "target": max_tgt_tokens}
    pairs, skipped = [], []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            texts = _parse_line(raw, path, lineno)
            if texts is None:
                continue
            tokens = [tokenize(text, level) for text in texts]
            too_long = [(side, len(t), limit) for (side, limit), t in zip(limits.items(), tokens)
                        if limit is not None and len(t) > limit]
            if too_long and skip_long:
                skipped.append(lineno)
            elif too_long:
                side, n, limit = too_long[0]
                raise TSVError(path, lineno, f"the {side} has {n:,} {level} tokens, more than the limit of "
                                             f"{limit:,}" + (f"; {hint}" if hint else ""))
            else:
                pairs.append((tuple(tokens[0]), tuple(tokens[1])))
    if not pairs:
        why = f" ({len(skipped)} left out for their length)" if skipped else ""
        raise TSVError(path, None, f"no source<TAB>target pairs found{why}")
    return PairDataset(tuple(pairs), level=level, name=path.stem if name is None else name), skipped


def load_tsv(path: str | PathLike, level: str = "word", name: str | None = None) -> PairDataset:
    """:func:`read_tsv` without length limits; raises as it does."""
    return read_tsv(path, level, name)[0]


def save_tsv(dataset: PairDataset, path: str | PathLike) -> None:
    """Write UTF-8 ``source<TAB>target`` lines, readable by :func:`load_tsv`.

    Raises ValueError if a token holds a TAB, a line break or (word level) a space, or a
    side starts or ends with whitespace.
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

"""Copy, reverse and sort: toy sequence-to-sequence tasks for checking a Transformer.

Source: Sutskever et al. (2014), "Sequence to Sequence Learning with Neural Networks".
"""

from __future__ import annotations

import itertools
import random

from attncourse.data.pairs import PairDataset, Splits

#: The tasks :func:`toy_task` knows.
TOY_KINDS: tuple[str, ...] = ("copy", "reverse", "sort")

#: Every symbol a toy sequence may use, in sort order; ``vocab_size`` takes a prefix.
SYMBOLS: tuple[str, ...] = tuple("0123456789abcdefghijklmnopqrstuvwxyz")

# A length with at most this many sequences is enumerated and shuffled; longer
# lengths are sampled with rejection of repeats (they are too many to list and
# repeats are rare).
_ENUMERATE_BELOW = 50_000

Tokens = tuple[str, ...]


def toy_symbols(vocab_size: int) -> tuple[str, ...]:
    """The first ``vocab_size`` symbols: digits, then letters.

    Raises ValueError if ``vocab_size`` is not in 2..36.
    """
    if not 2 <= int(vocab_size) <= len(SYMBOLS):
        raise ValueError(f"vocab_size must lie in 2..{len(SYMBOLS)} (digits, then letters), got {vocab_size}")
    return SYMBOLS[: int(vocab_size)]


def toy_target(kind: str, source: Tokens | list[str]) -> Tokens:
    """The target of one source sequence.

    Raises ValueError if ``kind`` is unknown, or a symbol of a sort task is not in
    :data:`SYMBOLS`.
    """
    if kind not in TOY_KINDS:
        raise ValueError(f"kind must be one of {TOY_KINDS}, got {kind!r}")
    source = tuple(source)
    if kind == "copy":
        return source
    if kind == "reverse":
        return source[::-1]
    unknown = [s for s in source if s not in SYMBOLS]
    if unknown:
        raise ValueError(f"cannot sort symbols outside {''.join(SYMBOLS)!r}: {unknown}")
    return tuple(sorted(source, key=SYMBOLS.index))


def draw_sequences(
    count: int, vocab_size: int = 10, min_len: int = 1, max_len: int = 10, seed: int = 0
) -> list[Tokens]:
    """Draw distinct random symbol sequences, their lengths spread evenly.

    Raises ValueError if a length bound is out of order or below 1, ``count`` is
    negative, or fewer than ``count`` distinct sequences exist.
    """
    symbols = toy_symbols(vocab_size)
    if int(min_len) < 1 or int(max_len) < int(min_len):
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if int(count) < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    lengths = list(range(int(min_len), int(max_len) + 1))
    sizes = {n: len(symbols) ** n for n in lengths}
    if count > sum(sizes.values()):
        raise ValueError(
            f"only {sum(sizes.values())} distinct sequences of length {min_len}..{max_len} exist over "
            f"{len(symbols)} symbols, {count} were asked for; raise max_len or vocab_size"
        )
    rng = random.Random(seed)
    listed: dict[int, list[Tokens]] = {}
    used: dict[int, set[Tokens]] = {n: set() for n in lengths}
    live = list(lengths)
    out: list[Tokens] = []
    while len(out) < count:
        n = live[rng.randrange(len(live))]
        if sizes[n] <= _ENUMERATE_BELOW:
            if n not in listed:
                listed[n] = list(itertools.product(symbols, repeat=n))
                rng.shuffle(listed[n])
            seq = listed[n][len(used[n])]
        else:
            seq = tuple(rng.choice(symbols) for _ in range(n))
            while seq in used[n]:
                seq = tuple(rng.choice(symbols) for _ in range(n))
        used[n].add(seq)
        out.append(seq)
        if len(used[n]) == sizes[n]:
            live.remove(n)
    return out


def toy_task(
    kind: str,
    n_train: int = 5000,
    n_valid: int = 500,
    n_test: int = 500,
    vocab_size: int = 10,
    min_len: int = 1,
    max_len: int = 10,
    seed: int = 0,
) -> Splits:
    """A copy, reverse or sort task, split disjointly by source sequence.

    Raises ValueError if ``kind`` is unknown, a count is negative, the lengths or
    ``vocab_size`` are out of range, or fewer distinct sources exist than asked for.
    """
    if kind not in TOY_KINDS:
        raise ValueError(f"kind must be one of {TOY_KINDS}, got {kind!r}")
    for arg, v in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if int(v) < 0:
            raise ValueError(f"{arg} must be >= 0, got {v}")
    sources = draw_sequences(n_test + n_valid + n_train, vocab_size, min_len, max_len, seed)
    random.Random(seed).shuffle(sources)
    parts = {
        "test": sources[:n_test],
        "valid": sources[n_test : n_test + n_valid],
        "train": sources[n_test + n_valid :],
    }
    datasets = {
        split: PairDataset(tuple((s, toy_target(kind, s)) for s in seqs), level="word", name=f"{kind}-{split}")
        for split, seqs in parts.items()
    }
    return Splits(train=datasets["train"], valid=datasets["valid"], test=datasets["test"])

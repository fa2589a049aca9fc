"""Number translation: English number words to French or German number words.

Source: num2words 0.5.14 (https://github.com/savoirfairelinux/num2words).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from functools import cache, lru_cache
from operator import index

from num2words import CONVERTER_CLASSES, num2words

from attncourse.data.pairs import PairDataset, Splits

#: Languages :func:`number_words` knows (ISO 639-1 codes, as num2words spells them).
LANGS: tuple[str, ...] = ("en", "fr", "de")

#: The parts German number words are made of, lower case. :func:`split_german` matches
#: them greedily, longest first. Teens are single parts, like English "fourteen".
GERMAN_MORPHEMES: tuple[str, ...] = (
    "null", "ein", "eins", "eine", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun",
    "zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn",
    "neunzehn", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig",
    "hundert", "tausend", "und",
    "million", "millionen", "milliarde", "milliarden", "billion", "billionen", "billiarde", "billiarden",
)  # fmt: skip

# A regex alternation tries its branches in order, so listing the parts longest
# first makes each match the greedy longest one.
_GERMAN_PART = re.compile("|".join(sorted(GERMAN_MORPHEMES, key=len, reverse=True)))

# number_text builds numbers below this bound from cached pieces; above it, it
# calls num2words directly.
_FAST_LIMIT = 10**12


def _validate_lang(lang: str) -> None:
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")


def _validate_number(n: int) -> int:
    try:
        n = index(n)  # accepts int and numpy integers, refuses floats
    except TypeError:
        raise TypeError(f"numbers must be integers, got {type(n).__name__}: {n!r}") from None
    if n < 0:
        raise ValueError(f"numbers must be non-negative, got {n}")
    return n


@cache
def _small_text(lang: str, n: int) -> str:
    """num2words of 0 <= n < 1000, cached: at most 1000 calls per language."""
    return num2words(n, lang=lang)


def number_text(n: int, lang: str) -> str:
    """The number ``n`` in words, exactly as ``num2words(n, lang=lang)`` writes it.

    Raises ValueError if ``n < 0`` or ``lang`` is unknown; TypeError if ``n`` is not an
    integer.
    """
    n = _validate_number(n)
    _validate_lang(lang)
    if n < 1000:
        return _small_text(lang, n)
    if n >= _FAST_LIMIT:
        return num2words(n, lang=lang)
    conv = CONVERTER_CLASSES[lang]
    low = n % 1000
    acc = (_small_text(lang, low), low) if low else None  # the (words, value) pair of the rest
    for k in (1, 2, 3):
        g = n // 1000**k % 1000
        if not g:
            continue
        scale = 1000**k
        piece = conv.merge((_small_text(lang, g), g), (conv.cards[scale], scale))
        acc = piece if acc is None else conv.merge(piece, acc)
    return conv.title(acc[0])


def split_german(word: str) -> list[str]:
    """Split a German number word into its parts, greedily, longest part first.

    Raises ValueError if some part of ``word`` matches none of :data:`GERMAN_MORPHEMES`.
    """
    return list(_split_german(word))


@lru_cache(maxsize=2**16)
def _split_german(word: str) -> tuple[str, ...]:
    lower = word.lower()
    if len(lower) != len(word) or not word:  # a length-changing case mapping would misalign the slices
        raise ValueError(f"cannot split German number word {word!r}: empty or unexpected characters")
    parts = []
    i = 0
    while i < len(word):
        m = _GERMAN_PART.match(lower, i)
        if m is None:
            raise ValueError(
                f"cannot split German number word {word!r}: {word[i:]!r} (from position {i}) "
                "starts with none of the known parts in GERMAN_MORPHEMES"
            )
        parts.append(word[i : m.end()])
        i = m.end()
    return tuple(parts)


def number_words(n: int, lang: str) -> list[str]:
    """The number ``n`` as word tokens in ``lang``.

    Raises ValueError if ``n < 0`` or ``lang`` is unknown.
    """
    words = number_text(n, lang).replace(",", " ").replace("-", " ").split()
    if lang == "de":
        return [part for w in words for part in split_german(w)]
    return words


def number_pairs(lang: str, numbers: Iterable[int], name: str | None = None) -> PairDataset:
    """English words -> ``lang`` words for each number, in the given order.

    Raises ValueError if ``lang`` is unknown or a number is negative.
    """
    _validate_lang(lang)
    pairs = tuple((tuple(number_words(n, "en")), tuple(number_words(n, lang))) for n in numbers)
    return PairDataset(pairs, level="word", name=f"numbers-en-{lang}" if name is None else name)


def _digit_buckets(min_value: int, max_value: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of the numbers in [min_value, max_value) with 1, 2, 3, ... digits."""
    buckets = []
    lo = 0
    d = 1
    while lo < max_value:
        hi = 10**d
        a, b = max(lo, min_value), min(hi, max_value)
        if a < b:
            buckets.append((a, b))
        lo, d = hi, d + 1
    return buckets


def draw_numbers(count: int, min_value: int = 0, max_value: int = 10**9, seed: int = 0) -> list[int]:
    """Draw distinct numbers in ``[min_value, max_value)``, spread over magnitudes.

    Raises ValueError if the range is empty or holds fewer than ``count`` numbers.
    """
    if min_value < 0 or max_value <= min_value:
        raise ValueError(f"need 0 <= min_value < max_value, got min_value={min_value}, max_value={max_value}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if count > max_value - min_value:
        raise ValueError(
            f"cannot draw {count} distinct numbers from [{min_value}, {max_value}), "
            f"which holds only {max_value - min_value}"
        )
    rng = random.Random(seed)
    buckets = _digit_buckets(min_value, max_value)
    # Each bucket is a lazy Fisher-Yates shuffle: the k-th draw swaps a random
    # position in [k, size) to position k, recording only the swapped entries,
    # so drawing without repeats costs O(1) however large the bucket.
    swapped: list[dict[int, int]] = [{} for _ in buckets]
    dealt = [0] * len(buckets)
    live = list(range(len(buckets)))
    out: list[int] = []
    while len(out) < count:
        b = live[rng.randrange(len(live))]
        lo, hi = buckets[b]
        k, moved = dealt[b], swapped[b]
        j = rng.randrange(k, hi - lo)
        out.append(lo + moved.get(j, j))
        moved[j] = moved.get(k, k)
        dealt[b] = k + 1
        if dealt[b] == hi - lo:
            live.remove(b)
    return out


def number_task(
    lang: str = "fr",
    n_train: int = 3000,
    n_valid: int = 500,
    n_test: int = 1000,
    max_value: int = 10**9,
    seed: int = 0,
    min_value: int = 0,
) -> Splits:
    """English -> French/German number words, split disjointly by number.

    Raises ValueError if ``lang`` is unknown or the range holds fewer numbers than asked
    for.
    """
    _validate_lang(lang)
    for arg, v in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if v < 0:
            raise ValueError(f"{arg} must be >= 0, got {v}")
    numbers = draw_numbers(n_test + n_valid + n_train, min_value=min_value, max_value=max_value, seed=seed)
    random.Random(seed).shuffle(numbers)
    test = numbers[:n_test]
    valid = numbers[n_test : n_test + n_valid]
    train = numbers[n_test + n_valid :]
    return Splits(
        train=number_pairs(lang, train, name=f"numbers-en-{lang}-train"),
        valid=number_pairs(lang, valid, name=f"numbers-en-{lang}-valid"),
        test=number_pairs(lang, test, name=f"numbers-en-{lang}-test"),
    )

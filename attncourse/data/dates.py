"""Date normalisation: human-readable dates in many languages to ISO 8601 ``YYYY-MM-DD``.

Source: Unicode Technical Standard #35 (CLDR), part 4 "Dates".
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Iterable, Sequence
from functools import cache, lru_cache

import numpy as np
from babel import Locale, UnknownLocaleError
from babel.dates import format_date

from attncourse.data.pairs import PairDataset, Splits

#: First and last date of the task (inclusive).
START = dt.date(1950, 1, 1)
END = dt.date(2049, 12, 31)

#: Default locales: 14 languages, Latin script.
LOCALES: tuple[str, ...] = (
    "en_US", "en_GB", "fr_FR", "de_DE", "es_ES", "it_IT", "pt_BR",
    "nl_NL", "sv_SE", "pl_PL", "fi_FI", "da_DK", "cs_CZ", "tr_TR",
)  # fmt: skip

#: Default formats: CLDR's four standard lengths, then our own CLDR patterns
#: (calendar year ``y``, never week year ``Y``).
FORMATS: tuple[str, ...] = (
    "short", "medium", "long", "full",
    "d MMMM y", "EEE d MMM y", "dd.MM.y", "d/M/y",
)  # fmt: skip

#: (locale, format) pairs left out of the defaults because their sources
#: collide with other defaults: US month-first "12/10/24" vs Italian "12/10/24".
EXCLUDED: frozenset[tuple[str, str]] = frozenset({("en_US", "short")})

_NAMED = ("short", "medium", "long", "full")
_QUOTED = re.compile(r"'[^']*'")


@cache
def _locale(name: str) -> Locale:
    try:
        return Locale.parse(name)
    except (ValueError, UnknownLocaleError) as err:
        raise ValueError(f"unknown locale {name!r} ({err})") from None


@cache
def date_pattern(locale: str, fmt: str) -> str:
    """The CLDR pattern that ``fmt`` stands for in ``locale``.

    Raises ValueError if the locale is unknown, or the pattern uses the week-based year
    ``Y`` or lacks a year (``y``), a month (``M``/``L``) or a day (``d``) field.
    """
    pattern = _locale(locale).date_formats[fmt].pattern if fmt in _NAMED else fmt
    letters = _QUOTED.sub("", pattern)  # quoted text such as 'de' is literal
    if "Y" in letters:
        raise ValueError(
            f"pattern {pattern!r} ({locale}, {fmt!r}) uses 'Y', the week-based year, which is "
            "off by one around New Year (2024-12-30 is in week 1 of 2025); use 'y'"
        )
    fields = (("year", "y"), ("month", "ML"), ("day", "d"))
    missing = [name for name, chars in fields if not any(c in letters for c in chars)]
    if missing:
        raise ValueError(f"pattern {pattern!r} ({locale}, {fmt!r}) shows no {' or '.join(missing)}")
    return pattern


def date_source(date: dt.date, locale: str, fmt: str) -> str:
    """Write ``date`` the way ``locale`` does with format ``fmt``.

    Raises ValueError as :func:`date_pattern`.
    """
    text = format_date(date, date_pattern(locale, fmt), locale=_locale(locale))
    return " ".join(text.split())


def date_target(date: dt.date) -> str:
    """ISO 8601 ``YYYY-MM-DD``, e.g. ``"2024-12-30"``."""
    return date.isoformat()


def _combos(locales: Sequence[str] | None, formats: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    combos = itertools.product(LOCALES if locales is None else locales, FORMATS if formats is None else formats)
    if locales is None and formats is None:
        combos = (c for c in combos if c not in EXCLUDED)
    combos = tuple(combos)
    if not combos:
        raise ValueError("give at least one locale and one format")
    for locale, fmt in combos:
        date_pattern(locale, fmt)  # fail early on unknown locales and bad patterns
    return combos


def date_variants(
    date: dt.date, locales: Sequence[str] | None = None, formats: Sequence[str] | None = None
) -> list[tuple[str, str, str]]:
    """``(locale, format, source text)`` of ``date`` in every choice.

    Raises ValueError as :func:`date_pattern`.
    """
    return [(loc, fmt, date_source(date, loc, fmt)) for loc, fmt in _combos(locales, formats)]


_Use = tuple[dt.date, str, str]  # (date, locale, format)


def find_ambiguous(
    locales: Sequence[str] | None = None, formats: Sequence[str] | None = None
) -> list[tuple[str, list[_Use]]]:
    """``(source text, [(date, locale, format), ...])`` for sources two dates share.

    Raises ValueError as :func:`date_pattern`.
    """
    return list(_ambiguities(_combos(locales, formats)))


@lru_cache(maxsize=16)
def _ambiguities(combos: tuple[tuple[str, str], ...]) -> tuple[tuple[str, list[_Use]], ...]:
    seen: dict[str, list[_Use]] = {}
    for year, month, day in itertools.product((2000, 2024), range(1, 13), range(1, 13)):
        date = dt.date(year, month, day)
        for locale, fmt in combos:
            seen.setdefault(date_source(date, locale, fmt), []).append((date, locale, fmt))
    return tuple((text, uses) for text, uses in seen.items() if len({d for d, _, _ in uses}) > 1)


def date_pairs(
    dates: Iterable[dt.date], combos: Sequence[tuple[str, str]], seed: int = 0, name: str = "dates"
) -> PairDataset:
    """A (source, target) character pair per date, in a random (locale, format) of ``combos``.

    Raises ValueError as :func:`date_pattern`.
    """
    dates = list(dates)
    picks = np.random.default_rng(seed).integers(0, len(combos), size=len(dates))
    pairs = tuple(
        (tuple(date_source(d, *combos[c])), tuple(date_target(d))) for d, c in zip(dates, picks.tolist())
    )
    return PairDataset(pairs, level="char", name=name)


def date_task(
    n_train: int = 10000,
    n_valid: int = 1000,
    n_test: int = 2000,
    seed: int = 0,
    locales: Sequence[str] | None = None,
    formats: Sequence[str] | None = None,
) -> Splits:
    """Human-readable dates -> ISO 8601, split disjointly by date.

    Raises ValueError if the range holds fewer dates than asked for, a pattern or locale
    is bad (:func:`date_pattern`), or two dates read the same (:func:`find_ambiguous`).
    """
    sizes = {"n_train": n_train, "n_valid": n_valid, "n_test": n_test}
    for arg, v in sizes.items():
        if v < 0:
            raise ValueError(f"{arg} must be >= 0, got {v}")
    n_days = (END - START).days + 1
    total = n_train + n_valid + n_test
    if total > n_days:
        raise ValueError(f"asked for {total} dates, but {START} to {END} holds only {n_days}")
    combos = _combos(locales, formats)
    if locales is not None or formats is not None:  # the defaults are checked by the tests
        clashes = _ambiguities(combos)
        if clashes:
            text, uses = clashes[0]
            shown = "; ".join(f"{d} in ({loc}, {fmt!r})" for d, loc, fmt in uses[:3])
            raise ValueError(
                f"{len(clashes)} sources stand for two different dates, e.g. {text!r}: {shown}. "
                "Drop one of the clashing locales or formats (see find_ambiguous)."
            )
    rng = np.random.default_rng(seed)
    offsets = rng.permutation(n_days)[:total].tolist()
    dates = [START + dt.timedelta(days=o) for o in offsets]
    # A second generator picks the formats, so the dates drawn do not depend on them.
    fmt_seed = int(rng.integers(2**32))
    return Splits(
        train=date_pairs(dates[n_test + n_valid :], combos, seed=fmt_seed, name="dates-train"),
        valid=date_pairs(dates[n_test : n_test + n_valid], combos, seed=fmt_seed + 1, name="dates-valid"),
        test=date_pairs(dates[:n_test], combos, seed=fmt_seed + 2, name="dates-test"),
    )

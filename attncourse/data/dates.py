"""Date normalisation: human-readable dates in many languages to ISO 8601.

A character-level task for the sequence-to-sequence chapter::

    Montag, 30. Dezember 2024     ->  2024-12-30
    30 de diciembre de 2024       ->  2024-12-30
    30/12/24                      ->  2024-12-30

The sources come from Babel's ``format_date`` with the Unicode CLDR patterns of
several locales, all bundled with Babel, so nothing is downloaded. To produce
the ISO date the model must find the year, month and day in the source, wherever
the locale puts them, and turn month names into numbers: attention learns to
look at different source positions for each output character.

Two traps, and how we avoid them:

* **Week-based years.** In CLDR patterns ``y`` is the calendar year and ``Y`` the
  year of the ISO week, which differs around New Year: 2024-12-30 lies in week 1
  of 2025, so ``"d MMM YYYY"`` would print "30 Dec 2025". Every pattern here uses
  ``y``; :func:`date_source` refuses patterns with ``Y``.
* **Ambiguous sources.** "12/10/24" is 10 December in the United States and 12
  October in Italy. If two (locale, format) choices print different dates the
  same way, no model can be right on both. The default choices leave out the
  US "short" format (``M/d/yy``), the only month-first numeric one;
  :func:`find_ambiguous` checks a choice of your own, and :func:`date_task`
  runs it for you.

Two-digit years ("30/12/24") are unambiguous here because every date lies in
1950-2049: "50" to "99" mean 1950-1999 and "00" to "49" mean 2000-2049, a
rule the model learns from the data. (Software uses other pivots: POSIX
``strptime`` reads "00" to "68" as 2000-2068 and "69" to "99" as 1969-1999, so
it would read "50" as 2050.)

References
----------
Unicode Technical Standard #35 (CLDR), part 4 "Dates", section "Date Field
Symbol Table" (``y`` calendar year, ``Y`` week-based year).
ISO 8601-1:2019, calendar date in extended format ``YYYY-MM-DD``.
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

    Parameters
    ----------
    locale : str
        e.g. ``"de_DE"``.
    fmt : str
        ``"short"``, ``"medium"``, ``"long"``, ``"full"`` or a CLDR pattern.

    Returns
    -------
    str
        e.g. ``date_pattern("de_DE", "short") == "dd.MM.yy"``.

    Raises
    ------
    ValueError
        If the locale is unknown, or the pattern uses the week-based year ``Y``
        or lacks a year (``y``), a month (``M``/``L``) or a day (``d``) field.
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

    Babel's ``format_date`` with the pattern from :func:`date_pattern`; every
    run of whitespace (some locales use no-break spaces) becomes one space.

    Parameters
    ----------
    date : datetime.date
    locale : str
        e.g. ``"fr_FR"``.
    fmt : str
        ``"short"``, ``"medium"``, ``"long"``, ``"full"`` or a CLDR pattern
        with calendar year ``y``.

    Returns
    -------
    str
        e.g. ``date_source(date(2024, 12, 30), "fr_FR", "full") == "lundi 30 décembre 2024"``.

    Raises
    ------
    ValueError
        As :func:`date_pattern`.
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
    """``date`` in every (locale, format) choice, for a look at the task.

    Parameters
    ----------
    date : datetime.date
    locales, formats : sequences of str, optional
        Defaults: :data:`LOCALES` x :data:`FORMATS` without :data:`EXCLUDED`.

    Returns
    -------
    list of (locale, format, source text)

    Raises
    ------
    ValueError
        As :func:`date_pattern`.
    """
    return [(loc, fmt, date_source(date, loc, fmt)) for loc, fmt in _combos(locales, formats)]


_Use = tuple[dt.date, str, str]  # (date, locale, format)


def find_ambiguous(
    locales: Sequence[str] | None = None, formats: Sequence[str] | None = None
) -> list[tuple[str, list[_Use]]]:
    """Sources that two different dates share, among the given choices.

    Every date whose day and month are both at most 12 (where day-first and
    month-first orders can clash) is written in 2000 and 2024 in every
    (locale, format) choice; a text shared by two dates is ambiguous. Month
    names shared by two languages for different months would show up too.

    Parameters
    ----------
    locales, formats : sequences of str, optional
        Defaults as in :func:`date_task`.

    Returns
    -------
    list of (source text, [(date, locale, format), ...])
        Empty when the choice is safe.

    Raises
    ------
    ValueError
        As :func:`date_pattern`.
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
    """One (source, target) character pair per date, each in a random (locale, format).

    Parameters
    ----------
    dates : iterable of datetime.date
    combos : sequence of (locale, format)
    seed : int
        Picks the (locale, format) of each date.
    name : str

    Returns
    -------
    PairDataset
        Character level; targets are ``YYYY-MM-DD``.

    Raises
    ------
    ValueError
        As :func:`date_pattern`.
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

    Dates are drawn uniformly without repeats from :data:`START` to :data:`END`
    (36,525 days); the first ``n_test`` drawn form the test set, the next
    ``n_valid`` the validation set, the rest the training set. Each date
    appears once, in one (locale, format) chosen uniformly, so no test date is
    seen in training in any format.

    Parameters
    ----------
    n_train, n_valid, n_test : int
        Number of pairs per split; together at most 36,525.
    seed : int
    locales : sequence of str, optional
        Babel locale names; default :data:`LOCALES`.
    formats : sequence of str, optional
        ``"short"``, ``"medium"``, ``"long"``, ``"full"`` or CLDR patterns with
        calendar year ``y``; default :data:`FORMATS`. With both defaults,
        :data:`EXCLUDED` is left out.

    Returns
    -------
    Splits
        Character-level datasets named ``dates-{split}``; sources up to about
        40 characters, targets always 10.

    Raises
    ------
    ValueError
        If more dates are asked for than the range holds, a pattern uses the
        week year ``Y`` or misses a field, a locale is unknown, or your
        choice of locales and formats writes two dates the same way
        (:func:`find_ambiguous`).
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

"""How a value is written: one date, time or number in the many spellings people and
programs give it.

A user writes "since 02:10 UTC on 2026-11-03", "Nov 3rd", "3 pm" or "1,200"; an agent
passes `2026-11-03T02:10Z`, `15:00` or `1200` on. Provenance asks whether a value was
named before; the answer must not depend on the spelling. `value_tokens` reads a text's
dates, times and numbers as canonical tokens (`date:2026-11-03`, `day:11-03` for a date
given without its year, `time:15:00`, `num:1200`), and `written_before` says whether a
value's tokens are all among those of the text seen so far. `without_dates` blanks
dates, times and identifiers out of a text, so that the figures read from it are
quantities, not the parts of a date ("Oct 10, 2024" is not the figure 10) or of an
identifier ("ORD-104" is not the figure 104).

Time zones are read as written and never converted: "02:10 UTC" and "02:10Z" are the
same time, "03:10 CET" is not 02:10.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

__all__ = ["value_tokens", "without_dates", "written_before"]

_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june", "july", "august",
    "september", "october", "november", "december",
)  # fmt: skip
_MONTH = {name: n for n, name in enumerate(_MONTH_NAMES, 1)} | {
    name[:3]: n for n, name in enumerate(_MONTH_NAMES, 1)
}
_MONTH["sept"] = 9
_MONTHS = "|".join(sorted(_MONTH, key=len, reverse=True))

_ISO = re.compile(
    r"(?<![\d-])(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[t ](\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?)?(?:z|[+-]\d{2}:?\d{2})?(?![\d-])"
)
_MONTH_DAY = re.compile(
    rf"\b({_MONTHS})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?!\d)(?:,?\s+(\d{{4}})(?!\d))?"
)
_DAY_MONTH = re.compile(
    rf"(?<![\d.,])(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS})\b\.?(?:,?\s+(\d{{4}})(?!\d))?"
)
_SLASH = re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})(?:/(\d{4}|\d{2}))?(?![\d/])")
_MERIDIEM = r"(a\.?m\b\.?|p\.?m\b\.?)"
_CLOCK = re.compile(rf"(?<![\d:.])(\d{{1,2}}):(\d{{2}})(?::\d{{2}})?(?![\d:])(?:\s*{_MERIDIEM})?")
_HOUR = re.compile(rf"(?<![\d:.,])(\d{{1,2}})\s*{_MERIDIEM}")
_NAMED_HOUR = re.compile(r"\b(noon|midday|midnight)\b")
_IDENTIFIER = re.compile(r"#\w+|\b[a-z]\w*[-_#/]\d[\w-]*|\b\d+[-_][a-z]\w*", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?!\w)")
_UNITS = frozenset({
    "utc", "gmt", "z", "usd", "eur", "gbp", "jpy", "dollars", "dollar", "euros", "euro",
    "pounds", "percent", "pct", "kg", "km", "mi", "miles", "lb", "lbs", "hours", "hrs", "h",
    "minutes", "mins", "min", "sec", "seconds", "days", "on", "at", "since", "from", "until",
})  # fmt: skip
"""Words a value may carry beside its date, time or number and still be that value."""


def _date(year: str | None, month: int, day: int) -> list[str]:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return []
    if year is None:
        return [f"day:{month:02d}-{day:02d}"]
    full = int(year) + (2000 if len(year) == 2 else 0)
    return [f"date:{full:04d}-{month:02d}-{day:02d}"]


def _clock(hour: int, minute: int, meridiem: str | None) -> list[str]:
    if meridiem:
        if not 1 <= hour <= 12:
            return []
        hour = hour % 12 + (12 if meridiem.startswith("p") else 0)
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        return []
    return [f"time:{hour:02d}:{minute:02d}"]


def _iso(m: re.Match[str]) -> list[str]:
    tokens = _date(m.group(1), int(m.group(2)), int(m.group(3)))
    if m.group(4) is not None:
        tokens += _clock(int(m.group(4)), int(m.group(5)), None)
    return tokens


def _slash(m: re.Match[str], both: bool) -> list[str]:
    first, second, year = int(m.group(1)), int(m.group(2)), m.group(3)
    tokens = _date(year, first, second)  # month/day, as in the United States
    if both or not tokens:
        tokens += _date(year, second, first)  # day/month, as elsewhere
    return tokens


_NAMED = {"noon": 12, "midday": 12, "midnight": 0}
_Reader = Callable[[re.Match[str]], list[str]]


def _readers(both: bool) -> tuple[tuple[re.Pattern[str], _Reader], ...]:
    return (
        (_ISO, _iso),
        (_MONTH_DAY, lambda m: _date(m.group(3), _MONTH[m.group(1)], int(m.group(2)))),
        (_DAY_MONTH, lambda m: _date(m.group(3), _MONTH[m.group(2)], int(m.group(1)))),
        (_SLASH, lambda m: _slash(m, both)),
        (_CLOCK, lambda m: _clock(int(m.group(1)), int(m.group(2)), m.group(3))),
        (_HOUR, lambda m: _clock(int(m.group(1)), 0, m.group(2))),
        (_NAMED_HOUR, lambda m: _clock(_NAMED[m.group(1)], 0, None)),
    )


def _read(text: str, both: bool) -> tuple[set[str], str]:
    """The date and time tokens of case-folded `text`, and the text with them blanked."""
    tokens: set[str] = set()
    for pattern, reader in _readers(both):
        found: list[str] = []

        def blank(m: re.Match[str], reader: _Reader = reader, found: list[str] = found) -> str:
            found.extend(reader(m))
            return " " * len(m.group(0))

        text = pattern.sub(blank, text)
        tokens.update(found)
    return tokens, text


def _numbers(text: str) -> set[str]:
    out: set[str] = set()
    for token in _NUMBER.findall(_IDENTIFIER.sub(" ", text)):
        value = float(token.replace(",", ""))
        out.add(f"num:{value:g}" if not value.is_integer() else f"num:{int(value)}")
    return out


def value_tokens(text: str, *, ambiguous: bool = True) -> frozenset[str]:
    """The dates, times and numbers of a text as canonical tokens (see the module's
    docstring). `ambiguous`: read a date like 03/11 both as March 11 and as 3 November
    (text seen so far may say either); else as month/day where that is a date."""
    tokens, rest = _read(text.casefold(), ambiguous)
    return frozenset(tokens | _numbers(rest))


def without_dates(text: str) -> str:
    """`text`, case-folded, with its dates, times and identifiers blanked out (numbers
    read the same either way)."""
    _, rest = _read(text.casefold(), False)
    return _IDENTIFIER.sub(lambda m: " " * len(m.group(0)), rest)


def _only_units(value: str) -> bool:
    """Whether what a value says beside its dates, times and numbers is units and
    connecting words only (`_UNITS`, currency signs, punctuation)."""
    _, rest = _read(value.casefold(), False)
    rest = _NUMBER.sub(" ", rest)
    return all(word in _UNITS for word in re.findall(r"[a-z]+", rest))


def written_before(value: str, seen: Iterable[str]) -> bool:
    """Whether every date, time and number of `value` is among the tokens `seen`
    (`value_tokens` of the text seen so far), whatever its spelling there; a date given
    here with its year is also named by the same day given without one. False for a
    value with no such part, or with words beside it other than units."""
    tokens = value_tokens(value, ambiguous=False)
    if not tokens or not _only_units(value):
        return False
    known = set(seen)
    days = {f"day:{token[10:]}" for token in known if token.startswith("date:")}
    for token in tokens:
        if token in known:
            continue
        if token.startswith("date:") and f"day:{token[10:]}" in known:
            continue
        if token.startswith("day:") and token in days:
            continue
        return False
    return True

"""Wall-clock timestamps as worker-side log lines write them (none carries a time zone).

Full dates: NeMo ``[NeMo I 2026-05-21 07:00:05 mod:12]``, torch 2.1-2.2 ``[2024-01-05 10:22:33,123]``, Megatron
`` [2024-05-01 10:22:33] iteration``, SLURM ``CANCELLED AT 2024-05-01T10:22:33``, ChildFailedError
``time : 2024-05-01_10:22:33``, NCCL 2.26+ ``[2025-03-12 10:22:33] host:pid``. Month/day only: the c10 header
``[E0521 07:32:12.123456789 file:line]`` (the 9-digit fraction is CLOCK_MONOTONIC: ignored) and glog-style
torchrun ``W0521 10:22:33.123000 pid path:line]``. A year for those comes from the nearest full date (see
:func:`with_year`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from debug_training_logs.formats.prefixes import GLOG_SECONDS

FULL_DATE = re.compile(
    r"(?P<y>20\d\d)[-/](?P<mo>\d\d)[-/](?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d{1,6}))?"
)
C10_HEADER = re.compile(r"\[(?:rank\d+\]:\[)?[FEWIV](?P<md>\d{3,4}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.\d{9} ")
# The severity letter at the start of the line or after whitespace: written as a look-behind after the letter (not
# ``(?:^|\s)`` before it) so that the search skips to the letters F/E/W/I instead of trying every position (20x faster
# on a line without a glog header; the same matches).
GLOG_HEADER = re.compile(r"[FEWI](?<!\S.)(?P<md>\d{4}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.(?P<us>\d{6}) +\d+ ")
_SUBSECONDS = re.compile(r"\.\d{6}")
"""What every c10 header (``.`` + 9 digits) and every glog header (``.`` + 6 digits) contains, from a literal ``.``:
a line without it has neither, and one search answers for both (most hit lines, e.g. progress bars, have neither)."""


@dataclass(frozen=True)
class WallTime:
    """A time as a line wrote it: ``year`` is None when the line had none (c10/glog headers)."""

    year: int | None
    month: int
    day: int
    hour: int
    minute: int
    second: int
    microsecond: int = 0

    def with_year(self, year: int) -> datetime:
        return datetime(year, self.month, self.day, self.hour, self.minute, self.second, self.microsecond)

    def sort_key(self) -> tuple[int, int, int, int, int, int, int]:
        return (self.year or 0, self.month, self.day, self.hour, self.minute, self.second, self.microsecond)


def _md(md: str) -> tuple[int, int]:
    v = int(md)
    return v // 100, v % 100


_MEMO: dict[str, WallTime | None] = {}
"""Time text as a line wrote it (a full date, or a c10/glog header's month..second(..microsecond)) -> its parse
(None: not a valid date). Lines of one second repeat the same text on every rank, and a :class:`WallTime` is
immutable, so they share one. Emptied when it reaches :data:`_MEMO_CAP` entries."""
_MEMO_CAP = 4096


def _remember(key: str, wt: WallTime | None) -> WallTime | None:
    if len(_MEMO) >= _MEMO_CAP:
        _MEMO.clear()
    _MEMO[key] = wt
    return wt


def parse_wall_time(line: str) -> WallTime | None:
    """The first wall-clock time written in ``line``, or None. Prefers a full date when the line has one."""
    m = FULL_DATE.search(line)
    if m:
        key = m.group()
        if key in _MEMO:
            return _MEMO[key]
        frac = m.group("frac") or "0"
        us = int(frac.ljust(6, "0")[:6])
        wt = _checked(
            int(m.group("y")),
            int(m.group("mo")),
            int(m.group("d")),
            int(m.group("h")),
            int(m.group("mi")),
            int(m.group("s")),
            us,
        )
        return _remember(key, wt)
    if _SUBSECONDS.search(line) is None:
        return None
    c = C10_HEADER.search(line)
    if c:
        key = "c" + line[c.start("md") : c.end("s")]
        wt = _MEMO[key] if key in _MEMO else _remember(key, _c10_time(c))
        if wt is not None:
            return wt
    g = GLOG_HEADER.search(line) if GLOG_SECONDS.search(line) else None
    if g:
        key = "g" + line[g.start("md") : g.end("us")]
        return _MEMO[key] if key in _MEMO else _remember(key, _glog_time(g))
    return None


def _c10_time(c: re.Match[str]) -> WallTime | None:
    mo, d = _md(c.group("md"))
    return _checked(None, mo, d, int(c.group("h")), int(c.group("mi")), int(c.group("s")))


def _glog_time(g: re.Match[str]) -> WallTime | None:
    mo, d = _md(g.group("md"))
    return _checked(None, mo, d, int(g.group("h")), int(g.group("mi")), int(g.group("s")), int(g.group("us")))


def _checked(year: int | None, mo: int, d: int, h: int, mi: int, s: int, us: int = 0) -> WallTime | None:
    """The time, or None when it is no time of a calendar (``13-40 25:61:61``: a line whose digits only look like
    one); a date without a year is checked in a leap year (29 February is a day of some year)."""
    try:
        datetime(year if year is not None else 2000, mo, d, h, mi, s, us)
    except (ValueError, OverflowError):
        return None
    return WallTime(year, mo, d, h, mi, s, us)


def with_year(t: WallTime, year_hint: int | None) -> datetime | None:
    """``t`` as a naive datetime (local time of the writing host), using ``year_hint`` when the line had no year."""
    year = t.year if t.year is not None else year_hint
    if year is None:
        return None
    try:
        return t.with_year(year)
    except ValueError:  # Feb 29 in a guessed non-leap year
        return None


def iso(t: WallTime, year_hint: int | None) -> str:
    """ISO 8601 text for ``t`` (no offset: worker logs do not say their zone) with the line's year or ``year_hint``
    (a full date elsewhere in the logs); without either, ``MM-DD HH:MM:SS`` as the line wrote it, never an invented
    year."""
    dt = with_year(t, year_hint)
    if dt is not None:
        return dt.isoformat(timespec="seconds")
    return f"{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"


GUESSED_YEAR = 2000
"""The year a worker time gets for ordering when no line of the job states one (a leap year, so Feb 29 still parses).
Never shown as if the log had said it: :func:`show` prints such a time as the log wrote it."""


def show(t: datetime, sep: str = " ") -> str:
    """``t`` for a person: ISO 8601 to the second, or ``MM-DD HH:MM:SS`` as the log wrote it when its year is only
    :data:`GUESSED_YEAR` (no line of the job stated a year)."""
    if t.year == GUESSED_YEAR:
        return f"{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    return t.isoformat(sep=sep, timespec="seconds")

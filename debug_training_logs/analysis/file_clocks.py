"""Files whose clock runs a whole number of quarter hours off the job's other files: a node that logs in its own
time zone (glog and c10 headers state no zone), found from when the files start and end.

The files of one job overlap in time: they start within seconds of each other (the rendezvous) and end together (the
failure takes them all down). A group of files that overlaps no other file as written, but whose first and last times
both fall within :data:`ALIGN` of the other files' first and last times once moved by a whole number of quarter hours
(every time zone's offset is one), is on another clock. Anything less (a gap of hours between two attempts' files, a
rotated file that ends where the next begins) is not: the times are then compared as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from debug_training_logs.formats.timestamps import WallTime

if TYPE_CHECKING:
    from debug_training_logs.analysis.inventory_types import Inventory

QUARTER = timedelta(minutes=15)
ALIGN = timedelta(minutes=2)
"""How close a moved start (end) must come to the other files' start (end)."""
MAX_OFFSET = timedelta(hours=14)

Span = tuple[datetime, datetime]


def when(t: WallTime, year: int | None) -> datetime | None:
    """``t`` as a datetime, in the job's year when the line wrote none; None when no such day exists."""
    try:
        return t.with_year(t.year or year or 2000)
    except ValueError:  # Feb 29 without a year in a common year
        return None


def clock_offsets(spans: dict[str, Span]) -> dict[str, timedelta]:
    """File -> how far its clock runs ahead of the job's (negative: behind), for the files on another clock than the
    largest group of files that overlap each other (``spans``: each file's first and last time as written)."""
    groups = _overlapping(spans)
    if len(groups) < 2:
        return {}
    ref = max(groups, key=len)  # (of equals, the one that starts first)
    r0, r1 = _hull([spans[f] for f in ref])
    out: dict[str, timedelta] = {}
    for g in groups:
        if g is ref:
            continue
        g0, g1 = _hull([spans[f] for f in g])
        shift = round((g0 - r0) / QUARTER) * QUARTER
        if shift and abs(shift) <= MAX_OFFSET and abs(g0 - shift - r0) <= ALIGN and abs(g1 - shift - r1) <= ALIGN:
            out.update(dict.fromkeys(g, shift))
    return out


def _overlapping(spans: dict[str, Span]) -> list[list[str]]:
    """The files in groups that overlap (within :data:`ALIGN`) one another, transitively: the groups in order of
    their start, each group's files in path order."""
    order = sorted(spans, key=lambda f: spans[f][0])
    groups: list[list[str]] = []
    end: datetime | None = None
    for f in order:  # sorted by start: a file joins the open group when it starts before the group's end
        a, b = spans[f]
        if end is not None and a <= end + ALIGN:
            groups[-1].append(f)
            end = max(end, b)
        else:
            groups.append([f])
            end = b
    return [sorted(g) for g in groups]


def _hull(spans: Sequence[Span]) -> Span:
    return min(a for a, _b in spans), max(b for _a, b in spans)


def clock_notes(inventory: Inventory, shown: int = 3) -> list[str]:
    """What the report says of files on another clock: which, how far, and that their times are read on the job's."""
    off = [(f.rel, f.clock_offset) for f in inventory.files if f.clock_offset]
    notes = [
        f"{rel}'s clock runs {_hours(d)} {'ahead of' if d > timedelta(0) else 'behind'} the other files' (a time "
        f"zone?): the verifier compares its times {moved_words(d)}"
        for rel, d in off[:shown]
        if d is not None
    ]
    return notes + ([f"{len(off) - shown} more file(s) on other clocks"] if len(off) > shown else [])


def _hours(d: timedelta) -> str:
    minutes = abs(round(d / timedelta(minutes=1)))
    return f"{minutes // 60} h" + (f" {minutes % 60} min" if minutes % 60 else "")


def moved_words(offset: timedelta) -> str:
    """``9 h back`` (a clock that runs ahead, read on the job's) or ``5 h 30 min forward``."""
    return f"{_hours(offset)} {'back' if offset > timedelta(0) else 'forward'}"

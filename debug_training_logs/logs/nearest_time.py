"""For lines that state no time (Python logging without a format, tracebacks, tqdm bars): the nearest earlier line
of the same file that does. A timeline can then say "after 07:29:15" instead of dropping the event.

Reads at scan speed: whole chunks are split into lines only when they hold a wanted line, and the last timed line
before a point is found by RE2 searches over the bytes (a stretch of untimed progress bars can be megabytes long).
"""

from __future__ import annotations

from itertools import accumulate

import re2

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import ReadProblems, decode, iter_chunks

TIMESTAMP = re2.compile(rb"20\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d|[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{6,9} ")
"""A wall time on a line: a full date (NeMo, torchrun 2.1, SLURM, Megatron) or a c10/glog header."""
TAIL_BYTES = 512 << 10
"""How far back from a point to look first for the last timestamp before it (8x further each time none is there)."""
NARROW_BYTES = 4 << 10
"""The last timestamp is narrowed down by bisection to a stretch this long, then found by iterating its matches."""


def times_before(lf: LogFile, wanted: set[int]) -> dict[int, tuple[int, str]]:
    """For each wanted 1-based line number: ``(line number, text)`` of the nearest line at or before it that states a
    wall time; lines with none before them are left out."""
    out: dict[int, tuple[int, str]] = {}
    if not wanted:
        return out
    last = max(wanted)
    base = 0
    carry: tuple[int, str] | None = None  # the last timestamped line of the chunks read so far
    for chunk in iter_chunks(lf, ReadProblems()):
        lines_here = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        targets = sorted(w for w in wanted if base < w <= base + lines_here)
        if targets:
            ends = list(accumulate(map(len, chunk.split(b"\n")[:lines_here])))  # + j: line j's end offset
            for w in targets:
                j = w - base - 1
                found = _timed_line_before(chunk, ends[j] + j, base)
                if found is not None:
                    out[w] = found
                elif carry is not None:
                    out[w] = carry
        found = _timed_line_before(chunk, len(chunk), base)
        if found is not None:
            carry = found
        base += lines_here
        if base >= last:
            break
    return out


def _timed_line_before(chunk: bytes, end: int, base: int) -> tuple[int, str] | None:
    """``(line number, text)`` of the last timed line in ``chunk[:end]`` (``base``: lines before the chunk)."""
    at = _last_match_start(chunk, end)
    if at is None:
        return None
    start = chunk.rfind(b"\n", 0, at) + 1
    stop = chunk.find(b"\n", at)
    line = chunk[start : stop if stop >= 0 else len(chunk)]
    return base + chunk.count(b"\n", 0, at) + 1, decode(line[:300])


def _last_match_start(buf: bytes, end: int) -> int | None:
    """Where the last :data:`TIMESTAMP` match inside ``buf[:end]`` starts (a timestamp never spans lines)."""
    size = TAIL_BYTES
    lo = max(0, end - size)
    while TIMESTAMP.search(buf, lo, end) is None:
        if lo == 0:
            return None
        size *= 8
        lo = max(0, end - size)
    hi = end  # a match starts at or after lo; none lies wholly inside buf[hi:end]
    while hi - lo > NARROW_BYTES:
        mid = (lo + hi) // 2
        if TIMESTAMP.search(buf, mid, end) is None:
            hi = mid
        else:
            lo = mid
    starts: list[int] = [m.start() for m in TIMESTAMP.finditer(buf, lo, end)]  # the last starts before hi
    return starts[-1]

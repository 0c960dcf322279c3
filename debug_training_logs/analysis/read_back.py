"""Reading given lines of a job's files back, with their times: the line a citation names, or, for a line that
states no time (tracebacks, progress bars, Python logging without a format), the times of the nearest timed lines
before and after it (a lower and an upper bound). Reads at scan speed from the scan's nearest checkpoint
(:func:`~debug_training_logs.logs.scan_lines.checkpoints_for`), splitting only the chunks that hold a wanted line; used
by the evidence, the verifier's citation checks and the timeline."""

from __future__ import annotations

import functools
import mmap
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.formats.timestamps import GUESSED_YEAR, parse_wall_time, with_year
from debug_training_logs.logs.discovery import LogFile, sniff_compression
from debug_training_logs.logs.nearest_time import TIMESTAMP
from debug_training_logs.logs.reader import CHUNK, ReadProblems, decode, iter_chunks
from debug_training_logs.logs.scan_engines import _native
from debug_training_logs.logs.scan_lines import checkpoints_for, line_windows, seek_line
from debug_training_logs.logs.scan_types import MAX_LINE_CHARS, Checkpoints

WORKER_FALLBACK_YEAR = GUESSED_YEAR
"""Year used for ordering when no worker line states one (see ``formats.timestamps.GUESSED_YEAR``)."""


MAX_LINES_PAST = 2_000_000
"""After the last wanted line of a file, read at most this many more lines looking for the next line with a time."""


class TimeBounds:
    """What a line's own time and the times of the nearest timed lines around it (a lower and an upper bound) say of
    when it was written; mixed into the dataclasses that carry those three fields."""

    __slots__ = ()
    time: datetime | None
    after: datetime | None
    before: datetime | None

    @property
    def earliest(self) -> datetime | None:
        """The earliest moment the line can have been written."""
        return self.time or self.after

    @property
    def latest(self) -> datetime | None:
        """The latest moment the line can have been written."""
        return self.time or self.before


@dataclass(frozen=True, slots=True, repr=False)
class LineAt(TimeBounds):
    """One line read back from a file, with its own time or the times around it."""

    file: str
    line: int
    text: str | None
    """The line (ANSI colour removed), None when the file has fewer lines."""
    time: datetime | None
    after: datetime | None
    """The time of the nearest earlier line that has one (a lower bound)."""
    before: datetime | None
    """The time of the nearest later line that has one (an upper bound)."""


def safe_path(root: Path, rel: str, resolved_root: Path | None = None) -> Path | None:
    """``root/rel`` when it stays inside ``root`` and is a file, else None (a citation may not point elsewhere);
    ``resolved_root``: ``root.resolve()`` when the caller has it (several files under one root)."""
    base = resolved_root if resolved_root is not None else root.resolve()
    known, plain = _plain_file_below(base, rel)
    if known:
        return plain
    try:
        p = (root / rel).resolve()
    except (OSError, RuntimeError):
        return None
    if not p.is_relative_to(base) or not p.is_file():
        return None
    return p


def _plain_file_below(base: Path, rel: str) -> tuple[bool, Path | None]:
    """(known, path): ``base/rel`` when ``base`` is resolved, ``rel`` is relative with no ``.``/``..``/empty part,
    no part of it is a symlink and it is a regular file: then it is what resolving it gives, inside ``base`` (one
    ``lstat`` per part of ``rel`` instead of one per part of the whole path, twice); None when such a path names no
    file (not a regular file, a part missing or not a directory). Not known (False): resolve it."""
    parts = rel.split("/")
    if "" in parts or "." in parts or ".." in parts:
        return False, None
    at = str(base)
    try:
        for part in parts:
            at = f"{at}/{part}" if at != "/" else f"/{part}"
            mode = os.lstat(at).st_mode
            if stat.S_ISLNK(mode):
                return False, None
    except (FileNotFoundError, NotADirectoryError):
        return True, None
    except OSError:
        return False, None
    return True, Path(at) if stat.S_ISREG(mode) else None


def read_lines(root: Path, wanted: dict[str, set[int]], year: int | None) -> dict[tuple[str, int], LineAt]:
    """The wanted lines of each file under ``root`` with their worker-clock time, or the times of the nearest lines
    before and after that state one. One read per file up to the last wanted line (and on to the next timestamp), at
    scan speed: only chunks that hold a wanted line are split into lines (:data:`nearest_time.TIMESTAMP` finds the
    neighbours). Files outside ``root`` or missing are left out of the answer (the caller reports them)."""
    out: dict[tuple[str, int], LineAt] = {}
    base = root.resolve() if wanted else root
    for rel, lines in wanted.items():
        path = safe_path(root, rel, base)
        if path is None or not lines:
            continue
        # a file the scan recorded checkpoints for, unchanged since (one stat), is a plain one of that size
        cp = checkpoints_for(LogFile(path, rel, 0, "none"))
        if cp is not None:
            lf = LogFile(path, rel, cp.stamp[0], "none")
        else:
            lf = LogFile(path, rel, path.stat().st_size, sniff_compression(path))
        out.update(_read_file_lines(lf, lines, year or WORKER_FALLBACK_YEAR, cp))
        for m in lines:
            out.setdefault((rel, m), LineAt(rel, m, None, None, None, None))
    return out


def _stamp(raw: bytes, year: int) -> datetime | None:
    wt = parse_wall_time(strip_ansi(decode(raw[:MAX_LINE_CHARS])))
    return with_year(wt, year) if wt is not None else None


class _FromTheTop(Exception):
    """The nearest timed line before a checkpoint is one the reader cuts (longer than a chunk): read from the top."""


def _read_file_lines(
    lf: LogFile, lines: set[int], year: int, cp: Checkpoints | None = None
) -> dict[tuple[str, int], LineAt]:
    """The wanted lines of one file with their own time and the times of the nearest timed lines around them: read
    from the nearest scan checkpoint before each group of wanted lines when the file is as the scan saw it
    (:func:`~debug_training_logs.logs.scan_lines.checkpoints_for`, or ``cp`` when the caller found them), else from the
    top (compressed or changed files)."""
    if cp is None:
        cp = checkpoints_for(lf)
    if cp is not None:
        try:
            return _read_lines_from(lf, lines, year, cp)
        except _FromTheTop:
            pass
    return _read_lines_from(lf, lines, year, None)


_UNSET: Any = object()
_KEEP: Any = object()


def _read_lines_from(lf: LogFile, lines: set[int], year: int, cp: Checkpoints | None) -> dict[tuple[str, int], LineAt]:
    found: dict[int, tuple[str, datetime | None]] = {}
    lower: dict[int, datetime | None] = {}
    upper: dict[int, datetime | None] = {}
    open_: list[int] = []  # wanted lines still waiting for the next timestamp
    todo = sorted(w for w in lines if w > 0)
    if not todo:
        return {}
    last = todo[-1]
    i = 0
    while i < len(todo):
        start, base = seek_line(lf, cp, todo[i]) if cp is not None else (0, 0)
        carry: Any = _UNSET if start else None  # the last timestamp before the chunk being read
        chunks = line_windows(lf, start) if cp is not None else iter_chunks(lf, ReadProblems())
        try:
            for chunk in chunks:
                lines_here = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
                k = i
                while k < len(todo) and todo[k] <= base + lines_here:
                    k += 1
                targets, i = todo[i:k], k
                # the timestamped lines next to each target, found by searching the chunk's bytes from the target
                # (TIMESTAMP never spans a newline), not by testing every line of the chunk; lines are located by
                # their byte offsets, the chunk split only up to its last target
                # what the chunk's last timestamped line makes of ``carry`` when the searches below tell it: _KEEP
                # for a chunk without one; else it is searched for, and only when another chunk follows
                chunk_carry: Any = _UNSET
                if open_:
                    first = _next_stamped(chunk, 0)
                    if first is not None:
                        t = _stamp(_line_at(chunk, first), year)
                        for w in open_:
                            upper[w] = t
                        open_ = []
                    else:
                        chunk_carry = _KEEP
                if targets:
                    raws = chunk.split(b"\n", targets[-1] - base)  # ..., the last target's line, the rest
                    at = done = 0  # the byte offset of line ``done``
                    for w in targets:
                        j = w - base - 1
                        at += sum(map(len, raws[done:j])) + (j - done)
                        done = j
                        raw = raws[j]
                        text = strip_ansi(decode(raw[:MAX_LINE_CHARS])).rstrip("\r")
                        stamped = TIMESTAMP.search(raw) is not None
                        own = _stamp(raw, year) if stamped else None
                        found[w] = (text, own)
                        before = _last_stamped(chunk, at)
                        after = _next_stamped(chunk, at + len(raw) + 1)
                        if before is None and carry is _UNSET:
                            assert cp is not None
                            carry = _stamp_before(str(lf.path), cp.stamp, start, year)
                        lower[w] = _stamp(_line_at(chunk, before), year) if before is not None else carry
                        if after is not None:
                            upper[w] = _stamp(_line_at(chunk, after), year)
                        else:
                            open_.append(w)
                            if w == targets[-1]:  # no timestamp after it: the chunk's last one is known
                                chunk_carry = own if stamped else lower[w] if before is not None else _KEEP
                base += lines_here
                if i >= len(todo) and not open_:
                    break
                if base > last + MAX_LINES_PAST:
                    i = len(todo)
                    break
                if cp is not None and not open_ and cp.seek(todo[i])[1] > base:
                    break  # the next wanted line is nearer another checkpoint
                if chunk_carry is _UNSET:
                    raw_last = _last_stamped_line(chunk)
                    if raw_last is not None:
                        carry = _stamp(raw_last, year)
                elif chunk_carry is not _KEEP:
                    carry = chunk_carry
            else:
                break  # the file ended
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
    return {(lf.rel, w): LineAt(lf.rel, w, text, own, lower.get(w), upper.get(w)) for w, (text, own) in found.items()}


STAMP_NEEDLES = tuple(b"20%02d-" % i for i in range(100)) + tuple(b":%02d." % i for i in range(100))
"""Every :data:`TIMESTAMP` holds one of these: a full date's ``20YY-``, a c10/glog time's ``:SS.``. Rare in the
untimed lines (progress bars, data loader debug) a search for the nearest timed line crosses."""


@functools.cache
def _stamp_finder() -> Any:
    """The native finder of the lines holding a :data:`STAMP_NEEDLES`, or None without the extension (its SIMD pass
    over 6.5 MB of progress bars: 2.9 ms, where RE2's search for TIMESTAMP took 10 ms)."""
    native = _native()
    return None if native is None else native.Finder(list(STAMP_NEEDLES))


def _stamped_line(buf: bytes | mmap.mmap, lo: int, hi: int, first: bool) -> int | None:
    """Where the first (``first``) or last line of ``buf[lo:hi]`` (``lo`` a line start, ``hi`` a line start or the
    end) that holds a :data:`TIMESTAMP` starts, or None. With the native finder only the lines holding a needle are
    checked; else one RE2 search (a timestamp never spans a newline)."""
    finder = _stamp_finder()
    if finder is None:
        if first:
            m = TIMESTAMP.search(buf, lo, hi)
            return None if m is None else buf.rfind(b"\n", lo, m.start()) + 1 or lo
        last = None
        for m in TIMESTAMP.finditer(buf, lo, hi):
            last = m.start()
        return None if last is None else buf.rfind(b"\n", lo, last) + 1 or lo
    while lo < hi:
        hits, _newlines, stop = finder.find_lines(buf, lo, 1 if first else 0, hi)
        for start, end, _line, _needle in hits if first else reversed(hits):
            if TIMESTAMP.search(buf, start, end) is not None:
                return int(start)
        if not first:
            return None
        lo = stop if hits else hi
    return None


def _last_stamped_line(chunk: bytes) -> bytes | None:
    """The last line of ``chunk`` that holds a timestamp (:func:`_last_stamped`)."""
    start = _last_stamped(chunk, len(chunk))
    return None if start is None else _line_at(chunk, start)


@functools.lru_cache(maxsize=4096)
def _stamp_before(path: str, stamp: tuple[int, int, int], offset: int, year: int) -> datetime | None:
    """The time of the last line before byte ``offset`` (a line start) of a plain file that holds a timestamp, or
    None; searched backwards in windows growing from ``offset`` (MBs of progress bars may lie in between: remembered
    per file state ``stamp``, the citations of one diagnosis ask for the same lines several times). Raises
    :class:`_FromTheTop` when that line is one the reader cuts to its head and tail (longer than a chunk: what it
    shows depends on the cut)."""
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if (len(mm), os.fstat(fh.fileno()).st_mtime_ns, os.fstat(fh.fileno()).st_ino) != stamp:
                raise _FromTheTop  # changed since its checkpoints were recorded
            width = 4096
            hi = offset
            while hi > 0:
                lo = max(0, hi - width)
                lo = mm.rfind(b"\n", 0, lo) + 1 if lo > 0 else 0
                start = _stamped_line(mm, lo, hi, first=False)
                if start is not None:
                    end = mm.find(b"\n", start, hi)
                    raw = mm[start : hi if end < 0 else end]
                    if len(raw) >= CHUNK:
                        raise _FromTheTop
                    return _stamp(raw, year)
                hi = lo
                width *= 8
    except (OSError, ValueError) as exc:
        raise _FromTheTop from exc
    return None


def _line_at(chunk: bytes, start: int) -> bytes:
    """The line of ``chunk`` that starts at byte ``start``, without its newline."""
    end = chunk.find(b"\n", start)
    return chunk[start : len(chunk) if end < 0 else end]


def _next_stamped(chunk: bytes, pos: int) -> int | None:
    """Where the first line starting at or after byte ``pos`` (a line start) of ``chunk`` that holds a timestamp
    starts, or None."""
    if pos >= len(chunk):
        return None
    return _stamped_line(chunk, pos, len(chunk), first=True)


def _last_stamped(chunk: bytes, end: int) -> int | None:
    """Where the last line ending before byte ``end`` (a line start) of ``chunk`` that holds a timestamp starts, or
    None; searched in windows growing backwards from ``end``."""
    width = 4096
    hi = end
    while hi > 0:
        lo = max(0, hi - width)
        lo = chunk.rfind(b"\n", 0, lo) + 1 if lo > 0 else 0  # a window starts on a line start
        last = _stamped_line(chunk, lo, hi, first=False)
        if last is not None:
            return last
        hi = lo
        width *= 8
    return None


def read_ais_lines(ais_root: Path, wanted: dict[str, set[int]]) -> dict[tuple[str, int], LineAt]:
    """The wanted lines of AIS daemon logs, each record with its absolute time on the AIS daemon's clock.

    A plain (or compressed) file is parsed alone; ``archive!member`` references need one pass over the archives.
    A wanted line that is not a record (a header, a continuation line) comes back with its text and no time.
    """
    from debug_training_logs.analysis.ais_index import AisDirScan
    from debug_training_logs.formats.ais import AisFileParser, parse_log_name
    from debug_training_logs.logs.reader import iter_lines

    out: dict[tuple[str, int], LineAt] = {}
    in_archives = {ref: lines for ref, lines in wanted.items() if "!" in ref}
    for ref, lines in wanted.items():
        path = safe_path(ais_root, ref) if ref not in in_archives else None
        if path is None:
            continue
        lf = LogFile(path, ref, path.stat().st_size, sniff_compression(path))
        parser = AisFileParser(parse_log_name(path.name), datetime.fromtimestamp(path.stat().st_mtime).year)
        for rec in parser.parse(iter_lines(lf, ReadProblems())):
            if rec.line in lines and (ref, rec.line) not in out:
                out[(ref, rec.line)] = LineAt(ref, rec.line, rec.text, rec.at, rec.at, rec.at)
        missing = {m for m in lines if (ref, m) not in out}
        if missing:
            for key, at in read_lines(ais_root, {ref: missing}, None).items():
                out[key] = LineAt(at.file, at.line, at.text, None, None, None)
    if in_archives:
        for source, rec in AisDirScan(ais_root).records():
            member_lines = in_archives.get(source.ref)
            if member_lines and rec.line in member_lines and (source.ref, rec.line) not in out:
                out[(source.ref, rec.line)] = LineAt(source.ref, rec.line, rec.text, rec.at, rec.at, rec.at)
    for ref, lines in wanted.items():
        for m in lines:
            out.setdefault((ref, m), LineAt(ref, m, None, None, None, None))
    return out

"""Reading a file for the scan: its windows ending on line boundaries (spans of a memory map for plain files,
decompressed chunks otherwise), and the stamp a file's :class:`~debug_training_logs.logs.scan_types.Checkpoints` are
valid for.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Generator, Iterator

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import (
    CHUNK,
    LONG_LINE_KEEP,
    LongLines,
    ReadProblems,
    binary_reason,
    cut_marker,
    iter_chunks,
)
from debug_training_logs.logs.scan_types import Span

WINDOW = 1 << 20
"""Bytes per window of a plain file (1 MiB): small enough to stay in cache across the prefilter passes."""


RELEASE_BYTES = 64 << 20
"""After this many bytes of a memory-mapped file are searched, their pages leave the resident set."""


def _windows(
    lf: LogFile, problems: ReadProblems, *, split_long_lines: bool = True, start: int = 0
) -> Generator[bytes, None, None]:
    """Decompressed chunks of ``lf`` that end on a line boundary (the last may lack its newline); ``start``: the byte
    offset of a line start to begin at (plain files only, a :class:`Checkpoints` offset).

    A line longer than :data:`~debug_training_logs.logs.reader.CHUNK` (a progress bar redrawn with ``\\r`` for
    hours) never becomes one huge window: with ``split_long_lines`` (the search) it comes in windows cut after a
    ``\\r``, so every record is searched and newlines alone still number the lines; without (reading lines back)
    it is cut to its head and tail, the cut counted in ``problems``.
    """
    if lf.compression != "none":
        yield from iter_chunks(lf, problems, split_long_lines=split_long_lines)
        return
    for buf, lo, hi, _last in _spans(lf, problems, split_long_lines=split_long_lines, start=start):
        yield buf if lo == 0 and hi == len(buf) and isinstance(buf, bytes) else buf[lo:hi]


def _spans(
    lf: LogFile, problems: ReadProblems, *, split_long_lines: bool = True, start: int = 0
) -> Generator[Span, None, None]:
    """The windows of :func:`_windows`, without copying those of a plain file: each is a span of the file's memory
    map, valid until the next one is asked for (the pages before it are then released, and the map is closed at the
    end). Compressed files: each decompressed chunk whole."""
    if lf.compression != "none":
        for chunk, last in _lookahead(iter_chunks(lf, problems, split_long_lines=split_long_lines)):
            yield chunk, 0, len(chunk), last
        return
    try:
        with open(lf.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        problems.add(lf.rel, f"read error ({type(exc).__name__}: {exc})")
        return
    with mm:
        # (from a checkpoint's offset: the scan that recorded it read this file, unchanged since, as text)
        why_binary = binary_reason(mm[:8192]) if start == 0 else None
        if why_binary is not None:
            problems.add(lf.rel, why_binary)
            return
        long_lines = LongLines()
        released = start - start % mmap.PAGESIZE
        in_long = False

        def release(upto: int) -> None:
            # drop pages already read from our resident set (the page cache keeps them): one multi-GB file must not
            # show as GBs of RSS
            nonlocal released
            upto -= upto % mmap.PAGESIZE
            if upto - released >= RELEASE_BYTES and hasattr(mmap, "MADV_DONTNEED"):
                mm.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto

        while start < size:
            release(start)
            end = start + WINDOW
            if end >= size:
                end = size
            else:
                nl = mm.rfind(b"\n", start, end)
                if nl < 0:
                    nl = mm.find(b"\n", end, start + CHUNK)
                if nl >= 0:
                    end = nl + 1
                    in_long = False
                else:  # a line longer than a chunk
                    if not in_long:
                        long_lines.lines += 1
                        in_long = True
                    if split_long_lines:
                        cr = mm.rfind(b"\r", start, end)
                        end = end if cr < 0 else cr + 1
                    else:
                        line_end = _line_end(mm, start + CHUNK, release)
                        cut = line_end - start - 2 * LONG_LINE_KEEP
                        long_lines.cut_bytes += cut
                        head, tail = mm[start : start + LONG_LINE_KEEP], mm[line_end - LONG_LINE_KEEP : line_end]
                        joined = head + cut_marker(cut) + tail
                        yield joined, 0, len(joined), line_end >= size
                        start = line_end
                        in_long = False
                        continue
            yield mm, start, end, end >= size
            start = end
        if long_lines.cut_bytes:
            problems.add(lf.rel, long_lines.note())


def _line_end(mm: mmap.mmap, pos: int, release: Callable[[int], None]) -> int:
    """Offset just past the newline at or after ``pos`` (the size when none), searched a chunk at a time so the
    pages read can be released as it goes."""
    size = len(mm)
    while pos < size:
        nl = mm.find(b"\n", pos, pos + CHUNK)
        if nl >= 0:
            return nl + 1
        pos += CHUNK
        release(pos)
    return size


def _file_stamp(lf: LogFile) -> tuple[int, int, int] | None:
    """(size, mtime in ns, inode) of ``lf`` now, the identity :class:`Checkpoints` are valid for (the scan cache's)."""
    try:
        st = os.stat(lf.path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _lookahead(chunks: Iterator[bytes]) -> Iterator[tuple[bytes, bool]]:
    """``(chunk, is_last)`` for every chunk (one chunk is held back to know which is the last)."""
    prev: bytes | None = None
    for c in chunks:
        if prev is not None:
            yield prev, False
        prev = c
    if prev is not None:
        yield prev, True

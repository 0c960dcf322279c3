"""Reading numbered lines back at scan speed (:func:`lines_at`), from the
:class:`~debug_training_logs.logs.scan_types.Checkpoints` a scan of this process remembered for the file.
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_right
from collections.abc import Generator

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import ReadProblems, decode
from debug_training_logs.logs.scan_types import MAX_LINE_CHARS, Checkpoints
from debug_training_logs.logs.scan_windows import _file_stamp, _windows
from debug_training_logs.memo import MEMO

CHECKPOINTS = "checkpoints"
"""The kind of the :data:`~debug_training_logs.memo.MEMO` entries that hold a file's :class:`Checkpoints`."""


def _checkpoint_bytes(cp: Checkpoints) -> int:
    return 300 + 80 * len(cp.offsets)  # two tuples of ints, the stamp


def _remember(lf: LogFile, cp: Checkpoints | None) -> None:
    if cp is None:
        return
    for key in {str(lf.path), os.path.realpath(lf.path)}:  # as discovered, and resolved
        MEMO.put((CHECKPOINTS, key), cp, _checkpoint_bytes(cp))


def checkpoints_for(lf: LogFile) -> Checkpoints | None:
    """The checkpoints a scan of this process recorded for ``lf``, if the file is still as it was then (same size,
    mtime and inode); None for a compressed, changed or never scanned file (read it from the top)."""
    if lf.compression != "none":
        return None
    cp = MEMO.get((CHECKPOINTS, str(lf.path)))
    if cp is None:
        cp = MEMO.get((CHECKPOINTS, os.path.realpath(lf.path)))
    if cp is None or _file_stamp(lf) != cp.stamp:
        return None
    return cp  # type: ignore[no-any-return]


TAIL_SEEK_BYTES = 256 << 10
"""A wanted line after the last checkpoint is found by counting newlines backwards from the file's end when it lies
within this many bytes of it (agents' last words, tracebacks: the lines most asked for)."""


def seek_line(lf: LogFile, cp: Checkpoints, line: int) -> tuple[int, int]:
    """(offset of a line start, lines before it) at or before 1-based ``line`` of ``lf``, as near as is cheap to
    know: the checkpoint before it, or for a line near the end a line start found backwards from the end (the file's
    newline count is known); the caller reads forward from there."""
    off, before = cp.seek(line)
    if line <= cp.lines_before[-1] or cp.newlines - line > TAIL_SEEK_BYTES // 16:
        return off, before
    size = cp.stamp[0]
    try:
        with open(lf.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if len(mm) != size:
                return off, before
            span = 16 << 10
            while span <= TAIL_SEEK_BYTES and size - span > off:
                nl = mm.find(b"\n", size - span - 1, size - 1)  # the first line start at or after size - span
                if nl >= 0:
                    n_before = cp.newlines - mm[nl + 1 : size].count(b"\n")
                    if n_before < line:
                        return nl + 1, n_before
                span *= 4
    except (OSError, ValueError):
        pass
    return off, before


def lines_at(
    lf: LogFile, wanted: set[int], keep_tail: int = 0, checkpoints: Checkpoints | None = None
) -> dict[int, str]:
    """The text of the given 1-based line numbers of ``lf`` (cut at :data:`MAX_LINE_CHARS`), read at scan speed:
    from the nearest :class:`Checkpoints` before each wanted line when a scan recorded them for the file as it is now
    (``checkpoints``, default :func:`checkpoints_for`), else from the top; newlines are counted per chunk in C and
    only the chunks holding a wanted line are split.

    ``keep_tail``: a line longer than the cut also keeps its last ``keep_tail`` characters after a ``\\r`` (a message
    glued to the end of a tqdm progress line is then still there)."""
    out: dict[int, str] = {}
    if not wanted:
        return out
    cp = checkpoints if checkpoints is not None else checkpoints_for(lf)
    todo = sorted(wanted)
    todo = todo[bisect_right(todo, 0) :]
    i = 0
    while i < len(todo):
        start, base = seek_line(lf, cp, todo[i]) if cp is not None else (0, 0)
        chunks = line_windows(lf, start)
        try:
            for chunk in chunks:
                n_nl = chunk.count(b"\n")
                lines_here = n_nl + (0 if chunk.endswith(b"\n") else 1)
                if todo[i] <= base + lines_here:
                    # split only the side of the chunk that holds the wanted lines (often its end: the last lines)
                    j0 = todo[i] - base - 1
                    k = bisect_right(todo, base + lines_here, i) - 1
                    if j0 > lines_here - (todo[k] - base):
                        raws = chunk.rsplit(b"\n", n_nl - j0 + 1)
                        first = j0 - 1  # index in ``raws`` of line j0 is 1
                    else:
                        raws = chunk.split(b"\n", todo[k] - base)
                        first = 0
                    end = k + 1  # todo[i:end]: the wanted lines in this chunk
                    j0 = todo[i] - base - 1 - first
                    run = raws[j0 : j0 + end - i]
                    if todo[end - 1] - todo[i] == end - 1 - i and max(map(len, run)) <= MAX_LINE_CHARS:
                        # consecutive lines none of which is cut (the lookahead after a line, a wrapped record): decoded
                        # at once (a newline never ends a UTF-8 sequence: each line decodes as it would alone)
                        texts = b"\n".join(run).decode("utf-8", errors="replace").split("\n")
                        if b"\r" in chunk:
                            texts = [t.rstrip("\r") for t in texts]
                        out.update(zip(todo[i:end], texts, strict=True))
                        i = end
                    while i < len(todo) and todo[i] <= base + lines_here:
                        raw = raws[todo[i] - base - 1 - first]
                        head = raw[:MAX_LINE_CHARS]
                        if keep_tail and len(raw) > MAX_LINE_CHARS:
                            head += b"\r" + raw[max(MAX_LINE_CHARS, len(raw) - keep_tail) :]
                        out[todo[i]] = decode(head).rstrip("\r")
                        i += 1
                base += lines_here
                if i >= len(todo) or (cp is not None and cp.seek(todo[i])[1] > base):
                    break  # done, or the next wanted line is nearer another checkpoint
            else:
                return out  # the file ended: the rest of the wanted lines are past its end
        finally:
            chunks.close()
    return out


def line_windows(lf: LogFile, start: int = 0) -> Generator[bytes, None, None]:
    """Chunks of ``lf`` ending on a line boundary as :func:`lines_at` reads them (a line longer than a chunk cut to
    its head and tail), from byte ``start`` (a :class:`Checkpoints` offset; plain files only)."""
    return _windows(lf, ReadProblems(), split_long_lines=False, start=start)

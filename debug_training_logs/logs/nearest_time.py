"""For lines that state no time (Python logging without a format, tracebacks, tqdm bars): the nearest earlier line
of the same file that does. A timeline can then say "after 07:29:15" instead of dropping the event.

Reads at scan speed: whole chunks are split into lines only when they hold a wanted line; other chunks are only
searched near their end for their last timestamp.
"""

from __future__ import annotations

import re2

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import ReadProblems, decode, iter_chunks

TIMESTAMP = re2.compile(rb"20\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d|[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{6,9} ")
"""A wall time on a line: a full date (NeMo, torchrun 2.1, SLURM, Megatron) or a c10/glog header."""
TAIL_BYTES = 512 << 10
"""How far back from a chunk's end to look for its last timestamp."""
MAX_WALK_LINES = 20000
"""How many lines back from a wanted line to look within its chunk."""


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
            lines = chunk.split(b"\n")[:lines_here]
            for w in targets:
                j = w - base - 1
                stop = max(-1, j - MAX_WALK_LINES)
                while j > stop and TIMESTAMP.search(lines[j]) is None:
                    j -= 1
                if j > stop:
                    out[w] = (base + j + 1, decode(lines[j][:300]))
                elif carry is not None:
                    out[w] = carry
            found = _last_timestamp(lines, base)
        else:
            tail = chunk[-TAIL_BYTES:]
            tail_lines = tail.split(b"\n")
            if chunk.endswith(b"\n"):
                tail_lines.pop()
            found = _last_timestamp(tail_lines, base + lines_here - len(tail_lines))
        if found is not None:
            carry = found
        base += lines_here
        if base >= last:
            break
    return out


def _last_timestamp(lines: list[bytes], first_line_no_minus_one: int) -> tuple[int, str] | None:
    for j in range(len(lines) - 1, -1, -1):
        if TIMESTAMP.search(lines[j]) is not None:
            return first_line_no_minus_one + j + 1, decode(lines[j][:300])
    return None

"""What Python's ``faulthandler`` prints: every thread's frames, innermost first, written into the process's stderr.

A trainer gets them from ``faulthandler.dump_traceback_later(timeout)`` (a watchdog of its own step), from
``faulthandler.register(signal.SIGUSR1)`` (its launcher or a person sends the signal to a hung job), or from
``faulthandler.enable()`` when the process dies of a fatal signal::

    Timeout (0:00:15)!                                        (dump_traceback_later)
    Fatal Python error: Segmentation fault                    (enable(), on SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE)

    Thread 0x00007f2c131c3b80 (most recent call first):       ("Current thread 0x..." for the thread that dumps)
      File "/srv/train.py", line 13 in read_shard
      File "/srv/train.py", line 20 in <module>

    Stack (most recent call first):                           (one thread only: all_threads=False)

The threads of one dump follow each other; the main thread, the oldest, comes last (the interpreter lists the newest
first). Each line may carry what a launcher put before it (an ``srun --label``, a ``[rankN]:`` prefix); the caller
gives one process's lines with that removed. Pure: lines in, :class:`~debug_training_logs.formats.py_spy`'s stack
types out (the same reader of states reads both).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from debug_training_logs.formats.py_spy import MAX_FRAMES, MAX_THREADS, Frame, ProcessStacks, ThreadStack

HEADER: Final = re.compile(
    r"^(?:(?P<current>Current thread)|Thread|Stack)(?: (?P<tid>0x[0-9a-fA-F]{1,20}))? \(most recent call first\):\s*$"
)
"""A thread's header (its id; ``Stack`` for a one-thread dump)."""
_FRAME: Final = re.compile(
    r'^\s{0,4}File "(?P<file>[^"]{0,1000})", line (?P<line>\d{1,9}) in (?P<func>\S.{0,300}?)\s*$'
)
"""A frame (two blanks of indentation, fewer once a launcher's prefix took them; no comma before ``in``: a
traceback's frame has one)."""
_UNKNOWN_FRAME: Final = re.compile(r"^\s{0,4}(?:File \"<unknown>\"|<no Python frame>)")
_CAUSE: Final = re.compile(r"^(?:Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!|Fatal Python error: (?P<fatal>.{1,200}))\s*$")
"""What opens a dump: the watchdog's timeout, or the fatal error that made it."""
MAX_LINES_PER_DUMP: Final = MAX_FRAMES + 8
"""Lines read after a header for its frames."""


Cause = tuple[int, str, str]
"""The fatal error a dump came with: (its line number, the line as the file has it, the error's words)."""


def parse(lines: Sequence[tuple[int, str, str]]) -> list[tuple[ProcessStacks, Cause | None]]:
    """The dumps of one process in ``lines``: (line number, text without the launcher's prefix, the line as the file
    has it), in file order. A dump is the threads whose headers follow each other with nothing but their frames (and
    blank lines) between; each dump is one :class:`ProcessStacks` (no pid: faulthandler prints none), its main
    thread first, with the fatal error that made it (``Segmentation fault``), None for a dump on request."""
    out: list[tuple[ProcessStacks, Cause | None]] = []
    threads: list[ThreadStack] = []
    current: list[tuple[int, str, str, bool]] = []  # the open thread's header: (line, text, raw, is current)
    frames: list[Frame] = []
    fatal: Cause | None = None
    last = -1

    def close_thread() -> None:
        if current and len(threads) < MAX_THREADS:
            no, text, raw, is_current = current[0]
            h = HEADER.match(text)
            tid = h.group("tid") if h is not None else None
            name = "current" if is_current else None
            threads.append(ThreadStack(tid, name, None, False, tuple(frames), no, raw))
        current.clear()
        frames.clear()

    def close_dump() -> None:
        nonlocal fatal
        close_thread()
        if threads:
            out.append((ProcessStacks(None, None, None, _main_first(threads), threads[0].line_no), fatal))
        threads.clear()
        fatal = None

    for no, text, raw in lines:
        h = HEADER.match(text)
        if h is not None:
            if current and frames and last >= 0 and not _adjacent(lines, last, no):
                close_dump()
            close_thread()
            current.append((no, text, raw, h.group("current") is not None))
            last = no
            continue
        m = _FRAME.match(text)
        if m is not None and current:
            if len(frames) < MAX_FRAMES:
                where = m.group("file")
                frames.append(Frame(m.group("func"), where, int(m.group("line")), False, (), no, raw))
            last = no
            continue
        if not text.strip() or (current and _UNKNOWN_FRAME.match(text)):
            continue
        c = _CAUSE.match(text)
        if threads or current:
            close_dump()
        if c is not None and c.group("fatal"):
            fatal = (no, raw, c.group("fatal"))
    close_dump()
    return out


def _adjacent(lines: Sequence[tuple[int, str, str]], last: int, no: int) -> bool:
    """Whether nothing but blank lines of this process stands between its lines ``last`` and ``no``."""
    between = [t for n, t, _ in lines if last < n < no]
    return all(not t.strip() for t in between)


def _main_first(threads: list[ThreadStack]) -> tuple[ThreadStack, ...]:
    """The threads with the main one first: the one that dumped on a fatal error (``Current thread``), else the one
    that runs the script's top level (its outermost frame ``<module>``), else one not started by ``threading``, else
    the oldest (listed last)."""
    current = next((t for t in threads if t.name == "current"), None)
    top = next((t for t in threads if t.frames and t.frames[-1].function == "<module>"), None)
    own = next((t for t in reversed(threads) if t.frames and not _THREAD_START.search(t.frames[-1].function)), None)
    main = current or top or own or threads[-1]
    return (main, *(t for t in threads if t is not main))


_THREAD_START: Final = re.compile(r"^_bootstrap(?:_inner)?$|^run$|^_worker$")
"""The outermost frame of a thread ``threading`` started."""

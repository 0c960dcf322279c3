"""Progress reporting without passing callbacks through every layer.

Long work (scanning hundreds of files) calls :func:`report` as it goes. The MCP server installs a reporter for the
duration of a tool call (it forwards to ``ctx.report_progress``); the CLI installs :class:`TerminalProgress` when
stderr is a terminal and :class:`LoggedProgress` with ``-v``; with neither, :func:`report` is a no-op.
The reporter lives in a ``ContextVar`` so that concurrent tool calls do not see each other's reporter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # (logging and shutil cost ~4 ms to import, before a command's scan can start: not imported for it)
    import logging

Reporter = Callable[[float, float | None, str | None], None]

_reporter: ContextVar[Reporter | None] = ContextVar("debug_training_logs_progress", default=None)


def report(progress: float, total: float | None = None, message: str | None = None) -> None:
    """Report that ``progress`` of ``total`` units are done (units are the caller's: files, bytes, nodes)."""
    fn = _reporter.get()
    if fn is not None:
        fn(progress, total, message)


@contextmanager
def reporting_to(fn: Reporter) -> Iterator[None]:
    """Route :func:`report` calls made in this context (and threads started with a copy of it) to ``fn``."""
    token = _reporter.set(fn)
    try:
        yield
    finally:
        _reporter.reset(token)


class TerminalProgress:
    """A one-line live status on a terminal's stderr (``[37/128] scanned error-48213-37.out``), redrawn at most
    ten times a second and erased by :meth:`close`. The CLI uses it only when stderr is a TTY, so pipes, files and
    CI logs stay clean."""

    def __init__(self, stream: TextIO, prefix: str = "", interval_s: float = 0.1) -> None:
        self.stream = stream
        self.prefix = prefix
        self.interval_s = interval_s
        self.last_draw = 0.0
        self.drawn = False

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        now = time.monotonic()
        final = total is not None and progress >= total
        if now - self.last_draw < self.interval_s and not final:
            return
        self.last_draw = now
        count = f"[{progress:g}/{total:g}]" if total else f"[{progress:g}]"
        text = f"{self.prefix}{count} {message or ''}".rstrip()
        import shutil

        width = shutil.get_terminal_size((100, 20)).columns - 1
        self.stream.write("\r\x1b[K" + text[:width])
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False


class LoggedProgress:
    """Progress as log records (``-v``): one INFO line when a phase starts and one when it ends with its duration
    and rate, every report at DEBUG (``-vv``). A phase is a run of reports with the same total; a report that goes
    back down starts the next one (a scan of worker logs, then the AIS index, ...)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.total: float | None = None
        self.last = 0.0
        self.started = 0.0
        self.last_message: str | None = None

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if total != self.total or progress < self.last:
            self._finish()
            self.total, self.started = total, time.monotonic()
            self.logger.info("%s", message or (f"started: {total:g} to do" if total else "started"))
        self.last, self.last_message = progress, message
        self.logger.debug("%g/%s %s", progress, f"{total:g}" if total else "?", message or "")
        if total is not None and progress >= total:
            self._finish()

    def _finish(self) -> None:
        if self.total is None and self.last == 0:
            return
        took = time.monotonic() - self.started
        rate = f" ({self.last / took:.1f}/s)" if took > 0 else ""
        self.logger.info(
            "done: %g/%s in %.2f s%s (last: %s)",
            self.last,
            f"{self.total:g}" if self.total else "?",
            took,
            rate,
            self.last_message or "",
        )
        self.total, self.last = None, 0.0


def fan_out(*reporters: Reporter) -> Reporter:
    """One reporter that calls each of ``reporters``."""

    def call(progress: float, total: float | None, message: str | None) -> None:
        for fn in reporters:
            fn(progress, total, message)

    return call

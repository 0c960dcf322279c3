"""Progress reporting without passing callbacks through every layer.

Long work (scanning hundreds of files) calls :func:`report` as it goes. The MCP server installs a reporter for the
duration of a tool call (it forwards to ``ctx.report_progress``); the CLI installs none, so :func:`report` is a no-op.
The reporter lives in a ``ContextVar`` so that concurrent tool calls do not see each other's reporter.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

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

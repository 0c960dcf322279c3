"""Work the main process can do while a scan's worker processes read the files.

On a job big enough for worker processes, the main process only waits for their results during the scan. Work it
will need right after the scan (building the result models, importing the modules that read the answer) costs less
there than before the scan starts (where it delays the workers) or after it (where nothing else runs). A caller
queues such work with :func:`later`; the job scan runs it once the first file's result has arrived (the workers
exist and are busy). Work that no scan ran is simply done on first use, as it would have been without a queue.

The queue is the calling thread's: in the server, one request's scan never runs (or waits on) another request's work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

_LOCAL = threading.local()


def _queue() -> list[Callable[[], object]]:
    q: list[Callable[[], object]] | None = getattr(_LOCAL, "queue", None)
    if q is None:
        q = _LOCAL.queue = []
    return q


def later(task: Callable[[], object]) -> None:
    """Run ``task`` once, in this process, while the next scan's workers read files (see the module doc); a task
    already queued is not queued twice."""
    q = _queue()
    if task not in q:
        q.append(task)


def run_queued() -> None:
    """Run and forget every queued task, oldest first (called by the job scan as files arrive)."""
    q = _queue()
    while q:
        q.pop(0)()


@contextmanager
def queued(task: Callable[[], object] | None) -> Iterator[None]:
    """Queue ``task`` (:func:`later`) for a scan within the block; if none ran it, it is dropped at the block's end
    (its caller then does that work itself). ``None``: nothing to queue."""
    if task is None:
        yield
        return
    later(task)
    try:
        yield
    finally:
        with suppress(ValueError):
            _queue().remove(task)

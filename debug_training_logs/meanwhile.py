"""Work the main process can do while a scan's worker processes read the files.

On a job big enough for worker processes, the main process only waits for their results during the scan. Work it
will need right after the scan (building the result models, importing the modules that read the answer) costs less
there than before the scan starts (where it delays the workers) or after it (where nothing else runs). A caller
queues such work with :func:`later`; the job scan runs it once the first file's result has arrived (the workers
exist and are busy). Work that no scan ran is simply done on first use, as it would have been without a queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

_QUEUE: list[Callable[[], object]] = []


def later(task: Callable[[], object]) -> None:
    """Run ``task`` once, in this process, while the next scan's workers read files (see the module doc); a task
    already queued is not queued twice."""
    if task not in _QUEUE:
        _QUEUE.append(task)


def run_queued() -> None:
    """Run and forget every queued task, oldest first (called by the job scan as files arrive)."""
    while _QUEUE:
        try:
            task = _QUEUE.pop(0)
        except IndexError:  # another thread took the last one
            return
        task()


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
            _QUEUE.remove(task)

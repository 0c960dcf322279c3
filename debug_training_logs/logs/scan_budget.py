"""The time budget of the fallback (``regex`` module, backtracking) patterns over one whole search, shared by its
worker processes, and the fallback calls charged to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from debug_training_logs.errors import UserInputError

FALLBACK_BUDGET_S = 20.0
"""Seconds the fallback (``regex`` module, backtracking) patterns may spend in total over one whole search, across
every file and worker process; when it runs out the search stops with a :class:`UserInputError`. One budget per
search, not per chunk: 40 files that each cost just under a per-chunk limit must not add up to minutes."""


class _Budget:
    """Seconds left for backtracking in this search, shared by the forked worker processes (a shared double)."""

    def __init__(self, seconds: float) -> None:
        from multiprocessing import get_context  # only a search with a fallback pattern needs it (~4 ms to import)

        self.total = seconds
        self._left = get_context("fork").Value("d", seconds)

    def left(self) -> float:
        return float(self._left.value)

    def spend(self, seconds: float) -> None:
        with self._left.get_lock():
            self._left.value -= seconds


_BUDGET: _Budget | None = None
"""The budget of the search in progress (set by :func:`scan_each` before worker processes fork)."""


def _budget() -> _Budget:
    global _BUDGET
    if _BUDGET is None:
        _BUDGET = _Budget(FALLBACK_BUDGET_S)
    return _BUDGET


def _fallback_timeout(pat: Any) -> UserInputError:
    text = pat.pattern.decode(errors="replace") if isinstance(pat.pattern, bytes) else str(pat.pattern)
    return UserInputError(
        f"Pattern {text!r} needs a backtracking engine and used up this search's budget of "
        f"{_budget().total:.0f} s for such patterns before every file was read; the search was stopped. Rewrite it "
        "in RE2 syntax (no back-references or look-arounds), or search fewer files."
    )


def _finditer(rx: Any, data: bytes, timeout: float) -> list[Any]:
    return list(rx.finditer(data, timeout=timeout))


def _search(rx: Any, data: bytes, timeout: float) -> Any:
    return rx.search(data, timeout=timeout)


def _run_fallback(pat: Any, call: Callable[[float], Any]) -> Any:
    """``call(timeout)`` within what is left of the search's backtracking budget, charging the time it took."""
    budget = _budget()
    left = budget.left()
    if left <= 0:
        raise _fallback_timeout(pat)
    t0 = time.monotonic()
    try:
        return call(left)
    except TimeoutError as exc:
        raise _fallback_timeout(pat) from exc
    finally:
        budget.spend(time.monotonic() - t0)

"""The optional compiled helper that aggregates runs of progress lines per rank (``_fields``, built from
``_fields.c`` at install when a C compiler is there).

:func:`native` gives the module or None: not built, or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` set. Without it the
evidence sink reads every progress line on its own (the same results, slower). ``progress_run(lines, line_nos,
start)`` returns ``(stop, stats, points)``: it answers for ``lines[start:stop]`` and stops at the first line it
leaves to the per-line path; ``stats`` maps each rank (None: no rank) to ``[first index, last index, count]`` in order
of first appearance, ``points`` maps each rank to its ``(line_no, None, step_ms)`` step times in line order.
"""

from __future__ import annotations

import importlib
import os
from typing import Protocol


class ProgressRun(Protocol):
    def progress_run(
        self, lines: list[str], line_nos: list[int], start: int, /
    ) -> tuple[int, dict[int | None, list[int]], dict[int | None, list[tuple[int, None, float]]]]: ...


def native() -> ProgressRun | None:
    """The compiled helper, or None (not built, or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` set)."""
    if os.environ.get("DEBUG_TRAINING_LOGS_NO_NATIVE"):
        return None
    try:
        mod: ProgressRun = importlib.import_module("debug_training_logs.logs._fields")
    except ImportError:
        return None
    return mod

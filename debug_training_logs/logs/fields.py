"""The optional compiled helper that aggregates runs of progress lines per rank (``_fields``, built from
``_fields.c`` at install when a C compiler is there).

:func:`native` gives the module or None: not built, or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` set. Without it the
evidence sink reads every progress line on its own (the same results, slower). ``progress_run(lines, line_nos,
start, time_of)`` returns ``(stop, stats, points, timed_idx, timed_wt)``: it answers for ``lines[start:stop]`` and
stops at the first line it leaves to the per-line path; ``stats`` maps each rank (None: no rank) to ``[first index,
last index, count]`` in order of first appearance, ``points`` maps each rank to its ``(line_no, time, step_ms)`` step
times in line order, ``timed_idx``/``timed_wt`` are the indices and times of the lines that have a full date (each
distinct date text is given to ``time_of``, :func:`~debug_training_logs.formats.timestamps.parse_wall_time`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Protocol

from debug_training_logs.formats.timestamps import WallTime


class ProgressRun(Protocol):
    def progress_run(
        self, lines: list[str], line_nos: list[int], start: int, time_of: Callable[[str], WallTime | None], /
    ) -> tuple[
        int,
        dict[int | None, list[int]],
        dict[int | None, list[tuple[int, WallTime | None, float]]],
        list[int],
        list[WallTime],
    ]: ...


def native() -> ProgressRun | None:
    """The compiled helper, or None (not built, or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` set)."""
    if os.environ.get("DEBUG_TRAINING_LOGS_NO_NATIVE"):
        return None
    try:
        mod: ProgressRun = importlib.import_module("debug_training_logs.logs._fields")
    except ImportError:
        return None
    return mod

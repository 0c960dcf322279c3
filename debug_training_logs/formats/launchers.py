"""What launchers other than torchrun say of a worker's exit: typed events from single lines.

Pure functions over one line of text (never a file). Each launcher reports the worker that ended, in its own words:

* ``torch.multiprocessing.spawn`` (no agent): ``ProcessExitedException: process 2 terminated with exit code 3`` /
  ``... terminated with signal SIGKILL``; a worker's exception quoted under ``-- Process 2 terminated with the
  following error:``. The process index is the rank the parent gave it.
* ``srun`` (one task per rank): ``srun: error: gpu-c102: task 9: Killed``, ``srun: error: node7: tasks 6,7,10-11:
  Exited with exit code 1``. The task id is the rank only when srun starts the workers itself (no torchrun between):
  the caller decides (:attr:`WorkerExit.per_task`).
* DeepSpeed's launcher: ``[launch.py:...:sigkill_handler] ['python', ..., '--local_rank=1', ...] exits with return
  code = -11``: a local rank.

A negative exit code is a signal; srun's words map to one (``Killed`` SIGKILL, ``Segmentation fault`` SIGSEGV,
``Aborted`` SIGABRT, ``Terminated`` SIGTERM).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from debug_training_logs.formats.torchrun import signal_name

NEEDLES: Final[tuple[str, ...]] = (
    "terminated with the following error",
    "terminated with exit code",
    "terminated with signal",
    ": task",
    "exits with return code",
)
"""Literals that select candidate lines (named data: a scan compiles them)."""

SPAWN_ERROR_HEADER: Final = re.compile(r"^-- Process (?P<p>\d+) terminated with the following error:")
"""``mp.spawn``'s parent quoting a worker's traceback: the lines up to its exception line are process ``p``'s."""
_SPAWN = re.compile(r"\bprocess (?P<p>\d+) terminated with (?:exit code (?P<code>-?\d+)|signal (?P<sig>SIG[A-Z]+))")
_SRUN = re.compile(
    r"srun: error: (?P<host>[\w.\-\[\],]+): tasks? (?P<tasks>[\d,\-]+): (?P<how>Exited with exit code (?P<code>\d+)"
    r"|Killed|Segmentation fault|Aborted|Terminated|Bus error)"
)
_DEEPSPEED = re.compile(r"--local_rank=(?P<local>\d+).*?exits with return code = (?P<code>-?\d+)")
_SRUN_SIGNALS = {"Killed": -9, "Segmentation fault": -11, "Aborted": -6, "Terminated": -15, "Bus error": -7}
_SIGNUMS = {"SIGKILL": -9, "SIGSEGV": -11, "SIGABRT": -6, "SIGTERM": -15, "SIGBUS": -7, "SIGINT": -2, "SIGFPE": -8}
MAX_TASKS = 1 << 16
"""A task range wider than this is not credible (a garbled line): ignored."""


@dataclass(frozen=True, repr=False)
class WorkerExit:
    """A launcher's report that workers ended: their ranks (or one local rank), the exit code (negative: the signal),
    and whether the numbers are srun task ids (ranks only when srun started each worker itself)."""

    ranks: frozenset[int]
    exitcode: int
    local_rank: int | None = None
    host: str | None = None
    per_task: bool = False

    @property
    def signal(self) -> str | None:
        return signal_name(self.exitcode)


def _tasks(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        if not a.isdigit() or (b and not b.isdigit()):
            return frozenset()
        lo, hi = int(a), int(b or a)
        if hi < lo or hi - lo > MAX_TASKS or len(out) > MAX_TASKS:
            return frozenset()
        out.update(range(lo, hi + 1))
    return frozenset(out)


def parse_line(line: str) -> WorkerExit | None:
    """The worker exit ``line`` reports, else None."""
    if "terminated with" in line and (m := _SPAWN.search(line)):
        code = int(m.group("code")) if m.group("code") is not None else _SIGNUMS.get(m.group("sig"), -1)
        return WorkerExit(frozenset({int(m.group("p"))}), code)
    if "srun: error:" in line and (m := _SRUN.search(line)):
        how = m.group("how")
        code = int(m.group("code")) if m.group("code") is not None else _SRUN_SIGNALS.get(how, -1)
        tasks = _tasks(m.group("tasks"))
        return WorkerExit(tasks, code, host=m.group("host"), per_task=True) if tasks else None
    if "exits with return code" in line and (m := _DEEPSPEED.search(line)):
        return WorkerExit(frozenset(), int(m.group("code")), local_rank=int(m.group("local")))
    return None

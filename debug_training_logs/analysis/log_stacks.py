"""Python stack dumps written into the ranks' own logs (:mod:`~debug_training_logs.formats.faulthandler`), read as
the hang analysis reads a ``py-spy dump``: each dumped rank's state, tied to its rank by the line that holds it.

The scan finds each dump's header (the ``stack_header`` signal); the lines after it are read back from the file
(at scan speed, from the scan's checkpoints) and split by the rank each line's prefix names (an ``srun --label``, a
``[rankN]:`` prefix, a ``--tee`` local rank, or the file's one rank): ranks that dumped at once write their frames
between each other's. A rank dumped several times counts by its last dump, and moves when two dumps differ.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from debug_training_logs.analysis.hang_facts import ProcessState
from debug_training_logs.analysis.stack_states import state_of
from debug_training_logs.formats import faulthandler
from debug_training_logs.formats.prefixes import LOCAL_RANK, strip_ansi
from debug_training_logs.logs.attribution import rank_of_key, rank_or_local, strip_rank_prefix
from debug_training_logs.logs.scan_lines import lines_at

if TYPE_CHECKING:
    from debug_training_logs.analysis.evidence_types import Hit
    from debug_training_logs.analysis.inventory_types import FileInventory, JobScan

MAX_WINDOW_LINES: Final = 20_000
"""Lines read back of a file, up to a little after its last dump header (a dump of every thread of a few ranks fits
many times)."""
LINES_BEFORE: Final = 4
"""Lines read before a file's first header: the fatal error or the timeout that opens its dump."""
MAX_FILES: Final = 2_000
"""Files whose dumps are read (one per rank of a big job's per-rank logs)."""


@dataclass(frozen=True, repr=False)
class LogStacks:
    """The ranks' stack dumps found in their logs."""

    processes: list[ProcessState]
    fatal: dict[int, tuple[str, faulthandler.Cause]]
    """Per rank whose dump came with a fatal error (faulthandler on a SIGSEGV...): (file, the error's line)."""


def read(job: JobScan, headers: Iterable[Hit]) -> LogStacks:
    """The dumps whose ``headers`` the scan found, per rank (see the module docstring)."""
    by_file: dict[str, list[int]] = defaultdict(list)
    for h in headers:
        by_file[h.file].append(h.line)
    if not by_file:
        return LogStacks([], {})
    files = {lf.rel: lf for lf in job.log_files()}
    inventory = {fi.rel: fi for fi in job.inventory.files}
    processes: list[ProcessState] = []
    fatal: dict[int, tuple[str, faulthandler.Cause]] = {}
    for rel in sorted(by_file)[:MAX_FILES]:
        lf, fi = files.get(rel), inventory.get(rel)
        if lf is None or fi is None:
            continue
        lines = sorted(by_file[rel])
        # the last dumps decide (a rank dumped again and again while it hung): the window ends after the last header
        half = MAX_WINDOW_LINES // 2
        last = lines[-1] + min(faulthandler.MAX_LINES_PER_DUMP * max(1, len(fi.ranks)), half)
        first = max(lines[0], lines[-1] - half) - LINES_BEFORE
        text = lines_at(lf, set(range(max(1, first), last + 1)))
        for rank, mine in _per_rank(text, fi).items():
            dumps = faulthandler.parse(mine)
            if not dumps:
                continue
            states = [state_of(p) for p, _cause in dumps]
            moved = any((s.what, s.call_site) != (states[-1].what, states[-1].call_site) for s in states)
            processes.append(ProcessState(rank, None, fi.node, states[-1], rel, _mapped_by(fi, rank), (), moved))
            cause = next((c for _p, c in dumps if c is not None), None)
            if cause is not None:
                fatal.setdefault(rank, (rel, cause))
    return LogStacks(processes, fatal)


def _per_rank(text: dict[int, str], fi: FileInventory) -> dict[int, list[tuple[int, str, str]]]:
    """The read lines by the rank that wrote them: (line number, text without the launcher's prefixes, raw text)."""
    single = next(iter(fi.ranks)) if len(fi.ranks) == 1 else None
    out: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for no in sorted(text):
        raw = text[no]
        plain = strip_ansi(raw)
        r = rank_of_key(rank_or_local(plain), single, fi.local_ranks)
        if r is None:
            continue  # a line no prefix ties to a rank in a file of several ranks
        out[r].append((no, _own_words(plain), raw))
    return out


def _own_words(text: str) -> str:
    """The line without what launchers and torch put before it: a task label, a ``--tee`` prefix (after the label when
    torchrun runs under ``srun -l``), ``[rankN]:``."""
    text = strip_rank_prefix(text)
    local = LOCAL_RANK.match(text)
    return strip_rank_prefix(text[local.end() :]) if local is not None else text


def _mapped_by(fi: FileInventory, rank: int) -> str:
    return "its log file" if fi.ranks == {rank} else "the rank its log lines carry"

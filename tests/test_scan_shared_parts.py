"""What ``_scan_one`` builds once per scan and shares between files (the dense patterns' :class:`scan._Dense`) and
what it does per window (ranks collected after the window's search): the results are those of a scan that builds
everything afresh for each file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.logs import scan
from debug_training_logs.logs.discovery import LogFile, discover
from debug_training_logs.logs.scan import PatternSpec, scan_files


class _Lines:
    """A sink that keeps (pattern ids, line number) of every hit."""

    def __init__(self, lf: object) -> None:
        self.seen: list[tuple[list[int], int]] = []

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        self.seen.append((list(pattern_ids), line_no))

    def finish(self) -> list[tuple[list[int], int]]:
        return self.seen


def _node(path: Path, first_rank: int, steps: int, stop: dict[int, int]) -> None:
    """A node file of 8 ranks writing a metric line per step (rank r stops at ``stop[r]``), one rare line."""
    lines = []
    for s in range(steps):
        for r in range(first_rank, first_rank + 8):
            if s < stop.get(r, steps):
                lines.append(f"[rank{r}]: Epoch 0: {s}/{steps} loss=1.0")
        if s == steps // 2:
            lines.append(f"[rank{first_rank}]: Connection reset by peer")
    path.write_text("\n".join(lines) + "\n")


def _results(files: list[LogFile], spec: PatternSpec) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for res in scan_files(files, spec, _Lines):
        out.append((res.file.rel, res.counts, sorted(res.ranks), sorted(res.sampled), res.lines, res.sink_result))
    return out


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_dense_parts_are_shared_between_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    if not native:
        monkeypatch.setattr(scan, "_native", lambda: None)
    monkeypatch.setattr(scan, "_worker_count", lambda files: 1)
    for k, first in enumerate((0, 8, 16)):
        _node(tmp_path / f"node{k}.log", first, 3000, {first + 5: 2990 - 100 * k})
    files = sorted(discover(tmp_path)[0], key=lambda f: f.rel)
    spec = PatternSpec((r"Epoch \d+: \d+/", "Connection reset"), dense=(True, False))
    scan._DENSES.clear()
    together = _results(files, spec)
    assert len(scan._DENSES) == 1  # one _Dense for the three files
    alone = []
    for lf in files:
        scan._DENSES.clear()
        alone += _results([lf], spec)
    assert together == alone
    for k, (_rel, counts, ranks, sampled, _lines, seen) in enumerate(together):
        assert ranks == list(range(8 * k, 8 * k + 8)) and sampled == [0] and counts[1] == 1
        assert len(seen) < 8 * 3000 // 4  # sampled, not every metric line


def test_worker_processes_take_the_scan_from_the_fork_and_leave_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parallel scan's arguments reach its forked workers through :data:`scan._TASKS` (a task names only its
    token and file): the results equal one process's, and no scan's arguments stay once it ends, however it ends."""
    for k, first in enumerate((0, 8, 16, 24)):
        _node(tmp_path / f"node{k}.log", first, 400, {first + 3: 300 - 50 * k})
    files = sorted(discover(tmp_path)[0], key=lambda f: f.rel)
    spec = PatternSpec((r"Epoch \d+: \d+/", "Connection reset"), dense=(True, False))
    monkeypatch.setattr(scan, "_worker_count", lambda files: 1)
    alone = _results(files, spec)
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    tasks: list[Any] = []
    real_submit = scan.ProcessPoolExecutor.submit

    def submit(pool: Any, fn: Any, *args: Any) -> Any:
        tasks.append((fn, args))
        return real_submit(pool, fn, *args)

    monkeypatch.setattr(scan.ProcessPoolExecutor, "submit", submit)
    assert _results(files, spec) == alone
    assert len(tasks) == len(files) and all(fn is scan._scan_task and len(args) == 2 for fn, args in tasks)
    assert not scan._TASKS
    scans = scan.scan_each(files, spec, _Lines, lambda s: s.lines)
    next(scans)
    assert len(scan._TASKS) == 1  # in use while the scan runs
    scans.close()  # a caller that stops reading early (an error in its fold)
    assert not scan._TASKS

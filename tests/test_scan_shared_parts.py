"""What ``_scan_one`` builds once per scan and shares between files (the dense patterns' :class:`scan_dense._Dense`) and
what it does per window (ranks collected after the window's search): the results are those of a scan that builds
everything afresh for each file."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.logs import scan, scan_dense, scan_matcher, scan_plan, scan_pool, scan_types
from debug_training_logs.logs.discovery import LogFile, discover
from debug_training_logs.logs.scan import scan_files
from debug_training_logs.logs.scan_types import PatternSpec
from tests.processes import children


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
        for module in (scan_types, scan_plan, scan_matcher, scan_dense):  # where it is looked up
            monkeypatch.setattr(module, "_native", lambda: None)
    monkeypatch.setattr(scan, "_worker_count", lambda files: 1)
    for k, first in enumerate((0, 8, 16)):
        _node(tmp_path / f"node{k}.log", first, 3000, {first + 5: 2990 - 100 * k})
    files = sorted(discover(tmp_path)[0], key=lambda f: f.rel)
    spec = PatternSpec((r"Epoch \d+: \d+/", "Connection reset"), dense=(True, False))
    scan_dense._DENSES.clear()
    together = _results(files, spec)
    assert len(scan_dense._DENSES) == 1  # one _Dense for the three files
    alone = []
    for lf in files:
        scan_dense._DENSES.clear()
        alone += _results([lf], spec)
    assert together == alone
    for k, (_rel, counts, ranks, sampled, _lines, seen) in enumerate(together):
        assert ranks == list(range(8 * k, 8 * k + 8)) and sampled == [0] and counts[1] == 1
        assert len(seen) < 8 * 3000 // 4  # sampled, not every metric line


def _four_nodes(tmp_path: Path) -> list[LogFile]:
    for k, first in enumerate((0, 8, 16, 24)):
        _node(tmp_path / f"node{k}.log", first, 400, {first + 3: 300 - 50 * k})
    return sorted(discover(tmp_path)[0], key=lambda f: f.rel)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_worker_processes_take_the_scan_from_the_fork_and_leave_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """A parallel scan's workers are forked with its arguments: the results equal one process's, and no worker
    process outlives the scan, however it ends."""
    files = _four_nodes(tmp_path)
    spec = PatternSpec((r"Epoch \d+: \d+/", "Connection reset"), dense=(True, False))
    monkeypatch.setattr(scan, "_worker_count", lambda files: 1)
    alone = _results(files, spec)
    monkeypatch.setattr(scan, "_worker_count", lambda files: workers)
    before = children()
    assert _results(files, spec) == alone
    assert children() == before
    scans = scan.scan_each(files, spec, _Lines, lambda s: s.lines)
    next(scans)
    assert len(children() - before) == workers  # at work while the scan runs
    scans.close()  # a caller that stops reading early (an error in its fold)
    assert children() == before


def _fails_on_node2(s: scan_types.FileScan) -> int:
    if s.file.rel == "node2.log":
        raise ValueError(f"cannot pack {s.file.rel}")
    return s.lines


def _dies_on_node2(s: scan_types.FileScan) -> int:
    if s.file.rel == "node2.log":
        os.kill(os.getpid(), signal.SIGKILL)
    return s.lines


@pytest.mark.parametrize(
    ("pack", "error", "message"),
    [(_fails_on_node2, ValueError, r"cannot pack node2\.log"), (_dies_on_node2, scan_pool.WorkerDied, "signal 9")],
    ids=["error", "death"],
)
def test_a_failing_worker_fails_the_scan_and_no_worker_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pack: Any, error: type[Exception], message: str
) -> None:
    """An error in a worker is raised by the scan with the worker's traceback as its cause; a worker that dies
    (killed) fails the scan with :class:`~debug_training_logs.logs.scan_pool.WorkerDied`. Either way no worker is left."""
    files = _four_nodes(tmp_path)
    spec = PatternSpec(("Connection reset",))
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    before = children()
    with pytest.raises(error, match=message) as info:
        list(scan.scan_each(files, spec, None, pack))
    if error is ValueError:
        assert pack.__name__ in str(info.value.__cause__)  # the worker's traceback
    assert children() == before


def test_an_interrupt_in_the_main_process_ends_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the main process waits for the workers: KeyboardInterrupt reaches the caller at once (the busy
    workers are not waited for) and no worker is left."""
    files = _four_nodes(tmp_path)
    spec = PatternSpec(("Connection reset",))
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    before = children()
    biggest = max(files, key=lambda f: f.size)  # handed out first

    def slow_but_biggest(s: scan_types.FileScan) -> int:
        if s.file != biggest:
            time.sleep(5)
        return s.lines

    scans = scan.scan_each(files, spec, None, slow_but_biggest)
    assert files[next(scans)[0]] == biggest
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)  # raises KeyboardInterrupt
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(scans)  # waits for a worker
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - start < 3
    assert children() == before


def test_scans_in_threads_at_once_each_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server runs tools in threads: scans whose workers fork while another scan's pipes are open all end (a
    worker holding another scan's pipe would keep that scan waiting, and two such scans could wait for each other)."""
    files = _four_nodes(tmp_path)
    spec = PatternSpec(("Connection reset",))
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    expected = {f.rel: s.lines for f, s in zip(files, scan_files(files, spec), strict=True)}

    def slow(s: scan_types.FileScan) -> int:
        time.sleep(0.05)
        return s.lines

    before = children()
    got: list[dict[str, int]] = []

    def one() -> None:
        got.append({files[i].rel: n for i, n in scan.scan_each(files, spec, None, slow)})

    threads = [threading.Thread(target=one, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert got == [expected] * 4
    assert children() == before
    assert not scan_pool._POOL_FDS


def _pipes_open() -> set[str]:
    """The pipes this process has open, as ``pipe:[inode]`` (Linux)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("pipe:"):
                out.add(link)
    return out


def test_a_worker_holds_no_pipe_of_another_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan's workers forked while another scan runs hold none of that scan's pipes."""
    files = _four_nodes(tmp_path)
    spec = PatternSpec(("Connection reset",))
    monkeypatch.setattr(scan, "_worker_count", lambda files: 2)
    first = scan.scan_each(files, spec, None, lambda s: s.lines)
    next(first)  # running, its pipes open
    theirs = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in scan_pool._POOL_FDS}
    assert len(theirs) >= 2  # the result pipes at least
    held = [pipes for _i, pipes in scan.scan_each(files, spec, None, lambda s: _pipes_open())]
    assert len(held) == len(files) and not any(pipes & theirs for pipes in held)
    assert len(list(first)) == len(files) - 1

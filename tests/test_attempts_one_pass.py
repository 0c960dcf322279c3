"""One attempt's launcher facts come from the whole job's scan (filtered by line), and equal the facts of a scan
that kept only that attempt's lines; every restart shape of fixtures/real_torch (and the 2.14 runs), both layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from debug_training_logs.analysis import attempts, launcher
from debug_training_logs.analysis.inventory import scan_consumers
from debug_training_logs.logs.sources import find_sources

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
JOBS = [
    p
    for base in ("real_torch", "real_torch_2_14")
    for shape in sorted((ROOT / base).iterdir())
    for p in (shape / "logs", shape / "torchrun_logs")
    if p.is_dir()
]
RESTARTED = [p for p in JOBS if p.parent.name.startswith("restart")]


def _whole(logs: Path) -> tuple[launcher.LauncherFacts, attempts.Attempts, object]:
    c = attempts.launcher_consumer()
    job = scan_consumers(logs, [c])[c.key]
    facts = launcher.from_job_scan(job)
    return facts, attempts.split_files([s.file for s in job.files], facts), job


def test_the_restart_shapes_are_here() -> None:
    assert len(RESTARTED) >= 6, RESTARTED


@pytest.mark.parametrize("logs", RESTARTED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_an_attempts_facts_filtered_by_line_equal_its_own_scan(logs: Path) -> None:
    whole, split, job = _whole(logs)
    assert split.count > 1
    for i in range(split.count):
        derived = launcher.for_attempt(job, split.keeper(i))  # type: ignore[arg-type]
        scanned = attempts.gather_launcher(logs, keep=split.keeper(i))
        assert derived is not None
        assert derived == scanned, (logs, i)
    assert attempts.gather_launcher(logs) == whole


@pytest.mark.parametrize("logs", JOBS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_attempts_from_the_shared_scan_equal_a_split_of_their_own(logs: Path) -> None:
    _whole_facts, split, _job = _whole(logs)
    own = attempts.split(logs)
    assert (own.count, own.method, own.boundaries, own.dir_attempt) == (
        split.count,
        split.method,
        split.boundaries,
        split.dir_attempt,
    )
    assert [(a.index, a.outcome, a.ranks, a.start, a.end) for a in own.attempts] == [
        (a.index, a.outcome, a.ranks, a.start, a.end) for a in split.attempts
    ]


def test_too_many_hits_to_replay_means_a_scan_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    logs = ROOT / "real_torch" / "restart" / "logs"
    monkeypatch.setattr(launcher, "MAX_REPLAY_HITS", 3)
    _whole_facts, split, job = _whole(logs)
    assert launcher.for_attempt(job, split.keeper(0)) is None  # type: ignore[arg-type]
    from debug_training_logs.analysis.evidence import gather_evidence

    ev = gather_evidence(find_sources(logs))  # falls back to scanning the attempt's launcher lines
    monkeypatch.undo()
    assert ev.attempt == 0 and ev.launcher == attempts.gather_launcher(logs, keep=split.keeper(0))

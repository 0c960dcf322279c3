"""The work a command does in its main process before and after the scan, moved or shortened, gives the same answers.

* ``nccl``: each file's NCCL lines are unpacked as the file's result arrives (while the scan's workers read the
  others); the table equals the one built from the lazily unpacked results, over NCCL stories, one and two scan
  processes, and a restarted job (an attempt's table has a sink of its own: the early results are not used).
* :mod:`~debug_training_logs.meanwhile`: a queued task runs once, in the main process, after the first file's result
  has arrived; a scan that reads nothing (all cached) leaves it queued; a task is not queued twice.
* ``nccl`` looks for flight-recorder dumps during its scan: the same answer as when they are read after it, and a
  bad ``fr_dir`` is the same error.
* ``analyze`` reads the AIS logs' own evidence during the worker scan: the same evidence as read after it; a
  failure there is raised where it always was.
* Result models are built on first use (``defer_build``): :func:`~debug_training_logs.models.build_deferred` builds
  every one imported, and a deferred model validates and serialises as a built one.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from debug_training_logs import meanwhile
from debug_training_logs.analysis import evidence, evidence_ais, evidence_worker, nccl_hits, nccl_sink, nccl_table
from debug_training_logs.analysis.inventory import consumer_for, scan_consumers
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs import scan
from debug_training_logs.logs.scan_cache import CACHE
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.memo import MEMO, unpack
from debug_training_logs.models import Coverage, Model, build_deferred
from debug_training_logs.tools import attempt_choice
from debug_training_logs.tools._cache import TOOL
from debug_training_logs.tools.registry import all_tools, tool_by_name
from tests.test_post_scan_fold import worker_facts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

NCCL_JOBS = [
    "nccl_missing_node",
    "nccl_root_ahead",
    "nccl_fabric",
    "nccl_styles/torch-2.14",
    "nccl_styles/torch-2.5-ray",
    "nccl_styles/torch-2.10-wrapped-gz",
    "watchdog_hang",
    "data_stall",
    "real_torch/restart",
]


def _logs(name: str) -> Path:
    base = FIXTURES / name
    for sub in ("logs", "torchrun_logs"):
        if (base / sub).is_dir():
            return base / sub
    return base


@pytest.fixture(autouse=True)
def _empty_cache() -> Any:
    CACHE.clear()
    yield
    CACHE.clear()
    meanwhile._queue().clear()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", NCCL_JOBS)
def test_nccl_table_from_early_unpacked_files_equals_the_lazy_one(
    name: str, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _logs(name)
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    seen: list[int | None] = []
    real = nccl_table.nccl_state_table

    def spy(*args: Any, **kwargs: Any) -> Any:
        early = kwargs.get("early")
        seen.append(None if early is None else len(early))
        return real(*args, **kwargs)

    monkeypatch.setattr(nccl_table, "nccl_state_table", spy)
    spec = tool_by_name("nccl")
    assert spec is not None
    got = spec.call(logs_dir=str(logs))
    # the same table from lazily unpacked results: the tool's results are forgotten, the scan's are kept (a cache
    # hit announces no file)
    MEMO.drop(TOOL)
    want = spec.call(logs_dir=str(logs))
    restarted = bool(got.attempts)  # type: ignore[attr-defined]
    assert seen == [None, None] if restarted else seen[1] == 0 and seen[0]
    assert got.model_dump() == want.model_dump()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_early_files_give_the_table_of_the_lazy_ones(workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the analysis level, with every file's result given early and with none."""
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    logs = _logs("nccl_missing_node")
    mine = consumer_for(nccl_sink.NCCL_PATTERNS, nccl_sink.NcclSink)
    early: dict[str, nccl_hits.FileEvents] = {}

    def arrived(_j: int, results: dict[str, Any]) -> None:
        fe = unpack(results[mine.key].sink_result)
        if fe is not None:
            early[fe.rel] = fe

    scan_consumers(logs, [mine], on_file=arrived)
    assert early
    with_early = nccl_table.nccl_state_table(logs, limit=10**9, early=early)
    lazy = nccl_table.nccl_state_table(logs, limit=10**9)
    assert dataclasses.asdict(with_early) == dataclasses.asdict(lazy)


def _four_files(tmp: Path) -> Path:
    logs = tmp / "logs"
    logs.mkdir()
    for node in range(4):
        (logs / f"node{node}.out").write_text("".join(f"[rank{node}]: step {i} loss 1.0\n" for i in range(50)))
    return logs


@pytest.mark.parametrize("workers", [1, 2])
def test_a_queued_task_runs_once_after_the_first_file_arrived(
    workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    logs = _four_files(tmp_path)
    arrived: list[int] = []
    ran: list[int] = []

    def task() -> None:
        ran.append(len(arrived))

    meanwhile.later(task)
    meanwhile.later(task)  # queued once
    c = consumer_for((r"step \d+",), None)
    scan_consumers(logs, [c], on_file=lambda j, _r: arrived.append(j))
    assert ran == [1]
    assert len(arrived) == 4
    # a scan whose files are all cached reads nothing: the task waits for one that does
    meanwhile.later(task)
    scan_consumers(logs, [c], on_file=lambda j, _r: arrived.append(j))
    assert ran == [1]
    assert list(meanwhile._queue()) == [task]


def test_the_queue_is_the_calling_threads() -> None:
    """In the server, requests run in threads: one request's scan runs only its own thread's queued work."""
    ran: list[str] = []
    meanwhile.later(lambda: ran.append("main"))
    other: list[list[object]] = []

    def in_other_thread() -> None:
        other.append(list(meanwhile._queue()))
        meanwhile.later(lambda: ran.append("other"))
        meanwhile.run_queued()

    t = threading.Thread(target=in_other_thread)
    t.start()
    t.join()
    assert other == [[]] and ran == ["other"]
    meanwhile.run_queued()
    assert ran == ["other", "main"] and not meanwhile._queue()


def test_build_deferred_builds_every_result_model() -> None:
    for spec in all_tools():
        _ = spec.result_model
    build_deferred()
    todo: list[type[Model]] = [Model]
    models = []
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        models.append(cls)
    assert len(models) > 30
    assert all(m.__pydantic_complete__ for m in models if m is not Model)


SERVER_BUILDS = """
from debug_training_logs.models import Model
from debug_training_logs.server.app import create_server

create_server()
todo, deferred = [Model], []
while todo:
    cls = todo.pop()
    todo.extend(cls.__subclasses__())
    if cls is not Model and not cls.__pydantic_complete__:
        deferred.append(cls.__qualname__)
print(len(deferred), deferred)
"""


def test_the_server_builds_every_result_model_when_it_starts() -> None:
    """A client's first call of a tool does not wait for its result models to be built (a fresh interpreter: this
    one's models may have been built by other tests)."""
    out = subprocess.run([sys.executable, "-c", SERVER_BUILDS], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0 []"


def test_a_deferred_model_is_built_on_first_use_and_answers_as_a_built_one() -> None:
    class Later(Model):
        """A model made here: not built until used."""

        coverage: Coverage
        names: list[str] = Field(default_factory=list)

    assert not Later.__pydantic_complete__
    cov = Coverage(files_scanned=1, bytes_scanned=2, ranks_found="0", world_size=1, missing_ranks="")
    got = Later.model_validate({"coverage": cov.model_dump(), "names": ["a"]})
    assert Later.__pydantic_complete__
    assert got.model_dump(mode="json") == {"coverage": cov.model_dump(mode="json"), "names": ["a"]}
    assert Later.model_json_schema()["required"] == ["coverage"]


AIS_JOBS = ["data_stall", "ais_idle", "ais_target_restart"]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", AIS_JOBS)
def test_the_ais_logs_read_during_the_worker_scan_give_the_same_evidence(
    name: str, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``analyze`` reads the AIS logs' own evidence while the worker scan runs (after its first file arrived); the
    AIS evidence equals the one read after the scan, and nothing stays queued."""
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    logs, ais = _logs(name), FIXTURES / name / "ais"
    if not logs.is_dir():
        logs = FIXTURES / name / "logs"
    arrived, when = _count_reads(monkeypatch, evidence_ais, "ais_own", evidence)
    monkeypatch.setattr(evidence, "ais_own", evidence_ais.ais_own)  # the same counting reader where the scan reads it
    got = evidence.gather_evidence(find_sources(logs, ais))
    assert when == [1], "read once, while the worker scan ran, after its first file"
    assert not meanwhile._queue()
    assert got.ais is not None
    want = evidence_ais.gather_ais_evidence(ais, got.worker, got.nccl)  # read here, after the scan
    assert dataclasses.asdict(got.ais) == dataclasses.asdict(want)
    # a second call finds every worker file in the scan cache: no scan runs, the AIS logs are read after it
    when.clear()
    again = evidence.gather_evidence(find_sources(logs, ais))
    assert when == [len(arrived)]
    assert not meanwhile._queue()
    assert again.ais is not None and dataclasses.asdict(again.ais) == dataclasses.asdict(want)


def test_an_ais_directory_that_fails_fails_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while the AIS logs are read during the scan is not raised there: the same call after the scan
    raises it (the error the caller always got)."""
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(2, len(files)))

    def broken(_d: Path) -> Any:
        raise RuntimeError("AIS logs unreadable")

    monkeypatch.setattr(evidence, "ais_own", broken)  # read during the scan
    monkeypatch.setattr(evidence_ais, "ais_own", broken)  # read after it
    with pytest.raises(RuntimeError, match="AIS logs unreadable"):
        evidence.gather_evidence(find_sources(_logs("data_stall"), FIXTURES / "data_stall" / "ais"))
    assert not meanwhile._queue()


def _count_reads(
    monkeypatch: pytest.MonkeyPatch, reader_module: Any, reader: str, scan_module: Any
) -> tuple[list[int], list[int]]:
    """(the files arrived from the scan so far, how many had arrived at each call of ``reader_module.<reader>``, the
    AIS or flight-recorder reading queued for the scan), the scan called as ``scan_module.scan_consumers``."""
    arrived: list[int] = []
    when: list[int] = []
    real_read = getattr(reader_module, reader)
    real_scan = scan_module.scan_consumers

    def read(*args: Any) -> Any:
        when.append(len(arrived))
        return real_read(*args)

    def counting_scan(*args: Any, **kwargs: Any) -> Any:
        inner = kwargs.get("on_file")

        def on_file(j: int, results: Any) -> None:
            arrived.append(j)
            if inner is not None:
                inner(j, results)

        return real_scan(*args, **{**kwargs, "on_file": on_file})

    monkeypatch.setattr(reader_module, reader, read)
    monkeypatch.setattr(scan_module, "scan_consumers", counting_scan)
    return arrived, when


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("with_fr_dir", [False, True])
def test_nccl_reads_the_flight_recorder_dumps_during_the_scan(
    workers: int, with_fr_dir: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nccl`` looks for flight-recorder dumps (next to the logs, or in ``fr_dir``) while its scan runs, after the
    first file arrived; the answer equals the one whose dumps are read after the scan (no scan: all cached)."""
    from debug_training_logs.tools import nccl_state_table as tool

    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    logs = FIXTURES / "real_torch" / "stall_fr" / "logs"
    fr_dir = str(FIXTURES / "real_torch" / "stall_fr" / "fr") if with_fr_dir else None
    arrived, when = _count_reads(monkeypatch, tool, "_dumps", attempt_choice)
    spec = tool_by_name("nccl")
    assert spec is not None
    got = spec.call(logs_dir=str(logs), fr_dir=fr_dir)
    assert when == [1]
    assert not meanwhile._queue()
    assert got.flight_recorder is not None and got.flight_recorder.dumps  # type: ignore[attr-defined]
    MEMO.drop(TOOL)  # the tool's results are forgotten, the scan's kept: no file arrives, the dumps are read after
    when.clear()
    want = spec.call(logs_dir=str(logs), fr_dir=fr_dir)
    assert when == [len(arrived)]
    assert got.model_dump() == want.model_dump()
    with pytest.raises(UserInputError, match="flight-recorder directory"):
        spec.call(logs_dir=str(logs), fr_dir=str(FIXTURES / "no such directory"))
    assert not meanwhile._queue()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("fr_dir", [None, FIXTURES / "real_torch" / "stall_fr" / "fr"])
def test_analyze_reads_the_flight_recorder_dumps_during_the_scan(
    workers: int, fr_dir: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    logs = FIXTURES / "real_torch" / "stall_fr" / "logs"
    from debug_training_logs.analysis import fr_dumps

    _arrived, when = _count_reads(monkeypatch, fr_dumps, "read", evidence)
    got = evidence.gather_evidence(find_sources(logs, fr_dir=fr_dir))
    assert when == [1]
    assert not meanwhile._queue()
    assert got.flight_recorder is not None and got.flight_recorder.dumps
    monkeypatch.undo()
    want = fr_dumps.gather(logs.resolve(), fr_dir)
    assert dataclasses.asdict(got.flight_recorder) == dataclasses.asdict(want)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", ["oom_untimed_tail", "throughput_collapse", "memory_creep_oom", "real_torch/restart"])
def test_the_fold_from_items_unpacked_as_files_arrive_equals_the_fold_after_the_scan(
    name: str, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file's evidence items unpacked as it arrives, some of them (the cap), or none: the same evidence."""
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    logs = _logs(name)
    seen: list[int] = []
    real_fold = evidence_worker.worker_evidence_from_scan

    def fold(job: Any, early: Any = None) -> Any:
        seen.append(len(early or {}))
        return real_fold(job, early)

    monkeypatch.setattr(evidence, "worker_evidence_from_scan", fold)
    got = {}
    for cap in (10**6, 1, 0):
        CACHE.clear()
        monkeypatch.setattr(evidence, "EARLY_ITEMS_FILES", cap)
        got[cap] = worker_facts(evidence.gather_evidence(find_sources(logs)).worker)
    restarted = name.startswith("real_torch")
    assert seen[2] == 0 and (restarted or (seen[0] > 1 and seen[1] == 1)), seen
    assert got[10**6] == got[0]
    assert got[1] == got[0]

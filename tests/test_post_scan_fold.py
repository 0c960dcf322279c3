"""The job-level fold after the scan takes per-file work from the scan's workers, and its result equals the old
in-process computation.

* Each file's evidence hits are made into :class:`Hit` s in the worker that scanned it (``Consumer.refine``), times
  in the file's own year, moved to the job's year in the fold when the two differ; ranks from a single-rank file's
  own rank in the fold. Reference: the fold's in-process path over the raw hits (a refine that makes no digest).
* The step-time and memory series are made into flat arrays in the worker that scanned the file
  (``EvidenceSink.finish``); the main process only joins them. Reference: the sink's own per-file points, converted
  and ordered in this process the way the fold did before (every point's time from its line's year or the job's).
* Each torchrun agent's attempt boundaries (its stop candidates and whether workers ran again after them) are
  found in the worker that scanned its file (``attempts.refine_launcher``); ``attempts.split`` reads nothing back.
  Reference: the split that reads the lines back itself, over every restart shape of fixtures/real_torch.
* The launcher's kept lines are parsed (torchrun events, gloo errors, ranks, own exceptions) in the worker that
  scanned the file; the facts equal those of lines parsed in this process, over every fixtures/real_torch shape.
* The NCCL table's input is unpacked, and each file's share of the table (``nccl_table.FilePrep``: its lines by
  rank, facts, families, unranked lines) made, as each file's result arrives, while the other files are still being
  scanned (``scan_consumers(on_file=...)``); the table equals one built from the lazily unpacked results. The same
  for the launcher's per-file results (``launcher.early_result``): the facts equal those unpacked after the scan.
  Over every fixture job too, the table from shares made before the inventory was known (no single rank per file)
  equals the one made without them, single-rank files whose lines name no rank included.

Each over: one file, two files, eighteen files (some state no year: their hits move to the job's year; some lines
name no rank), .gz and .zst copies, a series whose times have no year (the raw fallback), February 29 without a year
in a common year (no digest: the raw hits), and a restarted job (the chosen attempt's second pass), with one and
with two scan processes.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import zstandard

from debug_training_logs.analysis import attempts, evidence, evidence_nccl, launcher
from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_signals import SIGNALS
from debug_training_logs.analysis.evidence_sink import EvidenceSink
from debug_training_logs.analysis.evidence_types import WorkerEvidence
from debug_training_logs.analysis.evidence_worker import worker_evidence_from_scan, worker_patterns
from debug_training_logs.analysis.inventory import LineKeep, consumer_for, kept_sink, scan_consumers, scan_job
from debug_training_logs.analysis.inventory_results import result_item, result_size
from debug_training_logs.analysis.read_back import WORKER_FALLBACK_YEAR
from debug_training_logs.formats.timestamps import with_year
from debug_training_logs.logs import scan
from debug_training_logs.logs.scan_cache import CACHE
from debug_training_logs.logs.sources import find_sources

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

Points = dict[str, dict[int, list[tuple[str, int, datetime | None, float]]]]


class _RawSink(EvidenceSink):
    """The evidence sink, returning its own per-file hits and series as they are before the worker packs them."""

    def finish(self) -> Any:
        super().finish()  # reads the batched progress lines into ``out``
        return self.out


def _reference_series(logs: Path, keep: LineKeep | None = None) -> Points:
    """Every rank's step-time and memory points, converted and ordered in this process as the fold did before."""
    dense = [i for i, s in enumerate(SIGNALS) if s.dense]
    job = scan_job(logs, worker_patterns(), _RawSink, dense=dense, keep=keep)
    inv = job.inventory
    year = inv.year_hint or WORKER_FALLBACK_YEAR
    single = {f.rel: next(iter(f.ranks)) for f in inv.files if len(f.ranks) == 1}
    out: Points = {"step": defaultdict(list), "memory": defaultdict(list)}
    for fs, fh in zip(job.files, job.caller_results, strict=True):
        if fh is None:
            continue
        rel = fs.file.rel
        for kind, per_rank in (("step", fh.step_ms), ("memory", fh.memory_mb)):
            for r, series in per_rank.items():
                rank = r if r is not None else single.get(rel)
                if rank is not None:
                    out[kind][rank] += [
                        (rel, ln, with_year(wt, year) if wt is not None else None, v) for ln, wt, v in series.points
                    ]
    return {k: {r: sorted(p, key=lambda x: (x[0], x[1])) for r, p in d.items()} for k, d in out.items()}


def _no_digest(result: tuple[Any, ...], scan: Any) -> tuple[Any, ...]:
    """The evidence's refine without its digest: the fold reads the raw hits, in this process."""
    return (*result, None)


def _reference_worker(logs: Path, keep: LineKeep | None) -> WorkerEvidence:
    dense = [i for i, s in enumerate(SIGNALS) if s.dense]
    factory: Any = EvidenceSink if keep is None else functools.partial(kept_sink, keep, EvidenceSink)
    c = consumer_for(worker_patterns(), factory, dense=dense, refine=_no_digest)
    return worker_evidence_from_scan(scan_consumers(logs, [c])[c.key])


def worker_facts(w: WorkerEvidence) -> dict[str, Any]:
    """What the fold of a job's worker evidence decides (compared between two ways of folding)."""
    return {
        "tallies": w.tallies,
        "counts": w.counts,
        "counts_by_rank": w.counts_by_rank,
        "first_by_rank": w.first_by_rank,
        "last_by_rank": w.last_by_rank,
        "rank_host": w.rank_host,
        "file_host": w.file_host,
        "file_end": w.file_end,
        "step_ms": {r: list(p) for r, p in w.step_ms.items()},
        "memory_mb": {r: list(p) for r, p in w.memory_mb.items()},
        "clock": w.clock.facts,
    }


def _feb29(tmp: Path) -> Path:
    """2025 is a common year: a yearless February 29 has no day in it."""
    logs = tmp / "feb29"
    logs.mkdir()
    for node in range(2):
        r = 4 * node
        (logs / f"error-1-{node}.out").write_text(
            "[NeMo I 2025-02-28 23:59:50 exp_manager:400] Experiments will be logged at /results\n"
            f"[rank{r}]:[E229 00:00:0{node}.000000000 ProcessGroupNCCL.cpp:1] [Rank {r}] Traceback (most recent call "
            "last):\n"
            f"[rank{r}]: RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed.\n"
            "[NeMo I 2025-02-28 23:59:59 exp_manager:400] done\n"
        )
    return logs


def _copy(src: Path, dst: Path, compress: str | None = None, edit: Any = None) -> Path:
    dst.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        if edit is not None:
            data = edit(data)
        if compress == "gz":
            (dst / (f.name + ".gz")).write_bytes(gzip.compress(data))
        elif compress == "zst":
            (dst / (f.name + ".zst")).write_bytes(zstandard.ZstdCompressor().compress(data))
        else:
            (dst / f.name).write_bytes(data)
    return dst


_DATED = re.compile(rb"\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d)\]")


def _yearless(data: bytes) -> bytes:
    """Megatron's dated step lines with a glog-style time instead (no year)."""
    return _DATED.sub(lambda m: b"I" + m.group(2) + m.group(3) + b" " + m.group(4) + b".000000 1 train.py:1]", data)


def _job(name: str, tmp: Path) -> Path:
    if name == "gz":
        return _copy(FIXTURES / "throughput_collapse" / "logs", tmp / "gz", "gz")
    if name == "zst":
        return _copy(FIXTURES / "memory_creep_oom" / "logs", tmp / "zst", "zst")
    if name == "yearless":
        return _copy(FIXTURES / "throughput_collapse" / "logs", tmp / "yearless", edit=_yearless)
    if name == "feb29":
        return _feb29(tmp)
    return FIXTURES / name / "logs" if (FIXTURES / name / "logs").is_dir() else FIXTURES / name / "torchrun_logs"


JOBS = [
    "missing_node_identical",  # one file
    "throughput_collapse",  # step-time series
    "memory_creep_oom",  # memory series
    "oom_untimed_tail",  # eighteen files
    "gz",
    "zst",
    "yearless",
    "feb29",
    "real_torch/restart",  # a restarted job: the chosen attempt's own pass
]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", JOBS)
def test_the_fold_equals_the_in_process_computation(
    name: str, workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _job(name, tmp_path)
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    early_sizes: list[int] = []
    real_state = evidence_nccl.nccl_state

    def spy(worker: Any, early: Any = None) -> Any:
        early_sizes.append(len(early or {}))
        return real_state(worker, early)

    monkeypatch.setattr(evidence, "nccl_state", spy)
    launched: list[tuple[Any, int, Any]] = []
    real_facts = launcher.from_job_scan

    def facts_spy(job: Any, early: Any = None) -> Any:
        got = real_facts(job, dict(early or {}))
        launched.append((job, len(early or {}), got))
        return got

    monkeypatch.setattr(evidence.launcher_scan, "from_job_scan", facts_spy)
    ev = gather_evidence(find_sources(logs))
    # the launcher's facts from the results unpacked as they arrived equal those unpacked after the scan
    assert [n for _, n, _ in launched] == [len(ev.worker.job.files)]
    assert launched[0][2] == real_facts(launched[0][0])
    keep = ev.attempts.keeper(ev.attempt) if ev.attempts is not None and ev.attempt is not None else None
    got = {
        "step": {r: list(p) for r, p in ev.worker.step_ms.items()},
        "memory": {r: list(p) for r, p in ev.worker.memory_mb.items()},
    }
    CACHE.clear()
    want = _reference_series(logs, keep)
    assert got == want
    # the hits made in the workers equal the fold's own over the raw hits, in this process
    digests = [result_item(ev.worker.job, j, 4) for j in range(len(ev.worker.job.files))]
    monkeypatch.setattr(scan, "_worker_count", lambda files: 1)
    assert worker_facts(ev.worker) == worker_facts(_reference_worker(logs, keep))
    year = ev.worker.year
    if name == "feb29":
        assert digests == [None, None] and ev.worker.tallies["traceback"][0].time is None
    else:
        assert all(d is not None for d in digests)
    if name == "oom_untimed_tail":  # files that state no year took the job's, and lines without a rank the file's
        assert any(d.year != year and any(sd.yearless) for d in digests for sd in d.signals.values())
        assert any(h.rank is None for d in digests for sd in d.signals.values() for h in sd.hits)
    CACHE.clear()
    if name in ("throughput_collapse", "gz", "yearless"):
        assert got["step"] and all(len(p) > 10 for p in got["step"].values())
    if name == "zst":
        assert got["memory"]
    fallback = [bool(result_item(ev.worker.job, j, 3).raw) for j in range(len(ev.worker.job.files))]
    if name == "yearless":  # the points went as they are, and took the job's year in this process
        assert all(fallback)
        t = next(p for pts in got["step"].values() for p in pts if p[2] is not None)[2]
        assert t is not None and t.year == ev.worker.year
    else:
        assert not any(fallback)
    # the NCCL state from the early-unpacked lines equals one built from the scan's results unpacked afterwards
    # (every file was scanned, none came from the cache: each one's NCCL lines arrived early; a chosen attempt's
    # second pass has none)
    assert early_sizes == [len(ev.worker.job.files) if keep is None else 0]
    assert ev.nccl == real_state(ev.worker)


def test_a_job_whose_files_state_no_year_in_their_head_keeps_the_job_year(tmp_path: Path) -> None:
    """Yearless step times in one file, a dated line in another file's head: the points take that year."""
    logs = _copy(FIXTURES / "throughput_collapse" / "logs", tmp_path / "mixed", edit=_yearless)
    first = sorted(logs.iterdir())[0]
    first.write_bytes(b"[NeMo I 2031-05-21 07:00:00 exp_manager:400] start\n" + first.read_bytes())
    ev = gather_evidence(find_sources(logs))
    years = {p[2].year for pts in ev.worker.step_ms.values() for p in pts if p[2] is not None}
    assert years == {2031}
    CACHE.clear()
    assert {r: list(p) for r, p in ev.worker.step_ms.items()} == _reference_series(logs)["step"]


RESTARTS = [
    p
    for base in ("real_torch", "real_torch_2_14")
    for shape in sorted((FIXTURES / base).iterdir())
    if shape.name.startswith("restart")
    for p in (shape / "logs",)  # (the torchrun_logs layout numbers attempts by directory: no agent stops to read)
    if p.is_dir()
]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("logs", RESTARTS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_attempt_boundaries_found_in_the_workers_equal_a_split_that_reads_back(
    logs: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    c = attempts.launcher_consumer()
    job = scan_consumers(logs, [c])[c.key]
    facts = launcher.from_job_scan(job)
    assert facts.file_boundaries
    read_back: list[str] = []
    real = attempts._file_boundaries

    def counted(lf: Any, cands: Any, checkpoints: Any = None) -> Any:
        read_back.append(lf.rel)
        return real(lf, cands, checkpoints)

    monkeypatch.setattr(attempts, "_file_boundaries", counted)
    got = attempts.split_files(job.log_files(), facts)
    assert read_back == []  # every agent's file came with its boundaries
    facts.file_boundaries.clear()
    want = attempts.split_files(job.log_files(), facts)
    assert read_back
    assert got.count == want.count > 1
    assert (got.method, got.boundaries, got.dir_attempt) == (want.method, want.boundaries, want.dir_attempt)
    assert [(a.index, a.outcome, a.ranks, a.start, a.end, a.evidence) for a in got.attempts] == [
        (a.index, a.outcome, a.ranks, a.start, a.end, a.evidence) for a in want.attempts
    ]


LAUNCHER_JOBS = [
    p
    for base in ("real_torch", "real_torch_2_14")
    for shape in sorted((FIXTURES / base).iterdir())
    for p in (shape / "logs", shape / "torchrun_logs")
    if p.is_dir()
]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("logs", LAUNCHER_JOBS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_launcher_lines_parsed_in_the_workers_give_the_facts_parsed_here(
    logs: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "_worker_count", lambda files: min(workers, len(files)))
    c = attempts.launcher_consumer()
    job = scan_consumers(logs, [c])[c.key]
    assert all(result_size(job, j) in (0, 7) for j in range(len(job.files)))
    got = launcher.from_job_scan(job)
    plain = consumer_for(launcher.PATTERNS, launcher.sink_factory())  # no refine: every line parsed here
    want = launcher.from_job_scan(scan_consumers(logs, [plain])[plain.key])
    assert got == want


SIGTERM_LINE = (
    "I0521 08:00:00.000000 4242 torch/distributed/elastic/multiprocessing/api.py:1] Sending process 77 closing signal "
    "SIGTERM"
)


def test_parse_lines_reads_each_line_as_the_facts_need() -> None:
    """One kept line each: an agent's SIGTERM, an own exception, a victim exception, a traceback header, a line of a
    local rank the tee prefix pairs with its global rank, and a line with no rank (left out: no fact reads it)."""
    lines = [
        (1, "[default1]:[rank3]: starting"),
        (2, SIGTERM_LINE),
        (3, "[rank3]: ValueError: bad batch"),
        (4, "[rank3]: torch.distributed.DistBackendError: NCCL communicator was aborted"),
        (5, "[rank3]: Traceback (most recent call last):"),
        (6, "[default1]: KeyError: 'x'"),
        (7, "KeyError: 'no rank'"),
    ]
    local_to_global, per_line = launcher.parse_lines(lines, [])
    assert local_to_global[1] == 3
    assert [lines[k][0] for k, *_ in per_line] == [1, 2, 3, 4, 5, 6]  # in order, the rankless non-agent line left out
    pids = [p for _k, p, *_ in per_line]
    ranks = [r for _k, _p, _e, r, _g, _o in per_line]
    own = [o for *_, o in per_line]
    assert pids == [None, 4242, None, None, None, None]
    assert per_line[1][2] is not None and per_line[1][2].signal == "SIGTERM"
    assert ranks == [3, None, 3, 3, 3, 3]
    assert own == [False, False, True, False, False, True]


PREP_JOBS = sorted(d for d in FIXTURES.rglob("logs") if d.is_dir())


def test_the_nccl_table_from_shares_made_as_files_arrive_equals_the_table_made_at_once(tmp_path: Path) -> None:
    """A file's :class:`~debug_training_logs.analysis.nccl_table.FilePrep` is made as it arrives, before the
    inventory says whether the file has one rank (whose rank its unranked lines then take): the table merges the
    shares in file order and remakes a share whose file turns out to have one rank and unranked lines."""
    from debug_training_logs.analysis.inventory_results import PerFile
    from debug_training_logs.analysis.nccl_hits import FileEvents
    from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS, NcclSink
    from debug_training_logs.analysis.nccl_table import FilePrep, build_table
    from tests.nccl_excerpts import EXCERPTS  # pasted excerpts: one rank per file and lines that name none

    remade = 0
    for logs in [*PREP_JOBS, *(x.write(tmp_path) for x in EXCERPTS)]:
        job = scan_job(logs, NCCL_PATTERNS, NcclSink)
        per = PerFile(job, FileEvents)
        files = [per[i] for i in range(len(per))]
        shares = [FilePrep(fe) for fe in files]
        remade += sum(1 for fe, p in zip(files, shares, strict=True) if p.unranked and
                      len(job.inventory.ranks_of_file(fe.rel)) == 1)  # fmt: skip
        for limit in (3, 100_000):
            want = build_table(files, job.inventory, job.coverage(), limit)
            got = build_table(files, job.inventory, job.coverage(), limit, prepared=shares)
            assert got == want, logs
            # some shares given, some not
            half = [p if i % 2 else None for i, p in enumerate(shares)]
            assert build_table(files, job.inventory, job.coverage(), limit, prepared=half) == want, logs
    assert len(PREP_JOBS) > 40 and remade > 0


def _status(rank: int, seq: int, completed: int) -> str:
    return (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Timeout at NCCL work: {seq}, last enqueued "
            f"NCCL work: {seq}, last completed NCCL work: {completed}.")  # fmt: skip


def _timeout(rank: int, seq: int) -> str:
    return (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:525] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=2048, NumelOut=2048, Timeout(ms)=600000) ran for 600081 "
            "milliseconds before timing out.")  # fmt: skip


@pytest.mark.parametrize("split", ["timeout_rotated_away", "status_rotated_away"])
def test_a_rank_whose_nccl_lines_span_files_gets_its_rows_from_all_of_them(tmp_path: Path, split: str) -> None:
    """Each file's :class:`~debug_training_logs.analysis.nccl_table.FilePrep` builds its ranks' rows from its own
    lines; a rank whose lines are in two files (a rotated log) has its rows built from both files' lines together,
    as the table made without shares does: its row has the SeqNum of one file's line and the counters of the
    other's."""
    from debug_training_logs.analysis.inventory_results import PerFile
    from debug_training_logs.analysis.nccl_hits import FileEvents
    from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS, NcclSink
    from debug_training_logs.analysis.nccl_table import FilePrep, build_table

    logs = tmp_path / "logs"
    logs.mkdir()
    timeouts = [_timeout(r, 77) for r in (0, 1)]
    statuses = [_status(r, 77, 76) for r in (0, 1)]
    older, newer = (timeouts, statuses) if split == "timeout_rotated_away" else (statuses, timeouts)
    # ranks 0 and 1 write into both files; rank 2 only into the newer one (its rows come from that file's share)
    (logs / "node0.log.1").write_text("\n".join(older) + "\n")
    (logs / "node0.log").write_text("\n".join([*newer, _status(2, 77, 77)]) + "\n")
    job = scan_job(logs, NCCL_PATTERNS, NcclSink)
    per = PerFile(job, FileEvents)
    files = [per[i] for i in range(len(per))]
    assert len(files) == 2 and all(len(FilePrep(fe).ranked) >= 2 for fe in files)
    want = build_table(files, job.inventory, job.coverage(), 100)
    got = build_table(files, job.inventory, job.coverage(), 100, prepared=[FilePrep(fe) for fe in files])
    assert got == want
    by_rank = {r.rank: r for r in got.rows}
    assert sorted(by_rank) == [0, 1, 2]
    for r in (0, 1):  # one row from both files: the timeout's op and the status line's counters
        assert (by_rank[r].seq, by_rank[r].op_type, by_rank[r].last_completed, by_rank[r].pending) == (
            77,
            "ALLREDUCE",
            76,
            1,
        )
    assert by_rank[2].pending == 0

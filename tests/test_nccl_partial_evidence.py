"""PARTIAL EVIDENCE: one node's file of a larger job, pasted fragments of 3 to 20 lines, a single rank's log, a
sub-communicator's NCCL init line. None of them may name a straggler, call the hang a fabric problem, or take the
world size from a sub-communicator: what is not in the excerpt is unknown, and the table must say "incomplete".

Also: unparsed watchdog-like lines are counted and shown with file:line, and year-less times read as the log wrote
them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from debug_training_logs.analysis.nccl_table import NcclTable, nccl_state_table
from debug_training_logs.logs.attribution import line_rank
from fixtures.worker_gen import JobSpec, generate

JOBS = [
    ("2.1", "srun", "dp", "data_stall"),
    ("2.2", "torchrun", "dp", "data_stall"),
    ("2.3", "torchrun", "dp", "fabric"),
    ("2.4", "torchrun", "dp", "data_stall"),
    ("2.7", "torchrun", "dp", "data_stall"),
    ("2.10", "torchrun", "dp", "fabric"),
    ("2.10", "torchrun", "megatron", "megatron"),
    ("2.14", "torchrun", "dp", "data_stall"),
]
JOB_IDS = [f"{t}-{la}-{ly}-{sc}" for t, la, ly, sc in JOBS]

SUBCOMM = (
    "gpu-a01:23451:23970 [1] NCCL INFO comm 0x7f3a10 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 28000 - Init COMPLETE"
)


def _job(tmp: Path, torch: str, launcher: str, layout: str, scenario: str) -> list[Path]:
    spec = JobSpec(gpus_per_node=4, torch=torch, launcher=launcher, layout=layout)
    return sorted(generate(spec, scenario, tmp / "full", write_truth=False).files)


def assert_no_verdict(res: NcclTable, what: str) -> None:
    """Nothing in a partial input may be called a straggler or a fabric hang, and no world size from a sub-comm."""
    assert res.straggler_ranks == [], (what, res.summary)
    for p in res.process_groups:
        assert p.classification not in ("straggler", "fabric"), (what, p.pg, p.classification, p.reason)
        assert p.straggler_ranks == [], (what, p.pg)
    assert res.coverage.world_size != 2, (what, res.coverage.world_size_evidence)
    assert "STRAGGLER" not in res.summary, (what, res.summary)


def _write(d: Path, name: str, lines: list[str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("\n".join(lines) + "\n")
    return d


@pytest.mark.parametrize(("torch", "launcher", "layout", "scenario"), JOBS, ids=JOB_IDS)
def test_one_node_file_of_a_larger_job(tmp_path: Path, torch: str, launcher: str, layout: str, scenario: str) -> None:
    files = _job(tmp_path, torch, launcher, layout, scenario)
    one = _write(tmp_path / "one", files[0].name, files[0].read_text().splitlines())
    res = nccl_state_table(one, limit=1000)
    assert_no_verdict(res, "one node's file")
    assert any(p.classification == "incomplete" for p in res.process_groups) or not res.process_groups


@pytest.mark.parametrize(("torch", "launcher", "layout", "scenario"), JOBS, ids=JOB_IDS)
def test_a_single_ranks_log(tmp_path: Path, torch: str, launcher: str, layout: str, scenario: str) -> None:
    files = _job(tmp_path, torch, launcher, layout, scenario)
    for rank in (0, 1, 2):
        lines = [ln for ln in files[0].read_text().splitlines() if line_rank(ln).rank == rank]
        d = _write(tmp_path / f"rank{rank}", f"rank-{rank}.log", lines)
        res = nccl_state_table(d, limit=1000)
        assert_no_verdict(res, f"rank {rank}'s log alone")


def _watchdog_window_starts(lines: list[str]) -> int:
    return next(i for i, ln in enumerate(lines) if re.search(r"Watchdog caught|failure detected|Timeout at NCCL", ln))


@pytest.mark.parametrize(("torch", "launcher", "layout", "scenario"), JOBS, ids=JOB_IDS)
def test_pasted_fragments_of_3_to_20_lines(
    tmp_path: Path, torch: str, launcher: str, layout: str, scenario: str
) -> None:
    files = _job(tmp_path, torch, launcher, layout, scenario)
    n = 0
    for f in files:
        lines = f.read_text().splitlines()
        first = _watchdog_window_starts(lines)
        for start in range(max(0, first - 6), min(len(lines), first + 40), 5):
            for length in (3, 7, 12, 20):
                frag = lines[start : start + length]
                for extra in ([], [SUBCOMM]):
                    n += 1
                    d = _write(tmp_path / f"frag{n}", "paste.txt", extra + frag)
                    res = nccl_state_table(d, limit=1000)
                    assert_no_verdict(res, f"{f.name} lines {start + 1}-{start + length} {'+subcomm' if extra else ''}")
    assert n >= 40


def test_a_sub_communicator_never_sets_the_world_size(tmp_path: Path) -> None:
    lines = [
        SUBCOMM,
        "[rank6]:[E1107 23:41:09.517203946 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=88, OpType=SEND, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600313 "
        "milliseconds before timing out.",
    ]
    res = nccl_state_table(_write(tmp_path / "a", "rank6.log", lines))
    assert res.coverage.world_size is None and res.missing_ranks == ""
    assert "unknown" in res.coverage.world_size_evidence
    assert_no_verdict(res, "sub-communicator")


def test_conflicting_world_evidence_is_reported(tmp_path: Path) -> None:
    lines = [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16",
        "  global_world_sizes=[8, 8, 8, 8, 8, 8, 8, 8]",
        "  group_world_size=2",
    ]
    res = nccl_state_table(_write(tmp_path / "a", "node0.log", lines))
    assert res.coverage.world_size == 16
    assert (
        "CONFLICTING" in res.coverage.world_size_evidence and "global_world_sizes" in res.coverage.world_size_evidence
    )


def test_torchruns_group_world_size_is_not_the_world(tmp_path: Path) -> None:
    res = nccl_state_table(_write(tmp_path / "a", "node0.log", ["  group_world_size=1", "  local_world_size=8"]))
    assert res.coverage.world_size is None


def test_unparsed_watchdog_like_lines_are_counted_and_cited(tmp_path: Path) -> None:
    odd = (
        "[rank3]:[E1107 23:41:09.517203946 ProcessGroupNCCL.cpp:2511] [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog "
        "noticed a wording no torch we know writes (42)"
    )
    lines = ["frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f in libtorch_cuda.so)", odd]
    res = nccl_state_table(_write(tmp_path / "a", "rank-3.log", lines))
    assert res.unparsed_lines == 1
    assert [(e.file, e.line) for e in res.unparsed_samples] == [("rank-3.log", 2)]
    assert res.unparsed_samples[0].text.startswith("[rank3]:[E1107")


def test_year_less_times_read_as_written(tmp_path: Path) -> None:
    line = (
        "[rank5]:[E626 16:48:25.440238649 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 5]  failure "
        "detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120051, last completed work: "
        "120048"
    )
    timeout = (
        "[rank5]:[E626 16:48:25.440100000 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=120049, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600041 "
        "milliseconds before timing out."
    )
    res = nccl_state_table(_write(tmp_path / "a", "rank-5.log", [timeout, line]))
    row = res.rows[0]
    assert row.timeout_time == "06-26 16:48:25" and not row.timeout_time_year_inferred
    assert row.collective_start_time == "06-26 16:38:25"
    assert res.time_basis.year is None and "without" in res.time_basis.year_evidence
    with_year = nccl_state_table(
        _write(tmp_path / "b", "rank-5.log", ["[NeMo I 2025-06-26 16:00:01 train:12] step 1", timeout, line])
    )
    assert with_year.rows[0].timeout_time == "2025-06-26T16:48:25" and with_year.rows[0].timeout_time_year_inferred
    assert "rank-5.log:1" in with_year.time_basis.year_evidence

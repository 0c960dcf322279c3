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

from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.nccl_table import nccl_state_table
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


# ---------------------------------------------------------------------------------------------------------------------
# Classification rules on complete evidence: unlabelled rows, different collectives, a single rank.

H = "[rank{r}]:[E1107 23:41:09.{ns:09d} ProcessGroupNCCL.cpp:{src}] "
STATUS = (
    "[PG ID {pid} PG GUID {guid}({desc}) Rank {pr}]  failure detected by watchdog at work sequence id: {s} PG status: "
)
STATUS += "last enqueued work: {e}, last completed work: {c}"
TIMEOUT = "[Rank {pr}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, OpType={op}, NumelIn=8, "
TIMEOUT += "NumelOut=8, Timeout(ms)={t}) ran for {ran} milliseconds before timing out."


def _rank_file(d: Path, r: int, lines: list[str]) -> None:
    pad = [f"[NeMo I 2026-11-07 23:{i // 60:02d}:{i % 60:02d} train:88] step {i}" for i in range(45)]
    _write(d, f"rank-{r}.log", [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4", *pad, *lines])


def _status(r: int, s: int, e: int, c: int, pid: int = 0, guid: str = "0", desc: str = "default_pg") -> str:
    return H.format(r=r, ns=r, src=2303) + STATUS.format(pid=pid, guid=guid, desc=desc, pr=r, s=s, e=e, c=c)


def _timeout(r: int, s: int, op: str = "ALLREDUCE", t: int = 600000) -> str:
    return H.format(r=r, ns=r, src=689) + TIMEOUT.format(pr=r, s=s, op=op, t=t, ran=t + 17)


def test_an_unlabelled_timeout_joins_the_pg_its_work_matches(tmp_path: Path) -> None:
    d = tmp_path / "job"
    for r in range(4):
        # every rank: a default-PG status at 900 and a DP-PG status at 71; the timeout (WorkNCCL names no PG) is 71
        _rank_file(d, r, [_status(r, 900, 900, 899), _status(r, 71, 71, 70, 3, "8", "DATA_PARALLEL_GROUP"),
                          _timeout(r, 71)])  # fmt: skip
    res = nccl_state_table(d, limit=100)
    dp = [row for row in res.rows if row.pg == "8"]
    assert len(dp) == 4 and all(row.seq == 71 and row.op_type == "ALLREDUCE" for row in dp)
    assert not [row for row in res.rows if row.pg is None]


def test_an_ambiguous_unlabelled_timeout_stays_unlabelled_and_makes_no_absent_rank(tmp_path: Path) -> None:
    d = tmp_path / "job"
    for r in range(4):
        lines = [_status(r, 57, 57, 56), _status(r, 57, 57, 56, 3, "8", "DATA_PARALLEL_GROUP")]
        _rank_file(d, r, lines + ([_timeout(r, 57)] if r < 2 else []))
    res = nccl_state_table(d, limit=100)
    unlabelled = [p for p in res.process_groups if p.pg is None]
    assert len(unlabelled) == 1 and unlabelled[0].classification == "incomplete"
    assert unlabelled[0].absent_ranks == "" and unlabelled[0].straggler_ranks == [] and res.straggler_ranks == []


def test_ranks_in_different_collectives_are_a_mismatch_not_fabric(tmp_path: Path) -> None:
    d = tmp_path / "job"
    for r in range(4):
        seq, op = (310, "ALLREDUCE") if r != 2 else (305, "BROADCAST")
        _rank_file(d, r, [_timeout(r, seq, op), _status(r, seq, seq, seq - 1)])
    res = nccl_state_table(d, limit=100)
    (pg,) = res.process_groups
    assert pg.classification == "mismatch" and "rank 2 at SeqNum 305 BROADCAST" in pg.reason, pg.reason
    assert res.straggler_ranks == []


def test_one_rank_alone_is_never_fabric(tmp_path: Path) -> None:
    d = tmp_path / "job"
    _write(d, "rank-0.log", ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1", _timeout(0, 12)])
    res = nccl_state_table(d)
    assert res.coverage.world_size == 1
    assert [p.classification for p in res.process_groups] == ["incomplete"], res.summary


def test_a_world_size_given_by_the_caller_completes_the_coverage(tmp_path: Path) -> None:
    """Per-rank logs of a whole job that never state the world size: nothing is concluded until the caller says it."""
    d = tmp_path / "job"
    for r in range(4):
        pad = [f"[rank{r}]:[W1107 23:00:{i:02d}.000000001 socket.cpp:412] noise {i}" for i in range(45)]
        lines = pad + ([] if r == 3 else [_timeout(r, 57), _status(r, 57, 57, 56)])
        _write(d, f"rank-{r}.log", lines)
    unknown = nccl_state_table(d)
    assert unknown.coverage.world_size is None and unknown.straggler_ranks == []
    assert [p.classification for p in unknown.process_groups] == ["incomplete"]
    given = nccl_state_table(d, world_size=4)
    assert given.coverage.world_size == 4 and "given by the caller" in given.coverage.world_size_evidence
    assert given.straggler_ranks == [3], given.summary
    wrong = nccl_state_table(d, world_size=8)
    assert wrong.missing_ranks == "4-7" and wrong.straggler_ranks == []

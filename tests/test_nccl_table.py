"""nccl_state_table on the generated incidents: rows equal the generator's ground truth field by field, every torch
style, and the per-PG verdicts a person would reach: straggler, fabric, root_ahead, incomplete."""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.nccl_table import nccl_state_table
from debug_training_logs.ranges import parse_ranges
from fixtures.worker_gen import TRUTH_NAME, JobSpec, generate
from tests.nccl_render import write_wrapped_at_80

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SETS = sorted(p.parent for p in FIXTURES.rglob(TRUTH_NAME) if (p.parent / "logs").is_dir())


def _truth(d: Path) -> dict[str, Any]:
    truth: dict[str, Any] = json.loads((d / TRUTH_NAME).read_text())
    return truth


def _rows(res: NcclTable) -> dict[tuple[int, str | None], dict[str, Any]]:
    return {(r.rank, r.pg): asdict(r) for r in res.rows}


def assert_matches_truth(res: NcclTable, truth: dict[str, Any]) -> None:
    got = _rows(res)
    # The generator's per-row "first_to_dump" is the local line ('First PG on this rank to signal dumping'): the
    # table calls that signalled_dump; its first_to_dump is the job's first_dump_rank, on the rows where it detected.
    want = {(r["rank"], r["pg"]): {**r, "signalled_dump": r["first_to_dump"]} for r in truth["rows"]}
    for row in want.values():
        row["first_to_dump"] = row["rank"] == res.first_dump_rank and row["signal"] == "detected"
    assert sorted(got, key=str) == sorted(want, key=str)
    for key, row in want.items():
        diff = {f: (got[key][f], v) for f, v in row.items() if got[key][f] != v}
        assert not diff, (key, diff)
    assert res.first_dump_rank is None or sum(r.first_to_dump for r in res.rows) <= len(res.process_groups)
    verdicts = {str(p.pg): (p.classification, p.straggler_ranks) for p in res.process_groups}
    for pg, exp in truth["process_groups"].items():
        assert verdicts[pg] == (exp["classification"], exp["straggler_ranks"]), pg
    assert res.straggler_ranks == truth["straggler_ranks"]
    assert parse_ranges(res.ranks_without_nccl_state) == set(truth["ranks_without_nccl_state"])
    assert parse_ranges(res.missing_ranks) == set(truth["missing_ranks"])


@pytest.mark.parametrize("d", SETS, ids=[str(d.relative_to(FIXTURES)) for d in SETS])
def test_checked_in_sets_match_ground_truth(d: Path) -> None:
    res = nccl_state_table(d / "logs", limit=100_000)
    assert_matches_truth(res, _truth(d))
    assert res.unparsed_lines == 0 and res.unattributed_lines == 0
    assert res.coverage.files_scanned >= 1


def test_data_stall_story() -> None:
    res = nccl_state_table(FIXTURES / "data_stall" / "logs")
    pg = res.process_groups[0]
    assert (pg.pg, pg.pg_desc, pg.classification, pg.straggler_ranks) == ("0", "default_pg", "straggler", [5])
    assert pg.majority is not None and (pg.majority.seq, pg.majority.last_enqueued, pg.majority.last_completed) == (
        4118,
        4118,
        4117,
    )
    r5 = next(r for r in res.rows if r.rank == 5)
    assert (r5.signal, r5.pending, r5.dump_signal_from_rank, r5.seq) == ("observed", 0, 11, None)
    victims = [r for r in res.rows if r.rank != 5]
    assert len(victims) == 15 and all(r.signal == "detected" and r.pending == 1 for r in victims)
    assert {r.timeout_time for r in victims} == {"2026-05-21T08:02:12"}
    assert {r.collective_start_time for r in victims} == {"2026-05-21T07:32:12"}
    assert all(r.timeout_time_year_inferred and r.timeout_time_utc is None for r in victims)
    assert res.first_dump_rank == 11 and res.straggler_ranks == [5]
    assert "rank 5" in res.summary and "STRAGGLER" in res.summary
    cited = {(e.file, e.line) for e in res.evidence}
    assert (r5.file, r5.line) in cited
    exits = next(f for f in res.rank_facts if f.kind == "exit_signal")
    assert exits.detail == "SIGABRT (exitcode -6)" and exits.ranks == "0-15"


def test_missing_node_is_incomplete_and_names_the_missing_ranks() -> None:
    res = nccl_state_table(FIXTURES / "nccl_missing_node" / "logs")
    pg = res.process_groups[0]
    assert pg.classification == "incomplete" and pg.straggler_ranks == []
    assert pg.missing_ranks == "8-15" and res.missing_ranks == "8-15" and res.coverage.missing_ranks == "8-15"
    assert pg.suspect_ranks == [5]  # said as a suspect among the ranks seen, never as the straggler
    assert res.straggler_ranks == []
    assert "8-15" in res.summary and "INCOMPLETE" in res.summary


def test_fabric_and_root_ahead() -> None:
    fabric = nccl_state_table(FIXTURES / "nccl_fabric" / "logs")
    assert [p.classification for p in fabric.process_groups] == ["fabric"]
    assert fabric.outliers == [] and fabric.straggler_ranks == []
    assert all(r.signalled_dump and r.signal == "detected" and r.pending == 1 for r in fabric.rows)
    # first_to_dump agrees with first_dump_rank: one rank, never "every rank that timed out"
    assert [r.rank for r in fabric.rows if r.first_to_dump] == (
        [fabric.first_dump_rank] if fabric.first_dump_rank is not None else []
    )
    ahead = nccl_state_table(FIXTURES / "nccl_root_ahead" / "logs")
    pg = ahead.process_groups[0]
    assert (pg.classification, pg.ahead_ranks, pg.ahead_by, pg.ahead_steps) == ("root_ahead", [0], 3, 1.0)
    assert "PreemptionCallback" in pg.reason
    assert [o.rank for o in ahead.outliers] == [0]
    assert ahead.outliers[0].differs["last_enqueued"] == [4121, 4118]


def test_megatron_pgs_are_compared_only_within_themselves() -> None:
    res = nccl_state_table(FIXTURES / "nccl_styles" / "megatron-2.10" / "logs", limit=1000)
    by_pg = {p.pg: p for p in res.process_groups}
    # DP groups compare 4118 with 4118; the TP group (88213) and PP groups (12365) are never mixed in
    for p in by_pg.values():
        seqs = {r.seq for r in res.rows if r.pg == p.pg}
        assert len(seqs) == 1, (p.pg, seqs)
    dp = [p for p in res.process_groups if p.pg_desc == "DATA_PARALLEL_GROUP"]
    assert len(dp) == 4 and all(len(p.pg or "") == 40 for p in dp)
    assert sorted(g for p in dp for g in p.straggler_ranks) == [4, 5, 12, 13]
    assert by_pg["0"].classification == "straggler" and by_pg["0"].straggler_ranks == [5]
    assert res.straggler_ranks == [5] and res.first_dump_rank == 4
    # stale PG-local [Rank N]: rank 15's timeout line says [Rank 1] (its TP rank); its DP rank is 3
    stale = [r for r in res.rows if r.stale_rank_label is not None]
    assert stale and all(r.pg_rank != r.stale_rank_label for r in stale)
    r15 = next(r for r in res.rows if r.rank == 15 and r.pg_desc == "DATA_PARALLEL_GROUP")
    assert (r15.pg_rank, r15.stale_rank_label) == (3, 1)


def test_stale_rank_in_other_styles_never_becomes_a_rank(tmp_path: Path) -> None:
    gen = generate(JobSpec(torch="2.7"), "megatron", tmp_path / "logs")
    res = nccl_state_table(tmp_path / "logs", limit=1000)
    assert_matches_truth(res, gen.truth)


def test_hard_wrapped_and_gzip() -> None:
    d = FIXTURES / "nccl_styles" / "torch-2.10-wrapped-gz"
    files = sorted((d / "logs").iterdir())
    assert files and all(f.suffix == ".gz" for f in files)
    with gzip.open(files[0], "rt") as fh:
        assert "\x1b[" in fh.read()
    res = nccl_state_table(d / "logs")
    assert res.rejoined_messages >= 1
    r2 = next(r for r in res.rows if r.rank == 2)
    assert (r2.last_enqueued, r2.last_completed, r2.seq) == (4118, 4117, 4118)


def test_wrap_at_80_columns_every_message(tmp_path: Path) -> None:
    """A paste wrapped at 80 columns cuts needles in half; every piece still finds its record."""
    gen = generate(JobSpec(gpus_per_node=4), "data_stall", tmp_path / "src")
    logs = write_wrapped_at_80(gen.files, tmp_path / "logs")
    res = nccl_state_table(logs, limit=1000)
    want = {(r["rank"], r["pg"]): r for r in gen.truth["rows"]}
    got = _rows(res)
    assert set(got) == set(want)
    for key in ((2, "0"), (5, "0")):
        for name in ("seq", "last_enqueued", "last_completed", "signal", "dump_signal_from_rank",
                     "ran_for_ms", "timeout_time", "pg_rank"):  # fmt: skip
            assert got[key][name] == want[key][name], (key, name)
        assert got[key]["signalled_dump"] == want[key]["first_to_dump"], key
    assert res.process_groups[0].straggler_ranks == [5]


@pytest.mark.parametrize("bars", [70, 200])
def test_tqdm_glued_line_longer_than_the_scan_cut(tmp_path: Path, bars: int) -> None:
    bar = "".join(
        f"Epoch 0:  {i % 100:2d}%|#         | {i}/10000 [00:{i % 60:02d}<1:38:41, 1.28it/s]\r" for i in range(bars)
    )
    line = bar + (
        "[rank0]:[E521 08:02:12.611831038 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure "
        "detected by watchdog at work sequence id: 4118 PG status: last enqueued work: 4118, last completed work: 4117"
    )
    assert len(line) > 4000
    (tmp_path / "rank0.log").write_text("[NeMo I 2026-05-21 07:00:05 x:1] start\n" + line + "\n")
    res = nccl_state_table(tmp_path)
    assert [(r.rank, r.seq, r.last_enqueued, r.line) for r in res.rows] == [(0, 4118, 4118, 2)]


def test_blocking_wait_heartbeat_and_facts(tmp_path: Path) -> None:
    h = "[rank{r}]:[E0521 08:02:12.000000001 ProcessGroupNCCL.cpp:{n}] "
    pg = "[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    work = "WorkNCCL(SeqNum=77, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"
    lines = ["[NeMo I 2026-05-21 07:00:05 x:1] start"]
    for r in range(4):
        lines.append(h.format(r=r, n=756) + f"[Rank {r}] Work {work} timed out in blocking wait.")
    lines.append(h.format(r=3, n=1743) + pg.format(r=3) + " ProcessGroupNCCL's watchdog got stuck for 480 seconds "
                 "without making progress in monitoring enqueued collectives.")  # fmt: skip
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    res = nccl_state_table(tmp_path)
    assert [(r.rank, r.seq, r.op_type, r.signal) for r in res.rows] == [
        (r, 77, "BROADCAST", "detected") for r in range(4)
    ]
    kinds = {f.kind: f for f in res.rank_facts}
    assert kinds["blocking_wait_timeout"].ranks == "0-3"
    assert kinds["heartbeat_monitor_kill"].ranks == "3" and "480 seconds" in kinds["heartbeat_monitor_kill"].detail
    assert "heartbeat_monitor_kill" in next(r for r in res.rows if r.rank == 3).facts


def test_ranks_without_state_are_suspects(tmp_path: Path) -> None:
    """torch 2.1: the stuck rank logs no watchdog line at all; the others time out. It is the straggler."""
    d = FIXTURES / "nccl_styles" / "torch-2.1-srun"
    res = nccl_state_table(d / "logs")
    assert res.ranks_without_nccl_state == "5"
    pg = res.process_groups[0]
    assert (pg.pg, pg.classification, pg.straggler_ranks) == (None, "straggler", [5])
    assert all(r.pg_rank == r.rank for r in res.rows)


def test_limit_keeps_outliers_and_classifies_on_all_rows(tmp_path: Path) -> None:
    gen = generate(replace(JobSpec(), nodes=128), "data_stall", tmp_path / "logs")
    assert gen.truth["world_size"] == 1024
    res = nccl_state_table(tmp_path / "logs", limit=20)
    assert res.rows_total == 1024 and len(res.rows) == 20 and res.rows_truncated == 1004
    assert any(r.rank == 5 for r in res.rows)  # the straggler row is never dropped
    pg = res.process_groups[0]
    assert (pg.classification, pg.straggler_ranks, pg.rank_count) == ("straggler", [5], 1024)
    assert pg.majority is not None and pg.majority.count == 1023
    assert len(json.dumps(asdict(res), default=str)) < 60_000


def test_no_watchdog_state(tmp_path: Path) -> None:
    (tmp_path / "ok.log").write_text("[NeMo I 2026-05-21 07:00:05 x:1] training finished\n")
    res = nccl_state_table(tmp_path)
    assert res.rows == [] and res.process_groups == [] and res.straggler_ranks == []
    assert res.summary.startswith("No NCCL watchdog state")


def test_ray_deduplication_makes_every_pg_incomplete(tmp_path: Path) -> None:
    """Ray folds lines that differ only in numbers: the other ranks' status lines vanish into '[repeated 14x]'."""
    pfx = "(RayTrainWorker pid={pid}, ip=10.52.7.14) "
    status = (
        "[rank{r}]:[E521 08:02:12.000000001 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  "
        "failure detected by watchdog at work sequence id: 4118 PG status: last enqueued work: 4118, last completed "
        "work: 4117"
    )
    lines = [
        "[NeMo I 2026-05-21 07:00:05 x:1] start",
        pfx.format(pid=100) + status.format(r=0),
        pfx.format(pid=101) + status.format(r=1) + " [repeated 14x across cluster]",
    ]
    (tmp_path / "driver.log").write_text("\n".join(lines) + "\n")
    res = nccl_state_table(tmp_path)
    assert res.deduplicated_lines == 14
    assert [p.classification for p in res.process_groups] == ["incomplete"]
    assert res.straggler_ranks == [] and "RAY_DEDUP_LOGS=0" in res.summary

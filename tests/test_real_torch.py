"""Real torch 2.13 runs (fixtures/real_torch, made by scripts/make_real_torch_fixtures.py): every tool against what
truly happened.

Each fixture is two torchrun agents (CPU, gloo) standing in for two nodes; truth.json says what the run did and, when
the logs alone cannot show the cause (a hang logs nothing), ``verdict_from_logs`` says what they can support. The
tests check the verdict and its verification, that wrong conclusions a person would draw (the first to time out, the
Root Cause rank of torchrun's table, a torn-down rank, the rank the dumps show waiting) are rejected, attempts, the
--log-dir layout, the flight-recorder rows of nccl_state_table and job_overview's attempts and benign lines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import attempts
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.printers.markdown import render_report
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.diagnosis_models import Diagnosis
from debug_training_logs.tools.job_overview import job_overview
from debug_training_logs.tools.nccl_state_table import nccl_state_table
from debug_training_logs.verify import verify
from debug_training_logs.verify.models import Conclusion

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "real_torch"
SHAPES = sorted(p.name for p in ROOT.iterdir() if (p / "truth.json").is_file())
# the same shapes run with torch 2.14.1 (the CUDA wheel, on CPU): the torch-family axis of the matrix
ROOT_2_14 = ROOT.parent / "real_torch_2_14"
SHAPES_2_14 = sorted(p.name for p in ROOT_2_14.iterdir() if (p / "truth.json").is_file())
_CACHE: dict[tuple[str, int | None], Diagnosis] = {}


def truth(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / name / "truth.json").read_text(encoding="utf-8"))
    return data


def expected(name: str) -> tuple[str, list[int]]:
    t = truth(name)
    v = t.get("verdict_from_logs") or t
    return v["category"], v["culprit_ranks"]


def run(name: str, attempt: int | None = None) -> Diagnosis:
    key = (name, attempt)
    if key not in _CACHE:
        _CACHE[key] = diagnose(str(ROOT / name / "logs"), attempt=attempt)
    return _CACHE[key]


def test_the_fixtures_are_real_and_small() -> None:
    assert len(SHAPES) >= 14
    for name in SHAPES:
        t = truth(name)
        assert t["torch_version"].startswith("2.13"), name
        size = sum(p.stat().st_size for p in (ROOT / name).rglob("*") if p.is_file())
        assert size < 120_000, (name, size)


@pytest.mark.parametrize("name", SHAPES)
def test_verdict_matches_truth_and_is_verified(name: str) -> None:
    d = run(name)
    category, culprits = expected(name)
    failed = [(c.rule, c.status, c.detail) for c in d.verification.checks if not c.passed]
    assert (d.verdict.category, d.verdict.culprit_ranks) == (category, culprits), d.summary
    assert d.verification.accepted, failed
    assert "ACCEPTED" in render_report(d)


@pytest.mark.parametrize("name", SHAPES_2_14)
def test_torch_2_14_runs_get_the_same_verdicts(name: str) -> None:
    t = json.loads((ROOT_2_14 / name / "truth.json").read_text(encoding="utf-8"))
    assert t["torch_version"].startswith("2.14")
    v = t.get("verdict_from_logs") or t
    d = diagnose(str(ROOT_2_14 / name / "logs"))
    assert (d.verdict.category, d.verdict.culprit_ranks) == (v["category"], v["culprit_ranks"]), d.summary
    assert d.verification.accepted, [(c.rule, c.detail) for c in d.verification.checks if not c.passed]


def _conclusion(d: Diagnosis, **change: Any) -> Conclusion:
    return d.conclusion.model_copy(update=change)


# What a person reading these logs would wrongly conclude, per fixture: each must be rejected.
WRONG: dict[str, list[tuple[str, list[int], str]]] = {
    "loader_exception": [
        ("rank_crash", [0], "node 0's ChildFailedError 'Root Cause' (a gloo victim)"),
        ("rank_crash", [2], "a rank its agent tore down"),
    ],
    "sigkill": [("rank_crash", [3], "the rank that lost its gloo peer"), ("rank_crash", [0], "SIGTERMed by its agent")],
    "sigkill_info": [("rank_crash", [3], "the rank that lost its gloo peer")],
    "stall": [("nccl_timeout_unattributed", [0], "the first to time out"), ("rank_crash", [3], "Root Cause row")],
    "stall_fr": [("nccl_timeout_unattributed", [0], "a rank the dumps show waiting")],
    "mismatch_detail": [("collective_mismatch", [0], "the rank whose report names rank 3")],
    "mismatch": [("collective_mismatch", [0], "a rank the dumps show in the majority op")],
    "restart": [("rank_crash", [1], "a victim of attempt 0")],
    "stall_info": [("rank_crash", [2], "a stall called a crash"), ("nccl_timeout_unattributed", [1], "victim")],
    "clean": [("rank_crash", [0], "a healthy job's c10d warnings")],
    "clean_info": [("rank_crash", [0], "INFO 'Remote peer closed the connection'")],
    "port_in_use": [("rank_crash", [0], "a rank that never started")],
    "mismatch_detail_": [("rank_crash", [3], "the mismatch error read as a crash")],
}


@pytest.mark.parametrize(
    ("name", "category", "culprits", "why"), [(n, c, r, w) for n, ws in WRONG.items() for c, r, w in ws]
)
def test_wrong_conclusions_are_rejected(name: str, category: str, culprits: list[int], why: str) -> None:
    name = name.rstrip("_")
    d = run(name)
    wrong = _conclusion(d, category=category, culprit_ranks=culprits)
    from debug_training_logs.analysis.evidence import gather_evidence
    from debug_training_logs.logs.sources import find_sources
    from debug_training_logs.verify.engine import verify_with_evidence

    logs = ROOT / name / "logs"
    v = verify_with_evidence(wrong, gather_evidence(find_sources(logs.resolve())))
    assert not v.accepted, (why, v.summary)


def test_a_conclusion_the_dumps_contradict_is_rejected_by_rank_fates() -> None:
    d = run("stall_fr")
    from debug_training_logs.analysis.evidence import gather_evidence
    from debug_training_logs.verify.engine import verify_with_evidence

    logs = (ROOT / "stall_fr" / "logs").resolve()
    v = verify_with_evidence(_conclusion(d, culprit_ranks=[2]), gather_evidence(find_sources(logs)))
    [fates] = [c for c in v.checks if c.rule == "rank_fates"]
    assert fates.status == "failed" and "dumps" in fates.detail


def test_verify_from_scratch_accepts_the_own_conclusion() -> None:
    for name in ("sigkill", "mismatch_detail", "stall"):
        v = verify(run(name).conclusion)
        assert v.accepted, (name, [(c.rule, c.detail) for c in v.checks if not c.passed])


def test_dump_agreement_raises_confidence_and_is_said() -> None:
    d = run("stall_fr")
    assert d.verdict.confidence == "high"
    assert "flight-recorder dumps agree" in d.verdict.explanation
    m = run("mismatch")
    assert "flight-recorder dumps" in m.verdict.explanation and m.verdict.culprit_ranks == [3]


def test_sigkill_is_called_a_kill_not_an_exception() -> None:
    d = run("sigkill")
    assert "SIGKILL" in d.verdict.explanation and "OOM killer" in d.verdict.explanation
    assert any("dmesg" in s for s in d.verdict.next_steps) or any("dmesg" in r.text for r in d.recommendations)


# ---------------------------------------------------------------------------------------------------------------------
# Attempts


def test_restart_is_reported_per_attempt() -> None:
    d = run("restart")
    assert [(a.attempt, a.outcome) for a in d.attempts] == [(0, "failed"), (1, "succeeded")]
    assert d.attempt == 0 and "attempt 0 of 2" in d.summary
    assert "Attempts" in render_report(d)
    later = run("restart", attempt=1)
    assert later.attempt == 1 and later.verdict.category == "no_failure"
    with pytest.raises(UserInputError, match="attempt 5 does not exist"):
        diagnose(str(ROOT / "restart" / "logs"), attempt=5)


@pytest.mark.parametrize("name", ["restart_exhausted", "restart_storm"])
def test_failed_restarts_keep_the_first_cause(name: str) -> None:
    t = truth(name)
    d = run(name)
    assert [a.outcome for a in d.attempts] == [a["outcome"] for a in t["attempts"]]
    assert d.attempt == 0 and d.verdict.culprit_ranks == t["attempts"][0]["culprit_ranks"]
    last = run(name, attempt=len(t["attempts"]) - 1)
    assert last.verdict.culprit_ranks == [] and last.verdict.category != "rank_crash", last.summary


def test_attempt_dirs_of_the_log_dir_layout() -> None:
    a = attempts.split(ROOT / "restart_storm" / "torchrun_logs")
    assert a.method == "attempt_N directories" and a.count == 4
    assert set(a.dir_attempt.values()) == {0, 1, 2, 3}


def test_single_attempt_jobs_have_one_attempt() -> None:
    for name in ("clean", "stall", "sigkill"):
        a = attempts.split(ROOT / name / "logs")
        assert a.count == 1, name
        assert run(name).attempts == [] and run(name).attempt is None


# ---------------------------------------------------------------------------------------------------------------------
# The --log-dir layout, job_overview, nccl_state_table


@pytest.mark.parametrize(
    ("name", "ranks", "how"),
    [("loader_exception", {3}, "own_error"), ("mismatch_detail", {3}, "mismatch"), ("stall", {2}, "straggler")],
)
def test_launcher_fates_from_the_log_dir_layout(name: str, ranks: set[int], how: str) -> None:
    lf = attempts.gather_launcher(ROOT / name / "torchrun_logs")
    assert lf.culprits() == (ranks, how)


def test_job_overview_lists_attempts_and_benign_lines() -> None:
    o = job_overview(str(ROOT / "restart" / "logs"))
    assert [a.outcome for a in o.attempts] == ["failed", "succeeded"] and "2 attempts" in o.summary
    info = job_overview(str(ROOT / "clean_info" / "logs"))
    assert info.benign_lines.get("store_peer_closed", 0) > 0 and info.benign_lines.get("c10d_ipv6_attempt", 0) > 0
    assert info.coverage.world_size == 4 and info.coverage.missing_ranks == ""


def test_nccl_state_table_adds_dump_rows_with_their_source(tmp_path: Path) -> None:
    t = nccl_state_table(str(ROOT / "stall_fr" / "logs"))
    dump_rows = [r for r in t.rows if r.source == "dump"]  # the ranks a stuck group waits for, not every rank
    assert [(r.rank, r.facts) for r in dump_rows] == [(1, ["never joined the collective the others wait in"])]
    assert t.flight_recorder is not None and t.flight_recorder.never_joined == [1]
    assert t.flight_recorder.versions == ["2.10"] and "never joined" in t.summary
    # an explicit fr_dir, and a hostile dump refused with its reason
    shutil.copytree(ROOT / "stall_fr" / "logs", tmp_path / "logs")
    shutil.copytree(ROOT / "stall_fr" / "fr", tmp_path / "dumps")
    (tmp_path / "dumps" / "comm_lib_trace_rank_7").write_bytes(b"\x80\x04cos\nsystem\n.")
    t2 = nccl_state_table(str(tmp_path / "logs"), fr_dir=str(tmp_path / "dumps"))
    assert t2.flight_recorder is not None and t2.flight_recorder.never_joined == [1]
    assert any("comm_lib_trace_rank_7" in r and "GLOBAL" in r for r in t2.flight_recorder.refused)
    assert all(r.source == "log" for r in nccl_state_table(str(ROOT / "stall" / "logs")).rows)


def test_timeline_and_nccl_table_take_an_attempt() -> None:
    from debug_training_logs.tools.timeline import timeline

    first = timeline(str(ROOT / "restart_storm" / "logs"))
    assert first.attempt == 0 and len(first.attempts) == 4
    assert any("ValueError" in e.event or "Traceback" in e.event for e in first.events)
    last = timeline(str(ROOT / "restart_storm" / "logs"), attempt=3)
    assert last.attempt == 3
    assert not any("corrupt sample" in e.event for e in last.events)
    t = nccl_state_table(str(ROOT / "restart_storm" / "logs"), attempt=2)
    assert t.attempt == 2 and "attempt 2 of 4" in t.summary
    with pytest.raises(UserInputError):
        nccl_state_table(str(ROOT / "restart_storm" / "logs"), attempt=9)
    single = timeline(str(ROOT / "stall" / "logs"))
    assert single.attempt is None and single.attempts == []


def test_one_file_with_two_agents_is_two_nodes_and_one_attempt() -> None:
    o = job_overview(str(ROOT / "sigkill_one_file" / "logs"))
    assert o.coverage.files_scanned == 1 and o.torchrun_agents == 2
    assert "2 agents' output" in o.summary and len(o.attempts) == 1
    assert attempts.split(ROOT / "sigkill_one_file" / "logs").count == 1

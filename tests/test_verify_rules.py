"""Each rule of the verifier: it accepts the right conclusion and rejects the classic wrong ones, on the fixtures.

The wrong conclusions are the mistakes the original skill warns about: blaming the first rank that detected the
timeout (or the dump-signal sender), blaming connection resets that were retried, naming a straggler while ranks are
missing, relating AIS and worker times without a verified alignment, a cause that happened after its effect, and a
citation that is not in the logs.
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.verify import Conclusion, verify_with_evidence
from debug_training_logs.verify.citation_rules import text_matches
from debug_training_logs.verify.models import Check, Verification
from debug_training_logs.verify.rules import RULES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DATA_STALL = FIXTURES / "data_stall"
AIS = DATA_STALL / "ais"
ROTATED = "aistarget.ais-target-2.INFO.0521-144000.1"
"""ais-target-2's log after its 14:40 rotation: it does not cover the failure window (the evidence is in 130009)."""
WINDOW_FILE = "aistarget.ais-target-2.INFO.0521-130009.1"


@cache
def evidence(logs: str, ais: str | None = None) -> JobEvidence:
    return gather_evidence(find_sources(Path(logs), Path(ais) if ais else None))


def run(logs: Path, category: str, culprits: list[int], ais: Path | None = None, **kw: Any) -> Verification:
    c = Conclusion(logs_dir=str(logs), ais_dir=str(ais) if ais else None, category=category,  # type: ignore[arg-type]
                   culprit_ranks=culprits, **kw)  # fmt: skip
    return verify_with_evidence(c, evidence(str(logs), str(ais) if ais else None))


def check(v: Verification, rule: str) -> Check:
    found = [c for c in v.checks if c.rule == rule or c.rule.startswith(rule + ":")]
    assert len(found) == 1, [c.rule for c in v.checks]
    return found[0]


def line_of(path: Path, needle: str) -> tuple[int, str]:
    """(1-based line number, text) of the first line of ``path`` containing ``needle``."""
    for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in text:
            return i, text
    raise AssertionError(f"{needle!r} not in {path}")


def cite(logs: Path, file: str, needle: str) -> dict[str, Any]:
    n, text = line_of(logs / file, needle)
    return {"file": file, "line": n, "text": text}


# ---------------------------------------------------------------------------------------------------------------------
# The contract of the result


def test_every_rule_reports_and_never_passes_silently() -> None:
    v = run(DATA_STALL / "logs", "data_loading_stall", [5])
    assert [c.rule.split(":")[0] for c in v.checks] == [r.__name__ for r in RULES]
    for c in v.checks:
        assert c.detail, c.rule
        assert c.passed == (c.status in ("passed", "not_applicable"))
        if not c.passed:
            assert c.next_step, c.rule
    assert v.accepted and v.summary.startswith("ACCEPTED")
    assert v.coverage.ranks_found == "0-15"


# ---------------------------------------------------------------------------------------------------------------------
# coverage


def test_coverage_accepts_all_ranks_and_incomplete_evidence_naming_the_missing() -> None:
    assert check(run(DATA_STALL / "logs", "data_loading_stall", [5]), "coverage").status == "passed"
    missing = FIXTURES / "nccl_missing_node" / "logs"
    assert check(run(missing, "incomplete_evidence", []), "coverage").status == "passed"
    named = run(missing, "incomplete_evidence", [], missing_ranks=list(range(8, 16)), suspect_ranks=[5, *range(8, 16)])
    assert check(named, "coverage").status == "passed"
    # but the present ranks show a shape (a timeout, rank 5 outside the collective): "incomplete" says less than that
    assert not named.accepted and check(named, "rank_fates").status == "failed"
    shape = run(
        missing,
        "nccl_timeout_unattributed",
        [],
        missing_ranks=list(range(8, 16)),
        suspect_ranks=[5],
        provisional=True,
    )
    assert shape.accepted, shape.summary


def test_coverage_rejects_missing_ranks_named_as_culprits() -> None:
    """A rank whose log is missing is not an established culprit: it goes in missing_ranks / suspect_ranks."""
    missing = FIXTURES / "nccl_missing_node" / "logs"
    c = check(run(missing, "incomplete_evidence", list(range(8, 16))), "coverage")
    assert c.status == "failed" and "missing_ranks" in c.next_step
    c = check(run(missing, "incomplete_evidence", [], missing_ranks=[8, 9]), "coverage")
    assert c.status == "failed" and "8-15" in c.detail


def test_coverage_rejects_a_straggler_named_with_ranks_missing() -> None:
    missing = FIXTURES / "nccl_missing_node" / "logs"
    v = run(missing, "data_loading_stall", [5])
    c = check(v, "coverage")
    assert c.status == "failed" and "8-15" in c.detail and not v.accepted
    c = check(run(missing, "incomplete_evidence", [5]), "coverage")
    assert c.status == "failed" and "names 5" in c.detail


def test_coverage_rejects_incomplete_evidence_when_everything_is_there() -> None:
    c = check(run(DATA_STALL / "logs", "incomplete_evidence", []), "coverage")
    assert c.status == "failed" and "establishes more" in c.detail and "rank(s) 5" in c.detail


# ---------------------------------------------------------------------------------------------------------------------
# straggler consistency


def test_straggler_consistency_accepts_the_rank_that_never_entered() -> None:
    c = check(run(DATA_STALL / "logs", "data_loading_stall", [5]), "straggler_consistency")
    assert c.status == "passed" and "5" in c.detail


def test_straggler_consistency_rejects_the_dump_signal_sender() -> None:
    c = check(run(DATA_STALL / "logs", "data_loading_stall", [11]), "straggler_consistency")
    assert c.status == "failed"
    assert "set the dump signal" in c.detail and "victim" in c.detail


def test_straggler_consistency_rejects_the_first_detector_and_torchruns_root_cause() -> None:
    c = check(run(DATA_STALL / "logs", "data_loading_stall", [0]), "straggler_consistency")
    assert c.status == "failed" and "pending work" in c.detail and "detected the timeout" in c.detail
    # rank_exception: node 0's ChildFailedError says "Root Cause ... rank 0"; rank 13 raised the exception.
    logs = FIXTURES / "rank_exception" / "logs"
    assert check(run(logs, "rank_crash", [13]), "straggler_consistency").status == "passed"
    assert check(run(logs, "rank_crash", [0]), "straggler_consistency").status == "failed"


def test_straggler_consistency_does_not_apply_without_a_timeout() -> None:
    c = check(run(FIXTURES / "clean_resets" / "logs", "no_failure", []), "straggler_consistency")
    assert c.status == "not_applicable" and "No NCCL watchdog timeout" in c.detail


# ---------------------------------------------------------------------------------------------------------------------
# fabric vs straggler


def test_fabric_accepted_when_every_rank_was_inside_the_collective() -> None:
    c = check(run(FIXTURES / "nccl_fabric" / "logs", "gpu_fabric", []), "fabric_vs_straggler")
    assert c.status == "passed"


def test_fabric_rejected_with_a_straggler_and_straggler_rejected_without_one() -> None:
    c = check(run(DATA_STALL / "logs", "gpu_fabric", []), "fabric_vs_straggler")
    assert c.status == "failed" and "5" in c.detail and "straggler" in c.detail
    c = check(run(FIXTURES / "nccl_fabric" / "logs", "data_loading_stall", [3]), "fabric_vs_straggler")
    assert c.status == "failed" and "fabric pattern" in c.detail


# ---------------------------------------------------------------------------------------------------------------------
# causality


def test_causality_accepts_a_cause_before_the_collective() -> None:
    logs = FIXTURES / "cuda_oom" / "logs"
    root = cite(logs, "error-48213-0.out", "CUDA out of memory")
    c = check(run(logs, "cuda_oom", [3], root_cause_event=root), "causality")
    assert c.status == "passed" and "before the stuck collective started" in c.detail


def test_causality_accepts_an_untimed_line_of_the_rank_that_never_entered() -> None:
    logs = DATA_STALL / "logs"
    root = cite(logs, "error-48213-0.out", "Batch stream truncated")
    c = check(run(logs, "data_loading_stall", [5], root_cause_event=root), "causality")
    assert c.status == "passed" and "never entered the collective" in c.detail


def test_causality_rejects_a_cause_after_its_effect() -> None:
    logs = FIXTURES / "cuda_oom" / "logs"
    late = cite(logs, "error-48213-1.out", "Watchdog caught collective operation timeout")
    c = check(run(logs, "cuda_oom", [3], root_cause_event=late), "causality")
    assert c.status == "failed" and "effect, not the cause" in c.detail
    oom = cite(logs, "error-48213-0.out", "CUDA out of memory")
    backwards = [
        {"event": "timeout", "file": late["file"], "line": late["line"]},
        {"event": "OOM", "file": oom["file"], "line": oom["line"]},
    ]
    c = check(run(logs, "cuda_oom", [3], root_cause_event=oom, chain=backwards), "causality")
    assert c.status == "failed" and "backwards" in c.detail


def test_causality_rejects_an_ais_cause_without_alignment() -> None:
    # The AIS logs of another cluster (and another day): no method can align them with these workers.
    other = FIXTURES / "ais_target_restart" / "ais"
    f = next(p.name for p in other.iterdir() if "target-1.INFO" in p.name)
    n, text = line_of(other / f, "I ")
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=other,
            root_cause_event={"file": f, "line": n, "text": text})  # fmt: skip
    c = check(v, "causality")
    assert c.status == "failed" and "not aligned" in c.detail


# ---------------------------------------------------------------------------------------------------------------------
# clock


def _ais_root_cause() -> dict[str, Any]:
    n, text = line_of(AIS / WINDOW_FILE, "shared-dm")
    return {"file": WINDOW_FILE, "line": n, "text": text}


def _worker_step(needle: str) -> dict[str, Any]:
    c = cite(DATA_STALL / "logs", "error-48213-0.out", needle)
    return {"event": needle, "file": c["file"], "line": c["line"]}


def test_clock_accepts_the_verified_offset() -> None:
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=AIS, root_cause_event=_ais_root_cause(),
            chain=[_worker_step("Batch stream truncated")], tz_offset_hours=-7)  # fmt: skip
    c = check(v, "clock")
    assert c.status == "passed" and "-7" in c.detail
    assert v.accepted, [(x.rule, x.detail) for x in v.checks if not x.passed]


def test_clock_rejects_a_wrong_offset_and_an_unaligned_correlation() -> None:
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=AIS, root_cause_event=_ais_root_cause(),
            tz_offset_hours=0)  # fmt: skip
    c = check(v, "clock")
    assert c.status == "failed" and "+0" in c.detail and "-7" in c.detail
    other = FIXTURES / "ais_idle" / "ais"
    f = sorted(p.name for p in other.iterdir())[0]
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=other,
            root_cause_event={"file": f, "line": 3, "text": ""}, chain=[_worker_step("Batch stream truncated")])  # fmt: skip
    c = check(v, "clock")
    assert c.status == "failed" and "without a verified clock alignment" in c.detail


def test_clock_does_not_apply_to_worker_only_conclusions() -> None:
    assert check(run(DATA_STALL / "logs", "data_loading_stall", [5]), "clock").status == "not_applicable"


# ---------------------------------------------------------------------------------------------------------------------
# noise


def test_noise_accepts_a_storage_conclusion_on_real_data_errors() -> None:
    c = check(run(DATA_STALL / "logs", "data_loading_stall", [5]), "noise")
    assert c.status == "passed"


def test_noise_rejects_blaming_retried_connection_resets() -> None:
    logs = FIXTURES / "clean_resets" / "logs"
    ev = evidence(str(logs))
    reset_ranks = sorted({h.rank for h in ev.worker.hits("conn_reset") if h.rank is not None})
    assert reset_ranks
    v = run(logs, "storage_errors", reset_ranks)
    c = check(v, "noise")
    assert c.status == "failed" and "keep-alive noise" in c.detail and not v.accepted
    root = cite(DATA_STALL / "logs", "error-48213-0.out", "Connection reset by peer")
    c = check(run(DATA_STALL / "logs", "data_loading_stall", [5], root_cause_event=root), "noise")
    assert c.status == "failed" and "succeeded on retry" in c.detail


# ---------------------------------------------------------------------------------------------------------------------
# citations


def test_citations_accept_real_lines_with_the_300_char_cut() -> None:
    logs = DATA_STALL / "logs"
    long = cite(logs, "error-48213-0.out", "Received a dump signal due to a collective timeout from  rank 11")
    assert len(long["text"]) > 300
    long["text"] = long["text"][:299] + "…"
    c = check(run(logs, "data_loading_stall", [5], evidence=[long]), "citations")
    assert c.status == "passed"
    assert not text_matches(long["text"], long["text"][:120])  # a cited text longer than the line is not it
    assert text_matches("\x1b[32m[NeMo I]\x1b[0m x", "[NeMo I] x")


def test_citations_reject_fabricated_lines() -> None:
    logs = DATA_STALL / "logs"
    real = cite(logs, "error-48213-0.out", "Batch stream truncated")
    fake_text = dict(real, text="[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered")
    c = check(run(logs, "data_loading_stall", [5], evidence=[fake_text]), "citations")
    assert c.status == "failed" and "the line says" in c.detail
    past_end = dict(real, line=10**6)
    c = check(run(logs, "data_loading_stall", [5], evidence=[past_end]), "citations")
    assert c.status == "failed" and "no line 1000000" in c.detail
    outside = dict(real, file="../nccl_fabric/logs/error-48213-0.out")
    c = check(run(logs, "data_loading_stall", [5], evidence=[outside]), "citations")
    assert c.status == "failed" and "no such file" in c.detail


def test_citations_reject_a_misread_time() -> None:
    logs = DATA_STALL / "logs"
    row = cite(logs, "error-48213-0.out", "failure detected by watchdog")
    root = dict(row, time="2026-05-21T07:32:12")
    c = check(run(logs, "data_loading_stall", [5], root_cause_event=root), "citations")
    assert c.status == "failed" and "claimed time" in c.detail


# ---------------------------------------------------------------------------------------------------------------------
# all daemon files


def test_all_daemon_files_accepts_the_file_covering_the_window() -> None:
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=AIS, root_cause_event=_ais_root_cause(),
            chain=[_worker_step("Batch stream truncated")], tz_offset_hours=-7)  # fmt: skip
    assert check(v, "all_daemon_files").status == "passed"
    # A minimal storage conclusion: the verifier checks the implicated daemon's files itself.
    assert check(run(DATA_STALL / "logs", "data_loading_stall", [5], ais=AIS), "all_daemon_files").status == "passed"


def test_all_daemon_files_rejects_evidence_from_the_latest_file_only() -> None:
    n, text = line_of(AIS / ROTATED, " ")
    rotated = {"file": ROTATED, "line": n, "text": text}
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=AIS, evidence=[rotated])
    c = check(v, "all_daemon_files")
    assert c.status == "failed" and WINDOW_FILE in c.detail and "latest file" in c.detail
    v = run(DATA_STALL / "logs", "storage_errors", [5], ais=AIS, root_cause_event=rotated,
            chain=[_worker_step("Batch stream truncated")])  # fmt: skip
    assert check(v, "all_daemon_files").status == "failed"


def test_all_daemon_files_rejects_ais_logs_that_miss_the_window(tmp_path: Path) -> None:
    ais = tmp_path / "ais"
    shutil.copytree(AIS, ais)
    for name in (WINDOW_FILE, WINDOW_FILE.replace("INFO", "ERROR")):
        (ais / name).unlink()  # only the post-rotation file of ais-target-2 was downloaded
    n, text = line_of(ais / ROTATED, " ")
    v = run(DATA_STALL / "logs", "data_loading_stall", [5], ais=ais,
            evidence=[{"file": ROTATED, "line": n, "text": text}])  # fmt: skip
    c = check(v, "all_daemon_files")
    assert not c.passed, c


# ---------------------------------------------------------------------------------------------------------------------
# rank 0 ahead


def test_rank0_ahead_accepts_the_measured_gap() -> None:
    c = check(run(FIXTURES / "nccl_root_ahead" / "logs", "collective_mismatch", [0], rank0_seq_gap=3), "rank0_ahead")
    assert c.status == "passed" and "3 collective(s) ahead" in c.detail and "whole number" in c.detail


def test_rank0_ahead_rejects_a_wrong_gap_and_a_rank0_that_is_not_ahead() -> None:
    c = check(run(FIXTURES / "nccl_root_ahead" / "logs", "collective_mismatch", [0], rank0_seq_gap=1), "rank0_ahead")
    assert c.status == "failed" and "measures 3" in c.detail
    c = check(run(DATA_STALL / "logs", "collective_mismatch", [0]), "rank0_ahead")
    assert c.status == "failed" and "does not show the root rank ahead" in c.detail
    c = check(run(FIXTURES / "nccl_root_ahead" / "logs", "collective_mismatch", [7]), "rank0_ahead")
    assert c.status == "failed"


# ---------------------------------------------------------------------------------------------------------------------
# category-specific


@pytest.mark.parametrize(
    ("scenario", "category", "culprits"),
    [
        ("cuda_oom", "cuda_oom", [3]),
        ("memory_creep_oom", "cuda_oom", [6]),
        ("xid_illegal_memory", "cuda_error", [9]),
        ("invalid_device_ordinal", "cuda_error", [15]),
        ("rank_exception", "rank_crash", [13]),
        ("nan_loss", "rank_crash", [2]),
        ("address_in_use", "rank_crash", [0]),
        ("watchdog_hang", "watchdog_hang", [4]),
        ("slurm_time_limit", "time_limit", []),
        ("throughput_collapse", "time_limit", [4, 5, 6, 7]),
        ("node_failure", "node_failure", list(range(8, 16))),
        ("clean_resets", "no_failure", []),
    ],
)
def test_category_specific_accepts_the_right_evidence(scenario: str, category: str, culprits: list[int]) -> None:
    c = check(run(FIXTURES / scenario / "logs", category, culprits), "category_specific")
    assert c.status == "passed", c.detail


@pytest.mark.parametrize(
    ("scenario", "category", "culprits", "says"),
    [
        ("cuda_oom", "cuda_oom", [5], "No CUDA out-of-memory line on rank(s) 5"),
        ("rank_exception", "cuda_oom", [13], "No CUDA out-of-memory line"),
        ("cuda_oom", "time_limit", [], "DUE TO TIME LIMIT"),
        ("node_failure", "time_limit", [], "DUE TO TIME LIMIT"),
        ("slurm_time_limit", "no_failure", [], "process killer"),
        ("data_stall", "no_failure", [], "process killer"),
        ("rank_exception", "rank_crash", [8], "No Python exception on rank(s) 8"),
        ("throughput_collapse", "time_limit", [0], "did not jump"),
        ("node_failure", "node_failure", [3], "kept logging"),
        ("data_stall", "nccl_timeout_unattributed", [], "data-loading errors"),
        ("cuda_oom", "nccl_timeout_unattributed", [], "attributable"),
        ("watchdog_hang", "watchdog_hang", [12], "No watchdog heartbeat kill"),
    ],
)
def test_category_specific_rejects_the_wrong_evidence(scenario: str, category: str, culprits: list[int],
                                                       says: str) -> None:  # fmt: skip
    c = check(run(FIXTURES / scenario / "logs", category, culprits), "category_specific")
    assert c.status == "failed" and says in c.detail, c.detail


# ---------------------------------------------------------------------------------------------------------------------
# Honest categories: what the evidence establishes decides, cautious conclusions pass unless contradicted


def test_old_torch_without_counters_accepts_unattributed_and_rejects_fabric() -> None:
    logs = FIXTURES / "fabric_old_torch" / "logs"
    assert run(logs, "nccl_timeout_unattributed", []).accepted
    c = check(run(logs, "gpu_fabric", []), "fabric_vs_straggler")
    assert c.status == "failed" and "counters" in c.detail and "positive evidence" in c.detail


def test_fabric_pattern_accepts_fabric_and_the_cautious_unattributed() -> None:
    logs = FIXTURES / "nccl_fabric" / "logs"
    assert run(logs, "gpu_fabric", []).accepted
    assert run(logs, "nccl_timeout_unattributed", []).accepted


def test_a_visible_desync_rejects_unattributed() -> None:
    logs = FIXTURES / "rank0_step_ahead" / "logs"
    assert run(logs, "collective_mismatch", [0], rank0_seq_gap=3).accepted
    c = check(run(logs, "nccl_timeout_unattributed", []), "category_specific")
    assert c.status == "failed" and "desync" in c.detail and "rank 0 is 3 collective(s) ahead" in c.detail


def test_a_crash_in_the_data_loader_is_a_crash_not_a_stall(tmp_path: Path) -> None:
    """srun --label attribution: the verifier reads rank 6's exception where diagnose does."""
    from fixtures.failure_scenarios import write_variant

    write_variant("dataloader_crash", tmp_path, {"launcher": "srun", "torch": "2.5"})
    logs = tmp_path / "logs"
    assert run(logs, "rank_crash", [6]).accepted
    c = check(run(logs, "data_loading_stall", [6]), "category_specific")
    assert c.status == "failed" and "a crash, not a stall" in c.detail


def test_an_oom_that_is_the_last_untimed_output_of_a_rank_is_ordered_by_its_state() -> None:
    logs = FIXTURES / "oom_untimed_tail" / "logs"
    v = run(logs, "cuda_oom", [3])
    assert v.accepted, [(c.rule, c.detail) for c in v.checks if not c.passed]
    assert "which crashed" in check(v, "category_specific").detail
    assert not run(logs, "nccl_timeout_unattributed", []).accepted


def test_a_finished_run_with_noisy_warnings_is_no_failure() -> None:
    logs = FIXTURES / "clean_noisy_warnings" / "logs"
    assert run(logs, "no_failure", []).accepted
    # a handled traceback; a RuntimeError named inside a NeMo warning; an OOM the run skipped (a warning)
    for category, rank in (("rank_crash", 6), ("rank_crash", 9), ("rank_crash", 12), ("cuda_oom", 12)):
        c = check(run(logs, category, [rank]), "category_specific")
        assert c.status == "failed", c.detail

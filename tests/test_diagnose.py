"""``diagnose`` on every failure scenario: the right category and culprits, and a conclusion the verifier accepts.

Ground truth: ``truth.json`` of the failure scenarios (fixtures/failure_scenarios.py); for the NCCL sets of
``worker_gen`` (whose truth describes the NCCL table, not the verdict) the expected verdict is listed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import ais_index, inventory
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.printers.markdown import render_report
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.diagnosis_models import Diagnosis
from debug_training_logs.verify import verify
from fixtures.failure_scenarios import SCENARIOS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
STYLES = sorted(p.name for p in (FIXTURES / "nccl_styles").iterdir() if (p / "logs").is_dir())

# (logs dir, ais dir or None) -> (category, culprit ranks) for the sets whose truth file does not state a verdict.
NCCL_SETS: dict[str, tuple[str, list[int]]] = {
    "data_stall": ("data_loading_stall", [5]),
    "nccl_fabric": ("gpu_fabric", []),
    "nccl_root_ahead": ("collective_mismatch", [0]),
    "nccl_missing_node": ("nccl_timeout_unattributed", []),
    **{f"nccl_styles/{s}": ("data_loading_stall", [5]) for s in STYLES},
}
SECTIONS = ("## Job Details", "## Timeline Table", "## Root Cause Chain", "## Key Files", "## Recommendations",
            "## Verification")  # fmt: skip

_CACHE: dict[tuple[str, str | None], Diagnosis] = {}


def run(name: str, ais: str | None = None) -> Diagnosis:
    key = (name, ais)
    if key not in _CACHE:
        _CACHE[key] = diagnose(str(FIXTURES / name / "logs"), str(FIXTURES / name / ais) if ais else None)
    return _CACHE[key]


def truth(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "truth.json").read_text(encoding="utf-8"))
    return data


def assert_sound(d: Diagnosis, category: str, culprits: list[int]) -> None:
    failed = [(c.rule, c.status, c.detail) for c in d.verification.checks if not c.passed]
    assert (d.verdict.category, d.verdict.culprit_ranks) == (category, culprits), d.summary
    assert d.verification.accepted, failed
    assert d.conclusion.category == category and d.conclusion.culprit_ranks == culprits
    assert d.summary.startswith(category) and "verified" in d.summary
    report = render_report(d)
    for section in SECTIONS:
        assert section in report
    assert "ACCEPTED" in report


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_failure_scenarios(scenario: str) -> None:
    t = truth(scenario)
    d = run(scenario)
    assert_sound(d, t["category"], t["culprit_ranks"])
    assert set(t["suspect_nodes"]) <= set(d.verdict.suspect_nodes)


@pytest.mark.parametrize("name", sorted(NCCL_SETS))
def test_nccl_sets(name: str) -> None:
    category, culprits = NCCL_SETS[name]
    assert_sound(run(name), category, culprits)


@pytest.mark.parametrize("scenario", ["cuda_oom", "clean_resets", "node_failure", "throughput_collapse"])
def test_own_conclusion_holds_when_verified_from_scratch(scenario: str) -> None:
    """verify_conclusion re-reads the logs itself: the conclusion diagnose printed passes without shared evidence."""
    v = verify(run(scenario).conclusion)
    assert v.accepted, [(c.rule, c.detail) for c in v.checks if not c.passed]


def test_data_stall_with_ais_logs_tells_the_whole_chain() -> None:
    d = run("data_stall", "ais")
    assert_sound(d, "data_loading_stall", [5])
    assert d.conclusion.tz_offset_hours == -7
    first = d.root_cause_chain[0]
    assert first.source.startswith("aistarget.ais-target-2.INFO.0521-130009.1:"), first
    assert first.time_local is not None and first.time_local < "2026-05-21T07:32:12"
    sources = [c.source.split(":")[0] for c in d.root_cause_chain]
    assert sources.index("error-48213-0.out") > 0  # the loader errors of rank 5 follow the AIS events
    assert any(e.time_utc and e.time_utc.endswith("Z") for e in d.timeline)
    areas = {r.area for r in d.recommendations}
    assert {"Storage-side", "Client-side", "Training config"} <= areas
    texts = " ".join(r.text for r in d.recommendations)
    assert "timeout" in texts and "keep-alive" in texts and "broadcast_buffers" in texts
    assert [c.status for c in d.verification.checks if c.rule in ("clock", "all_daemon_files")] == ["passed"] * 2


def test_data_stall_with_ais_archives() -> None:
    d = run("data_stall", "ais_tgz")
    assert_sound(d, "data_loading_stall", [5])
    assert "!" in d.root_cause_chain[0].source  # cited inside the archive, and the verifier read it there


def test_recommendations_follow_the_category() -> None:
    def areas_text(name: str) -> str:
        return " ".join(r.text for r in run(name).recommendations)

    assert "expandable_segments" in areas_text("cuda_oom")
    assert "leak" in areas_text("memory_creep_oom")
    assert "MASTER_PORT" in areas_text("address_in_use")
    assert "nproc-per-node" in areas_text("invalid_device_ordinal")
    assert "scp" in areas_text("nccl_missing_node")
    assert "ibstat" in areas_text("nccl_fabric")
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in areas_text("nccl_fabric")
    assert "keep-alive" in areas_text("clean_resets")


def test_a_subset_shows_its_shape_and_suspect_and_says_what_to_fetch() -> None:
    """Half the job's ranks are missing: the present ones show the timeout and rank 5 outside the collective; the
    verdict says so provisionally (rank 5 a suspect, no culprit) and asks for the missing logs."""
    d = run("nccl_missing_node")
    assert d.verdict.confidence == "low" and d.verdict.next_steps and d.verdict.provisional
    assert "8-15" in d.verdict.explanation and "subset" in d.verdict.explanation
    assert any("8-15" in s for s in d.verdict.next_steps)
    assert d.verdict.culprit_ranks == [] and d.verdict.missing_ranks == list(range(8, 16))
    assert d.conclusion.missing_ranks == list(range(8, 16)) and d.verdict.suspect_ranks == [5]
    assert d.verdict.action.startswith("Collect what is missing")


def test_timeline_marks_untimed_lines_with_their_bounds() -> None:
    d = run("data_stall")
    loader = [e for e in d.timeline if "Batch stream truncated" in e.event]
    assert loader and loader[0].time_local is None and "between" in loader[0].time_note


def test_a_straggler_without_a_reason_is_attributed_to_the_rank_not_to_a_cause(tmp_path: Path) -> None:
    """The data-stall job with rank 5's loader lines removed: rank 5 still never entered the collective, but nothing
    says why: the verdict names it without guessing a cause, and says what to capture next time."""
    src = FIXTURES / "data_stall" / "logs"
    for p in src.iterdir():
        kept = [ln for ln in p.read_text(encoding="utf-8").splitlines() if "lhotse.ais.batch_loader" not in ln]
        (tmp_path / p.name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    d = diagnose(str(tmp_path))
    assert_sound(d, "nccl_timeout_unattributed", [5])
    assert "no line of theirs says why" in d.verdict.explanation
    assert any("py-spy" in r.text for r in d.recommendations)


def test_an_empty_directory_is_incomplete_evidence(tmp_path: Path) -> None:
    d = diagnose(str(tmp_path))
    assert d.verdict.category == "incomplete_evidence" and d.verification.accepted
    assert "No log file was found" in d.verdict.explanation
    assert "(no event" in render_report(d)


def test_one_scan_of_each_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """diagnose reads the worker logs once and the AIS logs once (cited lines are read back, not rescanned)."""
    calls = {"worker": 0, "ais": 0}
    real_scan = inventory.start_each
    real_records = ais_index.AisDirScan.records

    def scan(*a: Any, **kw: Any) -> Any:
        calls["worker"] += 1
        return real_scan(*a, **kw)

    def records(self: ais_index.AisDirScan, *a: Any, **kw: Any) -> Any:
        calls["ais"] += 1
        return real_records(self, *a, **kw)

    monkeypatch.setattr(inventory, "start_each", scan)
    monkeypatch.setattr(ais_index.AisDirScan, "records", records)
    d = diagnose(str(FIXTURES / "data_stall" / "logs"), str(FIXTURES / "data_stall" / "ais"))
    assert d.verification.accepted
    assert calls == {"worker": 1, "ais": 1}


def test_fixtures_are_regenerated_byte_for_byte(tmp_path: Path) -> None:
    for name, write in SCENARIOS.items():
        write(tmp_path / name)
        for p in (FIXTURES / name / "logs").iterdir():
            assert (tmp_path / name / "logs" / p.name).read_bytes() == p.read_bytes(), (name, p.name)
        assert (tmp_path / name / "truth.json").read_text() == (FIXTURES / name / "truth.json").read_text()
        size = sum(p.stat().st_size for p in (FIXTURES / name).rglob("*") if p.is_file())
        assert size < 200_000, (name, size)


def test_diagnose_degrades_to_the_strongest_verdict_that_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first verdict its verifier rejects (here: the old gpu_fabric on torch 2.2, which logs no counters) is never
    presented: the strongest weaker verdict that passes is, and the result says what blocked the stronger one."""
    from debug_training_logs.analysis import diagnosis
    from debug_training_logs.analysis.evidence import gather_evidence
    from debug_training_logs.analysis.verdict import Verdict
    from debug_training_logs.logs.sources import find_sources
    from debug_training_logs.tools import diagnosis_result as tool

    logs = FIXTURES / "fabric_old_torch" / "logs"
    ev = gather_evidence(find_sources(logs))
    honest = diagnosis.conclude(ev)
    overclaim = Verdict(
        category="gpu_fabric",
        culprit_ranks=[],
        suspect_nodes=["gpu-a02"],
        confidence="high",
        explanation="every rank timed out: the fabric",
        root=honest.root,
        chain=honest.chain,
        timeline=honest.timeline,
        key_files=honest.key_files,
        next_steps=[],
    )
    monkeypatch.setattr(diagnosis, "conclude", lambda _ev: overclaim)  # build_diagnosis imports it when it runs
    d = tool.build_diagnosis(ev)
    assert d.verdict.category == "nccl_timeout_unattributed" and d.verification.accepted
    assert d.verdict.blocked and d.verdict.blocked[0].startswith("gpu_fabric")
    assert "positive evidence" in d.verdict.blocked[0]
    assert "points to gpu_fabric but does not prove it" in d.verdict.explanation
    assert "Stronger verdict(s) not presented" in render_report(d)


def test_rank_states_are_in_the_result() -> None:
    d = run("cuda_oom")
    states = {g.state: g for g in d.rank_states}
    assert states["crashed"].ranks == "3" and "CUDA out of memory" in states["crashed"].why
    assert states["waiting"].ranks == "8-15" and states["torn_down"].ranks == "0-2,4-7"
    assert sum(g.count for g in d.rank_states) == 16
    assert "**Rank states:** " in render_report(d)


def test_diagnose_never_presents_the_overclaim_even_when_nothing_weaker_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """If no weaker verdict passes either (here the evidence establishes rank 3's OOM, which contradicts every
    cautious verdict too), the most cautious one is shown as not verified, with what blocked each: never the
    rejected overclaim."""
    from debug_training_logs.analysis import diagnosis
    from debug_training_logs.analysis.evidence import gather_evidence
    from debug_training_logs.analysis.verdict import Verdict
    from debug_training_logs.tools import diagnosis_result as tool

    logs = FIXTURES / "cuda_oom" / "logs"
    ev = gather_evidence(find_sources(logs))
    honest = diagnosis.conclude(ev)
    wrong = Verdict(
        category="rank_crash", culprit_ranks=[8], suspect_nodes=[], confidence="high", explanation="rank 8 crashed",
        root=honest.root, chain=honest.chain, timeline=honest.timeline, key_files=honest.key_files, next_steps=[],
    )  # fmt: skip
    monkeypatch.setattr(diagnosis, "conclude", lambda _ev: wrong)
    d = tool.build_diagnosis(ev)
    assert d.verdict.category == "incomplete_evidence" and d.verdict.culprit_ranks == []
    assert not d.verification.accepted and "NOT verified" in d.summary
    assert [b.split(":")[0] for b in d.verdict.blocked] == [
        "rank_crash (ranks 8)",
        "rank_crash",
        "nccl_timeout_unattributed",
    ]

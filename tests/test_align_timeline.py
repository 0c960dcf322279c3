"""align_timezones and timeline on the data-stall incident: workers in UTC-7, AIStore in UTC."""

from __future__ import annotations

import shutil
from dataclasses import asdict, astuple
from datetime import datetime
from pathlib import Path

import pytest

from debug_training_logs.analysis import ais_collect
from debug_training_logs.analysis.ais_index import index_ais_dir
from debug_training_logs.analysis.alignment import Alignment, MethodResult, _conclude, align, scan_worker_clock
from debug_training_logs.analysis.nccl_table import nccl_state_table
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.models import Evidence
from debug_training_logs.tools.align_timezones import align_timezones
from debug_training_logs.tools.timeline import timeline, timeline_of

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "data_stall" / "logs"
AIS = ROOT / "fixtures" / "data_stall" / "ais"
TARGET_2 = "t[hJkL0aBc]"


def test_offset_is_minus_seven_hours_verified_by_two_methods() -> None:
    result = align_timezones(str(LOGS), str(AIS))
    assert result.offset_hours == -7.0
    assert result.verified is True
    assert {m.method for m in result.methods} == {"activity_stop", "error_onset"}
    assert all(m.offset_hours == -7.0 for m in result.methods)
    onset = next(m for m in result.methods if m.method == "error_onset")
    assert onset.daemon == TARGET_2
    by = {d.daemon: d for d in result.daemons}
    assert by[TARGET_2].verified and by[TARGET_2].methods == ["activity_stop", "error_onset"]
    assert all(d.verified and d.offset_hours == -7.0 for d in result.daemons)
    assert result.ais_zone == "UTC" and result.worker_utc_offset_hours == -7.0
    assert result.coverage.ranks_found == "0-15"


def test_a_stated_worker_zone_adds_the_zone_label_method(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(LOGS, logs)
    (logs / "prologue.out").write_text("Job 48213 started: Thu May 21 07:00:00 PDT 2026\n")
    result = _align(logs, AIS)
    zone = [m for m in result.methods if m.method == "zone_labels"]
    assert len(zone) == 1 and zone[0].offset_hours == -7.0
    assert result.verified


def test_an_ambiguous_zone_is_only_a_hint(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(LOGS, logs)
    (logs / "prologue.out").write_text("Job 48213 started: Thu May 21 07:00:00 CST 2026\n")
    result = _align(logs, AIS)
    zone = next(m for m in result.methods if m.method == "zone_labels")
    assert zone.offset_hours is None and "hints" in zone.detail


def _align(logs: Path, ais: Path) -> Alignment:
    """The alignment from the scans of ``logs`` and ``ais`` (what ``align_timezones`` gathers for it)."""
    return align(scan_worker_clock(logs), nccl_state_table(logs), ais_collect.collect(ais))


def _m(method: str, off: float | None, daemon: str | None = TARGET_2) -> MethodResult:
    return MethodResult(method, off, off, daemon, [Evidence(file="f", line=1, text="t")], "")


@pytest.mark.parametrize(
    ("methods", "verified", "offset"),
    [
        ([_m("activity_stop", -7.0)], False, -7.0),  # one method is not proof
        ([_m("activity_stop", -7.0), _m("error_onset", -6.0)], False, None),  # methods disagree
        ([_m("activity_stop", -7.0), _m("error_onset", None)], False, -7.0),  # one could not be snapped
        ([_m("activity_stop", -7.0), _m("error_onset", -7.0)], True, -7.0),
        ([], False, None),
    ],
)
def test_verification_needs_two_agreeing_methods(
    methods: list[MethodResult], verified: bool, offset: float | None
) -> None:
    result = _conclude(methods, index_ais_dir(AIS), "UTC", 0.0, None, False)
    assert result.verified is verified
    assert result.offset_hours == offset
    if not verified:
        assert result.missing and "NOT verified" in result.summary


def test_timeline_order_follows_the_causal_chain() -> None:
    t = timeline_of(LOGS, AIS, limit=80)
    assert t.alignment is not None and t.alignment.verified
    kinds = [(e.kind, e.event) for e in t.events]

    def first(pred: str) -> int:
        return next(i for i, (_k, ev) in enumerate(kinds) if pred in ev)

    order = [
        first("disk_critical"),
        first("shared_dm_broken_pipe"),
        first("getbatch_out_of_bounds"),
        first("ranks entered ALLREDUCE SeqNum 4118"),
        first("NCCL watchdog timeout in PG 0"),
        first("slurm_cancelled"),
    ]
    assert order == sorted(order)
    ais = [e for e in t.events if e.clock == "ais"]
    assert ais and all(e.aligned and e.time_utc for e in ais)
    loader = next(e for e in t.events if "loader_stop" in e.event)
    assert loader.ranks == "5" and loader.time_approx and loader.time_local == "2026-05-21T07:29:15"
    assert loader.time_utc == "2026-05-21T14:29:15"
    start = next(e for e in t.events if e.kind == "collective_start")
    assert start.time_local == "2026-05-21T07:32:12" and start.ranks == "0-4,6-15"
    assert "year 2026" in t.year_basis


def test_timeline_without_verified_alignment_marks_ais_events(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    # Only the first half hour of the job: no teardown, no NCCL timeout -> no anchors on the worker side.
    head = (LOGS / "error-48213-0.out").read_text().splitlines()[:40]
    (logs / "error-48213-0.out").write_text("\n".join(head) + "\n")
    result = timeline(str(logs), str(AIS), limit=40)
    assert result.alignment_verified is False and result.offset_hours is None
    ais = [e for e in result.events if e.clock == "ais"]
    assert ais and not any(e.aligned or e.time_utc for e in ais)
    assert "UNALIGNED" in result.summary


def test_worker_only_timeline_and_limit() -> None:
    result = timeline(str(LOGS), None, limit=5)
    assert len(result.events) == 5 and result.events_truncated > 0
    assert result.alignment_verified is None
    times = [datetime.fromisoformat(e.time_local) for e in result.events if e.time_local]
    assert times == sorted(times)


AIS_JOBS = sorted(d.parent for d in (ROOT / "fixtures").glob("*/ais") if (d.parent / "logs").is_dir())


@pytest.mark.parametrize("job", AIS_JOBS, ids=lambda p: p.name)
def test_the_alignment_from_the_spikes_the_ais_evidence_found_equals_the_one_that_finds_them(job: Path) -> None:
    """diagnose hands the alignment the spikes its AIS pass found per daemon of the index (no second pass over every
    daemon's stats intervals): per daemon the same spikes in the same order, so the same error onsets and alignment."""
    from debug_training_logs.analysis import ais_intervals
    from debug_training_logs.analysis.alignment import _ais_error_onsets
    from debug_training_logs.analysis.evidence import gather_evidence
    from debug_training_logs.analysis.evidence_ais import ais_own

    own = ais_own(job / "ais")
    again = ais_intervals.collection_spikes(own.collection)
    assert set(own.collection.points) <= {d.key for d in own.collection.index.daemons}
    for daemon in {s.daemon for s in [*own.spikes, *again]}:
        assert [astuple(s) for s in own.spikes if s.daemon == daemon] == [
            astuple(s) for s in again if s.daemon == daemon
        ]
    assert _ais_error_onsets(own.collection, own.spikes) == _ais_error_onsets(own.collection)
    ev = gather_evidence(find_sources(job / "logs", job / "ais"))
    assert ev.ais is not None
    alone = align(ev.worker.clock, ev.nccl.table, ais_collect.collect(job / "ais"))
    assert asdict(ev.ais.alignment) == asdict(alone)


def test_a_second_call_on_the_same_files_reuses_the_timeline_and_the_alignment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One server, the same directories twice: the merged timeline and the clock alignment are built once; a
    changed AIS file means new ones (the key is every file's name, size and mtime, the AIS logs' included)."""
    from debug_training_logs.tools import align_timezones as align_tool
    from debug_training_logs.tools import timeline as timeline_tool

    shutil.copytree(LOGS.parent, tmp_path / "job")
    logs, ais = tmp_path / "job" / "logs", tmp_path / "job" / "ais"
    built: list[str] = []
    real_timeline, real_align = timeline_tool.build_timeline, align_tool.align
    monkeypatch.setattr(timeline_tool, "build_timeline", lambda *a, **k: built.append("t") or real_timeline(*a, **k))
    monkeypatch.setattr(align_tool, "align", lambda *a, **k: built.append("a") or real_align(*a, **k))
    first = (timeline(str(logs), str(ais)), align_timezones(str(logs), str(ais)))
    again = (timeline(str(logs), str(ais)), align_timezones(str(logs), str(ais)))
    assert built == ["t", "a"] and again == first
    daemon_log = next(p for p in sorted(ais.rglob("*")) if p.is_file() and p.suffix != ".gz")
    with daemon_log.open("a") as f:
        f.write("I 10:00:00.000000 one more line\n")
    timeline(str(logs), str(ais))
    align_timezones(str(logs), str(ais))
    assert built == ["t", "a", "t", "a"]

"""AIS counter deltas on the incidents the fixtures encode (fixtures/ais_gen.py tells each story).

data_stall: ais-target-2 (t[hJkL0aBc]) hits disk-critical at 14:31:10 UTC, its shared-dm breaks at 14:32:05, and its
stats interval 14:30:08-14:33:08 shows err.getbatch.n +40 and err.http.write.n +37; it rotated its logs at 14:40, so
the evidence is in its EARLIER file. The workers died at 15:02:13 and every target's get.n stopped growing.
"""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
from datetime import datetime
from pathlib import Path

import pytest

from debug_training_logs.analysis.ais_collect import collect
from debug_training_logs.analysis.ais_delta_types import AisCounterDeltasResult
from debug_training_logs.analysis.ais_deltas import ais_counter_deltas
from debug_training_logs.analysis.ais_index import AisDirScan, index_ais_dir, iter_records
from debug_training_logs.analysis.ais_intervals import get_stop_times
from debug_training_logs.errors import UserInputError
from debug_training_logs.tools.ais_counter_deltas import SPEC
from debug_training_logs.tools.ais_counter_deltas import ais_counter_deltas as ais_counter_deltas_tool

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DATA_STALL = FIXTURES / "data_stall" / "ais"
DATA_STALL_TGZ = FIXTURES / "data_stall" / "ais_tgz"
RESTART = FIXTURES / "ais_target_restart" / "ais"
IDLE = FIXTURES / "ais_idle" / "ais"

T2 = "t[hJkL0aBc]"
T2_EARLY_INFO = "aistarget.ais-target-2.INFO.0521-130009.1"
T2_EARLY_ERROR = "aistarget.ais-target-2.ERROR.0521-130009.1"
T2_LATEST_INFO = "aistarget.ais-target-2.INFO.0521-144000.1"
INCIDENT_START = datetime(2026, 5, 21, 14, 30, 8, 403518)
INCIDENT_END = datetime(2026, 5, 21, 14, 33, 8, 402295)
T2_NOTABLE = {
    "disk_critical": 2,
    "resource_pressure_critical": 5,
    "getbatch_rejected": 5,
    "shared_dm_broken_pipe": 1,
    "stream_send_error": 1,
    "getbatch_out_of_bounds": 2,
    "client_write_failed": 3,
    "shared_dm_xid_not_found": 6,
}


def _notable_counts(result: AisCounterDeltasResult, daemon: str) -> dict[str, int]:
    return {n.pattern: n.count for n in result.notable_lines if n.daemon == daemon}


def test_spike_is_on_target_2_in_the_interval_of_the_incident() -> None:
    r = ais_counter_deltas(DATA_STALL)
    assert [(s.daemon, s.counter, s.start, s.end, s.delta, s.expected) for s in r.spikes] == [
        (T2, "err.getbatch.n", INCIDENT_START, INCIDENT_END, 40, 0.0),
        (T2, "err.http.write.n", INCIDENT_START, INCIDENT_END, 37, 0.0),
        (T2, "getbatch.throttle.ns", INCIDENT_START, INCIDENT_END, 49_440_000_000, 0.0),
    ]
    assert {(s.evidence.file, s.evidence.line) for s in r.spikes} == {(T2_EARLY_INFO, 91)}
    (interval,) = [iv for iv in r.intervals if iv.daemon == T2 and iv.start == INCIDENT_START]
    assert interval.end == INCIDENT_END and not interval.reset
    assert {k: interval.deltas[k] for k in ("err.get.n", "err.getbatch.n", "err.http.write.n", "get.n")} == {
        "err.get.n": 1,
        "err.getbatch.n": 40,
        "err.http.write.n": 37,
        "get.n": 16156,
    }
    assert interval.getbatch_error_rate == round(40 / 531, 6)
    assert (interval.start_evidence.line, interval.end_evidence.line) == (63, 91)
    # No other daemon and no other interval is flagged: background errors (0-1 per interval) are not spikes.
    assert r.restarts == []


def test_evidence_is_in_the_earlier_file_not_the_latest() -> None:
    r = ais_counter_deltas(DATA_STALL, start="2026-05-21T14:30:00", end="2026-05-21T14:35:00")
    (t2,) = [d for d in r.daemons if d.daemon == T2]
    assert t2.latest_file == T2_LATEST_INFO
    assert t2.window_files == [T2_EARLY_INFO, T2_EARLY_ERROR]
    assert [(f.file, f.kind, f.start, f.end) for f in t2.files if f.severity == "INFO"] == [
        (T2_EARLY_INFO, "started", datetime(2026, 5, 21, 13, 0, 9), datetime(2026, 5, 21, 14, 40)),
        (T2_LATEST_INFO, "rotated", datetime(2026, 5, 21, 14, 40), datetime(2026, 5, 21, 16, 8, 27, 890665)),
    ]
    assert f"in {T2_EARLY_INFO}, an earlier file than the latest {T2_LATEST_INFO}" in r.summary
    # The window selects intervals touching 14:30-14:35 only: 3 per daemon.
    assert sorted({iv.daemon for iv in r.intervals}) == ["p[Rw3pX9kd]", "t[Ws6yTm3E]", T2, "t[mN4qZ7Lb]"]
    assert len(r.intervals) == 12


def test_error_file_duplicates_are_counted_once() -> None:
    r = ais_counter_deltas(DATA_STALL)
    assert _notable_counts(r, T2) == T2_NOTABLE
    first = {n.pattern: n for n in r.notable_lines if n.daemon == T2}
    oob = first["getbatch_out_of_bounds"]
    assert (oob.severities, oob.first, oob.example.file, oob.example.line) == (
        "EW",
        datetime(2026, 5, 21, 14, 32, 6, 220311),
        T2_EARLY_INFO,
        80,
    )
    pipe = first["shared_dm_broken_pipe"]
    assert pipe.example.text.startswith("E 14:32:05.118734 base:173 shared-dm[hJkL0aBc=>Ws6yTm3E] terminated [")
    # Named incident patterns come first, in time order; keep-alive noise after them.
    assert [n.pattern for n in r.notable_lines][:3] == [
        "disk_critical",
        "resource_pressure_critical",
        "getbatch_rejected",
    ]
    assert [n.daemon for n in r.notable_lines if n.noise] == ["t[Ws6yTm3E]", "p[Rw3pX9kd]", "t[mN4qZ7Lb]"]


def test_error_file_events_count_when_no_info_file_covers_them(tmp_path: Path) -> None:
    ais = tmp_path / "ais"
    shutil.copytree(DATA_STALL, ais)
    (ais / T2_EARLY_INFO).unlink()  # e.g. deleted by log retention (INFO files are GC-ed first: they are bigger)
    r = ais_counter_deltas(ais)
    assert _notable_counts(r, T2) == T2_NOTABLE
    assert {n.example.file for n in r.notable_lines if n.daemon == T2} == {T2_EARLY_ERROR}


def test_glued_stats_line_is_split_and_still_gives_deltas() -> None:
    index = index_ais_dir(DATA_STALL)
    t0 = index.file("aistarget.ais-target-0.INFO.0521-130003.1")
    assert t0 is not None and t0.glued_lines == 1
    on_line_54 = [
        (r.glued, r.text[:40])
        for s, r in iter_records(DATA_STALL)
        if s.ref == "aistarget.ais-target-0.INFO.0521-130003.1" and r.line == 54
    ]
    assert on_line_54 == [
        (True, "I 14:22:07.004515 {append.ns:1003260,aws"),
        (True, "I 14:22:07.004533 nvme0n1: 443MiB/s, 128"),
    ]
    (cut_point,) = [p for p in collect(DATA_STALL).points["t[mN4qZ7Lb]"] if not p.stats.complete]
    assert (cut_point.at, cut_point.stats.known_through) == (datetime(2026, 5, 21, 14, 22, 7, 4515), "stream.out.size")
    r = ais_counter_deltas(DATA_STALL)
    (after,) = [iv for iv in r.intervals if iv.daemon == "t[mN4qZ7Lb]" and iv.start == cut_point.at]
    assert (after.deltas["err.get.n"], after.deltas["get.n"]) == (1, 17736)


def test_get_n_stops_on_every_target_after_its_last_stats_line() -> None:
    r = ais_counter_deltas(DATA_STALL)
    stops = {(g.daemon, g.counter): g for g in r.get_stops}
    assert sorted(stops) == [
        ("t[Ws6yTm3E]", "get.n"),
        ("t[Ws6yTm3E]", "getbatch.n"),
        (T2, "get.n"),
        (T2, "getbatch.n"),
        ("t[mN4qZ7Lb]", "get.n"),
        ("t[mN4qZ7Lb]", "getbatch.n"),
    ]  # the proxy serves no GETs itself
    assert {d: stops[(d, "get.n")].last_increase_at for d in ("t[mN4qZ7Lb]", "t[Ws6yTm3E]", T2)} == {
        "t[mN4qZ7Lb]": datetime(2026, 5, 21, 15, 1, 7, 2747),
        "t[Ws6yTm3E]": datetime(2026, 5, 21, 15, 1, 58, 302545),
        T2: datetime(2026, 5, 21, 15, 0, 8, 402775),
    }
    t2 = stops[(T2, "get.n")]
    assert (t2.last_increase_after, t2.later_stats_lines, t2.stopped) == (
        datetime(2026, 5, 21, 14, 57, 8, 402919),
        0,
        True,
    )
    assert t2.evidence.file == T2_LATEST_INFO
    assert [g.daemon for g in get_stop_times(DATA_STALL)] == [T2, "t[mN4qZ7Lb]", "t[Ws6yTm3E]"]


def test_proxy_errors_stable_target_errors_spiking_is_a_target_side_problem() -> None:
    v = ais_counter_deltas(DATA_STALL).proxy_vs_target
    assert (v.verdict, v.spiking_targets, v.spiking_proxies) == ("target_side", [T2], [])
    assert v.proxy_error_deltas == {"err.get.n": 3, "err.http.write.n": 1, "err.kalive.n": 1, "err.lst.n": 1}
    assert v.target_error_deltas["err.getbatch.n"] == 53
    assert "target-side problem" in v.explanation


def test_restart_gives_no_negative_delta_and_is_reported() -> None:
    r = ais_counter_deltas(RESTART)
    assert [
        (x.daemon, x.kind, x.after, x.by, x.process_start, x.process_start_file, x.restarted_flag) for x in r.restarts
    ] == [
        (
            "t[Qv3nR8sW]",
            "restart",
            datetime(2026, 3, 15, 0, 6, 7, 218365),
            datetime(2026, 3, 15, 0, 8, 16, 400582),
            datetime(2026, 3, 15, 0, 8, 12),
            "aistarget.ais-target-1.INFO.0315-000812.2417",
            True,
        )
    ]
    assert "err.get.n" in r.restarts[0].decreased and "get.n" in r.restarts[0].decreased
    assert all(v is None or v >= 0 for iv in r.intervals for v in iv.deltas.values())
    (reset,) = [iv for iv in r.intervals if iv.reset]
    assert (reset.daemon, reset.deltas["get.n"], reset.deltas["err.get.n"]) == ("t[Qv3nR8sW]", 978, 0)
    (t1,) = [d for d in r.daemons if d.daemon == "t[Qv3nR8sW]"]
    assert t1.process_starts == [datetime(2026, 3, 14, 22, 55, 9), datetime(2026, 3, 15, 0, 8, 12)]
    # The old process's file runs across midnight: its dates roll over, intervals stay 3 minutes long.
    (midnight,) = [iv for iv in r.intervals if iv.daemon == "t[Qv3nR8sW]" and iv.start.date() < iv.end.date()]
    assert (midnight.start, midnight.end, midnight.minutes) == (
        datetime(2026, 3, 14, 23, 57, 7, 220481),
        datetime(2026, 3, 15, 0, 0, 7, 220270),
        3.0,
    )
    assert r.zone_hint == "PDT"


def test_idle_daemon_has_no_stats_lines_and_says_why() -> None:
    r = ais_counter_deltas(IDLE)
    (idle,) = [d for d in r.daemons if d.daemon == "t[Yc9xV6bz]"]
    assert (idle.stats_lines, idle.first_stats, idle.last_stats) == (0, None, None)
    assert "idle" in idle.note
    assert not [iv for iv in r.intervals if iv.daemon == "t[Yc9xV6bz]"]
    assert "no stats lines at all from t[Yc9xV6bz] (idle)" in r.summary
    assert (r.proxy_vs_target.verdict, r.zone_hint) == ("no_spikes", "CST")


def test_cli_archives_are_read_in_stream_with_the_same_results() -> None:
    plain, tgz = ais_counter_deltas(DATA_STALL), ais_counter_deltas(DATA_STALL_TGZ)
    key = [(s.daemon, s.counter, s.start, s.end, s.delta) for s in plain.spikes]
    assert [(s.daemon, s.counter, s.start, s.end, s.delta) for s in tgz.spikes] == key
    assert _notable_counts(tgz, T2) == T2_NOTABLE  # the archives hold INFO files only (CLI default severity)
    assert tgz.spikes[0].evidence.file == f"aistarget-hJkL0aBc.tar.gz!{T2_EARLY_INFO}"
    assert (tgz.coverage.files_scanned, tgz.coverage.unreadable_files) == (5, [])
    assert sorted(p.name for p in DATA_STALL_TGZ.iterdir()) == [
        "aisproxy-Rw3pX9kd.tar.gz",
        "aistarget-Ws6yTm3E.tar.gz",
        "aistarget-hJkL0aBc.tar.gz",
        "aistarget-mN4qZ7Lb.tar.gz",
    ]  # nothing extracted next to them


def _add(tar: tarfile.TarFile, info: tarfile.TarInfo, data: bytes = b"") -> None:
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


def test_malicious_archive_members_are_refused_and_reported(tmp_path: Path) -> None:
    ais = tmp_path / "ais"
    ais.mkdir()
    good = (DATA_STALL / T2_EARLY_INFO).read_bytes()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        _add(tar, tarfile.TarInfo(T2_EARLY_INFO), good)
        _add(tar, tarfile.TarInfo("../x"), b"I 14:00:00.000000 a:1 escaped\n")
        _add(tar, tarfile.TarInfo("/abs/y"), b"I 14:00:00.000000 a:1 absolute\n")
        link = tarfile.TarInfo("evil")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        _add(tar, link)
        hard = tarfile.TarInfo("hard")
        hard.type, hard.linkname = tarfile.LNKTYPE, T2_EARLY_INFO
        _add(tar, hard)
        dev = tarfile.TarInfo("tty")
        dev.type = tarfile.CHRTYPE
        _add(tar, dev)
        _add(tar, tarfile.TarInfo("aistarget.ais-target-2.INFO.0521-150000.1"), b"x" * 25_000)
    (ais / "aistarget-hJkL0aBc.tar.gz").write_bytes(gzip.compress(raw.getvalue()))
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))

    scan = AisDirScan(ais, max_member_bytes=20_000)  # the good member is 13 KB
    index = scan.index()

    archive = "aistarget-hJkL0aBc.tar.gz"
    assert {ref: reason.split(" ")[0] for ref, reason in index.unreadable.items()} == {
        f"{archive}!x": "unsafe",
        f"{archive}!y": "unsafe",
        f"{archive}!evil": "link",
        f"{archive}!hard": "link",
        f"{archive}!tty": "device",
        f"{archive}!aistarget.ais-target-2.INFO.0521-150000.1": "member",
    }
    assert "over the 20000-byte cap" in index.unreadable[f"{archive}!aistarget.ais-target-2.INFO.0521-150000.1"]
    (daemon,) = index.daemons
    assert (daemon.key, [f.ref for f in daemon.files]) == (T2, [f"{archive}!{T2_EARLY_INFO}"])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_binary_file_and_truncated_gzip_are_reported_unreadable(tmp_path: Path) -> None:
    ais = tmp_path / "ais"
    shutil.copytree(DATA_STALL, ais)
    (ais / "aistarget.ais-target-9.INFO.0521-130000.1").write_bytes(b"\x00\x01\x02binary\x00" * 100)
    t0 = ais / "aistarget.ais-target-0.INFO.0521-130003.1"
    packed = gzip.compress(t0.read_bytes())
    (ais / (t0.name + ".gz")).write_bytes(packed[: len(packed) // 2])
    t0.unlink()
    (ais / "README.txt").write_text("downloaded with ais log get cluster\n")

    r = ais_counter_deltas(ais)

    reasons = {u.file: u.reason for u in r.coverage.unreadable_files}
    assert sorted(reasons) == [
        "aistarget.ais-target-0.INFO.0521-130003.1.gz",
        "aistarget.ais-target-9.INFO.0521-130000.1",
    ]
    assert reasons["aistarget.ais-target-9.INFO.0521-130000.1"].startswith("binary content")
    assert reasons["aistarget.ais-target-0.INFO.0521-130003.1.gz"].startswith("truncated or corrupt compressed stream")
    assert [(s.file, s.reason) for s in r.skipped_files] == [
        ("README.txt", "not an AIS daemon log (neither its name nor its first line)")
    ]
    assert [(s.daemon, s.counter, s.delta) for s in r.spikes][:2] == [
        (T2, "err.getbatch.n", 40),
        (T2, "err.http.write.n", 37),
    ]
    assert "2 file(s) unreadable" in r.summary


def test_archive_next_to_its_extracted_copy_is_counted_once(tmp_path: Path) -> None:
    # fetch_ais_logs keeps aistarget-<ID>.tar.gz and extracts it into aistarget-<ID>/ side by side.
    ais = tmp_path / "ais"
    shutil.copytree(DATA_STALL_TGZ, ais)
    for archive in DATA_STALL_TGZ.iterdir():
        dest = ais / archive.name.removesuffix(".tar.gz")
        dest.mkdir()
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                f = tar.extractfile(member)
                assert f is not None
                (dest / member.name).write_bytes(f.read())
    r = ais_counter_deltas(ais)
    assert len(r.daemons) == 4
    assert r.coverage.files_scanned == 10
    assert _notable_counts(r, T2) == T2_NOTABLE
    assert [s.delta for s in r.spikes][:2] == [40, 37]
    copies = [s for s in r.skipped_files if s.reason.startswith("identical copy of ")]
    assert len(copies) == 5


def test_tool_function_json_window_and_limits() -> None:
    result = ais_counter_deltas_tool(str(DATA_STALL), start="2026-05-21T14:32:00", end="2026-05-21T14:32:06.6")
    data = result.model_dump(mode="json")
    assert next(iter(data)) == "summary"
    assert data["coverage"]["world_size"] is None
    assert data["coverage"]["world_size_evidence"] == "not applicable: AIStore daemon logs"
    assert data["coverage"]["ranks_found"] == ""
    assert data["spikes"][0]["start"] == "2026-05-21T14:30:08.403"
    assert data["window_start"] == "2026-05-21T14:32:00.000"
    counts = {n["pattern"]: n["count"] for n in data["notable_lines"] if n["daemon"] == T2}
    # 14:32:06.790311 is after the window's end: two of the three failed client writes.
    assert counts == {
        "shared_dm_broken_pipe": 1,
        "stream_send_error": 1,
        "getbatch_out_of_bounds": 2,
        "client_write_failed": 2,
    }
    one = ais_counter_deltas_tool(str(DATA_STALL), limit=1)
    # Without a window only the intervals that matter are listed (the spike first); the rest is summed per daemon.
    assert one.interval_selection == "notable" and one.intervals_total == 84
    assert [(iv.daemon, iv.start) for iv in one.intervals] == [(T2, INCIDENT_START)]
    notable = 1 + one.truncated["intervals"]
    assert notable == 4  # the spike on ais-target-2, and the interval in which each target's reads last grew
    assert notable + sum(s.intervals for s in one.interval_summaries) == 84
    assert [d.daemon for d in one.daemons] == [T2]  # the daemon with the spike is the one kept
    assert len({s.daemon for s in one.interval_summaries}) == 4
    assert one.truncated["notable_lines"] == 10
    # A window lists every interval in it; `daemon` narrows the lists (by host name here).
    t2 = ais_counter_deltas_tool(
        str(DATA_STALL), daemon=["ais-target-2"], start="2026-05-21T14:00:00", end="2026-05-21T15:00:00"
    )
    assert t2.interval_selection == "window" and t2.daemon_filter == [T2] and t2.interval_summaries == []
    assert {iv.daemon for iv in t2.intervals} == {T2} and len(t2.intervals) == t2.intervals_total > 4
    assert all(d.daemon == T2 for d in t2.daemons) and all(n.daemon == T2 for n in t2.notable_lines)
    assert all(v != 0 for iv in t2.intervals for v in iv.deltas.values())  # counters that did not grow are left out
    with pytest.raises(UserInputError, match="No AIS daemon matches 'ais-target-9'"):
        ais_counter_deltas_tool(str(DATA_STALL), daemon=["ais-target-9"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"counters": ["get.ns"]}, "not a cumulative counter"),
        ({"start": "2026-05-21T14:30:00+00:00"}, "has a UTC offset"),
        ({"start": "yesterday"}, "not an ISO 8601 time"),
        ({"start": "2026-05-21T15:00:00", "end": "2026-05-21T14:00:00"}, "is after end"),
    ],
)
def test_bad_input_says_what_to_do(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        ais_counter_deltas_tool(str(DATA_STALL), **kwargs)  # type: ignore[arg-type]


def test_missing_directory_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="does not exist"):
        ais_counter_deltas_tool(str(tmp_path / "nope"))


@pytest.mark.anyio
async def test_mcp_structured_result_matches_the_tool_function() -> None:
    from mcp import Client

    from debug_training_logs.server.app import create_server

    async with Client(create_server([FIXTURES])) as client:
        res = await client.call_tool("ais_counter_deltas", {"ais_dir": str(DATA_STALL), "limit": 5})
    assert res.is_error is False, res.content
    # MCP returns the tool's result held to its token budget, the same object the CLI prints with --json.
    expected = SPEC.call(ais_dir=str(DATA_STALL), limit=5).model_dump(mode="json")
    assert res.structured_content == expected
    assert {k: v for k, v in expected.items() if k != "budget"} == ais_counter_deltas_tool(
        str(DATA_STALL), limit=5
    ).model_dump(mode="json")

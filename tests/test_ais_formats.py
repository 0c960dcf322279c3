"""AIStore log formats: names, headers, records, glued lines, hourly markers, stats lines, dates, error patterns."""

from __future__ import annotations

from datetime import datetime

import pytest

from debug_training_logs.formats.ais import (
    AIS_ERROR_PATTERNS,
    AisFileParser,
    classify_line,
    is_cumulative,
    line_template,
    parse_cli_name,
    parse_header,
    parse_hourly_marker,
    parse_log_name,
    parse_record,
    parse_stats,
    parse_title,
    split_glued_records,
)


def _lines(*texts: str) -> list[tuple[int, str]]:
    return list(enumerate(texts, 1))


# -- file names --------------------------------------------------------------------------------------------------------


def test_nlog_file_name_gives_role_host_severity_creation_time_and_pid() -> None:
    name = parse_log_name("aistarget.ais-target-3.ERROR.0521-143022.1")
    assert name is not None
    assert (name.role, name.host, name.severity, name.pid, name.legacy) == ("target", "ais-target-3", "ERROR", 1, False)
    assert name.created() is None  # no year in the name
    assert name.created(2026) == datetime(2026, 5, 21, 14, 30, 22)


def test_compressed_copy_and_proxy_names() -> None:
    name = parse_log_name("aisproxy.ais-proxy-0.INFO.0521-143019.7.gz")
    assert name is not None and (name.role, name.severity, name.pid) == ("proxy", "INFO", 7)


def test_legacy_glog_name_carries_the_year() -> None:
    name = parse_log_name("ais.ip-10-0-2-19.root.log.WARNING.20180404-031540.2249")
    assert name is not None
    assert (name.role, name.host, name.severity, name.legacy) == ("ais", "ip-10-0-2-19", "WARNING", True)
    assert name.created() == datetime(2018, 4, 4, 3, 15, 40)


@pytest.mark.parametrize("name", ["aistarget.INFO", "train.log", "error-123-0.out", "aistarget.h.INFO.0521-1430.1"])
def test_other_names_are_not_daemon_logs(name: str) -> None:
    assert parse_log_name(name) is None


def test_cli_archive_and_current_log_names_give_the_node_id() -> None:
    archive = parse_cli_name("aistarget-hJkL0aBc.tar.gz")
    assert archive is not None and (archive.role, archive.node_id, archive.archive) == ("target", "hJkL0aBc", True)
    current = parse_cli_name("aisproxy-Rw3pX9kd")
    assert current is not None and (current.role, current.node_id, current.archive) == ("proxy", "Rw3pX9kd", False)
    assert parse_cli_name("aistarget.ais-target-0.INFO.0521-130003.1") is None


# -- header and title ----------------------------------------------------------------------------------------------------


def test_started_and_rotated_headers_and_title() -> None:
    started = parse_header("Started up at 2025/02/17 16:08:29, host lab-Workstation, go1.22.3 for linux/amd64")
    assert started is not None
    assert (started.kind, started.at, started.host, started.go_version, started.platform) == (
        "started",
        datetime(2025, 2, 17, 16, 8, 29),
        "lab-Workstation",
        "go1.22.3",
        "linux/amd64",
    )
    rotated = parse_header("Rotated at 2025/10/02 03:17:45, host ais-target-7, go1.24.3 for linux/amd64")
    assert rotated is not None and rotated.kind == "rotated"
    glog = parse_header("Log file created at: 2018/04/04 03:15:40")
    assert glog is not None and (glog.kind, glog.at) == ("created", datetime(2018, 4, 4, 3, 15, 40))
    assert parse_header("Started up at 2025/02/30 16:08:29, host h, go1.22.3 for linux/amd64") is None
    title = parse_title("Node t[hJkL0aBc], Version 4.1.8f3c2a1, build 2026-05-20T19:20:12+0000, CPUs(32, runtime=256)")
    assert title is not None and (title.role, title.node_id, title.version, title.name) == (
        "target",
        "hJkL0aBc",
        "4.1.8f3c2a1",
        "t[hJkL0aBc]",
    )


# -- records -----------------------------------------------------------------------------------------------------------


def test_record_with_tag_redacted_record_and_legacy_glog_tag() -> None:
    rec = parse_record("W 14:35:10.220311 shared_dm:400 shared-dm Rx failure: [ xid: Xy7pQ2aB9 ]")
    assert rec is not None
    assert (rec.severity, rec.src, rec.src_line, rec.message) == (
        "W",
        "shared_dm",
        400,
        "shared-dm Rx failure: [ xid: Xy7pQ2aB9 ]",
    )
    assert rec.clock_us == ((14 * 60 + 35) * 60 + 10) * 1_000_000 + 220_311
    stats = parse_record("I 08:27:14.905317 {state.flags:6}")
    assert stats is not None and (stats.src, stats.src_line, stats.message) == (None, None, "{state.flags:6}")
    legacy = parse_record("I 03:15:41.000120 config.go:1253 log.dir: /tmp/ais")
    assert legacy is not None and (legacy.src, legacy.src_line) == ("config.go", 1253)
    disk = parse_record("I 10:02:18.117954 nvme2n1: 0B/s, 0B, 12MiB/s, 24KiB, 18%")
    assert disk is not None and disk.src is None and disk.message.startswith("nvme2n1: 0B/s")
    assert parse_record("Node t[hJkL0aBc], Version 4.1") is None
    assert parse_record("I 25:00:00.000000 x:1 bad hour") is None


def test_glued_record_after_a_2kib_cut_stats_line_is_split() -> None:
    stats = "I 14:33:21.512204 {" + ",".join(f"k{i:04d}.n:{i}" for i in range(400))
    cut = stats[:2048]  # nlog cut the INFO line at 2 KiB and had no room for the newline
    physical = cut + "I 14:33:21.512230 /ais/nvme0n1/1: used 41%, avail 2.31TiB"
    pieces = split_glued_records(physical)
    assert pieces == [cut, "I 14:33:21.512230 /ais/nvme0n1/1: used 41%, avail 2.31TiB"]
    assert split_glued_records("I 14:33:21.512230 short line I 14:33:21.512231 x") == [
        "I 14:33:21.512230 short line I 14:33:21.512231 x"
    ]


# -- hourly marker -----------------------------------------------------------------------------------------------------


def test_hourly_marker_gives_date_and_zone_hint() -> None:
    marker = parse_hourly_marker("21 May 26 15:00 UTC =============")
    assert marker is not None and (marker.at, marker.zone) == (datetime(2026, 5, 21, 15, 0), "UTC")
    assert parse_hourly_marker("11 Mar 25 17:05 CST =============") is not None
    assert parse_hourly_marker("21 Foo 26 15:00 UTC =============") is None
    assert parse_hourly_marker("21 May 26 15:00 UTC") is None


# -- stats lines -------------------------------------------------------------------------------------------------------


def test_stats_line_values_missing_keys_are_zero_and_restarted_flag() -> None:
    stats = parse_stats("{err.get.n:37,get.n:1284512,get.ns:3812044,state.flags:134}")
    assert stats is not None and stats.complete
    assert stats.get("err.get.n") == 37
    assert stats.get("err.getbatch.n") == 0  # omitted because zero
    assert stats.restarted_flag
    healthy = parse_stats("{state.flags:6}")
    assert healthy is not None and not healthy.restarted_flag
    assert parse_stats("nvme0n1: 1GiB/s") is None
    assert parse_stats("{not a stats line}") is None


def test_cut_stats_line_is_accepted_partially_and_keys_after_the_cut_are_unknown() -> None:
    stats = parse_stats("{err.get.n:3,err.getbatch.n:45,get.n:188615,getbatch.n:617,stream.out.si")
    assert stats is not None and not stats.complete
    assert dict(stats.values) == {"err.get.n": 3, "err.getbatch.n": 45, "get.n": 188615, "getbatch.n": 617}
    assert stats.known_through == "getbatch.n"
    assert stats.get("err.http.write.n") == 0  # sorts before the cut: known to be zero
    assert stats.get("getbatch.obj.n") is None  # sorts after the cut: unknown
    assert stats.get("state.flags") is None
    # Cut in the middle of a value: that pair is dropped (1886 could be 1886xx).
    mid_value = parse_stats("{err.get.n:3,get.n:1886")
    assert mid_value is not None and dict(mid_value.values) == {"err.get.n": 3}
    assert mid_value.get("get.n") is None


def test_unsorted_disk_tail_of_old_versions_does_not_move_the_cut_point() -> None:
    stats = parse_stats("{get.n:10,state.flags:6,stream.out.n:5,disk.nvme3n1.read.bps:18874368,disk.nvme0n1.util:87,di")
    assert stats is not None and stats.known_through == "stream.out.n"
    assert stats.get("stream.in.n") == 0


@pytest.mark.parametrize(
    ("name", "cumulative"),
    [
        ("err.get.n", True),
        ("get.size", True),
        ("e2e.put.ns.total", True),
        ("getbatch.throttle.ns", True),
        ("getbatch.rxwait.ns", True),
        ("get.ns", False),
        ("get.bps", False),
        ("kalive.ns", False),
        ("state.flags", False),
    ],
)
def test_cumulative_kinds(name: str, cumulative: bool) -> None:
    assert is_cumulative(name) is cumulative


# -- absolute times ----------------------------------------------------------------------------------------------------


def test_day_rollover_and_small_backward_jumps() -> None:
    parser = AisFileParser()
    records = list(
        parser.parse(
            _lines(
                "Started up at 2026/03/14 23:58:00, host h, go1.24.3 for linux/amd64",
                "I 23:59:59.900000 x:1 before midnight",
                "E 23:59:59.899990 x:2 stamped before the I line that took the lock first",
                "I 00:00:00.100000 x:3 after midnight",
                "",
                "I 00:00:01.000000 x:4 later",
            )
        )
    )
    assert [r.at for r in records] == [
        datetime(2026, 3, 14, 23, 59, 59, 900000),
        datetime(2026, 3, 14, 23, 59, 59, 899990),
        datetime(2026, 3, 15, 0, 0, 0, 100000),
        datetime(2026, 3, 15, 0, 0, 1),
    ]
    assert [r.line for r in records] == [2, 3, 4, 6]
    assert (parser.first_at, parser.last_at, parser.date_source) == (
        datetime(2026, 3, 14, 23, 59, 59, 900000),
        datetime(2026, 3, 15, 0, 0, 1),
        "header",
    )


def test_no_header_uses_the_name_with_a_year_hint_then_the_hourly_marker_reanchors() -> None:
    name = parse_log_name("aistarget.h.INFO.0521-140000.1")
    parser = AisFileParser(name, year_hint=2025)  # a wrong guess (mtime year), corrected by the marker
    records = list(
        parser.parse(
            _lines(
                "I 14:10:00.000000 x:1 first",
                "I 15:00:18.003008 common:494 21 May 26 15:00 UTC =============",
                "I 15:01:00.000000 x:2 after the marker",
            ),
            everything=True,
        )
    )
    assert [r.at for r in records] == [
        datetime(2025, 5, 21, 14, 10),
        datetime(2026, 5, 21, 15, 0, 18, 3008),
        datetime(2026, 5, 21, 15, 1),
    ]
    assert (parser.zone, parser.markers, parser.date_source) == ("UTC", 1, "hourly marker")


def test_rotated_file_title_line_and_startup_title_record() -> None:
    rotated = AisFileParser()
    list(
        rotated.parse(
            _lines(
                "Rotated at 2026/05/21 14:40:00, host ais-target-2, go1.24.3 for linux/amd64",
                "Node t[hJkL0aBc], Version 4.3.1.a1b2c3d, build 2026-05-20T19:20:12+0000, CPUs(32, runtime=32)",
                "I 14:42:08.402644 {get.n:1}",
            )
        )
    )
    assert rotated.title is not None and rotated.title.node_id == "hJkL0aBc"
    assert (rotated.records, rotated.stats_lines, rotated.other_lines) == (1, 1, 2)
    started = AisFileParser()
    list(
        started.parse(
            _lines(
                "Started up at 2026/05/21 13:00:01, host ais-proxy-0, go1.24.3 for linux/amd64",
                "I 13:00:02.003993 daemon:263 Node p[Rw3pX9kd], Version 4.3.1.a1b2c3d, build 2026-05-20T19:20:12+0000",
                "",
                "I 13:00:02.004000 htrun:1 ready",
            ),
            everything=False,
        )
    )
    assert started.title is not None and (started.title.role, started.title.node_id) == ("proxy", "Rw3pX9kd")


def test_reported_records_and_the_fast_path_agree_on_time_and_counts() -> None:
    lines = _lines(
        "Started up at 2026/05/21 13:00:01, host h, go1.24.3 for linux/amd64",
        "I 13:00:02.000001 a:1 ordinary",
        "W 13:00:03.000002 kalive:279 p[Rw3pX9kd] failed to fast-kalive t[mN4qZ7Lb]",
        "I 13:00:04.000003 {get.n:5,state.flags:6}",
        "I 13:00:05.000004 a:2 ordinary",
    )
    slow, fast = AisFileParser(), AisFileParser()
    assert len(list(slow.parse(lines))) == 4
    reported = list(fast.parse(lines, everything=False))
    assert [(r.severity, r.line) for r in reported] == [("W", 3), ("I", 4)]
    assert reported[1].is_stats and reported[0].text == lines[2][1]
    assert (fast.records, fast.stats_lines, fast.first_at, fast.last_at) == (
        slow.records,
        slow.stats_lines,
        slow.first_at,
        slow.last_at,
    )
    assert fast.last_at == datetime(2026, 5, 21, 13, 0, 5, 4)


# -- error patterns ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (
            "moss:793 x-get-batch[Xy7pQ2aB9] t[hJkL0aBc] RecvObj: x-get-batch[Xy7pQ2aB9] t[hJkL0aBc] out-of-bounds "
            "index 17 (recv'd len=0, wid=pQ81mZ)",
            "getbatch_out_of_bounds",
        ),
        (
            "shared_dm:400 shared-dm Rx failure: [ xid: Xy7pQ2aB9 err: x-get-batch[Xy7pQ2aB9] t[hJkL0aBc] "
            'out-of-bounds index 17 (recv\'d len=0, wid="pQ81mZ") oname: a num Rx errors: 1 ]',
            "getbatch_out_of_bounds",
        ),
        (
            "base:173 shared-dm[hJkL0aBc=>Ws6yTm3E] terminated [write tcp 10.0.0.5:43512->10.0.0.7:51083: write: "
            "broken pipe ctx: dropping obj]",
            "shared_dm_broken_pipe",
        ),
        (
            "shared_dm:315 shared-dm: xid Xy7pQ2aB9 not found, dropping recv [oname: a, drops: 1]",
            "shared_dm_xid_not_found",
        ),
        ("shared_dm:384 shared-dm xid Xy7pQ2aB9 not found - dropping shard-1.tar/a.jpg", "shared_dm_xid_not_found"),
        (
            "moss:452 resource pressure: load=critical sleep=10ms [mem=low cpu=low dsk=critical] - sleeping",
            "resource_pressure_critical",
        ),
        ("lcache:251 hk: [ mem/cpu/disk: low low critical ]", "disk_critical"),
        ("lcache:281 hk: high system load (cpu: 1 disk: 4 ) - not running", "disk_critical"),
        (
            "gc:52 hJkL0aBc.gmm[(used 118GiB, free 1GiB), pressure 'high', (min-free 3GiB, low-wm 9GiB] free mem to "
            "OS(pressure,force,togc,load) [ 2 false 1.5GiB 37 ]",
            "memory_pressure",
        ),
        ("oom:57 free-mem runtime: 912.345ms", "memory_pressure"),
        ("common:582 t[hJkL0aBc] CPU utilization: extremely high [ 97 32 ]", "cpu_alert"),
        (
            'kalive:279 p[Rw3pX9kd] failed to fast-kalive t[mN4qZ7Lb] err: Get "http://10.52.4.19:51081/v1/health": '
            "context deadline exceeded",
            "keepalive_failure",
        ),
        (
            'ErrTooManyRequests: x-get-batch[Xy7pQ2aB9]: wid="pQ81mZ" rejected due to resource pressure '
            "(load=critical sleep=10ms [mem=low cpu=low dsk=critical], pending=37): GET /v1/ml/x",
            "getbatch_rejected",
        ),
    ],
)
def test_named_patterns(body: str, pattern: str) -> None:
    found = classify_line(body)
    assert found is not None and found.name == pattern


def test_ordinary_housekeeping_is_not_notable_and_patterns_are_unique() -> None:
    assert classify_line("lcache:251 hk: [ mem/cpu/disk: low low low ]") is None
    names = [p.name for p in AIS_ERROR_PATTERNS]
    assert len(names) == len(set(names))


def test_line_template_groups_repeats() -> None:
    a = line_template("shared_dm:315 shared-dm: xid Xy7pQ2aB9 not found, dropping recv [oname: s-000019.tar, drops: 1]")
    b = line_template(
        "shared_dm:315 shared-dm: xid Xy7pQ2aB9 not found, dropping recv [oname: s-000118.tar, drops: 100]"
    )
    assert a == b
    assert line_template("t[hJkL0aBc] at 10.0.0.5:43512") == "<node> at <addr>"

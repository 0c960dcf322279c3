"""FORMAT MATRIX of the NCCL RAS client's report (``ncclras -v``, ``-f json``, ``-m``) x NCCL release x incident.

Reports are rendered here with the printf formats of NCCL's ``src/ras/client_support.cc`` at each release
(2.24.3, 2.25.1, 2.26.2, 2.28.7, 2.29.2; the strings that differ are listed in docs/hang_artifacts.md), for a job of
ours: 4 nodes x 8 GPUs, hosts 10.42.0.11-14, one process per GPU. The incidents are the ones a hang leaves:

* ``stuck``: rank 13 never launched the AllReduce its 31 peers have (1203 vs 1204);
* ``two_stuck``: ranks 13 and 14 behind together (an outlier group whose members are listed one a line);
* ``dead``: the process of rank 21 stopped answering (INCOMPLETE), later declared DEAD;
* ``healthy``: nothing to report;
* ``errors``: initialization and asynchronous errors on a few ranks;
* ``teardown``: an 8-rank communicator half finalized (status MISMATCH, UNKNOWN vs NOCOMM).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debug_training_logs.formats.nccl_ras import RasReport, is_ras, parse_ras

TEXT_VERSIONS = ("2.24.3", "2.25.1", "2.26.2", "2.28.7", "2.29.2")
JSON_VERSIONS = ("2.28.7", "2.29.2")
WORLD = "5c1d8a27e09f33b4"
SMALL = "0e77a1c2b9d40f18"  # a leading zero nibble: JSON prints it as 0xe77a1c2b9d40f18
HOSTS = ("10.42.0.11", "10.42.0.12", "10.42.0.13", "10.42.0.14")


def per_op(version: str) -> bool:
    return tuple(int(x) for x in version.split(".")[:2]) >= (2, 26)


def where(rank: int) -> str:
    return f"GPU {rank % 8} managed by process {52100 + rank} on node {HOSTS[rank // 8]}"


@dataclass
class Report:
    text: str
    hash: str = WORLD

    def line_of(self, needle: str) -> int:
        for i, line in enumerate(self.text.splitlines(), 1):
            if needle in line:
                return i
        raise AssertionError(needle)


def _header(version: str) -> list[str]:
    fmt = "{:.3f}" if per_op(version) and version >= "2.28" else "{:.2f}"
    return [
        f"NCCL version {version} compiled with CUDA 12.8",
        "CUDA runtime version 12080, driver version 12080",
        "",
        "Job summary",
        "===========",
        "",
        "  Nodes  Processes         GPUs  Processes     GPUs",
        "(total)   per node  per process    (total)  (total)",
        f"{4:7d}  {8:9d}  {1:11d}  {32:9d}  {32:7d}",
        "",
        f"Communicators... ({fmt.format(0.0141)}s)",
        "=============",
        "",
        "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
        "    #  in group  per comm  per node  per comm  in group",
    ]


def _row(group: int, comms: int, nodes: int, rpn: str, rpc: int, rig: int, status: str, errors: str) -> str:
    return f"{group:5d}  {comms:8d}  {nodes:8d}  {rpn:>8s}  {rpc:8d}  {rig:8d}  {status:>8s}  {errors:>6s}"


def _counts(version: str, behind: list[int], verbose: bool) -> list[str]:
    """The MISMATCH lines of a count difference: the most common group first, then the outliers."""
    op = "AllReduce" if per_op(version) else "collective"
    lines = [f"  Communicator ranks have different {op} operation counts", f"  {32 - len(behind)} ranks have launched"
             " up to operation 1204"]  # fmt: skip
    if len(behind) == 1:
        lines.append(f"  Rank {behind[0]} has launched up to operation 1203 -- {where(behind[0])}")
    else:
        lines.append(f"  {len(behind)} ranks have launched up to operation 1203")
        outlier = len(behind) < 32 * (0.5 if verbose else 0.25) and (verbose or len(behind) <= 10)
        lines += [f"  Rank {r} -- {where(r)}" for r in behind] if outlier else []
    return lines


def render_text(version: str, incident: str, verbose: bool = True) -> Report:
    lines = _header(version)
    errors: list[str] = []
    warnings: list[str] = []
    table_errors = "OK"
    if incident in ("stuck", "two_stuck", "twelve_stuck"):
        behind = {"stuck": [13], "two_stuck": [13, 14], "twelve_stuck": list(range(8, 20))}[incident]
        table_errors = "MISMATCH"
        warnings += [f"#0-0 ({WORLD}) MISMATCH", *_counts(version, behind, verbose), ""]
    elif incident in ("dead", "unresponsive"):
        table_errors = "INCOMPLETE"
        if incident == "unresponsive":
            errors += ["INCOMPLETE", "  Missing communicator data from 1 job process"]
        else:
            errors += ["DEAD", "  1 job process is considered dead (unreachable via the RAS network)"]
        errors += [f"  Process {52100 + 21} on node {HOSTS[2]} managing GPU 5", ""]
        errors += [f"#0-0 ({WORLD}) INCOMPLETE", "  Missing communicator data from 1 rank"]
        errors += [f"  Rank 21 -- {where(21)}" if per_op(version) else "  The missing rank: 21", ""]
        warnings += ["TIMEOUT", "  Encountered 2 communication timeouts while gathering communicator data", ""]
    elif incident == "errors":
        table_errors = "ERROR"
        errors += [f"#0-0 ({WORLD}) ERROR", "  Initialization error on 1 rank"]
        errors += [f"  Rank 4 reported Internal error -- {where(4)}"]
        errors += ["  Asynchronous errors on 2 ranks", "  2 ranks reported Remote process error"]
        errors += [f"  Rank {r} -- {where(r)}" for r in (9, 10)] + [""]
    lines.append(_row(0, 1, 4, "8", 32, 32, "RUNNING", table_errors))
    if incident == "teardown":
        lines.append(_row(1, 1, 1, "8", 8, 6, "FINALIZE", "MISMATCH"))
        unknown = "NOCOMM" if per_op(version) else "UNKNOWN"
        warnings += [f"#1-0 ({SMALL}) MISMATCH", "  Communicator ranks have different status"]
        warnings += ["  5 ranks have status RUNNING", f"  2 ranks have status {unknown}"]
        warnings += [f"  Rank {r} -- {where(r)}" for r in (3, 4)] if per_op(version) else ["  The unknown ranks: 3,4"]
        warnings += [f"  Rank 7 has status FINALIZE -- {where(7)}", ""]
    lines += ["", "Errors", "======", "", *errors, "Warnings", "========", "", *warnings]
    return Report("\n".join(lines) + "\n", SMALL if incident == "teardown" else WORLD)


def render_json(version: str, incident: str) -> Report:
    """``ncclras -f json`` as ``jsonWrite*`` print it; 2.28.7 forgets the comma after a missing rank's nvml_dev."""
    out = ["{", f'  "nccl_version": "{version}",', '  "cuda_runtime_version": 12080,', '  "cuda_driver_version": 12080,',
           '  "timestamp": "2026-12-07 03:14:55",', '  "communicators_count": 1,', '  "communicators": [', "    {",
           f'      "hash": "0x{WORLD.lstrip("0")}",', '      "secondary_hash": "0x9a01:0x77f2",', '      "size": 32,']  # fmt: skip
    missing = [21] if incident == "dead" else []
    present = [r for r in range(32) if r not in missing]
    out += [
        f'      "ranks_count": {len(present)},',
        f'      "missing_ranks_count": {len(missing)},',
        '      "ranks": [',
    ]
    for i, r in enumerate(present):
        count = 1203 if (incident == "stuck" and r == 13) else 1204
        out += ["        {" if i == 0 else "        },\n        {"]
        out += [f'          "rank": {r},', f'          "host": "{HOSTS[r // 8]}",', f'          "pid": {52100 + r},',
                f'          "cuda_dev": {r % 8},', f'          "nvml_dev": {r % 8},', '          "status": {',
                f'            "init_state": {3 if incident == "errors" and r == 4 else 0},',
                f'            "async_error": {6 if incident == "errors" and r in (9, 10) else 0},',
                '            "finalize_called": false,', '            "destroy_flag": false,',
                '            "abort_flag": false', "          },", '          "collective_counts": {',
                '            "Broadcast": 2,', '            "Reduce": 0,', '            "AllGather": 96,',
                '            "ReduceScatter": 96,', f'            "AllReduce": {count}', "          }"]  # fmt: skip
    out += ["        }", "      ],", '      "missing_ranks": [']
    for r in missing:
        comma = "" if version.startswith("2.28") else ","
        out += ["        {", f'          "rank": {r},', f'          "host": "{HOSTS[r // 8]}",',
                f'          "pid": {52100 + r},', f'          "cuda_dev": {r % 8},', f'          "nvml_dev": {r % 8}{comma}',
                '          "status": {', '            "unresponsive": true,', '            "considered_dead": true',
                "          }", "        }"]  # fmt: skip
    out += [
        "      ]",
        "    }",
        "  ],",
        '  "ras": {',
        '    "collection_time_sec": 0.004,',
        '    "timeouts_count": 0',
        "  }",
    ]
    return Report("\n".join([*out, "}"]) + "\n")


# ---- the matrix ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", TEXT_VERSIONS)
def test_a_stuck_rank_is_the_one_behind_in_every_text_version(version: str) -> None:
    rep = render_text(version, "stuck")
    report = parse_ras(rep.text)
    assert is_ras(rep.text[:4096])
    assert report.form == "text" and report.nccl_version == version
    assert report.lagging() == {WORLD: {13}}
    assert report.missing() == set()
    (comm,) = report.communicators
    assert (comm.label, comm.nranks, comm.problems) == ("#0-0", 32, ("MISMATCH",))
    behind = [g for g in comm.groups if g.count == 1203]
    assert behind[0].op == ("AllReduce" if per_op(version) else None)
    (rank13,) = behind[0].ranks
    assert (rank13.pid, rank13.host, rank13.gpu) == (52113, "10.42.0.12", "5")
    assert rank13.line_no == rep.line_of("Rank 13 has launched up to operation 1203")
    majority = [g for g in comm.groups if g.count == 1204]
    assert majority[0].n_ranks == 31 and majority[0].ranks == ()


@pytest.mark.parametrize("version", TEXT_VERSIONS)
def test_an_outlier_group_lists_its_members(version: str) -> None:
    rep = render_text(version, "two_stuck")
    report = parse_ras(rep.text)
    assert report.lagging() == {WORLD: {13, 14}}
    (comm,) = report.communicators
    group = next(g for g in comm.groups if g.count == 1203)
    assert group.n_ranks == 2 and [r.line_no for r in group.ranks] == [
        rep.line_of("Rank 13 --"),
        rep.line_of("Rank 14"),
    ]


@pytest.mark.parametrize("verbose", [True, False])
def test_without_verbose_a_large_lagging_group_names_no_ranks(verbose: bool) -> None:
    """12 of 32 ranks behind: listed with -v (under 50%), not without (over 25%); the group is there either way."""
    report = parse_ras(render_text("2.26.2", "twelve_stuck", verbose=verbose).text)
    group = next(g for g in report.communicators[0].groups if g.count == 1203)
    assert group.n_ranks == 12
    assert report.lagging() == ({WORLD: set(range(8, 20))} if verbose else {})


@pytest.mark.parametrize("version", TEXT_VERSIONS)
@pytest.mark.parametrize("incident", ["dead", "unresponsive"])
def test_a_process_that_stopped_answering_is_missing(version: str, incident: str) -> None:
    rep = render_text(version, incident)
    report = parse_ras(rep.text)
    assert report.missing() == {21}
    (comm,) = report.communicators
    assert comm.problems == ("INCOMPLETE",) and comm.missing_count == 1
    (missing,) = comm.missing
    assert missing.line_no == rep.line_of("Rank 21 --" if per_op(version) else "The missing rank: 21")
    assert (missing.pid, missing.host) == ((52121, "10.42.0.13") if per_op(version) else (None, None))
    procs = report.dead if incident == "dead" else report.unresponsive
    assert [(p.pid, p.host, p.gpus, p.line_no) for p in procs] == [
        (52121, "10.42.0.13", "5", rep.line_of("  Process 52121"))
    ]
    assert (report.dead_count, report.unresponsive_count) == ((1, None) if incident == "dead" else (None, 1))
    assert report.timeouts == 2
    assert [r.group for r in report.table] == [0] and report.table[0].errors == "INCOMPLETE"
    assert any("considered dead" in e.text or "Missing" in e.text for e in report.errors)


@pytest.mark.parametrize("version", TEXT_VERSIONS)
def test_a_healthy_job_reports_nothing(version: str) -> None:
    report = parse_ras(render_text(version, "healthy").text)
    assert report.summary is not None
    s = report.summary
    assert (s.nodes, s.processes, s.gpus, s.processes_per_node, s.gpus_per_process) == (4, 32, 32, 8, 1)
    assert report.communicators == () and report.lagging() == {} and report.missing() == set()
    assert report.table[0].status == "RUNNING" and report.table[0].errors == "OK"


@pytest.mark.parametrize("version", TEXT_VERSIONS)
def test_init_and_async_errors_name_their_ranks(version: str) -> None:
    rep = render_text(version, "errors")
    (comm,) = parse_ras(rep.text).communicators
    init = [g for g in comm.groups if g.kind == "init_error"]
    asyn = [g for g in comm.groups if g.kind == "async_error"]
    assert [(g.value, g.n_ranks, [r.rank for r in g.ranks]) for g in init] == [("Internal error", 1, [4])]
    assert [(g.value, g.n_ranks, [r.rank for r in g.ranks]) for g in asyn] == [("Remote process error", 2, [9, 10])]


@pytest.mark.parametrize("version", TEXT_VERSIONS)
def test_teardown_status_mismatch(version: str) -> None:
    rep = render_text(version, "teardown")
    report = parse_ras(rep.text)
    (comm,) = report.communicators
    assert comm.hash == SMALL and comm.nranks == 8
    statuses = {g.value: (g.n_ranks, [r.rank for r in g.ranks]) for g in comm.groups if g.kind == "status"}
    unknown = "NOCOMM" if per_op(version) else "UNKNOWN"
    assert statuses == {"RUNNING": (5, []), unknown: (2, [3, 4]), "FINALIZE": (1, [7])}
    assert report.lagging() == {}


def test_an_inconsistent_job_summary() -> None:
    text = "\n".join([
        "Job summary", "===========", "", "  Nodes  Processes         GPUs", "          per node  per process",
        "      3          8            1", "      1          6            1", "", "  Nodes  Processes         GPUs",
        "(total)    (total)      (total)", "      4         30           30", "", "The outlier node:",
        "  Node 10.42.0.14 running processes 52124,52125,52126,52127,52128,52129",
    ])  # fmt: skip
    s = parse_ras(text).summary
    assert s is not None
    assert (s.nodes, s.processes, s.gpus, s.processes_per_node, s.gpus_per_process) == (4, 30, 30, None, 1)
    assert s.layout == ((3, 8), (1, 6)) and s.outliers[0].line_no == 14


@pytest.mark.parametrize("version", JSON_VERSIONS)
@pytest.mark.parametrize("incident", ["stuck", "dead", "errors", "healthy"])
def test_json_report(version: str, incident: str) -> None:
    rep = render_json(version, incident)
    if version.startswith("2.28") and incident == "dead":
        with pytest.raises(ValueError):
            json.loads(rep.text)  # the 2.28.7 missing comma: not JSON, read anyway
    else:
        json.loads(rep.text)
    assert is_ras(rep.text[:4096])
    report = parse_ras(rep.text)
    assert report.form == "json" and report.nccl_version == version and report.problems == ()
    (comm,) = report.communicators
    assert comm.hash == WORLD and comm.nranks == 32 and comm.label is None
    assert report.lagging() == ({WORLD: {13}} if incident == "stuck" else {})
    assert report.missing() == ({21} if incident == "dead" else set())
    if incident == "stuck":
        group = next(g for g in comm.groups if g.count == 1203)
        assert group.op == "AllReduce" and group.ranks[0].line_no == rep.line_of('"rank": 13,')
        assert (group.ranks[0].pid, group.ranks[0].host) == (52113, "10.42.0.12")
    if incident == "dead":
        assert comm.missing[0].state == "dead" and comm.missing[0].line_no == rep.line_of('"rank": 21,')
    if incident == "errors":
        groups = {(g.kind, g.value): tuple(r.rank for r in g.ranks) for g in comm.groups}
        assert groups.pop(("status", "RUNNING")) == tuple(r for r in range(32) if r != 4)
        assert groups == {("status", "INIT"): (4,), ("init_error", "3"): (4,), ("async_error", "6"): (9, 10)}


def test_truncated_json_keeps_what_came_before_the_cut() -> None:
    rep = render_json("2.29.2", "stuck")
    cut = rep.text[: rep.text.index('"rank": 20,')]
    report = parse_ras(cut)
    assert report.problems and "truncated" in report.problems[0]
    assert report.lagging() == {WORLD: {13}}


def test_one_line_json_cites_line_one() -> None:
    rep = render_json("2.29.2", "dead")
    report = parse_ras(json.dumps(json.loads(rep.text)))
    assert report.missing() == {21} and report.communicators[0].missing[0].line_no == 1


def test_monitor_mode_text_and_json() -> None:
    text = (
        "RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n"
        "================================================================\n"
        "[2026-12-07 03:15:02] PEER_UNRESPONSIVE: Process 52121 on node 10.42.0.13 managing GPU 5 \n"
        "[2026-12-07 03:16:02] PEER_DEAD: Process 52121 on node 10.42.0.13 managing GPU 5 \n"
    )
    assert is_ras(text)
    events = parse_ras(text).events
    assert [(e.line_no, e.event, e.pid, e.host) for e in events] == [
        (3, "PEER_UNRESPONSIVE", 52121, "10.42.0.13"), (4, "PEER_DEAD", 52121, "10.42.0.13")]  # fmt: skip
    js = (
        '{\n  "timestamp": "2026-12-07 03:16:02",\n  "group": "LIFECYCLE",\n  "event": "PEER_DEAD",\n  "peer": {\n'
        '    "host": "10.42.0.13",\n    "pid": 52121,\n    "cuda_devs": [5],\n    "nvml_devs": [5]\n  },\n'
        '  "details": ""\n}\n'
    )
    assert is_ras(js)
    (event,) = parse_ras(js).events
    assert (event.line_no, event.time, event.event, event.pid, event.host) == (
        4, "2026-12-07 03:16:02", "PEER_DEAD", 52121, "10.42.0.13")  # fmt: skip


@pytest.mark.parametrize(
    "text", ["", "hello\n", "[rank3]: RuntimeError: NCCL timeout\n", 'Thread 123 (idle): "MainThread"\n']
)
def test_not_ras(text: str) -> None:
    assert not is_ras(text)
    report = parse_ras(text)
    assert report.form == "empty" and report.communicators == ()


# ---- hostile input ------------------------------------------------------------------------------------------------

_SEEDS = [render_text(v, i).text for v in ("2.24.3", "2.26.2") for i in ("stuck", "dead", "teardown", "errors")]
_SEEDS += [render_json(v, i).text for v in JSON_VERSIONS for i in ("stuck", "dead")]
FUZZ = settings(
    max_examples=300 if os.environ.get("HYPOTHESIS_PROFILE") != "deep" else 3000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _bounded(text: str) -> RasReport:
    start = time.perf_counter()
    report = parse_ras(text)
    is_ras(text)
    report.lagging()
    report.missing()
    assert time.perf_counter() - start < 2.0
    return report


@FUZZ
@given(st.text(max_size=3000))
def test_random_text_never_raises(text: str) -> None:
    _bounded(text)


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise(data: bytes) -> None:
    _bounded(data.decode("utf-8", errors="replace"))


@FUZZ
@given(st.sampled_from(_SEEDS), st.integers(0, 10**6), st.integers(0, 10**6), st.text(max_size=40))
def test_cut_and_spliced_reports_never_raise(seed: str, a: int, b: int, junk: str) -> None:
    a, b = sorted((a % (len(seed) + 1), b % (len(seed) + 1)))
    _bounded(seed[:a])
    _bounded(seed[:a] + junk + seed[b:])
    lines = seed.splitlines()
    _bounded("\n".join([*lines[: a % (len(lines) + 1)], junk, *lines[b % (len(lines) + 1) :]]))


@pytest.mark.parametrize(
    "line",
    [
        "  Rank 1 reported " + "x" * 5000,
        "  Process 1 on node " + "a " * 3000,
        "  The missing ranks: " + "1," * 50000,
        "#0-0 (" + "f" * 5000,
        "  " + "9 " * 3000,
        '      "' + "A" * 5000 + '": 1',
        "[2026-12-07 03:15:02] PEER_DEAD: Process 1 on node " + "x " * 3000,
    ],
)
def test_adversarial_lines_are_bounded(line: str) -> None:
    for section in ("Errors\n======\n#0-0 (5c1d8a27e09f33b4) MISMATCH\n", "Job summary\n===========\n", "{\n"):
        _bounded(section + (line + "\n") * 50)


def test_a_large_report_is_read_in_bounded_time() -> None:
    """A 10,240-rank JSON report (about 250k lines) in a few seconds."""
    rep = render_json("2.29.2", "stuck").text
    head, rest = rep.split('      "ranks": [\n', 1)
    body, tail = rest.split("      ],\n", 1)
    rank0 = body.split("        },\n")[0] + "        },\n"
    big = head + '      "ranks": [\n' + rank0 * 10240 + "      ],\n" + tail
    start = time.perf_counter()
    report = parse_ras(big)
    assert time.perf_counter() - start < 20
    assert sum(1 for _ in report.communicators) == 1

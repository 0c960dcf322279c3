"""The HTML report: what each section shows on the incidents we generate, the CLI's ``--html``, the MCP resource link,
and the page in a real headless Chromium (renders, no console error, nothing fetched from elsewhere, a screenshot).

Set ``DTL_SCREENSHOT_DIR`` to keep the browser test's screenshots (e.g. to look at them); otherwise they go to a
temp dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.printers.html import render_html
from debug_training_logs.printers.report_data import (
    STATES,
    NodeRow,
    RankCell,
    ReportData,
    build_report_data,
    series_plot,
)
from debug_training_logs.ranges import format_ranges
from debug_training_logs.server.app import create_server
from debug_training_logs.tools.diagnosis_result import build_diagnosis

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_HINT = "needs Chromium for the browser test: apt-get install chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def report(name: str) -> tuple[ReportData, str]:
    root = FIXTURES / name
    ais = root / "ais" if (root / "ais").is_dir() else None
    ev = gather_evidence(find_sources(root / "logs", ais))
    d = build_diagnosis(ev)
    data = build_report_data(d, ev)
    return data, render_html(data)


def states(data: ReportData) -> dict[str, str]:
    by: dict[str, list[int]] = {}
    for node in data.nodes:
        for c in node.cells:
            by.setdefault(c.state, []).append(c.rank)
    return {s: format_ranges(r) for s, r in by.items()}


def assert_self_contained(page: str) -> None:
    """Nothing the page would fetch: no script/link/img/iframe source, no url() or @import, no remote href."""
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href)=", page, re.I)
    assert "@import" not in page and "url(" not in page
    assert not re.search(r"(href|src)=\"(https?:)?//", page, re.I)


# ---------------------------------------------------------------------------------------------------------------------
# What the page shows, per incident


@pytest.mark.parametrize(
    ("name", "expected", "culprits"),
    [
        ("data_stall", {"straggler": "5", "waiting": "0-4,6-15"}, "5"),
        ("nccl_root_ahead", {"ahead": "0", "waiting": "1-15"}, "0"),
        ("nccl_missing_node", {"waiting": "0-4,6-7", "unknown": "5", "missing": "8-15"}, ""),  # not culprits (#12)
        ("watchdog_hang", {"killed": "4", "torn_down": "0-3,5-7", "waiting": "8-15"}, "4"),
        ("cuda_oom", {"crashed": "3", "torn_down": "0-2,4-7", "waiting": "8-15"}, "3"),
        ("oom_untimed_tail", {"crashed": "3", "stuck": "0-2,4-7", "waiting": "8-15"}, "3"),  # stuck, not stragglers
        ("clean_resets", {"finished": "0-15"}, ""),
        ("nccl_fabric", {"waiting": "0-15"}, ""),
    ],
)
def test_rank_states_follow_the_evidence(name: str, expected: dict[str, str], culprits: str) -> None:
    data, page = report(name)
    assert states(data) == expected
    outlined = [c.rank for n in data.nodes for c in n.cells if c.culprit]
    assert format_ranges(outlined) == culprits
    cells = re.findall(r'<i class="s-(\w+)( c)?" title="([^"]*)"', page)
    assert len(cells) == sum(len(n.cells) for n in data.nodes)
    assert sum(1 for _, c, _ in cells if c) == len(outlined)
    assert_self_contained(page)


def test_data_stall_page_sections() -> None:
    data, page = report("data_stall")
    # Grid: two nodes, rank 5's cell says why it is the straggler and cites its line.
    assert [n.node for n in data.nodes] == ["gpu-a01", "gpu-a02"]
    cell5 = next(c for n in data.nodes for c in n.cells if c.rank == 5)
    assert cell5.culprit and "not inside the stuck collective" in cell5.evidence
    assert re.match(r"rank 5 · straggler · error-48213-0\.out:\d+: ", cell5.evidence), cell5.evidence
    waiting = next(c for n in data.nodes for c in n.cells if c.rank == 0)
    assert "inside ALLREDUCE SeqNum 4118" in waiting.evidence and "enqueued 4118 > completed 4117" in waiting.evidence
    # Timeline: UTC (the alignment is verified), every chain step with a time on the axis, AIS and worker lanes.
    assert data.timeline_clock == "UTC"
    timed_steps = {c.step for c in data.diagnosis.root_cause_chain if c.time_local}
    assert {p.chain_step for p in data.timeline if p.chain_step} == timed_steps
    assert {p.lane for p in data.timeline} == {"AIS", "workers"}
    # AIS: every daemon, the four counters, the spiking target first, on one shared window and scale per counter.
    assert data.ais_plots[0][0].startswith("t[hJkL0aBc]")
    assert len(data.ais_plots) == 4
    for _, plots in data.ais_plots:
        assert [p.title for p in plots] == ["err.get.n", "err.getbatch.n", "err.http.write.n", "get.n"]
    getbatch = next(plots for name, plots in data.ais_plots if name.startswith("t[hJkL0aBc]"))[1]
    assert max(y for _, y in getbatch.lines[0].points) == 40  # the +40 spike of the interval ending 14:33:08
    assert len({p.x_range for _, plots in data.ais_plots for p in plots}) == 1
    assert page.count('class="mark-failure"') == 16 and 'class="mark-restart"' not in page  # aligned, no restart
    # Verification: one row per check.
    assert page.count("<tr><td>") >= len(data.diagnosis.verification.checks)
    for check in data.diagnosis.verification.checks:
        assert f"<td>{check.rule}</td>" in page
    assert "verification: ACCEPTED" in page


def test_ais_restarts_are_marked_apart_from_the_failure() -> None:
    logs = FIXTURES / "data_stall" / "logs"
    ais = FIXTURES / "ais_target_restart" / "ais"
    ev = gather_evidence(find_sources(logs, ais))
    data = build_report_data(build_diagnosis(ev), ev)
    restarted = {r.daemon for r in ev.ais.restarts} if ev.ais else set()
    assert restarted, "the fixture has a target restart"
    for name, plots in data.ais_plots:
        kinds = {label for p in plots for _, label in p.markers}
        assert ("restart" in kinds) == (name.split(" ")[0] in restarted), (name, kinds)
    page = render_html(data)
    assert page.count('class="mark-restart"') == 4 * len(restarted)  # one per counter plot of each restarted daemon
    assert 'class="mark-failure"' not in page  # the clocks are not aligned here: no failure time on the AIS axis


def test_series_on_small_and_big_jobs() -> None:
    data, _ = report("memory_creep_oom")
    (mem,) = data.series_plots
    assert [ln.label for ln in mem.lines if ln.flagged] == ["rank 6 (memory 30000 -> 78800 MB)"]
    data, _ = report("throughput_collapse")
    (step,) = data.series_plots
    assert {ln.label.split(" (")[0] for ln in step.lines if ln.flagged} == {"rank 4", "rank 5", "rank 6", "rank 7"}
    # 1,000 ranks: a band across ranks plus only the flagged rank's line.
    series = {r: [("f", i, None, 100.0 + (400.0 if r == 7 and i > 5 else 0.0)) for i in range(12)] for r in range(1000)}
    plot = series_plot("Step time", "ms", series, {7: "step time 100 -> 500 ms"})
    assert plot is not None and [ln.label for ln in plot.lines] == ["rank 7 (step time 100 -> 500 ms)"]
    assert plot.band and max(hi for *_, hi in plot.band) == 500.0  # the outlier shows in the spread
    assert max(median for _, _, median, _ in plot.band) == 100.0  # but not in the median


def test_no_ais_no_series_says_so() -> None:
    _, page = report("nccl_fabric")
    assert "no AIS logs given" in page and "carry no step-time or memory lines" in page


# ---------------------------------------------------------------------------------------------------------------------
# CLI and MCP


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "debug_training_logs", *args], capture_output=True, text=True, timeout=300
    )


def test_analyze_html_writes_the_page_and_never_into_the_logs(tmp_path: Path) -> None:
    logs, ais = FIXTURES / "data_stall" / "logs", FIXTURES / "data_stall" / "ais"
    out = tmp_path / "report.html"
    p = cli("analyze", str(logs), str(ais), "--html", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# Data-loading stall on one rank")
    assert f"HTML report: {out}" in p.stderr
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "data_loading_stall" in page
    assert [f.name for f in tmp_path.iterdir()] == ["report.html"]  # the temp file was renamed, none left
    for bad, why in [
        (logs / "r.html", "inside the log directory"),
        (ais / "sub" / "r.html", "inside the log directory"),
        (tmp_path, "is a directory"),
        (tmp_path / "nope" / "r.html", "does not exist"),
    ]:
        p = cli("analyze", str(logs), str(ais), "--html", str(bad))
        assert p.returncode == 2 and why in p.stderr, p.stderr
    assert not (logs / "r.html").exists()
    # `diagnose` is the documented alias of `analyze`.
    p = cli("diagnose", str(logs), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["verdict"]["category"] == "data_loading_stall"


@pytest.mark.anyio
async def test_diagnose_returns_a_resource_link_the_server_serves() -> None:
    logs, ais = FIXTURES / "data_stall" / "logs", FIXTURES / "data_stall" / "ais"
    async with Client(create_server([FIXTURES])) as client:
        res = await client.call_tool("diagnose", {"logs_dir": str(logs), "ais_dir": str(ais), "html_report": True})
        assert not res.is_error
        uri = res.structured_content["html_report_uri"]  # type: ignore[index]
        assert uri.startswith("debug-training-logs://reports/") and uri.endswith(".html")
        links = [c for c in res.content if c.type == "resource_link"]
        assert [(str(link.uri), link.mime_type) for link in links] == [(uri, "text/html")]  # type: ignore[union-attr]
        read = await client.read_resource(uri)
        (content,) = read.contents
        assert content.mime_type == "text/html" and content.text.startswith("<!doctype html>")  # type: ignore[union-attr]
        plain = await client.call_tool("diagnose", {"logs_dir": str(logs)})
        assert plain.structured_content["html_report_uri"] is None  # type: ignore[index]
        assert not [c for c in plain.content if c.type == "resource_link"]
        with pytest.raises(Exception, match="No report"):
            await client.read_resource("debug-training-logs://reports/0000000000000000.html")


# ---------------------------------------------------------------------------------------------------------------------
# In a real browser

PROBE = """<script>
window.addEventListener("load", () => {
  const cells = [...document.querySelectorAll("#ranks .cs i")];
  const sized = cells.filter(c => { const r = c.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  const culprit = document.querySelector("#ranks .cs i.c");
  document.body.dataset.probe = JSON.stringify({
    cells: cells.length, sized: sized.length, culprits: document.querySelectorAll("#ranks .cs i.c").length,
    culpritColour: culprit ? getComputedStyle(culprit).backgroundColor : null,
    svgs: document.querySelectorAll("svg").length, height: document.body.scrollHeight,
    loadMs: performance.now(),
  });
});
</script>"""


def chromium(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def load_in_browser(page: Path, tmp_path: Path) -> tuple[dict[str, Any], list[str]]:
    probe = tmp_path / f"probe-{page.name}"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    p = chromium(["--dump-dom", probe.as_uri()], tmp_path / "profile-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r'data-probe="([^"]*)"', p.stdout)
    assert m, "the page did not finish loading"
    return json.loads(m.group(1).replace("&quot;", '"')), console_messages(p.stderr)


def screenshot(page: Path, out: Path, tmp_path: Path, height: int = 2400) -> list[str]:
    p = chromium(
        [f"--window-size=1200,{height}", f"--screenshot={out}", page.as_uri()], tmp_path / f"profile-{out.stem}"
    )
    assert p.returncode == 0 and out.is_file() and out.stat().st_size > 20_000, p.stderr[-2000:]
    return console_messages(p.stderr)


def shots_dir(tmp_path: Path) -> Path:
    keep = os.environ.get("DTL_SCREENSHOT_DIR")
    return Path(keep) if keep else tmp_path


@pytest.mark.skipif(CHROMIUM is None, reason=CHROMIUM_HINT)
def test_1024_ranks_in_chromium(tmp_path: Path) -> None:
    logs = tmp_path / "job" / "logs"
    gen = subprocess.run(
        [sys.executable, "-m", "fixtures.generate", "--scenario", "data_stall", "--out", str(logs), "--nodes", "128"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert gen.returncode == 0, gen.stderr
    page = tmp_path / "report_1024.html"
    p = cli("analyze", str(logs), str(FIXTURES / "data_stall" / "ais"), "--html", str(page))
    assert p.returncode == 0, p.stderr
    size = page.stat().st_size
    assert size < 600_000, size
    probe, console = load_in_browser(page, tmp_path)
    assert console == []
    assert probe["cells"] == probe["sized"] == 1024 and probe["culprits"] == 1
    assert probe["culpritColour"] == "rgb(214, 39, 40)"  # the straggler's red
    assert probe["svgs"] >= 1 + 4 * 4  # timeline + 4 counters x 4 daemons
    out = shots_dir(tmp_path) / "report_1024.png"
    assert screenshot(page, out, tmp_path) == []
    print(f"\n1,024 ranks: {size:,} bytes, load {probe['loadMs']:.0f} ms, page height {probe['height']} px; {out}")


EVIDENCE_10K = (
    "rank {r} · waiting · error-48213-{n}.out:97: PG default_pg: ALLREDUCE seq 4118, signal detected, last enqueued "
    "4118, last completed 4117"
)
"""A waiting rank's hover text as the real report writes it (the page's size is mostly these)."""


@pytest.mark.skipif(CHROMIUM is None, reason=CHROMIUM_HINT)
def test_10240_rank_grid_in_chromium(tmp_path: Path) -> None:
    """The grid is what grows with the job: the data-stall report with its 16 ranks replaced by 1,280 nodes x 8."""
    data, _ = report("data_stall")
    nodes = [
        NodeRow(
            f"gpu-b{n:04d}",
            [
                RankCell(r, "straggler" if r == 5 else "waiting", r == 5, EVIDENCE_10K.format(r=r, n=n))
                for r in range(n * 8, n * 8 + 8)
            ],
        )
        for n in range(1280)
    ]
    counts = {s: 0 for s in STATES} | {"straggler": 1, "waiting": 10_239}
    page = tmp_path / "report_10240.html"
    page.write_text(render_html(replace(data, nodes=nodes, state_counts=counts)), encoding="utf-8")
    size = page.stat().st_size
    assert size < 2_500_000, size
    t0 = time.monotonic()
    probe, console = load_in_browser(page, tmp_path)
    took = time.monotonic() - t0
    assert console == []
    assert probe["cells"] == probe["sized"] == 10_240 and probe["culprits"] == 1
    assert screenshot(page, shots_dir(tmp_path) / "report_10240.png", tmp_path, 1600) == []
    print(
        f"\n10,240 ranks: {size:,} bytes, load {probe['loadMs']:.0f} ms in the page, {took:.1f} s for the browser run"
    )

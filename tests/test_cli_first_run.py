"""What a new user meets on a first run: help that reads as sentences, progress on a terminal (and silence in a
pipe), ``-v`` that says what happened, and summaries that do not mislead (one clock, the right node, no framework
invented for an empty directory)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from debug_training_logs.analysis.inventory import scan_job
from debug_training_logs.cli import SHORT_HELP, build_parser
from debug_training_logs.tools.registry import CLI_NAMES, all_tools
from debug_training_logs.tools.timeline import timeline_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DATA_STALL = FIXTURES / "data_stall"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "debug_training_logs", *args], capture_output=True, text=True, timeout=300
    )


def run_in_pty(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe): (exit status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "debug_training_logs", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    os.close(slave)
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            got += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=timeout), out, got.decode(errors="replace")


def test_progress_on_a_terminal_and_silence_in_a_pipe(tmp_path: Path) -> None:
    rc, out, term = run_in_pty("analyze", str(DATA_STALL / "logs"), str(DATA_STALL / "ais"))
    assert rc == 0 and out.startswith("# Data-loading stall")
    assert "[2/2] scanned error-48213-" in term  # the worker scan, file by file
    assert re.search(r"\[9/9\] read aistarget\.", term)  # then the AIS index
    assert term.endswith("\r\x1b[K")  # the status line is erased before the report is read
    piped = cli("analyze", str(DATA_STALL / "logs"), str(DATA_STALL / "ais"))
    assert piped.returncode == 0 and piped.stderr == ""


def test_fetch_ais_shows_progress_per_node_on_a_terminal(tmp_path: Path) -> None:
    from fake_ais_server import FakeAis, FakeNode, serve

    nodes = [FakeNode.typical(f"tgt{i}AbCd", "target", f"ais-target-{i}") for i in range(3)]
    home = tmp_path / "home"
    home.mkdir()
    with serve(FakeAis([FakeNode.typical("prx0WxYz", "proxy", "ais-proxy-0"), *nodes])) as url:
        rc, out, term = run_in_pty(
            "fetch-ais", str(tmp_path / "dest"), "--endpoint", url, env={"HOME": str(home), "AIS_AUTHN_TOKEN": "t0k"}
        )
    assert rc == 0, term
    assert "4 of 4 AIS nodes" in out
    assert re.search(r"\[4/4\] ", term), term  # one redraw per finished node, the last one always drawn
    assert term.endswith("\r\x1b[K")


def test_verbose_logs_each_phase_with_its_time() -> None:
    p = cli("-v", "analyze", str(DATA_STALL / "logs"), str(DATA_STALL / "ais"))
    assert p.returncode == 0
    assert re.search(r"INFO debug_training_logs.progress: scanning 2 file\(s\), 76,492 bytes", p.stderr)
    assert re.search(r"done: 2/2 in \d+\.\d\d s", p.stderr)
    assert "reading 9 AIS log file(s)" in p.stderr and "done: 9/9" in p.stderr


def test_help_is_whole_sentences() -> None:
    text = build_parser().format_help()
    commands = text.split("positional arguments:\n  COMMAND\n", 1)[1].split("\n\noptions:", 1)[0]
    listed = re.findall(r"^    (\S+(?: \(\w+\))?)\s+(.+?)(?=^    \S|\Z)", commands, re.M | re.S)
    assert {name.split(" ")[0] for name, _ in listed} >= {"serve", "analyze", "overview", "grep", "nccl", "verify"}
    for name, help_text in listed:
        assert " ".join(help_text.split()).endswith("."), (name, help_text)
    assert "analyze (diagnose)" in text  # the tool's own name is the documented alias
    serve = cli("serve", "--help").stdout
    assert re.search(r"--transport \{stdio,http\}\s+stdio \(default", serve)


def test_a_command_line_lists_every_tool_and_builds_only_the_one_it_runs() -> None:
    # the light table the CLI lists commands from says what the tool modules say (a new tool needs its line there)
    assert {spec.name: spec.cli_name for spec in all_tools()} == CLI_NAMES
    assert set(CLI_NAMES.values()) - {"diagnose"} <= set(SHORT_HELP)
    assert build_parser(["--help"]).format_help() == build_parser().format_help()
    code = (
        "import sys; from debug_training_logs.cli import build_parser; "
        "ns = build_parser(sys.argv[1:]).parse_args(sys.argv[1:]); "
        "print(ns._tool, sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('debug_training_logs.tools.')"
        " and m.rsplit('.', 1)[1] in " + repr(set(CLI_NAMES)) + "))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code, "-v", "nccl", "logs", "--ranks", "5"], capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == ["nccl_state_table", "['nccl_state_table']"], ran.stderr


def test_timeline_summary_uses_one_clock() -> None:
    aligned = timeline_of(DATA_STALL / "logs", DATA_STALL / "ais").summary
    assert re.search(r"From 2026-05-21T13:41:02Z .* to 2026-05-21T15:02:45Z \(UTC\)", aligned), aligned
    worker_only = timeline_of(DATA_STALL / "logs", None).summary
    assert "Worker events from 2026-05-21T07:00:01" in worker_only and "to 2026-05-21T08:02:45 (worker clock)" in (
        worker_only
    )
    unaligned = timeline_of(DATA_STALL / "logs", FIXTURES / "ais_idle" / "ais").summary
    assert "(worker clock)" in unaligned and "(AIS clock)" in unaligned and "UNALIGNED" in unaligned


def test_a_file_is_labelled_with_its_own_host_not_one_srun_names(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    nccl = "{h}:1234:1290 [0] NCCL INFO comm 0x1 rank {r} nranks 2 cudaDev 0 busId 3d000 - Init COMPLETE"
    (logs / "job-0.out").write_text(
        nccl.format(h="gpu-x01", r=0) + "\nsrun: error: gpu-x01: task 0: Exited with exit code 1\n"
        "srun: error: gpu-x02: task 1: Exited with exit code 1\n"
    )
    (logs / "job-1.out").write_text(nccl.format(h="gpu-x02", r=1) + "\n")
    (logs / "launcher.out").write_text("srun: error: gpu-x09: task 3: Exited with exit code 1\n")
    inv = scan_job(logs).inventory
    assert {f.rel: f.node for f in inv.files} == {"job-0.out": "gpu-x01", "job-1.out": "gpu-x02",
                                                  "launcher.out": "gpu-x09"}  # fmt: skip
    assert inv.nodes == ["gpu-x01", "gpu-x02", "gpu-x09"]


def test_an_empty_directory_has_no_framework(tmp_path: Path) -> None:
    p = cli("overview", str(tmp_path), "--json")
    assert p.returncode == 0
    assert '"name": "unknown"' in p.stdout and "plain PyTorch" not in p.stdout


def test_an_old_node_fails_the_e2e_tests_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from e2e import support

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_node = bin_dir / "node"
    clients = tmp_path / "node_modules" / ".bin"
    clients.mkdir(parents=True)
    (clients / "claude").write_text("#!/bin/sh\n")
    monkeypatch.setattr(support, "NODE_BIN", clients)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for version, outcome in (("v18.20.4", "fail"), ("v20.20.2", "ok"), ("v22.19.0", "ok")):
        fake_node.write_text(f"#!/bin/sh\necho {version}\n")
        fake_node.chmod(0o755)
        if outcome == "ok":
            assert support.node_tool("claude") == clients / "claude"
            continue
        with pytest.raises(pytest.fail.Exception, match=r"Node\.js 18\.20\.4 is too old .* need Node\.js >= 20\.0"):
            support.node_tool("claude")
    fake_node.unlink()
    monkeypatch.setenv("PATH", str(bin_dir))  # no node at all: the e2e tests are optional, so they skip
    with pytest.raises(pytest.skip.Exception, match="node is not installed"):
        support.node_tool("claude")


def test_license_is_the_apache_text_the_metadata_names() -> None:
    root = FIXTURES.parent
    text = (root / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert 'license = "Apache-2.0"' in (root / "pyproject.toml").read_text(encoding="utf-8")  # SPDX (PEP 639)
    assert '"license": "Apache-2.0"' in (root / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8")

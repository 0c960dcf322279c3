"""The two front ends over the registry: MCP (in memory, stdio, HTTP; both protocol eras) and the CLI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from debug_training_logs.server.app import create_server
from debug_training_logs.tools.registry import all_tools
from tests.conftest import write_small_job

pytestmark = pytest.mark.anyio


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "debug_training_logs", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


async def _overview(client: Client, logs: Path) -> dict[str, Any]:
    res = await client.call_tool("job_overview", {"logs_dir": str(logs)})
    assert res.is_error is False, res.content
    assert res.structured_content is not None
    return res.structured_content


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_in_memory_tools_have_schemas_annotations_and_results(tmp_path: Path, mode: str) -> None:
    logs = write_small_job(tmp_path / "logs")
    async with Client(create_server([tmp_path]), mode=mode, raise_exceptions=True) as client:  # type: ignore[arg-type]
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {s.name for s in all_tools()}
        for spec in all_tools():
            t = tools[spec.name]
            assert t.output_schema is not None, spec.name
            # "date-time" demands an offset that log times do not have; strict clients reject such results
            assert '"date-time"' not in json.dumps(t.output_schema), spec.name
            assert t.annotations is not None and t.annotations.read_only_hint is spec.read_only
            assert t.annotations.open_world_hint is spec.open_world
            assert t.description
        ov = await _overview(client, logs)
        assert ov["coverage"]["ranks_found"] == "0-7"


async def test_paths_outside_roots_and_bad_dirs_are_tool_errors(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    write_small_job(allowed / "logs")
    outside = write_small_job(tmp_path / "other")
    async with Client(create_server([allowed])) as client:
        res = await client.call_tool("job_overview", {"logs_dir": str(outside)})
        assert res.is_error and "outside the directories this server may access" in res.content[0].text  # type: ignore[union-attr]
        res = await client.call_tool("job_overview", {"logs_dir": str(allowed / "nope")})
        assert res.is_error and "does not exist" in res.content[0].text  # type: ignore[union-attr]
        res = await client.call_tool("job_overview", {"logs_dir": str(allowed / "logs" / ".." / ".." / "other")})
        assert res.is_error and "outside" in res.content[0].text  # type: ignore[union-attr]


async def test_progress_reaches_the_client(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs", nodes=3)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(create_server([tmp_path])) as client:
        await client.call_tool("job_overview", {"logs_dir": str(logs)}, progress_callback=on_progress)
    assert seen == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_subprocess_matches_cli_json(tmp_path: Path, mode: str) -> None:
    logs = write_small_job(tmp_path / "logs")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "debug_training_logs", "serve", "--root", str(tmp_path)]
    )
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        assert client.server_info is not None and client.server_info.name == "debug-training-logs"
        via_mcp = await _overview(client, logs)
    cli = _cli("overview", str(logs), "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == via_mcp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_streamable_http(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs")
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "debug_training_logs",
            "serve",
            "--transport",
            "http",
            "--port",
            str(port),
            "--root",
            str(tmp_path),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                await anyio.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            ov = await _overview(client, logs)
        assert ov["coverage"]["world_size"] == 8
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_human_output_and_exit_codes(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs")
    ok = _cli("overview", str(logs))
    assert ok.returncode == 0
    assert ok.stdout.startswith("2 files") and "world_size: 8" in ok.stdout
    missing = _cli("overview", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and missing.stdout == ""
    bad_limit = _cli("overview", str(logs), "--limit", "0")
    assert bad_limit.returncode == 2 and "limit" in bad_limit.stderr
    assert _cli("analyze", str(logs), "--json").returncode == 0

"""The nccl_state_table tool through both front ends: the CLI's --json is exactly MCP's structured content."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from debug_training_logs.server.app import create_server
from debug_training_logs.tools.registry import tool_by_name

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = pytest.mark.anyio


def test_registered_with_cli_name_and_flat_params() -> None:
    spec = tool_by_name("nccl")
    assert spec is not None and spec.name == "nccl_state_table" and spec.positional == ("logs_dir",)
    assert spec.read_only and not spec.open_world


async def test_cli_json_equals_mcp_structured_content() -> None:
    logs = FIXTURES / "data_stall" / "logs"
    async with Client(create_server([FIXTURES]), raise_exceptions=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["nccl_state_table"].input_schema
        assert {"logs_dir", "limit", "max_tokens"} <= set(schema["properties"]) and schema["required"] == ["logs_dir"]
        res = await client.call_tool("nccl_state_table", {"logs_dir": str(logs), "limit": 10, "offset": 0})
        assert res.is_error is False, res.content
        via_mcp = res.structured_content
        default = (await client.call_tool("nccl_state_table", {"logs_dir": str(logs)})).structured_content
    # The default view: the deviating rank's row in full, the 15 others as the PG majority.
    assert default is not None and default["rows_view"] == "deviating"
    assert [r["rank"] for r in default["rows"]] == [5] and default["rows_truncated"] == 15
    assert default["process_groups"][0]["majority"]["ranks"] == "0-4,6-15"
    cli = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "nccl", str(logs), "--limit", "10", "--offset", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == via_mcp
    assert via_mcp is not None and via_mcp["straggler_ranks"] == [5]
    assert via_mcp["process_groups"][0]["classification"] == "straggler"
    assert via_mcp["rows_total"] == 16 and via_mcp["rows_truncated"] == 6
    assert [r["rank"] for r in via_mcp["rows"]] == list(range(10)) and via_mcp["next_offset"] == 10


def test_cli_human_output_and_bad_dir(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "nccl", str(FIXTURES / "nccl_fabric" / "logs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and "FABRIC" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "nccl", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "does not exist" in bad.stderr

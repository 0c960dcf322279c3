"""The server as the MCP Inspector CLI (an independent client) sees it: every registered tool listed with honest
annotations and an output schema, every tool called on the data-stall job with a result that matches its schema,
the allowed-roots refusal, and the ``debug-training-logs`` prompt in both protocol eras.

Iterates over whatever the registry holds, so it keeps passing as tools land; a tool whose arguments this file cannot
build yet is skipped with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from e2e.support import (
    DATA_STALL_LOGS,
    REPO,
    fill_arguments,
    fixture_ais_logs,
    fixture_logs,
    isolated_env,
    node_tool,
)

from debug_training_logs.tools.registry import all_tools

TOOLS = [spec.name for spec in all_tools()]
SPECS = {spec.name: spec for spec in all_tools()}


@dataclass
class Workspace:
    inspector: Path
    tmp: Path
    logs: Path
    ais: Path
    home: Path
    stack: ExitStack = field(default_factory=ExitStack)
    ais_endpoint: str | None = None

    def run(self, *args: str, era: str | None = None) -> subprocess.CompletedProcess[str]:
        """``inspector --cli <our server> -- ARGS --format json -q``."""
        roots = ["--root", str(self.tmp)]
        if not (self.logs.is_relative_to(self.tmp) and self.ais.is_relative_to(self.tmp)):
            roots += ["--root", str(REPO / "fixtures")]
        server = [sys.executable, "-m", "debug_training_logs", "serve", *roots]
        era_args = ["--protocol-era", era] if era else []
        # The Inspector gives a server 15 s to connect by default; a loaded 2-core machine (CI beside other work) can
        # take longer just to import Python, so the bound is generous: it waits on the handshake, not on a clock.
        wait = ["--connect-timeout", "120000"]
        cmd = [str(self.inspector), "--cli", *server, "--", *wait, *era_args, "--format", "json", "-q", *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=120, env=isolated_env(self.home), stdin=subprocess.DEVNULL
        )

    def call(self, tool: str, arguments: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.run("--method", "tools/call", "--tool-name", tool, "--tool-args-json", json.dumps(arguments))


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    inspector = node_tool("inspector")
    tmp = tmp_path_factory.mktemp("inspector")
    workspace = Workspace(inspector, tmp, fixture_logs(tmp), fixture_ais_logs(tmp), tmp / "home")
    with workspace.stack:
        yield workspace


@pytest.fixture(scope="module")
def listed(ws: Workspace) -> dict[str, dict[str, Any]]:
    run = ws.run("--method", "tools/list")
    assert run.returncode == 0, run.stderr
    return {t["name"]: t for t in json.loads(run.stdout)["result"]["tools"]}


def _fake_ais_endpoint(ws: Workspace) -> str:
    """A loopback fake AIS cluster (tests/fake_ais_server.py) for fetch_ais_logs."""
    if ws.ais_endpoint is None:
        fake = pytest.importorskip(
            "fake_ais_server", reason="tests/fake_ais_server.py (the fake AIS cluster) is absent"
        )
        nodes = [
            fake.FakeNode.typical("prx0WxYz", "proxy", "ais-proxy-0"),
            fake.FakeNode.typical("tgt0AbCd", "target", "ais-target-0"),
        ]
        ws.ais_endpoint = ws.stack.enter_context(fake.serve(fake.FakeAis(nodes)))
    return ws.ais_endpoint


def _arguments(ws: Workspace, tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool["inputSchema"]
    props = schema.get("properties", {})
    known: dict[str, Any] = {"logs_dir": str(ws.logs), "ais_dir": str(ws.ais)}
    if "dest_dir" in props:
        known["dest_dir"] = str(ws.tmp / f"fetched-{uuid.uuid4().hex[:8]}")
        known["endpoint"] = _fake_ais_endpoint(ws) if "endpoint" in props else None
        known["timeout_s"] = 30
    earlier: dict[str, Any] = {}
    needs_object = any(props[n].get("type") != "string" for n in schema.get("required", []) if n not in known)
    if needs_object and "diagnose" in SPECS:
        run = ws.call("diagnose", {"logs_dir": str(ws.logs), "ais_dir": str(ws.ais)})
        if run.returncode == 0:
            earlier["diagnose"] = json.loads(run.stdout)["result"]["structuredContent"]
    args = fill_arguments(schema, known, earlier)
    if isinstance(args, str):
        pytest.skip(f"{tool['name']}: {args}")
    assert isinstance(args, dict)
    return args


def test_tools_list_shows_every_registered_tool_with_schemas_and_honest_annotations(
    listed: dict[str, dict[str, Any]],
) -> None:
    assert list(listed) == TOOLS
    for name, tool in listed.items():
        spec = SPECS[name]
        assert tool["title"] == spec.title and tool["description"].strip()
        assert tool["inputSchema"]["type"] == "object"
        out = tool.get("outputSchema")
        assert out and out["type"] == "object" and "summary" in out["properties"], name
        annotations = tool["annotations"]
        assert annotations["readOnlyHint"] is spec.read_only
        assert annotations["openWorldHint"] is spec.open_world
        assert annotations["idempotentHint"] is spec.idempotent
        assert annotations["destructiveHint"] is spec.destructive


def test_tool_schemas_are_portable_across_llm_clients(ws: Workspace) -> None:
    run = ws.run("--method", "tools/list", "--strict")
    assert run.returncode == 0, run.stderr  # exit 6 would mean an error-severity portability problem


@pytest.mark.parametrize("name", TOOLS)
def test_call_each_tool_on_the_data_stall_job(ws: Workspace, listed: dict[str, dict[str, Any]], name: str) -> None:
    tool = listed[name]
    run = ws.call(name, _arguments(ws, tool))
    assert "must match format" not in run.stderr, (
        f"{name}: its structured result breaks its own outputSchema for a standard JSON Schema validator (the "
        "Inspector's, and Claude Code's, which then hands the model an error instead of the result). A naive "
        "datetime ('2025-03-14T10:06:00') is not an RFC 3339 date-time: emit aware datetimes or type the field as "
        f"str.\n{run.stderr[-1500:]}"
    )
    assert run.returncode == 0, f"{name}: rc={run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    result = json.loads(run.stdout)["result"]
    assert result.get("isError") is not True
    structured = result["structuredContent"]
    jsonschema.validate(structured, tool["outputSchema"])
    assert isinstance(structured["summary"], str) and structured["summary"].strip()
    if name == "fetch_ais_logs":  # from the loopback fake cluster: both daemons, nothing failed
        assert structured.get("nodes_failed", 0) == 0 and structured.get("nodes_ok") == 2, structured["summary"]
    coverage = structured.get("coverage")
    if coverage is not None and "logs_dir" in tool["inputSchema"]["properties"]:
        assert coverage["files_scanned"] > 0
        if ws.logs != DATA_STALL_LOGS:  # the generated 2-node x 2-GPU job
            assert coverage["ranks_found"] == "0-3" and coverage["missing_ranks"] == ""


def test_a_path_outside_the_allowed_roots_is_a_tool_error(ws: Workspace) -> None:
    run = ws.call("job_overview", {"logs_dir": str(REPO / "debug_training_logs")})
    assert run.returncode == 5  # the Inspector's exit code for isError:true
    result = json.loads(run.stdout)["result"]
    assert result["isError"] is True and "outside the directories this server may access" in json.dumps(result)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_prompt_listed_and_rendered(ws: Workspace, era: str) -> None:
    listing = ws.run("--method", "prompts/list", era=era)
    assert listing.returncode == 0, listing.stderr
    (prompt,) = json.loads(listing.stdout)["result"]["prompts"]
    assert prompt["name"] == "debug-training-logs"
    assert [(a["name"], a.get("required", False)) for a in prompt["arguments"]] == [
        ("logs_dir", True),
        ("ais_dir", False),
    ]
    args = [f"logs_dir={ws.logs}", f"ais_dir={ws.ais}"]
    got = ws.run("--method", "prompts/get", "--prompt-name", "debug-training-logs", "--prompt-args", *args, era=era)
    assert got.returncode == 0, got.stderr
    (message,) = json.loads(got.stdout)["result"]["messages"]
    text = message["content"]["text"]
    assert f"Worker logs: `{ws.logs}`" in text and f"AIStore daemon logs: `{ws.ais}`" in text
    assert "$ARGUMENTS" not in text


def test_prompt_without_logs_dir_is_refused(ws: Workspace) -> None:
    run = ws.run("--method", "prompts/get", "--prompt-name", "debug-training-logs", era="legacy")
    assert run.returncode != 0 and "logs_dir" in run.stderr

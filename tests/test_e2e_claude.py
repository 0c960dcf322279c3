"""Claude Code itself (the pinned CLI, offline, throwaway HOME) against this repository as a plugin and our server:

* ``claude plugin validate --strict`` accepts the repo (marketplace + plugin + skill + bundled server), and rejects a
  copy with a broken skill frontmatter (so the pass means something);
* ``claude mcp add -s local`` + ``claude mcp list`` connects to the server (Claude Code's own health check);
* a local-marketplace install of a clean copy of the plugin starts its bundled server through ``scripts/serve.sh``;
* a full headless session ``claude -p "/debug-training-logs:debug-training-logs <logs> <ais>" --plugin-dir <repo>``
  against a loopback fake Messages API (tests/e2e/fake_anthropic.py) whose "model" calls every registered tool in
  protocol order: the skill loads with its arguments, each call runs under the plugin's tool name with no permission
  prompt (the skill's ``allowed-tools``), and each structured result reaches the model within its token budget (as
  compact JSON: Claude Code drops our text block when structured content is present; ``job_overview``'s exactly as
  the tool returns it). Without the skill's ``allowed-tools`` the same call is denied.

Nothing leaves 127.0.0.1: no API key, no Anthropic network.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e.fake_anthropic import FakeAnthropic, Json, request_text, tool_results
from e2e.support import REPO, fill_arguments, isolated_env, node_tool, write_ais_logs, write_data_stall_logs

from debug_training_logs.render import render_text
from debug_training_logs.tools.budget import DEFAULT_MAX_TOKENS, chars_for, compact_json
from debug_training_logs.tools.registry import all_tools

PLUGIN = "debug-training-logs"
SKILL_COMMAND = f"/{PLUGIN}:{PLUGIN}"
TOOL_PREFIX = f"mcp__plugin_{PLUGIN}_{PLUGIN}__"
PLUGIN_FILES = (".claude-plugin", ".mcp.json", "skills", "scripts", "SKILL.md")
VENV_BIN = Path(sys.executable).parent
FINAL = "FAKE-MODEL: the straggler is rank 3."
TOOLS = [spec.name for spec in all_tools()]
SPECS = {spec.name: spec for spec in all_tools()}


@pytest.fixture(scope="module")
def claude() -> Path:
    return node_tool("claude")


def _run(
    claude: Path, *args: str, cwd: Path, home: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    path = f"{VENV_BIN}:{env.pop('PATH', '/usr/local/bin:/usr/bin:/bin')}"
    # Claude Code connects MCP servers in the background by default, so under load a headless run's first request to
    # the model can go out before our server has answered `tools/list` (its tools are then missing from that turn).
    # MCP_CONNECTION_NONBLOCKING=0 makes the client itself wait for each server's handshake before the first turn, and
    # CLAUDE_CODE_MCP_STARTUP_WAIT_MS (read by the 2.1.330 binary) raises that wait's deadline: with the first alone a
    # loaded machine (load average 12 on 2 cores) still lost the race 2 runs in 3. The test waits on readiness as a
    # client does, never on a sleep.
    wait = {"MCP_CONNECTION_NONBLOCKING": "0", "CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "60000"}
    return subprocess.run(
        [str(claude), *args],
        cwd=cwd,
        env=isolated_env(home, PATH=path, MCP_TIMEOUT="30000", **wait, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _clean_plugin_copy(dest: Path) -> Path:
    """The plugin's files only, as a fresh clone would hold them (no .venv, no node_modules)."""
    dest.mkdir(parents=True)
    for name in PLUGIN_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        else:
            shutil.copy2(src, dest / name)
    return dest


def test_plugin_validate_strict_passes_on_the_repo(claude: Path, tmp_path: Path) -> None:
    run = _run(claude, "plugin", "validate", "--strict", str(REPO), cwd=tmp_path, home=tmp_path / "home")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "✔ Validation passed" in run.stdout
    assert f"skills: {PLUGIN}:{PLUGIN}" in run.stdout
    assert f"mcpServers: {PLUGIN} stdio ${{CLAUDE_PLUGIN_ROOT}}/scripts/serve.sh" in run.stdout


def test_plugin_validate_rejects_a_broken_skill_frontmatter(claude: Path, tmp_path: Path) -> None:
    copy = _clean_plugin_copy(tmp_path / "plugin")
    skill = copy / "skills" / PLUGIN / "SKILL.md"
    skill.write_text(skill.read_text().replace("  - Read\n", "  - Read\n   broken: {\n", 1))
    run = _run(claude, "plugin", "validate", str(copy), cwd=tmp_path, home=tmp_path / "home")
    assert run.returncode == 1 and "YAML frontmatter failed to parse" in run.stdout


def _mcp_list_line(claude: Path, name: str, cwd: Path, home: Path) -> str:
    run = _run(claude, "mcp", "list", cwd=cwd, home=home)  # rc is 0 even when a server fails: read stdout
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(f"{name}:")]
    assert len(lines) == 1, run.stdout + run.stderr
    return lines[0]


def test_mcp_add_then_list_connects(claude: Path, tmp_path: Path) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    server = [sys.executable, "-m", "debug_training_logs", "serve", "--root", str(project)]
    add = _run(claude, "mcp", "add", "-s", "local", PLUGIN, "--", *server, cwd=project, home=home)
    assert add.returncode == 0, add.stdout + add.stderr
    assert "✔ Connected" in _mcp_list_line(claude, PLUGIN, project, home)


def test_local_marketplace_install_starts_the_bundled_server(claude: Path, tmp_path: Path) -> None:
    market, project, home = _clean_plugin_copy(tmp_path / "clone"), tmp_path / "project", tmp_path / "home"
    project.mkdir()
    for args in (("marketplace", "add", str(market)), ("install", f"{PLUGIN}@{PLUGIN}")):
        run = _run(claude, "plugin", *args, cwd=project, home=home)
        assert run.returncode == 0, run.stdout + run.stderr
    listing = _run(claude, "plugin", "list", cwd=project, home=home)
    assert f"{PLUGIN}@{PLUGIN}" in listing.stdout and "enabled" in listing.stdout
    line = _mcp_list_line(claude, f"plugin:{PLUGIN}:{PLUGIN}", project, home)
    assert "scripts/serve.sh" in line and "✔ Connected" in line  # `debug-training-logs` found on PATH


def _skill_request(fake: FakeAnthropic) -> Json:
    marker = "Base directory for this skill: "
    found = [body for body in fake.requests if marker in request_text(body)]
    assert found, "no request carried the expanded skill"
    return found[0]


def _result_text(result: Json) -> str:
    content = result["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def _headless(
    claude: Path,
    plugin_dir: Path,
    tmp_path: Path,
    fake: FakeAnthropic,
    logs: Path,
    ais: Path,
    *extra: str,
) -> dict[str, Any]:
    """One ``claude -p "/debug-training-logs:debug-training-logs LOGS AIS"`` run against ``fake``; its JSON output."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    with fake:
        run = _run(
            claude,
            "-p",
            f"{SKILL_COMMAND} {logs} {ais}",
            "--plugin-dir",
            str(plugin_dir),
            "--output-format",
            "json",
            *extra,
            cwd=project,
            home=tmp_path / "home",
            timeout=300,
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY="sk-ant-offline-dummy",
            ENABLE_TOOL_SEARCH="false",
            # The logs live outside the project (the server's cwd); the launcher adds this root.
            DEBUG_TRAINING_LOGS_ROOTS=str(logs.parent),
        )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    output = json.loads(run.stdout)
    assert isinstance(output, dict)
    return output


def _from_skill(body: Json, label: str) -> str | None:
    """The directory the expanded skill names after ``label`` (what a model would pass on)."""
    found = re.search(rf"{label}: `([^`]+)`", request_text(body))
    return found.group(1) if found else None


@dataclass
class Session:
    """One headless run in which the fake model calls every registered tool in protocol order."""

    fake: FakeAnthropic
    output: dict[str, Any]
    logs: Path
    ais: Path
    not_called: dict[str, str] = field(default_factory=dict)

    def use(self, tool: str) -> Json:
        (use,) = [u for u in self.fake.tool_uses if u["name"] == TOOL_PREFIX + tool]
        return use


@pytest.fixture(scope="module")
def session(claude: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    tmp = tmp_path_factory.mktemp("claude-session")
    logs = write_data_stall_logs(tmp / "jobs" / "4242" / "logs")
    ais = write_ais_logs(tmp / "jobs" / "4242" / "ais_logs")
    not_called: dict[str, str] = {}
    with ExitStack() as stack:
        endpoint: str | None = None
        fake_ais = _optional_module("fake_ais_server")
        if fake_ais is not None:
            nodes = [
                fake_ais.FakeNode.typical("prx0WxYz", "proxy", "ais-proxy-0"),
                fake_ais.FakeNode.typical("tgt0AbCd", "target", "ais-target-0"),
            ]
            endpoint = stack.enter_context(fake_ais.serve(fake_ais.FakeAis(nodes)))

        def builder(tool: str) -> Callable[[Json], Json | None]:
            def build(body: Json) -> Json | None:
                (schema,) = [t["input_schema"] for t in body["tools"] if t["name"] == TOOL_PREFIX + tool]
                known = {
                    "logs_dir": _from_skill(body, "Worker logs"),
                    "ais_dir": _from_skill(body, "AIStore daemon logs"),
                    "dest_dir": str(logs.parent / "fetched_ais_logs"),
                    "endpoint": endpoint,
                    "timeout_s": 30,
                }
                if "dest_dir" in schema.get("properties", {}) and endpoint is None:
                    not_called[tool] = "tests/fake_ais_server.py (the fake AIS cluster) is absent"
                    return None
                earlier = {
                    u["name"].removeprefix(TOOL_PREFIX): json.loads(_result_text(r))
                    for u in fake.tool_uses
                    for r in tool_results(body)
                    if r["tool_use_id"] == u["id"] and not r.get("is_error")
                }
                args = fill_arguments(schema, known, earlier)
                if isinstance(args, str):
                    not_called[tool] = args
                    return None
                assert isinstance(args, dict)
                return args

            return build

        fake = FakeAnthropic([(t, builder(t)) for t in TOOLS], FINAL)
        # fetch_ais_logs downloads and writes, so the skill does not pre-approve it: allow it as a user would.
        allow = ["--allowedTools", TOOL_PREFIX + "fetch_ais_logs"]
        output = _headless(claude, REPO, tmp, fake, logs, ais, *allow)
        yield Session(fake, output, logs, ais, not_called)


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def test_headless_session_loads_the_skill_with_its_arguments(session: Session) -> None:
    text = request_text(_skill_request(session.fake))
    assert f"Base directory for this skill: {REPO / 'skills' / PLUGIN}" in text
    assert f"Worker logs: `{session.logs}`" in text and f"AIStore daemon logs: `{session.ais}`" in text
    assert "## 7. Verify before answering: `verify_conclusion`" in text and "$ARGUMENTS[" not in text
    # Every registered tool is offered under the plugin's name (the names the skill's allowed-tools pre-approve).
    offered = {t["name"] for t in _skill_request(session.fake)["tools"]}
    assert {TOOL_PREFIX + name for name in TOOLS} <= offered
    assert session.output["is_error"] is False and session.output["result"] == FINAL
    assert session.output["permission_denials"] == []


def test_headless_job_overview_result_reaches_the_model(session: Session) -> None:
    use = session.use("job_overview")
    assert use["input"] == {"logs_dir": str(session.logs)}  # the directory the skill named
    result = session.fake.result_of(use)
    assert result is not None and result.get("is_error") is not True
    # Claude Code hands the model the structured content as compact JSON: exactly the tool's budgeted result (what
    # the CLI's --json prints), not our readable text block, which it drops (server/app.py says why we still send it).
    text = _result_text(result)
    spec = SPECS["job_overview"]
    expected = spec.call(logs_dir=str(session.logs))
    assert json.loads(text) == expected.model_dump(mode="json")
    assert text == compact_json(expected.model_dump(mode="json"))
    assert render_text(spec, expected) not in text
    assert json.loads(text)["coverage"]["ranks_found"] == "0-3"


@pytest.mark.parametrize("name", TOOLS)
def test_headless_each_tool_works_through_claude_code(session: Session, name: str) -> None:
    if name in session.not_called:
        pytest.skip(f"{name} not called in the session: {session.not_called[name]}")
    result = session.fake.result_of(session.use(name))
    assert result is not None, f"Claude Code sent no result for {name}"
    text = _result_text(result)
    assert result.get("is_error") is not True, f"{name}: Claude Code returned an error to the model: {text[:1500]}"
    structured = json.loads(text)
    assert isinstance(structured["summary"], str) and structured["summary"].strip()
    # What reaches the model is held to the default budget, and says so.
    assert len(text) <= chars_for(DEFAULT_MAX_TOKENS), f"{name}: {len(text)} characters reached the model"
    assert structured["budget"]["max_tokens"] == DEFAULT_MAX_TOKENS


def test_without_allowed_tools_the_same_call_is_denied(claude: Path, tmp_path: Path) -> None:
    plugin = _clean_plugin_copy(tmp_path / "plugin")
    skill = plugin / "skills" / PLUGIN / "SKILL.md"
    skill.write_text(re.sub(r"allowed-tools:\n(  - .*\n)+", "", skill.read_text()))
    logs = write_data_stall_logs(tmp_path / "jobs" / "4242" / "logs")
    fake = FakeAnthropic([("job_overview", lambda body: {"logs_dir": _from_skill(body, "Worker logs")})], FINAL)
    output = _headless(claude, plugin, tmp_path, fake, logs, tmp_path / "jobs" / "4242" / "ais_logs")
    (use,) = fake.tool_uses
    denied = [d.get("tool_name") for d in output["permission_denials"]]
    assert denied == [use["name"]], output["permission_denials"]

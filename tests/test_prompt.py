"""The ``debug-training-logs`` MCP prompt: listed with its arguments, rendered from the skill text, in both protocol
eras, in memory and over stdio, and present in a non-editable install (the wheel)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import TextContent

from debug_training_logs.server.app import create_server
from debug_training_logs.server.prompts import (
    AIS_PLACEHOLDER,
    CLAUDE_CODE_ONLY_HINT,
    LOGS_PLACEHOLDER,
    PROMPT_NAME,
    render_protocol,
    split_skill,
)

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[1]
MODES = ["auto", "legacy"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _canonical_body() -> str:
    return split_skill((REPO / "SKILL.md").read_text(encoding="utf-8"))[1]


async def _check_prompt(client: Client, logs: str, ais: str) -> None:
    (prompt,) = [p for p in (await client.list_prompts()).prompts if p.name == PROMPT_NAME]
    assert prompt.title and prompt.description and "Use when" in prompt.description
    assert [(a.name, a.required) for a in prompt.arguments or []] == [("logs_dir", True), ("ais_dir", False)]

    result = await client.get_prompt(PROMPT_NAME, {"logs_dir": logs, "ais_dir": ais})
    (message,) = result.messages
    assert message.role == "user" and isinstance(message.content, TextContent)
    text = message.content.text
    assert f"Worker logs: `{logs}`" in text and f"AIStore daemon logs: `{ais}`" in text
    assert "$ARGUMENTS" not in text and CLAUDE_CODE_ONLY_HINT not in text
    assert "`verify_conclusion`" in text and "**Root Cause Chain**" in text

    only_logs = await client.get_prompt(PROMPT_NAME, {"logs_dir": logs})
    content = only_logs.messages[0].content
    assert isinstance(content, TextContent) and "AIStore daemon logs: `none given`" in content.text

    with pytest.raises(MCPError):
        await client.get_prompt(PROMPT_NAME, {"ais_dir": ais})


def test_the_prompt_is_the_canonical_skill_with_its_arguments_filled_in() -> None:
    body = _canonical_body()
    assert CLAUDE_CODE_ONLY_HINT in body and LOGS_PLACEHOLDER in body and AIS_PLACEHOLDER in body
    expected = body.replace(CLAUDE_CODE_ONLY_HINT, "").replace(LOGS_PLACEHOLDER, "/j/logs")
    assert render_protocol("/j/logs", "/j/ais") == expected.replace(AIS_PLACEHOLDER, "/j/ais")


@pytest.mark.parametrize("mode", MODES)
async def test_prompt_in_memory(mode: str) -> None:
    async with Client(create_server(), mode=mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        await _check_prompt(client, "/data/job 4242/logs", "/data/job 4242/ais_logs")


@pytest.mark.parametrize("mode", MODES)
async def test_prompt_over_stdio(mode: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "debug_training_logs", "serve", "--root", str(tmp_path)]
    )
    async with Client(params, mode=mode) as client:
        await _check_prompt(client, str(tmp_path / "logs"), str(tmp_path / "ais"))


def test_a_non_editable_install_ships_the_protocol(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools (pip install setuptools)")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("debug_training_logs-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        packaged = zf.read("debug_training_logs/server/SKILL.md").decode()
        zf.extractall(site)
    assert packaged == (REPO / "SKILL.md").read_text(encoding="utf-8")
    # Run from the unpacked wheel, not the checkout: -I ignores the cwd and PYTHONPATH, so only site/ is added.
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r}); "
        "from debug_training_logs.server import prompts; "
        f"assert prompts.__file__.startswith({str(site)!r}), prompts.__file__; "
        "print(prompts.render_protocol('/x/logs').splitlines()[2])"
    )
    run = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Worker logs: `/x/logs`"

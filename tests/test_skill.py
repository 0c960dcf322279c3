"""The skill and the Claude Code plugin files: copies agree, frontmatter and tool names are right, the protocol says
what an agent must do at each step.

The MCP tool names Claude Code gives the model are ``mcp__<server>__<tool>`` for a ``claude mcp add`` server and
``mcp__plugin_<plugin>_<server>__<tool>`` for a plugin's bundled server (observed in Claude Code 2.1.330; the
headless session in tests/test_e2e_claude.py checks them against a real request).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import pytest

from debug_training_logs.server.prompts import split_skill
from debug_training_logs.tools.registry import PREFERRED_ORDER, all_tools

REPO = Path(__file__).resolve().parents[1]
CANONICAL = REPO / "SKILL.md"
COPIES = (REPO / "skills" / "debug-training-logs" / "SKILL.md", REPO / "debug_training_logs" / "server" / "SKILL.md")
CONTRACT_TOOLS = PREFERRED_ORDER
NOT_PRE_APPROVED = {"fetch_ais_logs"}
"""Downloads from a live cluster and writes files: Claude Code asks the user first (it is not read-only)."""
REPORT_SECTIONS = ("Job Details", "Timeline Table", "Root Cause Chain", "Key Files", "Recommendations")


def _frontmatter_lists(text: str) -> dict[str, list[str]]:
    """The YAML block-list fields of a frontmatter (``key:`` followed by ``  - item`` lines)."""
    lists: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.split("---", 2)[1].splitlines():
        if line.startswith("  - ") and current is not None:
            lists[current].append(line[4:].strip())
        elif line.endswith(":"):
            current = line[:-1]
            lists[current] = []
        else:
            current = None
    return lists


def _json(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def skill() -> str:
    return CANONICAL.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def body(skill: str) -> str:
    return split_skill(skill)[1]


def test_every_copy_of_the_skill_is_the_canonical_one(skill: str) -> None:
    for copy in COPIES:
        assert copy.read_text(encoding="utf-8") == skill, (
            f"{copy.relative_to(REPO)} differs from SKILL.md (the canonical copy); after editing SKILL.md run: "
            "for f in skills/debug-training-logs/SKILL.md debug_training_logs/server/SKILL.md; do cp SKILL.md $f; done"
        )


def test_frontmatter_names_the_skill_and_its_arguments(skill: str) -> None:
    fields, _ = split_skill(skill)
    assert fields["name"] == "debug-training-logs" == COPIES[0].parent.name
    assert fields["argument-hint"] == "<path-to-logs-dir> [ais-logs-dir]"
    assert fields["disable-model-invocation"] == "true"
    description = fields["description"]
    assert "Use when" in description and "root cause" in description
    assert len(description) <= 1024  # the Agent Skills limit
    assert skill.split("\n", 3)[2].startswith('description: "'), "keep the description quoted (it has colons)"


def test_allowed_tools_pre_approve_the_read_only_tools_under_both_server_names(skill: str) -> None:
    plugin = _json(REPO / ".claude-plugin" / "plugin.json")["name"]
    servers = _json(REPO / ".mcp.json")["mcpServers"]
    assert isinstance(servers, dict) and list(servers) == ["debug-training-logs"]
    (server,) = servers
    pre_approved = [t for t in CONTRACT_TOOLS if t not in NOT_PRE_APPROVED]
    expected = [f"mcp__plugin_{plugin}_{server}__{t}" for t in pre_approved]
    expected += [f"mcp__{server}__{t}" for t in pre_approved]  # claude mcp add debug-training-logs -- ...
    expected += ["Read", "Grep", "Glob"]
    assert _frontmatter_lists(skill)["allowed-tools"] == expected
    assert expected[0] == "mcp__plugin_debug-training-logs_debug-training-logs__job_overview"


def test_pre_approval_follows_the_registered_tools_annotations() -> None:
    for spec in all_tools():
        harmless = spec.read_only and not spec.open_world and not spec.destructive
        assert spec.name in CONTRACT_TOOLS, f"new tool {spec.name}: add it to the skill and PREFERRED_ORDER"
        assert harmless == (spec.name not in NOT_PRE_APPROVED), (
            f"{spec.name}: read_only={spec.read_only} open_world={spec.open_world}; pre-approve exactly the "
            "read-only, closed-world tools in SKILL.md allowed-tools"
        )


def test_body_takes_both_directories_as_indexed_arguments(body: str) -> None:
    assert "`$ARGUMENTS[0]`" in body and "`$ARGUMENTS[1]`" in body
    # $0/$1 shorthands and a bare $ARGUMENTS would be expanded by Claude Code too; shell blocks are not escaped.
    assert re.findall(r"\$(?!ARGUMENTS\[[01]\])\w+", body) == []
    assert "!`" not in body and "```!" not in body


def test_body_walks_through_the_tools_in_protocol_order(body: str) -> None:
    positions = {t: body.find(f"`{t}`") for t in CONTRACT_TOOLS}
    assert all(p >= 0 for p in positions.values()), {t for t, p in positions.items() if p < 0}
    order = ("job_overview", "grep_all_ranks", "nccl_state_table", "fetch_ais_logs", "timeline", "diagnose")
    assert [positions[t] for t in order] == sorted(positions[t] for t in order)
    assert positions["verify_conclusion"] > positions["diagnose"]
    assert "ais log get cluster" in body  # the manual fallback when fetch_ais_logs cannot reach the cluster


def test_body_states_the_rules_an_agent_must_not_skip(body: str) -> None:
    assert "`coverage.missing_ranks`" in body and "ask" in body.split("`coverage.missing_ranks`")[1][:200]
    verify = body[body.index("`verify_conclusion`") :]
    assert "rejected" in verify and "do not present" in verify
    assert "last_enqueued == last_completed" in body  # the straggler signature
    assert "align_timezones" in body and "Never assume" in body


def test_report_has_the_five_sections_in_order(body: str) -> None:
    report = body[body.index("## Report") :]
    positions = [report.find(f"**{s}**") for s in REPORT_SECTIONS]
    assert -1 not in positions and positions == sorted(positions)


def test_body_stays_short_enough_to_read_every_run(body: str) -> None:
    assert len(body.split()) < 1100 and len(body.splitlines()) < 110


def test_plugin_and_marketplace_manifests() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    plugin = _json(REPO / ".claude-plugin" / "plugin.json")
    assert plugin["name"] == "debug-training-logs" and plugin["version"] == version
    market = _json(REPO / ".claude-plugin" / "marketplace.json")
    plugins = market["plugins"]
    assert isinstance(plugins, list) and len(plugins) == 1
    assert plugins[0]["name"] == plugin["name"] and plugins[0]["source"] == "./"
    assert plugins[0]["version"] == version


def test_bundled_server_starts_through_the_launcher() -> None:
    servers = _json(REPO / ".mcp.json")["mcpServers"]
    assert isinstance(servers, dict)
    config = servers["debug-training-logs"]
    assert config["command"] == "${CLAUDE_PLUGIN_ROOT}/scripts/serve.sh"
    launcher = REPO / "scripts" / "serve.sh"
    assert launcher.is_file() and os.access(launcher, os.X_OK)

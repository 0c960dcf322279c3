"""The investigation protocol as the MCP prompt ``debug-training-logs`` (``logs_dir``, optional ``ais_dir``).

Clients without Claude Code skills (Cursor, VS Code, Claude Desktop, the Inspector) get the same protocol the skill
gives Claude Code. The text is read from ``SKILL.md`` inside this package: a byte-for-byte copy of the repository's
canonical ``SKILL.md`` (tests keep the copies identical), shipped as package data so a non-editable install has it.
The skill's argument placeholders are filled with the prompt's arguments; its frontmatter supplies the description.
This module must not import the tools: it only renders text.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import Message, Prompt, UserMessage
from pydantic import Field

PROMPT_NAME = "debug-training-logs"
PROMPT_TITLE = "Debug a failed distributed training job"
LOGS_PLACEHOLDER = "$ARGUMENTS[0]"
AIS_PLACEHOLDER = "$ARGUMENTS[1]"
NO_AIS_DIR = "none given"
CLAUDE_CODE_ONLY_HINT = " (blank or an unexpanded placeholder means none were given)"
"""Claude Code leaves a placeholder without an argument as literal text; the skill says what that means.
The prompt knows whether ``ais_dir`` was given, so it drops the hint."""


@cache
def skill_text() -> str:
    """The packaged SKILL.md, frontmatter included."""
    return resources.files(__package__).joinpath("SKILL.md").read_text(encoding="utf-8")


def split_skill(text: str) -> tuple[dict[str, str], str]:
    """(single-line frontmatter fields, body) of a SKILL.md; list-valued fields map to ''."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise ValueError("SKILL.md does not start with a '---' frontmatter block")
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---"), None)
    if end is None:
        raise ValueError("SKILL.md frontmatter is not closed by '---'")
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        if line[:1].isspace() or ":" not in line:
            continue  # items of a YAML list (allowed-tools)
        key, _, value = line.partition(":")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key.strip()] = value
    return fields, "".join(lines[end + 1 :]).lstrip("\n")


def render_protocol(logs_dir: str, ais_dir: str | None = None) -> str:
    """The skill body with its placeholders filled in, as the prompt's user message."""
    _, body = split_skill(skill_text())
    body = body.replace(CLAUDE_CODE_ONLY_HINT, "")
    return body.replace(LOGS_PLACEHOLDER, logs_dir).replace(AIS_PLACEHOLDER, ais_dir or NO_AIS_DIR)


def debug_training_logs(
    logs_dir: Annotated[
        str, Field(min_length=1, description="Directory with every rank's worker logs (all nodes' stderr/stdout).")
    ],
    ais_dir: Annotated[
        str | None, Field(description="Directory with AIStore proxy/target daemon logs, if you have them.")
    ] = None,
) -> list[Message]:
    """Find the root cause of a failed distributed training job with this server's tools (the investigation
    protocol: inventory, all-rank grep, NCCL state, storage, timeline, cross-check, verification, report)."""
    return [UserMessage(render_protocol(logs_dir, ais_dir))]


def register(server: MCPServer) -> None:
    """Add the ``debug-training-logs`` prompt to ``server``."""
    fields, _ = split_skill(skill_text())
    server.add_prompt(
        Prompt.from_function(
            debug_training_logs,
            name=PROMPT_NAME,
            title=PROMPT_TITLE,
            description=fields.get("description") or None,
        )
    )

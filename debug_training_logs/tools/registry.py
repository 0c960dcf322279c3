"""The single registry of tools that both the MCP server and the CLI read.

A tool is one module in ``debug_training_logs/tools/`` with a module-level ``SPEC = ToolSpec(...)``: a plain function
with flat, annotated parameters (``Annotated[T, Field(description=...)]``) that returns a pydantic model. Its
docstring is its description in MCP and its help in the CLI. Adding a tool means adding one module.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

# The order an agent should meet the tools in (others follow alphabetically).
PREFERRED_ORDER = (
    "job_overview",
    "grep_all_ranks",
    "nccl_state_table",
    "fetch_ais_logs",
    "ais_counter_deltas",
    "align_timezones",
    "timeline",
    "diagnose",
    "verify_conclusion",
)


@dataclass(frozen=True)
class ToolSpec:
    """How one tool is exposed."""

    func: Callable[..., BaseModel]
    cli_name: str
    """The CLI subcommand (``grep``, ``nccl``, ``ais-deltas`` ...)."""
    title: str
    positional: tuple[str, ...] = ()
    """Parameters the CLI takes positionally, in order (``logs_dir``, ``ais_dir``)."""
    read_only: bool = True
    open_world: bool = False
    idempotent: bool = True
    destructive: bool = False
    render: Callable[[Any], str] | None = None
    """Human-readable CLI rendering of the result (default: the summary and an indented outline)."""
    mcp_only: tuple[str, ...] = ()
    """Parameters the CLI does not offer (it has its own way, e.g. ``analyze --html FILE``); they keep defaults."""

    @property
    def name(self) -> str:
        """The MCP tool name: the function's name."""
        return self.func.__name__

    @property
    def description(self) -> str:
        return inspect.getdoc(self.func) or ""


@cache
def all_tools() -> tuple[ToolSpec, ...]:
    """Every tool module's ``SPEC``, in :data:`PREFERRED_ORDER`."""
    import debug_training_logs.tools as pkg

    specs: list[ToolSpec] = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_") or info.name == "registry":
            continue
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if isinstance(spec, ToolSpec):
            specs.append(spec)

    def key(s: ToolSpec) -> tuple[int, str]:
        return (PREFERRED_ORDER.index(s.name) if s.name in PREFERRED_ORDER else len(PREFERRED_ORDER), s.name)

    return tuple(sorted(specs, key=key))


def tool_by_name(name: str) -> ToolSpec | None:
    return next((s for s in all_tools() if s.name == name or s.cli_name == name), None)

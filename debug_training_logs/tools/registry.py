"""The single registry of tools that both the MCP server and the CLI read.

A tool is one module in ``debug_training_logs/tools/`` with a module-level ``SPEC = ToolSpec(...)``: a plain function
with flat, annotated parameters (``Annotated[T, Field(description=...)]``) that returns a pydantic model. Its
docstring is its description in MCP and its help in the CLI. Adding a tool means adding one module.

Both front ends call a tool through :meth:`ToolSpec.call`, which adds the ``max_tokens`` parameter every tool takes
and holds the result to that budget (``tools/budget.py``): the CLI's ``--json`` and MCP's structured content are the
same budgeted result.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, get_type_hints

from pydantic import BaseModel, TypeAdapter

from debug_training_logs.tools import budget

CLI_NAMES: dict[str, str] = {
    "job_overview": "overview",
    "grep_all_ranks": "grep",
    "nccl_state_table": "nccl",
    "fetch_ais_logs": "fetch-ais",
    "ais_counter_deltas": "ais-deltas",
    "align_timezones": "align",
    "timeline": "timeline",
    "diagnose": "diagnose",
    "verify_conclusion": "verify",
    "job_history": "history",
}
"""Light metadata: tool name (= its module in ``tools/``) -> CLI subcommand, in the order an agent should meet them.

The CLI lists its commands from this without importing any tool (a tool's module pulls in its whole analysis: a
command line must not pay for the other eight); a test holds it equal to what :func:`all_tools` finds, so a new tool
module also needs its line here to be a CLI command."""

# The order an agent should meet the tools in (others follow alphabetically).
PREFERRED_ORDER = tuple(CLI_NAMES)


@dataclass(frozen=True, repr=False, eq=False)
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
    follow_up: budget.FollowUp | None = None
    """For a list the budget shortened: the tool's own paging/filter arguments that show the rest."""
    amend: budget.Amend | None = None
    """After the budget shortened a list: fix the fields that depend on its length (``next_offset`` ...)."""

    @property
    def name(self) -> str:
        """The MCP tool name: the function's name."""
        return self.func.__name__

    @property
    def description(self) -> str:
        return inspect.getdoc(self.func) or ""

    @property
    def result_model(self) -> type[BaseModel]:
        """The result type as both front ends return it: the function's model plus its ``budget`` field."""
        model = get_type_hints(self.func)["return"]
        assert isinstance(model, type) and issubclass(model, BaseModel)
        return budget.budgeted_model(model)

    @property
    def signature(self) -> inspect.Signature:
        """The function's parameters plus ``max_tokens`` (what MCP publishes and the CLI parses)."""
        sig = inspect.signature(self.func)
        extra = inspect.Parameter(
            "max_tokens", inspect.Parameter.KEYWORD_ONLY, default=budget.DEFAULT_MAX_TOKENS, annotation=budget.MaxTokens
        )
        return sig.replace(parameters=[*sig.parameters.values(), extra], return_annotation=self.result_model)

    @property
    def hints(self) -> dict[str, Any]:
        """Type hints of :attr:`signature`'s parameters (with ``Annotated`` metadata)."""
        return {**get_type_hints(self.func, include_extras=True), "max_tokens": budget.MaxTokens}

    def call(self, max_tokens: int = budget.DEFAULT_MAX_TOKENS, **arguments: Any) -> BaseModel:
        """Run the tool and hold its result to ``max_tokens`` (arguments already validated)."""
        return self.fit(self.func(**arguments), max_tokens, **arguments)

    def fit(self, result: BaseModel, max_tokens: int = budget.DEFAULT_MAX_TOKENS, **arguments: Any) -> BaseModel:
        """Hold a result this tool made (with ``arguments``) to ``max_tokens``, as :meth:`call` does."""
        defaults = {
            name: p.default
            for name, p in inspect.signature(self.func).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        given = TypeAdapter(dict[str, Any]).dump_python(budget.non_default_arguments(arguments, defaults), mode="json")
        if max_tokens != budget.DEFAULT_MAX_TOKENS:
            given["max_tokens"] = max_tokens
        data = budget.fit(
            result.model_dump(mode="json"),
            call=budget.NextCall(tool=self.name, arguments=given),
            max_tokens=max_tokens,
            follow_up=self.follow_up,
            amend=self.amend,
        )
        return self.result_model.model_validate(data)


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
    """The tool whose MCP name or CLI subcommand is ``name``; imports only that tool's module when it is listed in
    :data:`CLI_NAMES`."""
    module = next((tool for tool, cli_name in CLI_NAMES.items() if name in (tool, cli_name)), None)
    if module is not None:
        spec = getattr(importlib.import_module(f"debug_training_logs.tools.{module}"), "SPEC", None)
        if isinstance(spec, ToolSpec) and name in (spec.name, spec.cli_name):
            return spec
    return next((s for s in all_tools() if s.name == name or s.cli_name == name), None)

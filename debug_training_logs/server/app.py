"""Build the MCP server from the tool registry.

Each registry tool (a sync function) is wrapped in an async function with the same parameters (plus ``max_tokens``
and the MCP ``Context``): the wrapper runs the tool in a worker thread with the server's allowed roots and a progress
reporter installed, and turns :class:`UserInputError` into ``ToolError`` so the model reads what to fix.

What a result carries, and why:

* ``structuredContent``: the tool's typed result held to its token budget (``ToolSpec.call``), exactly what the
  CLI's ``--json`` prints; the tool's ``outputSchema`` describes it (with its ``budget`` field).
* ``content``: one text block, a compact readable rendering of the same result (``render.py``), NOT the JSON
  repeated. The MCP spec (2025-06-18 to 2026-07-28) says a tool with structured content SHOULD also return it
  serialised in a text block "for backwards compatibility"; its own examples also show a readable sentence there.
  We chose the rendering because the only readers of ``content`` are clients that hand it to a model (a client that
  wants data reads ``structuredContent``), and a model reads an outline better than escaped JSON, in fewer tokens.
* Claude Code (2.1.330, observed offline in tests/test_e2e_claude.py) ignores ``content`` when
  ``structuredContent`` is present and gives the model ``JSON.stringify(structuredContent)``: so the structured
  result itself must read well (``summary`` first, ``budget.omitted`` with ready follow-up calls) and is what the
  budget measures.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, ContentBlock, ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel

from debug_training_logs import __version__, paths, progress
from debug_training_logs.analysis.shared_scan import standard_consumers
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs import scan_cache
from debug_training_logs.logs.discovery import one_walk
from debug_training_logs.models import build_deferred
from debug_training_logs.printers import store
from debug_training_logs.render import render_text
from debug_training_logs.tools.registry import ToolSpec, all_tools

logger = logging.getLogger(__name__)

SERVER_NAME = "debug-training-logs"
INSTRUCTIONS = (
    "Finds the root cause of a failed distributed training job (NCCL timeouts, data-loading stalls, storage errors) "
    "from every rank's logs and optional AIStore daemon logs: start with job_overview or diagnose, then "
    "grep_all_ranks, nccl_state_table and the AIS tools. Before presenting any conclusion, pass it to "
    "verify_conclusion and do not present a rejected one: fix what the failed checks say and verify again."
)


class _MonotoneProgress:
    """Forwards progress to MCP from a worker thread; MCP requires increasing values across a tool's several scans."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.base = 0.0
        self.last_raw = 0.0

    def __call__(self, done: float, total: float | None, message: str | None) -> None:
        if done <= 0:  # a phase's "starting" notice: nothing done yet, and MCP wants every value above the last
            return
        if done < self.last_raw:
            self.base += self.last_raw
        self.last_raw = done
        value = self.base + done
        try:
            anyio.from_thread.run(
                self.ctx.report_progress, value, None if total is None else self.base + total, message
            )
        except Exception:  # progress is best effort; never fail a tool because a notification could not be sent
            logger.debug("progress notification failed", exc_info=True)


def _report_link(result: BaseModel) -> list[ContentBlock]:
    """A result that made an HTML report (``html_report_uri``) also carries it as a resource link."""
    uri = getattr(result, "html_report_uri", None)
    if not uri:
        return []
    return [
        ResourceLink(
            type="resource_link",
            uri=uri,
            name=uri.rsplit("/", 1)[-1],
            title="HTML report",
            description="Per-rank state grid, timeline, AIS counters, step time/memory, verification (for a browser).",
            mime_type="text/html",
        )
    ]


def to_call_result(spec: ToolSpec, result: BaseModel) -> CallToolResult:
    """The MCP result of a (budgeted) tool result: the readable text and the structured content (see above), plus a
    resource link when the tool made an HTML report."""
    return CallToolResult(
        content=[TextContent(type="text", text=render_text(spec, result)), *_report_link(result)],
        structured_content=result.model_dump(mode="json"),
    )


def _wrap(spec: ToolSpec, roots: tuple[Path, ...]) -> Any:
    hints = spec.hints
    sig = spec.signature
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    # CallToolResult carries our own text block; the model after it is the outputSchema the SDK validates against.
    return_type = Annotated[CallToolResult, spec.result_model]

    async def call(**kwargs: Any) -> CallToolResult:
        ctx: Context = kwargs.pop("ctx")
        reporter = _MonotoneProgress(ctx)

        def run() -> BaseModel:
            with paths.restricted_to(list(roots)), progress.reporting_to(reporter), one_walk():
                return spec.call(**kwargs)

        try:
            result = await anyio.to_thread.run_sync(run)
        except UserInputError as exc:
            raise ToolError(str(exc)) from exc
        return to_call_result(spec, result)

    call.__name__ = spec.name
    call.__doc__ = spec.description
    call.__signature__ = sig.replace(parameters=params, return_annotation=return_type)  # type: ignore[attr-defined]
    call.__annotations__ = {**{k: v for k, v in hints.items() if k != "return"}, "ctx": Context, "return": return_type}
    return call


def create_server(roots: Sequence[str | os.PathLike[str]] | None = None) -> MCPServer:
    """The MCP server with every registry tool; tools may access only paths below ``roots`` (default: the cwd)."""
    allowed = tuple(Path(r).expanduser().resolve() for r in (roots or [Path.cwd()]))
    server = MCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
    for spec in all_tools():
        server.add_tool(
            _wrap(spec, allowed),
            name=spec.name,
            title=spec.title,
            description=spec.description,
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec.destructive,
                idempotent_hint=spec.idempotent,
                open_world_hint=spec.open_world,
            ),
            structured_output=True,
        )
    _register_extras(server)
    build_deferred()  # every result model built now, not on the first call of each tool (a client waits on that)
    return server


def _register_reports(server: MCPServer) -> None:
    """The HTML reports ``diagnose(html_report=true)`` made in this process, as ``text/html`` resources."""

    @server.resource(
        store.URI_PREFIX + "{name}",
        name="html_report",
        title="HTML report of a diagnosis",
        description="A report diagnose made with html_report=true (kept in memory; the last few are kept).",
        mime_type="text/html",
    )
    def html_report(name: str) -> str:
        page = store.get(name)
        if page is None:
            raise ResourceError(
                f"No report {name!r} in this server (reports are kept in memory, the last {store.REPORTS_KEPT}): "
                "run diagnose with html_report=true again."
            )
        return page


def _register_extras(server: MCPServer) -> None:
    """Prompts and resources beside the tools (the investigation protocol as an MCP prompt), when present."""
    _register_reports(server)
    if importlib.util.find_spec("debug_training_logs.server.prompts") is None:
        return
    importlib.import_module("debug_training_logs.server.prompts").register(server)


def run(transport: str, host: str, port: int, roots: Sequence[str] | None, http_policy: Any | None = None) -> None:
    """Serve over stdio (default) or streamable HTTP at ``http://HOST:PORT/mcp`` (``http_policy``: an
    :class:`~debug_training_logs.server.http.HttpPolicy`; default the loopback one for ``host``)."""
    from debug_training_logs.server import http

    policy = http_policy if http_policy is not None else http.http_policy(host, port) if transport != "stdio" else None
    server = create_server(roots)
    # one read of a job's files for the agent's whole sequence of calls (overview, grep, nccl, timeline, diagnose,
    # verify): every scan also runs the other tools' consumers and keeps the results (logs/scan_cache.py)
    scan_cache.set_default_companions(standard_consumers())
    logger.info("serving %d tools over %s; allowed roots: %s", len(all_tools()), transport, roots or [os.getcwd()])
    if policy is None:
        server.run()
    else:
        http.serve(server, policy)

"""Build the MCP server from the tool registry.

Each registry tool (a sync function) is wrapped in an async function with the same parameters plus the MCP
``Context``: the wrapper runs the tool in a worker thread with the server's allowed roots and a progress reporter
installed, and turns :class:`UserInputError` into ``ToolError`` so the model reads what to fix.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_type_hints

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from debug_training_logs import __version__, paths, progress
from debug_training_logs.errors import UserInputError
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


def _wrap(spec: ToolSpec, roots: tuple[Path, ...]) -> Any:
    func = spec.func
    hints = get_type_hints(func, include_extras=True)
    sig = inspect.signature(func)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    return_type = hints["return"]

    async def call(**kwargs: Any) -> BaseModel:
        ctx: Context = kwargs.pop("ctx")
        reporter = _MonotoneProgress(ctx)

        def run() -> BaseModel:
            with paths.restricted_to(list(roots)), progress.reporting_to(reporter):
                return func(**kwargs)

        try:
            return await anyio.to_thread.run_sync(run)
        except UserInputError as exc:
            raise ToolError(str(exc)) from exc

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
    return server


def _register_extras(server: MCPServer) -> None:
    """Prompts and resources beside the tools (the investigation protocol as an MCP prompt), when present."""
    if importlib.util.find_spec("debug_training_logs.server.prompts") is None:
        return
    importlib.import_module("debug_training_logs.server.prompts").register(server)


def run(transport: str, host: str, port: int, roots: Sequence[str] | None, http_policy: Any | None = None) -> None:
    """Serve over stdio (default) or streamable HTTP at ``http://HOST:PORT/mcp`` (``http_policy``: an
    :class:`~debug_training_logs.server.http.HttpPolicy`; default the loopback one for ``host``)."""
    from debug_training_logs.server import http

    policy = http_policy if http_policy is not None else http.http_policy(host, port) if transport != "stdio" else None
    server = create_server(roots)
    logger.info("serving %d tools over %s; allowed roots: %s", len(all_tools()), transport, roots or [os.getcwd()])
    if policy is None:
        server.run()
    else:
        http.serve(server, policy)

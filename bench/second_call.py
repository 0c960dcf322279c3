"""A tool called again on the same directory in one server (issue 33: "a second tool call on the same directory in
one server answers in under 0.1 s").

    python bench/second_call.py [LOGS [AIS]] [--rounds 3]

One MCP server (``create_server`` with the shared scan's companions that ``server.app.run`` sets, driven by the
SDK's in-memory client as an agent's client drives it over stdio, the collector at ``serve``'s thresholds)
gets each call twice in a row: ``job_overview``, ``diagnose``, ``grep_all_ranks``, ``nccl_state_table``,
``timeline``, ``align_timezones`` (with AIS logs) and ``verify_conclusion`` of ``diagnose``'s conclusion. Printed:
the wall time of every first call (the first is the job's one scan, later tools read its results) with the server's
share of it, and of the best of ``--rounds`` repeats. The default is the 1,024-rank corpus of ``bench/realistic.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from mcp import Client  # noqa: E402

from debug_training_logs.analysis.shared_scan import standard_consumers  # noqa: E402
from debug_training_logs.collector import GC_THRESHOLDS  # noqa: E402
from debug_training_logs.logs import scan_cache  # noqa: E402
from debug_training_logs.logs.discovery import one_walk  # noqa: E402
from debug_training_logs.server import app  # noqa: E402
from debug_training_logs.server.app import create_server  # noqa: E402


def calls(logs: Path, ais: Path | None) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) of each call, in the order an agent following the skill makes them."""
    out: list[tuple[str, dict[str, Any]]] = [
        ("job_overview", {"logs_dir": str(logs)}),
        ("diagnose", {"logs_dir": str(logs), **({"ais_dir": str(ais)} if ais else {})}),
        ("grep_all_ranks", {"logs_dir": str(logs)}),
        ("nccl_state_table", {"logs_dir": str(logs)}),
        ("timeline", {"logs_dir": str(logs)}),
    ]
    if ais is not None:
        out.append(("align_timezones", {"logs_dir": str(logs), "ais_dir": str(ais)}))
    return out


SERVER: list[float] = []
"""The server's share of each call: the tool's run in its worker thread (the client's part, e.g. compiling a tool's
output schema to validate its first answer, is the rest of the wall time)."""


@contextlib.contextmanager
def _timed_walk() -> Iterator[None]:
    t0 = time.perf_counter()
    with _one_walk():
        yield
    SERVER.append(time.perf_counter() - t0)


_one_walk = one_walk
setattr(app, "one_walk", _timed_walk)  # noqa: B010 (mypy: app does not export one_walk; every tool call runs within it)


async def run(logs: Path, ais: Path | None, rounds: int) -> None:
    root = logs.parent
    gc.set_threshold(*GC_THRESHOLDS)  # as ``serve`` runs the collector
    scan_cache.set_default_companions(standard_consumers())  # as ``server.app.run`` does before serving
    async with Client(create_server([root])) as client:
        conclusion: dict[str, Any] | None = None
        for name, args in calls(logs, ais):
            t0 = time.perf_counter()
            res = await client.call_tool(name, args)
            first, server = time.perf_counter() - t0, SERVER[-1]
            if res.is_error:
                raise SystemExit(f"{name}: {res.content}")
            if name == "diagnose" and res.structured_content is not None:
                conclusion = res.structured_content["conclusion"]
            again = min([await _timed(client, name, args) for _ in range(rounds)])
            print(f"{name:18s} first {first:7.3f} s (server {server:.3f} s)   again {again:7.3f} s")
        if conclusion is not None:
            args = {"conclusion": conclusion}
            first = await _timed(client, "verify_conclusion", args)
            again = min([await _timed(client, "verify_conclusion", args) for _ in range(rounds)])
            print(f"{'verify_conclusion':18s} first {first:7.3f} s   again {again:7.3f} s")


async def _timed(client: Client, name: str, args: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    res = await client.call_tool(name, args)
    if res.is_error:
        raise SystemExit(f"{name}: {res.content}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="?", type=Path)
    ap.add_argument("ais", nargs="?", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.logs is None:
        from realistic import realistic_corpus

        logs, corpus_ais = realistic_corpus(REPO / "bench" / "out" / "real_1024", 1024, 1_000_000_000)
        ais: Path | None = corpus_ais
    else:
        logs, ais = args.logs.resolve(), (args.ais.resolve() if args.ais else None)
    asyncio.run(run(logs, ais, args.rounds))


if __name__ == "__main__":
    main()

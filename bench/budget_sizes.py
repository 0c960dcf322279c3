"""What each tool hands an MCP client on a big job: characters of text content and of structured content.

Generates (once per size, under --out) a data-stall job of ``--nodes`` x 8 ranks with the 4-daemon AIS cluster of
the same incident, then calls every tool through the real MCP client in memory and prints, per call, the length of
the text content and of the structured content as compact JSON (what Claude Code hands the model), plus the time.

    python bench/budget_sizes.py --nodes 128     # 1,024 ranks
    python bench/budget_sizes.py --nodes 1280    # 10,240 ranks (about 46 MB of logs)

Run it on an older commit (e.g. ``git stash; git checkout 27dfda4``) for the sizes before the token budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from debug_training_logs.server.app import create_server  # noqa: E402
from fixtures.ais_gen import write_ais_logs  # noqa: E402
from fixtures.worker_gen import JobSpec, generate  # noqa: E402


def job(out: Path, nodes: int) -> Path:
    root = out / f"ranks{nodes * 8}"
    if not (root / "logs").is_dir():
        generate(JobSpec(nodes=nodes, gpus_per_node=8), "data_stall", root / "logs", write_truth=False)
        write_ais_logs(root / "ais", "data_stall")
    return root


def calls(root: Path) -> list[tuple[str, dict[str, Any]]]:
    logs, ais = str(root / "logs"), str(root / "ais")
    return [
        ("job_overview", {"logs_dir": logs}),
        ("grep_all_ranks", {"logs_dir": logs}),
        ("nccl_state_table", {"logs_dir": logs}),
        ("ais_counter_deltas", {"ais_dir": ais}),
        ("align_timezones", {"logs_dir": logs, "ais_dir": ais}),
        ("timeline", {"logs_dir": logs, "ais_dir": ais}),
        ("diagnose", {"logs_dir": logs, "ais_dir": ais}),
    ]


async def measure(root: Path) -> None:
    async with Client(create_server([root]), raise_exceptions=True) as client:
        for name, args in calls(root):
            t0 = time.perf_counter()
            res = await client.call_tool(name, args)
            text = "".join(getattr(b, "text", "") for b in res.content)
            structured = json.dumps(res.structured_content, separators=(",", ":"), ensure_ascii=False)
            took = time.perf_counter() - t0
            print(
                f"{name:20s} text {len(text):8,d}  structured {len(structured):8,d}  {took:6.1f} s  error={res.is_error}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=128, help="Nodes of 8 ranks (default 128: 1,024 ranks).")
    parser.add_argument("--out", type=Path, default=Path("/tmp/dtl-budget-bench"), help="Where the jobs are written.")
    ns = parser.parse_args()
    root = job(ns.out, ns.nodes)
    print(f"{ns.nodes * 8:,} ranks, {sum(f.stat().st_size for f in (root / 'logs').iterdir()):,} bytes of worker logs")
    anyio.run(measure, root)


if __name__ == "__main__":
    main()

"""Every tool's answer stays readable at 1,024 and 10,240 ranks, measured as a client receives it (mcp.Client).

A data-stall job (rank 5 never enters the ALLREDUCE the others wait in) is generated and streamed to a temp dir at
both sizes, with the 4-daemon AIS cluster of the same incident (1 proxy, 3 targets). Each tool is called through
the real MCP client in memory; its text content and its structured content (as compact JSON: what Claude Code hands
the model) must stay under 8,000 tokens (28,000 characters at 3.5 per token), and the drill-down must reach every
row: paging through nccl_state_table reproduces the whole table.

Per-rank logs are the generator's small form (~4.5 KB per rank, ~46 MB at 10,240 ranks): the rank count is real,
the noise is not needed to grow the results.

The 10,240-rank run reads 46 MB of hit-dense logs: ~80 s on two idle cores (~3 min under load). It runs in every
suite, because a budget that holds at 1,024 ranks and breaks at 10,240 is exactly what this file is for.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.analysis import nccl_table
from debug_training_logs.server.app import create_server
from debug_training_logs.tools.budget import CHARS_PER_TOKEN, DEFAULT_MAX_TOKENS, chars_for, compact_json
from debug_training_logs.tools.registry import all_tools

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fixtures.ais_gen import write_ais_logs
from fixtures.worker_gen import JobSpec, generate

pytestmark = pytest.mark.anyio

LIMIT_TOKENS = 8000
LIMIT_CHARS = int(LIMIT_TOKENS * CHARS_PER_TOKEN)


@dataclass
class Job:
    ranks: int
    logs: Path
    ais: Path
    root: Path


def _job(tmp: Path, nodes: int) -> Job:
    generate(JobSpec(nodes=nodes, gpus_per_node=8), "data_stall", tmp / "logs", write_truth=False)
    write_ais_logs(tmp / "ais", "data_stall")
    return Job(nodes * 8, tmp / "logs", tmp / "ais", tmp)


@pytest.fixture(scope="module")
def job_1024(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return _job(tmp_path_factory.mktemp("ranks1024"), 128)


@pytest.fixture(scope="module")
def job_10240(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return _job(tmp_path_factory.mktemp("ranks10240"), 1280)


@pytest.fixture(scope="module")
def fake_ais() -> Iterator[str]:
    import fake_ais_server as fake  # tests/ is on sys.path under pytest

    nodes = [fake.FakeNode.typical("prx0WxYz", "proxy", "ais-proxy-0")]
    nodes += [fake.FakeNode.typical(f"tgt{i}AbCd", "target", f"ais-target-{i}") for i in range(3)]
    with ExitStack() as stack:
        yield stack.enter_context(fake.serve(fake.FakeAis(nodes)))


def _calls(job: Job, endpoint: str) -> list[tuple[str, dict[str, Any]]]:
    logs, ais = str(job.logs), str(job.ais)
    return [
        ("job_overview", {"logs_dir": logs}),
        ("grep_all_ranks", {"logs_dir": logs}),
        ("nccl_state_table", {"logs_dir": logs}),
        ("nccl_state_table", {"logs_dir": logs, "offset": 0, "limit": 100000}),
        ("fetch_ais_logs", {"dest_dir": str(job.root / "fetched"), "endpoint": endpoint, "timeout_s": 30}),
        ("ais_counter_deltas", {"ais_dir": ais}),
        ("ais_counter_deltas", {"ais_dir": ais, "limit": 10000, "start": "2026-05-21T13:00:00"}),
        ("align_timezones", {"logs_dir": logs, "ais_dir": ais}),
        ("timeline", {"logs_dir": logs, "ais_dir": ais, "limit": 500}),
        ("diagnose", {"logs_dir": logs, "ais_dir": ais}),
        ("job_history", {}),  # diagnose just recorded this job (the history at 10,000 jobs: test_history_tool)
        ("job_history", {"daemon": "ais-target-2"}),
    ]


async def _sizes(job: Job, endpoint: str) -> dict[str, tuple[int, int]]:
    """(text characters, structured characters as compact JSON) per call, every call checked on the way."""
    sizes: dict[str, tuple[int, int]] = {}
    results: dict[str, Any] = {}
    async with Client(create_server([job.root]), raise_exceptions=True) as client:
        calls = _calls(job, endpoint)
        for name, args in calls:
            res = await client.call_tool(name, args)
            text = "".join(getattr(b, "text", "") for b in res.content)
            assert res.is_error is False, f"{name}: {text[:2000]}"
            structured = compact_json(res.structured_content)
            sizes[f"{name} {json.dumps({k: v for k, v in args.items() if not k.endswith('_dir')})}"] = (
                len(text),
                len(structured),
            )
            budget = res.structured_content["budget"]
            assert budget["max_tokens"] == DEFAULT_MAX_TOKENS
            assert len(structured) <= chars_for(DEFAULT_MAX_TOKENS) < LIMIT_CHARS, (name, args, len(structured))
            assert len(text) <= chars_for(DEFAULT_MAX_TOKENS), (name, args, len(text))
            assert budget["estimated_tokens"] <= DEFAULT_MAX_TOKENS
            for omission in budget["omitted"]:  # every cut says what it left out and how to see it
                assert omission["shown"] < omission["total"] and omission["how"]
            results[name] = res.structured_content
        # The verdict and the conclusion are never shortened: verify_conclusion takes diagnose's as it is.
        assert results["diagnose"]["verdict"]["culprit_ranks"] == [5]
        res = await client.call_tool("verify_conclusion", {"conclusion": results["diagnose"]["conclusion"]})
        assert res.is_error is False and len(compact_json(res.structured_content)) <= LIMIT_CHARS
        assert res.structured_content["accepted"] is True, res.structured_content["summary"]
        sizes["verify_conclusion"] = (len(res.content[0].text), len(compact_json(res.structured_content)))  # type: ignore[union-attr]
    width = max(len(k) for k in sizes)
    print(f"\n{job.ranks:,} ranks: text / structured characters (budget {chars_for(DEFAULT_MAX_TOKENS):,})")
    for key, (t, s) in sizes.items():
        print(f"  {key:{width}s} {t:7,d} {s:7,d}")
    assert {k.split()[0] for k in sizes} == {spec.name for spec in all_tools()}
    return sizes


async def test_every_tool_fits_at_1024_ranks(job_1024: Job, fake_ais: str) -> None:
    await _sizes(job_1024, fake_ais)


async def test_every_tool_fits_at_10240_ranks(job_10240: Job, fake_ais: str) -> None:
    await _sizes(job_10240, fake_ais)


async def test_paging_through_nccl_state_table_reproduces_every_row(job_1024: Job) -> None:
    full = nccl_table.nccl_state_table(job_1024.logs, limit=10**9)
    order = {p.pg: i for i, p in enumerate(full.process_groups)}
    expected = [
        {"rank": r.rank, "pg": r.pg, "seq": r.seq, "last_enqueued": r.last_enqueued, "signal": r.signal, "line": r.line}
        for r in sorted(full.rows, key=lambda r: (order.get(r.pg, len(order)), r.rank))
    ]
    seen: list[dict[str, Any]] = []
    async with Client(create_server([job_1024.root]), raise_exceptions=True) as client:
        # The default view: the straggler's row in full, the other 1,023 as the PG majority.
        first = (await client.call_tool("nccl_state_table", {"logs_dir": str(job_1024.logs)})).structured_content
        assert first is not None and first["rows_view"] == "deviating" and [r["rank"] for r in first["rows"]] == [5]
        assert first["process_groups"][0]["majority"]["count"] == 1023
        args: dict[str, Any] = {"logs_dir": str(job_1024.logs), "offset": 0, "limit": 64}
        pages = 0
        while True:
            page = (await client.call_tool("nccl_state_table", args)).structured_content
            assert page is not None and page["rows_view"] == "page" and page["rows_offset"] == args["offset"]
            assert len(compact_json(page)) <= chars_for(DEFAULT_MAX_TOKENS)
            seen += [{k: r[k] for k in expected[0]} for r in page["rows"]]
            pages += 1
            if page["next_offset"] is None:
                break
            # The budget shortens a 64-row page; its next_offset (and the omission's next call) pick up after it.
            omitted = [o for o in page["budget"]["omitted"] if o["field"] == "rows"]
            if omitted:
                assert omitted[0]["next_call"]["arguments"]["offset"] == page["next_offset"]
            args = {**args, "offset": page["next_offset"]}
        by_rank = await client.call_tool("nccl_state_table", {"logs_dir": str(job_1024.logs), "ranks": "5,11,1000"})
    assert seen == expected and len(seen) == full.rows_total == 1024
    assert pages > 1024 // 64  # pages were shortened to fit the budget, and none was skipped
    assert by_rank.structured_content is not None
    assert [r["rank"] for r in by_rank.structured_content["rows"]] == [5, 11, 1000]

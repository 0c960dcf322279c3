"""One read of a job's files for an agent's sequence of tool calls (the scan-result cache and composite sinks)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.analysis.shared_scan import standard_consumers
from debug_training_logs.logs import scan_cache
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.server.app import create_server

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    res = await client.call_tool(tool, args)
    assert res.is_error is False, res.content
    assert res.structured_content is not None
    return res.structured_content


async def test_agent_sequence_reads_the_worker_files_once(tmp_path: Path, counted_scans: list[int]) -> None:
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "data_stall", job)
    logs, ais = str(job / "logs"), str(job / "ais")
    n_files = len(os.listdir(logs))
    scan_cache.set_default_companions(standard_consumers())  # what the server process does at start
    async with Client(create_server([tmp_path])) as client:  # type: ignore[arg-type]
        ov = await _call(client, "job_overview", {"logs_dir": logs})
        grep = await _call(client, "grep_all_ranks", {"logs_dir": logs})
        table = await _call(client, "nccl_state_table", {"logs_dir": logs})
        tl = await _call(client, "timeline", {"logs_dir": logs, "ais_dir": ais})
        d = await _call(client, "diagnose", {"logs_dir": logs, "ais_dir": ais})
        v = await _call(client, "verify_conclusion", {"conclusion": d["conclusion"]})
        assert counted_scans == [n_files]  # the first call read every file; the five after it read none
        assert ov["coverage"]["ranks_found"] == "0-15" and grep["coverage"] == ov["coverage"]
        assert table["straggler_ranks"] == [5] and d["verdict"]["culprit_ranks"] == [5] and v["accepted"]
        assert tl["events"]
        # a file that changes is read again (and only that one); the answers follow the new content
        victim = job / "logs" / sorted(os.listdir(logs))[0]
        with victim.open("a") as fh:
            fh.write("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
        grep2 = await _call(client, "grep_all_ranks", {"logs_dir": logs})
        assert counted_scans == [n_files, 1]
        assert grep2 != grep


async def test_without_companions_each_question_is_scanned_once(tmp_path: Path, counted_scans: list[int]) -> None:
    shutil.copytree(FIXTURES / "data_stall", tmp_path / "job")
    logs = str(tmp_path / "job" / "logs")
    async with Client(create_server([tmp_path])) as client:  # type: ignore[arg-type]
        for _ in range(2):
            await _call(client, "grep_all_ranks", {"logs_dir": logs})
            await _call(client, "nccl_state_table", {"logs_dir": logs})
        n = len(os.listdir(logs))
        assert counted_scans == [n, n]  # grep, then nccl (its own question); the repeats are cache hits
        await _call(client, "timeline", {"logs_dir": logs})
        assert counted_scans == [n, n, n]  # timeline's three questions in one pass (clock anchors were new)


@pytest.mark.parametrize("tool", ["analyze", "nccl", "grep", "timeline", "overview"])
def test_each_cli_tool_reads_a_single_attempt_job_once(
    tool: str,
    tmp_path: Path,
    counted_scans: list[int],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The launcher facts (attempts) ride in the tool's own pass: one read of every file, no second pass."""
    from debug_training_logs.cli import main
    from debug_training_logs.tools import _cache

    _cache.MEMO.drop(_cache.TOOL)
    caplog.set_level(logging.INFO, logger="debug_training_logs.progress")
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "data_stall", job)
    args = [tool, str(job / "logs")] + ([str(job / "ais")] if tool in ("analyze", "timeline") else [])
    main(["-v", *args, "--json"])
    assert counted_scans == [len(os.listdir(job / "logs"))]
    out = capsys.readouterr()
    phases = [r.getMessage() for r in caplog.records if r.getMessage().startswith("scanning ")]
    assert len(phases) == 1, phases  # `-v` logs the one worker scan
    if tool == "analyze":
        assert '"culprit_ranks": [\n      5\n    ]' in out.out and '"accepted": true' in out.out


async def test_in_the_server_the_attempts_come_from_the_first_scan(tmp_path: Path, counted_scans: list[int]) -> None:
    """The server's companions include the launcher consumer: nccl, timeline and diagnose after grep read nothing,
    although each of them splits the job into attempts."""
    shutil.copytree(FIXTURES / "data_stall", tmp_path / "job")
    logs, ais = str(tmp_path / "job" / "logs"), str(tmp_path / "job" / "ais")
    scan_cache.set_default_companions(standard_consumers())
    async with Client(create_server([tmp_path])) as client:  # type: ignore[arg-type]
        await _call(client, "grep_all_ranks", {"logs_dir": logs})
        await _call(client, "nccl_state_table", {"logs_dir": logs})
        await _call(client, "timeline", {"logs_dir": logs, "ais_dir": ais})
        await _call(client, "diagnose", {"logs_dir": logs, "ais_dir": ais})
    assert counted_scans == [len(os.listdir(logs))]


def test_a_restarted_job_needs_one_more_pass_only_for_the_chosen_attempt(counted_scans: list[int]) -> None:
    """With several attempts, the evidence sinks must see only the chosen attempt's lines: exactly one more pass
    (its launcher facts are filtered from the first pass by line)."""
    from debug_training_logs.analysis.evidence import gather_evidence

    logs = FIXTURES / "real_torch" / "restart" / "logs"
    ev = gather_evidence(find_sources(logs))
    assert ev.attempts is not None and ev.attempts.count == 2 and ev.attempt == 0
    n = len(os.listdir(logs))
    assert counted_scans == [n, n]


async def test_verify_after_diagnose_judges_the_evidence_diagnose_gathered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent verifies diagnose's verdict (and its own revisions): the evidence is gathered once per unchanged
    files and arguments; a changed AIS file, or another world size, means evidence gathered anew."""
    from debug_training_logs.tools import evidence_cache

    gathered: list[tuple[Any, ...]] = []
    real = evidence_cache.gather_evidence

    def gather(*a: Any) -> Any:
        gathered.append(a)
        return real(*a)

    monkeypatch.setattr(evidence_cache, "gather_evidence", gather)
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "data_stall", job)
    logs, ais = str(job / "logs"), str(job / "ais")
    async with Client(create_server([tmp_path])) as client:  # type: ignore[arg-type]
        d = await _call(client, "diagnose", {"logs_dir": logs, "ais_dir": ais})
        v1 = await _call(client, "verify_conclusion", {"conclusion": d["conclusion"]})
        v2 = await _call(client, "verify_conclusion", {"conclusion": {**d["conclusion"], "culprit_ranks": [3]}})
        assert len(gathered) == 1 and v1["accepted"] and not v2["accepted"]
        daemon = next(p for p in sorted((job / "ais").rglob("*")) if p.is_file() and p.suffix != ".gz")
        with daemon.open("a") as fh:
            fh.write("I 23:59:59.000000 one more line\n")
        await _call(client, "verify_conclusion", {"conclusion": d["conclusion"]})
        assert len(gathered) == 2
        await _call(client, "verify_conclusion", {"conclusion": {**d["conclusion"], "world_size": 32}})
        assert len(gathered) == 3

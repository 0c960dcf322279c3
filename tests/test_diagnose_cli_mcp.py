"""The two front ends: ``analyze``/``verify`` on the command line (subprocesses) and the MCP tools in memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.server.app import create_server

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DATA_STALL = FIXTURES / "data_stall"


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "debug_training_logs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def test_analyze_prints_the_report() -> None:
    p = cli("analyze", str(DATA_STALL / "logs"), str(DATA_STALL / "ais"))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("# Data-loading stall on one rank — culprit rank(s) 5")
    for section in ("## Job Details", "## Timeline Table", "## Root Cause Chain", "## Key Files",
                    "## Recommendations", "## Verification"):  # fmt: skip
        assert section in out
    assert "| Time (worker local) | UTC | Source | Ranks | Event |" in out
    assert "**Verification:** ACCEPTED" in out and "ACCEPTED: data_loading_stall" in out
    assert "aistarget.ais-target-2.INFO.0521-130009.1" in out


def test_analyze_json_is_the_model() -> None:
    p = cli("analyze", str(FIXTURES / "cuda_oom" / "logs"), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"]["category"] == "cuda_oom" and d["verdict"]["culprit_ranks"] == [3]
    assert d["verification"]["accepted"] is True
    assert set(d) >= {"summary", "job", "verdict", "timeline", "root_cause_chain", "key_files", "recommendations",
                      "verification", "coverage"}  # fmt: skip


def _conclusion(tmp_path: Path, **kw: Any) -> Path:
    data = {"logs_dir": str(DATA_STALL / "logs"), **kw}
    path = tmp_path / "conclusion.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_verify_accepts_and_rejects(tmp_path: Path) -> None:
    good = _conclusion(tmp_path, category="data_loading_stall", culprit_ranks=[5])
    p = cli("verify", str(good), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["accepted"] is True
    bad = json.dumps({"logs_dir": str(DATA_STALL / "logs"), "category": "data_loading_stall", "culprit_ranks": [11]})
    p = cli("verify", "-", "--json", stdin=bad)
    assert p.returncode == 0, p.stderr  # the analysis ran: a rejection is a result, not an error
    v = json.loads(p.stdout)
    assert v["accepted"] is False
    assert any(c["rule"] == "straggler_consistency" and c["status"] == "failed" for c in v["checks"])
    p = cli("verify", str(good))
    assert p.returncode == 0 and p.stdout.startswith("ACCEPTED") and "[   passed] coverage:" in p.stdout


def test_verify_bad_input_is_exit_2(tmp_path: Path) -> None:
    p = cli("verify", str(_conclusion(tmp_path, category="data_loading_stall", culprit_ranks=[5],
                                      logs_dir=str(tmp_path / "nope"))))  # fmt: skip
    assert p.returncode == 2 and "does not exist" in p.stderr
    p = cli("verify", str(_conclusion(tmp_path, category="not_a_category", culprit_ranks=[])))
    assert p.returncode == 2 and "category" in p.stderr


pytestmark = pytest.mark.anyio


async def test_mcp_diagnose_and_verify_in_memory() -> None:
    async with Client(create_server([FIXTURES])) as client:
        res = await client.call_tool("diagnose", {"logs_dir": str(FIXTURES / "rank_exception" / "logs")})
        assert res.is_error is False, res.content
        d = res.structured_content
        assert d is not None and d["verdict"]["category"] == "rank_crash" and d["verdict"]["culprit_ranks"] == [13]
        res = await client.call_tool("verify_conclusion", {"conclusion": d["conclusion"]})
        assert res.is_error is False and res.structured_content is not None
        assert res.structured_content["accepted"] is True
        wrong = {**d["conclusion"], "culprit_ranks": [0]}  # torchrun's "Root Cause" on the waiting node
        res = await client.call_tool("verify_conclusion", {"conclusion": wrong})
        assert res.structured_content is not None and res.structured_content["accepted"] is False


async def test_mcp_paths_outside_the_roots_are_refused(tmp_path: Path) -> None:
    async with Client(create_server([tmp_path])) as client:
        res = await client.call_tool(
            "verify_conclusion",
            {"conclusion": {"logs_dir": str(DATA_STALL / "logs"), "category": "no_failure", "culprit_ranks": []}},
        )
        assert res.is_error and "outside the directories" in res.content[0].text  # type: ignore[union-attr]


async def test_each_call_walks_each_directory_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool call's cache keys, its scan and the tools it calls inside share one walk of each directory; the next
    call walks again and sees a file added in between."""
    import shutil

    from debug_training_logs.logs import discovery

    shutil.copytree(FIXTURES / "data_stall", tmp_path / "job")
    logs, ais = tmp_path / "job" / "logs", tmp_path / "job" / "ais"
    walks: list[str] = []
    real = discovery._walk
    monkeypatch.setattr(discovery, "_walk", lambda base, archives: walks.append(base.name) or real(base, archives))
    async with Client(create_server([tmp_path])) as client:
        for tool, args in (
            ("nccl_state_table", {"logs_dir": str(logs)}),
            ("timeline", {"logs_dir": str(logs), "ais_dir": str(ais)}),
            ("align_timezones", {"logs_dir": str(logs), "ais_dir": str(ais)}),
            ("diagnose", {"logs_dir": str(logs), "ais_dir": str(ais)}),
        ):
            walks.clear()
            res = await client.call_tool(tool, args)
            assert res.is_error is False, res.content
            assert sorted(walks) == sorted({"logs", *(["ais"] if "ais_dir" in args else [])}), tool
        (logs / "late.log").write_text("[rank0]:[E1106 10:00:00.000000000 x.cpp:1] one more line\n")
        res = await client.call_tool("job_overview", {"logs_dir": str(logs)})
        assert res.structured_content is not None and "late.log" in str(res.structured_content)

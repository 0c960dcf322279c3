"""The history from the outside: the ``history`` command and ``analyze --no-history`` as a person runs them, the
answer held to its token budget with the call that shows the rest, and a diagnosis that still runs when the history
cannot be written (damaged file, PostgreSQL without a driver, a history file inside the log directory).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from debug_training_logs.history.location import Location
from debug_training_logs.history.store import open_store
from debug_training_logs.history.types import Implicated
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.registry import tool_by_name
from tests.test_history_store import a_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CUDA_OOM = FIXTURES / "cuda_oom" / "logs"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "debug_training_logs", *args], capture_output=True, text=True, timeout=300, check=False
    )


def fill(where: Location, jobs: int, node: str = "gpu-r07-n075") -> None:
    store = open_store(where)
    assert store is not None
    store.db.run("PRAGMA synchronous = OFF")  # a test's file: no need to wait for the disk after each job
    try:
        for i in range(jobs):
            store.record(
                a_record(
                    f"slurm:{9000 + i}",
                    failed_at=f"2026-06-{1 + i % 28:02d}T{i % 24:02d}:00:00",
                    implicated=(Implicated("node", node, "culprit", str(i % 8)),),
                )
            )
    finally:
        store.close()


def test_the_history_command_prints_the_tables_and_json(history_file: Path) -> None:
    fill(Location("sqlite", str(history_file)), 3)
    text = cli("history")
    assert text.returncode == 0, text.stderr
    assert "gpu-r07-n075" in text.stdout and "3/3" in text.stdout and "Recurring signatures" in text.stdout
    data = json.loads(cli("history", "--node", "gpu-r07-n075", "--json").stdout)
    assert [j["job"] for j in data["jobs"]] == ["9002", "9001", "9000"] and data["budget"]["omitted"] == []


def test_a_long_answer_is_cut_to_the_budget_with_the_next_call(history_file: Path) -> None:
    fill(Location("sqlite", str(history_file)), 120)
    spec = tool_by_name("job_history")
    assert spec is not None
    page = spec.call(max_tokens=1000, node="gpu-r07-n075", limit=500).model_dump(mode="json")
    cut = page["budget"]["omitted"][0]
    shown = len(page["jobs"])
    assert page["budget"]["estimated_tokens"] <= 1000 and cut["field"] == "jobs" and cut["total"] == 120
    assert cut["next_call"]["arguments"]["offset"] == shown == page["next_offset"]
    assert page["jobs_truncated"] == 120 - shown
    overview = spec.call(max_tokens=1000).model_dump(mode="json")  # one offender with 120 jobs: 8 listed
    top = overview["repeat_offenders"][0]
    assert top["failures"] == 50 and len(top["jobs"]) == 5 and top["jobs_truncated"] == 45


def test_no_history_leaves_it_untouched_and_off_says_so(history_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = cli("analyze", str(CUDA_OOM), "--no-history", "--json")
    assert ran.returncode == 0 and json.loads(ran.stdout)["history"] is None
    assert not history_file.exists()
    empty = cli("history")
    assert empty.returncode == 0 and "No job history yet" in empty.stdout and not history_file.exists()
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", "off")
    assert diagnose(str(CUDA_OOM)).history is None
    assert "history is off" in cli("history").stdout


def test_analyze_records_and_a_second_analysis_updates_the_record(history_file: Path, tmp_path: Path) -> None:
    for _ in range(2):
        ran = cli("analyze", str(CUDA_OOM), "--json", "--html", str(tmp_path / "report.html"))
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["history"]["recorded"] is True
    store = open_store(Location("sqlite", str(history_file)))
    assert store is not None
    try:
        assert store.rows("SELECT job_key FROM jobs") == [("slurm:48213",)]  # error-48213-N.out
    finally:
        store.close()


def test_a_damaged_history_does_not_stop_the_diagnosis(history_file: Path) -> None:
    history_file.write_bytes(b"\x00garbage" * 512)
    d = diagnose(str(CUDA_OOM))
    assert d.verdict.category == "cuda_oom" and d.verdict.culprit_ranks == [3]
    assert d.history is not None and d.history.recorded is False
    assert d.history.error is not None and "damaged or not a SQLite database" in d.history.error
    listing = cli("history")
    assert listing.returncode == 2 and "damaged or not a SQLite database" in listing.stderr


def test_a_postgres_history_without_driver_does_not_stop_the_diagnosis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", "postgresql://team:hunter2@127.0.0.1:1/history")
    monkeypatch.setitem(sys.modules, "psycopg", None)
    d = diagnose(str(CUDA_OOM))
    assert d.verdict.category == "cuda_oom" and d.history is not None and d.history.error is not None
    assert "no PostgreSQL driver" in d.history.error
    assert "hunter2" not in json.dumps(d.model_dump(mode="json"))


def test_the_history_is_never_written_into_a_log_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import write_small_job

    logs = write_small_job(tmp_path / "logs")
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", str(logs / "history.sqlite"))
    d = diagnose(str(logs))
    assert d.history is not None and d.history.recorded is False and "inside the log directory" in str(d.history.error)
    assert sorted(p.name for p in logs.iterdir()) == ["error-777-0.out", "error-777-1.out"]


@pytest.mark.anyio
async def test_every_answer_on_a_teams_history_fits_the_default_budget(
    history_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's history after months: 3,000 jobs on 2,000 nodes, a dozen of them bad, 13 categories (the
    benchmark's generator; bench/history.py times 10,000)."""
    from mcp import Client

    from debug_training_logs.server.app import create_server
    from debug_training_logs.tools.budget import DEFAULT_MAX_TOKENS, chars_for, compact_json

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from history import synthetic  # the benchmark's generator (bench/history.py)

    store = open_store(Location("sqlite", str(history_file)))
    assert store is not None
    store.db.run("PRAGMA synchronous = OFF")
    try:
        for rec in synthetic(3_000):
            store.record(rec)
        bad = store.rows("SELECT name FROM implicated GROUP BY name ORDER BY COUNT(*) DESC LIMIT 1")[0][0]
        sig = store.rows("SELECT signature FROM jobs GROUP BY signature ORDER BY COUNT(*) DESC LIMIT 1")[0][0]
    finally:
        store.close()
    calls: list[dict[str, object]] = [
        {},
        {"last": 10_000},
        {"last": 10_000, "period": "day", "min_failures": 1, "limit": 500},
        {"node": bad, "limit": 500},
        {"daemon": "ais-target-3"},
        {"signature": sig, "limit": 500},
    ]
    answers = []
    async with Client(create_server([FIXTURES]), raise_exceptions=True) as client:
        for args in calls:
            res = await client.call_tool("job_history", args)
            assert res.is_error is False and res.structured_content is not None, res.content
            data = res.structured_content
            assert len(compact_json(data)) <= chars_for(DEFAULT_MAX_TOKENS), args
            assert len(res.content[0].text) <= chars_for(DEFAULT_MAX_TOKENS), args  # type: ignore[union-attr]
            for omission in data["budget"]["omitted"]:
                assert omission["shown"] < omission["total"] and omission["how"], args
            answers.append(data)
    overview = answers[1]
    assert overview["jobs_recorded"] == 3_000 and overview["window"] == overview["failures_recorded"]
    assert overview["repeat_offenders"][0]["name"] == bad and overview["repeat_offenders_truncated"] > 0

"""grep_all_ranks as a user meets it: the straggler stands out, counts are exact, output stays small, errors are clear."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
from debug_training_logs.errors import UserInputError
from debug_training_logs.server.app import create_server
from debug_training_logs.tools.grep_all_ranks import grep_all_ranks
from tests.test_scan import _reference

REPO = Path(__file__).resolve().parent.parent


def _generate(out: Path, *args: str) -> Path:
    from fixtures import generate

    assert generate.main(["--out", str(out), *args]) in (0, None)
    return out


@pytest.fixture(scope="module")
def data_stall(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checked_in = REPO / "fixtures" / "data_stall" / "logs"
    if checked_in.is_dir() and any(checked_in.iterdir()):
        return checked_in
    return _generate(tmp_path_factory.mktemp("ds") / "logs", "--scenario", "data_stall")


def test_data_stall_points_at_the_straggler(data_stall: Path) -> None:
    res = grep_all_ranks(str(data_stall))
    by = {p.name: p for p in res.patterns}
    assert by["loader_stop"].ranks_with_hits == "5"
    only = [o for o in res.outliers if o.kind == "only_few_ranks"]
    missing = [o for o in res.outliers if o.kind == "missing_on_few_ranks"]
    assert any("AISBatchLoaderError" in o.template and o.ranks == "5" for o in only)
    assert any("Watchdog caught collective operation timeout" in o.template and o.ranks == "5" for o in missing)
    assert {o.ranks for o in res.outliers} == {"5"}
    assert "5" in res.summary
    first = by["nccl_timeout"].first
    assert first is not None and first.time is not None and ":" in first.time


def _worker_fixture_dirs() -> list[Path]:
    return sorted(p for p in (REPO / "fixtures").glob("*/logs") if p.is_dir())


@pytest.mark.parametrize("logs", _worker_fixture_dirs() or [None], ids=lambda p: p.parent.name if p else "none")
def test_per_file_counts_equal_the_reference_on_every_fixture(logs: Path | None, data_stall: Path) -> None:
    logs = logs or data_stall
    res = grep_all_ranks(str(logs), limit=500)
    regexes = tuple(g.regex for g in DEFAULT_PATTERNS)
    got = {(p.name, f.file): f.count for p in res.patterns for f in p.per_file}
    for path in sorted(logs.rglob("*")):
        if not path.is_file() or path.suffix == ".gz":
            continue
        rel = path.relative_to(logs).as_posix()
        ref = _reference(path, regexes)
        for g, hits in zip(DEFAULT_PATTERNS, ref, strict=True):
            if hits and (g.name, rel) in got:
                assert got[(g.name, rel)] == len(hits), (g.name, rel)
        totals = {p.name: p.total_hits for p in res.patterns}
        assert all(totals.get(g.name, 0) >= len(h) for g, h in zip(DEFAULT_PATTERNS, ref, strict=True))


def test_a_1024_rank_job_fits_in_8k_tokens(tmp_path: Path) -> None:
    logs = _generate(tmp_path / "logs", "--scenario", "data_stall", "--nodes", "128", "--gpus-per-node", "8")
    res = grep_all_ranks(str(logs))
    text = json.dumps(res.model_dump())
    assert len(text) / 4 < 8000, len(text) / 4
    assert res.coverage.ranks_found == "0-1023"
    assert any(o.ranks == "5" for o in res.outliers)


def test_context_caller_patterns_and_tiers(data_stall: Path) -> None:
    res = grep_all_ranks(
        str(data_stall), patterns=["(?P<loader>AISBatchLoaderError)", "Observed flight recorder"], context=2
    )
    assert [p.name for p in res.patterns] == ["loader", "p2"] or {p.name for p in res.patterns} == {"loader", "p2"}
    assert res.context and all(len(b.lines) <= 5 for b in res.context)
    tier3 = grep_all_ranks(str(data_stall), tiers=[3])
    assert {p.tier for p in tier3.patterns} <= {3}


def test_bad_patterns_are_user_errors(data_stall: Path) -> None:
    with pytest.raises(UserInputError, match="Invalid pattern"):
        grep_all_ranks(str(data_stall), patterns=["a(b"])
    with pytest.raises(UserInputError, match="backtracking"):
        grep_all_ranks(str(data_stall), patterns=[r"(a|aa)+\1$"])


def test_damaged_files_show_in_coverage(tmp_path: Path, data_stall: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for p in data_stall.iterdir():
        (logs / p.name).write_bytes(p.read_bytes())
    (logs / "core.log").write_bytes(b"\x00ELF\x00\x00 binary" * 100)
    data = gzip.compress(b"[rank99]: Connection reset by peer\n" * 5000)
    (logs / "extra.log.gz").write_bytes(data[: len(data) // 2])
    (logs / "odd.log").write_bytes(b"\xff\xfe Connection reset \xc3\n")
    res = grep_all_ranks(str(logs))
    bad = {u.file: u.reason for u in res.coverage.unreadable_files}
    assert "binary" in bad["core.log"] and "truncated" in bad["extra.log.gz"]
    assert "odd.log" not in bad


@pytest.mark.anyio
async def test_cli_and_mcp_give_the_same_json(data_stall: Path) -> None:
    cli = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "grep", str(data_stall), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    async with Client(create_server([data_stall])) as client:
        res = await client.call_tool("grep_all_ranks", {"logs_dir": str(data_stall)})
    assert res.is_error is False
    assert json.loads(cli.stdout) == res.structured_content


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_first_and_last_in_time_across_files_with_and_without_a_year(tmp_path: Path) -> None:
    """Each file's hits are merged as the file arrives, before the job's year hint is known: lines that state no year
    (c10 headers) must still be ranked with that hint against lines that state one, and a second call (every file's
    result from the scan cache, merged after the scan) must give the same answer."""
    from debug_training_logs.analysis.grep import grep_all_ranks as analysis_grep

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text(
        "[rank0]: 2024-03-01 10:00:01,000 INFO start\n[rank0]: 2024-03-01 10:00:05,000 ERROR NCCL error 7\n"
    )
    (logs / "b.log").write_text(
        "[rank1]: I0301 10:00:03.000000 42 pg.cpp:1] NCCL error 7\n"
        "[rank1]: I0301 10:00:09.000000 42 pg.cpp:1] NCCL error 7\n"
    )
    (logs / "c.log").write_text("[rank2]: 2023-12-31 23:59:59,000 ERROR NCCL error 7\n")
    (logs / "d.log").write_text("[rank3]: NCCL error 7\n")  # untimed: ranked after every timed line
    res = analysis_grep(logs, patterns=["NCCL error"])
    (pat,) = res.patterns
    assert pat.first is not None and (pat.first.file, pat.first.line) == ("c.log", 1)  # 2023 before 2024's lines
    assert pat.ranks_with_hits == "0-3" and pat.total_hits == 5
    by_file = {(t.first.file, t.first.line): t for t in res.templates}
    dated = by_file[("c.log", 1)]  # a.log:2 has the same shape
    assert (dated.last.file, dated.last.line, dated.count) == ("a.log", 2, 2)
    c10 = by_file[("b.log", 1)]  # 2024-03-01 10:00:03 by the year hint, after c.log's 2023 line
    assert (c10.last.file, c10.last.line, c10.last.time) == ("b.log", 2, "2024-03-01T10:00:09")
    assert analysis_grep(logs, patterns=["NCCL error"]) == res

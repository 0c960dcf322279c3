"""The files of a job, found once per call (``logs.sources``): what the evidence is gathered from and keyed by."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.logs.discovery import one_walk
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.server.app import create_server

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real_torch"
pytestmark = pytest.mark.anyio


def test_the_hang_directories_are_the_given_one_then_the_logs_siblings(tmp_path: Path) -> None:
    """``hang_dir`` first (its files shown relative to its parent), then the artifact directories beside the logs; a
    logs directory that is itself named like one (``stacks/``) is not its own sibling."""
    for d in ("stacks", "py-spy", "elsewhere/dumps", "unrelated"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "stacks" / "rank0.log").write_text("[rank0]: step 1\n")
    s = find_sources(tmp_path / "stacks", hang=tmp_path / "elsewhere" / "dumps")
    assert s.hang_roots == (
        (tmp_path / "elsewhere" / "dumps", tmp_path / "elsewhere"),
        (tmp_path.resolve() / "py-spy", tmp_path.resolve()),
    )
    assert [f.rel for f in s.log_files] == ["rank0.log"] and s.dumps == ()


def test_one_walk_of_the_logs_serves_the_files_and_the_dumps(tmp_path: Path, walked: list[str]) -> None:
    shutil.copytree(FIXTURES / "stall_fr" / "logs", tmp_path / "logs")
    shutil.copytree(FIXTURES / "stall_fr" / "fr", tmp_path / "fr")
    with one_walk():
        s = find_sources(tmp_path / "logs")
        again = find_sources(tmp_path / "logs")
    assert sorted(walked) == ["fr", "logs"]  # the sibling dump directory once, the logs once
    assert s.dumps == again.dumps and {d.rank for d in s.dumps} and all(d.shown.startswith("fr/") for d in s.dumps)
    assert s.logs_key() == again.logs_key() and s.key() == again.key()


async def test_a_changed_dump_or_hang_artifact_beside_the_logs_means_evidence_gathered_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a server, ``diagnose`` gathers the evidence again when any file it is read from changes: a flight-recorder
    dump in the logs' sibling ``fr/``, an artifact in a sibling ``py-spy/``; not when nothing did."""
    from debug_training_logs.analysis.evidence import gather_evidence as real
    from debug_training_logs.tools import evidence_cache

    gathered: list[object] = []

    def gather(*a: Any) -> Any:
        gathered.append(a[0])
        return real(*a)

    monkeypatch.setattr(evidence_cache, "gather_evidence", gather)
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", "off")
    shutil.copytree(FIXTURES / "stall_fr" / "logs", tmp_path / "logs")
    shutil.copytree(FIXTURES / "stall_fr" / "fr", tmp_path / "fr")
    (tmp_path / "py-spy").mkdir()
    args = {"logs_dir": str(tmp_path / "logs")}
    async with Client(create_server([tmp_path])) as client:
        for _ in range(2):
            got = await client.call_tool("diagnose", args)
            assert not got.is_error and got.structured_content is not None
            assert got.structured_content["verdict"]["culprit_ranks"] == [1]
        assert len(gathered) == 1
        dump = next(p for p in sorted((tmp_path / "fr").rglob("*")) if p.is_file())
        st = dump.stat()
        os.utime(dump, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        await client.call_tool("diagnose", args)
        assert len(gathered) == 2
        (tmp_path / "py-spy" / "node0.txt").write_text("Process 4242: python train.py\nPython v3.11\n")
        await client.call_tool("diagnose", args)
        await client.call_tool("diagnose", args)
        assert len(gathered) == 3

"""job_overview: the inventory a user checks first (are all ranks here?)."""

from __future__ import annotations

from pathlib import Path

import pytest

from debug_training_logs.errors import UserInputError
from debug_training_logs.tools.job_overview import job_overview
from tests.conftest import gzip_file, write_small_job


def test_complete_job_reports_all_ranks_world_size_and_framework(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs", nodes=2, gpus=4)
    ov = job_overview(str(logs))
    cov = ov.coverage
    assert cov.files_scanned == 2
    assert cov.ranks_found == "0-7"
    assert cov.world_size == 8
    assert "nranks 8" in cov.world_size_evidence and "error-777-" in cov.world_size_evidence
    assert cov.missing_ranks == ""
    assert [h.name for h in ov.framework] == ["NeMo"]
    assert ov.nccl_versions == ["2.21.5+cuda12.4"]
    assert sorted(ov.nodes) == ["gpu-b00", "gpu-b01"]
    assert {f.file: f.ranks for f in ov.files} == {"error-777-0.out": "0-3", "error-777-1.out": "4-7"}
    assert any("2.5-2.14" in h.name for h in ov.torch_version_hints)
    assert ov.job_start is not None and ov.job_start.time == "2026-03-02T10:00:00"
    assert ov.job_end is not None and ov.job_end.time == "2026-03-02T10:05:01"
    assert [d.name for d in ov.data_sources] == ["AIStore", "Lhotse"]
    assert "MISSING" not in ov.summary


def test_missing_node_file_names_the_missing_ranks(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs", nodes=3, gpus=4, skip_nodes=(1,))
    ov = job_overview(str(logs))
    assert ov.coverage.world_size == 12
    assert ov.coverage.ranks_found == "0-3,8-11"
    assert ov.coverage.missing_ranks == "4-7"
    assert "MISSING ranks 4-7" in ov.summary


def test_damaged_and_binary_files_are_listed_not_fatal(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs", nodes=2, gpus=4)
    big = logs / "error-777-1.out"
    big.write_text(big.read_text() * 400)
    gzip_file(big, truncate_to=4000)
    (logs / "core.dump.log").write_bytes(b"\x00\x01\x02ELF")
    ov = job_overview(str(logs))
    reasons = {u.file: u.reason for u in ov.coverage.unreadable_files}
    assert "truncated or corrupt" in reasons["error-777-1.out.gz"]
    assert "binary" in reasons["core.dump.log"]
    assert ov.coverage.ranks_found == "0-7"  # the readable part of the damaged file still counts


def test_empty_and_missing_directories(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    ov = job_overview(str(tmp_path / "empty"))
    assert ov.coverage.files_scanned == 0 and ov.coverage.world_size is None
    assert "unknown" in ov.coverage.world_size_evidence
    with pytest.raises(UserInputError, match="does not exist"):
        job_overview(str(tmp_path / "missing"))


def test_ranks_are_the_union_of_every_global_rank_source(tmp_path: Path) -> None:
    """A file where some ranks print [rankN]: lines and another shows up only in Lightning's GLOBAL_RANK line."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node0.out").write_text(
        "[rank0]: step 1\n[rank1]: step 1\n"
        "Initializing distributed: GLOBAL_RANK: 2, MEMBER: 3/4\n"
        "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/4\n"
    )
    ov = job_overview(str(logs))
    assert ov.coverage.ranks_found == "0-3" and ov.coverage.world_size == 4 and ov.coverage.missing_ranks == ""
    assert "Lightning" in ov.files[0].rank_source and "[rankN]:" in ov.files[0].rank_source

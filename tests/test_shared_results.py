"""The job's attempts and its whole NCCL table are worked out once per process, whichever tool gets there first, and
every other tool's answer is the one it would have computed itself."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import attempts, evidence_nccl, nccl_table
from debug_training_logs.memo import MEMO
from debug_training_logs.tools.align_timezones import align_timezones
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.job_overview import job_overview
from debug_training_logs.tools.nccl_state_table import nccl_state_table
from debug_training_logs.tools.timeline import timeline

JOB = Path(__file__).resolve().parent.parent / "fixtures" / "data_stall"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many NCCL tables were built and attempt splits made."""
    n = {"tables": 0, "splits": 0}
    build, split = nccl_table.build_table, attempts.split_files

    def counted_build(*a: Any, **k: Any) -> Any:
        n["tables"] += 1
        return build(*a, **k)

    def counted_split(*a: Any, **k: Any) -> Any:
        n["splits"] += 1
        return split(*a, **k)

    monkeypatch.setattr(nccl_table, "build_table", counted_build)
    monkeypatch.setattr(evidence_nccl, "build_table", counted_build)
    monkeypatch.setattr(attempts, "split_files", counted_split)
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", "off")
    return n


def _others(logs: str, ais: str) -> list[Any]:
    return [
        nccl_state_table(logs),
        nccl_state_table(logs, ranks="0-3"),
        timeline(logs),
        timeline(logs, ais),
        align_timezones(logs, ais),
    ]


@pytest.mark.parametrize("first", ["diagnose", "job_overview"])
def test_the_other_tools_read_what_diagnose_or_job_overview_built_and_answer_as_alone(
    tmp_path: Path, counted: dict[str, int], first: str
) -> None:
    """After diagnose: its whole table and its attempt split; after job_overview: its split (the table is built once,
    by the first tool that needs it)."""
    shutil.copytree(JOB, tmp_path / "job")
    logs, ais = str(tmp_path / "job" / "logs"), str(tmp_path / "job" / "ais")
    MEMO.clear()
    alone = _others(logs, ais)
    assert counted == {"tables": 1, "splits": 1}  # one table and one split for all five calls, on their own too
    MEMO.clear()
    if first == "diagnose":
        diagnose(logs, ais)
        assert counted == {"tables": 2, "splits": 2}
    else:
        job_overview(logs)
        assert counted == {"tables": 1, "splits": 2}
    assert _others(logs, ais) == alone
    assert counted == {"tables": 2, "splits": 2}  # nothing built again but what the first tool did not build


def test_a_table_of_another_world_size_or_of_changed_files_is_not_shared(
    tmp_path: Path, counted: dict[str, int]
) -> None:
    """diagnose given a world size builds its table of that world size: the table tool, asked for the logs' own,
    builds its own; a file that changed after diagnose read it means a new table too."""
    shutil.copytree(JOB, tmp_path / "job")
    logs = tmp_path / "job" / "logs"
    MEMO.clear()
    diagnose(str(logs), world_size=64)
    built = counted["tables"]
    nccl_state_table(str(logs))
    assert counted["tables"] == built + 1
    MEMO.clear()
    diagnose(str(logs))
    built = counted["tables"]
    with next(p for p in sorted(logs.rglob("*")) if p.is_file()).open("a") as f:
        f.write("one more line\n")
    nccl_state_table(str(logs))
    assert counted["tables"] == built + 1

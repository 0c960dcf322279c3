"""grep's lean scan: of the inventory markers it searches only the ones coverage, each file's ranks and node come
from (``grep_all_ranks.GREP_INVENTORY_MARKERS``), and its whole answer must equal the one a scan with every marker
gives.

Matrices (shared with the NCCL table's lean scan, ``tests/test_nccl_lean_scan.py``): every checked-in fixture
directory; generated jobs over launcher layout x torch family x decorations; the hand-written presentations of ranks
and world size, plain and gzipped; plus how a file's node is named (its NCCL init lines' host, srun's error lines
naming another node, the torchrun failure table, the file name only) and grep's own options (tiers, custom patterns,
case folding, context lines)."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import inventory, inventory_markers
from debug_training_logs.logs.scan_cache import CACHE
from debug_training_logs.tools import grep_all_ranks as tool
from debug_training_logs.tools import job_overview
from fixtures.worker_gen import JobSpec, generate
from tests.test_nccl_lean_scan import (
    FIXTURE_LOGS,
    FIXTURES,
    GENERATED,
    VARIANTS,
    _filler,
    _nccl_init,
    _status,
    assert_a_server_keeps_the_full_inventory,
    lean_and_full_patterns,
    lean_equals_full,
)


@contextlib.contextmanager
def full_scan(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within the block, grep scans every inventory marker (as before its lean plan)."""
    with monkeypatch.context() as m:
        m.setattr(tool, "lean_inventory", lambda _markers: contextlib.nullcontext())
        yield


def _answer(logs: Path, **kw: Any) -> dict[str, Any]:
    CACHE.clear()
    return tool.grep_all_ranks(str(logs), **kw).model_dump(mode="json")


def assert_lean_equals_full(monkeypatch: pytest.MonkeyPatch, logs: Path, **kw: Any) -> dict[str, Any]:
    return lean_equals_full(_answer, full_scan, monkeypatch, logs, **kw)


def test_the_lean_scan_searches_fewer_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    lean_n, full_n = lean_and_full_patterns(_answer, full_scan, monkeypatch)
    assert full_n - lean_n == len(inventory_markers.MARKERS) - len(tool.GREP_INVENTORY_MARKERS)
    assert {m.name for m in inventory_markers.MARKERS} > tool.GREP_INVENTORY_MARKERS > inventory.COVERAGE_MARKERS


@pytest.mark.parametrize("logs", FIXTURE_LOGS, ids=[str(p.parent.relative_to(FIXTURES)) for p in FIXTURE_LOGS])
def test_every_fixture(monkeypatch: pytest.MonkeyPatch, logs: Path) -> None:
    assert_lean_equals_full(monkeypatch, logs, context=2)


@pytest.mark.parametrize(
    ("launcher", "torch", "extra"), GENERATED, ids=[f"{a}-{b}-{sorted(c)}" for a, b, c in GENERATED]
)
@pytest.mark.parametrize("scenario", ["data_stall", "missing_node"])
def test_generated_layouts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, launcher: str, torch: str, extra: dict[str, Any], scenario: str
) -> None:
    spec = replace(JobSpec(gpus_per_node=4), launcher=launcher, torch=torch, **extra)
    generate(spec, scenario, tmp_path / "logs", write_truth=False)
    got = assert_lean_equals_full(monkeypatch, tmp_path / "logs")
    assert got["coverage"]["files_scanned"] > 0 and got["patterns"]


def _srun_error(hosts: list[str]) -> list[str]:
    return [f"srun: error: {h}: task {i}: Exited with exit code 1" for i, h in enumerate(hosts)]


NODES: dict[str, dict[str, list[str]]] = {
    "nccl_init_hosts": {
        f"n{f}.out": [_nccl_init(r, 8, host=f"gpu-b{f:02d}") for r in range(4 * f, 4 * f + 4)]
        + [_status(r) for r in range(4 * f, 4 * f + 4)]
        for f in range(2)
    },
    "srun_names_the_node": {  # no NCCL init line: the node comes from srun's own error line in the file
        f"job-{f}.out": [*_filler(20), *_srun_error([f"gpu-c{f:02d}"]), *[_status(r) for r in range(4 * f, 4 * f + 4)]]
        for f in range(2)
    },
    "srun_names_every_node_in_one_file": {
        "slurm-77.out": [*_filler(20), *_srun_error(["gpu-d01", "gpu-d02"]), *[_status(r) for r in range(8)]]
    },
    "torchrun_table_host": {
        "agent-0.log": [
            *_filler(10),
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "[0]:",
            "  host      : gpu-e07",
            "  rank      : 3 (local_rank: 3)",
            "  exitcode  : -6 (pid: 9)",
            *[_status(r) for r in range(4)],
        ]
    },
    "node_in_the_file_name": {f"gpu-f{f:02d}.log": [*_filler(5), _status(f)] for f in range(3)},
}


@pytest.mark.parametrize("name", sorted({**VARIANTS, **NODES}))
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_rank_world_and_node_presentations(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, gz: bool
) -> None:
    job = NODES[name] if name in NODES else VARIANTS[name]()
    for rel, lines in job.items():
        data = ("\n".join(lines) + "\n").encode()
        if gz:
            (tmp_path / f"{rel}.gz").write_bytes(gzip.compress(data))
        else:
            (tmp_path / rel).write_bytes(data)
    got = assert_lean_equals_full(monkeypatch, tmp_path, context=1)
    CACHE.clear()
    overview = job_overview.job_overview(str(tmp_path)).model_dump(mode="json")["coverage"]
    assert got["coverage"] == overview  # the lean coverage is the full inventory's (what job_overview reports)


@pytest.mark.parametrize(
    "kw",
    [
        {"tiers": [1]},
        {"tiers": [3], "limit": 3},
        {"patterns": [r"(?P<stall>AISBatchLoader\w*)", "world_size=\\d+"]},
        {"patterns": ["watchdog"], "ignore_case": True},
        {"context": 5, "limit": 50},
    ],
    ids=["tier1", "tier3-limit", "custom", "ignore-case", "context"],
)
def test_grep_options(monkeypatch: pytest.MonkeyPatch, kw: dict[str, Any]) -> None:
    assert_lean_equals_full(monkeypatch, FIXTURES / "data_stall" / "logs", **kw)


def test_a_server_keeps_the_full_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_a_server_keeps_the_full_inventory(monkeypatch, tool.grep_all_ranks, FIXTURES / "data_stall" / "logs")

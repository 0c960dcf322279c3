"""The inventory folded file by file (``InventoryFold``) is the same whatever order the files' shares arrive in.

A scan folds each file's share as its worker hands it back, in the order the workers finish; the files the cache
answered for are folded after. The job's totals must not depend on that order: the markers and their examples in
order of first mention in file order, the year of the first file that states one, the NCCL init line with the largest
``nranks`` (the first file's of equals), every file's row. The shares of a real scan of a job whose files disagree on
all of these are folded again in other orders and compared with the fold in file order.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import inventory
from debug_training_logs.analysis.inventory_build import InventoryFold
from debug_training_logs.analysis.inventory_types import Inventory
from debug_training_logs.logs.scan_cache import CACHE
from debug_training_logs.tools import job_overview

FILES = {
    "node0.log": [
        "[rank0]:[W1124 03:12:45.903817264 ProcessGroupNCCL.cpp:1684] [PG ID 0 PG GUID 0(default_pg) Rank 0] ready",
        "gpu-a:100:200 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1 - Init COMPLETE",
        "NCCL version 2.21.5+cuda12.4",
    ],
    "node1.log": [
        "2026-11-23 10:00:00,000 [rank4] INFO loading lhotse shards",
        "gpu-b:100:200 [0] NCCL INFO comm 0x1 rank 4 nranks 8 cudaDev 0 busId 1 - Init COMPLETE",
        "[rank4]:[W1124 03:12:46.903817264 ProcessGroupNCCL.cpp:1684] [PG ID 0 PG GUID 0(default_pg) Rank 4] ready",
    ],
    "node2.log": [
        "2025-01-02 09:00:00,000 [rank5]: dataloader workers started",
        "gpu-c:100:200 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 1 - Init COMPLETE",
        "NCCL version 2.19.3+cuda12.2",
    ],
    "node3.log": [
        "3: [rank6]: AIStore GET ais://shards/a.tar took 12.5s",
        "3: 2024-06-01 08:00:00,000 torch version 2.3.1",
        "3: [rank6]: loading lhotse shards",
    ],
}


def _view(inv: Inventory) -> tuple[Any, ...]:
    """Everything an inventory says, comparable (the dataclasses have no equality), orders kept."""
    return (
        list(inv.markers.items()),
        list(inv.marker_examples.items()),
        [dataclasses.astuple(f) for f in inv.files],
        sorted(inv.ranks),
        inv.world_size,
        inv.world_size_evidence,
        inv.nodes,
        inv.nccl_versions,
        inv.torch_versions,
        inv.start and dataclasses.astuple(inv.start),
        inv.end and dataclasses.astuple(inv.end),
        inv.year_hint,
    )


def test_the_fold_is_the_same_in_any_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for rel, lines in FILES.items():
        (tmp_path / rel).write_text("\n".join(lines) + "\n")
    added: list[tuple[int, Any, Any]] = []
    built: list[tuple[Any, Any, Inventory]] = []
    real_add, real_inventory = InventoryFold.add, InventoryFold.inventory

    def add(self: InventoryFold, j: int, lf: Any, d: Any) -> None:
        added.append((j, lf, d))
        real_add(self, j, lf, d)

    def build(self: InventoryFold, facts: Any, skipped: Any) -> Inventory:
        inv = real_inventory(self, facts, skipped)
        built.append((facts, skipped, inv))
        return inv

    monkeypatch.setattr(InventoryFold, "add", add)
    monkeypatch.setattr(InventoryFold, "inventory", build)
    monkeypatch.setattr(inventory, "_LAST_INVENTORY", None)
    CACHE.clear()
    job_overview.job_overview(str(tmp_path))
    assert len(built) == 1 and sorted(j for j, _lf, _d in added) == list(range(len(FILES)))
    facts, skipped, inv = built[0]
    shares = {j: (lf, d) for j, lf, d in added}
    # the files disagree on what the order could change (else this test would prove nothing)
    assert len({d.year for _lf, d in shares.values() if d.year is not None}) >= 2
    assert sum(1 for _lf, d in shares.values() if d.markers) >= 3 and len(inv.markers) >= 3
    assert len({tuple(d.markers) for _lf, d in shares.values()}) >= 3  # each file names its markers in its own order
    tied = [d.world.best_nranks[0] for _lf, d in shares.values() if d.world.best_nranks is not None]
    assert tied.count(max(tied)) >= 2 and "node0.log:2" in inv.world_size_evidence  # the first file's of equals
    in_order = InventoryFold(len(shares))
    for j in range(len(shares)):
        real_add(in_order, j, *shares[j])
    want = _view(real_inventory(in_order, facts, skipped))
    assert _view(inv) == want
    orders = [list(reversed(range(len(shares))))] + [
        random.Random(seed).sample(range(len(shares)), len(shares)) for seed in range(6)
    ]
    for order in orders:
        fold = InventoryFold(len(shares))
        for j in order:
            real_add(fold, j, *shares[j])
        assert _view(real_inventory(fold, facts, skipped)) == want, order

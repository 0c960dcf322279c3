"""Flight-recorder dumps in ProcessGroupNCCL's layout (format 2.9) from a tiny simulated SPMD job, for what the
real CPU/gloo fixtures (``fixtures/real_fr``) cannot show: NCCL's ``pg_config`` and ``pg_status`` keyed by the
per-process ``pg_id``, coalesced ops that never leave ``scheduled``, a ring buffer that dropped a group, names
shared by groups of different members (``split_group``), and jobs of 10,000 ranks.

The job: every rank runs ``program`` (one ``(group description, op)`` per collective) ``steps`` times; a rank waits
in a collective until every member enqueued it (then it completes on all). Faults: ``stop`` (rank -> the program
index at which it stops enqueuing: a held GIL, a hung data read), ``skip`` (rank -> indices it never enqueues),
``no_dump`` (ranks whose dump is not written). Groups are named by a global counter in creation order, as
``new_group`` does; each rank's ``pg_id`` counts only the groups it is a member of, so ids and names collide.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

T0 = 1_796_000_000_000_000_000
FRAMES = [
    {"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 3906},
    {"name": "train_step", "filename": "megatron/training/training.py", "line": 812},
]


@dataclass
class Job:
    world: int
    groups: dict[str, list[list[int]]]
    """Description -> the member lists of its groups (every rank in exactly one group of each description)."""
    program: list[tuple[str, str]]
    steps: int = 4
    stop: dict[int, int] = field(default_factory=dict)
    skip: dict[int, set[int]] = field(default_factory=dict)
    no_dump: set[int] = field(default_factory=set)
    buffer: int = 2000
    sizes: dict[tuple[int, int], list[list[int]]] = field(default_factory=dict)
    """(rank, program index) -> input sizes it records there (a size mismatch); default [[8]]."""
    ops: dict[tuple[int, int], str] = field(default_factory=dict)
    """(rank, program index) -> the op it records there instead (an op mismatch)."""
    names: dict[str, str] = field(default_factory=dict)
    """Description -> one name for all of its groups (split_group reuses names); default a global counter."""


def run(job: Job) -> dict[int, dict[str, Any]]:
    """Every rank's dump as the dict torch pickles."""
    gid: dict[tuple[str, int], tuple[str, tuple[int, ...]]] = {}  # (desc, rank) -> (name, members)
    counter = 1
    for desc, lists in job.groups.items():
        for members in lists:
            name = job.names.get(desc, str(counter))
            counter += 1
            for r in members:
                gid[(desc, r)] = (name, tuple(members))
    pg_ids: dict[int, dict[tuple[str, tuple[int, ...]], int]] = {r: {} for r in range(job.world)}
    for r in range(job.world):
        for desc in job.groups:
            pg_ids[r][gid[(desc, r)]] = len(pg_ids[r]) + 1  # 0 is the default group's
    flat = [p for _ in range(job.steps) for p in job.program]
    pc = dict.fromkeys(range(job.world), 0)
    seq: dict[tuple[int, tuple[str, tuple[int, ...]]], int] = {}
    entries: dict[int, list[dict[str, Any]]] = {r: [] for r in range(job.world)}
    joined: dict[tuple[tuple[str, tuple[int, ...]], int], dict[int, dict[str, Any]]] = {}
    waiting: dict[int, tuple[tuple[str, tuple[int, ...]], int] | None] = dict.fromkeys(range(job.world))
    clock = 0
    progress = True
    while progress:
        progress = False
        for r in range(job.world):
            while waiting[r] is None and pc[r] < len(flat) and job.stop.get(r) != pc[r]:
                i = pc[r]
                if i in job.skip.get(r, set()):
                    pc[r] += 1
                    progress = True
                    continue
                desc, op = flat[i]
                g = gid[(desc, r)]
                seq[(r, g)] = s = seq.get((r, g), 0) + 1
                clock += 1
                sizes = job.sizes.get((r, i % len(job.program)), [[8]])
                e = {
                    "record_id": len(entries[r]), "pg_id": pg_ids[r][g], "process_group": (g[0], desc),
                    "collective_seq_id": s, "p2p_seq_id": 0, "op_id": s,
                    "profiling_name": f"nccl:{job.ops.get((r, i % len(job.program)), op)}",
                    "time_created_ns": T0 + clock * 1_000_000, "duration_ms": None, "input_sizes": sizes,
                    "input_dtypes": ["BFloat16"], "output_sizes": sizes, "output_dtypes": ["BFloat16"],
                    "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
                    "retired": False, "timeout_ms": 600000, "is_p2p": False, "frames": FRAMES,
                    "thread_id": "140000000000000", "thread_name": "pt_main_thread",
                }  # fmt: skip
                entries[r].append(e)
                group = joined.setdefault((g, s), {})
                group[r] = e
                waiting[r] = (g, s)
                progress = True
                if len(group) == len(g[1]):  # everyone joined: it completes on all
                    for rr, ee in group.items():
                        ee["state"], ee["retired"] = "completed", True
                        waiting[rr] = None
                        pc[rr] += 1
    out: dict[int, dict[str, Any]] = {}
    for r in range(job.world):
        if r in job.no_dump:
            continue
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(job.world)))}}
        status = {}
        for g, pid in pg_ids[r].items():
            desc = next(d for d in job.groups if gid[(d, r)] == g)
            config[g[0]] = {"name": g[0], "desc": desc, "ranks": str(list(g[1]))}
            mine = [e for e in entries[r] if e["pg_id"] == pid]
            done = [e["collective_seq_id"] for e in mine if e["state"] == "completed"]
            status[str(pid)] = {
                "last_enqueued_collective": max((e["collective_seq_id"] for e in mine), default=-1),
                "last_started_collective": -1,
                "last_completed_collective": max(done, default=-1),
            }
        out[r] = {
            "version": "2.9", "comm_lib_version": "2.21.5", "nccl_comm_state": {}, "pg_config": config,
            "pg_status": status, "entries": entries[r][-job.buffer :],
        }  # fmt: skip
    return out


def write(dumps: dict[int, dict[str, Any]], directory: Path, prefix: str = "_dump_", fmt: str = "pickle") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for r, d in dumps.items():
        if fmt == "json":
            (directory / f"{prefix}{r}").write_text(json.dumps(d))
        else:
            (directory / f"{prefix}{r}").write_bytes(pickle.dumps(d, protocol=4))
    return directory


def megatron(world: int, tp: int = 2, ep: int = 4) -> dict[str, list[list[int]]]:
    """TP, DP, EP and expert-DP groups (rank order tp-dp; experts etp-ep-edp with etp = tp)."""
    dp = world // tp
    edp = world // (tp * ep)
    return {
        "TENSOR_MODEL_PARALLEL_GROUP": [[t + tp * d for t in range(tp)] for d in range(dp)],
        "DATA_PARALLEL_GROUP": [[t + tp * d for d in range(dp)] for t in range(tp)],
        "EXPERT_MODEL_PARALLEL_GROUP": [[t + tp * x + tp * ep * y for x in range(ep)] for y in range(edp) for t in range(tp)],
        "EXPERT_DATA_PARALLEL_GROUP": [[t + tp * x + tp * ep * y for y in range(edp)] for x in range(ep) for t in range(tp)],
    }  # fmt: skip


STEP = [
    ("TENSOR_MODEL_PARALLEL_GROUP", "all_reduce"),
    ("EXPERT_MODEL_PARALLEL_GROUP", "all_to_all"),
    ("EXPERT_MODEL_PARALLEL_GROUP", "all_to_all"),
    ("TENSOR_MODEL_PARALLEL_GROUP", "all_reduce"),
    ("DATA_PARALLEL_GROUP", "all_reduce"),
    ("EXPERT_DATA_PARALLEL_GROUP", "all_reduce"),
]
"""One training step of a MoE job: attention all_reduce, dispatch, combine, all_reduce, DP and expert-DP grads."""

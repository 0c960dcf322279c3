"""Real flight-recorder dumps of multi-PG CPU/gloo jobs with injected faults, checked in under ``fixtures/real_fr/``.

Run it with the Python of a venv that has torch (never the project's venv):

    /work/torch214/bin/python scripts/make_real_fr_fixtures.py [--only gil_hold,one_pg] [--out fixtures/real_fr]
    /work/torch213/bin/python scripts/make_real_fr_fixtures.py --only per_node_json

Each shape forks ``world`` processes (one per rank) that build the process groups a Megatron MoE job builds (tensor,
context, data, data-with-context, tensor-and-context, expert, expert-data, tensor-and-expert parallel, plus the
default group: nine PGs per rank at 16 ranks), run a few training-like steps (TP all_reduce, CP all_gather, EP
all_to_all dispatch and combine, TP all_reduce, DP all_reduce, expert-DP all_reduce, a world all_reduce) and at
``FAULT_STEP`` inject the shape's faults. Every rank that is not faulty dumps its flight recorder from a timer thread
a few seconds later, while the hang holds (``torch._C._distributed_c10d._dump_fr_trace``, or ``_dump_fr_trace_json``),
the way torch's dump-on-timeout does for NCCL.

What is real and what is arranged:

* The dumps are torch's own bytes, unedited (the ``frames`` carry this machine's paths).
* gloo's native recording names every PG ``''`` in ``pg_config`` (it records the ranks before the group is named);
  the shapes with ``hook`` also attach ``FlightRecorderHook`` (torch 2.14's backend-independent recorder) to each
  group, which writes the real ``pg_config`` (name, desc, global ranks) as ProcessGroupNCCL does, and records every
  collective a second time as ``c10d:<op>``. The reader must handle both.
* A rank that blocks while holding the GIL cannot run a Python dump thread: it dumps right before it takes the GIL.
  Its buffer cannot change while it holds the GIL (gloo work is synchronous, so nothing of its own is in flight), so
  the dump is what a C++ dump-on-timeout would have written during the hang.
* ``missing_dump``: the faulty rank blocks and writes no dump (a killed process or a lost disk; a SIGKILL would
  make gloo fail its peers' collectives at once, where NCCL's peers wait until their timeout).
* No rank ends during the hang: once every dump is written the generator kills the job.

This file needs torch; it is never imported by the package or its tests.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAULT_STEP = 3
STEPS = 6
DUMP_AFTER_S = 8.0
HOLD_S = 600
"""Faulty ranks block this long; the generator kills every rank once the dumps are written."""
TIMEOUT_S = 90


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind`` is gil (blocks holding the GIL), stall (blocks in a plain sleep, a hung data
    read), skip_ep (stops enqueuing in its expert-parallel group only) or nodump (blocks and writes no dump);
    ``before``: the phase of the step it hits before."""

    rank: int
    kind: str
    before: str


@dataclass(frozen=True)
class Shape:
    world: int
    tp: int
    cp: int
    ep: int
    faults: tuple[Fault, ...]
    story: str
    hook: bool = True
    fmt: str = "pickle"
    prefix: str = "_dump_"
    per_node: int = 0
    """Ranks per node directory (``node<k>/``); 0: one directory."""
    buffer: int = 2000
    expect: dict[str, Any] = field(default_factory=dict)


SHAPES: dict[str, Shape] = {
    "gil_hold": Shape(
        16, 2, 2, 4, (Fault(9, "gil", "tp_fwd"),),
        "rank 9 blocks holding the GIL at the start of step 3: it never enqueues the TP all_reduce its TP peer 8 "
        "waits in; every other PG stalls behind that",
        expect={"culprits": [9], "suspects": []},
    ),
    "one_pg": Shape(
        16, 2, 2, 4, (Fault(5, "skip_ep", "ep_dispatch"),),
        "rank 5 stops enqueuing in its expert-parallel group at step 3 (skips the dispatch and combine all_to_all) "
        "and goes on to the data-parallel all_reduce, where it waits for EP peers that wait for it",
        expect={"culprits": [5], "suspects": []},
    ),
    "two_pgs": Shape(
        16, 2, 2, 4, (Fault(3, "gil", "tp_fwd"), Fault(12, "stall", "ep_dispatch")),
        "two independent faults at step 3: rank 3 blocks holding the GIL before the TP all_reduce (TP group 2-3 "
        "misses it), rank 12 hangs in a data read before the EP dispatch (its EP group misses it)",
        expect={"culprits": [3, 12], "suspects": []},
    ),
    "missing_dump": Shape(
        8, 2, 1, 2, (Fault(6, "nodump", "tp_fwd"),),
        "rank 6 hangs at the start of step 3 and its dump is never written (as when its process is killed or its "
        "node's disk is lost); its TP peer 7 waits for it",
        buffer=24,
        expect={"culprits": [], "suspects": [6], "no_dump": [6]},
    ),
    "per_node_json": Shape(
        8, 2, 1, 2, (Fault(2, "stall", "ep_dispatch"),),
        "rank 2 hangs in a data read before the EP dispatch at step 3; gloo's native recording only (pg_config "
        "names no group), JSON dumps named nccl_trace_rank_<N> in one directory per node",
        hook=False, fmt="json", prefix="nccl_trace_rank_", per_node=4,
        expect={"culprits": [2], "suspects": []},
    ),
}  # fmt: skip

PHASES = ("tp_fwd", "cp_gather", "ep_dispatch", "ep_combine", "tp_bwd", "dp_reduce", "edp_reduce", "loss")


def layout(world: int, tp: int, cp: int, ep: int) -> dict[str, list[list[int]]]:
    """Megatron's groups (rank order tp-cp-dp; experts etp-ep-edp with etp = tp), by group description."""
    dp = world // (tp * cp)
    edp = world // (tp * ep)
    r = lambda t, c, d: t + tp * c + tp * cp * d  # noqa: E731
    e = lambda t, x, y: t + tp * x + tp * ep * y  # noqa: E731
    groups = {
        "TENSOR_MODEL_PARALLEL_GROUP": [[r(t, c, d) for t in range(tp)] for d in range(dp) for c in range(cp)],
        "CONTEXT_PARALLEL_GROUP": [[r(t, c, d) for c in range(cp)] for d in range(dp) for t in range(tp)],
        "DATA_PARALLEL_GROUP": [[r(t, c, d) for d in range(dp)] for c in range(cp) for t in range(tp)],
        "DATA_PARALLEL_GROUP_WITH_CP": [sorted(r(t, c, d) for c in range(cp) for d in range(dp)) for t in range(tp)],
        "TENSOR_AND_CONTEXT_PARALLEL_GROUP": [
            sorted(r(t, c, d) for t in range(tp) for c in range(cp)) for d in range(dp)
        ],
        "EXPERT_MODEL_PARALLEL_GROUP": [[e(t, x, y) for x in range(ep)] for y in range(edp) for t in range(tp)],
        "EXPERT_DATA_PARALLEL_GROUP": [[e(t, x, y) for y in range(edp)] for x in range(ep) for t in range(tp)],
        "TENSOR_AND_EXPERT_PARALLEL_GROUP": [
            sorted(e(t, x, y) for t in range(tp) for x in range(ep)) for y in range(edp)
        ],
    }  # fmt: skip
    if cp == 1:
        for k in ("CONTEXT_PARALLEL_GROUP", "DATA_PARALLEL_GROUP_WITH_CP", "TENSOR_AND_CONTEXT_PARALLEL_GROUP"):
            del groups[k]
    return groups


def dump(rank: int, shape: Shape, out: Path) -> None:
    import torch

    c10d = torch._C._distributed_c10d
    if shape.fmt == "json":
        text = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
        data = text.encode() if isinstance(text, str) else text
    else:
        data = c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False)
    where = out / f"node{rank // shape.per_node}" if shape.per_node else out
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / f".{shape.prefix}{rank}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, where / f"{shape.prefix}{rank}")


def hold_gil(seconds: int) -> None:
    """libc's sleep called through PyDLL keeps the GIL: no other thread of this process runs meanwhile."""
    ctypes.PyDLL(None).sleep(seconds)


def worker(rank: int, shape: Shape, store: str, out: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=shape.world,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )  # fmt: skip
    mine: dict[str, Any] = {"default_pg": dist.group.WORLD}
    for desc, members in layout(shape.world, shape.tp, shape.cp, shape.ep).items():
        for ranks in members:
            g = dist.new_group(ranks, group_desc=desc)
            if rank in ranks:
                mine[desc] = g
    hooks = []
    if shape.hook:
        hooks = [torch._C._distributed_c10d.FlightRecorderHook.attach(g) for g in mine.values()]
    faults = {f.before: f for f in shape.faults if f.rank == rank}
    x = torch.ones(8) * (rank + 1)
    timer = threading.Timer(DUMP_AFTER_S, dump, (rank, shape, out))
    for step in range(STEPS):
        if step == FAULT_STEP:
            timer.start()
        for phase in PHASES:
            f = faults.get(phase) if step == FAULT_STEP else None
            if f is not None:
                if f.kind == "gil":
                    timer.cancel()
                    dump(rank, shape, out)
                    hold_gil(HOLD_S)
                if f.kind in ("stall", "nodump"):
                    if f.kind == "nodump":
                        timer.cancel()
                    time.sleep(HOLD_S)
            skips_ep = step == FAULT_STEP and any(x.kind == "skip_ep" for x in faults.values())
            if skips_ep and phase in ("ep_dispatch", "ep_combine"):
                continue
            if phase == "tp_fwd" or phase == "tp_bwd":
                dist.all_reduce(x, group=mine["TENSOR_MODEL_PARALLEL_GROUP"])
            elif phase == "cp_gather" and "CONTEXT_PARALLEL_GROUP" in mine:
                parts = [torch.empty(8) for _ in range(shape.cp)]
                dist.all_gather(parts, x, group=mine["CONTEXT_PARALLEL_GROUP"])
            elif phase in ("ep_dispatch", "ep_combine"):
                y = torch.empty(shape.ep * 2)
                dist.all_to_all_single(y, torch.ones(shape.ep * 2), group=mine["EXPERT_MODEL_PARALLEL_GROUP"])
                if phase == "ep_dispatch":
                    time.sleep(0.05)  # the experts' compute
            elif phase == "dp_reduce":
                dist.all_reduce(x, group=mine.get("DATA_PARALLEL_GROUP_WITH_CP", mine["DATA_PARALLEL_GROUP"]))
            elif phase == "edp_reduce":
                dist.all_reduce(x, group=mine["EXPERT_DATA_PARALLEL_GROUP"])
            elif phase == "loss":
                dist.all_reduce(x[:1].clone(), group=dist.group.WORLD)
            x = x / 2 + 1
    del hooks
    os._exit(0)


def run(name: str, shape: Shape, out_root: Path) -> None:
    import torch

    out = out_root / name
    shutil.rmtree(out, ignore_errors=True)
    dumps = out / "fr"
    dumps.mkdir(parents=True)
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(shape.buffer)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        pids = []
        for rank in range(shape.world):
            pid = os.fork()
            if pid == 0:
                try:
                    worker(rank, shape, store, dumps)
                except BaseException as e:  # the rank's own error, on the generator's stderr
                    print(f"rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                finally:
                    os._exit(1)
            pids.append(pid)
        # every rank blocks (the hang) until all dumps are written; then the generator ends the job
        want = shape.world - sum(f.kind == "nodump" for f in shape.faults)
        deadline = time.time() + 240
        while time.time() < deadline and sum(1 for p in dumps.rglob(f"{shape.prefix}*")) < want:
            time.sleep(0.5)
        time.sleep(1.0)
        early = {}
        for rank, pid in enumerate(pids):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                early[rank] = os.waitstatus_to_exitcode(status)
        for rank, pid in enumerate(pids):
            if rank not in early:
                os.kill(pid, signal.SIGKILL)
        for rank, pid in enumerate(pids):
            if rank not in early:
                os.waitpid(pid, 0)
    groups = layout(shape.world, shape.tp, shape.cp, shape.ep)
    truth = {
        "shape": name,
        "story": shape.story,
        "torch_version": torch.__version__,
        "backend": "gloo (CPU), forked processes, one per rank",
        "world_size": shape.world,
        "groups": {"default_pg": [list(range(shape.world))], **groups},
        "faults": [f.__dict__ for f in shape.faults],
        "fault_step": FAULT_STEP,
        "phases": list(PHASES),
        "expect": shape.expect,
        "dump_format": shape.fmt,
        "file_prefix": shape.prefix,
        "per_node_directories": bool(shape.per_node),
        "flight_recorder_hook": shape.hook,
        "env": {"TORCH_FR_BUFFER_SIZE": str(shape.buffer)},
        "ranks_that_ended_before_the_dumps": early,
        "dumps_written": sorted(p.relative_to(dumps).as_posix() for p in dumps.rglob("*") if p.is_file()),
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{name}: {len(truth['dumps_written'])} dump(s), {size} bytes, ended early: {early}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "real_fr")
    ap.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SHAPES)
    for n in names:
        run(n, SHAPES[n], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

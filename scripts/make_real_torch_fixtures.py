"""Run small real ``torchrun`` jobs (CPU, gloo) in failure shapes and check their logs in as fixtures.

Every fixture under ``fixtures/real_torch/<shape>/`` is what real PyTorch wrote, nothing edited but the absolute
path of the scratch directory (replaced by ``/scratch``):

- ``logs/``: each node's agent output as SLURM writes it with ``--output=train.%j.%N.out --error=train.%j.%N.err``
  (stdout and stderr of the ``torchrun`` on that node; workers' lines reach it through ``--tee 3``)
- ``torchrun_logs/<node>/``: the same job's ``--log-dir`` tree (``<run_id>_<random>/attempt_N/<local_rank>/``)
- ``fr/``: flight-recorder dumps (``<prefix><global rank>``), for the shapes that take them
- ``truth.json``: what happened, the command lines, the environment and the torch version

Two agents on this machine stand in for two nodes: each runs in its own UTS and mount namespace (``unshare -u -m``)
with its own hostname (``gpu-node-0``, ``gpu-node-1``) that a private ``/etc/hosts`` resolves to 127.0.0.1. That needs
root (or user namespaces); the script says so otherwise.

Usage (torch lives in a separate venv, never in the project's):

    python3 -m venv /work/torchenv && /work/torchenv/bin/pip install torch==2.13.0 numpy
    python scripts/make_real_torch_fixtures.py --torch-venv /work/torchenv [--only stall,clean]
    # the torch-family axis: the same shapes with another torch (fixtures/real_torch_2_14 was made this way)
    python scripts/make_real_torch_fixtures.py --torch-venv /work/torchenv214 --out fixtures/real_torch_2_14 \
        --only clean,sigkill,stall,stall_fr,mismatch_detail,loader_exception

Runs are real, so details differ from run to run (pids, ports, times, which victim logs first). Whether an elastic
restart recovers is a race between the two agents: ``restart`` recovered, ``restart_storm`` is a run of the same
shape whose restarts never re-formed the gloo group; its truth was read from its logs. ``--retruth`` rewrites the
stated part of every truth.json (category, culprits, story, attempts) without running torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "real_torch_worker.py"
NODES = ("gpu-node-0", "gpu-node-1")
NPROC = 2
JOB_ID = 7301
WALL_S = 120.0


@dataclass(frozen=True)
class Shape:
    """One failure shape: how to run it and what truly happened (the truth checked in beside the logs)."""

    category: str
    culprit_ranks: list[int]
    story: str
    worker_env: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    torchrun_args: list[str] = field(default_factory=list)
    suspect_nodes: list[str] = field(default_factory=list)
    nodes: tuple[int, ...] = (0, 1)
    rendezvous: str = "c10d"  # c10d (dynamic) or static (--master-addr/--master-port, --node-rank)
    block_port: bool = False
    one_file: bool = False  # sbatch's default: every node's stdout and stderr appended to one slurm-<jobid>.out
    fr: str = ""  # "", "pickle" or "json"
    attempts: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # what the logs alone can support when it is less than what happened (the cause of a hang is never logged)
    verdict_from_logs: dict[str, Any] | None = None


INFO = {"TORCH_CPP_LOG_LEVEL": "INFO", "TORCH_DISTRIBUTED_DEBUG": "INFO", "LOGLEVEL": "INFO"}

SHAPES: dict[str, Shape] = {
    "clean": Shape("no_failure", [], "every rank trains 6 steps and exits 0; the c10d IPv6 lookup lines are benign"),
    "clean_info": Shape(
        "no_failure",
        [],
        "a clean run with TORCH_CPP_LOG_LEVEL=INFO, TORCH_DISTRIBUTED_DEBUG=INFO and LOGLEVEL=INFO: "
        "every c10d and elastic INFO line a healthy job writes",
        env=INFO,
    ),
    "loader_exception": Shape(
        "rank_crash",
        [3],
        "rank 3's DataLoader worker raises ValueError on a corrupt sample at step 3; the others "
        "lose their gloo peer (Connection closed by peer) or time out and are counted as failures too",
        worker_env={"FIX_SHAPE": "loader_exception", "FIX_FAULT_RANK": "3"},
        suspect_nodes=["gpu-node-1"],
    ),
    "sigkill_one_file": Shape(
        "rank_crash",
        [1],
        "the sigkill shape with both nodes' stdout and stderr in one slurm-<jobid>.out (sbatch's default without "
        "per-node --output): the agents' lines interleave",
        worker_env={"FIX_SHAPE": "sigkill", "FIX_FAULT_RANK": "1"},
        suspect_nodes=["gpu-node-0"],
        one_file=True,
    ),
    "stall": Shape(
        "data_loading_stall",
        [2],
        "rank 2's data loader read hangs at step 3 and never returns; ranks 0, 1, 3 wait in "
        "all_reduce and time out after 4 s (gloo: Timed out waiting ...ms); rank 2 is then SIGTERMed by its agent",
        worker_env={"FIX_SHAPE": "stall", "FIX_FAULT_RANK": "2"},
        suspect_nodes=["gpu-node-1"],
    ),
    "stall_info": Shape(
        "data_loading_stall",
        [2],
        "the stall shape with TORCH_CPP_LOG_LEVEL=INFO, TORCH_DISTRIBUTED_DEBUG=INFO, LOGLEVEL=INFO",
        worker_env={"FIX_SHAPE": "stall", "FIX_FAULT_RANK": "2"},
        env=INFO,
        suspect_nodes=["gpu-node-1"],
    ),
    "stall_fr": Shape(
        "data_loading_stall",
        [1],
        "rank 1's data loader hangs at step 3; every rank dumps its flight recorder "
        "(pickle) while ranks 0, 2, 3 wait in all_reduce: the dumps show rank 1 never scheduled that collective",
        worker_env={"FIX_SHAPE": "stall", "FIX_FAULT_RANK": "1", "FIX_LOG_STYLE": "plain"},
        env={"TORCH_FR_BUFFER_SIZE": "200"},
        suspect_nodes=["gpu-node-0"],
        fr="pickle",
    ),
    "sigkill": Shape(
        "rank_crash",
        [1],
        "rank 1 is SIGKILLed at step 3 as the kernel OOM killer would (no traceback); its agent "
        "SIGTERMs rank 0; ranks 2, 3 lose their gloo peer",
        worker_env={"FIX_SHAPE": "sigkill", "FIX_FAULT_RANK": "1"},
        suspect_nodes=["gpu-node-0"],
    ),
    "sigkill_info": Shape(
        "rank_crash",
        [1],
        "the sigkill shape with TORCH_CPP_LOG_LEVEL=INFO and LOGLEVEL=INFO",
        worker_env={"FIX_SHAPE": "sigkill", "FIX_FAULT_RANK": "1"},
        env=INFO,
        suspect_nodes=["gpu-node-0"],
    ),
    "mismatch_detail": Shape(
        "collective_mismatch",
        [3],
        "rank 3 calls broadcast where the others call all_reduce (step 3); "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch (CollectiveFingerPrint)",
        worker_env={"FIX_SHAPE": "mismatch", "FIX_FAULT_RANK": "3"},
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        suspect_nodes=["gpu-node-1"],
    ),
    "mismatch": Shape(
        "collective_mismatch",
        [3],
        "rank 3 calls broadcast where the others call all_reduce (step 3), no debug "
        "level; every rank dumps its flight recorder (JSON) before the timeout: the dumps show the op mismatch",
        worker_env={"FIX_SHAPE": "mismatch", "FIX_FAULT_RANK": "3"},
        env={"TORCH_FR_BUFFER_SIZE": "200"},
        suspect_nodes=["gpu-node-1"],
        fr="json",
    ),
    "port_in_use": Shape(
        "address_in_use",
        [],
        "another process holds the static rendezvous port on gpu-node-0: its agent cannot start "
        "the TCPStore (EADDRINUSE); gpu-node-1's agent waits on the port's holder until it is killed "
        "(the generator kills it after 120 s); no worker ever starts",
        rendezvous="static",
        block_port=True,
        suspect_nodes=["gpu-node-0"],
        extra={"cause": "port_in_use"},
    ),
    "rdzv_unreachable": Shape(
        "launch_failure",
        [],
        "gpu-node-0 never starts its agent: gpu-node-1's agent cannot reach the c10d "
        "rendezvous endpoint on gpu-node-0 (RendezvousConnectionError)",
        nodes=(1,),
        suspect_nodes=["gpu-node-0"],
    ),
    "restart": Shape(
        "rank_crash",
        [2],
        "rank 2 raises in its data loader in attempt 0; the agents restart the workers "
        "(--max-restarts 3) and attempt 1 trains to the end: the job succeeds after one restart (a race: a rerun may "
        "storm instead, see restart_storm)",
        worker_env={"FIX_SHAPE": "restart", "FIX_FAULT_RANK": "2"},
        torchrun_args=["--max-restarts", "3"],
        env={"LOGLEVEL": "INFO"},
        suspect_nodes=["gpu-node-1"],
        attempts=[
            {"attempt": 0, "outcome": "failed", "category": "rank_crash", "culprit_ranks": [2]},
            {"attempt": 1, "outcome": "succeeded", "category": "no_failure", "culprit_ranks": []},
        ],
    ),
    "restart_storm": Shape(
        "rank_crash",
        [2],
        "the restart shape as one real run went: rank 2 raises in its data loader in attempt 0; every restarted "
        "group then fails in gloo connectFullMesh (Connection refused: the restarted workers reach for the previous "
        "round's peers) until --max-restarts 3 is used up. Whether a restart recovers is a race: this truth is what "
        "this run did, read from its logs",
        worker_env={"FIX_SHAPE": "restart", "FIX_FAULT_RANK": "2"},
        torchrun_args=["--max-restarts", "3"],
        env={"LOGLEVEL": "INFO"},
        suspect_nodes=["gpu-node-1"],
        attempts=[
            {"attempt": 0, "outcome": "failed", "category": "rank_crash", "culprit_ranks": [2]},
            *(
                {
                    "attempt": i,
                    "outcome": "failed",
                    "category": "incomplete_evidence",
                    "culprit_ranks": [],
                    "note": "every rank fails in gloo connectFullMesh (a victim error): no rank failed on its own",
                }
                for i in (1, 2, 3)
            ),
        ],
    ),
    "restart_exhausted": Shape(
        "rank_crash",
        [2],
        "rank 2 raises in its data loader in attempt 0; the agents restart (--max-restarts 1) but "
        "the restarted group never forms (gloo connectFullMesh fails: the two agents restarted at different times) "
        "and torchrun gives up with a ChildFailedError",
        torchrun_args=["--max-restarts", "1"],
        worker_env={"FIX_SHAPE": "restart_exhausted", "FIX_FAULT_RANK": "2"},
        suspect_nodes=["gpu-node-1"],
        attempts=[
            {"attempt": 0, "outcome": "failed", "category": "rank_crash", "culprit_ranks": [2]},
            {
                "attempt": 1,
                "outcome": "failed",
                "category": "incomplete_evidence",
                "culprit_ranks": [],
                "note": "every rank fails in gloo connectFullMesh (a victim error): no rank failed on its own",
            },
        ],
    ),
}


def stated_truth(shape: Shape) -> dict[str, Any]:
    """The part of the truth the shape states (what happened), as opposed to what the run recorded."""
    return {
        "category": shape.category,
        "culprit_ranks": shape.culprit_ranks,
        "suspect_nodes": shape.suspect_nodes,
        "story": shape.story,
        "attempts": shape.attempts,
        **({"verdict_from_logs": shape.verdict_from_logs} if shape.verdict_from_logs else {}),
        **shape.extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torch_version(python: Path) -> str:
    out = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def run_shape(name: str, shape: Shape, venv: Path, out_root: Path) -> dict[str, Any]:
    """Run one shape in a scratch directory and copy its logs into ``out_root/name``; returns the truth."""
    scratch = Path(tempfile.mkdtemp(prefix=f"rt-{name}-"))
    hosts = scratch / "hosts"
    # distinct loopback addresses so that getfqdn() (the ChildFailedError table's host) names each node
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"127.0.1.{10 + i} {n}\n" for i, n in enumerate(NODES)))
    logs, fr_dir = scratch / "logs", scratch / "fr"
    logs.mkdir()
    worker = scratch / "train.py"  # the paths the logs and the dumps' stack frames show are the scratch copy's
    shutil.copy(WORKER, worker)
    port = free_port()
    blocker = None
    if shape.block_port:
        blocker = socket.socket()
        blocker.bind(("0.0.0.0", port))
        blocker.listen(1)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "FIX_TIMEOUT_S": "4", **shape.worker_env, **shape.env}
    env.pop("PYTHONPATH", None)
    if shape.fr:
        fr_dir.mkdir()
        env |= {"FIX_FR_DIR": str(fr_dir), "FIX_FR_FORMAT": shape.fr,
                "TORCH_FR_DUMP_TEMP_FILE": str(fr_dir / "comm_lib_trace_rank_")}  # fmt: skip
    commands: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    files = []
    for n in shape.nodes:
        node = NODES[n]
        args = [str(venv / "bin" / "torchrun"), "--nnodes", "2", "--nproc-per-node", str(NPROC)]
        if shape.rendezvous == "static":
            args += ["--node-rank", str(n), "--master-addr", NODES[0], "--master-port", str(port), "--rdzv-conf",
                     "timeout=10"]  # fmt: skip
        else:
            args += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{NODES[0]}:{port}", "--rdzv-id", f"job{JOB_ID}",
                     "--rdzv-conf", "join_timeout=8,read_timeout=8"]  # fmt: skip
        args += ["--log-dir", str(scratch / "torchrun_logs" / node), "--tee", "3", *shape.torchrun_args,
                 str(worker)]  # fmt: skip
        inner = f"mount --bind {hosts} /etc/hosts && hostname {node} && exec " + " ".join(args)
        commands.append(" ".join(args))
        if shape.one_file:
            out = open(logs / f"slurm-{JOB_ID}.out", "ab")  # noqa: SIM115 (O_APPEND: both agents interleave)
            err = out
        else:
            out = open(logs / f"train.{JOB_ID}.{node}.out", "wb")  # noqa: SIM115
            err = open(logs / f"train.{JOB_ID}.{node}.err", "wb")  # noqa: SIM115
        files += [out, err]
        procs.append(subprocess.Popen(["unshare", "-u", "-m", "sh", "-c", inner], stdout=out, stderr=err, env=env,
                                      start_new_session=True))  # fmt: skip
    deadline = time.monotonic() + WALL_S
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            codes.append(None)
    for f in {id(f): f for f in files}.values():
        f.close()
    if blocker is not None:
        blocker.close()
    dest = out_root / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for sub in ("logs", "torchrun_logs", "fr"):
        if (scratch / sub).is_dir():
            shutil.copytree(scratch / sub, dest / sub)
    for f in dest.rglob("*"):
        if f.is_file() and f.parent.name != "fr" and f.stat().st_size < 2_000_000:
            f.write_bytes(f.read_bytes().replace(str(scratch).encode(), b"/scratch"))
    shutil.rmtree(scratch, ignore_errors=True)
    fix_env = {k: v for k, v in {**shape.worker_env, **shape.env}.items()}
    return {
        "scenario": name,
        "category": shape.category,
        "culprit_ranks": shape.culprit_ranks,
        "suspect_nodes": shape.suspect_nodes,
        "story": shape.story,
        "world_size": 2 * NPROC,
        "nodes": {NODES[n]: list(range(n * NPROC, (n + 1) * NPROC)) for n in range(2)},
        "nodes_started": [NODES[n] for n in shape.nodes],
        "missing_ranks": [] if len(shape.nodes) == 2 else list(range(2 * NPROC)),
        "attempts": shape.attempts,
        "flight_recorder": shape.fr or None,
        "agent_exit_codes": {NODES[n]: c for n, c in zip(shape.nodes, codes, strict=True)},
        "env": fix_env,
        "commands": [c.replace(str(scratch), "/scratch") for c in commands],
        "process_group_timeout_s": 4,
        **({"verdict_from_logs": shape.verdict_from_logs} if shape.verdict_from_logs else {}),
        **shape.extra,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch-venv", type=Path, default=Path("/work/torchenv"))
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "real_torch")
    ap.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--retruth", action="store_true", help="rewrite truth.json from SHAPES without running torch")
    a = ap.parse_args()
    if a.retruth:
        for name, shape in SHAPES.items():
            path = a.out / name / "truth.json"
            if path.exists():
                truth = json.loads(path.read_text()) | stated_truth(shape)
                truth.pop("verdict_from_logs", None)
                truth |= stated_truth(shape)
                path.write_text(json.dumps(truth, indent=1) + "\n")
        return 0
    python = a.torch_venv / "bin" / "python"
    if not python.exists():
        print(f"no torch venv at {a.torch_venv}: create it (see this script's docstring)", file=sys.stderr)
        return 2
    if shutil.which("unshare") is None or os.geteuid() != 0:
        print("needs root and unshare(1) to give each agent its own hostname", file=sys.stderr)
        return 2
    version = torch_version(python)
    names = [n for n in a.only.split(",") if n] or list(SHAPES)
    for name in names:
        t0 = time.monotonic()
        truth = run_shape(name, SHAPES[name], a.torch_venv, a.out)
        truth["torch_version"] = version
        (a.out / name / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        size = sum(f.stat().st_size for f in (a.out / name).rglob("*") if f.is_file())
        print(f"{name}: {time.monotonic() - t0:.1f} s, {size / 1024:.1f} KiB, agents {truth['agent_exit_codes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

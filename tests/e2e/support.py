"""Shared pieces of the end-to-end tests: where the real clients are, and a small log set to run them on.

The clients (MCP Inspector CLI, Claude Code CLI) are pinned in ``tests/e2e/package.json`` and installed with
``npm install --prefix tests/e2e``. A test that needs one and cannot find it skips with the install command in the
reason, never silently.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest

E2E_DIR = Path(__file__).resolve().parent
REPO = E2E_DIR.parents[1]
NODE_BIN = E2E_DIR / "node_modules" / ".bin"
INSTALL_HINT = "npm install --prefix tests/e2e"

DATA_STALL_LOGS = REPO / "fixtures" / "data_stall" / "logs"
"""The checked-in data-stall fixture, when it exists; otherwise :func:`write_data_stall_logs` makes one."""

# A 2-node x 2-GPU NeMo job, torch 2.6 message formats: rank 3 is stuck in data loading (its last enqueued NCCL work
# equals its last completed one and it only *observes* the dump signal); ranks 0-2 time out in BROADCAST 1203.
_PG = "[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
_START = [
    "[NeMo I 2025-03-14 09:58:01 nemo_logging:393] Rank {r}: NeMo training starting, world size 4",
    "node-0{node}:{pid}:{pid} [{local}] NCCL INFO comm 0x5a3c1d0 rank {r} nranks 4 cudaDev {local} busId 3d000 - "
    "Init COMPLETE",
    "[rank{r}]:[I314 09:58:02.000000000 ProcessGroupNCCL.cpp:946] {pg} NCCL version 2.21.5",
    "Lhotse AIStore dataloader: reading shards from ais://speech-train",
]
_DETECTED = [
    "[rank{r}]:[E314 10:42:17.{ns} ProcessGroupNCCL.cpp:616] {pg} Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1203, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800012 "
    "milliseconds before timing out.",
    "[rank{r}]:[E314 10:42:17.{ns} ProcessGroupNCCL.cpp:1785] {pg}  failure detected by watchdog at work sequence "
    "id: 1203 PG status: last enqueued work: 1203, last completed work: 1202",
    "[rank{r}]:[E314 10:42:17.{ns} ProcessGroupNCCL.cpp:1834] {pg} First PG on this rank to signal dumping.",
    "[rank{r}]:[F314 10:52:17.{ns} ProcessGroupNCCL.cpp:1580] {pg} To avoid data inconsistency, we are taking the "
    "entire process down.",
]
_OBSERVED = [
    "[rank{r}]:[E314 10:42:18.{ns} ProcessGroupNCCL.cpp:1682] {pg} Observed flight recorder dump signal from another "
    "rank via TCPStore.",
    "[rank{r}]:[E314 10:42:18.{ns} ProcessGroupNCCL.cpp:1746] {pg} Received a dump signal due to a collective timeout "
    "from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 1202, last completed NCCL "
    "work: 1202.",
    "[rank{r}]:[F314 10:52:18.{ns} ProcessGroupNCCL.cpp:1580] {pg} To avoid data inconsistency, we are taking the "
    "entire process down.",
]


def write_data_stall_logs(dest: Path) -> Path:
    """Write the 4-rank data-stall job's two per-node SLURM error files into ``dest`` and return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for node, ranks in ((0, (0, 1)), (1, (2, 3))):
        lines: list[str] = []
        for r in ranks:
            pid, local = 4100 + r, r % 2
            lines += [t.format(r=r, pg=_PG.format(r=r), node=node, pid=pid, local=local) for t in _START]
        for r in ranks:
            block = _OBSERVED if r == 3 else _DETECTED
            lines += [t.format(r=r, pg=_PG.format(r=r), ns=f"{123456789 + r:09d}") for t in block]
        lines.append(f"srun: error: node-{node:02d}: tasks {ranks[0]}-{ranks[1]}: Aborted (core dumped)")
        (dest / f"error-4242-{node}.out").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def _stats(get_n: int, err_get: int, err_batch: int, err_write: int) -> str:
    return (
        f"{{err.get.n:{err_get},err.getbatch.n:{err_batch},err.http.write.n:{err_write},get.n:{get_n},"
        f"getbatch.n:{get_n // 64},getbatch.obj.n:{get_n},state.flags:6}}"
    )


def write_ais_logs(dest: Path) -> Path:
    """AIStore daemon logs of the same job (UTC, like the workers): one target whose batch GETs start failing at
    10:12, and a calm proxy. Written as ``ais log get cluster`` extracts them (one directory per daemon)."""
    target = dest / "aistarget-tgt0AbCd"
    proxy = dest / "aisproxy-prx0WxYz"
    for d in (target, proxy):
        d.mkdir(parents=True, exist_ok=True)
    header = "Started up at 2025/03/14 09:30:00, host {host}, go1.22.3 for linux/amd64"
    title = (
        "I 09:30:00.100000 daemon:263 Node {node}, Version 3.28.1a2b3c4, build 2025-03-01T10:00:00+0000, "
        "CPUs(32, runtime=32), container:cgroup-v2"
    )
    target_lines = [
        header.format(host="ais-target-0"),
        title.format(node="t[tgt0AbCd]"),
        "",
        f"I 10:06:00.000000 {_stats(100000, 0, 0, 0)}",
        f"I 10:09:00.000000 {_stats(160000, 0, 0, 0)}",
        "W 10:11:58.000000 lcache:270 hk: dsk=critical, skipping",
        f"I 10:12:00.000000 {_stats(171000, 0, 0, 0)}",
        "E 10:12:05.000000 shared_dm:212 shared-dm: terminated (broken pipe)",
        "E 10:12:05.500000 moss:488 x-get-batch[abc123]: out-of-bounds index 17 (recv'd len=0)",
        f"I 10:15:00.000000 {_stats(172500, 64, 12, 9)}",
        f"I 10:18:00.000000 {_stats(172600, 70, 14, 11)}",
    ]
    proxy_lines = [
        header.format(host="ais-proxy-0"),
        title.format(node="p[prx0WxYz]"),
        "",
        "I 10:06:01.000000 {err.get.n:0,lst.n:12,state.flags:6}",
        "I 10:15:01.000000 {err.get.n:1,lst.n:13,state.flags:6}",
    ]
    (target / "aistarget.ais-target-0.INFO.0314-093000.1").write_text("\n".join(target_lines) + "\n")
    (proxy / "aisproxy.ais-proxy-0.INFO.0314-093000.1").write_text("\n".join(proxy_lines) + "\n")
    return dest


def fixture_logs(tmp_path: Path) -> Path:
    """The checked-in data-stall fixture if it exists, else the small generated one under ``tmp_path``."""
    if DATA_STALL_LOGS.is_dir():
        return DATA_STALL_LOGS
    return write_data_stall_logs(tmp_path / "data_stall" / "logs")


def fixture_ais_logs(tmp_path: Path) -> Path:
    """The data-stall fixture's AIStore logs (``fixtures/data_stall/ais*``) if checked in, else generated ones."""
    base = DATA_STALL_LOGS.parent
    if base.is_dir():
        found = next((p for p in sorted(base.iterdir()) if p.is_dir() and p.name.startswith("ais")), None)
        if found is not None:
            return found
    return write_ais_logs(tmp_path / "data_stall" / "ais_logs")


def fill_arguments(schema: Mapping[str, Any], known: Mapping[str, Any], earlier: Mapping[str, Any]) -> Any:
    """Arguments for a tool with input ``schema``: parameters named like a ``known`` value get it; a required object
    parameter (verify_conclusion's conclusion) gets the first of diagnose's result (in ``earlier``) or its verdict
    that the schema accepts. Returns the arguments (a dict), or a string saying why the tool cannot be called yet."""
    props: Mapping[str, Any] = schema.get("properties", {})
    args = {name: value for name, value in known.items() if name in props and value is not None}
    for name in schema.get("required", []):
        if name in args:
            continue
        if props[name].get("type") == "object" or "$ref" in props[name] or "allOf" in props[name]:
            param = {"$defs": schema.get("$defs", {}), **props[name]}
            diagnosis = earlier.get("diagnose")
            verdict = diagnosis.get("verdict") if isinstance(diagnosis, dict) else None
            candidates = [diagnosis, verdict]
            if isinstance(verdict, dict):
                candidates.append({**verdict, **{k: v for k, v in known.items() if k in ("logs_dir", "ais_dir")}})
            fit = next((c for c in candidates if c and jsonschema.Draft202012Validator(param).is_valid(c)), None)
            if fit is None:
                return f"no value for the object argument {name!r} yet (diagnose's result and verdict do not fit)"
            args[name] = fit
        else:
            return f"no fixture value for the required argument {name!r} yet"
    return args


NODE_MIN = (20, 0)
"""The oldest Node.js the pinned clients are tested on. Their package.json files declare more (Claude Code 2.1.330:
>= 22.0.0; MCP Inspector 2.12.0: >= 22.19.0, so npm prints EBADENGINE warnings), but every e2e test passes on Node
20.20.2, and the Claude Code tests also on Debian's 18.20.4; the Inspector was not run on 18 (Debian's build lacks
a builtin it loads). Below 20 is untested, so it is refused."""


def node_version() -> tuple[int, int, int] | None:
    """``node --version`` as numbers, or None when node is not on PATH (or does not run)."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)\S*", out)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def node_tool(name: str) -> Path:
    """``tests/e2e/node_modules/.bin/<name>``, or skip the test saying how to install it.

    No node, or no installed clients: skipped (the e2e tests are optional). Clients installed but a node older than
    :data:`NODE_MIN`: failed, saying so: the README's install command ran ``npm install``, so a run that quietly
    skipped them would look green while testing less (this is how ``.ci/run`` catches an old Node.js)."""
    need = ".".join(map(str, NODE_MIN))
    version = node_version()
    if version is None:
        pytest.skip(f"node is not installed: the {name} end-to-end tests need Node.js >= {need} and `{INSTALL_HINT}`")
    path = NODE_BIN / name
    if not path.exists():
        pytest.skip(f"{path.relative_to(REPO)} is missing: run `{INSTALL_HINT}` (pinned in tests/e2e/package.json)")
    if version[:2] < NODE_MIN:
        pytest.fail(
            f"Node.js {'.'.join(map(str, version))} is too old for the {name} end-to-end tests: they need Node.js "
            f">= {need} (tested on 20.20.2; the pinned packages declare >= 22). Install a newer Node.js, or remove "
            "tests/e2e/node_modules to skip these tests."
        )
    return path


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a client run: a throwaway HOME, no credentials, no non-essential network traffic."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "MCP_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        TMPDIR=tempfile.gettempdir(),
        MCP_INSPECTOR_SECRET_STORE="memory",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        NO_COLOR="1",
    )
    env.update(extra)
    return env

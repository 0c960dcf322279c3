"""A launcher line that names a worker only by its local rank and process id (``failed (exitcode: -6) local_rank: 5
(pid: 21617)``) names the rank whose NCCL init line is that process's (``host:21617:22710 [5] NCCL INFO comm ... rank
5 nranks 8``); where two hosts have a process of that id, only the agent's own host's counts.

Held out: a pasted excerpt of an eight-GPU node, every rank's NCCL init line, the other workers' NCCL service
threads losing their connections, and the launcher's first failure, local rank 5 aborted (SIGABRT). The report named
no rank ("no line maps that process to a global rank").
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import write

AGENT = {
    "glog": "E1114 06:04:09.095000 {agent} torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: "
    "{code}) local_rank: {local} (pid: {pid}) of binary: /opt/conda/bin/python",
    "bracketed": "[2024-11-14 06:04:09,095] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: "
    "{code}) local_rank: {local} (pid: {pid}) of binary: /opt/conda/bin/python",
    "logging": "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {code}) local_rank: {local} "
    "(pid: {pid}) of binary: /opt/conda/bin/python",
}


def _node(host: str, base: int, per_node: int, world: int, pid0: int) -> list[str]:
    lines = [
        f"{host}:{pid0 + k}:{pid0 + 1000 + k} [{k}] NCCL INFO comm 0x25b97d{k}0 rank {base + k} nranks {world} "
        f"cudaDev {k} nvmlDev {k} busId {k}8000 commId 0x593e48e14bee5768 - Init COMPLETE"
        for k in range(per_node)
    ]
    return lines


def _closed(host: str, pid0: int, per_node: int, bad: int) -> list[str]:
    return [
        f"{host}:{pid0 + k}:{pid0 + 2000 + k} [32626] NCCL INFO [Service thread] Connection closed by localRank {bad}"
        for k in range(per_node)
        if k != bad
    ]


MATRIX = list(itertools.product(("glog", "bracketed", "logging"), (-6, -9, 1), (2, 5), ("one", "two"), (False, True)))


@pytest.mark.parametrize(("style", "code", "culprit", "nodes", "gz"), MATRIX)
def test_the_process_a_launcher_names_is_the_rank_its_nccl_init_line_states(
    style: str, code: int, culprit: int, nodes: str, gz: bool, tmp_path: Path
) -> None:
    world = 8
    per_node = world if nodes == "one" else world // 2
    pid0 = 21612  # two hosts number their processes alike: the pids collide across nodes
    files: dict[str, list[str]] = {}
    for n in range(world // per_node):
        host = f"nb-e3p9s3o28rnk-{n}"
        lines = _node(host, n * per_node, per_node, world, pid0)
        local = culprit - n * per_node
        if 0 <= local < per_node:
            lines += _closed(host, pid0, per_node, local)
            agent = AGENT[style].format(agent=pid0 - 100, code=code, local=local, pid=pid0 + local)
            lines.append(agent)
        files[f"{host}.log"] = lines
    logs = write(tmp_path, files, compress=gz)
    d = diagnose(str(logs), history=False)
    assert d.verdict.culprit_ranks == [culprit], d.verdict.explanation
    assert d.verification.accepted, d.verification.summary


def test_a_pid_two_hosts_have_names_no_rank_when_the_agent_names_no_host(tmp_path: Path) -> None:
    """Two nodes' NCCL lines in one pasted excerpt, the same pid on both, and an agent line of no host: no rank."""
    world, per_node, pid0 = 8, 4, 21612
    lines = _node("gpu-a", 0, per_node, world, pid0) + _node("gpu-b", 4, per_node, world, pid0)
    lines.append(AGENT["logging"].format(code=-6, local=1, pid=pid0 + 1))
    d = diagnose(str(write(tmp_path, {"excerpt.log": lines})), history=False)
    assert d.verdict.culprit_ranks == [], d.verdict.explanation
    assert not ({1, 5} & set(d.verdict.suspect_ranks)) or len(d.verdict.suspect_ranks) != 1

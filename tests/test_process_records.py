"""A worker's record that names its process (``pid=481``, ``[pid 481]``, loguru's ``process 'MainProcess' (481)``)
is that worker's rank's when the launcher's failure table ties the pid to a rank, and so is the traceback right after
it; the agent's ``failed (exitcode: 1) local_rank: L (pid: P)`` line is paired with the table's row by that pid.

Held out: two torchrun agents writing into one console, the trainer's tracebacks under a loguru-style header with
the process id and no rank. Each agent's table names its node's first failure as the root cause, and both tables
number their workers 0-3, so the local ranks of one overwrote the other's. The report gave "culprit 3" (node 0's first
failure, a rank whose own traceback ends in "Connection closed by peer"), not rank 5 (node 1), whose NaN check raised
first.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import GLOO_CLOSED, NodeLog, seconds, write

NPROC = 4


def _header(style: str, at: float, pid: int) -> str:
    t = seconds(at)
    if style == "loguru":
        return (
            f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d} | ERROR    | __main__:<module>:77 - An error has been "
            f"caught in function '<module>', process 'MainProcess' ({pid}), thread 'MainThread' (140281263893376):"
        )
    if style == "logging":
        return f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} ERROR [pid {pid}] train: the step failed"
    return f'time={t:%Y-%m-%dT%H:%M:%S}.{t.microsecond // 1000:03d}Z level=error pid={pid} msg="the step failed"'


def _record(node: NodeLog, style: str, at: float, local: int, error: str) -> None:
    node.lines.append(_header(style, at, node.pid(local)))
    node.lines += [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 52, in main',
        "    loss = step(batch)" if "Closed" not in error else "    loss.backward()",
        error,
    ]


def _job(style: str, culprit: tuple[int, int]) -> list[NodeLog]:
    """Two agents of four workers; ``culprit`` (node, local rank) raises at 10 s. Every other worker's collective
    then fails on the closed peer; on the culprit's node the agent stops them, on the other node one of them exits
    with code 1 first (its agent's table names it as the root cause)."""
    nodes = [NodeLog(n, NPROC, n * NPROC, agent_pid=1674 + 100 * n, tee=False) for n in range(2)]
    for node in nodes:
        node.banner(seconds(0))
        for k in range(NPROC):
            g = node.base + k
            node.lines.append(f"{seconds(2):%Y-%m-%d %H:%M:%S} INFO rank={g} local_rank={k} world_size={2 * NPROC} up")
    cn, cl = culprit
    c = nodes[cn]
    _record(c, style, 10, cl, "ValueError: shard 17 has a record with 0 tokens")
    closed = GLOO_CLOSED.format(peer=2, port=29500)
    for k in range(NPROC):
        if k != cl:
            _record(c, style, 10.5, k, closed)
    c.sigterms(seconds(11), [k for k in range(NPROC) if k != cl])
    c.failed(seconds(11.05), cl, 1)
    c.child_failed(seconds(11), (cl, 1), {k: -15 for k in range(NPROC) if k != cl})
    o = nodes[1 - cn]
    first = (cl + 1) % NPROC  # the other node's first exit: a victim
    for k in range(NPROC):
        _record(o, style, 11.5 + 0.1 * k, k, closed)
    o.sigterms(seconds(12.4), [k for k in range(NPROC) if k != first])
    o.failed(seconds(12.5), first, 1)
    o.child_failed(seconds(12.5), (first, 1), {k: -15 for k in range(NPROC) if k != first})
    return nodes


MATRIX = list(itertools.product(("loguru", "logging", "logfmt"), ((1, 1), (0, 2)), ("one", "per_node"), (False, True)))


@pytest.mark.parametrize(("style", "culprit", "files", "gz"), MATRIX)
def test_a_record_naming_its_process_is_that_ranks(
    style: str, culprit: tuple[int, int], files: str, gz: bool, tmp_path: Path
) -> None:
    nodes = _job(style, culprit)
    first, second = (nodes[culprit[0]], nodes[1 - culprit[0]])  # the culprit's node failed first: its lines first
    if files == "one":
        logs = write(tmp_path, {"console.log": first.lines + second.lines}, compress=gz)
    else:
        logs = write(tmp_path, {f"node{n.index}.log": n.lines for n in nodes}, compress=gz)
    d = diagnose(str(logs), history=False)
    want = culprit[0] * NPROC + culprit[1]
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [want]), d.verdict.explanation
    assert d.verification.accepted, d.verification.summary
    victim = (1 - culprit[0]) * NPROC + (culprit[1] + 1) % NPROC  # named root cause by its own node's table
    assert victim not in d.verdict.suspect_ranks


def test_without_a_table_the_process_names_no_rank(tmp_path: Path) -> None:
    """No launcher table ties the pids to ranks: the records stay unattributed (no rank is guessed from a pid)."""
    nodes = _job("logfmt", (1, 1))
    lines = [ln for ln in nodes[1].lines + nodes[0].lines if not ln.startswith(("  ", "[", "-", "=", "Root", "Fail"))]
    logs = write(tmp_path, {"console.log": lines})
    d = diagnose(str(logs), history=False)
    assert 5 not in d.verdict.culprit_ranks or d.verdict.confidence != "high"

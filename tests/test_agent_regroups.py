"""What a torchrun agent's own lines show when nothing else does.

* Two stops of one agent that tear down different worker processes are two runs of the workers (the agent restarted
  its group), even when it logs no INFO (no ``Restarting worker group``) and no worker's output reaches the file
  (``--local-ranks-filter``, workers that log elsewhere).
* An agent that stopped as many workers as the world has ranks runs the whole world: its local ranks are the global
  ones, so ``failed (exitcode: 1) local_rank: 2`` names rank 2.
* A rank whose traceback shows it in another collective than the majority of the ranks that timed out took a detour,
  unless another rank's traceback shows it in that same collective (whatever ended it): then a collective completed for
  some ranks and not for others, and none of them is the odd one out.

Held out: a console of ``torchrun --max-restarts 1 --local-ranks-filter 0`` whose first attempt lost local rank 2
gave "the chain runs backwards" and no verdict; a size mismatch that two ranks got through named one of them the
culprit.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pytest

from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import API, GLOO_CLOSED, NodeLog, seconds, write


def _filtered_console(nproc: int, bad: int, then: str, stated: bool) -> list[str]:
    """One agent's console with only local rank 0's output: attempt 0 loses local rank ``bad`` (exit 1) at 12 s; the
    restarted group (new worker processes) fails at 16 s, ``then``: in its init on every rank, or on one rank."""
    node = NodeLog(0, nproc, 0, agent_pid=13433, tee=False)
    node.banner(seconds(0))
    up = f"rank 0/{nproc} up" if stated else "rank 0 up"
    node.lines.append(f"2026-12-07 19:40:43.544 | INFO     | __main__:main:19 - {up} (local_rank=0, restart_count=0)")
    for s in range(1, 5):
        node.lines.append(f"2026-12-07 19:40:{44 + s}.700 | INFO     | __main__:main:34 - step {5 * s:4d} | loss 0.78")
    first = [k for k in range(nproc) if k != bad]
    node.sigterms(seconds(12), first)
    node.failed(seconds(12.05), bad, 1)
    # the new group: other processes (the agent numbers them after the first group's)
    second = {k: node.pid(k) + 25 for k in range(nproc)}
    last = 0 if then == "init" else (bad + 1) % nproc
    for k in range(nproc):
        if k != last:
            node.agent("W", seconds(16), f"{API}:1028", f"Sending process {second[k]} closing signal SIGTERM")
    node.agent(
        "E",
        seconds(16.04),
        f"{API}:1002",
        f"failed (exitcode: 1) local_rank: {last} (pid: {second[last]}) of binary: /usr/bin/python3",
    )
    # its report is of the last group: a NodeLog whose pids are the second group's
    report = NodeLog(0, nproc, 0, agent_pid=node.agent_pid + 25, tee=False)
    assert all(report.pid(k) == second[k] for k in range(nproc))
    report.child_failed(seconds(16), (last, 1), {k: -15 for k in range(nproc) if k != last})
    return node.lines + report.lines


REGROUP_MATRIX = list(itertools.product((2, 4), ("first", "last"), ("init", "one"), (False, True)))


@pytest.mark.parametrize(("nproc", "which", "then", "gz"), REGROUP_MATRIX)
def test_an_agent_stopping_new_workers_had_restarted_its_group(
    nproc: int, which: str, then: str, gz: bool, tmp_path: Path
) -> None:
    bad = 1 if which == "first" else nproc - 1
    logs = write(tmp_path, {"job.out": _filtered_console(nproc, bad, then, stated=True)}, compress=gz)
    d = diagnose(str(logs), history=False)
    assert len(d.attempts) == 2, d.attempts
    assert d.attempt == 0  # the first failed one
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [bad]), d.verdict.explanation
    assert d.verification.accepted, d.verification.summary


def test_without_the_world_size_the_failed_worker_stays_a_local_rank(tmp_path: Path) -> None:
    logs = write(tmp_path, {"job.out": _filtered_console(4, 2, "init", stated=False)})
    d = diagnose(str(logs), history=False)
    assert len(d.attempts) == 2
    assert d.verdict.culprit_ranks == []
    assert "local rank 2 (pid " in d.verdict.explanation, d.verdict.explanation


def test_an_agent_that_stops_the_same_workers_twice_restarted_nothing(tmp_path: Path) -> None:
    """SIGTERM, then SIGKILL 30 s later for the workers that did not stop (one flushed a step as it died): one stop of
    one group."""
    node = NodeLog(0, 4, 0, agent_pid=13433, tee=False)
    node.lines.append("2026-12-07 19:40:43.544 | INFO     | __main__:main:19 - rank 0/4 up")
    node.sigterms(seconds(12), [0, 1, 3])
    node.failed(seconds(12.05), 2, 1)
    node.lines.append("2026-12-07 19:40:53.100 | INFO     | __main__:main:34 - step   25 | loss 0.78")  # flushed
    for k in (0, 1, 3):
        node.agent("W", seconds(42), f"{API}:1028", f"Sending process {node.pid(k)} closing signal SIGKILL")
    d = diagnose(str(write(tmp_path, {"job.out": node.lines})), history=False)
    assert len(d.attempts) <= 1, d.attempts


def test_an_agent_of_part_of_the_world_does_not_map_its_local_ranks(tmp_path: Path) -> None:
    """Two nodes of two workers, only the second node's file: its local rank 1 is not rank 1."""
    node = NodeLog(1, 2, 2, agent_pid=13433, tee=False)
    node.lines.append("2026-12-07 19:40:43.544 | INFO     | __main__:main:19 - rank 2/4 up")
    node.sigterms(seconds(12), [0])
    node.failed(seconds(12.05), 1, 1)
    d = diagnose(str(write(tmp_path, {"node1.log": node.lines})), history=False)
    assert 1 not in d.verdict.culprit_ranks and 1 not in d.verdict.suspect_ranks, d.verdict.explanation


GLOO_SEND_TIMEOUT = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 20000ms "
    "for send operation to complete"
)
AT = {
    "eval": ('  File "/srv/job/train.py", line 23, in <module>', "    dist.all_reduce(vals)"),
    "backward": (
        '  File "/srv/job/train.py", line 18, in <module>',
        "    loss.backward()",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 623, in backward',
        "    torch.autograd.backward(",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 979, in _engine_run_backward',
        "    return Variable._execution_engine.run_backward(",
    ),
}
COLLECTIVE = (
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce',
    "    work.wait()",
)


def _split_job(sites: dict[int, tuple[str, str]]) -> list[str]:
    """One node of ``len(sites)`` workers; rank r's traceback: (where it waited, ``timeout`` or ``closed``)."""
    node = NodeLog(0, len(sites), 0, agent_pid=14624)
    for r in sites:
        node.worker(r, f"2026-12-07 19:40:49,1{r}0 INFO rank {r}/{len(sites)} loaded config")
        node.worker(r, f"2026-12-07 19:40:50,1{r}0 INFO train step 4 loss 0.77")
    for r, (where, how) in sites.items():
        frames = [*AT[where], *COLLECTIVE] if where == "eval" else [*AT[where]]
        error = GLOO_SEND_TIMEOUT if how == "timeout" else GLOO_CLOSED.format(peer=1, port=13229)
        node.traceback(r, frames, error)
    at = seconds(30)
    failed = next(r for r, (_w, how) in sites.items() if how == "timeout")
    node.sigterms(at, [r for r in sites if r != failed])
    node.failed(at + timedelta(milliseconds=40), failed, 1)
    node.child_failed(at, (failed, 1), {r: -15 for r in sites if r != failed})
    return node.lines


def test_a_collective_some_ranks_got_through_names_no_odd_one_out(tmp_path: Path) -> None:
    """Ranks 1 and 2 still wait in the eval all-reduce; ranks 0 and 3 got through it and wait in the next backward
    (rank 0 lost its peer there, rank 3 timed out): rank 3 is not alone where it waits."""
    sites = {0: ("backward", "closed"), 1: ("eval", "timeout"), 2: ("eval", "timeout"), 3: ("backward", "timeout")}
    d = diagnose(str(write(tmp_path, {"launch.out": _split_job(sites)})), history=False)
    assert 3 not in d.verdict.culprit_ranks, d.verdict.explanation


def test_a_rank_alone_in_its_collective_took_a_detour(tmp_path: Path) -> None:
    sites = {0: ("eval", "timeout"), 1: ("eval", "timeout"), 2: ("eval", "timeout"), 3: ("backward", "timeout")}
    d = diagnose(str(write(tmp_path, {"launch.out": _split_job(sites)})), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("collective_mismatch", [3]), d.verdict.explanation


def test_a_preemption_followed_by_the_agents_stops_is_a_requeue_not_a_failure(tmp_path: Path) -> None:
    """One srun torchrun file of two agents, preempted (SLURM's line states its year, the agents' glog headers none)
    and requeued into the same file, where rank 1 fails: the first attempt was put back, the second is diagnosed."""
    a, b = NodeLog(0, 2, 0, agent_pid=5803, tee=False), NodeLog(1, 2, 2, agent_pid=5807, tee=False)
    lines = []
    for n in (a, b):
        n.banner(seconds(0))
    lines += a.lines + b.lines
    lines += [f"2026-12-07 19:40:{45 + s:02d},000 INFO rank {r}/4 step {s}" for s in range(3) for r in range(4)]
    lines.append(
        "slurmstepd: error: *** JOB 731402 ON gpu-node01 CANCELLED AT 2026-12-07T19:40:52 DUE TO PREEMPTION ***"
    )
    a.lines, b.lines = [], []
    a.sigterms(seconds(12.9), [0, 1])
    b.sigterms(seconds(12.95), [0, 1])
    lines += a.lines + b.lines
    a2, b2 = NodeLog(0, 2, 0, agent_pid=5936, tee=False), NodeLog(1, 2, 2, agent_pid=5940, tee=False)
    for n in (a2, b2):
        n.banner(seconds(70))
    lines += a2.lines + b2.lines
    lines += [f"2026-12-07 19:41:{55 + s:02d},000 INFO rank {r}/4 step {s}" for s in range(2) for r in range(4)]
    a2.lines = []
    a2.traceback(1, ['  File "/srv/job/train.py", line 40, in resume', "    torch.load(path)"],
                 "OSError: checkpoint /ckpt/step50.pt is truncated")  # fmt: skip
    a2.sigterms(seconds(79), [0])
    a2.failed(seconds(79.1), 1, 1)
    lines += a2.lines
    d = diagnose(str(write(tmp_path, {"slurm-731402.out": lines})), history=False)
    assert [x.outcome for x in d.attempts] == ["requeued", "failed"], d.attempts
    assert (d.attempt, d.verdict.category) == (1, "rank_crash"), d.verdict.explanation
    assert 1 in d.verdict.culprit_ranks + d.verdict.suspect_ranks  # (the steps name no rank: the others may hide one)


def _two_node_job(files: tuple[int, ...]) -> dict[str, list[str]]:
    """Two torchrun agents of 8 workers without --tee (16 ranks): node 1's local rank 3 (rank 11) exits with code 1
    and prints nothing; every other rank loses its peer (torch's [rankN]: on its traceback)."""
    out = {}
    for node in files:
        n = NodeLog(node, 8, 8 * node, agent_pid=4242 + node, tee=False)
        n.banner(seconds(0))
        n.lines += [f"2026-12-07 19:40:4{k},000 INFO world_size=16 step 3" for k in range(8)]
        for k in range(8):
            if (node, k) != (1, 3):
                n.victim(k, GLOO_CLOSED.format(peer=3, port=100 + k))
        if node == 1:
            n.sigterms(seconds(9.3), [k for k in range(8) if k != 3])
            n.failed(seconds(9.4), 3, 1)
        else:
            n.sigterms(seconds(9.5), list(range(8)))
        out[f"node{node}.log"] = n.lines
    return out


@pytest.mark.parametrize("files", [(1,), (0, 1)])
def test_a_failed_local_rank_of_another_node_is_that_nodes_rank(files: tuple[int, ...], tmp_path: Path) -> None:
    """The agent's workers are a block of 8 consecutive ranks: its lines' [rank8]: ... [rank15]: say which block,
    so its local rank 3 is rank 11 (torch's own [rankN]: is no --tee prefix mapping local N to rank N)."""
    d = diagnose(str(write(tmp_path, _two_node_job(files))), history=False)
    named = d.verdict.culprit_ranks + d.verdict.suspect_ranks
    assert named == [11], d.verdict.explanation

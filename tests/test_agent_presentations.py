"""Jobs told by their torchrun agents: who failed is decided from each rank's fate the same way whatever the role
name, the node and local rank of the culprit, how it failed, the order its agent's and its dying workers' lines reached
the file, and the file's compression.

Each failure of this family was first seen on a real torch 2.13 job we did not write (held-out sets of the session
that fixed it): a worker's last line tee'd after its agent's SIGTERMs (read as a restart), a rank that named itself
and exited with its own code (no shape), a rank that exited 0 early with its rank only in its file name (its node's
table in another file), a restart with workers that log without a prefix (one attempt), an earlier ``attempt_N`` with
a rank's OOM (not chosen), a SIGABRT with no NCCL watchdog (not the rank's own), gloo's ``Connection reset by peer``
of a lost peer (read as AIS keep-alive noise).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.fate_events import causal_model
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.printers.markdown import render_report
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.diagnosis_models import Diagnosis
from tests.agent_logs import GLOO_CLOSED, GLOO_RESET, NodeLog, seconds, write

P = 11
"""Workers per node (two-digit local ranks)."""
REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real_torch"
WORLD = 2 * P


def _crash_job(role: str, node: int, local: int, how: str, lag: bool) -> dict[str, list[str]]:
    """Two nodes of ``P`` workers; the worker ``local`` of ``node`` fails (``how``) at step 6, its neighbours lose
    their peer (gloo's reset on its node, a closed connection on the other), both agents stop the rest."""
    nodes = [NodeLog(k, P, k * P, 13339 + 4 * k, role=role) for k in range(2)]
    for n in nodes:
        n.banner(seconds(0))
        for k in range(P):
            n.worker(k, f"process group ready (world {WORLD})")
        for s in range(6):
            for k in range(P):
                n.worker(k, f"step {s} loss {40 - s * 0.4:.4f}")
    home, other = nodes[node], nodes[1 - node]
    g = home.base + local
    code = 1 if how == "exception" else 3
    own: list[str] = []
    if how == "exception":
        own = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 41, in <module>',
            "    batch = next(loader)",
            "ValueError: batch at step 6 has shape (0, 4); expected a non-empty batch",
        ]
        own = [f"[rank{g}]: {t}" for t in own]
    elif how == "line_then_exit":
        own = [f"checkpoint shard write failed on rank {g}, aborting"]
    near = [k for k in ((local + 1) % P, (local + 2) % P)]
    if not lag:
        for t in own:
            home.worker(local, t)
    for k in near:
        home.victim(k, GLOO_RESET.format(peer=node + 1, port=17843 + k))
    rest = [k for k in range(P) if k != local]
    home.sigterms(seconds(18.02), [k for k in rest if k not in near])
    if lag:  # the dying worker's output reached the tee after its agent's SIGTERMs
        for t in own:
            home.worker(local, t)
    home.failed(seconds(18.24), local, code)
    home.child_failed(seconds(18), (local, code), {k: (1 if k in near else -15) for k in rest})
    first, second = 3, 4
    for k in (first, second):
        other.victim(k, GLOO_CLOSED.format(peer=node + 1, port=50570 + k))
    other.sigterms(seconds(18.52), [k for k in range(P) if k not in (first, second)])
    other.failed(seconds(18.75), first, 1)
    other.child_failed(seconds(18), (first, 1), {k: (1 if k == second else -15) for k in range(P) if k != first})
    return {f"node{k}.log": n.lines for k, n in enumerate(nodes)}


CRASH_MATRIX = list(
    itertools.product(
        ("default", "trainer"),  # the role torchrun prefixes
        ((1, 10), (0, 3)),  # (node, local rank) of the culprit
        ("exception", "line_then_exit", "exit_only"),
        (False, True),  # the culprit's lines after its agent's SIGTERMs
        (False, True),  # gzip
    )
)


@pytest.mark.parametrize(("role", "where", "how", "lag", "gz"), CRASH_MATRIX)
def test_the_rank_that_failed_on_its_own_is_the_culprit_in_one_attempt(
    role: str, where: tuple[int, int], how: str, lag: bool, gz: bool, tmp_path: Path
) -> None:
    node, local = where
    logs = write(tmp_path, _crash_job(role, node, local, how, lag), compress=gz)
    d = diagnose(str(logs))
    v = d.verdict
    assert (v.category, v.culprit_ranks) == ("rank_crash", [node * P + local]), (v.explanation, d.attempts)
    assert len(d.attempts) <= 1, d.attempts
    assert d.verification.accepted, d.verification.summary
    # the victims' resets are their lost peer, not a storage client's keep-alive noise
    assert not any("keep-alive" in r.text for r in d.recommendations), d.recommendations
    assert not any("(retried)" in e.event for e in d.timeline)


def _early_exit_job(shared_launcher: bool, *, stopped: bool = False) -> dict[str, list[str]]:
    """Each rank logs to a file of its own (its rank only in the file name); rank 3 runs out of data and exits 0
    while the others wait for it (or, ``stopped``, is still there when its agent stops it); both agents write to one
    launcher file (or one each)."""
    nodes = [NodeLog(k, 5, k * 5, 27178 + 13 * k, tee=False) for k in range(2)]
    ranks: dict[str, list[str]] = {}
    for g in range(10):
        lines = [f"2026-12-07 19:40:40,100 - INFO - trainer - starting local_rank={g % 5} world_size=10"]
        lines += [f"2026-12-07 19:40:{41 + s:02d},100 - INFO - trainer - step {s}/20 loss=1.0{s}" for s in range(9)]
        if g == 3 and not stopped:
            lines.append("2026-12-07 19:40:49,690 - INFO - trainer - data exhausted after 8 steps, loop finished")
        ranks[f"rank_{g:02d}.log"] = lines
    for g in (1, 2, 4, 5, 6, 9):  # they lost their peer
        error = GLOO_CLOSED.format(peer=1, port=40000 + g)
        ranks[f"rank_{g:02d}.log"].append(f"2026-12-07 19:41:15,002 - ERROR - trainer - Uncaught exception {error}")
        nodes[g // 5].victim(g % 5, error)
    a, b = nodes
    a.banner(seconds(0))
    b.banner(seconds(0.5))
    a.sigterms(seconds(46.3), [0, 1, 3] if stopped else [0, 1])
    a.failed(seconds(46.4), 2, 1)
    a.child_failed(seconds(46), (2, 1), {4: 1, 0: -15, 1: -15, **({3: -15} if stopped else {})})
    b.sigterms(seconds(46.9), [2, 3])
    b.failed(seconds(47.0), 0, 1)
    b.child_failed(seconds(47), (0, 1), {1: 1, 4: 1, 2: -15, 3: -15})
    if shared_launcher:
        return {**ranks, "launcher.out": a.lines + b.lines}
    return {**ranks, "agent0.out": a.lines, "agent1.out": b.lines}


@pytest.mark.parametrize("shared_launcher", [True, False])
def test_a_rank_that_exited_0_before_its_agents_report_left_early(shared_launcher: bool, tmp_path: Path) -> None:
    d = _diag(tmp_path, _early_exit_job(shared_launcher))
    v = d.verdict
    assert (v.category, v.culprit_ranks) == ("early_exit", [3]), v.explanation
    assert d.verification.accepted, d.verification.summary
    # the rank states say what the verdict reasons from (its own lines alone leave rank 3 unknown)
    assert ("exited_early", "3") in [(g.state, g.ranks) for g in d.rank_states], d.rank_states


def test_the_ranks_of_a_node_whose_agent_left_no_table_did_not_leave_early() -> None:
    """Both agents wrote to one slurm-<job>.out; only node 0's agent printed its table (ranks 0-1). Rank 2, on node
    1, is in neither node 0's table nor its SIGTERMs: that says nothing of how it ended."""
    logs = REAL / "sigkill_one_file" / "logs"
    assert causal_model(gather_evidence(find_sources(logs))).fates[2].end != "exited_early"
    d = diagnose(str(logs))
    assert d.verdict.culprit_ranks == [1]
    assert not any(g.state == "exited_early" for g in d.rank_states), d.rank_states


@pytest.mark.parametrize("shared_launcher", [True, False])
def test_a_rank_its_agent_stopped_did_not_leave_early(shared_launcher: bool, tmp_path: Path) -> None:
    d = _diag(tmp_path, _early_exit_job(shared_launcher, stopped=True))
    assert d.verdict.category != "early_exit" and 3 not in d.verdict.culprit_ranks, d.verdict.explanation


def _restart_job(restarted: bool) -> dict[str, list[str]]:
    """One agent of 8 workers that log with their own times and no prefix; local rank 5 aborts (SIGABRT, no NCCL
    watchdog anywhere), the agent stops the rest; with ``restarted`` it starts them again 10 s later."""
    n = NodeLog(0, 8, 0, 26053, tee=False)
    n.banner(seconds(0))
    for s in range(4):
        for k in range(8):
            n.lines.append(f"2026-12-07T19:40:{45 + s:02d} | r{k:02d} | INFO    | step {s + 1}/20 loss=0.9{k}")
    for k in (1, 6):
        n.traceback(k, ['  File "/workspace/train.py", line 79, in save', "    dist.barrier()"],
                    GLOO_RESET.format(peer=1, port=1196 + k))  # fmt: skip
    n.sigterms(seconds(9.3), [k for k in range(8) if k != 5])
    n.failed(seconds(9.4), 5, -6)
    if restarted:
        for k in range(8):
            n.lines.append(f"2026-12-07T19:41:00 | r{k:02d} | INFO    | starting pid={27000 + k} local_rank={k}")
        for k in range(8):
            n.lines.append(f"2026-12-07T19:41:05 | r{k:02d} | INFO    | step 1/20 loss=0.9{k}")
        n.traceback(0, ['  File "/workspace/train.py", line 70, in save', "    assert not stale"],
                    "AssertionError: stale partial checkpoint found; refusing to overwrite")  # fmt: skip
        n.sigterms(seconds(27.0), list(range(1, 8)))
        n.failed(seconds(27.2), 0, 1)
        n.child_failed(seconds(27), (0, 1), {k: -15 for k in range(1, 8)})
    else:
        n.lines.append("2026-12-07T19:40:49 | r03 | INFO    | step 4/20 done")  # tee'd late: within the stop
        n.child_failed(seconds(9), (5, -6), {k: (1 if k in (1, 6) else -15) for k in range(8) if k != 5})
    return {"slurm-731942.out": n.lines}


@pytest.mark.parametrize("gz", [False, True])
def test_a_restart_of_workers_without_a_prefix_is_a_second_attempt(gz: bool, tmp_path: Path) -> None:
    d = diagnose(str(write(tmp_path, _restart_job(True), compress=gz)))
    assert len(d.attempts) == 2, d.attempts
    assert d.attempt == 0
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [5]), d.verdict.explanation


def test_a_stop_the_agent_reports_at_once_is_one_attempt(tmp_path: Path) -> None:
    d = diagnose(str(write(tmp_path, _restart_job(False))))
    assert len(d.attempts) <= 1, d.attempts
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [5]), d.verdict.explanation


def test_an_earlier_attempt_dir_with_a_ranks_failure_is_the_one_diagnosed(tmp_path: Path) -> None:
    """torchrun --log-dir on three hosts: attempt_0 holds rank 6's OOM, host-b's attempt_1 a restart that failed at
    init on rank 4 (the other hosts' agents gave up)."""
    oom = "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB (GPU 0; 79.15 GiB total capacity)"
    files: dict[str, list[str]] = {}
    for g in range(12):
        lines = [f"2026-12-07T19:40:{50 + s:02d}+0000 INFO rank={g} trainer: step {s}" for s in range(5)]
        if g == 6:
            lines += [f"[rank6]: {t}" for t in ("Traceback (most recent call last):", "    model(x)", oom)]
        elif g in (5, 7):
            lines += [f"[rank{g}]: " + GLOO_CLOSED.format(peer=2, port=4000 + g)]
        files[f"host-{'abc'[g // 4]}/job_x/attempt_0/{g % 4}/stderr.log"] = lines
    files["host-b/job_x/attempt_1/0/stderr.log"] = [
        "2026-12-07T19:41:20+0000 INFO rank=4 trainer: starting",
        "[rank4]: RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/"
        "pair.cc:144] no error",
    ]
    d = _diag(tmp_path, files)
    assert d.attempt == 0, d.attempts
    assert d.attempts[0].outcome == "failed", d.attempts  # its rank failed, and the workers were started again
    # (no line maps host-a's and host-c's local ranks to global ones: rank 6 is named from a subset, a suspect)
    v = d.verdict
    assert (v.category, v.culprit_ranks or v.suspect_ranks) == ("cuda_oom", [6]), v.explanation


def _diag(tmp: Path, files: dict[str, list[str]]) -> Diagnosis:
    return diagnose(str(write(tmp, files)))


GLOO_SEND_TIMEOUT = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 20000ms "
    "for send operation to complete"
)


@pytest.mark.parametrize("tee", [True, False])
def test_the_exit_of_a_rank_that_timed_out_is_not_a_failure_of_its_own(tee: bool, tmp_path: Path) -> None:
    """Rank 6 never reaches step 4's all_reduce; the others time out; the agent reports local rank 1's exit (it
    noticed that one first) and its table is not in the file (the agent was cancelled). Rank 1 is a victim."""
    n = NodeLog(0, 8, 0, 1258, tee=tee)
    n.banner(seconds(0))
    for k in range(8):
        n.worker(k, f"[20:33:50] rank {k} of 8 ready")
    for s in range(1, 4):
        for k in range(8):
            n.worker(k, f"[20:33:5{s}] rank={k} step={s} loss=1.27{k}")
    for k in (*range(6), 7):
        n.victim(k, GLOO_SEND_TIMEOUT)
    n.sigterms(seconds(33.3), [k for k in range(8) if k != 1])
    n.failed(seconds(33.5), 1, 1)
    d = _diag(tmp_path, {"torchrun.log": n.lines})
    v = d.verdict
    assert 1 not in v.culprit_ranks + v.suspect_ranks, (v.culprit_ranks, v.suspect_ranks, v.explanation)
    assert (v.culprit_ranks or v.suspect_ranks) == [6], v.explanation
    # named: the report's title never calls the failure "not attributable" (without the tee prefix its step lines
    # are no rank's, so no completed step says it stopped between steps: the cause is what the logs lack)
    title = render_report(d).splitlines()[0]
    assert "not attributable" not in title and title.endswith("— culprit rank(s) 6"), title

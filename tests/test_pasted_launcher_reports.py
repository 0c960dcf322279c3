"""A launcher's report pasted alone (an issue, a chat, a ticket) still shows its shape and its suspect, the same way
whatever was done to it on the way: a torchrun ``ChildFailedError`` table whole or only its tail, as printed or
copied from a rendered page (markdown ate its underscores), behind an srun label or not; ``mp.spawn``'s
``ProcessExitedException`` line; NCCL's link errors behind an OpenMPI ``--tag-output`` label.

First seen on real public pastes of a held-out set: each of these read as "evidence incomplete" with nothing named.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from debug_training_logs.analysis.action import action
from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import NodeLog, seconds, write


def _table(root: int, code: int, others: bool = True) -> list[str]:
    """One node's torchrun report (4 workers, global ranks 4-7): ``root`` failed first with ``code``, the others
    were stopped (or, not ``others``, the report lists no other failure)."""
    n = NodeLog(1, 4, 4, 36000, host="ding-X10DRG")
    n.child_failed(seconds(5), (root - 4, code), {k: -15 for k in range(4) if k != root - 4} if others else {})
    for k, t in enumerate(n.lines):
        n.lines[k] = t.replace("/workspace/train.py", "/workspace/train_hand_pose.py")
    return n.lines


def _markdown(lines: list[str]) -> list[str]:
    """What copying a rendered GitHub comment gives: ``_x_`` became italics, its underscores gone."""
    return [re.sub(r"(?<=\w)_(?=\w)", " ", t) for t in lines]


def _tail(lines: list[str]) -> list[str]:
    """The report's last entry only (from its ``time`` field): what a reply quoting the root cause pastes."""
    start = max(k for k, t in enumerate(lines) if t.strip().startswith("time"))
    return lines[start:]


PASTES = list(
    itertools.product(
        (-9, -11),  # SIGKILL (the OOM killer), SIGSEGV
        (False, True),  # markdown ate the underscores
        (False, True),  # only the tail
        ("", "0: "),  # an srun --label prefix
        (True, False),  # the report lists the workers it stopped, or <NO_OTHER_FAILURES>
    )
)


@pytest.mark.parametrize(("code", "mangled", "tail", "label", "others"), PASTES)
def test_a_pasted_torchrun_report_shows_the_rank_that_died_as_a_suspect(
    code: int, mangled: bool, tail: bool, label: str, others: bool, tmp_path: Path
) -> None:
    lines = _table(6, code, others)
    lines = _tail(lines) if tail else lines
    lines = _markdown(lines) if mangled else lines
    d = diagnose(str(write(tmp_path, {"excerpt.log": [label + t for t in lines]})))
    v = d.verdict
    assert v.category == "rank_crash", v.explanation
    # one node's report: the rank is a suspect (another node may hold an earlier failure), never a culprit of more
    assert (v.culprit_ranks or v.suspect_ranks) == [6], (v.culprit_ranks, v.suspect_ranks, v.explanation)
    assert d.verification.accepted, d.verification.summary
    # killed by a signal of its own: not "torn down after a peer failed" (the agent's ChildFailedError, the only
    # exception in a one-rank paste, is no peer's error of the rank)
    assert ("crashed", "6") in [(g.state, g.ranks) for g in d.rank_states], d.rank_states
    # the first thing to do: a SIGKILL without a traceback is the kernel's OOM killer until dmesg says otherwise
    assert ("OOM killer" in v.action) == (code == -9), v.action


def test_an_agents_line_alone_about_a_sigkilled_worker_points_at_the_oom_killer(tmp_path: Path) -> None:
    n = NodeLog(0, 4, 0, 10390)
    n.sigterms(seconds(3), [1, 2, 3])
    n.failed(seconds(3.2), 0, -9)
    d = diagnose(str(write(tmp_path, {"excerpt.log": n.lines})))
    v = d.verdict
    assert v.category == "rank_crash" and v.suspect_processes == [f"local rank 0 (pid {n.pid(0)})"], v.explanation
    assert "OOM killer" in v.action and "stalled" not in v.action, v.action


def test_a_table_row_outside_any_report_is_not_read_as_one(tmp_path: Path) -> None:
    """A benchmark's own ``rank : value`` table is not torchrun's: only a ``(local_rank: L)`` value opens an entry."""
    lines = ["  time      : 12.5 s", "  rank      : 3", "  exitcode  : 0 (pid: 77)", "training finished"]
    d = diagnose(str(write(tmp_path, {"bench.log": lines})))
    assert d.verdict.culprit_ranks == [] and d.verdict.suspect_ranks == [], d.verdict.explanation


@pytest.mark.parametrize("how", ["signal SIGKILL", "exit code 3"])
def test_spawns_report_alone_names_its_process_as_a_suspect(how: str, tmp_path: Path) -> None:
    lines = [
        'File "/opt/conda/lib/python3.8/site-packages/torch/multiprocessing/spawn.py", line 130, in join',
        "    raise ProcessExitedException(",
        f"torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with {how}",
    ]
    d = diagnose(str(write(tmp_path, {"excerpt.log": lines})))
    v = d.verdict
    assert v.category == "rank_crash" and (v.culprit_ranks or v.suspect_ranks) == [1], v.explanation


def test_nccls_host_behind_an_mpi_label_names_the_node(tmp_path: Path) -> None:
    host = "gpu-node-057"
    lines = [
        f"2019-06-02T16:13:44.884Z: [1,{r}]<stdout>:{host}:{815 + r}:864 [0] misc/ibvwrap.cu:220 NCCL WARN Call to "
        "ibv_get_async_event failed"
        for r in (12, 13)
    ]
    d = diagnose(str(write(tmp_path, {"excerpt.log": lines})))
    assert d.verdict.category == "gpu_fabric" and d.verdict.suspect_nodes == [host], d.verdict.explanation
    assert host in d.verdict.action


def test_an_action_with_no_node_and_no_rank_says_so_in_words() -> None:
    text = action("gpu_fabric", [], [], [], False, [])
    assert "?" not in text and "the node(s) whose lines show it" in text

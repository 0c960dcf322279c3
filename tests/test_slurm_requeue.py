"""SLURM requeues as attempt boundaries: a cancel that may put the job back in the queue (requeue, preemption, node
failure), followed in the same file by lines only a starting job writes, starts a new attempt; a cancel that ends
the job (time limit, signal), or one after which only other nodes' last lines follow, does not.

The files are what ``sbatch --open-mode=append`` leaves after a requeue: the first run's output, slurmstepd's cancel
line, then the second run's output appended. Varied: the reason, the start line after it, the cancel's prefix (plain,
``slurmstepd-<host>:``, an ``srun -l`` label), per-node files or one shared file.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.analysis import attempts
from debug_training_logs.formats import slurm
from debug_training_logs.tools.nccl_state_table import nccl_state_table

START_LINES = {
    "torchrun": "W1120 10:09:00.100000 5151 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable "
    "for each process to be 1 in default, to avoid your system being overloaded.",
    "nccl": "[default0]:gpu-node-{n}:5200:5200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
    "lightning": "[default0]:Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {m}/4",
}
PREFIXES = {
    "plain": "slurmstepd: error: ",
    "host": "slurmstepd-gpu-node-{n}: error: ",
    "label": "{n}: slurmstepd: error: ",
}


def _cancel(n: int, reason: str | None, prefix: str) -> str:
    due = f" DUE TO {reason}" if reason else ""
    return prefix.format(n=n) + f"*** STEP 4242.0 ON gpu-node-{n} CANCELLED AT 2026-11-20T10:00:00{due} ***"


def _steps(n: int, minute: int, count: int) -> list[str]:
    return [
        f"[default{lr}]:[rank{2 * n + lr}]:[I1120 {minute:02d}:{i % 60:02d}:00.000000001 train.py:12] step {i} "
        f"loss 2.{i:02d}"
        for i in range(count)
        for lr in (0, 1)
    ]


def _node_file(n: int, reason: str | None, start: str | None, prefix: str) -> list[str]:
    first = _steps(n, 9, 30)
    again = [START_LINES[start].format(n=n, r=2 * n, m=2 * n + 1)] if start else []
    second = _steps(n, 10, 30) if start else []
    failed = (
        ["E1120 10:40:05.000000 5151 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
         "local_rank: 0 (pid: 5300) of binary: /usr/bin/python3"]
        if start
        else []
    )  # fmt: skip
    return [*first, _cancel(n, reason, PREFIXES[prefix]), *again, *second, *failed]


def _job(tmp: Path, reason: str | None, start: str | None, prefix: str = "plain", shared: bool = False) -> Path:
    d = tmp / "logs"
    d.mkdir()
    files = [_node_file(n, reason, start, prefix) for n in (0, 1)]
    if shared:  # one slurm-<jobid>.out for the whole job: the nodes' lines interleaved as they were written
        merged = [t for pair in itertools.zip_longest(*files) for t in pair if t is not None]
        (d / "slurm-4242.out").write_text("\n".join(merged) + "\n")
    else:
        for n, lines in enumerate(files):
            (d / f"error-4242-{n}.out").write_text("\n".join(lines) + "\n")
    return d


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
@pytest.mark.parametrize("start", sorted(START_LINES))
@pytest.mark.parametrize("reason", ["JOB REQUEUE", "PREEMPTION", "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"])
def test_a_requeue_the_job_ran_again_after_is_an_attempt(tmp_path: Path, reason: str, start: str, prefix: str) -> None:
    d = _job(tmp_path, reason, start, prefix)
    split = attempts.split(d)
    assert split.count == 2, (split.method, split.boundaries)
    assert "SLURM requeues" in split.method
    first, second = split.attempts
    assert first.outcome == ("failed" if reason.startswith("NODE FAILURE") else "requeued")
    assert second.outcome == "failed"  # the torchrun agent's failure after the requeue
    assert first.evidence and "CANCELLED AT" in first.evidence[0].text
    # every line after the cancel is the second attempt's, every line before it the first's
    rel = "error-4242-0.out"
    lines = (d / rel).read_text().splitlines()
    cut = next(i for i, t in enumerate(lines, start=1) if "CANCELLED AT" in t)
    keep = split.keeper(1)
    assert [keep(rel, i, t) for i, t in enumerate(lines, start=1)] == [i > cut for i in range(1, len(lines) + 1)]
    # the default attempt is the first failed one: a requeue or preemption is not the failure to diagnose
    assert split.choose(None) == (0 if reason.startswith("NODE FAILURE") else 1)


@pytest.mark.parametrize("reason", ["TIME LIMIT", "TASK FAILURE", None])
def test_a_cancel_that_ends_the_job_is_no_attempt(tmp_path: Path, reason: str | None) -> None:
    d = _job(tmp_path, reason, "torchrun")
    assert attempts.split(d).count == 1


@pytest.mark.parametrize("reason", ["JOB REQUEUE", "PREEMPTION"])
def test_a_requeue_cancel_without_a_new_start_is_no_attempt(tmp_path: Path, reason: str) -> None:
    """One shared file: node 1's last steps follow node 0's cancel line, but nothing starts again."""
    d = _job(tmp_path, reason, None, shared=True)
    split = attempts.split(d)
    assert split.count == 1, split.boundaries


def test_a_shared_file_with_a_requeue_splits_once_per_cancel(tmp_path: Path) -> None:
    d = _job(tmp_path, "PREEMPTION", "nccl", shared=True)
    split = attempts.split(d)
    # both nodes' cancels (same time, a burst) are one boundary: the last of them
    assert split.count == 2, split.boundaries
    assert split.attempts[0].outcome == "requeued"
    lines = (d / "slurm-4242.out").read_text().splitlines()
    last_cancel = max(i for i, t in enumerate(lines, start=1) if "CANCELLED AT" in t)
    assert [b.line for b in split.boundaries["slurm-4242.out"]] == [last_cancel]


def test_tools_list_the_requeued_attempts(tmp_path: Path) -> None:
    d = _job(tmp_path, "JOB REQUEUE", "torchrun")
    res = nccl_state_table(str(d))
    assert [a.outcome for a in res.attempts] == ["requeued", "failed"] and res.attempt == 1


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-11-20T10:00:00 DUE TO JOB REQUEUE ***", True),
        ("slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-11-20T10:00:00 DUE TO PREEMPTION ***", True),
        ("*** STEP 4242.0 ON n1 CANCELLED AT 2026-11-20T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG ***", True),
        ("*** STEP 4242.0 ON n1 CANCELLED AT 2026-11-20T10:00:00 DUE TO TIME LIMIT ***", False),
        ("*** STEP 4242+1.0 ON n1 CANCELLED AT 2026-11-20T10:00:00 DUE to SIGNAL Terminated ***", False),
        ("*** STEP 4242.0 ON n1 CANCELLED AT 2026-11-20T10:00:00 ***", False),
    ],
)
def test_cancel_reasons(text: str, want: bool) -> None:
    c = slurm.parse_cancel(text)
    assert c is not None and c.may_requeue is want
    assert c.at == "2026-11-20T10:00:00"


def test_not_a_cancel() -> None:
    assert slurm.parse_cancel("echo CANCELLED AT noon") is None
    assert slurm.parse_cancel("[rank0]: step 5") is None

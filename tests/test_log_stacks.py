"""Python's own stack dumps (``faulthandler``) written into the ranks' logs, read the way a ``py-spy dump`` is read:
the rank outside the collective the others wait in is the one they wait for, on every presentation (one file per
rank, a ``--tee`` console, an ``srun --label`` or ``mpirun --tag-output`` combined file; ranks that dump at once write
their frames between each other's); a fatal error faulthandler printed is the rank's own death.

Held out: an ``srun --label`` job hung in one rank's shard read, killed at its time limit, with every rank's
``dump_traceback_later`` stacks in the file, got ``time_limit`` and no rank."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from debug_training_logs.formats import faulthandler
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import write

WORLD = 4
WAITING = (
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper',
    '  File "/srv/job/train.py", line 31 in <module>',
)
STUCK = {
    "data": (
        ("data_loading_stall",),
        ('  File "/srv/job/data.py", line 13 in read_shard', '  File "/srv/job/train.py", line 29 in <module>'),
    ),
    "checkpoint": (
        ("checkpoint_stall",),
        (
            '  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 652 in save',
            '  File "/srv/job/train.py", line 40 in save_checkpoint',
            '  File "/srv/job/train.py", line 27 in <module>',
        ),
    ),
    "lock": (
        ("rank_stuck", "nccl_timeout_unattributed"),
        (
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
            '  File "/srv/job/train.py", line 22 in wait_for_ready',
            '  File "/srv/job/train.py", line 28 in <module>',
        ),
    ),
}
PREFIX = {
    "per_rank_files": lambda r: "",
    "tee": lambda r: f"[default{r}]:",
    "srun": lambda r: f"{r}: ",
    "mpi": lambda r: f"[1,{r}]<stderr>:",
    "srun_tee": lambda r: f"{r // 2}: [default{r % 2}]:",  # srun -l torchrun --tee: two nodes of two
}


def _dump(stuck_frames: tuple[str, ...] | None, how: str) -> list[str]:
    """One rank's dump: ``how`` ``timeout`` (dump_traceback_later: every thread, a helper thread first) or
    ``signal`` (faulthandler.register: the main thread is the current one)."""
    frames = list(stuck_frames or WAITING)
    if how == "timeout":
        helper = [
            "Thread 0x00007f2c10000700 (most recent call first):",
            '  File "/usr/lib/python3.11/threading.py", line 324 in wait',
            '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap',
            "",
        ]
        return ["Timeout (0:00:15)!", *helper, "Thread 0x00007f2c131c3b80 (most recent call first):", *frames, ""]
    return ["Current thread 0x00007f2c131c3b80 (most recent call first):", *frames, ""]


def _job(presentation: str, stuck: int, where: str, how: str) -> dict[str, list[str]]:
    """Every rank logs its steps, then each dumps its stack while the job hangs (``stuck`` outside the collective);
    in a combined file the ranks' dumps come line by line between each other's."""
    pre = PREFIX[presentation]
    logs = {r: [f"2026-12-08 01:00:0{s},1{r}0 INFO rank {r}/{WORLD} step {s}" for s in range(3)] for r in range(WORLD)}
    dumps = {r: _dump(STUCK[where][1] if r == stuck else None, how) for r in range(WORLD)}
    if presentation == "per_rank_files":
        return {f"rank_{r}.log": logs[r] + dumps[r] for r in range(WORLD)}
    # (torch 2.4+ prefixes its own lines with the global rank: how a --tee console maps its local ranks)
    torch = {r: f"[rank{r}]:[W1208 01:00:00.000000 {r} ProcessGroupGloo.cpp:514] Warning: a gloo warning" for r in logs}
    lines = [pre(r) + torch[r] for r in range(WORLD)]
    lines += [pre(r) + t for s in range(3) for r in range(WORLD) for t in [logs[r][s]]]
    for k in range(max(len(d) for d in dumps.values())):
        lines += [pre(r) + dumps[r][k] for r in range(WORLD) if k < len(dumps[r])]
    if presentation == "srun":
        lines.append(
            "slurmstepd: error: *** STEP 88123.0 ON node-3 CANCELLED AT 2026-12-08T01:10:00 DUE TO TIME LIMIT ***"
        )
    return {"job.out": lines}


MATRIX = list(itertools.product(tuple(PREFIX), (0, 2), tuple(STUCK), ("timeout", "signal"), (False, True)))


@pytest.mark.parametrize(("presentation", "stuck", "where", "how", "gz"), MATRIX)
def test_the_rank_outside_the_collective_in_its_stack_dump_is_the_one_waited_for(
    presentation: str, stuck: int, where: str, how: str, gz: bool, tmp_path: Path
) -> None:
    logs = write(tmp_path, _job(presentation, stuck, where, how), compress=gz)
    d = diagnose(str(logs), history=False)
    v = d.verdict
    assert v.culprit_ranks == [stuck], v.explanation
    assert v.category in STUCK[where][0], v.explanation
    assert "stack dump" in v.explanation, v.explanation
    assert d.verification.accepted, d.verification.summary


def test_every_rank_waiting_in_its_dump_names_no_rank(tmp_path: Path) -> None:
    files = {f"rank_{r}.log": [f"2026-12-08 01:00:00,1{r}0 INFO rank {r}/{WORLD} up", *_dump(None, "timeout")]
             for r in range(WORLD)}  # fmt: skip
    d = diagnose(str(write(tmp_path, files)), history=False)
    assert d.verdict.culprit_ranks == [], d.verdict.explanation


@pytest.mark.parametrize("presentation", ["per_rank_files", "tee", "mpi"])
def test_a_fatal_error_faulthandler_printed_is_the_ranks_own_death(presentation: str, tmp_path: Path) -> None:
    """Rank 1 dies of a SIGSEGV in an extension (no launcher reports its exit); the others lose their peer."""
    pre = PREFIX[presentation]
    closed = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
    per: dict[int, list[str]] = {r: [f"2026-12-08 01:00:00,1{r}0 INFO rank {r}/3 step 0"] for r in range(3)}
    per[1] += [
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x00007fafc511eb80 (most recent call first):",
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at',
        '  File "/srv/job/ops.py", line 11 in fused_kernel',
        '  File "/srv/job/train.py", line 15 in <module>',
        "",
        "Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)",
    ]
    for r in (0, 2):
        per[r] += [f"[rank{r}]: Traceback (most recent call last):", f"[rank{r}]:   File \"/srv/job/train.py\", line 16, in <module>",
                   f"[rank{r}]:     dist.all_reduce(t)", f"[rank{r}]: {closed}"]  # fmt: skip
    if presentation == "per_rank_files":
        files = {f"rank_{r}.log": per[r] for r in range(3)}
    else:
        files = {"job.out": [pre(r) + t for r in (1, 0, 2) for t in per[r]]}
    d = diagnose(str(write(tmp_path, files)), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [1]), d.verdict.explanation
    assert "Segmentation fault" in d.verdict.explanation


def test_a_traceback_is_no_stack_dump() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/srv/job/train.py", line 16, in <module>',
        "    dist.all_reduce(t)",
        "RuntimeError: boom",
    ]
    assert faulthandler.parse([(i, t, t) for i, t in enumerate(lines, 1)]) == []


def test_the_main_thread_is_the_one_at_the_scripts_top_level() -> None:
    lines = _dump(STUCK["data"][1], "timeout")
    (stacks, cause), *_ = faulthandler.parse([(i, t, t) for i, t in enumerate(lines, 1)])
    main = stacks.main_thread()
    assert main is not None and main.frames[0].function == "read_shard"
    assert cause is None and len(stacks.threads) == 2


def test_a_rank_dumped_again_in_another_place_moves_and_is_not_the_one_waited_for(tmp_path: Path) -> None:
    """Every rank's watchdog dumps twice: rank 1 was in data loading at the first dump and waits in the all-reduce at
    the second (it moved on); rank 3 is in its shard read both times."""
    files = {}
    for r in range(WORLD):
        first = STUCK["data"][1] if r in (1, 3) else None
        second = STUCK["data"][1] if r == 3 else None
        files[f"rank_{r}.log"] = [f"2026-12-08 01:00:00,1{r}0 INFO rank {r}/{WORLD} up", *_dump(first, "timeout"),
                                  f"2026-12-08 01:00:20,1{r}0 INFO still here", *_dump(second, "timeout")]  # fmt: skip
    d = diagnose(str(write(tmp_path, files)), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("data_loading_stall", [3]), d.verdict.explanation


def test_a_cpp_exceptions_frames_are_no_stack_dump(tmp_path: Path) -> None:
    """c10's 'Exception raised from ... (most recent call first):' and its 'frame #N' lines (every NCCL watchdog
    abort) are neither read back nor taken for a Python stack dump."""
    cpp = [
        "[rank2]:[E521 08:02:13.442641787 ProcessGroupNCCL.cpp:1899] Process group watchdog thread terminated",
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:689 "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f3a001c2b00 in libtorch_cuda.so)",
    ]
    from debug_training_logs.analysis.evidence import gather_evidence

    ev = gather_evidence(find_sources(write(tmp_path, {"rank_2.log": cpp})))
    assert ev.worker.hits("stack_header") == [] and ev.hang is None

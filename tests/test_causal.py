"""The causal model: each rank's fate, accusations, detours, early exits and late errors, decided the same way on every
presentation of the logs (the ``[rankN]:`` prefix, srun labels, one file per rank, gzip, lines without a time), and a
verifier that rejects what the fates contradict.

The incidents are written the way torch, gloo, torchrun and a trainer write them (tests/incidents.py); each test reads
like the incident: who failed, how the others reacted, what a person would blame by mistake.
"""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from pathlib import Path

import pytest

from debug_training_logs.analysis import attempts
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.diagnosis_models import Diagnosis
from debug_training_logs.verify import verify
from debug_training_logs.verify.models import Conclusion
from tests.incidents import (
    BACKWARD,
    GLOO_CLOSED,
    GLOO_TIMEOUT,
    T0,
    Incident,
    in_collective,
    present,
    world_line,
)

STALL_SHAPES = {"data_loading_stall", "nccl_timeout_unattributed"}


def nan_reported_by_every_rank() -> Incident:
    """The trainer all-reduces a finite-loss flag: every rank raises naming rank 1 (rank 0 prints first)."""
    inc = Incident(4)
    world_line(inc)
    inc.steps_all(dict.fromkeys(range(4), 40), T0 + timedelta(seconds=1))
    at = T0 + timedelta(seconds=42)
    for r in (0, 2, 3, 1):
        inc.log(r, f"{at:%Y-%m-%d %H:%M:%S},{100 + r:03d} ERROR trainer: non-finite loss on rank(s) [1] at step 41", at)
        inc.traceback(
            r,
            [("/workspace/train.py", 77, "main", "check_finite(loss)")],
            "RuntimeError: non-finite loss on rank(s) [1]",
        )
    return inc


def rank0_detour_into_broadcast() -> Incident:
    """Rank 0 alone broadcasts a flag at checkpoint time while the others are in the next step's gradient
    all-reduce: every rank times out, and each traceback shows the collective it waited in."""
    inc = Incident(4)
    world_line(inc)
    inc.steps_all(dict.fromkeys(range(4), 50), T0 + timedelta(seconds=1))
    at = T0 + timedelta(seconds=72)
    for r in range(4):
        inc.info(r, "saving checkpoint" if r == 0 else "next step", at - timedelta(seconds=20))
        frames = in_collective("broadcast", 120) if r == 0 else BACKWARD
        inc.traceback(r, frames, GLOO_TIMEOUT)
    return inc


def rank3_runs_out_of_data() -> Incident:
    """Rank 3's shard is one step shorter: it finishes its loop, says so and exits 0; its peers lose it."""
    inc = Incident(4)
    world_line(inc)
    inc.steps_all({0: 50, 1: 50, 2: 50, 3: 49}, T0 + timedelta(seconds=1))
    inc.info(3, "training finished: epoch done, exiting", T0 + timedelta(seconds=50))
    for r in range(3):
        inc.traceback(r, BACKWARD, GLOO_CLOSED.format(peer=3, port=40000 + r))
    return inc


def rank2_read_hangs_then_fails() -> Incident:
    """Rank 2's read from object storage hangs after step 50 and fails 40 s later; the others had long entered the
    next step's collective and then lose rank 2 when it dies."""
    inc = Incident(4)
    world_line(inc)
    inc.steps_all({0: 51, 1: 51, 2: 50, 3: 51}, T0 + timedelta(seconds=1))
    at = T0 + timedelta(seconds=91)
    error = "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='s3.local', port=443): Read timed out."
    inc.log(2, f"{at:%Y-%m-%d %H:%M:%S},000 ERROR loader: shard read failed: {error}", at)
    inc.traceback(2, [("/workspace/data.py", 31, "__getitem__", "blob = client.get(key)")], error)
    for r in (0, 1, 3):
        inc.traceback(r, BACKWARD, GLOO_CLOSED.format(peer=2, port=41000 + r))
    return inc


def everyone_waits() -> Incident:
    """Every rank times out in the same all-reduce and nobody's own failure is logged."""
    inc = Incident(4)
    world_line(inc)
    inc.steps_all(dict.fromkeys(range(4), 30), T0 + timedelta(seconds=1))
    for r in range(4):
        inc.traceback(r, BACKWARD, GLOO_TIMEOUT)
    return inc


INCIDENTS = {
    "nan": (nan_reported_by_every_rank, {"rank_crash"}, [1]),
    "detour": (rank0_detour_into_broadcast, {"collective_mismatch"}, [0]),
    "early_exit": (rank3_runs_out_of_data, {"early_exit"}, [3]),
    "late_error": (rank2_read_hangs_then_fails, {"data_loading_stall"}, [2]),
}

PRESENTATIONS = {
    "rank_prefix": {"prefix": "rank"},
    "srun_label": {"prefix": "srun"},
    "per_rank_files": {"per_rank_files": True},
    "gzip": {"compress": True},
    "untimed": {"untimed": True},
}
NEEDS_TIME = {"late_error"}
"""Incidents whose cause is known only by when things happened (a presentation without times cannot show them)."""


def _diagnose(inc: Incident, tmp: Path, **how: object) -> Diagnosis:
    logs = present(inc, tmp, **how)  # type: ignore[arg-type]
    return diagnose(str(logs))


@pytest.mark.parametrize(("name", "shape"), list(itertools.product(INCIDENTS, PRESENTATIONS)))
def test_every_presentation_names_the_same_culprit(name: str, shape: str, tmp_path: Path) -> None:
    build, categories, culprits = INCIDENTS[name]
    if shape == "untimed" and name in NEEDS_TIME:
        pytest.skip("the incident is told by its times")
    d = _diagnose(build(), tmp_path, **PRESENTATIONS[shape])
    v = d.verdict
    assert v.category in categories, (v.category, v.explanation, v.blocked)
    assert v.culprit_ranks == culprits, (v.culprit_ranks, v.suspect_ranks, v.explanation, v.blocked)
    assert d.verification.accepted, d.verification.summary


def test_accusation_names_the_rank_every_peer_reports_not_the_first_to_print(tmp_path: Path) -> None:
    d = _diagnose(nan_reported_by_every_rank(), tmp_path)
    assert d.verdict.culprit_ranks == [1]
    logs = str(tmp_path / "logs")
    for wrong in ([0], [0, 1, 2, 3]):
        v = verify(Conclusion(logs_dir=logs, category="rank_crash", culprit_ranks=wrong))
        assert not v.accepted, wrong
        [fates] = [c for c in v.checks if c.rule == "rank_fates"]
        assert fates.status == "failed" and "rank(s) 1" in fates.detail, fates.detail


def test_monitored_barrier_names_the_rank_that_never_arrived(tmp_path: Path) -> None:
    inc = Incident(4)
    world_line(inc)
    inc.steps_all({0: 21, 1: 21, 2: 20, 3: 21}, T0 + timedelta(seconds=1))
    inc.traceback(
        0,
        [("/workspace/train.py", 140, "main", "dist.monitored_barrier(timeout=timedelta(seconds=30))")],
        "RuntimeError: Rank 2 failed to pass monitoredBarrier in 30000 ms",
    )
    for r in (1, 3):
        inc.traceback(r, in_collective("monitored_barrier", 140), GLOO_CLOSED.format(peer=0, port=42000 + r))
    d = _diagnose(inc, tmp_path)
    assert d.verdict.culprit_ranks == [2], (d.verdict.explanation, d.verdict.blocked)
    assert d.verdict.category in STALL_SHAPES
    assert d.verification.accepted
    wrong = verify(Conclusion(logs_dir=str(tmp_path / "logs"), category="rank_crash", culprit_ranks=[0]))
    assert not wrong.accepted


def test_a_detour_is_the_odd_collective_out_not_the_rank_that_timed_out_first(tmp_path: Path) -> None:
    d = _diagnose(rank0_detour_into_broadcast(), tmp_path)
    assert "broadcast at train.py:120" in d.verdict.explanation
    logs = str(tmp_path / "logs")
    v = verify(Conclusion(logs_dir=logs, category="collective_mismatch", culprit_ranks=[1]))
    assert not v.accepted


def test_everyone_waiting_is_an_unattributed_hang_not_no_failure(tmp_path: Path) -> None:
    d = _diagnose(everyone_waits(), tmp_path)
    assert d.verdict.category == "nccl_timeout_unattributed", d.verdict.explanation
    assert d.verdict.culprit_ranks == []
    logs = str(tmp_path / "logs")
    denial = verify(Conclusion(logs_dir=logs, category="no_failure"))
    assert not denial.accepted


def test_a_late_error_dates_the_stall_from_the_last_progress(tmp_path: Path) -> None:
    d = _diagnose(rank2_read_hangs_then_fails(), tmp_path)
    assert d.verdict.category == "data_loading_stall"
    [root] = d.root_cause_chain[:1]
    assert "step 50" in root.text, root
    assert d.verification.accepted


def test_a_victim_is_rejected_by_its_own_fate(tmp_path: Path) -> None:
    present(rank3_runs_out_of_data(), tmp_path)
    v = verify(Conclusion(logs_dir=str(tmp_path / "logs"), category="rank_crash", culprit_ranks=[0]))
    assert not v.accepted
    [fates] = [c for c in v.checks if c.rule == "rank_fates"]
    assert "consequence" in fates.detail


def _paste(tmp: Path, text: str) -> Diagnosis:
    logs = tmp / "paste"
    logs.mkdir()
    (logs / "paste.txt").write_text(text)
    return diagnose(str(logs))


def test_a_pasted_oom_shows_its_shape_and_suspect_provisionally(tmp_path: Path) -> None:
    d = _paste(
        tmp_path,
        "[rank19]: Traceback (most recent call last):\n"
        '[rank19]:   File "/workspace/train.py", line 100, in <module>\n'
        "[rank19]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
        "capacity of 79.15 GiB of which 1.20 GiB is free.\n",
    )
    v = d.verdict
    assert (v.category, v.culprit_ranks, v.suspect_ranks, v.provisional) == ("cuda_oom", [], [19], True)
    assert d.verification.accepted
    assert v.action.startswith("Collect what is missing first")


def test_a_launcher_line_alone_names_the_process(tmp_path: Path) -> None:
    d = _paste(
        tmp_path,
        "E0314 09:00:00.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 3 (pid: 5678) of binary: /usr/bin/python\n",
    )
    assert d.verdict.category == "rank_crash"
    assert "local rank 3" in d.summary and "5678" in d.summary
    assert d.verdict.suspect_processes == ["local rank 3 (pid 5678)"]


def test_a_pasted_time_limit_is_the_time_limit(tmp_path: Path) -> None:
    d = _paste(
        tmp_path,
        "Epoch 3: 45%|####      | 450/1000 [1:59:58<2:26:37, 0.06it/s, loss=2.31]\n"
        "slurmstepd: error: *** JOB 1234 ON node1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***\n",
    )
    assert d.verdict.category == "time_limit"
    assert d.verification.accepted


AGENT = "W0314 09:01:{s:02d}.000000 900 torch/distributed/elastic/multiprocessing/api.py:1028] "


def test_the_agents_teardown_ends_an_attempt_it_does_not_open_one(tmp_path: Path) -> None:
    inc = Incident(2)
    world_line(inc)
    inc.steps_all({0: 30, 1: 30}, T0 + timedelta(seconds=1))
    inc.traceback(1, [("/workspace/train.py", 50, "main", "x = batch['y']")], "KeyError: 'y'")
    inc.log(
        None,
        "E0314 09:01:00.000000 900 torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: 1) local_rank: 1 (pid: 1001) of binary: /usr/bin/python",
    )
    inc.log(None, AGENT.format(s=0) + "Sending process 1000 closing signal SIGTERM")
    inc.traceback(0, BACKWARD, "KeyboardInterrupt")
    inc.info(0, "step 31/500 | loss 1.9690", T0 + timedelta(seconds=60))
    logs = present(inc, tmp_path, nodes=1)
    split = attempts.split(logs)
    assert split.count == 1, [(b.file, b.line, b.why) for bs in split.boundaries.values() for b in bs]
    d = diagnose(str(logs))
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [1])


def test_a_requeue_appended_to_the_same_file_is_a_second_attempt(tmp_path: Path) -> None:
    inc = Incident(2)
    inc.log(None, "SLURM_RESTART_COUNT=0")
    world_line(inc)
    inc.steps_all({0: 30, 1: 30}, T0 + timedelta(seconds=1))
    inc.traceback(1, [("/workspace/train.py", 50, "main", "x = batch['y']")], "KeyError: 'y'")
    for k in range(220):  # the failed run's long tail (other ranks' teardown output)
        inc.info(0, f"teardown detail {k}", T0 + timedelta(seconds=40))
    inc.log(None, "SLURM_RESTART_COUNT=1")
    world_line(inc)
    inc.steps_all({0: 60, 1: 60}, T0 + timedelta(minutes=10))
    for r in range(2):
        inc.info(r, "training finished", T0 + timedelta(minutes=11))
    logs = present(inc, tmp_path, nodes=1)
    split = attempts.split(logs)
    assert split.count == 2
    d = diagnose(str(logs))
    assert d.attempt == 0
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_crash", [1])


def test_a_provisional_conclusion_round_trips_through_verify(tmp_path: Path) -> None:
    d = _paste(
        tmp_path,
        "[rank7]: RuntimeError: CUDA error: an illegal memory access was encountered\n",
    )
    c = d.conclusion
    assert c.provisional and c.suspect_ranks == [7]
    again = verify(Conclusion.model_validate(json.loads(c.model_dump_json())))
    assert again.accepted, again.summary

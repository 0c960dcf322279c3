"""What the lines leave implicit, read the same way on every presentation (classes held-out jobs exposed).

* A file that states no rank, named like its siblings up to a number, is the rank that number says when the
  siblings' own lines show their numbers are their ranks (``worker_2.txt`` beside ``worker_0.txt`` ... whose
  tracebacks say ``[rank0]:`` ...): a rank whose log just stops is then the stalled rank, not an absent one.
* A launcher's report of a rank's own death (SIGKILL, SIGSEGV) that ends the file has no line after it to bound its
  time: it is still the rank's failure, before the symptoms it caused.
* A line that names the rank and reports the failure at once (``Unexpected result nan on rank 3``) gives that
  rank's failure its kind.
* ``mp.spawn``'s SIGABRT of a worker whose gloo receive threw on a size mismatch is the worker's own abort: the job
  shows a collective mismatch, the worker a suspect.
* A node that logs in its own time zone is read on the job's clock; files hours apart that do not start and end
  together keep theirs.
* A CUDA OOM no rank wrote names the process on the GPU the allocator names.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.tools.diagnose import diagnose
from tests.agent_logs import GLOO_CLOSED, NodeLog, seconds, write

GLOO_RECV_TIMEOUT = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms "
    "for recv operation to complete"
)
VICTIM_FRAMES = (
    '  File "/srv/job/train.py", line 52, in main',
    "    dist.all_reduce(p.grad)",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce',
    "    work.wait()",
)

# ---------------------------------------------------------------------------------------------------------------------
# Files numbered like their siblings


def _per_rank_files(world: int, stalled: int, template: str, stated: bool) -> dict[str, list[str]]:
    """One file per rank from a launcher of the job's own (no rank in the lines but torch's ``[rankN]:`` on
    tracebacks); ``stalled`` stops after its third step, the others time out waiting for it."""
    files: dict[str, list[str]] = {}
    for r in range(world):
        ms = 447 + r
        lines = [f"2026-12-07 22:26:14,{ms:03d} INFO trainer: process group ready: backend=gloo"
                 + (f" world_size={world}" if stated else "")]  # fmt: skip
        for s in range(3 if r == stalled else 4):
            lines.append(f"2026-12-07 22:26:{18 + s:02d},{ms:03d} INFO trainer: epoch 0 step {s} loss {24.7 - s:.4f}")
        if r != stalled:
            tb = ["Traceback (most recent call last):", *VICTIM_FRAMES, GLOO_RECV_TIMEOUT]
            lines += [f"[rank{r}]: {t}" for t in tb]
        files[template.format(n=r)] = lines
    return files


SIBLING_MATRIX = list(
    itertools.product(
        (4, 6),  # world size
        ("worker_{n}.txt", "proc-{n}.log", "out/{n}/stdout.txt"),  # how the job's launcher names the files
        ("first", "middle", "last"),  # which rank stalled
        (True, False),  # the world size stated
        (False, True),  # gzip
    )
)


@pytest.mark.parametrize(("world", "template", "which", "stated", "gz"), SIBLING_MATRIX)
def test_a_file_numbered_like_its_siblings_is_the_rank_of_its_number(
    world: int, template: str, which: str, stated: bool, gz: bool, tmp_path: Path
) -> None:
    stalled = {"first": 0, "middle": world // 2, "last": world - 1}[which]
    logs = write(tmp_path, _per_rank_files(world, stalled, template, stated), compress=gz)
    d = diagnose(str(logs))
    v = d.verdict
    # unstated, the world may hold a rank whose file is not here: a stall is then named provisionally
    named = v.culprit_ranks if stated else v.suspect_ranks
    assert (v.category, named) == ("data_loading_stall", [stalled]), v.explanation
    assert d.verification.accepted, d.verification.summary


def _ranks_by_file(logs: Path) -> dict[str, set[int]]:
    return {f.rel: set(f.ranks) for f in gather_evidence(find_sources(logs)).worker.job.inventory.files}


def test_siblings_whose_ranks_are_not_their_numbers_say_nothing_of_a_quiet_file(tmp_path: Path) -> None:
    files = _per_rank_files(4, 2, "worker_{n}.txt", True)
    files["worker_0.txt"], files["worker_1.txt"] = files["worker_1.txt"], files["worker_0.txt"]  # 0 holds rank 1
    by_file = _ranks_by_file(write(tmp_path, files))
    assert by_file["worker_2.txt"] == set(), by_file
    assert by_file["worker_0.txt"] == {1}


def test_one_sibling_is_no_witness(tmp_path: Path) -> None:
    by_file = _ranks_by_file(write(tmp_path, _per_rank_files(2, 1, "worker_{n}.txt", True)))
    assert by_file == {"worker_0.txt": {0}, "worker_1.txt": set()}


def test_a_number_another_file_holds_is_not_given_twice(tmp_path: Path) -> None:
    files = _per_rank_files(4, 2, "worker_{n}.txt", True)
    files["worker_2.txt"] = files["worker_2.txt"][:1]
    files["extra_2.txt"] = ["[rank2]: RuntimeError: shard 2 unreadable"]  # rank 2's own lines, elsewhere
    by_file = _ranks_by_file(write(tmp_path, files))
    assert by_file["worker_2.txt"] == set(), by_file


# ---------------------------------------------------------------------------------------------------------------------
# A death reported at the end of the file


def _killed_at_the_end(culprit: int, code: int) -> list[str]:
    node = NodeLog(0, 6, 0, 6131)
    node.banner(seconds(0))
    for s in range(5):
        for k in range(6):
            node.worker(k, f"{seconds(10 + s):%Y-%m-%d %H:%M:%S},370 INFO [seqtrain] step {s} loss 0.{k}1")
    for k in ((culprit + 1) % 6, (culprit + 2) % 6):
        node.victim(k, GLOO_CLOSED.format(peer=1, port=46769 + k))
    rest = [k for k in range(6) if k != culprit]
    node.sigterms(seconds(24.69), rest)
    node.failed(seconds(24.93), culprit, code)
    node.child_failed(seconds(24), (culprit, code), {k: -15 for k in rest})
    return node.lines


@pytest.mark.parametrize(
    ("culprit", "code", "rotated"), list(itertools.product((2, 5), (-9, -11), ("one file", "rotated", "gzip")))
)
def test_a_death_its_launcher_reports_last_is_the_cause(culprit: int, code: int, rotated: str, tmp_path: Path) -> None:
    lines = _killed_at_the_end(culprit, code)
    if rotated == "rotated":  # a RotatingFileHandler's files: torchrun's own traceback and report in the newest
        cut = lines.index("Traceback (most recent call last):")
        logs = write(tmp_path, {"train.log.1": lines[:cut], "train.log": lines[cut:]})
    else:
        logs = write(tmp_path, {"train.log": lines}, compress=rotated == "gzip")
    d = diagnose(str(logs))
    v = d.verdict
    assert (v.category, v.culprit_ranks) == ("rank_crash", [culprit]), v.explanation
    assert d.verification.accepted, d.verification.summary


# ---------------------------------------------------------------------------------------------------------------------
# A line that names the rank and tells its failure


REPORTS = {
    "rank_crash": "Unexpected result nan on rank {r} at iteration #3 (message='found NaN in local grad norm')",
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory on rank {r}. Tried to allocate 2.00 GiB",
    "cuda_error": "RuntimeError: CUDA error: an illegal memory access was encountered on rank {r}",
}
WRITERS = (
    "ERROR:megatron.core.rerun_state_machine:",  # unattributed
    "2026-12-07 10:00:00,123 ERROR trainer: ",
    "[rank0]: ",  # another rank reports it
)


@pytest.mark.parametrize(("category", "r", "writer"), list(itertools.product(REPORTS, (3, 13), WRITERS)))
def test_the_line_that_names_the_rank_gives_its_failure_its_kind(
    category: str, r: int, writer: str, tmp_path: Path
) -> None:
    line = writer + REPORTS[category].format(r=r)
    d = diagnose(str(write(tmp_path, {"paste.log": [line]})))
    v = d.verdict
    assert v.category == category, v.explanation
    assert r in v.culprit_ranks + v.suspect_ranks, v.explanation
    assert 0 not in v.culprit_ranks + v.suspect_ranks or r == 0
    assert d.verification.accepted, d.verification.summary


# ---------------------------------------------------------------------------------------------------------------------
# mp.spawn's SIGABRT of a worker that received another collective's buffers


def _spawn_console(aborted: int, bars: bool, sigterms: bool, terminate_line: bool) -> list[str]:
    bar = "".join(
        f"\rEpoch 0: {p * 5:3d}%|##        | {p}/40 [00:0{p // 10}<00:07, 4.4it/s, loss=3.{p}]" for p in range(9)
    )
    lines = [bar] if bars else [f"epoch 0 step {s} loss 3.{s}" for s in range(9)]
    if terminate_line:
        lines.append("terminate called after throwing an instance of 'gloo::EnforceNotMet'")
    lines.append(
        "  what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
        "op.preamble.length <= op.nbytes. 400 vs 4. Received data size doesn't match expected size. "
        "Is there a distributed collective mismatch in your code?"
    )
    if sigterms:
        for pid in (10544, 10546, 10547):
            lines.append(
                f"W1207 22:28:10.411000 10537 torch/multiprocessing/spawn.py:165] Terminating process {pid} via "
                "signal SIGTERM"
            )
    lines += [
        "Traceback (most recent call last):",
        '  File "/srv/job/train.py", line 66, in <module>',
        "    while not ctx.join():",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 192, in join',
        "    raise ProcessExitedException(",
        f"torch.multiprocessing.spawn.ProcessExitedException: process {aborted} terminated with signal SIGABRT",
    ]
    return lines


@pytest.mark.parametrize(
    ("aborted", "bars", "sigterms", "terminate_line"),
    list(itertools.product((1, 2), (True, False), (True, False), (True, False))),
)
def test_a_spawned_worker_that_aborted_on_a_size_mismatch_is_a_party_to_it(
    aborted: int, bars: bool, sigterms: bool, terminate_line: bool, tmp_path: Path
) -> None:
    d = diagnose(str(write(tmp_path, {"console.txt": _spawn_console(aborted, bars, sigterms, terminate_line)})))
    v = d.verdict
    assert v.category == "collective_mismatch", v.explanation
    assert v.culprit_ranks == [] and v.suspect_ranks == [aborted], v.explanation
    assert d.verification.accepted, d.verification.summary


# ---------------------------------------------------------------------------------------------------------------------
# A node that logs in its own time zone


def _two_nodes(off_node: int, offset: timedelta) -> dict[str, list[str]]:
    """Two agents of 4 workers; node 1's local rank 2 (rank 6) is SIGKILLed, node 0's workers lose their peer;
    ``off_node``'s agent stamps its lines ``offset`` ahead (its time zone), each rank's own log is in UTC."""
    nodes = [NodeLog(k, 4, 4 * k, 20310 + 7 * k) for k in range(2)]
    files: dict[str, list[str]] = {}
    for n in nodes:
        shift = offset if n.index == off_node else timedelta(0)
        n.banner(seconds(0) + shift)
        for k in range(4):
            r = n.base + k
            app = [
                f"{seconds(5 + s):%Y-%m-%dT%H:%M:%S},{100 + r:03d}Z INFO trainer - rank {r} step {s}" for s in range(6)
            ]
            files[f"app-node{n.index}-{r}.log"] = app
        if n.index == 1:
            n.sigterms(seconds(12.2) + shift, [0, 1, 3])
            n.failed(seconds(12.4) + shift, 2, -9)
            n.child_failed(seconds(12) + shift, (2, -9), {k: -15 for k in (0, 1, 3)})
        else:
            for k in range(4):
                n.victim(k, GLOO_CLOSED.format(peer=2, port=41000 + k))
            n.failed(seconds(12.6) + shift, 0, 1)
            n.child_failed(seconds(12) + shift, (0, 1), {k: 1 for k in (1, 2, 3)})
        files[f"node{n.index}.console.txt"] = n.lines
    return files


@pytest.mark.parametrize(
    ("off_node", "offset"),
    list(itertools.product((0, 1), (timedelta(hours=9), timedelta(hours=-5), timedelta(hours=5, minutes=30)))),
)
def test_a_node_logging_in_its_own_time_zone_is_read_on_the_jobs_clock(
    off_node: int, offset: timedelta, tmp_path: Path
) -> None:
    d = diagnose(str(write(tmp_path, _two_nodes(off_node, offset))))
    v = d.verdict
    assert (v.category, v.culprit_ranks) == ("rank_crash", [6]), v.explanation
    assert d.verification.accepted, d.verification.summary
    assert f"node{off_node}.console.txt's clock runs" in d.job.logs, d.job.logs
    # the timeline reads the off file on the job's clock, in order, and says what its lines say
    times = [e.time_local for e in d.timeline if e.time_local]
    assert times == sorted(times) and times[-1] < f"{seconds(60):%Y-%m-%dT%H:%M:%S}", times
    moved = [e for e in d.timeline if e.source.startswith(f"node{off_node}.console.txt:")]
    assert moved and all("clock moved" in e.time_note and "the line says" in e.time_note for e in moved), moved


def _offsets(files: dict[str, list[str]], tmp_path: Path) -> dict[str, timedelta | None]:
    return {
        f.rel: f.clock_offset for f in gather_evidence(find_sources(write(tmp_path, files))).worker.job.inventory.files
    }


def _timed(start: datetime, minutes: int, what: str) -> list[str]:
    return [f"{start + timedelta(minutes=m):%Y-%m-%d %H:%M:%S},000 INFO {what} {m}" for m in range(minutes + 1)]


def test_files_hours_apart_that_do_not_start_and_end_together_keep_their_clocks(tmp_path: Path) -> None:
    t = datetime(2026, 12, 7, 10, 0, 0)
    files = {
        "attempt0/node0.log": _timed(t, 5, "step"),
        "attempt0/node1.log": _timed(t, 5, "step"),
        "attempt1/node0.log": _timed(t + timedelta(hours=3), 30, "step"),  # a restart 3 h later ran longer
        "attempt1/node1.log": _timed(t + timedelta(hours=3), 30, "step"),
    }
    assert set(_offsets(files, tmp_path).values()) == {None}


def test_rotated_files_one_after_the_other_keep_their_clocks(tmp_path: Path) -> None:
    t = datetime(2026, 12, 7, 10, 0, 0)
    files = {"train.log.2": _timed(t, 60, "a"), "train.log.1": _timed(t + timedelta(hours=1), 60, "b")}
    files["train.log"] = _timed(t + timedelta(hours=2), 60, "c")
    assert set(_offsets(files, tmp_path).values()) == {None}


# ---------------------------------------------------------------------------------------------------------------------
# The device a CUDA OOM names

OOM_MESSAGES = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 564.00 MiB. GPU {d} has a total capacity of "
    "22.20 GiB of which 203.12 MiB is free. Process 9841 has 22.00 GiB memory in use.",
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU {d}; 15.78 GiB total capacity; 14.37 GiB "
    "already allocated; 3.19 MiB free; 14.61 GiB reserved in total by PyTorch)",
)


@pytest.mark.parametrize(
    ("message", "device", "lead"),
    list(itertools.product(OOM_MESSAGES, (0, 1, 7), ("", "2026-12-07 10:00:01,204 ERROR trainer: "))),
)
def test_an_oom_no_rank_wrote_names_the_process_on_its_gpu(
    message: str, device: int, lead: str, tmp_path: Path
) -> None:
    frames = ["Traceback (most recent call last):", '  File "/srv/job/finetune.py", line 212, in <module>']
    d = diagnose(str(write(tmp_path, {"paste.log": [*frames, lead + message.format(d=device)]})))
    v = d.verdict
    assert (v.category, v.culprit_ranks, v.suspect_processes) == ("cuda_oom", [], [f"the process on GPU {device}"])
    assert d.verification.accepted, d.verification.summary


def test_a_rank_that_wrote_its_oom_is_named_by_its_rank(tmp_path: Path) -> None:
    line = "[rank5]: " + OOM_MESSAGES[0].format(d=1)
    v = diagnose(str(write(tmp_path, {"paste.log": [line]}))).verdict
    assert v.category == "cuda_oom" and 5 in v.culprit_ranks + v.suspect_ranks and not v.suspect_processes


def test_a_gpu_named_outside_an_oom_names_no_device() -> None:
    from debug_training_logs.formats.cuda_oom import oom_device

    assert oom_device("GPU 3 has a total capacity of 80 GiB") is None
    assert oom_device("CUDA out of memory on rank 2") is None
    assert oom_device(OOM_MESSAGES[1].format(d=12)) == 12


# ---------------------------------------------------------------------------------------------------------------------
# A trainer's own "rank R/N" when it starts


@pytest.mark.parametrize(
    ("line", "world"),
    [
        ("worker started: rank {r}/6 local_rank 0 group_rank {r}", 6),
        ("[2026-12-07 10:00:00,001][INFO][rank {r}/6] model built", 6),
        ("2026-12-07 10:00:00 INFO RANK={r}/6 ready", 6),
        ("Dec 07 10:00:00 node03 python3[4242]: init done (rank {r} / 6)", 6),
        ("tensor model parallel rank {r}/2, pipeline stage 0", None),
        ("local_rank {r}/4 bound to cuda:{r}", None),
        ("data parallel rank {r}/3 has 1200 samples", None),
        ("rank {r}/1 of a broken statement", None),
    ],
)
def test_a_rank_of_world_statement_at_the_start_states_the_world(line: str, world: int | None, tmp_path: Path) -> None:
    files = {f"rank-{r}.log": [line.format(r=r), f"step 1 loss 2.{r}"] for r in range(2)}
    ev = gather_evidence(find_sources(write(tmp_path, files)))
    assert ev.worker.world_size == world, ev.worker.job.inventory.world_size_evidence

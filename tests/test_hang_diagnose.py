"""Live hangs diagnosed from real ``py-spy dump`` output of real hung gloo jobs (``fixtures/hang_*``, made by
``fixtures/hangs/make_hangs.py``): the stuck rank and what it waits on, before any timeout fired, wherever the dumps
are (a sibling ``hang/``, inside the logs, a ``hang_dir``), through the CLI, the tool function and MCP; ``verify``
rejects what the stacks contradict; node telemetry and NCCL RAS reports tie a broken GPU or a lagging rank in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from debug_training_logs.server.app import create_server
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.verify.engine import verify
from debug_training_logs.verify.models import Conclusion

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = sorted(p.name for p in FIXTURES.glob("hang_*") if (p / "truth.json").is_file())
WAITS_ON = {
    "data_loading_stall": "DataLoader",
    "checkpoint_stall": "torch.save",
    "collective_mismatch": "barrier",
    "rank_stuck": "time.sleep",
    "nccl_timeout_unattributed": "all_reduce",
}


def _truth(case: str) -> dict[str, Any]:
    return json.loads((FIXTURES / case / "truth.json").read_text())  # type: ignore[no-any-return]


def _copy(case: str, tmp_path: Path) -> Path:
    dest = tmp_path / case
    shutil.copytree(FIXTURES / case, dest)
    return dest


def test_the_fixtures_are_real_hangs() -> None:
    assert len(CASES) >= 5
    for case in CASES:
        t = _truth(case)
        dumps = list((FIXTURES / case).rglob("*.txt")) + list((FIXTURES / case).rglob("*.json"))
        assert any("Python v3" in p.read_text(errors="replace") or '"thread_id"' in p.read_text() for p in dumps)
        assert t["category"] in WAITS_ON


@pytest.mark.parametrize("case", CASES)
def test_diagnose_names_the_stuck_rank_and_what_it_waits_on(case: str) -> None:
    t = _truth(case)
    d = diagnose(str(FIXTURES / case / "logs"), history=False)
    v = d.verdict
    assert v.category == t["category"]
    assert v.culprit_ranks == t["culprit_ranks"]
    assert WAITS_ON[t["category"]] in v.explanation
    assert d.verification.accepted, [c.detail for c in d.verification.checks if not c.passed]
    waiting = [r for r in range(t["world_size"]) if r not in t["culprit_ranks"]]
    if t["culprit_ranks"]:
        wrong = Conclusion(**{**d.conclusion.model_dump(), "culprit_ranks": waiting[:1]})
        check = verify(wrong)
        assert not check.accepted
        assert any(c.rule == "stack_dumps" and not c.passed for c in check.checks)


@pytest.mark.parametrize("where", ["sibling", "inside", "hang_dir"])
def test_the_dumps_are_found_wherever_they_are(where: str, tmp_path: Path) -> None:
    job = _copy("hang_checkpoint", tmp_path)
    logs, hang = job / "logs", job / "hang"
    hang_dir = None
    if where == "inside":
        shutil.move(str(hang), str(logs / "stacks"))
    elif where == "hang_dir":
        elsewhere = tmp_path / "collected_at_3am"
        shutil.move(str(hang), str(elsewhere))
        hang_dir = str(elsewhere)
    d = diagnose(str(logs), hang_dir=hang_dir, history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("checkpoint_stall", [2])
    assert d.verification.accepted
    assert d.conclusion.hang_dir == hang_dir
    assert verify(d.conclusion).accepted  # the conclusion carries what its verification must read again
    # a dump inside the logs is never taken for a rank's log (its lines name rank 0..3 in --locals)
    assert d.job.world_size == 4 and "4 worker process(es) dumped (ranks 0-3)" in d.job.logs


def test_verify_rejects_what_the_stacks_contradict() -> None:
    logs = str(FIXTURES / "hang_loader_read" / "logs")
    d = diagnose(logs, history=False)
    base = d.conclusion.model_dump()
    for wrong in (
        {"category": "no_failure", "culprit_ranks": []},
        {"category": "nccl_timeout_unattributed", "culprit_ranks": []},
        {"category": "checkpoint_stall", "culprit_ranks": [1]},
        {"category": "data_loading_stall", "culprit_ranks": [0]},
    ):
        check = verify(Conclusion(**{**base, **wrong, "root_cause_event": None, "chain": []}))
        assert not check.accepted, wrong


def test_without_the_dumps_the_same_logs_say_nothing_of_the_culprit(tmp_path: Path) -> None:
    job = _copy("hang_loader_read", tmp_path)
    shutil.rmtree(job / "hang")
    d = diagnose(str(job / "logs"), history=False)
    assert d.verdict.culprit_ranks == []


def test_a_dead_rank_whose_gpu_fell_off_the_bus(tmp_path: Path) -> None:
    """The culprit's dump is py-spy's error for a pid that is gone; the node's dmesg has Xid 79 for that pid."""
    job = _copy("hang_culprit_not_dumped", tmp_path)
    stdout = next(p for p in (job / "logs").rglob("stdout.log") if "rank 2 of 4" in p.read_text())
    pid = int(stdout.read_text().split("pid ", 1)[1].split()[0])
    (job / "hang" / f"{pid}.txt").write_text(
        "Error: Failed to get process executable name. Check that the process is running.\n\n"
        "Caused by:\n    0: No such file or directory (os error 2)\n"
    )
    first = stdout.read_text().splitlines()[0][:19]  # the job's own clock: "2026-12-07 05:0x:yy"
    stamp = f"{first[:10]} {first[11:]}"
    from datetime import datetime

    t = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    (job / "hang" / "gpu-node07.dmesg").write_text(
        f"[{t:%a %b %d %H:%M:%S %Y}] NVRM: GPU at PCI:0000:5e:00: GPU-4f1c2a9e-77d0-41b3-9c5e-0a6d3b2f9e11\n"
        f"[{t:%a %b %d %H:%M:%S %Y}] NVRM: Xid (PCI:0000:5e:00): 79, pid={pid}, name=python3, GPU has fallen off "
        "the bus.\n"
        f"[{t:%a %b %d %H:%M:%S %Y}] NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.\n"
    )
    d = diagnose(str(job / "logs"), history=False)
    assert d.verdict.category == "cuda_error" and d.verdict.culprit_ranks == [2], d.verdict.explanation
    assert "fallen off the bus" in d.verdict.explanation
    assert d.verification.accepted, [c.detail for c in d.verification.checks if not c.passed]


def test_an_xid_from_before_the_job_is_not_its_cause(tmp_path: Path) -> None:
    job = _copy("hang_sleep", tmp_path)
    (job / "hang").mkdir()
    (job / "hang" / "gpu-node07.dmesg").write_text(
        "[Tue Mar  3 02:10:44 2026] NVRM: Xid (PCI:0000:5e:00): 79, pid=1234, name=python3, GPU has fallen off the "
        "bus.\n"
    )
    d = diagnose(str(job / "logs"), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("rank_stuck", [0])


def test_a_binary_and_a_truncated_dump_are_noted_and_the_rest_read(tmp_path: Path) -> None:
    job = _copy("hang_extra_barrier", tmp_path)
    (job / "hang" / "core.bin").write_bytes(b"\x7fELF\x00\x01" * 1000)
    one = next((job / "hang").glob("pyspy-*.json"))
    (job / "hang" / "cut.json").write_text(one.read_text()[:200])
    d = diagnose(str(job / "logs"), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("collective_mismatch", [3])


@pytest.mark.anyio
async def test_mcp_diagnose_with_a_hang_dir(tmp_path: Path) -> None:
    job = _copy("hang_sleep", tmp_path)
    async with Client(create_server([tmp_path])) as client:
        res = await client.call_tool("diagnose", {"logs_dir": str(job / "logs"), "history": False, "hang_dir": None})
        assert res.is_error is False, res.content
        d = res.structured_content
        assert d is not None and d["verdict"]["category"] == "rank_stuck" and d["verdict"]["culprit_ranks"] == [0]
        res = await client.call_tool("verify_conclusion", {"conclusion": d["conclusion"]})
        assert res.structured_content is not None and res.structured_content["accepted"] is True
        wrong = {**d["conclusion"], "culprit_ranks": [1]}
        res = await client.call_tool("verify_conclusion", {"conclusion": wrong})
        assert res.structured_content is not None and res.structured_content["accepted"] is False


def test_nccl_ras_names_the_rank_the_others_wait_for(tmp_path: Path) -> None:
    """Every dumped rank waits in all_reduce; rank 2 was not dumped. NCCL RAS (2.26 text) says rank 2 is one
    operation behind: the rank they wait for, and verify rejects blaming a waiting rank."""
    job = _copy("hang_culprit_not_dumped", tmp_path)
    rows = [
        "NCCL version 2.26.2 compiled with CUDA 12.8",
        "",
        "Job summary",
        "===========",
        "",
        "  Nodes  Processes         GPUs  Processes     GPUs",
        "(total)   per node  per process    (total)  (total)",
        "      1          4            1          4        4",
        "",
        "Communicators... (0.01s)",
        "=============",
        "",
        "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
        "    #  in group  per comm  per node  per comm  in group",
        "    0         1         1         4         4         4   RUNNING  MISMATCH",
        "",
        "Errors",
        "======",
        "",
        "Warnings",
        "========",
        "",
        "#0-0 (7d3e11a0c4b29f58) MISMATCH",
        "  Communicator ranks have different AllReduce operation counts",
        "  3 ranks have launched up to operation 26",
        "  Rank 2 has launched up to operation 25 -- GPU 2 managed by process 818 on node trn-a01",
        "",
    ]
    (job / "hang" / "ncclras.txt").write_text("\n".join(rows) + "\n")
    d = diagnose(str(job / "logs"), history=False)
    assert d.verdict.culprit_ranks == [2], d.verdict.explanation
    assert "RAS" in d.verdict.explanation or "ras" in d.verdict.explanation
    assert d.verification.accepted, [c.detail for c in d.verification.checks if not c.passed]
    wrong = Conclusion(**{**d.conclusion.model_dump(), "culprit_ranks": [0], "root_cause_event": None, "chain": []})
    assert not verify(wrong).accepted


def test_a_dump_bigger_than_the_bound_is_read_in_part_with_a_note(tmp_path: Path, monkeypatch: Any) -> None:
    from debug_training_logs.analysis import hang_files

    job = _copy("hang_checkpoint", tmp_path)
    big = job / "hang" / "all_ranks.txt"
    big.write_text(big.read_text() + "\n" + "    idle_loop (noise.py:1)\n" * 60_000)
    monkeypatch.setattr(hang_files, "MAX_ARTIFACT_BYTES", 1 << 20)
    d = diagnose(str(job / "logs"), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("checkpoint_stall", [2])
    assert "read its first 1 MB only" in d.job.logs


def test_a_stuck_process_no_line_ties_to_a_rank_is_named_as_a_process(tmp_path: Path) -> None:
    job = _copy("hang_loader_read", tmp_path)
    for log in (job / "logs").rglob("stdout.log"):  # the trainer's "rank R of W started, pid P" lines go
        log.write_text("".join(ln for ln in log.read_text().splitlines(True) if " pid " not in ln))
    d = diagnose(str(job / "logs"), history=False)
    assert d.verdict.culprit_ranks == []
    stuck_pid = next(p.stem for p in (job / "hang").glob("*.txt") if "read_shard" in p.read_text())
    text = d.verdict.explanation
    assert "data loading" in text and stuck_pid in text, text


def _spawned(pid: int, parent: int, frames: list[str]) -> str:
    head = (
        f"Process {pid}: /opt/venv/bin/python -c from multiprocessing.spawn import spawn_main; "
        f"spawn_main(tracker_fd=4, pipe_handle={pid % 97}) --multiprocessing-fork\n"
        "Python v3.11.9 (/usr/bin/python3.11)\n"
        f"Parent Process {parent}: /opt/venv/bin/python finetune.py\n\n"
        f'Thread {pid} (idle): "MainThread"\n'
    )
    tail = [
        "_wrap (torch/multiprocessing/spawn.py:87)",
        "BaseProcess.run (multiprocessing/process.py:108)",
        "spawn_main (multiprocessing/spawn.py:122)",
        "<module> (<string>:1)",
    ]
    return head + "".join(f"    {f}\n" for f in [*frames, *tail]) + "\n"


def test_mp_spawn_workers_are_ranks_and_their_parent_is_the_launcher(tmp_path: Path) -> None:
    """``mp.spawn``: every worker has the launcher's ``_wrap`` frame below its training code; the parent waits in
    ``ProcessContext.join``. The trainer's own lines tie pids to ranks with a rank column (``| r2 |``) and state the
    world (``world=4``)."""
    logs, hang = tmp_path / "logs", tmp_path / "hang"
    logs.mkdir()
    hang.mkdir()
    pids = {0: 7301, 1: 7302, 2: 7303, 3: 7304}
    lines = [f"04:10:0{r} | r{r} | pid {pid} joining the process group (world=4)" for r, pid in pids.items()]
    lines += [f"04:10:1{r} | r{r} | step 10 loss 0.{r}1" for r in pids]
    (logs / "train.out").write_text("\n".join(lines) + "\n")
    parent = (
        "Process 7300: /opt/venv/bin/python finetune.py\nPython v3.11.9 (/usr/bin/python3.11)\n\n"
        'Thread 7300 (idle): "MainThread"\n'
        "    wait (multiprocessing/connection.py:947)\n"
        "    ProcessContext.join (torch/multiprocessing/spawn.py:146)\n"
        "    start_processes (torch/multiprocessing/spawn.py:238)\n"
        "    main (finetune.py:120)\n    <module> (finetune.py:124)\n\n"
    )
    waiting = ["all_reduce (torch/distributed/distributed_c10d.py:2501)", "train_step (finetune.py:77)"]
    stuck = ["HTTPResponse.read (http/client.py:466)", "fetch_shard (finetune.py:31)", "train_step (finetune.py:70)"]
    text = parent + "".join(_spawned(pid, 7300, stuck if r == 2 else waiting) for r, pid in pids.items())
    (hang / "all.txt").write_text(text)
    d = diagnose(str(logs), history=False)
    assert (d.verdict.category, d.verdict.culprit_ranks) == ("data_loading_stall", [2]), d.verdict.explanation
    assert "fetch_shard" in d.verdict.explanation or "http" in d.verdict.explanation
    assert d.verification.accepted


def test_the_cli_takes_a_hang_dir_and_verify_reads_it_again(tmp_path: Path) -> None:
    import subprocess
    import sys

    job = _copy("hang_loader_read", tmp_path)
    elsewhere = tmp_path / "collected"
    shutil.move(str(job / "hang"), str(elsewhere))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "debug_training_logs", *args], capture_output=True, text=True, timeout=120
        )

    p = cli("analyze", str(job / "logs"), "--hang-dir", str(elsewhere), "--json", "--no-history")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert (d["verdict"]["category"], d["verdict"]["culprit_ranks"]) == ("data_loading_stall", [1])
    assert d["conclusion"]["hang_dir"] == str(elsewhere)
    conclusion = tmp_path / "c.json"
    conclusion.write_text(json.dumps({**d["conclusion"], "culprit_ranks": [3]}))
    p = cli("verify", str(conclusion), "--json")
    assert json.loads(p.stdout)["accepted"] is False
    p = cli("overview", str(job / "logs"), "--hang-dir", str(elsewhere), "--json")
    stacks = json.loads(p.stdout)["hang_artifacts"]["stacks"]
    assert stacks[0]["ranks"] == "1" and "data loading" in stacks[0]["state"]

"""The worker-log generator: deterministic, any size, each torch version's exact wording, truth beside the logs."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.generate import regenerate_all
from fixtures.worker_gen import SCENARIOS, STYLES, TRUTH_NAME, JobSpec, generate, iter_presets

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _text(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return fh.read()
    return path.read_text(encoding="utf-8")


def test_checked_in_sets_are_what_the_generator_writes(tmp_path: Path) -> None:
    regenerate_all(tmp_path)
    for rel, _scenario, _spec in iter_presets():
        fresh, kept = tmp_path / rel, FIXTURES / rel
        names = sorted(p.name for p in (fresh / "logs").iterdir())
        assert names == sorted(p.name for p in (kept / "logs").iterdir()), rel
        for name in names:
            assert _text(fresh / "logs" / name) == _text(kept / "logs" / name), (
                f"{rel}/{name}: python -m fixtures.generate"
            )
        assert json.loads((fresh / TRUTH_NAME).read_text()) == json.loads((kept / TRUTH_NAME).read_text())
        size = sum(p.stat().st_size for p in (kept / "logs").iterdir())
        assert size < 300_000, (rel, size)


def test_deterministic_and_seeded(tmp_path: Path) -> None:
    a = generate(JobSpec(), "data_stall", tmp_path / "a" / "logs")
    b = generate(JobSpec(), "data_stall", tmp_path / "b" / "logs")
    c = generate(JobSpec(seed=7), "data_stall", tmp_path / "c" / "logs")
    for fa, fb in zip(a.files, b.files, strict=True):
        assert fa.read_bytes() == fb.read_bytes()
    assert a.files[0].read_bytes() != c.files[0].read_bytes()
    assert not (tmp_path / "a" / "logs" / TRUTH_NAME).exists() and (tmp_path / "a" / TRUTH_NAME).exists()


def test_canonical_data_stall_story() -> None:
    logs = FIXTURES / "data_stall" / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["error-48213-0.out", "error-48213-1.out"]
    node0, node1 = (_text(logs / f"error-48213-{n}.out") for n in (0, 1))
    assert "gpu-a01:" in node0 and "gpu-a02:" in node1
    assert "[NeMo I 2026-05-21 07:00:05 " in node0
    assert "NCCL INFO NCCL version 2.21.5+cuda12.4" in node0 and " nranks 16 " in node1
    stall = [ln for ln in node0.splitlines() if ln.startswith("[rank5]: ")]
    assert "Batch stream truncated at index 17/64. Falling back to direct AIStore API calls" in stall[0]
    assert "AISBatchLoaderError: Direct API fallback failed for shard-000017.tar/img_0042.jpg" in stall[-1]
    rank5_after = [ln for ln in node0.splitlines() if ln.startswith("[rank5]:[")]
    assert all("08:02:1" in ln for ln in rank5_after)  # nothing between the stall and the dump signal
    assert "from  rank 11 and we will try our best" in node0
    assert "Last enqueued NCCL work: 4117, last completed NCCL work: 4117." in node0
    assert node0.count("failure detected by watchdog at work sequence id: 4118") == 7
    assert node1.count("failure detected by watchdog at work sequence id: 4118") == 8
    assert "Connection reset by peer" in node0 + node1
    assert "Root Cause (first observed failure):" in node0
    assert "*** STEP 48213.0 ON gpu-a01 CANCELLED AT 2026-05-21T08:02:45 DUE TO TASK FAILURE ***" in node0
    assert re.search(r"\[rank11\]:\[E521 08:02:12\.\d{9} ProcessGroupNCCL\.cpp:\d+\] \[PG ID 0 PG GUID "
                     r"0\(default_pg\) Rank 11\] First PG on this rank to signal dumping\.", node1)  # fmt: skip


@pytest.mark.parametrize("torch", sorted(STYLES))
def test_each_style_uses_its_versions_wording(tmp_path: Path, torch: str) -> None:
    gen = generate(JobSpec(gpus_per_node=4, torch=torch), "data_stall", tmp_path / "logs")
    text = "".join(_text(p) for p in gen.files)
    c10 = [ln for ln in text.splitlines() if "ProcessGroupNCCL.cpp:" in ln and not ln.startswith("Exception")]

    def has(s: str) -> bool:
        return s in text

    v = tuple(int(x) for x in torch.split("."))
    assert has(", NumelIn=") is (v >= (2, 1))
    assert has("NCCL watchdog thread terminated") is (v <= (2, 2))
    assert has("Process group watchdog thread terminated") is (v >= (2, 3))
    assert has("Timeout at NCCL work: ") is ((2, 3) <= v <= (2, 5))
    assert has("Exception (either an error or timeout) detected by watchdog") is ((2, 4) <= v <= (2, 5))
    assert has(" failure detected by watchdog at work sequence id:") is (v >= (2, 6))
    assert has("Observed flight recorder dump signal") is (v >= (2, 5))
    assert has("First PG on this rank to signal dumping.") is (v >= (2, 7))
    assert has("First watchdog to set the dump signal.") is (v == (2, 4))
    assert has("[PG ID ") is (v >= (2, 5))
    assert has("Terminating the process after attempting to dump debug info") is (v >= (2, 5))
    assert has("only active collectives: 0") is (v >= (2, 10))
    if v >= (2, 4):
        assert all(re.search(r"\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{9} ", ln) for ln in c10)
    elif v >= (2, 2):
        assert all(re.search(r"\[rank\d+\]:\[[FEWIV] ProcessGroupNCCL\.cpp:\d+\] ", ln) for ln in c10)
    else:
        assert not has("[rank")
    if v >= (2, 14):
        assert "] [Rank " not in text and "what():  [Rank" not in text


def test_any_size_and_launchers(tmp_path: Path) -> None:
    gen = generate(
        JobSpec(nodes=3, gpus_per_node=2, launcher="srun", torch="2.1"), "fabric", tmp_path / "srun" / "logs"
    )
    assert len(gen.files) == 3 and gen.truth["world_size"] == 6
    text = _text(gen.files[0])
    assert re.search(r"^0: \[E ProcessGroupNCCL\.cpp:475\] \[Rank 0\] Watchdog caught", text, re.M)
    assert "srun: error: gpu-a01: tasks 0-1: Aborted (core dumped)" in text
    many = generate(JobSpec(nodes=2, gpus_per_node=8, launcher="srun"), "data_stall", tmp_path / "srun16" / "logs")
    assert re.search(r"^ 5: ", _text(many.files[0]), re.M) and re.search(r"^15: ", _text(many.files[1]), re.M)
    ray = generate(
        JobSpec(gpus_per_node=4, launcher="ray", ansi=True, torch="2.5"), "data_stall", tmp_path / "ray" / "logs"
    )
    assert [p.name for p in ray.files] == ["job-driver-48213.log"]
    assert "\x1b[36m(RayTrainWorker pid=" in _text(ray.files[0])


def test_bytes_target_and_gzip(tmp_path: Path) -> None:
    gen = generate(replace(JobSpec(), bytes_target=3_000_000, compress=True), "data_stall", tmp_path / "logs")
    raw = sum(len(_text(p).encode()) for p in gen.files)
    assert 2_000_000 < raw < 4_500_000
    assert all(p.suffix == ".gz" and p.read_bytes()[:2] == b"\x1f\x8b" for p in gen.files)


def test_truth_lists_what_each_version_can_show(tmp_path: Path) -> None:
    old = generate(JobSpec(gpus_per_node=4, torch="2.2"), "data_stall", tmp_path / "22" / "logs").truth
    assert old["ranks_without_nccl_state"] == [5]
    assert all(r["last_enqueued"] is None and r["pg"] is None and r["timeout_time"] is None for r in old["rows"])
    t23 = generate(JobSpec(gpus_per_node=4, torch="2.3"), "data_stall", tmp_path / "23" / "logs").truth
    r5 = next(r for r in t23["rows"] if r["rank"] == 5)
    assert (r5["signal"], r5["dump_signal_from_rank"], r5["pending"]) == ("observed", None, 0)
    assert set(SCENARIOS) >= {"data_stall", "fabric", "root_ahead", "missing_node", "megatron"}

"""The NCCL table's lean scan: of the inventory markers it searches only the ones coverage comes from
(``inventory.COVERAGE_MARKERS``), and its whole answer must equal the one a scan with every marker gives.

Matrices: every checked-in fixture directory; generated jobs over launcher layout x torch family x decorations
(ANSI, gzip, hard wrap, tqdm glue, per-rank files, a missing node); and hand-written presentations of ranks and world
size (Lightning MEMBER, stated world_size, torchrun global_world_sizes, SLURM task counts, the default PG's size, the
world and split NCCL communicators, Ray prefixes past the marker cap, srun labels, the torchrun failure table,
conflicting and contradicted claims, file names only). Then the cache: a lean inventory never answers a tool that
needs the full one, a full one serves a lean scan, and a server (companions in force) keeps the full inventory.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from debug_training_logs.analysis import inventory, inventory_markers, nccl_sink
from debug_training_logs.analysis import nccl_table as analysis
from debug_training_logs.analysis.shared_scan import standard_consumers
from debug_training_logs.logs.scan_cache import CACHE, set_default_companions
from debug_training_logs.tools import job_overview
from debug_training_logs.tools import nccl_state_table as tool
from fixtures.worker_gen import JobSpec, generate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_LOGS = sorted(p for p in FIXTURES.rglob("logs") if p.is_dir())


def _full(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within the block, the NCCL table scans every inventory marker (as before the lean plan)."""
    with monkeypatch.context() as m:
        m.setattr(tool, "lean_inventory", contextlib.nullcontext)
        m.setattr(analysis, "lean_inventory", contextlib.nullcontext)
        yield


full_scan = contextlib.contextmanager(_full)


def _answer(logs: Path, **kw: Any) -> dict[str, Any]:
    CACHE.clear()
    return tool.nccl_state_table(str(logs), **kw).model_dump(mode="json")


def _scanned_markers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the number of patterns of each scan the block runs."""
    seen: list[int] = []
    real = inventory.start_each

    def spy(files: Any, spec: Any, *a: Any, **k: Any) -> Any:
        seen.append(len(spec.patterns))
        return real(files, spec, *a, **k)

    monkeypatch.setattr(inventory, "start_each", spy)
    return seen


def lean_equals_full(
    answer: Callable[..., dict[str, Any]],
    full: Callable[[pytest.MonkeyPatch], contextlib.AbstractContextManager[None]],
    monkeypatch: pytest.MonkeyPatch,
    logs: Path,
    **kw: Any,
) -> dict[str, Any]:
    """A tool's whole ``answer`` with its lean scan, checked equal to the answer within ``full`` (every marker)."""
    lean = answer(logs, **kw)
    with full(monkeypatch):
        whole = answer(logs, **kw)
    assert json.dumps(lean, sort_keys=True) == json.dumps(whole, sort_keys=True), logs
    return lean


def assert_lean_equals_full(monkeypatch: pytest.MonkeyPatch, logs: Path, **kw: Any) -> dict[str, Any]:
    return lean_equals_full(_answer, full_scan, monkeypatch, logs, **kw)


def lean_and_full_patterns(
    answer: Callable[..., dict[str, Any]],
    full: Callable[[pytest.MonkeyPatch], contextlib.AbstractContextManager[None]],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, int]:
    """How many patterns a tool's scan of the data_stall fixture searches with its lean plan and within ``full``."""
    seen = _scanned_markers(monkeypatch)
    logs = FIXTURES / "data_stall" / "logs"
    answer(logs)
    with full(monkeypatch):
        answer(logs)
    lean_n, full_n = seen
    return lean_n, full_n


def test_the_lean_scan_searches_fewer_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    lean_n, full_n = lean_and_full_patterns(_answer, full_scan, monkeypatch)
    assert full_n - lean_n == len(inventory_markers.MARKERS) - len(inventory.COVERAGE_MARKERS)
    assert {m.name for m in inventory_markers.MARKERS} > inventory.COVERAGE_MARKERS


@pytest.mark.parametrize("logs", FIXTURE_LOGS, ids=[str(p.parent.relative_to(FIXTURES)) for p in FIXTURE_LOGS])
def test_every_fixture(monkeypatch: pytest.MonkeyPatch, logs: Path) -> None:
    assert_lean_equals_full(monkeypatch, logs)


GENERATED = [
    ("torchrun", "2.10", {}),
    ("torchrun", "2.14", {"per_rank_files": True}),
    ("torchrun", "2.4", {"ansi": True, "wrap_rank": 3}),
    ("torchrun", "2.7", {"tqdm_glue": True, "compress": True}),
    ("torchrun", "2.3", {"drop_nodes": (1,)}),
    ("srun", "2.1", {}),
    ("srun", "2.5", {"compress": True}),
    ("ray", "2.5", {"ansi": True}),
    ("ray", "2.2", {}),
    ("torchrun", "2.10", {"layout": "megatron", "nodes": 2, "gpus_per_node": 4}),
]


@pytest.mark.parametrize(
    ("launcher", "torch", "extra"), GENERATED, ids=[f"{a}-{b}-{sorted(c)}" for a, b, c in GENERATED]
)
@pytest.mark.parametrize("scenario", ["data_stall", "fabric", "missing_node"])
def test_generated_layouts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, launcher: str, torch: str, extra: dict[str, Any], scenario: str
) -> None:
    spec = replace(JobSpec(gpus_per_node=4), launcher=launcher, torch=torch, **extra)
    generate(spec, scenario, tmp_path / "logs", write_truth=False)
    got = assert_lean_equals_full(monkeypatch, tmp_path / "logs")
    assert got["coverage"]["files_scanned"] > 0


# Hand-written presentations: how a file names its ranks, and how the job states its world size.
_STATUS = (
    "{p}[rank{r}]:[E521 08:02:12.667821787 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  "
    "failure detected by watchdog at work sequence id: 40 PG status: last enqueued work: {e}, last completed work: 39"
)


def _status(r: int, prefix: str = "", stuck: int = 5) -> str:
    return _STATUS.format(p=prefix, r=r, e=40 if r != stuck else 39)


def _filler(n: int) -> list[str]:
    """Lines the full inventory has markers for (framework, data source, versions, SLURM) and the lean one not."""
    out = ["[NeMo I 2026-05-21 07:00:01 nemo_logging:349] Megatron training, lhotse dataloader, ais://bucket"]
    out += ["NCCL version 2.21.5+cuda12.4", "torch version: 2.6.0", "srun: Job step created"]
    out += [f"2026-05-21 07:00:{i % 60:02d} step {i} lhotse cuts loaded" for i in range(n)]
    return out


def _nccl_init(r: int, n: int, host: str = "gpu-a01", split: bool = False) -> str:
    tail = " parent 0x1234" if split else ""
    return f"{host}:100{r}:200{r} [{r % 4}] NCCL INFO ncclCommInitRank comm 0x55 rank {r} nranks {n} cudaDev 0{tail}"


def _child_table(ranks: list[int]) -> list[str]:
    out = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "=" * 20, "Failures:"]
    for r in ranks:
        out += [f"[{r}]:", "  time      : 2026-05-21_08:02:30", "  host      : gpu-a01"]
        out += [f"  rank      : {r} (local_rank: {r % 4})", f"  exitcode  : -6 (pid: {3000 + r})"]
    return out


Job = dict[str, list[str]]


def _ranks_job(world_lines: Callable[[int], list[str]], n: int = 8, per_file: int = 4) -> Job:
    files: Job = {}
    for f in range(n // per_file):
        lines = list(world_lines(f))
        ranks = range(f * per_file, (f + 1) * per_file)
        lines += _filler(30)
        lines += [_status(r) for r in ranks]
        files[f"node-{f}.out"] = lines
    return files


def _lightning(f: int) -> list[str]:
    return [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(4 * f, 4 * f + 4)]


def _no_prefix_job(rank_lines: Callable[[int, int], str], world: list[str], n: int = 8) -> Job:
    """Files whose watchdog lines carry no ``[rankN]:`` (ranks from other sources only)."""
    files: Job = {}
    for f in range(n // 4):
        lines = list(world) + _filler(10)
        for r in range(4 * f, 4 * f + 4):
            lines.append(rank_lines(r, f))
        files[f"host-{f}.log"] = lines
    return files


def _ray(r: int, _f: int) -> str:
    return f"(RayTrainWorker[rank={r}] pid={4000 + r}, ip=10.0.0.{r}) " + _status(r)[len(f"[rank{r}]:") :]


def _srun(r: int, _f: int) -> str:
    return f"{r}: " + _status(r)[len(f"[rank{r}]:") :]


VARIANTS: dict[str, Callable[[], Job]] = {
    "no_world_size": lambda: _ranks_job(lambda f: []),
    "lightning_member": lambda: _ranks_job(_lightning),
    "world_size_kv": lambda: _ranks_job(lambda f: ["world_size=8", "  World Size ...... 8"]),
    "WORLD_SIZE_env": lambda: _ranks_job(lambda f: ["WORLD_SIZE: 8 RANK: 0"]),
    "torchrun_global_world_sizes": lambda: _ranks_job(
        lambda f: ["  global_world_sizes=[8, 8, 8, 8]", "  group_world_size=2 local_world_size=4"]
    ),
    "slurm_ntasks": lambda: _ranks_job(lambda f: ["SLURM_NTASKS=8", "SLURM_NPROCS=8"]),
    "default_pg_size": lambda: _ranks_job(
        lambda f: [
            f"[rank{4 * f}]:[I521 07:00:05.1 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank {4 * f}] "
            "ProcessGroupNCCL initialization options: size: 8, global rank: 0, TIMEOUT(ms): 1800000"
        ]
    ),
    "nccl_world_comm": lambda: _ranks_job(lambda f: [_nccl_init(r, 8) for r in range(4 * f, 4 * f + 4)]),
    "nccl_sub_comm_only": lambda: _ranks_job(lambda f: [_nccl_init(r % 2, 2) for r in range(4 * f, 4 * f + 4)]),
    "nccl_split_comm": lambda: _ranks_job(lambda f: [_nccl_init(r, 16, split=True) for r in range(4 * f, 4 * f + 4)]),
    "conflicting_claims": lambda: _ranks_job(lambda f: ["world_size=8", "SLURM_NTASKS=2", *_lightning(f)]),
    "contradicted_claim": lambda: _ranks_job(lambda f: ["world_size=3"]),
    "incredible_claim": lambda: _ranks_job(lambda f: ["world_size=99999999999"]),
    "missing_ranks": lambda: _ranks_job(lambda f: ["world_size=12"]),
    "ray_prefixes_past_the_cap": lambda: _no_prefix_job(
        _ray,
        [f"(RayTrainWorker[rank={r}] pid={4000 + r}, ip=10.0.0.{r}) step" for r in range(12)]
        + ["(RayTrainWorker pid=1, ip=10.0.0.1) world_size=8"] * 25,
    ),
    "srun_labels": lambda: {
        "slurm-1.out": [f"{r}: world_size=8" for r in range(8)] + [_srun(r, 0) for r in range(8)] * 3
    },
    "child_failed_table_only": lambda: {  # whole logs (not excerpts): a silent rank in one is evidence
        "agent-0.log": ["world_size=8", *_filler(50), *_child_table([0, 1, 2, 3])],
        "agent-1.log": [*_filler(50), *_child_table([4, 5, 6, 7]), *[_status(r) for r in (4, 6)]],
    },
    "file_names_only": lambda: {f"rank-{r}.log": [*_filler(5), _status(r)[len(f"[rank{r}]:") :]] for r in range(4)},
    "lightning_only_ranks": lambda: _no_prefix_job(
        lambda r, _f: _status(r)[len(f"[rank{r}]:") :], ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8"]
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_rank_and_world_presentations(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, gz: bool) -> None:
    for rel, lines in VARIANTS[name]().items():
        data = ("\n".join(lines) + "\n").encode()
        if gz:
            (tmp_path / f"{rel}.gz").write_bytes(gzip.compress(data))
        else:
            (tmp_path / rel).write_bytes(data)
    got = assert_lean_equals_full(monkeypatch, tmp_path)
    # the lean table's coverage is the full inventory's (what job_overview reports)
    CACHE.clear()
    overview = job_overview.job_overview(str(tmp_path)).model_dump(mode="json")["coverage"]
    assert got["coverage"] == overview


def test_world_size_argument_and_attempt_views(monkeypatch: pytest.MonkeyPatch) -> None:
    logs = FIXTURES / "nccl_missing_node" / "logs"
    assert_lean_equals_full(monkeypatch, logs, world_size=32)
    assert_lean_equals_full(monkeypatch, logs, ranks="0-3", limit=2)
    assert_lean_equals_full(monkeypatch, logs, offset=3, limit=5)


def _write(tmp: Path) -> Path:
    for rel, lines in VARIANTS["conflicting_claims"]().items():
        (tmp / rel).write_text("\n".join(lines) + "\n")
    return tmp


def test_a_lean_inventory_never_answers_the_full_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    logs = _write(tmp_path)
    fresh = job_overview.job_overview(str(logs)).model_dump(mode="json")
    CACHE.clear()
    tool.nccl_state_table(str(logs))  # lean: the files' lean facts are cached under their own key
    seen = _scanned_markers(monkeypatch)
    after = job_overview.job_overview(str(logs)).model_dump(mode="json")
    assert seen, "the overview must read the files for the markers the lean scan skipped"
    assert after == fresh
    assert "NeMo" in after["summary"] and "Lhotse" in after["summary"]  # from markers the lean scan skipped


def test_a_full_inventory_serves_the_lean_scan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    logs = _write(tmp_path)
    lean = tool.nccl_state_table(str(logs)).model_dump(mode="json")
    CACHE.clear()
    from debug_training_logs.analysis.attempts import launcher_consumer
    from debug_training_logs.analysis.inventory import consumer_for, scan_consumers
    from debug_training_logs.logs.scan_cache import together

    with together(consumer_for(nccl_sink.NCCL_PATTERNS, nccl_sink.NcclSink)):
        scan_consumers(logs, [launcher_consumer()])  # a full scan of the same consumers (no lean context)
    seen = _scanned_markers(monkeypatch)
    again = tool.nccl_state_table(str(logs)).model_dump(mode="json")
    assert seen == [] and again == lean


def assert_a_server_keeps_the_full_inventory(
    monkeypatch: pytest.MonkeyPatch, lean_tool: Callable[[str], object], logs: Path
) -> None:
    """In a server (the standard companions in force), a tool with a lean plan still scans every inventory marker:
    the overview that follows reads nothing."""
    CACHE.clear()
    set_default_companions(standard_consumers())
    try:
        lean_tool(str(logs))
        seen = _scanned_markers(monkeypatch)
        job_overview.job_overview(str(logs))
        assert seen == []  # the first scan kept every marker: the overview reads nothing
    finally:
        set_default_companions(())
        CACHE.clear()


def test_a_server_keeps_the_full_inventory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert_a_server_keeps_the_full_inventory(monkeypatch, tool.nccl_state_table, _write(tmp_path))


def test_one_inventory_per_job_and_a_changed_file_builds_a_new_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    logs = _write(tmp_path)
    built: list[int] = []
    real = inventory.InventoryFold.inventory

    def counting(*a: Any, **k: Any) -> Any:
        built.append(1)
        return real(*a, **k)

    monkeypatch.setattr(inventory.InventoryFold, "inventory", counting)
    first = tool.nccl_state_table(str(logs)).model_dump(mode="json")
    assert len(built) == 1  # the attempt split's scan and the table's own (a cache hit) share it
    assert first["coverage"]["world_size"] == 8
    with (logs / "node-1.out").open("a") as fh:
        fh.write("Initializing distributed: GLOBAL_RANK: 8, MEMBER: 9/9\n")
    again = tool.nccl_state_table(str(logs)).model_dump(mode="json")
    assert len(built) == 2 and again["coverage"]["world_size"] == 9 and again["coverage"]["ranks_found"] == "0-8"


RESTARTED = sorted(
    p for base in ("real_torch", "real_torch_2_14") for p in (FIXTURES / base).glob("restart*/*logs") if p.is_dir()
)


@pytest.mark.parametrize("attempt", [None, 0, 1])
@pytest.mark.parametrize("logs", RESTARTED, ids=[str(p.relative_to(FIXTURES)) for p in RESTARTED])
def test_restarted_jobs_every_attempt(monkeypatch: pytest.MonkeyPatch, logs: Path, attempt: int | None) -> None:
    got = assert_lean_equals_full(monkeypatch, logs, attempt=attempt)
    if attempt is not None:  # the table is one attempt's lines: a second scan, with a line filter
        assert len(got["attempts"]) >= 2 and got["attempt"] == attempt

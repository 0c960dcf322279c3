"""Twenty analysed jobs in a fresh history, by SQLite and by a real PostgreSQL server: the repeat-offender table,
the recurring signatures and the failures per category are what the incidents say.

The jobs: fifteen generated incidents (fixtures/*, on nodes gpu-a01 and gpu-a02) and five runs real torch wrote
(fixtures/real_torch*). The generated logs all carry SLURM job id 48213 and the real runs 7301 (one generator each),
so each is given its own job id as the SLURM epilog gives ``$SLURM_JOB_ID``; one real run keeps the id its file
names carry (``train.7301.gpu-node-0.err``).

What the truth files say, and so what the history must say:
* gpu-a01 hosts the culprit of cuda_oom, oom_untimed_tail, nan_loss, dataloader_crash, data_stall, watchdog_hang
  and address_in_use (7 failures, 7 as culprit);
* gpu-a02 hosts the culprit of loader_stall, memory_creep_oom, invalid_device_ordinal, xid_illegal_memory,
  rank_exception and node_failure, and is the suspect node of fabric_hang (7 failures, 6 as culprit);
* ais-target-2 is in data_stall's chain only (1 failure: not a repeat offender); the real runs name no host;
* cuda_oom and oom_untimed_tail are the same OOM line; the two real sigkill runs and the two real loader exceptions
  are the same failure twice each; clean_resets did not fail (recorded, never counted).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from debug_training_logs.history import queries
from debug_training_logs.history.location import Location
from debug_training_logs.history.store import open_store
from debug_training_logs.server.app import create_server
from debug_training_logs.tools.diagnose import diagnose
from debug_training_logs.tools.diagnosis_models import Diagnosis
from debug_training_logs.tools.job_history import job_history
from tests.postgres_server import PostgresServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
JOBS: tuple[tuple[str, str | None], ...] = (
    ("cuda_oom", "5101"),
    ("oom_untimed_tail", "5102"),
    ("nan_loss", "5103"),
    ("dataloader_crash", "5104"),
    ("data_stall", "5105"),
    ("watchdog_hang", "5106"),
    ("address_in_use", "5107"),
    ("loader_stall", "5108"),
    ("memory_creep_oom", "5109"),
    ("invalid_device_ordinal", "5110"),
    ("xid_illegal_memory", "5111"),
    ("rank_exception", "5112"),
    ("node_failure", "5113"),
    ("fabric_hang", "5114"),
    ("clean_resets", "5115"),
    ("real_torch/sigkill", "7311"),
    ("real_torch_2_14/sigkill", "7312"),
    ("real_torch/loader_exception", "7313"),
    ("real_torch_2_14/loader_exception", "7314"),
    ("real_torch_2_14/mismatch_detail", None),
)
GPU_A01 = ["5106", "5105", "5104", "5103", "5102", "5101", "5107"]
GPU_A02 = ["5109", "5114", "5112", "5111", "5108", "5113", "5110"]
"""Newest first (the job's last log time; equal times: the later recorded first)."""


def analyse(name: str, job_id: str | None) -> Diagnosis:
    ais = FIXTURES / name / "ais"
    return diagnose(str(FIXTURES / name / "logs"), str(ais) if ais.is_dir() else None, job_id=job_id)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def history(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Location, dict[str, Diagnosis]]]:
    if request.param == "sqlite":
        where = Location("sqlite", str(tmp_path_factory.mktemp("twenty") / "history.sqlite"))
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        where = Location("postgres", server.create_database(f"twenty_{os.getpid()}"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEBUG_TRAINING_LOGS_HISTORY", where.target)
        done = {name: analyse(name, job_id) for name, job_id in JOBS}
        done["cuda_oom again"] = analyse("cuda_oom", "5101")  # the same job analysed twice
    yield where, done


def test_every_job_is_recorded_once(history: tuple[Location, dict[str, Diagnosis]]) -> None:
    where, done = history
    assert all(d.history is not None and d.history.recorded and d.history.error is None for d in done.values())
    store = open_store(where)
    assert store is not None
    try:
        assert queries.totals(store) == (20, 19)  # cuda_oom twice is one record; clean_resets is no failure
        keys = {k for (k,) in store.rows("SELECT job_key FROM jobs")}
        assert "slurm:7301" in keys  # named by its files: train.7301.gpu-node-0.err
        assert "slurm:5101" in keys and len(keys) == 20
    finally:
        store.close()


def test_the_repeat_offender_table(history: tuple[Location, dict[str, Diagnosis]]) -> None:
    where, _ = history
    store = open_store(where)
    assert store is not None
    try:
        offenders, total = queries.repeat_offenders(store, queries.window(store, 50), min_failures=2, jobs_per=8)
    finally:
        store.close()
    assert total == 2
    table = [(o.kind, o.name, o.failures, o.of_last, o.as_culprit, [j.job for j in o.jobs]) for o in offenders]
    assert table == [
        ("node", "gpu-a02", 7, 19, 6, GPU_A02),
        ("node", "gpu-a01", 7, 19, 7, GPU_A01),
    ]
    a02 = offenders[0]
    assert a02.categories == {
        "cuda_error": 2,
        "cuda_oom": 1,
        "gpu_fabric": 1,
        "rank_crash": 1,
        "data_loading_stall": 1,
        "node_failure": 1,
    }
    assert {j.job: j.role for j in a02.jobs}["5114"] == "suspect"  # fabric_hang: a suspect node, no culprit rank


def test_recurring_signatures_and_categories(history: tuple[Location, dict[str, Diagnosis]]) -> None:
    where, _ = history
    store = open_store(where)
    assert store is not None
    try:
        win = queries.window(store, 50)
        sigs, total = queries.recurring_signatures(store, win, min_failures=2)
        weekly, periods = queries.categories_over_time(store, win, period="week")
    finally:
        store.close()
    # the two data-loading stalls share their first primary event (rank 5's AISBatchLoaderError): one signature
    assert total == 4
    assert sorted((s.category, s.failures, sorted(j.job for j in s.jobs)) for s in sigs) == [
        ("cuda_oom", 2, ["5101", "5102"]),
        ("data_loading_stall", 2, ["5105", "5108"]),
        ("rank_crash", 2, ["7311", "7312"]),
        ("rank_crash", 2, ["7313", "7314"]),
    ]
    oom = next(s for s in sigs if s.category == "cuda_oom")
    assert oom.event.startswith("[rank<r>]: torch.OutOfMemoryError: CUDA out of memory.") and oom.nodes == ["gpu-a01"]
    assert periods == 2 and [(c.period, c.failures, c.categories) for c in weekly] == [
        ("2026-W48", 5, {"rank_crash": 4, "collective_mismatch": 1}),
        (
            "2026-W21",
            14,
            {
                "cuda_oom": 3,
                "rank_crash": 3,
                "cuda_error": 2,
                "data_loading_stall": 2,
                "gpu_fabric": 1,
                "node_failure": 1,
                "storage_errors": 1,
                "watchdog_hang": 1,
            },
        ),
    ]


def test_diagnose_says_when_its_node_or_signature_was_seen_before(
    history: tuple[Location, dict[str, Diagnosis]],
) -> None:
    _, done = history
    first = done["address_in_use"].history  # gpu-a01's earliest failure in time: nothing before it
    assert first is not None and first.seen_before == [] and first.note is None and first.action is None
    oom = done["oom_untimed_tail"]
    assert oom.history is not None and oom.history.note is not None
    assert [(s.what, s.earlier) for s in oom.history.seen_before] == [("node", 1), ("signature", 1)]
    assert "second time in 14 days" in oom.history.note and "[History: " in oom.summary
    fabric = done["fabric_hang"].history
    assert fabric is not None and fabric.note is not None and fabric.action is not None
    assert "Node gpu-a02 (a suspect here) was implicated in a failure for the sixth time in 14 days" in fabric.note
    assert fabric.action.startswith("Restart without node gpu-a02 (sbatch --exclude=gpu-a02)")
    again = done["cuda_oom again"].history  # re-analysed: itself is not an earlier failure
    assert again is not None and again.job == "5101"
    assert all("5101" not in [j.job for j in s.jobs] for s in again.seen_before)


def test_the_history_command_pages_a_nodes_jobs(
    history: tuple[Location, dict[str, Diagnosis]], monkeypatch: pytest.MonkeyPatch
) -> None:
    where, _ = history
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", where.target)
    first = job_history(node="gpu-a01", limit=4)
    assert [j.job for j in first.jobs] == GPU_A01[:4] and first.next_offset == 4 and first.jobs_truncated == 3
    rest = job_history(node="gpu-a01", offset=4, limit=4)
    assert [j.job for j in rest.jobs] == GPU_A01[4:] and rest.next_offset is None
    unknown = job_history(daemon="ais-target")
    assert unknown.jobs == [] and unknown.similar == ["ais-target-2"]
    assert [j.job for j in job_history(daemon="ais-target-2").jobs] == ["5105"]


@pytest.mark.anyio
async def test_job_history_over_mcp_within_the_budget(
    history: tuple[Location, dict[str, Diagnosis]], monkeypatch: pytest.MonkeyPatch
) -> None:
    where, _ = history
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", where.target)
    async with Client(create_server([FIXTURES])) as client:
        res = await client.call_tool("job_history", {})
        assert res.is_error is False and res.structured_content is not None
        data = res.structured_content
        assert [(o["name"], o["failures"]) for o in data["repeat_offenders"]] == [("gpu-a02", 7), ("gpu-a01", 7)]
        assert data["budget"]["omitted"] == [] and data["window"] == 19
        node = await client.call_tool("job_history", {"node": "gpu-a02"})
        assert node.structured_content is not None
        assert [j["job"] for j in node.structured_content["jobs"]] == GPU_A02
        assert "gpu-a02" in node.content[0].text  # type: ignore[union-attr]  (the readable rendering)

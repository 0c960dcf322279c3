"""Shared test helpers: the anyio backend and a small, realistic multi-node job written into a temp dir."""

from __future__ import annotations

import gzip
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.postgres_server import PostgresServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the directories ``os.walk`` is started on from now on in the test, in order."""
    names: list[str] = []
    real = os.walk

    def counted(top: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(Path(top).name)
        return real(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", counted)
    return names


@pytest.fixture(autouse=True)
def _fresh_scan_cache() -> None:
    """Each test starts with an empty scan-result cache (a test that counts file reads must see its own)."""
    from debug_training_logs.logs.scan_cache import CACHE, set_default_companions

    CACHE.clear()
    set_default_companions(())


@pytest.fixture(scope="session", autouse=True)
def _session_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What module- and session-scoped fixtures record into (a server a whole module shares starts before any test's
    own history is set): a history of the session's, never the user's state directory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEBUG_TRAINING_LOGS_HISTORY", str(tmp_path_factory.mktemp("session-history") / "history.sqlite"))
        yield


@pytest.fixture(autouse=True)
def history_file(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test records its diagnoses in a history of its own, in a temp dir apart from any logs (never the user's
    state directory); servers and CLIs the test starts inherit it through the environment."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    monkeypatch.setenv("DEBUG_TRAINING_LOGS_HISTORY", str(path))
    return path


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on 127.0.0.1 (``tests/postgres_server.py``), started once for the session."""
    from tests.postgres_server import running_postgres

    with running_postgres() as server:
        yield server


_databases = itertools.count()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN (with the password) of a new, empty database on :func:`postgres_server`."""
    return postgres_server.create_database(f"history_{os.getpid()}_{next(_databases)}")


@pytest.fixture
def counted_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many worker files each job scan read (one entry per scan started)."""
    from debug_training_logs.analysis import inventory

    passes: list[int] = []
    real = inventory.start_each

    def scan(files: Any, *a: Any, **kw: Any) -> Any:
        passes.append(len(files))
        return real(files, *a, **kw)

    monkeypatch.setattr(inventory, "start_each", scan)
    return passes


def write_small_job(root: Path, nodes: int = 2, gpus: int = 4, *, skip_nodes: tuple[int, ...] = ()) -> Path:
    """A NeMo job of ``nodes`` x ``gpus`` ranks, torch 2.10-style headers, one file per node (error-777-N.out).

    Rank 1 logs a loader error; every rank logs NCCL init with the world size. ``skip_nodes`` leaves node files out
    (a user who sent only some of the files).
    """
    world = nodes * gpus
    root.mkdir(parents=True, exist_ok=True)
    for node in range(nodes):
        if node in skip_nodes:
            continue
        host = f"gpu-b{node:02d}"
        lines = [f"[NeMo I 2026-03-02 10:00:0{node} exp_manager:400] Experiments will be logged at /results"]
        for local in range(gpus):
            r = node * gpus + local
            lines.append(f"{host}:{4000 + local}:{4100 + local} [{local}] NCCL INFO NCCL version 2.21.5+cuda12.4")
            lines.append(
                f"{host}:{4000 + local}:{4100 + local} [{local}] NCCL INFO comm 0x5a3c1d0 rank {r} nranks {world} "
                f"cudaDev {local} busId 3d000 - Init COMPLETE"
            )
            lines.append(
                f"[rank{r}]:[I0302 10:00:10.{r:09d} ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank {r}] ProcessGroupNCCL initialized"
            )
        for step in range(3):
            for local in range(gpus):
                r = node * gpus + local
                lines.append(f"[rank{r}]: Epoch 0: step {step} loss 2.{step}{r}")
        if node == 0:
            lines.append(
                "[rank1]: lhotse.ais.batch_loader.AISBatchLoaderError: Direct API fallback failed for shard-1.tar"
            )
        lines.append(f"[NeMo I 2026-03-02 10:05:0{node} train:88] done")
        (root / f"error-777-{node}.out").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def gzip_file(path: Path, *, truncate_to: int | None = None) -> Path:
    """Gzip ``path`` to ``path.gz`` (optionally cut to ``truncate_to`` bytes) and remove the original."""
    data = gzip.compress(path.read_bytes())
    if truncate_to is not None:
        data = data[:truncate_to]
    out = path.with_name(path.name + ".gz")
    out.write_bytes(data)
    path.unlink()
    return out

"""The history store on real databases: a SQLite file and a real PostgreSQL server the suite starts.

What a user relies on: a job analysed twice is one record; an old history is migrated, never recreated; log text
(paths, event lines, host names) reaches SQL only as parameters; a damaged, locked or unreachable history gives a
sentence that says what to do, never the DSN's password.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from debug_training_logs.history import schema
from debug_training_logs.history.location import Location, location, redact
from debug_training_logs.history.store import HistoryError, Store, open_store
from debug_training_logs.history.types import Implicated, JobRecord
from tests.postgres_server import PASSWORD, PostgresServer


def a_record(key: str = "slurm:4242", **changes: object) -> JobRecord:
    fields: dict[str, object] = {
        "key": key,
        "slurm_job_id": key.split(":", 1)[1],
        "attempt": None,
        "logs_dir": "/scratch/logs/4242",
        "ais_dir": None,
        "job_start": "2026-05-21T07:00:01",
        "job_end": "2026-05-21T08:02:45",
        "failed_at": "2026-05-21T08:02:45",
        "recorded_at": "2026-12-07T01:00:00",
        "category": "cuda_oom",
        "confidence": "high",
        "verified": True,
        "culprit_ranks": "3",
        "suspect_ranks": "",
        "signature": "cuda_oom:0123456789ab",
        "signature_event": "[rank<r>]: torch.OutOfMemoryError: CUDA out of memory.",
        "summary": "cuda_oom (rank(s) 3)",
        "implicated": (Implicated("node", "gpu-r07-n075", "culprit", "3"),),
    }
    fields.update(changes)
    return JobRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "sqlite":
        return Location("sqlite", str(tmp_path / "state" / "history.sqlite"))
    return Location("postgres", request.getfixturevalue("postgres_dsn"))


def opened(where: Location) -> Store:
    store = open_store(where)
    assert store is not None
    return store


def test_a_new_history_is_created_at_the_latest_schema_version(where: Location) -> None:
    store = opened(where)
    try:
        versions = store.rows("SELECT version, description FROM schema_version ORDER BY version")
        assert [v for v, _ in versions] == [m.version for m in schema.MIGRATIONS]
        assert store.rows("SELECT COUNT(*) FROM jobs") == [(0,)]
    finally:
        store.close()


def test_recording_the_same_job_again_updates_its_one_record(where: Location) -> None:
    store = opened(where)
    try:
        store.record(a_record())
        store.record(a_record(category="rank_crash", implicated=(Implicated("node", "gpu-r07-n076", "culprit", "9"),)))
        store.record(a_record("slurm:4242#attempt=1", attempt=1))
        rows = store.rows("SELECT job_key, category FROM jobs ORDER BY job_key")
        assert rows == [("slurm:4242", "rank_crash"), ("slurm:4242#attempt=1", "cuda_oom")]
        nodes = store.rows(
            "SELECT j.job_key, i.name FROM implicated i JOIN jobs j ON j.id = i.job_id ORDER BY j.job_key"
        )
        assert nodes == [("slurm:4242", "gpu-r07-n076"), ("slurm:4242#attempt=1", "gpu-r07-n075")]
    finally:
        store.close()


def test_an_existing_history_is_migrated_forward_not_recreated(where: Location) -> None:
    store = opened(where)
    store.record(a_record())
    store.close()
    later = (*schema.MIGRATIONS, schema.Migration(99, "a later column", ("ALTER TABLE jobs ADD COLUMN cluster TEXT",)))
    store = opened(where)
    try:
        assert schema.migrate(store.db, later) == 99
        assert schema.migrate(store.db, later) == 99  # applied once
        assert store.rows("SELECT job_key, cluster FROM jobs") == [("slurm:4242", None)]
        assert [v for (v,) in store.rows("SELECT version FROM schema_version ORDER BY version")] == [1, 99]
    finally:
        store.close()
    # this program does not know version 99: it must not write into that schema
    with pytest.raises(HistoryError, match="newer than this program's"):
        open_store(where)


def test_log_text_reaches_sql_only_as_parameters(where: Location) -> None:
    hostile = "x'); DROP TABLE jobs; -- %s ? %(x)s \\ \x00".replace("\x00", "")
    store = opened(where)
    try:
        rec = a_record(
            logs_dir=f"/logs/{hostile}",
            signature_event=hostile,
            summary=hostile,
            implicated=(Implicated("node", hostile, "culprit", "3"),),
        )
        store.record(rec)
        assert store.rows("SELECT logs_dir, signature_event, summary FROM jobs") == [
            (f"/logs/{hostile}", hostile, hostile)
        ]
        assert store.rows("SELECT name FROM implicated") == [(hostile,)]
    finally:
        store.close()


def test_a_damaged_sqlite_file_gives_a_sentence_that_says_what_to_do(tmp_path: Path) -> None:
    damaged = tmp_path / "history.sqlite"
    damaged.write_bytes(b"this is not a database, it is a log line someone redirected here\n" * 100)
    with pytest.raises(HistoryError) as caught:
        open_store(Location("sqlite", str(damaged)))
    assert "damaged or not a SQLite database" in str(caught.value) and "Move it aside" in str(caught.value)


def test_a_locked_sqlite_history_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from debug_training_logs.history import store as store_module

    where = Location("sqlite", str(tmp_path / "history.sqlite"))
    opened(where).close()
    monkeypatch.setattr(store_module, "SQLITE_BUSY_SECONDS", 0.2)
    other = sqlite3.connect(where.target, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        with pytest.raises(HistoryError, match="locked by another process"):
            opened(where).record(a_record())
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_reading_a_history_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    where = Location("sqlite", str(tmp_path / "nowhere" / "history.sqlite"))
    assert open_store(where, create=False) is None
    assert not (tmp_path / "nowhere").exists()


def test_a_wrong_password_is_refused_and_never_printed(postgres_server: PostgresServer) -> None:
    wrong = "Wr0ng-pass-Zq9"
    with pytest.raises(HistoryError) as caught:
        open_store(Location("postgres", postgres_server.dsn(password=wrong)))
    message = str(caught.value)
    assert "password authentication failed" in message
    assert wrong not in message and PASSWORD not in message and "***" in message


def test_an_unreachable_server_is_reported_without_the_password(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.dsn().replace(f":{postgres_server.port}/", ":1/")
    with pytest.raises(HistoryError) as caught:
        open_store(Location("postgres", dsn))
    assert PASSWORD not in str(caught.value) and "Could not open the PostgreSQL history" in str(caught.value)
    assert PASSWORD not in repr(Location("postgres", dsn))


def test_a_postgres_dsn_without_a_driver_says_how_to_install_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what an install without the [postgres] extra sees
    with pytest.raises(HistoryError, match=r"no PostgreSQL driver is installed: pip install 'debug-training-logs\["):
        open_store(Location("postgres", "postgresql://team:hunter2@db.example:5432/history"))


@pytest.mark.parametrize(
    ("text", "dsn"),
    [
        ("could not connect: postgresql://team:hunter2@db:5432/h", None),
        ("invalid dsn: host=db password=hunter2 user=team", None),
        ("bad option in postgresql://db/h?password=hunter2&sslmode=require", None),
        ("server said: hunter2 is wrong", "postgresql://team:hunter2@db/h"),
        ("quoted: password='hunter2' dbname=h", None),
    ],
)
def test_redaction_removes_the_password_wherever_it_is(text: str, dsn: str | None) -> None:
    out = redact(text, dsn)
    assert "hunter2" not in out and "***" in out


def test_the_location_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEBUG_TRAINING_LOGS_HISTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert location() == location()  # (a frozen value)
    assert location().target == str(tmp_path / "state" / "debug-training-logs" / "history.sqlite")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert location().target == str(tmp_path / ".local" / "state" / "debug-training-logs" / "history.sqlite")
    assert location("off").backend == "off"
    assert location("sqlite:////srv/h.sqlite") == Location("sqlite", "/srv/h.sqlite")
    team = location("postgresql://team:hunter2@db/h")
    assert team.backend == "postgres" and team.shown() == "postgresql://team:***@db/h"

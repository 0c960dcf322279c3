"""The history store: one small interface (:class:`~debug_training_logs.history.backend.Backend`) over SQLite and
PostgreSQL, and :class:`Store`, which records a job (an upsert on its identity) and runs the read queries of
:mod:`~debug_training_logs.history.queries`.

SQL is written once, with ``?`` placeholders; the PostgreSQL backend turns them into psycopg's ``%s`` (server-side
parameters). Every value that comes from a log (paths, event text, host names) is a parameter, never SQL text.

Failures become :class:`HistoryError` with a sentence that says what is wrong and what to do, and never a DSN's
password: a damaged or locked SQLite file, an unreachable server, a DSN without an installed driver.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from debug_training_logs.errors import UserInputError
from debug_training_logs.history import schema
from debug_training_logs.history.backend import Backend, Row
from debug_training_logs.history.location import ENV, Location, location, redact
from debug_training_logs.history.types import NO_FAILURE, JobRecord

SQLITE_BUSY_SECONDS = 5.0
"""How long a write waits for another process's lock on a SQLite history before giving up (and saying so)."""
PG_CONNECT_SECONDS = 5
"""How long connecting to a PostgreSQL history may take (a dead server must not hold a diagnosis up)."""
PG_STATEMENT_MS = 15000


class HistoryError(UserInputError):
    """The history cannot be opened, read or written (the message says why and what to do; no password)."""


class SqliteBackend:
    dialect: Literal["sqlite", "postgres"] = "sqlite"

    def __init__(self, path: Path) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise HistoryError(
                f"This Python's SQLite library is {sqlite3.sqlite_version}; the history needs "
                f"{'.'.join(map(str, MIN_SQLITE))} or newer. Use a newer Python, point {ENV} at a PostgreSQL DSN, or "
                "set it to 'off'."
            )
        # autocommit (isolation_level None): transactions are opened explicitly, BEGIN IMMEDIATE for writers
        self.conn = sqlite3.connect(path, timeout=SQLITE_BUSY_SECONDS, isolation_level=None)
        self.conn.execute("PRAGMA foreign_keys = ON")

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(sql, tuple(params)).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class PostgresBackend:
    dialect: Literal["sqlite", "postgres"] = "postgres"

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.conn = psycopg.connect(
            dsn, autocommit=True, connect_timeout=PG_CONNECT_SECONDS, application_name="debug-training-logs"
        )
        # a SET, not a startup option: connection poolers (pgbouncer) refuse unknown startup parameters
        self.conn.execute(f"SET statement_timeout = {int(PG_STATEMENT_MS)}")

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        assert "%" not in sql, "no literal % in SQL text: psycopg reads it as a placeholder"
        cur = self.conn.execute(sql.replace("?", "%s"), tuple(params))
        return list(cur.fetchall()) if cur.description is not None else []

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    def close(self) -> None:
        self.conn.close()


_JOB_COLUMNS = (
    "job_key",
    "slurm_job_id",
    "attempt",
    "logs_dir",
    "ais_dir",
    "job_start",
    "job_end",
    "failed_at",
    "recorded_at",
    "category",
    "confidence",
    "verified",
    "culprit_ranks",
    "suspect_ranks",
    "signature",
    "signature_event",
    "summary",
)
_UPSERT = (
    f"INSERT INTO jobs ({', '.join(_JOB_COLUMNS)}) VALUES ({', '.join('?' for _ in _JOB_COLUMNS)}) "
    "ON CONFLICT (job_key) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _JOB_COLUMNS if c != "job_key")
)
MIN_SQLITE = (3, 25, 0)
"""The SQLite library the history needs: upserts (3.24) and window functions (3.25). (No ``RETURNING``, 3.35: the
Python of an older distribution links the system's SQLite, e.g. 3.31 on Ubuntu 20.04.)"""


class Store:
    """An open history (its schema migrated)."""

    def __init__(self, db: Backend, where: Location) -> None:
        self.db = db
        self.where = where

    @property
    def dialect(self) -> str:
        return self.db.dialect

    def record(self, rec: JobRecord) -> None:
        """Record ``rec``, replacing the record of the same job (``rec.key``) if there is one."""
        values = (
            rec.key,
            rec.slurm_job_id,
            rec.attempt,
            rec.logs_dir,
            rec.ais_dir,
            rec.job_start,
            rec.job_end,
            rec.failed_at,
            rec.recorded_at,
            rec.category,
            rec.confidence,
            int(rec.verified),
            rec.culprit_ranks,
            rec.suspect_ranks,
            rec.signature,
            rec.signature_event,
            rec.summary,
        )
        with self.guarded("record this diagnosis in"), self.db.transaction():
            self.db.run(_UPSERT, values)
            job_id = self.db.run("SELECT id FROM jobs WHERE job_key = ?", (rec.key,))[0][0]
            self.db.run("DELETE FROM implicated WHERE job_id = ?", (job_id,))
            for i in rec.implicated:
                self.db.run(
                    "INSERT INTO implicated (job_id, kind, name, role, ranks, failed_at, failed) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (job_id, i.kind, i.name, i.role, i.ranks, rec.failed_at, int(rec.category != NO_FAILURE)),
                )

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of a read query (``?`` placeholders)."""
        with self.guarded("read"):
            return self.db.run(sql, params)

    @contextmanager
    def guarded(self, doing: str) -> Iterator[None]:
        """Database errors inside become :class:`HistoryError` (what went wrong and what to do)."""
        try:
            yield
        except HistoryError:
            raise
        except Exception as exc:
            raise explain(exc, self.where, doing) from None

    def close(self) -> None:
        with suppress(Exception):  # closing a broken connection must not hide the error that broke it
            self.db.close()


def open_store(where: Location | None = None, *, create: bool = True) -> Store | None:
    """The history at ``where`` (default: :func:`~.location.location`), migrated; None when the history is off, or
    (``create=False``, for reading) when a SQLite history does not exist yet."""
    where = location() if where is None else where
    if where.backend == "off":
        return None
    db: Backend
    try:
        if where.backend == "sqlite":
            path = Path(where.target)
            if not path.exists():
                if not create:
                    return None
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            db = SqliteBackend(path)
        else:
            try:
                import psycopg  # noqa: F401
            except ImportError:
                raise HistoryError(
                    f"{ENV} is a PostgreSQL DSN ({where.shown()}) but no PostgreSQL driver is installed: "
                    "pip install 'debug-training-logs[postgres]' (psycopg 3), or unset it to keep the history in "
                    "SQLite."
                ) from None
            db = PostgresBackend(where.target)
    except HistoryError:
        raise
    except Exception as exc:
        raise explain(exc, where, "open") from None
    store = Store(db, where)
    try:
        with store.guarded("open"):
            try:
                schema.migrate(db)
            except schema.NewerSchema as exc:
                raise HistoryError(f"The history at {where.shown()} cannot be used: {exc}.") from None
    except BaseException:
        store.close()
        raise
    return store


def explain(exc: BaseException, where: Location, doing: str) -> HistoryError:
    """A :class:`HistoryError` for a database error: what happened, at which (redacted) location, and what to do."""
    shown = where.shown()
    detail = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, where.target)
    if where.backend == "sqlite":
        low = detail.lower()
        if "locked" in low or "busy" in low:
            return HistoryError(
                f"Could not {doing} the history {shown}: it is locked by another process ({detail}) and stayed "
                f"locked for {SQLITE_BUSY_SECONDS:g} s. Try again, or point {ENV} at another file."
            )
        if isinstance(exc, sqlite3.DatabaseError) and ("not a database" in low or "malformed" in low):
            return HistoryError(
                f"Could not {doing} the history {shown}: the file is damaged or not a SQLite database ({detail}). "
                f"Move it aside (a new history is started in its place) or point {ENV} at another file."
            )
        if "unable to open" in low or isinstance(exc, OSError):
            return HistoryError(
                f"Could not {doing} the history {shown}: the file cannot be opened ({detail}). Check that its "
                f"directory exists and is writable, or point {ENV} at another file (or set it to 'off')."
            )
        return HistoryError(f"Could not {doing} the history {shown}: {detail}.")
    return HistoryError(
        f"Could not {doing} the PostgreSQL history {shown}: {detail}. Check the server and the DSN in {ENV} "
        "(or unset it to use a local SQLite history)."
    )


def describe(where: Location | None = None) -> str:
    """Where the history is, for messages (a DSN without its password)."""
    where = location() if where is None else where
    return "off" if where.backend == "off" else where.shown()

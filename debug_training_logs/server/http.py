"""The streamable HTTP transport, and what it takes to offer it beyond this machine.

Bound to loopback (the default), the server behaves like the SDK's: Host/Origin checked against the loopback names
(DNS-rebinding protection). Any other address exposes every tool (they read files below ``--root`` and fetch AIS
logs) to whoever can reach the port, so it takes three things:

* an explicit ``--allow-remote`` flag (otherwise a :class:`UserInputError`);
* a bearer token every request must present (``Authorization: Bearer <token>``; MCP's authorization guidance for
  HTTP transports): from ``DEBUG_TRAINING_LOGS_HTTP_TOKEN`` or ``--token-file``, else generated and printed once on
  stderr; compared in constant time; a missing or wrong one is ``401`` with ``WWW-Authenticate: Bearer``;
* Host/Origin validation kept on, with an allow-list: the loopback names, this machine's names and the bound address
  (each with the port), plus ``--allowed-host``/``--allowed-origin``.

A warning saying all this is printed on stderr at start. Must not: know about tools, or log the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from debug_training_logs.errors import UserInputError

ENV_HTTP_TOKEN = "DEBUG_TRAINING_LOGS_HTTP_TOKEN"
"""The bearer token HTTP clients must present (required beyond loopback; optional on loopback)."""

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HttpPolicy:
    """How the HTTP transport is secured for one bind address."""

    host: str
    port: int
    token: str | None = field(repr=False)
    token_source: str
    security: TransportSecuritySettings

    @property
    def remote(self) -> bool:
        return not is_loopback(self.host)


def http_policy(
    host: str,
    port: int,
    *,
    allow_remote: bool = False,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    token_file: str | None = None,
    env: dict[str, str] | None = None,
) -> HttpPolicy:
    """The policy for serving on ``host:port`` (see the module docstring); raises :class:`UserInputError` when a
    non-loopback address is asked for without ``allow_remote``, or the token file cannot be read."""
    env = dict(os.environ) if env is None else env
    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise UserInputError(
            f"Serving on {host!r} would expose every tool (they read the logs below --root and fetch AIS logs) to "
            "anyone who can reach that address. Use --host 127.0.0.1 (the default), or add --allow-remote: the "
            f"server then requires a bearer token ({ENV_HTTP_TOKEN} or --token-file) and checks Host/Origin."
        )
    token, source = _token(token_file, env)
    if token is None and remote:
        token, source = secrets.token_urlsafe(32), "generated at start (printed once on stderr)"
    names = [*_LOOPBACK_NAMES]
    if remote:
        names += [socket.gethostname(), socket.getfqdn(), *_local_addresses()]
        if host not in ("0.0.0.0", "::", ""):
            names.append(f"[{host}]" if ":" in host else host)
    hosts = [f"{n}:{port}" for n in dict.fromkeys(names)] + [h for h in allowed_hosts if h]
    origins = [f"http://{n}:{port}" for n in dict.fromkeys(names)] + [o for o in allowed_origins if o]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    return HttpPolicy(host, port, token, source, security)


def _local_addresses() -> list[str]:
    """This machine's IPv4 addresses as its name resolves them (best effort; clients often connect by IP)."""
    try:
        return [a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")]
    except OSError:
        return []


def _token(token_file: str | None, env: dict[str, str]) -> tuple[str | None, str]:
    if token_file:
        try:
            text = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserInputError(f"Cannot read the token file {token_file!r} ({exc}).") from None
        if len(text) < 16 or any(c.isspace() for c in text):
            raise UserInputError(
                f"The token file {token_file!r} must hold one token of at least 16 characters and no spaces."
            )
        return text, f"--token-file {token_file}"
    value = env.get(ENV_HTTP_TOKEN, "").strip()
    if value:
        if len(value) < 16:
            raise UserInputError(f"{ENV_HTTP_TOKEN} is shorter than 16 characters: use a long random token.")
        return value, ENV_HTTP_TOKEN
    return None, "none"


class BearerTokenMiddleware:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>`` (401 otherwise)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        body = b'{"error": "invalid_token", "error_description": "a valid bearer token is required"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer error="invalid_token"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def warning_text(policy: HttpPolicy) -> str:
    """What is printed on stderr at start when the server listens beyond loopback (the token only if generated)."""
    lines = [
        f"WARNING: debug-training-logs listens on {policy.host}:{policy.port}, beyond this machine. Every tool "
        "(reading logs below --root, fetching AIS logs) is open to anyone who can reach it and holds the token.",
        f"  Requests must carry 'Authorization: Bearer <token>' (token: {policy.token_source}).",
        f"  Host headers allowed: {', '.join(policy.security.allowed_hosts)} (add more with --allowed-host).",
        "  Plain HTTP: the token crosses the network in clear; put a TLS proxy in front outside a trusted network.",
    ]
    if policy.token is not None and policy.token_source.startswith("generated"):
        lines.append(f"  Token for this run: {policy.token}")
    return "\n".join(lines)


def build_app(server: Any, policy: HttpPolicy) -> Any:
    """The ASGI app: the SDK's streamable HTTP app with our Host/Origin allow-list, behind the bearer check."""
    app = server.streamable_http_app(transport_security=policy.security, host=policy.host)
    return BearerTokenMiddleware(app, policy.token) if policy.token is not None else app


def serve(server: Any, policy: HttpPolicy) -> None:
    """Run ``server`` over streamable HTTP at ``http://HOST:PORT/mcp`` under ``policy`` (blocks)."""
    import uvicorn

    if policy.remote:
        print(warning_text(policy), file=sys.stderr, flush=True)
    uvicorn.run(build_app(server, policy), host=policy.host, port=policy.port, log_level="warning")

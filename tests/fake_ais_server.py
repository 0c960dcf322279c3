"""A loopback fake of the two AIStore endpoints ``fetch_ais_logs`` uses, for tests (reusable by other test files).

* ``GET /v1/daemon?what=smap``: the cluster map (``pmap``/``tmap`` keyed by node ID, ``daemon_type``...).
* ``GET /v1/reverse/daemon?what=log[&severity=..][&all=true]`` with ``Ais-Node-Id``: the node's TAR.GZ (``all``) or
  its current log text, or the behaviour the node was given (``fail`` = HTTP 500 every time, ``slow`` = a delay,
  ``flaky`` = 503 for the first N requests, ``leak`` = an error that echoes the request's Authorization header).
* With ``token`` set, requests without ``Authorization: Bearer <token>`` get 401 and an AIS-style JSON error.

Error bodies have the shape of AIS ``cmn.ErrHTTP``: ``{"message", "method", "url_path", "remote_addr", "status"}``.
Every request is recorded in ``requests`` (path, query, node id and whether the token matched; never the token).
"""

from __future__ import annotations

import io
import json
import ssl
import tarfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Member:
    """One archive member. ``kind``: file, dir, symlink, hardlink, fifo, chardev."""

    name: str
    data: bytes = b""
    kind: str = "file"
    linkname: str = ""
    mtime: float = 1_747_837_822.0  # 2025-05-21T14:30:22Z
    size_override: int | None = None
    """Stream this many zero bytes instead of ``data`` (for a huge member without building it in memory)."""


def ais_log_text(role: str, node_id: str, host: str, start: str = "2025/05/21 14:30:22", lines: int = 5) -> bytes:
    """A realistic AIS INFO log: the ``Started up at`` header, the node title, and a few stats lines."""
    t = "t" if role == "target" else "p"
    out = [
        f"Started up at {start}, host {host}, go1.22.3 for linux/amd64",
        f"I 14:30:22.100000 daemon:263 Node {t}[{node_id}], Version 3.28.1a2b3c4, build 2025-05-01T10:00:00+0000, "
        "CPUs(32, runtime=32), container:cgroup-v2",
        "",
    ]
    for i in range(lines):
        out.append(f"I 14:3{i}:22.{i:06d} {{get.n:{100 * i},err.get.n:{i},up.ns.time:{i}m}}")
    return ("\n".join(out) + "\n").encode()


def make_archive(members: Iterable[Member]) -> bytes:
    """A TAR.GZ like AIS ``targzLogs`` builds (flat names, 0644), or with whatever members a test needs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.mtime = int(m.mtime)
            info.mode = 0o644
            if m.kind == "file":
                if m.size_override is not None:
                    info.size = m.size_override
                    tf.addfile(info, _Zeros(m.size_override))
                else:
                    info.size = len(m.data)
                    tf.addfile(info, io.BytesIO(m.data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chardev": tarfile.CHRTYPE,
            }[m.kind]
            info.linkname = m.linkname
            if m.kind == "dir":
                info.mode = 0o755
            tf.addfile(info)
    return buf.getvalue()


class _Zeros(io.RawIOBase):
    """``n`` zero bytes as a file, without allocating them."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


@dataclass
class FakeNode:
    """One daemon of the fake cluster and how it answers log requests."""

    node_id: str
    role: str  # "proxy" or "target"
    archive: bytes | None = None
    current_log: bytes = b""
    behavior: str = "ok"  # ok, fail, slow, flaky, leak, truncated
    delay_s: float = 0.0
    fail_first: int = 0
    served: int = 0

    @classmethod
    def typical(cls, node_id: str, role: str, host: str, **kw: object) -> FakeNode:
        """A node whose archive holds an INFO and an ERROR file and whose current log is the INFO text."""
        prefix = f"ais{role}"
        info = ais_log_text(role, node_id, host)
        err = b"Started up at 2025/05/21 14:30:22, host " + host.encode() + b", go1.22.3 for linux/amd64\n"
        archive = make_archive(
            [
                Member(f"{prefix}.{host}.INFO.0521-143022.1", info),
                Member(f"{prefix}.{host}.ERROR.0521-143022.1", err),
            ]
        )
        return cls(node_id, role, archive=archive, current_log=info, **kw)  # type: ignore[arg-type]


@dataclass
class Request:
    path: str
    query: dict[str, str]
    node_id: str | None
    authorized: bool
    sent_authorization: bool = False
    """Whether the request carried any Authorization header (a stranger endpoint must never see one)."""


@dataclass
class FakeAis:
    """The fake cluster. Use :func:`serve` to run it on 127.0.0.1 with a free port."""

    nodes: list[FakeNode]
    token: str | None = None
    smap_requires_token: bool = True
    smap_status: int = 200
    requests: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def smap(self) -> dict[str, object]:
        def snode(n: FakeNode) -> dict[str, object]:
            return {
                "daemon_id": n.node_id,
                "daemon_type": n.role,
                "public_net": {"node_ip_addr": "127.0.0.1", "daemon_port": "8080"},
                "flags": 0,
            }

        pmap = {n.node_id: snode(n) for n in self.nodes if n.role == "proxy"}
        tmap = {n.node_id: snode(n) for n in self.nodes if n.role == "target"}
        primary = next(iter(pmap.values()), None)
        return {"pmap": pmap, "tmap": tmap, "proxy_si": primary, "version": 7, "uuid": "fake"}

    def log_requests(self, node_id: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == "/v1/reverse/daemon" and node_id in (None, r.node_id)]


def _handler(cluster: FakeAis) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def _error(self, status: int, message: str) -> None:
            body = json.dumps(
                {
                    "message": message,
                    "method": "GET",
                    "url_path": urlsplit(self.path).path,
                    "remote_addr": self.client_address[0],
                    "status": status,
                }
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send(self, body: bytes, ctype: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            node_id = self.headers.get("Ais-Node-Id")
            auth = self.headers.get("Authorization", "")
            authorized = cluster.token is None or auth == f"Bearer {cluster.token}"
            with cluster.lock:
                cluster.requests.append(Request(parts.path, query, node_id, authorized, bool(auth)))
            needs_token = parts.path != "/v1/daemon" or cluster.smap_requires_token
            if needs_token and not authorized:
                msg = "token required" if not auth else "invalid token: signature is invalid"
                self._error(401, msg)
                return
            if parts.path == "/v1/daemon" and query.get("what") == "smap":
                if cluster.smap_status != 200:
                    self._error(cluster.smap_status, "primary proxy is not ready")
                    return
                self._send(json.dumps(cluster.smap()).encode(), "application/json")
                return
            if parts.path != "/v1/reverse/daemon" or query.get("what") != "log":
                self._error(400, f"invalid request {parts.path}")
                return
            if not node_id:
                self._error(400, "missing node ID")
                return
            node = next((n for n in cluster.nodes if n.node_id == node_id), None)
            if node is None:
                self._error(404, f"node {node_id} does not exist")
                return
            with cluster.lock:
                node.served += 1
                served = node.served
            if node.behavior == "fail":
                self._error(500, f"t[{node_id}]: archive/tar: write too long")
                return
            if node.behavior == "flaky" and served <= node.fail_first:
                self._error(503, "node is starting up")
                return
            if node.behavior == "leak":
                # A misbehaving server that echoes the request's credentials: the client must scrub them.
                self._error(500, f"cannot serve logs; request had Authorization: {auth}")
                return
            if node.behavior == "slow":
                cluster.stop.wait(node.delay_s)
            body = node.archive if query.get("all") == "true" else node.current_log
            if body is None:
                self._error(500, "no archive")
                return
            if node.behavior == "truncated":
                self.send_response(200)
                self.send_header("Content-Type", "application/x-gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(body, "application/x-gzip" if query.get("all") == "true" else "text/plain")

    return Handler


@contextmanager
def serve(cluster: FakeAis, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Run ``cluster`` on 127.0.0.1 (free port) in a thread; yields the endpoint URL ``http://127.0.0.1:PORT``
    (``https://`` with a server-side ``tls`` context)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cluster))
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        cluster.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

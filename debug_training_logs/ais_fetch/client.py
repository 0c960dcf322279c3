"""A small HTTP client for the two AIS calls we need: the cluster map and a node's logs, streamed to disk.

Why not the official ``aistore`` SDK (the issue said "use the SDK where it serves"): here it does not serve.
``Cluster.get_node_log_archive`` returns the whole TAR.GZ as ``bytes`` (its own ``TODO: stream the archive``), and a
node keeps up to ``log.max_total`` = 512 MiB per severity, times 8 nodes in flight; the SDK does not read
``AIS_ENDPOINT`` or ``AIS_AUTHN_TOKEN_FILE``; its retry policy is minutes long by default, which breaks our per-node
time budget; and it pulls in requests, urllib3, msgspec and more for two GET requests. ``http.client`` + ``ssl`` from
the standard library stream the body in 1 MiB chunks, give us exact control over every timeout, and add no dependency.

What this module guarantees:

* Nothing is held in memory beyond one chunk (1 MiB) of a body; error bodies and the Smap are read up to a cap.
* Every socket operation has a timeout no longer than the time left before the caller's ``deadline``.
* No redirect is followed (a redirect could carry the token to another host); it is reported as an error.
* Error texts are built here from the status, the AIS error JSON ``message`` and the exception type; they pass through
  :meth:`AisConfig.scrub`, never include request headers, and show the endpoint without ``user:password``.

``HTTP(S)_PROXY`` variables are not used: AIS clients talk to the cluster directly.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlencode

from debug_training_logs.ais_fetch.config import TOKEN_SOURCES_TEXT, AisConfig

CHUNK_BYTES = 1 << 20
"""Body bytes read and written per step (1 MiB)."""
CONNECT_TIMEOUT_S = 10.0
"""Longest wait for a TCP/TLS connection, seconds (less if the deadline is nearer)."""
MAX_ERROR_BODY_BYTES = 64 << 10
"""Most bytes read from an error response (64 KiB); the AIS error JSON is far smaller."""
MAX_SMAP_BYTES = 32 << 20
"""Most bytes accepted for the cluster map JSON (32 MiB; a 1000-node Smap is a few MiB)."""
HDR_NODE_ID = "Ais-Node-Id"
"""``apc.HdrNodeID``: which node the proxy forwards ``/v1/reverse/daemon`` to."""


class AisRequestError(Exception):
    """A request that failed. ``str()`` is a scrubbed, user-readable reason; ``retryable`` says whether to try again.

    The message never contains the token or the endpoint's userinfo (it is built by this module, not copied from
    lower layers).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
        auth: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.auth = auth
        """True for 401/403: the token is missing, expired or lacks permission."""


class BodyTooLarge(AisRequestError):
    """The body exceeded the byte cap the caller set."""


class DeadlineExceeded(AisRequestError):
    """The caller's time budget ran out during the request."""


@dataclass(frozen=True)
class StreamedBody:
    """What :meth:`AisClient.download` wrote."""

    bytes_written: int
    content_type: str


class AisClient:
    """Requests to one AIS endpoint (any proxy). Thread-safe: each request opens its own connection."""

    def __init__(self, config: AisConfig) -> None:
        self.config = config

    # --- public calls -------------------------------------------------------------------------------------------

    def get_smap(self, deadline: float) -> dict[str, Any]:
        """``GET /v1/daemon?what=smap``: the cluster map as parsed JSON (``pmap``, ``tmap``, ``proxy_si``...)."""
        conn, resp = self._open("/v1/daemon", {"what": "smap"}, {}, deadline)
        try:
            data = _read_capped(resp, MAX_SMAP_BYTES, deadline, conn, what="cluster map")
        finally:
            conn.close()
        try:
            smap = json.loads(data)
        except ValueError:
            raise AisRequestError(
                f"{self.config.endpoint.display} answered /v1/daemon?what=smap with something that is not JSON; "
                "is this the endpoint of an AIS proxy?"
            ) from None
        if not isinstance(smap, dict):
            raise AisRequestError("The cluster map is not a JSON object; is this the endpoint of an AIS proxy?")
        return smap

    def download_log(
        self, node_id: str, *, severity: str, all_files: bool, out: IO[bytes], max_bytes: int, deadline: float
    ) -> StreamedBody:
        """Stream node ``node_id``'s log into ``out``: a TAR.GZ of every log file (``all_files``) or the current file.

        ``GET /v1/reverse/daemon?what=log&severity=...[&all=true]`` with ``Ais-Node-Id``. Raises
        :class:`BodyTooLarge` past ``max_bytes`` (bytes) and :class:`DeadlineExceeded` when ``deadline``
        (``time.monotonic()`` seconds) passes; ``out`` may then hold a partial body, which the caller discards.
        """
        params = {"what": "log", "severity": severity}
        if all_files:
            params["all"] = "true"
        conn, resp = self._open("/v1/reverse/daemon", params, {HDR_NODE_ID: node_id}, deadline)
        try:
            n = 0
            while True:
                _set_timeout(conn, deadline)
                try:
                    chunk = resp.read1(CHUNK_BYTES)  # one socket read: each call is bounded by the timeout
                except TimeoutError:
                    raise DeadlineExceeded(
                        f"timed out while receiving the log after {n} bytes", retryable=True
                    ) from None
                except http.client.IncompleteRead as exc:
                    raise AisRequestError(
                        f"the connection closed after {n + len(exc.partial)} bytes, before the log was complete",
                        retryable=True,
                    ) from None
                except (OSError, http.client.HTTPException) as exc:
                    raise AisRequestError(
                        f"receiving the log failed after {n} bytes: {self._exc_text(exc)}", retryable=True
                    ) from None
                if not chunk:
                    if resp.length:  # read1 returns b"" when the peer closes before Content-Length was reached
                        raise AisRequestError(
                            f"the connection closed after {n} bytes, {resp.length} bytes short of the announced size",
                            retryable=True,
                        )
                    break
                n += len(chunk)
                if n > max_bytes:
                    raise BodyTooLarge(f"the log is larger than the cap of {max_bytes} bytes; refused")
                out.write(chunk)
                if time.monotonic() > deadline:
                    raise DeadlineExceeded(f"timed out while receiving the log after {n} bytes", retryable=True)
            return StreamedBody(n, resp.getheader("Content-Type", "") or "")
        finally:
            conn.close()

    # --- plumbing -----------------------------------------------------------------------------------------------

    def _open(
        self, path: str, params: Mapping[str, str], headers: Mapping[str, str], deadline: float
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a GET and return the open response when the status is 200; otherwise raise :class:`AisRequestError`."""
        ep = self.config.endpoint
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded("no time left for another attempt", retryable=False)
        timeout = min(CONNECT_TIMEOUT_S, remaining)
        conn: http.client.HTTPConnection
        if ep.scheme == "https":
            conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=self.config.ssl_context)
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)
        hdrs = {"Accept": "*/*", "User-Agent": "debug-training-logs", **headers}
        if self.config.token is not None:
            hdrs["Authorization"] = "Bearer " + self.config.token.reveal()
        url = f"{ep.base_path}{path}?{urlencode(params)}"
        try:
            conn.connect()
            _set_timeout(conn, deadline)
            conn.request("GET", url, headers=hdrs)
            resp = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise DeadlineExceeded(f"{ep.display} did not answer in time", retryable=True) from None
        except ssl.SSLCertVerificationError as exc:
            conn.close()
            raise AisRequestError(
                f"TLS certificate of {ep.display} not trusted ({exc.verify_message or 'verification failed'}); set "
                "AIS_CLIENT_CA to the cluster's CA bundle, or AIS_SKIP_VERIFY_CRT=true to skip verification"
            ) from None
        except ssl.SSLError as exc:
            # Not transient: a protocol mismatch (https:// to a plain-HTTP port) or a refused client certificate.
            conn.close()
            raise AisRequestError(
                f"TLS handshake with {ep.display} failed ({exc.reason or type(exc).__name__}); check that the "
                "endpoint really is https:// and, for mTLS, AIS_CRT/AIS_CRT_KEY"
            ) from None
        except ConnectionRefusedError:
            # Nothing listens there: a wrong host/port, or the proxy is down. A minute of retries would not help.
            conn.close()
            raise AisRequestError(
                f"cannot reach {ep.display}: connection refused (nothing listens on that host and port; check the "
                "endpoint: AIS proxies usually listen on port 51080 or 8080)",
                retryable=False,
            ) from None
        except socket.gaierror as exc:
            conn.close()
            raise AisRequestError(
                f"cannot reach {ep.display}: the host name does not resolve ({exc.strerror or exc})", retryable=False
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise AisRequestError(f"cannot reach {ep.display}: {self._exc_text(exc)}", retryable=True) from None
        if resp.status == 200:
            return conn, resp
        try:
            raise self._status_error(resp, deadline, conn)
        finally:
            conn.close()

    def _status_error(
        self, resp: http.client.HTTPResponse, deadline: float, conn: http.client.HTTPConnection
    ) -> AisRequestError:
        status = resp.status
        try:
            body = _read_capped(resp, MAX_ERROR_BODY_BYTES, deadline, conn, what="error", truncate=True)
        except AisRequestError:
            body = b""
        detail = _ais_error_message(body)
        head = f"HTTP {status} {resp.reason or ''}".rstrip()
        text = f"{head}: {detail}" if detail else head
        if status in (401, 403):
            msg = (
                f"{text}. The AIS token is missing, expired or not allowed to read logs: the token is read from "
                f"{TOKEN_SOURCES_TEXT} (this run: {self.config.auth_description}). Log in again ('ais auth login') "
                "or export a valid token, then retry."
            )
            return AisRequestError(self.config.scrub(msg), status=status, auth=True)
        if 300 <= status < 400:
            return AisRequestError(
                self.config.scrub(
                    f"{text}: redirected to another location, which is not followed (pass the "
                    "endpoint of an AIS proxy directly)"
                ),
                status=status,
            )
        retry_after: float | None = None
        ra = resp.getheader("Retry-After")
        if ra and ra.strip().isdigit():
            retry_after = float(ra.strip())
        retryable = status == 429 or status >= 500 or "write too long" in detail
        return AisRequestError(self.config.scrub(text), status=status, retryable=retryable, retry_after_s=retry_after)

    def _exc_text(self, exc: BaseException) -> str:
        """A lower-layer exception in words, without anything the exception may carry beyond its reason."""
        if isinstance(exc, OSError) and exc.strerror:
            text = exc.strerror
        elif isinstance(exc, http.client.HTTPException):
            # Their str() may include a header line or the response's status line; the class name says enough.
            text = type(exc).__name__
        else:
            text = str(exc) or type(exc).__name__
        return self.config.scrub(text)[:300]


def _set_timeout(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Make the next socket operation wait no longer than the time left (at least 1 ms).

    No shorter idle limit: a node builds the whole TAR.GZ before it sends the first byte, which can take a while.
    """
    if conn.sock is not None:
        conn.sock.settimeout(max(0.001, deadline - time.monotonic()))


def _read_capped(
    resp: http.client.HTTPResponse,
    cap: int,
    deadline: float,
    conn: http.client.HTTPConnection,
    *,
    what: str,
    truncate: bool = False,
) -> bytes:
    """Read a whole (small) body, at most ``cap`` bytes: beyond it raise, or stop when ``truncate``."""
    parts: list[bytes] = []
    n = 0
    while True:
        _set_timeout(conn, deadline)
        try:
            chunk = resp.read1(min(CHUNK_BYTES, cap + 1 - n))
        except TimeoutError:
            raise DeadlineExceeded(f"timed out while reading the {what}", retryable=True) from None
        except (OSError, http.client.HTTPException):
            raise AisRequestError(f"the connection broke while reading the {what}", retryable=True) from None
        if not chunk:
            if resp.length:
                raise AisRequestError(f"the connection closed before the whole {what} arrived", retryable=True)
            break
        parts.append(chunk)
        n += len(chunk)
        if n > cap:
            if truncate:
                break
            raise BodyTooLarge(f"the {what} is larger than {cap} bytes; refused")
        if time.monotonic() > deadline:
            raise DeadlineExceeded(f"timed out while reading the {what}", retryable=True)
    return b"".join(parts)[:cap]


def _ais_error_message(body: bytes) -> str:
    """The ``message`` of an AIS ``cmn.ErrHTTP`` JSON body, else the first line of the text, cut to 300 chars."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return ""
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("message"), str):
            return " ".join(obj["message"].split())[:300]
    return " ".join(text.splitlines()[0].split())[:300]


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a file if it is there (cleanup of partial downloads)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)

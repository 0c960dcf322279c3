"""Download every AIS daemon's logs in one call: the cluster map, then each node's archive, concurrently and safely.

What a call does, and the rules it keeps:

* Reads the cluster map (``GET /v1/daemon?what=smap``) and fetches every proxy, then every target (or the given IDs;
  an ID not in the map is reported as failed), in a bounded thread pool (``min(concurrency, nodes)``, default 8).
* Each node has its own time budget, ``timeout_s`` seconds from the moment its first attempt starts, for connecting,
  waiting, retries and the transfer; transient failures (connection errors, timeouts, HTTP 429 and 5xx, AIS "write
  too long", a truncated archive) are retried with exponential backoff (0.5 s, 1 s, 2 s... at most 8 s, jittered,
  ``Retry-After`` honoured) while time is left. A whole call therefore takes at most about
  ``timeout_s`` (map) + ``ceil(nodes / pool) * timeout_s`` + local extraction time.
* One node's failure never stops the others. A failed node leaves nothing behind: downloads go to hidden temporary
  names (``.aistarget-ID.*.part``, ``.aistarget-ID.*.extracting``) that are removed on failure and only renamed to the
  final names on success.
* Files are named like the ``ais`` CLI names them: ``aistarget-<ID>.tar.gz`` / ``aisproxy-<ID>.tar.gz``, extracted
  into ``aistarget-<ID>/``; with ``include_rotated=False`` the current log is saved as ``aistarget-<ID>`` (no
  extension, like ``ais log get NODE DIR``).
* **Nothing is ever overwritten.** If a node's archive or directory is already in ``dest_dir``, that node is
  ``skipped`` with the reason and its existing files are listed. This keeps the tool idempotent: running it twice
  fetches only what is missing (the nodes that failed before). We chose skipping over writing to a new name because a
  second copy of the same logs would be counted twice by every analysis that reads ``dest_dir``.
* Progress is reported per finished node through :func:`debug_training_logs.progress.report`.
* The token never appears in a result, message, log record or exception (see ``config``).

Pure logic: this module does not import ``mcp``.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import random
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from debug_training_logs.ais_fetch.client import AisClient, AisRequestError, DeadlineExceeded, unlink_quietly
from debug_training_logs.ais_fetch.config import (
    ENV_CLIENT_CA,
    ENV_CRT,
    ENV_CRT_KEY,
    ENV_ENDPOINT,
    ENV_SKIP_VERIFY,
    ENV_TOKEN,
    AisConfig,
    resolve_config,
)
from debug_training_logs.ais_fetch.extract import (
    DEFAULT_MAX_MEMBER_BYTES,
    DEFAULT_MAX_MEMBERS,
    DEFAULT_MAX_TOTAL_BYTES,
    ArchiveError,
    ExtractLimits,
    safe_extract,
)
from debug_training_logs.ais_fetch.models import (
    AisIndexView,
    FetchAisLogsResult,
    FetchedFile,
    IndexedDaemon,
    IndexedFile,
    NodeFetch,
    RefusedMember,
)
from debug_training_logs.errors import UserInputError
from debug_training_logs.models import UnreadableFile
from debug_training_logs.progress import report

logger = logging.getLogger(__name__)

Severity = Literal["info", "warning", "error"]
Role = Literal["proxy", "target"]
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0
"""Per-node time budget in seconds (and for reading the cluster map)."""
DEFAULT_CONCURRENCY = 8
"""Nodes fetched at the same time, at most."""
DEFAULT_LIMIT = 200
"""Files and refused members listed per node, at most."""
MAX_BACKOFF_S = 8.0
FIRST_BACKOFF_S = 0.5

_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Users often copy IDs the way AIS logs print them: t[hJkL0aBc] / p[Rw3pX9kd].
_DAEMON_FORM = re.compile(r"[pt]\[([^\]]+)\]")
_SEVERITIES: Mapping[str, Severity] = {
    "i": "info",
    "info": "info",
    "w": "warning",
    "warn": "warning",
    "warning": "warning",
    "e": "error",
    "error": "error",
}


@dataclass(frozen=True)
class _Node:
    node_id: str
    role: Role

    @property
    def stem(self) -> str:
        """The CLI's file name stem: ``aistarget-<ID>`` / ``aisproxy-<ID>``."""
        return f"ais{self.role}-{self.node_id}"

    @property
    def daemon(self) -> str:
        return f"{self.role[0]}[{self.node_id}]"


@dataclass(frozen=True)
class _Options:
    dest: Path
    severity: Severity
    include_rotated: bool
    timeout_s: float
    limits: ExtractLimits
    limit: int


def fetch_ais_logs(
    dest_dir: str | os.PathLike[str],
    endpoint: str | None = None,
    severity: str = "info",
    nodes: Sequence[str] | None = None,
    include_rotated: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    max_node_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
    concurrency: int = DEFAULT_CONCURRENCY,
    limit: int = DEFAULT_LIMIT,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> FetchAisLogsResult:
    """Download and safely extract the logs of every AIS proxy and target (or of ``nodes``) into ``dest_dir``.

    ``dest_dir`` is created if missing (its parent must exist). ``endpoint`` defaults to ``AIS_ENDPOINT``; the token
    and TLS settings come from the environment (see ``config``). ``severity``: ``info`` (INFO files: all lines),
    ``warning`` or ``error`` (ERROR files: W and E lines). ``include_rotated``: every log file as an archive (true) or
    only the current file. ``timeout_s``: per-node budget in seconds. ``max_node_bytes``: cap on one node's download
    and on its extracted total, bytes; ``max_member_bytes``: cap on one extracted file, bytes; ``max_members``: cap on
    archive members examined. ``concurrency``: nodes in flight. ``limit``: files and refused members listed per node.
    ``env``/``home`` replace ``os.environ`` and the home directory (tests).

    Raises :class:`UserInputError` for bad arguments (severity, dest_dir, endpoint, token file, TLS files). A cluster
    that cannot be reached is not an exception: the result says why and gives ``manual_fallback`` commands.
    """
    sev = _severity(severity)
    timeout_s = _bounded("timeout_s", float(timeout_s), 0.1, 24 * 3600.0)
    _bounded("max_node_bytes", max_node_bytes, 1, 1 << 50)
    _bounded("max_member_bytes", max_member_bytes, 1, 1 << 50)
    _bounded("max_members", max_members, 1, 10_000_000)
    concurrency = int(_bounded("concurrency", concurrency, 1, 64))
    limit = int(_bounded("limit", limit, 0, 1_000_000))
    config = resolve_config(endpoint, env=env, home=home)
    dest = _prepare_dest(dest_dir)
    opts = _Options(
        dest,
        sev,
        include_rotated,
        timeout_s,
        ExtractLimits(max_node_bytes, min(max_member_bytes, max_node_bytes), max_members),
        limit,
    )
    client = AisClient(config)
    base = FetchAisLogsResult(
        summary="",
        dest_dir=str(dest),
        endpoint=config.endpoint.display,
        endpoint_source=config.endpoint_source,
        cluster_reachable=False,
        auth=config.auth_description,
        tls=config.tls_description,
        severity=sev,
        include_rotated=include_rotated,
        warnings=list(config.warnings),
    )

    try:
        smap, _ = _with_retries(lambda deadline: client.get_smap(deadline), time.monotonic() + timeout_s)
    except AisRequestError as exc:
        base.error = config.scrub(f"Cannot read the cluster map from {config.endpoint.display}: {exc.message}")
        base.summary = (
            f"{base.error}. Nothing was downloaded; the commands in manual_fallback fetch the same logs "
            "with the ais CLI from a machine that can reach the cluster."
        )
        base.manual_fallback = manual_fallback(config, dest, sev)
        logger.info("AIS cluster map unavailable: %s", base.error)
        return base
    base.cluster_reachable = True
    stale = sorted(p.name for p in dest.glob(".ais*-*") if p.name.endswith((".part", ".extracting")))
    if stale:
        base.warnings.append(
            f"{len(stale)} leftover(s) of an interrupted earlier fetch in dest_dir (safe to delete): "
            + ", ".join(stale[:5])
        )

    wanted, unknown = _select(_smap_nodes(smap, base.warnings), nodes)
    results: dict[str, NodeFetch] = {}
    for nid in unknown:
        results[nid] = NodeFetch(
            node_id=nid,
            role="unknown",
            daemon=nid,
            status="failed",
            reason=f"not in the cluster map of {config.endpoint.display} (known: proxies and targets in pmap/tmap)",
        )
    todo: list[_Node] = []
    for node in wanted:
        present = _already_present(node, opts)
        if present is not None:
            results[node.node_id] = present
        else:
            todo.append(node)

    total = len(wanted) + len(unknown)
    done = total - len(todo)
    report(done, total, f"fetching logs of {len(todo)} node(s), {done} already present or unknown")
    if todo:
        with ThreadPoolExecutor(max_workers=min(concurrency, len(todo)), thread_name_prefix="ais-fetch") as pool:
            futures = {pool.submit(_fetch_node_safely, client, node, opts): node for node in todo}
            for fut in as_completed(futures):
                res = fut.result()
                results[res.node_id] = res
                done += 1
                report(done, total, _progress_line(res))

    ordered = [results[n.node_id] for n in wanted] + [results[nid] for nid in unknown]
    base.nodes = ordered
    base.nodes_total = len(ordered)
    base.nodes_ok = sum(r.status == "ok" for r in ordered)
    base.nodes_failed = sum(r.status == "failed" for r in ordered)
    base.nodes_skipped = sum(r.status == "skipped" for r in ordered)
    have_logs = base.nodes_ok + base.nodes_skipped > 0
    if have_logs:
        base.ais_index, index_warning = _index(dest, limit)
        if index_warning:
            base.warnings.append(index_warning)
    base.next_steps = _next_steps(dest, ordered, have_logs)
    if not have_logs:
        base.manual_fallback = manual_fallback(config, dest, sev)
    base.summary = _summary(base, config)
    return base


# --- arguments ----------------------------------------------------------------------------------------------------


def _severity(value: str) -> Severity:
    sev = _SEVERITIES.get(str(value).strip().lower())
    if sev is None:
        raise UserInputError(f"severity must be 'info', 'warning' or 'error' (got {str(value)[:40]!r}).")
    return sev


def _bounded(name: str, value: float, low: float, high: float) -> float:
    if not (low <= value <= high) or math.isnan(value):
        raise UserInputError(f"{name} must be between {low:g} and {high:g} (got {value!r}).")
    return value


def _prepare_dest(dest_dir: str | os.PathLike[str]) -> Path:
    """``dest_dir`` as an absolute, existing directory; created when missing if its parent exists."""
    p = Path(dest_dir).expanduser()
    if p.exists() and not p.is_dir():
        raise UserInputError(f"dest_dir {str(dest_dir)!r} is a file. Pass a directory for the AIS logs.")
    if not p.exists():
        parent = p.absolute().parent
        if not parent.is_dir():
            raise UserInputError(
                f"The parent of dest_dir {str(dest_dir)!r} does not exist. Create it first or pass another directory."
            )
        try:
            p.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            raise UserInputError(f"dest_dir {str(dest_dir)!r} cannot be created ({exc.strerror}).") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise UserInputError(f"dest_dir {str(dest_dir)!r} is not writable. Pass a directory you can write to.")
    return p.resolve()


# --- the cluster map ----------------------------------------------------------------------------------------------


def _smap_nodes(smap: Mapping[str, Any], warnings: list[str]) -> list[_Node]:
    """Proxies then targets, each sorted by ID; IDs unsafe as file names are left out with a warning."""
    out: list[_Node] = []
    for key, role in (("pmap", "proxy"), ("tmap", "target")):
        entries = smap.get(key) or {}
        if not isinstance(entries, Mapping):
            warnings.append(f"The cluster map's {key} is not an object; its nodes were not fetched.")
            continue
        for nid in sorted(entries):
            if not isinstance(nid, str) or not _NODE_ID.fullmatch(nid):
                warnings.append(f"Node ID {str(nid)[:60]!r} in {key} is not a safe file name; it was not fetched.")
                continue
            out.append(_Node(nid, role))  # type: ignore[arg-type]
    if not out:
        warnings.append("The cluster map lists no proxies or targets.")
    return out


def _select(all_nodes: list[_Node], requested: Iterable[str] | None) -> tuple[list[_Node], list[str]]:
    """The nodes to fetch (map order) and the requested IDs the map does not know."""
    wanted_ids = [str(r).strip() for r in requested or () if str(r).strip()]
    if not wanted_ids:  # None or an empty list: every node
        return all_nodes, []
    by_id = {n.node_id: n for n in all_nodes}
    want: set[str] = set()
    unknown: list[str] = []
    for text in wanted_ids:
        m = _DAEMON_FORM.fullmatch(text)
        nid = m.group(1) if m else text
        if nid in by_id:
            want.add(nid)
        elif nid not in unknown:
            unknown.append(nid[:128])
    return [n for n in all_nodes if n.node_id in want], unknown


# --- one node -----------------------------------------------------------------------------------------------------


def _final_paths(node: _Node, opts: _Options) -> tuple[Path, Path | None]:
    if opts.include_rotated:
        return opts.dest / f"{node.stem}.tar.gz", opts.dest / node.stem
    return opts.dest / node.stem, None


def _already_present(node: _Node, opts: _Options) -> NodeFetch | None:
    """A ``skipped`` result listing what is there, when this node's archive or directory already exists."""
    archive, folder = _final_paths(node, opts)
    existing = [p for p in (archive, folder) if p is not None and (p.exists() or p.is_symlink())]
    if not existing:
        return None
    names = " and ".join(repr(p.name) for p in existing)
    res = NodeFetch(
        node_id=node.node_id,
        role=node.role,
        daemon=node.daemon,
        status="skipped",
        reason=f"{names} already in dest_dir (an earlier fetch?); nothing was overwritten. Remove it to fetch again, "
        "or pass another dest_dir.",
    )
    if archive.is_file() and not archive.is_symlink():
        res.archive, res.archive_bytes = archive.name, archive.stat().st_size
    if folder is not None and folder.is_dir() and not folder.is_symlink():
        res.extracted_dir = folder.name
        files = _list_dir(folder, opts.dest)
        res.extracted_bytes = sum(f.size_bytes for f in files)
        res.files, res.files_truncated = files[: opts.limit], max(0, len(files) - opts.limit)
    elif not opts.include_rotated and res.archive is not None:
        res.files = [_file_entry(archive, opts.dest)]
    return res


def _fetch_node_safely(client: AisClient, node: _Node, opts: _Options) -> NodeFetch:
    """:func:`_fetch_node`, turning any unexpected error into a ``failed`` result (a node never sinks the call)."""
    start = time.monotonic()
    try:
        return _fetch_node(client, node, opts)
    except Exception as exc:  # a bug or an odd OS error must not abort the other nodes
        reason = client.config.scrub(f"unexpected {type(exc).__name__}: {exc}")[:300]
        logger.warning("fetching %s failed: %s", node.daemon, reason)
        return NodeFetch(
            node_id=node.node_id,
            role=node.role,
            daemon=node.daemon,
            status="failed",
            reason=reason,
            seconds=round(time.monotonic() - start, 3),
        )


def _fetch_node(client: AisClient, node: _Node, opts: _Options) -> NodeFetch:
    start = time.monotonic()
    deadline = start + opts.timeout_s
    res = NodeFetch(node_id=node.node_id, role=node.role, daemon=node.daemon, status="failed")
    final_archive, final_dir = _final_paths(node, opts)
    attempt = 0
    last: AisRequestError | ArchiveError | None = None
    while True:
        attempt += 1
        res.attempts = attempt
        tmp_archive: Path | None = None
        tmp_dir: Path | None = None
        committed = False
        try:
            fd, name = tempfile.mkstemp(dir=opts.dest, prefix=f".{node.stem}.", suffix=".part")
            tmp_archive = Path(name)
            with os.fdopen(fd, "wb") as out:
                body = client.download_log(
                    node.node_id,
                    severity=opts.severity,
                    all_files=opts.include_rotated,
                    out=out,
                    max_bytes=opts.limits.max_total_bytes,
                    deadline=deadline,
                )
            extracted = None
            if opts.include_rotated:
                if body.bytes_written == 0:
                    raise ArchiveError("the node sent an empty answer instead of a TAR.GZ", damaged=True)
                tmp_dir = Path(tempfile.mkdtemp(dir=opts.dest, prefix=f".{node.stem}.", suffix=".extracting"))
                extracted = safe_extract(tmp_archive, tmp_dir, opts.limits)
            clash = _commit(tmp_archive, final_archive, tmp_dir, final_dir)
            if clash is not None:
                res.status, res.reason = "skipped", clash
                res.seconds = round(time.monotonic() - start, 3)
                return res
            committed = True
        except (AisRequestError, ArchiveError) as exc:
            last = exc
            if isinstance(exc, AisRequestError):
                res.http_status = exc.status
            retryable = exc.retryable if isinstance(exc, AisRequestError) else exc.damaged
            delay = _backoff(attempt, exc.retry_after_s if isinstance(exc, AisRequestError) else None)
            if retryable and time.monotonic() + delay < deadline:
                logger.info(
                    "%s: attempt %d failed (%s); retrying in %.1f s",
                    node.daemon,
                    attempt,
                    client.config.scrub(str(exc)),
                    delay,
                )
                _cleanup(tmp_archive, tmp_dir)
                time.sleep(delay)
                continue
            break
        except OSError as exc:
            res.reason = f"writing to dest_dir failed: {exc.strerror or type(exc).__name__}"
            res.seconds = round(time.monotonic() - start, 3)
            return res
        finally:
            if not committed:
                _cleanup(tmp_archive, tmp_dir)
        # success
        res.status, res.reason, res.http_status = "ok", None, None
        res.archive = final_archive.name
        res.archive_bytes = body.bytes_written
        if extracted is not None and final_dir is not None:
            res.extracted_dir = final_dir.name
            res.extracted_bytes = extracted.bytes_extracted
            files = [
                FetchedFile(path=f"{final_dir.name}/{f.rel}", size_bytes=f.size, mtime_utc=_iso(f.mtime))
                for f in extracted.files
            ]
            res.files, res.files_truncated = files[: opts.limit], max(0, len(files) - opts.limit)
            refused = [RefusedMember(name=r.name, reason=r.reason) for r in extracted.refused]
            res.refused, res.refused_truncated = refused[: opts.limit], max(0, len(refused) - opts.limit)
        else:
            res.files = [_file_entry(final_archive, opts.dest)]
            res.extracted_bytes = body.bytes_written
        res.seconds = round(time.monotonic() - start, 3)
        logger.info(
            "%s: fetched %d bytes, %d files, %d refused",
            node.daemon,
            body.bytes_written,
            len(res.files),
            len(res.refused),
        )
        return res

    elapsed = time.monotonic() - start
    assert last is not None
    what = client.config.scrub(str(last))
    if isinstance(last, DeadlineExceeded):
        what += " (for large logs or a slow link, raise timeout_s)"
    if (isinstance(last, AisRequestError) and last.retryable) or (isinstance(last, ArchiveError) and last.damaged):
        res.reason = (
            f"gave up after {attempt} attempt(s) in {elapsed:.1f} s (no time left for another within "
            f"timeout_s={opts.timeout_s:g}): {what}"
        )
    else:
        res.reason = what
    res.seconds = round(elapsed, 3)
    return res


def _commit(tmp_archive: Path, final_archive: Path, tmp_dir: Path | None, final_dir: Path | None) -> str | None:
    """Move the finished download (and extraction) to the final names without overwriting; a reason on a clash."""
    try:
        os.link(tmp_archive, final_archive)  # atomic and fails if the name exists: never overwrites
    except FileExistsError:
        return f"{final_archive.name!r} appeared in dest_dir during the fetch; nothing was overwritten"
    except OSError:  # file systems without hard links
        if final_archive.exists() or final_archive.is_symlink():
            return f"{final_archive.name!r} appeared in dest_dir during the fetch; nothing was overwritten"
        os.rename(tmp_archive, final_archive)
    unlink_quietly(tmp_archive)
    if tmp_dir is not None and final_dir is not None:
        if final_dir.exists() or final_dir.is_symlink():
            os.unlink(final_archive)
            return f"{final_dir.name!r} appeared in dest_dir during the fetch; nothing was overwritten"
        try:
            os.rename(tmp_dir, final_dir)
        except OSError:
            os.unlink(final_archive)
            raise
    return None


def _cleanup(tmp_archive: Path | None, tmp_dir: Path | None) -> None:
    """Remove our temporary download and extraction directory (both created by us, so everything in them is ours)."""
    if tmp_archive is not None:
        unlink_quietly(tmp_archive)
    if tmp_dir is not None and tmp_dir.exists():
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _backoff(attempt: int, retry_after_s: float | None) -> float:
    """Seconds to wait before attempt ``attempt + 1``: 0.5, 1, 2, 4, 8, 8... jittered to 50-100 %."""
    base = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * float(1 << min(attempt - 1, 16))) * (0.5 + random.random() / 2)
    if retry_after_s is not None:
        return max(base, min(retry_after_s, MAX_BACKOFF_S * 4))
    return base


def _with_retries(call: Callable[[float], T], deadline: float) -> tuple[T, int]:
    """Run ``call(deadline)`` until it succeeds, fails for good, or the deadline leaves no room for another try."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return call(deadline), attempt
        except AisRequestError as exc:
            delay = _backoff(attempt, exc.retry_after_s)
            if not exc.retryable or time.monotonic() + delay >= deadline:
                raise
            time.sleep(delay)


# --- reporting ----------------------------------------------------------------------------------------------------


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return ""


def _file_entry(path: Path, dest: Path) -> FetchedFile:
    st = path.stat()
    return FetchedFile(path=path.relative_to(dest).as_posix(), size_bytes=st.st_size, mtime_utc=_iso(st.st_mtime))


def _list_dir(folder: Path, dest: Path, cap: int = 100_000) -> list[FetchedFile]:
    """Regular files under ``folder`` (symlinks not followed), sorted, at most ``cap``."""
    out: list[FetchedFile] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out.append(_file_entry(p, dest))
                if len(out) >= cap:
                    return out
    return out


def _progress_line(res: NodeFetch) -> str:
    if res.status == "ok":
        return f"{res.daemon}: ok, {len(res.files) + res.files_truncated} file(s)"
    return f"{res.daemon}: {res.status} ({(res.reason or '')[:120]})"


def _index(dest: Path, limit: int) -> tuple[AisIndexView | None, str | None]:
    """The AIS indexer's view of ``dest`` (files per daemon with time ranges), when that module is available.

    Looked up at run time so that fetching works (and says so) even where the indexer is absent or fails.
    """
    try:
        module = importlib.import_module("debug_training_logs.analysis.ais_index")
        index = module.index_ais_dir(dest)
    except ImportError:
        return None, None
    except Exception as exc:  # the download worked; a failing indexer must not hide it
        return None, f"Indexing {dest} failed ({type(exc).__name__}); ais_counter_deltas indexes it again."
    try:
        return _index_view(index, limit), None
    except (AttributeError, TypeError, ValueError) as exc:
        return None, f"The AIS index of {dest} could not be summarised ({type(exc).__name__})."


def _index_view(index: Any, limit: int) -> AisIndexView:
    """Our result model from ``analysis.ais_index.AisIndex`` (duplicates, i.e. an archive's extracted copy, dropped)."""

    def when(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    daemons: list[IndexedDaemon] = []
    for d in index.daemons:
        files = [
            IndexedFile(
                ref=f.ref,
                severity=f.severity,
                kind=f.kind,
                start=when(f.start or f.first_record),
                end=when(f.end or f.last_record),
                start_source=f.start_source,
                records=f.records,
                size_bytes=f.size,
            )
            for f in d.files
            if not index.is_duplicate(f.ref)
        ]
        daemons.append(
            IndexedDaemon(
                daemon=d.key,
                role=d.role,
                node_id=d.node_id,
                hosts=list(d.hosts),
                version=d.version,
                zone=d.zone,
                files=files[:limit],
                files_truncated=max(0, len(files) - limit),
            )
        )
    unreadable = [UnreadableFile(file=ref, reason=why) for ref, why in sorted(index.unreadable.items())]
    return AisIndexView(
        daemons=daemons,
        files_scanned=index.files_scanned,
        bytes_scanned=index.bytes_scanned,
        zone=index.zone,
        duplicates=len(index.duplicates),
        unreadable=unreadable[:limit],
    )


def _next_steps(dest: Path, nodes: list[NodeFetch], have_logs: bool) -> list[str]:
    steps: list[str] = []
    failed = [n.node_id for n in nodes if n.status == "failed" and n.role != "unknown"]
    if have_logs:
        d = str(dest)
        steps.append(f"ais_counter_deltas(ais_dir={d!r})")
        steps.append(f"align_timezones(logs_dir=<worker logs dir>, ais_dir={d!r})")
        steps.append(f"timeline(logs_dir=<worker logs dir>, ais_dir={d!r})")
    if failed:
        steps.append(
            f"fetch_ais_logs(dest_dir={str(dest)!r}, nodes={failed!r}) to retry the failed nodes "
            "(nodes already fetched are skipped)"
        )
    return steps


def manual_fallback(config: AisConfig, dest: Path, severity: Severity) -> list[str]:
    """Shell commands that fetch the same logs with the ``ais`` CLI. The token appears only as ``<token>``."""
    d = shlex.quote(str(dest))
    sev = "" if severity == "info" else f" --severity {severity}"
    lines = [
        f"export {ENV_ENDPOINT}={shlex.quote(config.endpoint.display)}",
        f"export {ENV_TOKEN}=<token>   # only if the cluster uses AuthN; 'ais auth login' also works",
    ]
    if config.endpoint.scheme == "https":
        lines += [
            f"export {ENV_CLIENT_CA}=/path/to/ca.crt   # trust the cluster's CA, or instead:",
            f"export {ENV_SKIP_VERIFY}=true   # skip certificate verification",
            f"export {ENV_CRT}=/path/to/client.crt {ENV_CRT_KEY}=/path/to/client.key   # only for mTLS",
        ]
    lines += [
        f"mkdir -p {d} && ais log get cluster {d}{sev} --yes",
        f'cd {d} && for f in *.tar.gz; do name=$(basename "$f" .tar.gz); '
        'mkdir -p "$name" && tar xzf "$f" -C "$name"; done',
    ]
    return lines


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _human_bytes(n: int) -> str:
    """``n`` bytes for people: ``812 bytes``, ``3.4 MiB``, ``1.2 GiB``."""
    if n < 1 << 10:
        return f"{n} bytes"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def _summary(res: FetchAisLogsResult, config: AisConfig) -> str:
    proxies = sum(n.role == "proxy" for n in res.nodes)
    targets = sum(n.role == "target" for n in res.nodes)
    files = sum(len(n.files) + n.files_truncated for n in res.nodes if n.status != "failed")
    size = _human_bytes(sum(n.extracted_bytes for n in res.nodes if n.status != "failed"))
    refused = sum(len(n.refused) + n.refused_truncated for n in res.nodes)
    parts = [
        f"{res.nodes_ok} of {res.nodes_total} AIS nodes ({_count(proxies, 'proxy', 'proxies')}, "
        f"{_count(targets, 'target', 'targets')}) fetched from "
        f"{config.endpoint.display} into {res.dest_dir}"
    ]
    if res.nodes_skipped:
        parts.append(f"{res.nodes_skipped} already there (skipped, not overwritten)")
    parts.append(f"{_count(files, 'log file', 'log files')}, {size} on disk")
    if res.nodes_failed:
        first = next(n for n in res.nodes if n.status == "failed")
        parts.append(f"{res.nodes_failed} failed (first: {first.daemon}: {(first.reason or '')[:200]})")
    if refused:
        parts.append(f"{refused} archive members refused (see nodes[].refused)")
    text = "; ".join(parts) + "."
    if res.nodes_total == 0:
        text = f"The cluster map of {config.endpoint.display} lists no nodes to fetch."
    return config.scrub(text)

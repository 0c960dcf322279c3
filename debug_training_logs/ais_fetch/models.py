"""The result of :func:`debug_training_logs.ais_fetch.fetch.fetch_ais_logs`: plain pydantic models, no logic.

No field ever holds the AIS token, and the endpoint is shown without ``user:password``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from debug_training_logs.models import UnreadableFile

NodeStatus = Literal["ok", "failed", "skipped"]


class FetchedFile(BaseModel):
    """A log file on disk after the fetch."""

    path: str = Field(
        description="Path relative to dest_dir, e.g. 'aistarget-hJkL0aBc/aistarget.ais-target-3.INFO.0521-143022.1'."
    )
    size_bytes: int = Field(description="Size in bytes.")
    mtime_utc: str = Field(
        description="Last-modified time stored in the archive (when AIS last wrote the file), ISO 8601 in UTC."
    )


class RefusedMember(BaseModel):
    """An archive member that was not extracted."""

    name: str = Field(description="Member name as written in the archive (non-printable characters shown as '?').")
    reason: str = Field(description="Why: absolute path, '..', link pointing outside, device, size cap...")


class NodeFetch(BaseModel):
    """What happened for one AIS node (proxy or target)."""

    node_id: str = Field(description="AIS node ID (the key in the cluster map).")
    role: Literal["proxy", "target", "unknown"] = Field(description="'unknown' for a requested ID not in the map.")
    daemon: str = Field(description="The node as AIS logs name it: 'p[ID]' or 't[ID]'.")
    status: NodeStatus = Field(
        description="'ok' (downloaded and extracted now), 'failed' (nothing kept), 'skipped' (already in dest_dir "
        "from an earlier fetch; nothing was overwritten)."
    )
    reason: str | None = Field(default=None, description="Why it failed or was skipped; null when ok.")
    http_status: int | None = Field(default=None, description="HTTP status of the last failed attempt, if any.")
    attempts: int = Field(default=0, description="HTTP attempts made (retries included).")
    seconds: float = Field(default=0.0, description="Wall-clock seconds spent on this node.")
    archive: str | None = Field(
        default=None,
        description="The saved download, relative to dest_dir: 'aistarget-<ID>.tar.gz' (include_rotated) or the "
        "current log as 'aistarget-<ID>' (like 'ais log get').",
    )
    archive_bytes: int | None = Field(default=None, description="Size of the saved download in bytes.")
    extracted_dir: str | None = Field(default=None, description="Directory the archive was extracted into.")
    extracted_bytes: int = Field(default=0, description="Bytes extracted (sum of the listed and unlisted files).")
    files: list[FetchedFile] = Field(default_factory=list, description="Log files of this node on disk.")
    files_truncated: int = Field(default=0, description="Files not listed because of the limit.")
    refused: list[RefusedMember] = Field(default_factory=list, description="Archive members refused, with reasons.")
    refused_truncated: int = Field(default=0, description="Refused members not listed because of the limit.")


class IndexedFile(BaseModel):
    """One daemon log file and the time range it covers (the daemon's local time: AIS writes no zone)."""

    ref: str = Field(description="Path relative to dest_dir (or '<archive>!<member>').")
    severity: str = Field(description="INFO (all lines) or ERROR (W/E lines, duplicated from INFO).")
    kind: str = Field(description="'started' (process start), 'rotated', 'created' (legacy glog) or 'unknown'.")
    start: str | None = Field(description="When the file was opened, ISO 8601 local time without zone.")
    end: str | None = Field(description="The next file's start, or this file's last record for the newest file.")
    start_source: str = Field(description="Where the start date came from: header, file name, ...")
    records: int = Field(description="Log records read.")
    size_bytes: int = Field(description="Bytes on disk.")


class IndexedDaemon(BaseModel):
    """One AIS node in the index and its files, INFO first, each group by start time."""

    daemon: str = Field(description="'t[ID]' / 'p[ID]' (or role@host when the ID is not known).")
    role: str
    node_id: str | None
    hosts: list[str] = Field(description="Host tokens from file names and headers (not unique across nodes).")
    version: str | None = Field(description="AIS version from the title line, when seen.")
    zone: str | None = Field(description="Zone abbreviation from its hourly markers (a hint).")
    files: list[IndexedFile]
    files_truncated: int = Field(default=0, description="Files not listed because of the limit.")


class AisIndexView(BaseModel):
    """The AIS indexer's view of dest_dir: which daemon wrote which file, covering which time range."""

    daemons: list[IndexedDaemon]
    files_scanned: int = Field(description="Daemon log files read (an archive and its extracted copy both count).")
    bytes_scanned: int
    zone: str | None = Field(description="The zone most daemons' hourly markers state, or null.")
    duplicates: int = Field(description="Files seen twice (archive and extracted copy); listed once.")
    unreadable: list[UnreadableFile] = Field(default_factory=list)


class FetchAisLogsResult(BaseModel):
    """Logs of every AIS daemon, downloaded and extracted safely, and what to do with them next."""

    summary: str = Field(description="What happened, in one or two sentences.")
    dest_dir: str = Field(description="Absolute path of the directory the logs were written to.")
    endpoint: str = Field(description="The AIS endpoint used (scheme://host:port, never with user:password).")
    endpoint_source: str = Field(
        description="'argument', 'AIS_ENDPOINT' or 'ais CLI config (cluster.url)': where the endpoint came from."
    )
    cluster_reachable: bool = Field(description="Whether the cluster map could be read.")
    error: str | None = Field(default=None, description="Why the cluster map could not be read, when it could not.")
    auth: str = Field(description="Where the bearer token came from (variable or file name only), or 'no token'.")
    tls: str = Field(description="How TLS is set up (verification, CA bundle, client certificate).")
    severity: Literal["info", "warning", "error"] = Field(
        description="'info' fetches the INFO files (all severities); 'warning'/'error' fetch the ERROR files."
    )
    include_rotated: bool = Field(description="True: every log file as a TAR.GZ; false: only each current file.")
    nodes_total: int = Field(default=0, description="Nodes attempted (proxies + targets, or the requested IDs).")
    nodes_ok: int = Field(default=0)
    nodes_failed: int = Field(default=0)
    nodes_skipped: int = Field(default=0)
    nodes: list[NodeFetch] = Field(default_factory=list, description="One entry per node: proxies first, then targets.")
    ais_index: AisIndexView | None = Field(
        default=None,
        description="Index of the daemon log files in dest_dir with their time ranges (from the AIS indexer), "
        "or null when it is not available; 'nodes[].files' lists the files either way.",
    )
    next_steps: list[str] = Field(default_factory=list, description="Tool calls to make next.")
    manual_fallback: list[str] = Field(
        default_factory=list,
        description="Shell commands to fetch the logs with the 'ais' CLI when this tool cannot reach the cluster "
        "(the token appears only as the placeholder <token>).",
    )
    warnings: list[str] = Field(default_factory=list)

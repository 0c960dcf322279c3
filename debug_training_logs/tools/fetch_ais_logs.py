"""``fetch_ais_logs``: download every AIStore proxy's and target's logs (current and rotated) and extract them safely.

A thin shell over :func:`debug_training_logs.ais_fetch.fetch.fetch_ais_logs`; ``dest_dir`` is checked against the
server's allowed roots first (the tool writes there).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from debug_training_logs.ais_fetch import fetch as ais_fetch
from debug_training_logs.ais_fetch.models import FetchAisLogsResult
from debug_training_logs.paths import check_allowed
from debug_training_logs.tools.registry import ToolSpec


def fetch_ais_logs(
    dest_dir: Annotated[
        str,
        Field(
            description="Directory to write the AIS logs to (created if missing; its parent must exist). Put it next "
            "to the worker logs, e.g. <logs_dir>/ais_logs. Existing files are never overwritten."
        ),
    ],
    endpoint: Annotated[
        str | None,
        Field(
            description="URL of any AIS proxy, e.g. http://10.0.0.5:51080. Default: the AIS_ENDPOINT environment "
            "variable, else the ais CLI config. The token is sent only to an endpoint the user configured (those "
            "two, or DEBUG_TRAINING_LOGS_AIS_TOKEN_ENDPOINTS), never to another one given here."
        ),
    ] = None,
    severity: Annotated[
        Literal["info", "warning", "error"],
        Field(
            description="'info': the INFO files (all lines, what the analyses read); 'warning'/'error': the "
            "smaller ERROR files (W and E lines only)."
        ),
    ] = "info",
    nodes: Annotated[
        list[str] | None,
        Field(
            description="Only these node IDs (as in the cluster map, or as logged: t[ID], p[ID]). Default: every "
            "proxy and target."
        ),
    ] = None,
    include_rotated: Annotated[
        bool,
        Field(
            description="True: every log file of each node (current, rotated, earlier runs) as a TAR.GZ, "
            "extracted. False: only each node's current file."
        ),
    ] = True,
    timeout_s: Annotated[
        float,
        Field(
            ge=1,
            le=3600,
            description="Per-node time budget in seconds for connecting, retries and the transfer; "
            "a node still failing after it is given up on.",
        ),
    ] = 60.0,
    limit: Annotated[int, Field(ge=1, le=10000, description="At most this many files listed per node.")] = 200,
) -> FetchAisLogsResult:
    """Download the logs of every AIStore daemon (all proxies and targets, current and rotated files) from a live
    cluster in one call, concurrently, and extract each node's archive safely into dest_dir/ais{proxy|target}-<ID>/
    (archives kept as ais{proxy|target}-<ID>.tar.gz, the names 'ais log get cluster' uses).

    Use it when the worker logs point at storage (connection resets, data-loading errors, AIS batch errors) and you
    have no AIS daemon logs yet. The endpoint comes from AIS_ENDPOINT (or the argument); the AuthN token from
    AIS_AUTHN_TOKEN, AIS_AUTHN_TOKEN_FILE or ~/.config/ais/cli/auth.token; TLS from AIS_SKIP_VERIFY_CRT, AIS_CLIENT_CA,
    AIS_CRT/AIS_CRT_KEY. The token never appears in the result.

    Per node: ok / failed (with the HTTP status and AIS error message) / skipped (already in dest_dir: nothing is
    overwritten, so running it again only fetches what is missing). Archive members that could escape the directory,
    links, devices and oversized files are refused and listed. When the cluster cannot be reached, `manual_fallback`
    gives the user the exact 'ais' CLI commands. Then call the tools in `next_steps` (ais_counter_deltas,
    align_timezones) with ais_dir=dest_dir.
    """
    dest = check_allowed(dest_dir)
    return ais_fetch.fetch_ais_logs(
        dest,
        endpoint=endpoint,
        severity=severity,
        nodes=nodes,
        include_rotated=include_rotated,
        timeout_s=timeout_s,
        limit=limit,
    )


SPEC = ToolSpec(
    func=fetch_ais_logs,
    cli_name="fetch-ais",
    title="Fetch AIStore daemon logs",
    positional=("dest_dir",),
    read_only=False,
    open_world=True,
    idempotent=True,
)

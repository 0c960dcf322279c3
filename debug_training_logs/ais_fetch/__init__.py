"""Fetching AIStore daemon logs from a live cluster: config (endpoint, token, TLS), a streaming HTTP client, safe
archive extraction, and the orchestration that fetches every node. Pure logic: nothing here imports ``mcp``.
"""

from debug_training_logs.ais_fetch.fetch import fetch_ais_logs, manual_fallback
from debug_training_logs.ais_fetch.models import FetchAisLogsResult, FetchedFile, NodeFetch, RefusedMember

__all__ = ["FetchAisLogsResult", "FetchedFile", "NodeFetch", "RefusedMember", "fetch_ais_logs", "manual_fallback"]

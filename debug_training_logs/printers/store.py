"""The HTML reports an MCP server process has made, kept in memory so the server can serve them as resources.

``diagnose(html_report=true)`` keeps the page here and returns its URI; the server's resource template
``debug-training-logs://reports/{name}`` reads it back. Nothing is written to disk (the tool stays read-only and
never touches the user's log directory); the last :data:`REPORTS_KEPT` reports are kept, older ones are dropped.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

URI_PREFIX = "debug-training-logs://reports/"
REPORTS_KEPT = 8
"""Reports a server process keeps (a 10,240-rank report is ~1.6 MB)."""

_lock = threading.Lock()
_reports: OrderedDict[str, str] = OrderedDict()


def keep(page: str) -> str:
    """Keep ``page`` and return its URI (the same page always gets the same URI)."""
    name = hashlib.sha256(page.encode()).hexdigest()[:16] + ".html"
    with _lock:
        _reports[name] = page
        _reports.move_to_end(name)
        while len(_reports) > REPORTS_KEPT:
            _reports.popitem(last=False)
    return URI_PREFIX + name


def get(name: str) -> str | None:
    """The page kept under ``name`` (the last part of its URI), or None when unknown or dropped."""
    with _lock:
        return _reports.get(name)

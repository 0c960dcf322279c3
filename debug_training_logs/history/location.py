"""Where the history lives, and how to name it without leaking a password.

``DEBUG_TRAINING_LOGS_HISTORY`` decides: unset or empty, a SQLite file in the user's state directory
(``$XDG_STATE_HOME/debug-training-logs/history.sqlite``, else ``~/.local/state/debug-training-logs/history.sqlite``);
a ``postgresql://`` (or ``postgres://``) DSN, a team's shared PostgreSQL; ``off`` (or ``none``, ``0``, ``false``), no
history; anything else, the path of a SQLite file (``sqlite:///`` prefix allowed). It is never a log directory: the
location is chosen by the user, not derived from the logs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

ENV = "DEBUG_TRAINING_LOGS_HISTORY"
APP_DIR = "debug-training-logs"
FILE_NAME = "history.sqlite"
OFF_WORDS = frozenset({"off", "none", "0", "false", "no"})


@dataclass(frozen=True, repr=False)
class Location:
    """The history's backend and address (``target``: a file path or a DSN)."""

    backend: Literal["sqlite", "postgres", "off"]
    target: str

    def shown(self) -> str:
        """How the location is printed: a path as is, a DSN with its password replaced by ``***``."""
        return redact(self.target) if self.backend == "postgres" else self.target

    def __repr__(self) -> str:  # a DSN in a traceback or a log line must not show its password either
        return f"Location({self.backend}, {self.shown()!r})"


def default_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / APP_DIR / FILE_NAME


def location(value: str | None = None) -> Location:
    """The history's location from ``value`` (default: the environment)."""
    raw = (os.environ.get(ENV, "") if value is None else value).strip()
    if not raw:
        return Location("sqlite", str(default_path()))
    if raw.lower() in OFF_WORDS:
        return Location("off", "")
    if re.match(r"postgres(?:ql)?://", raw, re.IGNORECASE):
        return Location("postgres", raw)
    if raw.lower().startswith("sqlite:///"):
        raw = raw[len("sqlite:///") :]  # sqlite:///relative.sqlite, sqlite:////absolute.sqlite
    return Location("sqlite", str(Path(raw).expanduser()))


_URL_PASSWORD = re.compile(r"(?P<head>postgres(?:ql)?://[^:/@\s]*:)(?P<pw>[^@\s]*)(?P<at>@)", re.IGNORECASE)
_KEY_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def passwords(dsn: str) -> list[str]:
    """The password(s) a DSN carries (URL userinfo, ``?password=``, ``password=`` keywords), raw and decoded."""
    found: list[str] = []
    try:
        parts = urlsplit(dsn)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
    except ValueError:
        pass
    for m in (*_URL_PASSWORD.finditer(dsn), *_KEY_PASSWORD.finditer(dsn)):
        pw = m.group("pw").strip("'")
        found += [pw, unquote(pw)]
    return sorted({p for p in found if p}, key=len, reverse=True)


def redact(text: str, dsn: str | None = None) -> str:
    """``text`` with every DSN password replaced by ``***``: the userinfo of a ``postgresql://`` URL, a
    ``password=`` keyword or query parameter, and (given ``dsn``) that DSN's password wherever it appears."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + "***" + m.group("at"), text)
    text = _KEY_PASSWORD.sub(lambda m: m.group("head") + "***", text)
    for pw in passwords(dsn) if dsn else []:
        text = text.replace(pw, "***")
    return text

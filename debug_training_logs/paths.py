"""Which paths a tool may touch: the allowed-roots policy, and the checks every tool runs on its path arguments.

The MCP server is started with ``--root DIR`` (repeatable; default the working directory) and installs those roots
for each tool call with :func:`restricted_to`; a path outside them is a :class:`UserInputError` that says how to allow
it. The CLI installs no roots: a person running the CLI can read what their shell can read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.discovery import require_dir
from debug_training_logs.logs.sources import JobSources, find_sources

_roots: ContextVar[tuple[Path, ...] | None] = ContextVar("debug_training_logs_roots", default=None)


@contextmanager
def restricted_to(roots: Sequence[str | os.PathLike[str]] | None) -> Iterator[None]:
    """Within this context, tools may only read/write below ``roots`` (None: no restriction)."""
    token = _roots.set(None if roots is None else tuple(Path(r).expanduser().resolve() for r in roots))
    try:
        yield
    finally:
        _roots.reset(token)


def check_allowed(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved (symlinks followed), after checking it lies below an allowed root."""
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop: Python 3.11 raises RuntimeError, later ones OSError
        raise UserInputError(
            f"The path {str(path)!r} cannot be resolved ({getattr(exc, 'strerror', None) or exc}; a symlink loop?). "
            "Pass the real directory."
        ) from None
    roots = _roots.get()
    if roots is not None and not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        shown = ", ".join(str(r) for r in roots)
        raise UserInputError(
            f"The path {str(path)!r} is outside the directories this server may access ({shown}). "
            "Use a path under one of them, or restart the server with '--root <dir>' for that directory."
        )
    return resolved


def input_dir(path: str | os.PathLike[str], what: str = "logs directory") -> Path:
    """An existing directory the caller may read: allowed-roots check, then existence."""
    return require_dir(check_allowed(path) if _roots.get() is not None else path, what)


def job_sources(
    logs_dir: str, ais_dir: str | None = None, fr_dir: str | None = None, hang_dir: str | None = None
) -> JobSources:
    """The files of a job (:func:`~debug_training_logs.logs.sources.find_sources`) from a tool's directory arguments,
    each checked by :func:`input_dir` first."""
    return find_sources(
        input_dir(logs_dir),
        input_dir(ais_dir, "AIS logs directory") if ais_dir else None,
        input_dir(fr_dir, "flight-recorder directory") if fr_dir else None,
        input_dir(hang_dir, "hang directory") if hang_dir else None,
    )

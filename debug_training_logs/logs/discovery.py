"""Find the log files under a directory.

Recursive, sorted, symlinks never followed (each is listed with why it was passed over). Compression is detected
from the magic bytes, not the name, so a rotated ``train.log.1`` that is really gzip still reads. Files that are
clearly not logs (images, checkpoints, archives of other kinds), FIFOs, devices, links and unreadable directories are
skipped and listed with the reason, so nothing disappears silently (and nothing blocks on a pipe).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from debug_training_logs.errors import UserInputError
from debug_training_logs.formats.flight_recorder import HEAD_BYTES, dump_rank, named_like_dump

T = TypeVar("T")

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BZ2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"

# Names that are never logs: we do not open them at all.
_NOT_LOG_SUFFIXES = (
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".svg",
    ".pdf",
    ".pt",
    ".pth",
    ".ckpt",
    ".safetensors",
    ".bin",
    ".npy",
    ".npz",
    ".so",
    ".whl",
    ".zip",
    ".pyc",
    ".parquet",
    ".arrow",
    ".wav",
    ".flac",
    ".mp3",
    ".m4a",
    ".tar",
    ".nemo",
)
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.zst", ".tar.bz2", ".tar.xz")
_SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", "node_modules"}
# torch flight-recorder dumps (``<prefix><rank>``): read by the flight-recorder reader, never as log text.
_FR_DUMP_NAME = re.compile(r"(?:comm_lib_trace_rank_|nccl_trace_rank_)\d+(?:\.json|\.pkl|\.pickle)?$")
FR_DUMP_REASON = "flight-recorder dump (read by the flight-recorder reader, not as a log)"
ARCHIVE_REASON = "archive (extract it first, or pass it to the AIS tools)"
NOT_LOG_REASON = "not a log file (by name)"
REGULAR_REASONS = frozenset({FR_DUMP_REASON, ARCHIVE_REASON, NOT_LOG_REASON})
"""Why regular files are set aside (every other reason is about a link, a device, a directory or an error)."""


@dataclass(frozen=True, repr=False)
class LogFile:
    """One file to read."""

    path: Path
    """Absolute path."""
    rel: str
    """Path relative to the directory the caller gave; this is what results cite."""
    size: int
    """Bytes on disk (compressed size for compressed files)."""
    compression: str
    """``none``, ``gzip``, ``zstd``, ``bz2`` or ``xz``."""


@dataclass(frozen=True, repr=False)
class Skipped:
    """A file discovery passed over, and why (reported in results, never dropped silently)."""

    rel: str
    reason: str


def sniff_compression(path: Path) -> str:
    """The compression of ``path`` from its first bytes."""
    with open(path, "rb") as fh:
        head = fh.read(6)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(BZ2_MAGIC):
        return "bz2"
    if head.startswith(XZ_MAGIC):
        return "xz"
    return "none"


def require_dir(path: str | os.PathLike[str], what: str = "logs directory") -> Path:
    """Resolve ``path`` and insist it is an existing directory, with a message that says what to pass instead."""
    p = Path(path).expanduser()
    try:
        resolved = p.resolve(strict=True)
    except FileNotFoundError:
        raise UserInputError(
            f"The {what} {str(path)!r} does not exist. Pass the directory that holds the log files."
        ) from None
    except (OSError, RuntimeError) as exc:  # a symlink loop (ELOOP), a path through a file, permission denied
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UserInputError(
            f"The {what} {str(path)!r} cannot be resolved ({reason}; a symlink loop?). Pass the real directory."
        ) from None
    if not resolved.is_dir():
        raise UserInputError(f"The {what} {str(path)!r} is a file, not a directory. Pass the directory that holds it.")
    return resolved


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _symlink_reason(full: Path, base: Path) -> str:
    """Why a symlink is passed over (every symlink is: a target inside the tree is read under its own name)."""
    try:
        target = Path(os.path.realpath(full, strict=True))
        st = target.stat()
    except (OSError, RuntimeError) as exc:
        errno_ = getattr(exc, "errno", None)
        if errno_ == errno.ELOOP or isinstance(exc, RuntimeError):
            return "symlink loop (not followed)"
        return f"broken symlink ({getattr(exc, 'strerror', None) or exc}; not followed)"
    if not target.is_relative_to(base):
        return "symlink to outside the directory (not followed)"
    if stat.S_ISDIR(st.st_mode):
        return "symlink to a directory (not followed; pass that directory itself to read it)"
    if not stat.S_ISREG(st.st_mode):
        return f"symlink to {_kind(st.st_mode)}, not a regular file (not read)"
    # AIS keeps aistarget.INFO -> current file: the target is read under its own name, once.
    return "symlink inside the directory (its target is read instead)"


_WALKS: ContextVar[dict[Hashable, Any] | None] = ContextVar("one_walk", default=None)


@contextmanager
def one_walk() -> Iterator[None]:
    """Within the block (one tool call, one command) each directory is walked once: a later :func:`discover` of it
    (a cache key, the scan, a tool it calls) answers from the first walk. The next call walks again and sees what
    changed."""
    token = _WALKS.set({})
    try:
        yield
    finally:
        _WALKS.reset(token)


def discover(root: str | os.PathLike[str], *, include_archives: bool = False) -> tuple[list[LogFile], list[Skipped]]:
    """All log files below ``root`` (recursive), and everything passed over with the reason.

    Nothing is followed: symlinked files and directories, loops, FIFOs, sockets, devices and unreadable
    directories are listed in the skipped list with why, never dropped silently and never opened (a FIFO would block).
    ``include_archives``: keep ``.tar.gz``-style archives (the AIS tools read their members); worker tools skip them.
    Within :func:`one_walk`, the first walk of ``root`` answers every later call.
    """
    base = require_dir(root)
    found = once_per_walk((base, include_archives), lambda: _walk(base, include_archives))
    return list(found[0]), list(found[1])


def once_per_walk(key: Hashable, walk: Callable[[], T]) -> T:
    """``walk()``, or within :func:`one_walk` what it gave for ``key`` earlier in the block: the walks of a tree
    (:func:`discover`, the flight-recorder dumps found in it) are done once per tool call, whoever asks."""
    walks = _WALKS.get()
    if walks is None:
        return walk()
    if key not in walks:
        walks[key] = walk()
    return walks[key]  # type: ignore[no-any-return]


def regular_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every regular file below ``root`` that :func:`discover`'s walk passed (not through a symlink): the log files,
    and the ones it set aside by name, as archives or as flight-recorder dumps. For the readers of other kinds of
    files in a logs tree (the dumps), which so share its one walk."""
    base = require_dir(root)
    files, skipped = discover(base)
    return [f.path for f in files] + [base / s.rel for s in skipped if s.reason in REGULAR_REASONS]


def _walk(base: Path, include_archives: bool) -> tuple[list[LogFile], list[Skipped]]:
    files: list[LogFile] = []
    skipped: list[Skipped] = []

    def unreadable_dir(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else base
        rel = where.relative_to(base).as_posix() if where.is_relative_to(base) else str(where)
        skipped.append(Skipped(rel + "/", f"unreadable directory ({exc.strerror or exc}); its files were not read"))

    for dirpath, dirnames, filenames in os.walk(base, onerror=unreadable_dir, followlinks=False):
        here = Path(dirpath)
        kept_dirs: list[str] = []
        for d in sorted(dirnames):
            if d in _SKIP_DIRS:
                continue
            if (here / d).is_symlink():
                skipped.append(Skipped((here / d).relative_to(base).as_posix(), _symlink_reason(here / d, base)))
                continue
            kept_dirs.append(d)
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            full = here / name
            rel = full.relative_to(base).as_posix()
            lower = name.lower()
            try:
                st = full.lstat()
            except OSError as exc:
                skipped.append(Skipped(rel, f"cannot stat: {exc.strerror or exc}"))
                continue
            if stat.S_ISLNK(st.st_mode):
                skipped.append(Skipped(rel, _symlink_reason(full, base)))
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append(Skipped(rel, f"{_kind(st.st_mode)}, not a regular file (not read)"))
                continue
            if lower.endswith(_ARCHIVE_SUFFIXES):
                if include_archives:
                    try:
                        files.append(LogFile(full, rel, st.st_size, sniff_compression(full)))
                    except OSError as exc:
                        skipped.append(Skipped(rel, f"cannot open: {exc.strerror or exc}"))
                else:
                    skipped.append(Skipped(rel, ARCHIVE_REASON))
                continue
            if lower.endswith(_NOT_LOG_SUFFIXES) or name.startswith("."):
                skipped.append(Skipped(rel, NOT_LOG_REASON))
                continue
            if _FR_DUMP_NAME.search(name):
                skipped.append(Skipped(rel, FR_DUMP_REASON))
                continue
            try:
                comp = sniff_compression(full)
                if comp == "none" and named_like_dump(name):
                    with open(full, "rb") as fh:  # a dump under another prefix (_dump_12, rank0.json)
                        if dump_rank(name, fh.read(HEAD_BYTES)) is not None:
                            skipped.append(Skipped(rel, FR_DUMP_REASON))
                            continue
            except OSError as exc:
                skipped.append(Skipped(rel, f"cannot open: {exc.strerror or exc}"))
                continue
            files.append(LogFile(full, rel, st.st_size, comp))
    return files, skipped

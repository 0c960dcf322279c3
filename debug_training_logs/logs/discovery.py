"""Find the log files under a directory.

Recursive, sorted, symlinks not followed out of the tree. Compression is detected from the magic bytes, not the name,
so a rotated ``train.log.1`` that is really gzip still reads. Files that are clearly not logs (images, checkpoints,
archives of other kinds) are skipped and listed with the reason, so nothing disappears silently.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from debug_training_logs.errors import UserInputError

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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    if not p.exists():
        raise UserInputError(f"The {what} {str(path)!r} does not exist. Pass the directory that holds the log files.")
    if not p.is_dir():
        raise UserInputError(f"The {what} {str(path)!r} is a file, not a directory. Pass the directory that holds it.")
    return p.resolve()


def discover(root: str | os.PathLike[str], *, include_archives: bool = False) -> tuple[list[LogFile], list[Skipped]]:
    """All log files below ``root`` (recursive), and the files passed over with the reason.

    ``include_archives``: keep ``.tar.gz``-style archives (the AIS tools read their members); worker tools skip them.
    """
    base = require_dir(root)
    files: list[LogFile] = []
    skipped: list[Skipped] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(base).as_posix()
            lower = name.lower()
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(base) or not target.is_file():
                    skipped.append(Skipped(rel, "symlink to outside the directory (not followed)"))
                    continue
                # AIS keeps aistarget.INFO -> current file: the target is read under its own name, once.
                skipped.append(Skipped(rel, "symlink inside the directory (its target is read instead)"))
                continue
            if not full.is_file():
                skipped.append(Skipped(rel, "not a regular file"))
                continue
            if lower.endswith(_ARCHIVE_SUFFIXES):
                if include_archives:
                    files.append(LogFile(full, rel, full.stat().st_size, sniff_compression(full)))
                else:
                    skipped.append(Skipped(rel, "archive (extract it first, or pass it to the AIS tools)"))
                continue
            if lower.endswith(_NOT_LOG_SUFFIXES) or name.startswith("."):
                skipped.append(Skipped(rel, "not a log file (by name)"))
                continue
            if _FR_DUMP_NAME.search(name):
                skipped.append(Skipped(rel, FR_DUMP_REASON))
                continue
            try:
                size = full.stat().st_size
                comp = sniff_compression(full)
            except OSError as exc:
                skipped.append(Skipped(rel, f"cannot open: {exc.strerror or exc}"))
                continue
            files.append(LogFile(full, rel, size, comp))
    return files, skipped

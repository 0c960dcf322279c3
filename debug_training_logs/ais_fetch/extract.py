"""Safe extraction of an AIS node's log archive (TAR.GZ) into a fresh directory.

An AIS node's archive holds only regular files with flat base names (``targzLogs``), so anything else is suspicious
and refused, with the reason, member by member; extraction of the rest goes on:

* names: absolute paths, ``..`` components, backslashes, NUL, drive letters, overlong or too deep names;
* types: symlinks and hard links (named as pointing outside when they do), devices, FIFOs, anything not a regular
  file or directory;
* sizes: a member above ``max_member_bytes``, or one that would take the node's total above ``max_total_bytes``;
  the decompressed stream is read at most :attr:`ExtractLimits.max_scan_bytes` deep (refused members must still be
  decompressed to be skipped), and at most ``max_members`` headers are examined, so a gzip bomb costs bounded time;
* then Python's own ``tarfile.data_filter`` (PEP 706) on what is left, where this Python has it (3.11.4+).

Files are written by us, not by ``TarFile.extract``: opened with ``O_EXCL | O_NOFOLLOW`` (never overwrite, never
write through a link), mode 0644, mtime from the archive (AIS stores the log file's mtime, which tells when the file
was last written). Data is copied in 1 MiB chunks; nothing holds an archive or a member in memory.

This module must not know about HTTP or nodes: it takes a path and a directory and returns what it did.
"""

from __future__ import annotations

import gzip
import os
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MAX_TOTAL_BYTES = 2 * GiB
"""Default cap on the bytes extracted from one node's archive (AIS keeps 512 MiB per severity by default)."""
DEFAULT_MAX_MEMBER_BYTES = 1 * GiB
"""Default cap on one extracted file (AIS rotates at ``log.max_size``, forced to 4 MiB above 1 GiB)."""
DEFAULT_MAX_MEMBERS = 10_000
"""Default cap on the members examined in one archive."""
_COPY_CHUNK = 1 * MiB
_MAX_NAME_CHARS = 1024
_MAX_DEPTH = 8
_DRAIN_LIMIT = 1 * MiB
"""After the last member, read at most this much more to reach the gzip trailer and check its CRC."""

_data_filter = getattr(tarfile, "data_filter", None)


@dataclass(frozen=True)
class ExtractLimits:
    """Caps against archive bombs, in bytes and members."""

    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS

    @property
    def max_scan_bytes(self) -> int:
        """How deep into the decompressed tar stream we read, refused members and tar headers included.

        Twice the caps plus 1 KiB per member (a header and padding): room for refused members, while a bomb still
        costs bounded decompression (about 6 GiB with the defaults, seconds of CPU).
        """
        return 2 * (self.max_total_bytes + self.max_member_bytes) + 1024 * self.max_members


@dataclass(frozen=True)
class ExtractedFile:
    """A file written to disk."""

    rel: str
    """Path relative to the extraction directory (AIS archives are flat, so usually the base name)."""
    size: int
    """Bytes."""
    mtime: float
    """Modification time from the archive, seconds since the epoch (UTC)."""


@dataclass(frozen=True)
class RefusedMember:
    """A member not extracted, and why."""

    name: str
    reason: str


@dataclass
class ExtractReport:
    """What :func:`safe_extract` did."""

    files: list[ExtractedFile] = field(default_factory=list)
    refused: list[RefusedMember] = field(default_factory=list)
    bytes_extracted: int = 0
    stopped: str | None = None
    """Why reading stopped before the end of the archive (a cap was reached), or ``None``."""


class ArchiveError(Exception):
    """The archive cannot be read (not gzip, not tar, truncated or corrupt). ``str()`` says which.

    ``damaged`` is true when the bytes look like a TAR.GZ that got cut or corrupted on the way (worth downloading
    again); false when it is not an archive at all.
    """

    def __init__(self, message: str, *, damaged: bool) -> None:
        super().__init__(message)
        self.damaged = damaged


def safe_extract(archive: Path, dest: Path, limits: ExtractLimits | None = None) -> ExtractReport:
    """Extract the TAR.GZ ``archive`` into the existing directory ``dest`` with the checks in the module docstring.

    Raises :class:`ArchiveError` when the stream is unreadable (files written before that stay; the caller decides)
    and ``OSError`` when writing fails (disk full, permissions).
    """
    limits = limits or ExtractLimits()
    dest = dest.resolve()
    report = ExtractReport()
    seen = 0
    try:
        with tarfile.open(archive, mode="r:gz") as tf:
            for member in _members(tf):
                seen += 1
                if seen > limits.max_members:
                    report.stopped = f"more than {limits.max_members} members; the rest were not examined"
                    report.refused.append(RefusedMember(_shown(member.name), report.stopped))
                    break
                end = member.offset_data + (member.size if member.isreg() else 0)
                if end > limits.max_scan_bytes:
                    report.stopped = (
                        f"the archive goes beyond {limits.max_scan_bytes} decompressed bytes; "
                        "reading stopped here (archive bomb guard)"
                    )
                    report.refused.append(RefusedMember(_shown(member.name), report.stopped))
                    break
                reason = _refusal(member, report.bytes_extracted, limits)
                if reason is None and _data_filter is not None:
                    try:
                        _data_filter(member, str(dest))
                    except tarfile.FilterError as exc:
                        reason = f"refused by tarfile's data filter: {exc}"
                if reason is not None:
                    report.refused.append(RefusedMember(_shown(member.name), reason))
                    continue
                name = _normalized(member.name)
                if member.isdir():
                    _make_dirs(dest, name)
                    continue
                written = _write_member(tf, member, dest, name)
                if written is None:
                    report.refused.append(
                        RefusedMember(_shown(member.name), "a file of this name was already extracted; first copy kept")
                    )
                    continue
                report.files.append(written)
                report.bytes_extracted += written.size
            if report.stopped is None:
                _drain(tf)
    except tarfile.ReadError as exc:
        text = str(exc)
        if "not a gzip file" in text:
            raise ArchiveError("the node's answer is not a gzip archive", damaged=False) from None
        raise ArchiveError(f"the archive cannot be read as TAR.GZ ({text})", damaged=True) from None
    except (EOFError, gzip.BadGzipFile, zlib.error, tarfile.HeaderError) as exc:
        raise ArchiveError(f"the archive is truncated or corrupt ({type(exc).__name__}: {exc})", damaged=True) from None
    return report


def _members(tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Members one at a time, without ``getmembers()`` building the full list first."""
    while True:
        member = tf.next()
        if member is None:
            return
        yield member


def _refusal(member: tarfile.TarInfo, total: int, limits: ExtractLimits) -> str | None:
    """Why ``member`` must not be extracted, or ``None``."""
    name = member.name
    if not name or "\x00" in name:
        return "empty name or NUL character in the name"
    if len(name) > _MAX_NAME_CHARS:
        return f"name longer than {_MAX_NAME_CHARS} characters"
    if "\\" in name:
        return "backslash in the name (a Windows path separator)"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        return "the name is the extraction directory itself"
    if ".." in parts:
        return "'..' in the path (would escape the extraction directory)"
    if len(parts) > _MAX_DEPTH:
        return f"path deeper than {_MAX_DEPTH} directories"
    if member.issym() or member.islnk():
        kind = "symlink" if member.issym() else "hard link"
        target = member.linkname
        base = posixpath.dirname(_normalized(name)) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target)) if target else ""
        if not target or target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            return f"{kind} to {_shown(target)!r} points outside the extraction directory"
        return f"{kind} to {_shown(target)!r} not extracted (AIS log archives hold regular files only)"
    if member.ischr() or member.isblk():
        return "device file"
    if member.isfifo():
        return "FIFO (named pipe)"
    if member.isdir():
        return None
    if not member.isreg():
        return f"unsupported member type {member.type!r}"
    if member.size > limits.max_member_bytes:
        return f"{member.size} bytes, above the per-file cap of {limits.max_member_bytes} bytes"
    if total + member.size > limits.max_total_bytes:
        return (
            f"{member.size} bytes would take this node's extracted total above the cap of "
            f"{limits.max_total_bytes} bytes"
        )
    return None


def _normalized(name: str) -> str:
    return "/".join(p for p in name.split("/") if p not in ("", "."))


def _shown(name: str) -> str:
    """A member name safe to put in a report: printable and cut at 200 characters."""
    text = "".join(c if c.isprintable() else "?" for c in name)
    return text if len(text) <= 200 else text[:199] + "…"


def _make_dirs(dest: Path, rel: str) -> Path:
    """Create ``dest/rel`` (and parents) inside ``dest``; refuse to go through anything that is not a plain dir."""
    cur = dest
    for part in rel.split("/"):
        cur = cur / part
        try:
            os.mkdir(cur, 0o755)
        except FileExistsError:
            if cur.is_symlink() or not cur.is_dir():
                raise ArchiveError(f"{rel!r} collides with a file extracted earlier", damaged=False) from None
    return cur


def _write_member(tf: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, rel: str) -> ExtractedFile | None:
    """Copy one regular member to ``dest/rel``; ``None`` when that name already exists (never overwritten)."""
    parent, _, _base = rel.rpartition("/")
    target_dir = _make_dirs(dest, parent) if parent else dest
    path = target_dir / _base
    src = tf.extractfile(member)
    if src is None:  # not reachable for regular files; kept for the type checker
        return None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return None
    written = 0
    try:
        with os.fdopen(fd, "wb") as out, src:
            while True:
                chunk = src.read(_COPY_CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                out.write(chunk)
    except BaseException:
        os.unlink(path)
        raise
    mtime = float(member.mtime) if member.mtime >= 0 else 0.0
    try:
        os.utime(path, (mtime, mtime))
    except (OSError, OverflowError, ValueError):
        mtime = path.stat().st_mtime
    return ExtractedFile(rel, written, mtime)


def _drain(tf: tarfile.TarFile) -> None:
    """Read to the end of the gzip stream (bounded), so a bad CRC or a cut trailer is noticed."""
    fileobj = tf.fileobj
    if fileobj is None:
        return
    left = _DRAIN_LIMIT
    while left > 0:
        chunk = fileobj.read(min(64 * 1024, left))
        if not chunk:
            return
        left -= len(chunk)

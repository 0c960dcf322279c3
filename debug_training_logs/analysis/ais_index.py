"""Index a directory of AIStore daemon logs: which daemons, which files, which time range each file covers.

Reads plain files, compressed files (``.gz``/``.zst``/...) and the per-node archives the ``ais`` CLI downloads
(``aistarget-<ID>.tar.gz``), the archives **in-stream, never extracted**: nothing is written anywhere, least of all
into the user's directory. Archive member paths are untrusted: only the base name is used (for display and citation
as ``<archive>!<member base name>``); links, devices, members with absolute or ``..`` paths and members over
:data:`MAX_MEMBER_BYTES` are refused and reported in ``unreadable``.

One pass over every file does everything: :class:`AisDirScan` yields every record (with its absolute local time) to
whoever iterates it, and builds the :class:`AisIndex` on the way. :func:`index_ais_dir` is that pass with nobody
listening; :func:`iter_records` is the pass for a consumer (the timeline) that wants the records.

Daemons are identified by node ID (``t[ID]``/``p[ID]``) taken from the file's title line or startup record, from the
CLI archive name, or from a directory named like one (``aistarget-<ID>/`` after extraction). The host token in file
names is NOT unique (``aistore-target-13`` and ``aistore-target-7`` both become ``aistore-target``), so it is used
only for files with no node ID, and then only together with the directory or archive the file came from.

The same file seen twice (an archive and its extracted copy side by side) is read twice but indexed once: the copy
is listed in ``skipped`` and consumers drop its records (see :meth:`AisIndex.is_duplicate`).
"""

from __future__ import annotations

import lzma
import os
import tarfile
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from itertools import chain
from pathlib import Path, PurePosixPath

from debug_training_logs import progress
from debug_training_logs.formats.ais import (
    KIND_OF_ROLE,
    AisFileParser,
    AisHeader,
    AisLogName,
    AisRecord,
    NodeTitle,
    parse_cli_name,
    parse_header,
    parse_log_name,
)
from debug_training_logs.logs.discovery import LogFile, Skipped, discover, require_dir
from debug_training_logs.logs.reader import ReadProblems, decode, iter_chunks, iter_stream_chunks, open_binary

ARCHIVE_MEMBER_SEP = "!"
"""Separates an archive's path from a member's base name in a file reference: ``aistarget-X.tar.gz!aistarget...``."""
MAX_MEMBER_BYTES = 1 << 30
"""Archive members larger than this (1 GiB) are refused: AIS rotates its logs at ``log.max_size`` (64 MiB default,
forced to 4 MiB above 1 GiB), so a bigger member is not a daemon log."""
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.zst", ".tar.bz2", ".tar.xz")


@dataclass(frozen=True, repr=False, eq=False)
class AisSource:
    """One readable daemon log: a plain (possibly compressed) file or an archive member."""

    ref: str
    """How results cite it: the path relative to the AIS directory, or ``<archive rel>!<member base name>``."""
    name: str
    """Base name (decides role, host, severity, creation time and pid when it follows the AIS naming)."""
    container: str
    """The archive (rel path) holding it, or the directory (rel path, ``""`` for the top) it sits in."""
    in_archive: bool
    size: int
    """Bytes: on disk for a plain file (compressed size if compressed), the member's size in an archive."""
    mtime: float
    """Modification time (seconds since the epoch) from the file system or the archive member header."""
    log_name: AisLogName | None
    """The parsed AIS file name, None when the name does not follow the AIS naming (content was recognised)."""

    @property
    def severity(self) -> str:
        """``INFO`` (all lines) unless the name says ``ERROR``/``WARNING`` (W/E lines duplicated from INFO)."""
        return self.log_name.severity if self.log_name is not None else "INFO"


@dataclass(frozen=True, repr=False, eq=False)
class AisLogFile:
    """One daemon log file in the index, with the time range it covers (daemon local time, no zone)."""

    ref: str
    """Path relative to the AIS directory, or ``<archive>!<member>``."""
    severity: str
    """``INFO`` or ``ERROR`` (``WARNING`` for legacy glog files)."""
    kind: str
    """``started`` (first file of a process: ``Started up at``), ``rotated`` (``Rotated at``), ``created``
    (glog header) or ``unknown`` (no header line: the start comes from the name)."""
    role: str
    host: str | None
    pid: int | None
    node_id: str | None
    """From the title line, the startup record, or the CLI archive/directory name."""
    version: str | None
    start: datetime | None
    """From the header (or the name's MMDD-HHMMSS with a year hint when there is no header)."""
    start_source: str
    """Where the date came from: ``header``, ``file name``, ``file name + year hint``, ``hourly marker``, ``none``."""
    first_record: datetime | None
    last_record: datetime | None
    end: datetime | None = None
    """The next file's start (same daemon, same severity), or this file's last record for the newest file."""
    zone: str | None = None
    """Zone abbreviation from the file's hourly markers (a hint: ``CST`` is ambiguous)."""
    records: int = 0
    stats_lines: int = 0
    glued_lines: int = 0
    """Physical lines holding more than one record (an INFO line cut at 2 KiB lost its newline)."""
    size: int = 0
    """Bytes on disk (compressed size) or the archive member's size."""
    chars: int = 0
    """Decompressed characters read (with newlines)."""
    container: str = ""
    in_archive: bool = False

    @property
    def name(self) -> str:
        """Base name of the file (or archive member)."""
        return self.ref.rsplit(ARCHIVE_MEMBER_SEP, 1)[-1].rsplit("/", 1)[-1]

    def covers(self, start: datetime | None, end: datetime | None) -> bool:
        """True when this file's range [start or first record, end] overlaps [``start``, ``end``] (None = open)."""
        lo = self.start or self.first_record
        hi = self.end or self.last_record
        if lo is None or hi is None:
            return True  # a file with no dates cannot be excluded
        return (end is None or lo <= end) and (start is None or hi >= start)


@dataclass(frozen=True, repr=False, eq=False)
class AisDaemon:
    """One AIS node (proxy or target) and every file it wrote."""

    key: str
    """``t[ID]``/``p[ID]`` when the node ID is known, else ``<role>@<host>`` (+ ``:<dir or archive>``)."""
    role: str
    node_id: str | None
    hosts: tuple[str, ...]
    """Host tokens seen in its file names/headers (not unique across nodes)."""
    version: str | None
    files: tuple[AisLogFile, ...]
    """INFO files first, each group sorted by start time."""
    zone: str | None
    """Zone abbreviation from its hourly markers (a hint)."""

    @property
    def name(self) -> str:
        """What a person calls it: ``t[hJkL0aBc] (ais-target-2)``."""
        return f"{self.key} ({', '.join(self.hosts)})" if self.hosts and self.node_id else self.key

    @property
    def info_files(self) -> tuple[AisLogFile, ...]:
        return tuple(f for f in self.files if f.severity == "INFO")

    @property
    def error_files(self) -> tuple[AisLogFile, ...]:
        return tuple(f for f in self.files if f.severity != "INFO")

    @property
    def process_starts(self) -> tuple[datetime, ...]:
        """Header times of ``Started up at`` INFO files: each is a (re)start of the aisnode process."""
        return tuple(sorted(f.start for f in self.info_files if f.kind == "started" and f.start is not None))


@dataclass(frozen=True, repr=False, eq=False)
class AisIndex:
    """Every daemon found under an AIS logs directory, and what could not be read."""

    root: Path
    daemons: tuple[AisDaemon, ...]
    """Proxies first, then targets, then anything else; by key within a role."""
    skipped: tuple[Skipped, ...]
    """Files passed over, with the reason (not AIS daemon logs, duplicate copies, symlinks)."""
    unreadable: dict[str, str]
    """File (or archive member) reference -> why it could not be read in full."""
    files_scanned: int
    """AIS log files read (plain files and archive members)."""
    bytes_scanned: int
    """Bytes read from disk (compressed size for compressed files and archives)."""
    duplicates: frozenset[str] = field(default_factory=frozenset)
    """References of files whose identical copy was indexed under another reference."""

    @property
    def zone(self) -> str | None:
        """The zone abbreviation most daemons' hourly markers state, or None."""
        zones = Counter(d.zone for d in self.daemons if d.zone)
        return zones.most_common(1)[0][0] if zones else None

    def is_duplicate(self, ref: str) -> bool:
        """True for a copy of a file indexed under another reference (its records must not be counted twice)."""
        return ref in self.duplicates

    def daemon_of(self, ref: str) -> AisDaemon | None:
        """The daemon that wrote file ``ref``."""
        return self._by_ref.get(ref, (None, None))[0]

    def file(self, ref: str) -> AisLogFile | None:
        """The index entry of file ``ref``."""
        return self._by_ref.get(ref, (None, None))[1]

    @cached_property
    def _by_ref(self) -> dict[str, tuple[AisDaemon, AisLogFile]]:
        return {f.ref: (d, f) for d in self.daemons for f in d.files}


# ---------------------------------------------------------------------------------------------------------------------
# Reading


def lines_of(chunks: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` from chunks that end on line boundaries; decoded a chunk at a time (fast)."""
    n = 0
    for chunk in chunks:
        text = decode(chunk)
        parts = text.split("\n")
        if text.endswith("\n"):
            parts.pop()
        if "\r" in text:
            parts = [p.rstrip("\r") for p in parts]
        yield from enumerate(parts, n + 1)
        n += len(parts)


def member_refusal(member: tarfile.TarInfo, max_bytes: int = MAX_MEMBER_BYTES) -> str | None:
    """Why an archive member must not be read (None when it may): links, devices, unsafe paths, oversize."""
    if member.issym() or member.islnk():
        return "link member (symlink or hard link) in the archive: not followed"
    if member.isdev():
        return "device or FIFO member in the archive: not read"
    if not member.isfile():
        return "not a regular file member: not read"
    path = member.name.replace("\\", "/")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":") or ".." in PurePosixPath(path).parts:
        return "unsafe member path (absolute or containing '..'): not read"
    if member.size > max_bytes:
        return f"member of {member.size} bytes is over the {max_bytes}-byte cap for a log file: not read"
    return None


@dataclass(repr=False, eq=False)
class _Seen:
    """What one pass learned about one file (before daemons are known)."""

    source: AisSource
    header: AisHeader | None
    title: NodeTitle | None
    start: datetime | None
    start_source: str
    first_record: datetime | None
    last_record: datetime | None
    zone: str | None
    records: int
    stats_lines: int
    glued_lines: int
    chars: int


class AisDirScan:
    """One pass over an AIS logs directory: iterate :meth:`records`, then call :meth:`index`.

    ``for source, record in scan.records()`` yields every record of every daemon file with its absolute local time,
    file by file (not globally time-ordered). Records of a duplicate copy are yielded too; check
    ``index.is_duplicate(source.ref)`` afterwards (a copy is only known as such once both were read).
    """

    def __init__(self, ais_dir: str | os.PathLike[str], *, max_member_bytes: int = MAX_MEMBER_BYTES) -> None:
        self.root = require_dir(ais_dir, "AIS logs directory")
        self.max_member_bytes = max_member_bytes
        self.problems = ReadProblems()
        self.skipped: list[Skipped] = []
        self.bytes_scanned = 0
        self._seen: list[_Seen] = []
        self._done = False

    # -- sources ------------------------------------------------------------------------------------------------------

    def _sources(self) -> Iterator[tuple[AisSource, Iterator[tuple[int, str]]]]:
        files, skipped = discover(self.root, include_archives=True)
        self.skipped.extend(skipped)
        total = len(files)
        progress.report(0, total, f"reading {total} AIS log file(s)")
        for i, lf in enumerate(files):
            self.bytes_scanned += lf.size
            if lf.rel.lower().endswith(ARCHIVE_SUFFIXES):
                yield from self._archive_sources(lf)
            else:
                parent = lf.rel.rsplit("/", 1)[0] if "/" in lf.rel else ""
                name = lf.rel.rsplit("/", 1)[-1]
                try:
                    mtime = lf.path.stat().st_mtime
                except OSError:
                    mtime = 0.0
                source = AisSource(lf.rel, name, parent, False, lf.size, mtime, parse_log_name(name))
                recognised = self._recognise(source, lines_of(iter_chunks(lf, self.problems)))
                if recognised is not None:
                    yield recognised
            progress.report(i + 1, total, f"read {lf.rel}")

    def _archive_sources(self, lf: LogFile) -> Iterator[tuple[AisSource, Iterator[tuple[int, str]]]]:
        names: set[str] = set()
        members = 0
        try:
            with open_binary(lf) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
                for member in tar:
                    if member.isdir():
                        continue
                    members += 1
                    name = PurePosixPath(member.name.replace("\\", "/")).name
                    ref = f"{lf.rel}{ARCHIVE_MEMBER_SEP}{name}"
                    refusal = member_refusal(member, self.max_member_bytes)
                    if refusal is not None:
                        self.problems.add(ref, refusal)
                        continue
                    if name in names:
                        self.skipped.append(Skipped(ref, "a second member with the same base name: not read"))
                        continue
                    names.add(name)
                    fh = tar.extractfile(member)
                    if fh is None:
                        self.problems.add(ref, "archive member has no data")
                        continue
                    source = AisSource(ref, name, lf.rel, True, member.size, float(member.mtime), parse_log_name(name))
                    chunks = iter_stream_chunks(fh, ref, self.problems, "truncated or corrupt archive member")
                    recognised = self._recognise(source, lines_of(chunks))
                    if recognised is not None:
                        yield recognised
        except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
            self.problems.add(
                lf.rel, f"truncated or corrupt archive ({type(exc).__name__}: {exc}); read the first {members} members"
            )
        except Exception as exc:  # zstandard raises its own ZstdError
            self.problems.add(lf.rel, f"cannot read archive ({type(exc).__name__}: {exc})")

    def _recognise(
        self, source: AisSource, lines: Iterator[tuple[int, str]]
    ) -> tuple[AisSource, Iterator[tuple[int, str]]] | None:
        """The source and its lines when it is an AIS daemon log (by name or by its first line), else None."""
        if source.log_name is not None:
            return source, lines
        first = next(lines, None)
        if first is None:
            if source.ref not in self.problems.items:
                self.skipped.append(Skipped(source.ref, "empty file, not an AIS daemon log"))
            return None
        if parse_header(first[1]) is None:
            self.skipped.append(Skipped(source.ref, "not an AIS daemon log (neither its name nor its first line)"))
            return None
        return source, chain([first], lines)

    # -- the pass -----------------------------------------------------------------------------------------------------

    def records(self, *, everything: bool = True) -> Iterator[tuple[AisSource, AisRecord]]:
        """Every record of every daemon log file, file after file.

        ``everything=False``: only W/E lines, stats lines, hourly markers and title records (much faster; the index
        is the same either way).
        """
        self.problems, self.skipped, self._seen, self.bytes_scanned = ReadProblems(), [], [], 0
        self._done = False
        for source, lines in self._sources():
            year_hint = datetime.fromtimestamp(source.mtime).year if source.mtime > 0 else None
            parser = AisFileParser(source.log_name, year_hint)
            for rec in parser.parse(lines, everything=everything):
                yield source, rec
            start = parser.header.at if parser.header is not None else None
            start_source = "header" if start is not None else parser.date_source
            if start is None and source.log_name is not None:
                start = source.log_name.created(year_hint)
            self._seen.append(
                _Seen(
                    source=source,
                    header=parser.header,
                    title=parser.title,
                    start=start,
                    start_source=start_source,
                    first_record=parser.first_at,
                    last_record=parser.last_at,
                    zone=parser.zone,
                    records=parser.records,
                    stats_lines=parser.stats_lines,
                    glued_lines=parser.glued_lines,
                    chars=parser.chars,
                )
            )
        self._done = True

    def index(self) -> AisIndex:
        """The index of everything :meth:`records` went through (call after iterating it to the end)."""
        if not self._done:
            for _ in self.records(everything=False):
                pass
        return _build_index(self)


def index_ais_dir(ais_dir: str | os.PathLike[str]) -> AisIndex:
    """Index every AIS daemon log under ``ais_dir`` (plain, compressed, ``.tar.gz`` archives read in-stream)."""
    return AisDirScan(ais_dir).index()


def iter_records(
    ais_dir: str | os.PathLike[str], refs: set[str] | None = None
) -> Iterator[tuple[AisSource, AisRecord]]:
    """Every record (with absolute local time) of the AIS logs under ``ais_dir``, file by file.

    ``refs``: only records of these file references (the others are still read: archives are streams).
    """
    for source, rec in AisDirScan(ais_dir).records():
        if refs is None or source.ref in refs:
            yield source, rec


# ---------------------------------------------------------------------------------------------------------------------
# Grouping files into daemons


def _identity(seen: _Seen) -> tuple[object, ...]:
    return (seen.source.name, seen.chars, seen.records, seen.first_record, seen.last_record)


def _node_from_container(container: str, role: str | None) -> str | None:
    for part in reversed(container.split("/")):
        cli = parse_cli_name(part)
        if cli is not None and (role is None or cli.role == role):
            return cli.node_id
    return None


def _build_index(scan: AisDirScan) -> AisIndex:
    kept: list[_Seen] = []
    duplicates: set[str] = set()
    first_by_identity: dict[tuple[object, ...], str] = {}
    for seen in scan._seen:
        ident = _identity(seen)
        if seen.records and ident in first_by_identity:
            duplicates.add(seen.source.ref)
            scan.skipped.append(Skipped(seen.source.ref, f"identical copy of {first_by_identity[ident]}: counted once"))
            continue
        first_by_identity.setdefault(ident, seen.source.ref)
        kept.append(seen)

    entries: list[tuple[str, AisLogFile]] = []  # (daemon key, file)
    keyed_nodes: dict[tuple[str, str | None, str], set[str]] = defaultdict(set)  # (role, host, container) -> keys
    pending: list[tuple[AisLogFile, str, str | None]] = []
    for seen in kept:
        src = seen.source
        title = seen.title
        cli = parse_cli_name(src.name) if src.log_name is None else None
        role = title.role if title is not None else None
        if role is None and src.log_name is not None:
            role = src.log_name.role
        if role is None and cli is not None:
            role = cli.role
        if role is None:
            role = "unknown"
        node_id = title.node_id if title is not None else None
        if node_id is None and cli is not None:
            node_id = cli.node_id
        if node_id is None:
            node_id = _node_from_container(src.container, role if role in KIND_OF_ROLE else None)
        host = src.log_name.host if src.log_name is not None else (seen.header.host if seen.header else None)
        f = AisLogFile(
            ref=src.ref,
            severity=src.severity,
            kind=seen.header.kind if seen.header else "unknown",
            role=role,
            host=host,
            pid=src.log_name.pid if src.log_name else None,
            node_id=node_id,
            version=title.version if title else None,
            start=seen.start,
            start_source=seen.start_source,
            first_record=seen.first_record,
            last_record=seen.last_record,
            zone=seen.zone,
            records=seen.records,
            stats_lines=seen.stats_lines,
            glued_lines=seen.glued_lines,
            size=src.size,
            chars=seen.chars,
            container=src.container,
            in_archive=src.in_archive,
        )
        if node_id is not None:
            key = f"{KIND_OF_ROLE.get(role, role + ':')}[{node_id}]" if role in KIND_OF_ROLE else f"{role}[{node_id}]"
            entries.append((key, f))
            keyed_nodes[(role, host, src.container)].add(key)
        else:
            pending.append((f, role, host))
    for f, role, host in pending:
        candidates = keyed_nodes.get((role, host, f.container), set())
        if len(candidates) == 1:
            key = next(iter(candidates))
            f = replace(f, node_id=key[key.index("[") + 1 : -1])
        else:
            key = f"{role}@{host or '?'}" + (f":{f.container}" if f.container else "")
        entries.append((key, f))

    by_key: dict[str, list[AisLogFile]] = defaultdict(list)
    for key, f in entries:
        by_key[key].append(f)
    daemons = [_daemon(key, files) for key, files in by_key.items()]
    role_order = {"proxy": 0, "target": 1}
    daemons.sort(key=lambda d: (role_order.get(d.role, 2), d.hosts, d.key))
    return AisIndex(
        root=scan.root,
        daemons=tuple(daemons),
        skipped=tuple(scan.skipped),
        unreadable=dict(scan.problems.items),
        files_scanned=len(scan._seen),
        bytes_scanned=scan.bytes_scanned,
        duplicates=frozenset(duplicates),
    )


def _sort_key(f: AisLogFile) -> tuple[datetime, str]:
    return (f.start or f.first_record or datetime.min, f.ref)


def _daemon(key: str, files: list[AisLogFile]) -> AisDaemon:
    ordered: list[AisLogFile] = []
    for group in (
        [f for f in files if f.severity == "INFO"],
        [f for f in files if f.severity != "INFO"],
    ):
        group.sort(key=_sort_key)
        for i, f in enumerate(group):
            nxt = group[i + 1].start if i + 1 < len(group) else None
            ordered.append(replace(f, end=nxt if nxt is not None else f.last_record))
    roles = Counter(f.role for f in files)
    node_ids = [f.node_id for f in files if f.node_id]
    hosts = tuple(sorted({f.host for f in files if f.host}))
    versions = [f.version for f in ordered if f.version]
    zones = Counter(f.zone for f in files if f.zone)
    return AisDaemon(
        key=key,
        role=roles.most_common(1)[0][0],
        node_id=node_ids[0] if node_ids else None,
        hosts=hosts,
        version=versions[-1] if versions else None,
        files=tuple(ordered),
        zone=zones.most_common(1)[0][0] if zones else None,
    )

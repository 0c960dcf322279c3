"""AIStore daemon logs: file names, headers, record lines, hourly markers, stats lines, error patterns.

Pure functions and small frozen dataclasses over lines; nothing here opens a file (``analysis.ais_index`` does).
The formats are those of ``cmn/nlog`` (AIS >= 3.20) and of the AIS glog fork before it (<= 3.19); see
``ais_log_formats.md`` for the source references.

A record line is ``S HH:MM:SS.uuuuuu [file:line ]message``: severity ``I``/``W``/``E``, the daemon's LOCAL time of
day with no date, then the Go source tag (``file`` without ``.go`` in nlog, with it in glog), absent for the
"redacted" sources (stats lines, HTTP error responses). The date comes from the file header (``Started up at`` /
``Rotated at`` / glog ``Log file created at``) or, failing that, the file name's ``MMDD-HHMMSS`` plus a year from
elsewhere; :class:`AisFileParser` turns the time of day into an absolute local datetime, advancing the day when the
clock goes back by more than 12 hours and re-anchoring on the hourly ``DD Mon YY HH:MM ZONE =============`` marker.

INFO lines longer than 2 KiB are cut and lose their newline, so the next record is glued onto the same physical line:
:func:`split_glued_records` separates them.

All error/warning patterns worth naming live in :data:`AIS_ERROR_PATTERNS` (one place; the analyses and the timeline
use that table, never their own copies).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import NamedTuple

# ---------------------------------------------------------------------------------------------------------------------
# File names

LOG_FILE_NAME = re.compile(
    r"^(?P<prog>[A-Za-z0-9_\-]+)\.(?P<host>.+)\.(?P<sev>INFO|ERROR)\."
    r"(?P<mo>\d\d)(?P<d>\d\d)-(?P<h>\d\d)(?P<mi>\d\d)(?P<s>\d\d)\.(?P<pid>\d+)$"
)
"""nlog file name ``ais{target|proxy}.<host>.{INFO|ERROR}.MMDD-HHMMSS.<pid>`` (``cmn/nlog/nlog.go`` ``logfname``)."""

GLOG_FILE_NAME = re.compile(
    r"^(?P<prog>[A-Za-z0-9_\-]+)\.(?P<host>.+)\.(?P<user>[^.]+)\.log\.(?P<sev>INFO|WARNING|ERROR)\."
    r"(?P<y>\d{4})(?P<mo>\d\d)(?P<d>\d\d)-(?P<h>\d\d)(?P<mi>\d\d)(?P<s>\d\d)\.(?P<pid>\d+)$"
)
"""Legacy glog name (AIS <= 3.19): ``ais.ip-10-0-2-19.root.log.INFO.20180404-031540.2249``."""

CLI_LOG_NAME = re.compile(r"^ais(?P<role>target|proxy)-(?P<id>[A-Za-z0-9_\-]+?)(?P<archive>\.tar\.gz|\.tgz)?$")
"""What the ``ais`` CLI writes: ``aistarget-<ID>.tar.gz`` (``log get --all`` / ``log get cluster``: every INFO or
ERROR file of the node, flat member names) and ``aistarget-<ID>`` (``log get NODE DIR``: the current INFO log)."""

COMPRESSED_SUFFIXES = (".gz", ".zst", ".bz2", ".xz")
"""Suffixes a user (or logrotate) may have added to a daemon's log file; stripped before the name is parsed."""


@dataclass(frozen=True, repr=False, eq=False)
class AisLogName:
    """What an AIS log file name says about the file."""

    role: str
    """``target`` or ``proxy`` for ``aisnode`` files; the program name otherwise (``authn``, glog ``ais``)."""
    host: str
    """Host token: the short host name, cut at the first dot or to two dash-separated parts. NOT unique per pod."""
    severity: str
    """``INFO`` (all lines), ``ERROR`` (W and E lines only, duplicated from INFO) or glog ``WARNING``."""
    month: int
    day: int
    hour: int
    minute: int
    second: int
    pid: int
    """Process id; 1 in most containers, so a new process does not always mean a new pid."""
    year: int | None = None
    """Only legacy glog names carry a year."""
    legacy: bool = False
    """True for a glog (AIS <= 3.19) name."""

    def created(self, year: int | None = None) -> datetime | None:
        """Creation time (daemon local time) using the name's year or ``year``; None without a year or if invalid."""
        y = self.year if self.year is not None else year
        if y is None:
            return None
        try:
            return datetime(y, self.month, self.day, self.hour, self.minute, self.second)
        except ValueError:
            return None


def strip_compression_suffix(name: str) -> str:
    """``aistarget.h.INFO.0521-140000.1.gz`` -> ``aistarget.h.INFO.0521-140000.1``."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _role_of_program(prog: str) -> str:
    return prog[3:] if prog in ("aistarget", "aisproxy") else prog


def parse_log_name(name: str) -> AisLogName | None:
    """Parse a daemon log file's base name (nlog or legacy glog form), or None when it is not one."""
    name = strip_compression_suffix(name)
    m = LOG_FILE_NAME.match(name)
    if m:
        return AisLogName(
            role=_role_of_program(m["prog"]),
            host=m["host"],
            severity=m["sev"],
            month=int(m["mo"]),
            day=int(m["d"]),
            hour=int(m["h"]),
            minute=int(m["mi"]),
            second=int(m["s"]),
            pid=int(m["pid"]),
        )
    g = GLOG_FILE_NAME.match(name)
    if g:
        return AisLogName(
            role=_role_of_program(g["prog"]),
            host=g["host"],
            severity=g["sev"],
            month=int(g["mo"]),
            day=int(g["d"]),
            hour=int(g["h"]),
            minute=int(g["mi"]),
            second=int(g["s"]),
            pid=int(g["pid"]),
            year=int(g["y"]),
            legacy=True,
        )
    return None


@dataclass(frozen=True, repr=False, eq=False)
class AisCliName:
    """A file or directory named by the ``ais`` CLI after the node it came from."""

    role: str
    """``target`` or ``proxy``."""
    node_id: str
    """The node ID (the ``<ID>`` in ``t[<ID>]``)."""
    archive: bool
    """True for ``aistarget-<ID>.tar.gz`` (all of the node's files), False for ``aistarget-<ID>`` (current log)."""


def parse_cli_name(name: str) -> AisCliName | None:
    """Parse ``aistarget-<ID>.tar.gz`` / ``aisproxy-<ID>`` (also a directory a user extracted such an archive into)."""
    m = CLI_LOG_NAME.match(name)
    if not m:
        return None
    return AisCliName(role=m["role"], node_id=m["id"], archive=m["archive"] is not None)


# ---------------------------------------------------------------------------------------------------------------------
# Header and title

HEADER = re.compile(
    r"^(?P<kind>Started up|Rotated) at (?P<at>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d), host (?P<host>\S+), "
    r"(?P<go>go\S+) for (?P<platform>\S+)\s*$"
)
GLOG_HEADER = re.compile(r"^Log file created at: (?P<at>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)\s*$")
TITLE = re.compile(r"^Node (?P<kind>[pt])\[(?P<id>[^\]\s]+)\], (?:Version )?(?P<version>[^,\s]+)")
"""``Node t[hJkL0aBc], Version 4.1.8f3c2a1, build ...``: the title after ``Rotated at`` and the startup record."""

ROLE_OF_KIND = {"t": "target", "p": "proxy"}
KIND_OF_ROLE = {"target": "t", "proxy": "p"}


@dataclass(frozen=True, repr=False, eq=False)
class AisHeader:
    """The first line of a log file: the only place besides the hourly marker with a full date."""

    kind: str
    """``started`` (a new process: ``Started up at``), ``rotated`` (same process, new file: ``Rotated at``) or
    ``created`` (legacy glog ``Log file created at``, which does not say which)."""
    at: datetime
    """File creation time in the daemon's local time (no zone)."""
    host: str | None
    go_version: str | None
    platform: str | None


@dataclass(frozen=True, repr=False, eq=False)
class NodeTitle:
    """``Node t[ID], Version ...``: which node wrote the file."""

    role: str
    node_id: str
    version: str | None

    @property
    def name(self) -> str:
        """``t[ID]`` / ``p[ID]``, the way AIS names the node in its own lines."""
        return f"{KIND_OF_ROLE.get(self.role, '?')}[{self.node_id}]"


def _parse_ymd_hms(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y/%m/%d %H:%M:%S")
    except ValueError:
        return None


def parse_header(line: str) -> AisHeader | None:
    """Parse a file's first line (``Started up at ...`` / ``Rotated at ...`` / glog ``Log file created at: ...``)."""
    m = HEADER.match(line)
    if m:
        at = _parse_ymd_hms(m["at"])
        if at is None:
            return None
        kind = "started" if m["kind"] == "Started up" else "rotated"
        return AisHeader(kind=kind, at=at, host=m["host"], go_version=m["go"], platform=m["platform"])
    g = GLOG_HEADER.match(line)
    if g:
        at = _parse_ymd_hms(g["at"])
        return None if at is None else AisHeader(kind="created", at=at, host=None, go_version=None, platform=None)
    return None


def parse_title(text: str) -> NodeTitle | None:
    """Parse ``Node t[ID], Version X, ...`` (the header's title line or a startup record's message)."""
    m = TITLE.match(text)
    if not m:
        return None
    return NodeTitle(role=ROLE_OF_KIND[m["kind"]], node_id=m["id"], version=m["version"])


# ---------------------------------------------------------------------------------------------------------------------
# Record lines

RECORD = re.compile(
    r"^(?P<sev>[IWE]) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.(?P<us>\d{6}) "
    r"(?:(?P<src>[A-Za-z0-9_.\-]+):(?P<line>\d{1,9}) )?(?P<msg>.*)$",
    re.DOTALL,
)
"""One record: severity, local time of day, optional ``file:line`` source tag, message."""
RECORD_START = re.compile(r"[IWE] \d\d:\d\d:\d\d\.\d{6} ")
"""Where a record begins; found in the middle of a physical line when a 2 KiB-truncated INFO line lost its newline."""
GLUED_SCAN_MIN_CHARS = 512
"""Physical lines shorter than this are not searched for glued records (a truncated line is 2048 bytes long)."""

ROLLOVER_BACKSTEP_US = 12 * 3600 * 1_000_000
"""The clock going back by more than this (12 h) between records means a new day; smaller steps back are W/E lines
stamped a few microseconds before an I line that took the lock first."""


class RecordLine(NamedTuple):
    """A record as the line says it, before a date is attached (a named tuple: one is made per reported line)."""

    severity: str
    """``I``, ``W`` or ``E``."""
    clock_us: int
    """Local time of day in microseconds since midnight."""
    src: str | None
    """Go source tag (``shared_dm``; ``config.go`` in glog), None for redacted lines (stats, HTTP errors)."""
    src_line: int | None
    message: str


def split_glued_records(text: str) -> list[str]:
    """Split a physical line into the records glued onto it (usually just ``[text]``).

    nlog cuts INFO lines at 2 KiB and then has no room for the newline, so the next record follows on the same
    physical line: ``I 14:33:21.512204 {...,stream.out.siI 14:33:21.512230 /ais/mp1: used 41%``.
    """
    if len(text) < GLUED_SCAN_MIN_CHARS:
        return [text]
    starts = [m.start() for m in RECORD_START.finditer(text, 1)]
    if not starts:
        return [text]
    pieces: list[str] = []
    prev = 0
    for s in starts:
        pieces.append(text[prev:s])
        prev = s
    pieces.append(text[prev:])
    return pieces


def parse_record(text: str) -> RecordLine | None:
    """Parse one record (already split from any glued neighbour); None when ``text`` is not a record line."""
    # The cheap checks first: most physical lines of a log are records and this runs once per line.
    if len(text) < 18 or text[1] != " " or text[0] not in "IWE" or text[10] != "." or text[17] != " ":
        return None
    m = RECORD.match(text)
    if m is None:
        return None
    h, mi, s = int(m["h"]), int(m["mi"]), int(m["s"])
    if h > 23 or mi > 59 or s > 60:
        return None
    clock = ((h * 60 + mi) * 60 + s) * 1_000_000 + int(m["us"])
    line = m["line"]
    return RecordLine(
        severity=m["sev"],
        clock_us=clock,
        src=m["src"],
        src_line=int(line) if line is not None else None,
        message=m["msg"],
    )


# ---------------------------------------------------------------------------------------------------------------------
# Hourly marker

HOURLY_MARKER = re.compile(
    r"^(?P<d>\d\d) (?P<mon>[A-Z][a-z]{2}) (?P<y>\d\d) (?P<h>\d\d):(?P<mi>\d\d) (?P<zone>\S+) =============\s*$"
)
_MONTHS = {
    m: i + 1 for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))
}


@dataclass(frozen=True, repr=False, eq=False)
class HourlyMarker:
    """``21 May 26 15:00 UTC =============``, logged about once an hour by the stats runner (Go RFC822 format)."""

    at: datetime
    """Local date and time to the minute."""
    zone: str
    """Time-zone abbreviation of the daemon's local zone; a HINT only (``CST`` is China or US Central)."""


def parse_hourly_marker(message: str) -> HourlyMarker | None:
    """Parse the message of an hourly marker record, or None."""
    if not message.rstrip().endswith("="):
        return None
    m = HOURLY_MARKER.match(message)
    if m is None or m["mon"] not in _MONTHS:
        return None
    try:
        at = datetime(2000 + int(m["y"]), _MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]))
    except ValueError:
        return None
    return HourlyMarker(at=at, zone=m["zone"])


# ---------------------------------------------------------------------------------------------------------------------
# Stats lines

CUMULATIVE_NS_TOTALS = frozenset({"getbatch.rxwait.ns", "getbatch.throttle.ns"})
"""The two get-batch metrics that end in ``.ns`` but are cumulative totals (KindTotal), not per-tick latencies."""
RESTARTED_FLAG = 128
"""``state.flags`` bit ``NodeRestarted``: the target restarted without a clean shutdown (cleared after 10 h uptime)."""
STATE_FLAGS = "state.flags"


def is_cumulative(name: str) -> bool:
    """True for counters that only grow until a restart or reset: ``*.n``, ``*.size``, ``*.total`` (incl.
    ``*.ns.total``) and ``getbatch.rxwait.ns`` / ``getbatch.throttle.ns``. Latencies (``*.ns``), throughputs
    (``*.bps``) and ``state.flags`` are not."""
    return name.endswith((".n", ".size", ".total")) or name in CUMULATIVE_NS_TOTALS


@dataclass(frozen=True, repr=False, eq=False)
class StatsLine:
    """A periodic stats record ``{k:v,...}``: cumulative counters since process start plus per-tick averages.

    Zero values are omitted by AIS, so a missing key means 0, except after the cut of a truncated line: keys are
    written in byte order, so a key sorting after the last one read is unknown.
    """

    values: Mapping[str, int] = field(hash=False)
    complete: bool
    """False when the line was cut (no closing ``}``): only keys up to :attr:`known_through` are known."""
    known_through: str | None = None
    """For a cut line, the last (byte-order) key read in full; None for a complete line."""

    def get(self, name: str) -> int | None:
        """The value of ``name`` (0 when absent), or None when the line was cut before ``name`` could appear."""
        v = self.values.get(name)
        if v is not None:
            return v
        if self.complete or name.startswith("disk."):
            return 0
        if self.known_through is not None and name.encode() <= self.known_through.encode():
            return 0
        return None

    @cached_property
    def cumulative(self) -> frozenset[str]:
        """The names of its cumulative counters (:func:`is_cumulative`); found once, several passes compare them."""
        return frozenset(n for n in self.values if is_cumulative(n))

    @property
    def restarted_flag(self) -> bool:
        """``state.flags`` has the NodeRestarted bit (128)."""
        return bool(self.values.get(STATE_FLAGS, 0) & RESTARTED_FLAG)


def parse_stats(message: str) -> StatsLine | None:
    """Parse the message of a stats record (``{err.get.n:37,get.n:1284512,...}``), or None if it is not one.

    A line cut at 2 KiB (no ``}``) is accepted: its last, possibly cut, pair is dropped and the line is flagged.
    ``disk.*`` pairs (appended unsorted after the sorted part in AIS <= 4.2) do not count for the cut point.
    """
    if not message.startswith("{"):
        return None
    body = message.rstrip()
    complete = body.endswith("}")
    body = body[1:-1] if complete else body[1:]
    pairs = body.split(",") if body else []
    if not complete and pairs:
        pairs.pop()  # the value (or the name) of the last pair may be cut
    values: dict[str, int] = {}
    last_sorted: str | None = None
    for pair in pairs:
        name, sep, raw = pair.partition(":")
        if not sep or not name:
            return None
        try:
            values[name] = int(raw)
        except ValueError:
            return None
        if not name.startswith("disk."):
            last_sorted = name
    return StatsLine(values=values, complete=complete, known_through=None if complete else last_sorted)


# ---------------------------------------------------------------------------------------------------------------------
# Absolute times


class AisRecord(NamedTuple):
    """One record with its absolute local time and where it is.

    An immutable named tuple rather than a frozen dataclass: the parser makes one per log line it reports, and a
    tuple is several times cheaper to build.
    """

    at: datetime | None
    """Daemon local time (no zone), None when the file gave no date at all (no header, no name date, no marker)."""
    clock_us: int
    """The time of day the line itself states, in microseconds since local midnight."""
    line: int
    """1-based physical line number in the (decompressed) file."""
    severity: str
    """``I``, ``W`` or ``E``."""
    src: str | None
    """Go source tag, None for redacted lines (stats lines, HTTP error responses)."""
    src_line: int | None
    message: str
    glued: bool = False
    """The record shared its physical line with another one (2 KiB truncation)."""

    @property
    def text(self) -> str:
        """The record as written: ``W 14:32:07.118734 shared_dm:315 shared-dm: xid ...``."""
        return f"{self.severity} {clock_text(self.clock_us)} {self.body}"

    @property
    def body(self) -> str:
        """The record without severity and time: ``shared_dm:315 shared-dm: xid ...`` (what patterns match)."""
        if self.src is None:
            return self.message
        return f"{self.src}:{self.src_line} {self.message}"

    @property
    def is_stats(self) -> bool:
        """A periodic stats line (``{k:v,...}``, no source tag)."""
        return self.src is None and self.message.startswith("{")


def clock_text(clock_us: int) -> str:
    """``HH:MM:SS.uuuuuu`` for a time of day in microseconds."""
    seconds, micros = divmod(clock_us, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    return f"{hours:02d}:{mins:02d}:{sec:02d}.{micros:06d}"


def _clock_of(hms: str) -> int:
    """Microseconds since midnight of ``HH:MM:SS.uuuuuu`` (the 15 characters after the severity)."""
    return ((int(hms[0:2]) * 60 + int(hms[3:5])) * 60 + int(hms[6:8])) * 1_000_000 + int(hms[9:15])


class AisFileParser:
    """Turns one file's lines into :class:`AisRecord` objects with absolute local times.

    Reads the header (line 1; the glog header is 4 lines) and the title (line 2 after ``Rotated at``), then every
    record: glued records are split, the date advances when the clock goes back by more than 12 h, and an hourly
    marker re-anchors the date. What was learned about the file is kept in attributes (``header``, ``title``,
    ``zone``, ``first_at``, ``last_at``...).

    Speed matters (AIS keeps up to 512 MiB of logs per node): a line that is not reported costs a few slices and a
    string comparison; only reported lines are fully parsed.
    """

    def __init__(self, name: AisLogName | None = None, year_hint: int | None = None) -> None:
        """``name``: the parsed file name (its ``MMDD-HHMMSS`` is the fallback date); ``year_hint``: a year for a
        name without one when the file has no header (from the file's mtime)."""
        self.name = name
        self.year_hint = year_hint
        self.header: AisHeader | None = None
        self.title: NodeTitle | None = None
        """From the header's title line or the ``Node t[ID], Version`` startup record."""
        self.zone: str | None = None
        """Zone abbreviation from the last hourly marker (a hint)."""
        self.markers = 0
        self.date_source = "none"
        """``header``, ``file name``, ``file name + year hint``, ``hourly marker`` or ``none``."""
        self.records = 0
        self.stats_lines = 0
        self.glued_lines = 0
        self.other_lines = 0
        """Non-record, non-blank lines (headers, continuation lines of multi-line messages)."""
        self.chars = 0
        """Characters read, newlines included (decompressed size, for recognising copies of a file)."""
        self._midnight: datetime | None = None
        """Local midnight of the day the last record is on."""
        self._last_hms = ""
        """``HH:MM:SS.uuuuuu`` of the last record (string order is time order within a day)."""
        self._first: tuple[datetime, str] | None = None

    @property
    def first_at(self) -> datetime | None:
        """Time of the file's first dated record."""
        if self._first is None:
            return None
        midnight, hms = self._first
        return midnight + timedelta(microseconds=_clock_of(hms))

    @property
    def last_at(self) -> datetime | None:
        """Time of the file's last record (None before any dated record)."""
        if self._midnight is None or self._first is None:
            return None
        return self._midnight + timedelta(microseconds=_clock_of(self._last_hms))

    def _anchor(self, at: datetime, source: str) -> None:
        self._midnight = datetime.combine(at.date(), datetime.min.time())
        self._last_hms = f"{at:%H:%M:%S}.{at.microsecond:06d}"
        self.date_source = source

    def _start_without_header(self) -> None:
        if self.name is not None:
            created = self.name.created(self.year_hint)
            if created is not None:
                self._anchor(created, "file name" if self.name.year is not None else "file name + year hint")
                return
        self.date_source = "unknown"  # not retried on every line

    def _advance(self, hms: str) -> None:
        """Move the clock to ``hms``: a step back of more than 12 h is the next day."""
        if hms < self._last_hms and self._midnight is not None:
            try:
                back = _clock_of(self._last_hms) - _clock_of(hms)
            except ValueError:
                back = 0
            if back > ROLLOVER_BACKSTEP_US:
                self._midnight += timedelta(days=1)
        self._last_hms = hms
        if self._first is None and self._midnight is not None:
            self._first = (self._midnight, hms)

    def _reanchor(self, marker: HourlyMarker, hms: str) -> None:
        # The marker text is formatted just before the record is stamped: the stamp is the same minute or a bit later.
        midnight = datetime.combine(marker.at.date(), datetime.min.time())
        at = midnight + timedelta(microseconds=_clock_of(hms))
        if at < marker.at - timedelta(hours=12):
            midnight += timedelta(days=1)
        elif at > marker.at + timedelta(hours=12):
            midnight -= timedelta(days=1)
        self._midnight = midnight
        self._last_hms = hms
        if self._first is None:
            self._first = (midnight, hms)
        if self.date_source in ("none", "unknown", "file name + year hint"):
            self.date_source = "hourly marker"

    def _header_line(self, line_no: int, text: str) -> bool:
        """Consume a header or title line at the top of the file; True when ``text`` was one."""
        if self.header is None:
            header = parse_header(text)
            if header is not None:
                self.header = header
                self._anchor(header.at, "header")
                self.other_lines += 1
                return True
        elif line_no == 2 and self.header.kind == "rotated" and self.title is None:
            title = parse_title(text)
            if title is not None:
                self.title = title
                self.other_lines += 1
                return True
        return False

    def parse(self, lines: Iterable[tuple[int, str]], *, everything: bool = True) -> Iterator[AisRecord]:
        """Records of the file, in file order, from ``(line_number, text)`` pairs.

        ``everything=False`` reports only what the AIS analyses read (W/E lines, stats lines, hourly markers, the
        title record) while still tracking time and counts over every line: several times faster.
        """
        for line_no, text in lines:
            self.chars += len(text) + 1
            if line_no <= 4 and self.records == 0 and self._header_line(line_no, text):
                continue
            if not text:
                continue
            if len(text) >= GLUED_SCAN_MIN_CHARS:
                pieces = split_glued_records(text)
                if len(pieces) > 1:
                    self.glued_lines += 1
                    for piece in pieces:
                        rec = self._record(line_no, piece, True, everything)
                        if rec is not None:
                            yield rec
                    continue
            rec = self._record(line_no, text, False, everything)
            if rec is not None:
                yield rec

    def _record(self, line_no: int, text: str, glued: bool, everything: bool) -> AisRecord | None:
        if len(text) < 18 or text[1] != " " or text[10] != "." or text[17] != " " or text[0] not in "IWE":
            self.other_lines += 1
            return None
        hms = text[2:17]
        if self._midnight is None and self.date_source == "none":
            self._start_without_header()
        self.records += 1
        severity = text[0]
        stats = text[18:19] == "{"
        if stats:
            self.stats_lines += 1
        wanted = (
            everything or severity != "I" or stats or text.endswith("=") or (self.title is None and "Node " in text)
        )
        if not wanted:
            self._advance(hms)
            return None
        parsed = parse_record(text)
        if parsed is None:
            self.records -= 1
            self.other_lines += 1
            return None
        clock, src, message = parsed.clock_us, parsed.src, parsed.message
        marker = parse_hourly_marker(message) if src is not None and message.endswith("=") else None
        if marker is not None:
            self.zone = marker.zone
            self.markers += 1
            self._reanchor(marker, hms)
        else:
            self._advance(hms)
        if self.title is None and severity == "I" and message.startswith("Node "):
            self.title = parse_title(message)
        at = None if self._midnight is None else self._midnight + timedelta(microseconds=clock)
        return AisRecord(at, clock, line_no, severity, src, parsed.src_line, message, glued)


# ---------------------------------------------------------------------------------------------------------------------
# Error and warning patterns (the one place they are named)


@dataclass(frozen=True, repr=False, eq=False)
class AisPattern:
    """A named kind of AIS warning/error line."""

    name: str
    """Stable identifier used in results (``getbatch_out_of_bounds``)."""
    regex: str
    """Searched in the record body (``src:line message``, or the message of a redacted line)."""
    meaning: str
    """What it tells a person debugging a training job."""
    noise: bool = False
    """True for lines that are usually harmless on their own (keep-alive hiccups)."""


AIS_ERROR_PATTERNS: tuple[AisPattern, ...] = (
    # Order matters: the first match names a line (a shared-dm Rx failure that carries an out-of-bounds error is
    # the out-of-bounds event).
    AisPattern(
        "getbatch_out_of_bounds",
        r"x-get-batch.*out-of-bounds index",
        "batch GET lost objects during inter-target streaming (recv'd len=0: the work item had no Rx slots)",
    ),
    AisPattern(
        "shared_dm_broken_pipe",
        r"shared-dm.*terminated.*broken pipe",
        "inter-target data mover (shared-dm) stream broke: broken pipe",
    ),
    AisPattern(
        "shared_dm_xid_not_found",
        r"shared-dm: xid.*not found, dropping recv|shared-dm xid .* not found - dropping",
        "objects dropped: the batch job (xid) was already aborted when they arrived",
    ),
    AisPattern(
        "shared_dm_rx_failure",
        r"shared-dm Rx failure|shared-dm: xid .* recvObj \[err",
        "shared-dm receive failed for a batch job",
    ),
    AisPattern(
        "stream_terminated",
        r"\[[A-Za-z0-9_\-]+=>[A-Za-z0-9_\-]+\] terminated \[|retry timeout [a-z\-.]+\[",
        "intra-cluster stream terminated or gave up retrying",
    ),
    AisPattern(
        "stream_send_error",
        r"Error: [A-Za-z0-9_\-.]+\[[A-Za-z0-9_\-]+=>[A-Za-z0-9_\-]+\] \[",
        "an intra-cluster stream (shared-dm, ack, rebalance) failed to send to another target",
    ),
    AisPattern(
        "shared_dm_reconnect",
        r"reconnect/send: shared-dm|shared-dm: failed reconnecting to|closing shared-dm\[.*with errors",
        "shared-dm lost its connection to another target (the peer restarted or the network dropped)",
    ),
    AisPattern(
        "client_write_failed",
        r"write tcp .*(?:broken pipe|connection reset by peer)|client gone",
        "writing a response to a client failed: the client went away (counted in err.http.write.n)",
    ),
    AisPattern(
        "getbatch_rejected",
        r"rejected due to resource pressure|work item .* rejected|wid=.* rejected: pending",
        "batch GET refused with 429 (too many requests) because the target was under pressure",
    ),
    AisPattern(
        "resource_pressure_critical",
        r"load=critical",
        "target under critical resource pressure (see mem/cpu/dsk levels in the line)",
    ),
    AisPattern(
        "disk_critical",
        r"lcache.*hk.*critical|hk: \[ mem/cpu/disk:.*critical|hk: high system load|dsk=critical|disk: 4 ",
        "disk (or memory/CPU) at critical level; metadata-cache housekeeping skipped",
    ),
    AisPattern(
        "memory_pressure",
        r"free mem to OS|oom:\d+ free-mem|(?:extreme|high) memory pressure|gmm alert: "
        r"(?:oom|low memory)|dropping all caches",
        "memory pressure: forced GC / freeing memory to the OS, or an OOM / low-memory alert",
    ),
    AisPattern("cpu_alert", r"CPU utilization: (?:extremely )?high", "CPU utilization alert"),
    AisPattern("goroutines_alert", r"number of goroutines \d+ \((?:yellow|red) alert\)", "too many goroutines"),
    AisPattern(
        "disk_fault",
        r"FSHC|detected read/write errors|proceeding to disable|IO errors .* exceeded",
        "disk faults: the filesystem health checker found I/O errors",
    ),
    AisPattern(
        "keepalive_failure",
        r"failed to (?:fast|slow)-kalive|kalive.*(?:failed|timeout|retrying)",
        "a keep-alive between nodes failed (usually noise unless it keeps repeating)",
        noise=True,
    ),
    AisPattern(
        "http_error_response",
        r"^Err[A-Za-z]*: |: (?:GET|PUT|HEAD|POST|DELETE) /v1/",
        "an HTTP error response sent to a client",
    ),
)

_COMPILED_PATTERNS = tuple((p, re.compile(p.regex)) for p in AIS_ERROR_PATTERNS)


def classify_line(body: str) -> AisPattern | None:
    """The first pattern of :data:`AIS_ERROR_PATTERNS` that ``body`` matches, or None."""
    for pattern, rx in _COMPILED_PATTERNS:
        if rx.search(body):
            return pattern
    return None


_TEMPLATE_SUBS = (
    (re.compile(r"\b[pt]\[[A-Za-z0-9_\-]+\]"), "<node>"),
    (re.compile(r"\[[A-Za-z0-9_\-]{6,}(?:=>|<=)[A-Za-z0-9_\-]{6,}\]"), "[<a>=><b>]"),
    (re.compile(r"\"[^\"]*\""), '"<s>"'),
    (re.compile(r"\b\d+(?:\.\d+)+(?::\d+)?\b"), "<addr>"),
    (re.compile(r"\b[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\d+"), "N"),
)


def line_template(body: str) -> str:
    """``body`` with node names, quoted strings, addresses and numbers replaced, so repeats group together."""
    out = body
    for rx, repl in _TEMPLATE_SUBS:
        out = rx.sub(repl, out)
    return out

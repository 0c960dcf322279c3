"""The NCCL state table: every rank's watchdog state per process group, and who the straggler is.

One scan of the job (:func:`~debug_training_logs.analysis.inventory.scan_job`) selects candidate lines with the
literal needles of :mod:`debug_training_logs.formats.torch_nccl`; a :class:`NcclSink` in each worker parses only those
lines (re-joining hard-wrapped messages wherever the break fell, re-reading an over-long tqdm line's tail) and sends
back compact events, each cited at the physical line where its record starts. Timeouts repeated inside a
``watchdog thread terminated`` / ``what():`` / ``communicator was aborted`` message count when they are the only
record of a rank's timeout. Here the events become one row per (global rank, process group); a row whose line names
no PG (WorkNCCL before 2.14) joins the PG that a labelled line of the same rank and work names, or stays unlabelled.
Every PG is then classified from ALL its rows:

* ``straggler``: a rank's own lines say it never entered the collective the others wait in (enqueued == completed,
  or it only observed another rank's dump signal), or it logged no state for the PG while its whole log is present
  and every rank of a known world is in the logs;
* ``fabric``: two or more members, every member present, all entered the same collective and each detected its own
  timeout;
* ``root_ahead``: the PG's rank 0 (the broadcast root) is ahead of the others by k ops (compared with the ~3
  collectives a training step issues);
* ``mismatch``: ranks of one PG timed out in different collectives (SeqNum or OpType differ): not a fabric hang;
* ``mixed``: outliers in both directions or too many to call a straggler;
* ``incomplete``: the world size is not stated by evidence about the world, ranks are missing from the logs, members
  cannot be identified, or the rows name no PG: nothing is concluded from a subset (one node's file, a pasted
  excerpt, one rank's log).

SeqNums are compared only within one PG identity (GUID/name, else uid). The global rank comes from ``[rankN]:`` (or
the line's other attribution), never from the PG-local, possibly stale ``[Rank N]``; timeouts no line attributes are
reported per (SeqNum, OpType) with their PG-local ranks. Times are the workers' wall clock as written (no zone); the
year comes from a full date elsewhere in the logs, else the time is shown as ``MM-DD HH:MM:SS``; the nanosecond
fraction is monotonic and ignored.

Must not: open files other than through ``logs/`` (scan and the targeted re-read of wrapped lines), import ``mcp``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from debug_training_logs.analysis.inventory import (
    Inventory,
    LineKeep,
    PerFile,
    consumer_for,
    given_world_size_evidence,
    lean_inventory,
    missing_set,
    missing_text,
    scan_job,
)
from debug_training_logs.analysis.scan_cache import Consumer
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_patterns as tnp
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats import torch_nccl_wraps as tnw
from debug_training_logs.frozen import fast_positional
from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.logs.scan_patterns import literal_pattern
from debug_training_logs.logs.scan_types import MAX_LINE_CHARS
from debug_training_logs.ranges import format_ranges, parse_ranges
from debug_training_logs.textcut import TEXT_CUT, cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage

NCCL_PATTERNS: tuple[str, ...] = tuple(literal_pattern(n) for n in tnp.NEEDLES)
"""The scan patterns: the parser's literal needles, escaped."""

PER_STEP_COLLECTIVES = 3
"""Collectives a NeMo/Lightning DDP step issues on the default PG: PreemptionCallback broadcast + DDP allreduce +
broadcast_buffers. A root ``k`` ops ahead is ``k / 3`` steps ahead."""

DEFAULT_LIMIT = 64
"""Rows (and outliers) listed by default: all outlier/straggler rows first, then a sample of majority rows."""

MAX_EVIDENCE = 16
MAX_WRAP_PARTS = 8
"""A hard-wrapped message is re-joined from at most this many physical lines (a 450-character 2.5+ dump-signal line
wrapped at 80 columns takes 6)."""
MAX_UNPARSED_SAMPLES = 5
"""Unparsed watchdog-like lines kept per file as a sample (file:line and text), so a format we miss is visible."""


# ---------------------------------------------------------------------------------------------------------------------
# Worker side: the sink
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, repr=False)
class Hit:
    """One parsed candidate line, compact enough to cross the process boundary."""

    line: int
    """1-based number of the physical line the record starts on (the first piece of a hard-wrapped message)."""
    rank: int | None
    """Global rank from ``[rankN]:``, a Ray ``[rank=N]`` or an ``srun --label`` prefix; None when the line has none."""
    header: tnt.Header | None
    event: tnt.Event
    text: str
    """The physical line ``line`` as the file has it (ANSI removed), cut for citation: a citation always quotes a
    line that exists, also when the message was re-joined from several."""
    joined: int = 1
    """Physical lines the message spanned (2+ for a hard-wrapped message: lines ``line`` .. ``line + joined - 1``)."""


@dataclass(repr=False, eq=False)
class FileEvents:
    """What one file's sink found."""

    rel: str
    hits: list[Hit] = field(default_factory=list)
    unparsed: int = 0
    """Watchdog-like candidate lines that held no complete message of ours, even after re-joining neighbours."""
    unparsed_samples: list[tuple[int, str]] = field(default_factory=list)
    """(line, text) of the first few unparsed lines."""
    rejoined: int = 0
    """Messages re-joined from hard-wrapped pieces or re-read in full (over-long lines)."""
    deduplicated: int = 0
    """Watchdog lines Ray folded away (`` [repeated Nx across cluster]``: the sum of N)."""

    def add_unparsed(self, line_no: int, text: str) -> None:
        self.unparsed += 1
        if len(self.unparsed_samples) < MAX_UNPARSED_SAMPLES:
            self.unparsed_samples.append((line_no, cut(tn.strip_ansi(text))))


RAY_REPEATED = re.compile(r"\[repeated (\d+)x across cluster\]")
"""Ray's log deduplication marker: lines that differ only in numbers (ranks, SeqNums!) were folded into one."""


class NcclSink:
    """Parses the candidate lines of one file inside the scan worker (see :mod:`debug_training_logs.logs.scan`)."""

    def __init__(self, lf: LogFile) -> None:
        self.lf = lf
        self.out = FileEvents(lf.rel)
        self.pending: dict[int, str] = {}
        """Line number -> why it needs its neighbours (``head``/``tail``/``number``) or its full text (``long``)."""
        self.fragments: dict[int, Hit] = {}
        """Lines that parsed but may be a piece of a wrapped record: kept unless re-joining finds better."""
        self.texts: dict[int, str] = {}
        """Unparsed candidate lines (to sample them if re-joining fails too)."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        if "[repeated " in line:
            rep = RAY_REPEATED.search(line)
            if rep is not None:
                self.out.deduplicated += int(rep.group(1))
        p = tn.parse_line(line)
        if p is not None:
            hit = _hit(line_no, line, p)
            if not _stands_alone(p) and not tnw.starts_new_record(line):
                self.fragments[line_no] = hit  # maybe the tail of a wrapped record: its head has the start and rank
                self.pending[line_no] = "tail"
                return
            if tnw.maybe_cut_number(line, p):
                self.fragments[line_no] = hit  # maybe "... completed work: 46" + "117" on the next line
                self.pending[line_no] = "number"
                return
            self.out.hits.append(hit)
            return
        if len(line) >= MAX_LINE_CHARS:
            self.pending[line_no] = "long"
            self.texts[line_no] = line[:400]
            return
        if tn.is_benign(line):
            return
        # a piece of one of our messages (a wrap cut it), or a watchdog line we do not know: try joining first
        self.pending[line_no] = tnw.looks_cut(line) or "head"
        self.texts[line_no] = line[:400]

    def finish(self) -> FileEvents:
        if self.pending:
            self._repair()
        self.out.hits.sort(key=lambda h: h.line)
        return self.out

    def _repair(self) -> None:
        """Re-read the few lines around cut messages and parse the joined text (hard wraps, over-long lines)."""
        wanted: set[int] = set()
        for n, why in self.pending.items():
            if why == "long":
                wanted.add(n)
            else:
                wanted.update(range(max(1, n - MAX_WRAP_PARTS + 1), n + MAX_WRAP_PARTS))
        texts = lines_at(self.lf, wanted, keep_tail=MAX_LINE_CHARS)
        covered: set[int] = set()
        for h in self.out.hits:
            covered.update(range(h.line, h.line + h.joined))
        for n, why in sorted(self.pending.items()):
            if n in covered:
                continue
            if why == "long":
                p = tn.parse_line(texts.get(n, ""))
                if p is not None:
                    self.out.hits.append(_hit(n, texts[n], p))
                    self.out.rejoined += 1
                    covered.add(n)
                else:
                    self.out.add_unparsed(n, self.texts.get(n, ""))
                continue
            found = _join_around(n, texts)
            frag = self.fragments.get(n)
            if found is None or (frag is not None and found[0] == n and _rank_of(found) is None):
                if frag is not None:
                    self.out.hits.append(frag)
                    covered.add(n)
                elif tn.is_watchdog_like(self.texts.get(n, "")) or tnw.looks_cut(self.texts.get(n, "")):
                    self.out.add_unparsed(n, self.texts.get(n, ""))
                continue
            start, parts, p = found
            if start in covered:
                continue
            if len(parts) == 1 and frag is not None:
                self.out.hits.append(frag)  # nothing to join: the line stands alone
                covered.add(n)
                continue
            self.out.hits.append(_hit(start, parts[0], p, joined=len(parts), rank_text=tnw.join_wrapped(parts)))
            self.out.rejoined += 1
            covered.update(range(start, start + len(parts)))


def _stands_alone(p: tnt.Parsed) -> bool:
    """The ChildFailedError table rows: indented lines of their own, never a wrapped piece of a watchdog record."""
    return isinstance(p.event, _CHILD_ROWS)


_CHILD_ROWS: Final = (tnt.ChildFailureRank, tnt.ChildFailureExit, tnt.ChildFailureSignal)
"""The ChildFailedError row events (a tuple: ``isinstance`` reads it faster than a union)."""


def _rank_of(found: tuple[int, list[str], tnt.Parsed]) -> int | None:
    _start, parts, p = found
    return p.global_rank if p.global_rank is not None else line_rank(parts[0]).rank


def _hit(line_no: int, line: str, p: tnt.Parsed, joined: int = 1, rank_text: str | None = None) -> Hit:
    rank = p.global_rank
    if rank is None and not isinstance(p.event, _CHILD_ROWS):
        rank = line_rank(rank_text if rank_text is not None else line).rank
    return _new_hit(line_no, rank, p.header, p.event, cut(tn.strip_ansi(line)), joined)


_new_hit: Final = fast_positional(Hit)
"""``Hit(line, rank, header, event, text, joined)`` made once per parsed line (see :func:`positional`)."""


def _join_around(n: int, texts: dict[int, str]) -> tuple[int, list[str], tnt.Parsed] | None:
    """Re-join the hard-wrapped record holding line ``n``: (first line, pieces, parse), or None.

    The record starts at the nearest line at or before ``n`` that begins a record of its own (a c10 header, a
    ``[rankN]:``/launcher prefix, a ``what():`` ...); it ends at the first following line that completes the message,
    without crossing into the next record. When the parse ends in a number the next piece may continue (a wrap inside
    the final number of a 2.6+ status line), a following piece of digits only is taken too.
    """
    a = n
    for k in range(n, max(0, n - MAX_WRAP_PARTS), -1):
        t = texts.get(k)
        if t is None:
            break
        if tnw.starts_new_record(t):
            a = k
            break
    parts: list[str] = []
    for k in range(a, a + MAX_WRAP_PARTS):
        t = texts.get(k)
        if t is None or (k > a and tnw.starts_new_record(t)):
            break
        parts.append(t)
        if k < n:
            continue
        joined = tnw.join_wrapped(parts)
        parsed = tn.parse_line(joined)
        if parsed is None:
            continue
        nxt = texts.get(k + 1)
        if tnw.maybe_cut_number(joined, parsed) and nxt is not None and _DIGITS_ONLY.match(tn.strip_ansi(nxt)):
            longer = tn.parse_line(tnw.join_wrapped([*parts, nxt]))
            if longer is not None:
                return a, [*parts, nxt], longer
        return a, list(parts), parsed
    return None


_DIGITS_ONLY = re.compile(r"^\s*\d+\s*$")


# ---------------------------------------------------------------------------------------------------------------------
# Results (plain data; tools/nccl_state_table.py exposes them as pydantic models with descriptions)
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(repr=False)
class EvidenceLine:
    """A cited line (``models.Evidence`` in the tool's result)."""

    file: str
    line: int
    text: str


@dataclass(repr=False)
class Row:
    """One (global rank, process group) that logged NCCL watchdog state."""

    rank: int
    pg: str | None
    pg_desc: str | None
    pg_rank: int | None
    seq: int | None = None
    op_type: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    pending: int | None = None
    signal: str = "none"
    first_to_dump: bool = False
    """This rank is the job's first_dump_rank (the one whose dump signal the others reacted to) and detected here."""
    signalled_dump: bool = False
    """The rank logged 'First PG on this rank to signal dumping' (2.7+) / 'First watchdog to set the dump signal'
    (2.4) for this PG: its own watchdog raised the dump locally (every rank that timed out says so)."""
    dump_signal_from_rank: int | None = None
    timeout_time: str | None = None
    timeout_time_utc: str | None = None
    timeout_time_year_inferred: bool = False
    collective_start_time: str | None = None
    signal_time: str | None = None
    pg_id: str | None = None
    file: str | None = None
    line: int | None = None
    facts: list[str] = field(default_factory=list)
    stale_rank_label: int | None = None
    """The ``[Rank N]`` WorkNCCL printed when it differs from the PG rank (stale static, torch 2.4-2.13)."""


@dataclass(repr=False)
class Majority:
    """The (seq, enqueued, completed, op, signal) most of a PG's rows share, and which ranks."""

    seq: int | None
    op_type: str | None
    last_enqueued: int | None
    last_completed: int | None
    signal: str
    ranks: str
    count: int


@dataclass(repr=False)
class ProcessGroupResult:
    """One PG's verdict from all its rows (field meanings: ``tools/nccl_state_table.ProcessGroup``)."""

    pg: str | None
    pg_desc: str | None
    is_default_pg: bool
    ranks: str
    rank_count: int
    classification: str
    reason: str
    straggler_ranks: list[int] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)
    ahead_ranks: list[int] = field(default_factory=list)
    ahead_by: int | None = None
    ahead_steps: float | None = None
    absent_ranks: str = ""
    absent_pg_ranks: str = ""
    missing_ranks: str = ""
    majority: Majority | None = None
    pg_ids: list[str] = field(default_factory=list)
    straggler_reasons: dict[str, str] = field(default_factory=dict)
    """Per straggler/suspect rank: why, in words."""


@dataclass(repr=False)
class Outlier:
    """A row that differs from its PG's majority: ``differs`` maps field -> [its value, the majority's]."""

    rank: int
    pg: str | None
    differs: dict[str, list[Any]]
    how: str


@dataclass(repr=False)
class RankFact:
    """A neighbouring fact (watchdog terminated, heartbeat kill, exit signal ...) and the ranks that logged it."""

    kind: str
    detail: str
    ranks: str
    count: int
    evidence: EvidenceLine | None


@dataclass(repr=False)
class TimeBasis:
    """How the table's times read: worker-local wall clock, year from full dates elsewhere in the logs."""

    year: int | None
    year_inferred: bool
    zone: str
    year_evidence: str = ""
    """Where the year comes from (a line that writes a full date), or why times are shown without one."""


@dataclass(repr=False)
class UnattributedTimeout:
    """Timeouts whose global rank no line names (<= 2.2 output of several ranks in one file, no ``[rankN]:``)."""

    seq: int | None
    op_type: str
    timeout_ms: int
    pg_local_ranks: str
    """The ``[Rank N]`` values the lines print: PG-local ranks, equal to global ranks only in a single-PG job."""
    count: int
    evidence: EvidenceLine


def _add_unattributed(
    acc: dict[tuple[int | None, str], UnattributedTimeout],
    e: _Ev,
    w: tnt.WatchdogTimeout | tnt.BlockingWaitTimeout,
) -> None:
    key = (w.work.seq, w.work.op_type)
    u = acc.get(key)
    if u is None:
        u = acc[key] = UnattributedTimeout(
            w.work.seq, w.work.op_type, w.work.timeout_ms, "", 0, EvidenceLine(e.file, e.hit.line, e.hit.text)
        )
    u.count += 1
    if w.work_rank is not None:
        ranks = parse_ranges(u.pg_local_ranks) | {w.work_rank}
        u.pg_local_ranks = format_ranges(ranks)


FRAGMENT_LINES = 40
"""A file shorter than this is treated as a pasted excerpt: a rank missing from it proves nothing."""


def _whole_log_ranks(inv: Inventory) -> set[int]:
    """Ranks with at least one file that is more than an excerpt (their silence in it can be evidence)."""
    out: set[int] = set()
    for f in inv.files:
        if f.lines >= FRAGMENT_LINES:
            out |= f.ranks
    return out


def _time_basis(inv: Inventory) -> TimeBasis:
    zone = "worker-local wall clock as written (no zone in the lines); UTC not known from worker logs alone"
    if inv.year_hint is None:
        return TimeBasis(
            None,
            False,
            zone,
            "no line states a year: c10 times are shown as written (MM-DD HH:MM:SS), without one",
        )
    where = next(
        (f"{tp.file}:{tp.line}" for tp in (inv.start, inv.end) if tp is not None and tp.time.year == inv.year_hint),
        "a full date in the logs",
    )
    return TimeBasis(inv.year_hint, True, zone, f"year {inv.year_hint} from the full date at {where}")


@dataclass(repr=False)
class NcclTable:
    """The whole result of :func:`nccl_state_table`."""

    summary: str
    coverage: Coverage
    rows: list[Row]
    rows_total: int
    rows_truncated: int
    ranks_without_nccl_state: str
    missing_ranks: str
    process_groups: list[ProcessGroupResult]
    outliers: list[Outlier]
    outliers_truncated: int
    straggler_ranks: list[int]
    first_dump_rank: int | None
    rank_facts: list[RankFact]
    evidence: list[EvidenceLine]
    time_basis: TimeBasis
    message_families: list[str]
    unattributed_lines: int
    unattributed_timeouts: list[UnattributedTimeout]
    unparsed_samples: list[EvidenceLine]
    unparsed_lines: int
    rejoined_messages: int
    deduplicated_lines: int


# ---------------------------------------------------------------------------------------------------------------------
# Building rows
# ---------------------------------------------------------------------------------------------------------------------


class _Ev:
    """A hit with its file (parent side), its event and the timeout it reports (its own, or the one a
    watchdog-terminated / communicator-aborted line repeats), each found once: the table reads them several times per
    hit."""

    __slots__ = ("ev", "file", "hit", "timeout")

    def __init__(self, file: str, hit: Hit) -> None:
        self.file = file
        self.hit = hit
        ev = self.ev = hit.event
        self.timeout: tnt.WatchdogTimeout | tnt.BlockingWaitTimeout | None = None
        if type(ev) is tnt.WatchdogTerminated:
            self.timeout = ev.embedded
        elif type(ev) is tnt.WatchdogTimeout or type(ev) is tnt.BlockingWaitTimeout:
            self.timeout = ev

    def __repr__(self) -> str:
        return f"_Ev(file={self.file!r}, hit={self.hit!r})"


def _pg_key(pg: tnt.PGPrefix | None) -> str | None:
    return pg.key if pg is not None and pg.style != "rank" else None


@dataclass(repr=False, eq=False)
class _RowBuild:
    row: Row
    status: _Ev | None = None
    timeout: _Ev | None = None
    blocking: _Ev | None = None
    dump: _Ev | None = None
    observed: _Ev | None = None
    first: _Ev | None = None
    detected_evidence: bool = False
    observed_evidence: bool = False


class _TimeText:
    """Times of c10 headers (month/day, no year): with the year other lines of the job state, else as written."""

    LEAP = 2000
    """Year used only for arithmetic on year-less times (a leap year, so Feb 29 works); never shown."""

    def __init__(self, year: int | None) -> None:
        self.year = year
        self._seen: dict[tuple[int, int, str], datetime | None] = {}
        """Per wall-clock second written: its datetime (every rank's rows cite the same few seconds)."""
        self._texts: dict[datetime, str] = {}
        self._starts: dict[tuple[datetime, int], str | None] = {}

    def dt(self, h: tnt.Header | None) -> datetime | None:
        """A datetime for arithmetic (the LEAP year when the year is not known: format with :meth:`text`)."""
        wt = tn.wall_time(h)
        if wt is None:
            return None
        if wt not in self._seen:
            month, day, hms = wt
            try:
                self._seen[wt] = datetime.fromisoformat(f"{self.year or self.LEAP:04d}-{month:02d}-{day:02d}T{hms}")
            except ValueError:
                self._seen[wt] = None
        return self._seen[wt]

    def text(self, d: datetime | None) -> str | None:
        """ISO 8601 with the known year, or ``MM-DD HH:MM:SS`` as the log wrote it when no line states the year."""
        if d is None:
            return None
        known = self._texts.get(d)
        if known is None:
            known = self._texts[d] = (
                d.isoformat(timespec="seconds") if self.year is not None else d.strftime("%m-%d %H:%M:%S")
            )
        return known

    def began(self, end: datetime, span_ms: int) -> str | None:
        """:meth:`text` of when a collective that ran ``span_ms`` until a line written at ``end`` (to the second)
        started: the line says only the second, so its middle, minus the span, rounded to the second."""
        key = (end, span_ms)
        if key not in self._starts:
            began = end + timedelta(milliseconds=500) - timedelta(milliseconds=span_ms)
            self._starts[key] = self.text((began + timedelta(microseconds=500_000)).replace(microsecond=0))
        return self._starts[key]

    def iso(self, h: tnt.Header | None) -> str | None:
        return self.text(self.dt(h))


_CHILD_FAILURE = (tnt.ChildFailureRank, tnt.ChildFailureExit, tnt.ChildFailureSignal)


def _timeout_of(e: _Ev) -> tnt.WatchdogTimeout | tnt.BlockingWaitTimeout | None:
    """The timeout a hit's event reports (found when the :class:`_Ev` was made)."""
    return e.timeout


def _work_key(w: tnt.Work) -> tuple[int | None, str, int]:
    return (w.seq, w.op_type, w.timeout_ms)


def _rows_for_rank(rank: int, evs: list[_Ev]) -> list[_RowBuild]:
    """The rows of one rank from its lines (all of them, in file order), not yet filled (:func:`_fill`: the times
    need the job's year)."""
    builds: dict[str | None, _RowBuild] = {}

    def build(pg: tnt.PGPrefix | None, key: str | None) -> _RowBuild:
        """The row of ``pg`` (``key``: its :func:`_pg_key`)."""
        b = builds.get(key)
        if b is None:
            labelled = pg is not None and pg.style != "rank"
            b = builds[key] = _RowBuild(
                Row(
                    rank=rank,
                    pg=key,
                    pg_desc=pg.pg_desc if labelled else None,  # type: ignore[union-attr]
                    pg_rank=pg.pg_rank if labelled else None,  # type: ignore[union-attr]
                    pg_id=pg.pg_id if labelled and pg.style in ("uid", "guid") else None,  # type: ignore[union-attr]
                )
            )
        elif pg is not None and pg.style != "rank" and b.row.pg_desc is None and pg.pg_desc:
            b.row.pg_desc = pg.pg_desc
        return b

    # What this rank's labelled lines say per PG: the SeqNums of its status lines, the works of labelled timeouts
    # (2.14 WorkNCCL, or a 2.3+ "[PG ..] Process group watchdog thread terminated" wrapper): an unlabelled timeout
    # joins the PG they match, and stays unlabelled when none or several do.
    # One pass over the rank's hits collects these, the PG prefixes by key and the works of direct timeout lines, and
    # makes the rows of the state lines that carry their PG (1. below); the timeouts (2.) are placed after it.
    labelled_seqs: dict[str, set[int]] = {}
    labelled_works: dict[str, set[tuple[int | None, str, int]]] = {}
    pg_of_key: dict[str, tnt.PGPrefix] = {}
    direct: set[tuple[int | None, str, int]] = set()
    timed: list[_Ev] = []
    for e in evs:
        ev = e.ev
        kind = type(ev)
        pgp: tnt.PGPrefix | None = getattr(ev, "pg", None)  # (every event of the table has one, or None)
        k = pgp.key if pgp is not None and pgp.style != "rank" else None  # its _pg_key
        if k is not None:
            pg_of_key.setdefault(k, pgp)  # type: ignore[arg-type]
        # 1. state lines that carry their PG
        if kind is tnt.StatusLine:
            assert isinstance(ev, tnt.StatusLine)
            if k is not None:
                labelled_seqs.setdefault(k, set()).add(ev.seq)
            b = build(pgp, k)
            if b.status is None:
                b.status = e
            b.detected_evidence = True
        elif kind is tnt.WatchdogTimeout:
            assert isinstance(ev, tnt.WatchdogTimeout)
            direct.add(_work_key(ev.work))
        elif kind is tnt.DumpSignal:
            assert isinstance(ev, tnt.DumpSignal)
            b = build(pgp, k)
            if b.dump is None or (b.dump.hit.event.origin == "local" and ev.origin == "remote"):  # type: ignore[union-attr]
                b.dump = e
            if ev.origin == "local":
                b.detected_evidence = True
            else:
                b.observed_evidence = True
        elif kind is tnt.DumpObserved:
            assert isinstance(ev, tnt.DumpObserved)
            b = build(pgp, k)
            b.observed = b.observed or e
            b.observed_evidence = True
        elif kind is tnt.FirstToDump:
            assert isinstance(ev, tnt.FirstToDump)
            b = build(pgp, k)
            b.first = b.first or e
        w = e.timeout
        if w is not None:
            timed.append(e)
            # (k: the PG of the line, for a timeout line w is ev and w.pg its pg)
            if k is not None:
                labelled_works.setdefault(k, set()).add(_work_key(w.work))
                if w.work.seq is not None:
                    labelled_seqs.setdefault(k, set()).add(w.work.seq)

    def join_pg(w: tnt.Work) -> tnt.PGPrefix | None:
        by_work = [k for k, ws in labelled_works.items() if _work_key(w) in ws]
        if len(by_work) == 1:
            return pg_of_key.get(by_work[0])
        by_seq = [k for k, ss in labelled_seqs.items() if w.seq is not None and w.seq in ss]
        if len(by_work) == 0 and len(by_seq) == 1:
            return pg_of_key.get(by_seq[0])
        return None

    # 2. timeouts: WorkNCCL prints no PG (2.0-2.13): a labelled line of the same rank and work names it. The direct
    # timeout line is preferred; the copy inside a watchdog-terminated / aborted message counts when it is the only one.
    for e in timed:
        ev = e.ev
        w = e.timeout
        assert w is not None
        terminated = type(ev) is tnt.WatchdogTerminated
        if terminated and _work_key(w.work) in direct:
            continue
        pg = ev.pg if terminated and _pg_key(ev.pg) is not None else w.pg  # type: ignore[union-attr]
        if _pg_key(pg) is None:
            pg = join_pg(w.work)
        b = build(pg, _pg_key(pg))
        if type(w) is tnt.WatchdogTimeout:
            if b.timeout is None:
                b.timeout = e
        elif b.blocking is None:
            b.blocking = e
        b.detected_evidence = True
    return [b for b in builds.values() if b.status or b.timeout or b.blocking or b.dump or b.observed]


def _fill(b: _RowBuild, times: _TimeText) -> None:
    r = b.row
    work_ev = b.timeout or b.blocking
    if work_ev is not None:
        w = _timeout_of(work_ev)
        assert w is not None
        r.seq, r.op_type = w.work.seq, w.work.op_type
        r.numel_in, r.numel_out, r.timeout_ms = w.work.numel_in, w.work.numel_out, w.work.timeout_ms
        if isinstance(w, tnt.WatchdogTimeout):
            r.ran_for_ms = w.ran_for_ms
        if r.pg_rank is None and w.work_rank is not None and (work_ev.hit.header is None or
                                                              work_ev.hit.header.style != "c10_2.4+"):  # fmt: skip
            r.pg_rank = w.work_rank  # <= 2.3: [Rank N] is this PG's rank (no static cache yet)
        if r.pg_rank is not None and w.work_rank is not None and w.work_rank != r.pg_rank:
            r.stale_rank_label = w.work_rank
    if b.status is not None:
        s = b.status.ev
        assert isinstance(s, tnt.StatusLine)
        if r.seq is None:
            r.seq = s.seq
        r.last_enqueued, r.last_completed = s.last_enqueued, s.last_completed
    elif b.dump is not None:
        d = b.dump.ev
        assert isinstance(d, tnt.DumpSignal)
        r.last_enqueued, r.last_completed = d.last_enqueued, d.last_completed
    if r.last_enqueued is not None and r.last_completed is not None:
        r.pending = r.last_enqueued - r.last_completed
    if b.detected_evidence:
        r.signal = "detected"
    elif b.observed_evidence:
        r.signal = "observed"
    r.signalled_dump = b.first is not None
    if b.dump is not None and isinstance(b.dump.ev, tnt.DumpSignal) and b.dump.ev.origin == "remote":
        r.dump_signal_from_rank = b.dump.ev.from_rank
    when = work_ev or b.status
    if when is not None and (r.signal == "detected"):
        start = times.dt(when.hit.header)
        r.timeout_time = times.text(start)
        r.timeout_time_year_inferred = r.timeout_time is not None and times.year is not None
        span = r.ran_for_ms if r.ran_for_ms is not None else r.timeout_ms
        if start is not None and span is not None:
            r.collective_start_time = times.began(start, span)
    sig = b.observed or b.dump
    if sig is not None:
        r.signal_time = times.iso(sig.hit.header)
    cite = b.status or b.timeout or b.blocking or b.dump or b.observed
    if cite is not None:
        r.file, r.line = cite.file, cite.hit.line


# ---------------------------------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------------------------------


def _is_default(pg: str | None, desc: str | None, rows: list[Row]) -> bool:
    return pg == "0" or desc == "default_pg"


def _sig(r: Row) -> tuple[Any, ...]:
    return (r.seq, r.last_enqueued, r.last_completed, r.op_type, r.signal)


def _infer_members(rows: list[Row]) -> tuple[dict[int, int], list[int]]:
    """PG rank -> global rank for PG ranks missing between the logged ones, when the members form an arithmetic
    progression (Megatron's TP/DP/PP groups do); and the PG ranks that stay unresolved."""
    seen = {r.pg_rank: r.rank for r in rows if r.pg_rank is not None}
    if not seen:
        return {}, []
    gaps = [k for k in range(max(seen) + 1) if k not in seen]
    if not gaps:
        return {}, []
    pts = sorted(seen.items())
    if len(pts) >= 2:
        (p0, g0), (p1, g1) = pts[0], pts[1]
        stride, rem = divmod(g1 - g0, p1 - p0)
        if rem == 0 and stride != 0 and all(g == g0 + stride * (p - p0) for p, g in pts):
            return {k: g0 + stride * (k - p0) for k in gaps}, []
    return {}, gaps


@dataclass(frozen=True, repr=False, eq=False)
class _Coverage:
    """What the job's coverage allows the classification to conclude."""

    world: int | None
    """World size from evidence about the world (never a sub-communicator), or None."""
    inv_ranks: set[int]
    missing: set[int]
    silent: set[int]
    """Ranks in the logs that logged no NCCL state at all."""
    whole: set[int]
    """Ranks with at least one log file longer than a pasted fragment: their silence can mean something."""
    all_unlabelled: bool
    """No row of the job names its PG (torch <= 2.2, or only PG-less lines in the excerpt)."""

    @property
    def complete(self) -> bool:
        """Every rank of a known world is in the logs: only then can absence or 'everyone' be concluded."""
        return self.world is not None and not self.missing

    def why_not(self) -> str:
        if self.world is None:
            return (
                "no line states the world size (Lightning MEMBER k/N, WORLD_SIZE, SLURM_NTASKS, torchrun "
                "global_world_sizes, the world communicator's nranks), so ranks outside these logs could be members"
            )
        return f"ranks {format_ranges(self.missing)} of the {self.world} are missing from the logs (no file has them)"


def _classify(
    pg: str | None, desc: str | None, rows: list[Row], cov: _Coverage
) -> tuple[ProcessGroupResult, list[Outlier]]:
    unlabelled = pg is None
    # A job whose rows name no PG at all and sit in one collective: that is the default PG (torch <= 2.2 logs it so).
    one_collective = len({(r.seq, r.op_type) for r in rows if r.seq is not None}) <= 1
    is_default = _is_default(pg, desc, rows) or (unlabelled and cov.all_unlabelled and one_collective)
    ranks_here = {r.rank for r in rows}
    counts = Counter(_sig(r) for r in rows)
    major_sig, major_n = max(counts.items(), key=lambda kv: (kv[1], kv[0][4] == "detected"))
    major_rows = [r for r in rows if _sig(r) == major_sig]
    m_seq, m_e, m_c, m_op, m_signal = major_sig
    m_pending = (m_e - m_c) if m_e is not None and m_c is not None else None
    majority = Majority(m_seq, m_op, m_e, m_c, m_signal, format_ranges(r.rank for r in major_rows), major_n)

    # Who should be here but logged nothing for this PG: only where membership is known, never for unlabelled rows.
    absent_pg: list[int] = []
    absent: set[int] = set()
    absent_missing: set[int] = set()
    if is_default and cov.world is not None:  # every rank of the world is a member (no set of range(world))
        absent = {g for g in cov.inv_ranks if g < cov.world} - ranks_here
        absent_missing = cov.missing - ranks_here
    elif not unlabelled and not is_default:
        inferred, absent_pg = _infer_members(rows)
        absent = {g for g in inferred.values() if g in cov.inv_ranks}
        absent_missing = {g for g in inferred.values() if g not in cov.inv_ranks}

    outliers: list[Outlier] = []
    behind: dict[int, list[str]] = defaultdict(list)
    ahead: dict[int, list[str]] = defaultdict(list)
    elsewhere: dict[int, str] = {}
    names = ("seq", "last_enqueued", "last_completed", "op_type", "signal")
    for r in rows:
        s = _sig(r)
        if s == major_sig:
            continue
        differs = {n: [a, b] for n, a, b in zip(names, s, major_sig, strict=True) if a != b}
        how: list[str] = []
        pend = r.pending
        same_work = (
            r.seq is None or m_seq is None or (r.seq == m_seq and (r.op_type == m_op or None in (r.op_type, m_op)))
        )
        if pend == 0 and (m_pending or 0) > 0:
            how.append(f"enqueued == completed ({r.last_enqueued}): never entered the collective the others wait in")
            behind[r.rank].append(how[-1])
        if r.signal != "detected" and m_signal == "detected":
            src = f" from rank {r.dump_signal_from_rank}" if r.dump_signal_from_rank is not None else ""
            how.append(f"{r.signal} the dump signal{src} instead of detecting a timeout of its own")
            behind[r.rank].append(how[-1])
        if r.last_enqueued is not None and m_e is not None and same_work:
            if r.last_enqueued < m_e and not (pend == 0 and (m_pending or 0) > 0):
                how.append(f"behind: last enqueued {r.last_enqueued} < {m_e}")
                behind[r.rank].append(how[-1])
            elif r.last_enqueued > m_e:
                how.append(f"ahead: last enqueued {r.last_enqueued} > {m_e} by {r.last_enqueued - m_e}")
                ahead[r.rank].append(how[-1])
        elif not same_work:
            d = (r.seq or 0) - (m_seq or 0)
            where = f"SeqNum {r.seq} {r.op_type or ''}".strip()
            how.append(f"in a different collective: {where} vs {m_seq} {m_op or ''}".rstrip())
            elsewhere[r.rank] = where
            if r.seq is not None and m_seq is not None and d > 0:
                ahead[r.rank].append(f"ahead: timed out at SeqNum {r.seq} > {m_seq} by {d}")
        outliers.append(Outlier(r.rank, pg, differs, "; ".join(how) or "differs from the majority"))
    absent_usable = {g for g in absent if g in cov.whole} if cov.complete else set()
    for g in sorted(absent_usable):
        behind[g].append("logged no watchdog state for this PG while the others wait in it (its log is present)")

    res = ProcessGroupResult(
        straggler_reasons={str(g): ", ".join(why) for g, why in sorted(behind.items())},
        pg=pg,
        pg_desc=desc,
        is_default_pg=is_default,
        ranks=format_ranges(ranks_here),
        rank_count=len(ranks_here),
        classification="mixed",
        reason="",
        majority=majority,
        absent_ranks=format_ranges(absent | absent_missing),
        absent_pg_ranks=format_ranges(absent_pg),
        missing_ranks=format_ranges(cov.missing),
        pg_ids=sorted({r.pg_id for r in rows if r.pg_id is not None}),
    )
    label = f"PG {pg}" + (f" ({desc})" if desc else "") if pg is not None else "the process group"
    entered = f"SeqNum {m_seq} {m_op or ''}".strip() if m_seq is not None else "no failed work (this PG is idle)"
    state = (
        f"last enqueued {m_e} / completed {m_c}" if m_e is not None else "enqueued/completed not logged by this torch"
    )
    n_members = len(ranks_here | absent | absent_missing) + len(absent_pg)
    few = max(1, n_members // 4)
    root = [r for r in rows if r.rank in ahead and (r.pg_rank == 0 or (r.pg_rank is None and r.rank == 0))]
    positive = {g for g in behind if g not in absent_usable}

    if unlabelled and not is_default:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(positive)
        diff = f"; they are in {len({(r.seq, r.op_type) for r in rows})} different collectives" if elsewhere else ""
        res.reason = (
            f"{len(rows)} row(s) name no process group (the line has no PG prefix and no labelled line of the same "
            f"rank and work says which){diff}: they are compared only among themselves and no rank is called absent "
            "from a PG whose members are unknown."
        )
    elif not cov.complete:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(positive)
        sus = f"; among the ranks seen, {format_ranges(positive)} look(s) behind" if positive else ""
        odd = "; ".join(sorted(set(elsewhere.values())))
        mis = f"; ranks {format_ranges(elsewhere)} are in a different collective ({odd})" if elsewhere else ""
        res.reason = (
            f"{cov.why_not()}: a straggler among them cannot be ruled out, so none is named{sus}{mis}. "
            "Ask for every rank's (every node's) log file."
        )
    elif absent_pg:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(positive)
        res.reason = (
            f"PG rank(s) {format_ranges(absent_pg)} of {label} logged no state and their global ranks cannot be "
            f"inferred from the {len(rows)} member(s) that did ({entered}, {state})."
        )
    elif len(rows) == 1 and not absent_usable:
        r0 = rows[0]
        res.classification = "incomplete"
        res.reason = (
            f"only rank {r0.rank} (PG rank {r0.pg_rank}) logged state for {label} ({entered}, {state}, "
            f"{r0.signal}); its peer(s) logged nothing for this PG and are not named by the logs: one rank alone says "
            "nothing about the others. Compare with the other PGs' tables."
        )
    elif ahead and len(ahead) == 1 and root and not (set(behind) - set(ahead)):
        r0 = root[0]
        k = (r0.last_enqueued - m_e) if r0.last_enqueued is not None and m_e is not None else None
        if k is None and r0.seq is not None and m_seq is not None:
            k = r0.seq - m_seq
        res.classification = "root_ahead"
        res.ahead_ranks = [r0.rank]
        res.ahead_by = k
        res.ahead_steps = round(k / PER_STEP_COLLECTIVES, 2) if k is not None else None
        steps = (
            f" = {res.ahead_steps:g} training step(s) at ~{PER_STEP_COLLECTIVES} collectives per step "
            "(PreemptionCallback broadcast + DDP allreduce + broadcast_buffers)"
            if k is not None
            else ""
        )
        res.reason = (
            f"rank {r0.rank} (PG rank 0, the broadcast root) is {k} op(s) ahead of the other {major_n} "
            f"({r0.last_enqueued if r0.last_enqueued is not None else r0.seq} vs "
            f"{m_e if m_e is not None else m_seq})"
            f"{steps}: the root finished its side of collectives the others never reached."
        )
    elif elsewhere:
        res.classification = "mismatch"
        res.suspect_ranks = sorted(positive)
        res.ahead_ranks = sorted(ahead)
        res.reason = (
            f"ranks of {label} timed out in different collectives: {majority.ranks} at {entered}, "
            + "; ".join(f"rank {g} at {w}" for g, w in sorted(elsewhere.items()))
            + ". The ranks did not issue the same collective sequence (a code-path divergence or a mislabelled PG),"
            " not a fabric hang; look at what the odd rank(s) ran before."
        )
    elif behind and not ahead:
        if len(behind) <= few and len(behind) < n_members:
            res.classification = "straggler"
            res.straggler_ranks = sorted(behind)
            res.reason = "; ".join(f"rank {g}: {', '.join(why)}" for g, why in sorted(behind.items())) + (
                f". The other {major_n} rank(s) ({majority.ranks}) are at {entered}, {state}, signal {m_signal}."
            )
        else:
            res.classification = "mixed"
            res.suspect_ranks = sorted(behind)
            res.reason = f"{len(behind)} of {n_members} ranks differ from the majority: too many to call a straggler."
    elif ahead and behind:
        res.classification = "mixed"
        res.ahead_ranks = sorted(ahead)
        res.suspect_ranks = sorted(behind)
        res.reason = f"ranks ahead ({format_ranges(ahead)}) and behind ({format_ranges(behind)}) the majority."
    elif ahead:
        res.classification = "mixed"
        res.ahead_ranks = sorted(ahead)
        res.reason = f"rank(s) {format_ranges(ahead)} are ahead of the majority ({entered}) but not the root alone."
    else:
        if not is_default and cov.silent:
            res.classification = "incomplete"
            res.reason = (
                f"every rank that logged state for {label} is at {entered} ({state}), but ranks "
                f"{format_ranges(cov.silent)} logged no NCCL state at all and could be members that never entered."
            )
        elif absent or absent_missing:
            res.classification = "incomplete"
            res.reason = (
                f"every rank that logged state for {label} is at {entered} ({state}), but member(s) "
                f"{format_ranges(absent | absent_missing)} have no row and only short log excerpts."
            )
        elif m_signal == "detected" and (m_pending is None or m_pending > 0) and m_seq is not None and major_n >= 2:
            res.classification = "fabric"
            caveat = "" if m_pending is not None else " (this torch version does not log enqueued/completed)"
            res.reason = (
                f"all {major_n} ranks entered {entered} ({state}) and each detected its own timeout{caveat}: no "
                "straggler; the collective itself hung (NCCL/network/GPU fabric)."
            )
        else:
            res.classification = "mixed"
            res.reason = f"all {major_n} ranks report the same state ({entered}, {state}, {m_signal})."
    return res, outliers


# ---------------------------------------------------------------------------------------------------------------------
# Facts, evidence, summary
# ---------------------------------------------------------------------------------------------------------------------

_FACT_KINDS = {
    tnt.WatchdogTerminated: "watchdog_terminated",
    tnt.HeartbeatKill: "heartbeat_monitor_kill",
    tnt.FatalTerminate: "terminated_fatal",
    tnt.BlockingWaitTimeout: "blocking_wait_timeout",
    tnt.WatchdogExitMessage: "watchdog_exit_message",
}


def _fact_detail(ev: tnt.Event) -> str:
    if isinstance(ev, tnt.WatchdogTerminated):
        return f"{ev.wording} watchdog thread terminated with exception"
    if isinstance(ev, tnt.HeartbeatKill):
        return f"watchdog got stuck for {ev.seconds} seconds" if ev.seconds is not None else ev.kind
    if isinstance(ev, tnt.FatalTerminate):
        return f"Terminating the process ... due to {ev.reason}"
    if isinstance(ev, tnt.BlockingWaitTimeout):
        return f"{ev.work.op_type} SeqNum {ev.work.seq} timed out in blocking wait"
    if isinstance(ev, tnt.WatchdogExitMessage):
        return "exception from the local rank" if ev.from_rank is None else f"dump signal from rank {ev.from_rank}"
    return type(ev).__name__


def _child_exits(file_evs: list[_Ev]) -> list[tuple[int, str, _Ev]]:
    """(rank, 'SIGABRT (exitcode -6)', evidence) from the ChildFailedError tables of one file (rows in order)."""
    out: list[tuple[int, str, _Ev]] = []
    last_rank: tuple[int, int] | None = None
    for e in file_evs:
        ev = e.ev
        if isinstance(ev, tnt.ChildFailureRank):
            last_rank = (ev.rank, e.hit.line)
        elif isinstance(ev, tnt.ChildFailureExit) and last_rank is not None and e.hit.line == last_rank[1] + 1:
            sig = ev.signal or (_SIGNALS.get(-ev.exitcode) if ev.exitcode < 0 else None)
            detail = f"{sig} (exitcode {ev.exitcode})" if sig else f"exitcode {ev.exitcode}"
            out.append((last_rank[0], detail, e))
            last_rank = None
    return out


_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM", 11: "SIGSEGV", 7: "SIGBUS", 2: "SIGINT"}


_PG_CARRIERS = (tnt.StatusLine, tnt.DumpSignal, tnt.DumpObserved, tnt.FirstToDump, tnt.WatchdogTerminated)
"""Events whose prefix is the ProcessGroupNCCL one (WorkNCCL's ``[Rank N]`` says nothing about the version)."""


_STATUS_FAMILIES = {
    "failure_detected": "torch 2.6+ 'failure detected by watchdog'",
    "exception_detected": "torch 2.4-2.5 'Exception (either an error or timeout) detected'",
    "timeout_at": "torch 2.3-2.5 'Timeout at NCCL work'",
}
_HEADER_FAMILIES = {
    "c10_2.4+": "c10 header with time (torch 2.4+)",
    "c10_2.2-2.3": "c10 header [rankN]: no time (torch 2.2-2.3)",
    "c10_<=2.1": "c10 header without rank (torch <= 2.1)",
    "glog": "glog-native header",
}
_PREFIX_FAMILIES = {
    "rank": "[Rank N] prefix (torch <= 2.2)",
    "uid": "[PG n Rank N] or [PG name Rank N] prefix",
    "name": "[PG n Rank N] or [PG name (desc) Rank N] prefix (torch 2.3-2.4)",
    "guid": "[PG ID n PG GUID g(desc) Rank N] prefix (torch 2.5+)",
}


def _families(hits: Iterable[Hit]) -> list[str]:
    fams: set[str] = set()
    seen: set[tuple[type, str | None, str | None, str | None]] = set()
    for h in hits:
        ev = h.event
        # what the families below read of a hit; most hits repeat a few of these (one per kind of line per file)
        pgp = getattr(ev, "pg", None)
        key = (
            type(ev),
            getattr(ev, "family", None),
            h.header.style if h.header is not None else None,
            pgp.style if isinstance(pgp, tnt.PGPrefix) else None,
        )
        if key in seen:
            continue
        seen.add(key)
        if isinstance(ev, tnt.StatusLine):
            fams.add(_STATUS_FAMILIES[ev.family])
        elif isinstance(ev, tnt.DumpSignal):
            fams.add(f"torch {ev.family} dump-signal wording")
        if h.header is not None:
            fams.add(_HEADER_FAMILIES[h.header.style])
        pg = getattr(ev, "pg", None) if isinstance(ev, _PG_CARRIERS) else None
        if isinstance(pg, tnt.PGPrefix):
            fams.add(_PREFIX_FAMILIES[pg.style])
    return sorted(fams)


def _ev_evidence(e: _Ev) -> EvidenceLine:
    return EvidenceLine(e.file, e.hit.line, cut(e.hit.text, TEXT_CUT))


# ---------------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------------


def table_consumer() -> Consumer:
    """The consumer of the table's scan of a whole job (what :func:`nccl_state_table` scans for without ``keep``)."""
    return consumer_for(NCCL_PATTERNS, NcclSink)


def nccl_state_table(
    logs_dir: str | Path,
    limit: int = DEFAULT_LIMIT,
    files: Sequence[LogFile] | None = None,
    world_size: int | None = None,
    keep: LineKeep | None = None,
    early: Mapping[str, FileEvents] | None = None,
    prepared: Mapping[str, FilePrep] | None = None,
) -> NcclTable:
    """Scan every worker log under ``logs_dir`` once and build the NCCL state table (see the module docstring).

    ``world_size``: the job's world size as the caller knows it (the launch command), for logs that do not state it.
    ``keep``: only those lines (one attempt's, :mod:`~debug_training_logs.analysis.attempts`).
    ``early``: files' sink results (by file ``rel``) already unpacked from this same scan (the tool unpacks them
    while the scan's workers read the other files); the others are unpacked here. ``prepared``: files' :class:`FilePrep`
    (by file ``rel``) made likewise."""
    with lean_inventory():  # the table reads coverage, line counts and the year of the inventory, nothing else
        job = scan_job(logs_dir, NCCL_PATTERNS, NcclSink, files=files, keep=keep)
    per = PerFile(job, FileEvents)
    got = early or {}
    results = [
        fe if (fe := got.get(f.rel)) is not None else per[i] for i, f in enumerate(job.inventory.files[: len(per)])
    ]
    preps = [prepared.get(fe.rel) for fe in results] if prepared else None
    return build_table(results, job.inventory, job.coverage(), limit, world_size=world_size, prepared=preps)


class FilePrep:
    """What the table takes from one file's events before it needs the other files (:func:`build_table` merges these
    in file order): made as each file's result arrives while the scan's workers read the others, or in
    :func:`build_table`. ``single``: the file's one rank when the inventory gives it one (its lines without a rank are
    that rank's), else None."""

    __slots__ = ("builds", "facts", "families", "ranked", "ranked_works", "unranked")

    def __init__(self, fe: FileEvents, single: int | None = None) -> None:
        self.families: set[str] = set(_families(fe.hits))
        """The message families of its lines (:attr:`NcclTable.message_families`)."""
        self.facts: list[tuple[tuple[str, str], int, _Ev]] = []
        """((fact kind, detail), rank, line) in the order the table's facts are collected: the exit signals of its
        ChildFailedError tables (:func:`_child_exits`), then its lines' facts in file order."""
        self.ranked_works: set[tuple[int | None, str, int]] = set()
        """The works of the timeouts its ranked lines report."""
        self.ranked: dict[int, list[_Ev]] = {}
        """Its lines by rank (ranks in order of their first line, lines in file order)."""
        self.unranked: list[_Ev] = []
        """Its lines without a rank (when ``single`` is None), in file order."""
        facts: list[tuple[tuple[str, str], int, _Ev]] = []
        child: list[_Ev] = []
        rel = fe.rel
        for h in fe.hits:
            e = _Ev(rel, h)
            ev = e.ev
            if type(ev) in _CHILD_FAILURE:
                child.append(e)
                continue
            rank = h.rank
            w = e.timeout
            if rank is None:
                # (``what():  [PG ID 0 PG GUID 0(default_pg) Rank 7] ...`` is rank 7's, no ``[rank7]:`` before it)
                rank = single if single is not None else tn.default_pg_rank(h.text)
                if rank is None:
                    self.unranked.append(e)
                    continue
            elif w is not None:
                self.ranked_works.add(_work_key(w.work))
            got = self.ranked.get(rank)
            if got is None:
                self.ranked[rank] = [e]
            else:
                got.append(e)
            kind = _FACT_KINDS.get(type(ev))
            if kind is not None and not (type(ev) is tnt.WatchdogTerminated and ev.headerless):
                facts.append(((kind, _fact_detail(ev)), rank, e))
        if child:
            self.facts = [
                (("exit_signal", detail), exit_rank, ev_line) for exit_rank, detail, ev_line in _child_exits(child)
            ]
        self.facts += facts
        self.builds: dict[int, list[_RowBuild]] = {rank: _rows_for_rank(rank, evs) for rank, evs in self.ranked.items()}
        """Per rank of :attr:`ranked`: its rows from this file's lines alone (:func:`_rows_for_rank`), the rank's rows
        when no other file has lines of it; taken (removed) by the table that uses them, which fills them in."""


def build_table(
    results: Sequence[FileEvents],
    inv: Inventory,
    coverage: Coverage,
    limit: int,
    world_size: int | None = None,
    prepared: Sequence[FilePrep | None] | None = None,
) -> NcclTable:
    """The table from the sinks' events and the job inventory (pure; used by the tool and by ``diagnose``).
    ``prepared``: per file of ``results``, its :class:`FilePrep` made with no ``single`` rank as it arrived, or None
    (made here)."""
    if world_size is not None:
        given = given_world_size_evidence(inv, world_size)
        coverage = coverage.model_copy(update={"world_size": world_size, "world_size_evidence": given})
    times = _TimeText(inv.year_hint)
    by_rank: dict[int, list[_Ev]] = defaultdict(list)
    built: dict[int, list[_RowBuild] | None] = {}  # per rank: its rows from its one file's FilePrep, None if several
    unattributed = 0
    unattr: dict[tuple[int | None, str], UnattributedTimeout] = {}
    fact_map: dict[tuple[str, str], list[tuple[int, _Ev]]] = defaultdict(list)
    rank_tags: dict[int, list[str]] = defaultdict(list)
    families: set[str] = set()
    for i, fe in enumerate(results):
        file_ranks = inv.ranks_of_file(fe.rel)
        single = next(iter(file_ranks)) if len(file_ranks) == 1 else None
        prep = prepared[i] if prepared is not None else None
        if prep is None or (single is not None and prep.unranked):
            prep = FilePrep(fe, single)  # (its unranked lines are this single-rank file's rank's)
        families |= prep.families
        for fact, rank, e in prep.facts:
            fact_map[fact].append((rank, e))
        for rank, evs in prep.ranked.items():
            by_rank[rank].extend(evs)
            built[rank] = prep.builds.pop(rank, None) if rank not in built else None
        for e in prep.unranked:
            w = _timeout_of(e)
            if (
                isinstance(e.ev, tnt.WatchdogTerminated)
                and e.ev.headerless
                and (w is None or _work_key(w.work) in prep.ranked_works)
            ):
                continue  # the what(): copy of a timeout a ranked line already reported
            unattributed += 1
            if w is not None:
                _add_unattributed(unattr, e, w)
    for (kind, detail), items in fact_map.items():
        for rank, _ in items:
            tag = kind if kind != "exit_signal" else f"exit: {detail}"
            if tag not in rank_tags[rank]:
                rank_tags[rank].append(tag)

    builds: list[_RowBuild] = []
    for rank in sorted(by_rank):
        got = built.get(rank)
        builds.extend(got if got is not None else _rows_for_rank(rank, by_rank[rank]))
    for b in builds:
        _fill(b, times)
    rows = [b.row for b in builds]
    for r in rows:
        r.facts = list(rank_tags.get(r.rank, []))

    # Ranks the inventory attributed, plus every rank a candidate line of ours carried (srun labels, Ray prefixes).
    inv_ranks = set(inv.ranks) | set(by_rank) | {g for (_k, _d), items in fact_map.items() for g, _ in items}
    world = world_size if world_size is not None else inv.world_size
    missing = missing_set(world, inv_ranks)  # bounded: a stated world size of 10^8 must not cost a set of 10^8
    if inv_ranks != set(inv.ranks) or world_size is not None:
        coverage = coverage.model_copy(
            update={"ranks_found": format_ranges(inv_ranks), "missing_ranks": missing_text(world, inv_ranks)}
        )
    ranks_with_state = {r.rank for r in rows}
    silent = inv_ranks - ranks_with_state - missing
    cov = _Coverage(
        world=world,
        inv_ranks=inv_ranks,
        missing=missing,
        silent=silent,
        whole=_whole_log_ranks(inv),
        all_unlabelled=bool(rows) and all(r.pg is None for r in rows),
    )

    groups: dict[str | None, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.pg].append(r)
    pg_results: list[ProcessGroupResult] = []
    outliers: list[Outlier] = []
    for key in sorted(groups, key=lambda k: (k != "0", k is None, _natural(k))):
        grows = groups[key]
        desc = next((r.pg_desc for r in grows if r.pg_desc), None)
        res, outs = _classify(key, desc, grows, cov)
        pg_results.append(res)
        outliers.extend(outs)
    folded = sum(fe.deduplicated for fe in results)
    if folded:
        _mark_folded(pg_results, folded)

    stragglers = [] if folded or not cov.complete else _job_stragglers(pg_results, rows, missing)
    first_dump = _first_dump_rank(rows, by_rank)
    for r in rows:  # one meaning for "first to dump": the job's first_dump_rank, on the row(s) where it detected
        r.first_to_dump = first_dump is not None and r.rank == first_dump and r.signal == "detected"
    evidence = _evidence(builds, pg_results, stragglers, first_dump)
    facts = [
        RankFact(
            kind, detail, format_ranges(r for r, _ in items), len({r for r, _ in items}), _ev_evidence(items[0][1])
        )
        for (kind, detail), items in sorted(fact_map.items())
    ]
    kept, truncated = _limit_rows(rows, pg_results, outliers, limit)
    summary = _summary(pg_results, rows, stragglers, first_dump, silent, missing, coverage, folded)
    if unattr:
        if not rows:
            summary = summary.replace("(no collective timed out, or the logs stop before it)", "attributed to a rank")
        summary += " " + _unattributed_text(list(unattr.values()))
    unparsed_total = sum(fe.unparsed for fe in results)
    if unparsed_total:
        summary += (
            f" {unparsed_total} watchdog-like line(s) match no wording this tool knows (see unparsed_samples): "
            "read them before trusting the table."
        )
    return NcclTable(
        summary=summary,
        coverage=coverage,
        rows=kept,
        rows_total=len(rows),
        rows_truncated=truncated,
        ranks_without_nccl_state=format_ranges(silent),
        missing_ranks=missing_text(world, inv_ranks),
        process_groups=pg_results,
        outliers=outliers[:limit],
        outliers_truncated=max(0, len(outliers) - limit),
        straggler_ranks=stragglers,
        first_dump_rank=first_dump,
        rank_facts=facts,
        evidence=evidence,
        time_basis=_time_basis(inv),
        message_families=sorted(families),
        unattributed_lines=unattributed,
        unattributed_timeouts=sorted(unattr.values(), key=lambda u: (-u.count, u.seq or 0)),
        unparsed_samples=[EvidenceLine(fe.rel, n, t) for fe in results for n, t in fe.unparsed_samples][:MAX_EVIDENCE],
        unparsed_lines=sum(fe.unparsed for fe in results),
        rejoined_messages=sum(fe.rejoined for fe in results),
        deduplicated_lines=folded,
    )


def _mark_folded(pgs: list[ProcessGroupResult], folded: int) -> None:
    """Ray folded watchdog lines of several ranks into one: rows are missing for ranks that did log. No verdict that
    rests on who is absent can stand."""
    note = (
        f"Ray deduplicated {folded} watchdog line(s) ('[repeated Nx across cluster]': lines differing only in numbers, "
        "i.e. in rank and SeqNum, were folded), so ranks that logged state may have no row. Rerun with "
        "RAY_DEDUP_LOGS=0 (or read each worker's own log file) before naming a straggler. "
    )
    for p in pgs:
        if p.classification != "incomplete":
            p.suspect_ranks = sorted(set(p.suspect_ranks) | set(p.straggler_ranks))
            p.straggler_ranks = []
            p.classification = "incomplete"
        p.reason = note + p.reason


def _natural(k: str | None) -> tuple[int, str]:
    if k is None:
        return (0, "")
    return (int(k), "") if k.isdigit() else (1 << 30, k)


def _job_stragglers(pgs: list[ProcessGroupResult], rows: list[Row], missing: set[int]) -> list[int]:
    """Ranks at the root of the hang: stragglers of some PG that never detected a timeout of their own anywhere."""
    if missing or any(p.classification == "incomplete" and p.is_default_pg for p in pgs):
        return []
    cands = {g for p in pgs if p.classification == "straggler" for g in p.straggler_ranks}
    detected = {r.rank for r in rows if r.signal == "detected" and r.seq is not None}
    root = sorted(cands - detected)
    return root if root else sorted(cands)


def _first_dump_rank(rows: list[Row], by_rank: dict[int, list[_Ev]]) -> int | None:
    srcs = Counter(r.dump_signal_from_rank for r in rows if r.dump_signal_from_rank is not None)
    if srcs:
        return srcs.most_common(1)[0][0]
    for evs in by_rank.values():
        for e in evs:
            if isinstance(e.ev, tnt.WatchdogExitMessage) and e.ev.from_rank is not None:
                return e.ev.from_rank
    return None


def _evidence(
    builds: list[_RowBuild], pgs: list[ProcessGroupResult], stragglers: list[int], first: int | None
) -> list[EvidenceLine]:
    out: list[EvidenceLine] = []
    seen: set[tuple[str, int]] = set()

    def add(e: _Ev | None) -> None:
        if e is None or len(out) >= MAX_EVIDENCE:
            return
        k = (e.file, e.hit.line)
        if k not in seen:
            seen.add(k)
            out.append(_ev_evidence(e))

    focus = set(stragglers) | {g for p in pgs for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks}
    for b in builds:
        if b.row.rank in focus:
            add(b.observed)
            add(b.dump)
            add(b.status)
            add(b.timeout)
    for p in pgs:  # one majority row per PG
        if p.majority is None:
            continue
        for b in builds:
            if b.row.pg == p.pg and b.row.rank not in focus:
                add(b.status)
                add(b.timeout)
                break
    for b in builds:
        if b.row.rank == first:
            add(b.first)
            add(b.status)
    return out


def _limit_rows(
    rows: list[Row], pgs: list[ProcessGroupResult], outliers: list[Outlier], limit: int
) -> tuple[list[Row], int]:
    if len(rows) <= limit:
        return rows, 0
    keep_keys = {(o.rank, o.pg) for o in outliers}
    for p in pgs:
        for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks:
            keep_keys.add((g, p.pg))
    must = [r for r in rows if (r.rank, r.pg) in keep_keys][:limit]
    rest = [r for r in rows if (r.rank, r.pg) not in keep_keys]
    room = limit - len(must)
    sample: list[Row] = []
    if room > 0 and rest:
        per_pg: dict[str | None, list[Row]] = defaultdict(list)
        for r in rest:
            per_pg[r.pg].append(r)
        while len(sample) < room and any(per_pg.values()):
            for k in list(per_pg):
                if per_pg[k] and len(sample) < room:
                    sample.append(per_pg[k].pop(0))
    kept = sorted(must + sample, key=lambda r: (r.pg != "0", _natural(r.pg), r.rank))
    return kept, len(rows) - len(kept)


def _unattributed_text(items: list[UnattributedTimeout]) -> str:
    parts = [
        f"{u.count} in {u.op_type} SeqNum {u.seq if u.seq is not None else '?'} ([Rank {u.pg_local_ranks}], PG-local)"
        for u in sorted(items, key=lambda u: -u.count)[:3]
    ]
    return (
        f"TIMEOUTS WITHOUT A GLOBAL RANK: {sum(u.count for u in items)} watchdog timeout line(s) name no global rank "
        f"(several ranks in one file, no [rankN]: prefix): {'; '.join(parts)}. A collective did time out; split the "
        "output per rank (torchrun --log-dir / --tee, srun --label) to attribute it."
    )


def _pg_label(p: ProcessGroupResult) -> str:
    if p.pg is None:
        return "rows without a PG label"
    return f"PG {p.pg}" + (f" ({p.pg_desc})" if p.pg_desc else "")


def _summary(
    pgs: list[ProcessGroupResult],
    rows: list[Row],
    stragglers: list[int],
    first: int | None,
    silent: set[int],
    missing: set[int],
    coverage: Coverage,
    folded: int = 0,
) -> str:
    if not rows:
        base = "No NCCL watchdog state in these logs (no collective timed out, or the logs stop before it)."
        if missing:
            base += f" Ranks {format_ranges(missing)} are missing from the logs."
        return base
    parts: list[str] = []
    n_ranks = len({r.rank for r in rows})
    parts.append(f"{len(rows)} watchdog-state rows from {n_ranks} ranks in {len(pgs)} process group(s).")
    if missing:
        parts.append(
            f"INCOMPLETE: ranks {format_ranges(missing)} (world size {coverage.world_size}) are missing from every "
            "file; no straggler is named from a subset; ask for every node's log."
        )
    if folded:
        parts.append(
            f"INCOMPLETE: Ray folded {folded} watchdog line(s) ([repeated Nx across cluster]); rows of those ranks are "
            "hidden. Rerun with RAY_DEDUP_LOGS=0 or read the per-worker logs."
        )
    if stragglers:
        detail = []
        for g in stragglers:
            whys = [f"{_pg_label(p)}: {p.straggler_reasons[str(g)]}" for p in pgs if str(g) in p.straggler_reasons]
            detail.append(f"rank {g} ({'; '.join(whys) or 'logged no NCCL watchdog state at all'})")
        parts.append(
            "STRAGGLER: " + "; ".join(detail) + ". It never waited in a collective of its own: it was stuck outside "
            "NCCL (data loading, training loop); look at what it logged just before the others' collectives started."
        )
    shown = pgs if len(pgs) <= 3 else [p for p in pgs if p.is_default_pg]
    for p in shown:
        start = next((r.collective_start_time for r in rows if r.pg == p.pg and r.collective_start_time), None)
        tt = next((r.timeout_time for r in rows if r.pg == p.pg and r.timeout_time), None)
        when = f" Timeout logged at {tt}, collective started ~{start} (worker local time)." if tt else ""
        parts.append(f"{_pg_label(p)} [ranks {p.ranks}]: {p.classification.upper()}: {p.reason}{when}")
    if len(pgs) > 3:
        groups: dict[tuple[str, str], list[ProcessGroupResult]] = defaultdict(list)
        for p in pgs:
            if not p.is_default_pg:
                groups[(p.pg_desc or "PG", p.classification)].append(p)
        agg = []
        for (desc, cls), items in sorted(groups.items()):
            named = sorted({g for p in items for g in p.straggler_ranks})
            extra = f" (absent/behind ranks {format_ranges(named)}, each waiting elsewhere or stuck)" if named else ""
            agg.append(f"{len(items)} {desc} {cls}{extra}")
        parts.append("Other PGs (SeqNums compared only within each PG): " + "; ".join(agg) + ".")
    if first is not None:
        parts.append(f"Rank {first} set the dump signal first: usually a victim that timed out first, not the cause.")
    if silent and not stragglers:
        if coverage.world_size is not None and not missing:
            parts.append(f"Ranks {format_ranges(silent)} appear in the logs but logged no NCCL state: prime suspects.")
        else:
            parts.append(
                f"Ranks {format_ranges(silent)} appear in these files but logged no NCCL state here (suspects only if "
                "their whole logs are here)."
            )
    return " ".join(parts)

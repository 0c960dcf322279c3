"""Building the NCCL table's rows: one rank's lines (:class:`_Ev`) made into one row per process group
(:func:`_rows_for_rank`), filled in with times once the job's year is known (:func:`_fill`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from debug_training_logs.analysis.nccl_hits import Hit
from debug_training_logs.analysis.nccl_rows import Row
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_types as tnt


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
        wk = _work_key(w)
        by_work = [k for k, ws in labelled_works.items() if wk in ws]
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

"""PyTorch ProcessGroupNCCL watchdog / flight-recorder messages, torch 2.0-2.14: typed events from single lines.

Pure functions over one line of text (never a file). The scan selects candidate lines with the literal
:data:`~debug_training_logs.formats.torch_nccl_patterns.NEEDLES`;
:func:`parse_line` turns one candidate into a :class:`Parsed` (header + event) or None.

What the parser knows (worker_log_formats.md §0, §1, §7, §8):

* The c10 header is found **anywhere** in the line (Ray/srun/host/collector prefixes, tqdm glue, ANSI colour come
  first). Three styles: 2.4+ ``[rankN]:[E0521 08:02:12.123456789 file.cpp:689] `` (MMDD without zero padding,
  wall-clock seconds, a 9-digit CLOCK_MONOTONIC fraction that must never be used for ordering), 2.2-2.3
  ``[rankN]:[E file.cpp:537] `` and <=2.1 ``[E file.cpp:475] ``; the glog-native form is accepted too.
* Four process-group prefixes: ``[Rank N]`` (<=2.2), ``[PG uid Rank N]`` (2.3), ``[PG name (desc) Rank N]`` (2.4),
  ``[PG ID uid PG GUID guid(desc) Rank N]`` (2.5-2.14; the GUID may be a 40-hex hash, the desc any text).
  A PG's identity across ranks is its GUID/name when logged, else its uid (:attr:`PGPrefix.key`); SeqNums are only
  comparable within one identity.
* ``[Rank N]`` is always a **PG-local** rank and, in the WorkNCCL messages of 2.4-2.13, a stale cached value: it is
  kept as :attr:`WatchdogTimeout.work_rank` for the record and never used as the global rank. The global rank comes
  from ``[rankN]:`` (or the caller's attribution of the line).
* Hard-wrapped messages: :func:`parse_line` returns None for a cut message and
  :func:`~debug_training_logs.formats.torch_nccl_wraps.looks_cut` says so; the caller joins the neighbouring line(s)
  and parses the joined text (see :func:`~debug_training_logs.formats.torch_nccl_wraps.join_wrapped`).

The needles and regexes are in :mod:`~debug_training_logs.formats.torch_nccl_patterns`, the event types in
:mod:`~debug_training_logs.formats.torch_nccl_types`, the hard-wrap helpers in
:mod:`~debug_training_logs.formats.torch_nccl_wraps`; this module holds the parser and its memos.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Final

from debug_training_logs.formats.lazy_re import LazyPattern
from debug_training_logs.formats.prefixes import GLOBAL_RANK, GLOG_SECONDS, strip_ansi
from debug_training_logs.formats.torch_nccl_patterns import (
    _ABORTED,
    _BLOCKING,
    _CHILD_EXIT,
    _CHILD_RANK,
    _CHILD_SIGNAL,
    _DUMP,
    _DUMP_WORD,
    _EXIT_LOCAL,
    _EXIT_REMOTE,
    _FATAL,
    _FIRST,
    _GLOG,
    _HEADER,
    _HEADER_OPENING,
    _HEARTBEAT,
    _OBSERVED,
    _PG_PREFIX,
    _STATUS,
    _STATUS_WORD,
    _STUCK,
    _TEARDOWN,
    _TERMINATED,
    _TIMEOUT,
    _WATCHDOG_BENIGN,
    _WORK_FIELDS,
    _cut_timeout,
)
from debug_training_logs.formats.torch_nccl_types import (
    BlockingWaitTimeout,
    ChildFailureExit,
    ChildFailureRank,
    ChildFailureSignal,
    DumpObserved,
    DumpSignal,
    Event,
    FatalTerminate,
    FirstToDump,
    Header,
    HeartbeatKill,
    Parsed,
    PGPrefix,
    StatusLine,
    Teardown,
    WatchdogExitMessage,
    WatchdogTerminated,
    WatchdogTimeout,
    Work,
)
from debug_training_logs.frozen import positional as _positional

# --------------------------------------------------------------------------------------------------------------------
# Functions
# --------------------------------------------------------------------------------------------------------------------


# (positional constructors: about half the cost of the frozen __init__; the same objects)
_new_header: Final = _positional(Header)
_new_parsed: Final = _positional(Parsed)
_new_timeout: Final = _positional(WatchdogTimeout)
_new_status: Final = _positional(StatusLine)
_new_dump: Final = _positional(DumpSignal)
_new_first: Final = _positional(FirstToDump)
_new_teardown: Final = _positional(Teardown)
_new_fatal: Final = _positional(FatalTerminate)
_new_terminated: Final = _positional(WatchdogTerminated)


def find_header(text: str) -> tuple[Header | None, int]:
    """The first c10 (or glog-native) header anywhere in ``text`` and the offset where its message starts."""
    # Most headered lines open with it ("[rankN]:[E..."): a match there is the search's first match too.
    m = _HEADER.match(text) if text.startswith("[rank") else None
    if m is None:
        m = _HEADER.search(text) if _HEADER_OPENING.search(text) is not None else None
    if m is not None:
        grank_text, sev, mmdd, hms, _ns, src, srcline = m.groups()
        grank = int(grank_text) if grank_text is not None else None
        month: int | None
        day: int | None
        if mmdd is not None:
            month, day = divmod(int(mmdd), 100)
            style = "c10_2.4+"
            raw = f"{mmdd} {hms}"
        else:
            month = day = None
            style = "c10_2.2-2.3" if grank is not None else "c10_<=2.1"
            raw = None
        return _new_header(style, sev, month, day, hms, grank, f"{src}:{srcline}", raw), m.end()
    g = _GLOG.search(text) if GLOG_SECONDS.search(text) is not None else None
    if g is not None:
        month, day = divmod(int(g.group("mmdd")), 100)
        gr = GLOBAL_RANK.search(text, 0, g.start() + 1)
        return (
            Header(
                style="glog",
                severity=g.group("sev"),
                month=month,
                day=day,
                hms=g.group("hms"),
                global_rank=int(gr.group(1)) if gr else None,
                source=f"{g.group('src')}:{g.group('srcline')}",
                raw_time=f"{g.group('mmdd')} {g.group('hms')}",
            ),
            g.end(),
        )
    return None, 0


_SHARED_MAX = 4096
"""Distinct PG prefixes (and WorkNCCL records) a process keeps to hand out again (see :func:`_pg_from`)."""
_PG_SEEN: dict[str, PGPrefix] = {}
_WORK_SEEN: dict[str, Work | None] = {}


def _pg_from(m: re.Match[str]) -> PGPrefix:
    """The PG prefix ``m`` matched. The same prefix text gives the same object (its groups depend on the matched text
    alone: the regex has no look-around or anchor), so a file's lines share it: a rank writes its PG prefix on every
    line, and one object is pickled once per file result and rebuilt once when unpacked."""
    key = m.group(0)
    got = _PG_SEEN.get(key)
    if got is None:
        got = _pg_build(m)
        if len(_PG_SEEN) >= _SHARED_MAX:
            _PG_SEEN.clear()
        _PG_SEEN[key] = got
    return got


def _pg_build(m: re.Match[str]) -> PGPrefix:
    pg_id, guid, desc5, name, desc4, rank = m.group("id", "guid", "desc5", "name", "desc4", "rank")
    if pg_id is not None:
        return PGPrefix("guid", pg_id, guid, desc5 or None, int(rank))
    if name is not None:
        return PGPrefix("name", None, name, None if desc4 in (None, "", "undefined") else desc4, int(rank))
    return PGPrefix("rank", None, None, None, int(rank))


_BEFORE_SEEN: dict[str, PGPrefix | None] = {}
_UNSEEN: Final = object()
"""What the memos below answer for a text they do not hold (one lookup, safe if another thread empties them)."""
_SPAN_MAX = 256
"""Longest span before a message :func:`pg_prefix_before` keeps an answer for (a PG prefix and some blanks)."""


def pg_prefix_before(text: str, pos: int, start: int = 0) -> PGPrefix | None:
    """The PG prefix that ends right before ``text[pos]`` (only spaces between), searching from ``start``.

    A function of ``text[start:pos]`` alone (:data:`_PG_PREFIX` has no anchor or look-around, and the search stops
    at ``pos``), so the answer is kept per span: a rank writes the same prefix before each of its messages."""
    span = text[start:pos]
    kept = _BEFORE_SEEN.get(span, _UNSEEN)
    if kept is not _UNSEEN:
        return kept  # type: ignore[return-value]
    last: re.Match[str] | None = None
    for m in _PG_PREFIX.finditer(span):
        last = m
    got = None if last is None or span[last.end() :].strip() else _pg_from(last)
    if len(span) <= _SPAN_MAX:
        if len(_BEFORE_SEEN) >= _SHARED_MAX:
            _BEFORE_SEEN.clear()
        _BEFORE_SEEN[span] = got
    return got


_FIRST_SEEN: dict[str, PGPrefix | None] = {}


DEFAULT_PG_RANK: Final = re.compile(
    r"\[PG (?:ID 0 PG GUID 0(?:\(default_pg\))?|0(?: \(default_pg\))?) Rank (?P<r>\d+)\]"
)
"""The default PG's prefix (uid/name 0: created first; ``default_pg``): its rank is the global rank of the process that
wrote the line, whether or not a ``[rankN]:`` precedes it (2.3 ``[PG 0 Rank 5]``, 2.4 ``[PG 0 (default_pg) Rank 5]``,
2.5+ ``[PG ID 0 PG GUID 0(default_pg) Rank 5]``)."""


def default_pg_rank(text: str) -> int | None:
    """The global rank a line's default-PG prefix states (:data:`DEFAULT_PG_RANK`), else None."""
    m = DEFAULT_PG_RANK.search(text) if "[PG " in text else None
    return int(m.group("r")) if m else None


def parse_pg_prefix(text: str) -> PGPrefix | None:
    """The first PG prefix in ``text`` (``[PG ID 0 PG GUID 0(default_pg) Rank 6]`` ...), or None (kept per short
    ``text``, as in :func:`pg_prefix_before`)."""
    kept = _FIRST_SEEN.get(text, _UNSEEN)
    if kept is not _UNSEEN:
        return kept  # type: ignore[return-value]
    m = _PG_PREFIX.search(text)
    got = _pg_from(m) if m else None
    if len(text) <= _SPAN_MAX:
        if len(_FIRST_SEEN) >= _SHARED_MAX:
            _FIRST_SEEN.clear()
        _FIRST_SEEN[text] = got
    return got


def _int(v: str | None) -> int | None:
    return int(v) if v is not None else None


def _work(m: re.Match[str]) -> Work | None:
    """The WorkNCCL record of ``m`` (a function of its text: every rank of a collective shares one object)."""
    text = m.group("work")
    if text in _WORK_SEEN:
        return _WORK_SEEN[text]
    f = _WORK_FIELDS.search(text)
    got = None
    if f is not None:
        seq, op, nin, nout, shape, timeout = f.group("seq", "op", "nin", "nout", "shape", "timeout")
        got = Work(_int(seq), op, _int(nin), _int(nout), shape, int(timeout))
    if len(_WORK_SEEN) >= _SHARED_MAX:
        _WORK_SEEN.clear()
    _WORK_SEEN[text] = got
    return got


_TIMEOUT_SEEN: dict[str, WatchdogTimeout | None] = {}
_TIMEOUT_SEEN_MAX = 256
"""Timeout messages kept by :func:`_timeout_event` (a few ranks' worth: the copies of one come within a file)."""
_TIMEOUT_TEXT_MAX = 1024
"""Longest message text :func:`_timeout_event` keeps an answer for."""


def _timeout_event(text: str, start: int) -> WatchdogTimeout | None:
    """The timeout message in ``text[start:]`` (a function of that text alone: the search starts there and the PG
    prefix is looked for between ``start`` and the message). The watchdog repeats the message word for word in the
    ``watchdog thread terminated`` line and its ``what():`` copy, so the answer is kept for those."""
    rest = text[start:]
    kept = _TIMEOUT_SEEN.get(rest, _UNSEEN)
    if kept is not _UNSEEN:
        return kept  # type: ignore[return-value]
    got = _timeout_search(rest)
    if len(rest) <= _TIMEOUT_TEXT_MAX:
        if len(_TIMEOUT_SEEN) >= _TIMEOUT_SEEN_MAX:
            _TIMEOUT_SEEN.clear()
        _TIMEOUT_SEEN[rest] = got
    return got


def _timeout_search(text: str) -> WatchdogTimeout | None:
    m = _TIMEOUT.search(text)
    if m is None:
        return None
    work = _work(m)
    if work is None:
        return None
    pfx = pg_prefix_before(text, m.start())
    pg = pfx if pfx is not None and pfx.style != "rank" else None
    return _new_timeout(  # WatchdogTimeout(work, ran_for_ms, work_rank, pg, wait_path)
        work,
        int(m.group("ran")),
        pfx.pg_rank if pfx is not None else None,
        pg,
        m.group("which") == "Caught",
    )


def parse_message(text: str, start: int = 0) -> Event | None:
    """The event in ``text[start:]`` (the message part of a line), or None when it is none of ours or is cut.

    The quick ``in`` checks use words without spaces: a re-joined hard wrap may have lost the blank at the break."""
    # The watchdog-terminated wrapper embeds a timeout message: recognise the wrapper first.
    if "terminated" in text:
        t = _TERMINATED.search(text, start)
        if t is not None:
            embedded = _timeout_event(text, t.start("what"))
            if embedded is None and _cut_timeout(t.group("what")):
                return None  # the repeated timeout is cut (hard wrap): join the next line(s) first
            pfx = pg_prefix_before(text, t.start(), start)
            # WatchdogTerminated(wording, embedded, pg, headerless)
            return _new_terminated(t.group("which"), embedded, pfx, "what():" in text[: t.start()])
    if "aborted" in text:
        ab = _ABORTED.search(text, start)
        if ab is not None:
            embedded = _timeout_event(text, ab.start("what"))
            if embedded is None and _cut_timeout(ab.group("what")):
                return None
            return WatchdogTerminated(
                wording="communicator aborted",
                embedded=embedded,
                pg=None,
                headerless=True,
            )
    if "timeout" in text and "WorkNCCL(" in text:  # _TIMEOUT holds "WorkNCCL(" as written (outside _ws)
        ev = _timeout_event(text, start)
        if ev is not None:
            return ev
    if "blocking" in text:
        b = _BLOCKING.search(text, start)
        if b is not None:
            work = _work(b)
            if work is not None:
                pfx = pg_prefix_before(text, b.start(), start)
                return BlockingWaitTimeout(
                    work=work,
                    work_rank=pfx.pg_rank if pfx is not None else None,
                    pg=pfx if pfx is not None and pfx.style != "rank" else None,
                )
    if "work" in text:
        for family, rx in _STATUS:
            if _STATUS_WORD[family] not in text:
                continue
            s = rx.search(text, start)
            if s is not None:
                seq, e, c = s.group("seq", "e", "c")
                # StatusLine(family, seq, last_enqueued, last_completed, pg)
                return _new_status(family, int(seq), int(e), int(c), _status_prefix(text, s.start(), start))
    if "Received" in text:
        for origin, family, rx in _DUMP:
            if _DUMP_WORD[family] not in text:
                continue
            d = rx.search(text, start)
            if d is not None:
                return _new_dump(  # DumpSignal(origin, from_rank, last_enqueued, last_completed, family, pg)
                    origin,
                    _int(d.groupdict().get("r")),
                    int(d.group("e")),
                    int(d.group("c")),
                    family,
                    pg_prefix_before(text, d.start(), start),
                )
    if "signal" in text:
        for family, orx in _OBSERVED:
            o = orx.search(text, start)
            if o is not None:
                return DumpObserved(family=family, pg=pg_prefix_before(text, o.start(), start))
        for family, frx in _FIRST:
            f1 = frx.search(text, start)
            if f1 is not None:
                return _new_first(family, pg_prefix_before(text, f1.start(), start))  # FirstToDump(family, pg)
    if "stuck" in text:
        st = _STUCK.search(text, start)
        if st is not None:
            return HeartbeatKill("stuck", int(st.group("s")), pg_prefix_before(text, st.start(), start))
    if "eartbeat" in text or "monitor" in text:
        for kind, hrx in _HEARTBEAT:
            h = hrx.search(text, start)
            if h is not None:
                return HeartbeatKill(kind, None, pg_prefix_before(text, h.start(), start))
    if "Terminating" in text:
        f = _FATAL.search(text, start)
        if f is not None:
            # FatalTerminate(reason, pg)
            return _new_fatal(" ".join(f.group("why").split()), parse_pg_prefix(text[start : f.start()]))
    if "NCCL" in text or "inconsistency" in text:
        for kind, trx in _TEARDOWN:
            td = trx.search(text, start)
            if td is not None:
                return _new_teardown(kind, pg_prefix_before(text, td.start(), start))  # Teardown(kind, pg)
    if "detected" in text:
        if _EXIT_LOCAL.search(text, start):
            return WatchdogExitMessage(from_rank=None)
        x = _EXIT_REMOTE.search(text, start)
        if x is not None:
            return WatchdogExitMessage(from_rank=int(x.group("r")))
    return _child_failure(text[start:])


def _status_prefix(text: str, pos: int, start: int) -> PGPrefix | None:
    # 2.6+ writes " failure detected ..." after the prefix and its space: allow the extra blank.
    return pg_prefix_before(text, pos, start)


def _child_failure(text: str) -> Event | None:
    if "(local_rank: " in text:
        r = _CHILD_RANK.search(text)
        if r is not None:
            return ChildFailureRank(rank=int(r.group("rank")), local_rank=int(r.group("local")))
    if "exitcode" in text:
        x = _CHILD_EXIT.search(text)
        if x is not None:
            return ChildFailureExit(exitcode=int(x.group("code")), pid=int(x.group("pid")), signal=x.group("sig"))
    s = _CHILD_SIGNAL.search(text)
    if s is not None:
        return ChildFailureSignal(signal=s.group("sig"), pid=int(s.group("pid")))
    return None


_ABSURD_NUMBER = LazyPattern(r"\d{40,}")
"""A digit run no field of ours can hold (SeqNums, counts and ranks fit in 64 bits: at most 20 digits). Python's
``int()`` refuses more than 4,300 digits, and big ones cost quadratic time, so such runs never reach a number group."""


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_FORTY_DIGITS = b"0" * 40


def _text(line: str) -> str:
    """A line as the parsers read it: ANSI colour removed, absurdly long digit runs replaced by ``#``.

    An ASCII line (nearly all) is checked for such a run with a byte table instead of the regex (``\\d`` is then
    ``[0-9]``, so "40 zeros in a row once every digit is 0" is the same test, at memory speed)."""
    text = strip_ansi(line)
    if text.isascii() and (len(text) < 40 or _FORTY_DIGITS not in text.encode("ascii").translate(_ZERO_DIGITS)):
        return text
    return _ABSURD_NUMBER.sub("#", text)


def parse_line(line: str) -> Parsed | None:
    """Parse one candidate line (any prefixes, ANSI colour, tqdm glue); None when it holds none of our messages.

    A line cut by a hard wrap also gives None: check :func:`looks_cut` and parse the joined text instead.
    """
    text = _text(line)
    if "\r" in text:  # tqdm redraws: the message is after the last carriage return that precedes it
        text = _after_last_cr(text)
    header, start = find_header(text)
    ev = parse_message(text, start)
    if ev is None:
        return None
    if header is not None and header.style == "c10_2.2-2.3":
        ev = _as_uid(ev)
    grank = header.global_rank if header is not None else None
    if grank is None:
        g = GLOBAL_RANK.search(text)
        grank = int(g.group(1)) if g else None
    return _new_parsed(header, grank, ev)


def _as_uid(ev: Event) -> Event:
    """torch 2.3 prints ``[PG <uid> Rank N]``, which reads like 2.4's ``[PG <name> Rank N]``: the header style
    (no time: 2.2-2.3) says it is a uid (a per-process counter, not a cross-rank name)."""
    pg = getattr(ev, "pg", None)
    if isinstance(pg, PGPrefix) and pg.style == "name":
        return replace(ev, pg=PGPrefix("uid", pg.pg_name, None, pg.pg_desc, pg.pg_rank))  # type: ignore[arg-type]
    return ev


def _after_last_cr(text: str) -> str:
    h = _HEADER.search(text)
    cut = text.rfind("\r", 0, h.start()) if h is not None else text.rfind("\r")
    return text[cut + 1 :] if cut >= 0 else text


def is_benign(line: str) -> bool:
    """A candidate line that is known noise: a C++ stack frame naming the watchdog, env-var advice."""
    return any(b in line for b in _WATCHDOG_BENIGN)


def is_watchdog_like(line: str) -> bool:
    """A candidate line that talks about the NCCL watchdog but is none of our messages (a format we do not know),
    as opposed to known noise (C++ stack frames, env-var advice) or another program's 'watchdog'."""
    text = _text(line)
    if any(b in text for b in _WATCHDOG_BENIGN):
        return False
    return "NCCL" in text or "WorkNCCL" in text or find_header(text)[0] is not None


def wall_time(header: Header | None) -> tuple[int, int, str] | None:
    """``(month, day, "HH:MM:SS")`` of a header, for ordering by wall clock only (never the monotonic fraction)."""
    if header is None or header.month is None or header.day is None or header.hms is None:
        return None
    return header.month, header.day, header.hms

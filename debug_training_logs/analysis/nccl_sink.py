"""The NCCL table's worker side: the scan patterns and the :class:`NcclSink` that parses one file's candidate lines
(re-joining hard-wrapped messages, re-reading over-long lines) into
:class:`~debug_training_logs.analysis.nccl_hits.Hit` s."""

from __future__ import annotations

import re
from typing import Final

from debug_training_logs.analysis.nccl_hits import FileEvents, Hit
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_patterns as tnp
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.formats import torch_nccl_wraps as tnw
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.frozen import positional
from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.logs.scan_patterns import literal_pattern
from debug_training_logs.logs.scan_types import MAX_LINE_CHARS
from debug_training_logs.textcut import cut

NCCL_PATTERNS: tuple[str, ...] = tuple(literal_pattern(n) for n in tnp.NEEDLES)
"""The scan patterns: the parser's literal needles, escaped."""

MAX_WRAP_PARTS = 8
"""A hard-wrapped message is re-joined from at most this many physical lines (a 450-character 2.5+ dump-signal line
wrapped at 80 columns takes 6)."""


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
    return isinstance(p.event, CHILD_FAILURE_EVENTS)


CHILD_FAILURE_EVENTS: Final = (tnt.ChildFailureRank, tnt.ChildFailureExit, tnt.ChildFailureSignal)
"""The ChildFailedError row events (a tuple: ``isinstance`` reads it faster than a union)."""


def _rank_of(found: tuple[int, list[str], tnt.Parsed]) -> int | None:
    _start, parts, p = found
    return p.global_rank if p.global_rank is not None else line_rank(parts[0]).rank


def _hit(line_no: int, line: str, p: tnt.Parsed, joined: int = 1, rank_text: str | None = None) -> Hit:
    rank = p.global_rank
    if rank is None and not isinstance(p.event, CHILD_FAILURE_EVENTS):
        rank = line_rank(rank_text if rank_text is not None else line).rank
    return _new_hit(line_no, rank, p.header, p.event, cut(strip_ansi(line)), joined)


_new_hit: Final = positional(Hit)
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
        if tnw.maybe_cut_number(joined, parsed) and nxt is not None and _DIGITS_ONLY.match(strip_ansi(nxt)):
            longer = tn.parse_line(tnw.join_wrapped([*parts, nxt]))
            if longer is not None:
                return a, [*parts, nxt], longer
        return a, list(parts), parsed
    return None


_DIGITS_ONLY = re.compile(r"^\s*\d+\s*$")

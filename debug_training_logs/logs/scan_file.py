"""Scanning one file (:func:`_scan_one`): its windows searched in pieces, hits handed to its sink, counts, caps, dense
samples, head, tail, ranks and checkpoints; and what a scan's files share (:class:`ScanSearch`).
"""

from __future__ import annotations

import functools
import mmap
import os
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import cast

from debug_training_logs.formats.prefixes import MAX_RANK_DIGITS
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import ReadProblems, decode
from debug_training_logs.logs.scan_budget import _run_fallback, _search
from debug_training_logs.logs.scan_dense import _collect_ranks, _Dense, _dense
from debug_training_logs.logs.scan_engines import _UNANCHORED
from debug_training_logs.logs.scan_matcher import _Bulk, _hits_in_chunk, _Matcher, _matcher
from debug_training_logs.logs.scan_types import (
    MAX_LINE_CHARS,
    Buffer,
    BulkTaker,
    Checkpoints,
    FileScan,
    PatternSpec,
    Plan,
    Sink,
    SinkFactory,
)
from debug_training_logs.logs.scan_windows import _file_stamp, _spans

DENSE_HEAD_HITS = 64
"""Hits of a dense pattern delivered in full at the start of each file (every rank's first ones)."""


DENSE_TAIL_MAX = 8 << 20
"""How far back from a file's end the tail of a dense pattern is looked for (each rank's last hit)."""


MAX_ACTIVE_SETS = 64
"""Searches one scan keeps by active set (capped patterns leave the search in a different order in each file)."""


class ScanSearch:
    """What the files of one scan share: its patterns and plan, the search of each set of patterns still active (made
    when a file first needs it) and the dense patterns' search. The scan makes one; a forked worker fills its own
    copy as it reads its files."""

    __slots__ = ("dense", "matchers", "plan", "spec")

    def __init__(self, spec: PatternSpec, plan: Plan) -> None:
        self.spec = spec
        self.plan = plan
        self.matchers: dict[frozenset[int], _Matcher] = {}
        self.dense: _Dense | None = _dense(spec, plan) if plan.dense else None

    def matcher(self, active: frozenset[int]) -> _Matcher:
        """The search for the patterns of ``active``."""
        m = self.matchers.get(active)
        if m is None:
            if len(self.matchers) >= MAX_ACTIVE_SETS:
                self.matchers.clear()
            m = self.matchers[active] = _matcher(self.spec, self.plan, active)
        return m


def _scan_one(
    lf: LogFile,
    search: ScanSearch,
    sink_factory: SinkFactory | None,
    head_n: int,
    tail_n: int,
    collect_ranks: bool,
) -> FileScan:
    spec, plan, dense = search.spec, search.plan, search.dense
    k = len(spec.patterns)
    caps = spec.max_hits or (None,) * k
    dense_all = frozenset(i for i, _n in plan.dense)
    head_dense = set(dense_all)  # dense ids still searched on every line (the file's first hits)
    active = frozenset(range(k))
    result = FileScan(file=lf, counts=[0] * k)
    counts = result.counts
    sink = sink_factory(lf) if sink_factory is not None else None
    on_hit = sink.on_hit if sink is not None else None
    bulk_to = _bulk_taker(sink, caps)  # (pattern id, the sink's on_bulk) or None
    problems = ReadProblems()
    seen_ranks: set[str] = set()
    line_base = 0  # lines before the current chunk
    tail: list[bytes] = []
    ends_with_newline = True
    offset = 0  # file offset of the current chunk (decompressed bytes)
    tail_at: int | None = None  # file offset where the dense patterns' tail begins (known for plain files)
    last_no: int = 0  # (line, ids) of the latest hit: a long line is searched in pieces
    last_ids: list[int] = []
    stamp = _file_stamp(lf) if lf.compression == "none" else None
    marks: list[tuple[int, int]] = []  # (offset, lines before) of every window that starts on a line start
    tail_windows: list[tuple[Buffer, int, int, bool]] = []  # (buffer, start, end, continues) not yet in ``tail``
    run = 1  # pieces searched together (see below)
    capped_ids = [i for i in range(k) if caps[i] is not None]
    capped_caps = [(i, cast(int, caps[i])) for i in capped_ids]
    capped_set = frozenset(capped_ids)
    for buf, lo, hi, is_last in _spans(lf, problems):
        n = hi - lo
        lines_before = line_base
        if ends_with_newline and stamp is not None:
            marks.append((offset, line_base))
        result.bytes_read += n
        continues = not ends_with_newline  # this window starts inside the previous window's last line
        if head_n and len(result.head) < head_n:
            heads = _head_segment(buf, lo, hi, head_n).split(b"\n", head_n)
            for raw in heads[1:] if continues else heads:
                if len(result.head) >= head_n:
                    break
                result.head.append(decode(raw[:MAX_LINE_CHARS]).rstrip("\r"))
        ranks_first = collect_ranks and dense is not None and tail_at is None
        if ranks_first:
            _collect_ranks(buf, seen_ranks, lo, hi)
        if dense is not None and tail_at is None:
            if lf.compression == "none":
                tail_at = _plain_tail_start(lf, dense, seen_ranks, buf if isinstance(buf, mmap.mmap) else None)
            elif is_last:  # a decompressed chunk: the whole buffer
                tail_at = offset + dense.tail_start(buf, seen_ranks, DENSE_TAIL_MAX)
        split = n if dense is None or tail_at is None else min(n, max(0, tail_at - offset))
        for part_lo, part_hi, in_tail in (
            ((lo, lo + split, False), (lo + split, hi, True)) if 0 < split < n else ((lo, hi, split == 0),)
        ):
            # small pieces while a capped pattern (or a dense one in its head) may hit densely: in the file's first
            # window (where start-up markers are), or once it has hits but has not reached its cap; a marker never
            # seen there is searched window by window (it costs one window of line checks if it shows up later)
            capped = offset == 0 or any(counts[i] > 0 for i in capped_ids if i in active)
            capped = capped or any(counts[i] > 0 for i in head_dense & active)
            bounds = list(_pieces(buf, part_lo, part_hi, CAPPED_PIECE_BYTES if capped else part_hi - part_lo))
            k = 0
            while k < len(bounds):
                sampled = frozenset() if in_tail else dense_all - head_dense
                searched = active - sampled
                matcher = search.matcher(searched)
                # Pieces k..last are searched together in place (one finder pass, one DFA search) as long as nothing
                # changes the search between them: the hits of each piece are what searching it alone gives. A
                # change (a marker reaching its cap, a dense pattern leaving its head) takes effect after its piece:
                # the hits after that piece are dropped and searched again. The run grows while nothing changes.
                last = min(len(bounds), k + run) - 1
                first_lo, last_hi = bounds[k][0], bounds[last][1]
                if (
                    matcher.spans_ok
                    and (dense is None or dense.spans_ok)
                    and (first_lo == 0 or buf[first_lo - 1] == 10)
                    and (last_hi == len(buf) or buf[last_hi - 1] == 10)
                ):
                    piece, shift = buf, 0  # searched in place
                else:
                    last = k  # one piece, on a copy unless it is the whole buffer
                    last_hi = bounds[k][1]
                    whole = first_lo == 0 and last_hi == len(buf) and isinstance(buf, bytes)
                    piece, shift = (buf, 0) if whole else (buf[first_lo:last_hi], first_lo)
                p_lo, p_hi = first_lo - shift, last_hi - shift
                extra: dict[int, list[int]] | None = None
                samples = [False] * (last - k + 1)  # per piece: did the dense sample deliver lines
                if dense is not None and sampled & active:
                    extra, samples = dense.sample_pieces(
                        piece,
                        sampled & active,
                        [(b_lo - shift, b_hi - shift) for b_lo, b_hi in bounds[k : last + 1]],
                    )
                counted_to = p_lo
                line_at = line_base
                deactivate: list[int] = []
                # (a dense pattern's lines come in bulk once its head is read: they are no longer counted one by one)
                bulk = (
                    _Bulk(*bulk_to, line_base + 1)
                    if bulk_to is not None and bulk_to[0] in active and bulk_to[0] not in head_dense
                    else None
                )
                b_done = 0  # bulk lines handed on so far (each before the first later hit)
                hits, newlines = (
                    ([], -1)
                    if matcher.idle and not extra
                    else _hits_in_chunk(
                        piece,
                        matcher,
                        extra,
                        p_lo,
                        p_hi,
                        {i: cap - counts[i] + 1 for i, cap in capped_caps if i in searched},
                        bulk,
                    )
                )
                j = k  # the piece of the hit
                changed_in: int | None = None  # the first piece in which the search changed
                piece_end = bounds[j][1] - shift  # the end of piece j in ``piece``
                for ls, le, ids, rel in hits:
                    if ls >= piece_end:
                        while ls + shift >= bounds[j][1]:
                            j += 1
                        piece_end = bounds[j][1] - shift
                        if changed_in is not None and j > changed_in:
                            break
                    if rel >= 0:
                        line_at = line_base + rel
                    else:  # (counted here only without the native finder: ``piece`` is then bytes)
                        line_at += cast(bytes, piece).count(b"\n", counted_to, ls)
                        counted_to = ls
                    kept = ids
                    if capped_set and not capped_set.isdisjoint(ids):
                        kept = []
                        for i in ids:
                            cap = caps[i]
                            if cap is None or counts[i] < cap:
                                kept.append(i)
                                if cap is not None and counts[i] + 1 >= cap:
                                    deactivate.append(i)
                                    changed_in = j if changed_in is None else changed_in
                        if not kept:
                            continue
                    no = line_at + 1
                    if last_no == no:  # the same line, searched again in its next piece
                        kept = [i for i in kept if i not in last_ids]
                        last_ids = last_ids + kept
                        if not kept:
                            continue
                    else:
                        last_no, last_ids = no, kept
                    for i in kept:
                        counts[i] += 1
                    if head_dense and not head_dense.isdisjoint(kept):
                        for i in kept:
                            if i in head_dense and counts[i] >= DENSE_HEAD_HITS:
                                head_dense.discard(i)  # from the next piece on, sampled (the tail is searched in full)
                                changed_in = j if changed_in is None else changed_in
                    if on_hit is not None:
                        if bulk is not None and bulk.starts:
                            b_to = bisect_left(bulk.starts, ls)
                            if b_to > b_done:
                                bulk.take(bulk.nos[b_done:b_to], bulk.texts[b_done:b_to])
                                b_done = b_to
                        raw = piece[ls:le] if le - ls <= MAX_LINE_CHARS else _shown_part(piece[ls:le], kept, matcher)
                        text = raw.decode("utf-8", "replace").rstrip("\r")  # as reader.decode
                        on_hit(kept, no, text)
                done = last if changed_in is None else changed_in  # the last piece whose hits all count
                if bulk is not None and bulk.starts:  # the bulk lines after the last hit, up to the end of piece done
                    b_to = len(bulk.starts) if done == last else bisect_left(bulk.starts, bounds[done][1] - shift)
                    if b_to > b_done:
                        bulk.take(bulk.nos[b_done:b_to], bulk.texts[b_done:b_to])
                    counts[bulk.id] += b_to
                if any(samples[: done - k + 1]):
                    result.sampled |= sampled & active
                if done < last:
                    # the pieces after the change are searched again: lines up to the end of the changed one
                    line_base += matcher.native.line_indexes(piece, [bounds[done][1] - shift], p_lo)[0]
                elif newlines >= 0:
                    line_base += newlines
                else:
                    line_base = line_at + cast(bytes, piece).count(b"\n", counted_to, p_hi)
                if deactivate:
                    # a capped marker leaves the search at the next piece, not at the end of a (large) window
                    active = active - set(deactivate)
                run = 1 if changed_in is not None else min(2 * run, MAX_RUN_PIECES)
                k = done + 1
        if collect_ranks and not ranks_first:
            _collect_ranks(buf, seen_ranks, lo, hi)
        offset += n
        ends_with_newline = n > 0 and buf[hi - 1] == 10
        if tail_n:
            # the tail is cut from the last windows only: a window with more than tail_n newlines holds the whole
            # tail by itself, so the windows before it are dropped unsplit (a few are kept while they are short)
            # (spans of the map are cut only while it is open: at the file's last window at the latest; a
            # decompressed chunk is cut now, so that it is not held)
            span: tuple[Buffer, int, int, bool] = (buf, lo, hi, continues)
            if not isinstance(buf, mmap.mmap):
                end_part = _tail_segment(buf, lo, hi, tail_n + 1)
                span = (end_part, 0, len(end_part), continues)
            if line_base - lines_before > tail_n:
                tail_windows = [span]
            else:
                tail_windows.append(span)
                if len(tail_windows) > TAIL_WINDOWS:
                    t_buf, t_lo, t_hi, t_continues = tail_windows.pop(0)
                    tail = _add_tail(tail, _tail_segment(t_buf, t_lo, t_hi, tail_n + 1), t_continues, tail_n)
            if is_last:
                for t_buf, t_lo, t_hi, t_continues in tail_windows:
                    tail = _add_tail(tail, _tail_segment(t_buf, t_lo, t_hi, tail_n + 1), t_continues, tail_n)
                tail_windows = []
    result.lines = line_base + (0 if ends_with_newline else 1)
    result.tail = [decode(t).rstrip("\r") for t in tail]
    result.ranks = {int(s) for s in seen_ranks if len(s) <= MAX_RANK_DIGITS}
    result.problem = problems.items.get(lf.rel)
    if stamp is not None and marks and result.bytes_read == stamp[0] and _file_stamp(lf) == stamp:
        result.checkpoints = Checkpoints(stamp, tuple(o for o, _ in marks), tuple(b for _, b in marks), line_base)
    if sink is not None:
        result.sink_result = sink.finish()
    return result


def _bulk_taker(sink: Sink | None, caps: Sequence[int | None]) -> tuple[int, BulkTaker] | None:
    """The pattern whose lines ``sink`` takes in bulk and its ``on_bulk`` (:class:`Sink`), where the scan can hand them
    over so: a pattern without a cap (the scan counts each line of a capped one alone); else None."""
    ask = getattr(sink, "bulk_id", None)
    i: int | None = ask() if ask is not None else None
    if i is None or not 0 <= i < len(caps) or caps[i] is not None:
        return None
    return i, sink.on_bulk  # type: ignore[union-attr]  # (a sink that names a bulk pattern takes its lines)


TAIL_WINDOWS = 2
"""Windows with too few lines to hold a file's whole tail that :func:`_scan_one` keeps before cutting the oldest."""


def _head_segment(buf: Buffer, lo: int, hi: int, head_n: int) -> bytes:
    """The start of ``buf[lo:hi]`` that ``.split(b"\\n", head_n)`` splits like the whole (its first ``head_n`` lines
    whole, the rest only up to :data:`MAX_LINE_CHARS`, where the head cuts it anyway)."""
    p = lo
    for _ in range(head_n):
        p = buf.find(b"\n", p, hi)
        if p < 0:
            return buf[lo:hi]
        p += 1
    return buf[lo : min(hi, p + MAX_LINE_CHARS)]


def _tail_segment(buf: Buffer, lo: int, hi: int, k: int) -> bytes:
    """The end of ``buf[lo:hi]`` holding its last ``k`` newlines (all of it when it has fewer), which
    ``.rsplit(b"\\n", k)`` splits like the whole except for the first part."""
    p = hi
    for _ in range(k):
        p = buf.rfind(b"\n", lo, p)
        if p < 0:
            return buf[lo:hi]
    return buf[p:hi]


def _add_tail(tail: list[bytes], chunk: bytes, continues: bool, tail_n: int) -> list[bytes]:
    """``tail`` (the last ``tail_n`` lines so far, each cut at :data:`MAX_LINE_CHARS`) after the next window
    ``chunk``; ``continues``: the window starts inside the last line of the one before."""
    pieces = chunk.rsplit(b"\n", tail_n + 1)  # from the end only (no copy of the whole chunk)
    if pieces and pieces[-1] == b"":
        pieces.pop()
    whole = len(pieces) <= tail_n  # every line of the chunk is in ``pieces``
    pieces = [t[:MAX_LINE_CHARS] for t in pieces[-tail_n:]]
    if continues and tail and whole:
        pieces = pieces[1:]  # the rest of a line whose head is already kept
    return (tail + pieces)[-tail_n:]


def _plain_tail_start(lf: LogFile, dense: _Dense, ranks: set[str], mapped: mmap.mmap | None = None) -> int:
    """:meth:`_Dense.tail_start` over a plain file (memory-mapped, read backwards from its end); ``mapped``: the scan's
    own map of the whole file, when it has one (mapping the file again and unmapping it cost ~50 us)."""
    if mapped is not None:
        return dense.tail_start(mapped, ranks, DENSE_TAIL_MAX)
    try:
        with open(lf.path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return 0
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return dense.tail_start(mm, ranks, DENSE_TAIL_MAX)
    except (OSError, ValueError):
        return 0  # the scan reports the read error; search everything it can read


def _shown_part(line: bytes, ids: list[int], m: _Matcher) -> bytes:
    """What a sink sees of a hit line longer than :data:`MAX_LINE_CHARS`: the ``\\r`` record that says the most (a
    progress bar redrawn for hours holds the error as one of its records, or glued after its last redraw), else the
    line's head. A record scores each pattern it matches by how rare that pattern is among the records (the bar's
    own pattern matches every redraw, the error one record); the first of the best wins."""
    if b"\r" in line:
        checks = [(i, m.verify[i]) for i in ids if i in m.verify]
        singles = [(i, single) for i, _multi, single in m.fallback if i in ids]
        records = line.split(b"\r")
        matched: list[set[int]] = []
        for record in records:
            n = len(record)
            got = {i for i, rx in checks if rx.Match(_UNANCHORED, record, 0, n)[0][0] >= 0}
            got |= {i for i, rx in singles if _run_fallback(rx, functools.partial(_search, rx, record)) is not None}
            matched.append(got)
        counts = Counter(i for got in matched for i in got)
        if counts:
            best = max(range(len(records)), key=lambda k: (sum(1 / counts[i] for i in matched[k]), -k))
            return records[best][:MAX_LINE_CHARS]
    return line[:MAX_LINE_CHARS]


MAX_RUN_PIECES = 32
"""At most this many pieces are searched in one pass (while nothing changes the search between them)."""


CAPPED_PIECE_BYTES = 64 << 10
"""While a capped pattern is still searched, windows are searched in pieces of about this size, so a marker that hits
every line stops after its cap instead of after the whole window."""


def _pieces(buf: Buffer, lo: int, hi: int, size: int) -> Iterator[tuple[int, int]]:
    """``buf[lo:hi]`` cut into pieces of about ``size`` bytes that end on line boundaries (the last may not), as
    (start, end) offsets into ``buf``."""
    if size >= hi - lo:
        yield lo, hi
        return
    start = lo
    while start < hi:
        end = buf.find(b"\n", min(hi, start + size) - 1, hi)
        end = hi if end < 0 else end + 1
        yield start, end
        start = end

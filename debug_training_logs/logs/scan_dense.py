"""Dense patterns (a bounded sample in the middle of a file, every hit in its head and tail: :class:`_Dense`) and the
``[rankN]:`` global ranks collected from a file.
"""

from __future__ import annotations

import mmap
import re as std_re
from collections.abc import Sequence
from typing import Any

from re2 import _re2

from debug_training_logs.formats.prefixes import RANK_TAG_DIGITS, RANK_TAG_END
from debug_training_logs.logs.scan_engines import _UNANCHORED, _native, _re2_options
from debug_training_logs.logs.scan_patterns import _pure_branches
from debug_training_logs.logs.scan_types import Buffer, PatternSpec, Plan

DENSE_STRIDE = 48 << 10
"""Between a file's head and tail, one hit of each dense pattern is delivered per this many bytes."""


DENSE_REGEX_TAIL = 256 << 10
"""How far back the tail of a dense pattern without literals is looked for (its lines are checked one by one)."""


_RANK_PREFIX = std_re.compile((RANK_TAG_DIGITS + RANK_TAG_END).encode())  # the c10/excepthook prefix, an inline tag


class _Dense:
    """How one worker finds the dense patterns' lines without looking at each one (compiled from ``Plan.dense``)."""

    def __init__(self, spec: PatternSpec, plan: Plan) -> None:
        opts = _re2_options(spec.ignore_case)
        self.items: list[tuple[int, tuple[bytes, ...], Any]] = [
            (i, needles, _re2.RE2(spec.patterns[i].encode(), opts)) for i, needles in plan.dense
        ]
        # per dense pattern: its top-level alternatives that are plain literals (a line holding one matches it)
        self.sure: dict[int, tuple[bytes, ...]] = {
            i: tuple(sorted(_pure_branches(spec.patterns[i]))) if not spec.ignore_case else () for i, _n in plan.dense
        }
        # the native finder over each pattern's needles (one pass for all of them, not one find per needle), and over
        # every dense needle for the tail (searched backwards); None: bytes.find/rfind per needle, same answers
        native = _native()
        usable = native is not None and not any(b"\n" in nd for _i, nds, _rx in self.items for nd in nds)
        self.finders: dict[int, Any] = (
            {i: native.Finder(list(nds)) for i, nds, _rx in self.items if nds} if usable and native else {}
        )
        every = [nd for _i, nds, _rx in self.items for nd in nds]
        self.tail_finder: Any = native.Finder(every) if usable and native and every else None
        self.spans_ok = all(nds for _i, nds, _rx in self.items)
        """:meth:`sample` may search a span of a bigger buffer: no pattern is searched by its regex over the buffer
        (only needles are looked for in it; a regex sees the bytes around a span, ``^`` or ``\\b`` at its edges)."""

    def sample(self, buf: Buffer, ids: frozenset[int], lo: int = 0, hi: int | None = None) -> dict[int, list[int]]:
        """Line start -> dense ids, one matching line per :data:`DENSE_STRIDE` bytes of ``buf[lo:hi]`` for each of
        ``ids``, sampled as if ``buf[lo:hi]`` were the whole buffer (offsets are into ``buf``; a span of a memory-mapped
        file only where :attr:`spans_ok`).

        Candidates come from ``bytes.find`` of the pattern's needles (each needle's next position is remembered, so a
        window is searched about once per needle whatever the stride); a candidate line is checked with RE2."""
        return self.sample_pieces(buf, ids, [(lo, len(buf) if hi is None else hi)])[0]

    def sample_pieces(
        self,
        buf: Buffer,
        ids: frozenset[int],
        bounds: Sequence[tuple[int, int]],
    ) -> tuple[dict[int, list[int]], list[bool]]:
        """:meth:`sample` of each piece ``buf[lo:hi]`` of ``bounds`` (ascending, not overlapping), merged, and per
        piece whether it delivered a line. With the extension, one native call per pattern proposes every piece's
        stride walk and checks its lines (a plain-literal alternative in the line, else the RE2 check, called from
        C), and a piece is walked on in Python only after a line that fails (the walk then goes on as :meth:`_walk`
        would have). The lines are not numbered here: the caller's finder numbers them in its own pass (the sample's
        own numbering counted the piece's newlines once more per dense pattern: ~0.3 ms of an 8.6 MB file)."""
        out: dict[int, list[int]] = {}
        flags = [False] * len(bounds)
        for i, needles, rx in self.items:
            if i not in ids:
                continue
            finder = self.finders.get(i)
            if finder is None:
                for j, (lo, hi) in enumerate(bounds):
                    flags[j] = self._walk(buf, i, needles, rx, None, lo, hi, lo, 0, out) or flags[j]
                continue
            # each piece's walk, its lines checked natively (a sure literal, else the regex) up to the first that fails
            pieces = finder.sample(buf, bounds, DENSE_STRIDE, -1, self.sure[i], rx.Match, _UNANCHORED)
            for j, (starts, failed) in enumerate(pieces):
                for ls in starts:
                    have = out.get(ls)
                    if have is None:
                        out[ls] = [i]
                    else:
                        have.append(i)
                if starts:
                    flags[j] = True
                if failed >= 0:
                    # the first line that fails its check: walk on from there as the Python walk does
                    lo, hi = bounds[j]
                    flags[j] = self._walk(buf, i, needles, rx, finder, lo, hi, failed + 1, 1, out) or flags[j]
        return out, flags

    def _walk(
        self,
        buf: Buffer,
        i: int,
        needles: tuple[bytes, ...],
        rx: Any,
        finder: Any,
        lo: int,
        n: int,
        pos: int,
        tries: int,
        out: dict[int, list[int]],
    ) -> bool:
        """Pattern ``i``'s stride walk over ``buf[lo:n]`` from ``pos`` (``tries``: lines failed in a row so far),
        adding its lines to ``out``; whether it added any."""
        find, rfind = buf.find, buf.rfind
        nxt: dict[bytes, int] = {}
        added = False
        while pos < n:
            if finder is not None:
                # the first line from pos holding a needle that starts at or after pos (as bytes.find would)
                page = finder.find_lines(buf, pos, 1, n)[0]
                if not page:
                    break
                ls, le = page[0][0], page[0][1]
                if ls == pos and pos > lo and buf[pos - 1] != 10:
                    # the finder never looks before pos; the line began earlier
                    ls = rfind(b"\n", lo, pos) + 1 or lo
            else:
                if needles:
                    s = n
                    for nd in needles:
                        p = nxt.get(nd, -1)
                        if p < pos:
                            p = find(nd, pos, n)
                            p = n if p < 0 else p
                            nxt[nd] = p
                        s = min(s, p)
                else:
                    s = rx.Match(_UNANCHORED, buf, pos, n)[0][0]  # only on a bytes buffer (see spans_ok)
                    s = n if s < 0 else s
                if s >= n:
                    break
                ls = rfind(b"\n", lo, s) + 1 or lo
                le = find(b"\n", s, n)
                le = n if le < 0 else le
            line = buf[ls:le]
            if rx.Match(_UNANCHORED, line, 0, len(line))[0][0] >= 0:
                out.setdefault(ls, []).append(i)
                added = True
                pos = max(ls + DENSE_STRIDE, le + 1)
                tries = 0
                continue
            tries += 1
            pos = le + 1 if tries < 8 else max(le + 1, ls + DENSE_STRIDE)
            if tries >= 8:
                tries = 0
        return added

    def tail_start(self, buf: bytes | mmap.mmap, ranks: set[str], limit: int) -> int:
        """Offset (a line start) in ``buf`` from which every rank of ``ranks`` (``[rankN]:`` digit strings; empty:
        the file's one anonymous rank) has its last dense hit, looking back at most ``limit`` bytes; ``len(buf)`` when
        no dense line is there. Ranks whose last hit lies further back keep their last sampled hit."""
        n = len(buf)
        floor = max(0, n - limit)
        wanted = set(ranks) or {""}
        found: set[str] = set()
        tail = n
        prev: dict[bytes, int] = {}
        needles = [nd for _i, nds, _rx in self.items for nd in nds]
        regex_only = [rx for _i, nds, rx in self.items if not nds]
        pos = n
        while pos > floor and not wanted <= found:
            s = -1
            if self.tail_finder is not None:
                s = self.tail_finder.rfind(buf, floor, pos)  # a needle of the last line holding one: same line
            else:
                for nd in needles:
                    p = prev.get(nd, n + 1)
                    if p >= pos:
                        p = buf.rfind(nd, floor, pos)
                        prev[nd] = p
                    s = max(s, p)
            if regex_only:
                s = max(s, pos - 1)  # no needle to look back with: check lines one by one (rare: no literal)
            if s < floor or (regex_only and n - s > DENSE_REGEX_TAIL):
                break
            ls = buf.rfind(b"\n", 0, s) + 1
            le = buf.find(b"\n", s)
            le = n if le < 0 else le
            line = bytes(buf[ls:le])
            if any(rx.Match(_UNANCHORED, line, 0, len(line))[0][0] >= 0 for _i, _n, rx in self.items):
                m = _RANK_PREFIX.search(line, 0, 64)
                key = m.group(1).decode() if m else ""
                if key not in found:
                    found.add(key)
                    tail = ls
            pos = ls
        return tail


_DENSES: dict[tuple[PatternSpec, Plan, bool], _Dense] = {}


def _dense(spec: PatternSpec, plan: Plan) -> _Dense:
    """The :class:`_Dense` of a scan, built once per worker (its regexes and finders cost ~0.35 ms, as much as the
    dense sample of a file); it holds nothing of the files it searches."""
    key = (spec, plan, _native() is not None)
    d = _DENSES.get(key)
    if d is None:
        if len(_DENSES) > 16:
            _DENSES.clear()
        d = _DENSES[key] = _Dense(spec, plan)
    return d


def _not_in_regex(seen: frozenset[str]) -> str:
    """A regex for ``[rankN]:`` whose digit string N is not in ``seen`` (trie complement), so known ranks are skipped
    at memchr speed and only a new rank stops the search."""
    trie: dict[str, Any] = {}
    for s in seen:
        node = trie
        for ch in s:
            node = node.setdefault(ch, {})
        node["$"] = True

    def comp(node: dict[str, Any], depth: int) -> str:
        kids = sorted(k for k in node if k != "$")
        alts: list[str] = []
        other = [d for d in "0123456789" if d not in kids]
        if other:
            alts.append(f"[{''.join(other)}][0-9]*")
        alts.extend(f"{d}(?:{comp(node[d], depth + 1)})" for d in kids)
        if depth > 0 and "$" not in node:
            alts.append("")
        return "|".join(alts)

    return r"\[rank(?:" + comp(trie, 0) + r")\]" + RANK_TAG_END


_RANK_RX: dict[frozenset[str], Any] = {}


def _rank_regex(seen: frozenset[str]) -> Any:
    rx = _RANK_RX.get(seen)
    if rx is None:
        if len(_RANK_RX) > 256:
            _RANK_RX.clear()
        rx = _RANK_RX[seen] = _re2.RE2(_not_in_regex(seen).encode(), _re2_options(False))
    return rx


def _collect_ranks(buf: Buffer, seen: set[str], lo: int = 0, hi: int | None = None) -> None:
    """Add the digit strings of every ``[rankN]:`` in ``buf[lo:hi]`` to ``seen`` (one native pass when the extension
    is built, else a regex matching only ranks not yet seen)."""
    hi = len(buf) if hi is None else hi
    native = _native()
    if native is not None:
        native.collect_ranks(buf, seen, lo, hi)
        return
    _collect_ranks_regex(buf if lo == 0 and hi == len(buf) and isinstance(buf, bytes) else buf[lo:hi], seen)


def _collect_ranks_regex(chunk: bytes, seen: set[str]) -> None:
    """:func:`_collect_ranks` without the extension: RE2 skips the ranks already seen at memchr speed."""
    n = len(chunk)
    pos = 0
    while True:
        rx = _rank_regex(frozenset(seen))
        sp = rx.Match(_UNANCHORED, chunk, pos, n)[0]
        if sp[0] < 0:
            return
        # learn every rank in the next stretch at once (per-node files interleave their ranks)
        for d in _RANK_PREFIX.findall(chunk, sp[0], sp[0] + (64 << 10)):
            seen.add(d.decode())
        pos = sp[1]

"""The compiled matcher (a plan compiled for one set of active patterns, per worker process) and the search of one
buffer with it: every hit line of a chunk (:func:`_hits_in_chunk`), through the native finder when it is built.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import re2
from re2 import _re2

from debug_training_logs.logs.scan_budget import _finditer, _run_fallback, _search
from debug_training_logs.logs.scan_engines import _UNANCHORED, _aho_corasick, _native, _re2_options
from debug_training_logs.logs.scan_patterns import (
    _EDGE_SENSITIVE,
    _literal_alternatives,
    _pure_branches,
    _relaxed,
    _verifier,
)
from debug_training_logs.logs.scan_plan import SEPARATE_DFA_MAX
from debug_training_logs.logs.scan_types import MAX_LINE_CHARS, Buffer, BulkTaker, Hit, PatternSpec, Plan

AC_GROUP = 32
"""Literals per Aho-Corasick pass (see :class:`_Matcher`)."""


NATIVE_PAGE_LINES = 1 << 14
"""Candidate lines the native finder returns per call (a window where every line holds a literal is paged)."""


class _Matcher:
    """A plan compiled for one set of active patterns."""

    def __init__(self, spec: PatternSpec, plan: Plan, active: frozenset[int]) -> None:
        opts = _re2_options(spec.ignore_case)
        self.prefilter: Any = None
        self.dfa: Any = None
        lits = [(lit, i) for lit, i in plan.literals if i in active]
        self.prefilters: list[Any] = []
        self.finder: Any = None
        native = _native() if lits else None
        self.native: Any = native
        if native is not None:
            # one pass over the window for every literal, which also numbers the lines it flags
            distinct = sorted({lit for lit, _ in lits})
            built = _FINDERS.get((plan, tuple(distinct)))
            if built is not None:
                self.finder = built.copy()  # the same needles as another matcher's (one without a DFA pattern)
            else:
                anchor_of = dict(plan.anchors)
                known = all(lit in anchor_of for lit in distinct)
                self.finder = native.Finder(
                    distinct, [anchor_of[lit] for lit in distinct] if known else None, profile=plan.profile or None
                )
                if len(_FINDERS) > 16:
                    _FINDERS.clear()
                _FINDERS[(plan, tuple(distinct))] = self.finder
            self.prefilter = self.finder
        elif lits:
            ac = _aho_corasick()
            distinct = sorted({lit for lit, _ in lits})
            # passes of at most AC_GROUP literals each: the packed SIMD searcher (Teddy) only serves small sets, and
            # four Teddy passes measured ~4x faster than one automaton over 120+ literals
            self.prefilters = [
                ac.BytesAhoCorasick(distinct[j : j + AC_GROUP], matchkind=ac.MATCHKIND_LEFTMOST_LONGEST)
                for j in range(0, len(distinct), AC_GROUP)
            ]
            self.prefilter = self.prefilters[0]
        self.literal_ids: dict[bytes, set[int]] = {}
        for lit, i in lits:
            self.literal_ids.setdefault(lit, set()).add(i)
        searched = sorted({i for _, i in lits} | {i for i in plan.dfa if i in active})
        self.searched = searched
        # for lines the Set says nothing about: which patterns can match (one of their literals is in the line, found
        # by one overlapping Aho-Corasick pass over the line), plus the DFA patterns (no literal)
        self.always = sorted({i for i in plan.dfa if i in active})
        self.line_ac: Any = None
        self.line_lit_ids: list[tuple[int, ...]] = []
        if lits:
            by_lit = sorted({lit for lit, _ in lits})
            if self.finder is None:  # (the native finder checks its lines itself: :meth:`line_ids` is not called)
                ac = _aho_corasick()
                self.line_ac = ac.BytesAhoCorasick(by_lit, matchkind=ac.MATCHKIND_STANDARD)
            self.line_lit_ids = [tuple(sorted(self.literal_ids[lit])) for lit in by_lit]
        # with the native finder, which names every needle of a candidate line, the patterns a line can match are
        # known without the Set: those of its needles (plus the DFA patterns when a DFA search found the line), each
        # checked by its own regex, or not at all when the pattern is the needle itself (a pure literal)
        # (a needle that is a whole top-level branch of a pattern, ``NCCL WARN`` of ``NCCL WARN|ibv_\w+ failed``, is
        # as good: a line holding it matches the pattern)
        self.sure_of: list[frozenset[int]] = []  # per needle (finder order): the patterns it proves
        if lits:
            branches = {i: _pure_branches(spec.patterns[i]) if not spec.ignore_case else frozenset() for i in active}
            self.sure_of = [
                frozenset(i for i in self.literal_ids[lit] if lit in branches[i])
                for lit in sorted({lit for lit, _ in lits})
            ]
        # a pattern given twice (two consumers of one scan ask for the same ISO timestamp, say) is searched once:
        # the DFA only proposes candidate lines, the Set says which patterns each one matches
        dfa_pats = list(dict.fromkeys(spec.patterns[i] for i in plan.dfa if i in active))
        self.dfas: list[Any] = []
        if len(dfa_pats) > SEPARATE_DFA_MAX:
            combined = "(?m)" + "|".join(f"(?:{pat})" for pat in dfa_pats)
            self.dfas = [_re2.RE2(combined.encode(), opts)]
        else:
            # a few patterns: one search each, a leading \b dropped (lines found are checked exactly by the Set):
            # RE2 then skips to the pattern's literal prefix with memchr (``\b20\d\d-...`` ran at 0.17 GB/s, without
            # the \b at 2.6 GB/s)
            search = dict(plan.dfa_search)
            self.dfas = [_re2.RE2(("(?m)" + search.get(pat, _relaxed(pat))).encode(), opts) for pat in dfa_pats]
        # per DFA search: the pattern ids it stands for (None: one alternation of many patterns)
        self.dfa_ids: list[tuple[int, ...] | None] = (
            [tuple(i for i in plan.dfa if i in active and spec.patterns[i] == pat) for pat in dfa_pats]
            if len(dfa_pats) <= SEPARATE_DFA_MAX
            else [None]
        )
        # per DFA search of a pattern that is only plain literals (``lhotse|Lhotse``, frequent: the planner keeps it
        # out of the finder's needles), a native finder of those literals that finds the same lines at ~4 GB/s (the
        # DFA has no prefix to skip to: ~0.65 GB/s); None where the DFA searches
        linescan = _native()
        self.dfa_finders: list[Any] = [None] * len(self.dfas)
        if linescan is not None and not spec.ignore_case and len(dfa_pats) <= SEPARATE_DFA_MAX:
            for j, dfa_pat in enumerate(dfa_pats):
                alts = (
                    _literal_alternatives(dfa_pat) if dfa_pat not in search and _relaxed(dfa_pat) == dfa_pat else None
                )
                if alts:
                    self.dfa_finders[j] = linescan.Finder(list(alts))
        self.dfa = self.dfas[0] if self.dfas else None
        self.verify: dict[int, Any] = {i: _verifier(spec.patterns[i], spec.ignore_case) for i in searched}
        self.set: Any = None
        if searched:
            st = re2.Set.SearchSet(opts)
            for i in searched:
                st.Add(spec.patterns[i].encode())
            st.Compile()
            self.set = st._set  # the pybind object: skips the wrapper's per-call isinstance work
        self.fallback: list[tuple[int, Any, Any]] = []
        if plan.fallback:
            import regex

            flags = regex.IGNORECASE if spec.ignore_case else 0
            for i in plan.fallback:
                if i in active:
                    pat = spec.patterns[i].encode()
                    self.fallback.append((i, regex.compile(pat, flags | regex.MULTILINE), regex.compile(pat, flags)))

        if self.finder is not None:
            # the finder checks its candidate lines itself (:func:`_native_hits`)
            self.finder.set_patterns(
                len(spec.patterns),
                self.line_lit_ids,
                self.sure_of,
                self.always,
                [self.verify[i].Match if i in self.verify else None for i in range(len(spec.patterns))],
                self.set.Match if self.set is not None else None,
                self.searched,
                _UNANCHORED,
            )

        # a span of a bigger buffer (a memory-mapped file) can be searched in place when only the native finder and
        # RE2 DFAs look at it and no DFA pattern can tell a span's edge from a line boundary: \A, \z and inline flags
        # do (a span starts and ends at line boundaries, where (?m)^, $ and \b behave as at a buffer's edge)
        self.spans_ok = (
            self.finder is not None
            and not self.prefilters
            and not self.fallback
            and not any(_EDGE_SENSITIVE.search(pat) for pat in dfa_pats)
        )

    @property
    def idle(self) -> bool:
        return self.prefilter is None and self.dfa is None and not self.fallback

    def line_ids(self, line: bytes) -> list[int]:
        """Which searched (RE2) patterns match ``line``: one RE2 Set pass, exact per-pattern checks if it says none
        (a Set that ran out of DFA memory also says none)."""
        found = self.set.Match(line) if self.set is not None else None  # list of indices into ``searched``
        if found:
            return [self.searched[j] for j in found]
        n = len(line)
        cands = set(self.always)
        if self.line_ac is not None:
            for pid, _s, _e in self.line_ac.find_matches_as_indexes(line, overlapping=True):
                cands.update(self.line_lit_ids[pid])
        return [i for i in sorted(cands) if self.verify[i].Match(_UNANCHORED, line, 0, n)[0][0] >= 0]


_MATCHERS: dict[tuple[PatternSpec, Plan, frozenset[int], bool], _Matcher] = {}


_FINDERS: dict[tuple[Plan, tuple[bytes, ...]], Any] = {}
"""The native finders built in this process, by plan and needles: a matcher whose needles another one has (the
matchers of a scan differ mostly in their DFA patterns) gets a copy (``Finder.copy``: its own :meth:`set_patterns`)
instead of building one again (~3 ms each for an ``analyze`` scan's 318 needles, in every scan worker)."""


def _matcher(spec: PatternSpec, plan: Plan, active: frozenset[int]) -> _Matcher:
    key = (spec, plan, active, _native() is not None)
    m = _MATCHERS.get(key)
    if m is None:
        if len(_MATCHERS) > 64:
            _MATCHERS.clear()
        m = _MATCHERS[key] = _Matcher(spec, plan, active)
    return m


class _Bulk:
    """Where one search puts the lines it hands over in bulk to ``take`` (a sink's ``on_bulk``): those whose only
    pattern is ``id``, complete in the searched part, after its first line and at most :data:`MAX_LINE_CHARS` bytes
    long; their texts (decoded as a hit's), 1-based line numbers (``no_base`` is the number of the part's first line)
    and starts, ascending. The native finder fills them; without it they stay empty."""

    __slots__ = ("id", "no_base", "nos", "starts", "take", "texts")

    def __init__(self, pattern_id: int, take: BulkTaker, no_base: int) -> None:
        self.id, self.take, self.no_base = pattern_id, take, no_base
        self.texts: list[str] = []
        self.nos: list[int] = []
        self.starts: list[int] = []


def _hits_in_chunk(
    chunk: Buffer,
    m: _Matcher,
    more: dict[int, list[int]] | None = None,
    lo: int = 0,
    hi: int | None = None,
    left: dict[int, int] | None = None,
    bulk: _Bulk | None = None,
) -> tuple[list[Hit], int]:
    """Every line of ``chunk[lo:hi]`` any active pattern matches, in order, and the number of newlines in it (-1 when
    not counted: the caller counts), searched as if ``chunk[lo:hi]`` were the whole buffer (the caller passes a span
    of a memory-mapped file only where that is so, see :meth:`_Matcher.spans_ok`). Offsets are into ``chunk``.
    ``more``: further (line start -> pattern ids) already checked (the dense patterns' sample). Line indexes (newlines
    between ``lo`` and the line) come from the native finder's pass; without it they are -1. ``bulk``: where the
    native finder puts the lines it hands over in bulk instead of returning them (:class:`_Bulk`)."""
    n = len(chunk) if hi is None else hi
    if m.finder is not None:
        return _native_hits(chunk, m, more, lo, n, left, bulk)
    # without the extension: Aho-Corasick passes (a bytes chunk: lo = 0, hi = its length), an RE2 Set per line
    find, rfind = chunk.find, chunk.rfind
    starts: list[int] = []  # candidate line starts for the RE2 patterns, ascending
    for prefilter in m.prefilters:
        line_end = -1
        for _pid, s, _e in prefilter.find_matches_as_indexes(chunk):
            if s <= line_end:
                continue  # another literal in a line already flagged
            ls = rfind(b"\n", 0, s) + 1
            line_end = find(b"\n", s)
            starts.append(ls)
            if line_end < 0:
                break
    if len(m.prefilters) > 1:
        starts = sorted(set(starts))
    if m.dfas:
        extra = _dfa_starts(chunk, m, lo, n)
        starts = sorted(set(starts) | set(extra)) if starts else extra
    found: dict[int, list[int]] = dict(more) if more else {}
    for ls in starts:
        le = find(b"\n", ls, n)
        line = chunk[ls : n if le < 0 else le]
        ids = m.line_ids(line)
        if ids:
            have = found.get(ls)
            found[ls] = ids if have is None else sorted(set(have) | set(ids))
    _fallback_hits(chunk, m, n, found)
    out: list[Hit] = []
    for ls in sorted(found):
        le = find(b"\n", ls, n)
        out.append((ls, n if le < 0 else le, sorted(found[ls]), -1))
    return out, -1  # the caller counts the newlines


def _fallback_hits(chunk: Buffer, m: _Matcher, n: int, found: dict[int, list[int]]) -> None:
    """Add to ``found`` (line start -> pattern ids) the lines of ``chunk[:n]`` the matcher's fallback patterns (Python
    ``re``, under the search's time budget) match. ``chunk`` is bytes here: a matcher with fallback patterns is never
    given a span of a memory map (see :attr:`_Matcher.spans_ok`)."""
    data = cast(bytes, chunk)
    for i, multi, single in m.fallback:
        for hit in _run_fallback(multi, functools.partial(_finditer, multi, data)):
            ls = data.rfind(b"\n", 0, hit.start()) + 1
            if ls >= n:
                break
            le = data.find(b"\n", ls)
            line = data[ls : (n if le < 0 else le)]
            if _run_fallback(single, functools.partial(_search, single, line)) is not None:
                ids = found.setdefault(ls, [])
                if i not in ids:
                    ids.append(i)


def _dfa_starts(chunk: Buffer, m: _Matcher, lo: int, n: int, left: dict[int, int] | None = None) -> list[int]:
    """Starts of the lines of ``chunk[lo:n]`` any of the matcher's DFA searches finds (a superset of the lines its DFA
    patterns match), ascending. ``left`` (see :func:`_native_hits`): a search whose patterns are all capped stops
    after the line where each of them has that many matching lines (the caller drops their later hits anyway)."""
    find, rfind = chunk.find, chunk.rfind
    starts: list[int] = []
    for dfa, ids, finder in zip(m.dfas, m.dfa_ids, m.dfa_finders, strict=True):
        match = dfa.Match
        extra: list[int] = []
        budget = {i: left[i] for i in ids} if left and ids and all(i in left for i in ids) else None
        pos = lo
        while pos <= n:
            if finder is not None:  # (the next line holding one of the pattern's literals: the line the DFA finds)
                got = finder.find_lines(chunk, pos, 1, n)[0]
                if not got:
                    break
                ls, le = got[0][0], got[0][1]
                le = -1 if le >= n else le  # (no newline before n)
            else:
                s = match(_UNANCHORED, chunk, pos, n)[0][0]
                if s < 0:
                    break
                ls = rfind(b"\n", lo, s) + 1 or lo
                if ls >= n:  # the empty "line" after the final newline is not a line
                    break
                le = find(b"\n", s, n)
            extra.append(ls)
            if budget is not None:
                line = chunk[ls : n if le < 0 else le] if finder is None else b""
                for i in budget:
                    # (a line the literals' finder gives holds a literal of the pattern: it matches, no check needed)
                    if budget[i] > 0 and (
                        finder is not None or m.verify[i].Match(_UNANCHORED, line, 0, len(line))[0][0] >= 0
                    ):
                        budget[i] -= 1
                if not any(budget.values()):
                    break
            if le < 0:
                break
            pos = le + 1
        starts = sorted(set(starts) | set(extra)) if starts else extra
    return starts


def _native_hits(
    chunk: Buffer,
    m: _Matcher,
    more: dict[int, list[int]] | None,
    lo: int,
    n: int,
    left: dict[int, int] | None,
    bulk: _Bulk | None = None,
) -> tuple[list[Hit], int]:
    """:func:`_hits_in_chunk` with the native finder: it names every needle of each candidate line, so a line is
    checked only against the patterns of those needles (a pure literal pattern not at all) and the DFA patterns when
    a DFA search found it too; the same hits as one RE2 Set pass per line (the Set is still used for a line with
    several patterns to check: one call instead of several). The finder does it all in C (``Finder.hits``), with the
    lines of the DFA searches and of ``more`` merged in and numbered in its pass; only the fallback patterns' lines
    (``regex``, never on a memory map) are merged here.

    ``left``: per capped pattern, how many more of its lines the caller can count (one more than its cap leaves: the
    first line may repeat the last one of the window before); once that many are found, the pattern is no longer
    checked on the lines after (the caller drops its hits there anyway)."""
    dfa_starts = _dfa_starts(chunk, m, lo, n, left) if m.dfas else []
    extra = more or {}
    extra_starts = sorted(extra)
    left = dict(left) if left else None
    spent: dict[int, int] = {}  # capped pattern -> the line start after which it is not checked
    recs: list[Hit] = []
    newlines = 0
    pos = lo
    # (a fallback pattern may add its id to any line below: then every line comes back as a hit)
    taken = (
        None
        if bulk is None or m.fallback
        else (bulk.id, lo, MAX_LINE_CHARS, bulk.no_base, bulk.texts, bulk.nos, bulk.starts)
    )
    while pos < n:
        page, nl, pos = m.finder.hits(
            chunk,
            pos,
            NATIVE_PAGE_LINES,
            n,
            newlines,
            dfa_starts,
            extra_starts,
            extra,
            left,
            spent,
            taken,
        )
        recs += page
        newlines += nl
    if not m.fallback:
        return recs, newlines
    found: dict[int, list[int]] = {}
    _fallback_hits(chunk, m, n, found)
    # merge: a line already found gets the fallback patterns; the others are numbered in one counting pass
    rec_starts = [r[0] for r in recs]
    index_of = {ls: k for k, ls in enumerate(rec_starts)}
    others = sorted(ls for ls in found if ls not in index_of)
    for ls, ids in found.items():
        k = index_of.get(ls)
        if k is not None:
            r = recs[k]
            recs[k] = (ls, r[1], sorted(set(r[2]) | set(ids)), r[3])
    if others:
        find = chunk.find
        for ls, rel in zip(others, m.native.line_indexes(chunk, others, lo), strict=True):
            le = find(b"\n", ls, n)
            recs.append((ls, n if le < 0 else le, sorted(found[ls]), rel))
        recs.sort()  # line starts are distinct: the tuples compare by them alone
    return recs, newlines

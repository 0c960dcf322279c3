"""Fast multi-pattern search over many files: the "matcher" and the "searcher".

Never loops over lines in Python to search. How it gets near ripgrep's speed (numbers in ``bench/README.md``):

* **Literal prefilter, one native pass.** Each pattern is parsed once for the literals any match must contain
  (``NCCL.*timeout`` needs ``NCCL`` and ``timeout``; an alternation needs one per branch). On a sample of the corpus
  the rarest literal of each branch is chosen, and all of them go to the native line finder (``_linescan``, a small C
  extension: each literal anchored on its rarest byte pair, a pair table, ``memcmp``), which returns in one pass over
  a window every line holding a literal with its line number. Without the extension (no compiler at install, or
  ``DEBUG_TRAINING_LOGS_NO_NATIVE=1``) the literals go into ``ahocorasick_rs`` automata (Rust's ``aho-corasick`` with
  the Teddy SIMD searcher) in passes of <= :data:`AC_GROUP`, with identical results. Only the lines flagged are cut out
  and checked (per-line semantics, like ``rg -c`` per pattern): the native finder names every literal in a flagged
  line, so only the patterns of those literals (and the DFA patterns, on lines a DFA search found too) can match it;
  a pattern one of whose top-level alternatives is a plain literal found in the line needs no check
  (:func:`_pure_branches`; nor does a dense sample line holding one), one left is checked by its own RE2, several
  by one RE2 ``Set`` pass (the fallback uses the ``Set`` on every line). The native finder does these checks itself
  (``Finder.hits``: the patterns of each needle as bit sets, the RE2 checks called from C), and merges and numbers the
  lines a DFA search or a dense sample found in the same pass (it stops at each of them), so Python sees only hits.
  RE2 passes with memchr-accelerated prefixes were measured too: with 20-40 literals the passes add up to less than
  one DFA pass, so they are not used.
* **RE2 DFA otherwise.** A pattern with no usable literal (``\\d+ errors``), or no ``ahocorasick_rs``, makes the
  plan one combined RE2 alternation over the buffer (~0.6 GB/s per core), still linear time.
* **Lines only for hits.** Line numbers come from the native pass (newlines counted between hits), else from
  ``bytes.count`` of newlines between hits (one pass per chunk).
* **Plain files are memory-mapped and searched in place**: 1 MiB windows ending on a newline are spans of the map
  (:func:`_spans`), and the finder, the RE2 DFAs, the dense sample and the line numbering take a span, so only hit
  lines and a file's head and tail are copied out. A span is copied only where a regex could tell its edge from a
  buffer's (``\\A``, inline flags, the fallback engine, a window cut inside a line longer than a chunk); without the
  extension every window is a copy, as before. Compressed files stream through
  :func:`~debug_training_logs.logs.reader.iter_chunks`.
* **Pieces in runs.** While a capped marker or a dense pattern's head is still searched, a window is cut into
  :data:`CAPPED_PIECE_BYTES` pieces (the search may change after each); pieces are searched together in one pass as
  long as nothing changes, and the hits after a change are searched again with the new search. The answer is the
  one piece-by-piece search gives, at one pass per window.
* **Global ranks** (``[rankN]:``) are collected natively in one pass (``collect_ranks``); without the extension by a
  regex matching only ranks *not yet seen* in the file (a trie complement), at memchr speed.
* **DFA patterns from a rare byte.** A pattern searched by the DFA is searched from a tail that starts on a literal
  byte rare on the sample when its own first byte is common (:func:`_rare_suffix`): a superset, the lines checked
  exactly. The planner's literal counts on the sample are one native pass (``count_literals``).
* **Files are spread over processes** sized to the cores; a :class:`Sink` per file aggregates in the worker and only
  its small ``finish()`` summary crosses back (ripgrep's ``Sink`` idea). Memory stays flat in corpus size.
* **Caps.** ``PatternSpec.max_hits`` stops a presence marker (one that hits every NeMo line, say) after N hits in a
  file: it then leaves that file's search, so a dense marker does not cost a Python call per line. Within a pass, a
  capped pattern is no longer checked (nor its DFA search continued) once the lines found make its cap certain.
* **Dense samples natively.** The stride walk of a dense pattern over every piece of a run is one native call
  (``Finder.sample``); Python checks the lines it proposes and walks on by itself only after one that fails.

Patterns RE2 cannot express (back-references, look-arounds) fall back to the ``regex`` module with a timeout per
chunk; a pattern that still times out is a :class:`UserInputError`, as is an invalid one.

Must not: know what a line means (that is ``formats/``), or hold more of a file than one chunk.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib
import itertools
import mmap
import os
import pickle
import re as std_re
import re._constants as sre_c
import re._parser as sre_parse
import select
import signal
import threading
import time
import traceback
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

import re2
from re2 import _re2

from debug_training_logs import progress
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import (
    CHUNK,
    LONG_LINE_KEEP,
    LongLines,
    ReadProblems,
    binary_reason,
    cut_marker,
    decode,
    iter_chunks,
    open_binary,
)
from debug_training_logs.memo import MEMO

FALLBACK_BUDGET_S = 20.0
"""Seconds the fallback (``regex`` module, backtracking) patterns may spend in total over one whole search, across
every file and worker process; when it runs out the search stops with a :class:`UserInputError`. One budget per
search, not per chunk: 40 files that each cost just under a per-chunk limit must not add up to minutes."""

FALLBACK_TIMEOUT_S = FALLBACK_BUDGET_S
"""Upper bound for a single backtracking call (kept for callers; the search-wide budget is what binds)."""


class _Budget:
    """Seconds left for backtracking in this search, shared by the forked worker processes (a shared double)."""

    def __init__(self, seconds: float) -> None:
        from multiprocessing import get_context  # only a search with a fallback pattern needs it (~4 ms to import)

        self.total = seconds
        self._left = get_context("fork").Value("d", seconds)

    def left(self) -> float:
        return float(self._left.value)

    def spend(self, seconds: float) -> None:
        with self._left.get_lock():
            self._left.value -= seconds


_BUDGET: _Budget | None = None
"""The budget of the search in progress (set by :func:`scan_each` before worker processes fork)."""


def _budget() -> _Budget:
    global _BUDGET
    if _BUDGET is None:
        _BUDGET = _Budget(FALLBACK_BUDGET_S)
    return _BUDGET


PROBE_TIMEOUT_S = 0.25
"""Seconds a fallback pattern may spend on each adversarial probe string when it is validated."""

PARALLEL_MIN_BYTES = 32 << 20
"""Below this many bytes in total, scanning in-process is faster than starting worker processes."""

MAX_LINE_CHARS = 4000
"""A hit line longer than this is cut before it reaches a sink (progress bars glue many records on one line)."""

WINDOW = 1 << 20
"""Bytes per window of a plain file (1 MiB): small enough to stay in cache across the prefilter passes."""

SAMPLE_BYTES = 96 << 10
"""Bytes sampled from each of up to :data:`SAMPLE_FILES` files to choose the prefilter literals."""
SAMPLE_FILES = 8

DENSE_HEAD_HITS = 64
"""Hits of a dense pattern delivered in full at the start of each file (every rank's first ones)."""

DENSE_STRIDE = 48 << 10
"""Between a file's head and tail, one hit of each dense pattern is delivered per this many bytes."""

DENSE_TAIL_MAX = 8 << 20
"""How far back from a file's end the tail of a dense pattern is looked for (each rank's last hit)."""

DENSE_REGEX_TAIL = 256 << 10
"""How far back the tail of a dense pattern without literals is looked for (its lines are checked one by one)."""

SEPARATE_DFA_MAX = 4
"""Up to this many DFA patterns are searched one by one (each can use its literal prefix); more: one alternation."""

AC_GROUP = 32
"""Literals per Aho-Corasick pass (see :class:`_Matcher`)."""

MAX_LITERALS_TRIED = 4
"""Literals of one pattern branch whose frequency is measured on the sample (the longest ones)."""

LINE_CHECK_PAIRS = 128
"""How many false candidates of a literal's anchor pair (a pair the native finder stops at, compares and skips, ~10 ns
each) cost about as much as one candidate line checked in Python (~1.5 us): the planner's exchange rate when it
weighs a rare literal with a common anchor pair (``complete``: ``le`` of "samples") against a more frequent one with a
rare pair (``raining ``)."""

DENSE_LITERAL_BYTES = 2048
"""A pattern whose rarest literals occur more than once per this many sample bytes goes to the RE2 DFA pass."""

DIGIT_NEEDLES_MAX = 100
"""Most literals a run of digits and literal characters of a DFA pattern is spelt out into (``20\\d\\d-``: 100
needles ``2000-`` .. ``2099-``), see :func:`_digit_needles`."""

DIGIT_STOP_BYTES = 256
"""Spelt-out digit needles replace a DFA search only if their anchor pairs stop the native finder less than once per
this many sample bytes (a stop costs ~10 ns; RE2's memchr-skipping search costs ~0.1 ms per MB)."""

RE2_MAX_MEM = 64 << 20
"""RE2 memory budget per compiled regex (bytes); the default 8 MiB can exhaust the DFA cache on big alternations."""

_UNANCHORED = re2._Anchor.UNANCHORED
_RANK_PREFIX = std_re.compile(rb"\[rank(\d+)\](?::| )")  # the c10/excepthook prefix, or a user format's inline tag


class Sink(Protocol):
    """Receives the hits of one file inside a worker; ``finish`` returns what crosses back to the parent.

    A sink may also take the lines of one frequent pattern in bulk: ``bulk_id()`` names that pattern (or None), and
    ``on_bulk(line_nos, lines)`` then receives, in order and before any later hit, runs of lines whose only pattern is
    that one, exactly as ``on_hit([bulk_id], line_no, line)`` would have one by one (the native finder decodes them
    and no Python runs per line; not every such line comes this way)."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None: ...

    def finish(self) -> Any: ...


SinkFactory = Callable[[LogFile], Sink]
"""Builds a sink for one file; must be picklable (a module-level class or ``functools.partial`` of one)."""


@dataclass(frozen=True, repr=False)
class PatternSpec:
    """Patterns to search for, as given (validated by :func:`compile_patterns`).

    ``max_hits``: optional per-pattern cap (None = no cap) on the hits counted and delivered per file; a pattern that
    reaches its cap leaves the rest of that file's search, so its count is then ``min(true count, cap)``.
    """

    patterns: tuple[str, ...]
    ignore_case: bool = False
    max_hits: tuple[int | None, ...] | None = None
    dense: tuple[bool, ...] | None = None
    """Per pattern (None = none): True for lines that occur once per step per rank (metrics, progress bars, data
    loader debug). Such a pattern is searched on every line only in a file's first :data:`DENSE_HEAD_HITS` hits and
    in its tail (from the earliest of every rank's last hit to the end, see :func:`_tail_start`); in between, one hit
    per :data:`DENSE_STRIDE` bytes is delivered (a bounded, evenly spread sample) and the rest is skipped at
    memchr speed. Its count is then the number of hits delivered (listed in :attr:`FileScan.sampled`)."""


@dataclass(repr=False, eq=False)
class FileScan:
    """What scanning one file produced."""

    file: LogFile
    lines: int = 0
    """Lines in the file (decompressed)."""
    bytes_read: int = 0
    """Decompressed bytes read."""
    counts: list[int] = field(default_factory=list)
    """Per pattern: number of lines matching it (like ``rg -c`` for that pattern alone; capped by ``max_hits``)."""
    ranks: set[int] = field(default_factory=set)
    """Global ranks seen as ``[rankN]:`` prefixes anywhere in the file."""
    head: list[str] = field(default_factory=list)
    """The first lines of the file, when asked for (for format and header sniffing)."""
    tail: list[str] = field(default_factory=list)
    """The last lines of the file, when asked for (job end time, final status)."""
    problem: str | None = None
    """Why the file could not be read in full, or None."""
    sink_result: Any = None
    sampled: set[int] = field(default_factory=set)
    """Dense pattern ids whose hits in this file were sampled (their counts are the hits delivered, not all)."""
    checkpoints: Checkpoints | None = None
    """Plain files read in full and unchanged during the scan: where windows started on a line start, so lines can be
    read back from the nearest one (:func:`lines_at`) instead of counting newlines from the top. None otherwise."""


@dataclass(frozen=True, repr=False, eq=False)
class Checkpoints:
    """Sparse (byte offset, lines before it) pairs of one plain file, one per scan window (~1 MiB) that started on a
    line start, valid only while the file has the ``stamp`` (size, mtime in ns, inode) it had when it was scanned."""

    stamp: tuple[int, int, int]
    offsets: tuple[int, ...]
    lines_before: tuple[int, ...]
    """Per offset: how many lines (newlines) come before it; strictly increasing, the first pair is (0, 0)."""
    newlines: int
    """Newlines in the whole file: with the size, a checkpoint at its end (lines near the end are read backwards)."""

    def seek(self, line: int) -> tuple[int, int]:
        """(offset, lines before it) of the last checkpoint at or before the start of 1-based ``line``."""
        i = max(0, bisect_left(self.lines_before, line) - 1)
        return self.offsets[i], self.lines_before[i]


# --------------------------------------------------------------------------------------------------------------------
# Validation


def _re2_options(ignore_case: bool) -> re2.Options:
    opts = re2.Options()
    opts.log_errors = False
    opts.case_sensitive = not ignore_case
    opts.max_mem = RE2_MAX_MEM
    return opts


@functools.lru_cache(maxsize=4096)
def _re2_error(pat: str, ignore_case: bool) -> str | None:
    """None when RE2 compiles ``pat``, else RE2's reason (remembered: :func:`compile_patterns` and :func:`make_plan`
    both ask for every pattern of a scan)."""
    rx = _re2.RE2(pat.encode(), _re2_options(ignore_case))
    if rx.ok():
        return None
    err = rx.error()
    return err.decode(errors="replace") if isinstance(err, bytes) else str(err)


def _probe_strings(pat: str) -> list[str]:
    """Adversarial inputs for a backtracking engine: runs of each literal character of ``pat``, then a mismatch."""
    chars = {c for c in pat if c.isalnum()} or {"a"}
    out: list[str] = []
    for c in sorted(chars)[:8]:
        for n in (28, 2000):
            out.append(c * n + "\x01!")
    return out


def compile_patterns(spec: PatternSpec) -> None:
    """Validate every pattern now, in the caller's process, so a bad one is a clear error before any file is read.

    RE2 first (linear time). A pattern RE2 cannot express is compiled by the ``regex`` module and probed with
    adversarial strings under a timeout, so ``(a+)+\\1``-style patterns fail here instead of hanging a worker.
    """
    if not spec.patterns:
        raise UserInputError("No patterns to search for. Give at least one regular expression.")
    if spec.max_hits is not None and len(spec.max_hits) != len(spec.patterns):
        raise ValueError("PatternSpec.max_hits must have one entry per pattern")
    for pat in spec.patterns:
        if not pat:
            raise UserInputError("An empty pattern matches every line. Remove it or give a real expression.")
        reason = _re2_error(pat, spec.ignore_case)
        if reason is None:
            continue
        import regex

        try:
            compiled = regex.compile(pat, regex.IGNORECASE if spec.ignore_case else 0)
        except regex.error as exc:
            raise UserInputError(
                f"Invalid pattern {pat!r}: {exc} (RE2 says: {reason}). Fix the regular expression."
            ) from exc
        for probe in _probe_strings(pat):
            try:
                compiled.search(probe, timeout=PROBE_TIMEOUT_S)
            except TimeoutError as exc:
                raise UserInputError(
                    f"Pattern {pat!r} needs a backtracking engine (RE2 cannot run it: {reason}) and takes longer than "
                    f"{PROBE_TIMEOUT_S} s on a {len(probe)}-character line: it would hang on real logs. Rewrite it "
                    "without back-references, look-arounds or nested quantifiers such as (a+)+."
                ) from exc


# --------------------------------------------------------------------------------------------------------------------
# Required literals (for the prefilter)


@dataclass(frozen=True, repr=False, eq=False)
class Lit:
    """A literal a match must contain; ``fold``: compare case-insensitively."""

    text: str
    fold: bool


Branches = list[list[Lit]]
"""Disjunctive form: a match contains all literals of at least one branch."""

_FLAG_GROUP = std_re.compile(r"\(\?[a-zA-Z]*[imsxuUaL][a-zA-Z-]*[:)]")
_MAX_BRANCHES = 32


def required_literals(pattern: str, ignore_case: bool = False) -> Branches | None:
    """Literals any match of ``pattern`` must contain, as branches (one must be satisfied in full), or None when
    some way of matching needs no literal (then the pattern cannot be prefiltered).

    Parsed with Python's ``re`` parser, whose syntax agrees with RE2's for everything that yields a literal; anything
    the two could read differently (POSIX classes, inline flags other than ``(?i:...)``) gives None, which is always
    safe: the pattern is then searched by the DFA.
    """
    if "[:" in pattern or "\\Q" in pattern or "\\p" in pattern or "\\P" in pattern:
        return None
    plain = _pure_literal(pattern)
    if plain is not None:  # what the parse below gives for it, without parsing (most marker patterns are escaped text)
        return [[Lit(plain.decode(), ignore_case)]]
    return _parsed_literals(pattern, ignore_case)


def _parsed_literals(pattern: str, ignore_case: bool) -> Branches | None:
    """:func:`required_literals` read from the pattern's parse (its checks for syntax RE2 reads otherwise done)."""
    flag_groups = _FLAG_GROUP.findall(pattern)
    if any(g not in ("(?i:",) for g in flag_groups):
        return None
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:
        return None
    if parsed.state.flags & ~(sre_c.SRE_FLAG_UNICODE):
        return None
    out = _seq(list(parsed), ignore_case)
    if out is None or any(not b for b in out):
        return None
    return out


def _seq(items: list[tuple[Any, Any]], fold: bool) -> Branches | None:
    """Requirement of a sequence: literal runs, combined with required sub-parts (cross product, bounded)."""
    branches: Branches = [[]]
    run: list[str] = []

    def flush() -> None:
        if run:
            lit = Lit("".join(run), fold)
            for b in branches:
                b.append(lit)
            run.clear()

    for op, av in items:
        if op is sre_c.LITERAL:
            run.append(chr(av))
            continue
        if run and op is sre_c.SUBPATTERN and not av[1] and not av[2] and len(av[3]) == 1:
            op, av = av[3][0]  # a group holding an alternation only: as the bare alternation below
        if run and op is sre_c.BRANCH:
            # the literal run before an alternation goes into each alternative: ``E(?:rror|xception)`` (the form
            # Python's parser gives ``(?:Error|Exception)``) requires ``Error`` or ``Exception``, not ``E`` and ``rror``
            prefix = [(sre_c.LITERAL, ord(c)) for c in run]
            av = (av[0], [prefix + list(alt) for alt in av[1]])
            run.clear()
        flush()
        inner: Branches | None = None
        if op is sre_c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if del_flags:
                continue
            if add_flags & ~sre_c.SRE_FLAG_IGNORECASE:
                continue
            inner = _seq(list(sub), fold or bool(add_flags & sre_c.SRE_FLAG_IGNORECASE))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, _hi, sub = av
            if lo >= 1:
                inner = _seq(list(sub), fold)
        elif op is sre_c.BRANCH:
            alts: Branches = []
            for alt in av[1]:
                a = _seq(list(alt), fold)
                if a is None or any(not b for b in a):
                    alts = []
                    break
                alts.extend(a)
            inner = alts or None
        elif op is sre_c.IN:
            chars = [v for o, v in av if o is sre_c.LITERAL]
            if len(chars) == len(av) and 0 < len(chars) <= 4:
                inner = [[Lit(chr(c), fold)] for c in chars]
        if inner is None or any(not b for b in inner):
            continue  # this item requires nothing we can use
        if len(branches) * len(inner) > _MAX_BRANCHES:
            continue
        branches = [b + ib for b in branches for ib in inner]
    flush()
    return branches


# --------------------------------------------------------------------------------------------------------------------
# Planning


@dataclass(frozen=True)
class Plan:
    """How one scan searches: a literal prefilter (Aho-Corasick) or one DFA alternation, plus fallbacks.

    Picklable and small; the workers compile it.
    """

    literals: tuple[tuple[bytes, int], ...] = ()
    """(literal, pattern id) pairs: a line can match pattern i only if it holds one of i's literals."""
    dfa: tuple[int, ...] = ()
    """Pattern ids searched by one combined RE2 alternation (all RE2 patterns when no prefilter is used)."""
    fallback: tuple[int, ...] = ()
    """Pattern ids RE2 cannot run (``regex`` module, with a timeout)."""
    anchors: tuple[tuple[bytes, int], ...] = ()
    """(literal, offset of its byte pair rarest on the sample) for the native line finder (:func:`_native`); a
    literal not listed gets the finder's static guess."""
    dense: tuple[tuple[int, tuple[bytes, ...]], ...] = ()
    """(pattern id, needles) of the dense patterns (:attr:`PatternSpec.dense`): a line can match only if it holds
    one of the needles (found with ``bytes.find``); no needles: found by the pattern's own RE2 search. These ids are
    also in ``literals``/``dfa``, used where the pattern is searched on every line (a file's head and tail)."""
    dfa_search: tuple[tuple[str, str], ...] = ()
    """(pattern, what its DFA search looks for instead): a superset of the pattern (its tail from an item whose first
    byte is rare on the sample, :func:`_rare_suffix`) that RE2 skips to with memchr; the lines found are checked
    exactly. Patterns not listed are searched as :func:`_relaxed` gives them."""
    profile: bytes = field(default=b"", repr=False)
    """The sample's most frequent byte pairs (``_linescan.pair_profile``): the native finder merges its anchors into
    the SIMD filter's buckets so that these pass few of them (empty: a static prior of log text decides)."""

    def describe(self) -> str:
        """One line for benchmarks and debugging."""
        tail = f", {len(self.dense)} dense (sampled)" if self.dense else ""
        if self.literals:
            engine = "one native pass" if _native() is not None else "Aho-Corasick"
            return (
                f"prefilter on {len(self.literals)} literals ({engine}), dfa {len(self.dfa)}, "
                f"fallback {len(self.fallback)}{tail}"
            )
        return f"one RE2 DFA over {len(self.dfa)} patterns, fallback {len(self.fallback)}{tail}"


_FOLD_SAFE = frozenset("abcdefghijlmnopqrtuvwxyzABCDEFGHIJLMNOPQRTUVWXYZ")
"""ASCII letters whose case folding stays in ASCII (RE2 folds k to the Kelvin sign and s to long s)."""


def _fold_variants(text: str) -> list[str]:
    """Every ASCII-case spelling of ``text`` (its letters must be in :data:`_FOLD_SAFE`)."""
    out = [""]
    for ch in text:
        spellings = (ch.lower(), ch.upper()) if ch in _FOLD_SAFE else (ch,)
        out = [o + c for o in out for c in spellings]
    return out


def _fold_pieces(lit: Lit) -> list[str]:
    """Substrings of a case-insensitive literal usable by a case-sensitive prefilter: ASCII only, no letter whose
    folding leaves ASCII, at most three letters (eight spellings)."""
    text = lit.text
    out: list[str] = []
    for i in range(len(text)):
        for j in range(i + 1, len(text) + 1):
            piece = text[i:j]
            if not piece.isascii() or any(c.isalpha() and c not in _FOLD_SAFE for c in piece):
                break
            if sum(c.isalpha() for c in piece) > 3:
                break
            out.append(piece)
    return out


def make_plan(spec: PatternSpec, sample: bytes) -> Plan:
    """Choose how to search ``spec`` (see module doc), using a ``sample`` of the corpus to pick rare literals.

    A pattern without a usable literal goes to the DFA alone; the others keep the prefilter (an earlier version sent
    every pattern to the DFA as soon as one had no literal: that was the slow path of big marker sets)."""
    re2_ids: list[int] = []
    fallback: list[int] = []
    for i, pat in enumerate(spec.patterns):
        (re2_ids if _re2_error(pat, spec.ignore_case) is None else fallback).append(i)
    dense_flags = spec.dense or (False,) * len(spec.patterns)
    if not re2_ids:
        return Plan(fallback=tuple(fallback))
    branches = {i: required_literals(spec.patterns[i], spec.ignore_case) for i in re2_ids}
    # which literals' counts the choice below asks for does not depend on the counts: list them first, count them all
    # in one pass over the sample, then choose
    wanted: dict[tuple[str, bool], int] = {}

    def ask(text: str, fold: bool) -> int:
        wanted[(text, fold)] = 0
        return 0

    for i in re2_ids:
        _needles(branches[i], ask)
    seen = _count_literals(sample, list(wanted))

    def occurrences(text: str, fold: bool) -> int:
        return seen[(text, fold)]

    literals: set[tuple[bytes, int]] = set()
    dfa: list[int] = []
    dense_needles: list[tuple[int, tuple[bytes, ...]]] = []
    for i in re2_ids:
        mine = _needles(branches[i], occurrences)
        if dense_flags[i]:
            dense_needles.append((i, tuple(sorted({lit for lits, _n in mine for lit in lits})) if mine else ()))
        if mine is None:
            dfa.append(i)
            continue
        expected = sum(n for _lit, n in mine)
        if sample and expected * DENSE_LITERAL_BYTES > len(sample) and not dense_flags[i]:
            dfa.append(i)  # its literals are everywhere: a line check per hit would cost more than a DFA pass
        else:
            literals |= {(lit, i) for lits, _n in mine for lit in lits}
    if _aho_corasick() is None:
        return Plan(dfa=tuple(re2_ids), fallback=tuple(fallback), dense=tuple(dense_needles))
    native = _native()
    if native is not None and sample and not spec.ignore_case:
        # a DFA pattern with a run of digits and literal characters (an ISO date's ``20\d\d-``) is found by the
        # native finder's pass instead, when the run's spelt-out needles are rare on the sample (one DFA search less)
        spelt = _digit_plans(spec, [i for i in dfa if not dense_flags[i]], sample)
        literals |= {(nd, i) for i, needles in spelt.items() for nd in needles}
        dfa = [i for i in dfa if i not in spelt]
    distinct = sorted({lit for lit, _i in literals})
    dfa_pats = list(dict.fromkeys(spec.patterns[i] for i in dfa))
    dfa_search = tuple(
        (pat, suffix)
        for pat in (dfa_pats if len(dfa_pats) <= SEPARATE_DFA_MAX else [])  # more: one alternation, searched as is
        if (suffix := _rare_suffix(pat, sample, spec.ignore_case)) is not None
    )
    anchors = tuple(zip(distinct, native.choose_anchors(sample, distinct), strict=True)) if native and distinct else ()
    return Plan(
        literals=tuple(sorted(literals)),
        dfa=tuple(dfa),
        fallback=tuple(fallback),
        anchors=anchors,
        profile=native.pair_profile(sample) if native and distinct and sample else b"",
        dense=tuple(dense_needles),
        dfa_search=dfa_search,
    )


def _digit_needles(pattern: str) -> list[tuple[bytes, ...]]:
    """Spelt-out runs of ``pattern``: per maximal run of consecutive top-level items that are a literal character or
    one digit (``\\d``, ``[0-9]``; no quantifier), with at least one of each and at most :data:`DIGIT_NEEDLES_MAX`
    spellings, every spelling of it. Every match of the pattern holds one spelling of each run (RE2's ``\\d`` is
    ASCII only). Empty for a pattern :func:`_top_items` cannot read (a top-level alternation, inline flags)."""
    items = _top_items(pattern)
    if not items:
        return []
    bounds = [*items, len(pattern)]
    sets: list[str | None] = []  # per item: the characters it matches, None: not usable in a run
    for k in range(len(items)):
        item = pattern[bounds[k] : bounds[k + 1]]
        if item in ("\\d", "[0-9]"):
            sets.append("0123456789")
        elif len(item) == 1 and item not in _PURE_META and item.isascii() and item.isprintable():
            sets.append(item)
        elif (
            len(item) == 2 and item[0] == "\\" and not item[1].isalnum() and item[1].isascii() and item[1].isprintable()
        ):
            sets.append(item[1])
        else:
            sets.append(None)
    out: list[tuple[bytes, ...]] = []
    end_of_last = -1
    for start in range(len(sets)):
        run: list[str] = []
        size = 1
        for chars in sets[start:]:
            if chars is None or size * len(chars) > DIGIT_NEEDLES_MAX:
                break
            run.append(chars)
            size *= len(chars)
        end = start + len(run)
        if end <= end_of_last:
            continue  # a tail of the previous run: never rarer
        end_of_last = end
        if any(len(c) > 1 for c in run) and any(len(c) == 1 for c in run):
            spelt = tuple("".join(p).encode() for p in itertools.product(*run))
            if spelt not in out:
                out.append(spelt)
    return out


def _digit_plans(spec: PatternSpec, ids: list[int], sample: bytes) -> dict[int, tuple[bytes, ...]]:
    """For DFA patterns ``ids``: the spelt-out run (:func:`_digit_needles`) the native finder can search instead of a
    DFA, per pattern that has one whose needles are rare on ``sample`` (:data:`DENSE_LITERAL_BYTES`) and whose anchor
    pairs stop the finder rarely (:data:`DIGIT_STOP_BYTES`); the cheapest run by the planner's measure (its lines and
    its rarest pairs' stops, :data:`LINE_CHECK_PAIRS`). Needs the native extension (one counting pass)."""
    runs = {i: _digit_needles(spec.patterns[i]) for i in ids}
    keys = sorted({nd for rs in runs.values() for r in rs for nd in r})
    keys += sorted({nd[j : j + 2] for nd in keys for j in range(len(nd) - 1)} - set(keys))
    if not keys:
        return {}
    counted = dict(zip(keys, _native().count_literals(sample, keys), strict=True))
    out: dict[int, tuple[bytes, ...]] = {}
    for i, rs in runs.items():
        best: tuple[int, tuple[bytes, ...]] | None = None
        for needles in rs:
            lines = sum(counted[nd] for nd in needles)
            stops = sum(min(counted[nd[j : j + 2]] for j in range(len(nd) - 1)) for nd in needles)
            if lines * DENSE_LITERAL_BYTES > len(sample) or stops * DIGIT_STOP_BYTES > len(sample):
                continue
            cost = lines * LINE_CHECK_PAIRS + stops
            if best is None or cost < best[0]:
                best = (cost, needles)
        if best is not None:
            out[i] = best[1]
    return out


def _count_literals(sample: bytes, keys: list[tuple[str, bool]]) -> dict[tuple[str, bool], int]:
    """(text, fold) -> occurrences of ``text`` in ``sample`` (non-overlapping, as ``bytes.count``; ``fold``: of its
    lower case in the lower-cased sample), counted natively in one pass per case when the extension is built."""
    plain = [(t, f) for t, f in keys if not f]
    folded = [(t, f) for t, f in keys if f]
    out: dict[tuple[str, bool], int] = {}
    native = _native()
    for group, buf in ((plain, sample), (folded, sample.lower() if folded else b"")):
        if not group:
            continue
        needles = [t.encode().lower() if f else t.encode() for t, f in group]
        counts = native.count_literals(buf, needles) if native is not None else [buf.count(nd) for nd in needles]
        out.update(zip(group, counts, strict=True))
    return out


def _needles(
    branches: Branches | None, occurrences: Callable[[str, bool], int]
) -> list[tuple[tuple[bytes, ...], int]] | None:
    """The cheapest literal (all its case spellings) of every branch of a pattern (its :func:`required_literals`) with
    its sample count, or None when some branch has no literal a case-sensitive search can use.

    Cheapest: fewest sample occurrences (each is a candidate line to check) weighed against how often its rarest byte
    pair occurs (each is a stop of the native finder, :data:`LINE_CHECK_PAIRS` of them cost one line check); ties: the
    fewer occurrences, then the longer literal."""
    if branches is None:
        return None

    def pairs(text: str, fold: bool) -> int:
        """Sample occurrences of ``text``'s rarest byte pair (of ``text`` itself when it is one character)."""
        if len(text) < 2:
            return occurrences(text, fold)
        return min(occurrences(text[j : j + 2], fold) for j in range(len(text) - 1))

    out: list[tuple[tuple[bytes, ...], int]] = []
    for br in branches:
        options: list[tuple[int, int, int, list[str]]] = []  # (cost, sample count, -length, spellings)
        # the longest few literals of a branch are the candidates (counting every one-letter literal of a long
        # pattern over the sample cost more than the scan of a small job)
        for lit in sorted(br, key=lambda x: -len(x.text))[:MAX_LITERALS_TRIED]:
            if "\n" in lit.text:
                continue
            if not lit.fold:
                n = occurrences(lit.text, False)
                options.append((n * LINE_CHECK_PAIRS + pairs(lit.text, False), n, -len(lit.text), [lit.text]))
                continue
            for piece in _fold_pieces(lit):
                spellings = _fold_variants(piece)
                n = occurrences(piece, True) + len(spellings)
                options.append((n * LINE_CHECK_PAIRS + pairs(piece, True), n, -len(piece), spellings))
        if not options:
            return None
        _cost, n_found, _len, spellings = min(options)
        out.append((tuple(sp.encode() for sp in spellings), n_found))
    return out


def _sample(files: Sequence[LogFile]) -> bytes:
    """Up to :data:`SAMPLE_BYTES` of each of a few files: a quarter from the start (start-up lines such as NCCL INFO
    blocks are frequent there: a literal of theirs is no rare anchor) and the rest from the middle (compressed files:
    all from the start)."""
    picked = sorted(files, key=lambda f: -f.size)[:SAMPLE_FILES]
    parts: list[bytes] = []
    for lf in picked:
        try:
            with open_binary(lf) as fh:
                if lf.compression == "none" and lf.size > 2 * SAMPLE_BYTES:
                    head = fh.read(SAMPLE_BYTES // 4)
                    fh.seek(lf.size // 2)
                    parts.append(head + b"\n" + fh.read(SAMPLE_BYTES - len(head)))
                else:
                    parts.append(fh.read(SAMPLE_BYTES))
        except Exception:  # a damaged file is reported by the scan itself
            continue
    return b"\n".join(parts)


def _aho_corasick() -> Any:
    """The ``ahocorasick_rs`` module (SIMD multi-literal search, ripgrep's Teddy), or None when not installed."""
    if os.environ.get("DEBUG_TRAINING_LOGS_NO_PREFILTER"):
        return None
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    return ahocorasick_rs


def _native() -> Any:
    """The compiled one-pass line finder (``_linescan``, built from ``_linescan.c`` at install when a C compiler is
    there), or None: not built, or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` set (the ``ahocorasick_rs`` passes are then used,
    with identical results)."""
    if os.environ.get("DEBUG_TRAINING_LOGS_NO_NATIVE"):
        return None
    try:
        return importlib.import_module("debug_training_logs.logs._linescan")
    except ImportError:
        return None


NATIVE_PAGE_LINES = 1 << 14
"""Candidate lines the native finder returns per call (a window where every line holds a literal is paged)."""


# --------------------------------------------------------------------------------------------------------------------
# The compiled matcher (per worker process)


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


@functools.lru_cache(maxsize=4096)
def _verifier(pattern: str, ignore_case: bool) -> Any:
    """The compiled RE2 check of one pattern, shared by every matcher of the process (a scan builds one matcher per
    set of active patterns, and most patterns are in all of them)."""
    return _re2.RE2(pattern.encode(), _re2_options(ignore_case))


_PURE_META = frozenset(".^$*+?{}[]|()\\")


def _pure_literal(pattern: str) -> bytes | None:
    """The bytes ``pattern`` matches when it is a plain literal (printable ASCII, only punctuation or spaces escaped),
    read the same way by RE2 and Python; else None. A line matches it exactly when it holds those bytes."""
    if not pattern.isascii():
        return None
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or pattern[i + 1].isalnum() or not pattern[i + 1].isprintable():
                return None
            out.append(pattern[i + 1])
            i += 2
            continue
        if c in _PURE_META or not c.isprintable():
            return None
        out.append(c)
        i += 1
    return "".join(out).encode() if out else None


@functools.lru_cache(maxsize=4096)
def _pure_branches(pattern: str) -> frozenset[bytes]:
    """The top-level alternatives of ``pattern`` that are plain literals (:func:`_pure_literal`): a line holding one
    matches the pattern. None for a pattern with inline flags (other than ``(?:``)."""
    if std_re.search(r"\(\?(?!:)", pattern):
        return frozenset()
    out: set[bytes] = set()
    depth, i, start, n = 0, 0, 0, len(pattern)
    while i <= n:
        c = pattern[i] if i < n else "|"
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            lit = _pure_literal(pattern[start:i])
            if lit is not None:
                out.add(lit)
            start = i + 1
        i += 1
    return frozenset(out)


_EDGE_SENSITIVE = std_re.compile(r"\\[Az]|\(\?(?!:)")
"""What in a pattern could match differently at the edge of a span searched in place than at a buffer's edge."""

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


def _relaxed(pattern: str) -> str:
    """``pattern`` without a leading word boundary: a superset of its matches, with a literal prefix RE2 skips to."""
    if pattern.startswith("\\b") and len(pattern) > 2 and pattern[2] not in "*+?{|)":
        return pattern[2:]
    return pattern


_QUANTIFIER = std_re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})[?+]?")
_CLASS_ESCAPES = frozenset("dDsSwWbB")


def _class_end(pattern: str, i: int) -> int:
    """Just past the ``]`` closing the character class that opens at ``pattern[i]`` (a ``]`` first in it, after an
    optional ``^``, is a member); past the end (> ``len(pattern)``) when it is not closed."""
    n = len(pattern)
    j = i + 1
    if j < n and pattern[j] == "^":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1 if j < n else n + 1


def _top_items(pattern: str) -> list[int] | None:
    """Where each top-level item (an atom with its quantifier) of ``pattern`` starts, or None when the pattern has a
    top-level alternation or anything this reader does not know for sure (inline flags, \\Q, POSIX classes, escapes
    other than punctuation and the class escapes)."""
    if "\\Q" in pattern or "[:" in pattern or std_re.search(r"\(\?(?!:)", pattern):
        return None
    starts: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        starts.append(i)
        c = pattern[i]
        if c == "|" or c in "*+?{)":
            return None
        if c == "\\":
            if i + 1 >= n or (pattern[i + 1].isalnum() and pattern[i + 1] not in _CLASS_ESCAPES):
                return None
            i += 2
        elif c == "[":
            i = _class_end(pattern, i)
            if i > n:
                return None
        elif c == "(":
            depth, j = 0, i
            while j < n:
                ch = pattern[j]
                if ch == "\\":
                    j += 2
                    continue
                if ch == "[":
                    j = _class_end(pattern, j)
                    continue
                depth += ch == "("
                depth -= ch == ")"
                j += 1
                if depth == 0:
                    break
            if depth != 0:
                return None
            i = j
        else:
            i += 1
        q = _QUANTIFIER.match(pattern, i)
        if q is not None:
            i = q.end()
        elif i < n and pattern[i] == "{":
            return None  # a brace RE2 and this reader might read differently
    return starts


def _rare_suffix(pattern: str, sample: bytes, ignore_case: bool) -> str | None:
    """A tail of ``pattern`` (its items from one on, :func:`_top_items`) that begins with a literal byte at least
    twice as rare on ``sample`` than the byte the whole pattern's search would skip to, or None. Every match of
    the pattern holds a match of any of its tails in the same line, so a search for the tail finds a superset of the
    lines (``\\b20\\d\\d-\\d\\d-...``: ``20`` is everywhere in step logs, ``-\\d\\d-...`` much rarer)."""
    if ignore_case or not sample:
        return None
    items = _top_items(pattern)
    if not items or len(items) < 2:
        return None
    relaxed_from = len(pattern) - len(_relaxed(pattern))
    counted: dict[str, int] = {}

    def count(ch: str) -> int:
        if ch not in counted:
            counted[ch] = sample.count(ch.encode())
        return counted[ch]

    best: tuple[int, int] | None = None  # (count, item start)
    base: int | None = None
    for k, start in enumerate(items):
        end = items[k + 1] if k + 1 < len(items) else len(pattern)
        item = pattern[start:end]
        if item.startswith("\\"):
            lit = item[1] if len(item) >= 2 and not item[1].isalnum() else None
            rest = item[2:]
        else:
            lit = item[0] if item[0] not in ".^$[(" else None
            rest = item[1:]
        optional = rest[:1] in ("?", "*") or rest.startswith("{0")
        if start == relaxed_from:
            # what the unchanged search skips to: its first literal byte (none: it cannot skip at all)
            base = count(lit) if lit is not None and not optional else None
            if base is None:
                return None
        if start <= relaxed_from or lit is None or optional or not lit.isascii():
            continue
        if best is None or count(lit) < best[0]:
            best = (count(lit), start)
    if base is None or best is None or best[0] * 2 > base:
        return None
    suffix = pattern[best[1] :]
    return suffix if _re2_error(suffix, ignore_case) is None else None


def _fallback_timeout(pat: Any) -> UserInputError:
    text = pat.pattern.decode(errors="replace") if isinstance(pat.pattern, bytes) else str(pat.pattern)
    return UserInputError(
        f"Pattern {text!r} needs a backtracking engine and used up this search's budget of "
        f"{_budget().total:.0f} s for such patterns before every file was read; the search was stopped. Rewrite it "
        "in RE2 syntax (no back-references or look-arounds), or search fewer files."
    )


def _finditer(rx: Any, data: bytes, timeout: float) -> list[Any]:
    return list(rx.finditer(data, timeout=timeout))


def _search(rx: Any, data: bytes, timeout: float) -> Any:
    return rx.search(data, timeout=timeout)


def _run_fallback(pat: Any, call: Callable[[float], Any]) -> Any:
    """``call(timeout)`` within what is left of the search's backtracking budget, charging the time it took."""
    budget = _budget()
    left = budget.left()
    if left <= 0:
        raise _fallback_timeout(pat)
    t0 = time.monotonic()
    try:
        return call(left)
    except TimeoutError as exc:
        raise _fallback_timeout(pat) from exc
    finally:
        budget.spend(time.monotonic() - t0)


Buffer = bytes | mmap.mmap
"""What the scan searches: a window's bytes, or a whole memory-mapped file searched in spans (no copy)."""

Hit = tuple[int, int, list[int], int]
"""(line start, line end, matching pattern ids, line index in the chunk or -1 when not known)."""


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


def _literal_alternatives(pattern: str) -> tuple[bytes, ...] | None:
    """The literals of a pattern that is nothing but plain literals between ``|`` (:func:`_pure_literal` each, e.g.
    ``lhotse|Lhotse``): a line matches it exactly when it holds one of them. None for any other pattern (an escaped
    ``|`` or an empty alternative included)."""
    lits = [_pure_literal(part) for part in pattern.split("|")]
    return tuple(lit for lit in lits if lit is not None) if all(lit is not None for lit in lits) else None


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


# --------------------------------------------------------------------------------------------------------------------
# Dense patterns: a bounded sample in the middle of a file, every hit in its head and tail


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


# --------------------------------------------------------------------------------------------------------------------
# Ranks


_DENSES: dict[tuple[PatternSpec, Plan, bool], _Dense] = {}

_LAST_SCAN: tuple[PatternSpec, Plan, bool, dict[frozenset[int], _Matcher], _Dense | None] | None = None
"""(spec, plan, extension used, matchers per active set, dense search) of the latest scan in this process: the next
file of the same scan finds them by identity (hashing a spec and plan, as the shared caches do, costs ~15 us each time,
per file and per active set)."""

MAX_ACTIVE_SETS = 64
"""Matchers one scan keeps by active set (capped patterns leave the search in a different order in each file)."""


def _scan_state(spec: PatternSpec, plan: Plan) -> tuple[dict[frozenset[int], _Matcher], _Dense | None]:
    """The matchers (by active set, filled by the caller) and the dense search of a scan, shared by its files."""
    global _LAST_SCAN
    native = _native() is not None
    last = _LAST_SCAN  # read once: another thread may replace it
    if last is not None and last[0] is spec and last[1] is plan and last[2] == native:
        if len(last[3]) > MAX_ACTIVE_SETS:
            last[3].clear()
        return last[3], last[4]
    matchers: dict[frozenset[int], _Matcher] = {}
    dense = _dense(spec, plan) if plan.dense else None
    _LAST_SCAN = (spec, plan, native, matchers, dense)
    return matchers, dense


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

    return r"\[rank(?:" + comp(trie, 0) + r")\](?::| )"


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


# --------------------------------------------------------------------------------------------------------------------
# Reading


RELEASE_BYTES = 64 << 20
"""After this many bytes of a memory-mapped file are searched, their pages leave the resident set."""


def _windows(
    lf: LogFile, problems: ReadProblems, *, split_long_lines: bool = True, start: int = 0
) -> Generator[bytes, None, None]:
    """Decompressed chunks of ``lf`` that end on a line boundary (the last may lack its newline); ``start``: the byte
    offset of a line start to begin at (plain files only, a :class:`Checkpoints` offset).

    A line longer than :data:`~debug_training_logs.logs.reader.CHUNK` (a progress bar redrawn with ``\\r`` for
    hours) never becomes one huge window: with ``split_long_lines`` (the search) it comes in windows cut after a
    ``\\r``, so every record is searched and newlines alone still number the lines; without (reading lines back)
    it is cut to its head and tail, the cut counted in ``problems``.
    """
    if lf.compression != "none":
        yield from iter_chunks(lf, problems, split_long_lines=split_long_lines)
        return
    for buf, lo, hi, _last in _spans(lf, problems, split_long_lines=split_long_lines, start=start):
        yield buf if lo == 0 and hi == len(buf) and isinstance(buf, bytes) else buf[lo:hi]


Span = tuple[Buffer, int, int, bool]
"""(buffer, start, end, is the last): one window of a file is ``buffer[start:end]``."""


def _spans(
    lf: LogFile, problems: ReadProblems, *, split_long_lines: bool = True, start: int = 0
) -> Generator[Span, None, None]:
    """The windows of :func:`_windows`, without copying those of a plain file: each is a span of the file's memory
    map, valid until the next one is asked for (the pages before it are then released, and the map is closed at the
    end). Compressed files: each decompressed chunk whole."""
    if lf.compression != "none":
        for chunk, last in _lookahead(iter_chunks(lf, problems, split_long_lines=split_long_lines)):
            yield chunk, 0, len(chunk), last
        return
    try:
        with open(lf.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        problems.add(lf.rel, f"read error ({type(exc).__name__}: {exc})")
        return
    with mm:
        # (from a checkpoint's offset: the scan that recorded it read this file, unchanged since, as text)
        why_binary = binary_reason(mm[:8192]) if start == 0 else None
        if why_binary is not None:
            problems.add(lf.rel, why_binary)
            return
        long_lines = LongLines()
        released = start - start % mmap.PAGESIZE
        in_long = False

        def release(upto: int) -> None:
            # drop pages already read from our resident set (the page cache keeps them): one multi-GB file must not
            # show as GBs of RSS
            nonlocal released
            upto -= upto % mmap.PAGESIZE
            if upto - released >= RELEASE_BYTES and hasattr(mmap, "MADV_DONTNEED"):
                mm.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto

        while start < size:
            release(start)
            end = start + WINDOW
            if end >= size:
                end = size
            else:
                nl = mm.rfind(b"\n", start, end)
                if nl < 0:
                    nl = mm.find(b"\n", end, start + CHUNK)
                if nl >= 0:
                    end = nl + 1
                    in_long = False
                else:  # a line longer than a chunk
                    if not in_long:
                        long_lines.lines += 1
                        in_long = True
                    if split_long_lines:
                        cr = mm.rfind(b"\r", start, end)
                        end = end if cr < 0 else cr + 1
                    else:
                        line_end = _line_end(mm, start + CHUNK, release)
                        cut = line_end - start - 2 * LONG_LINE_KEEP
                        long_lines.cut_bytes += cut
                        head, tail = mm[start : start + LONG_LINE_KEEP], mm[line_end - LONG_LINE_KEEP : line_end]
                        joined = head + cut_marker(cut) + tail
                        yield joined, 0, len(joined), line_end >= size
                        start = line_end
                        in_long = False
                        continue
            yield mm, start, end, end >= size
            start = end
        if long_lines.cut_bytes:
            problems.add(lf.rel, long_lines.note())


def _line_end(mm: mmap.mmap, pos: int, release: Callable[[int], None]) -> int:
    """Offset just past the newline at or after ``pos`` (the size when none), searched a chunk at a time so the
    pages read can be released as it goes."""
    size = len(mm)
    while pos < size:
        nl = mm.find(b"\n", pos, pos + CHUNK)
        if nl >= 0:
            return nl + 1
        pos += CHUNK
        release(pos)
    return size


# --------------------------------------------------------------------------------------------------------------------
# Scanning one file


def _scan_one(
    lf: LogFile,
    spec: PatternSpec,
    plan: Plan,
    sink_factory: SinkFactory | None,
    head_n: int,
    tail_n: int,
    collect_ranks: bool,
) -> FileScan:
    k = len(spec.patterns)
    caps = spec.max_hits or (None,) * k
    dense_all = frozenset(i for i, _n in plan.dense)
    matchers, dense = _scan_state(spec, plan)  # matchers per active set, shared with the scan's other files
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
                matcher = matchers.get(searched)
                if matcher is None:
                    matcher = matchers[searched] = _matcher(spec, plan, searched)
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
    result.ranks = {int(s) for s in seen_ranks}
    result.problem = problems.items.get(lf.rel)
    if stamp is not None and marks and result.bytes_read == stamp[0] and _file_stamp(lf) == stamp:
        result.checkpoints = Checkpoints(stamp, tuple(o for o, _ in marks), tuple(b for _, b in marks), line_base)
    if sink is not None:
        result.sink_result = sink.finish()
    return result


BulkTaker = Callable[[list[int], list[str]], None]
"""A sink's ``on_bulk``: (line numbers, texts) of a run of lines of its bulk pattern (:class:`Sink`)."""


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


def _file_stamp(lf: LogFile) -> tuple[int, int, int] | None:
    """(size, mtime in ns, inode) of ``lf`` now, the identity :class:`Checkpoints` are valid for (the scan cache's)."""
    try:
        st = os.stat(lf.path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _lookahead(chunks: Iterator[bytes]) -> Iterator[tuple[bytes, bool]]:
    """``(chunk, is_last)`` for every chunk (one chunk is held back to know which is the last)."""
    prev: bytes | None = None
    for c in chunks:
        if prev is not None:
            yield prev, False
        prev = c
    if prev is not None:
        yield prev, True


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


def _worker_count(files: Sequence[LogFile]) -> int:
    total = sum(f.size for f in files)
    if len(files) < 2 or total < PARALLEL_MIN_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(len(files), cores))


def scan_files(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None = None,
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
    plan: Plan | None = None,
) -> list[FileScan]:
    """Scan every file for ``spec``; results come back in the order of ``files``.

    ``head_lines``/``tail_lines``: also return that many first/last lines of each file. ``collect_ranks``: record
    the ``[rankN]:`` global ranks seen anywhere in each file (for coverage). ``plan``: a precomputed
    :func:`make_plan` (default: planned from a sample of ``files``).
    """
    results: list[FileScan | None] = [None] * len(files)
    for i, r in scan_each(
        files,
        spec,
        sink_factory,
        _as_is,
        head_lines=head_lines,
        tail_lines=tail_lines,
        collect_ranks=collect_ranks,
        plan=plan,
    ):
        results[i] = r
    return [r for r in results if r is not None]


T = TypeVar("T")


def _as_is(s: FileScan) -> FileScan:
    return s


def scan_each(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None,
    pack: Callable[[FileScan], T],
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
    plan: Plan | None = None,
) -> Iterator[tuple[int, T]]:
    """Scan every file for ``spec`` (arguments as :func:`scan_files`) and yield ``(index in files, pack(result))``
    as each file is done, in no set order. ``pack`` (picklable) runs where the file was scanned, in the worker
    process: what it returns is all that crosses back, so the caller can fold each file's result and let it go
    instead of holding every file's objects. The files' :class:`Checkpoints` are remembered here either way."""
    started = start_each(
        files,
        spec,
        sink_factory,
        pack,
        head_lines=head_lines,
        tail_lines=tail_lines,
        collect_ranks=collect_ranks,
        plan=plan,
    )
    try:
        yield from started.results()
    finally:
        started.close()


def start_each(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None,
    pack: Callable[[FileScan], T],
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
    plan: Plan | None = None,
    ahead_bytes: int = 0,
) -> StartedScan[T]:
    """:func:`scan_each`'s scan, started now: planned, and its worker processes forked and reading, before the caller
    asks for the first result (:meth:`StartedScan.results`). ``ahead_bytes``: hand each worker files up to about this
    many bytes at once (at least :data:`_AHEAD`), for a caller that will be busy with other work before it reads
    results and hands out more (:func:`~debug_training_logs.analysis.inventory.start_scan`). The caller must
    :meth:`StartedScan.close` it (after reading every result, or to give it up)."""
    compile_patterns(spec)
    if plan is None:
        plan = make_plan(spec, _sample(files))
    global _BUDGET
    _BUDGET = _Budget(FALLBACK_BUDGET_S) if plan.fallback else None  # one budget for this whole search
    workers = _worker_count(files)

    def task(i: int) -> tuple[Checkpoints | None, T]:
        return _scan_packed(files[i], spec, plan, sink_factory, head_lines, tail_lines, collect_ranks, pack)

    pool = None
    if workers > 1:
        order = sorted(range(len(files)), key=lambda i: -files[i].size)  # biggest first: better packing
        pool = _Pool(task, order, workers, [f.size for f in files], ahead_bytes)
    return StartedScan(files, task, workers, pool)


class StartedScan(Generic[T]):
    """A scan :func:`start_each` started: its worker processes (if several) read the files already."""

    def __init__(
        self,
        files: Sequence[LogFile],
        task: Callable[[int], tuple[Checkpoints | None, T]],
        workers: int,
        pool: _Pool[tuple[Checkpoints | None, T]] | None,
    ) -> None:
        self.files = files
        self._task = task
        self._workers = workers
        self._pool = pool

    @property
    def forked(self) -> bool:
        """Whether worker processes read the files (else :meth:`results` reads them one by one, in this process)."""
        return self._pool is not None

    def results(self) -> Iterator[tuple[int, T]]:
        """``(index in files, packed result)`` as each file is done, in no set order (see :func:`scan_each`)."""
        files, total = self.files, len(self.files)
        progress.report(
            0, total, f"scanning {total} file(s), {sum(f.size for f in files):,} bytes, {self._workers} process(es)"
        )
        if self._pool is None:
            for i, lf in enumerate(files):
                cp, packed = self._task(i)
                _remember(lf, cp)
                progress.report(i + 1, total, f"scanned {lf.rel}")
                yield i, packed
            return
        for done, (i, (cp, packed)) in enumerate(self._pool.results(), start=1):
            _remember(files[i], cp)
            progress.report(done, total, f"scanned {files[i].rel}")
            yield i, packed

    def close(self) -> None:
        """End the scan: no worker outlives this (the ones still reading are killed), every one is reaped."""
        if self._pool is not None:
            self._pool.close()


class _RemoteTraceback(Exception):
    """The traceback of an error raised in a worker process (the ``__cause__`` of the error raised here)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class WorkerDied(RuntimeError):
    """A scan's worker process ended without answering for the file it had (killed, out of memory, crashed)."""


_AHEAD = 2
"""Files a worker process holds (handed out, not answered for yet) while the main process reads its results: it starts
the next without waiting for the main process."""

EARLY_PIPE_BYTES = 1 << 20
"""The capacity asked for a worker's result pipe when it is handed files ahead (``ahead_bytes``): its results wait
there, the worker going on, while the main process is busy elsewhere (64 KB by default: ~4 files' results of a
1,024-rank ``analyze``). Linux grants up to ``/proc/sys/fs/pipe-max-size`` (1 MB by default); where it refuses, a
worker waits at a full pipe, as it would anyway."""


class _Pool(Generic[T]):
    """``task(i)`` for every ``i`` of ``order``, computed by ``workers`` processes forked from this one when it is made,
    handed out in ``order``: at first up to ``ahead_bytes`` of files (by ``sizes``) or :data:`_AHEAD` files each,
    then one more each time a worker holding fewer than :data:`_AHEAD` answers.

    The workers inherit everything the task needs at the fork; the main process sends each one file indices on a
    pipe and reads back the pickled results on another. An error in a task is raised by :meth:`results` (with the
    worker's traceback as its cause); a worker that ends without answering raises :class:`WorkerDied`. However it
    ends (done, error, KeyboardInterrupt, the caller giving up), :meth:`close` leaves no worker running: the ones
    still running are killed and every one is reaped. Cheaper for the main process than a ``ProcessPoolExecutor``
    (no threads, no queue feeder: ~30 ms less CPU for 128 files)."""

    def __init__(
        self, task: Callable[[int], T], order: Sequence[int], workers: int, sizes: Sequence[int], ahead_bytes: int
    ) -> None:
        self._pending = iter(order)
        self._procs: dict[int, _Worker] = {}  # by the read end of its result pipe
        self._pids: list[int] = []  # not reaped yet
        self._poller = select.poll()
        try:
            for _ in range(workers):
                self._fork(task, ahead_bytes > 0)
            if ahead_bytes > 0:
                self._hand_out_ahead(order, sizes, ahead_bytes)
            for worker in self._procs.values():
                _hand_out(self._pending, worker, _AHEAD - len(worker.held))
        except BaseException:
            self.close()
            raise

    def _fork(self, task: Callable[[int], T], big_pipe: bool) -> None:
        with _FORK_LOCK:
            task_r, task_w = os.pipe()
            res_r, res_w = os.pipe()
            if big_pipe:
                with contextlib.suppress(OSError, AttributeError):  # (F_SETPIPE_SZ: Linux only)
                    fcntl.fcntl(res_w, fcntl.F_SETPIPE_SZ, EARLY_PIPE_BYTES)
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the caller's code
                code = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the main process ends it
                    for fd in (task_w, res_r, *_POOL_FDS):
                        os.close(fd)  # its own pipes' other ends; every other worker's, of any scan
                    _work(task, task_r, res_w)
                    code = 0
                finally:
                    os._exit(code)
            self._pids.append(pid)
            os.close(task_r)
            os.close(res_w)
            _POOL_FDS.update((task_w, res_r))
        self._procs[res_r] = _Worker(pid, task_w)
        self._poller.register(res_r, select.POLLIN)

    def _hand_out_ahead(self, order: Sequence[int], sizes: Sequence[int], ahead_bytes: int) -> None:
        """Deal the first files out in turn until each worker holds about ``ahead_bytes`` (the last may hold less)."""
        workers = list(self._procs.values())
        held_bytes = [0] * len(workers)
        for k, i in enumerate(order):
            w = k % len(workers)
            if held_bytes[w] >= ahead_bytes:
                break
            next(self._pending)
            os.write(workers[w].task_w, i.to_bytes(4, "little"))
            workers[w].held.append(i)
            held_bytes[w] += sizes[i]

    def results(self) -> Iterator[tuple[int, T]]:
        """``(i, task(i))`` as each is done."""
        procs, poller = self._procs, self._poller
        while procs:
            for fd, _ev in poller.poll():
                worker = procs[fd]
                message = _read_message(fd)
                if message is None:  # the worker ended
                    if worker.held:
                        _, status = os.waitpid(worker.pid, 0)
                        self._pids.remove(worker.pid)
                        raise WorkerDied(
                            f"a scan worker process ended ({_status_text(status)}) before it answered for its "
                            f"{len(worker.held)} file(s)"
                        )
                    poller.unregister(fd)
                    _close(fd)
                    del procs[fd]
                    continue
                ok, value = pickle.loads(message)
                if not ok:
                    exc, tb = value
                    exc.__cause__ = _RemoteTraceback(tb)
                    raise exc
                i = worker.held.pop(0)
                _hand_out(self._pending, worker, _AHEAD - len(worker.held))
                yield i, value

    def close(self) -> None:
        """Kill the workers still running and reap every one (again: nothing)."""
        for fd, worker in self._procs.items():
            for f in (fd, worker.task_w):
                if f >= 0:
                    _close(f)
        self._procs.clear()
        pids, self._pids = self._pids, []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a worker done with its files has exited already
            os.waitpid(pid, 0)


_FORK_LOCK = threading.Lock()
_POOL_FDS: set[int] = set()
"""The main process's ends of every worker's pipes, of every scan in progress (the server runs scans in threads).
A worker closes them all at its start: a copy held by another scan's worker would keep a pipe from ending (a worker
waits for its task pipe to end, the main process for its result pipe), and two scans could wait for each other.
Pipes are made, forked and added under :data:`_FORK_LOCK`."""


def _close(fd: int) -> None:
    with _FORK_LOCK:
        _POOL_FDS.discard(fd)
        os.close(fd)


def _hand_out(pending: Iterator[int], worker: _Worker, n: int) -> None:
    """Send up to ``n`` more indices to a worker; with none left, close its task pipe (it exits when done)."""
    if worker.task_w < 0 or n <= 0:
        return
    sent = 0
    for i in itertools.islice(pending, n):
        os.write(worker.task_w, i.to_bytes(4, "little"))
        worker.held.append(i)
        sent += 1
    if sent < n:  # none left
        _close(worker.task_w)
        worker.task_w = -1


@dataclass(repr=False, eq=False)
class _Worker:
    pid: int
    task_w: int
    """The write end of its task pipe (-1 once closed)."""
    held: list[int] = field(default_factory=list)
    """The indices handed out it has not answered for yet, oldest first."""


def _work(task: Callable[[int], Any], task_r: int, res_w: int) -> None:
    """A worker's loop: read file indices until the task pipe closes, send each result (or error) back."""
    while True:
        raw = _read_exactly(task_r, 4)
        if raw is None:
            return
        try:
            message = pickle.dumps((True, task(int.from_bytes(raw, "little"))), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            tb = "".join(traceback.format_exception(exc))
            try:
                message = pickle.dumps((False, (exc, tb)), pickle.HIGHEST_PROTOCOL)
            except Exception:
                message = pickle.dumps((False, (RuntimeError(f"{type(exc).__name__}: {exc}"), tb)))
        _write_all(res_w, len(message).to_bytes(8, "little") + message)


def _read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``; None at its end (before any byte)."""
    data = os.read(fd, n)
    if not data:
        return None
    while len(data) < n:
        more = os.read(fd, n - len(data))
        if not more:
            raise EOFError("a scan worker's pipe ended in the middle of a message")
        data += more
    return data


def _read_message(fd: int) -> bytearray | None:
    head = _read_exactly(fd, 8)
    if head is None:
        return None
    n = int.from_bytes(head, "little")
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError("a scan worker's pipe ended in the middle of a message")
        got += k
    return buf


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _scan_packed(
    lf: LogFile,
    spec: PatternSpec,
    plan: Plan,
    sink_factory: SinkFactory | None,
    head_n: int,
    tail_n: int,
    collect_ranks: bool,
    pack: Callable[[FileScan], T],
) -> tuple[Checkpoints | None, T]:
    s = _scan_one(lf, spec, plan, sink_factory, head_n, tail_n, collect_ranks)
    return s.checkpoints, pack(s)


CHECKPOINTS = "checkpoints"
"""The kind of the :data:`~debug_training_logs.memo.MEMO` entries that hold a file's :class:`Checkpoints`."""


def _checkpoint_bytes(cp: Checkpoints) -> int:
    return 300 + 80 * len(cp.offsets)  # two tuples of ints, the stamp


def _remember(lf: LogFile, cp: Checkpoints | None) -> None:
    if cp is None:
        return
    for key in {str(lf.path), os.path.realpath(lf.path)}:  # as discovered, and resolved
        MEMO.put((CHECKPOINTS, key), cp, _checkpoint_bytes(cp))


def checkpoints_for(lf: LogFile) -> Checkpoints | None:
    """The checkpoints a scan of this process recorded for ``lf``, if the file is still as it was then (same size,
    mtime and inode); None for a compressed, changed or never scanned file (read it from the top)."""
    if lf.compression != "none":
        return None
    cp = MEMO.get((CHECKPOINTS, str(lf.path)))
    if cp is None:
        cp = MEMO.get((CHECKPOINTS, os.path.realpath(lf.path)))
    if cp is None or _file_stamp(lf) != cp.stamp:
        return None
    return cp  # type: ignore[no-any-return]


TAIL_SEEK_BYTES = 256 << 10
"""A wanted line after the last checkpoint is found by counting newlines backwards from the file's end when it lies
within this many bytes of it (agents' last words, tracebacks: the lines most asked for)."""


def seek_line(lf: LogFile, cp: Checkpoints, line: int) -> tuple[int, int]:
    """(offset of a line start, lines before it) at or before 1-based ``line`` of ``lf``, as near as is cheap to
    know: the checkpoint before it, or for a line near the end a line start found backwards from the end (the file's
    newline count is known); the caller reads forward from there."""
    off, before = cp.seek(line)
    if line <= cp.lines_before[-1] or cp.newlines - line > TAIL_SEEK_BYTES // 16:
        return off, before
    size = cp.stamp[0]
    try:
        with open(lf.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if len(mm) != size:
                return off, before
            span = 16 << 10
            while span <= TAIL_SEEK_BYTES and size - span > off:
                nl = mm.find(b"\n", size - span - 1, size - 1)  # the first line start at or after size - span
                if nl >= 0:
                    n_before = cp.newlines - mm[nl + 1 : size].count(b"\n")
                    if n_before < line:
                        return nl + 1, n_before
                span *= 4
    except (OSError, ValueError):
        pass
    return off, before


def lines_at(
    lf: LogFile, wanted: set[int], keep_tail: int = 0, checkpoints: Checkpoints | None = None
) -> dict[int, str]:
    """The text of the given 1-based line numbers of ``lf`` (cut at :data:`MAX_LINE_CHARS`), read at scan speed:
    from the nearest :class:`Checkpoints` before each wanted line when a scan recorded them for the file as it is now
    (``checkpoints``, default :func:`checkpoints_for`), else from the top; newlines are counted per chunk in C and
    only the chunks holding a wanted line are split.

    ``keep_tail``: a line longer than the cut also keeps its last ``keep_tail`` characters after a ``\\r`` (a message
    glued to the end of a tqdm progress line is then still there)."""
    out: dict[int, str] = {}
    if not wanted:
        return out
    cp = checkpoints if checkpoints is not None else checkpoints_for(lf)
    todo = sorted(wanted)
    todo = todo[bisect_right(todo, 0) :]
    i = 0
    while i < len(todo):
        start, base = seek_line(lf, cp, todo[i]) if cp is not None else (0, 0)
        chunks = line_windows(lf, start)
        try:
            for chunk in chunks:
                n_nl = chunk.count(b"\n")
                lines_here = n_nl + (0 if chunk.endswith(b"\n") else 1)
                if todo[i] <= base + lines_here:
                    # split only the side of the chunk that holds the wanted lines (often its end: the last lines)
                    j0 = todo[i] - base - 1
                    k = bisect_right(todo, base + lines_here, i) - 1
                    if j0 > lines_here - (todo[k] - base):
                        raws = chunk.rsplit(b"\n", n_nl - j0 + 1)
                        first = j0 - 1  # index in ``raws`` of line j0 is 1
                    else:
                        raws = chunk.split(b"\n", todo[k] - base)
                        first = 0
                    end = k + 1  # todo[i:end]: the wanted lines in this chunk
                    j0 = todo[i] - base - 1 - first
                    run = raws[j0 : j0 + end - i]
                    if todo[end - 1] - todo[i] == end - 1 - i and max(map(len, run)) <= MAX_LINE_CHARS:
                        # consecutive lines none of which is cut (the lookahead after a line, a wrapped record): decoded
                        # at once (a newline never ends a UTF-8 sequence: each line decodes as it would alone)
                        texts = b"\n".join(run).decode("utf-8", errors="replace").split("\n")
                        if b"\r" in chunk:
                            texts = [t.rstrip("\r") for t in texts]
                        out.update(zip(todo[i:end], texts, strict=True))
                        i = end
                    while i < len(todo) and todo[i] <= base + lines_here:
                        raw = raws[todo[i] - base - 1 - first]
                        head = raw[:MAX_LINE_CHARS]
                        if keep_tail and len(raw) > MAX_LINE_CHARS:
                            head += b"\r" + raw[max(MAX_LINE_CHARS, len(raw) - keep_tail) :]
                        out[todo[i]] = decode(head).rstrip("\r")
                        i += 1
                base += lines_here
                if i >= len(todo) or (cp is not None and cp.seek(todo[i])[1] > base):
                    break  # done, or the next wanted line is nearer another checkpoint
            else:
                return out  # the file ended: the rest of the wanted lines are past its end
        finally:
            chunks.close()
    return out


def line_windows(lf: LogFile, start: int = 0) -> Generator[bytes, None, None]:
    """Chunks of ``lf`` ending on a line boundary as :func:`lines_at` reads them (a line longer than a chunk cut to
    its head and tail), from byte ``start`` (a :class:`Checkpoints` offset; plain files only)."""
    return _windows(lf, ReadProblems(), split_long_lines=False, start=start)


def literal_pattern(text: str) -> str:
    """A pattern that matches ``text`` literally."""
    return std_re.escape(text)

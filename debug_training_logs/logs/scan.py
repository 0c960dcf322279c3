"""Fast multi-pattern search over many files: the "matcher" and the "searcher".

Never loops over lines in Python to search. How it gets near ripgrep's speed (numbers in ``bench/README.md``):

* **Literal prefilter, SIMD speed.** Each pattern is parsed once for the literals any match must contain
  (``NCCL.*timeout`` needs ``NCCL`` and ``timeout``; an alternation needs one per branch). On a sample of the corpus
  the rarest literal of each branch is chosen, and all of them go into one Aho-Corasick automaton
  (``ahocorasick_rs``: Rust's ``aho-corasick`` with the Teddy SIMD searcher, the same one ripgrep uses), which runs
  over a buffer at several GB/s. Only the lines it flags are cut out and checked with one RE2 ``Set`` pass that says
  which patterns match (per-line semantics, like ``rg -c`` per pattern). RE2 passes with memchr-accelerated prefixes
  were measured too: with 20-40 literals the passes add up to less than one DFA pass, so they are not used.
* **RE2 DFA otherwise.** A pattern with no usable literal (``\\d+ errors``), or no ``ahocorasick_rs``, makes the
  plan one combined RE2 alternation over the buffer (~0.6 GB/s per core), still linear time.
* **Lines only for hits.** Line numbers come from ``bytes.count`` of newlines between hits (one pass per chunk).
* **Plain files are memory-mapped** and sliced into 1 MiB windows ending on a newline (one copy, no carry
  concatenation); compressed files stream through :func:`~debug_training_logs.logs.reader.iter_chunks`.
* **Global ranks** (``[rankN]:``) are collected by a regex matching only ranks *not yet seen* in the file (a trie
  complement), so a file of one rank costs one memchr-speed pass, not a ``findall`` of every line.
* **Files are spread over processes** sized to the cores; a :class:`Sink` per file aggregates in the worker and only
  its small ``finish()`` summary crosses back (ripgrep's ``Sink`` idea). Memory stays flat in corpus size.
* **Caps.** ``PatternSpec.max_hits`` stops a presence marker (one that hits every NeMo line, say) after N hits in a
  file: it then leaves that file's search, so a dense marker does not cost a Python call per line.

Patterns RE2 cannot express (back-references, look-arounds) fall back to the ``regex`` module with a timeout per
chunk; a pattern that still times out is a :class:`UserInputError`, as is an invalid one.

Must not: know what a line means (that is ``formats/``), or hold more of a file than one chunk.
"""

from __future__ import annotations

import functools
import mmap
import os
import re as std_re
import re._constants as sre_c
import re._parser as sre_parse
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any, Protocol

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

FALLBACK_BUDGET_S = 20.0
"""Seconds the fallback (``regex`` module, backtracking) patterns may spend in total over one whole search, across
every file and worker process; when it runs out the search stops with a :class:`UserInputError`. One budget per
search, not per chunk: 40 files that each cost just under a per-chunk limit must not add up to minutes."""

FALLBACK_TIMEOUT_S = FALLBACK_BUDGET_S
"""Upper bound for a single backtracking call (kept for callers; the search-wide budget is what binds)."""


class _Budget:
    """Seconds left for backtracking in this search, shared by the forked worker processes (a shared double)."""

    def __init__(self, seconds: float) -> None:
        self.total = seconds
        self._left = get_context("fork").Value("d", seconds)

    def left(self) -> float:
        return float(self._left.value)

    def spend(self, seconds: float) -> None:
        with self._left.get_lock():
            self._left.value -= seconds


_BUDGET: _Budget | None = None
"""The budget of the search in progress (set by :func:`scan_files` before worker processes fork)."""


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

SAMPLE_BYTES = 256 << 10
"""Bytes sampled from each of up to :data:`SAMPLE_FILES` files to choose the prefilter literals."""
SAMPLE_FILES = 8

DENSE_LITERAL_BYTES = 2048
"""A pattern whose rarest literals occur more than once per this many sample bytes goes to the RE2 DFA pass."""

RE2_MAX_MEM = 64 << 20
"""RE2 memory budget per compiled regex (bytes); the default 8 MiB can exhaust the DFA cache on big alternations."""

_UNANCHORED = re2._Anchor.UNANCHORED
_RANK_PREFIX = std_re.compile(rb"\[rank(\d+)\](?::| )")  # the c10/excepthook prefix, or a user format's inline tag


class Sink(Protocol):
    """Receives the hits of one file inside a worker; ``finish`` returns what crosses back to the parent."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None: ...

    def finish(self) -> Any: ...


SinkFactory = Callable[[LogFile], Sink]
"""Builds a sink for one file; must be picklable (a module-level class or ``functools.partial`` of one)."""


@dataclass(frozen=True)
class PatternSpec:
    """Patterns to search for, as given (validated by :func:`compile_patterns`).

    ``max_hits``: optional per-pattern cap (None = no cap) on the hits counted and delivered per file; a pattern that
    reaches its cap leaves the rest of that file's search, so its count is then ``min(true count, cap)``.
    """

    patterns: tuple[str, ...]
    ignore_case: bool = False
    max_hits: tuple[int | None, ...] | None = None


@dataclass
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


# --------------------------------------------------------------------------------------------------------------------
# Validation


def _re2_options(ignore_case: bool) -> re2.Options:
    opts = re2.Options()
    opts.log_errors = False
    opts.case_sensitive = not ignore_case
    opts.max_mem = RE2_MAX_MEM
    return opts


def _re2_error(pat: str, ignore_case: bool) -> str | None:
    """None when RE2 compiles ``pat``, else RE2's reason."""
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


@dataclass(frozen=True)
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

    def describe(self) -> str:
        """One line for benchmarks and debugging."""
        if self.literals:
            return (
                f"prefilter on {len(self.literals)} literals (Aho-Corasick), dfa {len(self.dfa)}, "
                f"fallback {len(self.fallback)}"
            )
        return f"one RE2 DFA over {len(self.dfa)} patterns, fallback {len(self.fallback)}"


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
    """Choose how to search ``spec`` (see module doc), using a ``sample`` of the corpus to pick rare literals."""
    re2_ids: list[int] = []
    fallback: list[int] = []
    for i, pat in enumerate(spec.patterns):
        (re2_ids if _re2_error(pat, spec.ignore_case) is None else fallback).append(i)
    if not re2_ids:
        return Plan(fallback=tuple(fallback))
    dfa_plan = Plan(dfa=tuple(re2_ids), fallback=tuple(fallback))
    if _aho_corasick() is None:
        return dfa_plan
    lower = sample.lower()

    def occurrences(text: str, fold: bool) -> int:
        b = text.encode()
        return lower.count(b.lower()) if fold else sample.count(b)

    literals: set[tuple[bytes, int]] = set()
    dense: list[int] = []
    for i in re2_ids:
        branches = required_literals(spec.patterns[i], spec.ignore_case)
        if branches is None:
            return dfa_plan
        mine: set[tuple[bytes, int]] = set()
        expected = 0
        for br in branches:
            options: list[tuple[int, int, list[str]]] = []  # (sample count, -length, spellings)
            for lit in br:
                if "\n" in lit.text:
                    continue
                if not lit.fold:
                    options.append((occurrences(lit.text, False), -len(lit.text), [lit.text]))
                    continue
                for piece in _fold_pieces(lit):
                    spellings = _fold_variants(piece)
                    options.append((occurrences(piece, True) + len(spellings), -len(piece), spellings))
            if not options:
                return dfa_plan
            n_found, _len, spellings = min(options)
            expected += n_found
            mine.update((sp.encode(), i) for sp in spellings)
        if sample and expected * DENSE_LITERAL_BYTES > len(sample):
            dense.append(i)  # its literals are everywhere: a line check per hit would cost more than a DFA pass
        else:
            literals |= mine
    if not literals:
        return dfa_plan
    return Plan(literals=tuple(sorted(literals)), dfa=tuple(dense), fallback=tuple(fallback))


def _sample(files: Sequence[LogFile]) -> bytes:
    """Up to :data:`SAMPLE_BYTES` from the middle of each of a few files (compressed ones: from the start)."""
    picked = sorted(files, key=lambda f: -f.size)[:SAMPLE_FILES]
    parts: list[bytes] = []
    for lf in picked:
        try:
            with open_binary(lf) as fh:
                if lf.compression == "none" and lf.size > 2 * SAMPLE_BYTES:
                    fh.seek(lf.size // 2)
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


# --------------------------------------------------------------------------------------------------------------------
# The compiled matcher (per worker process)


class _Matcher:
    """A plan compiled for one set of active patterns."""

    def __init__(self, spec: PatternSpec, plan: Plan, active: frozenset[int]) -> None:
        opts = _re2_options(spec.ignore_case)
        self.prefilter: Any = None
        self.dfa: Any = None
        lits = [(lit, i) for lit, i in plan.literals if i in active]
        if lits:
            ac = _aho_corasick()
            self.prefilter = ac.BytesAhoCorasick(
                sorted({lit for lit, _ in lits}), matchkind=ac.MATCHKIND_LEFTMOST_LONGEST
            )
        self.literal_ids: dict[bytes, set[int]] = {}
        for lit, i in lits:
            self.literal_ids.setdefault(lit, set()).add(i)
        searched = sorted({i for _, i in lits} | {i for i in plan.dfa if i in active})
        self.searched = searched
        dfa_ids = [i for i in plan.dfa if i in active]
        if dfa_ids:
            combined = "(?m)" + "|".join(f"(?:{spec.patterns[i]})" for i in dfa_ids)
            self.dfa = _re2.RE2(combined.encode(), opts)
        self.verify: dict[int, Any] = {i: _re2.RE2(spec.patterns[i].encode(), opts) for i in searched}
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
        return [i for i in self.searched if self.verify[i].Match(_UNANCHORED, line, 0, n)[0][0] >= 0]


_MATCHERS: dict[tuple[PatternSpec, Plan, frozenset[int]], _Matcher] = {}


def _matcher(spec: PatternSpec, plan: Plan, active: frozenset[int]) -> _Matcher:
    key = (spec, plan, active)
    m = _MATCHERS.get(key)
    if m is None:
        if len(_MATCHERS) > 64:
            _MATCHERS.clear()
        m = _MATCHERS[key] = _Matcher(spec, plan, active)
    return m


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


def _hits_in_chunk(chunk: bytes, m: _Matcher) -> list[tuple[int, int, list[int]]]:
    """(line_start, line_end, matching pattern ids) for every line of ``chunk`` any active pattern matches, in order."""
    n = len(chunk)
    find, rfind = chunk.find, chunk.rfind
    starts: list[int] = []  # candidate line starts for the RE2 patterns, ascending
    if m.prefilter is not None:
        line_end = -1
        for _pid, s, _e in m.prefilter.find_matches_as_indexes(chunk):
            if s <= line_end:
                continue  # another literal in a line already flagged
            ls = rfind(b"\n", 0, s) + 1
            line_end = find(b"\n", s)
            starts.append(ls)
            if line_end < 0:
                break
    if m.dfa is not None:
        match = m.dfa.Match
        extra: list[int] = []
        pos = 0
        while pos <= n:
            s = match(_UNANCHORED, chunk, pos, n)[0][0]
            if s < 0:
                break
            ls = rfind(b"\n", 0, s) + 1
            if ls >= n:  # the empty "line" after the final newline is not a line
                break
            extra.append(ls)
            le = find(b"\n", s)
            if le < 0:
                break
            pos = le + 1
        starts = sorted(set(starts) | set(extra)) if starts else extra
    found: dict[int, list[int]] = {}
    for ls in starts:
        le = find(b"\n", ls)
        line = chunk[ls : (n if le < 0 else le)]
        ids = m.line_ids(line)
        if ids:
            found[ls] = ids
    for i, multi, single in m.fallback:
        hits = _run_fallback(multi, functools.partial(_finditer, multi, chunk))
        for hit in hits:
            ls = rfind(b"\n", 0, hit.start()) + 1
            if ls >= n:
                break
            le = find(b"\n", ls)
            line = chunk[ls : (n if le < 0 else le)]
            if _run_fallback(single, functools.partial(_search, single, line)) is not None:
                ids = found.setdefault(ls, [])
                if i not in ids:
                    ids.append(i)
    out: list[tuple[int, int, list[int]]] = []
    for ls in sorted(found):
        le = find(b"\n", ls)
        out.append((ls, n if le < 0 else le, sorted(found[ls])))
    return out


# --------------------------------------------------------------------------------------------------------------------
# Ranks


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


def _collect_ranks(chunk: bytes, seen: set[str]) -> None:
    """Add the digit strings of every ``[rankN]:`` in ``chunk`` to ``seen``."""
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


def _windows(lf: LogFile, problems: ReadProblems, *, split_long_lines: bool = True) -> Iterator[bytes]:
    """Decompressed chunks of ``lf`` that end on a line boundary (the last may lack its newline).

    A line longer than :data:`~debug_training_logs.logs.reader.CHUNK` (a progress bar redrawn with ``\\r`` for
    hours) never becomes one huge window: with ``split_long_lines`` (the search) it comes in windows cut after a
    ``\\r``, so every record is searched and newlines alone still number the lines; without (reading lines back)
    it is cut to its head and tail, the cut counted in ``problems``.
    """
    if lf.compression != "none":
        yield from iter_chunks(lf, problems, split_long_lines=split_long_lines)
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
        why_binary = binary_reason(mm[:8192])
        if why_binary is not None:
            problems.add(lf.rel, why_binary)
            return
        long_lines = LongLines()
        start = 0
        released = 0
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
                        yield head + cut_marker(cut) + tail
                        start = line_end
                        in_long = False
                        continue
            yield mm[start:end]
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
    active = frozenset(range(k))
    matcher = _matcher(spec, plan, active)
    result = FileScan(file=lf, counts=[0] * k)
    counts = result.counts
    sink = sink_factory(lf) if sink_factory is not None else None
    problems = ReadProblems()
    seen_ranks: set[str] = set()
    line_base = 0  # lines before the current chunk
    tail: list[bytes] = []
    ends_with_newline = True
    last_hit: tuple[int, list[int]] = (0, [])  # (line, ids) of the latest hit: a long line is searched in pieces
    for chunk in _windows(lf, problems):
        n = len(chunk)
        result.bytes_read += n
        continues = not ends_with_newline  # this window starts inside the previous window's last line
        if head_n and len(result.head) < head_n:
            heads = chunk.split(b"\n", head_n)
            for raw in heads[1:] if continues else heads:
                if len(result.head) >= head_n:
                    break
                result.head.append(decode(raw[:MAX_LINE_CHARS]).rstrip("\r"))
        if collect_ranks:
            _collect_ranks(chunk, seen_ranks)
        for piece in _pieces(chunk, CAPPED_PIECE_BYTES if any(caps[i] is not None for i in active) else n):
            counted_to = 0
            line_at = line_base
            deactivate: list[int] = []
            for ls, le, ids in () if matcher.idle else _hits_in_chunk(piece, matcher):
                line_at += piece.count(b"\n", counted_to, ls)
                counted_to = ls
                kept = ids
                if spec.max_hits is not None:
                    kept = []
                    for i in ids:
                        cap = caps[i]
                        if cap is None or counts[i] < cap:
                            kept.append(i)
                            if cap is not None and counts[i] + 1 >= cap:
                                deactivate.append(i)
                    if not kept:
                        continue
                if last_hit[0] == line_at + 1:  # the same line, searched again in its next piece
                    kept = [i for i in kept if i not in last_hit[1]]
                    last_hit = (line_at + 1, last_hit[1] + kept)
                    if not kept:
                        continue
                else:
                    last_hit = (line_at + 1, kept)
                for i in kept:
                    counts[i] += 1
                if sink is not None:
                    raw = piece[ls:le] if le - ls <= MAX_LINE_CHARS else _shown_part(piece[ls:le], kept, matcher)
                    sink.on_hit(kept, line_at + 1, decode(raw).rstrip("\r"))
            line_base = line_at + piece.count(b"\n", counted_to, len(piece))
            if deactivate:
                # a capped marker leaves the search at the next piece, not at the end of a (large) window
                active = active - set(deactivate)
                matcher = _matcher(spec, plan, active)
        ends_with_newline = chunk.endswith(b"\n")
        if tail_n:
            pieces = [t[:MAX_LINE_CHARS] for t in chunk.rstrip(b"\n").rsplit(b"\n", tail_n)]
            if continues and tail:
                pieces = pieces[1:]  # the rest of a line whose head is already kept
            tail = (tail + pieces)[-tail_n:]
    result.lines = line_base + (0 if ends_with_newline else 1)
    result.tail = [decode(t).rstrip("\r") for t in tail]
    result.ranks = {int(s) for s in seen_ranks}
    result.problem = problems.items.get(lf.rel)
    if sink is not None:
        result.sink_result = sink.finish()
    return result


def _shown_part(line: bytes, ids: list[int], m: _Matcher) -> bytes:
    """What a sink sees of a hit line longer than :data:`MAX_LINE_CHARS`: the first ``\\r`` record that matches
    (a progress bar redrawn for hours holds the error as one of its records), else the line's head."""
    if b"\r" in line:
        checks = [m.verify[i] for i in ids if i in m.verify]
        singles = [single for i, _multi, single in m.fallback if i in ids]
        for record in line.split(b"\r"):
            n = len(record)
            if any(rx.Match(_UNANCHORED, record, 0, n)[0][0] >= 0 for rx in checks) or any(
                _run_fallback(rx, functools.partial(_search, rx, record)) is not None for rx in singles
            ):
                return record[:MAX_LINE_CHARS]
    return line[:MAX_LINE_CHARS]


CAPPED_PIECE_BYTES = 64 << 10
"""While a capped pattern is still searched, windows are searched in pieces of about this size, so a marker that hits
every line stops after its cap instead of after the whole window."""


def _pieces(chunk: bytes, size: int) -> Iterator[bytes]:
    """``chunk`` cut into pieces of about ``size`` bytes that end on line boundaries (the last may not)."""
    n = len(chunk)
    if size >= n:
        yield chunk
        return
    start = 0
    while start < n:
        end = chunk.find(b"\n", min(n, start + size) - 1)
        end = n if end < 0 else end + 1
        yield chunk[start:end]
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
    compile_patterns(spec)
    if plan is None:
        plan = make_plan(spec, _sample(files))
    global _BUDGET
    _BUDGET = _Budget(FALLBACK_BUDGET_S) if plan.fallback else None  # one budget for this whole search
    workers = _worker_count(files)
    total = len(files)
    results: list[FileScan | None] = [None] * total
    progress.report(0, total, f"scanning {total} file(s), {sum(f.size for f in files):,} bytes, {workers} process(es)")
    if workers == 1:
        for i, lf in enumerate(files):
            results[i] = _scan_one(lf, spec, plan, sink_factory, head_lines, tail_lines, collect_ranks)
            progress.report(i + 1, total, f"scanned {lf.rel}")
    else:
        order = sorted(range(total), key=lambda i: -files[i].size)  # biggest first: better packing
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
            futures = {
                pool.submit(_scan_one, files[i], spec, plan, sink_factory, head_lines, tail_lines, collect_ranks): i
                for i in order
            }
            for done, fut in enumerate(as_completed(futures), start=1):
                i = futures[fut]
                results[i] = fut.result()
                progress.report(done, total, f"scanned {files[i].rel}")
    return [r for r in results if r is not None]


def lines_at(lf: LogFile, wanted: set[int], keep_tail: int = 0) -> dict[int, str]:
    """The text of the given 1-based line numbers of ``lf`` (cut at :data:`MAX_LINE_CHARS`), read at scan speed:
    newlines are counted per chunk in C and only the chunks holding a wanted line are split.

    ``keep_tail``: a line longer than the cut also keeps its last ``keep_tail`` characters after a ``\\r`` (a message
    glued to the end of a tqdm progress line is then still there)."""
    out: dict[int, str] = {}
    if not wanted:
        return out
    last = max(wanted)
    base = 0
    for chunk in _windows(lf, ReadProblems(), split_long_lines=False):
        n_nl = chunk.count(b"\n")
        lines_here = n_nl + (0 if chunk.endswith(b"\n") else 1)
        if any(base < w <= base + lines_here for w in wanted):
            for j, raw in enumerate(chunk.split(b"\n")[:lines_here], start=base + 1):
                if j in wanted:
                    head = raw[:MAX_LINE_CHARS]
                    if keep_tail and len(raw) > MAX_LINE_CHARS:
                        head += b"\r" + raw[max(MAX_LINE_CHARS, len(raw) - keep_tail) :]
                    out[j] = decode(head).rstrip("\r")
        base += lines_here
        if base >= last:
            break
    return out


def literal_pattern(text: str) -> str:
    """A pattern that matches ``text`` literally."""
    return std_re.escape(text)

"""The types of the scan (:mod:`debug_training_logs.logs.scan`): what is asked (:class:`PatternSpec`), how it is
searched (:class:`Plan`, the literals of :func:`~debug_training_logs.logs.scan_patterns.required_literals`), what a
file's search gives (:class:`FileScan`, :class:`Checkpoints`), the :class:`Sink` a consumer gives it, the buffers,
hits and spans the scan's parts pass each other, and the cut of a hit line they share (:data:`MAX_LINE_CHARS`).
"""

from __future__ import annotations

import mmap
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_engines import _native

MAX_LINE_CHARS = 4000
"""A hit line longer than this is cut before it reaches a sink (progress bars glue many records on one line)."""


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

    def ends(self) -> list[tuple[int, str]]:
        """(line number, text) of the file's first lines, then of its last lines (a line in both, once)."""
        first_tail = self.lines - len(self.tail) + 1
        return list(enumerate(self.head, 1)) + [
            (first_tail + k, t) for k, t in enumerate(self.tail) if first_tail + k > len(self.head)
        ]


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


@dataclass(frozen=True, repr=False, eq=False)
class Lit:
    """A literal a match must contain; ``fold``: compare case-insensitively."""

    text: str
    fold: bool


Branches = list[list[Lit]]
"""Disjunctive form: a match contains all literals of at least one branch."""


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


Buffer = bytes | mmap.mmap
"""What the scan searches: a window's bytes, or a whole memory-mapped file searched in spans (no copy)."""


Hit = tuple[int, int, list[int], int]
"""(line start, line end, matching pattern ids, line index in the chunk or -1 when not known)."""


Span = tuple[Buffer, int, int, bool]
"""(buffer, start, end, is the last): one window of a file is ``buffer[start:end]``."""


BulkTaker = Callable[[list[int], list[str]], None]
"""A sink's ``on_bulk``: (line numbers, texts) of a run of lines of its bulk pattern (:class:`Sink`)."""

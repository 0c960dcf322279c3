"""Fast multi-pattern search over many files: the "matcher" and the "searcher".

Never loops over lines in Python to search. Each file is streamed in large chunks that end on line boundaries; one
compiled RE2 alternation of all patterns is searched over the whole chunk (linear time, no catastrophic
backtracking); only for a hit is the line cut out, numbered (``bytes.count`` of newlines since the last hit) and tested
against each pattern separately to learn which matched. Files are spread over worker processes sized to the cores.

What happens with a hit is the caller's business: a :class:`Sink` created per file in the worker receives
``(pattern_ids, line_no, line)`` and returns a small picklable summary (ripgrep's ``Sink`` idea), so aggregation
happens where the data is and only summaries cross process boundaries. Memory stays flat in corpus size.

Patterns RE2 cannot express (back-references, look-arounds) fall back to the ``regex`` module with a per-chunk
timeout; a pattern that still times out is a :class:`UserInputError`.
"""

from __future__ import annotations

import os
import re as std_re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any, Protocol

import re2

from debug_training_logs import progress
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import ReadProblems, decode, iter_chunks

FALLBACK_TIMEOUT_S = 5.0
"""Seconds a fallback (``regex`` module) pattern may spend on one chunk before the search is abandoned as too costly."""

PARALLEL_MIN_BYTES = 32 << 20
"""Below this many bytes in total, scanning in-process is faster than starting worker processes."""

MAX_LINE_CHARS = 4000
"""A hit line longer than this is cut before it reaches a sink (progress bars glue many records on one line)."""

RANK_PREFIX_BYTES = re2.compile(rb"\[rank(\d+)\]:")


class Sink(Protocol):
    """Receives the hits of one file inside a worker; ``finish`` returns what crosses back to the parent."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None: ...

    def finish(self) -> Any: ...


SinkFactory = Callable[[LogFile], Sink]
"""Builds a sink for one file; must be picklable (a module-level class or ``functools.partial`` of one)."""


@dataclass(frozen=True)
class PatternSpec:
    """Patterns to search for, as given (validated by :func:`compile_patterns`)."""

    patterns: tuple[str, ...]
    ignore_case: bool = False


@dataclass
class FileScan:
    """What scanning one file produced."""

    file: LogFile
    lines: int = 0
    """Lines in the file (decompressed)."""
    bytes_read: int = 0
    """Decompressed bytes read."""
    counts: list[int] = field(default_factory=list)
    """Per pattern: number of lines matching it (like ``rg -c`` for that pattern alone)."""
    ranks: set[int] = field(default_factory=set)
    """Global ranks seen as ``[rankN]:`` prefixes anywhere in the file."""
    head: list[str] = field(default_factory=list)
    """The first lines of the file, when asked for (for format and header sniffing)."""
    tail: list[str] = field(default_factory=list)
    """The last lines of the file, when asked for (job end time, final status)."""
    problem: str | None = None
    """Why the file could not be read in full, or None."""
    sink_result: Any = None


class _Compiled:
    """The compiled matcher: one combined RE2 alternation plus one regex per pattern for classifying hit lines."""

    def __init__(self, spec: PatternSpec) -> None:
        opts = re2.Options()
        opts.log_errors = False
        opts.case_sensitive = not spec.ignore_case
        self.re2_ids: list[int] = []
        self.fallback: list[tuple[int, Any]] = []
        self.each: list[Any] = []
        re2_parts: list[str] = []
        for i, pat in enumerate(spec.patterns):
            try:
                compiled = re2.compile(pat.encode(), opts)
            except re2.error:
                compiled = None
            if compiled is not None:
                self.each.append(compiled)
                self.re2_ids.append(i)
                re2_parts.append(f"(?:{pat})")
            else:
                import regex

                flags = regex.IGNORECASE if spec.ignore_case else 0
                fb = regex.compile(pat.encode(), flags)
                self.each.append(fb)
                self.fallback.append((i, fb))
        self.combined = re2.compile("|".join(re2_parts).encode(), opts) if re2_parts else None


def compile_patterns(spec: PatternSpec) -> None:
    """Validate every pattern now, in the caller's process, so a bad one is a clear error before any file is read."""
    if not spec.patterns:
        raise UserInputError("No patterns to search for. Give at least one regular expression.")
    opts = re2.Options()
    opts.log_errors = False
    for pat in spec.patterns:
        if not pat:
            raise UserInputError("An empty pattern matches every line. Remove it or give a real expression.")
        try:
            re2.compile(pat.encode(), opts)
            continue
        except re2.error as exc:
            re2_reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        import regex

        try:
            compiled = regex.compile(pat)
        except regex.error as exc:
            raise UserInputError(
                f"Invalid pattern {pat!r}: {exc}. Fix the regular expression (RE2/PCRE syntax)."
            ) from exc
        # A pattern RE2 cannot run gets a quick backtracking probe so "(a+)+$"-style patterns fail fast.
        probe = "a" * 5000 + "!"
        try:
            compiled.search(probe, timeout=0.5)
        except TimeoutError as exc:
            raise UserInputError(
                f"Pattern {pat!r} needs backtracking ({re2_reason}) and takes too long even on a short line; "
                "rewrite it without back-references or nested quantifiers."
            ) from exc


def _line_bounds(buf: bytes, start: int, end: int) -> tuple[int, int]:
    ls = buf.rfind(b"\n", 0, start) + 1
    le = buf.find(b"\n", end)
    return ls, (len(buf) if le < 0 else le)


def _scan_one(
    lf: LogFile, spec: PatternSpec, sink_factory: SinkFactory | None, head_n: int, tail_n: int, collect_ranks: bool
) -> FileScan:
    matcher = _compiled_for(spec)
    result = FileScan(file=lf, counts=[0] * len(spec.patterns))
    sink = sink_factory(lf) if sink_factory is not None else None
    problems = ReadProblems()
    line_base = 0  # lines before the current chunk
    tail: list[bytes] = []
    for chunk in iter_chunks(lf, problems):
        result.bytes_read += len(chunk)
        if head_n and len(result.head) < head_n:
            for raw in chunk.split(b"\n", head_n)[: head_n - len(result.head)]:
                result.head.append(decode(raw).rstrip("\r"))
        if collect_ranks and b"[rank" in chunk:
            result.ranks.update(int(x) for x in set(RANK_PREFIX_BYTES.findall(chunk)))
        hits = _hits_in_chunk(chunk, matcher)
        # number the hit lines in order of position
        counted_to = 0
        line_at = line_base
        for ls, le, ids in hits:
            line_at += chunk.count(b"\n", counted_to, ls)
            counted_to = ls
            for i in ids:
                result.counts[i] += 1
            if sink is not None:
                raw = chunk[ls:le]
                if len(raw) > MAX_LINE_CHARS:
                    raw = raw[:MAX_LINE_CHARS]
                sink.on_hit(ids, line_at + 1, decode(raw).rstrip("\r"))
        n_lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        line_base += n_lines
        if tail_n:
            pieces = chunk.rstrip(b"\n").rsplit(b"\n", tail_n)
            tail = (tail + pieces)[-tail_n:]
    result.lines = line_base
    result.tail = [decode(t).rstrip("\r") for t in tail]
    result.problem = problems.items.get(lf.rel)
    if sink is not None:
        result.sink_result = sink.finish()
    return result


def _hits_in_chunk(chunk: bytes, m: _Compiled) -> list[tuple[int, int, list[int]]]:
    """(line_start, line_end, matching pattern ids) for every line of ``chunk`` that any pattern matches, in order."""
    lines: dict[int, tuple[int, list[int]]] = {}
    if m.combined is not None:
        pos = 0
        n = len(chunk)
        while pos < n:
            hit = m.combined.search(chunk, pos)
            if hit is None:
                break
            ls, le = _line_bounds(chunk, hit.start(), hit.start())
            line = chunk[ls:le]
            ids = [i for i in m.re2_ids if m.each[i].search(line) is not None]
            if ids:
                lines[ls] = (le, ids)
            pos = le + 1
    for i, fb in m.fallback:
        try:
            for hit in fb.finditer(chunk, timeout=FALLBACK_TIMEOUT_S):
                ls, le = _line_bounds(chunk, hit.start(), hit.start())
                entry = lines.setdefault(ls, (le, []))
                if i not in entry[1]:
                    entry[1].append(i)
        except TimeoutError as exc:
            raise UserInputError(
                f"Pattern {fb.pattern!r} timed out after {FALLBACK_TIMEOUT_S:.0f} s on one chunk (it backtracks); "
                "rewrite it in RE2 syntax (no back-references or look-arounds)."
            ) from exc
    out = [(ls, le, sorted(ids)) for ls, (le, ids) in lines.items()]
    out.sort()
    return out


_CACHE: dict[PatternSpec, _Compiled] = {}


def _compiled_for(spec: PatternSpec) -> _Compiled:
    c = _CACHE.get(spec)
    if c is None:
        c = _CACHE[spec] = _Compiled(spec)
    return c


def _worker_count(files: Sequence[LogFile]) -> int:
    total = sum(f.size for f in files)
    if len(files) < 2 or total < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(len(files), os.cpu_count() or 1))


def scan_files(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None = None,
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
) -> list[FileScan]:
    """Scan every file for ``spec``; results come back in the order of ``files``.

    ``head_lines``/``tail_lines``: also return that many first/last lines of each file. ``collect_ranks``: record
    the ``[rankN]:`` global ranks seen anywhere in each file (for coverage).
    """
    compile_patterns(spec)
    workers = _worker_count(files)
    total = len(files)
    results: list[FileScan | None] = [None] * total
    if workers == 1:
        for i, lf in enumerate(files):
            results[i] = _scan_one(lf, spec, sink_factory, head_lines, tail_lines, collect_ranks)
            progress.report(i + 1, total, f"scanned {lf.rel}")
    else:
        order = sorted(range(total), key=lambda i: -files[i].size)  # biggest first: better packing
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
            futures = {
                pool.submit(_scan_one, files[i], spec, sink_factory, head_lines, tail_lines, collect_ranks): i
                for i in order
            }
            for done, fut in enumerate(as_completed(futures), start=1):
                i = futures[fut]
                results[i] = fut.result()
                progress.report(done, total, f"scanned {files[i].rel}")
    return [r for r in results if r is not None]


def literal_pattern(text: str) -> str:
    """A pattern that matches ``text`` literally."""
    return std_re.escape(text)

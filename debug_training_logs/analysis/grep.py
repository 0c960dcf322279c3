"""``grep_all_ranks``: the original skill's tiered search over every rank's log, with its ``sort -u`` view built in.

One scan pass (:func:`~debug_training_logs.analysis.inventory.scan_job`, which adds the inventory's own markers) runs
the patterns over every file. Inside each worker a :class:`GrepSink` turns hit lines into templates
(:mod:`~debug_training_logs.analysis.templates`) and keeps, per template and per pattern, counts, the ranks seen and
the first and last line; only those small summaries cross back. The parent merges them, attributes unranked lines to
their file's rank (when the file holds exactly one), orders first occurrences by wall time (second resolution: the c10
header's 9-digit fraction is a monotonic clock, never compared) and looks for outliers: templates only a few ranks
have, and ranks missing a template (nearly) every other rank has. Everything returned is bounded by ``limit``.

Pure and MCP-free; the tool module turns :class:`GrepAnalysis` into its pydantic result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS, TIER_NAMES, GrepPattern
from debug_training_logs.analysis.inventory import COVERAGE_MARKERS, consumer_for, scan_consumers
from debug_training_logs.analysis.inventory_types import Inventory
from debug_training_logs.analysis.templates import TemplateCache
from debug_training_logs.errors import UserInputError
from debug_training_logs.formats.timestamps import WallTime, iso, parse_wall_time
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_cache import Consumer, FileResult
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.memo import unpack
from debug_training_logs.ranges import format_ranges
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage

MAX_TEMPLATES_PER_FILE = 2000
"""Distinct templates one file may contribute; lines of further templates are counted as ``overflow``."""
MAX_CONTEXT_TEMPLATES = 10
"""At most this many templates get context lines (the first ``limit`` outliers and templates, in that order)."""
MAX_CONTEXT = 5
"""Context lines each side of a first occurrence, at most."""
PER_FILE_LIMIT = 5
"""Per pattern, the files with the most hits listed (the rest is counted in ``per_file_truncated``)."""
NODES_LIMIT = 8
"""Per template, node names listed."""
OUTLIER_MIN_RANKS = 4
"""Outliers are only looked for when the job shows at least this many ranks."""
OUTLIER_SHARE = 0.10
"""A template is rare when at most max(1, this share of the ranks) have it; a rank is missing a template when at
least all but that many ranks have it."""


# --------------------------------------------------------------------------------------------------------------------
# Worker side


@dataclass(repr=False)
class LineAt:
    """One line of one file, with the wall time it states (if any)."""

    line: int
    text: str
    time: WallTime | None = None


@dataclass(repr=False)
class FileTemplate:
    """One template's hits in one file."""

    patterns: set[int] = field(default_factory=set)
    count: int = 0
    ranks: set[int] = field(default_factory=set)
    unranked: int = 0
    first: LineAt | None = None
    last: LineAt | None = None


@dataclass(repr=False)
class FileGrep:
    """What one file contributed (picklable, bounded)."""

    templates: dict[str, FileTemplate] = field(default_factory=dict)
    overflow: int = 0
    pattern_ranks: dict[int, set[int]] = field(default_factory=dict)
    pattern_unranked: dict[int, int] = field(default_factory=dict)
    pattern_first: dict[int, LineAt] = field(default_factory=dict)


def _line_rank(line: str) -> int | None:
    """The global rank from a ``[rankN]:`` or Ray ``[rank=N]`` prefix, else None (cheap string scanning)."""
    i = line.find("[rank")
    while i >= 0:
        j = i + 5
        sep = line[j : j + 1]
        if sep == "=":
            j += 1
        k = j
        while k < len(line) and line[k].isdigit():
            k += 1
        if k > j and line[k : k + 1] == "]" and (sep == "=" or line[k + 1 : k + 2] == ":"):
            return int(line[j:k])
        i = line.find("[rank", i + 5)
    return None


class GrepSink:
    """Per file, in the worker: templates and per-pattern rank sets of the hit lines."""

    def __init__(self, lf: LogFile) -> None:
        self.out = FileGrep()
        self.template = TemplateCache()

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        out = self.out
        rank = _line_rank(line)
        for pid in pattern_ids:
            if rank is None:
                out.pattern_unranked[pid] = out.pattern_unranked.get(pid, 0) + 1
            else:
                out.pattern_ranks.setdefault(pid, set()).add(rank)
            if pid not in out.pattern_first:
                out.pattern_first[pid] = LineAt(line_no, cut(line))
        key = self.template(line)
        t = out.templates.get(key)
        if t is None:
            if len(out.templates) >= MAX_TEMPLATES_PER_FILE:
                out.overflow += 1
                return
            t = out.templates[key] = FileTemplate(first=LineAt(line_no, cut(line)))
        t.patterns.update(pattern_ids)
        t.count += 1
        if rank is None:
            t.unranked += 1
        else:
            t.ranks.add(rank)
        t.last = LineAt(line_no, line)

    def finish(self) -> FileGrep:
        out = self.out
        for t in out.templates.values():
            for at in (t.first, t.last):
                if at is not None:
                    at.text = cut(at.text)
                    at.time = parse_wall_time(at.text)
        for at in out.pattern_first.values():
            at.time = parse_wall_time(at.text)
        return out


# --------------------------------------------------------------------------------------------------------------------
# Parent side: the merged result (plain data; the tool module maps it onto its pydantic models)


@dataclass
class Occurrence:
    file: str
    line: int
    time: str | None
    text: str | None


@dataclass
class FileCount:
    file: str
    count: int


@dataclass
class PatternSummary:
    name: str
    tier: int
    regex: str
    meaning: str
    total_hits: int
    files_with_hits: int
    per_file: list[FileCount]
    per_file_truncated: int
    ranks_with_hits: str
    ranks_without_hits: str
    unattributed_hits: int
    first: Occurrence | None


@dataclass
class TemplateSummary:
    template: str
    patterns: list[str]
    count: int
    rank_count: int
    ranks: str
    unattributed: int
    nodes: list[str]
    nodes_truncated: int
    first: Occurrence
    last: Occurrence


@dataclass
class Outlier:
    kind: str
    ranks: str
    template: str
    have: int
    explanation: str
    example: Occurrence


@dataclass
class ContextBlock:
    template: str
    file: str
    lines: list[str]


@dataclass
class GrepAnalysis:
    summary: str
    coverage: Coverage
    patterns: list[PatternSummary]
    patterns_without_hits: list[str]
    templates: list[TemplateSummary]
    templates_truncated: int
    outliers: list[Outlier]
    outliers_truncated: int
    context: list[ContextBlock]
    overflow_lines: int


# --------------------------------------------------------------------------------------------------------------------


def parse_patterns(patterns: Sequence[str] | None, tiers: Sequence[int] | None) -> list[GrepPattern]:
    """The patterns to search: the caller's replace the defaults; ``tiers`` filters the defaults.

    A caller's pattern is a regex, searched as written (``timeout=30`` searches ``timeout=30``). To name one, wrap
    the whole regex in a named group, ``(?P<loader>AISBatchLoaderError|ReadTimeout)``: that is regex syntax, so a
    name can never be mistaken for part of the text searched, and the group matches exactly what the bare regex does.
    """
    if patterns:
        out: list[GrepPattern] = []
        for k, p in enumerate(patterns):
            named = whole_named_group(p)
            name, regex = named if named is not None else (f"p{k + 1}", p)
            out.append(GrepPattern(name, 0, regex, "caller's pattern"))
        if len({g.name for g in out}) != len(out):
            raise UserInputError(
                "Two patterns have the same name; give each (?P<name>regex) a distinct name "
                "(unnamed patterns are called p1, p2, ... by position)."
            )
        return out
    chosen = [g for g in DEFAULT_PATTERNS if not tiers or g.tier in set(tiers)]
    if not chosen:
        raise UserInputError(f"No default patterns in tiers {list(tiers or [])}; the tiers are 1, 2 and 3.")
    return chosen


_NAMED_OPEN = re.compile(r"\(\?P<(?P<name>[A-Za-z_][A-Za-z0-9_]*)>")


def whole_named_group(pattern: str) -> tuple[str, str] | None:
    """``(name, pattern)`` when ``pattern`` is one named group spanning all of it, ``(?P<name>...)``, else None.

    The closing parenthesis is found by walking the pattern (escapes and character classes skipped), so
    ``(?P<a>x)|(?P<b>y)`` is not mistaken for a single group.
    """
    m = _NAMED_OPEN.match(pattern)
    if m is None or not pattern.endswith(")"):
        return None
    depth, i, n, in_class = 0, 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":  # a leading ] is a literal
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return (m.group("name"), pattern) if i == n - 1 else None
        i += 1
    return None


_At = tuple[tuple[int, ...], int, LineAt]
"""An occurrence as ranked: (:func:`_time_key`, file index, the line)."""


class _Span:
    """The earliest and latest of some occurrences in wall time, gathered before the job's year hint is known: the
    best of each kind of line (untimed, a time without a year, a time with one) is kept, ranked with no year, which
    orders each kind as the year hint would; :meth:`first` and :meth:`last` rank those few with the year hint."""

    __slots__ = ("earliest", "latest")

    def __init__(self) -> None:
        self.earliest: dict[int, _At] = {}
        self.latest: dict[int, _At] = {}

    def add(self, at: LineAt | None, j: int, *, latest: bool = False) -> None:
        if at is None:
            return
        t = at.time
        kind = 0 if t is None else 1 if not t.year else 2
        key = _time_key(at, None, j)
        best = self.latest if latest else self.earliest
        got = best.get(kind)
        if got is None or (key > got[0] if latest else key < got[0]):
            best[kind] = (key, j, at)

    def first(self, year: int | None) -> _At | None:
        ranked = ((_time_key(at, year, j), j, at) for _k, j, at in self.earliest.values())
        return min(ranked, key=lambda a: a[0], default=None)

    def last(self, year: int | None) -> _At | None:
        ranked = ((_time_key(at, year, j), j, at) for _k, j, at in self.latest.values())
        return max(ranked, key=lambda a: a[0], default=None)


class _PatternFold:
    """One pattern's hits over the files folded so far."""

    __slots__ = ("ranks", "span", "unranked")

    def __init__(self) -> None:
        self.ranks: set[int] = set()
        self.unranked: list[tuple[int, int]] = []  # (file index, hit lines without a rank)
        self.span = _Span()


class _TemplateFold:
    """One template's hits over the files folded so far."""

    __slots__ = ("count", "files", "patterns", "ranks", "span", "unranked")

    def __init__(self) -> None:
        self.patterns: set[int] = set()
        self.count = 0
        self.ranks: set[int] = set()
        self.unranked: list[tuple[int, int]] = []  # (file index, lines without a rank)
        self.files: list[int] = []  # indices of the files that have it (for their nodes)
        self.span = _Span()


class _Fold:
    """Every file's :class:`FileGrep` merged as it arrives (while the scan's workers read the other files), so only
    the merge is held, never every file's result. What needs the inventory (a file's ranks and node, the year hint)
    is applied after the scan, from the file indices kept."""

    def __init__(self) -> None:
        self.patterns: dict[int, _PatternFold] = {}
        self.templates: dict[str, _TemplateFold] = {}
        self.overflow = 0

    def add(self, j: int, fg: FileGrep) -> None:
        pats = self.patterns
        for pid, rs in fg.pattern_ranks.items():
            p = pats.get(pid) or pats.setdefault(pid, _PatternFold())
            p.ranks |= rs
        for pid, un in fg.pattern_unranked.items():
            if un:
                p = pats.get(pid) or pats.setdefault(pid, _PatternFold())
                p.unranked.append((j, un))
        for pid, at in fg.pattern_first.items():
            p = pats.get(pid) or pats.setdefault(pid, _PatternFold())
            p.span.add(at, j)
        self.overflow += fg.overflow
        temps = self.templates
        for text, ft in fg.templates.items():
            m = temps.get(text)
            if m is None:
                m = temps[text] = _TemplateFold()
            m.patterns |= ft.patterns
            m.count += ft.count
            m.ranks |= ft.ranks
            if ft.unranked:
                m.unranked.append((j, ft.unranked))
            m.files.append(j)
            m.span.add(ft.first, j)
            m.span.add(ft.last, j, latest=True)


@dataclass
class _Merged:
    patterns: set[int]
    count: int
    ranks: set[int]
    unranked: int
    nodes: set[str]
    first: tuple[tuple[int, ...], str, LineAt] | None
    last: tuple[tuple[int, ...], str, LineAt] | None


def _time_key(at: LineAt, year: int | None, file_order: int) -> tuple[int, ...]:
    """Wall time to second resolution, then file order and line (lines without a time sort last)."""
    t = at.time
    if t is None:
        return (1, 0, 0, 0, 0, 0, 0, file_order, at.line)
    return (0, t.year or year or 0, t.month, t.day, t.hour, t.minute, t.second, file_order, at.line)


def _occ(rel: str, at: LineAt, year: int | None, *, text: bool = True) -> Occurrence:
    return Occurrence(
        file=rel, line=at.line, time=iso(at.time, year) if at.time else None, text=at.text if text else None
    )


GREP_INVENTORY_MARKERS: frozenset[str] = COVERAGE_MARKERS | {"slurm"}
"""The inventory markers grep's scan searches (the tool scans within
:func:`~debug_training_logs.analysis.inventory.lean_inventory` of them). Of the inventory, grep reads the coverage,
each file's ranks and node, and the year: the coverage markers give all of them but a node named by the ``srun: error:
<host>: task N`` lines SLURM writes ('slurm'). The markers left out (framework, data source, versions, torch message
families) cost ~1.7 ms CPU per 8.6 MB node file of the realistic corpus (~0.2 s of a 1,024-rank grep) and change
nothing grep answers."""


def grep_consumer(chosen: Sequence[GrepPattern], ignore_case: bool = False) -> Consumer:
    """The consumer of grep's scan for these patterns (:func:`parse_patterns`' choice)."""
    return consumer_for([g.regex for g in chosen], GrepSink, ignore_case=ignore_case)


def grep_all_ranks(
    logs_dir: str | Path,
    patterns: Sequence[str] | None = None,
    tiers: Sequence[int] | None = None,
    ignore_case: bool = False,
    limit: int = 20,
    context: int = 0,
) -> GrepAnalysis:
    """Search every log file under ``logs_dir`` (see module doc). ``limit`` bounds every list returned."""
    chosen = parse_patterns(patterns, tiers)
    me = grep_consumer(chosen, ignore_case)
    fold = _Fold()
    folded: set[int] = set()

    def arrived(j: int, got: dict[str, FileResult]) -> None:
        # each file's result merged as it arrives, while the workers read the other files (the main process only
        # waits for them there)
        fr = got.get(me.key)
        if fr is not None:
            folded.add(j)
            fg = unpack(fr.sink_result)
            if isinstance(fg, FileGrep):
                fold.add(j, fg)

    job = scan_consumers(logs_dir, [me], on_file=arrived)[me.key]
    for j in range(len(job.caller_results)):  # the files found in the scan cache (not announced)
        if j not in folded:
            fg = job.caller_results[j]
            if isinstance(fg, FileGrep):
                fold.add(j, fg)
    inv = job.inventory
    coverage = job.coverage()
    year = inv.year_hint
    k = len(chosen)
    files = inv.files  # (in the scan's file order)

    def attribute(ranks: set[int], unranked: list[tuple[int, int]]) -> int:
        """Add to ``ranks`` the rank of each file with one rank; return the hits left without a rank."""
        left = 0
        for j, n in unranked:
            rs = files[j].ranks
            if len(rs) == 1:
                ranks.update(rs)
            else:
                left += n
        return left

    def cited(got: _At | None) -> tuple[tuple[int, ...], str, LineAt] | None:
        return None if got is None else (got[0], files[got[1]].rel, got[2])

    # per pattern
    summaries: list[PatternSummary] = []
    without: list[str] = []
    all_ranks = inv.ranks
    file_counts = [(rel, counts) for rel, counts in job.counts_per_file() if counts]
    for pid, g in enumerate(chosen):
        per_file = [(rel, counts[pid]) for rel, counts in file_counts if counts[pid]]
        total = sum(c for _, c in per_file)
        if not total:
            without.append(g.name)
            continue
        pf = fold.patterns.get(pid) or _PatternFold()
        ranks = set(pf.ranks)
        unattributed = attribute(ranks, pf.unranked)
        first = cited(pf.span.first(year))
        per_file.sort(key=lambda x: (-x[1], x[0]))
        summaries.append(
            PatternSummary(
                name=g.name,
                tier=g.tier,
                regex=g.regex,
                meaning=g.meaning,
                total_hits=total,
                files_with_hits=len(per_file),
                per_file=[FileCount(rel, c) for rel, c in per_file[:PER_FILE_LIMIT]],
                per_file_truncated=max(0, len(per_file) - PER_FILE_LIMIT),
                ranks_with_hits=format_ranges(ranks),
                ranks_without_hits=format_ranges(all_ranks - ranks),
                unattributed_hits=unattributed,
                first=_occ(first[1], first[2], year) if first else None,
            )
        )
    summaries.sort(key=lambda p: (p.first is None, p.first.time or "" if p.first else "", p.tier))

    # templates
    merged: dict[str, _Merged] = {}
    overflow = fold.overflow
    for text, tf in fold.templates.items():
        unranked = attribute(tf.ranks, tf.unranked)
        merged[text] = _Merged(
            patterns=tf.patterns,
            count=tf.count,
            ranks=tf.ranks,
            unranked=unranked,
            nodes={n for j in tf.files if (n := files[j].node)},
            first=cited(tf.span.first(year)),
            last=cited(tf.span.last(year)),
        )

    def summary_of(text: str, m: _Merged) -> TemplateSummary:
        assert m.first is not None and m.last is not None
        nodes = sorted(m.nodes)
        return TemplateSummary(
            template=text,
            patterns=[chosen[i].name for i in sorted(m.patterns) if i < k],
            count=m.count,
            rank_count=len(m.ranks),
            ranks=format_ranges(m.ranks),
            unattributed=m.unranked,
            nodes=nodes[:NODES_LIMIT],
            nodes_truncated=max(0, len(nodes) - NODES_LIMIT),
            first=_occ(m.first[1], m.first[2], year),
            last=_occ(m.last[1], m.last[2], year, text=False),
        )

    # outliers
    n_ranks = len(all_ranks)
    few = max(1, int(n_ranks * OUTLIER_SHARE))
    outliers: list[tuple[int, Outlier]] = []
    if n_ranks >= OUTLIER_MIN_RANKS:
        for text, m in merged.items():
            have = len(m.ranks & all_ranks)
            if have == 0 or m.first is None:
                continue
            example = _occ(m.first[1], m.first[2], year)
            if have <= few:
                outliers.append(
                    (
                        have,
                        Outlier(
                            kind="only_few_ranks",
                            ranks=format_ranges(m.ranks),
                            template=text,
                            have=have,
                            explanation=f"only {have} of {n_ranks} ranks log this",
                            example=example,
                        ),
                    )
                )
            elif have >= n_ranks - few and have < n_ranks:
                missing = all_ranks - m.ranks
                outliers.append(
                    (
                        len(missing),
                        Outlier(
                            kind="missing_on_few_ranks",
                            ranks=format_ranges(missing),
                            template=text,
                            have=have,
                            explanation=f"{have} of {n_ranks} ranks log this; ranks {format_ranges(missing)} do not",
                            example=example,
                        ),
                    )
                )
    outliers.sort(key=lambda x: (x[0], x[1].example.time or "~", x[1].template))
    out_outliers = [o for _, o in outliers[:limit]]

    tiers_of = {i: chosen[i].tier for i in range(k)}
    ordered = sorted(
        merged.items(),
        key=lambda kv: (
            min((tiers_of.get(i, 9) or 9) for i in kv[1].patterns) if kv[1].patterns else 9,
            kv[1].first[0] if kv[1].first else (),
        ),
    )
    templates = [summary_of(text, m) for text, m in ordered[:limit]]

    blocks: list[ContextBlock] = []
    if context > 0:
        c = min(context, MAX_CONTEXT)
        wanted: list[tuple[str, Occurrence]] = [(o.template, o.example) for o in out_outliers]
        wanted += [(t.template, t.first) for t in templates]
        seen: set[str] = set()
        by_rel = {lf.rel: lf for lf in job.log_files()}
        for text, occ in wanted:
            if text in seen or len(blocks) >= min(limit, MAX_CONTEXT_TEMPLATES):
                continue
            seen.add(text)
            lf = by_rel.get(occ.file)
            if lf is None:
                continue
            nums = set(range(max(1, occ.line - c), occ.line + c + 1))
            got = lines_at(lf, nums)
            blocks.append(
                ContextBlock(template=text, file=occ.file, lines=[f"{n}: {cut(got[n])}" for n in sorted(got)])
            )

    summary = _summary(summaries, without, out_outliers, len(outliers), coverage, inv, len(chosen))
    return GrepAnalysis(
        summary=summary,
        coverage=coverage,
        patterns=summaries[:limit],
        patterns_without_hits=without,
        templates=templates,
        templates_truncated=max(0, len(ordered) - limit),
        outliers=out_outliers,
        outliers_truncated=max(0, len(outliers) - limit),
        context=blocks,
        overflow_lines=overflow,
    )


def _summary(
    pats: list[PatternSummary],
    without: list[str],
    outliers: list[Outlier],
    n_outliers: int,
    cov: Coverage,
    inv: Inventory,
    n_patterns: int,
) -> str:
    parts = [
        f"Searched {cov.files_scanned} files ({cov.bytes_scanned:,} bytes, ranks {cov.ranks_found or 'none seen'})"
        f" for {n_patterns} patterns: {len(pats)} matched, {len(without)} did not."
    ]
    if pats:
        tiers = sorted({p.tier for p in pats if p.tier})
        if tiers:
            parts.append("Tiers hit: " + ", ".join(f"{t} ({TIER_NAMES[t]})" for t in tiers) + ".")
        first = next((p for p in pats if p.first and p.first.time), None)
        if first is not None and first.first is not None:
            parts.append(
                f"Earliest hit in time: {first.name} at {first.first.file}:{first.first.line} ({first.first.time})."
            )
    for o in outliers[:3]:
        if o.kind == "only_few_ranks":
            parts.append(f"Outlier: only rank(s) {o.ranks} log '{o.template[:120]}'.")
        else:
            parts.append(f"Outlier: rank(s) {o.ranks} lack '{o.template[:120]}' that {o.have} ranks log.")
    if n_outliers > 3:
        parts.append(f"{n_outliers - 3} more outliers listed.")
    if cov.missing_ranks:
        parts.append(f"Ranks {cov.missing_ranks} have no log lines at all: get their files before naming a culprit.")
    if cov.unreadable_files:
        parts.append(f"{len(cov.unreadable_files)} file(s) unreadable or partly read (see coverage).")
    return " ".join(parts)

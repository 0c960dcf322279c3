"""The worker evidence from the shared job scan: the evidence scan's consumer (:func:`evidence_consumer`,
:func:`scan_worker_logs`) and the fold of each file's results into a
:class:`~debug_training_logs.analysis.evidence_types.WorkerEvidence` (:func:`worker_evidence_from_scan`).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from debug_training_logs.analysis.alignment import WORKER_PATTERNS as ALIGNMENT_PATTERNS
from debug_training_logs.analysis.alignment import WorkerClock, WorkerClockFacts
from debug_training_logs.analysis.evidence_series import _SeriesBuilder
from debug_training_logs.analysis.evidence_signals import SIGNALS
from debug_training_logs.analysis.evidence_sink import EvidenceSink, _FileDigest, _Raw, _refine, _SignalDigest
from debug_training_logs.analysis.evidence_types import Hit, WorkerEvidence, _order_key
from debug_training_logs.analysis.inventory import LineKeep, consumer_for, kept_sink, scan_consumers
from debug_training_logs.analysis.inventory_results import PerFile, result_item
from debug_training_logs.analysis.inventory_types import JobScan
from debug_training_logs.analysis.inventory_views import file_result_item
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS
from debug_training_logs.analysis.read_back import WORKER_FALLBACK_YEAR
from debug_training_logs.formats.timestamps import WallTime, with_year
from debug_training_logs.logs.attribution import rank_of_key
from debug_training_logs.logs.scan_cache import Consumer, FileResult


def _all_global(by_rank: dict[int | None, int]) -> bool:
    """No key is a torchrun --tee local rank (encoded negative) or None: every one is a global rank."""
    return all(r is not None and r >= 0 for r in by_rank)


def _job_hits(
    sd: _SignalDigest, assumed: int, year: int, single: int | None, local: dict[int, int] | None = None
) -> list[Hit]:
    """A file's hits of one signal as the job sees them: in the job's ``year`` where their line has none (made with
    ``assumed``), with the file's ``single`` rank where their line names none, a torchrun --tee local rank (encoded
    ``-(L + 1)``) through the file's ``local`` map (else the single rank, else none)."""
    hits = sd.hits
    if assumed != year and any(sd.yearless):
        hits = [_in_year(h, f, year) if f else h for h, f in zip(hits, sd.yearless, strict=True)]
    if any(h.rank is None or h.rank < 0 for h in hits):
        lm = local or {}
        hits = [replace(h, rank=rank_of_key(h.rank, single, lm)) if h.rank is None or h.rank < 0 else h for h in hits]
    return hits


def _in_year(h: Hit, flags: int, year: int) -> Hit:
    """``h`` with the times that took an assumed year in ``year`` (None where ``year`` has no such day)."""

    def moved(t: datetime | None, bit: int) -> datetime | None:
        if t is None or not flags & bit:
            return t
        try:
            return t.replace(year=year)
        except ValueError:
            return None

    return replace(h, time=moved(h.time, 1), after=moved(h.after, 2), before=moved(h.before, 4))


# ---------------------------------------------------------------------------------------------------------------------
# Gathering the worker evidence


def worker_patterns() -> tuple[str, ...]:
    """The patterns of the one evidence scan: :data:`SIGNALS`, the NCCL needles, the alignment's anchors."""
    return tuple(s.regex for s in SIGNALS) + NCCL_PATTERNS + ALIGNMENT_PATTERNS


def evidence_consumer(keep: LineKeep | None = None) -> Consumer:
    """The evidence scan as a consumer of the shared job scan (progress and memory lines are dense: sampled, with
    every rank's first and last ones, never one Python call per step line); ``keep`` restricts its sink to some
    lines (one attempt's)."""
    factory: Any = EvidenceSink if keep is None else functools.partial(kept_sink, keep, EvidenceSink)
    dense = [i for i, s in enumerate(SIGNALS) if s.dense]
    return consumer_for(worker_patterns(), factory, dense=dense, refine=_refine)


def scan_worker_logs(logs_dir: Path, keep: LineKeep | None = None) -> JobScan:
    """The one scan of every worker log under ``logs_dir`` the evidence is built from (:func:`worker_patterns`, one
    :class:`EvidenceSink` per file), shared with the other tools' questions through the scan cache; ``keep``
    restricts it to some lines (one attempt's)."""
    c = evidence_consumer(keep)
    return scan_consumers(logs_dir, [c])[c.key]


FileItems = tuple[Any, Any, Any, Any]
"""One file's evidence items the fold reads: (digest, raw tallies when there is no digest, clock facts, series); all
None for a file whose sink found nothing."""


def file_items(fr: FileResult) -> FileItems:
    """The :data:`FileItems` of one file's evidence result, unpacked."""
    digest = file_result_item(fr, 4)
    fh = file_result_item(fr, 0) if digest is None else None
    if digest is None and fh is None:
        return (None, None, None, None)
    return digest, fh, file_result_item(fr, 2), file_result_item(fr, 3)


def worker_evidence_from_scan(job: JobScan, early: dict[int, FileItems] | None = None) -> WorkerEvidence:
    """The worker evidence from a finished scan whose per-file results (``job.caller_results``) are
    :meth:`EvidenceSink.finish`'s (a composite scan may feed it: only those results and the inventory are read).
    ``early``: files' items already unpacked (:func:`file_items`, by index in the scan); each is let go as it is
    folded."""
    inv = job.inventory
    year = inv.year_hint or WORKER_FALLBACK_YEAR
    # a file of one rank: its unprefixed lines are that rank's, unless a launcher writes there too (a node's stderr
    # holding the torchrun agent's own lines and tracebacks beside one rank's)
    single_rank = {f.rel: next(iter(f.ranks)) for f in inv.files if len(f.ranks) == 1 and not f.launcher_lines}
    local_ranks = {f.rel: f.local_ranks for f in inv.files if f.local_ranks}

    # A file's hits share their time objects (a timed line is the ``after`` of the untimed ones that follow it) and a
    # raw hit is read up to three times (sample, rank's first, rank's last): each is converted once. Keyed by object
    # identity; each entry holds its object, so that no id is reused by another object while the memo lives (one
    # file: each file's result is unpacked anew).
    converted: dict[int, tuple[WallTime, datetime | None]] = {}
    made: dict[tuple[str, int], tuple[_Raw, Hit]] = {}

    def conv(wt: WallTime | None) -> datetime | None:
        if wt is None:
            return None
        known = converted.get(id(wt))
        if known is None:
            known = converted[id(wt)] = (wt, with_year(wt, year))
        return known[1]

    def hit(signal: str, rel: str, raw: _Raw) -> Hit:
        known = made.get((signal, id(raw)))
        if known is None:
            rank = rank_of(rel, raw.rank)
            h = Hit(signal, rel, raw.line, raw.text, rank, conv(raw.wt), conv(raw.after), conv(raw.before))
            known = made[(signal, id(raw))] = (raw, h)
        return known[1]

    def rank_of(rel: str, r: int | None) -> int | None:
        """A line's rank as the job sees it: its own, else its file's only rank; a torchrun --tee local rank
        (encoded ``-(L + 1)``) through the file's local-to-global map."""
        return r if r is not None and r >= 0 else rank_of_key(r, single_rank.get(rel), local_ranks.get(rel, {}))

    kept: dict[str, list[Hit]] = {}
    """Per signal: the kept hits, file by file; one per line (a file's digest keeps a line's first hit only, and the
    first raw hit of a line is kept below): sorted once all are in."""
    counts: dict[str, int] = defaultdict(int)
    counts_by_rank: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    first_by_rank: dict[str, dict[int, Hit]] = defaultdict(dict)
    last_by_rank: dict[str, dict[int, Hit]] = defaultdict(dict)

    def fold_counts(name: str, rel: str, by_rank: dict[int | None, int]) -> None:
        """One file's counts per rank of signal ``name`` into the job's."""
        per_rank = counts_by_rank[name]
        if None not in by_rank and per_rank.keys().isdisjoint(by_rank) and _all_global(by_rank):
            # (ranks no other file had, all global: most files)
            per_rank.update(by_rank)  # type: ignore[arg-type]
            return
        for r, n in by_rank.items():
            rr = rank_of(rel, r)
            if rr is not None:
                per_rank[rr] += n

    def fold_digest(name: str, rel: str, sd: _SignalDigest, hits: list[Hit]) -> None:
        """One file's digest of signal ``name`` (``hits``: its hits as the job sees them) into the job's firsts,
        lasts and counts per rank."""
        first, last = sd.first, sd.last
        job_firsts, job_lasts = first_by_rank[name], last_by_rank[name]
        # Ranks no other file had (most files): their hits go in as they are, in the same order the loop of
        # fold_ranks would put them (a key is a hit's own rank: only a line without one takes the file's rank)
        if (
            None not in first
            and None not in last
            and job_firsts.keys().isdisjoint(first)
            and job_lasts.keys().isdisjoint(last)
            and _all_global(first)
        ):
            job_firsts.update(zip(first, map(hits.__getitem__, first.values()), strict=True))  # type: ignore[arg-type]
            job_lasts.update(zip(last, map(hits.__getitem__, last.values()), strict=True))  # type: ignore[arg-type]
            fold_counts(name, rel, sd.count_by_rank)
            return
        fold_ranks(
            name,
            rel,
            (hits[i] for i in first.values()),
            (hits[i] for i in last.values()),
            sd.count_by_rank,
        )

    def fold_ranks(
        name: str, rel: str, firsts: Iterable[Hit], lasts: Iterable[Hit], by_rank: dict[int | None, int]
    ) -> None:
        """One file's first and last hits and counts per rank of signal ``name`` into the job's."""
        job_firsts, job_lasts = first_by_rank[name], last_by_rank[name]
        for h in firsts:
            r = h.rank
            if r is not None:
                prev = job_firsts.get(r)
                if prev is None or _order_key(h) < _order_key(prev):
                    job_firsts[r] = h
        for h in lasts:
            r = h.rank
            if r is not None:
                prev = job_lasts.get(r)
                if prev is None or _order_key(prev) < _order_key(h):
                    job_lasts[r] = h
        fold_counts(name, rel, by_rank)

    clock_facts: list[tuple[str, WorkerClockFacts]] = []
    series: dict[str, dict[int, _SeriesBuilder]] = {"step": {}, "memory": {}}
    hosts: dict[int, tuple[int, str, int]] = {}
    got = early if early is not None else {}
    for j, lf in enumerate(job.log_files()):
        rel = lf.rel
        pre = got.pop(j, None)
        digest: _FileDigest | None
        if pre is not None:
            digest, fh, clock, fseries = pre
        else:
            digest = result_item(job, j, 4)
            fh = result_item(job, j, 0) if digest is None else None
        if digest is None and fh is None:
            continue
        if pre is None:
            clock, fseries = result_item(job, j, 2), result_item(job, j, 3)
        fh_hosts: dict[int, tuple[int, str, int]] = {}
        clock_facts.append((rel, clock))
        if digest is not None:
            for name, sd in digest.signals.items():
                counts[name] += sd.count
                hits = _job_hits(sd, digest.year, year, single_rank.get(rel), local_ranks.get(rel))
                if hits:
                    so_far = kept.get(name)
                    if so_far is None:
                        kept[name] = list(hits)
                    else:
                        so_far.extend(hits)
                fold_digest(name, rel, sd, hits)
            fh_hosts = digest.rank_host
        if fh is not None:
            fh_hosts = fh.rank_host
        converted.clear()  # one file's objects share identities; the next file's are new ones (and the memos
        made.clear()  # must not hold every file's objects at once)
        for name, t in fh.tallies.items() if fh is not None else ():
            counts[name] += t.count
            raws = [*t.samples, *t.first_by_rank.values(), *t.last_by_rank.values()]
            if raws:
                here: dict[int, Hit] = {}
                for raw in raws:
                    if raw.line not in here:  # the first raw hit of a line is kept
                        here[raw.line] = hit(name, rel, raw)
                kept.setdefault(name, []).extend(here.values())
            fold_ranks(
                name,
                rel,
                (hit(name, rel, raw) for raw in t.first_by_rank.values()),
                (hit(name, rel, raw) for raw in t.last_by_rank.values()),
                t.count_by_rank,
            )
        for key in ("step", "memory"):
            per_rank = series[key]
            for r, arrays in fseries.arrays.get(key, {}).items():
                rr = rank_of(rel, r)
                if rr is not None:
                    b = per_rank.get(rr)
                    if b is None:
                        per_rank[rr] = _SeriesBuilder.of_arrays(rel, *arrays)
                    else:
                        b.add_arrays(rel, *arrays)
            for r, points in fseries.raw.get(key, {}).items():
                rr = rank_of(rel, r)
                if rr is not None:
                    b = per_rank.get(rr)
                    if b is None:
                        b = per_rank[rr] = _SeriesBuilder()
                    b.add(rel, points, year)
        for r, stated in fh_hosts.items():
            if stated[0] >= hosts.get(r, (0, "", 0))[0]:
                hosts[r] = stated
    return WorkerEvidence(
        root=job.root,
        job=job,
        year=year,
        tallies={name: sorted(k, key=_order_key) for name, k in kept.items()},
        counts=dict(counts),
        counts_by_rank={k: dict(v) for k, v in counts_by_rank.items()},
        first_by_rank=dict(first_by_rank),
        last_by_rank=dict(last_by_rank),
        nccl_files=PerFile(job, FileEvents, 1),
        clock=WorkerClock(inv, clock_facts, job.coverage()),
        step_ms={r: b.points() for r, b in series["step"].items()},
        memory_mb={r: b.points() for r, b in series["memory"].items()},
        file_end=_file_ends(job, single_rank, conv),
        rank_host={r: h for r, (n, h, _p) in hosts.items() if inv.world_size is None or n == inv.world_size},
        rank_pid={r: p for r, (n, _h, p) in hosts.items() if inv.world_size is None or n == inv.world_size},
        file_host=_slurmstepd_hosts(kept.get("slurm_cancel", [])),
    )


_STEPD_HOST = re.compile(r"slurmstepd: error: \*\*\* (?:STEP|JOB) \S+ ON (\S+) ")


def _slurmstepd_hosts(hits: Iterable[Hit]) -> dict[str, str]:
    """File -> the one host its slurmstepd lines name (slurmstepd writes into the output of its own node)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        m = _STEPD_HOST.search(h.text)
        if m:
            seen[h.file].add(m.group(1))
    return {f: next(iter(hosts)) for f, hosts in seen.items() if len(hosts) == 1}


def _file_ends(
    job: JobScan, single_rank: dict[str, int], conv: Callable[[WallTime | None], datetime | None]
) -> dict[str, Hit]:
    out: dict[str, Hit] = {}
    for f in job.inventory.files:  # the inventory found each file's last timed line in its tail
        if f.last_timed is not None:
            line, text, wt = f.last_timed
            out[f.rel] = Hit("end", f.rel, line, text, single_rank.get(f.rel), conv(wt))
    return out

"""The AIS evidence (:func:`gather_ais_evidence`): the file index, counter spikes, notable error lines
(``analysis.ais_collect``, ``analysis.ais_intervals``) and the clock alignment; AIS-clock times on the worker clock
(:func:`ais_to_worker`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs.analysis.alignment import Alignment, align
from debug_training_logs.analysis.evidence_types import AisEvidence, AisOwn, NcclState, WorkerEvidence

if TYPE_CHECKING:  # the AIS and dump modules are imported where those are read: the worker scan's sinks need none
    from debug_training_logs.analysis.ais_delta_types import GetStop, Restart


# ---------------------------------------------------------------------------------------------------------------------
# AIS evidence: the file index, counter spikes, notable error lines (analysis.ais_collect), and the clock alignment


def aligned_for(al: Alignment | None, daemon: str) -> bool:
    """True when the alignment is verified and applies to ``daemon``'s clock."""
    if al is None or not al.verified or al.offset_hours is None:
        return False
    d = next((x for x in al.daemons if x.daemon == daemon), None)
    return d is not None and d.verified and d.offset_hours == al.offset_hours


def ais_to_worker(al: Alignment | None, t: datetime | None) -> datetime | None:
    """An AIS-clock time on the worker clock (None unless the offset is verified)."""
    if t is None or al is None or not al.verified or al.offset_hours is None:
        return None
    return t + timedelta(hours=al.offset_hours)


def ais_own(ais_dir: Path) -> AisOwn:
    """One pass over the AIS logs (index, stats deltas, W/E lines) and what follows from them alone."""
    from debug_training_logs.analysis.ais_collect import collect, notable_lines
    from debug_training_logs.analysis.ais_delta_types import IntervalDelta
    from debug_training_logs.analysis.ais_intervals import (
        DEFAULT_COUNTERS,
        find_restarts,
        find_spikes,
        get_stops,
        interval_deltas,
    )

    collection = collect(ais_dir)
    intervals: list[IntervalDelta] = []
    restarts: list[Restart] = []
    stops: list[GetStop] = []
    for d in collection.index.daemons:
        series = collection.points.get(d.key, [])
        intervals += interval_deltas(d.key, series, DEFAULT_COUNTERS)
        restarts += find_restarts(d, series)
        if d.role == "target":
            stops += get_stops(d, series)
    return AisOwn(
        collection=collection,
        spikes=find_spikes(intervals, DEFAULT_COUNTERS),
        notable=notable_lines(collection),
        get_stops=sorted(stops, key=lambda g: g.last_increase_at),
        restarts=restarts,
    )


def gather_ais_evidence(
    ais_dir: Path, worker: WorkerEvidence, nccl: NcclState, own: AisOwn | None = None
) -> AisEvidence:
    """The AIS logs' own evidence (:func:`ais_own`, or ``own`` when it was read already), then the clock alignment
    from the scans made."""
    if own is None:
        own = ais_own(ais_dir)
    collection = own.collection
    # the alignment's error onsets read the spikes ais_own found per daemon of the index: the same as found again per
    # daemon of the stats series (a daemon's spikes depend on its own series alone) when those are the index's
    with_stats = set(collection.points) <= {d.key for d in collection.index.daemons}
    alignment = align(worker.clock, nccl.table, collection, spikes=own.spikes if with_stats else None)
    return AisEvidence(
        root=collection.index.root,
        index=collection.index,
        spikes=own.spikes,
        notable=own.notable,
        get_stops=own.get_stops,
        restarts=own.restarts,
        alignment=alignment,
    )

"""``timeline``: one chronological list of the key events of every source, with file:line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from debug_training_logs.analysis import ais_collect
from debug_training_logs.analysis.alignment import scan_worker_clock
from debug_training_logs.analysis.attempts import AttemptFilter
from debug_training_logs.analysis.grep import grep_all_ranks
from debug_training_logs.analysis.nccl_table import DEFAULT_LIMIT, limited
from debug_training_logs.analysis.shared_scan import standard_consumers
from debug_training_logs.analysis.timeline import Timeline as MergedTimeline
from debug_training_logs.analysis.timeline import build_timeline
from debug_training_logs.logs import scan_cache
from debug_training_logs.models import Coverage, Model
from debug_training_logs.paths import input_dir
from debug_training_logs.tools._cache import cached, files_key
from debug_training_logs.tools.attempt_choice import choose
from debug_training_logs.tools.attempts_view import AttemptSummary, summaries
from debug_training_logs.tools.registry import ToolSpec
from debug_training_logs.tools.shared_results import whole_table


class TimelineEvent(Model):
    """One event."""

    time_local: str | None = Field(description="ISO time on the source's own clock (worker: zone unstated).")
    clock: str = Field(description="worker or ais: whose clock time_local is on.")
    time_utc: str | None = Field(description="UTC, only when a verified offset and an unambiguous zone give it.")
    aligned: bool = Field(description="False: an AIS event placed without a verified offset (its order is a guess).")
    time_approx: bool = Field(description="True: the line states no time; this is the previous timestamped line's.")
    source: str = Field(description="file:line of the event's line.")
    ranks: str = Field(description="Global ranks (worker events, range string) or the AIS daemon.")
    event: str
    kind: str = Field(
        description="job, error, noise, nccl_timeout, collective_start, teardown, slurm, ais_spike, "
        "ais_error, ais_reads_stopped, ais_restart."
    )


class Timeline(Model):
    """The merged timeline."""

    summary: str
    events: list[TimelineEvent] = Field(description="In time order (on the worker clock when aligned).")
    events_truncated: int = Field(description="Less important events cut to respect `limit`.")
    alignment_verified: bool | None = Field(
        description="Whether AIS events are placed by a verified offset (null without AIS logs)."
    )
    offset_hours: float | None = Field(description="Worker clock minus AIS clock used, when verified.")
    year_basis: str = Field(description="Where the year of worker times (which have none) comes from.")
    coverage: Coverage
    attempts: list[AttemptSummary] = Field(
        default_factory=list, description="The job's attempts when it was restarted; empty for one attempt."
    )
    attempt: int | None = Field(
        default=None, description="The attempt whose worker events are listed (default: the first failed one)."
    )


def timeline(
    logs_dir: Annotated[str, Field(description="Directory with the workers' logs.")],
    ais_dir: Annotated[str | None, Field(description="Directory with AIStore daemon logs (optional).")] = None,
    limit: Annotated[int, Field(ge=5, le=500, description="At most this many events (least important cut).")] = 60,
    attempt: Annotated[
        int | None,
        Field(ge=0, description="For a restarted job: whose worker events to list (default: the first failed one)."),
    ] = None,
) -> Timeline:
    """One chronological list of the key events from every source: the first line of each error template per rank
    group, NCCL timeouts and the collective start they imply, teardown, SLURM cancels, and (with AIS logs) AIS error
    spikes, notable error lines, the moment reads stopped and restarts. Each event has its own clock's time, UTC when
    the worker/AIS alignment is verified (else AIS events are marked unaligned), file:line and ranks.

    Call it to build the report's Timeline Table and to check that the supposed cause comes before its effects.
    """
    logs = input_dir(logs_dir)
    ais = input_dir(ais_dir, "AIS logs directory") if ais_dir else None
    split, chosen = choose(logs, attempt, *standard_consumers()[:3])  # the timeline's scan: one pass
    # a call again on the same files (another attempt, the agent checking an order) reuses the merged timeline
    ais_key = files_key(ais, archives=True) if ais is not None else None
    t = cached("timeline", logs, (ais_key, limit), lambda: timeline_of(logs, ais, limit))
    events = t.events
    summary = t.summary
    if chosen is not None:
        keep = split.keeper(chosen)
        events = [e for e in events if e.clock != "worker" or _keep(keep, e.source, e.time_local)]
        summary += (
            f" Attempt {chosen} of {split.count}: {len(t.events) - len(events)} event(s) of other attempts left out."
        )
    return Timeline(
        summary=summary,
        attempts=summaries(split) if split.count > 1 else [],
        attempt=chosen,
        events=[
            TimelineEvent(**{k: v for k, v in e.__dict__.items() if k in TimelineEvent.model_fields}) for e in events
        ],
        events_truncated=t.events_truncated,
        alignment_verified=t.alignment.verified if t.alignment is not None else None,
        offset_hours=t.alignment.offset_hours if t.alignment is not None and t.alignment.verified else None,
        year_basis=t.year_basis,
        coverage=t.coverage,
    )


def timeline_of(logs: Path, ais: Path | None, limit: int = 60) -> MergedTimeline:
    """The merged timeline of ``logs`` (and ``ais``): the worker logs' grep templates, NCCL table and clock facts
    from one read of their files, the AIS logs' collection, then :func:`build_timeline` of them."""
    with scan_cache.together(*standard_consumers()[:3]):  # grep, NCCL and clock: one read of the files
        grep = grep_all_ranks(logs, limit=200)
        table = limited(whole_table(logs), DEFAULT_LIMIT)
        worker = scan_worker_clock(logs)
    collection = ais_collect.collect(ais) if ais is not None else None
    return build_timeline(logs, grep, table, worker, collection, limit=limit)


def _keep(keep: AttemptFilter, source: str, time_local: str | None) -> bool:
    rel, _, line = source.rpartition(":")
    if not line.isdigit():
        return True
    return keep(rel, int(line), time_local or "")


SPEC = ToolSpec(func=timeline, cli_name="timeline", title="Merged timeline", positional=("logs_dir", "ais_dir"))

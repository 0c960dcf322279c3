"""``align_timezones``: the offset between worker-log clocks and each AIStore daemon's clock, and whether it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from debug_training_logs.analysis import ais_collect
from debug_training_logs.analysis.alignment import Alignment, WorkerClock, align, scan_worker_clock
from debug_training_logs.analysis.nccl_table import DEFAULT_LIMIT, limited
from debug_training_logs.analysis.shared_scan import standard_consumers
from debug_training_logs.logs import scan_cache
from debug_training_logs.models import Coverage, Evidence, Model
from debug_training_logs.paths import input_dir
from debug_training_logs.tools._cache import cached, files_key
from debug_training_logs.tools.registry import ToolSpec
from debug_training_logs.tools.shared_results import whole_table


class Method(Model):
    """One way the offset was measured."""

    method: str = Field(
        description="zone_labels (stated zones), activity_stop (workers' end vs AIS get.n stop), "
        "error_onset (first worker data trouble vs first AIS data-path error)."
    )
    offset_hours: float | None = Field(
        description="Worker clock minus AIS clock, snapped to a half hour; null if the raw difference is not near one."
    )
    raw_offset_hours: float | None = Field(description="The unsnapped difference of the two anchors, in hours.")
    daemon: str | None = Field(description="The AIS daemon of the AIS-side anchor (null: cluster-wide).")
    evidence: list[Evidence] = Field(description="The worker line and the AIS line compared.")
    detail: str


class DaemonOffset(Model):
    """The alignment of one AIS daemon's clock."""

    daemon: str
    role: str
    zone_hint: str | None = Field(description="Zone abbreviation from its hourly markers (a hint: CST is ambiguous).")
    offset_hours: float | None = Field(description="Worker clock minus this daemon's clock, in hours.")
    verified: bool = Field(
        description="Two independent methods agree for this daemon, or it shares the hourly-"
        "marker zone of verified daemons and nothing it shows disagrees."
    )
    methods: list[str]


class AlignTimezones(Model):
    """Whether worker and AIS times may be compared, and with which offset."""

    summary: str
    offset_hours: float | None = Field(
        description="Worker clock minus AIS clock in hours (e.g. -7 when workers log in UTC-7 and AIS in UTC); null "
        "when the methods disagree or none applied."
    )
    verified: bool = Field(
        description="True only when two independent methods agree and none disagrees. Never "
        "relate AIS and worker times as fact when false."
    )
    methods: list[Method]
    daemons: list[DaemonOffset] = Field(description="Per AIS daemon (they can differ).")
    ais_zone: str | None = Field(description="The zone most AIS hourly markers state.")
    ais_utc_offset_hours: float | None = Field(description="AIS clock minus UTC, when that zone is unambiguous.")
    worker_utc_offset_hours: float | None = Field(description="Worker clock minus UTC, when known.")
    missing: list[str] = Field(description="What would be needed to verify, when not verified.")
    coverage: Coverage


def align_timezones(
    logs_dir: Annotated[str, Field(description="Directory with the workers' logs.")],
    ais_dir: Annotated[str, Field(description="Directory with the AIStore daemon logs (files or per-node .tar.gz).")],
) -> AlignTimezones:
    """The clock offset between the worker logs and each AIStore daemon's logs, from every method that applies
    (the AIS hourly marker's zone vs a zone a worker line states; the workers' end vs the moment AIS get.n stops
    growing; the first worker data error vs the first data-path error on the AIS daemon whose errors spiked), each
    with its evidence. `verified` is true only when two independent methods agree.

    Call it before relating any AIS time to a worker time; verify_conclusion rejects such claims without it.
    """
    logs = input_dir(logs_dir)
    ais = input_dir(ais_dir, "AIS logs directory")
    # a call again on the same files reuses the alignment (the NCCL table and the AIS collection it is built from)
    worker, result = cached("align_timezones", logs, files_key(ais, archives=True), lambda: _aligned(logs, ais))
    return AlignTimezones(
        summary=result.summary,
        offset_hours=result.offset_hours,
        verified=result.verified,
        methods=[
            Method(
                method=m.method,
                offset_hours=m.offset_hours,
                raw_offset_hours=m.raw_offset_hours,
                daemon=m.daemon,
                evidence=m.evidence,
                detail=m.detail,
            )
            for m in result.methods
        ],
        daemons=[DaemonOffset(**d.__dict__) for d in result.daemons],
        ais_zone=result.ais_zone,
        ais_utc_offset_hours=result.ais_utc_offset_hours,
        worker_utc_offset_hours=result.worker_utc_offset_hours,
        missing=result.missing,
        coverage=worker.coverage,
    )


def _aligned(logs: Path, ais: Path) -> tuple[WorkerClock, Alignment]:
    """The workers' clock facts and NCCL table from one read of their logs, the AIS logs' collection, aligned."""
    with scan_cache.together(*standard_consumers()[1:3]):  # the NCCL table and the clock: one read of the files
        worker = scan_worker_clock(logs)
        table = limited(whole_table(logs), DEFAULT_LIMIT)
    return worker, align(worker, table, ais_collect.collect(ais))


SPEC = ToolSpec(
    func=align_timezones, cli_name="align", title="Align worker and AIS clocks", positional=("logs_dir", "ais_dir")
)

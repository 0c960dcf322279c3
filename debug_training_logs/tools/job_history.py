"""``job_history``: what earlier diagnoses say: repeat-offender nodes and AIS daemons, recurring failure signatures,
failures per category over time, and every job a given node, daemon or signature was part of."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from debug_training_logs.history import queries
from debug_training_logs.history.location import location
from debug_training_logs.history.store import open_store
from debug_training_logs.history.types import CategoryCount, JobRef, Kind, Offender, RecurringSignature
from debug_training_logs.models import Model
from debug_training_logs.tools.budget import Cut
from debug_training_logs.tools.registry import ToolSpec


class JobHistory(Model):
    """The job history's answer."""

    summary: str
    store: str = Field(description="Where the history is (a SQLite path, or a PostgreSQL DSN without password).")
    jobs_recorded: int = Field(description="Jobs recorded in all (re-analysing a job updates its one record).")
    failures_recorded: int = Field(description="Of those, the failed ones (every category but no_failure).")
    window: int = Field(description="Failures the tables look at: the last `last` failures (fewer if fewer exist).")
    repeat_offenders: list[Offender] = Field(
        default_factory=list,
        description="Nodes and AIS daemons implicated in at least min_failures of the window, most often first.",
    )
    repeat_offenders_truncated: int = 0
    recurring_signatures: list[RecurringSignature] = Field(
        default_factory=list, description="Failure signatures seen at least min_failures times in the window."
    )
    recurring_signatures_truncated: int = 0
    categories: list[CategoryCount] = Field(
        default_factory=list, description="The window's failures per period and category, newest period first."
    )
    categories_truncated: int = 0
    jobs: list[JobRef] = Field(
        default_factory=list,
        description="With node, daemon or signature: every recorded job it was part of, newest first (paged).",
    )
    jobs_truncated: int = 0
    similar: list[str] = Field(
        default_factory=list, description="When the node or daemon asked about matched nothing: recorded names like it."
    )
    next_offset: int | None = Field(default=None, description="Pass as offset for the next page; null at the end.")


def job_history(
    node: Annotated[
        str | None,
        Field(description="A node (host name): list every recorded job it was implicated in, newest first."),
    ] = None,
    daemon: Annotated[
        str | None,
        Field(description="An AIS daemon (its host name, e.g. ais-target-2): every recorded job it was part of."),
    ] = None,
    signature: Annotated[
        str | None,
        Field(description="A failure signature id (from recurring_signatures or a diagnosis): its jobs."),
    ] = None,
    last: Annotated[
        int, Field(ge=1, le=100_000, description="How many of the most recent failures the tables look at.")
    ] = 50,
    min_failures: Annotated[
        int, Field(ge=1, le=1000, description="A node, daemon or signature must be in at least this many of them.")
    ] = 2,
    period: Annotated[
        Literal["day", "week", "month"], Field(description="The period of the failures-per-category table.")
    ] = "week",
    offset: Annotated[
        int, Field(ge=0, description="Skip this many rows of each table, or of the job list (see next_offset).")
    ] = 0,
    limit: Annotated[
        int, Field(ge=1, le=500, description="At most this many rows of each table, or of the job list.")
    ] = 10,
) -> JobHistory:
    """What earlier diagnoses say, from the job history every diagnose records (SQLite in the user's state
    directory, or the team's PostgreSQL in DEBUG_TRAINING_LOGS_HISTORY).

    Without arguments: the repeat-offender nodes and AIS daemons (implicated in at least min_failures of the last
    `last` failures, with their jobs), the recurring failure signatures (category + the normalised first primary
    event) and the failures per category per period. With node, daemon or signature: every recorded job it was part
    of, newest first (paged with offset/limit). Call it when a diagnosis names a node, daemon or signature to ask
    whether it failed before (diagnose's history field already says so for this job's own), or to find the nodes
    to exclude from the next run.
    """
    where = location()
    shown = "off" if where.backend == "off" else where.shown()
    if where.backend == "off":
        return _empty(
            "The job history is off (DEBUG_TRAINING_LOGS_HISTORY=off): nothing is recorded or remembered.", shown
        )
    store = open_store(where, create=False)
    if store is None:
        return _empty(f"No job history yet at {shown}: every diagnose (analyze) records its job there.", shown)
    try:
        jobs_recorded, failures = queries.totals(store)
        asked: tuple[Kind, str] | None = ("node", node) if node else ("daemon", daemon) if daemon else None
        if asked is not None or signature:
            return _jobs_of(store, shown, jobs_recorded, failures, asked, signature, offset, limit)
        return _tables(store, shown, jobs_recorded, failures, last, min_failures, period, offset, limit)
    finally:
        store.close()


def _empty(summary: str, shown: str) -> JobHistory:
    """The answer when there is no history to read (off, or nothing recorded yet)."""
    return JobHistory(summary=summary, store=shown, jobs_recorded=0, failures_recorded=0, window=0)


def _tables(
    store: Any,
    shown: str,
    jobs_recorded: int,
    failures: int,
    last: int,
    min_failures: int,
    period: Literal["day", "week", "month"],
    offset: int,
    limit: int,
) -> JobHistory:
    """The answer without a node, daemon or signature: the repeat offenders, recurring signatures and categories
    over the last ``last`` failures."""
    win = queries.window(store, last)
    offenders, n_off = queries.repeat_offenders(store, win, min_failures=min_failures, offset=offset, limit=limit)
    sigs, n_sig = queries.recurring_signatures(store, win, min_failures=min_failures, offset=offset, limit=limit)
    categories, n_periods = queries.categories_over_time(store, win, period=period, offset=offset, limit=limit)
    more = max(n_off, n_sig, n_periods) > offset + limit
    return JobHistory(
        summary=_summary(jobs_recorded, failures, win.size, min_failures, offenders, n_off, sigs, n_sig),
        store=shown,
        jobs_recorded=jobs_recorded,
        failures_recorded=failures,
        window=win.size,
        repeat_offenders=offenders,
        repeat_offenders_truncated=max(0, n_off - offset - len(offenders)),
        recurring_signatures=sigs,
        recurring_signatures_truncated=max(0, n_sig - offset - len(sigs)),
        categories=categories,
        categories_truncated=max(0, n_periods - offset - len(categories)),
        next_offset=offset + limit if more else None,
    )


def _jobs_of(
    store: Any,
    shown: str,
    jobs_recorded: int,
    failures: int,
    asked: tuple[Kind, str] | None,
    signature: str | None,
    offset: int,
    limit: int,
) -> JobHistory:
    similar: list[str] = []
    if asked is not None:
        kind, name = asked
        jobs, total = queries.involvement(store, kind, name, offset=offset, limit=limit)
        what = f"{'Node' if kind == 'node' else 'AIS daemon'} {name}"
        if total == 0:
            similar = queries.similar_names(store, kind, name)
    else:
        assert signature is not None
        jobs, total = queries.signature_jobs(store, signature, offset=offset, limit=limit)
        what = f"Signature {signature}"
    failed = sum(1 for j in jobs if j.category != "no_failure")
    if total:
        summary = f"{what} was part of {total} recorded job(s); this page: {len(jobs)} from offset {offset}"
        summary += f" ({failed} failed)." if jobs else "."
        if jobs:
            summary += f" Latest: {jobs[0].job} ({jobs[0].category}, {jobs[0].failed_at})." if offset == 0 else ""
    else:
        summary = f"{what} is in no recorded job ({jobs_recorded} recorded)."
        summary += f" Recorded names like it: {', '.join(similar)}." if similar else ""
    return JobHistory(
        summary=summary,
        store=shown,
        jobs_recorded=jobs_recorded,
        failures_recorded=failures,
        window=0,
        jobs=jobs,
        jobs_truncated=max(0, total - offset - len(jobs)),
        similar=similar,
        next_offset=offset + len(jobs) if offset + len(jobs) < total else None,
    )


def _summary(
    jobs: int,
    failures: int,
    window: int,
    min_failures: int,
    offenders: list[Offender],
    n_off: int,
    sigs: list[RecurringSignature],
    n_sig: int,
) -> str:
    head = f"{jobs} job(s) recorded, {failures} failed; looking at the last {window} failure(s)."
    if not offenders:
        off = f" No node or AIS daemon was implicated in {min_failures} or more of them."
    else:
        top = "; ".join(f"{o.name} in {o.failures} of {o.of_last}" for o in offenders[:3])
        off = f" {n_off} repeat offender(s) (in {min_failures}+ failures): {top}."
    if not sigs:
        sig = " No failure signature recurred."
    else:
        top_sig = "; ".join(f"{s.category} x{s.failures}" for s in sigs[:3])
        sig = f" {n_sig} recurring signature(s): {top_sig}."
    return head + off + sig


_PAGED = ("jobs", "repeat_offenders", "recurring_signatures", "categories")


def _follow_up(cut: Cut) -> tuple[dict[str, Any], str] | None:
    """A shortened table: its next page; a shortened job list inside an offender: that node's (daemon's) own jobs."""
    args = {k: v for k, v in cut.arguments.items()}
    if cut.field in _PAGED:
        nxt = {**args, "offset": int(args.get("offset", 0)) + cut.shown, "limit": max(1, cut.shown)}
        return nxt, f"{cut.total - cut.shown} more {cut.field} rows: page on with offset={nxt['offset']}."
    if cut.field.startswith("repeat_offenders[") and cut.field.endswith("].jobs"):
        index = int(cut.field[len("repeat_offenders[") : -len("].jobs")])
        offender = cut.result["repeat_offenders"][index]
        key = "node" if offender["kind"] == "node" else "daemon"
        return {key: offender["name"]}, f"every job of {offender['name']}: job_history({key}={offender['name']!r})."
    if cut.field.startswith("recurring_signatures[") and cut.field.endswith("].jobs"):
        index = int(cut.field[len("recurring_signatures[") : -len("].jobs")])
        sig = cut.result["recurring_signatures"][index]["signature"]
        return {"signature": sig}, f"every job with this signature: job_history(signature={sig!r})."
    return None


def _amend(data: dict[str, Any], cut: Cut) -> None:
    """The paged list was shortened: the next page starts after what is shown."""
    if cut.field in _PAGED:
        data["next_offset"] = int(cut.arguments.get("offset", 0)) + cut.shown


def render_history(h: JobHistory) -> str:
    """The tables as a person reads them."""
    lines = [h.summary, f"(history: {h.store})"]
    if h.repeat_offenders:
        lines += ["", "Repeat offenders (implicated in failures of the window):"]
        lines += [f"  {'kind':6} {'name':24} {'failures':>10} {'culprit':>8}  categories; jobs"]
        for o in h.repeat_offenders:
            cats = ", ".join(f"{c} {n}" for c, n in o.categories.items())
            jobs = ", ".join(j.job for j in o.jobs) + (f" +{o.jobs_truncated}" if o.jobs_truncated else "")
            share = f"{o.failures}/{o.of_last}"
            lines.append(f"  {o.kind:6} {o.name:24} {share:>10} {o.as_culprit:>8}  {cats}; {jobs}")
    if h.recurring_signatures:
        lines += ["", "Recurring signatures:"]
        for s in h.recurring_signatures:
            lines.append(f"  {s.failures:>4}x {s.category} [{s.signature}] on {', '.join(s.nodes) or '-'}: {s.event}")
    if h.categories:
        lines += ["", "Failures per period and category:"]
        for c in h.categories:
            lines.append(f"  {c.period:10} {c.failures:>5}  " + ", ".join(f"{k} {n}" for k, n in c.categories.items()))
    if h.jobs:
        lines += ["", "Jobs:"]
        for j in h.jobs:
            role = f" ({j.role})" if j.role else ""
            lines.append(f"  {j.failed_at}  {j.job:28} {j.category}{role} culprit ranks {j.culprit_ranks or '-'}")
    if h.next_offset is not None:
        lines += ["", f"More: --offset {h.next_offset}"]
    return "\n".join(lines)


SPEC = ToolSpec(
    func=job_history,
    cli_name="history",
    title="Job history",
    render=render_history,
    follow_up=_follow_up,
    amend=_amend,
)

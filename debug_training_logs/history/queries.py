"""The questions the history answers, as plain functions over an open :class:`~.store.Store`.

"Recent failures" are the last ``last`` recorded jobs that failed (every category but ``no_failure``), newest first
by :attr:`~.types.JobRecord.failed_at`. The SQL is the same for SQLite and PostgreSQL; values are parameters.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from debug_training_logs.history.backend import Row
from debug_training_logs.history.store import Store
from debug_training_logs.history.types import (
    NO_FAILURE,
    CategoryCount,
    JobName,
    JobRecord,
    JobRef,
    Kind,
    Offender,
    RecurringSignature,
    SeenBefore,
)

Period = Literal["day", "week", "month"]
NODES_OF_LATEST = 50
"""A recurring signature's nodes are counted over its latest this many failures."""

_REF_COLUMNS = "j.slurm_job_id, j.attempt, j.logs_dir, j.failed_at, j.category, j.culprit_ranks"


def _ref(row: Sequence[Any], role: str | None = None, *, with_dir: bool = True) -> JobRef:
    slurm_job_id, attempt, logs_dir, failed_at, category, culprit_ranks = row[:6]
    return JobRef(
        job=JobName(slurm_job_id, attempt, logs_dir).label,
        failed_at=failed_at,
        category=category,
        role=role,
        culprit_ranks=culprit_ranks,
        logs_dir=logs_dir if with_dir else "",
    )


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


@dataclass(frozen=True, repr=False)
class Window:
    """The last ``last`` failures, as a range of the ``jobs_by_time`` index: every failure at or after ``(failed_at,
    id)`` (None: fewer failures than ``last``, so all of them). Found once; each query then filters by it."""

    size: int
    failed_at: str | None
    id: int | None

    def where(self, alias: str = "j") -> tuple[str, tuple[Any, ...]]:
        """The SQL condition (and its parameters) that selects the window's failures of ``alias``."""
        cond = f"{alias}.category <> ?"
        if self.failed_at is None:
            return cond, (NO_FAILURE,)
        return (
            f"{cond} AND ({alias}.failed_at > ? OR ({alias}.failed_at = ? AND {alias}.id >= ?))",
            (NO_FAILURE, self.failed_at, self.failed_at, self.id),
        )

    def where_implicated(self, alias: str = "i") -> tuple[str, tuple[Any, ...]]:
        """:meth:`where` on ``implicated``'s own copy of the job's time and outcome (no join)."""
        cond = f"{alias}.failed = 1"
        if self.failed_at is None:
            return cond, ()
        return (
            f"{cond} AND ({alias}.failed_at > ? OR ({alias}.failed_at = ? AND {alias}.job_id >= ?))",
            (self.failed_at, self.failed_at, self.id),
        )


def window(store: Store, last: int) -> Window:
    """The last ``last`` failures (fewer when fewer were recorded)."""
    edge = store.rows(
        "SELECT failed_at, id FROM jobs WHERE category <> ? ORDER BY failed_at DESC, id DESC LIMIT 1 OFFSET ?",
        (NO_FAILURE, last - 1),
    )
    if edge:
        return Window(last, edge[0][0], int(edge[0][1]))
    n = int(store.rows("SELECT COUNT(*) FROM jobs WHERE category <> ?", (NO_FAILURE,))[0][0] or 0)
    return Window(n, None, None)


def totals(store: Store) -> tuple[int, int]:
    """(jobs recorded, of which failed)."""
    rows = store.rows("SELECT COUNT(*), SUM(CASE WHEN category <> ? THEN 1 ELSE 0 END) FROM jobs", (NO_FAILURE,))
    return int(rows[0][0] or 0), int(rows[0][1] or 0)


def repeat_offenders(
    store: Store, win: Window, *, min_failures: int, offset: int = 0, limit: int = 10, jobs_per: int = 5
) -> tuple[list[Offender], int]:
    """Nodes and daemons implicated in at least ``min_failures`` of the window's failures, most often first: (the
    page from ``offset``, how many there are in all)."""
    icond, iparams = win.where_implicated()
    groups = store.rows(
        "SELECT i.kind, i.name, COUNT(*), SUM(CASE WHEN i.role = 'culprit' THEN 1 ELSE 0 END), "
        f"MIN(i.failed_at), MAX(i.failed_at) FROM implicated i WHERE {icond} "
        "GROUP BY i.kind, i.name HAVING COUNT(*) >= ? ORDER BY COUNT(*) DESC, MAX(i.failed_at) DESC, i.kind, i.name",
        (*iparams, min_failures),
    )
    page = groups[offset : offset + limit]
    if not page:
        return [], len(groups)
    names = sorted({g[1] for g in page})
    cond, params = win.where()
    among = f"{cond} AND i.name IN ({_marks(len(names))})"
    categories: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for kind, name, category, n in store.rows(
        f"SELECT i.kind, i.name, j.category, COUNT(*) FROM implicated i JOIN jobs j ON j.id = i.job_id WHERE {among} "
        "GROUP BY i.kind, i.name, j.category ORDER BY COUNT(*) DESC, j.category",
        (*params, *names),
    ):
        categories[(kind, name)][category] = int(n)
    jobs: dict[tuple[str, str], list[JobRef]] = defaultdict(list)
    for row in store.rows(
        f"SELECT r.kind, r.name, r.role, {_REF_COLUMNS} FROM (SELECT i.kind, i.name, i.role, i.job_id, "
        "ROW_NUMBER() OVER (PARTITION BY i.kind, i.name ORDER BY i.failed_at DESC, i.job_id DESC) AS nth "
        f"FROM implicated i WHERE {icond} AND i.name IN ({_marks(len(names))})) r JOIN jobs j ON j.id = r.job_id "
        "WHERE r.nth <= ? ORDER BY j.failed_at DESC, j.id DESC",
        (*iparams, *names, jobs_per),
    ):
        jobs[(row[0], row[1])].append(_ref(row[3:], role=row[2], with_dir=False))
    out = [
        Offender(
            kind=kind,
            name=name,
            failures=int(n),
            of_last=win.size,
            as_culprit=int(culprit or 0),
            categories=categories[(kind, name)],
            first_seen=first,
            last_seen=latest,
            jobs=jobs[(kind, name)],
            jobs_truncated=max(0, int(n) - len(jobs[(kind, name)])),
        )
        for kind, name, n, culprit, first, latest in page
    ]
    return out, len(groups)


def recurring_signatures(
    store: Store, win: Window, *, min_failures: int, offset: int = 0, limit: int = 10, jobs_per: int = 5
) -> tuple[list[RecurringSignature], int]:
    """Failure signatures seen in at least ``min_failures`` of the window's failures, most frequent first."""
    cond, params = win.where()
    groups = store.rows(
        "SELECT j.signature, MIN(j.category), MIN(j.signature_event), COUNT(*), MIN(j.failed_at), MAX(j.failed_at) "
        f"FROM jobs j WHERE {cond} GROUP BY j.signature HAVING COUNT(*) >= ? "
        "ORDER BY COUNT(*) DESC, MAX(j.failed_at) DESC, j.signature",
        (*params, min_failures),
    )
    page = groups[offset : offset + limit]
    if not page:
        return [], len(groups)
    sigs = [g[0] for g in page]
    among = f"{cond} AND j.signature IN ({_marks(len(sigs))})"
    jobs: dict[str, list[JobRef]] = defaultdict(list)
    for row in store.rows(
        "SELECT signature, slurm_job_id, attempt, logs_dir, failed_at, category, culprit_ranks FROM ("
        f"SELECT j.signature, {_REF_COLUMNS}, j.id, ROW_NUMBER() OVER (PARTITION BY j.signature "
        f"ORDER BY j.failed_at DESC, j.id DESC) AS nth FROM jobs j WHERE {among}) ranked "
        "WHERE nth <= ? ORDER BY failed_at DESC, id DESC",
        (*params, *sigs, jobs_per),
    ):
        jobs[row[0]].append(_ref(row[1:], with_dir=False))
    where: dict[str, list[str]] = defaultdict(list)
    for sig, name, _n in store.rows(
        "SELECT r.signature, i.name, COUNT(*) FROM (SELECT j.id, j.signature, ROW_NUMBER() OVER (PARTITION BY "
        f"j.signature ORDER BY j.failed_at DESC, j.id DESC) AS nth FROM jobs j WHERE {among}) r "
        "JOIN implicated i ON i.job_id = r.id WHERE r.nth <= ? GROUP BY r.signature, i.name "
        "ORDER BY COUNT(*) DESC, i.name",
        (*params, *sigs, NODES_OF_LATEST),
    ):
        if len(where[sig]) < 8:
            where[sig].append(name)
    out = [
        RecurringSignature(
            signature=sig,
            category=category,
            event=event,
            failures=int(n),
            first_seen=first,
            last_seen=latest,
            nodes=where[sig],
            jobs=jobs[sig],
            jobs_truncated=max(0, int(n) - len(jobs[sig])),
        )
        for sig, category, event, n, first, latest in page
    ]
    return out, len(groups)


def period_of(failed_at: str, period: Period) -> str:
    """The period a failure time falls in: ISO week ``2026-W21``, day ``2026-05-21`` or month ``2026-05``."""
    if period == "day":
        return failed_at[:10]
    if period == "month":
        return failed_at[:7]
    try:
        year, week, _ = datetime.fromisoformat(failed_at).isocalendar()
    except ValueError:
        return failed_at[:10]
    return f"{year}-W{week:02d}"


def categories_over_time(
    store: Store, win: Window, *, period: Period, offset: int = 0, limit: int = 10
) -> tuple[list[CategoryCount], int]:
    """Failures per category in each period of the window, newest period first: (the page of periods from
    ``offset``, how many periods in all)."""
    cond, params = win.where()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for failed_at, category, n in store.rows(
        f"SELECT SUBSTR(j.failed_at, 1, 10), j.category, COUNT(*) FROM jobs j WHERE {cond} "
        "GROUP BY SUBSTR(j.failed_at, 1, 10), j.category",
        params,
    ):
        counts[period_of(failed_at, period)][category] += int(n)
    periods = sorted(counts, reverse=True)
    return [
        CategoryCount(
            period=p,
            failures=sum(counts[p].values()),
            categories=dict(sorted(counts[p].items(), key=lambda kv: (-kv[1], kv[0]))),
        )
        for p in periods[offset : offset + limit]
    ], len(periods)


def involvement(store: Store, kind: Kind, name: str, *, offset: int = 0, limit: int = 20) -> tuple[list[JobRef], int]:
    """Every recorded job (failed or not) ``name`` was implicated in, newest first: (the page, how many in all)."""
    total = int(store.rows("SELECT COUNT(*) FROM implicated WHERE kind = ? AND name = ?", (kind, name))[0][0] or 0)
    rows = store.rows(
        f"SELECT i.role, {_REF_COLUMNS} FROM implicated i JOIN jobs j ON j.id = i.job_id "
        "WHERE i.kind = ? AND i.name = ? ORDER BY j.failed_at DESC, j.id DESC LIMIT ? OFFSET ?",
        (kind, name, limit, offset),
    )
    return [_ref(r[1:], role=r[0]) for r in rows], total


def similar_names(store: Store, kind: Kind, name: str, limit: int = 8) -> list[str]:
    """Recorded names of ``kind`` that contain ``name`` (case-insensitive), for a name that matched nothing."""
    rows = store.rows(
        "SELECT DISTINCT name FROM implicated WHERE kind = ? AND LOWER(name) LIKE ? ORDER BY name LIMIT ?",
        (kind, f"%{name.lower()}%", limit),
    )
    return [r[0] for r in rows]


def signature_jobs(store: Store, sig: str, *, offset: int = 0, limit: int = 20) -> tuple[list[JobRef], int]:
    """Every recorded job with signature ``sig``, newest first."""
    total = int(store.rows("SELECT COUNT(*) FROM jobs WHERE signature = ?", (sig,))[0][0] or 0)
    rows = store.rows(
        f"SELECT {_REF_COLUMNS} FROM jobs j WHERE j.signature = ? "
        "ORDER BY j.failed_at DESC, j.id DESC LIMIT ? OFFSET ?",
        (sig, limit, offset),
    )
    return [_ref(r) for r in rows], total


def seen_before(store: Store, rec: JobRecord, *, window_days: int, jobs_per: int = 5) -> list[SeenBefore]:
    """What this job shares with earlier failures within ``window_days`` before it: each implicated node and daemon,
    and its signature (only those seen before; none for a job that did not fail)."""
    if rec.category == NO_FAILURE:
        return []
    try:
        since = (datetime.fromisoformat(rec.failed_at) - timedelta(days=window_days)).isoformat(timespec="seconds")
    except ValueError:
        return []
    out: list[SeenBefore] = []
    bounds = (rec.key, NO_FAILURE, since, rec.failed_at)
    for item in rec.implicated:
        rows = store.rows(
            f"SELECT i.role, {_REF_COLUMNS} FROM implicated i JOIN jobs j ON j.id = i.job_id "
            "WHERE i.kind = ? AND i.name = ? AND j.job_key <> ? AND j.category <> ? AND j.failed_at >= ? "
            "AND j.failed_at <= ? ORDER BY j.failed_at DESC, j.id DESC",
            (item.kind, item.name, *bounds),
        )
        if rows:
            out.append(_seen(item.kind, item.name, item.role, rows, window_days, jobs_per, with_role=True))
    rows = store.rows(
        f"SELECT NULL, {_REF_COLUMNS} FROM jobs j WHERE j.signature = ? AND j.job_key <> ? AND j.category <> ? "
        "AND j.failed_at >= ? AND j.failed_at <= ? ORDER BY j.failed_at DESC, j.id DESC",
        (rec.signature, *bounds),
    )
    if rows:
        out.append(_seen("signature", rec.signature_event, None, rows, window_days, jobs_per, with_role=False))
    return out


def _seen(
    what: Literal["node", "daemon", "signature"],
    name: str,
    role: str | None,
    rows: list[Row],
    window_days: int,
    jobs_per: int,
    *,
    with_role: bool,
) -> SeenBefore:
    return SeenBefore(
        what=what,
        name=name,
        role=role,
        earlier=len(rows),
        window_days=window_days,
        jobs=[_ref(r[1:], role=r[0] if with_role else None) for r in rows[:jobs_per]],
    )

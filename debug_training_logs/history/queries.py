"""The questions the history answers, as plain functions over an open :class:`~.store.Store`.

"Recent failures" are the last ``last`` recorded jobs that failed (every category but ``no_failure``), newest first
by :attr:`~.types.JobRecord.failed_at`. The SQL is the same for SQLite and PostgreSQL; values are parameters.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from debug_training_logs.history.record import job_label
from debug_training_logs.history.store import Row, Store
from debug_training_logs.history.types import (
    NO_FAILURE,
    CategoryCount,
    JobRecord,
    JobRef,
    Kind,
    Offender,
    RecurringSignature,
    SeenBefore,
)

Period = Literal["day", "week", "month"]

_RECENT = "WITH recent AS (SELECT * FROM jobs WHERE category <> ? ORDER BY failed_at DESC, id DESC LIMIT ?) "
_REF_COLUMNS = "j.slurm_job_id, j.attempt, j.logs_dir, j.failed_at, j.category, j.culprit_ranks"


def _ref(row: Sequence[Any], role: str | None = None) -> JobRef:
    slurm_job_id, attempt, logs_dir, failed_at, category, culprit_ranks = row[:6]
    return JobRef(
        job=job_label(slurm_job_id, attempt, logs_dir),
        failed_at=failed_at,
        category=category,
        role=role,
        culprit_ranks=culprit_ranks,
        logs_dir=logs_dir,
    )


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


def totals(store: Store) -> tuple[int, int]:
    """(jobs recorded, of which failed)."""
    rows = store.rows("SELECT COUNT(*), SUM(CASE WHEN category <> ? THEN 1 ELSE 0 END) FROM jobs", (NO_FAILURE,))
    return int(rows[0][0] or 0), int(rows[0][1] or 0)


def window_size(store: Store, last: int) -> int:
    """How many failures the last-``last`` window really holds (fewer when fewer were recorded)."""
    rows = store.rows(_RECENT + "SELECT COUNT(*) FROM recent", (NO_FAILURE, last))
    return int(rows[0][0] or 0)


def repeat_offenders(
    store: Store, *, last: int, min_failures: int, offset: int = 0, limit: int = 20, jobs_per: int = 8
) -> tuple[list[Offender], int]:
    """Nodes and daemons implicated in at least ``min_failures`` of the last ``last`` failures, most often first:
    (the page from ``offset``, how many there are in all)."""
    of_last = window_size(store, last)
    groups = store.rows(
        _RECENT + "SELECT i.kind, i.name, COUNT(*), SUM(CASE WHEN i.role = 'culprit' THEN 1 ELSE 0 END), "
        "MIN(r.failed_at), MAX(r.failed_at) FROM implicated i JOIN recent r ON r.id = i.job_id "
        "GROUP BY i.kind, i.name HAVING COUNT(*) >= ? "
        "ORDER BY COUNT(*) DESC, MAX(r.failed_at) DESC, i.kind, i.name",
        (NO_FAILURE, last, min_failures),
    )
    page = groups[offset : offset + limit]
    if not page:
        return [], len(groups)
    names = sorted({g[1] for g in page})
    detail = store.rows(
        _RECENT + f"SELECT i.kind, i.name, i.role, {_REF_COLUMNS} FROM implicated i JOIN recent j ON j.id = i.job_id "
        f"WHERE i.name IN ({_marks(len(names))}) ORDER BY j.failed_at DESC, j.id DESC",
        (NO_FAILURE, last, *names),
    )
    jobs: dict[tuple[str, str], list[JobRef]] = defaultdict(list)
    categories: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for row in detail:
        key = (row[0], row[1])
        jobs[key].append(_ref(row[3:], role=row[2]))
        categories[key][row[7]] += 1
    out = []
    for kind, name, n, culprit, first, latest in page:
        refs = jobs[(kind, name)]
        out.append(
            Offender(
                kind=kind,
                name=name,
                failures=int(n),
                of_last=of_last,
                as_culprit=int(culprit or 0),
                categories=dict(categories[(kind, name)].most_common()),
                first_seen=first,
                last_seen=latest,
                jobs=refs[:jobs_per],
                jobs_truncated=max(0, len(refs) - jobs_per),
            )
        )
    return out, len(groups)


def recurring_signatures(
    store: Store, *, last: int, min_failures: int, offset: int = 0, limit: int = 20, jobs_per: int = 8
) -> tuple[list[RecurringSignature], int]:
    """Failure signatures seen in at least ``min_failures`` of the last ``last`` failures, most frequent first."""
    groups = store.rows(
        _RECENT + "SELECT signature, MIN(category), MIN(signature_event), COUNT(*), MIN(failed_at), MAX(failed_at) "
        "FROM recent GROUP BY signature HAVING COUNT(*) >= ? ORDER BY COUNT(*) DESC, MAX(failed_at) DESC, signature",
        (NO_FAILURE, last, min_failures),
    )
    page = groups[offset : offset + limit]
    if not page:
        return [], len(groups)
    sigs = [g[0] for g in page]
    detail = store.rows(
        _RECENT + f"SELECT j.signature, j.id, {_REF_COLUMNS} FROM recent j WHERE j.signature IN ({_marks(len(sigs))}) "
        "ORDER BY j.failed_at DESC, j.id DESC",
        (NO_FAILURE, last, *sigs),
    )
    nodes = store.rows(
        _RECENT + "SELECT j.signature, i.name FROM implicated i JOIN recent j ON j.id = i.job_id "
        f"WHERE j.signature IN ({_marks(len(sigs))})",
        (NO_FAILURE, last, *sigs),
    )
    jobs: dict[str, list[JobRef]] = defaultdict(list)
    for row in detail:
        jobs[row[0]].append(_ref(row[2:]))
    where: dict[str, Counter[str]] = defaultdict(Counter)
    for sig, name in nodes:
        where[sig][name] += 1
    out = []
    for sig, category, event, n, first, latest in page:
        refs = jobs[sig]
        out.append(
            RecurringSignature(
                signature=sig,
                category=category,
                event=event,
                failures=int(n),
                first_seen=first,
                last_seen=latest,
                nodes=[name for name, _ in where[sig].most_common(8)],
                jobs=refs[:jobs_per],
                jobs_truncated=max(0, len(refs) - jobs_per),
            )
        )
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


def categories_over_time(store: Store, *, last: int, period: Period) -> list[CategoryCount]:
    """Failures per category per period among the last ``last`` failures, newest period first."""
    rows = store.rows(_RECENT + "SELECT failed_at, category FROM recent", (NO_FAILURE, last))
    counts = Counter((period_of(t, period), c) for t, c in rows)
    ordered = sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1]), reverse=False)
    ordered.sort(key=lambda kv: kv[0][0], reverse=True)  # newest period first, each by count (stable)
    return [CategoryCount(period=p, category=c, failures=n) for (p, c), n in ordered]


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

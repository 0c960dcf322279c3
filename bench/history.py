"""The job history at scale and on the twenty jobs, by SQLite and by PostgreSQL (run by hand, never by the tests).

    python bench/history.py scale [--jobs 10000] [--rounds 5]   # record N jobs, time every kind of `history` answer
    python bench/history.py twenty                              # analyse twenty jobs, print the tables

``scale`` records ``--jobs`` synthetic diagnoses (2,000 nodes in 50 racks, 1-3 implicated per job, a few bad nodes
that recur, 13 categories, 400 signatures, over 180 days) into a fresh SQLite file and a fresh database on a real
PostgreSQL server (started as the tests start it, or ``--dsn``), then times each answer of the ``history`` command:
in process (the tool call, budget included: the median of ``--rounds``) and as the whole CLI command (a fresh
process: imports, opening the history, the queries, printing).

``twenty`` analyses the twenty jobs of tests/test_history_twenty_jobs.py plus the real torch 2.14 gloo runs in
/work/shared/realworld/torch_2_14_gloo when present, into both backends, and prints the `history` tables.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import get_args

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from debug_training_logs.history.location import Location  # noqa: E402
from debug_training_logs.history.record import signature  # noqa: E402
from debug_training_logs.history.store import open_store  # noqa: E402
from debug_training_logs.history.types import (  # noqa: E402
    Implicated,
    JobName,
    JobRecord,
)
from debug_training_logs.verify.models import Category  # noqa: E402

CATEGORIES = get_args(Category)


def synthetic(n: int, seed: int = 7) -> Iterator[JobRecord]:
    rng = random.Random(seed)
    nodes = [f"gpu-r{r:02d}-n{k:03d}" for r in range(50) for k in range(40)]
    bad = rng.sample(nodes, 12)
    events = [f"[rank{i}]: failure kind {i} at step {i * 7} on shard-{i}.tar" for i in range(400)]
    start = 1_780_000_000
    for i in range(n):
        category = rng.choice(CATEGORIES)
        t = start + i * (180 * 86400 // n)
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
        picked = {rng.choice(bad) if rng.random() < 0.3 else rng.choice(nodes) for _ in range(rng.randint(1, 3))}
        implicated = [
            Implicated("node", name, "culprit" if j == 0 else "suspect", str(j)) for j, name in enumerate(picked)
        ]
        if category in ("storage_errors", "data_loading_stall"):
            implicated.append(Implicated("daemon", f"ais-target-{rng.randint(0, 15)}", "in_chain"))
        sig, event = signature(category, rng.choice(events))
        job = str(5_000_000 + i)
        yield JobRecord(
            key=JobName(job, None, f"/lustre/jobs/{job}/logs").key,
            slurm_job_id=job,
            attempt=None,
            logs_dir=f"/lustre/jobs/{job}/logs",
            ais_dir=None,
            job_start=at,
            job_end=at,
            failed_at=at,
            recorded_at=at,
            category=category,
            confidence="high",
            verified=True,
            culprit_ranks="5",
            suspect_ranks="",
            signature=sig,
            signature_event=event,
            summary=f"{category} (rank(s) 5)",
            implicated=tuple(implicated),
        )


@contextmanager
def backends(dsn: str | None) -> Iterator[list[Location]]:
    with tempfile.TemporaryDirectory(prefix="dtl-history-bench-") as tmp:
        sqlite = Location("sqlite", str(Path(tmp) / "history.sqlite"))
        if dsn is not None:
            yield [sqlite, Location("postgres", dsn)]
            return
        from tests.postgres_server import running_postgres

        with running_postgres() as server:
            yield [sqlite, Location("postgres", server.create_database(f"bench_{os.getpid()}"))]


def fill(where: Location, n: int) -> float:
    store = open_store(where)
    assert store is not None
    t0 = time.perf_counter()
    try:
        for rec in synthetic(n):
            store.record(rec)
    finally:
        store.close()
    return time.perf_counter() - t0


def median_seconds(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def scale(args: argparse.Namespace) -> None:
    from debug_training_logs.tools.registry import tool_by_name

    spec = tool_by_name("job_history")
    assert spec is not None
    answers: list[tuple[str, dict[str, object], list[str]]] = [
        ("overview, last 50", {}, []),
        ("overview, last 10,000", {"last": 10_000}, ["--last", "10000"]),
        ("overview, last 10,000, by day", {"last": 10_000, "period": "day"}, ["--last", "10000", "--period", "day"]),
        ("node (a repeat offender)", {"node": "BAD"}, ["--node", "BAD"]),
        ("daemon ais-target-3", {"daemon": "ais-target-3"}, ["--daemon", "ais-target-3"]),
    ]
    with backends(args.dsn) as where:
        for loc in where:
            took = fill(loc, args.jobs)
            store = open_store(loc)
            assert store is not None
            bad = store.rows("SELECT name FROM implicated GROUP BY name ORDER BY COUNT(*) DESC LIMIT 1")[0][0]
            store.close()
            print(
                f"\n{loc.backend}: {args.jobs:,} jobs recorded in {took:.1f} s ({took / args.jobs * 1000:.2f} ms each)"
            )
            os.environ["DEBUG_TRAINING_LOGS_HISTORY"] = loc.target
            print(f"  {'answer':34} {'in process':>11} {'CLI command':>12}  tokens")
            for label, kwargs, flags in answers:
                kwargs = {k: (bad if v == "BAD" else v) for k, v in kwargs.items()}
                flags = [bad if f == "BAD" else f for f in flags]
                result = spec.call(**kwargs)
                inproc = median_seconds(lambda kwargs=kwargs: spec.call(**kwargs), args.rounds)
                cli = median_seconds(
                    lambda flags=flags: subprocess.run(
                        [sys.executable, "-m", "debug_training_logs", "history", "--json", *flags],
                        check=True,
                        capture_output=True,
                    ),
                    args.rounds,
                )
                tokens = result.model_dump()["budget"]["estimated_tokens"]
                print(f"  {label:34} {inproc * 1000:9.1f} ms {cli * 1000:9.1f} ms  {tokens:>6}")


TWENTY = REPO / "tests" / "test_history_twenty_jobs.py"
REALWORLD = Path("/work/shared/realworld/torch_2_14_gloo")


def twenty(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from test_history_twenty_jobs import FIXTURES, JOBS

    from debug_training_logs.tools.diagnose import diagnose
    from debug_training_logs.tools.job_history import job_history, render_history

    jobs = [(FIXTURES / name, job_id) for name, job_id in JOBS]
    if REALWORLD.is_dir():
        jobs += [(case, None) for case in sorted(REALWORLD.iterdir()) if (case / "logs").is_dir()]
    with backends(args.dsn) as where:
        for loc in where:
            os.environ["DEBUG_TRAINING_LOGS_HISTORY"] = loc.target
            for case, job_id in jobs:
                ais = case / "ais"
                diagnose(str(case / "logs"), str(ais) if ais.is_dir() else None, job_id=job_id)
            print(f"\n===== {loc.backend}: {len(jobs)} analyses =====")
            print(render_history(job_history()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--jobs", type=int, default=10_000)
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("--dsn", help="a PostgreSQL database to use (emptied first by the caller); default: start one")
    t = sub.add_parser("twenty")
    t.add_argument("--dsn")
    args = parser.parse_args()
    scale(args) if args.what == "scale" else twenty(args)


if __name__ == "__main__":
    main()

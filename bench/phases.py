"""Where one command's time goes, phase by phase, in one process (run by hand).

    python bench/phases.py analyze bench/out/real_1024/logs bench/out/real_1024/ais --json
    python bench/phases.py --post nccl bench/out/real_4096/logs --json
    python bench/phases.py --after-scan analyze bench/out/real_1024/logs bench/out/real_1024/ais --json

The command runs in this process with the worker scan in this process too (``scan._worker_count`` returns 1), so
every phase's CPU time is this process's. Printed: the imports (the CLI and the command's tool module), the whole
command, and the inclusive wall and CPU seconds of each named phase that ran, with its number of calls (a phase
that calls another includes it). ``--post``: run the command once, then ``--rounds`` more times with the scan taken
from the process's scan cache (the per-result cache cleared): the best of those is the cost of everything after
the scan (the job-level evidence, the NCCL table, the decision, verification, budget, JSON), the part that grows
with the number of ranks and not with bytes. ``--profile FILE`` also writes a cProfile of one more such run.

``--after-scan``: the scan keeps its worker processes (as the CLI runs it), and only what the main process does
after the job scan's last file arrived is counted (the serial end: the fold, the NCCL table, the decision, the
verification, the budget, the JSON; the work done as files arrive is not in it).

Phases are looked up by name; a name a module no longer has is skipped (the table shows what ran).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import importlib
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PHASES = (
    ("debug_training_logs.logs.scan", "scan_files"),
    ("debug_training_logs.logs.scan_plan", "make_plan"),
    ("debug_training_logs.analysis.inventory", "scan_consumers"),
    ("debug_training_logs.analysis.launcher", "from_job_scan"),
    ("debug_training_logs.analysis.attempts", "split"),
    ("debug_training_logs.analysis.evidence", "gather_evidence"),
    ("debug_training_logs.analysis.evidence", "evidence_from_scan"),
    ("debug_training_logs.analysis.evidence_worker", "worker_evidence_from_scan"),
    ("debug_training_logs.analysis.evidence_nccl", "nccl_state"),
    ("debug_training_logs.analysis.evidence_ais", "gather_ais_evidence"),
    ("debug_training_logs.analysis.evidence_triggers", "read_lines"),
    ("debug_training_logs.analysis.nccl_table", "build_table"),
    ("debug_training_logs.analysis.nccl_row_build", "_rows_for_rank"),
    ("debug_training_logs.analysis.nccl_table", "nccl_state_table"),
    ("debug_training_logs.analysis.grep", "grep_all_ranks"),
    ("debug_training_logs.analysis.diagnosis", "conclude"),
    ("debug_training_logs.verify", "verify_with_evidence"),
    ("debug_training_logs.tools.diagnose", "build_diagnosis"),
    ("debug_training_logs.tools.budget", "fit"),
)

Totals = dict[str, list[float]]


def _timed(name: str, func: Callable[..., Any], totals: Totals) -> Callable[..., Any]:
    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            t = totals.setdefault(name, [0.0, 0.0, 0])
            t[0] += time.perf_counter() - wall
            t[1] += time.process_time() - cpu
            t[2] += 1

    return run


def instrument(totals: Totals) -> None:
    """Wrap each phase in place, and every module-level name bound to it (``from x import f`` copies)."""
    for module_name, attr in PHASES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        func = getattr(module, attr, None)
        if not callable(func):
            continue
        wrapped = _timed(f"{module_name.rsplit('.', 1)[-1]}.{attr}", func, totals)
        for mod in list(sys.modules.values()):
            namespace = getattr(mod, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if value is func:
                    namespace[key] = wrapped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--post", action="store_true", help="time the runs after the first (scan from the cache)")
    ap.add_argument("--rounds", type=int, default=3, help="with --post: runs after the first (best one shown)")
    ap.add_argument("--profile", metavar="FILE", help="with --post: a cProfile of one more run to FILE")
    ap.add_argument("--after-scan", action="store_true", help="worker processes kept; only the serial end counted")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the CLI command and its arguments")
    args = ap.parse_args()
    if not args.command:
        ap.error("give the command, e.g. analyze LOGS AIS --json")
    wall, cpu = time.perf_counter(), time.process_time()
    from debug_training_logs import cli
    from debug_training_logs.tools.registry import tool_by_name

    tool_by_name("diagnose" if args.command[0] == "analyze" else args.command[0])
    imports = (time.perf_counter() - wall, time.process_time() - cpu)
    from debug_training_logs.logs import scan
    from debug_training_logs.memo import MEMO
    from debug_training_logs.tools import _cache

    ended: list[tuple[float, float]] = []
    if args.after_scan:
        from debug_training_logs import progress

        report = progress.report

        def noted(done: int, total: int, message: str) -> None:
            if total >= 100 and done == total and not ended:  # the job scan's last file (a scan of 100+ files)
                ended.append((time.perf_counter(), time.process_time()))
                totals.clear()
            report(done, total, message)

        progress.report = noted
    else:
        scan._worker_count = lambda files: 1  # the whole scan in this process

    def run() -> tuple[float, float]:
        MEMO.drop(_cache.TOOL)  # tool results only: with --post the scan stays cached
        w, c = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli.main(args.command)
        return time.perf_counter() - w, time.process_time() - c

    totals: Totals = {}
    instrument(totals)
    if args.post:
        run()  # the scan, kept in the scan cache
        best: tuple[tuple[float, float], Totals] | None = None
        for _ in range(args.rounds):
            totals.clear()
            mine = run()
            if best is None or mine[1] < best[0][1]:
                best = (mine, {k: list(v) for k, v in totals.items()})
        assert best is not None
        whole, shown = best
        label = f"after the scan (best of {args.rounds})"
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            run()
            prof.disable()
            prof.dump_stats(args.profile)
    elif args.after_scan:
        run()
        end = (time.perf_counter(), time.process_time())
        if not ended:
            ap.error("no scan of 100+ files seen: --after-scan needs a job of 100+ files")
        whole = (end[0] - ended[0][0], end[1] - ended[0][1])
        shown = {k: v for k, v in totals.items() if v[0] <= whole[0]}  # not the calls that began before the end
        label = "after the scan (main process)"
    else:
        whole = run()
        shown = totals
        label = "command (after imports)"
    print(f"{'imports (CLI + tool module)':40s} {imports[0]:7.3f} s wall {imports[1]:7.3f} s CPU")
    print(f"{label:40s} {whole[0]:7.3f} s wall {whole[1]:7.3f} s CPU")
    for name, (w, c, n) in sorted(shown.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:38s} {w:7.3f} s wall {c:7.3f} s CPU  x{int(n)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

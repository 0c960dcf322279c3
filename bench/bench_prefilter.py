"""Benchmark: the scan's literal prefilter engines on one node file of the realistic job (run by hand).

    python bench/bench_prefilter.py [--files 4] [--rounds 5] [LOGS]

The patterns are the shared job scan's (every tool's consumers plus the inventory markers, as ``scan_consumers``
builds them), planned from the corpus sample as the scan plans them. For the literals searched in the middle of a file
(dense and capped patterns excluded, as there) it times, in CPU seconds per file, median of ``--rounds``:

* ``ahocorasick_rs``: passes of ``AC_GROUP`` literals (Teddy each), line start/end per hit, then ``bytes.count`` of
  newlines between hits (what the scan did before the native finder);
* ``native``: ``_linescan.Finder.find_lines`` (candidate lines and their numbers in one pass);
* ``native, static anchors``: the same without the sample's pair counts (why the planner passes them);
* rank collection (the ``[rankN]:`` ranks of every line, for coverage): ``_linescan.collect_ranks`` vs the regex
  path used without the extension;
* the planner's literal counts on the corpus sample: ``_linescan.count_literals`` vs ``bytes.count`` per literal;
* the whole per-file scan (``_scan_one`` with a null sink) with and without ``DEBUG_TRAINING_LOGS_NO_NATIVE``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from debug_training_logs.analysis.inventory_markers import MARKERS  # noqa: E402
from debug_training_logs.analysis.shared_scan import standard_consumers  # noqa: E402
from debug_training_logs.logs import (  # noqa: E402
    scan_dense,
    scan_engines,
    scan_file,
    scan_matcher,
    scan_plan,
    scan_types,
    scan_windows,
)
from debug_training_logs.logs.discovery import discover  # noqa: E402


def job_spec() -> scan_types.PatternSpec:
    pats: list[str] = []
    dense: list[bool] = []
    for c in standard_consumers():
        dense += [i in c.dense for i in range(len(c.patterns))]
        pats += c.patterns
    return scan_types.PatternSpec(
        tuple(pats) + tuple(m.regex for m in MARKERS),
        False,
        max_hits=(None,) * len(pats) + tuple(m.cap for m in MARKERS),
        dense=tuple(dense) + tuple(m.dense for m in MARKERS),
    )


def windows(data: bytes) -> list[bytes]:
    out: list[bytes] = []
    s = 0
    while s < len(data):
        e = data.rfind(b"\n", s, s + scan_windows.WINDOW) + 1 if s + scan_windows.WINDOW < len(data) else len(data)
        out.append(data[s:e])
        s = e
    return out


def ahocorasick_passes(lits: list[bytes], wins: list[bytes]) -> int:
    import ahocorasick_rs as ac

    passes = [
        ac.BytesAhoCorasick(lits[j : j + scan_matcher.AC_GROUP], matchkind=ac.MATCHKIND_LEFTMOST_LONGEST)
        for j in range(0, len(lits), scan_matcher.AC_GROUP)
    ]
    lines = 0
    for w in wins:
        starts: list[int] = []
        for pf in passes:
            line_end = -1
            for _p, s, _e in pf.find_matches_as_indexes(w):
                if s <= line_end:
                    continue
                starts.append(w.rfind(b"\n", 0, s) + 1)
                line_end = w.find(b"\n", s)
                if line_end < 0:
                    break
        at = 0
        numbers = []
        for ls in sorted(set(starts)):
            lines += w.count(b"\n", at, ls)
            numbers.append(lines)
            at = ls
        lines += w.count(b"\n", at, len(w))
    return lines


def native_pass(finder: Any, wins: list[bytes]) -> int:
    lines = 0
    for w in wins:
        pos = 0
        while pos < len(w):
            _hits, nl, pos = finder.find_lines(w, pos, scan_matcher.NATIVE_PAGE_LINES)
            lines += nl
    return lines


def cpu(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


class NullSink:
    def __init__(self, lf: object) -> None:
        self.n = 0

    def on_hit(self, ids: list[int], n: int, line: str) -> None:
        self.n += 1

    def finish(self) -> int:
        return self.n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="?", default=str(REPO / "bench" / "out" / "real_1024" / "logs"))
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    native = scan_engines._native()
    if native is None:
        print("the native finder is not built (pip install -e .) or DEBUG_TRAINING_LOGS_NO_NATIVE is set")
        return 1
    files, _ = discover(args.logs)
    files = sorted(files, key=lambda f: f.rel)
    spec = job_spec()
    plan = scan_plan.make_plan(spec, scan_plan._sample(files))
    skip = {i for i, _n in plan.dense} | {i for i, cap in enumerate(spec.max_hits or ()) if cap is not None}
    lits = sorted({lit for lit, i in plan.literals if i not in skip})
    anchors = dict(plan.anchors)
    finder = native.Finder(lits, [anchors[lit] for lit in lits])
    static = native.Finder(lits)
    picked = files[: args.files]
    size = sum(f.size for f in picked) / len(picked)
    print(
        f"{len(spec.patterns)} patterns, {len(lits)} literals in the middle of a file; {len(picked)} files of "
        f"~{size / 1e6:.1f} MB; CPU ms per file, median of {args.rounds}"
    )
    rows: list[tuple[str, float]] = []
    for f in picked:
        wins = windows(Path(f.path).read_bytes())
        assert ahocorasick_passes(lits, wins) == native_pass(finder, wins) == native_pass(static, wins)
    wins_all = [windows(Path(f.path).read_bytes()) for f in picked]
    passes = -(-len(lits) // scan_matcher.AC_GROUP)
    rows.append(
        (
            f"ahocorasick_rs, {passes} passes + bytes.count",
            cpu(lambda: [ahocorasick_passes(lits, w) for w in wins_all], args.rounds),
        )
    )
    rows.append(
        (
            "native finder (rarest pair on the sample)",
            cpu(lambda: [native_pass(finder, w) for w in wins_all], args.rounds),
        )
    )
    rows.append(("native finder, static anchors", cpu(lambda: [native_pass(static, w) for w in wins_all], args.rounds)))
    datas = [Path(f.path).read_bytes() for f in picked]
    rows.append(
        ("ranks, native collect_ranks", cpu(lambda: [native.collect_ranks(d, set()) for d in datas], args.rounds))
    )
    rows.append(
        (
            "ranks, regex (no extension)",
            cpu(lambda: [scan_dense._collect_ranks_regex(d, set()) for d in datas], args.rounds),
        )
    )
    sample = scan_plan._sample(files)
    keys: list[bytes] = sorted({lit for lit, _i in plan.literals})
    assert native.count_literals(sample, keys) == [sample.count(k) for k in keys]
    n_picked = len(picked)  # the rows are per file; these two are per plan: scaled so the table shows per plan
    rows.append(
        (
            f"planner: {len(keys)} literal counts on the {len(sample) >> 10} KiB sample, native (per plan)",
            n_picked * cpu(lambda: native.count_literals(sample, keys), args.rounds),
        )
    )
    rows.append(
        (
            "planner: the same with bytes.count (per plan)",
            n_picked * cpu(lambda: [sample.count(k) for k in keys], args.rounds),
        )
    )

    def whole(no_native: bool) -> float:
        if no_native:
            os.environ["DEBUG_TRAINING_LOGS_NO_NATIVE"] = "1"
        else:
            os.environ.pop("DEBUG_TRAINING_LOGS_NO_NATIVE", None)
        scan_matcher._MATCHERS.clear()
        p = scan_plan.make_plan(spec, scan_plan._sample(files))

        def run() -> None:
            search = scan_file.ScanSearch(spec, p)
            for f in picked:
                scan_file._scan_one(f, search, NullSink, 40, 40, True)

        return cpu(run, args.rounds)

    rows.append(("whole per-file scan, without native", whole(True)))
    rows.append(("whole per-file scan, native", whole(False)))
    os.environ.pop("DEBUG_TRAINING_LOGS_NO_NATIVE", None)
    for name, t in rows:
        print(f"| {name} | {1000 * t / len(picked):.1f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

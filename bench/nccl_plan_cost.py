"""What each part of the ``nccl`` tool's scan plan costs in the scan engine alone (run by hand).

    python bench/nccl_plan_cost.py [--files 8] [--rounds 3] [LOGS]

``nccl`` scans its NCCL needles, the launcher patterns (the attempt split reads them) and the inventory markers
coverage comes from (``inventory.COVERAGE_MARKERS``: the lean plan) in one pass. This runs the scan engine
(``scan_each`` in this process, no sink, heads and tails as the job scan keeps them) over the first ``--files`` files
for growing pattern sets and prints the CPU milliseconds per file, the minimum of ``--rounds``:

* one literal found nowhere: the engine's floor (reading, the native finder's pass, ``[rankN]:`` collection);
* + the NCCL needles; + the launcher patterns; + the coverage markers (the lean plan ``nccl`` runs);
* + every inventory marker instead (what ``nccl`` scanned before the lean plan).

The sinks' own cost per hit is measured by ``bench/sink_histogram.py nccl LOGS``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from debug_training_logs.analysis import inventory, inventory_markers, launcher  # noqa: E402
from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS  # noqa: E402
from debug_training_logs.logs import (  # noqa: E402
    scan,
    scan_plan,
    scan_types,
)
from debug_training_logs.logs.discovery import discover  # noqa: E402


def _spec(markers: tuple[inventory_markers.Marker, ...], *, launcher_too: bool = True) -> scan_types.PatternSpec:
    pats = NCCL_PATTERNS + (launcher.PATTERNS if launcher_too else ())
    return scan_types.PatternSpec(
        pats + tuple(m.regex for m in markers), max_hits=(None,) * len(pats) + tuple(m.cap for m in markers)
    )


def _as_is(s: scan_types.FileScan) -> scan_types.FileScan:
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("logs", nargs="?", default=str(REPO / "bench" / "out" / "real_1024" / "logs"))
    args = ap.parse_args()
    files = discover(args.logs)[0][: args.files]
    if not files:
        print("no log files")
        return 1
    setattr(scan, "_worker_count", lambda fs: 1)  # noqa: B010  (one process: the CPU clock sees the whole scan)
    lean = tuple(m for m in inventory_markers.MARKERS if m.name in inventory.COVERAGE_MARKERS)
    cases = {
        "one literal found nowhere (floor)": scan_types.PatternSpec(("ZZQQXXnowhere",)),
        "+ NCCL needles": _spec((), launcher_too=False),
        "+ launcher patterns": _spec(()),
        "+ coverage markers (lean plan)": _spec(lean),
        "+ every marker (before)": _spec(inventory_markers.MARKERS),
    }
    sample = scan_plan._sample(files)
    plans = {name: scan_plan.make_plan(spec, sample) for name, spec in cases.items()}  # planned once, not timed
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(args.rounds):
        for name, spec in cases.items():
            t = time.process_time()
            for _item in scan.scan_each(
                files,
                spec,
                None,
                _as_is,
                head_lines=inventory.HEAD_LINES,
                tail_lines=inventory.TAIL_LINES,
                plan=plans[name],
            ):
                pass
            best[name] = min(best[name], time.process_time() - t)
    size = sum(f.size for f in files) / len(files) / 1e6
    print(f"{len(files)} files, {size:.1f} MB each; engine CPU per file, min of {args.rounds} rounds (no sinks):")
    for name, sec in best.items():
        print(f"  {name:36} {sec * 1e3 / len(files):6.2f} ms   ({plans[name].describe()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

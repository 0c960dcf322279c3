"""Would Hyperscan replace our scan engine? The same command's scan over the same files: our engine with no sink
against Hyperscan (the ``hyperscan`` package, not a dependency: ``pip install hyperscan``) given that scan's regexes
in one database, and given its plan's prefilter literals in one literal database (run by hand; issue 33).

    python bench/hyperscan_probe.py analyze /tmp/sub8 [--rounds 3]

The command runs once with its scan recorded (``engine_cpu.record``). Then, best of ``--rounds``, CPU per file:
``engine`` (``scan_file._scan_one`` with no sink: the prefilter pass, the line checks, the dense sample, the rank
prefixes), ``hyperscan regexes`` (one block-mode database of every non-dense pattern, multiline, case-free where the
scan is; one Python callback per match, as the binding delivers them) and ``hyperscan literals`` (the plan's
literals, the work our prefilter does before its line checks). Dense patterns (per-step lines) are left out of the
Hyperscan database: our engine samples them; a database would report every line.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_cpu

from debug_training_logs.logs import scan_file
from debug_training_logs.logs.discovery import discover


def best(fn: Callable[[], object], rounds: int) -> float:
    out = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        out = min(out, time.process_time() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["analyze", "grep", "nccl"])
    ap.add_argument("logs")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    try:
        import hyperscan
    except ImportError:
        raise SystemExit("needs the hyperscan package: pip install hyperscan") from None
    scans = engine_cpu.record(args.command, args.logs)
    files, _ = discover(args.logs)
    data = [lf.path.read_bytes() for lf in files]
    per = 1000 / len(files)
    print(f"{args.command}: {len(scans)} scan(s), {len(files)} files, {sum(map(len, data)) / 1e6:.1f} MB")

    def engine() -> None:
        for spec, plan, _factory, head, tail, ranks in scans:
            for lf in files:
                scan_file._scan_one(lf, spec, plan, None, head, tail, ranks)

    print(f"  engine (no sink)       {per * best(engine, args.rounds):6.1f} ms/file")
    matches = [0]

    def on_match(*_a: Any) -> None:
        matches[0] += 1

    def scan_all(db: Any) -> Callable[[], None]:
        def run() -> None:
            matches[0] = 0
            for chunk in data:
                db.scan(chunk, match_event_handler=on_match)

        return run

    for spec, plan, *_ in scans:
        dense = spec.dense or (False,) * len(spec.patterns)
        exprs = [p.encode() for p, d in zip(spec.patterns, dense, strict=True) if not d]
        flags = hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
        flags |= hyperscan.HS_FLAG_CASELESS if spec.ignore_case else 0
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[flags] * len(exprs))
        took = best(scan_all(db), args.rounds)
        print(
            f"  hyperscan regexes      {per * took:6.1f} ms/file  ({len(exprs)} patterns, "
            f"{len(spec.patterns) - len(exprs)} dense left out, {matches[0]} matches)"
        )
        literals = sorted({lit for lit, _i in plan.literals})
        if literals:
            ldb = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            n = len(literals)
            ldb.compile(expressions=literals, ids=list(range(n)), elements=n, flags=[0] * n, literal=True)
            took = best(scan_all(ldb), args.rounds)
            print(f"  hyperscan literals     {per * took:6.1f} ms/file  ({n} literals, {matches[0]} hits)")


if __name__ == "__main__":
    main()

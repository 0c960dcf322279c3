"""Would Hyperscan replace our scan engine? The same command's scan over the same files: our engine with no sink
against Hyperscan (the ``hyperscan`` package, not a dependency: ``pip install hyperscan``) given that scan's regexes
in one database, and given its plan's prefilter literals in one literal database (run by hand; issue 33).

    python bench/hyperscan_probe.py analyze /tmp/sub8 [--rounds 3]

The command runs once with its scan recorded (``engine_cpu.record``). Then, best of ``--rounds``, CPU per file:
``engine`` (``scan_file._scan_one`` with no sink: the prefilter pass, the line checks, the dense sample, the rank
prefixes), ``hyperscan regexes`` (one block-mode database of every non-dense pattern, multiline, case-free where the
scan is; one Python callback per match, as the binding delivers them) and ``hyperscan literals`` (the plan's
literals, the work our prefilter does before its line checks). Dense patterns (per-step lines) are left out of the
Hyperscan database: our engine samples them; a database would report every line. Each is also timed with the
patterns (literals) that match more than ``FREQUENT`` times in the first file left out (``... frequent left out``):
what an engine built on Hyperscan would pay where a capped marker leaves the search at its cap and dense lines are
only sampled, with one Python callback per remaining match.
"""

from __future__ import annotations

import argparse
import collections
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
            search = scan_file.ScanSearch(spec, plan)
            for lf in files:
                scan_file._scan_one(lf, search, None, head, tail, ranks)

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
        flags = hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
        flags |= hyperscan.HS_FLAG_CASELESS if spec.ignore_case else 0
        ids = [i for i, d in enumerate(dense) if not d]
        db = _database(hyperscan, [spec.patterns[i].encode() for i in ids], flags)
        took = best(scan_all(db), args.rounds)
        print(
            f"  hyperscan regexes      {per * took:6.1f} ms/file  ({len(ids)} patterns, "
            f"{len(spec.patterns) - len(ids)} dense left out, {matches[0]} matches)"
        )
        # what an engine built on it would pay: a capped marker leaves the search at its cap (a database without it
        # from there on), so the patterns with thousands of matches in one file are left out here
        frequent = _frequent(hyperscan, db, data[0])
        rare = [i for k, i in enumerate(ids) if k not in frequent]
        db = _database(hyperscan, [spec.patterns[i].encode() for i in rare], flags)
        took = best(scan_all(db), args.rounds)
        print(
            f"  ... frequent left out  {per * took:6.1f} ms/file  ({len(rare)} patterns; left out: "
            f"{', '.join(repr(spec.patterns[ids[k]][:40]) for k in sorted(frequent)) or 'none'}; {matches[0]} matches)"
        )
        literals = sorted({lit for lit, _i in plan.literals})
        if literals:
            ldb = _database(hyperscan, literals, 0, literal=True)
            took = best(scan_all(ldb), args.rounds)
            print(f"  hyperscan literals     {per * took:6.1f} ms/file  ({len(literals)} literals, {matches[0]} hits)")
            frequent = _frequent(hyperscan, ldb, data[0])
            rare_lits = [lit for k, lit in enumerate(literals) if k not in frequent]
            ldb = _database(hyperscan, rare_lits, 0, literal=True)
            took = best(scan_all(ldb), args.rounds)
            print(
                f"  ... frequent left out  {per * took:6.1f} ms/file  ({len(rare_lits)} literals; left out: "
                f"{', '.join(repr(literals[k].decode()) for k in sorted(frequent)) or 'none'}; {matches[0]} hits)"
            )


FREQUENT = 2000
"""Matches in one node file above which a pattern counts as frequent (the rare ones match a few hundred times)."""


def _database(hyperscan: Any, exprs: list[bytes], flags: int, literal: bool = False) -> Any:
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    n = len(exprs)
    db.compile(expressions=exprs, ids=list(range(n)), elements=n, flags=[flags] * n, literal=literal)
    return db


def _frequent(hyperscan: Any, db: Any, chunk: bytes) -> set[int]:
    """The ids of ``db`` that match more than :data:`FREQUENT` times in ``chunk``."""
    seen: collections.Counter[int] = collections.Counter()

    def count(i: int, *_a: Any) -> None:
        seen[i] += 1

    db.scan(chunk, match_event_handler=count)
    return {i for i, k in seen.items() if k > FREQUENT}


if __name__ == "__main__":
    main()

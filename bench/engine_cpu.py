"""CPU per file of the scan engine alone (``logs/scan.py`` ``_scan_one``), for one CLI command's scan (run by hand).

    python bench/engine_cpu.py analyze /tmp/sub8
    python bench/engine_cpu.py grep bench/out/real_1024/logs --limit 8 --digest /tmp/grep.digest

The command (``analyze``, ``grep`` or ``nccl`` with ``--json``) runs once in this process with the worker scan in this
process too, and the scan it asked for (patterns, plan, sink, head/tail lines) is recorded. Then every file of the
directory is scanned again ``--rounds`` times with that scan: once with the command's own sinks and the worker's pack of
the result (``packed``: what a scan worker spends per file), once with the sinks alone (``real``), once with a sink that
only hashes each call (``hash``: the engine plus one cheap call per hit) and once with no sink (``none``: the engine
only). Printed: the best CPU time of each per file. ``--digest FILE`` writes every file's result (counts,
lines, ranks, head, tail, sampled ids, checkpoints) and the hash of its sink calls: the same file from two branches
means the same hits, line numbers and samples. ``--parts`` also splits the no-sink time into the engine's parts
(the native finder's pass with its line checks, ``Finder.hits``; the DFA searches, the dense sample, the rank prefixes,
the rest in Python), each the best round's CPU per file. Run ``python -m compileall -q debug_training_logs`` first.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import io
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debug_training_logs import cli
from debug_training_logs.logs import scan, scan_dense, scan_file, scan_matcher
from debug_training_logs.logs.discovery import LogFile, discover


class HashSink:
    """Hashes every sink call (pattern ids, line number, text); ``finish`` returns (calls, hex digest)."""

    def __init__(self, lf: LogFile) -> None:
        self.digest = hashlib.sha1()
        self.calls = 0

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        self.digest.update(repr((pattern_ids, line_no, line)).encode())
        self.calls += 1

    def finish(self) -> tuple[int, str]:
        return self.calls, self.digest.hexdigest()


PACKS: dict[int, Any] = {}
"""id(spec) -> the consumer's pack the recorded scan ran in its worker after the file's scan."""


def record(command: str, directory: str) -> list[tuple[Any, ...]]:
    """The scans (spec, plan, sink factory, head, tail, ranks) the command runs over ``directory``."""
    scans: list[tuple[Any, ...]] = []
    original = scan._scan_packed

    def spy(lf: LogFile, search: Any, factory: Any, head: int, tail: int, ranks: bool, pack: Any) -> Any:
        if not scans or scans[-1][0] is not search.spec:
            scans.append((search.spec, search.plan, factory, head, tail, ranks))
            PACKS[id(search.spec)] = pack
        return original(lf, search, factory, head, tail, ranks, pack)

    scan._worker_count = lambda files: 1
    scan._scan_packed = spy  # type: ignore[assignment]
    sys.argv = ["debug-training-logs", command, directory, "--json"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli.main()
    finally:
        scan._scan_packed = original
    return scans


class _TimedFinder:
    """A native finder whose ``hits`` calls (its pass, the checks of its candidate lines, the DFA and dense-sample lines
    merged and numbered) add their CPU time to ``spent["finder pass"]``."""

    def __init__(self, finder: Any, spent: dict[str, float]) -> None:
        self.finder = finder
        self.spent = spent

    def hits(self, *args: Any) -> Any:
        t0 = time.process_time()
        try:
            return self.finder.hits(*args)
        finally:
            self.spent["finder pass"] += time.process_time() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.finder, name)


def parts(scans: list[tuple[Any, ...]], files: list[LogFile], rounds: int) -> None:
    """Print the no-sink scan's CPU per file split into the engine's parts (best round)."""
    spent: dict[str, float] = collections.defaultdict(float)
    originals: list[tuple[Any, str, Any]] = []

    def timed(owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)
        originals.append((owner, name, fn))

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - t0

        setattr(owner, name, wrapper)

    # (each where its caller looks it up: scan_file imports these names, scan_matcher calls _dfa_starts itself)
    timed(scan_matcher, "_dfa_starts", "DFA searches")
    timed(scan_file, "_collect_ranks", "rank prefixes")
    timed(scan_dense._Dense, "sample_pieces", "dense sample")
    timed(scan_file, "_plain_tail_start", "dense tail start")
    timed(scan_file, "_hits_in_chunk", "hits in pieces")
    wrapped: list[Any] = []
    best: tuple[float, dict[str, float]] | None = None
    try:
        for _ in range(rounds):
            spent.clear()
            t0 = time.process_time()
            for spec, plan, _factory, head, tail, ranks in scans:
                search = scan_file.ScanSearch(spec, plan)
                for lf in files:
                    scan_file._scan_one(lf, search, None, head, tail, ranks)
                    for m in scan_matcher._MATCHERS.values():
                        if m.finder is not None and not isinstance(m.finder, _TimedFinder):
                            wrapped.append((m, m.finder))
                            m.finder = _TimedFinder(m.finder, spent)
            total = time.process_time() - t0
            if best is None or total < best[0]:
                best = (total, dict(spent))
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
        for m, finder in wrapped:
            m.finder = finder
    assert best is not None
    total, got = best
    inner = got.get("hits in pieces", 0.0)
    rows = [
        ("finder pass and line checks (native)", got.get("finder pass", 0.0)),
        ("DFA searches", got.get("DFA searches", 0.0)),
        ("hits, the rest (Python)", inner - got.get("finder pass", 0.0) - got.get("DFA searches", 0.0)),
        ("dense sample", got.get("dense sample", 0.0)),
        ("dense tail start", got.get("dense tail start", 0.0)),
        ("rank prefixes", got.get("rank prefixes", 0.0)),
    ]
    rows.append(("rest (windows, head, tail, counts)", total - sum(v for _k, v in rows)))
    print(
        f"  parts (no sink, best of {rounds}: {1000 * total / len(files):.2f} ms CPU per file; the first round warms)"
    )
    for label, value in rows:
        print(f"    {label:38s} {1000 * value / len(files):6.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["analyze", "grep", "nccl"])
    ap.add_argument("logs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--limit", type=int, default=0, help="scan only the first N files (sorted by name)")
    ap.add_argument("--digest", help="write every file's result and sink-call hash here")
    ap.add_argument("--parts", action="store_true", help="also split the no-sink time into the engine's parts")
    args = ap.parse_args()
    scans = record(args.command, args.logs)
    files, _skipped = discover(args.logs)
    files = sorted(files, key=lambda f: f.rel)[: args.limit or None]
    if not scans:
        raise SystemExit(
            f"{args.command} scanned no file under {args.logs} (empty, or symlinks that leave it: copy the files)"
        )
    print(f"{args.command}: {len(scans)} scan(s), {len(files)} files; {scans[0][1].describe()}")
    lines: list[str] = []
    for mode in ("packed", "real", "hash", "none"):
        best = float("inf")
        for r in range(args.rounds):
            c0 = time.process_time()
            for spec, plan, factory, head, tail, ranks in scans:
                search = scan_file.ScanSearch(spec, plan)
                if mode == "packed":
                    for lf in files:
                        scan._scan_packed(lf, search, factory, head, tail, ranks, PACKS[id(spec)])
                    continue
                sink = {"real": factory, "hash": HashSink, "none": None}[mode]
                for lf in files:
                    s = scan_file._scan_one(lf, search, sink, head, tail, ranks)
                    if mode == "hash" and r == 0 and args.digest:
                        cp = s.checkpoints
                        points = (cp.offsets, cp.lines_before, cp.newlines) if cp else None
                        fields = (s.lines, s.bytes_read, s.counts, sorted(s.ranks), s.head, s.tail, s.problem)
                        lines.append(repr((lf.rel, *fields, sorted(s.sampled), points, s.sink_result)))
            best = min(best, time.process_time() - c0)
        print(f"  sinks {mode:5s}: {1000 * best / len(files):6.2f} ms CPU per file (best of {args.rounds})")
    if args.parts:
        parts(scans, files, args.rounds)
    if args.digest:
        Path(args.digest).write_text("\n".join(lines) + "\n")
        print(f"  digest: {args.digest}")


if __name__ == "__main__":
    main()

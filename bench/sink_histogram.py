"""Where the per-hit Python of the scan goes: hits per file and CPU per hit, per sink and pattern set (run by hand).

    python bench/sink_histogram.py [--rounds 5] COMMAND LOGS [AIS]     # COMMAND: grep, nccl or analyze

Runs the CLI command once in this process with one scan process, recording every call the scan makes into the
composite sink (pattern ids, line number, line), then replays those calls into fresh sinks ``--rounds`` times,
timing each sink's share with the process CPU clock (the template memo emptied before each round, as in a worker's
first file). Prints the median round: sink CPU in all, then per (sink, pattern set) the hits per file, microseconds
per hit and milliseconds in all; ``finish`` is the sinks' end-of-file work; ``batched runs`` is the evidence sink's
reading of the progress lines it held, per line (their hits only append them to a batch);
``bulk lines`` are the progress lines the scan handed over in runs (``on_bulk``: no call per line), per line. The scan
itself is not timed.

``--pack`` instead times the consumers' pack that a scan worker runs after each file (``inventory_file_share._pack_scan``) on the
recorded files' scan results, median of ``--rounds``: each consumer's ``refine``, the pickling and the zstd
compression of the packed values (``memo.pack``), and the rest (the file's own facts, the shares); then the
unpickling of those values, what the main process spends reading them back (zstd's decompression not counted).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import pickle
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import zstandard  # noqa: E402

from debug_training_logs import cli, collector, memo  # noqa: E402
from debug_training_logs.analysis import evidence_sink, inventory, inventory_file_share, inventory_markers, templates  # noqa: E402
from debug_training_logs.logs import scan  # noqa: E402

PACKED: list[tuple[Any, Any]] = []
"""(the consumers' pack, the file's scan result) of every file the recorded run scanned (for ``--pack``)."""

Key = tuple[str, tuple[int, ...]]
BATCHED: Key = ("batched runs", ())
BULK: Key = ("bulk lines", ())
"""The lines the scan handed over in bulk (``on_bulk``, the progress lines after a file's head), their appending."""
"""The evidence sink's reading of its batched progress lines (EvidenceSink._flush), wherever it happened."""


def record(argv: list[str]) -> tuple[list[tuple[Any, Any, int, list[tuple[list[int], int, str]]]], tuple[str, ...]]:
    """Every file's (LogFile, sink parts, first marker id, calls) and the scan's patterns, from one CLI run."""
    files: list[tuple[Any, Any, int, list[tuple[list[int], int, str]]]] = []
    patterns: list[tuple[str, ...]] = []
    init, on_hit = inventory._CompositeSink.__init__, inventory._CompositeSink.on_hit
    on_bulk = inventory._CompositeSink.on_bulk
    start_each = getattr(inventory, "start_each")  # noqa: B009

    def rec_init(self: Any, lf: Any, parts: Any, markers_at: int, markers: Any = inventory_markers.MARKERS) -> None:
        init(self, lf, parts, markers_at, markers)
        self.calls = []
        files.append((lf, (parts, markers), markers_at, self.calls))

    def rec_hit(self: Any, ids: list[int], line_no: int, line: str) -> None:
        self.calls.append((list(ids), line_no, line))
        on_hit(self, ids, line_no, line)

    def rec_bulk(self: Any, line_nos: list[int], lines: list[str]) -> None:
        self.calls.append((None, line_nos, lines))  # a run of bulk lines (ids None)
        on_bulk(self, line_nos, lines)

    def rec_scan(fs: Any, spec: Any, factory: Any, packer: Any, *args: Any, **kw: Any) -> Any:
        patterns.append(spec.patterns)

        def keep(scanned: Any) -> Any:
            PACKED.append((packer, scanned))
            return packer(scanned)

        return start_each(fs, spec, factory, keep, *args, **kw)

    setattr(scan, "_worker_count", lambda fs: 1)  # noqa: B010
    setattr(inventory._CompositeSink, "__init__", rec_init)  # noqa: B010
    setattr(inventory._CompositeSink, "on_hit", rec_hit)  # noqa: B010
    setattr(inventory._CompositeSink, "on_bulk", rec_bulk)  # noqa: B010
    setattr(inventory, "start_each", rec_scan)  # noqa: B010
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli.main([*argv, "--json"])
    finally:
        setattr(inventory._CompositeSink, "__init__", init)  # noqa: B010
        setattr(inventory._CompositeSink, "on_hit", on_hit)  # noqa: B010
        setattr(inventory._CompositeSink, "on_bulk", on_bulk)  # noqa: B010
        setattr(inventory, "start_each", start_each)  # noqa: B010
    return files, patterns[0] if patterns else ()


def replay(
    files: list[tuple[Any, Any, int, list[tuple[list[int], int, str]]]],
) -> tuple[float, dict[Key, float], Counter[Key]]:
    """One replay of every recorded call into fresh sinks: (CPU seconds, CPU seconds per (sink, global ids), calls
    per (sink, global ids))."""
    getattr(templates, "_shared", {}).clear()
    clock = time.process_time_ns
    spent: dict[Key, float] = defaultdict(float)
    hits: Counter[Key] = Counter()
    # The evidence sink reads its batched progress lines when another signal's hit (or finish) comes: that time is
    # moved from the call it happened in to a row of its own.
    batched = [0]
    flush = getattr(evidence_sink.EvidenceSink, "_flush", None)

    def timed_flush(self: Any) -> None:
        hits[BATCHED] += len(self._batch)
        t0 = clock()
        assert flush is not None
        flush(self)
        batched[0] += clock() - t0

    if flush is not None:
        setattr(evidence_sink.EvidenceSink, "_flush", timed_flush)  # noqa: B010
    try:
        _replay(files, clock, spent, hits, batched)
    finally:
        if flush is not None:
            setattr(evidence_sink.EvidenceSink, "_flush", flush)  # noqa: B010
    return sum(spent.values()) / 1e9, {key: ns / 1e9 for key, ns in spent.items()}, hits


def _replay(
    files: list[tuple[Any, Any, int, list[tuple[list[int], int, str]]]],
    clock: Any,
    spent: dict[Key, float],
    hits: Counter[Key],
    batched: list[int],
) -> None:
    for lf, parts, k, calls in files:
        sink = inventory._CompositeSink(lf, parts[0], k, parts[1])  # (consumers' sinks, inventory markers)
        offsets = {id(s): off for s, off, _n in sink.parts}
        sink.bulk_id()  # (as the scan asks it: the composite finds its consumer's bulk sink)
        for ids, line_no, line in calls:
            if ids is None:  # a run of the bulk pattern's lines, handed over at once
                before = batched[0]
                t = clock()
                sink.on_bulk(line_no, line)
                spent[BULK] += clock() - t - (batched[0] - before)
                spent[BATCHED] += batched[0] - before
                hits[BULK] += len(line)
                continue
            for j, mine in sink._route(ids):  # (the index of the consumer's part or the inventory, its ids)
                before = batched[0]
                if j == len(sink.parts):
                    t = clock()
                    sink.inventory.on_hit(mine, line_no, line)
                    key: Key = ("inventory", tuple(i + k for i in mine))
                else:
                    part = sink.parts[j][0]
                    t = clock()
                    part.on_hit(mine, line_no, line)
                    key = (type(part).__name__, tuple(i + offsets[id(part)] for i in mine))
                spent[key] += clock() - t - (batched[0] - before)
                spent[BATCHED] += batched[0] - before
                hits[key] += 1
        before = batched[0]
        t = clock()
        sink.finish()
        spent[("finish", ())] += clock() - t - (batched[0] - before)
        spent[BATCHED] += batched[0] - before


def pack_round(packed: list[tuple[Any, Any]]) -> dict[str, float]:
    """One pack of every recorded file (the template memo emptied first): CPU seconds per part."""
    getattr(templates, "_shared", {}).clear()
    clock = time.process_time
    spent: dict[str, float] = defaultdict(float)
    values: list[Any] = []
    real_pack = inventory_file_share.pack

    def timed(f: Any, label: str) -> Any:
        def call(*a: Any) -> Any:
            t = clock()
            try:
                return f(*a)
            finally:
                spent[label] += clock() - t

        return call

    def pack(value: Any) -> Any:
        values.append(value)
        t = clock()
        try:
            return real_pack(value)
        finally:
            spent["memo.pack (pickle + zstd)"] += clock() - t

    setattr(inventory_file_share, "pack", pack)  # noqa: B010
    try:
        for packer, scanned in packed:
            layout, refiners = packer.args
            refiners = tuple(None if f is None else timed(f, f"refine {f.__qualname__}") for f in refiners)
            t = clock()
            inventory_file_share._pack_scan(layout, refiners, scanned)
            spent["pack in all"] += clock() - t
    finally:
        setattr(inventory_file_share, "pack", real_pack)  # noqa: B010
    blobs = [v for value in values for v in (value if type(value) is tuple else (value,))]
    t = clock()
    pickles = []
    for v in blobs:
        buf = io.BytesIO()
        memo._Pickler(buf, protocol=memo.PROTOCOL).dump(v)
        pickles.append(buf.getvalue())
    spent["  of which pickling"] = clock() - t
    t = clock()
    for raw in pickles:
        zstandard.ZstdCompressor(level=memo.COMPRESSION_LEVEL).compress(raw)
    spent["  of which zstd"] = clock() - t
    t = clock()
    for raw in pickles:
        pickle.loads(raw)
    spent["unpickling (main process)"] = clock() - t
    spent["bytes pickled"] = sum(map(len, pickles))
    return spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--pack", action="store_true", help="time the consumers' pack per file instead of the sinks")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="COMMAND LOGS [AIS] as for the CLI")
    args = ap.parse_args()
    files, patterns = record(args.command)
    if not files:
        print("no file was scanned")
        return 1
    gc.set_threshold(*collector.GC_THRESHOLDS)
    if args.pack:
        rounds = [pack_round(PACKED) for _ in range(args.rounds)]
        n = len(PACKED)
        print(
            f"{args.command[0]}: the pack of {n} files, CPU per file (median of {args.rounds}; level "
            f"{memo.COMPRESSION_LEVEL}, {statistics.median(r['bytes pickled'] for r in rounds) / n / 1024:.1f} KB "
            "pickled per file)"
        )
        med = {label: statistics.median(r[label] for r in rounds) * 1e3 / n for label in rounds[0]}
        refines = sorted((k for k in med if k.startswith("refine ")), key=lambda k: -med[k])
        med["rest (own facts, shares)"] = (
            med["pack in all"] - med["memo.pack (pickle + zstd)"] - sum(med[k] for k in refines)
        )
        order = ["pack in all", *refines, "memo.pack (pickle + zstd)", "  of which pickling", "  of which zstd"]
        for label in [*order, "rest (own facts, shares)", "unpickling (main process)"]:
            print(f"  {label:36} {med[label]:6.2f} ms")
        return 0
    runs = sorted((replay(files) for _ in range(args.rounds)), key=lambda r: r[0])
    total, spent, hits = runs[len(runs) // 2]
    n, k = len(files), files[0][2]
    total_calls = sum(len(f[3]) for f in files)
    print(
        f"{args.command[0]}: {n} files, {total_calls / n:.0f} sink calls per file; sink CPU (replay, median of "
        f"{args.rounds}) {total * 1e3:.0f} ms = {total * 1e3 / n:.2f} ms per file"
    )
    print(f"{'sink':13} {'hits/file':>9} {'us/hit':>7} {'ms':>7}  patterns")
    for key, sec in sorted(spent.items(), key=lambda kv: -kv[1])[: args.top]:
        role, key_ids = key
        markers = files[0][1][1]
        names = [markers[i - k].name if i >= k else patterns[i].replace("\\", "")[:28] for i in key_ids]
        got = hits.get(key, 0)
        print(f"{role:13} {got / n:9.1f} {sec * 1e6 / max(got, 1):7.1f} {sec * 1e3:7.1f}  {', '.join(names)[:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

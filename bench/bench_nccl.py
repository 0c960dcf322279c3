"""Benchmark: ``nccl_state_table`` against ``rg -F`` with the watchdog literals (not a test; run by hand, once).

    python bench/bench_nccl.py [--bytes 1100000000] [--nodes 128] [--out bench/out/nccl_1k]

Writes (once, reused while the parameters match) a ``data_stall`` job of ``--nodes`` x 8 ranks (1,024 by default),
one file per node, about ``--bytes`` of ordinary training noise plus the incident, with the fixture generator. Then,
with the page cache warm: ``rg -F -n -j2 -f <needles>`` piped to ``wc -l`` (ripgrep goes quiet when its output is
/dev/null), the whole tool (one scan pass with the inventory markers, parsing, rows, classification), and the scan of
the NCCL literals alone (no inventory) to show where the time goes. Checks the rows against the generator's ground
truth and prints the wall times, the ratio and the peak RSS of our process tree.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus import corpus, peak_rss_mb  # noqa: E402  (bench/ is on sys.path when run as a script)

from debug_training_logs.analysis.nccl_table import NCCL_PATTERNS, NcclSink, nccl_state_table  # noqa: E402
from debug_training_logs.formats.torch_nccl import NEEDLES  # noqa: E402
from debug_training_logs.logs import scan  # noqa: E402
from debug_training_logs.logs.discovery import discover  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=1_100_000_000)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "nccl_1k")
    args = ap.parse_args()
    if shutil.which("rg") is None:
        print("ripgrep not installed (apt-get install -y ripgrep); the product does not need it", file=sys.stderr)
        return 2
    logs = corpus(args.out, args.bytes, args.nodes)
    files = sorted(p for p in logs.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    print(f"corpus: {len(files)} files, {size / 1e9:.2f} GB, {args.nodes * 8} ranks in {logs}")
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(NEEDLES) + "\n")
        needles = fh.name
    t = time.perf_counter()
    rg = subprocess.run(
        f"rg -F -n -j2 -f '{needles}' '{logs}' | wc -l", shell=True, capture_output=True, text=True, check=True
    )
    rg_s = time.perf_counter() - t
    print(f"rg -F -n -j2 ({len(NEEDLES)} literals): {rg_s:.2f} s, {int(rg.stdout)} lines, {size / rg_s / 1e6:.0f} MB/s")

    t = time.perf_counter()
    table = nccl_state_table(logs, limit=100_000)
    ours_s = time.perf_counter() - t
    own, kids = peak_rss_mb()
    print(
        f"nccl_state_table (whole tool, inventory included): {ours_s:.2f} s, {size / ours_s / 1e6:.0f} MB/s, "
        f"{table.rows_total} rows; peak RSS {own:.0f} MB (parent), {kids:.0f} MB (largest worker)"
    )

    found, _ = discover(logs)
    t = time.perf_counter()
    scan.scan_files(found, scan.PatternSpec(NCCL_PATTERNS), NcclSink, collect_ranks=False)
    only_s = time.perf_counter() - t
    print(f"scan of the NCCL literals alone (no inventory markers): {only_s:.2f} s, {size / only_s / 1e6:.0f} MB/s")

    truth = json.loads((logs.parent / "worker_truth.json").read_text())
    got = {(r.rank, r.pg): asdict(r) for r in table.rows}
    for g in got.values():  # the generator's per-row first_to_dump is the local line the table calls signalled_dump
        g["first_to_dump"] = g["signalled_dump"]
    bad = [
        (row["rank"], row["pg"], f)
        for row in truth["rows"]
        for f, v in row.items()
        if got.get((row["rank"], row["pg"]), {}).get(f) != v
    ]
    pg = table.process_groups[0] if table.process_groups else None
    print(
        f"rows equal ground truth: {not bad and len(got) == len(truth['rows'])} ({len(got)} rows); "
        f"verdict: {pg.classification if pg else None} {table.straggler_ranks}"
    )
    print(f"ratio ours/rg: whole tool {ours_s / rg_s:.2f}x, NCCL scan alone {only_s / rg_s:.2f}x")
    Path(needles).unlink()
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())

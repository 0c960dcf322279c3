"""Benchmark: ``grep_all_ranks`` against ``rg -n -j2`` on a generated corpus (not a test; run by hand).

    python bench/bench_grep.py [--bytes 2200000000] [--nodes 256] [--out bench/out/corpus]

Writes (once) a data_stall job of ``--nodes`` x 8 ranks, one file per node, about ``--bytes`` in total, with the
fixture generator; then times ``grep_all_ranks`` (the whole tool: one scan pass with the inventory markers, templates,
outliers) and ``rg -n -j2`` with the same patterns as one alternation, output piped to ``wc`` (ripgrep goes quiet
when its output is /dev/null); checks that every pattern's per-file counts equal ``rg -c`` for that pattern alone;
prints both wall times, the ratio and the peak RSS of our process tree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus import corpus, peak_rss_mb  # noqa: E402  (bench/ is on sys.path when run as a script)

from debug_training_logs.analysis import grep as grep_mod  # noqa: E402
from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS  # noqa: E402
from debug_training_logs.logs import scan  # noqa: E402


def rg_counts(pattern: str, logs: Path) -> dict[str, int]:
    out = subprocess.run(["rg", "-c", "-j2", "-e", pattern, str(logs)], capture_output=True, text=True, check=False)
    counts: dict[str, int] = {}
    for line in out.stdout.splitlines():
        path, _, n = line.rpartition(":")
        counts[Path(path).relative_to(logs).as_posix()] = int(n)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=2_200_000_000)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "corpus")
    ap.add_argument("--skip-check", action="store_true", help="do not compare per-pattern counts with rg -c")
    args = ap.parse_args()
    if shutil.which("rg") is None:
        print("ripgrep not installed (apt-get install -y ripgrep)", file=sys.stderr)
        return 2
    logs = corpus(args.out, args.bytes, args.nodes)
    files = sorted(p for p in logs.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    print(f"corpus: {len(files)} files, {size / 1e9:.2f} GB in {logs}")
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

    combined = "|".join(f"(?:{g.regex})" for g in DEFAULT_PATTERNS)
    t = time.perf_counter()
    rg = subprocess.run(f"rg -n -j2 -e '{combined}' '{logs}' | wc -l", shell=True, capture_output=True, text=True)
    rg_s = time.perf_counter() - t
    print(f"rg -n -j2: {rg_s:.2f} s, {int(rg.stdout)} lines, {size / rg_s / 1e6:.0f} MB/s")

    grep_mod.PER_FILE_LIMIT = 10**9  # the check needs every file's count
    plan = scan.make_plan(scan.PatternSpec(tuple(g.regex for g in DEFAULT_PATTERNS)), scan._sample([]))
    t = time.perf_counter()
    res = grep_mod.grep_all_ranks(logs)
    ours_s = time.perf_counter() - t
    rss_mb = max(peak_rss_mb()) * 1024
    print(
        f"grep_all_ranks: {ours_s:.2f} s, {size / ours_s / 1e6:.0f} MB/s, peak RSS {rss_mb / 1024:.0f} MiB "
        f"(largest of parent and any worker), prefilter: {'yes' if plan.literals else 'no (RE2 DFA)'}"
    )
    print(f"ratio ours/rg: {ours_s / rg_s:.2f}  (goal <= 0.5)")
    print(f"summary: {res.summary[:300]}")
    if not args.skip_check:
        by = {p.name: {f.file: f.count for f in p.per_file} for p in res.patterns}
        bad = 0
        for g in DEFAULT_PATTERNS:
            want = rg_counts(g.regex, logs)
            got = by.get(g.name, {})
            if got != want:
                bad += 1
                diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
                print(f"MISMATCH {g.name}: {len(diff)} files, e.g. {list(diff.items())[:3]}")
        print("per-file counts equal rg -c for every pattern" if not bad else f"{bad} patterns differ from rg -c")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())

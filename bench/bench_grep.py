"""Benchmark: ``grep LOGS`` (``grep_all_ranks``) against one ``rg`` tier pass on the realistic job (run by hand).

    python bench/bench_grep.py [--ranks 1024] [--bytes 1000000000] [--rounds 3] [--skip-check]

The corpus is ``bench/realistic.py``'s (one file per node of 8 ranks, half of all lines per-step metrics, NCCL INFO
init blocks, data-loader debug, the data_stall incident). With the page cache warm it alternates ``rg -n -j2 -z``
with the original skill's 21-alternative tier regex (output piped to ``wc -l``: ripgrep goes quiet into /dev/null)
and ``debug-training-logs grep LOGS --json`` (a fresh process: imports, discovery, the one scan with the inventory
markers, templates, outliers, coverage), ``--rounds`` pairs, and prints the median per-pair ratio and our peak RSS.
Then it checks, in-process, that every default pattern's per-file counts equal ``rg -c`` for that pattern alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import paired, ratio_line, rg_tier_cmd  # noqa: E402
from realistic import realistic_corpus  # noqa: E402

from debug_training_logs.analysis import grep as grep_mod  # noqa: E402
from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS  # noqa: E402

CLI = str(Path(sys.executable).parent / "debug-training-logs")
GOAL = 0.5


def rg_counts(pattern: str, logs: Path) -> dict[str, int]:
    out = subprocess.run(["rg", "-c", "-j2", "-e", pattern, str(logs)], capture_output=True, text=True, check=False)
    counts: dict[str, int] = {}
    for line in out.stdout.splitlines():
        path, _, n = line.rpartition(":")
        counts[Path(path).relative_to(logs).as_posix()] = int(n)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-check", action="store_true", help="do not compare per-pattern counts with rg -c")
    args = ap.parse_args()
    if shutil.which("rg") is None:
        print("ripgrep not installed (apt-get install -y ripgrep)", file=sys.stderr)
        return 2
    logs, _ais = realistic_corpus(REPO / "bench" / "out" / f"real_{args.ranks}", args.ranks, args.bytes)
    files = sorted(p for p in logs.iterdir() if p.is_file())
    size = sum(p.stat().st_size for p in files)
    print(f"corpus: {len(files)} files, {size / 1e9:.2f} GB, {args.ranks} ranks in {logs}")
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    mine, ref, rss, _ = paired([CLI, "grep", str(logs), "--json"], rg_tier_cmd(logs), args.rounds)
    print(ratio_line("grep", mine, ref, GOAL))
    print(f"peak RSS (grep, whole process tree): {rss:.0f} MB")
    if args.skip_check:
        return 0
    grep_mod.PER_FILE_LIMIT = 10**9  # the check needs every file's count
    res = grep_mod.grep_all_ranks(logs)
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


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())

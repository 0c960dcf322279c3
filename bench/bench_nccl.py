"""Benchmark: ``nccl LOGS`` (``nccl_state_table``) against one ``rg`` tier pass on the realistic job (run by hand).

    python bench/bench_nccl.py [--ranks 1024] [--bytes 1000000000] [--rounds 3]

The corpus is ``bench/realistic.py``'s (1,024 ranks in 128 node files, half of all lines per-step metrics, NCCL
INFO init blocks, data-loader debug, the data_stall incident). With the page cache warm it alternates ``rg -n -j2
-z`` with the original skill's 21-alternative tier regex (piped to ``wc -l``) and ``debug-training-logs nccl LOGS
--json`` (a fresh process: one scan with the inventory markers, parsing, rows, classification), ``--rounds`` pairs;
prints the median per-pair ratio and our peak RSS, and checks the rows against the generator's ground truth.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import paired, ratio_line, rg_tier_cmd  # noqa: E402
from realistic import realistic_corpus  # noqa: E402

CLI = str(Path(sys.executable).parent / "debug-training-logs")
GOAL = 0.25


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if shutil.which("rg") is None:
        print("ripgrep not installed (apt-get install -y ripgrep); the product does not need it", file=sys.stderr)
        return 2
    out = REPO / "bench" / "out" / f"real_{args.ranks}"
    logs, _ais = realistic_corpus(out, args.ranks, args.bytes)
    files = sorted(p for p in logs.iterdir() if p.is_file())
    size = sum(p.stat().st_size for p in files)
    print(f"corpus: {len(files)} files, {size / 1e9:.2f} GB, {args.ranks} ranks in {logs}")
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    mine, ref, rss, _text = paired([CLI, "nccl", str(logs), "--json"], rg_tier_cmd(logs), args.rounds)
    print(ratio_line("nccl", mine, ref, GOAL))
    print(f"peak RSS (nccl, whole process tree): {rss:.0f} MB")
    # every row, in-process (the CLI's answer is held to a token budget: it lists what fits)
    from debug_training_logs.analysis.nccl_table import nccl_state_table

    t = nccl_state_table(logs, limit=100_000)
    table = {"rows": [asdict(r) for r in t.rows], "straggler_ranks": t.straggler_ranks}
    truth = json.loads((out / "worker_truth.json").read_text())
    # the generator's per-row first_to_dump is the local "First PG on this rank to signal dumping" line, which the
    # table calls signalled_dump; the table's first_to_dump is the job's first dump rank (as tests/test_nccl_table.py)
    for row in truth["rows"]:
        row["signalled_dump"] = row["first_to_dump"]
        row["first_to_dump"] = row["rank"] == t.first_dump_rank and row["signal"] == "detected"
    got = {(r["rank"], r["pg"]): r for r in table["rows"]}
    bad = [
        (row["rank"], row["pg"], f)
        for row in truth["rows"]
        for f, v in row.items()
        if got.get((row["rank"], row["pg"]), {}).get(f) != v
    ]
    print(
        f"rows equal ground truth: {not bad and len(got) == len(truth['rows'])} ({len(got)} rows); "
        f"stragglers: {table['straggler_ranks']} (truth {truth['straggler_ranks']})"
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())

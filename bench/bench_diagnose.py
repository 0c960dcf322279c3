"""Benchmark: ``analyze LOGS AIS`` (the whole diagnosis) against one ``rg`` tier pass (not a test; run by hand).

    python bench/bench_diagnose.py [--ranks 1024] [--bytes 1000000000] [--rounds 3]
    python bench/bench_diagnose.py --project        # also 2,048 and 4,096 ranks, fitted to 10,240 ranks

Writes (once, reused while the parameters match) the realistic job of ``bench/realistic.py`` (one file per node of 8
ranks; half of all lines are per-step metric lines; NCCL INFO init blocks; data-loader debug; the data_stall
incident), warms the page cache, then alternates ``rg -n -j2 -z`` with the original skill's 21-alternative tier regex
and ``debug-training-logs analyze LOGS AIS`` (a fresh process each time: imports, discovery, the one worker scan,
AIS, verdict, verification, report), ``--rounds`` pairs. Prints the median of the per-pair ratios, the peak RSS of
our process tree and whether the verdict equals the corpus truth (category data_loading_stall, culprit = the
generator's straggler ranks, verification accepted).

With ``--project``: the same at 2x and 4x the ranks (bytes scaled alike) and a least-squares line through
(ranks, our seconds) and (ranks, rg seconds) evaluated at 10,240 ranks.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from corpus import median, paired, ratio_line, rg_tier_cmd  # noqa: E402
from realistic import realistic_corpus  # noqa: E402

CLI = str(Path(sys.executable).parent / "debug-training-logs")
GOAL = 1.0


def verdict_ok(report: str, truth: dict[str, object]) -> tuple[bool, str]:
    """Whether the ``analyze`` report names the truth's straggler as a verified data-loading stall (its header)."""
    head = "\n".join(report.splitlines()[:4])
    culprits = re.search(r"culprit rank\(s\) ([\d, -]+)", head)
    category = re.search(r"\*\*Category:\*\* `(\w+)`", head)
    accepted = "**Verification:** ACCEPTED" in head
    want = ", ".join(str(r) for r in truth["straggler_ranks"])  # type: ignore[attr-defined]
    got_ranks = culprits.group(1).strip() if culprits else None
    got_cat = category.group(1) if category else None
    ok = got_cat == "data_loading_stall" and got_ranks == want and accepted
    return ok, f"{got_cat} culprit {got_ranks} accepted={accepted}"


def one(ranks: int, nbytes: int, rounds: int) -> tuple[float, float, float]:
    out = REPO / "bench" / "out" / f"real_{ranks}"
    logs, ais = realistic_corpus(out, ranks, nbytes)
    files = sorted(p for p in logs.iterdir() if p.is_file())
    size = sum(p.stat().st_size for p in files)
    truth = json.loads((out / "worker_truth.json").read_text())
    print(
        f"corpus: {len(files)} files, {size / 1e9:.2f} GB, {ranks} ranks, truth: straggler {truth['straggler_ranks']}"
    )
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    mine, ref, rss, report = paired([CLI, "analyze", str(logs), str(ais)], rg_tier_cmd(logs), rounds)
    print(ratio_line(f"analyze ({ranks} ranks)", mine, ref, GOAL))
    ok, said = verdict_ok(report, truth)
    print(f"peak RSS (analyze, whole process tree): {rss:.0f} MB (goal < 300 MB: {'MET' if rss < 300 else 'NOT met'})")
    print(f"verdict equals the corpus truth: {ok} ({said})")
    return median(mine), median(ref), rss


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--project", action="store_true", help="also 2x and 4x the ranks, fitted to 10,240 ranks")
    ap.add_argument("--project-rounds", type=int, default=1, help="pairs at 2x and 4x the ranks")
    args = ap.parse_args()
    if shutil.which("rg") is None:
        print("ripgrep not installed (apt-get install -y ripgrep); the product does not need it", file=sys.stderr)
        return 2
    points = [one(args.ranks, args.bytes, args.rounds)]
    if args.project:
        for f in (2, 4):
            points.append(one(args.ranks * f, args.bytes * f, args.project_rounds))
        xs = [float(args.ranks * f) for f in (1, 2, 4)]
        a1, b1 = fit(xs, [p[0] for p in points])
        a2, b2 = fit(xs, [p[1] for p in points])
        ours10, rg10 = a1 + b1 * 10240, a2 + b2 * 10240
        print(
            f"projection to 10,240 ranks (~{args.bytes * 10 / 1e9:.0f} GB): ours {ours10:.1f} s "
            f"({b1 * 1000:.2f} s per 1,000 ranks + {a1:.2f} s), rg {rg10:.1f} s, ratio {ours10 / rg10:.2f}x; "
            f"peak RSS at 1k/2k/4k ranks: {', '.join(f'{p[2]:.0f}' for p in points)} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
